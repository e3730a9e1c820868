// The closed-loop runner against the fake server: the run file holds a header, every request with its
// events, warm-up flagged; failures are records and the run still succeeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "fake_server.h"
#include "loadgen/prompts.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

using namespace mtp::testing;

TEST(Runner, WritesEveryRequestPerLevelWithWarmupFlagged) {
  FakeServer server(two_delta_script(nlohmann::json{{"draft_n", 2}, {"draft_n_accepted", 1}}));
  const std::string path = write_temp("runner_ok", "");
  {
    auto out = JsonlWriter::open(path);
    ASSERT_TRUE(out.ok());
    int done = 0;
    ASSERT_TRUE(run_bench(bench_options(server.url(), {1, 2}, 3, 8, 4), **out, [&](const RequestRecord&) {
                  ++done;
                }).ok());
    EXPECT_EQ(done, 8);
  }
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->header["model"], "fake-model");  // from GET /v1/models
  EXPECT_EQ(run->header["options"]["requests"], 3);
  ASSERT_EQ(run->requests.size(), 8u);
  std::set<int64_t> ids;
  int warmups = 0;
  for (const RequestRecord& r : run->requests) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.completion_tokens, 3);
    EXPECT_EQ(r.events.size(), 3u);
    EXPECT_LE(r.scheduled_ns, r.sent_ns);
    EXPECT_LE(r.sent_ns, r.first_token_ns);
    EXPECT_LT(r.worker, r.level);
    ids.insert(r.id);
    warmups += r.warmup ? 1 : 0;
  }
  EXPECT_EQ(ids.size(), 8u);
  EXPECT_EQ(warmups, 2);
  const std::vector<LevelSummary> levels = summarize_run(*run);
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(levels[1].concurrency, 2);
  EXPECT_EQ(levels[1].completed, 3);
  EXPECT_EQ(levels[1].total_output_tokens, 9);
  EXPECT_EQ(levels[1].draft_n, 6);
  EXPECT_GT(levels[0].output_throughput, 0);
  std::filesystem::remove(path);
}

size_t words(const std::string& body) {
  const std::string text = nlohmann::json::parse(body)["messages"][0]["content"].get<std::string>();
  return static_cast<size_t>(std::count(text.begin(), text.end(), ' ')) + 1;
}

// --prompt-tokens-max: lengths spread over the whole range, each prompt still its own words.
TEST(Runner, PromptLengthsAreUniformInTheRangeWhenAMaximumIsGiven) {
  std::set<int> lengths;
  for (int64_t id = 0; id < 400; ++id) {
    const int n = prompt_length(1, id, 10, 13);
    EXPECT_GE(n, 10);
    EXPECT_LE(n, 13);
    lengths.insert(n);
  }
  EXPECT_EQ(lengths.size(), 4u);
  EXPECT_EQ(prompt_length(1, 5, 10, 0), 10);  // no maximum: all equal
  FakeServer server(two_delta_script());
  BenchOptions o = bench_options(server.url(), {2}, 16, 8, 4);
  o.prompt_tokens = 8;
  o.prompt_tokens_max = 24;
  run_to_file("runner_lengths", [&](JsonlWriter& out) { return run_bench(o, out); });
  std::set<size_t> sent;
  for (const std::string& b : server.bodies()) {
    EXPECT_GE(words(b), 8u);
    EXPECT_LE(words(b), 24u);
    sent.insert(words(b));
  }
  EXPECT_GT(sent.size(), 3u);
}

TEST(Runner, FailuresAreCountedAndTheRunCompletes) {
  FakeServer server({}, FakeMode::kStatus500);
  const std::string path = write_temp("runner_500", "");
  {
    auto out = JsonlWriter::open(path);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(run_bench(bench_options(server.url(), {1, 2}, 3, 8, 4), **out).ok());
  }
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  const std::vector<LevelSummary> levels = summarize_run(*run);
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(levels[0].completed, 0);
  EXPECT_EQ(levels[0].failed, 3);
  EXPECT_EQ(levels[0].ttft_ms.n, 0u);
  std::filesystem::remove(path);
}

TEST(Runner, UnwritableRunFileIsAnError) {
  EXPECT_FALSE(JsonlWriter::open("/nonexistent-dir/run.jsonl").ok());
}

}  // namespace
}  // namespace mtp::loadgen
