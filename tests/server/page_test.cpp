// GET /'s chat page and the "return_token_sources" extension it reads: `mtp serve` as a child process on the
// bundled model (tiny, structured, with an MTP head whose drafts the trunk mostly accepts).
#include <gtest/gtest.h>

#include <string>

#include "http_client.h"
#include "server/api.h"
#include "server_process.h"

namespace mtp::testing {
namespace {

using server::Json;

const std::string kPageModel = "-m tests/data/example.gguf -t 2 -np 1";

// What a streamed reply's token_sources add up to, and its last chunk's timings.
struct Sources {
  int64_t tokens = 0, draft = 0, rounds = 0, drafted = 0;
  std::string text;         // the tokens' texts, in order
  std::string stream_text;  // the chunks' own text (completions) or content (chat)
  bool in_every_token_chunk = true;
  Json timings;
};

Sources read_stream(const std::string& body) {
  Sources s;
  for (const std::string& data : sse_data(body)) {
    if (data == "[DONE]") continue;
    const Json j = Json::parse(data);
    EXPECT_FALSE(j.contains("error")) << data;
    if (j.contains("timings")) s.timings = j["timings"];
    if (j["choices"].empty()) continue;
    const Json& c = j["choices"][0];
    const bool has_text = (c.contains("text") && !c["text"].get<std::string>().empty()) ||
                          (c.contains("delta") && c["delta"].contains("content"));
    if (c.contains("text")) s.stream_text += c["text"].get<std::string>();
    if (c.contains("delta") && c["delta"].contains("content"))
      s.stream_text += c["delta"]["content"].get<std::string>();
    if (!j.contains("token_sources")) {
      if (has_text) s.in_every_token_chunk = false;
      continue;
    }
    for (const Json& t : j["token_sources"]) {
      ++s.tokens;
      s.text += t["text"].get<std::string>();
      EXPECT_TRUE(t["id"].is_number_integer()) << t;
      EXPECT_TRUE(t["source"] == "draft" || t["source"] == "trunk") << t;
      if (t["source"] == "draft") ++s.draft;
      if (t.contains("drafted")) {
        EXPECT_GT(t["drafted"].get<int64_t>(), 0) << t;
        ++s.rounds;
        s.drafted += t["drafted"].get<int64_t>();
      }
    }
  }
  return s;
}

// POSTs a streamed request and reads its token sources (none, with a failure, when the answer is not a 200).
Sources stream(int port, const std::string& path, const Json& body) {
  HttpResponse r = http_post(port, path, body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return r.status == 200 ? read_stream(r.body) : Sources{};
}

Json completion(bool sources, bool speculative) {
  Json b = Json{{"prompt", "The model"}, {"max_tokens", 48}, {"temperature", 0},
                {"ignore_eos", true},    {"stream", true},   {"speculative", speculative}};
  if (sources) b["return_token_sources"] = true;
  return b;
}

// Drafting on: some tokens are accepted drafts, and the stream's counts are the timings' counts.
TEST(TokenSources, DraftTokensAreTheAcceptedOnes) {
  ServerProcess srv(kPageModel + " --spec mtp --draft-max 3");
  const Sources s = stream(srv.port(), "/v1/completions", completion(true, true));
  EXPECT_EQ(s.tokens, 48);
  EXPECT_GT(s.draft, 0);
  EXPECT_LT(s.draft, s.tokens);  // every round ends with the trunk's own token
  EXPECT_EQ(s.draft, s.timings["draft_n_accepted"].get<int64_t>());
  EXPECT_EQ(s.rounds, s.timings["draft_rounds"].get<int64_t>());
  EXPECT_EQ(s.drafted, s.timings["draft_n"].get<int64_t>());
  EXPECT_EQ(s.text, s.stream_text);
  EXPECT_TRUE(s.in_every_token_chunk);

  // Not streaming: the same array, whole.
  Json body = completion(true, true);
  body["stream"] = false;
  const Json whole = Json::parse(http_post(srv.port(), "/v1/completions", body.dump()).body);
  ASSERT_EQ(whole["token_sources"].size(), 48u) << whole.dump();
  int64_t draft = 0;
  for (const Json& t : whole["token_sources"]) draft += t["source"] == "draft";
  EXPECT_EQ(draft, whole["timings"]["draft_n_accepted"].get<int64_t>());

  // Chat streams carry them too.
  Json chat = Json{{"messages", Json::array({Json{{"role", "user"}, {"content", "Hello"}}})},
                   {"max_tokens", 32},
                   {"temperature", 0},
                   {"ignore_eos", true},
                   {"stream", true},
                   {"return_token_sources", true}};
  const Sources c = stream(srv.port(), "/v1/chat/completions", chat);
  EXPECT_EQ(c.tokens, 32);
  EXPECT_EQ(c.draft, c.timings["draft_n_accepted"].get<int64_t>());
}

// Drafting off: every token is the trunk's, and no round is reported.
TEST(TokenSources, PlainDecodingIsAllTrunk) {
  ServerProcess srv(kPageModel + " --spec mtp --draft-max 3");
  const Sources s = stream(srv.port(), "/v1/completions", completion(true, false));
  EXPECT_EQ(s.tokens, 48);
  EXPECT_EQ(s.draft, 0);
  EXPECT_EQ(s.rounds, 0);
  EXPECT_EQ(s.timings["draft_n"], 0);
  EXPECT_EQ(s.text, s.stream_text);
}

// Not asked for: the chunks are what they were (OpenAI clients see nothing new); a wrong type is a 400.
TEST(TokenSources, OnlyWhenAsked) {
  ServerProcess srv(kPageModel + " --spec mtp --draft-max 3");
  HttpResponse r = http_post(srv.port(), "/v1/completions", completion(false, true).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.find("token_sources"), std::string::npos);
  Json bad = completion(true, true);
  bad["return_token_sources"] = "yes";
  r = http_post(srv.port(), "/v1/completions", bad.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Json::parse(r.body)["error"]["param"], "return_token_sources") << r.body;
}

// GET / is the page, served without the API key (it asks for one itself); the API still needs the key.
TEST(ChatPage, ServedAtRootWithoutTheKey) {
  ServerProcess srv(kPageModel + " --api-key k3y");
  HttpResponse r = http_get(srv.port(), "/");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(r.body.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(r.body.find("return_token_sources"), std::string::npos);
  EXPECT_NE(r.body.find("</html>"), std::string::npos);
  EXPECT_EQ(http_get(srv.port(), "/props").status, 401);
  EXPECT_EQ(http_get(srv.port(), "/props", {{"Authorization", "Bearer k3y"}}).status, 200);
  EXPECT_EQ(http_get(srv.port(), "/nothing-here").status, 401);  // unknown paths stay behind the key
}

}  // namespace
}  // namespace mtp::testing
