#include "speculative/mtp_drafter.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "base/timer.h"
#include "model/forward.h"

namespace mtp::speculative {
namespace {

// llama.cpp's draft confidence (docs/model.md section 4.5): the probability of the top candidate after a
// softmax over the 10 largest logits.
float top10_confidence(std::span<const float> logits, int32_t best) {
  constexpr size_t kTop = 10;
  float top[kTop];
  size_t n = 0;
  for (float v : logits) {
    if (n < kTop) {
      top[n++] = v;
      std::push_heap(top, top + n, std::greater<float>());
    } else if (v > top[0]) {
      std::pop_heap(top, top + n, std::greater<float>());
      top[n - 1] = v;
      std::push_heap(top, top + n, std::greater<float>());
    }
  }
  const double max = logits[static_cast<size_t>(best)];
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(top[i]) - max);
  return static_cast<float>(1.0 / sum);
}

int32_t argmax(std::span<const float> v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

// `logits` with the tokens a constraint refuses at -infinity, in `out`: entry i is token ids[i] (or token i
// when ids is empty), allowed where allowed[token] != 0. Empty when no entry is allowed, so the head's choice
// and its confidence are taken among the allowed tokens only, as the verify row samples them.
std::span<const float> mask_logits(std::span<const float> logits, std::span<const int32_t> ids,
                                   std::span<const uint8_t> allowed, std::vector<float>& out) {
  out.assign(logits.begin(), logits.end());
  bool any = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t id = ids.empty() ? i : static_cast<size_t>(ids[i]);
    if (id < allowed.size() && allowed[id] != 0)
      any = true;
    else
      out[i] = -std::numeric_limits<float>::infinity();
  }
  return any ? std::span<const float>(out) : std::span<const float>();
}

}  // namespace

Expected<std::unique_ptr<MtpDrafter>> MtpDrafter::create(const Model& model, Memory& memory, ThreadPool& pool,
                                                         DraftVocab* vocab) {
  if (!model.has_mtp()) return invalid_argument("the model has no MTP block to draft with");
  if (memory.mtp_slot() < 0) return invalid_argument("the memory keeps no MTP KV (MemoryOptions::mtp)");
  return std::unique_ptr<MtpDrafter>(new MtpDrafter(model, memory, pool, vocab));
}

MtpDrafter::MtpDrafter(const Model& model, Memory& memory, ThreadPool& pool, DraftVocab* vocab)
    : model_(model),
      memory_(memory),
      pool_(pool),
      vocab_(vocab),
      seqs_(static_cast<size_t>(memory.n_seq())) {}

void MtpDrafter::begin(int32_t seq, bool track) {
  SeqState& s = seqs_.at(static_cast<size_t>(seq));
  s = SeqState{};
  s.track = track;
}

void MtpDrafter::resume(int32_t seq, int64_t pos, std::span<const float> hidden) {
  SeqState& s = seqs_.at(static_cast<size_t>(seq));
  if (!s.track) return;
  MTP_CHECK(static_cast<int64_t>(hidden.size()) == model_.config().n_embd, "resume needs one hidden row");
  s.tokens.clear();
  s.h_prev.clear();
  s.last_h.assign(hidden.begin(), hidden.end());
  s.next_pos = pos;
  s.seed_pos = -1;
}

Expected<int64_t> MtpDrafter::settle(int32_t seq, int64_t max_rows) {
  const SeqState& s = seqs_.at(static_cast<size_t>(seq));
  if (!s.track) return int64_t{0};
  // Pending rows start at pos_begin; every row before it is in the MTP KV.
  if (static_cast<int64_t>(s.tokens.size()) > max_rows) return s.pos_begin;
  MTP_RETURN_IF_ERROR(sync(seq));
  return s.next_pos;
}

Status MtpDrafter::observe(int32_t seq, int64_t pos0, std::span<const int32_t> tokens,
                           std::span<const float> hidden) {
  SeqState& s = seqs_.at(static_cast<size_t>(seq));
  if (!s.track || tokens.empty()) return Status::Ok();
  const int64_t ne = model_.config().n_embd;
  MTP_CHECK(pos0 == s.next_pos, "observe() rows must continue the sequence");
  MTP_CHECK(static_cast<int64_t>(hidden.size()) == static_cast<int64_t>(tokens.size()) * ne);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t pos = pos0 + static_cast<int64_t>(i);
    const float* h_prev =
        i == 0 ? (s.last_h.empty() ? nullptr : s.last_h.data()) : hidden.data() + (i - 1) * ne;
    // The pair (x_0, nothing) has no row (section 4.3); the last draft's seed row is already in the KV.
    if (h_prev == nullptr) continue;
    if (pos == s.seed_pos && tokens[i] == s.seed_token && s.tokens.empty()) continue;
    if (s.tokens.empty()) s.pos_begin = pos;
    s.tokens.push_back(tokens[i]);
    s.h_prev.insert(s.h_prev.end(), h_prev, h_prev + ne);
  }
  s.seed_pos = -1;
  s.last_h.assign(hidden.end() - ne, hidden.end());
  s.next_pos = pos0 + static_cast<int64_t>(tokens.size());
  if (static_cast<int64_t>(s.tokens.size()) >= kMaxPending) return sync(seq);
  return Status::Ok();
}

