#include "quant/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace mtp {
namespace {

TEST(Stats, RmseAndMaxAbsError) {
  const float ref[] = {1, 2, 3, 4};
  const float test[] = {1, 2, 5, 3};
  EXPECT_DOUBLE_EQ(rmse(ref, test, 4), std::sqrt(5.0 / 4.0));
  EXPECT_DOUBLE_EQ(max_abs_error(ref, test, 4), 2.0);
  EXPECT_EQ(rmse(ref, ref, 4), 0.0);
  EXPECT_EQ(rmse(ref, test, 0), 0.0);
  EXPECT_EQ(max_abs_error(ref, test, 0), 0.0);
  const float nan_row[] = {1, std::numeric_limits<float>::quiet_NaN(), 3, 4};
  EXPECT_TRUE(std::isnan(max_abs_error(ref, nan_row, 4)));

  ErrorAccumulator acc;
  acc.add(ref, test, 2);
  acc.add(ref + 2, test + 2, 2);
  EXPECT_EQ(acc.count(), 4);
  EXPECT_DOUBLE_EQ(acc.rmse(), std::sqrt(5.0 / 4.0));
  EXPECT_DOUBLE_EQ(acc.max_abs_error(), 2.0);
  EXPECT_DOUBLE_EQ(acc.relative_rmse(), std::sqrt(5.0 / 30.0));
}

TEST(Stats, KlDivergenceKnownValues) {
  // Identical rows, and rows that differ by a constant shift (softmax is shift invariant): 0.
  const float a[] = {0.5f, -1.0f, 2.0f, 0.0f};
  const float shifted[] = {10.5f, 9.0f, 12.0f, 10.0f};
  EXPECT_NEAR(kl_divergence_from_logits(a, a, 4), 0.0, 1e-15);
  EXPECT_NEAR(kl_divergence_from_logits(a, shifted, 4), 0.0, 1e-12);

  // P = (1/2, 1/2), Q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
  const float p[] = {0.0f, 0.0f};
  const float q[] = {0.0f, static_cast<float>(std::log(3.0))};
  EXPECT_NEAR(kl_divergence_from_logits(p, q, 2), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-7);

  // Large logits do not overflow: P ~ (1, e^-1000), Q ~ (e^-1000, 1); KL ~ 1000.
  const float big_p[] = {1000.0f, 0.0f};
  const float big_q[] = {0.0f, 1000.0f};
  EXPECT_NEAR(kl_divergence_from_logits(big_p, big_q, 2), 1000.0, 1e-9);

  // A masked token in P contributes nothing; a token P needs but Q masks gives +Inf.
  const float inf = std::numeric_limits<float>::infinity();
  const float masked_p[] = {0.0f, -inf, 0.0f};
  const float open_q[] = {0.0f, 5.0f, 0.0f};
  // P = (1/2, 0, 1/2), Q = (1, e^5, 1) / (2 + e^5): KL = ln(1/2) + ln(2 + e^5).
  const double expected = std::log(0.5) + std::log(2.0 + std::exp(5.0));
  EXPECT_NEAR(kl_divergence_from_logits(masked_p, open_q, 3), expected, 1e-12);
  EXPECT_TRUE(std::isinf(kl_divergence_from_logits(open_q, masked_p, 3)));
  const float nan_row[] = {0.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f};
  EXPECT_TRUE(std::isnan(kl_divergence_from_logits(nan_row, open_q, 3)));
}

}  // namespace
}  // namespace mtp
