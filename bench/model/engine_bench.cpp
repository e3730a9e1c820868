// Engine throughput: decode and prompt tokens/s at given thread counts and context
// depths, the fraction of the memory-bandwidth limit at decode (weight bytes touched per token / STREAM-copy
// bandwidth measured in this run with as many threads; also against a read-only stream, which is what decode
// does), the cost of verify batches of k+1 rows relative to one row, and pp512 with
// the multiply-add rate it implies, against the kernel level's int8 ceiling on as many threads
// (kernels/ceiling.h). A program printing numbers, not a test; the machine is shared, so compare ratios
// within one run: the decode fractions pair each slice of 8 tokens with the bandwidth probes run just before
// it (the figures once at the start are printed too).
//
//   engine_bench MODEL.gguf [--threads 1,2] [--depths 0,4096] [--decode 16] [--pp-reps 2]
//                [--cache-type f32|f16|q8_0] [--profile] [--profile-rows 1,4] [--grain BYTES]
//
// --profile: also where the time of a step of 1 row (decode) and of 4 rows (a verify batch) goes at each
// thread count, by kind of work, and for each kind how much of its thread-pool jobs the threads spent
// working, joining late or waiting for the slowest (base/step_profile.h). --profile-rows sets the steps' rows
// instead (512: a prompt chunk). --grain: the thread pool's least work worth a thread (base/thread_pool.h; 0
// splits every job), to find where it should sit on a machine.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "../bench_cli.h"
#include "../bench_util.h"
#include "base/step_profile.h"
#include "base/timer.h"
#include "model/forward.h"
#include "model/model.h"

using namespace mtp;

