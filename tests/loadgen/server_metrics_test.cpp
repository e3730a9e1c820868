// Speculative-decoding figures from a server's GET /metrics (vLLM's counters): the Prometheus text reader,
// the counters it yields, and `mtp bench` / `mtp replay` recording each level's change in the run file,
// which the report then shows; a server without /metrics is skipped quietly, a malformed body warned about.
#include <gtest/gtest.h>

#include <filesystem>

#include "fake_server.h"
#include "loadgen/prom_text.h"
#include "loadgen/replay.h"
#include "loadgen/report_sections.h"
#include "loadgen/runner.h"
#include "loadgen/spec_counters.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

using namespace mtp::testing;

TEST(PromText, ReadsSamplesWithLabelsCommentsTimestampsAndSpecialValues) {
  const std::string text =
      "# HELP x_total A counter.\n"
      "# TYPE x_total counter\n"
      "\n"
      "x_total{engine=\"0\",path=\"a\\\"b\\\\c\\nd\",} 12.0\n"
      "  up 1 1712345678000\r\n"
      "h_bucket{le=\"+Inf\"} +Inf\n"
      "g{a = \"1\" , b=\"2\"}\t-3.5e2\n"
      "n NaN";
  auto samples = parse_prom_text(text);
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  ASSERT_EQ(samples->size(), 5u);
  const PromSample& x = (*samples)[0];
  EXPECT_EQ(x.name, "x_total");
  EXPECT_EQ(x.value, 12.0);
  EXPECT_EQ(x.label("engine"), "0");
  EXPECT_EQ(x.label("path"), "a\"b\\c\nd");
  EXPECT_EQ(x.label("absent"), "");
  EXPECT_EQ((*samples)[1].name, "up");
  EXPECT_EQ((*samples)[1].value, 1.0);
  EXPECT_TRUE(std::isinf((*samples)[2].value));
  EXPECT_EQ((*samples)[3].label("b"), "2");
  EXPECT_EQ((*samples)[3].value, -350.0);
  EXPECT_TRUE(std::isnan((*samples)[4].value));
}

TEST(PromText, MalformedLinesFailWithTheirNumber) {
  const std::pair<std::string, std::string> cases[] = {
      {"ok 1\nx{a=\"1\" 2\n", "line 2: labels not closed"},
      {"x{a=1} 2", "line 1: a label value that is not quoted"},
      {"x{a=\"1} 2", "line 1: a label value without its closing quote"},
      {"x", "line 1: no value after 'x'"},
      {"x one", "line 1: value 'one' is not a number"},
      {"x 1 2 3", "line 1: text after the timestamp"},
      {"x inf", "line 1: value 'inf' is not a number"},
      {"<html><body>Not Found</body></html>", "line 1: no metric name"},
      {"x{=\"1\"} 2", "line 1: a label without a name"},
  };
  for (const auto& [text, why] : cases) {
    auto samples = parse_prom_text(text);
    ASSERT_FALSE(samples.ok()) << text;
    EXPECT_NE(samples.status().message().find(why), std::string::npos)
        << text << " -> " << samples.status().message();
  }
}

TEST(SpecCounters, SumsEnginesReadsPositionsAndSubtracts) {
  auto before = parse_prom_text(
      "vllm:spec_decode_num_drafts_total{engine=\"0\"} 10\n"
      "vllm:spec_decode_num_drafts_total{engine=\"1\"} 5\n"
      "vllm:spec_decode_num_draft_tokens{engine=\"0\"} 30\n"  // without the _total suffix
      "vllm:spec_decode_num_accepted_tokens_total 9\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 2\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 7\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"x\"} 99\n"
      "vllm:spec_decode_num_drafts_created 1e9\n");  // another metric with the prefix
  ASSERT_TRUE(before.ok());
  const SpecCounters b = spec_counters(*before);
  EXPECT_TRUE(b.present);
  EXPECT_EQ(b.drafts, 15);
  EXPECT_EQ(b.draft_tokens, 30);
  EXPECT_EQ(b.accepted_tokens, 9);
  ASSERT_EQ(b.accepted_per_position.size(), 2u);
  EXPECT_EQ(b.accepted_per_position[0], 7);
  SpecCounters a = b;
  a.drafts += 10;
  a.draft_tokens += 30;
  a.accepted_tokens += 15;
  a.accepted_per_position = {16, 8, 1};
  const SpecCounters d = counters_delta(a, b);
  EXPECT_EQ(d.drafts, 10);
  EXPECT_NEAR(d.acceptance_rate(), 0.5, 1e-12);
  EXPECT_NEAR(d.mean_accepted_length(), 2.5, 1e-12);
  ASSERT_EQ(d.accepted_per_position.size(), 3u);
  EXPECT_NEAR(d.position_rate(0), 0.9, 1e-12);
  EXPECT_NEAR(d.position_rate(2), 0.1, 1e-12);
  EXPECT_FALSE(counters_delta(a, SpecCounters()).present);
  EXPECT_FALSE(spec_counters(*parse_prom_text("llamacpp:tokens_predicted_total 5\n")).present);
}

// Runs `o` into a temporary run file and reads it back.
RunData bench(const BenchOptions& o, const std::string& name) {
  return run_to_file(name, [&](JsonlWriter& out) { return run_bench(o, out); });
}

