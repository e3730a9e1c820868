// The replay runner against the fake server: closed loop with sessions in order, timed arrivals not sent
// early, the cache policy, capped max_tokens, synthetic prompts and depth strata in the run file and report.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "fake_server.h"
#include "loadgen/replay.h"
#include "loadgen/report.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

using namespace mtp::testing;

std::vector<ScriptedChunk> script(int delay_ms) {
  return {{delay_ms, delta_chunk("content", "ab")}, {0, finish_chunk(4, 3, nullptr)}, {0, "[DONE]"}};
}

// `n` chat requests, request i in session "s{i % sessions}" at i * 100 ms, with prompt_tokens i * 1000.
std::vector<TraceRequest> trace(int n, int sessions) {
  std::vector<TraceRequest> out;
  for (int i = 0; i < n; ++i) {
    TraceRequest t;
    t.source = str_cat("t:", i + 1);
    t.arrival_s = 0.1 * i;
    t.session = sessions > 0 ? str_cat("s", i % sessions) : "";
    t.category = i % 3 == 0 ? "code" : "";
    t.messages = Json::array({Json{{"role", "user"}, {"content", str_cat("question ", i)}}});
    t.prompt_tokens = 1000 * i;
    t.output_tokens = i % 2 == 0 ? 10 : 5000;
    out.push_back(std::move(t));
  }
  return out;
}

ReplayOptions options(const std::string& url) {
  ReplayOptions o = replay_options(url);
  o.max_tokens_cap = 100;
  return o;
}

RunData replay(const ReplayOptions& o, const std::vector<TraceRequest>& reqs, const std::string& name) {
  return run_to_file(name, [&](JsonlWriter& out) { return run_replay(o, reqs, out); });
}

TEST(Replay, ClosedLoopSendsEveryRequestAndKeepsSessionTurnsInOrder) {
  FakeServer server(script(20));
  ReplayOptions o = options(server.url());
  o.concurrency = 4;
  o.strata = {2048, 8192};
  const RunData run = replay(o, trace(8, 2), "replay_closed");
  ASSERT_EQ(run.requests.size(), 8u);
  EXPECT_EQ(run.header["tool"], "mtp replay");
  EXPECT_EQ(run.header["options"]["max_tokens_cap"], 100);
  EXPECT_EQ(run.header["options"]["capped_requests"], 4);
  std::map<int64_t, const RequestRecord*> by_id;
  for (const RequestRecord& r : run.requests) {
    ASSERT_TRUE(r.ok) << r.error;
    by_id[r.id] = &r;
  }
  // One turn at a time per session, in trace order: turn i + 2 starts after turn i ended.
  for (int64_t i = 0; i + 2 < 8; ++i) EXPECT_GE(by_id[i + 2]->sent_ns, by_id[i]->end_ns) << i;
  // The fake server reports 4 prompt tokens, which the stratum follows rather than the trace's length.
  for (const RequestRecord& r : run.requests) EXPECT_EQ(r.stratum, "<2048");
  // The trace's category tag goes onto its request line (and reads back from the run file).
  for (const RequestRecord& r : run.requests) EXPECT_EQ(r.category, r.id % 3 == 0 ? "code" : "") << r.id;
  // max_tokens: the recorded length, capped.
  std::multiset<int> sent;
  for (const std::string& b : server.bodies()) sent.insert(Json::parse(b)["max_tokens"].get<int>());
  EXPECT_EQ(sent, (std::multiset<int>{10, 10, 10, 10, 100, 100, 100, 100}));
}

TEST(Replay, TimedArrivalsAreNotSentEarly) {
  FakeServer server(script(0));
  ReplayOptions o = options(server.url());
  o.concurrency = 8;
  o.time_scale = 2.0;  // 100 ms apart in the trace, 200 ms apart here
  const RunData run = replay(o, trace(4, 0), "replay_timed");
  ASSERT_EQ(run.requests.size(), 4u);
  for (const RequestRecord& r : run.requests) {
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.scheduled_ns, r.id * 200'000'000);
    EXPECT_GE(r.sent_ns, r.scheduled_ns);
    EXPECT_LT(r.sent_ns - r.scheduled_ns, 2'000'000'000);  // loose: CI machines are slow
  }
  // The server's own clock agrees: the last request arrived about 600 ms after the first. The first one's
  // arrival can lag its send on a loaded machine (556 ms was seen), which shortens the span; sent at the
  // trace's own spacing (time_scale ignored) it would be 300 ms, all at once about 0.
  const auto received = server.received();
  ASSERT_EQ(received.size(), 4u);
  EXPECT_GE(received.back() - received.front(), std::chrono::milliseconds(450));
  EXPECT_EQ(run.header["options"]["load"], "timed");
}

