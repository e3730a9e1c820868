// Row-wise error statistics for quantization quality tools: RMSE and maximum absolute error between a
// reference row and its approximation, and the KL divergence between the softmax distributions of two logit
// rows. All accumulation is in double.
#pragma once

#include <cstdint>

namespace mtp {

// sqrt(mean((ref_i - test_i)^2)); 0 for n == 0.
double rmse(const float* ref, const float* test, int64_t n);

// max |ref_i - test_i|; 0 for n == 0.
double max_abs_error(const float* ref, const float* test, int64_t n);

// KL(P || Q) in nats, P = softmax(logits_p), Q = softmax(logits_q), computed with log-sum-exp in double so
// that large logits neither overflow nor lose the small probabilities. Terms with P_i = 0 contribute 0 (a
// -Inf logit is a masked token); a token with P_i > 0 but Q_i = 0 gives +Inf. NaN in either row gives NaN. n
// must be > 0.
double kl_divergence_from_logits(const float* logits_p, const float* logits_q, int64_t n);

// Accumulates squared and absolute errors over many rows (e.g. a whole tensor) in double.
class ErrorAccumulator {
 public:
  void add(const float* ref, const float* test, int64_t n);
  int64_t count() const { return count_; }
  double rmse() const;
  double max_abs_error() const { return max_abs_; }
  // RMSE divided by the RMS of the reference: scale-free, comparable across tensors. 0 if the reference is 0.
  double relative_rmse() const;

 private:
  int64_t count_ = 0;
  double sum_sq_err_ = 0;
  double sum_sq_ref_ = 0;
  double max_abs_ = 0;
};

}  // namespace mtp
