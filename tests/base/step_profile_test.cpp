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
  EXPECT_EQ(t.all_jobs().count, 0);
}

TEST(StepProfile, WeightBytesGoToTheInnermostPartAndNowhereWhenOff) {
  profile::reset();
  profile::add_weight_bytes(1000);  // off
  profile::set_enabled(true);
  {
    profile::Scope outer(profile::Part::kExperts);
    profile::add_weight_bytes(300);
    {
      profile::Scope inner(profile::Part::kHead);
      profile::add_weight_bytes(50);
    }
    profile::add_weight_bytes(2);
  }
  profile::set_enabled(false);
  profile::add_weight_bytes(1000);  // off again
  const profile::Totals t = profile::totals();
  EXPECT_EQ(t.weight_bytes[static_cast<size_t>(profile::Part::kExperts)], 302);
  EXPECT_EQ(t.weight_bytes[static_cast<size_t>(profile::Part::kHead)], 50);
  EXPECT_EQ(t.weight_bytes[static_cast<size_t>(profile::Part::kOther)], 0);
}

TEST(StepProfile, PoolJobsCountTheirWallAndBusyTime) {
  ThreadPool pool(2);
  profile::reset();
  profile::set_enabled(true);
  pool.parallel_for(2, [](size_t task, int) { sleep_ms(task == 0 ? 10 : 50); });
  pool.parallel_for(1, [](size_t, int) {});  // one task runs on the caller: not a job
  profile::set_enabled(false);
  const profile::Jobs j = profile::totals().all_jobs();
  EXPECT_EQ(j.count, 1);
  EXPECT_GE(j.wall, 0.050);
  EXPECT_NEAR(j.capacity, 2 * j.wall, 1e-12);  // two threads for the job's wall time
  EXPECT_GE(j.busy, 0.060);                    // both threads' tasks
  EXPECT_LT(j.busy, j.capacity + 1e-9);        // never more than the threads had
  EXPECT_GT(j.busy_share(), 0.5);
  EXPECT_LE(j.busy_share() + j.late_share(), 1.0 + 1e-9);  // late and busy are disjoint parts of it
}

// A thread that runs none of a job's tasks joined too late for all of it: with 3 threads and 2 tasks, at
// least one thread's whole share of the job is late.
TEST(StepProfile, AThreadWithoutATaskIsLateForTheWholeJob) {
  ThreadPool pool(3);
  profile::reset();
  profile::set_enabled(true);
  pool.parallel_for(2, [](size_t, int) { sleep_ms(20); });
  profile::set_enabled(false);
  const profile::Jobs j = profile::totals().all_jobs();
  ASSERT_EQ(j.count, 1);
  EXPECT_NEAR(j.capacity, 3 * j.wall, 1e-12);
  EXPECT_GE(j.busy, 0.040);
  EXPECT_GE(j.late, j.wall - 1e-9);
  EXPECT_LE(j.busy + j.late, j.capacity + 1e-9);
}

// Jobs belong to the part whose scope is open when they run, so a part's own pool time and busy share show.
TEST(StepProfile, JobsAreChargedToTheInnermostScope) {
  ThreadPool pool(2);
  profile::reset();
  profile::set_enabled(true);
  {
    profile::Scope experts(profile::Part::kExperts);
    pool.parallel_for(2, [](size_t, int) { sleep_ms(5); });
    {
      profile::Scope head(profile::Part::kHead);
      pool.parallel_for(2, [](size_t, int) { sleep_ms(5); });
      pool.parallel_for(2, [](size_t, int) { sleep_ms(5); });
    }
  }
  pool.parallel_for(2, [](size_t, int) { sleep_ms(5); });  // no scope open: other
  profile::set_enabled(false);
  const profile::Totals t = profile::totals();
  EXPECT_EQ(t.jobs[static_cast<size_t>(profile::Part::kExperts)].count, 1);
  EXPECT_EQ(t.jobs[static_cast<size_t>(profile::Part::kHead)].count, 2);
  EXPECT_EQ(t.jobs[static_cast<size_t>(profile::Part::kOther)].count, 1);
  EXPECT_EQ(t.all_jobs().count, 4);
  const profile::Jobs& head = t.jobs[static_cast<size_t>(profile::Part::kHead)];
  EXPECT_GE(head.wall, 0.010);
  // A part's jobs are part of its wall time.
  EXPECT_LE(head.wall, t.seconds[static_cast<size_t>(profile::Part::kHead)] + 1e-9);
}

TEST(StepProfile, OffRecordsNothing) {
  ThreadPool pool(2);
  profile::reset();
  {
    profile::Scope scope(profile::Part::kHead);
    pool.parallel_for(4, [](size_t, int) { sleep_ms(1); });
  }
  const profile::Totals t = profile::totals();
  EXPECT_EQ(t.all_jobs().count, 0);
  for (double s : t.seconds) EXPECT_EQ(s, 0.0);
}

}  // namespace
}  // namespace mtp
