#include "base/thread_pool.h"

namespace mtp {

int ThreadPool::hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = hardware_threads();
  for (int t = 1; t < n_threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_tasks(int thread) {
  for (;;) {
    size_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) return;
    (*job_)(task, thread);
  }
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_tasks(thread);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --busy_workers_;
    }
    done_.notify_one();
  }
}

void ThreadPool::parallel_for(size_t n_tasks, const std::function<void(size_t, int)>& fn) {
  if (n_tasks == 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (size_t i = 0; i < n_tasks; ++i) fn(i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    n_tasks_ = n_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    busy_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_tasks(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return busy_workers_ == 0; });
  job_ = nullptr;
}

}  // namespace mtp
