// Request parsing and validation, error shapes, metrics text: the server's pure functions, without HTTP.
#include <gtest/gtest.h>

#include <regex>

#include "server/api.h"
#include "server/format.h"
#include "server/metrics.h"

namespace mtp::server {
namespace {

RequestDefaults defaults() {
  RequestDefaults d;
  d.draft_vocab = 4096;
  d.n_ctx = 256;
  d.draft = {3, 0, 0.0f};
  return d;
}

std::optional<ApiError> completion(const std::string& body, GenerationParams* out = nullptr) {
  GenerationParams p;
  Json j;
  if (auto e = parse_json_body(body, j)) return e;
  auto e = parse_completion_request(j, defaults(), p);
  if (out != nullptr) *out = p;
  return e;
}

std::optional<ApiError> chat(const std::string& body, GenerationParams* out = nullptr) {
  GenerationParams p;
  Json j;
  if (auto e = parse_json_body(body, j)) return e;
  auto e = parse_chat_request(j, defaults(), p);
  if (out != nullptr) *out = p;
  return e;
}

// nlohmann throws out_of_range, not parse_error, for a number beyond double; it escaped parse_json_body
// (found by fuzz/fuzz_server_request.cpp).
TEST(ApiTest, NumberOverflowIsABadRequest) {
  auto err = completion(R"({"prompt": "a", "top_k": 4e8888})");
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 400);
  EXPECT_NE(err->message.find("not valid JSON: number overflow"), std::string::npos) << err->message;
}

TEST(ApiTest, ErrorShapeIsOpenAis) {
  ApiError e = bad_request("'max_tokens' must be an integer", "max_tokens");
  Json j = e.to_json();
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["message"], "'max_tokens' must be an integer");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_EQ(server_error(503, "busy", "server_busy").to_json()["error"]["type"], "server_error");
}

TEST(ApiTest, MalformedJsonNamesThePosition) {
  auto e = completion("{\"prompt\": \"a\",,}");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_NE(e->message.find("not valid JSON"), std::string::npos) << e->message;
  EXPECT_NE(e->message.find("column"), std::string::npos) << e->message;
  EXPECT_NE(completion("")->message.find("empty"), std::string::npos);
  EXPECT_NE(completion("[1, 2]")->message.find("must be a JSON object"), std::string::npos);
  // Invalid UTF-8 inside a string is malformed JSON too.
  EXPECT_TRUE(completion(std::string("{\"prompt\": \"\xff\"}")));
}

TEST(ApiTest, WrongTypesNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"prompt": "a", "max_tokens": "8"})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 8.5})", "max_tokens"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "a", "top_p": [1]})", "top_p"},
      {R"({"prompt": "a", "top_k": 1.5})", "top_k"},
      {R"({"prompt": "a", "seed": "x"})", "seed"},
      {R"({"prompt": "a", "stream": "yes"})", "stream"},
      {R"({"prompt": "a", "stop": 5})", "stop"},
      {R"({"prompt": "a", "stop": ["x", 5]})", "stop[1]"},
      {R"({"prompt": "a", "model": 7})", "model"},
      {R"({"prompt": "a", "speculative": "yes"})", "speculative"},
      {R"({"prompt": "a", "speculative": {"n_max": "2"}})", "speculative.n_max"},
      {R"({"prompt": "a", "ignore_eos": 1})", "ignore_eos"},
      {R"({"prompt": "a", "stream_options": {"include_usage": "y"}})", "stream_options.include_usage"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": ["a", 5]})", "prompt"},
      {R"({"prompt": [1, -2]})", "prompt"},
  };
  for (const Case& c : cases) {
    auto e = completion(c.body);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->status, 400) << c.body;
    EXPECT_EQ(e->param, c.param) << c.body << " -> " << e->message;
  }
}

