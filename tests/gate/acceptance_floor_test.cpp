// The acceptance-floor metrics of `mtp gate`: acceptance per draft position and mean acceptance length per
// traffic category of a replay, and the bootstrap bound on net speedup from replay runs of one trace against
// a target and a baseline server, on scripted run files whose figures are known.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli_util.h"
#include "gate/gate.h"
#include "loadgen/record.h"
#include "rules_fixture.h"
#include "test_util.h"

namespace mtp::gate {
namespace {

using mtp::gate::testing::rule_error;
using mtp::gate::testing::rules_of;
using mtp::testing::TempDir;

// A replay run file: one request per trace line, each taking `seconds` for 10 tokens.
struct ReplayWriter {
  std::vector<loadgen::RequestRecord> requests;
  void add(int line, const std::string& category, double seconds, const loadgen::Json& timings = {}) {
    loadgen::RequestRecord r;
    r.id = static_cast<int64_t>(requests.size());
    r.level = 2;
    r.ok = true;
    r.category = category;
    r.trace_source = "trace.jsonl:" + std::to_string(line);
    r.sent_ns = 0;
    r.first_token_ns = 50'000'000;
    r.end_ns = static_cast<int64_t>(seconds * 1e9);
    r.completion_tokens = 10;
    r.timings = timings;
    requests.push_back(r);
  }
  std::string write(const TempDir& dir, const std::string& name) const {
    const loadgen::Json h = {
        {"type", "header"}, {"tool", "mtp replay"}, {"start_utc", "2100-01-01T00:00:00Z"}};
    std::string text = h.dump() + "\n";
    for (const auto& r : requests) text += loadgen::request_json(r).dump() + "\n";
    std::ofstream(dir.file(name)) << text;
    return dir.file(name);
  }
};

// 20 "chat" lines twice as fast with drafting (10 rounds each, position 1 accepted in 8, position 2 in 5,
// 13 drafts accepted), 30 "code" lines alternately 0.6 s and 1.35 s against 1 s: 2.6% faster in sum, with a
// spread that 30 pairs cannot tell from "not faster".
struct Scripted {
  ReplayWriter on, off;
  Scripted() {
    const loadgen::Json drafted = {{"draft_n", 20},
                                   {"draft_n_accepted", 13},
                                   {"draft_rounds", 10},
                                   {"acceptance_per_position", {0.8, 0.5}}};
    for (int i = 0; i < 20; ++i) on.add(i, "chat", 0.5, drafted), off.add(i, "chat", 1.0);
    for (int i = 20; i < 50; ++i)
      on.add(i, "code", i % 2 == 0 ? 0.6 : 1.35, drafted), off.add(i, "code", 1.0);
  }
};

TEST(AcceptanceFloor, RulesNameAPositionAndSelectRequestsOnly) {
  EXPECT_NE(
      rule_error(R"("metric": "position_acceptance", "op": ">=", "threshold": 0.5, "statistic": "wilson")")
          .find("needs \"position\""),
      std::string::npos);
  EXPECT_NE(
      rule_error(
          R"("metric": "position_acceptance", "position": 0, "op": ">=", "threshold": 0.5, "statistic": "wilson")")
          .find("a draft position, 1 .. 64"),
      std::string::npos);
  EXPECT_NE(
      rule_error(
          R"("metric": "draft_acceptance", "position": 1, "op": ">=", "threshold": 0.5, "statistic": "wilson")")
          .find("position_acceptance only"),
      std::string::npos);
  EXPECT_NE(
      rule_error(
          R"("metric": "kld_mean", "category": "chat", "op": "<=", "threshold": 0.5, "statistic": "value")")
          .find("selects requests of a bench or replay run"),
      std::string::npos);
  EXPECT_NE(
      rule_error(R"("metric": "net_speedup", "op": ">=", "threshold": 1, "statistic": "bootstrap_mean")")
          .find("it takes value or bootstrap"),
      std::string::npos);
  EXPECT_NE(
      rule_error(
          R"("metric": "net_speedup", "server": "target", "op": ">=", "threshold": 1, "statistic": "bootstrap")")
          .find("drop \"server\""),
      std::string::npos);
  EXPECT_NE(
      rule_error(
          R"("metric": "mean_acceptance_length", "stratum": "", "op": ">=", "threshold": 1, "statistic": "value")")
          .find("\"stratum\" must be a non-empty string"),
      std::string::npos);
}

TEST(AcceptanceFloor, RatioBootstrapIsExactOnConstantUnitsAndNearTheDeltaMethodOtherwise) {
  EXPECT_EQ(bootstrap_ratio_bound(std::vector<RatioUnit>(25, {10, 0.5, 10, 1.0}), 0.95, true), 2.0);
  // Baseline 1 s per pair, the target alternately 0.6 and 1.35 s: speedup 1 / mean(T); by the delta method
  // its lower bound is about 1 / (mean + z * sd / sqrt(n)).
  std::vector<RatioUnit> units;
  for (int i = 0; i < 400; ++i) units.push_back({10, i % 2 == 0 ? 0.6 : 1.35, 10, 1.0});
  EXPECT_NEAR(ratio_of_sums(units), 1 / 0.975, 1e-12);
  const double delta = 1 / (0.975 + normal_quantile(0.95) * 0.375 / std::sqrt(400.0));
  EXPECT_NEAR(bootstrap_ratio_bound(units, 0.95, true), delta, 0.01);
  EXPECT_GT(bootstrap_ratio_bound(units, 0.95, false), ratio_of_sums(units));
}

TEST(AcceptanceFloor, PerCategoryAcceptanceAndNetSpeedupFromPairedReplays) {
  TempDir dir;
  const Scripted s;
  const std::string on = s.on.write(dir, "on.jsonl"), off = s.off.write(dir, "off.jsonl");
  const Rules rules = rules_of(R"({"gate": "g", "rules": [
    {"id": "chat-pos1", "metric": "position_acceptance", "position": 1, "category": "chat", "op": ">=", "threshold": 0.7, "statistic": "wilson", "min_samples": 100},
    {"id": "chat-pos2", "metric": "position_acceptance", "position": 2, "category": "chat", "op": ">=", "threshold": 0.5, "statistic": "wilson"},
    {"id": "chat-pos3", "metric": "position_acceptance", "position": 3, "category": "chat", "op": ">=", "threshold": 0.01, "statistic": "wilson"},
    {"id": "chat-length", "metric": "mean_acceptance_length", "category": "chat", "op": ">=", "threshold": 2.3, "statistic": "bootstrap", "min_samples": 20},
    {"id": "chat-speedup", "metric": "net_speedup", "category": "chat", "op": ">=", "threshold": 1, "statistic": "bootstrap", "min_samples": 20},
    {"id": "code-speedup", "metric": "net_speedup", "category": "code", "op": ">=", "threshold": 1, "statistic": "bootstrap", "min_samples": 30},
    {"id": "code-point", "metric": "net_speedup", "category": "code", "op": ">=", "threshold": 1, "statistic": "value"},
    {"id": "code-enough", "metric": "net_speedup", "category": "code", "op": ">=", "threshold": 1, "statistic": "bootstrap", "min_samples": 31}]})");
  const Lock lock{rules.sha256, "2026-01-01T00:00:00Z", {}};
  auto v = judge(rules, lock, {on}, {off});
  ASSERT_TRUE(v.ok()) << v.status().message();
  ASSERT_EQ(v->size(), 8u);
  const Verdict &pos1 = (*v)[0], &pos2 = (*v)[1], &pos3 = (*v)[2], &length = (*v)[3];
  EXPECT_EQ(pos1.samples, 200);  // draft rounds of the chat requests; the baseline's drafted none
  EXPECT_DOUBLE_EQ(pos1.estimate, 0.8);
  EXPECT_DOUBLE_EQ(pos1.bound, wilson_bound(160, 200, 0.95, true));
  EXPECT_TRUE(pos1.pass) << pos1.why;
  EXPECT_FALSE(pos2.pass) << pos2.why;  // 0.5 exactly: its lower bound is under 0.5
  EXPECT_EQ(pos3.estimate, 0.0);        // never drafted that far: every round counts as not accepted
  EXPECT_FALSE(pos3.pass);
  EXPECT_EQ(length.samples, 20);
  EXPECT_DOUBLE_EQ(length.estimate, 2.3);
  EXPECT_DOUBLE_EQ(length.bound, 2.3);
  EXPECT_TRUE(length.pass) << length.why;

