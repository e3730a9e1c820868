// Helpers shared by the KL-divergence base-file tests: random logits, the exact log-softmax they are checked
// against, and a refused open's message.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mtp::eval::testing {

// n_vocab logits drawn from N(0, spread / 3), reproducible from the seed.
inline std::vector<float> random_logits(int64_t n_vocab, uint64_t seed, float spread = 6.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, spread / 3);
  std::vector<float> l(static_cast<size_t>(n_vocab));
  for (float& x : l) x = d(rng);
  return l;
}

// Exact log-softmax in double.
inline std::vector<double> log_softmax(const std::vector<float>& l) {
  const double mx = *std::max_element(l.begin(), l.end());
  double sum = 0;
  for (const float x : l) sum += std::exp(x - mx);
  std::vector<double> out;
  for (const float x : l) out.push_back(x - mx - std::log(sum));
  return out;
}

// The message of File::open(path), which must fail with one line.
template <typename File>
std::string open_error(const std::string& path) {
  auto f = File::open(path);
  EXPECT_FALSE(f.ok()) << path;
  const std::string m = f.ok() ? "" : f.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  return m;
}

}  // namespace mtp::eval::testing