TEST(ApiTest, RangesAreChecked) {
  const char* bad[] = {
      R"({"prompt": "a", "max_tokens": 0})",
      R"({"prompt": "a", "max_tokens": -5})",
      R"({"prompt": "a", "max_tokens": 257})",
      R"({"prompt": "a", "n_predict": -2})",
      R"({"prompt": "a", "temperature": -0.1})",
      R"({"prompt": "a", "top_p": 0})",
      R"({"prompt": "a", "top_p": 1.5})",
      R"({"prompt": "a", "min_p": 2})",
      R"({"prompt": "a", "logprobs": 21})",
      R"({"prompt": "a", "n": 2})",
      R"({"prompt": "a", "presence_penalty": 2.5})",
      R"({"prompt": "a", "frequency_penalty": -3})",
      R"({"prompt": "a", "repeat_penalty": 0})",
      R"({"prompt": "a", "repeat_last_n": -2})",
      R"({"prompt": "a", "logit_bias": {"x1": 5}})",
      R"({"prompt": "a", "logit_bias": {"-1": 5}})",
      R"({"prompt": "a", "logit_bias": {"1": 500}})",
      R"({"prompt": "a", "logit_bias": [[1]]})",
      R"({"prompt": "a", "logit_bias": [["hello", 1]]})",
      R"({"prompt": "a", "logit_bias": [[1, true]]})",
      R"({"prompt": "a", "logit_bias": 3})",
      R"({"prompt": "a", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
      R"({"prompt": "a", "stop": [""]})",
      R"({"prompt": "a", "echo": true})",
      R"({"prompt": "a", "response_format": {"type": "xml"}})",
      R"({"prompt": "a", "grammar": "root ::= \"a"})",
      R"({"prompt": "a", "grammar": 5})",
      R"x({"prompt": "a", "json_schema": {"type": "string", "pattern": "(?=a)"}})x",
  };
  for (const char* b : bad) {
    auto e = completion(b);
    ASSERT_TRUE(e) << b;
    EXPECT_EQ(e->status, 400) << b;
  }
  auto e = completion(R"({"prompt": "a", "max_tokens": 1000})");
  EXPECT_EQ(e->message,
            "'max_tokens' is 1000; the context holds 256 tokens (prompt and completion together)");
  EXPECT_EQ(e->code, "context_length_exceeded");
  EXPECT_EQ(completion(R"({"prompt": "a", "max_tokens": 0})")->message,
            "'max_tokens' must be at least 1, got 0");
  EXPECT_EQ(
      completion(R"({"prompt": "a", "n": 3})")->message,
      "'n' must be 1, got 3: several choices in one response are not supported; send the request n times "
      "(each with its own seed when sampling)");
  // Defaults and neutral values are fine.
  EXPECT_FALSE(completion(R"({"prompt": "a", "presence_penalty": 0, "frequency_penalty": 0, "n": 1,
                              "n_predict": -1, "logit_bias": {}, "response_format": {"type": "text"}})"));
}

