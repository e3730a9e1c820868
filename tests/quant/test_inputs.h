// Inputs shared by the quant tests: the exact inputs of the ggml-made vectors (docs/formats.md 5.2, 5.3) and
// seeded Gaussian rows, plus a helper that quantizes into a byte vector.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "quant/quantize.h"

namespace mtp::test {

// S1: x_i = (i - 16) * 0.125, i = 0..31.
inline std::vector<float> spec_s1() {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16) * 0.125f;
  return x;
}

// S2: x_i = ((37 i) mod 64 - 32) / 16, i = 0..255.
inline std::vector<float> spec_s2() {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>((i * 37) % 64 - 32) / 16.0f;
  return x;
}

// W2: qw_i = 1 + (i mod 3).
inline std::vector<float> spec_w2() {
  std::vector<float> w(256);
  for (int i = 0; i < 256; ++i) w[i] = static_cast<float>(1 + i % 3);
  return w;
}

// G(seed, n): 64-bit LCG, top 24 bits mapped exactly onto [-2, 2).
inline std::vector<float> spec_generator(uint64_t seed, int n) {
  std::vector<float> x(n);
  uint64_t s = seed;
  for (int i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t r = static_cast<int64_t>(s >> 40);
    x[i] = static_cast<float>(r - 8388608) / 4194304.0f;
  }
  return x;
}

// T: 4 rows x 512 with edge cases (5.3), row-major.
inline std::vector<float> spec_tensor_t() {
  constexpr int kCols = 512;
  std::vector<float> t;
  t.reserve(4 * kCols);
  std::vector<float> row0 = spec_generator(1, kCols);
  std::vector<float> row1 = spec_generator(2, kCols);
  for (int i = 0; i < kCols; i += 37) row1[i] *= 8;
  std::vector<float> row2 = spec_generator(3, kCols);
  for (int i = 0; i < 32; ++i) {
    row2[i] = 0;
    row2[32 + i] = 1e-30f;
    row2[64 + i] = 0.5f;
    row2[96 + i] = -0.25f;
  }
  row2[128] = 100;
  std::vector<float> row3 = spec_generator(4, kCols);
  for (int i = 0; i < kCols; ++i) row3[i] = i >= 256 ? 0.0f : row3[i] * 0x1.0p-10f;
  for (const auto* row : {&row0, &row1, &row2, &row3}) t.insert(t.end(), row->begin(), row->end());
  return t;
}

// imatrix for T: qw_j = 1 + (j mod 5) * 0.5.
inline std::vector<float> spec_imatrix_t() {
  std::vector<float> w(512);
  for (int j = 0; j < 512; ++j) w[j] = 1.0f + static_cast<float>(j % 5) * 0.5f;
  return w;
}

// Seeded standard normal values (Box-Muller over a 64-bit LCG), identical on every platform's libm up to
// ulps.
inline std::vector<float> gaussian(uint64_t seed, int64_t n, float sigma = 1.0f) {
  std::vector<float> x(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto uniform = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<double>(s >> 11) + 0.5) / 9007199254740992.0;  // (0, 1)
  };
  for (int64_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 6.283185307179586 * uniform();
    x[i] = static_cast<float>(r * std::cos(angle)) * sigma;
    if (i + 1 < n) x[i + 1] = static_cast<float>(r * std::sin(angle)) * sigma;
  }
  return x;
}

// Quantizes n_rows x n_per_row through the checked API; fails the calling test on error.
std::vector<uint8_t> quantize_bytes(GgmlType type, const std::vector<float>& src, int64_t n_rows,
                                    const float* imatrix = nullptr, ThreadPool* pool = nullptr);
std::vector<float> dequantize_floats(GgmlType type, const std::vector<uint8_t>& bytes, int64_t n_rows,
                                     int64_t n_per_row);

}  // namespace mtp::test
