// The sampler's stages (sampler.h: top-k, then top-p over the softmax of the kept raw logits, then min-p on
// the raw logits, then temperature) against a direct computation of the distribution they define, on scripted
// logits: 40,000 seeded draws per case, their frequencies within a chi-square bound of the expected ones, and
// no draw ever outside the kept set. The draws are deterministic (the sampler's generator is spelled out), so
// the test cannot flake; a stage applied in another order, with another boundary or not at all moves the
// frequencies far past the bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/sampler.h"

namespace mtp {
namespace {

// The distribution the options define over `logits`, computed directly.
std::vector<double> expected_distribution(const std::vector<float>& logits, const SamplerOptions& o) {
  const size_t n = logits.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  size_t keep = o.top_k > 0 ? std::min(n, static_cast<size_t>(o.top_k)) : n;
  auto softmax_mass = [&](size_t i, size_t of, double temp) {  // mass of order[i] among the first `of`
    double sum = 0;
    for (size_t j = 0; j < of; ++j) sum += std::exp(logits[order[j]] / temp);
    return std::exp(logits[order[i]] / temp) / sum;
  };
  if (o.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += softmax_mass(i, keep, 1.0);
      if (cum >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (o.min_p > 0.0f) {
    const double top = softmax_mass(0, keep, 1.0);
    size_t i = 1;
    while (i < keep && softmax_mass(i, keep, 1.0) >= o.min_p * top) ++i;
    keep = i;
  }
  std::vector<double> p(n, 0.0);
  for (size_t i = 0; i < keep; ++i) p[order[i]] = softmax_mass(i, keep, o.temperature);
  return p;
}

// Draws `n` tokens and checks their frequencies against `want`: none where want is 0, and a chi-square
// statistic over the others below `bound`. With `generated`, the draws see that history and `want` is the
// distribution over the logits after bias and penalties (whose values a test of its own checks).
void expect_frequencies(const std::vector<float>& logits, const SamplerOptions& o, const char* what,
                        const std::vector<int32_t>& generated = {}) {
  std::vector<float> adjusted;
  Sampler(o).adjust(logits, generated, adjusted);
  const std::vector<double> want = expected_distribution(adjusted, o);
  constexpr int kDraws = 40000;
  std::vector<int> count(logits.size(), 0);
  Sampler s(o);
  for (int i = 0; i < kDraws; ++i) ++count[static_cast<size_t>(s.sample(logits, generated))];
  double chi2 = 0;
  int df = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (want[i] == 0) {
      EXPECT_EQ(count[i], 0) << what << ": token " << i << " is outside the kept set";
      continue;
    }
    const double e = want[i] * kDraws;
    chi2 += (count[i] - e) * (count[i] - e) / e;
    ++df;
  }
  // At most 9 degrees of freedom here: 40 is beyond the 1-in-a-million tail.
  EXPECT_LT(chi2, 40.0) << what << " (" << df << " degrees of freedom)";
}

const std::vector<float> kLogits = {1.0f, 3.0f, 0.5f, 2.5f, -1.0f, 2.0f, 0.0f, 3.0f, -0.5f, 1.5f};

TEST(SamplerSemantics, EachStageAloneMatchesItsDefinition) {
  SamplerOptions o;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.min_p = 0.0f;
  o.seed = 11;
  for (float t : {0.5f, 1.0f, 2.0f}) {
    o.temperature = t;
    expect_frequencies(kLogits, o, "temperature alone");
  }
  o.temperature = 1.0f;
  for (int k : {1, 2, 3, 5}) {  // k = 1 and 2: the tie at 3.0 goes to the lower id first
    o.top_k = k;
    expect_frequencies(kLogits, o, "top-k");
  }
  o.top_k = 0;
  for (float p : {0.3f, 0.6f, 0.9f}) {
    o.top_p = p;
    expect_frequencies(kLogits, o, "top-p");
  }
  o.top_p = 1.0f;
  for (float m : {0.1f, 0.3f, 0.7f}) {
    o.min_p = m;
    expect_frequencies(kLogits, o, "min-p");
  }
}

// The stages together, in the documented order: top-p and min-p see the raw logits (not the tempered ones)
// of what top-k kept.
TEST(SamplerSemantics, TheChainInItsOrder) {
  SamplerOptions o;
  o.seed = 5;
  o.top_k = 6;
  o.top_p = 0.8f;
  o.min_p = 0.15f;
  for (float t : {0.7f, 1.5f}) {
    o.temperature = t;
    expect_frequencies(kLogits, o, "top-k, top-p, min-p, temperature");
  }
  // A cut that a tempered top-p would place elsewhere: at temperature 3 the tempered mass of the top two is
  // about 0.33, the raw mass about 0.57, so raw top-p 0.45 keeps two and a tempered one would keep three.
  o.top_k = 0;
  o.top_p = 0.45f;
  o.min_p = 0.0f;
  o.temperature = 3.0f;
  const std::vector<double> raw_cut = expected_distribution(kLogits, o);
  EXPECT_EQ(std::count_if(raw_cut.begin(), raw_cut.end(), [](double p) { return p > 0; }), 2);
  expect_frequencies(kLogits, o, "raw top-p under a high temperature");
}

// Bias, then llama.cpp's penalty rule over the window of the last repeat_last_n generated tokens, against a
// direct computation: repeat_penalty divides a positive logit and multiplies a negative one, then
// count * frequency + presence is subtracted; tokens outside the window are untouched.
TEST(SamplerSemantics, BiasAndPenaltiesMatchTheirDefinition) {
  SamplerOptions o;
  o.repeat_penalty = 1.5f;
  o.presence_penalty = 0.25f;
  o.frequency_penalty = 0.5f;
  o.repeat_last_n = 5;
  o.logit_bias = {{0, 1.0f}, {4, -0.5f}};
  // Window: the last 5 of these: 3, 1, 4, 4, 8 (token 2 and 9 fall outside it).
  const std::vector<int32_t> generated = {2, 9, 3, 1, 4, 4, 8};
  std::vector<float> want = kLogits;
  want[0] += 1.0f;
  want[4] += -0.5f;
  auto penalize = [&](int id, int count) {
    float& l = want[static_cast<size_t>(id)];
    l = l <= 0.0f ? l * 1.5f : l / 1.5f;
    l -= count * 0.5f + 0.25f;
  };
  penalize(3, 1);
  penalize(1, 1);
  penalize(4, 2);
  penalize(8, 1);
  std::vector<float> got;
  Sampler(o).adjust(kLogits, generated, got);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "token " << i;
  // Greedy decodes the adjusted logits: 1 and 7 tie at 3.0 raw, the penalty on 1 leaves 7.
  o.temperature = 0.0f;
  EXPECT_EQ(Sampler(o).sample(kLogits, generated), 7);
  // repeat_last_n = -1 is the whole history, 0 none.
  o.repeat_last_n = 0;
  Sampler(o).adjust(kLogits, generated, got);
  EXPECT_FLOAT_EQ(got[2], kLogits[2]);
  EXPECT_FLOAT_EQ(got[0], kLogits[0] + 1.0f);  // the bias still applies
  o.repeat_last_n = -1;
  Sampler(o).adjust(kLogits, generated, got);
  EXPECT_FLOAT_EQ(got[2], kLogits[2] / 1.5f - 0.75f);
  // Sampling draws from the adjusted distribution.
  o.temperature = 1.0f;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.repeat_last_n = 5;
  expect_frequencies(kLogits, o, "bias and penalties, then temperature", generated);
}

TEST(SamplerSemantics, GreedyIsArgmaxLowestIdOnTies) {
  SamplerOptions o;
  o.temperature = 0.0f;
  Sampler s(o);
  EXPECT_EQ(s.sample(kLogits), 1);  // 3.0 at ids 1 and 7
  const std::vector<float> flat(8, 0.25f);
  EXPECT_EQ(s.sample(flat), 0);
}

}  // namespace
}  // namespace mtp