// Structured output: llama-server's grammar and json_schema, OpenAI's response_format (json_object and
// json_schema with strict), each compiled into the request's grammar; errors name the field and the problem.
TEST(ApiTest, StructuredOutputFields) {
  for (const char* body : {
           R"({"prompt": "a", "grammar": "root ::= [a-z]+"})",
           R"({"prompt": "a", "json_schema": {"type": "object", "properties": {"x": {"type": "integer"}}}})",
           R"({"prompt": "a", "response_format": {"type": "json_object"}})",
           R"({"prompt": "a", "response_format": {"type": "json_object", "schema": {"type": "array"}}})",
           R"({"prompt": "a", "response_format": {"type": "json_schema", "json_schema": {"name": "n",
               "strict": true, "schema": {"type": "object", "properties": {"a": {"enum": [1, 2]}},
               "required": ["a"], "additionalProperties": false}}}})",
       }) {
    GenerationParams p;
    ASSERT_FALSE(completion(body, &p)) << body;
    EXPECT_NE(p.options.grammar, nullptr) << body;
  }
  GenerationParams p;
  ASSERT_FALSE(chat(R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "text"},
                        "grammar": ""})",
                    &p));
  EXPECT_EQ(p.options.grammar, nullptr);
  EXPECT_EQ(completion(R"({"prompt": "a", "grammar": "root ::= \"a"})")->message,
            "'grammar': 1:10: unterminated string literal");
  EXPECT_EQ(completion(R"({"prompt": "a", "grammar": "root ::= x"})")->message,
            "'grammar': 1:10: undefined rule 'x'");
  EXPECT_EQ(
      completion(R"x({"prompt": "a", "json_schema": {"type": "string", "pattern": "(?!a)"}})x")->message,
      "'json_schema': JSON Schema at #: 'pattern' \"(?!a)\": lookarounds are not supported");
  auto e =
      chat(R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema",
                   "json_schema": {"name": "n", "schema": {"type": "object", "properties": {"n":
                   {"type": "number", "multipleOf": 0.5}}}}}})");
  ASSERT_TRUE(e);
  EXPECT_EQ(
      e->message,
      "'response_format.json_schema.schema': unsupported JSON Schema keyword 'multipleOf' at #/properties/n");
  EXPECT_EQ(e->param, "response_format.json_schema.schema");
  EXPECT_EQ(completion(R"({"prompt": "a", "grammar": "root ::= \"a\"", "json_schema": {}})")->message,
            "give at most one of 'grammar', 'json_schema' and 'response_format' (json)");
}

// Penalties and logit_bias reach the sampler options in both request forms (OpenAI's map, llama-server's
// pairs with false for "never").
TEST(ApiTest, PenaltiesAndLogitBias) {
  GenerationParams p;
  ASSERT_FALSE(completion(R"({"prompt": "a", "presence_penalty": 0.5, "frequency_penalty": -0.25,
                              "repeat_penalty": 1.1, "repeat_last_n": -1, "logit_bias": {"7": -100, "12": 2.5}})",
                          &p));
  const SamplerOptions& s = p.options.sampling;
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.25f);
  EXPECT_FLOAT_EQ(s.repeat_penalty, 1.1f);
  EXPECT_EQ(s.repeat_last_n, -1);
  ASSERT_EQ(s.logit_bias.size(), 2u);
  EXPECT_EQ(s.logit_bias[0], (std::pair<int32_t, float>{7, -100.0f}));
  EXPECT_EQ(s.logit_bias[1], (std::pair<int32_t, float>{12, 2.5f}));
  ASSERT_FALSE(completion(R"({"prompt": "a", "logit_bias": [[3, false], [4, -1.5]]})", &p));
  ASSERT_EQ(p.options.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(p.options.sampling.logit_bias[0].first, 3);
  EXPECT_TRUE(std::isinf(p.options.sampling.logit_bias[0].second) &&
              p.options.sampling.logit_bias[0].second < 0);
  EXPECT_FLOAT_EQ(p.options.sampling.logit_bias[1].second, -1.5f);
  // Unset: the neutral defaults.
  ASSERT_FALSE(completion(R"({"prompt": "a"})", &p));
  EXPECT_FALSE(p.options.sampling.modifies_logits());
}

