// MTP speculative decoding at batch 1: tokens/s with drafting vs plain decoding in one run, the
// acceptance per draft position, and the costs that decide when drafting pays.
//
//   spec_bench MODEL [--threads N] [--tokens N] [--prompts N] [--draft-max 1,2,3] [--draft-vocab 0,32768]
//
// Part 1 (costs, from the engine's own passes on this model): one trunk decode step, a verify batch of k+1
// rows relative to it, one draft step split into the MTP block and the LM head (full, or over a subset of
// --draft-vocab ids), and the speedup those costs imply for acceptance rates 0.5-0.95:
//   S(k) = E[T](k) * t_verify(1) / (k * t_draft + t_verify(k+1)),  E[T](k) = (1 - a^(k+1)) / (1 - a).
// Part 2 (measured): greedy generation of --tokens tokens from each of --prompts prompts, plain and with
// each draft setting; the drafted outputs must equal the plain ones (printed), tokens/s and ratios.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "../bench_cli.h"
#include "../bench_util.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "engine/engine.h"
#include "model/forward.h"
#include "speculative/draft_vocab.h"

using namespace mtp;

namespace {

// Median seconds of `reps` calls of fn (after one warm-up call).
template <typename F>
double median_seconds(int reps, F&& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    Timer timer;
    fn();
    t.push_back(timer.seconds());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Costs {
  std::vector<double> verify;  // verify[r] = seconds of a trunk batch of r rows (index 0 unused)
  double mtp_block = 0;        // MTP block without logits, one row
  double draft_full = 0;       // MTP block + full LM head, one row
};

Costs measure_costs(const Model& model, ThreadPool& pool, int max_rows) {
  Costs c;
  MemoryOptions mo;
  mo.n_ctx = 4096;
  mo.n_seq = 1;
  mo.n_snapshots = max_rows;
  mo.mtp = model.has_mtp();
  Memory mem = std::move(Memory::create(model.config(), mo)).value();
  const int32_t seq = mem.seq_create().value();
  Batch b;
  Outputs out;
  // Some context first (64 positions), then each verify batch is rolled back to its first row (all drafts
  // rejected, as the engine does), so the context grows by one row per measurement.
  for (int64_t p = 0; p < 64; ++p) b.add(seq, p, static_cast<int32_t>(40 + p % 50), p == 63);
  if (!forward(model, b, mem, out, pool).ok()) std::abort();
  c.verify.assign(static_cast<size_t>(max_rows) + 1, 0.0);
  for (int r = 1; r <= max_rows; ++r) {
    c.verify[static_cast<size_t>(r)] = median_seconds(7, [&] {
      const int64_t p0 = mem.seq_pos(seq);
      b.clear();
      for (int i = 0; i < r; ++i) b.add(seq, p0 + i, 50 + i, true);
      if (!forward(model, b, mem, out, pool).ok()) std::abort();
      if (!mem.rollback(seq, 1).ok()) std::abort();
    });
  }
  if (model.has_mtp()) {
    const std::vector<float> h(static_cast<size_t>(model.config().n_embd), 0.5f);
    for (bool logits : {false, true}) {
      const double t = median_seconds(7, [&] {
        b.clear();
        b.add_mtp(seq, 64, 50, h, logits);
        if (!forward_mtp(model, b, mem, out, pool).ok()) std::abort();
      });
      (logits ? c.draft_full : c.mtp_block) = t;
    }
  }
  return c;
}

std::vector<std::vector<int32_t>> bench_prompts(int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 16; ++j) p.push_back(static_cast<int32_t>(33 + (i * 31 + j * 7) % 90));
    out.push_back(std::move(p));
  }
  return out;
}

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;
  int64_t generated = 0;
  double gen_seconds = 0;
  speculative::SpecStats stats;
};

