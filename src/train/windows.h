// Token windows of a training stream, shared by the trainer and distill-head (libtorch; private to
// src/train).
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace mtp::train {

// Gradients are clipped to this global norm.
inline constexpr double kClipNorm = 1.0;

// `batch` windows of `seq_len` tokens at random offsets of `stream` [N]: [batch, seq_len].
inline torch::Tensor random_windows(const torch::Tensor& stream, int64_t batch, int64_t seq_len,
                                    at::Generator& gen) {
  const torch::Tensor begin = torch::randint(stream.size(0) - seq_len + 1, {batch, 1}, gen,
                                             torch::TensorOptions().dtype(torch::kInt64));
  const torch::Tensor offsets = torch::arange(seq_len, torch::kInt64);
  return stream.index_select(0, (begin + offsets).reshape({-1})).view({batch, seq_len});
}

// Evaluation windows: `max_windows` (0: all) of the stream's non-overlapping windows, evenly spaced, in
// batches of up to `batch` windows, each [b, seq_len].
inline std::vector<torch::Tensor> spread_windows(const torch::Tensor& stream, int64_t seq_len, int64_t batch,
                                                 int64_t max_windows) {
  const int64_t available = stream.size(0) / seq_len;
  const int64_t n = max_windows > 0 ? std::min(available, max_windows) : available;
  std::vector<torch::Tensor> batches;
  for (int64_t i = 0; i < n; i += batch) {
    std::vector<torch::Tensor> windows;
    for (int64_t w = i; w < std::min(n, i + batch); ++w) {
      const int64_t start = (w * available / n) * seq_len;
      windows.push_back(stream.slice(0, start, start + seq_len));
    }
    batches.push_back(torch::stack(windows));
  }
  return batches;
}

}  // namespace mtp::train
