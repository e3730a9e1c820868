#include "base/step_profile.h"

#include <chrono>
#include <mutex>

namespace mtp::profile {
namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

using Clock = std::chrono::steady_clock;

struct State {
  std::mutex mu;  // add_job and totals() may race with a worker's last store; scopes are one thread's
  Totals totals;
  Part current = Part::kOther;
  Clock::time_point mark = Clock::now();
};

State& state() {
  static State s;
  return s;
}

// Charges the time since the last mark to the current part and moves the mark to now.
void charge(State& s) {
  const Clock::time_point now = Clock::now();
  s.totals.seconds[static_cast<size_t>(s.current)] += std::chrono::duration<double>(now - s.mark).count();
  s.mark = now;
}

}  // namespace

const char* part_name(Part part) {
  switch (part) {
    case Part::kOther:
      return "other (norms, residuals, embedding)";
    case Part::kProjections:
      return "attention/delta-net projections";
    case Part::kDeltaNet:
      return "delta-net (conv, delta rule)";
    case Part::kAttention:
      return "attention (scores, weighted sums)";
    case Part::kRouting:
      return "routing (router, top-k, grouping)";
    case Part::kExperts:
      return "experts (routed and shared)";
    case Part::kHead:
      return "output head";
    case Part::kCount:
      break;
  }
  return "?";
}

void set_enabled(bool on) {
  State& s = state();
  s.current = Part::kOther;
  s.mark = Clock::now();
  detail::g_enabled.store(on, std::memory_order_relaxed);
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.totals = Totals{};
  s.mark = Clock::now();
}

Totals totals() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.totals;
}

void Scope::enter(Part part) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  charge(s);
  outer_ = s.current;
  s.current = part;
}

void Scope::leave() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  charge(s);
  s.current = outer_;
}

Jobs Totals::all_jobs() const {
  Jobs all;
  for (const Jobs& j : jobs) {
    all.count += j.count;
    all.wall += j.wall;
    all.busy += j.busy;
    all.late += j.late;
    all.capacity += j.capacity;
  }
  return all;
}

void add_job(double wall, double busy, double late, int threads) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Jobs& j = s.totals.jobs[static_cast<size_t>(s.current)];
  ++j.count;
  j.wall += wall;
  j.busy += busy;
  j.late += late;
  j.capacity += wall * threads;
}

void detail::add_weight_bytes(double bytes) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.totals.weight_bytes[static_cast<size_t>(s.current)] += bytes;
}

}  // namespace mtp::profile
