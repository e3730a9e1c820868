// The thread pool's cost per job: how long a parallel_for of n tasks of w nanoseconds each takes, against
// what its work alone would take with every thread busy. A decode step hands the pool about 80 jobs, many of
// them only tens of microseconds long per thread, so the pool's own cost per job (publishing, waking,
// joining) is part of every token.
//
//   pool_bench [--threads 2,4] [--tasks 2,16,64] [--work-ns 0,2000,20000] [--jobs 20000] [--gap-us 0]
//
// Prints, per case, microseconds per job (the best of three runs of --jobs jobs) and the overhead over the
// ideal time ceil(tasks / min(threads, cores)) * work. With more threads than cores (the second default) a
// worker the OS has not scheduled yet must not hold up a job that others can finish.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "../bench_cli.h"
#include "base/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

// Busy-waits `ns` nanoseconds: a stand-in for a piece of a product, which keeps its core busy.
void busy_for(int64_t ns) {
  if (ns <= 0) return;
  const auto end = Clock::now() + std::chrono::nanoseconds(ns);
  while (Clock::now() < end) {
  }
}

double microseconds_per_job(mtp::ThreadPool& pool, size_t tasks, int64_t work_ns, int jobs, int gap_us) {
  double best = 1e30;
  for (int run = -1; run < 3; ++run) {  // run -1 warms up (wakes the workers) and is not counted
    double total = 0;
    for (int j = 0; j < jobs; ++j) {
      if (gap_us > 0) busy_for(int64_t{gap_us} * 1000);
      const auto t0 = Clock::now();
      pool.parallel_for(tasks, [&](size_t, int) { busy_for(work_ns); });
      total += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    }
    if (run >= 0) best = std::min(best, total / jobs);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The thread pool's cost per parallel_for job.", "pool_bench"};
  std::vector<int> threads{2, 4};
  std::vector<size_t> tasks{2, 16, 64};
  std::vector<int64_t> work_ns{0, 2000, 20000};
  int jobs = 20000;
  int gap_us = 0;
  app.add_option("--threads", threads, "pool sizes (the calling thread included)")->delimiter(',');
  app.add_option("--tasks", tasks, "tasks per job")->delimiter(',');
  app.add_option("--work-ns", work_ns, "busy nanoseconds per task")->delimiter(',');
  app.add_option("--jobs", jobs, "jobs per run (best of 3 runs)")->check(CLI::Range(1, 10000000));
  app.add_option("--gap-us", gap_us, "busy microseconds on the calling thread between jobs")
      ->check(CLI::Range(0, 1000000));
  mtp::bench::parse_or_exit(app, argc, argv);

  const int cores = mtp::ThreadPool::hardware_threads();
  std::printf("%d hardware threads\n", cores);
  std::printf("%8s %6s %8s %12s %12s\n", "threads", "tasks", "work_ns", "us/job", "overhead_us");
  for (int t : threads) {
    if (t < 1) {
      std::fprintf(stderr, "pool_bench: --threads: %d is not a pool size\n", t);
      return 2;
    }
    mtp::ThreadPool pool(t);
    for (size_t n : tasks)
      for (int64_t w : work_ns) {
        const int n_jobs = w >= 20000 ? std::max(1, jobs / 10) : jobs;
        const size_t busy = static_cast<size_t>(std::min(t, cores));
        const double us = microseconds_per_job(pool, n, w, n_jobs, gap_us);
        const double ideal = 1e-3 * static_cast<double>(w) * static_cast<double>((n + busy - 1) / busy);
        std::printf("%8d %6zu %8lld %12.2f %12.2f\n", t, n, static_cast<long long>(w), us, us - ideal);
      }
  }
  return 0;
}
