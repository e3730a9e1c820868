// Quantize / dequantize throughput per type, in MB/s of F32 input (1 MB = 10^6 bytes), with one thread and
// with every hardware thread, plus the time a 1 GB F32 tensor would take to quantize.
//
//   quant_throughput [--mb N] [--threads N] [--types q4_K,iq4_xs,...] [--imatrix]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "../bench_cli.h"
#include "base/thread_pool.h"
#include "quant/quantize.h"

namespace {

using mtp::GgmlType;

struct Options {
  double megabytes = 64;
  int threads = 0;  // 0: all hardware threads
  bool imatrix = false;
  std::vector<GgmlType> types = {GgmlType::F16,    GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                 GgmlType::Q4_K,   GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL,
                                 GgmlType::IQ4_XS, GgmlType::Q8_K};
};

Options parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> names;
  CLI::App app{"Quantize and dequantize throughput per type, on one thread and on all", "quant_throughput"};
  app.add_option("--mb", o.megabytes, "Megabytes of F32 input")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "Threads of the second column (0: all)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--types", names, "Types, comma-separated (default: every quantized type)")->delimiter(',');
  app.add_flag("--imatrix", o.imatrix, "Quantize with importance weights");
  mtp::bench::parse_or_exit(app, argc, argv);
  if (!names.empty()) o.types = mtp::bench::lookup_or_exit(app, "--types", names, mtp::type_from_name);
  return o;
}

// Standard normal values from a fixed-seed LCG (Box-Muller); the data only needs to look like weights.
std::vector<float> gaussian(size_t n) {
  std::vector<float> x(n);
  uint64_t s = 12345;
  auto uniform = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<double>(s >> 11) + 0.5) / 9007199254740992.0;
  };
  for (size_t i = 0; i + 1 < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double a = 6.283185307179586 * uniform();
    x[i] = static_cast<float>(r * std::cos(a));
    x[i + 1] = static_cast<float>(r * std::sin(a));
  }
  return x;
}

template <typename Fn>
double seconds(const Fn& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void check(const mtp::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  constexpr int64_t kRowLength = 4096;
  const int64_t n_rows = std::max<int64_t>(1, static_cast<int64_t>(opt.megabytes * 1e6 / 4 / kRowLength));
  const double input_mb = static_cast<double>(n_rows * kRowLength) * 4 / 1e6;
  const std::vector<float> src = gaussian(static_cast<size_t>(n_rows * kRowLength));
  std::vector<float> imatrix(kRowLength);
  for (int64_t j = 0; j < kRowLength; ++j) imatrix[j] = 0.5f + static_cast<float>(j % 7) * 0.25f;
  const float* qw = opt.imatrix ? imatrix.data() : nullptr;
  std::vector<float> back(src.size());

  mtp::ThreadPool single(1);
  mtp::ThreadPool all(opt.threads);
  std::printf("input: %.1f MB of F32 (%lld rows x %lld), imatrix: %s, threads: 1 and %d\n", input_mb,
              static_cast<long long>(n_rows), static_cast<long long>(kRowLength), opt.imatrix ? "yes" : "no",
              all.size());
  std::printf("%-8s %12s %12s %12s %12s %14s\n", "type", "quant 1T", "quant NT", "dequant 1T", "dequant NT",
              "1 GB quant NT");
  std::printf("%-8s %12s %12s %12s %12s %14s\n", "", "MB/s", "MB/s", "MB/s", "MB/s", "seconds");
  for (GgmlType type : opt.types) {
    std::vector<uint8_t> dst(static_cast<size_t>(mtp::row_size(type, kRowLength) * n_rows));
    double t[4];
    t[0] = seconds(
        [&] { check(mtp::quantize_tensor(&single, type, src.data(), dst.data(), n_rows, kRowLength, qw)); });
    t[1] = seconds(
        [&] { check(mtp::quantize_tensor(&all, type, src.data(), dst.data(), n_rows, kRowLength, qw)); });
    t[2] = seconds(
        [&] { check(mtp::dequantize_tensor(&single, type, dst.data(), back.data(), n_rows, kRowLength)); });
    t[3] = seconds(
        [&] { check(mtp::dequantize_tensor(&all, type, dst.data(), back.data(), n_rows, kRowLength)); });
    std::printf("%-8s %12.1f %12.1f %12.1f %12.1f %14.1f\n", std::string(mtp::type_name(type)).c_str(),
                input_mb / t[0], input_mb / t[1], input_mb / t[2], input_mb / t[3],
                1000.0 / (input_mb / t[1]));
    std::fflush(stdout);
  }
  return 0;
}
