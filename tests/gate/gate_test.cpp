// `mtp gate`: rules parsing and hashing, the lock's refusals, the statistics against direct computations, and
// verdicts on hand-written run files, through the library and through the command as a user runs it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "cli_util.h"
#include "gate/gate.h"
#include "gate/probe.h"
#include "loadgen/record.h"
#include "rules_fixture.h"
#include "server_process.h"
#include "test_util.h"

namespace mtp::gate {
namespace {

using mtp::gate::testing::parse_error;
using mtp::gate::testing::rule_json;
using mtp::gate::testing::rules_of;
using mtp::testing::TempDir;

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(GateRules, MalformedRulesNameTheRuleAndField) {
  EXPECT_EQ(parse_error("[1]"), "rules.json: not a JSON object");
  EXPECT_EQ(parse_error(R"({"gate": "g", "rules": []})"), "rules.json: \"rules\" must be a non-empty array");
  EXPECT_EQ(parse_error(R"({"gate": "g", "rulez": []})"),
            "rules.json: unknown field \"rulez\" (known: gate, inputs, rules)");
  const std::string ok_rest = R"("op": ">=", "threshold": 1, "statistic": "mean")";
  EXPECT_NE(
      parse_error(rule_json(R"("metric": "speed", )" + ok_rest)).find("rule 'r': unknown metric 'speed'"),
      std::string::npos);
  EXPECT_NE(
      parse_error(rule_json(R"("metric": "tpot_ms", "statistic": "wilson", "op": "<=", "threshold": 1)"))
          .find("statistic 'wilson' does not apply to metric 'tpot_ms'"),
      std::string::npos);
  EXPECT_NE(parse_error(rule_json(R"("metric": "tpot_ms", "op": ">", "threshold": 1, "statistic": "mean")"))
                .find("\"op\" must be \">=\" or \"<=\""),
            std::string::npos);
  EXPECT_NE(
      parse_error(rule_json(R"("metric": "tpot_ms", "confidence": 1.5, )" + ok_rest)).find("confidence"),
      std::string::npos);
  EXPECT_NE(
      parse_error(rule_json(R"("metric": "tpot_ms", "min_samples": 0, )" + ok_rest)).find("min_samples"),
      std::string::npos);
  EXPECT_NE(parse_error(rule_json(R"("metric": "tpot_ms", "colour": 1, )" + ok_rest))
                .find("unknown field \"colour\""),
            std::string::npos);
  EXPECT_NE(
      parse_error(R"({"gate": "g", "rules": [{"id": "a", "metric": "tpot_ms", "op": "<=", "threshold": 1,
      "statistic": "mean"}, {"id": "a", "metric": "e2e_s", "op": "<=", "threshold": 1, "statistic": "mean"}]})")
          .find("two rules have the id 'a'"),
      std::string::npos);
}

TEST(GateRules, KlDivergenceMetricsTakeTheirOwnStatistics) {
  EXPECT_NE(
      parse_error(rule_json(R"("metric": "kld_p99", "op": "<=", "threshold": 1, "statistic": "normal")"))
          .find("statistic 'normal' does not apply to metric 'kld_p99' (it takes value"),
      std::string::npos);
  EXPECT_NE(parse_error(rule_json(R"("metric": "tpot_ms", "op": "<=", "threshold": 1, "statistic": "value")"))
                .find("statistic 'value' does not apply to metric 'tpot_ms'"),
            std::string::npos);
  EXPECT_NE(
      parse_error(rule_json(R"("metric": "same_top_rate", "op": ">=", "threshold": 1, "statistic": "value")"))
          .find("(it takes wilson)"),
      std::string::npos);
  EXPECT_NE(
      parse_error(
          rule_json(R"("metric": "kld_mean", "level": 1, "op": "<=", "threshold": 1, "statistic": "value")"))
          .find("a KL-divergence metric has no \"level\" or \"server\""),
      std::string::npos);
}

