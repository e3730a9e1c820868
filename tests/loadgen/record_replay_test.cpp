// `mtp serve --record` on the bundled model, then `mtp replay` of what it recorded against the same server;
// the redacted trace keeps no text; `--history live` against the server's prefix cache; `mtp replay`'s errors
// as a user sees them.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "cli_util.h"
#include "loadgen/replay.h"
#include "loadgen/report.h"
#include "run_fixture.h"
#include "server_process.h"

namespace mtp::loadgen {
namespace {

using mtp::testing::run_mtp;
using mtp::testing::ServerProcess;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A non-streaming chat request of `user` and a streaming completions request, both answered 200.
void send_two(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120);
  const Json chat = {{"messages", {{{"role", "user"}, {"content", "first recorded question"}}}},
                     {"max_tokens", 4},
                     {"temperature", 0},
                     {"user", "alice"}};
  auto r1 = c.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(r1 && r1->status == 200) << (r1 ? r1->body : "no response");
  const Json completion = {
      {"prompt", "second recorded prompt"}, {"max_tokens", 3}, {"stream", true}, {"seed", 5}};
  auto r2 = c.Post("/v1/completions", completion.dump(), "application/json");
  ASSERT_TRUE(r2 && r2->status == 200) << (r2 ? r2->body : "no response");
}

// `mtp replay` of `trace` against `port`: exit 0 and two successful requests in the run file.
void replay_ok(const std::string& trace, int port) {
  const std::string run = trace + ".run.jsonl";
  const auto r = run_mtp(str_cat("replay '", trace, "' --url http://127.0.0.1:", port, " --strata 16,64 -o '",
                                 run, "' --max-tokens-cap 4 --timeout 120"),
                         true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto data = read_run(run);
  ASSERT_TRUE(data.ok()) << data.status().message();
  ASSERT_EQ(data->requests.size(), 2u);
  for (const RequestRecord& q : data->requests) {
    EXPECT_TRUE(q.ok) << q.error;
    EXPECT_FALSE(q.stratum.empty());
    EXPECT_LE(q.completion_tokens, 4);
  }
  EXPECT_NE(r.output.find("Per depth stratum"), std::string::npos) << r.output;
  std::filesystem::remove(run);
}

TEST(ServeRecord, RecordsTwoRequestsThatReplayAgainstTheServer) {
  const std::string trace = write_temp("serve_record", "");
  std::filesystem::remove(trace);
  ServerProcess srv("-m tests/data/example.gguf --record " + trace);
  EXPECT_NE(srv.banner().find("recording requests to " + trace), std::string::npos) << srv.banner();
  send_two(srv.port());
  const std::vector<Json> lines = read_json_lines(trace);
  ASSERT_EQ(lines.size(), 2u);
  const Json& chat = lines[0];
  EXPECT_EQ(chat["type"], "trace");
  EXPECT_EQ(chat["endpoint"], "/v1/chat/completions");
  EXPECT_EQ(chat["session"], "alice");
  EXPECT_EQ(chat["messages"][0]["content"], "first recorded question");
  EXPECT_EQ(chat["params"]["temperature"], 0);
  EXPECT_EQ(chat["max_tokens"], 4);
  EXPECT_GT(chat["prompt_tokens"].get<int>(), 3);
  EXPECT_GE(chat["completion_tokens"].get<int>(), 1);
  EXPECT_LE(chat["completion_tokens"].get<int>(), 4);
  EXPECT_TRUE(chat["finish_reason"] == "stop" || chat["finish_reason"] == "length") << chat.dump();
  const Json& comp = lines[1];
  EXPECT_EQ(comp["endpoint"], "/v1/completions");
  EXPECT_EQ(comp["prompt"], "second recorded prompt");
  EXPECT_EQ(comp["stream"], true);
  EXPECT_EQ(comp["params"]["seed"], 5);
  EXPECT_GE(comp["t_ms"].get<double>(), chat["t_ms"].get<double>());
  EXPECT_GT(comp["t_utc_ms"].get<int64_t>(), 1'700'000'000'000);
  replay_ok(trace, srv.port());
  std::filesystem::remove(trace);
}

TEST(ServeRecord, RedactedTraceKeepsLengthsOnlyAndStillReplays) {
  const std::string trace = write_temp("serve_record_redact", "");
  std::filesystem::remove(trace);
  ServerProcess srv("-m tests/data/example.gguf --record " + trace + " --record-redact");
  send_two(srv.port());
  const std::string text = slurp(trace);
  EXPECT_EQ(text.find("recorded"), std::string::npos) << text;
  EXPECT_EQ(text.find("alice"), std::string::npos) << text;
  const std::vector<Json> lines = read_json_lines(trace);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["redacted"], true);
  EXPECT_EQ(lines[0]["session"].get<std::string>().rfind("h:", 0), 0u);  // "alice", hashed
  EXPECT_EQ(lines[0]["message_lengths"][0]["chars"], 23);                // "first recorded question"
  EXPECT_FALSE(lines[0].contains("messages"));
  EXPECT_EQ(lines[1]["prompt_chars"], 22);
  EXPECT_GT(lines[1]["prompt_tokens"].get<int>(), 0);
  replay_ok(trace, srv.port());
  std::filesystem::remove(trace);
}

// Lines written by concurrent HTTP threads never interleave: 8 requests at concurrency 4 on 2 slots give 8
// whole lines, one per request.
TEST(ServeRecord, ConcurrentRequestsGiveWholeLines) {
  const std::string trace = write_temp("serve_record_conc", "");
  std::filesystem::remove(trace);
  ServerProcess srv("-m tests/data/example.gguf -np 2 --record " + trace);
  ReplayOptions o;
  o.client.url = "http://127.0.0.1:" + std::to_string(srv.port());
  o.client.timeout_s = 120;
  o.concurrency = 4;
  o.max_tokens_cap = 3;
  std::vector<TraceRequest> reqs(8);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].synthetic = true;
    reqs[i].prompt_tokens = 20 + static_cast<int64_t>(i);
  }
  const std::string run = trace + ".run.jsonl";
  {
    auto out = JsonlWriter::open(run);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(run_replay(o, reqs, **out).ok());
  }
  const std::vector<Json> lines = read_json_lines(trace);  // throws, failing the test, on a torn line
  ASSERT_EQ(lines.size(), 8u);
  std::set<std::string> prompts;
  for (const Json& l : lines) {
    EXPECT_EQ(l["max_tokens"], 3);
    EXPECT_TRUE(l["finish_reason"] == "stop" || l["finish_reason"] == "length") << l.dump();
    prompts.insert(l["messages"][0]["content"].get<std::string>());
  }
  EXPECT_EQ(prompts.size(), 8u);
  std::filesystem::remove(run);
  std::filesystem::remove(trace);
}

