#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "base/thread_pool.h"

namespace mtp {
namespace {

TEST(ThreadPool, RunsEveryTaskOnceWithValidThreadIds) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<bool> bad_thread{false};
      pool.parallel_for(n, [&](size_t i, int t) {
        hits[i].fetch_add(1);
        if (t < 0 || t >= threads) bad_thread = true;
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "task " << i;
      EXPECT_FALSE(bad_thread.load());
    }
  }
}

TEST(ThreadPool, ReusableManyTimes) {
  ThreadPool pool(3);
  std::atomic<long> sum{0};
  for (int round = 0; round < 500; ++round)
    pool.parallel_for(10, [&](size_t i, int) { sum += static_cast<long>(i); });
  EXPECT_EQ(sum.load(), 500L * 45);
}

// Jobs spaced wider than the polling window: workers go to sleep between them and must be woken for each
// (a lost wake-up hangs here, and ctest's timeout reports it); jobs back to back are picked up by polling.
TEST(ThreadPool, WakesSleepingWorkersAndPollingOnes) {
  ThreadPool pool(3);
  std::atomic<long> sum{0};
  std::atomic<int> helpers_seen{0};
  for (int round = 0; round < 40; ++round) {
    if (round % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    pool.parallel_for(64, [&](size_t i, int t) {
      sum += static_cast<long>(i);
      if (t != 0) helpers_seen.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    });
  }
  EXPECT_EQ(sum.load(), 40L * 2016);
  EXPECT_GT(helpers_seen.load(), 0) << "no worker ever ran a task";
}

}  // namespace
}  // namespace mtp
