// The report on a hand-written run file whose figures are computable by hand (docs/bench.md, "Metrics"),
// and its refusal of malformed files.
#include <gtest/gtest.h>

#include <filesystem>

#include "loadgen/report.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

TEST(Report, ComputesExactFiguresOfAHandWrittenRun) {
  const std::string path = write_temp("report_fixture", fixture());
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  const std::vector<LevelSummary> levels = summarize_run(*run);
  ASSERT_EQ(levels.size(), 2u);
  const LevelSummary& a = levels[0];
  EXPECT_EQ(a.concurrency, 1);
  EXPECT_EQ(a.completed, 3);
  EXPECT_EQ(a.failed, 1);
  EXPECT_EQ(a.total_output_tokens, 9);
  // TTFT 10, 20, 30: p50 20, p90 at rank 1.8 = 28, p99 at rank 1.98 = 29.8.
  EXPECT_NEAR(a.ttft_ms.median, 20, 1e-9);
  EXPECT_NEAR(a.ttft_ms.p90, 28, 1e-9);
  EXPECT_NEAR(a.ttft_ms.p99, 29.8, 1e-9);
  EXPECT_NEAR(a.ttft_ms.mean, 20, 1e-9);
  // TPOT 30/3, 30/2, 70/1.
  EXPECT_NEAR(a.tpot_ms.median, 15, 1e-9);
  EXPECT_NEAR(a.tpot_ms.p99, 15 + 0.98 * 55, 1e-9);
  // ITL per token: 5, 5 (10 ms over 2 tokens), 20; 10, 20; 70. Sorted 5 5 10 20 20 70.
  EXPECT_EQ(a.itl_ms.n, 6u);
  EXPECT_NEAR(a.itl_ms.median, 15, 1e-9);
  EXPECT_NEAR(a.itl_ms.p99, 20 + 0.95 * 50, 1e-9);
  EXPECT_NEAR(a.itl_ms.mean, 130.0 / 6, 1e-9);
  EXPECT_NEAR(a.e2el_ms.median, 50, 1e-9);
  EXPECT_NEAR(a.e2el_ms.p99, 99, 1e-9);
  // Dispatch lag 0, 2, 1, 0 (the failure counts: it held the worker).
  EXPECT_NEAR(a.lag_ms.mean, 0.75, 1e-9);
  EXPECT_NEAR(a.lag_ms.max, 2, 1e-9);
  // One worker: the window is its first send to its last end, 1000..1200 ms: 9 tokens, 3 requests.
  EXPECT_TRUE(a.window_steady);
  EXPECT_NEAR(a.window_s, 0.2, 1e-12);
  EXPECT_NEAR(a.output_throughput, 45, 1e-9);
  EXPECT_NEAR(a.request_throughput, 15, 1e-9);
  EXPECT_EQ(a.draft_n, 6);
  EXPECT_EQ(a.draft_accepted, 4);
  EXPECT_EQ(a.draft_rounds, 3);
  ASSERT_EQ(a.accepted_per_position.size(), 2u);
  EXPECT_NEAR(a.accepted_per_position[0], 2.0, 1e-12);  // 0.5*2 + 1.0*1
  // Level 2: workers 0 (2000..2300) and 1 (2050..2250): window 2050..2250. Tokens there: 2 + 5 + 5; requests
  // ending there: 10 and 11.
  const LevelSummary& b = levels[1];
  EXPECT_TRUE(b.window_steady);
  EXPECT_NEAR(b.window_s, 0.2, 1e-12);
  EXPECT_NEAR(b.duration_s, 0.3, 1e-12);
  EXPECT_NEAR(b.output_throughput, 60, 1e-9);
  EXPECT_NEAR(b.request_throughput, 10, 1e-9);
  std::filesystem::remove(path);
}

TEST(Report, JsonSummaryUsesVllmKeys) {
  const std::string path = write_temp("report_json", fixture());
  auto run = read_run(path);
  ASSERT_TRUE(run.ok());
  const Json j = json_report(*run, summarize_run(*run), path);
  const Json& l = j["levels"][0];
  EXPECT_EQ(l["max_concurrency"], 1);
  EXPECT_EQ(l["completed"], 3);
  EXPECT_EQ(l["failed"], 1);
  EXPECT_EQ(l["total_output_tokens"], 9);
  EXPECT_NEAR(l["median_ttft_ms"].get<double>(), 20, 1e-9);
  EXPECT_NEAR(l["p99_itl_ms"].get<double>(), 67.5, 1e-9);
  EXPECT_NEAR(l["output_throughput"].get<double>(), 45, 1e-9);
  EXPECT_NEAR(l["spec_decode_acceptance_rate"].get<double>(), 400.0 / 6, 1e-9);
  EXPECT_NEAR(l["spec_decode_acceptance_length"].get<double>(), 1 + 4.0 / 3, 1e-9);
  EXPECT_EQ(j["header"]["url"], "http://x");
  const std::string md = markdown_report(summarize_run(*run));
  EXPECT_NE(md.find("| 1 | 3 | 1 | 20.0 / 28.0 / 29.8 | 15.00 / 68.90 |"), std::string::npos) << md;
  std::filesystem::remove(path);
}

TEST(Report, MalformedLineNamesFileAndLine) {
  const std::string path = write_temp("report_bad", std::string(kFixtureHeader) + "{not json\n");
  auto run = read_run(path);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().message(), path + ":2: not a JSON object");
  std::filesystem::remove(path);
}

TEST(Report, MissingFieldAndUnknownTypeAreErrors) {
  const std::string a = write_temp("report_nofield", R"({"type":"request","id":1,"level":1})"
                                                     "\n");
  auto r1 = read_run(a);
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find(a + ":1: "), std::string::npos);
  const std::string b = write_temp("report_type",
                                   "\n"
                                   R"({"type":"what"})"
                                   "\n");
  auto r2 = read_run(b);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find(b + ":2: "), std::string::npos);
  EXPECT_FALSE(read_run("/nonexistent/run.jsonl").ok());
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

}  // namespace
}  // namespace mtp::loadgen