  const Verdict &chat = (*v)[4], &code = (*v)[5], &point = (*v)[6], &few = (*v)[7];
  EXPECT_EQ(chat.samples, 20);
  EXPECT_DOUBLE_EQ(chat.bound, 2.0);
  EXPECT_TRUE(chat.pass) << chat.why;
  EXPECT_EQ(code.samples, 30);
  EXPECT_NEAR(code.estimate, 30 / 29.25, 1e-12);
  EXPECT_LT(code.bound, 0.95);  // delta method: 1 / (0.975 + 1.645 * 0.375 / sqrt 30) = 0.91
  EXPECT_GT(code.bound, 0.85);
  EXPECT_FALSE(code.pass) << code.why;
  EXPECT_TRUE(point.pass) << point.why;  // the point value alone would have let it through
  EXPECT_EQ(few.why, "30 samples, fewer than the 31 the rule requires");

  // Without the baseline run there are no pairs; a run of the wrong kind as a baseline is refused.
  auto alone = judge(rules, lock, {on});
  ASSERT_TRUE(alone.ok()) << alone.status().message();
  EXPECT_EQ((*alone)[4].samples, 0);
  EXPECT_NE((*alone)[4].why.find("no prompt pairs"), std::string::npos) << (*alone)[4].why;
  const std::string bench = dir.file("bench.jsonl");
  std::ofstream(bench) << R"({"type": "header", "tool": "mtp bench", "start_utc": "2100-01-01T00:00:00Z"})"
                       << "\n";
  auto wrong = judge(rules, lock, {on}, {bench});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("--baseline takes an mtp replay run"), std::string::npos);
}

TEST(AcceptanceFloor, GateRunPairsReplaysGivenWithBaseline) {
  TempDir dir;
  const Scripted s;
  const std::string on = s.on.write(dir, "on.jsonl"), off = s.off.write(dir, "off.jsonl");
  const std::string rules = dir.file("rules.json");
  std::ofstream(rules) << R"({"gate": "floor", "rules": [
    {"id": "code-speedup", "metric": "net_speedup", "category": "code", "op": ">=", "threshold": 1, "statistic": "bootstrap", "min_samples": 30}]})";
  ASSERT_EQ(mtp::testing::run_mtp("gate freeze " + rules, true).exit_code, 0);
  auto fail = mtp::testing::run_mtp("gate run " + rules + " " + on + " --baseline " + off, true);
  EXPECT_EQ(fail.exit_code, 1) << fail.output;
  EXPECT_NE(fail.output.find("| code-speedup | FAIL | 30 | 1.026 | lower bootstrap bound (95%)"),
            std::string::npos)
      << fail.output;
}

}  // namespace
}  // namespace mtp::gate
