// The probes under concurrent load: with --concurrency N the greedy probe keeps N requests in flight, the
// target's and the reference's side by side (checked on a scripted server that counts what is in flight);
// a rule's "level" picks the probe files of that concurrency; and our server, probed at concurrency 4, is
// still identical with drafting on and off, and its tool conversations fail or pass the same on both sides.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "cli_util.h"
#include "gate/gate.h"
#include "gate/probe.h"
#include "gate/tool_probe.h"
#include "server_process.h"
#include "test_util.h"

namespace mtp::gate {
namespace {

using mtp::testing::TempDir;

// Answers every chat completion with the same three tokens and their top-2 logprobs. A request waits (up to
// 10 s) until `expect_in_flight` requests are in flight, so a probe that sends fewer at once is seen as such
// instead of passing by the luck of timing; it records the most in flight, and whether that first batch held
// both a target request (no "speculative" field) and a reference one.
class ScriptedGreedyServer {
 public:
  // `on_request` (optional) is called with each request's arrival index before it is answered.
  explicit ScriptedGreedyServer(int expect_in_flight, std::function<void(int)> on_request = nullptr)
      : expect_(expect_in_flight), on_request_(std::move(on_request)) {
    server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const bool reference = Json::parse(req.body).contains("speculative");
      if (on_request_) on_request_(arrivals_++);
      enter(reference);
      res.set_content(answer().dump(), "application/json");
      leave(reference);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ScriptedGreedyServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int max_in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_in_flight_;
  }
  bool sides_overlapped() {
    std::lock_guard<std::mutex> lock(mu_);
    return overlapped_;
  }

 private:
  void enter(bool reference) {
    std::unique_lock<std::mutex> lock(mu_);
    ++in_flight_[reference];
    max_in_flight_ = std::max(max_in_flight_, in_flight_[false] + in_flight_[true]);
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(10),
                 [&] { return released_ || in_flight_[false] + in_flight_[true] >= expect_; });
    if (!released_) overlapped_ = in_flight_[false] > 0 && in_flight_[true] > 0;  // the first batch's sides
    released_ = true;  // once the expected number met, later requests (the tail of the probe) do not wait
    cv_.notify_all();
  }
  void leave(bool reference) {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_[reference];
  }
  static Json answer() {
    Json content = Json::array();
    for (const char* t : {"a", "b", "c"})
      content.push_back({{"token", t},
                         {"logprob", -0.1},
                         {"top_logprobs", Json::array({Json{{"token", t}, {"logprob", -0.1}},
                                                       Json{{"token", "~"}, {"logprob", -3.0}}})}});
    return {{"choices", Json::array({{{"index", 0},
                                      {"message", {{"role", "assistant"}, {"content", "abc"}}},
                                      {"logprobs", {{"content", content}}},
                                      {"finish_reason", "length"}}})}};
  }

  int expect_;
  std::function<void(int)> on_request_;
  std::atomic<int> arrivals_{0};
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<bool, int> in_flight_;
  int max_in_flight_ = 0;
  bool overlapped_ = false;
  bool released_ = false;
};

TEST(ProbeUnderLoad, GreedyProbeKeepsConcurrencyRequestsInFlightFromBothSides) {
  TempDir dir;
  ScriptedGreedyServer server(4);
  GreedyProbeOptions o;
  o.url = server.url();
  o.reference_body = {{"speculative", false}};
  o.prompts = 6;
  o.concurrency = 4;
  auto outcomes = run_greedy_probe(o, dir.file("p.jsonl"));
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().message();
  ASSERT_EQ(outcomes->size(), 6u);
  for (size_t i = 0; i < outcomes->size(); ++i) {
    EXPECT_EQ((*outcomes)[i].prompt, static_cast<int64_t>(i));  // in prompt order, whatever finished first
    EXPECT_EQ((*outcomes)[i].kind, "identical") << (*outcomes)[i].error;
  }
  EXPECT_EQ(server.max_in_flight(), 4);
  EXPECT_TRUE(server.sides_overlapped());

  // The file says at what concurrency it was measured; "level" judges only the files of that concurrency.
  const auto rules = parse_rules(R"({"gate": "g", "rules": [
    {"id": "c4", "metric": "greedy_divergence", "level": 4, "op": "<=", "threshold": 0.5, "statistic": "wilson"},
    {"id": "c1", "metric": "greedy_divergence", "level": 1, "op": "<=", "threshold": 0.5, "statistic": "wilson"}]})",
                                 "rules.json");
  ASSERT_TRUE(rules.ok()) << rules.status().message();
  auto v = judge(*rules, Lock{rules->sha256, "2026-01-01T00:00:00Z", {}}, {dir.file("p.jsonl")});
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ((*v)[0].samples, 6);
  EXPECT_TRUE((*v)[0].pass) << (*v)[0].why;
  EXPECT_EQ((*v)[1].samples, 0);
  EXPECT_FALSE((*v)[1].pass);
}

