// Perplexity and KL-divergence statistics over scored positions, defined as llama-perplexity defines them
// (tools/perplexity/perplexity.cpp): means with the standard error of the mean, PPL = exp(mean NLL) with its
// error carried through exp, the ln PPL ratio's error with the covariance of the two NLLs, KLD percentiles by
// linear interpolation, and the same-top-token rate with its binomial error. Added here: the same figures per
// context depth (the scored half of a chunk split into equal ranges of positions).
#pragma once

#include <cstdint>
#include <vector>

#include "eval/kld_file.h"

namespace mtp::eval {

struct Estimate {
  double value = 0;
  double err = 0;  // one standard error
};

// Mean and standard error of the mean from a sum, a sum of squares and a count (error 0 for 10 values or
// fewer, as llama.cpp).
Estimate mean_and_error(double sum, double sum2, int64_t count);

// Perplexity alone: exp of the mean negative log-likelihood.
struct PplAccumulator {
  double sum_nll = 0, sum_nll2 = 0;
  int64_t count = 0;
  void add(double nll) {
    sum_nll += nll;
    sum_nll2 += nll * nll;
    ++count;
  }
  Estimate ppl() const;
};

// Scored positions at context depths [first_depth, last_depth]: the depth of position p is p + 1, the tokens
// the prediction of token p + 1 sees.
struct DepthBucket {
  int64_t first_depth = 0, last_depth = 0;
  int64_t tokens = 0;
  double kld_mean = 0;
  double same_top_rate = 0;
  double ln_ppl_ratio = 0;
};

struct KldSummary {
  int64_t scored = 0;
  Estimate ppl, ppl_base, ln_ppl_ratio, ppl_ratio;
  double ppl_correlation = 0;  // of the two NLLs
  Estimate kld;                // the mean KLD
  double kld_min = 0, kld_p01 = 0, kld_p05 = 0, kld_p10 = 0, kld_median = 0, kld_p90 = 0, kld_p95 = 0,
         kld_p99 = 0, kld_p999 = 0, kld_max = 0;
  int64_t same_top = 0;
  Estimate same_top_rate;
  Estimate delta_p_rms;  // root mean square of p(next) - p_base(next)
  std::vector<DepthBucket> depth;
};

class KldAccumulator {
 public:
  // Positions n_ctx/2 .. n_ctx-2 of each chunk are scored; they are split into `depth_buckets` ranges.
  KldAccumulator(int64_t n_ctx, int depth_buckets);
  void add(const TokenComparison& t, int64_t pos);
  int64_t count() const { return static_cast<int64_t>(kld_values_.size()); }
  KldSummary summary() const;

 private:
  struct Sums {
    double nll = 0, nll2 = 0, nll_base = 0, nll_base2 = 0, nll_nll_base = 0, kld = 0, kld2 = 0;
    double p_diff2 = 0, p_diff4 = 0;
    int64_t same_top = 0, count = 0;
    void add(const TokenComparison& t);
  };
  int64_t first_ = 0, scored_per_chunk_ = 0;
  Sums all_;
  std::vector<Sums> buckets_;
  std::vector<float> kld_values_;
};

}  // namespace mtp::eval
