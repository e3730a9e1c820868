// The runner against our own `mtp serve` on the bundled model: real usage and timings arrive, every request
// generates exactly max_tokens (ignore_eos), and the draft figures reach the report.
#include <gtest/gtest.h>

#include <filesystem>

#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "run_fixture.h"
#include "server_process.h"

namespace mtp::loadgen {
namespace {

TEST(BenchAgainstServe, BundledModelWithMtp) {
  mtp::testing::ServerProcess srv("-m tests/data/example.gguf -np 2 --spec mtp");
  const std::string path = write_temp("serve_bench", "");
  BenchOptions o = bench_options("http://127.0.0.1:" + std::to_string(srv.port()), {1, 2}, 2, 16, 8);
  o.client.timeout_s = 120;
  o.ignore_eos = true;
  {
    auto out = JsonlWriter::open(path);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(run_bench(o, **out).ok());
  }
  auto run = read_run(path);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->header["model"], "example.gguf");  // the server's default alias, from /v1/models
  ASSERT_EQ(run->requests.size(), 6u);
  for (const RequestRecord& r : run->requests) {
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.completion_tokens, 8);
    EXPECT_EQ(r.count_source, "usage");
    EXPECT_GT(r.prompt_tokens, 16);  // the words plus the chat template
    EXPECT_GE(r.first_token_ns, r.sent_ns);
    int64_t tokens = 0;
    for (const EventRecord& e : r.events) tokens += e.tokens;
    EXPECT_EQ(tokens, 8);
    EXPECT_TRUE(r.timings.contains("draft_n")) << r.timings.dump();
  }
  const std::vector<LevelSummary> levels = summarize_run(*run);
  ASSERT_EQ(levels.size(), 2u);
  EXPECT_EQ(levels[1].completed, 2);
  EXPECT_EQ(levels[1].spec_requests, 2);
  // One worker: the window is the whole level. (At c2 so few requests may leave no token inside it.)
  EXPECT_GT(levels[0].output_throughput, 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mtp::loadgen