RunResult run_config(const Model& model, ThreadPool& pool, int32_t n_max, int64_t draft_vocab,
                     const std::vector<std::vector<int32_t>>& prompts, int64_t n_tokens) {
  EngineOptions eo;
  eo.n_ctx = 4096;
  eo.n_batch = 512;
  eo.spec = n_max > 0 ? SpecType::kMtp : SpecType::kNone;
  eo.draft.n_max = n_max;
  eo.draft_vocab = draft_vocab;
  auto engine = Engine::create(model, eo, pool);
  if (!engine.ok()) {
    std::fprintf(stderr, "engine: %s\n", engine.status().message().c_str());
    std::exit(1);
  }
  RunResult r;
  RequestOptions ro;
  ro.max_tokens = n_tokens;
  ro.ignore_eos = true;
  for (const auto& prompt : prompts) {
    if (!(*engine)->submit(prompt, ro).ok()) std::abort();
    std::vector<int32_t> toks;
    std::vector<SlotEvent> events;
    while (!(*engine)->idle()) {
      events.clear();
      if (!(*engine)->step(events).ok()) std::abort();
      for (const SlotEvent& e : events) {
        for (const GeneratedToken& t : e.tokens) toks.push_back(t.id);
        if (e.finish != FinishReason::kNone) {
          // Generation time covers the steps after the first token (which came with the prompt).
          r.generated += e.timings.n_generated - 1;
          r.gen_seconds += e.timings.gen_ms / 1e3;
          r.stats.merge(e.timings.spec);
        }
      }
    }
    r.tokens.push_back(std::move(toks));
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  int threads = 2, n_prompts = 4;
  int64_t n_tokens = 128;
  std::vector<int64_t> draft_max{1, 2, 3}, draft_vocab{0};
  CLI::App app{"Costs of plain, verify and draft passes, and MTP speculative decoding against plain decoding",
               "spec_bench"};
  app.add_option("model", path, "GGUF model with an MTP block")->required();
  app.add_option("--threads", threads, "Threads")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--tokens", n_tokens, "Tokens per prompt")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--prompts", n_prompts, "Prompts")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--draft-max", draft_max, "Draft lengths, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 16));
  app.add_option("--draft-vocab", draft_vocab, "Draft vocabulary sizes, comma-separated (0: all)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  bench::parse_or_exit(app, argc, argv);
  auto model = Model::load(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().message().c_str());
    return 1;
  }
  ThreadPool pool(threads);
  const Qwen35MoeConfig& c = model->config();
  std::printf("model %s: %lld layers, n_embd %lld, vocab %lld, threads %d\n", path.c_str(),
              static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
              static_cast<long long>(c.n_vocab), threads);

  // Part 1: costs.
  const int max_rows = 5;
  const Costs cost = measure_costs(*model, pool, max_rows);
  const double t1 = cost.verify[1];
  std::printf("\ntrunk decode step: %.3f ms\nverify cost (k+1 rows / 1 row):", t1 * 1e3);
  for (int r = 2; r <= max_rows; ++r)
    std::printf("  %d rows %.2fx", r, cost.verify[static_cast<size_t>(r)] / t1);
  std::printf("\n");
  if (!model->has_mtp()) return 0;
  std::printf("draft step (1 row): %.3f ms = %.3fx of a trunk step; MTP block %.3fx, LM head %.3fx\n",
              cost.draft_full * 1e3, cost.draft_full / t1, cost.mtp_block / t1,
              (cost.draft_full - cost.mtp_block) / t1);
  std::vector<std::pair<int64_t, double>> draft_costs{{0, cost.draft_full}};
  for (int64_t n : draft_vocab) {
    if (n <= 0 || n >= c.n_vocab) continue;
    auto dv = speculative::DraftVocab::first_n(*model, n, {});
    if (!dv.ok()) {
      std::printf("draft vocab %lld: %s\n", static_cast<long long>(n), dv.status().message().c_str());
      continue;
    }
    std::vector<float> h(static_cast<size_t>(c.n_embd), 0.5f), l(static_cast<size_t>(dv->size()));
    const double head = median_seconds(7, [&] { dv->logits(h.data(), 1, l.data(), pool); });
    const double t = cost.mtp_block + head;
    std::printf("draft step over the first %lld ids: %.3f ms = %.3fx of a trunk step (head %.3fx)\n",
                static_cast<long long>(n), t * 1e3, t / t1, head / t1);
    draft_costs.push_back({n, t});
  }
  for (const auto& [n, td] : draft_costs) {
    std::printf("\nexpected speedup, draft vocab %s (rows: acceptance a, columns: draft length k)\n",
                n == 0 ? "full" : std::to_string(n).c_str());
    std::printf("   a  ");
    for (int k = 1; k < max_rows; ++k) std::printf("   k=%d", k);
    std::printf("\n");
    for (double a : {0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95}) {
      std::printf("%5.2f ", a);
      for (int k = 1; k < max_rows; ++k) {
        const double et = (1 - std::pow(a, k + 1)) / (1 - a);
        std::printf("  %5.2f", et * t1 / (k * td + cost.verify[static_cast<size_t>(k + 1)]));
      }
      std::printf("\n");
    }
  }

  // Part 2: measured generation.
  const auto prompts = bench_prompts(n_prompts);
  std::printf("\ngreedy generation, %d prompts x %lld tokens, batch 1\n", n_prompts,
              static_cast<long long>(n_tokens));
  const RunResult plain = run_config(*model, pool, 0, 0, prompts, n_tokens);
  const double plain_tps = plain.generated / plain.gen_seconds;
  std::printf("%-26s %8.2f tok/s  1.00x\n", "plain", plain_tps);
  for (int64_t n : draft_vocab)
    for (int64_t k : draft_max) {
      const RunResult r = run_config(*model, pool, static_cast<int32_t>(k), n, prompts, n_tokens);
      const double tps = r.generated / r.gen_seconds;
      char name[64];
      std::snprintf(name, sizeof name, "mtp draft-max %lld%s", static_cast<long long>(k),
                    n > 0 ? (" vocab " + std::to_string(n)).c_str() : "");
      std::printf("%-26s %8.2f tok/s  %.2fx  identical=%s  %s\n", name, tps, tps / plain_tps,
                  r.tokens == plain.tokens ? "yes" : "NO", r.stats.summary().c_str());
    }
  return 0;
}
