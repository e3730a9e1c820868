// Grammar requests under concurrency: `mtp serve` with four slots answers a mix of json_schema, GBNF, forced
// tool-call, lazy tool-call ("auto" with tools) and plain requests, drafting on and off, all in flight at
// once; every structured output parses and validates (the gate's validator, independent of the grammar
// compiler) and every greedy reply is the one the same request gets alone.
#include <gtest/gtest.h>

#include <future>
#include <regex>
#include <string>
#include <vector>

#include "gate/schema.h"
#include "http_client.h"
#include "server/api.h"
#include "server_process.h"

namespace mtp::testing {
namespace {

using server::Json;

const char* kWeather = R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},
  "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},
  "required":["city","unit"],"additionalProperties":false})";

struct Request {
  std::string endpoint;
  Json body;
  enum class Check { kNone, kJson, kGrammar, kToolCall } check = Check::kNone;
};

Json chat_body(const std::string& content) {
  return Json{{"messages", Json::array({Json{{"role", "user"}, {"content", content}}})},
              {"max_tokens", 120},
              {"temperature", 0}};
}

std::vector<Request> mixed_requests() {
  const Json schema = Json::parse(kWeather);
  const Json tools = Json::array(
      {Json{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", schema}}}}});
  std::vector<Request> out;
  for (const bool spec : {false, true}) {
    Json json_chat = chat_body(spec ? "Weather as JSON" : "The weather, please");
    json_chat["response_format"] = {{"type", "json_schema"},
                                    {"json_schema", {{"name", "w"}, {"schema", schema}}}};
    Json json_completion = {{"prompt", spec ? "The model" : "A model"},
                            {"max_tokens", 120},
                            {"temperature", 0},
                            {"json_schema", schema}};
    Json gbnf = {{"prompt", spec ? "Answer:" : "Say"},
                 {"n_predict", 30},
                 {"temperature", 0},
                 {"grammar", "root ::= (\"yes\" | \"no\") \" \" [0-9]{3}"}};
    Json forced = chat_body(spec ? "Weather in Paris?" : "Weather in Rome?");
    forced["tools"] = tools;
    forced["tool_choice"] = "required";
    Json lazy = chat_body(spec ? "Hello there" : "Any news?");
    lazy["tools"] = tools;
    Json plain = chat_body(spec ? "Tell me a story" : "Write a poem");
    const std::vector<Request> some = {{"/v1/chat/completions", json_chat, Request::Check::kJson},
                                       {"/v1/completions", json_completion, Request::Check::kJson},
                                       {"/completion", gbnf, Request::Check::kGrammar},
                                       {"/v1/chat/completions", forced, Request::Check::kToolCall},
                                       {"/v1/chat/completions", lazy, Request::Check::kNone},
                                       {"/v1/chat/completions", plain, Request::Check::kNone}};
    for (Request r : some) {
      r.body["speculative"] = spec;
      out.push_back(std::move(r));
    }
  }
  return out;
}

// The reply as the check sees it: the text, or the call's {"name", "arguments"}.
Json reply_of(int port, const Request& r) {
  const HttpResponse resp = http_post(port, r.endpoint, r.body.dump());
  EXPECT_EQ(resp.status, 200) << r.body.dump() << " -> " << resp.body;
  const Json j = Json::parse(resp.body, nullptr, false);
  if (r.endpoint == "/completion") return j.value("content", Json());
  if (r.endpoint == "/v1/completions") return j["choices"][0]["text"];
  const Json& m = j["choices"][0]["message"];
  if (m.contains("tool_calls")) return m["tool_calls"][0]["function"];
  return m["content"];
}

void check_reply(const Request& r, const Json& reply) {
  const Json schema = Json::parse(kWeather);
  switch (r.check) {
    case Request::Check::kNone:
      break;
    case Request::Check::kJson: {
      const Json value = Json::parse(reply.get<std::string>(), nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << reply;
      EXPECT_EQ(gate::schema_violation(schema, value), "") << reply;
      break;
    }
    case Request::Check::kGrammar:
      EXPECT_TRUE(std::regex_match(reply.get<std::string>(), std::regex("(yes|no) [0-9]{3}"))) << reply;
      break;
    case Request::Check::kToolCall: {
      ASSERT_TRUE(reply.is_object() && reply.value("name", Json()) == "get_weather") << reply;
      const Json args = Json::parse(reply["arguments"].get<std::string>(), nullptr, false);
      ASSERT_TRUE(args.is_object()) << reply;
      EXPECT_EQ(gate::schema_violation(schema, args), "") << reply;
      break;
    }
  }
}

TEST(GrammarServe, MixedGrammarRequestsUnderConcurrencyMatchTheirRunsAlone) {
  ServerProcess srv("-m tests/data/example.gguf -t 2 -np 4 --spec mtp --draft-max 3");
  const int port = srv.port();
  const std::vector<Request> requests = mixed_requests();
  std::vector<Json> alone;
  for (const Request& r : requests) alone.push_back(reply_of(port, r));
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<Json>> replies;
    for (const Request& r : requests)
      replies.push_back(std::async(std::launch::async, [port, &r] { return reply_of(port, r); }));
    for (size_t i = 0; i < requests.size(); ++i) {
      const Json reply = replies[i].get();
      EXPECT_EQ(reply, alone[i]) << "round " << round << ": " << requests[i].body.dump();
      check_reply(requests[i], reply);
    }
  }
}

}  // namespace
}  // namespace mtp::testing