TEST(ApiTest, PromptForms) {
  GenerationParams p;
  ASSERT_FALSE(completion(R"({"prompt": "hello"})", &p));
  EXPECT_EQ(p.prompt_text, "hello");
  EXPECT_FALSE(p.prompt_is_tokens);
  ASSERT_FALSE(completion(R"({"prompt": ["hello"]})", &p));
  EXPECT_EQ(p.prompt_text, "hello");
  ASSERT_FALSE(completion(R"({"prompt": [1, 2, 3]})", &p));
  EXPECT_TRUE(p.prompt_is_tokens);
  EXPECT_EQ(p.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_FALSE(completion(R"({"prompt": [[4, 5]]})", &p));
  EXPECT_EQ(p.prompt_tokens, (std::vector<int32_t>{4, 5}));
  EXPECT_NE(completion(R"({"prompt": ["a", "b"]})")->message.find("only one prompt"), std::string::npos);
  EXPECT_NE(completion(R"({"prompt": ""})")->message.find("empty"), std::string::npos);
  EXPECT_NE(completion(R"({"prompt": []})")->message.find("empty"), std::string::npos);
  EXPECT_NE(completion(R"({"max_tokens": 3})")->message.find("required"), std::string::npos);
}

TEST(ApiTest, SamplingAndLimits) {
  GenerationParams p;
  ASSERT_FALSE(
      completion(R"({"prompt": "a", "temperature": 0.5, "top_k": 7, "top_p": 0.9, "seed": 42, "min_p": 0.125,
                              "max_tokens": 12, "stop": "END", "stream": true, "ignore_eos": true,
                              "logprobs": 3})",
                 &p));
  EXPECT_FLOAT_EQ(p.options.sampling.temperature, 0.5f);
  EXPECT_EQ(p.options.sampling.top_k, 7);
  EXPECT_FLOAT_EQ(p.options.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(p.options.sampling.min_p, 0.125f);
  EXPECT_EQ(p.options.sampling.seed, 42u);
  EXPECT_EQ(p.options.max_tokens, 12);
  EXPECT_TRUE(p.max_tokens_set);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"END"}));
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.options.ignore_eos);
  EXPECT_TRUE(p.logprobs);
  EXPECT_TRUE(p.options.logprobs);
  EXPECT_EQ(p.options.n_probs, 3);
  EXPECT_FALSE(p.options.speculative.has_value());
  ASSERT_FALSE(completion(R"({"prompt": "a"})", &p));
  EXPECT_FALSE(p.max_tokens_set);
  EXPECT_EQ(p.options.max_tokens, -1);
  ASSERT_FALSE(completion(R"({"prompt": "a", "max_completion_tokens": 9})", &p));
  EXPECT_EQ(p.options.max_tokens, 9);
  EXPECT_TRUE(p.options.cache_prompt);
  EXPECT_EQ(p.options.cache_namespace, "");
  GenerationParams q;
  ASSERT_FALSE(completion(
      R"({"prompt": "a", "cache_prompt": false, "cache_salt": "tenant-7", "prompt_cache_key": "k"})", &q));
  EXPECT_FALSE(q.options.cache_prompt);
  EXPECT_EQ(q.options.cache_namespace, "tenant-7");
  EXPECT_TRUE(completion(R"({"prompt": "a", "cache_prompt": 1})", &q));
  EXPECT_TRUE(completion(R"({"prompt": "a", "cache_salt": 5})", &q));
}

