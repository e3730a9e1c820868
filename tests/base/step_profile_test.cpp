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

TEST(StepProfile, NestedScopesChargeTheInnermost) {
  profile::reset();
  profile::set_enabled(true);
  {
    profile::Scope outer(profile::Part::kAttention);
    sleep_ms(20);
    {
      profile::Scope inner(profile::Part::kProjections);
      sleep_ms(40);
    }
    sleep_ms(20);
  }
  profile::set_enabled(false);
  const profile::Totals t = profile::totals();
  const double attention = t.seconds[static_cast<size_t>(profile::Part::kAttention)];
  const double projections = t.seconds[static_cast<size_t>(profile::Part::kProjections)];
  EXPECT_GE(attention, 0.040);
  EXPECT_LT(attention, 0.060 + 0.030);  // not the inner scope's 40 ms on top (sleeps may overrun)
  EXPECT_GE(projections, 0.040);
  EXPECT_LT(projections, 0.040 + 0.030);
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
