// Recorded answers: `mtp serve --record-answers` keeps each answer with its request (redacted: its lengths),
// and `mtp replay --history recorded` puts a session's recorded answer in where a later turn's messages lack
// the reply. A session recorded on one server and replayed against a second, also recording, records the
// same requests and the same answers (greedy).
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "fake_server.h"
#include "loadgen/live_history.h"
#include "loadgen/replay.h"
#include "run_fixture.h"
#include "server_process.h"

namespace mtp::loadgen {
namespace {

using mtp::testing::FakeServer;
using mtp::testing::run_mtp;
using mtp::testing::ServerProcess;

Json msg(const std::string& role, const std::string& content) {
  return Json{{"role", role}, {"content", content}};
}

TEST(RecordedAnswers, AMissingReplyIsTheRecordedAnswerAndAPresentOneStays) {
  const Json turn1 = Json::array({msg("user", "q1")});
  const Json turn2 = Json::array({msg("user", "q1"), msg("user", "q2")});  // the reply was not sent back
  const Json turn3 = Json::array({msg("user", "q1"), msg("user", "q2"), msg("user", "q3")});
  RecordedSession s;
  EXPECT_EQ(recorded_turn(s, turn1), turn1);  // the first turn: as recorded
  s = RecordedSession{turn1, turn1, msg("assistant", "a1")};
  const Json sent2 = recorded_turn(s, turn2);
  EXPECT_EQ(sent2, Json::array({msg("user", "q1"), msg("assistant", "a1"), msg("user", "q2")}));
  s = RecordedSession{turn2, sent2, msg("assistant", "a2")};
  EXPECT_EQ(recorded_turn(s, turn3),
            Json::array({msg("user", "q1"), msg("assistant", "a1"), msg("user", "q2"), msg("assistant", "a2"),
                         msg("user", "q3")}));
  // The client sent its copy of the reply: sent as recorded, even where it differs from the answer.
  const Json echoed = Json::array({msg("user", "q1"), msg("assistant", "edited a1"), msg("user", "q2")});
  s = RecordedSession{turn1, turn1, msg("assistant", "a1")};
  EXPECT_EQ(recorded_turn(s, echoed), echoed);
  // No answer recorded, a rewritten history, or nothing new: as recorded.
  s.answer = Json();
  EXPECT_EQ(recorded_turn(s, turn2), turn2);
  s = RecordedSession{Json::array({msg("user", "other")}), turn1, msg("assistant", "a1")};
  EXPECT_EQ(recorded_turn(s, turn2), turn2);
  s = RecordedSession{turn1, turn1, msg("assistant", "a1")};
  EXPECT_EQ(recorded_turn(s, turn1), turn1);
}

TEST(RecordedAnswers, ReplayWithRecordedHistorySendsTheAnswersAsTheReplies) {
  const std::string trace = write_temp(
      "answers_trace",
      R"({"type":"trace","session":"s","endpoint":"/v1/chat/completions","messages":[{"role":"user","content":"q1"}],"answer":{"role":"assistant","content":"a1"},"completion_tokens":2})"
      "\n"
      R"({"type":"trace","session":"s","endpoint":"/v1/chat/completions","messages":[{"role":"user","content":"q1"},{"role":"user","content":"q2"}],"answer":{"role":"assistant","content":"a2"},"completion_tokens":2})"
      "\n");
  auto reqs = read_trace(trace, "auto");
  ASSERT_TRUE(reqs.ok()) << reqs.status().message();
  ASSERT_EQ(reqs->size(), 2u);
  EXPECT_EQ((*reqs)[0].answer, msg("assistant", "a1"));
  FakeServer server(mtp::testing::two_delta_script());
  const RunData run = run_to_file(
      "answers_run", [&](JsonlWriter& out) { return run_replay(replay_options(server.url()), *reqs, out); });
  ASSERT_EQ(run.requests.size(), 2u);
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(Json::parse(bodies[1])["messages"],
            Json::array({msg("user", "q1"), msg("assistant", "a1"), msg("user", "q2")}));
  std::filesystem::remove(trace);
}

TEST(RecordedAnswers, AnAnswerThatIsNotAnObjectIsAnError) {
  const std::string trace = write_temp(
      "answers_bad",
      R"({"type":"trace","endpoint":"/v1/chat/completions","messages":[{"role":"user","content":"q"}],"answer":5})"
      "\n");
  auto reqs = read_trace(trace, "mtp");
  ASSERT_FALSE(reqs.ok());
  EXPECT_EQ(reqs.status().message(), trace + ":1: \"answer\" is not an object");
  std::filesystem::remove(trace);
}

// Two turns of session "alice" on the bundled model, greedy; the second streams and sends the first reply
// back as the client got it.
Json two_turns(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120);
  Json body = {{"messages", {msg("user", "first question")}},
               {"max_tokens", 6},
               {"temperature", 0},
               {"user", "alice"}};
  auto r1 = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r1 && r1->status == 200) << (r1 ? r1->body : "no response");
  if (!r1 || r1->status != 200) return Json();
  const Json reply = Json::parse(r1->body)["choices"][0]["message"];
  body["messages"].push_back(reply);
  body["messages"].push_back(msg("user", "second question"));
  body["stream"] = true;
  auto r2 = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r2 && r2->status == 200) << (r2 ? r2->body : "no response");
  return reply;
}