TEST(ApiTest, SpeculativeOverride) {
  GenerationParams p;
  ASSERT_FALSE(completion(R"({"prompt": "a", "speculative": false})", &p));
  ASSERT_TRUE(p.options.speculative.has_value());
  EXPECT_EQ(p.options.speculative->n_max, 0);
  ASSERT_FALSE(completion(R"({"prompt": "a", "speculative": true})", &p));
  EXPECT_FALSE(p.options.speculative.has_value());
  ASSERT_FALSE(completion(R"({"prompt": "a", "speculative": {"n_max": 2, "p_min": 0.5}})", &p));
  ASSERT_TRUE(p.options.speculative.has_value());
  EXPECT_EQ(p.options.speculative->n_max, 2);
  EXPECT_EQ(p.options.speculative->n_min, 0);
  EXPECT_FLOAT_EQ(p.options.speculative->p_min, 0.5f);
  ASSERT_FALSE(completion(R"({"prompt": "a", "speculative.n_max": 1, "speculative.n_min": 1})", &p));
  EXPECT_EQ(p.options.speculative->n_max, 1);
  EXPECT_EQ(p.options.speculative->n_min, 1);
  EXPECT_NE(completion(R"({"prompt": "a", "speculative": {"n_max": 1, "n_min": 2}})")->message.find("n_min"),
            std::string::npos);
  EXPECT_NE(completion(R"({"prompt": "a", "speculative": {"draft": 1}})")->message.find("unknown field"),
            std::string::npos);
  EXPECT_TRUE(completion(R"({"prompt": "a", "speculative": {"p_min": 1.5}})"));
  // sample: drafts sampled from the head (the server's --draft-sample, per request).
  ASSERT_FALSE(completion(R"({"prompt": "a", "speculative": {"sample": true}})", &p));
  ASSERT_TRUE(p.options.speculative.has_value());
  EXPECT_TRUE(p.options.speculative->sample);
  EXPECT_EQ(p.options.speculative->n_max, 3);  // the rest from the server's defaults
  EXPECT_NE(completion(R"({"prompt": "a", "speculative": {"sample": 1}})")->message.find("sample"),
            std::string::npos);
  // n_max's range is the engine's (speculative::kMaxDraftTokens).
  EXPECT_FALSE(completion(R"({"prompt": "a", "speculative": {"n_max": 16}})"));
  EXPECT_TRUE(completion(R"({"prompt": "a", "speculative": {"n_max": 17}})"));
  // draft_vocab: 0 = the full head, or the server's own --draft-vocab (4096 in defaults()).
  ASSERT_FALSE(completion(R"({"prompt": "a", "speculative": {"draft_vocab": 0}})", &p));
  EXPECT_FALSE(p.options.speculative->subset);
  ASSERT_FALSE(completion(R"({"prompt": "a", "speculative": {"draft_vocab": 4096}})", &p));
  EXPECT_TRUE(p.options.speculative->subset);
  auto err = completion(R"({"prompt": "a", "speculative": {"draft_vocab": 100}})");
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("4096"), std::string::npos) << err->message;
}

// --chat-template-kwargs: every chat request's template variables, under its own (a key the request sets
// wins, enable_thinking included).
TEST(ApiTest, ServerChatTemplateKwargsUnderTheRequests) {
  RequestDefaults d = defaults();
  d.chat_template_kwargs = Json{{"enable_thinking", false}, {"preserve_thinking", true}};
  auto parse = [&](const std::string& body) {
    GenerationParams p;
    Json j;
    EXPECT_FALSE(parse_json_body(body, j));
    EXPECT_FALSE(parse_chat_request(j, d, p));
    return p;
  };
  GenerationParams p = parse(R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(p.chat.enable_thinking, std::optional<bool>(false));
  EXPECT_EQ(p.chat.extra_context["preserve_thinking"], true);
  p = parse(R"({"messages": [{"role": "user", "content": "hi"}],
                "chat_template_kwargs": {"enable_thinking": true, "x": 1}})");
  EXPECT_EQ(p.chat.enable_thinking, std::optional<bool>(true));
  EXPECT_EQ(p.chat.extra_context["preserve_thinking"], true);
  EXPECT_EQ(p.chat.extra_context["x"], 1);
  // Without server kwargs a request starts from none.
  d.chat_template_kwargs = Json::object();
  p = parse(R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_TRUE(p.chat.extra_context.empty());
  EXPECT_FALSE(p.chat.enable_thinking.has_value());
}

TEST(ApiTest, ChatRequests) {
  GenerationParams p;
  ASSERT_FALSE(chat(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 2,
                        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                        "chat_template_kwargs": {"enable_thinking": false}, "reasoning_format": "none"})",
                    &p));
  EXPECT_EQ(p.chat.messages.size(), 1u);
  EXPECT_TRUE(p.chat.tools.is_array());
  EXPECT_EQ(p.options.n_probs, 2);
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.chat.enable_thinking, std::optional<bool>(false));
  EXPECT_EQ(p.reasoning_format, chat::ReasoningFormat::kNone);
  ASSERT_FALSE(chat(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function",
                        "function": {"name": "f"}}], "tool_choice": "none"})",
                    &p));
  EXPECT_TRUE(p.chat.tools.is_null());
  EXPECT_FALSE(p.parse_tool_calls);
  EXPECT_EQ(chat(R"({"messages": []})")->param, "messages");
  EXPECT_EQ(chat(R"({"messages": "hi"})")->param, "messages");
  EXPECT_EQ(chat(R"({"prompt": "hi"})")->param, "messages");
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})")->param,
            "tool_choice");
  // Forced calls: "required" or a named function that 'tools' defines, and no other constraint with them.
  const std::string tools = R"("messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}])";
  ASSERT_FALSE(chat("{" + tools + R"(, "tool_choice": "required", "parallel_tool_calls": true})", &p));
  EXPECT_EQ(p.forced_tool, std::optional<std::string>(""));
  EXPECT_TRUE(p.parallel_tool_calls);
  ASSERT_FALSE(
      chat("{" + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})", &p));
  EXPECT_EQ(p.forced_tool, std::optional<std::string>("g"));
  EXPECT_FALSE(p.parallel_tool_calls);
  ASSERT_FALSE(chat("{" + tools + R"(, "tool_choice": "auto"})", &p));
  EXPECT_FALSE(p.forced_tool.has_value());
  auto unknown = chat("{" + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "h"}}})");
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->message, "'tool_choice' names the function \"h\", which 'tools' does not define");
  EXPECT_EQ(chat("{" + tools + R"(, "tool_choice": {"type": "function", "function": {}}})")->param,
            "tool_choice");
  EXPECT_EQ(chat("{" + tools + R"(, "tool_choice": "sometimes"})")->param, "tool_choice");
  EXPECT_EQ(chat("{" + tools + R"(, "tool_choice": "required", "response_format": {"type": "json_object"}})")
                ->param,
            "tool_choice");
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})")->param,
            "top_logprobs");
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_format": "x"})")->param,
            "reasoning_format");
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})")->param, "tools");
}

