// The drafting policy's estimates: step costs by row count, acceptance by draft position
// (speculative/estimates.h).
#include "speculative/estimates.h"

#include <algorithm>

namespace mtp::speculative {
namespace {

constexpr double kMaxCellWeight = 16;     // a batch size's weight in the fit: its samples, up to this
constexpr double kAcceptEmaWeight = 0.1;  // weight of a new acceptance sample
constexpr double kAcceptPrior = 0.8;      // conditional acceptance assumed before any data
constexpr double kAcceptDecay = 0.01;  // per idle step, drift toward the engine-wide rates (a slot retries)

}  // namespace

int64_t StepCostModel::next_measured(int64_t rows) const {
  for (int64_t r = std::max<int64_t>(rows + 1, 1); r < static_cast<int64_t>(cells_.size()); ++r)
    if (cells_[static_cast<size_t>(r)].n > 0) return r;
  return -1;
}

int64_t StepCostModel::largest_measured() const {
  for (int64_t r = static_cast<int64_t>(cells_.size()) - 1; r > 0; --r)
    if (cells_[static_cast<size_t>(r)].n > 0) return r;
  return -1;
}

bool StepCostModel::trusted(int64_t rows) const {
  return rows >= 0 && rows < static_cast<int64_t>(cells_.size()) &&
         cells_[static_cast<size_t>(rows)].n >= kTrustSamples;
}

void StepCostModel::restart(int64_t rows, double seconds) {
  if (!measured(rows)) {
    observe(rows, seconds);
    return;
  }
  if (seconds <= 0) return;
  Cell& c = cells_[static_cast<size_t>(rows)];
  c.recent.fill(seconds);
  c.est = seconds;
  fit();
}

void StepCostModel::forget(int64_t rows) {
  if (!measured(rows)) return;
  Cell& c = cells_[static_cast<size_t>(rows)];
  samples_ -= c.n;
  c = Cell{};
  if (--sizes_ == 0) {
    a_ = b_ = 0;
    return;
  }
  for (size_t r = 0; r < cells_.size(); ++r)
    if (cells_[r].n > 0) only_ = static_cast<int64_t>(r);  // meaningful while one size is left
  fit();
}

void StepCostModel::observe(int64_t rows, double seconds) {
  if (rows <= 0 || seconds <= 0) return;
  if (static_cast<int64_t>(cells_.size()) <= rows) cells_.resize(static_cast<size_t>(rows + 1));
  Cell& c = cells_[static_cast<size_t>(rows)];
  if (c.n == 0 && sizes_++ == 0) only_ = rows;
  // The median of the last few samples: the first steps at a new size pay one-time costs (fresh state pages
  // being touched, buffers growing: measured 2-4x a steady step), which a moving average would keep for a
  // long while, and which a median drops at once; a lasting change still shows within a few steps.
  c.recent[static_cast<size_t>(c.n % kRecent)] = seconds;
  ++c.n;
  ++samples_;
  c.est = median_of_first(c.recent, static_cast<size_t>(std::min<int64_t>(c.n, kRecent)));
  fit();
}

void StepCostModel::fit() {
  if (sizes_ == 1) {  // one batch size: its average cost per row, no fixed cost
    a_ = 0;
    b_ = cells_[static_cast<size_t>(only_)].est / static_cast<double>(only_);
    return;
  }
  double sw = 0, sx = 0, sy = 0;
  for (size_t r = 0; r < cells_.size(); ++r) {
    if (cells_[r].n == 0) continue;
    const double w = std::min<double>(cells_[r].n, kMaxCellWeight);
    sw += w;
    sx += w * static_cast<double>(r);
    sy += w * cells_[r].est;
  }
  const double mx = sx / sw, my = sy / sw;
  double sxx = 0, sxy = 0;
  for (size_t r = 0; r < cells_.size(); ++r) {
    if (cells_[r].n == 0) continue;
    const double w = std::min<double>(cells_[r].n, kMaxCellWeight), dx = static_cast<double>(r) - mx;
    sxx += w * dx * dx;
    sxy += w * dx * (cells_[r].est - my);
  }
  b_ = std::max(0.0, sxy / sxx);  // a bigger batch never costs less
  a_ = my - b_ * mx;
  if (a_ < 0) {  // nor does a pass cost less than nothing: through the origin instead
    a_ = 0;
    double num = 0, den = 0;
    for (size_t r = 0; r < cells_.size(); ++r) {
      if (cells_[r].n == 0) continue;
      const double w = std::min<double>(cells_[r].n, kMaxCellWeight), x = static_cast<double>(r);
      num += w * x * cells_[r].est;
      den += w * x * x;
    }
    b_ = num / den;
  }
}

double StepCostModel::predict(double rows) const {
  if (rows <= 0 || !has_data()) return 0.0;
  // A size measured often enough is its own best estimate: expert sharing bends the cost curve (the first
  // extra rows bring experts of their own, later ones increasingly share them), which a straight line fitted
  // over all sizes misses by tens of percent at the ends.
  const int64_t r = static_cast<int64_t>(rows);
  if (static_cast<double>(r) == rows && trusted(r)) return cells_[static_cast<size_t>(r)].est;
  return a_ + b_ * rows;
}

double StepCostModel::predict_along(double rows, double slope) const {
  if (sizes_ != 1 || rows <= 0) return predict(rows);
  const double t = cells_[static_cast<size_t>(only_)].est, at = static_cast<double>(only_);
  const double along = t + slope * (rows - at);
  return rows >= at ? along : std::max(along, t * rows / at);  // below: at least its rows' share
}

void AcceptanceTracker::observe(int64_t n_drafted, int64_t n_accepted) {
  if (static_cast<int64_t>(cond_.size()) < n_drafted)
    cond_.resize(static_cast<size_t>(n_drafted), kAcceptPrior);
  // Position i was reached (i <= n_accepted) and then accepted or not.
  for (int64_t i = 0; i < n_drafted && i <= n_accepted; ++i) {
    const double hit = i < n_accepted ? 1.0 : 0.0;
    double& c = cond_[static_cast<size_t>(i)];
    c = (1 - kAcceptEmaWeight) * c + kAcceptEmaWeight * hit;
  }
}

double AcceptanceTracker::rate(int32_t i) const {
  return i < static_cast<int32_t>(cond_.size()) ? cond_[static_cast<size_t>(i)] : kAcceptPrior;
}

double AcceptanceTracker::p_reach(int32_t i) const {
  double p = 1.0;
  for (int32_t j = 0; j <= i; ++j) p *= rate(j);
  return p;
}

void AcceptanceTracker::idle_step(const AcceptanceTracker& typical) {
  for (size_t i = 0; i < cond_.size(); ++i)
    cond_[i] += kAcceptDecay * (typical.rate(static_cast<int32_t>(i)) - cond_[i]);
}

}  // namespace mtp::speculative
