// The vocabulary-subset draft head: one MTP draft step (the MTP block, then the head
// over N ids, then the argmax) against one trunk decode step, for N in {8K, 16K, 32K, 64K, full}, and greedy
// acceptance at draft position 1 with each subset. A program printing numbers, not a test; the machine may be
// shared, so compare ratios within one run (every time is the median of --reps interleaved runs).
//
//   draft_vocab_bench MODEL.gguf [--sizes 8192,16384,32768,65536,0] [--ids FILE] [--threads N] [--reps R]
//                     [--tokens T] [--prompt TEXT] [--target-layers 40]
//
// Sizes: 0 means the full vocabulary. --ids takes the subset's ranking from a `mtp draft-vocab build` file
// (its first N ids) instead of the first N ids; control tokens (speculative::always_draft_ids) are always
// added.
//
// The trunk step is measured at the model's own depth. Synthetic 35B-A3B-width files with all 40 layers are
// ~40 GB, so the table also gives an estimate for --target-layers: the measured full-head time plus the
// measured per-layer part scaled by target/layers (exact in expectation when the layer count is a multiple of
// full_attention_interval, as the default --layers 4 is, so the GDN/attention mix is the real model's).
//
// Acceptance: T tokens are decoded greedily by the trunk from the prompt; one MTP pass over all of them gives
// h_mtp for each (token x_p, trunk hidden H[p-1]); the draft for p+1 is the argmax of the subset logits, and
// it is accepted when it equals the trunk's greedy token x_{p+1}. Use a `mtp synth --structured` model: its
// MTP head follows the same token chain as the trunk.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../bench_cli.h"
#include "../bench_util.h"
#include "base/timer.h"
#include "engine/engine.h"
#include "model/forward.h"
#include "model/model.h"
#include "speculative/draft_vocab.h"
#include "tokenizer/tokenizer.h"

using namespace mtp;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int die(const Status& s) {
  std::fprintf(stderr, "draft_vocab_bench: %s\n", s.message().c_str());
  return 1;
}

struct Row {
  int64_t want = 0;  // requested N (0 = full)
  std::optional<speculative::DraftVocab> vocab;
  std::vector<double> head_ms;
  std::vector<float> logits;
  int64_t accepted = 0;
};

// Batch-1 generation through the engine: plain decoding (spec kNone) or MTP drafting with draft_vocab ids
// (0: the full head). Greedy, `gen` tokens past the prompt.
struct EngineRun {
  double tok_s = 0;
  double acc1 = 0;  // acceptance rate at draft position 1
  double mean_acc_len = 0;
};

