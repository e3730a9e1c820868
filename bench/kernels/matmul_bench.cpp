// Matmul benchmark: STREAM-style copy bandwidth, decode-sized products (1..8 rows) against the memory
// bandwidth, the cost of extra rows relative to one row, and prompt-sized GMAC/s.
//
//   kernels_bench [--types q8_0,iq4_xs,q4_K,q6_K] [--isa scalar|avx2|avxvnni|avx512|neon] [--no-head]
//                 [--gemm-only] [--rows 1,2,3,4,5,8] [--pool-mb N] [--packed]
//
// --packed: weights in the load-time packed layout (kernels/pack.h) where the type has one, as the engine
// runs them. --rows: the activation rows of the decode-sized products (1-512; the "x Nrow" columns are
// against the first, N).
//
// Weights are replicated into a pool of distinct copies larger than the last-level cache (default 1024 MB)
// and each call uses the next copy, so decode timings read weights from DRAM as a real model would.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "../bench_cli.h"
#include "../bench_util.h"
#include "base/thread_pool.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/pack.h"
#include "quant/quantize.h"

namespace {

using namespace mtp;
using Clock = std::chrono::steady_clock;

// CPU time of the calling thread: on a shared machine it shows the single-thread cost without the time spent
// descheduled.
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = g(rng);
  return v;
}

// n_copies distinct copies of one quantized matrix, back to back.
bool g_packed = false;

struct WeightPool {
  GgmlType type;
  int64_t n_in, n_out, bytes_per_matrix, n_copies;
  std::vector<uint8_t> data;
  bool packed = false;
  kernels::MatrixView view(int64_t i) const {
    kernels::MatrixView v =
        kernels::MatrixView::contiguous(type, data.data() + (i % n_copies) * bytes_per_matrix, n_in, n_out);
    v.packed = packed;
    return v;
  }
};

WeightPool make_pool(GgmlType type, int64_t n_in, int64_t n_out, int64_t pool_bytes, ThreadPool* tp) {
  WeightPool p{type, n_in, n_out, row_size(type, n_in) * n_out, 1, {}};
  p.n_copies = std::max<int64_t>(1, pool_bytes / p.bytes_per_matrix);
  // Quantize a 64-row stripe once and tile it: the bytes matter only for timing.
  const int64_t stripe_rows = std::min<int64_t>(64, n_out);
  const std::vector<float> src = gaussian(stripe_rows * n_in, 1);
  std::vector<uint8_t> stripe(static_cast<size_t>(row_size(type, n_in) * stripe_rows));
  Status s = quantize_tensor(tp, type, src.data(), stripe.data(), stripe_rows, n_in);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    std::exit(1);
  }
  p.data.resize(static_cast<size_t>(p.bytes_per_matrix * p.n_copies));
  for (size_t off = 0; off < p.data.size(); off += stripe.size()) {
    std::memcpy(p.data.data() + off, stripe.data(), std::min(stripe.size(), p.data.size() - off));
  }
  if (g_packed && kernels::can_pack(p.view(0))) {
    std::vector<uint8_t> packed(p.data.size());
    for (int64_t i = 0; i < p.n_copies; ++i)
      kernels::pack_matrix(p.view(i), packed.data() + i * p.bytes_per_matrix);
    p.data = std::move(packed);
    p.packed = true;
  }
  return p;
}

// Seconds per matmul call: median wall time and median thread CPU time of `iters` calls, each on the next
// weight copy.
struct Timing {
  double wall, cpu;
};

Timing time_matmul(const WeightPool& wp, const kernels::PreparedActivations& acts, ThreadPool* tp, int iters,
                   int64_t* next) {
  std::vector<float> y(static_cast<size_t>(acts.n_rows() * wp.n_out));
  std::vector<double> t, c;
  for (int i = 0; i < iters; ++i) {
    const double c0 = thread_cpu_seconds();
    const auto t0 = Clock::now();
    kernels::matmul(wp.view((*next)++), acts, y.data(), wp.n_out, tp);
    t.push_back(seconds_since(t0));
    c.push_back(thread_cpu_seconds() - c0);
  }
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  return {t[t.size() / 2], c[c.size() / 2]};
}

void bench_shape(GgmlType type, int64_t n_in, int64_t n_out, int64_t pool_bytes, ThreadPool* tp2, double bw1,
                 double bw2, int iters, const std::vector<int64_t>& row_counts) {
  const WeightPool wp = make_pool(type, n_in, n_out, pool_bytes, tp2);
  const std::vector<float> x = gaussian(512 * n_in, 2);
  std::printf("\n%s%s  n_in=%lld n_out=%lld  (%.2f MB per matrix, %lld copies)\n",
              std::string(type_name(type)).c_str(), wp.packed ? " packed" : "", static_cast<long long>(n_in),
              static_cast<long long>(n_out), wp.bytes_per_matrix / 1e6, static_cast<long long>(wp.n_copies));
  const std::string against = "x " + std::to_string(row_counts.front()) + "row";  // the ratios' base
  std::printf("  rows | thr | wall us  | GB/s w  | %%copy | %s | cpu us (1 thr) | %s\n", against.c_str(),
              against.c_str());
  int64_t next = 0;
  kernels::PreparedActivations acts;
  for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), tp2}) {
    const int thr = tp != nullptr ? tp->size() : 1;
    const double bw = thr == 1 ? bw1 : bw2;
    Timing t1{};
    for (int64_t rows : row_counts) {
      acts.prepare(kernels::act_format(type), x.data(), rows, n_in, n_in);
      const Timing t = time_matmul(wp, acts, tp, iters, &next);
      if (rows == row_counts.front()) t1 = t;
      const double gbs = wp.bytes_per_matrix / t.wall / 1e9;
      std::printf("  %4lld | %3d | %8.1f | %7.2f | %5.1f | %5.2f", static_cast<long long>(rows), thr,
                  t.wall * 1e6, gbs, 100.0 * gbs / bw, t.wall / t1.wall);
      if (thr == 1) std::printf(" | %14.1f | %5.2f", t.cpu * 1e6, t.cpu / t1.cpu);
      std::printf("\n");
    }
  }
}

