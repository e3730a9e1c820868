// `mtp bench --repeat N`: each level run N times; the report states, per level, the mean over the repeats and
// a 95% confidence interval (Student t, N-1 degrees of freedom) of the figures that decide comparisons.
#pragma once

#include <string>
#include <vector>

#include "loadgen/report.h"

namespace mtp::loadgen {

// The two-sided 95% quantile of Student's t with `df` degrees of freedom (t_{0.975, df}); df >= 1.
double t975(int df);

struct Interval {
  int n = 0;  // values it is over; with fewer than 2, lo = hi = mean
  double mean = 0, lo = 0, hi = 0;
};

// mean +- t975(n-1) * s / sqrt(n), s the sample standard deviation (n-1 in the denominator).
Interval mean_interval(const std::vector<double>& values);

struct RepeatSummary {
  int concurrency = 0;
  double rate = 0;
  std::string server;                 // with --baseline
  Interval output_throughput;         // tok/s of each repeat's steady window
  Interval tpot_p50_ms, ttft_p50_ms;  // each repeat's median
};

// One per level, in run order, over the repeats recorded in the run's `repeat` fields; empty when the run has
// one repeat only.
std::vector<RepeatSummary> summarize_repeats(const RunData& run);

std::string markdown_repeats(const std::vector<RepeatSummary>& levels);
Json repeats_json(const std::vector<RepeatSummary>& levels);

}  // namespace mtp::loadgen
