// Token sampling from one row of logits: greedy, or seeded top-k / top-p / temperature sampling that gives
// the same tokens for the same seed on every platform (the generator and the arithmetic are spelled out here,
// not left to std:: distributions).
#pragma once

#include <cstdint>
#include <span>

namespace mtp {

struct SamplerOptions {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 40;        // <= 0: all tokens
  float top_p = 0.95f;       // >= 1: no nucleus cut
  float min_p = 0.0f;        // keep tokens with probability >= min_p x the top one's; <= 0: no cut
  uint64_t seed = 0;
};

// llama.cpp's default chain order for these stages: top-k, then top-p over the softmax of the raw logits,
// then min-p (on the raw logits), then temperature, then a draw from the renormalised distribution.
class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options) : opt_(options), state_(options.seed) {}

  int32_t sample(std::span<const float> logits);
  bool greedy() const { return opt_.temperature <= 0.0f; }

  // Index of the largest value, lowest index on ties.
  static int32_t argmax(std::span<const float> logits);

 private:
  double next_uniform();  // [0, 1) from splitmix64

  SamplerOptions opt_;
  uint64_t state_;
};

}  // namespace mtp
