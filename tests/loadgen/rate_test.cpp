// `mtp bench --rate`: the Poisson schedule is reproducible and has the asked mean gap, and a rate run against
// the fake server sends every request at (never before) its scheduled time, the schedule exactly as drawn.
#include <gtest/gtest.h>

#include <algorithm>

#include "fake_server.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

using namespace mtp::testing;

TEST(PoissonSchedule, IsReproducibleIncreasingAndHasTheMeanGap) {
  const std::vector<int64_t> a = poisson_offsets_ns(4.0, 20000, 7, 0);
  EXPECT_EQ(a, poisson_offsets_ns(4.0, 20000, 7, 0));
  EXPECT_NE(a, poisson_offsets_ns(4.0, 20000, 7, 1));  // each level its own draws
  EXPECT_NE(a, poisson_offsets_ns(4.0, 20000, 8, 0));
  ASSERT_EQ(a.size(), 20000u);
  EXPECT_GT(a[0], 0);
  for (size_t i = 1; i < a.size(); ++i) ASSERT_GE(a[i], a[i - 1]) << i;
  const double mean_gap_s = static_cast<double>(a.back()) * 1e-9 / static_cast<double>(a.size());
  EXPECT_NEAR(mean_gap_s, 0.25, 0.25 * 0.05);  // 20000 exponential gaps: sd of the mean 0.7%
  // Twice the rate, the same draws: every offset halves (up to the ns rounding).
  const std::vector<int64_t> b = poisson_offsets_ns(8.0, 20000, 7, 0);
  for (size_t i = 0; i < a.size(); i += 997) EXPECT_NEAR(b[i] * 2.0, static_cast<double>(a[i]), 2.0) << i;
}

TEST(RateRunner, SendsEachRequestAtItsScheduleOnePerRateLevel) {
  FakeServer server(two_delta_script());
  const std::string path = write_temp("rate_ok", "");
  BenchOptions o = bench_options(server.url(), {2}, 5, 8, 4);
  o.rates = {50, 100};
  o.seed = 3;
  {
    auto out = JsonlWriter::open(path);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(run_bench(o, **out).ok());
  }
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->header["options"]["load"], "poisson");
  ASSERT_EQ(run->requests.size(), 12u);  // 2 levels x (1 warm-up + 5)
  for (int k = 0; k < 2; ++k) {
    std::vector<const RequestRecord*> level;
    for (const RequestRecord& r : run->requests)
      if (r.rate == o.rates[static_cast<size_t>(k)]) level.push_back(&r);
    ASSERT_EQ(level.size(), 6u) << k;
    std::sort(level.begin(), level.end(), [](auto* x, auto* y) { return x->id < y->id; });
    const std::vector<int64_t> offsets = poisson_offsets_ns(o.rates[static_cast<size_t>(k)], 6, o.seed, k);
    for (size_t i = 0; i < level.size(); ++i) {
      EXPECT_TRUE(level[i]->ok) << level[i]->error;
      EXPECT_LE(level[i]->scheduled_ns, level[i]->sent_ns);  // never before its time
      EXPECT_LT(level[i]->worker, 2);
      EXPECT_EQ(level[i]->level, 2);
      // The recorded schedule is the drawn one, relative to the level's first request.
      EXPECT_EQ(level[i]->scheduled_ns - level[0]->scheduled_ns, offsets[i] - offsets[0]) << k << " " << i;
    }
  }
  const std::vector<LevelSummary> levels = summarize_run(*run);
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(levels[0].rate, 50);
  EXPECT_EQ(levels[1].rate, 100);
  EXPECT_EQ(levels[1].completed, 5);
  EXPECT_NE(markdown_report(levels).find("| 100/s c<=2 | 5 | 0 |"), std::string::npos)
      << markdown_report(levels);
  std::filesystem::remove(path);
}

TEST(RateRunner, ARequestThatFindsTheCapFullIsSentLateAndTheLagIsRecorded) {
  FakeServer server(two_delta_script());  // each request takes at least 10 ms
  const std::string path = write_temp("rate_lag", "");
  BenchOptions o = bench_options(server.url(), {1}, 5, 8, 4);
  o.rates = {1000};  // gaps of about 1 ms, one in flight at most
  {
    auto out = JsonlWriter::open(path);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(run_bench(o, **out).ok());
  }
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->requests.size(), 6u);
  const RequestRecord& first = run->requests.front();
  const RequestRecord& last = run->requests.back();
  // Five requests of >= 10 ms ran before the last one could go; its schedule moved far less.
  const int64_t lower = 50'000'000 - (last.scheduled_ns - first.scheduled_ns);
  EXPECT_GE(last.sent_ns - last.scheduled_ns, lower);
  EXPECT_GT(summarize_run(*run)[0].lag_ms.max, 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mtp::loadgen
