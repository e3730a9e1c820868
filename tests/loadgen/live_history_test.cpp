// Multi-turn replay with the server's live replies (`mtp replay --history live`): the next-turn rule on its
// own, then whole replays against the fake server, which answers each turn with a reply made from the
// turn's last user message, so a test can tell the live reply from the recorded one in the next request.
#include <gtest/gtest.h>

#include <map>

#include "fake_server.h"
#include "loadgen/live_history.h"
#include "loadgen/replay.h"
#include "loadgen/report.h"
#include "loadgen/report_sections.h"
#include "run_fixture.h"

namespace mtp::loadgen {
namespace {

using namespace mtp::testing;

Json msg(const std::string& role, const std::string& content) {
  return Json{{"role", role}, {"content", content}};
}

Reply reply_of(const std::string& content) {
  Reply r;
  r.content = content;
  return r;
}

TEST(LiveHistory, TheLiveReplyTakesTheRecordedReplysPlace) {
  const Json turn1 = Json::array({msg("system", "be brief"), msg("user", "q1")});
  Json turn2 = turn1;
  turn2.push_back(msg("assistant", "recorded answer"));
  turn2.push_back(msg("user", "q2"));
  LiveSession s;
  const TurnMessages first = next_turn(s, turn1);
  EXPECT_EQ(first.messages, turn1);
  EXPECT_TRUE(first.live);
  finish_turn(s, turn1, first, reply_of("live answer"));
  const TurnMessages second = next_turn(s, turn2);
  EXPECT_TRUE(second.live);
  EXPECT_EQ(second.messages, Json::array({msg("system", "be brief"), msg("user", "q1"),
                                          msg("assistant", "live answer"), msg("user", "q2")}));
}

TEST(LiveHistory, ToolCallIdsFollowTheLiveCallsAndReasoningGoesBackOnlyIfRecorded) {
  const Json turn1 = Json::array({msg("user", "weather?")});
  Json recorded_reply = msg("assistant", "");
  recorded_reply["reasoning_content"] = "recorded thought";
  recorded_reply["tool_calls"] = Json::array(
      {Json{{"id", "rec-1"}, {"type", "function"}, {"function", {{"name", "w"}, {"arguments", "{}"}}}}});
  Json tool = msg("tool", "sunny");
  tool["tool_call_id"] = "rec-1";
  Json turn2 = turn1;
  turn2.push_back(recorded_reply);
  turn2.push_back(tool);
  LiveSession s;
  const TurnMessages first = next_turn(s, turn1);
  Reply live = reply_of("");
  live.reasoning = "live thought";
  live.tool_calls = Json::array({Json{
      {"id", "live-1"}, {"type", "function"}, {"function", {{"name", "w"}, {"arguments", "{\"c\":1}"}}}}});
  finish_turn(s, turn1, first, live);
  const TurnMessages second = next_turn(s, turn2);
  ASSERT_EQ(second.messages.size(), 3u);
  EXPECT_EQ(second.messages[1]["reasoning_content"], "live thought");
  EXPECT_EQ(second.messages[1]["tool_calls"], live.tool_calls);
  EXPECT_EQ(second.messages[2]["tool_call_id"], "live-1");
  // A recorded reply without reasoning: the live reasoning is not sent back either.
  turn2[1].erase("reasoning_content");
  EXPECT_FALSE(next_turn(s, turn2).messages[1].contains("reasoning_content"));
}

TEST(LiveHistory, RewrittenHistoryOrAFailedTurnFallsBackToTheRecordedMessages) {
  const Json turn1 = Json::array({msg("user", "q1")});
  const Json turn2 = Json::array({msg("user", "q1"), msg("assistant", "recorded"), msg("user", "q2")});
  LiveSession s;
  const TurnMessages first = next_turn(s, turn1);
  finish_turn(s, turn1, first, std::nullopt);  // the first turn failed: no live reply to send
  TurnMessages second = next_turn(s, turn2);
  EXPECT_EQ(second.messages, turn2);
  EXPECT_FALSE(second.live);
  // A client that rewrote its history (here it dropped the first question) is replayed as it was recorded.
  finish_turn(s, turn1, first, reply_of("live"));
  const Json rewritten = Json::array({msg("user", "summary of q1"), msg("user", "q2")});
  second = next_turn(s, rewritten);
  EXPECT_EQ(second.messages, rewritten);
  // And a later turn that builds on a fallback is not live either, though its newest reply is.
  finish_turn(s, turn2, next_turn(LiveSession{}, turn2), reply_of("live 2"));
  Json turn3 = turn2;
  turn3.push_back(msg("assistant", "recorded 2"));
  turn3.push_back(msg("user", "q3"));
  const TurnMessages third = next_turn(s, turn3);
  EXPECT_FALSE(third.live);
  EXPECT_EQ(third.messages[3], msg("assistant", "live 2"));
}

// A session's turns as our trace records them: turn k holds every earlier question, each followed by its
// recorded answer, then question k. Questions are "<session> q<k>".
std::vector<TraceRequest> sessions_trace(const std::vector<std::string>& sessions, int turns) {
  std::vector<TraceRequest> out;
  for (int k = 1; k <= turns; ++k) {
    for (const std::string& s : sessions) {
      TraceRequest t;
      t.source = str_cat("t:", s, k);
      t.session = s;
      Json m = Json::array({msg("system", "sys")});
      for (int j = 1; j <= k; ++j) {
        m.push_back(msg("user", str_cat(s, " q", j)));
        if (j < k) m.push_back(msg("assistant", str_cat("recorded answer to ", s, " q", j)));
      }
      t.messages = m;
      t.output_tokens = 8;
      out.push_back(std::move(t));
    }
  }
  return out;
}

template <typename J>  // the server's nlohmann::json or our ordered Json
std::string last_user(const J& body) {
  std::string last;
  for (const auto& m : body["messages"])
    if (m["role"] == "user") last = m["content"].template get<std::string>();
  return last;
}

// Answers "live answer to <last user message>" in two content chunks, or fails as `failures` says for
// that message.
Responder live_responder(const std::map<std::string, FakeMode>& failures = {}) {
  return [failures](const nlohmann::json& body) {
    const std::string q = last_user(body);
    ScriptedAnswer a;
    if (auto f = failures.find(q); f != failures.end()) a.mode = f->second;
    a.script = {{2, delta_chunk("content", "live answer ")},
                {2, delta_chunk("content", "to " + q)},
                {0, finish_chunk(10, 4, nullptr)},
                {0, "[DONE]"}};
    return a;
  };
}

ReplayOptions live_options(const std::string& url) {
  ReplayOptions o = replay_options(url);
  o.concurrency = 2;
  o.live_history = true;
  return o;
}

// The request bodies the server got, by the last user message.
std::map<std::string, Json> bodies_by_question(FakeServer& server) {
  std::map<std::string, Json> out;
  for (const std::string& b : server.bodies()) {
    const Json j = Json::parse(b);
    out[last_user(j)] = j;
  }
  return out;
}

TEST(LiveHistory, EachTurnCarriesTheServersEarlierRepliesNotTheRecordedOnes) {
  FakeServer server({});
  server.respond_with(live_responder());
  const std::vector<TraceRequest> reqs = sessions_trace({"A", "B"}, 3);
  const RunData run = run_to_file(
      "live_history", [&](JsonlWriter& out) { return run_replay(live_options(server.url()), reqs, out); });
  ASSERT_EQ(run.requests.size(), 6u);
  EXPECT_EQ(run.header["options"]["history"], "live");
  for (const RequestRecord& r : run.requests) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.history, "live");
  }
  const auto bodies = bodies_by_question(server);
  for (const std::string s : {"A", "B"}) {
    const Json& third = bodies.at(s + " q3")["messages"];
    const Json want = Json::array({msg("system", "sys"), msg("user", s + " q1"),
                                   msg("assistant", "live answer to " + s + " q1"), msg("user", s + " q2"),
                                   msg("assistant", "live answer to " + s + " q2"), msg("user", s + " q3")});
    EXPECT_EQ(third, want) << third.dump();
    // Each turn's messages begin with everything the previous turn sent, as a prefix cache needs.
    const Json& second = bodies.at(s + " q2")["messages"];
    EXPECT_TRUE(std::equal(second.begin(), second.end(), third.begin()));
  }
  // Turns are numbered per session, and the report has a row per turn.
  std::map<std::string, std::vector<int64_t>> turns;
  for (const RequestRecord& r : run.requests) turns[r.trace_source.substr(2, 1)].push_back(r.turn);
  EXPECT_EQ(turns["A"], (std::vector<int64_t>{1, 2, 3}));
  const std::vector<LevelSummary> by_turn = summarize_turns(run);
  ASSERT_EQ(by_turn.size(), 3u);
  EXPECT_EQ(by_turn[2].group, "3-4");
  EXPECT_EQ(by_turn[2].completed, 2);
  EXPECT_NE(markdown_sections(run).find("| turn | c | ok |"), std::string::npos);
  EXPECT_EQ(json_sections(run, "x")["turns"][0]["turns"], "1");
}