TEST(GateRules, HashIgnoresLayoutAndKeyOrderButNotValues) {
  const auto a =
      parse_rules(rule_json(R"("metric": "tpot_ms", "op": "<=", "threshold": 30, "statistic": "mean")"), "a");
  const auto b = parse_rules(
      "{\n  \"rules\": [ {\"statistic\": \"mean\", \"threshold\": 30,\n \"op\": \"<=\", \"metric\": "
      "\"tpot_ms\", "
      "\"id\": \"r\"} ],\n  \"gate\": \"g\"\n}\n",
      "b");
  const auto c =
      parse_rules(rule_json(R"("metric": "tpot_ms", "op": "<=", "threshold": 31, "statistic": "mean")"), "c");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->sha256, b->sha256);
  EXPECT_NE(a->sha256, c->sha256);
  EXPECT_EQ(a->sha256, sha256_hex(a->canonical));
}

TEST(GateStats, Sha256AndNormalQuantileMatchKnownValues) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_NEAR(normal_quantile(0.95), 1.6448536269514722, 1e-9);
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-9);
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-12);
}

TEST(GateStats, WilsonBoundIsTheScoreIntervalsEdge) {
  // 8 of 10 at 95% one-sided, computed directly from the score interval's formula with z = 1.6448536.
  const double z = 1.6448536269514722, n = 10, p = 0.8;
  const double center = (p + z * z / (2 * n)) / (1 + z * z / n);
  const double half = z * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n);
  EXPECT_NEAR(wilson_bound(8, 10, 0.95, true), center - half, 1e-9);
  EXPECT_NEAR(wilson_bound(8, 10, 0.95, false), center + half, 1e-9);
  EXPECT_NEAR(wilson_bound(8, 10, 0.95, true), 0.540793,
              1e-6);  // Python: statistics.NormalDist, same formula
  // All successes: the upper bound is 1 and the lower one rises with n.
  EXPECT_NEAR(wilson_bound(50, 50, 0.95, false), 1.0, 1e-12);
  EXPECT_LT(wilson_bound(5, 5, 0.95, true), wilson_bound(50, 50, 0.95, true));
}

TEST(GateStats, BootstrapBoundsBracketTheMeanAndRepeat) {
  std::vector<double> v;
  for (int i = 0; i < 40; ++i) v.push_back(10 + (i * 7919 % 13) - 6);  // mean 10 +- a spread
  double mean = 0;
  for (double x : v) mean += x / v.size();
  const double lo = bootstrap_bound(v, false, 0.95, true), hi = bootstrap_bound(v, false, 0.95, false);
  EXPECT_LT(lo, mean);
  EXPECT_GT(hi, mean);
  EXPECT_GT(lo, mean - 3);  // the standard error is about 0.6: the 5% bound sits about 1 below
  EXPECT_EQ(lo, bootstrap_bound(v, false, 0.95, true));
  EXPECT_EQ(bootstrap_bound(std::vector<double>(9, 4.0), true, 0.95, true), 4.0);
}

// A run file as `mtp bench` writes it: a header with its start time, then request lines.
struct RunWriter {
  std::string start_utc = "2100-01-01T00:00:00Z";
  std::vector<loadgen::RequestRecord> requests;
  void add(int level, double tpot_ms, int64_t tokens, bool ok = true, int64_t draft_n = 0,
           int64_t accepted = 0, const std::string& server = "", int64_t pair = -1) {
    loadgen::RequestRecord r;
    r.id = static_cast<int64_t>(requests.size());
    r.level = level;
    r.ok = ok;
    r.server = server;
    r.pair = pair;
    r.sent_ns = 0;
    r.first_token_ns = 100'000'000;
    r.completion_tokens = tokens;
    r.end_ns = r.first_token_ns + static_cast<int64_t>(tpot_ms * 1e6) * (tokens - 1);
    if (draft_n > 0) r.timings = {{"draft_n", draft_n}, {"draft_n_accepted", accepted}};
    requests.push_back(r);
  }
  std::string write(const TempDir& dir, const std::string& name) const {
    loadgen::Json h = {{"type", "header"}, {"tool", "mtp bench"}, {"start_utc", start_utc}};
    std::string text = h.dump() + "\n";
    for (const auto& r : requests) text += loadgen::request_json(r).dump() + "\n";
    mtp::gate::write(dir.file(name), text);
    return dir.file(name);
  }
};

