// Small helpers shared by the benchmark programs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"

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

// Read-only streaming bandwidth: n_bytes split among the pool's threads, each scanned by glibc's memchr for a
// byte that is not there (its SIMD loop reads at the memory's pace), best of 5. Decode only reads weights,
// and one core's reads alone reach well under a copy's read + write rate.
inline double stream_read_gbs(ThreadPool* pool, int64_t n_bytes = int64_t{1} << 30) {
  std::vector<unsigned char> a(static_cast<size_t>(n_bytes), 0);
  const int n_threads = pool != nullptr ? pool->size() : 1;
  const int64_t chunk = n_bytes / n_threads;
  std::vector<const void*> found(static_cast<size_t>(n_threads));
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    auto body = [&](size_t t, int) {
      found[t] = std::memchr(a.data() + static_cast<int64_t>(t) * chunk, 1, static_cast<size_t>(chunk));
    };
    if (pool != nullptr) {
      pool->parallel_for(static_cast<size_t>(n_threads), body);
    } else {
      body(0, 0);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (const void* f : found)
    if (f != nullptr) return 0;  // cannot happen: the buffer holds no 1
  return static_cast<double>(chunk * n_threads) / best / 1e9;
}

}  // namespace mtp::bench
