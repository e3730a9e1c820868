// The trunk's side of distilling an MTP block (distill.cpp), computed by the inference engine on the file as
// it is (its weight types, its packed kernels: what the block will draft beside when served), so that only
// the block needs to be in libtorch: at 35B-A3B widths the trunk as f32 would take over 100 GB.
#pragma once

#include <torch/types.h>

#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/memory.h"
#include "model/model.h"

namespace mtp::train {

class TrunkTeacher {
 public:
  // The model file (loaded as `mtp run` loads it, with the MTP block of `head_path` when not empty, as
  // `--head`: the teacher never runs the block, but a caller may draft with it), `threads` for its passes,
  // windows of up to `max_tokens`.
  static Expected<TrunkTeacher> open(const std::string& path, const std::string& head_path, int threads,
                                     int64_t max_tokens);

  const Model& model() const { return *model_; }
  ThreadPool& pool() { return *pool_; }

  // Per window of tokens [B, T] (int64), each read as a sequence of its own from position 0: every row's
  // post-norm hidden [B, T, n_embd] and logits [B, T, n_vocab] (row t predicts token t + 1), float32.
  struct Signals {
    torch::Tensor hidden, logits;
  };
  Expected<Signals> run(const torch::Tensor& tokens);

  // The token embeddings (token_embd rows, dequantized) of tokens [B, T]: [B, T, n_embd], float32.
  torch::Tensor embed(const torch::Tensor& tokens) const;

  // Each window's first `keep` tokens kept, the rest replaced by what the trunk samples after them at T = 1,
  // one token at a time (`gen` draws the samples).
  Expected<torch::Tensor> continue_windows(const torch::Tensor& windows, int64_t keep, at::Generator& gen);

 private:
  TrunkTeacher() = default;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Memory> memory_;
  int32_t seq_ = 0;
};

}  // namespace mtp::train
