// The divergence distill-head trains and reports with (distill.cpp), in libtorch.
#pragma once

#include <torch/types.h>

namespace mtp::train {

// KL(p || q) per row over the vocabulary: log-probabilities logp, logq [..., V] -> [...].
torch::Tensor kl_full(const torch::Tensor& logp, const torch::Tensor& logq);

// KL(p || q) with only p's top K tokens known (ids and their log-probabilities under the full softmax,
// [..., K]) and q in full ([..., V]): over the K tokens and one more outcome, "any other token", holding the
// rest of each distribution's mass. That is the KL of the two distributions with the other tokens merged, so
// never more than the whole KL, equal to it when K is the vocabulary, and zero only where q matches p on the
// K and on the rest's total.
torch::Tensor kl_top_k(const torch::Tensor& top_logp, const torch::Tensor& top_ids,
                       const torch::Tensor& logq);

}  // namespace mtp::train