TEST(GateJudge, VerdictsFollowTheBoundsAndTheSampleSize) {
  TempDir dir;
  RunWriter run;
  for (int i = 0; i < 20; ++i) run.add(1, 20 + (i % 5), 33, true, 30, 24);  // TPOT 20-24 ms, acceptance 0.8
  for (int i = 0; i < 3; ++i) run.add(4, 50, 33);
  run.add(1, 20, 33, false);
  const std::string path = run.write(dir, "run.jsonl");
  const Rules rules = rules_of(R"({"gate": "g", "rules": [
    {"id": "tpot-c1", "metric": "tpot_ms", "level": 1, "op": "<=", "threshold": 25, "statistic": "bootstrap_mean", "min_samples": 10},
    {"id": "tpot-c1-tight", "metric": "tpot_ms", "level": 1, "op": "<=", "threshold": 21, "statistic": "bootstrap_mean"},
    {"id": "accept", "metric": "draft_acceptance", "op": ">=", "threshold": 0.75, "statistic": "wilson", "min_samples": 100},
    {"id": "accept-high", "metric": "draft_acceptance", "op": ">=", "threshold": 0.8, "statistic": "wilson"},
    {"id": "c4-enough", "metric": "tpot_ms", "level": 4, "op": "<=", "threshold": 60, "statistic": "median", "min_samples": 5},
    {"id": "failures", "metric": "failure_rate", "op": "<=", "threshold": 0.5, "statistic": "wilson"}]})");
  Lock lock{rules.sha256, "2026-01-01T00:00:00Z", {}};
  auto v = judge(rules, lock, {path});
  ASSERT_TRUE(v.ok()) << v.status().message();
  ASSERT_EQ(v->size(), 6u);
  EXPECT_TRUE((*v)[0].pass) << (*v)[0].why;
  EXPECT_EQ((*v)[0].samples, 20);  // level 1's successful requests only
  EXPECT_NEAR((*v)[0].estimate, 22.0, 0.01);
  EXPECT_FALSE((*v)[1].pass) << (*v)[1].why;  // the mean is 22: the upper bound is above 21
  EXPECT_TRUE((*v)[2].pass) << (*v)[2].why;   // 480 of 600: lower bound ~0.77
  EXPECT_EQ((*v)[2].samples, 600);
  EXPECT_FALSE((*v)[3].pass) << (*v)[3].why;  // the point is 0.8; its lower bound is not
  EXPECT_FALSE((*v)[4].pass);
  EXPECT_EQ((*v)[4].why, "3 samples, fewer than the 5 the rule requires");
  EXPECT_TRUE((*v)[5].pass) << (*v)[5].why;
  EXPECT_EQ((*v)[5].samples, 24);
}

TEST(GateJudge, PairedRatiosComeFromPromptsBothServersAnswered) {
  TempDir dir;
  RunWriter run;
  for (int p = 0; p < 12; ++p) {
    run.add(1, 10, 33, true, 0, 0, "target", p);
    run.add(1, 20, 33, true, 0, 0, "baseline", p);
  }
  run.add(1, 1, 33, true, 0, 0, "target", 99);  // its baseline failed to answer: no pair
  const Rules rules = rules_of(R"({"gate": "g", "rules": [
    {"id": "faster", "metric": "paired_tpot_ratio", "op": "<=", "threshold": 0.6, "statistic": "bootstrap_median", "min_samples": 12}]})");
  auto v = judge(rules, Lock{rules.sha256, "2026-01-01T00:00:00Z", {}}, {run.write(dir, "run.jsonl")});
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ((*v)[0].samples, 12);
  EXPECT_NEAR((*v)[0].estimate, 0.5, 1e-9);
  EXPECT_TRUE((*v)[0].pass) << (*v)[0].why;
}

