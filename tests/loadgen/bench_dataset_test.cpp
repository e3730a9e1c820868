// `mtp bench --dataset FILE`: a dataset or trace file's requests instead of synthetic prompts, read by the
// trace importers (so every format `mtp replay` reads), sent in file order and round again; a bad file is one
// line and exit 1, and the synthetic prompt options do not go with it.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_util.h"
#include "fake_server.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

using namespace mtp::testing;

std::string data(const std::string& name) {
  return std::string(MTP_SOURCE_DIR) + "/tests/loadgen/data/" + name;
}

std::string last_content(const std::string& body) {
  const Json j = Json::parse(body);
  return j["messages"].back()["content"].get<std::string>();
}

TEST(BenchDataset, SendsTheDatasetsRequestsInOrderWithTheirOutputLengthsCapped) {
  FakeServer server(two_delta_script());
  BenchOptions o = bench_options(server.url(), {1}, 4, 16, 64);
  TraceSkips skips;
  auto reqs = read_trace(data("vllm_custom.jsonl"), "auto", &skips);
  ASSERT_TRUE(reqs.ok()) << reqs.status().message();
  ASSERT_EQ(reqs->size(), 3u);
  o.dataset = std::make_shared<const std::vector<TraceRequest>>(*reqs);
  o.dataset_path = data("vllm_custom.jsonl");
  o.dataset_format = "vllm-custom";
  o.temperature = 0.5;
  const RunData run = run_to_file("bench_dataset", [&](JsonlWriter& out) { return run_bench(o, out); });
  EXPECT_EQ(run.header["options"]["dataset"], o.dataset_path);
  EXPECT_EQ(run.header["options"]["dataset_requests"], 3);
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 5u);  // 1 warm-up + 4 measured, entries 0, 1, 2, 0, 1
  const char* prompts[] = {"What is the capital of India?", "What is the capital of Iran?",
                           "Why is the sky blue?"};
  const int max_tokens[] = {10, 64, 64};  // its output_tokens (10; none; 1520) capped at --max-tokens 64
  for (size_t i = 0; i < bodies.size(); ++i) {
    EXPECT_EQ(last_content(bodies[i]), prompts[i % 3]) << i;
    EXPECT_EQ(Json::parse(bodies[i])["max_tokens"], max_tokens[i % 3]) << i;
    EXPECT_EQ(Json::parse(bodies[i])["temperature"], 0.5) << i;
  }
}

TEST(BenchDataset, ShareGptAndLengthOnlyTracesGiveTheirOwnRequests) {
  FakeServer server(two_delta_script());
  const std::string run = write_temp("bench_dataset_cli", "");
  const auto r = run_mtp("bench --url " + server.url() + " --dataset " + data("sharegpt.json") +
                             " --requests 2 --warmup 0 --max-tokens 8 -o " + run,
                         true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto reqs = read_trace(data("sharegpt.json"), "sharegpt");
  ASSERT_TRUE(reqs.ok());
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(Json::parse(bodies[0])["messages"], (*reqs)[0].messages);
  // Mooncake: synthetic prompts of the recorded lengths.
  const auto m = run_mtp("bench --url " + server.url() + " --dataset " + data("mooncake.jsonl") +
                             " --requests 1 --warmup 0 -o " + run,
                         true);
  EXPECT_EQ(m.exit_code, 0) << m.output;
  EXPECT_EQ(server.bodies().size(), 3u);
  std::filesystem::remove(run);
}

TEST(BenchDataset, ABadFileIsOneLineAndExit1AndPromptLengthsDoNotGoWithIt) {
  const std::string bad = write_temp("bench_dataset_bad", "{\"type\":\"trace\",\"endpoint\":\"/x\"}\n");
  const auto r = run_mtp("bench --url http://127.0.0.1:1 --dataset " + bad + " -o /dev/null", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, "mtp bench: --dataset: " + bad +
                          ":1: \"endpoint\" '/x' is not /v1/chat/completions or /v1/completions\n");
  const auto missing =
      run_mtp("bench --url http://127.0.0.1:1 --dataset /nonexistent.jsonl -o /dev/null", true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("mtp bench: --dataset: cannot open '/nonexistent.jsonl'"), std::string::npos)
      << missing.output;
  const std::string empty = write_temp("bench_dataset_empty", "[]");
  const auto none = run_mtp("bench --url http://127.0.0.1:1 --dataset " + empty + " -o /dev/null", true);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_EQ(none.output, "mtp bench: --dataset: " + empty + ": no requests\n");
  const auto both =
      run_mtp("bench --url http://127.0.0.1:1 --dataset " + bad + " --prompt-tokens 8 -o /dev/null", true);
  EXPECT_EQ(both.exit_code, 2) << both.output;
  std::filesystem::remove(bad);
  std::filesystem::remove(empty);
}

}  // namespace
}  // namespace mtp::loadgen
