// Small helpers shared by the benchmark programs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/ceiling.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mtp::bench {

// "1,2,4" -> {1, 2, 4}
inline std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::stoll(item));
  return v;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// XOR of every 64-byte line of [p, p + n) (n a multiple of 512), four independent registers: a loop that
// does nothing but load, at the widest width the CPU has. With kStreams = 2 the two halves are read at once,
// a line of each in turn: one core's prefetchers keep more lines in flight for two streams than for one (an
// Intel Xeon host, two threads: 30 -> 35 GB/s).
template <int kStreams>
__attribute__((target("avx512f"))) inline uint64_t xor_lines_avx512(const unsigned char* p, int64_t n) {
  static_assert(kStreams == 1 || kStreams == 2);
  const int64_t part = n / kStreams;
  __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
  // Line k of a step: stream k % kStreams, offset 64 * (k / kStreams) in that stream's 256 / kStreams bytes.
  for (int64_t i = 0; i < part; i += 256 / kStreams)
    for (int k = 0; k < 4; ++k)
      acc[k] =
          _mm512_xor_si512(acc[k], _mm512_load_si512(p + (k % kStreams) * part + i + 64 * (k / kStreams)));
  alignas(64) uint64_t x[8];
  _mm512_store_si512(x, _mm512_or_si512(_mm512_or_si512(acc[0], acc[1]), _mm512_or_si512(acc[2], acc[3])));
  return x[0] | x[1] | x[2] | x[3] | x[4] | x[5] | x[6] | x[7];
}
__attribute__((target("avx2"))) inline uint64_t xor_lines_avx2(const unsigned char* p, int64_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (int64_t i = 0; i < n; i += 128) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i x = _mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, d));
  return static_cast<uint64_t>(_mm256_extract_epi64(x, 0) | _mm256_extract_epi64(x, 1) |
                               _mm256_extract_epi64(x, 2) | _mm256_extract_epi64(x, 3));
}
#endif

inline uint64_t xor_lines(const unsigned char* p, int64_t n, bool two_streams = false) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx512f"))
    return two_streams ? xor_lines_avx512<2>(p, n) : xor_lines_avx512<1>(p, n);
  if (__builtin_cpu_supports("avx2")) return xor_lines_avx2(p, n);
#endif
  uint64_t x = 0;
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    x |= v;
  }
  return x;
}

// Memory-bandwidth probes over buffers kept between calls, one pass per call, so that a benchmark can put a
// probe beside each slice of the work it measures and pair the two: on a shared machine the bandwidth moves
// by 10-40% within a minute, and a figure taken once, before the work, says little about the seconds after.
class BandwidthProbe {
 public:
  // bytes: the size of the read-only buffer and of each of the copy's two arrays, split among the pool's
  // threads (nullptr: one thread).
  explicit BandwidthProbe(ThreadPool* pool, int64_t bytes = int64_t{1} << 30)
      : pool_(pool), n_threads_(pool != nullptr ? pool->size() : 1), chunk_(bytes / n_threads_ / 512 * 512) {
    const size_t n = static_cast<size_t>(chunk_ * n_threads_);
    for (unsigned char*& p : buf_) {
      p = static_cast<unsigned char*>(std::aligned_alloc(64, n));
      std::memset(p, 0, n);
    }
    found_.resize(static_cast<size_t>(n_threads_));
  }
  ~BandwidthProbe() {
    for (unsigned char* p : buf_) std::free(p);
  }
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  // STREAM "copy": one array into the other, GB/s counting bytes read + written, as STREAM does.
  double copy_gbs() {
    return 2.0 * bytes() / timed([&](size_t t) {
             const int64_t off = static_cast<int64_t>(t) * chunk_;
             std::memcpy(buf_[1] + off, buf_[0] + off, static_cast<size_t>(chunk_));
           });
  }
  // Read-only: each thread's share scanned by a loop of nothing but wide loads (xor_lines), as one stream or
  // (two_streams, AVX-512) two. The better of the two is the ceiling of what decode, which only reads
  // weights, could reach: on one core it is well under a copy's read + write rate (and glibc's memchr, used
  // here before, reads some 25% slower still).
  double read_gbs(bool two_streams = false) {
    const double s = timed([&](size_t t) {
      found_[t] = xor_lines(buf_[0] + static_cast<int64_t>(t) * chunk_, chunk_, two_streams);
    });
    for (uint64_t f : found_)
      if (f != 0) return 0;  // cannot happen: the buffer is all zeros
    return bytes() / s;
  }

 private:
  double bytes() const { return static_cast<double>(chunk_ * n_threads_); }
  // Seconds of one pass of body over the threads, divided by 1e9 (so that bytes / it is GB/s).
  template <typename Body>
  double timed(Body body) {
    const auto t0 = std::chrono::steady_clock::now();
    if (pool_ != nullptr) {
      pool_->parallel_for(static_cast<size_t>(n_threads_), [&](size_t t, int) { body(t); });
    } else {
      body(0);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e9;
  }

  ThreadPool* pool_;
  int n_threads_;
  int64_t chunk_;
  unsigned char* buf_[2] = {nullptr, nullptr};
  std::vector<uint64_t> found_;
};

// STREAM copy bandwidth, best of 5 passes of a probe of `bytes` per array (see BandwidthProbe).
inline double stream_copy_gbs(ThreadPool* pool, int64_t bytes = int64_t{512} << 20) {
  BandwidthProbe probe(pool, bytes);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) best = std::max(best, probe.copy_gbs());
  return best;
}

// The level's int8 multiply-add ceiling (kernels/ceiling.h) on `threads` threads at once, one probe each, the
// rates added: what a compute-bound prompt pass is measured against.
inline kernels::MaddCeiling madd_ceiling(int threads, double seconds = 0.2) {
  std::vector<kernels::MaddCeiling> each(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t)
    workers.emplace_back([&each, t, seconds] { each[t] = kernels::int8_madd_ceiling(seconds); });
  each[0] = kernels::int8_madd_ceiling(seconds);
  for (std::thread& w : workers) w.join();
  kernels::MaddCeiling all = each[0];
  for (int t = 1; t < threads; ++t) all.macs_per_second += each[t].macs_per_second;
  return all;
}

}  // namespace mtp::bench