void bench_gemm(GgmlType type, int64_t n_in, int64_t n_out, ThreadPool* tp2) {
  const WeightPool wp = make_pool(type, n_in, n_out, 0, tp2);
  const std::vector<float> x = gaussian(512 * n_in, 3);
  kernels::PreparedActivations acts;
  std::printf("  %-7s %5lldx%-5lld", std::string(type_name(type)).c_str(), static_cast<long long>(n_in),
              static_cast<long long>(n_out));
  for (int64_t rows : {8, 16, 64, 512}) {
    const auto tp0 = Clock::now();
    acts.prepare(kernels::act_format(type), x.data(), rows, n_in, n_in, tp2);
    const double tprep = seconds_since(tp0);
    for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), tp2}) {
      int64_t next = 0;
      const Timing tm = time_matmul(wp, acts, tp, 5, &next);
      const double t = tp != nullptr ? tm.wall : tm.cpu;
      std::printf(" | %3lld r %dt %6.1f", static_cast<long long>(rows), tp ? tp->size() : 1,
                  static_cast<double>(rows) * n_in * n_out / t / 1e9);
    }
    std::printf(" (prep %.0f us)", tprep * 1e6);
  }
  std::printf("  GMAC/s (1t: thread CPU time, 2t: wall)\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<GgmlType> types = {GgmlType::Q8_0, GgmlType::IQ4_XS, GgmlType::Q4_K, GgmlType::Q6_K};
  bool head = true, decode = true;
  int64_t pool_mb = 1024;
  std::vector<int64_t> row_counts = {1, 2, 3, 4, 5, 8};
  std::vector<std::string> type_names;
  std::string isa;
  CLI::App app{"Copy bandwidth, decode-sized and prompt-sized matmul rates per weight type", "kernels_bench"};
  app.add_option("--types", type_names, "Weight types, comma-separated (default q8_0,iq4_xs,q4_K,q6_K)")
      ->delimiter(',');
  app.add_option("--isa", isa,
                 "Kernel level: scalar, avx2 (plain), avxvnni, avx512 or neon (default: the best)");
  app.add_flag("!--no-head", head, "Skip the output head's shape");
  app.add_flag("!--gemm-only", decode, "Only the prompt-sized batches");
  app.add_option("--rows", row_counts, "Activation rows of the decode-sized products, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 512))
      ->capture_default_str();
  app.add_option("--pool-mb", pool_mb, "MiB of weight copies the decode rows cycle through")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_flag("--packed", g_packed, "Weights in the load-time packed layout, as the engine runs them");
  bench::parse_or_exit(app, argc, argv);
  if (!type_names.empty()) types = bench::lookup_or_exit(app, "--types", type_names, type_from_name);
  if (const std::string error = isa.empty() ? "" : kernels::set_level(isa); !error.empty()) {
    std::fprintf(stderr, "kernels_bench: --isa %s\n", error.c_str());
    return 2;
  }
  ThreadPool tp2(2);
  std::printf("kernels_bench: kernels %s (best %s)\n", kernels::kernels_summary(),
              kernels::isa_name(kernels::best_isa()));
  const int64_t n_stream = 512ll << 20;  // bytes per array
  const double bw1 = bench::stream_copy_gbs(nullptr, n_stream);
  const double bw2 = bench::stream_copy_gbs(&tp2, n_stream);
  std::printf("STREAM copy (read+write, 2 x 512 MB): 1 thread %.2f GB/s, 2 threads %.2f GB/s\n", bw1, bw2);

  const int64_t pool_bytes = pool_mb << 20;
  for (GgmlType t : types) {
    if (!decode) break;
    bench_shape(t, 2048, 512, pool_bytes, &tp2, bw1, bw2, 200, row_counts);
    bench_shape(t, 512, 2048, pool_bytes, &tp2, bw1, bw2, 200, row_counts);
    if (head) bench_shape(t, 2048, 248320, pool_bytes, &tp2, bw1, bw2, 3, row_counts);
  }
  std::printf("\nPrompt-sized batches (one 2048x512 / 512x2048 matrix, weights cache-resident):\n");
  const kernels::MaddCeiling c1 = bench::madd_ceiling(1), c2 = bench::madd_ceiling(2);
  if (c1.sequence != nullptr)
    std::printf("  int8 multiply-add ceiling (%s): 1 thread %.1f GMAC/s, 2 threads %.1f GMAC/s\n",
                c1.sequence, c1.macs_per_second / 1e9, c2.macs_per_second / 1e9);
  for (GgmlType t : types) {
    bench_gemm(t, 2048, 512, &tp2);
    bench_gemm(t, 512, 2048, &tp2);
  }
  return 0;
}
