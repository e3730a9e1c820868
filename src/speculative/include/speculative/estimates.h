// The drafting policy's online estimates (speculative/policy.h): what a pass of so many rows costs, and how
// likely each draft position is to be accepted.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mtp::speculative {

// The median of v's first n (1..N) values, sorted on the copy.
template <size_t N>
double median_of_first(std::array<double, N> v, size_t n) {
  std::sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds of a pass as a function of its row count, learned online: the median of recent samples per count,
// summarised by a least-squares line a + b * rows (policy.cpp says why a line) that prices the counts not
// yet measured a few times; a count measured that often is priced by its own average.
class StepCostModel {
 public:
  void observe(int64_t rows, double seconds);
  double predict(double rows) const;  // seconds; 0 before any observation
  bool has_data() const { return sizes_ > 0; }
  int64_t sizes() const { return sizes_; }      // distinct row counts measured
  int64_t samples() const { return samples_; }  // observations of any row count
  bool measured(int64_t rows) const {
    return rows >= 0 && rows < static_cast<int64_t>(cells_.size()) && cells_[static_cast<size_t>(rows)].n > 0;
  }
  // The smallest measured size above `rows`; -1 if none.
  int64_t next_measured(int64_t rows) const;
  // The largest measured size; -1 if none.
  int64_t largest_measured() const;
  static constexpr int64_t kTrustSamples = 3;
  // Measured often enough (kTrustSamples) that predict(rows) is its own median.
  bool trusted(int64_t rows) const;
  // A sample that replaces the size's earlier ones (stale: the machine's speed drifts); a trusted size stays
  // trusted, now at this price.
  void restart(int64_t rows, double seconds);
  // Drops a size's samples (prices doubted as stale): it is priced by the line over the others until measured
  // again.
  void forget(int64_t rows);
  double intercept() const { return a_; }  // seconds
  double slope() const { return b_; }      // seconds per row
  // With a single measured size: through it along `slope` (another line's) rather than its own average cost
  // per row.
  double predict_along(double rows, double slope) const;

 private:
  void fit();
  static constexpr int64_t kRecent = 5;  // samples a size's estimate is the median of
  struct Cell {
    std::array<double, kRecent> recent{};  // the last samples, as a ring
    double est = 0;                        // the estimate: median of the recent samples
    int64_t n = 0;                         // samples
  };
  std::vector<Cell> cells_;       // index: rows
  int64_t sizes_ = 0, only_ = 0;  // only_: the measured size while there is one
  int64_t samples_ = 0;
  double a_ = 0, b_ = 0;
};

// Recent acceptance per draft position (a slot's, or the whole engine's), as exponential moving averages of
// the conditional rate "position i accepted given position i-1 was".
class AcceptanceTracker {
 public:
  void observe(int64_t n_drafted, int64_t n_accepted);
  // The conditional rate at position i (0-based); the prior for positions without data.
  double rate(int32_t i) const;
  // Probability that draft position i (0-based) is accepted, i.e. the product of the first i+1 conditional
  // rates.
  double p_reach(int32_t i) const;
  // A step in which the slot did not draft: its rates drift toward `typical` (the engine-wide ones), so a
  // slot that stopped drafting after a bad stretch gets to try again later.
  void idle_step(const AcceptanceTracker& typical);
  void reset() { cond_.clear(); }

 private:
  std::vector<double> cond_;
};

}  // namespace mtp::speculative
