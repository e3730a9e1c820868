// `mtp tune`: the robust per-cell score and the recommendation on hand-made runs, and the command as a user
// runs it against `mtp serve` on the bundled model.
#include <gtest/gtest.h>

#include <filesystem>

#include "../gguf/test_util.h"
#include "cli_util.h"
#include "gate/tune.h"

namespace mtp::gate {
namespace {

// A run whose level `level`, run k, has one request of 1 s carrying per_run[k] tokens: output tok/s
// per_run[k].
void add_level(loadgen::RunData& run, int level, const std::vector<int64_t>& per_run) {
  for (size_t k = 0; k < per_run.size(); ++k) {
    loadgen::RequestRecord r;
    r.id = static_cast<int64_t>(run.requests.size());
    r.level = level;
    r.repeat = static_cast<int>(k);
    r.ok = true;
    r.sent_ns = r.id * 2'000'000'000;
    r.first_token_ns = r.sent_ns + 1'000'000'000;
    r.end_ns = r.first_token_ns;
    r.completion_tokens = per_run[k];
    loadgen::EventRecord e;
    e.t_ns = r.end_ns;
    e.kind = "content";
    e.tokens = per_run[k];
    r.events.push_back(e);
    run.requests.push_back(r);
  }
}

loadgen::RunData run_of(const std::vector<int64_t>& c1, const std::vector<int64_t>& c4) {
  loadgen::RunData run;
  add_level(run, 1, c1);
  add_level(run, 4, c4);
  return run;
}

TEST(Tune, RecommendsTheValueNeverFarFromTheBestAndDistrustsNoise) {
  std::map<std::string, loadgen::RunData> runs;
  runs["fast-c1"] = run_of({100, 100, 100}, {50, 50, 50});
  runs["fast-c4"] = run_of({60, 60, 60}, {120, 120, 120});
  runs["balanced"] = run_of({90, 92, 88}, {110, 108, 112});
  runs["noisy"] = run_of({150, 60, 100}, {150, 60, 100});
  const std::vector<std::string> values = {"fast-c1", "fast-c4", "balanced", "noisy"};
  auto r = analyse_tune(values, runs);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->levels, (std::vector<int>{1, 4}));
  EXPECT_EQ(r->best_at.at(1), "fast-c1");
  EXPECT_EQ(r->best_at.at(4), "fast-c4");
  EXPECT_EQ(r->overall, "balanced");
  const TuneCell& n = r->cells.at("noisy").at(1);
  EXPECT_NEAR(n.median, 100, 1e-6);
  EXPECT_NEAR(n.score, 100 - 1.4826 * 40, 1e-6);  // MAD of |150-100|, |60-100|, 0 is 40
  EXPECT_TRUE(n.noisy);
  EXPECT_FALSE(r->cells.at("balanced").at(4).noisy);
  EXPECT_NEAR(r->worst_ratio.at("balanced"), (90 - 1.4826 * 2) / 100, 1e-6);  // its c1, against fast-c1
  const std::string table = tune_table(*r, "x");
  EXPECT_NE(table.find("| noisy | 100.0 (40.7) ! |"), std::string::npos) << table;

  runs.erase("noisy");
  EXPECT_FALSE(analyse_tune(values, runs).ok());
}

TEST(Tune, ServeCommandAddsTheSettingUnlessDefault) {
  EXPECT_EQ(serve_command("mtp serve -m m.gguf", "spec-max-drafting-slots", "2"),
            "mtp serve -m m.gguf --spec-max-drafting-slots 2");
  EXPECT_EQ(serve_command("mtp serve -m m.gguf", "spec-max-drafting-slots", "default"),
            "mtp serve -m m.gguf");
}

// Two values, two levels, two runs each, on the synthetic test model: the table, a recommendation and the
// command line; a server that cannot start is one line naming its log, exit 1.
TEST(Tune, SweepsTheTestModelThroughItsOwnServers) {
  testing::TempDir dir;
  const std::string serve =
      std::string(MTP_BINARY) + " serve -m tests/data/example.gguf -np 2 -c 2048 -t 1 --spec mtp";
  auto r = testing::run_mtp(
      "tune --serve '" + serve +
          "' --setting spec-max-drafting-slots --values 0,default --concurrency 1,2 --runs 2 "
          "--requests 2 --warmup 0 --prompt-tokens 16 --max-tokens 8 --ignore-eos --port 18431 -o " +
          dir.file("out"),
      true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| spec-max-drafting-slots | c1 | c2 | worst / best |"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("recommended: spec-max-drafting-slots="), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("out/0.jsonl")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("out/default.server.log")));

  auto bad = testing::run_mtp("tune --serve '" + std::string(MTP_BINARY) +
                                  " serve -m no-such.gguf' --setting draft-max --values 2 --port 18432 -o " +
                                  dir.file("bad"),
                              true);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("draft-max=2: the server exited before it answered"), std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace mtp::gate