void MtpDrafter::add_catch_up(int32_t seq) {
  SeqState& s = seqs_[static_cast<size_t>(seq)];
  const int64_t ne = model_.config().n_embd;
  for (size_t i = 0; i < s.tokens.size(); ++i)
    batch_.add_mtp(seq, s.pos_begin + static_cast<int64_t>(i), s.tokens[i],
                   {s.h_prev.data() + static_cast<int64_t>(i) * ne, static_cast<size_t>(ne)}, false);
  s.tokens.clear();
  s.h_prev.clear();
}

Status MtpDrafter::sync(int32_t seq) {
  if (seqs_.at(static_cast<size_t>(seq)).tokens.empty()) return Status::Ok();
  batch_.clear();
  add_catch_up(seq);
  return forward_mtp(model_, batch_, memory_, out_, pool_);
}

int64_t MtpDrafter::pending_rows(int32_t seq) const {
  return static_cast<int64_t>(seqs_.at(static_cast<size_t>(seq)).tokens.size());
}

Status MtpDrafter::draft(std::span<DraftTask> tasks) {
  passes_.clear();
  const int64_t ne = model_.config().n_embd;
  // Per task: the batch row of its current draft step (-1 once it stopped), and its next h_prev.
  std::vector<int64_t> row(tasks.size(), -1);
  std::vector<float> h_next(tasks.size() * static_cast<size_t>(ne));
  batch_.clear();
  for (size_t t = 0; t < tasks.size(); ++t) {
    DraftTask& task = tasks[t];
    task.draft.clear();
    SeqState& s = seqs_.at(static_cast<size_t>(task.seq));
    MTP_CHECK(s.track && task.pos == s.next_pos && !s.last_h.empty(),
              "draft() needs the sequence's rows up to the last token observed");
    if (task.params.n_max <= 0) continue;
    add_catch_up(task.seq);
    row[t] = batch_.size();
    batch_.add_mtp(task.seq, task.pos, task.last_token, s.last_h, !uses_subset(task));
    s.seed_pos = task.pos;
    s.seed_token = task.last_token;
  }
  for (int32_t step = 0; batch_.size() > 0; ++step) {
    Timer pass;  // the forward pass and its logits: what one more draft position costs
    const int64_t pass_rows = batch_.size();
    MTP_RETURN_IF_ERROR(forward_mtp(model_, batch_, memory_, out_, pool_));
    if (vocab_ != nullptr) {           // logits over the subset, for the rows that draft with it
      std::vector<float>& h = sub_h_;  // reused: no allocation per pass after warm-up
      h.clear();
      for (size_t t = 0; t < tasks.size(); ++t)
        if (row[t] >= 0 && uses_subset(tasks[t])) {
          const auto hr = out_.hidden_of(row[t]);
          h.insert(h.end(), hr.begin(), hr.end());
        }
      sub_logits_.resize(h.size() / static_cast<size_t>(ne) * static_cast<size_t>(vocab_->size()));
      vocab_->logits(h.data(), static_cast<int64_t>(h.size()) / ne, sub_logits_.data(), pool_);
    }
    int64_t sub_row = 0;
    for (size_t t = 0; t < tasks.size(); ++t) {
      if (row[t] < 0) continue;
      DraftTask& task = tasks[t];
      std::span<const float> logits;
      const bool subset = uses_subset(task);
      if (subset) {
        logits = {sub_logits_.data() + sub_row++ * vocab_->size(), static_cast<size_t>(vocab_->size())};
      } else {
        logits = out_.logits_of(row[t]);
      }
      if (task.constraint != nullptr && !task.constraint->allows_all(task.draft)) {
        logits = mask_logits(logits, subset ? vocab_->ids() : std::span<const int32_t>(),
                             task.constraint->allowed(task.draft), masked_);
        if (logits.empty()) {  // nothing the head can propose may follow
          row[t] = -1;
          continue;
        }
      }
      const int32_t best =
          task.chooser == nullptr
              ? argmax(logits)
              : task.chooser->choose(logits, subset ? vocab_->ids() : std::span<const int32_t>(),
                                     task.draft.size());
      const int32_t id = subset ? vocab_->ids()[static_cast<size_t>(best)] : best;
      if (task.params.p_min > 0 && top10_confidence(logits, best) < task.params.p_min) {
        row[t] = -1;
        continue;
      }
      task.draft.push_back(id);
      const auto h = out_.hidden_of(row[t]);
      std::copy(h.begin(), h.end(), h_next.begin() + static_cast<int64_t>(t) * ne);
      if (static_cast<int32_t>(task.draft.size()) >= task.params.n_max) row[t] = -1;
    }
    passes_.push_back({pass_rows, pass.seconds()});
    batch_.clear();
    for (size_t t = 0; t < tasks.size(); ++t) {
      if (row[t] < 0) continue;
      DraftTask& task = tasks[t];
      row[t] = batch_.size();
      batch_.add_mtp(task.seq, task.pos + static_cast<int64_t>(task.draft.size()), task.draft.back(),
                     {h_next.data() + static_cast<int64_t>(t) * ne, static_cast<size_t>(ne)},
                     !uses_subset(task));
    }
  }
  for (DraftTask& task : tasks)
    if (static_cast<int32_t>(task.draft.size()) < task.params.n_min) task.draft.clear();
  return Status::Ok();
}

}  // namespace mtp::speculative