// One request at a time: when prompt 2's first request arrives, prompts 0 and 1 are already in the file, so a
// probe cut short keeps what it measured.
TEST(ProbeUnderLoad, GreedyProbeWritesEachPromptOnceAnswered) {
  TempDir dir;
  const std::string out = dir.file("p.jsonl");
  int lines_before_prompt_2 = -1;
  ScriptedGreedyServer server(1, [&](int arrival) {
    if (arrival != 4) return;
    std::ifstream f(out);
    int n = 0;
    for (std::string line; std::getline(f, line);) n += line.find("\"type\":\"probe\"") != std::string::npos;
    lines_before_prompt_2 = n;
  });
  GreedyProbeOptions o;
  o.url = server.url();
  o.reference_body = {{"speculative", false}};
  o.prompts = 3;
  ASSERT_TRUE(run_greedy_probe(o, out).ok());
  EXPECT_EQ(lines_before_prompt_2, 2);
}

TEST(ProbeUnderLoad, ToolProbeRunsEachScenariosTwoSidesSideBySide) {
  TempDir dir;
  // Tool requests are answered with the greedy script (no calls): what is measured is the load, not the
  // calls.
  ScriptedGreedyServer server(2);
  ToolProbeOptions o;
  o.url = server.url();
  o.reference_body = {{"speculative", false}};
  o.scenarios = {builtin_tool_scenarios()[0], builtin_tool_scenarios()[1]};
  o.repeat = 1;
  o.concurrency = 2;
  auto runs = run_tool_probe(o, dir.file("t.jsonl"));
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  ASSERT_EQ(runs->size(), 4u);
  EXPECT_TRUE(server.sides_overlapped());
  auto file = read_tool_probe_file(dir.file("t.jsonl"));
  ASSERT_TRUE(file.ok());
  for (const ToolRun& r : file->runs) EXPECT_EQ(r.concurrency, 2);
}

// Our server under load: 8 prompts, 4 requests at a time (drafting and plain requests batched together),
// every prompt identical; the tool conversations (the bundled model makes no calls) fail the same way with
// drafting on and off, since each side's greedy output is the same.
TEST(ProbeUnderLoad, OurServerAtConcurrencyFourIsIdenticalOnBothSides) {
  TempDir dir;
  mtp::testing::ServerProcess srv("-m tests/data/example.gguf -np 4 -c 4096 --spec mtp");
  const std::string url = "http://127.0.0.1:" + std::to_string(srv.port());
  auto greedy = mtp::testing::run_mtp("gate probe greedy --url " + url +
                                          " --reference-body '{\"speculative\": false}' --prompts 8 "
                                          "--max-tokens 24 --concurrency 4 -o " +
                                          dir.file("g.jsonl"),
                                      true);
  EXPECT_EQ(greedy.exit_code, 0) << greedy.output;
  EXPECT_NE(greedy.output.find("8 prompts: 8 identical, 0 near-tie flips"), std::string::npos)
      << greedy.output;

  auto tools = mtp::testing::run_mtp("gate probe tools --url " + url +
                                         " --reference-body '{\"speculative\": false}' --repeat 2 "
                                         "--max-tokens 24 --concurrency 4 -o " +
                                         dir.file("t.jsonl"),
                                     true);
  EXPECT_EQ(tools.exit_code, 0) << tools.output;
  auto file = read_tool_probe_file(dir.file("t.jsonl"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->runs.size(), 12u);  // 3 scenarios x 2 repeats x 2 sides
  std::ifstream f(dir.file("t.jsonl"));
  std::map<std::pair<std::string, int>, std::map<std::string, Json>> reasons;  // (scenario, repeat) -> side
  for (std::string line; std::getline(f, line);) {
    const Json j = Json::parse(line);
    if (j["type"] == "tool_run") reasons[{j["scenario"], j["repeat"]}][j["side"]] = j["reasons"];
  }
  ASSERT_EQ(reasons.size(), 6u);
  for (const auto& [key, sides] : reasons) {
    ASSERT_EQ(sides.size(), 2u);
    EXPECT_EQ(sides.at("target"), sides.at("reference")) << key.first << " repeat " << key.second;
  }
}

}  // namespace
}  // namespace mtp::gate
