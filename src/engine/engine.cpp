#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/check.h"
#include "base/log.h"
#include "base/timer.h"
#include "engine_impl.h"
#include "model/batch.h"
#include "model/forward.h"
#include "speculative/draft_vocab.h"
#include "speculative/mtp_drafter.h"

namespace mtp {

GeneratedToken make_token(int32_t id, std::span<const float> logits, bool want_logprobs, int32_t n_probs) {
  GeneratedToken t;
  t.id = id;
  if (!want_logprobs && n_probs <= 0) return t;
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
  const double lse = max + std::log(sum);
  t.logprob = static_cast<float>(logits[static_cast<size_t>(id)] - lse);
  if (n_probs > 0) {
    const size_t n = std::min(static_cast<size_t>(n_probs), logits.size());
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<int64_t>(n), ids.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
                               (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
                      });
    for (size_t i = 0; i < n; ++i)
      t.top.push_back({ids[i], static_cast<float>(logits[static_cast<size_t>(ids[i])] - lse)});
  }
  return t;
}

void mark_sources(std::vector<GeneratedToken>& round, int64_t accepted, int64_t n_draft) {
  // `round` holds the round's emitted tokens: its first `accepted` are the kept drafts, then the trunk's
  // token unless the request ended on an end token (which is not emitted).
  MTP_CHECK(accepted >= 0 && static_cast<size_t>(accepted) <= round.size());
  for (int64_t i = 0; i < accepted; ++i) round[static_cast<size_t>(i)].from_draft = true;
  if (!round.empty()) round.back().round_drafted = static_cast<int32_t>(n_draft);
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

std::vector<int32_t> default_end_tokens(const Vocab& vocab) {
  std::vector<int32_t> out;
  if (vocab.eos_id) out.push_back(*vocab.eos_id);
  static const char* const kEndOfTurn[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>",
                                           "<end_of_turn>"};
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    const bool control = i < vocab.token_types.size() &&
                         (vocab.token_types[i] == static_cast<int32_t>(TokenType::kControl) ||
                          vocab.token_types[i] == static_cast<int32_t>(TokenType::kUserDefined));
    if (!control) continue;
    for (const char* e : kEndOfTurn)
      if (vocab.tokens[i] == e) out.push_back(static_cast<int32_t>(i));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

// The draft heads of EngineOptions::draft_head: the subset's size (0: none) into `o.draft_vocab`, and the
// policy's head and whether it chooses into `o.policy`.
Status resolve_draft_heads(EngineOptions& o, int64_t n_vocab) {
  const bool auto_policy = o.policy.kind == speculative::PolicyKind::kAuto;
  if (o.draft_head == speculative::DraftHead::kFull && o.draft_vocab > 0)
    return invalid_argument("--draft-vocab needs the subset head: it contradicts --draft-head full");
  if (o.spec != SpecType::kMtp || o.make_drafter) {  // no MTP drafter, or one without heads of its own
    o.policy.choose_head = false;
    o.policy.head = speculative::DraftHead::kFull;
    return Status::Ok();
  }
  const bool auto_subset = !o.draft_head && auto_policy && n_vocab >= kAutoSubsetMinVocab;
  if (o.draft_vocab == 0 && (o.draft_head == speculative::DraftHead::kSubset || auto_subset))
    o.draft_vocab = std::min(kDefaultDraftVocab, n_vocab);
  o.policy.choose_head = !o.draft_head && auto_policy && o.draft_vocab > 0;
  o.policy.head =
      o.draft_head.value_or(o.draft_vocab > 0 && !o.policy.choose_head ? speculative::DraftHead::kSubset
                                                                       : speculative::DraftHead::kFull);
  return Status::Ok();
}

}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Expected<std::unique_ptr<Engine>> Engine::create(const Model& model, const EngineOptions& given,
                                                 ThreadPool& pool) {
  const Qwen35MoeConfig& c = model.config();
  EngineOptions options = given;
  MTP_RETURN_IF_ERROR(resolve_draft_heads(options, c.n_vocab));
  if (options.n_slots <= 0) return invalid_argument("-np must be > 0, got ", options.n_slots);
  if (options.n_ctx <= 0) return invalid_argument("-c must be > 0, got ", options.n_ctx);
  if (options.n_batch <= 0) return invalid_argument("-b must be > 0, got ", options.n_batch);
  if (options.kv_block_size <= 0)
    return invalid_argument("the KV block size must be > 0, got ", options.kv_block_size);
  if (options.cache.checkpoint_every < 0)
    return invalid_argument("the checkpoint interval must be >= 0, got ", options.cache.checkpoint_every);
  if (options.n_sample < 0 || options.n_sample > c.n_vocab)
    return invalid_argument("n_sample ", options.n_sample, " is outside [0, ", c.n_vocab, "]");
  const speculative::DraftParams& d = options.draft;
  const bool spec = options.spec == SpecType::kMtp;
  if (spec) {
    MTP_RETURN_IF_ERROR(speculative::check_draft_params(d));
    if (!options.make_drafter && !model.has_mtp())
      return invalid_argument("--spec mtp needs an MTP block: the model has none (give one with --head)");
  }
  MemoryOptions mo;
  mo.n_ctx = options.n_ctx;
  mo.n_seq = options.n_slots;
  mo.n_snapshots = spec ? std::max(1, d.n_max) : 0;  // plain decoding never rolls back
  mo.mtp = spec && model.has_mtp();
  mo.max_bytes = options.max_memory_bytes;
  mo.cache_type_k = options.cache_type_k;
  mo.cache_type_v = options.cache_type_v;
  mo.block_size = options.kv_block_size;
  mo.extra_kv_bytes = options.cache.ram_bytes;
  MTP_ASSIGN_OR_RETURN(Memory memory, Memory::create(c, mo));

  auto impl = std::make_unique<Impl>(model, options, pool, std::move(memory));
  if (options.cache.ram_bytes > 0) impl->cache = std::make_unique<PrefixCache>(impl->memory, options.cache);
  impl->n_sample = options.n_sample > 0 ? options.n_sample : c.n_vocab;
  impl->slots.resize(static_cast<size_t>(options.n_slots));
  if (options.prepare_grammar && !model.vocab().tokens.empty()) impl->prepare_grammar_vocab();
  if (spec) {
    impl->max_draft = d.n_max;
    if (options.make_drafter) {
      MTP_ASSIGN_OR_RETURN(impl->drafter, options.make_drafter(model, impl->memory, pool));
    } else {
      speculative::DraftVocab* vocab = nullptr;
      if (options.draft_vocab > 0) {
        // Control tokens chat needs (end of turn, tool-call and reasoning markers) are always draftable.
        std::vector<int32_t> always = speculative::always_draft_ids(model.vocab());
        always.insert(always.end(), options.end_tokens.begin(), options.end_tokens.end());
        Expected<speculative::DraftVocab> dv = Status(StatusCode::kInternal, "unset");
        if (options.draft_vocab_file.empty()) {
          dv = speculative::DraftVocab::first_n(model, options.draft_vocab, always);
        } else {
          MTP_ASSIGN_OR_RETURN(std::vector<int32_t> ranked,
                               speculative::read_draft_vocab_file(options.draft_vocab_file, c.n_vocab));
          dv = speculative::DraftVocab::create(model, ranked, options.draft_vocab, always);
        }
        if (!dv.ok()) return dv.status();
        impl->draft_vocab.emplace(std::move(dv).value());
        vocab = &*impl->draft_vocab;
      }
      MTP_ASSIGN_OR_RETURN(std::unique_ptr<speculative::MtpDrafter> drafter,
                           speculative::MtpDrafter::create(model, impl->memory, pool, vocab));
      impl->drafter = std::move(drafter);
    }
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Expected<uint64_t> Engine::submit(std::vector<int32_t> prompt, const RequestOptions& options) {
  Impl& m = *impl_;
  if (prompt.empty()) return invalid_argument("the prompt has no tokens");
  const int64_t n_vocab = m.model.config().n_vocab;
  for (int32_t id : prompt)
    if (id < 0 || id >= n_vocab)
      return invalid_argument("prompt token id ", id, " is outside [0, ", n_vocab, ")");
  MTP_RETURN_IF_ERROR(check_sampler_options(options.sampling, n_vocab));
  if (options.n_probs < 0 || options.n_probs > 20) return invalid_argument("top logprobs must be in [0, 20]");
  // The prompt plus at least one generated token must fit the context.
  if (static_cast<int64_t>(prompt.size()) >= m.opt.n_ctx) {
    return Status(StatusCode::kResourceExhausted,
                  str_cat("the prompt has ", prompt.size(), " tokens; the context holds ", m.opt.n_ctx));
  }
  speculative::DraftParams draft{0, 0, 0.0f};
  if (m.drafter) {
    draft = options.speculative.value_or(m.opt.draft);
    MTP_RETURN_IF_ERROR(speculative::check_draft_params(draft));
    draft.n_max = std::min(draft.n_max, m.max_draft);
  }
  auto free_slot =
      std::find_if(m.slots.begin(), m.slots.end(), [](const Slot& s) { return s.state == SlotState::kFree; });
  if (free_slot == m.slots.end())
    return Status(StatusCode::kResourceExhausted, str_cat("all ", m.slots.size(), " slots are busy"));
  MTP_ASSIGN_OR_RETURN(int32_t seq, m.memory.seq_create());
  Slot& s = *free_slot;
  s = Slot{};
  s.state = SlotState::kPrompt;
  s.id = m.next_id++;
  s.seq = seq;
  s.prompt = std::move(prompt);
  s.opt = options;
  s.spec.params = draft;
  s.sampler = Sampler(options.sampling);
  if (Status g = m.start_grammar(s); !g.ok()) {
    m.memory.seq_free(seq);
    s = Slot{};
    return g;
  }
  s.spec.sampled.chooser = m.make_draft_chooser(s);
  // What recent requests saw, until this one has rounds of its own.
  for (int h = 0; h < speculative::kDraftHeads; ++h)
    s.spec.acceptance[static_cast<size_t>(h)] = m.policy.acceptance(static_cast<speculative::DraftHead>(h));
  s.timings.n_prompt = static_cast<int64_t>(s.prompt.size());
  if (m.drafter) m.drafter->begin(seq, draft.n_max > 0);
  s.prefix.enabled = m.cache != nullptr && options.cache_prompt;
  if (s.prefix.enabled) {
    m.restore_prefix(s);
    m.plan_checkpoints(s);
  }
  return s.id;
}

void Engine::cancel(uint64_t request_id) {
  Impl& m = *impl_;
  for (Slot& s : m.slots)
    if (s.state != SlotState::kFree && s.id == request_id)
      m.cancelled.push_back(m.finish(s, FinishReason::kCancelled));
}

Status Engine::step(std::vector<SlotEvent>& events, StepInfo* info) {
  StepInfo local;
  StepInfo& inf = info != nullptr ? *info : local;
  inf = StepInfo{};
  Impl& m = *impl_;
  for (SlotEvent& e : m.cancelled) events.push_back(std::move(e));
  m.cancelled.clear();
  if (idle()) return Status::Ok();
  Timer timer;
  Status s = m.run_step(events, inf);
  inf.seconds = timer.seconds();
  ++m.totals.steps;
  return s;
}

bool Engine::idle() const {
  for (const Slot& s : impl_->slots)
    if (s.state != SlotState::kFree) return false;
  return impl_->cancelled.empty();
}
int32_t Engine::n_slots() const {
  return static_cast<int32_t>(impl_->slots.size());
}
int32_t Engine::n_busy() const {
  return static_cast<int32_t>(std::count_if(impl_->slots.begin(), impl_->slots.end(),
                                            [](const Slot& s) { return s.state != SlotState::kFree; }));
}
int32_t Engine::slot_of(uint64_t request_id) const {
  for (size_t k = 0; k < impl_->slots.size(); ++k)
    if (impl_->slots[k].state != SlotState::kFree && impl_->slots[k].id == request_id)
      return static_cast<int32_t>(k);
  return -1;
}
const EngineOptions& Engine::options() const {
  return impl_->opt;
}
const EngineTotals& Engine::totals() const {
  return impl_->totals;
}
const Model& Engine::model() const {
  return impl_->model;
}
const speculative::DraftPolicy& Engine::policy() const {
  return impl_->policy;
}
int64_t Engine::draft_vocab_size() const {
  return impl_->draft_vocab ? impl_->opt.draft_vocab : 0;
}
int32_t Engine::max_draft() const {
  return impl_->max_draft;
}
const PrefixCache* Engine::prefix_cache() const {
  return impl_->cache.get();
}
const Memory& Engine::memory() const {
  return impl_->memory;
}
speculative::Drafter* Engine::drafter() {
  return impl_->drafter.get();
}
int32_t Engine::seq_of(uint64_t request_id) const {
  for (const Slot& s : impl_->slots)
    if (s.state != SlotState::kFree && s.id == request_id) return s.seq;
  return -1;
}

int32_t Engine::grammar_vocab_builds() const {
  return impl_->grammar_vocab_builds;
}

}  // namespace mtp