TEST(Replay, TimedNeedsArrivalTimes) {
  FakeServer server(script(0));
  ReplayOptions o = options(server.url());
  o.time_scale = 1.0;
  std::vector<TraceRequest> t = trace(2, 0);
  for (TraceRequest& r : t) r.arrival_s = -1;
  const std::string path = write_temp("replay_untimed", "");
  auto out = JsonlWriter::open(path);
  ASSERT_TRUE(out.ok());
  const Status s = run_replay(o, t, **out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  std::filesystem::remove(path);
}

std::string first_text(const std::string& body) {
  const Json j = Json::parse(body);
  return j.contains("messages") ? j["messages"][0]["content"].get<std::string>()
                                : j["prompt"].get<std::string>();
}

TEST(Replay, CacheDefeatMakesEveryPromptAndSaltDistinct) {
  std::vector<TraceRequest> t = trace(3, 0);
  for (TraceRequest& r : t) r.messages[0]["content"] = "the same question";
  for (const bool defeat : {false, true}) {
    FakeServer server(script(0));
    ReplayOptions o = options(server.url());
    o.defeat_cache = defeat;
    replay(o, t, "replay_cache");
    std::set<std::string> prompts, salts;
    for (const std::string& b : server.bodies()) {
      prompts.insert(first_text(b));
      const Json j = Json::parse(b);
      if (j.contains("cache_salt")) salts.insert(j["cache_salt"].get<std::string>());
    }
    EXPECT_EQ(prompts.size(), defeat ? 3u : 1u);
    EXPECT_EQ(salts.size(), defeat ? 3u : 0u);
  }
}

TEST(Replay, SyntheticPromptsHaveTheRecordedLengthAndShareMooncakeBlocks) {
  ReplayOptions o = options("http://127.0.0.1:1");
  TraceRequest a, b;
  a.synthetic = b.synthetic = true;
  a.prompt_tokens = 1100;
  a.hash_ids = {7, 8, 9};
  b.prompt_tokens = 600;
  b.hash_ids = {7, 10};
  const std::string pa = replay_request(o, a, 0, "", "n").prompt;
  const std::string pb = replay_request(o, b, 1, "", "n").prompt;
  auto words = [](const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> w;
    for (std::string x; in >> x;) w.push_back(x);
    return w;
  };
  const auto wa = words(pa), wb = words(pb);
  ASSERT_EQ(wa.size(), 1100u);
  ASSERT_EQ(wb.size(), 600u);
  // The shared first block (id 7) is the same 512 words; the second blocks differ.
  EXPECT_TRUE(std::equal(wa.begin(), wa.begin() + 512, wb.begin()));
  EXPECT_FALSE(std::equal(wa.begin() + 512, wa.begin() + 600, wb.begin() + 512));
  EXPECT_EQ(replay_request(o, a, 0, "", "n").max_tokens, 100);  // unknown output: the cap
}

TEST(Replay, RedactedLinesKeepTheirRolesAndShareTheLengthByCharacters) {
  ReplayOptions o = options("http://127.0.0.1:1");
  TraceRequest t;
  t.synthetic = true;
  t.prompt_tokens = 40;
  t.shape = {{"system", 10}, {"tool", 10}, {"user", 20}};
  const ChatRequest req = replay_request(o, t, 3, "", "n");
  ASSERT_EQ(req.messages.size(), 3u);
  const std::vector<std::pair<std::string, size_t>> want = {{"system", 10}, {"user", 10}, {"user", 20}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(req.messages[i]["role"], want[i].first);  // a made-up tool result is sent as a user message
    std::istringstream in(req.messages[i]["content"].get<std::string>());
    size_t words = 0;
    for (std::string w; in >> w;) ++words;
    EXPECT_EQ(words, want[i].second) << i;
  }
}

TEST(Replay, StrataLabelsAndPerStratumReport) {
  const std::vector<int64_t> b = {2048, 8192, 32768};
  EXPECT_EQ(stratum_label(b, 0), "<2048");
  EXPECT_EQ(stratum_label(b, 2048), "2048-8192");
  EXPECT_EQ(stratum_label(b, 32767), "8192-32768");
  EXPECT_EQ(stratum_label(b, 40000), ">=32768");
  EXPECT_EQ(stratum_label(b, -1), "unknown");
  RunData run;
  for (int i = 0; i < 5; ++i) {
    RequestRecord r;
    r.id = i;
    r.level = 1;
    r.ok = true;
    r.sent_ns = i * 100;
    r.end_ns = i * 100 + 50;
    r.completion_tokens = 1;
    r.stratum = i < 2 ? ">=32768" : "<2048";
    run.requests.push_back(r);
  }
  const std::vector<LevelSummary> s = summarize_strata(run);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].group, "<2048");  // by prompt length, not by first appearance
  EXPECT_EQ(s[0].completed, 3);
  EXPECT_EQ(s[1].group, ">=32768");
  EXPECT_EQ(s[1].completed, 2);
  const std::string table = markdown_report(s, "prompt tokens");
  EXPECT_EQ(table.rfind("| prompt tokens | c | ok |", 0), 0u) << table;
  EXPECT_NE(table.find("| >=32768 | 1 | 2 | 0 |"), std::string::npos) << table;
  // A bench run has no strata: no per-stratum summaries, the table as before.
  for (RequestRecord& r : run.requests) r.stratum.clear();
  EXPECT_TRUE(summarize_strata(run).empty());
  EXPECT_EQ(markdown_report(summarize_run(run)).rfind("| c | ok |", 0), 0u);
}

}  // namespace
}  // namespace mtp::loadgen