// A report as `mtp perplexity --kl-divergence --json` prints it: the normal bound is the value plus or minus
// z times its error, same_top_rate is a Wilson bound on its count, a percentile is compared as it is.
TEST(GateJudge, KlDivergenceReportsAreJudgedOnTheirFigures) {
  TempDir dir;
  const std::string report = dir.file("kld.json");
  write(report,
        R"({"tool": "mtp perplexity", "start_utc": "2026-06-01T00:00:00Z", "kl_divergence_base": "b.kld",
    "scored": 1000, "kld": {"mean": 0.02, "err": 0.001, "median": 0.01, "p90": 0.05, "p95": 0.07, "p99": 0.2,
    "p999": 0.5, "max": 0.9}, "same_top": {"count": 950, "rate": 0.95, "err": 0.007},
    "ppl_ratio": {"value": 1.01, "err": 0.002}, "ln_ppl_ratio": {"value": 0.00995, "err": 0.002}})");
  const Rules rules = rules_of(R"({"gate": "g", "rules": [
    {"id": "mean", "metric": "kld_mean", "op": "<=", "threshold": 0.022, "statistic": "normal", "confidence": 0.95},
    {"id": "mean-tight", "metric": "kld_mean", "op": "<=", "threshold": 0.0215, "statistic": "normal"},
    {"id": "p99", "metric": "kld_p99", "op": "<=", "threshold": 0.2, "statistic": "value", "min_samples": 1000},
    {"id": "top", "metric": "same_top_rate", "op": ">=", "threshold": 0.93, "statistic": "wilson"},
    {"id": "ppl", "metric": "ppl_ratio", "op": "<=", "threshold": 1.0, "statistic": "value"},
    {"id": "more", "metric": "kld_max", "op": "<=", "threshold": 1, "statistic": "value", "min_samples": 1001}]})");
  auto v = judge(rules, Lock{rules.sha256, "2026-01-01T00:00:00Z", {}}, {report});
  ASSERT_TRUE(v.ok()) << v.status().message();
  ASSERT_EQ(v->size(), 6u);
  const double z = normal_quantile(0.95);
  EXPECT_NEAR((*v)[0].bound, 0.02 + z * 0.001, 1e-12);
  EXPECT_TRUE((*v)[0].pass) << (*v)[0].why;  // 0.02164 <= 0.022
  EXPECT_FALSE((*v)[1].pass) << (*v)[1].why;
  EXPECT_EQ((*v)[1].why, "upper normal bound (95%) 0.02164 <= 0.0215 fails");
  EXPECT_TRUE((*v)[2].pass) << (*v)[2].why;
  EXPECT_EQ((*v)[2].samples, 1000);
  EXPECT_NEAR((*v)[3].bound, wilson_bound(950, 1000, 0.95, true), 1e-12);
  EXPECT_TRUE((*v)[3].pass) << (*v)[3].why;
  EXPECT_FALSE((*v)[4].pass);
  EXPECT_EQ((*v)[4].why, "value 1.01 <= 1 fails");
  EXPECT_EQ((*v)[5].why, "1000 samples, fewer than the 1001 the rule requires");

  // A rule on a KL-divergence metric with no report, and a report measured before the lock, are errors.
  EXPECT_FALSE(judge(rules, Lock{rules.sha256, "2026-01-01T00:00:00Z", {}}, {}).ok());
  auto late = judge(rules, Lock{rules.sha256, "2026-12-01T00:00:00Z", {}}, {report});
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("before the rules were frozen"), std::string::npos);
  write(
      report,
      R"({"tool": "mtp perplexity", "start_utc": "2026-06-01T00:00:00Z", "scored": 10, "ppl": {"value": 3, "err": 0}})");
  auto plain = judge(rules, Lock{rules.sha256, "2026-01-01T00:00:00Z", {}}, {report});
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("without KL divergence"), std::string::npos);
}

