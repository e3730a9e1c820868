// Small helpers shared by the benchmark programs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"

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

// STREAM "copy" bandwidth: b = a over n_floats floats, split among the pool's threads (nullptr: one thread),
// best of 5. GB/s counting bytes read + written, as STREAM does.
inline double stream_copy_gbs(ThreadPool* pool, int64_t n_floats = int64_t{128} << 20) {
  std::vector<float> a(static_cast<size_t>(n_floats), 1.0f), b(static_cast<size_t>(n_floats), 0.0f);
  const int n_threads = pool != nullptr ? pool->size() : 1;
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    auto body = [&](size_t t, int) {
      const int64_t chunk = n_floats / n_threads;
      const int64_t begin = static_cast<int64_t>(t) * chunk;
      const int64_t end = t + 1 == static_cast<size_t>(n_threads) ? n_floats : begin + chunk;
      std::memcpy(b.data() + begin, a.data() + begin, static_cast<size_t>(end - begin) * 4);
    };
    if (pool != nullptr) {
      pool->parallel_for(static_cast<size_t>(n_threads), body);
    } else {
      body(0, 0);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(n_floats) * 4 / best / 1e9;
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

// Read-only streaming bandwidth: n_bytes split among the pool's threads, each scanned by a loop of nothing
// but wide loads (xor_lines), as one stream or (two_streams, AVX-512) as two, best of 5. The better of the
// two is the ceiling of what decode, which only reads weights, could reach: on one core it is well under a
// copy's read + write rate (and glibc's memchr, used here before, reads some 25% slower still).
inline double stream_read_gbs(ThreadPool* pool, int64_t n_bytes = int64_t{1} << 30,
                              bool two_streams = false) {
  const int n_threads = pool != nullptr ? pool->size() : 1;
  const int64_t chunk = n_bytes / n_threads / 512 * 512;
  unsigned char* a =
      static_cast<unsigned char*>(std::aligned_alloc(64, static_cast<size_t>(chunk * n_threads)));
  std::memset(a, 0, static_cast<size_t>(chunk * n_threads));
  std::vector<uint64_t> found(static_cast<size_t>(n_threads));
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    auto body = [&](size_t t, int) {
      found[t] = xor_lines(a + static_cast<int64_t>(t) * chunk, chunk, two_streams);
    };
    if (pool != nullptr) {
      pool->parallel_for(static_cast<size_t>(n_threads), body);
    } else {
      body(0, 0);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::free(a);
  for (uint64_t f : found)
    if (f != 0) return 0;  // cannot happen: the buffer is all zeros
  return static_cast<double>(chunk * n_threads) / best / 1e9;
}

}  // namespace mtp::bench