// A client that goes away mid-stream: the line still comes, "cancelled", with the tokens generated by then.
TEST(ServeRecord, StreamCutByTheClientIsRecordedAsCancelled) {
  const std::string trace = write_temp("serve_record_cut", "");
  std::filesystem::remove(trace);
  ServerProcess srv("-m tests/data/example.gguf --record " + trace);
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120);
  const Json body = {{"messages", {{{"role", "user"}, {"content", "go on"}}}},
                     {"max_tokens", 3000},
                     {"ignore_eos", true},
                     {"stream", true}};
  int chunks = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
  c.send(req);  // ends with an error: the receiver stopped it
  std::vector<Json> lines;
  for (int i = 0; i < 200 && lines.empty(); ++i) {  // the server notices at its next write
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    lines = read_json_lines(trace);
  }
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["finish_reason"], "cancelled");
  EXPECT_LT(lines[0]["completion_tokens"].get<int>(), 3000);
  std::filesystem::remove(trace);
}

TEST(ServeRecord, UnwritableFileFailsAtStartAndRedactNeedsRecord) {
  const auto bad =
      run_mtp("serve -m tests/data/example.gguf --port 0 --record /nonexistent/dir/t.jsonl", true);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.output.rfind("mtp serve: --record: cannot open '/nonexistent/dir/t.jsonl' for appending", 0),
            0u)
      << bad.output;
  const auto alone = run_mtp("serve -m tests/data/example.gguf --port 0 --record-redact", true);
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_EQ(alone.output, "mtp serve: --record-redact needs --record FILE\n");
}

