// `mtp bench` and `mtp report` as a user runs them: exit codes, the table on stdout, the run file, and
// one-line errors.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "cli_util.h"
#include "fake_server.h"
#include "loadgen/report.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

using mtp::testing::run_mtp;

TEST(ReportCommand, PrintsTheTableAndWritesTheJsonSummary) {
  const std::string path = write_temp("cli_report", fixture());
  const std::string json = path + ".summary.json";
  const auto r = run_mtp("report '" + path + "' --json '" + json + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| 1 | 3 | 1 | 20.0 / 28.0 / 29.8 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| 2 | 3 | 0 |"), std::string::npos) << r.output;
  std::ifstream in(json);
  const Json j = Json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["levels"][1]["max_concurrency"], 2);
  EXPECT_NEAR(j["levels"][1]["output_throughput"].get<double>(), 60, 1e-9);
  std::filesystem::remove(path);
  std::filesystem::remove(json);
}

TEST(ReportCommand, WritesTheHtmlPageAndRefusesAPathItCannotCreate) {
  const std::string path = write_temp("cli_report_html", fixture());
  const std::string html = path + ".html";
  const auto r = run_mtp("report '" + path + "' --html '" + html + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(page.starts_with("<!DOCTYPE html>")) << page.substr(0, 80);
  EXPECT_TRUE(page.ends_with("</html>\n"));
  const auto bad = run_mtp("report '" + path + "' --html /nonexistent/dir/r.html", true);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("mtp report: "), std::string::npos) << bad.output;
  std::filesystem::remove(path);
  std::filesystem::remove(html);
}

TEST(ReportCommand, MalformedOrMissingFileIsAOneLineErrorAndExit1) {
  const std::string path = write_temp("cli_bad", std::string(kFixtureHeader) + "\n[1,2\n");
  const auto r = run_mtp("report '" + path + "'", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, "mtp report: " + path + ":3: not a JSON object\n");
  const auto missing = run_mtp("report /nonexistent/run.jsonl", true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.output, "mtp report: cannot open '/nonexistent/run.jsonl'\n");
  std::filesystem::remove(path);
}

TEST(BenchCommand, BadFlagsExit2) {
  EXPECT_EQ(run_mtp("bench --url http://127.0.0.1:1 --concurrency 1,0 -o /dev/null").exit_code, 2);
  EXPECT_EQ(run_mtp("bench --url http://127.0.0.1:1 --requests 0 -o /dev/null").exit_code, 2);
  EXPECT_EQ(run_mtp("bench -o /dev/null").exit_code, 2);                    // no --url
  EXPECT_EQ(run_mtp("bench --url 127.0.0.1:1 -o /dev/null").exit_code, 2);  // no scheme
  EXPECT_EQ(run_mtp("bench --url http://127.0.0.1:1 --rate 1,0 -o /dev/null").exit_code, 2);
  EXPECT_EQ(run_mtp("bench --url http://127.0.0.1:1 --rate fast -o /dev/null").exit_code, 2);
  EXPECT_EQ(run_mtp("bench --url http://127.0.0.1:1 --repeat 0 -o /dev/null").exit_code, 2);
  EXPECT_EQ(run_mtp("bench --url http://127.0.0.1:1 --baseline 127.0.0.1:2 -o /dev/null").exit_code, 2);
  const auto range =
      run_mtp("bench --url http://127.0.0.1:1 --prompt-tokens 64 --prompt-tokens-max 32 -o /dev/null", true);
  EXPECT_EQ(range.exit_code, 2);
  EXPECT_EQ(range.output, "mtp bench: --prompt-tokens-max 32 is below --prompt-tokens 64\n");
}

TEST(BenchCommand, MeasuresTheFakeServerAndPrintsTheReport) {
  mtp::testing::FakeServer server(
      {{20, mtp::testing::delta_chunk("content", "hi")},
       {10, mtp::testing::delta_chunk("content", " there")},
       {0, mtp::testing::finish_chunk(9, 4, {{"draft_n", 3}, {"draft_n_accepted", 3}})},
       {0, "[DONE]"}});
  const std::string path = write_temp("cli_bench", "");
  const auto r = run_mtp("bench --url " + server.url() +
                         " --concurrency 1,2 --requests 3 --warmup 1 --prompt-tokens 16 --max-tokens 4 -o '" +
                         path + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| 1 | 3 | 0 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| 2 | 3 | 0 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("100.0% of 9"), std::string::npos) << r.output;
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->requests.size(), 8u);
  EXPECT_EQ(run->header["options"]["prompt_tokens"], 16);
  std::filesystem::remove(path);
}

TEST(BenchCommand, RepeatRunsEveryLevelNTimesAndPrintsTheIntervals) {
  mtp::testing::FakeServer server({{5, mtp::testing::delta_chunk("content", "hi")},
                                   {5, mtp::testing::delta_chunk("content", " there")},
                                   {0, mtp::testing::finish_chunk(9, 4, nullptr)},
                                   {0, "[DONE]"}});
  const std::string path = write_temp("cli_repeat", "");
  const auto r =
      run_mtp("bench --url " + server.url() +
              " --concurrency 1,2 --repeat 3 --requests 2 --warmup 0 --max-tokens 4 -o '" + path + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Over the repeats"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| 2 | 3 | "), std::string::npos) << r.output;
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->requests.size(), 12u);
  int per_repeat[3] = {0, 0, 0};
  for (const auto& q : run->requests) {
    ASSERT_GE(q.repeat, 0);
    ASSERT_LT(q.repeat, 3);
    ++per_repeat[q.repeat];
  }
  EXPECT_EQ(per_repeat[0], 4);
  EXPECT_EQ(per_repeat[2], 4);
  std::filesystem::remove(path);
}

TEST(BenchCommand, UnreachableServerKeepsTheFailuresAndExits1) {
  int port = 0;
  {
    mtp::testing::FakeServer gone({});
    port = gone.port();
  }
  const std::string path = write_temp("cli_unreachable", "");
  const auto r = run_mtp("bench --url http://127.0.0.1:" + std::to_string(port) +
                             " --requests 2 --warmup 0 --timeout 5 -o '" + path + "'",
                         true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("all 2 requests failed"), std::string::npos) << r.output;
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_EQ(run->requests.size(), 2u);
  EXPECT_FALSE(run->requests[0].ok);
  EXPECT_FALSE(run->requests[0].error.empty());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mtp::loadgen
