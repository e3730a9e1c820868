// Summary statistics of a sample, as the report states them.
#pragma once

#include <cstddef>
#include <vector>

namespace mtp::loadgen {

// The p-th percentile (0..100) with linear interpolation between order statistics (numpy's default, as vLLM
// uses): rank p/100*(n-1) of the sorted values. `sorted` must be sorted and non-empty.
double percentile(const std::vector<double>& sorted, double p);

// The median (the 50th percentile as above) of a non-empty sample.
double median(std::vector<double> values);

struct Dist {
  size_t n = 0;  // when 0 the rest is meaningless
  double mean = 0, std = 0, median = 0, p90 = 0, p99 = 0, max = 0;
};

// std is the population standard deviation (numpy's default ddof=0, as vLLM).
Dist summarize(std::vector<double> values);

}  // namespace mtp::loadgen
