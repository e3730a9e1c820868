// `--repeat N`: the per-level mean and Student-t 95% interval over the repeats, on a hand-written run whose
// repeats have known figures; the t quantiles against their textbook values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "loadgen/repeats.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

TEST(Repeats, TQuantilesAreTheTextbookOnes) {
  EXPECT_NEAR(t975(1), 12.706, 1e-3);
  EXPECT_NEAR(t975(2), 4.303, 1e-3);
  EXPECT_NEAR(t975(10), 2.228, 1e-3);
  EXPECT_NEAR(t975(30), 2.042, 1e-3);
  EXPECT_NEAR(t975(40), 2.021, 1e-3);
  EXPECT_NEAR(t975(120), 1.980, 1e-3);
  EXPECT_GT(t975(31), 1.96);
  EXPECT_LT(t975(31), t975(30));
}

TEST(Repeats, OneValueHasNoWidthAndNoneIsEmpty) {
  EXPECT_EQ(mean_interval({}).n, 0);
  const Interval one = mean_interval({3.5});
  EXPECT_EQ(one.n, 1);
  EXPECT_EQ(one.lo, 3.5);
  EXPECT_EQ(one.hi, 3.5);
}

// Repeat k of level 1: one request sent at 1000k ms, its first token (1 token) 20 ms later, its other
// n-1 tokens at 100 ms: throughput n / 0.1 s over the one-worker window, TTFT 20, TPOT 80 / (n-1).
std::string repeat_lines(int k, int n) {
  const int t0 = 1000 * k;
  std::string line = req(k + 1, 1, 0, false, t0, t0, t0 + 20, t0 + 100, n, true);
  line.insert(line.find(",\"level\""), str_cat(",\"repeat\":", k));
  return ev(k + 1, t0 + 20, 1) + ev(k + 1, t0 + 100, n - 1) + line;
}

TEST(Repeats, MeanAndStudentIntervalOfAHandWrittenRun) {
  const std::string path =
      write_temp("repeats", kFixtureHeader + repeat_lines(0, 5) + repeat_lines(1, 6) + repeat_lines(2, 10));
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->requests[2].repeat, 2);
  const std::vector<RepeatSummary> levels = summarize_repeats(*run);
  ASSERT_EQ(levels.size(), 1u);
  // Throughputs 50, 60, 100: mean 70, s^2 = (400 + 100 + 900) / 2 = 700, half-width t(2) * sqrt(700 / 3).
  const Interval& t = levels[0].output_throughput;
  EXPECT_EQ(t.n, 3);
  EXPECT_NEAR(t.mean, 70, 1e-9);
  EXPECT_NEAR(t.hi - t.mean, 4.302653 * std::sqrt(700.0 / 3), 1e-3);
  EXPECT_NEAR(t.mean - t.lo, 4.302653 * std::sqrt(700.0 / 3), 1e-3);
  EXPECT_NEAR(levels[0].ttft_p50_ms.mean, 20, 1e-9);
  EXPECT_NEAR(levels[0].ttft_p50_ms.hi, 20, 1e-9);  // no spread, no width
  EXPECT_NEAR(levels[0].tpot_p50_ms.mean, (20 + 16 + 80.0 / 9) / 3, 1e-9);
  // The pooled row: each run's own window (the 900 ms gaps between runs are no one's), their mean.
  EXPECT_NEAR(summarize_run(*run)[0].output_throughput, 70, 1e-9);
  EXPECT_NE(markdown_repeats(levels).find("| 1 | 3 | 70.0 ["), std::string::npos) << markdown_repeats(levels);
  std::filesystem::remove(path);
}

TEST(Repeats, ARunOfOneRepeatHasNoRepeatTable) {
  const std::string path = write_temp("repeats_one", fixture());
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_TRUE(summarize_repeats(*run).empty());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mtp::loadgen
