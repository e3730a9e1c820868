// An explicit pool of worker threads. Libraries never create threads of their own: callers pass a pool in.
// parallel_for hands out task indices dynamically; the calling thread works too, so a pool of n threads has
// n - 1 workers. A job ends when its last task ends, not when every worker has looked at it: a worker the OS
// has not scheduled yet (more threads than free cores, a busy machine) does not hold up a job the others can
// finish, and joins whichever job is current when it runs. Idle workers poll for about 100 microseconds
// before they sleep (see thread_pool.cpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mtp {

class ThreadPool {
 public:
  // The least work worth a thread of its own, in bytes a job's tasks read or write (weights streamed, states
  // updated): handing a job to another thread costs a few microseconds (publishing it, the other core
  // fetching its inputs, waiting for the slowest), about what one thread spends on this many bytes in cache.
  // A small model's decode step (256 wide, 29 jobs) took 0.25 ms at 2 threads against 0.14 ms at 1 when
  // every job was split. kSplitAll splits every job (tests that check a split changes no result).
  static constexpr int64_t kDefaultGrainBytes = 128 * 1024;
  static constexpr int64_t kSplitAll = 0;

  // n_threads <= 0 means one per hardware thread; grain_bytes < 0 means kDefaultGrainBytes.
  explicit ThreadPool(int n_threads = 0, int64_t grain_bytes = kDefaultGrainBytes);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  int64_t grain_bytes() const { return grain_bytes_; }

  // How many threads a job of `work_bytes` keeps busy: one per grain, 1 to size() (size() for kSplitAll).
  int threads_for(int64_t work_bytes) const;

  // parallel_for for a job of `work_bytes`: on the calling thread alone where threads_for says one.
  void parallel_for(size_t n_tasks, int64_t work_bytes,
                    const std::function<void(size_t task, int thread)>& fn);

  // Calls fn(task, thread) for every task in [0, n_tasks), each exactly once, and returns when all are done.
  // `thread` is in [0, size()) and is unique among concurrently running calls (for per-thread scratch).
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(size_t n_tasks, const std::function<void(size_t task, int thread)>& fn);

  static int hardware_threads();

 private:
  void worker_loop(int thread);
  // Claims and runs tasks of the current job until none is left; returns how many it ran and, through
  // job_tasks, the task count of the job they belonged to.
  size_t run_tasks(int thread, size_t* job_tasks);
  void finish_tasks(size_t count, size_t job_tasks);

  static constexpr size_t kMaxTasks = size_t{1} << 31;

  std::vector<std::thread> workers_;
  int64_t grain_bytes_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<const std::function<void(size_t, int)>*> job_{nullptr};
  // The current job's task count (high 32 bits) and next unclaimed task (low 32 bits), in one word so that a
  // claim (one fetch_add) also says which job it belongs to: a worker that wakes late cannot mistake a past
  // job's count for this one's. Each thread over-claims at most once a job, so the low half stays below
  // 2^32 for the at most 2^31 tasks a job may have.
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<size_t> tasks_done_{0};    // tasks of the current job that have finished
  alignas(64) std::atomic<uint64_t> generation_{0};  // bumped (under mu_) for every job
  std::atomic<bool> stop_{false};
  int sleepers_ = 0;                         // workers waiting on wake_ (guarded by mu_)
  std::atomic<bool> caller_waiting_{false};  // the caller sleeps on done_ (set under mu_)
};

}  // namespace mtp