TEST(GateLock, RefusesChangedRulesChangedInputsAndOlderResults) {
  TempDir dir;
  write(dir.file("model.bin"), "weights v1");
  const std::string text =
      R"({"gate": "g", "inputs": [")" + dir.file("model.bin") +
      R"("], "rules": [{"id": "r", "metric": "e2e_s", "op": "<=", "threshold": 9, "statistic": "mean"}]})";
  const Rules rules = rules_of(text);
  auto lock = freeze(rules);
  ASSERT_TRUE(lock.ok()) << lock.status().message();
  ASSERT_EQ(lock->inputs.size(), 1u);
  EXPECT_EQ(lock->inputs[0].sha256, sha256_hex("weights v1"));
  EXPECT_TRUE(check_lock(rules, *lock).ok());

  std::string edited_text = text;
  edited_text.replace(edited_text.find("\"threshold\": 9"), 14, "\"threshold\": 8");
  const Rules edited = rules_of(edited_text);
  const Status changed = check_lock(edited, *lock);
  EXPECT_NE(changed.message().find("the rules changed after they were frozen at " + lock->frozen_utc),
            std::string::npos)
      << changed.message();

  RunWriter old;
  old.start_utc = "2020-01-01T00:00:00Z";
  old.add(1, 10, 5);
  auto stale = judge(rules, *lock, {old.write(dir, "old.jsonl")});
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find("measured at 2020-01-01T00:00:00Z, before the rules were frozen"),
            std::string::npos)
      << stale.status().message();

  write(dir.file("model.bin"), "weights v2");
  const Status input = check_lock(rules, *lock);
  EXPECT_NE(input.message().find("model.bin' changed since the rules were frozen"), std::string::npos)
      << input.message();
}

// The command as a user runs it: exit 0 pass, 1 fail, 2 error; JUnit and JSON carry the hash.
TEST(GateCli, FreezeThenRunWithExitCodesAndFormats) {
  TempDir dir;
  const std::string rules = dir.file("rules.json");
  write(rules, R"({"gate": "latency", "rules": [
    {"id": "tpot", "metric": "tpot_ms", "op": "<=", "threshold": 25, "statistic": "median", "min_samples": 3}]})");
  auto run = mtp::testing::run_mtp("gate run " + rules + " x.jsonl", true);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("register the rules first (mtp gate freeze)"), std::string::npos) << run.output;

  auto frozen = mtp::testing::run_mtp("gate freeze " + rules, true);
  ASSERT_EQ(frozen.exit_code, 0) << frozen.output;
  EXPECT_TRUE(std::filesystem::exists(rules + ".lock"));

  RunWriter fast, slow;
  for (int i = 0; i < 5; ++i) fast.add(1, 20, 17), slow.add(1, 40, 17);
  const std::string fast_run = fast.write(dir, "fast.jsonl"), slow_run = slow.write(dir, "slow.jsonl");
  auto pass = mtp::testing::run_mtp("gate run " + rules + " " + fast_run, true);
  EXPECT_EQ(pass.exit_code, 0) << pass.output;
  EXPECT_NE(pass.output.find("PASS: 1 of 1 rules pass"), std::string::npos) << pass.output;
  auto fail = mtp::testing::run_mtp("gate run " + rules + " " + slow_run + " --format junit", true);
  EXPECT_EQ(fail.exit_code, 1) << fail.output;
  EXPECT_NE(fail.output.find("<failure message=\"median 40 &lt;= 25 fails\"/>"), std::string::npos)
      << fail.output;
  auto json = mtp::testing::run_mtp("gate run " + rules + " " + fast_run + " --format json", true);
  const auto j = nlohmann::json::parse(json.output, nullptr, false);
  ASSERT_TRUE(j.is_object()) << json.output;
  EXPECT_EQ(j["verdicts"][0]["rules_sha256"], j["rules_sha256"]);

  // Re-registering other rules under the same lock is refused; the same rules are already frozen.
  write(rules, R"({"gate": "latency", "rules": [
    {"id": "tpot", "metric": "tpot_ms", "op": "<=", "threshold": 45, "statistic": "median", "min_samples": 3}]})");
  auto again = mtp::testing::run_mtp("gate freeze " + rules, true);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  auto loosened = mtp::testing::run_mtp("gate run " + rules + " " + slow_run, true);
  EXPECT_EQ(loosened.exit_code, 2) << loosened.output;
  EXPECT_NE(loosened.output.find("the rules changed after they were frozen"), std::string::npos)
      << loosened.output;
}

