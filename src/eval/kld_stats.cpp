// The statistics of kld_stats.h, with llama-perplexity's formulas.
#include "eval/kld_stats.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace mtp::eval {
namespace {

// llama.cpp's covariance of two means' estimates (0 for under 10 values).
double covariance(double sum_a, double sum_b, double sum_ab, int64_t count) {
  if (count < 10) return 0.0;
  const double n = static_cast<double>(count);
  return (sum_ab / n - (sum_a / n) * (sum_b / n)) / (n - 1);
}

// Linear interpolation between the two nearest ranks of sorted values, as llama.cpp (fraction * (n - 1) in
// float).
float percentile(const std::vector<float>& sorted, float fraction) {
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  float p = fraction * static_cast<float>(sorted.size() - 1);
  const size_t ip = static_cast<size_t>(p);
  p -= static_cast<float>(ip);
  return (1 - p) * sorted[ip] + p * sorted[std::min(ip + 1, sorted.size() - 1)];
}

float median(const std::vector<float>& sorted) {
  const size_t n = sorted.size();
  return n % 2 == 0 ? 0.5f * (sorted[n / 2] + sorted[n / 2 - 1]) : sorted[n / 2];
}

}  // namespace

Estimate mean_and_error(double sum, double sum2, int64_t count) {
  if (count < 1) return {};
  const double n = static_cast<double>(count);
  const double mean = sum / n;
  const double var = sum2 / n - mean * mean;
  return {mean, var > 0 && count > 10 ? std::sqrt(var / (n - 1)) : 0.0};
}

Estimate PplAccumulator::ppl() const {
  const Estimate log_ppl = mean_and_error(sum_nll, sum_nll2, count);
  const double v = std::exp(log_ppl.value);
  return {v, v * log_ppl.err};
}

void KldAccumulator::Sums::add(const TokenComparison& t) {
  nll += t.nll;
  nll2 += t.nll * t.nll;
  nll_base += t.nll_base;
  nll_base2 += t.nll_base * t.nll_base;
  nll_nll_base += t.nll * t.nll_base;
  kld += t.kld;
  kld2 += t.kld * t.kld;
  const double d2 = static_cast<double>(t.p_diff) * t.p_diff;
  p_diff2 += d2;
  p_diff4 += d2 * d2;
  same_top += t.same_top ? 1 : 0;
  ++count;
}

KldAccumulator::KldAccumulator(int64_t n_ctx, int depth_buckets)
    : first_(n_ctx / 2), scored_per_chunk_(kld_scored_per_chunk(n_ctx)) {
  MTP_CHECK(scored_per_chunk_ >= 1 && depth_buckets >= 1);
  buckets_.resize(static_cast<size_t>(std::min<int64_t>(depth_buckets, scored_per_chunk_)));
}

void KldAccumulator::add(const TokenComparison& t, int64_t pos) {
  const int64_t i = pos - first_;
  MTP_CHECK(i >= 0 && i < scored_per_chunk_);
  all_.add(t);
  buckets_[static_cast<size_t>(i * static_cast<int64_t>(buckets_.size()) / scored_per_chunk_)].add(t);
  kld_values_.push_back(static_cast<float>(t.kld));
}

KldSummary KldAccumulator::summary() const {
  KldSummary s;
  s.scored = all_.count;
  if (s.scored == 0) return s;
  const Estimate log_ppl = mean_and_error(all_.nll, all_.nll2, all_.count);
  const Estimate log_ppl_base = mean_and_error(all_.nll_base, all_.nll_base2, all_.count);
  s.ppl = {std::exp(log_ppl.value), std::exp(log_ppl.value) * log_ppl.err};
  s.ppl_base = {std::exp(log_ppl_base.value), std::exp(log_ppl_base.value) * log_ppl_base.err};
  const double cov = covariance(all_.nll, all_.nll_base, all_.nll_nll_base, all_.count);
  s.ppl_correlation = log_ppl.err > 0 && log_ppl_base.err > 0 ? cov / (log_ppl.err * log_ppl_base.err) : 0;
  const double ratio_var = log_ppl.err * log_ppl.err + log_ppl_base.err * log_ppl_base.err - 2.0 * cov;
  s.ln_ppl_ratio = {log_ppl.value - log_ppl_base.value, std::sqrt(std::max(0.0, ratio_var))};
  s.ppl_ratio = {std::exp(s.ln_ppl_ratio.value), std::exp(s.ln_ppl_ratio.value) * s.ln_ppl_ratio.err};
  s.kld = mean_and_error(all_.kld, all_.kld2, all_.count);
  std::vector<float> sorted = kld_values_;
  std::sort(sorted.begin(), sorted.end());
  s.kld_min = sorted.front();
  s.kld_p01 = percentile(sorted, 0.01f);
  s.kld_p05 = percentile(sorted, 0.05f);
  s.kld_p10 = percentile(sorted, 0.10f);
  s.kld_median = median(sorted);
  s.kld_p90 = percentile(sorted, 0.90f);
  s.kld_p95 = percentile(sorted, 0.95f);
  s.kld_p99 = percentile(sorted, 0.99f);
  s.kld_p999 = percentile(sorted, 0.999f);
  s.kld_max = sorted.back();
  s.same_top = all_.same_top;
  const double top = static_cast<double>(all_.same_top) / static_cast<double>(all_.count);
  s.same_top_rate = {top,
                     all_.count > 1 ? std::sqrt(top * (1 - top) / static_cast<double>(all_.count - 1)) : 0};
  const Estimate mse = mean_and_error(all_.p_diff2, all_.p_diff4, all_.count);
  const double rms = std::sqrt(mse.value);
  s.delta_p_rms = {rms, rms > 0 ? 0.5 / rms * mse.err : 0};
  const int64_t n_buckets = static_cast<int64_t>(buckets_.size());
  for (int64_t b = 0; b < n_buckets; ++b) {
    const Sums& u = buckets_[static_cast<size_t>(b)];
    DepthBucket d;
    // Scored index i (position first + i) lands in bucket i * n_buckets / scored: the smallest i of b.
    d.first_depth = first_ + (b * scored_per_chunk_ + n_buckets - 1) / n_buckets + 1;
    d.last_depth = first_ + ((b + 1) * scored_per_chunk_ + n_buckets - 1) / n_buckets;
    d.tokens = u.count;
    if (u.count > 0) {
      const double n = static_cast<double>(u.count);
      d.kld_mean = u.kld / n;
      d.same_top_rate = static_cast<double>(u.same_top) / n;
      d.ln_ppl_ratio = (u.nll - u.nll_base) / n;
    }
    s.depth.push_back(d);
  }
  return s;
}

}  // namespace mtp::eval