TEST(ApiTest, ModelNamesAndKeys) {
  EXPECT_TRUE(model_matches("", "alias", "models/x.gguf"));
  EXPECT_TRUE(model_matches("alias", "alias", "models/x.gguf"));
  EXPECT_TRUE(model_matches("x.gguf", "alias", "models/x.gguf"));
  EXPECT_TRUE(model_matches("models/x.gguf", "alias", "models/x.gguf"));
  EXPECT_FALSE(model_matches("gpt-4", "alias", "models/x.gguf"));
  EXPECT_TRUE(api_key_matches("Bearer k3y", "", "k3y"));
  EXPECT_TRUE(api_key_matches("", "k3y", "k3y"));
  EXPECT_FALSE(api_key_matches("Bearer k3", "", "k3y"));
  EXPECT_FALSE(api_key_matches("Bearer k3yy", "", "k3y"));
  EXPECT_FALSE(api_key_matches("k3y", "", "k3y"));
  EXPECT_FALSE(api_key_matches("", "", "k3y"));
}

TEST(ApiTest, TimingsAndUsage) {
  RequestTimings t;
  t.n_prompt = 10;
  t.n_generated = 20;
  t.prompt_ms = 5;
  t.gen_ms = 40;
  t.spec.add_round(3, 2);
  t.spec.add_round(3, 0);
  Json j = timings_json(t);
  EXPECT_EQ(j["prompt_n"], 10);
  EXPECT_DOUBLE_EQ(j["prompt_per_second"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(j["predicted_per_second"].get<double>(), 500.0);
  EXPECT_EQ(j["draft_n"], 6);
  EXPECT_EQ(j["draft_n_accepted"], 2);
  EXPECT_EQ(j["draft_rounds"], 2);
  ASSERT_EQ(j["acceptance_per_position"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["acceptance_per_position"][0].get<double>(), 0.5);
  EXPECT_EQ(usage_json(3, 4)["total_tokens"], 7);
  EXPECT_EQ(usage_json(3, 4)["prompt_tokens_details"]["cached_tokens"], 0);
  // With the prefix cache: prompt_n counts what was computed, cache_n what was reused (llama-server's
  // fields), cached_tokens (OpenAI's) the same, recomputed_tokens what was cached but behind the checkpoint.
  t.cache.enabled = true;
  t.cache.cached = 6;
  t.cache.matched = 8;
  j = timings_json(t);
  EXPECT_EQ(j["prompt_n"], 4);
  EXPECT_EQ(j["cache_n"], 6);
  const Json u = usage_json(10, 20, t.cache);
  EXPECT_EQ(u["prompt_tokens"], 10);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 6);
  EXPECT_EQ(u["prompt_tokens_details"]["recomputed_tokens"], 2);
  t.cache.next_checkpoint = 12;
  EXPECT_EQ(
      cache_summary(t),
      "prompt 10 tokens, 6 from the prefix cache (restored in 0.00 ms); 8 were cached, but the checkpoint "
      "nearest before 8 is at 6 (the next one is at 12): 2 recomputed");
  // Generated text that is not UTF-8 is replaced, never a failure.
  EXPECT_EQ(dump_json(Json{{"t", std::string("a\xff")}}), "{\"t\":\"a\xef\xbf\xbd\"}");
  EXPECT_EQ(sse_event(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
}

TEST(ApiTest, MetricsTextFormat) {
  Metrics m;
  m.on_response("/v1/completions", 200);
  m.on_response("/v1/completions", 400);
  StepInfo s;
  s.generating = 1;
  s.drafting = 1;
  s.drafted = 3;
  s.accepted = 2;
  s.prompt_rows = 5;
  s.seconds = 0.003;
  m.on_step(s);
  s.generating = 4;
  s.drafting = 0;
  s.seconds = 0.5;
  m.on_step(s);
  m.on_generated(7);
  RequestTimings t;
  t.spec.add_round(3, 2);
  m.on_finish("stop", t);
  RequestTimings hit;
  hit.cache.enabled = true;
  hit.cache.cached = 9;
  hit.cache.restore_ms = 2;
  m.on_finish("stop", hit);
  PrefixCacheStats cs;
  cs.lookups = 2;
  cs.tokens_hit = 9;
  cs.kv_bytes = 4096;
  cs.state_bytes = 8192;
  const std::string text = m.render(Gauges{4, 2, 1, 0, cs, std::nullopt});
  EXPECT_EQ(m.render(Gauges{4, 2, 1, 0, std::nullopt, std::nullopt}).find("mtp_prefix_cache_lookups_total"),
            std::string::npos);
  const std::regex sample(R"(^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9.e+-]+$)");
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
  }
  for (const char* want : {"mtp_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1",
                           "mtp_prompt_tokens_total 10",
                           "mtp_generated_tokens_total 7",
                           "mtp_draft_tokens_total 6",
                           "mtp_draft_accepted_tokens_total 4",
                           "mtp_verify_rounds_total 1",
                           "mtp_draft_accepted_at_position_total{position=\"2\"} 1",
                           "mtp_slots_busy 2",
                           "mtp_queue_length 1",
                           "mtp_steps_total{generating=\"4\"} 1",
                           "mtp_steps_drafting_slots_total{generating=\"1\"} 1",
                           "mtp_steps_drafting_slots_total{generating=\"4\"} 0",
                           "mtp_step_seconds_bucket{le=\"0.005\"} 1",
                           "mtp_step_seconds_bucket{le=\"+Inf\"} 2",
                           "mtp_step_seconds_count 2",
                           "mtp_requests_finished_total{reason=\"stop\"} 2",
                           "mtp_prompt_tokens_cached_total 9",
                           "mtp_prefix_cache_lookups_total 2",
                           "mtp_prefix_cache_tokens_hit_total 9",
                           "mtp_prefix_cache_bytes{kind=\"kv\"} 4096",
                           "mtp_prefix_cache_bytes{kind=\"recurrent\"} 8192",
                           "mtp_prefix_cache_restores_total 1",
                           "mtp_prefix_cache_restore_seconds_total 0.002"}) {
    EXPECT_NE(text.find(std::string(want) + "\n"), std::string::npos) << want << "\n" << text;
  }
}

}  // namespace
}  // namespace mtp::server
