// An explicit pool of worker threads. Libraries never create threads of their own: callers pass a pool in.
// parallel_for hands out task indices dynamically; the calling thread works too, so a pool of n threads has
// n - 1 workers. Idle workers poll for about 100 microseconds before they sleep (see thread_pool.cpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mtp {

class ThreadPool {
 public:
  // n_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task, thread) for every task in [0, n_tasks), each exactly once, and returns when all are done.
  // `thread` is in [0, size()) and is unique among concurrently running calls (for per-thread scratch).
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(size_t n_tasks, const std::function<void(size_t task, int thread)>& fn);

  static int hardware_threads();

 private:
  void worker_loop(int thread);
  void run_tasks(int thread);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t, int)>* job_ = nullptr;
  size_t n_tasks_ = 0;
  std::atomic<size_t> next_task_{0};
  std::atomic<uint64_t> generation_{0};  // bumped (under mu_) for every job
  std::atomic<int> busy_workers_{0};     // workers that have not finished the current job
  std::atomic<bool> stop_{false};
  int sleepers_ = 0;  // workers waiting on wake_ (guarded by mu_)
};

}  // namespace mtp