namespace {

double process_cpu_seconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Median and range of a non-empty sample.
struct Spread {
  double median, lo, hi;
};
Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

struct Touched {
  double bytes = 0;      // weight bytes read per decode token
  double macs = 0;       // multiply-adds per token (weight elements used)
  double head_macs = 0;  // of them, the output head's: a prompt chunk runs it for its last row only
};

Touched add(Touched t, const TensorView& w, double fraction = 1.0) {
  if (!w.valid()) return t;
  t.bytes += static_cast<double>(w.bytes()) * fraction;
  t.macs += static_cast<double>(w.row_length()) * static_cast<double>(w.n_rows()) * fraction;
  return t;
}

// Trunk weights one decode token reads: every projection, the k routed experts of 256, the head.
Touched touched_per_token(const Model& m) {
  const Qwen35MoeConfig& c = m.config();
  Touched t;
  const double frac = static_cast<double>(c.n_expert_used) / static_cast<double>(c.n_expert);
  for (const LayerWeights& l : m.weights().layers) {
    for (const TensorView* w :
         {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.output, &l.gdn.qkv, &l.gdn.gate, &l.gdn.beta, &l.gdn.alpha,
          &l.gdn.out, &l.moe.router, &l.moe.gate_shexp, &l.moe.up_shexp, &l.moe.down_shexp})
      t = add(t, *w);
    for (const TensorView* w : {&l.moe.gate_exps, &l.moe.up_exps, &l.moe.down_exps}) t = add(t, *w, frac);
  }
  t = add(t, m.weights().output);
  t.head_macs = add(Touched{}, m.weights().output).macs;
  return t;
}

// Where `steps` steps of `rows` rows of one sequence go, at depth 0: decode rows that stay (rows = 1) or
// verify batches rolled back to their first row, as the engine does when every draft is rejected.
// `read_bps`: the read-only stream's bytes per second at this thread count, which the step's weight bytes
// are set against.
bool print_profile(const Model& model, ThreadPool& pool, GgmlType cache_type, int64_t rows, int steps,
                   double read_bps) {
  MemoryOptions mo;
  mo.n_seq = 1;
  mo.n_snapshots = 4;
  // A step wider than the snapshots kept is a prompt chunk (logits of its last row only), each into a fresh
  // sequence so that every chunk starts at depth 0, as pp512 does; the other steps keep one row each.
  const bool chunk = rows > mo.n_snapshots;
  mo.n_ctx = 1024 + (chunk ? rows : (steps + 2) * rows);
  mo.mtp = false;
  mo.cache_type_k = mo.cache_type_v = cache_type;
  auto mem = Memory::create(model.config(), mo);
  if (!mem.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", mem.status().message().c_str());
    return false;
  }
  int32_t s = *mem->seq_create();
  Batch b;
  Outputs out;
  auto step = [&] {
    if (chunk && mem->seq_pos(s) > 0) {
      mem->seq_free(s);
      s = *mem->seq_create();
    }
    const int64_t p0 = mem->seq_pos(s);
    b.clear();
    for (int64_t j = 0; j < rows; ++j)
      b.add(s, p0 + j, static_cast<int32_t>((p0 * 7 + j * 13) % model.config().n_vocab),
            !chunk || j == rows - 1);
    Status st = forward(model, b, *mem, out, pool);
    if (st.ok() && !chunk) st = mem->rollback(s, 1);
    if (!st.ok()) std::fprintf(stderr, "engine_bench: profile step: %s\n", st.message().c_str());
    return st.ok();
  };
  for (int i = 0; i < 2; ++i)
    if (!step()) return false;
  profile::reset();
  profile::set_enabled(true);
  Timer t;
  for (int i = 0; i < steps; ++i)
    if (!step()) return false;
  const double wall = t.seconds();
  profile::set_enabled(false);
  const profile::Totals p = profile::totals();
  const double per = 1e3 / steps;
  std::printf("t=%d profile of %lld-row steps (%d steps, %.2f ms a step):\n", pool.size(), (long long)rows,
              steps, wall * per);
  std::vector<int> order(profile::kParts);
  for (int i = 0; i < profile::kParts; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](int a, int c) { return p.seconds[a] > p.seconds[c]; });
  // Per part: its wall time and share of the step; then its pool jobs a step, the share of the threads' time
  // in them spent running tasks (busy) and before each thread's first task (late: waking, or no task left),
  // and the part's time on the calling thread alone (outside its jobs).
  std::printf("  %-38s %11s %6s | %6s %5s %5s %11s\n", "", "", "", "jobs", "busy", "late", "alone");
  for (int i : order) {
    const double sec = p.seconds[static_cast<size_t>(i)];
    const profile::Jobs& j = p.jobs[static_cast<size_t>(i)];
    std::printf("  %-38s %8.2f ms %5.1f%% | %6.1f ", profile::part_name(static_cast<profile::Part>(i)),
                sec * per, 100 * sec / wall, static_cast<double>(j.count) / steps);
    if (j.count > 0)
      std::printf("%4.0f%% %4.0f%%", 100 * j.busy_share(), 100 * j.late_share());
    else
      std::printf("%5s %5s", "-", "-");
    std::printf(" %8.2f ms\n", std::max(0.0, sec - j.wall) * per);
  }
  // The weights a step read (every matrix once, each routed expert its batch touched once): how fast the
  // step streamed them, against the read-only stream. A step of several rows of different tokens reads more
  // experts than a one-row step, so its floor is its own bytes, not a multiple of one row's.
  double bytes = 0;
  for (double b : p.weight_bytes) bytes += b;
  bytes /= steps;
  const double experts = p.weight_bytes[static_cast<size_t>(profile::Part::kExperts)] / steps;
  std::printf(
      "  weights read a step: %.1f MB (the experts %.1f MB), at %.2f GB/s: %.0f%% of the read-only stream "
      "(its floor there %.2f ms)\n",
      bytes / 1e6, experts / 1e6, bytes / (wall / steps) / 1e9, 100 * bytes / (wall / steps) / read_bps,
      1e3 * bytes / read_bps);
  const profile::Jobs all = p.all_jobs();
  if (all.count > 0) {
    std::printf(
        "  thread pool: %.0f jobs a step, %.2f ms of the step (%.0f%%); its threads ran tasks %.0f%% of "
        "that, "
        "joined late %.0f%% and waited for the slowest thread %.0f%%; one thread outside jobs %.2f ms\n",
        static_cast<double>(all.count) / steps, all.wall * per, 100 * all.wall / wall, 100 * all.busy_share(),
        100 * all.late_share(), 100 * all.wait_share(), (wall - all.wall) * per);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, cache_name = "f32";
  std::vector<int64_t> threads{1, 2}, depths{0, 4096};
  int n_decode = 16, pp_reps = 2;
  bool want_profile = false;
  std::vector<int64_t> profile_rows{1, 4};
  int64_t grain = ThreadPool::kDefaultGrainBytes;
  CLI::App app{
      "Decode and prompt speed of one model against the memory bandwidth, per thread count and depth",
      "engine_bench"};
  app.add_option("model", path, "GGUF model")->required();
  app.add_option("--threads", threads, "Thread counts, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_option("--depths", depths, "Context depths, comma-separated")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  app.add_option("--decode", n_decode, "Tokens decoded per depth")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--pp-reps", pp_reps, "Repetitions of the prompt pass")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--cache-type", cache_name, "KV cache type: f32, f16 or q8_0")->capture_default_str();
  app.add_flag("--profile", want_profile, "Also where a 1-row and a 4-row step's time goes, by kind of work");
  app.add_option("--profile-rows", profile_rows, "Rows of the steps --profile times, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--grain", grain,
                 "Least work, in bytes, the thread pool gives a thread (0: split every job)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  bench::parse_or_exit(app, argc, argv);
  auto cache = kv_cache_type_from_name(cache_name);
  if (!cache.ok()) {
    std::fprintf(stderr, "engine_bench: --cache-type: %s\n", cache.status().message().c_str());
    return 2;
  }
  const GgmlType cache_type = *cache;
  auto model = Model::load(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().message().c_str());
    return 1;
  }
  const Qwen35MoeConfig& c = model->config();
  const Touched tt = touched_per_token(*model);
  std::printf(
      "model %s: n_embd %lld, %lld layers, %lld experts (top %lld); weights per decode token %.1f MB%s\n",
      path.c_str(), (long long)c.n_embd, (long long)c.n_layer, (long long)c.n_expert,
      (long long)c.n_expert_used, tt.bytes / 1e6, model->packed_bytes() > 0 ? " (packed)" : "");

  auto token = [&](int64_t i) {
    return static_cast<int32_t>((i * 2654435761u) % static_cast<uint64_t>(c.n_vocab));
  };
  for (int64_t nt : threads) {
    ThreadPool pool(static_cast<int>(nt), grain);
    // The limit at this thread count: a STREAM copy with as many threads, in this run, best of 5 passes
    // (decode below pairs a pass of each probe with each slice of its tokens).
    bench::BandwidthProbe probe(&pool);
    double bw = 0, rd1 = 0, rd2 = 0;
    for (int rep = 0; rep < 5; ++rep) {
      bw = std::max(bw, probe.copy_gbs() * 1e9);
      rd1 = std::max(rd1, probe.read_gbs() * 1e9);
      rd2 = std::max(rd2, probe.read_gbs(true) * 1e9);
    }
    const double rd = std::max(rd1, rd2);
    std::printf(
        "t=%lld copy bandwidth %.2f GB/s -> decode limit %.1f tok/s; read-only stream %.2f GB/s -> %.1f "
        "tok/s (one stream per thread %.2f, two %.2f)\n",
        (long long)nt, bw / 1e9, bw / tt.bytes, rd / 1e9, rd / tt.bytes, rd1 / 1e9, rd2 / 1e9);
    if (want_profile)
      for (int64_t rows : profile_rows)
        if (!print_profile(*model, pool, cache_type, rows, std::max(8, n_decode), rd)) return 1;
    for (int64_t depth : depths) {
      MemoryOptions mo;
      mo.n_ctx = depth + 1024 + 6 * n_decode;  // the verify batches, the sliced and the straight decode
      mo.n_seq = 1;
      mo.n_snapshots = 4;  // as the engine with a draft length of 4: verify rows d1..d4
      mo.mtp = false;
      mo.cache_type_k = mo.cache_type_v = cache_type;
      auto mem = Memory::create(c, mo);
      if (!mem.ok()) {
        std::fprintf(stderr, "%s\n", mem.status().message().c_str());
        return 1;
      }
      const int32_t s = *mem->seq_create();
      Batch b;
      Outputs out;
      // Fill the context in 512-row batches (the prompt rate at this depth).
      Timer tp;
      for (int64_t p = 0; p < depth; p += 512) {
        b.clear();
        for (int64_t j = p; j < std::min(depth, p + 512); ++j) b.add(s, j, token(j), j + 1 == depth);
        if (!forward(*model, b, *mem, out, pool).ok()) return 1;
      }
      const double fill_s = tp.seconds();
      // Verify batches [last, d1..dk] of 1..5 rows, each rolled back to its first row as the engine does when
      // every draft is rejected (so the context grows by one row per batch), interleaved over reps to share
      // the noise.
      const int reps = std::max(3, n_decode / 2);
      std::vector<double> cost(6, 0.0);
      for (int rep = 0; rep < reps + 1; ++rep) {
        for (int64_t rows = 1; rows <= 5; ++rows) {
          const int64_t p0 = mem->seq_pos(s);
          b.clear();
          for (int64_t j = 0; j < rows; ++j) b.add(s, p0 + j, token(p0 + j + rep), true);
          Timer t;
          if (!forward(*model, b, *mem, out, pool).ok()) return 1;
          if (rep > 0) cost[rows] += t.seconds();  // rep 0 warms up
          if (!mem->rollback(s, 1).ok()) return 1;
        }
      }
      // Decode: single rows that stay, in slices of kSlice timed tokens. Before each slice, the best of 3
      // copy passes and of a read-only pass of one and of two streams, then one untimed token (the probe
      // evicts the states and KV that stay cached from one token to the next); the fractions are the medians
      // of each slice's rate over the bandwidth measured just before it, which a shared machine's drift moves
      // far less than a figure taken once.
      constexpr int kSlice = 8;
      std::vector<double> of_copy, of_read;
      double dsec = 0, dcpu = 0;
      auto step = [&] {
        const int64_t p = mem->seq_pos(s);
        b.clear();
        b.add(s, p, token(p), true);
        return forward(*model, b, *mem, out, pool).ok();
      };
      for (int done = 0; done < n_decode; done += kSlice) {
        const int n = std::min(kSlice, n_decode - done);
        const double c = std::max({probe.copy_gbs(), probe.copy_gbs(), probe.copy_gbs()}) * 1e9;
        const double r = std::max(probe.read_gbs(), probe.read_gbs(true)) * 1e9;
        if (!step()) return 1;
        const double c0 = process_cpu_seconds();
        Timer td;
        for (int i = 0; i < n; ++i)
          if (!step()) return 1;
        const double sec = td.seconds();
        dsec += sec;
        dcpu += process_cpu_seconds() - c0;
        of_copy.push_back(n / sec * tt.bytes / c);
        of_read.push_back(n / sec * tt.bytes / r);
      }
      // And the same number of tokens straight through, as llama-bench's tg: on a model whose weights fit in
      // the caches, the probes between slices evict them, and the sliced rate is the lower one.
      Timer ts;
      for (int i = 0; i < n_decode; ++i)
        if (!step()) return 1;
      const double straight = n_decode / ts.seconds();
      const double dec = n_decode / dsec;
      const Spread fc = spread(of_copy), fr = spread(of_read);
      std::printf(
          "t=%lld depth=%lld: decode %.2f tok/s (%.0f%% of bandwidth limit [%.0f-%.0f%%], %.0f%% of "
          "read-only "
          "[%.0f-%.0f%%]: medians [ranges] of %zu slices, each over the probes just before it; %.0f%%, "
          "%.0f%% "
          "of the figures above; cpu %.2f)",
          (long long)nt, (long long)depth, dec, 100 * fc.median, 100 * fc.lo, 100 * fc.hi, 100 * fr.median,
          100 * fr.lo, 100 * fr.hi, of_copy.size(), 100.0 * dec * tt.bytes / bw, 100.0 * dec * tt.bytes / rd,
          dcpu / (dsec * static_cast<double>(nt)));
      std::printf("; straight through %.2f tok/s", straight);
      if (depth > 0) std::printf(", prompt fill %.1f tok/s", depth / fill_s);
      std::printf("; verify k+1 rows / 1 row:");
      for (int64_t rows = 2; rows <= 5; ++rows)
        std::printf(" k=%lld %.2fx", (long long)rows - 1, cost[rows] / cost[1]);
      std::printf("\n");
    }
    // pp512 from an empty context: one warm-up pass (it maps every expert's pages), then pp_reps timed ones.
    // cpu = process CPU time / (wall x threads): below 1 when the machine is shared.
    MemoryOptions mo;
    mo.n_ctx = 1024;
    mo.mtp = false;
    mo.cache_type_k = mo.cache_type_v = cache_type;
    auto mem = Memory::create(c, mo);
    Batch b;
    Outputs out;
    std::vector<double> secs, cpu;
    for (int rep = 0; rep <= pp_reps; ++rep) {
      mem->seq_free(0);
      const int32_t s = *mem->seq_create();
      b.clear();
      for (int64_t j = 0; j < 512; ++j) b.add(s, j, token(j + rep), j == 511);
      const double c0 = process_cpu_seconds();
      Timer t;
      if (!forward(*model, b, *mem, out, pool).ok()) return 1;
      if (rep == 0) continue;
      secs.push_back(t.seconds());
      cpu.push_back((process_cpu_seconds() - c0) / (secs.back() * static_cast<double>(nt)));
    }
    // Multiply-adds of the weight products in a 512-row chunk: every row through the trunk, the head once.
    const double chunk_macs = 512 * (tt.macs - tt.head_macs) + tt.head_macs;
    const kernels::MaddCeiling ceiling = bench::madd_ceiling(static_cast<int>(nt));
    for (size_t i = 0; i < secs.size(); ++i) {
      const double gmacs = chunk_macs / secs[i] / 1e9;
      std::printf("t=%lld pp512: %.1f tok/s, %.1f GMAC/s in weight products", (long long)nt, 512 / secs[i],
                  gmacs);
      if (ceiling.sequence != nullptr)
        std::printf(" (%.0f%% of %.1f GMAC/s, the %s ceiling at %lld threads)",
                    100 * gmacs / (ceiling.macs_per_second / 1e9), ceiling.macs_per_second / 1e9,
                    ceiling.sequence, (long long)nt);
      std::printf(", cpu %.2f\n", cpu[i]);
    }
    std::fflush(stdout);
  }
  return 0;
}
