// `--baseline`: both servers get the same prompts, interleaved with alternating order; the paired ratios
// show which server is faster and by roughly how much (two fake servers of scripted speeds), and the
// interval of a hand-written run is the t interval of its log ratios.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "fake_server.h"
#include "loadgen/paired.h"
#include "loadgen/runner.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

using namespace mtp::testing;

// Two tokens after the first, each `gap_ms` apart: TPOT about gap_ms.
std::vector<ScriptedChunk> script(int gap_ms) {
  return {{5, delta_chunk("content", "ab")},
          {gap_ms, delta_chunk("content", "cd")},
          {gap_ms, delta_chunk("content", "ef")},
          {0, finish_chunk(4, 3, nullptr)},
          {0, "[DONE]"}};
}

TEST(Baseline, SamePromptsInterleavedAndTheFasterTargetHasRatiosToMatch) {
  FakeServer target(script(5)), baseline(script(60));
  const std::string path = write_temp("paired_run", "");
  BenchOptions o = bench_options(target.url(), {1}, 4, 8, 3);
  o.baseline_url = baseline.url();
  {
    auto out = JsonlWriter::open(path);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(run_bench(o, **out).ok());
  }
  EXPECT_EQ(target.bodies(), baseline.bodies());  // one worker: the same prompts in the same order
  EXPECT_EQ(target.bodies().size(), 5u);
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->requests.size(), 10u);
  std::map<int64_t, std::map<std::string, const RequestRecord*>> pairs;
  for (const RequestRecord& r : run->requests) pairs[r.pair][r.server] = &r;
  ASSERT_EQ(pairs.size(), 5u);
  for (const auto& [n, p] : pairs) {
    ASSERT_EQ(p.size(), 2u) << n;
    const bool target_first = p.at("target")->sent_ns < p.at("baseline")->sent_ns;
    EXPECT_EQ(target_first, n % 2 == 0) << n;  // the order alternates
    EXPECT_EQ(p.at("target")->id, 2 * n);
  }
  const std::vector<PairedSummary> levels = summarize_pairs(*run);
  ASSERT_EQ(levels.size(), 1u);
  EXPECT_EQ(levels[0].pairs, 4);  // the warm-up pair excluded
  // At most 5 / 60 or so; no lower bound: the target's small gaps can reach the client coalesced.
  EXPECT_LT(levels[0].tpot.mean, 0.5);
  EXPECT_GT(levels[0].tpot.n, 0);
  EXPECT_GT(levels[0].output_rate.mean, 2.0);  // about 125 / 15 ms
  EXPECT_LE(levels[0].tpot.lo, levels[0].tpot.mean);
  EXPECT_GE(levels[0].tpot.hi, levels[0].tpot.mean);
  std::filesystem::remove(path);
}

// Pair n: the target takes 100 ms for 11 tokens, the baseline 100 * f_n ms: output-rate ratios f_n.
std::string pair_lines(int n, double f) {
  auto line = [&](int server, int end_ms) {
    std::string s = req(2 * n + server, 1, 0, false, 0, 0, -1, end_ms, 11, true);
    s.insert(s.find(",\"level\""),
             str_cat(",\"pair\":", n, ",\"server\":\"", server == 0 ? "target" : "baseline", "\""));
    return s;
  };
  return line(0, 100) + line(1, static_cast<int>(100 * f));
}

TEST(Baseline, ThePairedIntervalIsTheTIntervalOfTheLogRatios) {
  const std::string path =
      write_temp("paired_fixture", kFixtureHeader + pair_lines(0, 1.5) + pair_lines(1, 2) + pair_lines(2, 3));
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  const std::vector<PairedSummary> levels = summarize_pairs(*run);
  ASSERT_EQ(levels.size(), 1u);
  const Interval& r = levels[0].output_rate;
  const double logs[3] = {std::log(1.5), std::log(2.0), std::log(3.0)};
  const double mean = (logs[0] + logs[1] + logs[2]) / 3;
  double ss = 0;
  for (double l : logs) ss += (l - mean) * (l - mean);
  const double half = 4.302653 * std::sqrt(ss / 2 / 3);
  EXPECT_EQ(r.n, 3);
  EXPECT_NEAR(r.mean, std::cbrt(1.5 * 2 * 3), 1e-9);
  EXPECT_NEAR(r.lo, std::exp(mean - half), 1e-3);
  EXPECT_NEAR(r.hi, std::exp(mean + half), 1e-3);
  EXPECT_EQ(levels[0].tpot.n, 0);  // no first-token times: no TPOT
  EXPECT_NE(markdown_pairs(levels).find("| 1 | 3 | 2.080 ["), std::string::npos) << markdown_pairs(levels);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mtp::loadgen
