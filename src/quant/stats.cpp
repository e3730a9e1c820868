#include "quant/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mtp {

double rmse(const float* ref, const float* test, int64_t n) {
  if (n <= 0) return 0.0;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(ref[i]) - static_cast<double>(test[i]);
    sum += e * e;
  }
  return std::sqrt(sum / static_cast<double>(n));
}

double max_abs_error(const float* ref, const float* test, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::fabs(static_cast<double>(ref[i]) - static_cast<double>(test[i]));
    if (e > worst || std::isnan(e)) worst = e;
    if (std::isnan(worst)) return worst;
  }
  return worst;
}

namespace {

// log(sum exp(x_i)), shifted by the maximum. -Inf if every logit is -Inf.
double log_sum_exp(const float* x, int64_t n) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, static_cast<double>(x[i]));
  if (std::isinf(max)) return max;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  return max + std::log(sum);
}

}  // namespace

double kl_divergence_from_logits(const float* logits_p, const float* logits_q, int64_t n) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(logits_p[i]) || std::isnan(logits_q[i])) return kNaN;
  }
  const double lse_p = log_sum_exp(logits_p, n);
  const double lse_q = log_sum_exp(logits_q, n);
  if (!std::isfinite(lse_p) || !std::isfinite(lse_q)) return kNaN;  // +Inf logits, or nothing but -Inf
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double log_p = static_cast<double>(logits_p[i]) - lse_p;
    if (std::isinf(log_p)) continue;  // P_i = 0
    const double log_q = static_cast<double>(logits_q[i]) - lse_q;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  // Rounding can leave a tiny negative value for identical distributions; KL is never negative.
  return std::max(kl, 0.0);
}

void ErrorAccumulator::add(const float* ref, const float* test, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref[i];
    const double e = r - static_cast<double>(test[i]);
    sum_sq_err_ += e * e;
    sum_sq_ref_ += r * r;
    max_abs_ = std::max(max_abs_, std::fabs(e));
  }
  count_ += std::max<int64_t>(n, 0);
}

double ErrorAccumulator::rmse() const {
  return count_ > 0 ? std::sqrt(sum_sq_err_ / static_cast<double>(count_)) : 0.0;
}

double ErrorAccumulator::relative_rmse() const {
  return sum_sq_ref_ > 0 ? std::sqrt(sum_sq_err_ / sum_sq_ref_) : 0.0;
}

}  // namespace mtp
