// Token sampling from one row of logits: greedy, or seeded top-k / top-p / temperature sampling that gives
// the same tokens for the same seed on every platform (the generator and the arithmetic are spelled out here,
// not left to std:: distributions).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "base/option_range.h"
#include "base/status.h"

namespace mtp {

struct SamplerOptions {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 40;        // <= 0: all tokens
  float top_p = 0.95f;       // >= 1: no nucleus cut
  float min_p = 0.0f;        // keep tokens with probability >= min_p x the top one's; <= 0: no cut
  uint64_t seed = 0;
  // Penalties on the tokens of the window (the last repeat_last_n generated tokens; -1: all of them, 0:
  // none), llama.cpp's rule: a token that occurs c > 0 times there has its logit divided by repeat_penalty
  // when positive (multiplied when not), then lowered by c * frequency_penalty + presence_penalty.
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t repeat_last_n = 64;
  // Added to the logits of these token ids before anything else (-infinity: never sampled).
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool penalizes() const {
    return repeat_last_n != 0 &&
           (repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f);
  }
  // Whether sampling looks at anything beyond the logits themselves.
  bool modifies_logits() const { return penalizes() || !logit_bias.empty(); }
};

// The ranges of the sampling options (request fields and command-line flags alike).
namespace sampling_range {
inline constexpr OptionRange kTemperature{0, 100};
inline constexpr OptionRange kTopP{0, 1, true};
inline constexpr OptionRange kMinP{0, 1};
inline constexpr OptionRange kPresencePenalty{-2, 2};
inline constexpr OptionRange kFrequencyPenalty{-2, 2};
inline constexpr OptionRange kRepeatPenalty{0, 100, true};
inline constexpr int32_t kRepeatLastNMin = -1;  // -1: the whole generation
}  // namespace sampling_range

// Every option of `o` against its range; logit_bias ids against [0, n_vocab) when n_vocab > 0 (a command
// line checks before the model, and so the vocabulary, is loaded).
Status check_sampler_options(const SamplerOptions& o, int64_t n_vocab);

// llama.cpp's default chain order for these stages: logit bias, penalties, top-k, then top-p over the softmax
// of those logits, then min-p, then temperature, then a draw from the renormalised distribution. Greedy
// decoding takes the argmax after bias and penalties.
class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options) : opt_(options), state_(options.seed) {}

  // `generated`: the request's tokens so far (the penalties look at its last repeat_last_n).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> generated = {});
  // The logits after bias and penalties (what sample draws from), into out.
  void adjust(std::span<const float> logits, std::span<const int32_t> generated,
              std::vector<float>& out) const;
  bool greedy() const { return opt_.temperature <= 0.0f; }
  // What sample() draws from: its candidate token ids and their probabilities (summing to 1; greedy: the
  // argmax alone, probability 1).
  void distribution(std::span<const float> logits, std::span<const int32_t> generated,
                    std::vector<int32_t>& ids, std::vector<double>& probs) const;
  // A uniform draw in [0, 1) from the sampler's generator (an acceptance test of speculative sampling).
  double uniform() { return next_uniform(); }
  // A draw from `ids` in proportion to `weights` (not necessarily normalised), by the inverse CDF.
  int32_t draw_weighted(std::span<const int32_t> ids, std::span<const double> weights);

  // Index of the largest value, lowest index on ties.
  static int32_t argmax(std::span<const float> logits);

 private:
  double next_uniform();  // [0, 1) from splitmix64
  int32_t draw(std::span<const float> logits);
  // The candidates after top-k, top-p and min-p, in draw order, with their softmax weights at the
  // temperature (unnormalised); returns the weights' sum.
  double candidates(std::span<const float> logits, std::vector<int32_t>& ids,
                    std::vector<double>& weights) const;

  SamplerOptions opt_;
  uint64_t state_;
};

}  // namespace mtp
