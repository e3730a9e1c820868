// Output token counts from POST /tokenize (--count-tokens): asked for once per request on the text the stream
// carried, where the server sent neither usage nor timings (auto) or always (tokenize); never one per chunk.
#include <gtest/gtest.h>

#include "fake_server.h"
#include "loadgen/stream_client.h"

namespace mtp::loadgen {
namespace {

using namespace mtp::testing;

// Two content chunks of 3 and 5 bytes, a tool call with name and arguments, then a finish without usage or
// timings: a server that reports no token count at all.
std::vector<ScriptedChunk> uncounted_script() {
  const std::string call =
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function",)"
      R"("function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]})";
  return {{0, delta_chunk("content", "abc")},
          {0, delta_chunk("content", "defgh")},
          {0, call},
          {0, R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})"},
          {0, "[DONE]"}};
}

RequestRecord run_with(const FakeServer& server, TokenCount count) {
  ClientOptions o;
  o.url = server.url();
  o.timeout_s = 30;
  o.count = count;
  auto client = StreamClient::create(o);
  EXPECT_TRUE(client.ok()) << client.status().message();
  RunClock clock;
  RequestRecord r;
  ChatRequest req;
  req.prompt = "hi";
  (*client)->run(req, clock, r);
  return r;
}

TEST(TokenCount, AutoAsksTokenizeOnceOnTheWholeTextWhenTheServerGivesNoCount) {
  FakeServer server(uncounted_script());
  server.serve_tokenize();
  const RequestRecord r = run_with(server, TokenCount::kAuto);
  ASSERT_TRUE(r.ok) << r.error;
  // "abc" + "defgh" + "f" + "{}": 11 bytes, one token each on this fake; 3 text events, not 3 tokens.
  EXPECT_EQ(r.completion_tokens, 11);
  EXPECT_EQ(r.count_source, "tokenize");
  EXPECT_EQ(r.token_source, "chars");
  const auto bodies = server.tokenize_bodies();
  ASSERT_EQ(bodies.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(bodies[0])["content"], "abcdefghf{}");
  int64_t sum = 0;
  for (const EventRecord& e : r.events) sum += e.tokens > 0 ? e.tokens : 0;
  EXPECT_EQ(sum, 11);
}

TEST(TokenCount, AutoKeepsTheServersUsageWithoutAskingTokenize) {
  FakeServer server(two_delta_script());  // usage: 3 completion tokens
  server.serve_tokenize();
  const RequestRecord r = run_with(server, TokenCount::kAuto);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.completion_tokens, 3);
  EXPECT_EQ(r.count_source, "usage");
  EXPECT_TRUE(server.tokenize_bodies().empty());
}

TEST(TokenCount, TokenizeReplacesTheServersUsage) {
  FakeServer server(two_delta_script());  // usage says 3; the text "abcd" is 4 on this fake
  server.serve_tokenize();
  const RequestRecord r = run_with(server, TokenCount::kTokenize);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.completion_tokens, 4);
  EXPECT_EQ(r.count_source, "tokenize");
  EXPECT_EQ(server.tokenize_bodies().size(), 1u);
}

TEST(TokenCount, ServerOnlyLeavesAnUncountedStreamUnknown) {
  FakeServer server(uncounted_script());
  server.serve_tokenize();
  const RequestRecord r = run_with(server, TokenCount::kServer);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.completion_tokens, -1);
  EXPECT_EQ(r.count_source, "none");
  EXPECT_EQ(r.token_source, "none");
  EXPECT_TRUE(server.tokenize_bodies().empty());
}

TEST(TokenCount, ServerWithoutTokenizeKeepsTheRequestAndSaysWhy) {
  FakeServer server(uncounted_script());  // POST /tokenize answers 404
  const RequestRecord r = run_with(server, TokenCount::kAuto);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.count_source, "none");
  EXPECT_NE(r.count_error.find("HTTP 404"), std::string::npos) << r.count_error;
}

}  // namespace
}  // namespace mtp::loadgen
