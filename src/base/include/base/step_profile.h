// Where a forward pass's time goes, for `engine_bench --profile`: wall time by kind of work, each scope's
// time exclusive of the scopes opened inside it, and the thread pool's jobs: how many, their wall time, and
// how much of it the pool's threads spent running tasks (the rest is threads waiting at the job's end for the
// slowest one, and waking up). Off unless enabled; off, a scope or a job costs one relaxed load.
//
// Scopes belong to the one thread that runs the pass (the thread that calls forward); the pool's workers only
// add their busy time. Profile one pool at a time.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

namespace mtp::profile {

enum class Part : int {
  kOther,        // embedding rows, norms, residual adds, bookkeeping
  kProjections,  // attention and delta-net input/output projections
  kDeltaNet,     // the delta-net's convolution, delta rule and gating
  kAttention,    // attention's scores, softmax and weighted sums
  kRouting,      // the router's product, softmax and top-k, grouping rows by expert
  kExperts,      // the routed and shared experts' products (one pass over the pool per stage), SwiGLU, sum
  kHead,         // the final norm and the output head
  kCount,
};
inline constexpr int kParts = static_cast<int>(Part::kCount);
const char* part_name(Part part);

// The thread pool's jobs (parallel_for calls that ran on several threads) of one part, or of all.
struct Jobs {
  int64_t count = 0;
  double wall = 0;      // their wall time
  double busy = 0;      // thread-seconds spent running their tasks, all threads together
  double late = 0;      // thread-seconds from a job's start to each thread's first task of it (all of the job
                        // for a thread that ran none): waking, or arriving after the tasks were gone
  double capacity = 0;  // thread-seconds the pool had in them: wall time x threads, summed over the jobs

  // Shares of the threads' time in these jobs, 0 without jobs: running tasks, joining late, and the rest,
  // waiting at the end for the slowest thread.
  double busy_share() const { return capacity > 0 ? busy / capacity : 0.0; }
  double late_share() const { return capacity > 0 ? late / capacity : 0.0; }
  double wait_share() const { return capacity > 0 ? std::max(0.0, 1 - busy_share() - late_share()) : 0.0; }
};

struct Totals {
  std::array<double, kParts> seconds{};       // exclusive wall time per part
  std::array<Jobs, kParts> jobs{};            // per part: the jobs run while it was the innermost open scope
  std::array<double, kParts> weight_bytes{};  // per part: weight bytes its products read (add_weight_bytes)
  Jobs all_jobs() const;
};

namespace detail {
extern std::atomic<bool> g_enabled;
}
inline bool enabled() {
  return detail::g_enabled.load(std::memory_order_relaxed);
}
void set_enabled(bool on);
void reset();
Totals totals();

// Attributes the wall time until it closes (less that of the scopes opened inside it) to `part`.
class Scope {
 public:
  explicit Scope(Part part) : on_(enabled()) {
    if (on_) enter(part);
  }
  ~Scope() {
    if (on_) leave();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void enter(Part part);
  void leave();
  bool on_;
  Part outer_ = Part::kOther;
};

// A parallel_for of `threads` threads took `wall` seconds, in which its threads ran tasks for `busy` and
// joined `late` (thread-seconds, as in Jobs): charged to the part whose scope is open.
void add_job(double wall, double busy, double late, int threads);

namespace detail {
void add_weight_bytes(double bytes);
}
// A product over `bytes` bytes of weights (each weight read once, whatever the rows): charged to the part
// whose scope is open, so a step's bytes can be set against its time and the machine's bandwidth. A batch of
// rows routed to different experts reads each expert it touches once.
inline void add_weight_bytes(double bytes) {
  if (enabled()) detail::add_weight_bytes(bytes);
}

}  // namespace mtp::profile