TEST(ServerMetrics, BenchRecordsEachLevelsCountersAndTheReportShowsThem) {
  FakeServer server(two_delta_script());  // no timings: the counters are the only speculative figures
  server.serve_counters({2, 6, 3, {2, 1, 0}});
  std::vector<std::string> warnings;
  BenchOptions o = bench_options(server.url(), {1, 2}, 3, 8, 4);
  o.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  const RunData run = bench(o, "metrics_bench");
  EXPECT_TRUE(warnings.empty());
  // Each level: 1 warm-up + 3 measured requests between its two scrapes.
  ASSERT_EQ(run.server_metrics.size(), 2u);
  EXPECT_EQ(run.server_metrics[1].level, 2);
  const std::vector<LevelSummary> levels = summarize_run(run);
  ASSERT_EQ(levels.size(), 2u);
  const SpecCounters& c = levels[0].server_spec;
  ASSERT_TRUE(c.present);
  EXPECT_EQ(c.drafts, 8);
  EXPECT_EQ(c.draft_tokens, 24);
  EXPECT_EQ(c.accepted_tokens, 12);
  ASSERT_EQ(c.accepted_per_position.size(), 3u);
  EXPECT_NEAR(c.position_rate(0), 1.0, 1e-12);
  EXPECT_NEAR(c.position_rate(1), 0.5, 1e-12);
  const std::string text = markdown_sections(run);
  EXPECT_NE(text.find("from the server's /metrics"), std::string::npos) << text;
  EXPECT_NE(text.find("| 1 | 8 | 24 | 12 | 50.0% | 2.50 | 1.00 / 0.50 / 0.00 |"), std::string::npos) << text;
  const Json j = json_sections(run, "x");
  EXPECT_EQ(j["levels"][0]["server_spec_decode"]["num_drafts"], 8);
  EXPECT_NEAR(j["levels"][0]["spec_decode_acceptance_rate"].get<double>(), 50.0, 1e-9);
  EXPECT_NEAR(j["levels"][0]["spec_decode_acceptance_length"].get<double>(), 2.5, 1e-9);
}

TEST(ServerMetrics, EachServerOfAPairedRunHasItsOwnCounters) {
  FakeServer target(two_delta_script()), baseline(two_delta_script());
  target.serve_counters({1, 4, 3, {1}});
  baseline.serve_counters({1, 4, 1, {1}});
  BenchOptions o = bench_options(target.url(), {1}, 2, 8, 4);
  o.baseline_url = baseline.url();
  const RunData run = bench(o, "metrics_paired");
  const std::vector<LevelSummary> levels = summarize_run(run);
  ASSERT_EQ(levels.size(), 2u);
  for (const LevelSummary& s : levels) {
    ASSERT_TRUE(s.server_spec.present) << s.server;
    EXPECT_EQ(s.server_spec.drafts, 3) << s.server;  // 1 warm-up + 2 measured requests each
    EXPECT_NEAR(s.server_spec.acceptance_rate(), s.server == "target" ? 0.75 : 0.25, 1e-12);
  }
}

TEST(ServerMetrics, NoMetricsRouteIsSkippedQuietly) {
  FakeServer server(two_delta_script());  // GET /metrics: 404
  std::vector<std::string> warnings;
  BenchOptions o = bench_options(server.url(), {1}, 2, 8, 4);
  o.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  const RunData run = bench(o, "metrics_absent");
  EXPECT_TRUE(warnings.empty());
  EXPECT_TRUE(run.server_metrics.empty());
  EXPECT_EQ(run.requests.size(), 3u);
  EXPECT_EQ(markdown_sections(run).find("/metrics"), std::string::npos);
}

TEST(ServerMetrics, AMalformedBodyIsAWarningAndTheRunGoesOn) {
  FakeServer server(two_delta_script());
  server.serve_metrics_text("<html>metrics are elsewhere</html>\n");
  std::vector<std::string> warnings;
  BenchOptions o = bench_options(server.url(), {1, 2}, 2, 8, 4);
  o.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  const RunData run = bench(o, "metrics_malformed");
  ASSERT_EQ(warnings.size(), 2u);  // one per level
  EXPECT_NE(warnings[0].find("/metrics is not Prometheus text (line 1:"), std::string::npos) << warnings[0];
  EXPECT_TRUE(run.server_metrics.empty());
  EXPECT_EQ(run.requests.size(), 6u);
}

TEST(ServerMetrics, ReplayRecordsTheCountersOfTheWholeReplay) {
  FakeServer server(two_delta_script());
  server.serve_counters({1, 3, 2, {1, 1}});
  ReplayOptions o;
  o.client.url = server.url();
  o.client.timeout_s = 10;
  o.concurrency = 2;
  std::vector<TraceRequest> reqs(5);
  for (TraceRequest& t : reqs) t.messages = Json::array({Json{{"role", "user"}, {"content", "hi"}}});
  const RunData run =
      run_to_file("metrics_replay", [&](JsonlWriter& out) { return run_replay(o, reqs, out); });
  const std::vector<LevelSummary> levels = summarize_run(run);
  ASSERT_EQ(levels.size(), 1u);
  EXPECT_EQ(levels[0].server_spec.drafts, 5);
  EXPECT_NEAR(levels[0].server_spec.mean_accepted_length(), 3.0, 1e-12);
}

TEST(ServerMetrics, ARunFileLineWithoutCountersNamesItsLine) {
  const std::string path =
      write_temp("metrics_bad_line",
                 std::string(kFixtureHeader) + R"({"type":"server_metrics","level":1,"spec_decode":3})");
  auto run = read_run(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find(":2: \"spec_decode\" is not an object"), std::string::npos)
      << run.status().message();
}

}  // namespace
}  // namespace mtp::loadgen
