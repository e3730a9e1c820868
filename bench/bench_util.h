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

// Read-only streaming bandwidth: a sum over n_bytes split among the pool's threads, best of 5. Decode only
// reads weights, and one core's reads alone reach well under a copy's read + write rate.
inline double stream_read_gbs(ThreadPool* pool, int64_t n_bytes = int64_t{1} << 30) {
  const int64_t n = n_bytes / 8;
  std::vector<uint64_t> a(static_cast<size_t>(n), 1);
  const int n_threads = pool != nullptr ? pool->size() : 1;
  std::vector<uint64_t> sums(static_cast<size_t>(n_threads) * 8, 0);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    auto body = [&](size_t t, int) {
      const int64_t chunk = n / n_threads / 8 * 8, begin = static_cast<int64_t>(t) * chunk;
      uint64_t s[8] = {};
      for (int64_t i = begin; i < begin + chunk; i += 8)
        for (int k = 0; k < 8; ++k) s[k] += a[static_cast<size_t>(i + k)];
      for (int k = 0; k < 8; ++k) sums[t * 8 + k] += s[k];
    };
    if (pool != nullptr) {
      pool->parallel_for(static_cast<size_t>(n_threads), body);
    } else {
      body(0, 0);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  volatile uint64_t sink = 0;
  for (uint64_t v : sums) sink = sink + v;
  return static_cast<double>(n / n_threads / 8 * 8 * n_threads) * 8 / best / 1e9;
}

}  // namespace mtp::bench