// A logprobs.content array: each token with its top-2 (the chosen one first, then a rival `gap` nats below).
Json content(const std::vector<std::string>& tokens, double gap = 2.0) {
  Json c = Json::array();
  for (const std::string& t : tokens)
    c.push_back({{"token", t},
                 {"logprob", -0.1},
                 {"top_logprobs", Json::array({Json{{"token", t}, {"logprob", -0.1}},
                                               Json{{"token", "~"}, {"logprob", -0.1 - gap}}})}});
  return c;
}

TEST(GreedyProbe, ClassifiesTheFirstDifferenceByTheReferencesMargin) {
  EXPECT_EQ(classify_greedy(content({"a", "b", "c"}), content({"a", "b", "c"}), 0.1).kind, "identical");
  const GreedyOutcome tie = classify_greedy(content({"a", "x", "y"}), content({"a", "b", "c"}, 0.05), 0.1);
  EXPECT_EQ(tie.kind, "near_tie");
  EXPECT_EQ(tie.first_diff, 1);
  EXPECT_NEAR(tie.margin, 0.05, 1e-9);
  EXPECT_EQ(tie.target_token, "x");
  EXPECT_EQ(tie.reference_token, "b");
  const GreedyOutcome real = classify_greedy(content({"a", "b", "z"}), content({"a", "b", "c"}, 0.5), 0.1);
  EXPECT_EQ(real.kind, "divergence");
  EXPECT_EQ(real.first_diff, 2);
  // An output that stops early differs where it ends; the reference's margin there still decides.
  EXPECT_EQ(classify_greedy(content({"a"}), content({"a", "b"}, 2.0), 0.1).kind, "divergence");
}

// Our server with speculation on against itself with it off (the request field): greedy output is the same
// token for token, by construction; a gate rule on the probe file passes, and one that demands more fails
// for lack of samples.
TEST(GreedyProbe, OurServerIsIdenticalWithAndWithoutDraftingAndTheGateReadsTheProbe) {
  TempDir dir;
  const std::string out = dir.file("probe.jsonl");
  {
    mtp::testing::ServerProcess srv("-m tests/data/example.gguf -np 2 -c 2048 --spec mtp");
    const std::string url = "http://127.0.0.1:" + std::to_string(srv.port());
    auto r = mtp::testing::run_mtp(
        "gate probe greedy --url " + url +
            " --reference-body '{\"speculative\": false}' --prompts 4 --max-tokens 24 -o " + out,
        true);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(
        r.output.find("4 prompts: 4 identical, 0 near-tie flips (margin < 0.1), 0 divergences, 0 failed"),
        std::string::npos)
        << r.output;
    auto none = mtp::testing::run_mtp("gate probe greedy --url " + url + " -o " + dir.file("x.jsonl"), true);
    EXPECT_EQ(none.exit_code, 2) << none.output;
  }

  const Rules rules = rules_of(R"({"gate": "g", "rules": [
    {"id": "no-divergence", "metric": "greedy_divergence", "op": "<=", "threshold": 0.5, "statistic": "wilson", "min_samples": 4},
    {"id": "more-prompts", "metric": "greedy_divergence", "op": "<=", "threshold": 0.5, "statistic": "wilson", "min_samples": 40}]})");
  auto v = judge(rules, Lock{rules.sha256, "2026-01-01T00:00:00Z", {}}, {out});
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE((*v)[0].pass) << (*v)[0].why;
  EXPECT_EQ((*v)[0].samples, 4);
  EXPECT_FALSE((*v)[1].pass);
  auto stale = judge(rules, Lock{rules.sha256, "2100-01-01T00:00:00Z", {}}, {out});
  EXPECT_FALSE(stale.ok());
}

}  // namespace
}  // namespace mtp::gate