Expected<EngineRun> engine_run(const Model& model, ThreadPool& pool, const std::vector<int32_t>& prompt,
                               int64_t gen, bool mtp, int64_t draft_vocab, const std::string& ids_file,
                               int32_t draft_max) {
  EngineOptions eo;
  eo.n_ctx = static_cast<int64_t>(prompt.size()) + gen + 64;
  eo.spec = mtp ? SpecType::kMtp : SpecType::kNone;
  eo.draft.n_max = draft_max;
  eo.draft_vocab = draft_vocab;
  eo.draft_vocab_file = draft_vocab > 0 ? ids_file : std::string();
  eo.end_tokens = default_end_tokens(model.vocab());
  MTP_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(model, eo, pool));
  RequestOptions ro;
  ro.max_tokens = gen;
  ro.ignore_eos = true;
  MTP_ASSIGN_OR_RETURN(uint64_t id, engine->submit(prompt, ro));
  (void)id;
  std::vector<SlotEvent> events;
  EngineRun r;
  while (!engine->idle()) {
    events.clear();
    MTP_RETURN_IF_ERROR(engine->step(events));
    for (const SlotEvent& e : events) {
      if (e.finish == FinishReason::kNone) continue;
      if (e.finish != FinishReason::kLength)
        return Status(StatusCode::kInternal, "generation ended early: " + e.error);
      // gen_ms runs from the first token to the last.
      r.tok_s = e.timings.gen_ms > 0
                    ? static_cast<double>(e.timings.n_generated - 1) / (e.timings.gen_ms / 1e3)
                    : 0;
      const std::vector<double> acc = e.timings.spec.acc_rate_per_pos();
      r.acc1 = acc.empty() ? 0 : acc[0];
      r.mean_acc_len = e.timings.spec.mean_acc_len();
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  std::vector<int64_t> sizes{8192, 16384, 32768, 65536, 0};
  std::string ids_file, prompt = "The quick brown fox";
  int threads = 0, reps = 15;
  int64_t n_tokens = 48, target_layers = 40, gen = 64;
  int32_t draft_max = 3;
  CLI::App app{"The vocabulary-subset draft head: cost per size and acceptance against the full head",
               "draft_vocab_bench"};
  app.add_option("model", path, "GGUF model with an MTP block")->required();
  app.add_option("--sizes", sizes, "Subset sizes, comma-separated (0: the full head)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  app.add_option("--ids", ids_file, "Ranked ids (mtp draft-vocab build); default: the first N ids");
  app.add_option("--threads", threads, "Threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--reps", reps, "Repetitions per size")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--tokens", n_tokens, "Prompt tokens")->check(CLI::Range(4, 1 << 20))->capture_default_str();
  app.add_option("--prompt", prompt, "Prompt text")->capture_default_str();
  app.add_option("--target-layers", target_layers, "Trunk layers to scale the draft cost against")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--gen", gen, "Tokens generated to measure acceptance")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--draft-max", draft_max, "Draft length")->check(CLI::Range(1, 16))->capture_default_str();
  bench::parse_or_exit(app, argc, argv);
  Timer load_timer;
  auto model = Model::load(path);
  if (!model.ok()) return die(model.status());
  if (!model->has_mtp()) return die(invalid_argument(path, ": the model has no MTP block"));
  const Qwen35MoeConfig& c = model->config();
  const TensorView& head = model->weights().mtp->head;
  ThreadPool pool(threads);
  const std::vector<int32_t> always = speculative::always_draft_ids(model->vocab());
  std::vector<int32_t> ranked;
  if (!ids_file.empty()) {
    auto r = speculative::read_draft_vocab_file(ids_file, c.n_vocab);
    if (!r.ok()) return die(r.status());
    ranked = std::move(r).value();
  }

  std::vector<Row> rows;
  Timer gather_timer;
  for (int64_t n : sizes) {
    const int64_t size = n <= 0 ? c.n_vocab : n;
    auto v = ids_file.empty() || size >= c.n_vocab
                 ? speculative::DraftVocab::first_n(*model, size, always)
                 : speculative::DraftVocab::create(*model, ranked, size, always);
    if (!v.ok()) return die(v.status());
    Row r;
    r.want = n;
    r.vocab.emplace(std::move(v).value());
    rows.push_back(std::move(r));
  }
  const double gather_s = gather_timer.seconds();

  // Greedy trunk decode: the tokens for acceptance and the trunk step time.
  MemoryOptions mo;
  mo.n_ctx = n_tokens + reps + 257;  // the timed decode steps below extend the context
  mo.n_seq = 1;
  auto mem = Memory::create(c, mo);
  if (!mem.ok()) return die(mem.status());
  const int32_t seq = *mem->seq_create();
  std::vector<int32_t> tokens;
  if (auto tok = Tokenizer::create(model->vocab()); tok.ok()) tokens = tok->encode(prompt);
  if (tokens.empty()) tokens = {1};
  const int64_t n_prompt = static_cast<int64_t>(tokens.size());
  Batch b;
  Outputs out;
  std::vector<float> hidden;  // post-norm trunk hidden of every position
  for (int64_t p = 0; p < n_prompt; ++p) b.add(seq, p, tokens[p], p + 1 == n_prompt);
  if (Status s = forward(*model, b, *mem, out, pool); !s.ok()) return die(s);
  hidden = out.hidden;
  auto argmax = [](std::span<const float> l) {
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  };
  while (static_cast<int64_t>(tokens.size()) < n_prompt + n_tokens) {
    tokens.push_back(argmax(out.logits_of(out.logits_index.size() - 1)));
    b.clear();
    b.add(seq, static_cast<int64_t>(tokens.size()) - 1, tokens.back(), true);
    if (Status s = forward(*model, b, *mem, out, pool); !s.ok()) return die(s);
    hidden.insert(hidden.end(), out.hidden.begin(), out.hidden.end());
  }
  const int64_t n_all = static_cast<int64_t>(tokens.size());

  // One MTP pass over every position (catch-up style: row p is token x_p with H[p-1]).
  b.clear();
  const int64_t ne = c.n_embd;
  for (int64_t p = 1; p < n_all; ++p)
    b.add_mtp(seq, p, tokens[p], {hidden.data() + (p - 1) * ne, static_cast<size_t>(ne)}, false);
  Outputs mtp_out;
  if (Status s = forward_mtp(*model, b, *mem, mtp_out, pool); !s.ok()) return die(s);
  // Acceptance at position 1 for the drafts of x_{p+1}, p = n_prompt - 1 .. n_all - 2 (the generated part).
  const int64_t first = std::max<int64_t>(1, n_prompt - 1), n_judged = n_all - 1 - first;
  for (Row& r : rows) {
    const int64_t n = r.vocab->size();
    r.logits.resize(static_cast<size_t>(n * n_judged));
    r.vocab->logits(mtp_out.hidden.data() + (first - 1) * ne, n_judged, r.logits.data(), pool);
    for (int64_t j = 0; j < n_judged; ++j) {
      const int32_t draft = r.vocab->argmax({r.logits.data() + j * n, static_cast<size_t>(n)});
      r.accepted += draft == tokens[static_cast<size_t>(first + j + 1)];
    }
  }

  // Draft step timing: the MTP block for one row at the next position (no logits, then with the full head),
  // then each subset head on its h_mtp, interleaved over reps.
  std::vector<double> block_ms, full_mtp_ms, trunk_ms;
  std::vector<float> h_last(hidden.end() - ne, hidden.end());
  for (int rep = 0; rep <= reps; ++rep) {
    // A trunk decode step at the next position (the context grows by one row per rep).
    b.clear();
    b.add(seq, mem->seq_pos(seq), tokens.back(), true);
    Timer tt;
    if (Status s = forward(*model, b, *mem, out, pool); !s.ok()) return die(s);
    if (rep > 0) trunk_ms.push_back(tt.millis());
    for (bool with_logits : {false, true}) {
      b.clear();
      b.add_mtp(seq, n_all, tokens.back(), h_last, with_logits);
      Timer t;
      if (Status s = forward_mtp(*model, b, *mem, mtp_out, pool); !s.ok()) return die(s);
      if (rep > 0) (with_logits ? full_mtp_ms : block_ms).push_back(t.millis());
    }
    for (Row& r : rows) {
      Timer t;
      r.vocab->logits(mtp_out.hidden.data(), 1, r.logits.data(), pool);
      volatile int32_t d = r.vocab->argmax({r.logits.data(), static_cast<size_t>(r.vocab->size())});
      (void)d;
      if (rep > 0) r.head_ms.push_back(t.millis());
    }
  }

  const double trunk = median(trunk_ms), block = median(block_ms);
  double full_head = 0;
  for (const Row& r : rows)
    if (r.vocab->full()) full_head = median(r.head_ms);
  const double per_layer = full_head > 0 ? (trunk - full_head) / static_cast<double>(c.n_layer) : 0;
  const double trunk_target = full_head + per_layer * static_cast<double>(target_layers);

  std::printf("model %s: n_embd %lld, %lld trunk layers, n_vocab %lld, MTP head %s; loaded in %.1f s\n",
              path.c_str(), (long long)c.n_embd, (long long)c.n_layer, (long long)c.n_vocab,
              std::string(type_name(head.type)).c_str(), load_timer.seconds());
  std::printf("%d threads; medians of %d runs of every step, interleaved; subsets %s, gathered in %.2f s\n",
              pool.size(), reps, ids_file.empty() ? "first N" : ids_file.c_str(), gather_s);
  std::printf("trunk decode step, %lld layers (measured)      %8.2f ms\n", (long long)c.n_layer, trunk);
  if (full_head > 0) {
    std::printf(
        "trunk decode step, %lld layers (estimated)     %8.2f ms  (full head %.2f + %lld x %.2f per layer)\n",
        (long long)target_layers, trunk_target, full_head, (long long)target_layers, per_layer);
  }
  std::printf("MTP block, no logits                          %8.2f ms\n", block);
  std::printf("MTP block + full head (forward_mtp)           %8.2f ms\n", median(full_mtp_ms));
  std::printf("acceptance at draft position 1 judged over %lld greedy tokens\n\n", (long long)n_judged);
  std::printf("| N | ids | head MB | head ms | draft step ms | / trunk (%lld L) |", (long long)c.n_layer);
  if (full_head > 0) std::printf(" / trunk (%lld L, est.) |", (long long)target_layers);
  std::printf(" accept@1 |\n|---|---|---|---|---|---|%s---|\n", full_head > 0 ? "---|" : "");
  for (const Row& r : rows) {
    const double h = median(r.head_ms), step = block + h;
    char n[32];
    if (r.want <= 0 || r.vocab->full())
      std::snprintf(n, sizeof(n), "full");
    else
      std::snprintf(n, sizeof(n), "%lldK", (long long)(r.want / 1024));
    if (r.want > 0 && r.want % 1024 != 0) std::snprintf(n, sizeof(n), "%lld", (long long)r.want);
    std::printf("| %s | %lld | %.1f | %.2f | %.2f | %.3f |", n, (long long)r.vocab->size(),
                static_cast<double>(r.vocab->bytes()) / 1e6, h, step, step / trunk);
    if (full_head > 0) std::printf(" %.3f |", step / trunk_target);
    std::printf(" %.3f |\n",
                n_judged > 0 ? static_cast<double>(r.accepted) / static_cast<double>(n_judged) : 0.0);
  }
  if (gen == 0) return 0;

  // Batch-1 generation: plain decoding, then MTP with each subset.
  const std::vector<int32_t> prompt_ids(tokens.begin(), tokens.begin() + n_prompt);
  auto plain = engine_run(*model, pool, prompt_ids, gen, false, 0, ids_file, draft_max);
  if (!plain.ok()) return die(plain.status());
  std::printf("\nbatch-1 generation through the engine: %lld greedy tokens, --draft-max %d\n\n",
              (long long)gen, draft_max);
  std::printf("| decoding | tok/s | x plain | accept@1 | mean acc len |\n|---|---|---|---|---|\n");
  std::printf("| plain | %.2f | 1.00 | | |\n", plain->tok_s);
  for (const Row& r : rows) {
    const bool full = r.want <= 0 || r.vocab->full();
    auto run = engine_run(*model, pool, prompt_ids, gen, true, full ? 0 : r.want, ids_file, draft_max);
    if (!run.ok()) return die(run.status());
    std::printf("| MTP, %s | %.2f | %.2f | %.3f | %.2f |\n",
                full ? "full head" : (std::to_string(r.vocab->size()) + " ids").c_str(), run->tok_s,
                run->tok_s / plain->tok_s, run->acc1, run->mean_acc_len);
  }
  return 0;
}
