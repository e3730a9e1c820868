#include "base/thread_pool.h"

#include <chrono>

#include "base/step_profile.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mtp {
namespace {

// How long an idle thread polls before it sleeps on the condition variable. A forward pass hands out a
// job every few microseconds to tens of microseconds (about 110 per decode step), while waking a thread
// from a futex costs several microseconds and often a reschedule: polling covers the gaps inside a step,
// sleeping covers the gaps between requests.
constexpr auto kSpin = std::chrono::microseconds(100);

// Thread-nanoseconds the current job's threads spent running tasks, while profiling (base/step_profile.h,
// which profiles one pool at a time).
std::atomic<int64_t> g_busy_ns{0};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `ready` for up to kSpin; true when it became true. After the first few hundred polls it yields the
// core between polls: when the machine has fewer free cores than threads, the thread being waited for may
// need this one.
template <typename Ready>
bool spin_until(Ready ready) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    if (ready()) return true;
    if (i < 256) {
      cpu_relax();
      continue;
    }
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() - t0 > kSpin) return ready();
  }
}

}  // namespace

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
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_tasks(int thread) {
  const bool timed = profile::enabled();
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  for (;;) {
    size_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    (*job_)(task, thread);
  }
  if (timed)
    g_busy_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count(),
        std::memory_order_relaxed);
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    auto fresh = [&] {
      return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(fresh)) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleepers_;
      wake_.wait(lock, fresh);
      --sleepers_;
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    run_tasks(thread);
    // The last worker out wakes the caller, under the lock so that a caller about to sleep cannot miss it.
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(size_t n_tasks, const std::function<void(size_t, int)>& fn) {
  if (n_tasks == 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (size_t i = 0; i < n_tasks; ++i) fn(i, 0);
    return;
  }
  const bool timed = profile::enabled();
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (timed) g_busy_ns.store(0, std::memory_order_relaxed);
  bool notify = false;
  {
    // The job is published by the generation bump (release); polling workers pick it up from there.
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    n_tasks_ = n_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    busy_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    notify = sleepers_ > 0;
  }
  if (notify) wake_.notify_all();
  run_tasks(0);
  auto done = [&] { return busy_workers_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, done);
  }
  job_ = nullptr;
  // The workers added their busy time before they counted themselves out (acq_rel), so it is all here.
  if (timed)
    profile::add_job(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                     1e-9 * static_cast<double>(g_busy_ns.load(std::memory_order_relaxed)), size());
}

}  // namespace mtp