TEST(LiveHistory, RecordedHistoryModeSendsTheTraceAsItIs) {
  FakeServer server({});
  server.respond_with(live_responder());
  ReplayOptions o = live_options(server.url());
  o.live_history = false;
  const std::vector<TraceRequest> reqs = sessions_trace({"A"}, 2);
  const RunData run =
      run_to_file("recorded_history", [&](JsonlWriter& out) { return run_replay(o, reqs, out); });
  ASSERT_EQ(run.requests.size(), 2u);
  EXPECT_EQ(bodies_by_question(server).at("A q2")["messages"], reqs[1].messages);
  for (const RequestRecord& r : run.requests) EXPECT_TRUE(r.history.empty());
}

TEST(LiveHistory, AFailedTurnIsCountedAndItsSessionGoesOnWithTheRecordedHistory) {
  FakeServer server({});
  // A's second turn gets a 500, B's second a stream cut in the middle: two failures, no crash.
  server.respond_with(live_responder({{"A q2", FakeMode::kStatus500}, {"B q2", FakeMode::kCloseMidStream}}));
  const std::vector<TraceRequest> reqs = sessions_trace({"A", "B", "C"}, 3);
  const RunData run = run_to_file(
      "live_failed", [&](JsonlWriter& out) { return run_replay(live_options(server.url()), reqs, out); });
  ASSERT_EQ(run.requests.size(), 9u);
  std::map<std::string, const RequestRecord*> by_source;
  for (const RequestRecord& r : run.requests) by_source[r.trace_source] = &r;
  EXPECT_FALSE(by_source.at("t:A2")->ok);
  EXPECT_FALSE(by_source.at("t:B2")->ok);
  EXPECT_EQ(summarize_run(run)[0].failed, 2);
  // The turn after a failure is sent as recorded and marked so; the untroubled session stays live.
  const auto bodies = bodies_by_question(server);
  EXPECT_EQ(bodies.at("A q3")["messages"], reqs[6].messages);
  EXPECT_EQ(by_source.at("t:A3")->history, "recorded");
  EXPECT_EQ(by_source.at("t:B3")->history, "recorded");
  EXPECT_TRUE(by_source.at("t:C3")->ok);
  EXPECT_EQ(by_source.at("t:C3")->history, "live");
  EXPECT_EQ(bodies.at("C q3")["messages"][4], msg("assistant", "live answer to C q2"));
}

TEST(LiveHistory, SglangAgenticTurnsGetTheLiveReplyInsteadOfTheSyntheticOne) {
  const std::string trace = R"({"metadata": {}, "conversations": [[
      {"messages": [{"role": "system", "content": "agent"}, {"role": "user", "content": "S q1"}]},
      {"messages": [{"role": "user", "content": "S q2"}]}]]})";
  auto reqs = parse_sglang_agentic("agentic.json", trace, nullptr);
  ASSERT_TRUE(reqs.ok());
  ASSERT_EQ(reqs->size(), 2u);
  FakeServer server({});
  server.respond_with(live_responder());
  const RunData run = run_to_file(
      "live_agentic", [&](JsonlWriter& out) { return run_replay(live_options(server.url()), *reqs, out); });
  ASSERT_EQ(run.requests.size(), 2u);
  EXPECT_EQ(bodies_by_question(server).at("S q2")["messages"],
            Json::array({msg("system", "agent"), msg("user", "S q1"), msg("assistant", "live answer to S q1"),
                         msg("user", "S q2")}));
}

}  // namespace
}  // namespace mtp::loadgen
