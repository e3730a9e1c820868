// The fast forms of the hot loops (table lookup for BI, trial-parallel SIMD searches) against their literal,
// one-after-another definitions (ggml's, docs/formats.md 3.0). The ggml-made vectors cover them end to end;
// these tests cover many more inputs, including the trial-restart path of the asymmetric search.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "scale_search.h"
#include "test_inputs.h"

namespace mtp::quant_detail {
namespace {

TEST(SearchInternals, Iq4IndexTableMatchesBinarySearch) {
  // Every float near each half-integer cell boundary (where a table could go wrong), plus a wide sample.
  for (int c = 2 * -130; c <= 2 * 116; ++c) {
    const float boundary = static_cast<float>(c) * 0.5f;
    float below = boundary, above = boundary;
    for (int step = 0; step < 64; ++step) {
      ASSERT_EQ(best_iq4_index(below), best_iq4_index_by_search(below)) << below;
      ASSERT_EQ(best_iq4_index(above), best_iq4_index_by_search(above)) << above;
      below = std::nextafter(below, -1e9f);
      above = std::nextafter(above, 1e9f);
    }
  }
  for (uint32_t bits = 0; bits < 0xFFFFFFFFu - 9973u; bits += 9973u) {
    const float v = std::bit_cast<float>(bits);
    if (std::isnan(v)) continue;
    ASSERT_EQ(best_iq4_index(v), best_iq4_index_by_search(v)) << v;
  }
  EXPECT_EQ(best_iq4_index(0.0f), 8);
  EXPECT_EQ(best_iq4_index(std::nanf("")), 15);
  EXPECT_EQ(best_iq4_index(-1e30f), 0);
  EXPECT_EQ(best_iq4_index(1e30f), 15);
}

TEST(SearchInternals, RoundAwayMatchesRoundf) {
  for (uint32_t bits = 0; bits < 0xFFFFFFFFu - 7919u; bits += 7919u) {
    const float v = std::bit_cast<float>(bits);
    ASSERT_EQ(round_away_to_int8(v), truncate_to_int8(std::round(v))) << v;
  }
  for (int k = -600; k <= 600; ++k) {
    const float half = static_cast<float>(k) * 0.5f;
    for (float v : {half, std::nextafter(half, -1e9f), std::nextafter(half, 1e9f)}) {
      ASSERT_EQ(round_away_to_int8(v), truncate_to_int8(std::round(v))) << v;
    }
  }
}

TEST(SearchInternals, Iq4CandidateSumsMatchScalar) {
  const std::vector<float> x = test::gaussian(21, 32 * 400, 2.0f);
  const std::vector<float> noise = test::gaussian(22, 32 * 400);
  for (int b = 0; b < 400; ++b) {
    const float* xb = x.data() + 32 * b;
    float w[32];
    for (int j = 0; j < 32; ++j) w[j] = b % 2 ? xb[j] * xb[j] : std::fabs(noise[32 * b + j]) + 0.1f;
    const MaxAbs m = arg_max_abs(xb, 32);
    float inverse_scales[kIq4Candidates];
    inverse_scales[0] = 1 / (-m.max / -127.0f);
    for (int k = 1; k < kIq4Candidates; ++k) inverse_scales[k] = static_cast<float>(k - 8 - 127) / m.max;
    float a_qx[kIq4Candidates], a_q2[kIq4Candidates], b_qx[kIq4Candidates], b_q2[kIq4Candidates];
    iq4_candidate_sums(xb, w, inverse_scales, a_qx, a_q2);
    iq4_candidate_sums_scalar(xb, w, inverse_scales, b_qx, b_q2);
    ASSERT_EQ(std::memcmp(a_qx, b_qx, sizeof(a_qx)), 0) << "block " << b;
    ASSERT_EQ(std::memcmp(a_q2, b_q2, sizeof(a_q2)), 0) << "block " << b;
  }
}

TEST(SearchInternals, AsymmetricSearchMatchesScalar) {
  // Q4_K, Q5_K, their imatrix variants, and Q2_K's two (the first with absolute errors).
  const AmsParams kParams[] = {{15, -1.0f, 0.1f, 20},  {31, -0.5f, 0.1f, 15},      {15, -0.9f, 0.05f, 36},
                               {31, -0.9f, 0.05f, 36}, {3, -0.5f, 0.1f, 15, true}, {3, -0.9f, 0.05f, 36}};
  const std::vector<float> x = test::gaussian(31, 32 * 500);
  for (const AmsParams& p : kParams) {
    for (int b = 0; b < 500; ++b) {
      float xb[32], w[32];
      for (int i = 0; i < 32; ++i) {
        // Vary the distributions: shifted (all-positive), skewed, sparse, and plain.
        const float v = x[32 * b + i];
        xb[i] = b % 4 == 0 ? v + 3.0f : b % 4 == 1 ? v * v * v : (b % 4 == 2 && i % 5 != 0) ? 0.0f : v;
        w[i] = b % 3 == 0 ? 1.0f + std::fabs(xb[i]) : 0.5f + static_cast<float>(i % 7);
      }
      uint8_t l_fast[32], l_ref[32], aux[32];
      float min_fast = -1, min_ref = -2;
      const int n = p.nmax == 3 ? 16 : 32;
      const float s_fast = asymmetric_scale_search(n, xb, w, l_fast, &min_fast, aux, p);
      const float s_ref = asymmetric_scale_search_scalar(n, xb, w, l_ref, &min_ref, aux, p);
      ASSERT_EQ(std::bit_cast<uint32_t>(s_fast), std::bit_cast<uint32_t>(s_ref)) << "block " << b;
      ASSERT_EQ(std::bit_cast<uint32_t>(min_fast), std::bit_cast<uint32_t>(min_ref)) << "block " << b;
      ASSERT_EQ(std::memcmp(l_fast, l_ref, static_cast<size_t>(n)), 0) << "block " << b;
    }
  }
}

}  // namespace
}  // namespace mtp::quant_detail
