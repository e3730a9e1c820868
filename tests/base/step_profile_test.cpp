// The step profile: exclusive time per part under nested scopes, the pool's jobs and busy time, and nothing
// recorded while it is off.
#include "base/step_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "base/thread_pool.h"

namespace mtp {
namespace {

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Bounds from the test's own clock around the scopes (which encloses what the scopes measure), not from how
// long a sleep takes: a loaded machine stretches sleeps arbitrarily.
TEST(StepProfile, NestedScopesChargeTheInnermost) {
  profile::reset();
  profile::set_enabled(true);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point outer_begin = Clock::now();
  Clock::time_point inner_begin, inner_end;
  {
    profile::Scope outer(profile::Part::kAttention);
    sleep_ms(20);
    inner_begin = Clock::now();
    {
      profile::Scope inner(profile::Part::kProjections);
      sleep_ms(40);
    }
    inner_end = Clock::now();
    sleep_ms(20);
  }
  const double outer_wall = std::chrono::duration<double>(Clock::now() - outer_begin).count();
  const double inner_wall = std::chrono::duration<double>(inner_end - inner_begin).count();
  profile::set_enabled(false);
  const profile::Totals t = profile::totals();
  const double attention = t.seconds[static_cast<size_t>(profile::Part::kAttention)];
  const double projections = t.seconds[static_cast<size_t>(profile::Part::kProjections)];
  EXPECT_GE(attention, 0.040);  // its two sleeps
  EXPECT_GE(projections, 0.040);
  EXPECT_LE(projections, inner_wall);
  // Exclusive: the inner scope's time is not charged to the outer one too (that would exceed the outer
  // scope's wall time by at least the inner 40 ms).
  EXPECT_LE(attention + projections, outer_wall);
  EXPECT_EQ(t.jobs, 0);
}

TEST(StepProfile, PoolJobsCountTheirWallAndBusyTime) {
  ThreadPool pool(2);
  profile::reset();
  profile::set_enabled(true);
  pool.parallel_for(2, [](size_t task, int) { sleep_ms(task == 0 ? 10 : 50); });
  pool.parallel_for(1, [](size_t, int) {});  // one task runs on the caller: not a job
  profile::set_enabled(false);
  const profile::Totals t = profile::totals();
  EXPECT_EQ(t.jobs, 1);
  EXPECT_EQ(t.job_threads, 2);
  EXPECT_GE(t.job_wall, 0.050);
  EXPECT_GE(t.job_busy, 0.060);                  // both threads' tasks
  EXPECT_LT(t.job_busy, 2 * t.job_wall + 1e-9);  // never more than the threads had
}

TEST(StepProfile, OffRecordsNothing) {
  ThreadPool pool(2);
  profile::reset();
  {
    profile::Scope scope(profile::Part::kHead);
    pool.parallel_for(4, [](size_t, int) { sleep_ms(1); });
  }
  const profile::Totals t = profile::totals();
  EXPECT_EQ(t.jobs, 0);
  for (double s : t.seconds) EXPECT_EQ(s, 0.0);
}

}  // namespace
}  // namespace mtp