// A three-turn session of our trace format whose recorded replies are text the model would not write.
std::string three_turn_trace() {
  std::string out;
  Json messages = Json::array();
  for (int k = 1; k <= 3; ++k) {
    if (k > 1)
      messages.push_back(Json{{"role", "assistant"}, {"content", str_cat("recorded answer number ", k)}});
    messages.push_back(Json{{"role", "user"}, {"content", str_cat("question number ", k, " about the sea")}});
    const Json line = {{"type", "trace"}, {"endpoint", "/v1/chat/completions"},
                       {"session", "s"},  {"messages", messages},
                       {"max_tokens", 6}, {"params", {{"temperature", 0}, {"ignore_eos", true}}}};
    out += line.dump() + "\n";
  }
  return out;
}

// `mtp replay --history HISTORY` of the three-turn trace against our server: the run's requests by turn.
std::vector<RequestRecord> replay_turns(const std::string& trace, int port, const std::string& history) {
  const std::string run = trace + "." + history + ".run.jsonl";
  const auto r = run_mtp(str_cat("replay '", trace, "' --url http://127.0.0.1:", port, " --history ", history,
                                 " -o '", run, "' --timeout 120"),
                         true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Per turn of a session"), std::string::npos) << r.output;
  auto data = read_run(run);
  std::filesystem::remove(run);
  if (!data.ok() || data->requests.size() != 3) return {};
  std::vector<RequestRecord> by_turn = data->requests;
  std::sort(by_turn.begin(), by_turn.end(), [](const auto& a, const auto& b) { return a.turn < b.turn; });
  return by_turn;
}

// Against our server with its prefix cache: under --history live each turn extends what the server saw and
// generated, so the cache gives turn 2 more of its prompt than under the recorded history, whose recorded
// reply the server never produced.
TEST(ReplayCommand, LiveHistoryAgainstOurServerReusesTheConversationItProduced) {
  const std::string trace = write_temp("replay_live_turns", three_turn_trace());
  ServerProcess srv("-m tests/data/example.gguf");
  const std::vector<RequestRecord> live = replay_turns(trace, srv.port(), "live");
  const std::vector<RequestRecord> recorded = replay_turns(trace, srv.port(), "recorded");
  ASSERT_EQ(live.size(), 3u);
  ASSERT_EQ(recorded.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_TRUE(live[k].ok) << live[k].error;
    EXPECT_EQ(live[k].turn, static_cast<int64_t>(k) + 1);
    EXPECT_EQ(live[k].history, "live");
    EXPECT_TRUE(recorded[k].history.empty());
  }
  const int64_t live_cached = live[1].timings.value("cache_n", -1);
  const int64_t recorded_cached = recorded[1].timings.value("cache_n", -1);
  EXPECT_GE(live_cached, live[0].prompt_tokens) << live[1].timings.dump();
  EXPECT_GT(live_cached, recorded_cached) << live[1].timings.dump() << recorded[1].timings.dump();
  const auto bad =
      run_mtp("replay '" + trace + "' --url http://127.0.0.1:1 -o /dev/null --history maybe", true);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  std::filesystem::remove(trace);
}

TEST(ReplayCommand, MalformedTraceIsOneLineAndExit1BadFlagExit2) {
  const std::string path =
      write_temp("replay_cli_bad", "{\"timestamp\":0,\"input_length\":5,\"output_length\":1}\n[1\n");
  const auto r =
      run_mtp("replay '" + path + "' --format mooncake --url http://127.0.0.1:1 -o /dev/null", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, "mtp replay: " + path + ":2: not a JSON object\n");
  const auto missing = run_mtp("replay /nonexistent/t.jsonl --url http://127.0.0.1:1 -o /dev/null", true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.output, "mtp replay: cannot open '/nonexistent/t.jsonl'\n");
  const auto flag =
      run_mtp("replay '" + path + "' --url http://127.0.0.1:1 -o /dev/null --cache maybe", true);
  EXPECT_EQ(flag.exit_code, 2) << flag.output;
  const auto strata =
      run_mtp("replay '" + path + "' --url http://127.0.0.1:1 -o /dev/null --strata 10,5", true);
  EXPECT_EQ(strata.exit_code, 2);
  EXPECT_EQ(strata.output, "mtp replay: --strata must be ascending\n");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mtp::loadgen