TEST(RecordedAnswers, ARecordedSessionReplaysToTheSameRequestsAndAnswers) {
  const std::string first = write_temp("answers_first", ""), second = write_temp("answers_second", "");
  std::filesystem::remove(first);
  std::filesystem::remove(second);
  std::vector<Json> recorded;
  {
    ServerProcess srv("-m tests/data/example.gguf --record " + first + " --record-answers");
    EXPECT_NE(srv.banner().find("recording requests and answers to " + first), std::string::npos)
        << srv.banner();
    const Json reply = two_turns(srv.port());
    recorded = read_json_lines(first);
    ASSERT_EQ(recorded.size(), 2u);
    EXPECT_EQ(recorded[0]["answer"], reply);                       // what the client got
    EXPECT_EQ(recorded[1]["messages"][1], recorded[0]["answer"]);  // and sent back
    EXPECT_EQ(recorded[1]["answer"]["role"], "assistant");         // a streamed answer is kept too
    EXPECT_TRUE(recorded[1]["answer"]["content"].is_string());
  }
  ServerProcess srv("-m tests/data/example.gguf --record " + second + " --record-answers");
  const std::string run = second + ".run.jsonl";
  const auto r = run_mtp(str_cat("replay '", first, "' --url http://127.0.0.1:", srv.port(),
                                 " --history recorded --max-tokens-cap 6 --timeout 120 -o '", run, "'"),
                         true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<Json> replayed = read_json_lines(second);
  ASSERT_EQ(replayed.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(replayed[i]["messages"], recorded[i]["messages"]) << i;
    EXPECT_EQ(replayed[i]["session"], "alice");
    EXPECT_EQ(replayed[i]["answer"], recorded[i]["answer"]) << i;
  }
  std::filesystem::remove(run);
  std::filesystem::remove(first);
  std::filesystem::remove(second);
}

TEST(RecordedAnswers, RedactedAnswersKeepLengthsOnlyAndNeedRecord) {
  const std::string trace = write_temp("answers_redacted", "");
  std::filesystem::remove(trace);
  {
    ServerProcess srv("-m tests/data/example.gguf --record " + trace + " --record-answers --record-redact");
    const Json reply = two_turns(srv.port());
    const std::vector<Json> lines = read_json_lines(trace);
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_FALSE(lines[0].contains("answer"));
    const std::string content = reply["content"].get<std::string>();
    int64_t chars = 0;
    for (unsigned char c : content) chars += (c & 0xC0) != 0x80 ? 1 : 0;
    EXPECT_EQ(lines[0]["answer_lengths"]["chars"], chars);
    EXPECT_EQ(lines[0]["answer_lengths"]["tool_calls"], 0);
  }
  std::filesystem::remove(trace);
  const auto alone = run_mtp("serve -m tests/data/example.gguf --port 0 --record-answers", true);
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_EQ(alone.output, "mtp serve: --record-answers needs --record FILE\n");
}

}  // namespace
}  // namespace mtp::loadgen
