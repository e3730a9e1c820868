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

// A job's work in bytes sets how many threads it keeps busy: one per grain, at least one, at most the pool's;
// a job for one thread runs every task on the calling thread, and kSplitAll hands every job to all threads.
TEST(ThreadPool, SmallJobsRunOnTheCallingThread) {
  ThreadPool pool(4, 1000);
  EXPECT_EQ(pool.grain_bytes(), 1000);
  EXPECT_EQ(pool.threads_for(0), 1);
  EXPECT_EQ(pool.threads_for(1999), 1);
  EXPECT_EQ(pool.threads_for(2000), 2);
  EXPECT_EQ(pool.threads_for(3999), 3);
  EXPECT_EQ(pool.threads_for(int64_t{1} << 40), 4);
  EXPECT_EQ(ThreadPool(4, ThreadPool::kSplitAll).threads_for(0), 4);
  EXPECT_EQ(ThreadPool(2).grain_bytes(), ThreadPool::kDefaultGrainBytes);
  EXPECT_EQ(ThreadPool(2, -5).grain_bytes(), ThreadPool::kDefaultGrainBytes);

  // Tasks long enough that the workers would take some of them if the job were handed out.
  const std::thread::id caller = std::this_thread::get_id();
  auto run = [&](int64_t work) {
    std::atomic<int> elsewhere{0}, ran{0};
    pool.parallel_for(64, work, [&](size_t, int t) {
      if (t != 0 || std::this_thread::get_id() != caller) elsewhere.fetch_add(1);
      ran.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    EXPECT_EQ(ran.load(), 64);
    return elsewhere.load();
  };
  EXPECT_EQ(run(1999), 0);
  EXPECT_GT(run(4000), 0) << "a job worth four threads ran on the calling thread alone";
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

// More threads than cores, so workers often wake after the job they were woken for has ended and join a
// later one. Every task of every job runs exactly once, only while its own parallel_for is running, and no
// two tasks run at once under the same thread id. A late worker running a past job's task would touch a
// dead lambda (ASan in `make test` reports it) and trip `current`.
TEST(ThreadPool, LateWorkersJoinTheCurrentJobOnly) {
  const int threads = 4 * ThreadPool::hardware_threads() + 1;
  ThreadPool pool(threads);
  std::atomic<int> current{-1};
  std::atomic<int> wrong_job{0}, shared_id{0};
  std::vector<std::atomic<bool>> id_in_use(static_cast<size_t>(threads));
  for (int job = 0; job < 3000; ++job) {
    const size_t n = 2 + static_cast<size_t>(job % 37);
    std::vector<std::atomic<int>> hits(n);
    current.store(job);
    pool.parallel_for(n, [&, job](size_t i, int t) {
      if (id_in_use[static_cast<size_t>(t)].exchange(true)) shared_id.fetch_add(1);
      if (current.load() != job) wrong_job.fetch_add(1);
      hits[i].fetch_add(1);
      if (i % 5 == 0) std::this_thread::yield();
      id_in_use[static_cast<size_t>(t)].store(false);
    });
    current.store(-1);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "job " << job << " task " << i;
  }
  EXPECT_EQ(wrong_job.load(), 0);
  EXPECT_EQ(shared_id.load(), 0);
}

}  // namespace
}  // namespace mtp
