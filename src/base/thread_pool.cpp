#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"
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

// While profiling (base/step_profile.h, which profiles one pool at a time), for the current job: when it was
// published, the thread-nanoseconds its threads spent running tasks, those from its start until each thread's
// first task (summed over the threads that ran one), and how many threads ran one.
std::atomic<int64_t> g_job_start_ns{0};
std::atomic<int64_t> g_busy_ns{0};
std::atomic<int64_t> g_late_ns{0};
std::atomic<int> g_joined{0};

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr uint64_t kTaskMask = 0xffffffffu;

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

ThreadPool::ThreadPool(int n_threads, int64_t grain_bytes)
    : grain_bytes_(grain_bytes < 0 ? kDefaultGrainBytes : grain_bytes) {
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

size_t ThreadPool::run_tasks(int thread, size_t* job_tasks) {
  const bool timed = profile::enabled();
  size_t ran = 0;
  int64_t busy_ns = 0;
  for (;;) {
    const uint64_t claim = claim_.fetch_add(1, std::memory_order_acquire);
    const size_t n = static_cast<size_t>(claim >> 32);
    const size_t task = static_cast<size_t>(claim & kTaskMask);
    if (task >= n) break;
    // This thread owns `task` of the job published with count n: that job cannot end, nor job_ change,
    // before the task is counted done. The acquire above pairs with the publishing store of claim_.
    *job_tasks = n;
    const int64_t t0 = timed ? steady_ns() : 0;
    if (timed && ran == 0) {
      g_late_ns.fetch_add(t0 - g_job_start_ns.load(std::memory_order_relaxed), std::memory_order_relaxed);
      g_joined.fetch_add(1, std::memory_order_relaxed);
    }
    (*job_.load(std::memory_order_relaxed))(task, thread);
    if (timed) busy_ns += steady_ns() - t0;
    ++ran;
  }
  if (busy_ns > 0) g_busy_ns.fetch_add(busy_ns, std::memory_order_relaxed);
  return ran;
}

// Counts a worker's finished tasks; the one that finishes the job wakes the caller if it sleeps. seq_cst on
// tasks_done_ and caller_waiting_ (both sides): either this thread sees the caller waiting, or the caller's
// check sees the job done.
void ThreadPool::finish_tasks(size_t count, size_t job_tasks) {
  if (tasks_done_.fetch_add(count, std::memory_order_seq_cst) + count != job_tasks) return;
  if (!caller_waiting_.load(std::memory_order_seq_cst)) return;
  std::lock_guard<std::mutex> lock(mu_);
  done_.notify_one();
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
    size_t job_tasks = 0;
    if (const size_t ran = run_tasks(thread, &job_tasks); ran > 0) finish_tasks(ran, job_tasks);
  }
}

int ThreadPool::threads_for(int64_t work_bytes) const {
  if (grain_bytes_ == kSplitAll) return size();
  return static_cast<int>(std::clamp<int64_t>(work_bytes / grain_bytes_, 1, size()));
}

void ThreadPool::parallel_for(size_t n_tasks, int64_t work_bytes,
                              const std::function<void(size_t, int)>& fn) {
  if (threads_for(work_bytes) > 1) return parallel_for(n_tasks, fn);
  for (size_t i = 0; i < n_tasks; ++i) fn(i, 0);
}

void ThreadPool::parallel_for(size_t n_tasks, const std::function<void(size_t, int)>& fn) {
  if (n_tasks == 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (size_t i = 0; i < n_tasks; ++i) fn(i, 0);
    return;
  }
  MTP_CHECK(n_tasks <= kMaxTasks, n_tasks, " tasks in one job");
  const bool timed = profile::enabled();
  const int64_t t0 = timed ? steady_ns() : 0;
  if (timed) {
    g_job_start_ns.store(t0, std::memory_order_relaxed);  // published with the job, under mu_ below
    g_busy_ns.store(0, std::memory_order_relaxed);
    g_late_ns.store(0, std::memory_order_relaxed);
    g_joined.store(0, std::memory_order_relaxed);
  }
  bool notify = false;
  {
    // The claim word publishes the job (release) to threads already claiming; the generation bump wakes
    // the polling ones, and sleepers are notified.
    std::lock_guard<std::mutex> lock(mu_);
    job_.store(&fn, std::memory_order_relaxed);
    tasks_done_.store(0, std::memory_order_relaxed);
    claim_.store(static_cast<uint64_t>(n_tasks) << 32, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
    notify = sleepers_ > 0;
  }
  if (notify) wake_.notify_all();
  size_t job_tasks = n_tasks;
  const size_t ran = run_tasks(0, &job_tasks);
  auto done = [&] { return tasks_done_.load(std::memory_order_seq_cst) == n_tasks; };
  if (ran > 0 && tasks_done_.fetch_add(ran, std::memory_order_seq_cst) + ran == n_tasks) {
    // The caller finished the job itself.
  } else if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_waiting_.store(true, std::memory_order_seq_cst);
    done_.wait(lock, done);
    caller_waiting_.store(false, std::memory_order_relaxed);
  }
  // Every task counted itself done after it added its busy and late time, so all of it is here. A thread that
  // ran none of the job's tasks joined too late for all of it.
  if (timed) {
    const double wall = 1e-9 * static_cast<double>(steady_ns() - t0);
    const int idle = size() - g_joined.load(std::memory_order_relaxed);
    profile::add_job(wall, 1e-9 * static_cast<double>(g_busy_ns.load(std::memory_order_relaxed)),
                     1e-9 * static_cast<double>(g_late_ns.load(std::memory_order_relaxed)) + idle * wall,
                     size());
  }
}

}  // namespace mtp
