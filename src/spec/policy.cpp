// The auto policy (field-survey.md section 6, goodput form):
//
//   goodput(k) = sum_r E[T_r](k_r) / (T_trunk(base + sum_r k_r) + sum_{i=1..max k} T_draft(#{r : k_r >= i}))
//   E[T_r](k)  = 1 + sum_{i<k} p_reach_r(i)
//
// k = 0 for every slot is always a candidate. Starting there, the policy repeatedly adds one draft position
// to the slot whose next position is most likely to be accepted, and keeps the change while goodput improves.
// Step times come from the engine's own measurements (an EMA per row count); unmeasured row counts are
// extrapolated optimistically (an extra row at a quarter of the average row cost) so that new batch shapes
// get tried once and then measured.
#include "spec/policy.h"

#include <algorithm>

namespace mtp::spec {
namespace {

constexpr double kEmaWeight = 0.2;        // weight of a new step-time sample
constexpr double kAcceptEmaWeight = 0.1;  // weight of a new acceptance sample
constexpr double kAcceptPrior = 0.8;      // conditional acceptance assumed before any data
constexpr double kAcceptDecay = 0.01;     // per idle step, drift back toward the prior (so a slot retries)
constexpr double kExtraRowFraction = 0.25;

}  // namespace

void StepCostModel::observe(int64_t rows, double seconds) {
  if (rows <= 0 || seconds <= 0) return;
  if (static_cast<int64_t>(ema_.size()) <= rows) ema_.resize(static_cast<size_t>(rows + 1), -1.0);
  double& e = ema_[static_cast<size_t>(rows)];
  e = e < 0 ? seconds : (1 - kEmaWeight) * e + kEmaWeight * seconds;
}

double StepCostModel::predict(int64_t rows) const {
  if (rows <= 0 || ema_.empty()) return 0.0;
  const int64_t n = static_cast<int64_t>(ema_.size());
  if (rows < n && ema_[static_cast<size_t>(rows)] >= 0) return ema_[static_cast<size_t>(rows)];
  int64_t lo = std::min(rows, n - 1);
  while (lo > 0 && ema_[static_cast<size_t>(lo)] < 0) --lo;
  int64_t hi = rows + 1;
  while (hi < n && ema_[static_cast<size_t>(hi)] < 0) ++hi;
  if (lo > 0 && hi < n) {  // interpolate
    const double a = ema_[static_cast<size_t>(lo)], b = ema_[static_cast<size_t>(hi)];
    return a + (b - a) * static_cast<double>(rows - lo) / static_cast<double>(hi - lo);
  }
  if (lo > 0) {  // above every measurement
    const double a = ema_[static_cast<size_t>(lo)];
    return a + kExtraRowFraction * a / static_cast<double>(lo) * static_cast<double>(rows - lo);
  }
  // below every measurement: the smallest measured count is an upper bound
  return ema_[static_cast<size_t>(hi)];
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

double AcceptanceTracker::p_reach(int32_t i) const {
  double p = 1.0;
  for (int32_t j = 0; j <= i; ++j)
    p *= j < static_cast<int32_t>(cond_.size()) ? cond_[static_cast<size_t>(j)] : kAcceptPrior;
  return p;
}

void AcceptanceTracker::idle_step() {
  for (double& c : cond_) c += kAcceptDecay * (kAcceptPrior - c);
}

std::vector<int32_t> DraftPolicy::choose(std::span<const SlotDemand> slots, int64_t base_rows) const {
  const size_t n = slots.size();
  std::vector<int32_t> k(n, 0);
  if (opt_.max_drafting_slots >= 0 && static_cast<int64_t>(n) > opt_.max_drafting_slots) return k;
  if (opt_.kind == PolicyKind::kFixed) {
    for (size_t r = 0; r < n; ++r) k[r] = slots[r].n_max;
    return k;
  }
  // Auto. Without measurements yet, draft (the first steps measure the shapes).
  if (!trunk_.has_data() || !draft_.has_data()) {
    for (size_t r = 0; r < n; ++r) k[r] = slots[r].n_max;
    return k;
  }
  auto step_time = [&](const std::vector<int32_t>& ks) {
    int64_t extra = 0;
    int32_t kmax = 0;
    for (int32_t x : ks) {
      extra += x;
      kmax = std::max(kmax, x);
    }
    double t = trunk_.predict(base_rows + extra);
    for (int32_t i = 1; i <= kmax; ++i) {
      int64_t rows = 0;
      for (int32_t x : ks) rows += x >= i ? 1 : 0;
      t += draft_.predict(rows);
    }
    return t;
  };
  auto expected_tokens = [&](const std::vector<int32_t>& ks) {
    double t = 0;
    for (size_t r = 0; r < n; ++r) {
      t += 1;
      for (int32_t i = 0; i < ks[r]; ++i) t += slots[r].acceptance ? slots[r].acceptance->p_reach(i) : 0.0;
    }
    return t;
  };
  auto goodput = [&](const std::vector<int32_t>& ks) {
    return expected_tokens(ks) / std::max(step_time(ks), 1e-9);
  };
  // A draft pass costs the same for one slot as for many, so one position at a time is too myopic to start
  // from: first the best uniform length (every slot min(L, its cap)), then single positions on top.
  int32_t max_cap = 0;
  for (const SlotDemand& d : slots) max_cap = std::max(max_cap, d.n_max);
  double best = goodput(k);
  for (int32_t len = 1; len <= max_cap; ++len) {
    std::vector<int32_t> u(n);
    for (size_t r = 0; r < n; ++r) u[r] = slots[r].acceptance ? std::min(len, slots[r].n_max) : 0;
    const double g = goodput(u);
    if (g > best) {
      best = g;
      k = u;
    }
  }
  for (;;) {
    // The slot whose next draft position is the most likely to be accepted.
    int64_t pick = -1;
    double gain = 0;
    for (size_t r = 0; r < n; ++r) {
      if (k[r] >= slots[r].n_max || slots[r].acceptance == nullptr) continue;
      const double g = slots[r].acceptance->p_reach(k[r]);
      if (g > gain) {
        gain = g;
        pick = static_cast<int64_t>(r);
      }
    }
    if (pick < 0) break;
    ++k[static_cast<size_t>(pick)];
    const double g = goodput(k);
    if (g <= best) {
      --k[static_cast<size_t>(pick)];
      break;
    }
    best = g;
  }
  return k;
}

}  // namespace mtp::spec
