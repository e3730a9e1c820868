// The HTTP server over real loopback HTTP, in-process, with a scripted backend: exact replies (tool calls,
// reasoning, stop strings), SSE framing, bad input, the queue bound, disconnects and shutdown. The model's
// tokenizer (tests/data/example.gguf) turns the scripted replies into tokens.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "http_client.h"
#include "model/model.h"
#include "scripted_backend.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/server.h"

namespace mtp::testing {
namespace {

using server::Json;

const Tokenizer& tokenizer() {
  static Tokenizer* tok = [] {
    auto model = Model::load(std::string(MTP_SOURCE_DIR) + "/tests/data/example.gguf");
    if (!model.ok()) throw std::runtime_error(model.status().message());
    auto t = Tokenizer::create(model->vocab());
    if (!t.ok()) throw std::runtime_error(t.status().message());
    return new Tokenizer(std::move(t).value());
  }();
  return *tok;
}

std::vector<int32_t> encode(const std::string& text) {
  EncodeOptions e;
  e.parse_special = false;
  return tokenizer().encode(text, e);
}

class HttpTest : public ::testing::Test {
 protected:
  void start(server::ServerConfig cfg = {}, int32_t n_slots = 2) {
    cfg.port = 0;
    cfg.model_path = "tests/data/example.gguf";
    cfg.alias = "example";
    cfg.defaults.sampling.temperature = 0;
    backend_ = std::make_unique<ScriptedBackend>(n_slots, [this](const std::vector<int32_t>&) {
      std::lock_guard<std::mutex> lock(mu_);
      return encode(reply_);
    });
    server_ = std::make_unique<server::Server>(cfg, *backend_, tokenizer(), tmpl_);
    ASSERT_TRUE(server_->start().ok());
    port_ = server_->port();
  }
  void set_reply(std::string r) {
    std::lock_guard<std::mutex> lock(mu_);
    reply_ = std::move(r);
  }
  void TearDown() override {
    if (backend_) backend_->hold_steps(false);  // a test that failed while holding must not hang shutdown
    if (server_) server_->shutdown();
  }
  static Json json(const std::string& s) { return Json::parse(s); }
  // The JSON chunks of an SSE body, checking the framing: only data events, ending with [DONE].
  static std::vector<Json> chunks(const std::string& body) {
    std::vector<std::string> data = sse_data(body);
    EXPECT_FALSE(data.empty());
    EXPECT_EQ(data.back(), "[DONE]");
    std::vector<Json> out;
    for (size_t i = 0; i + 1 < data.size(); ++i) out.push_back(Json::parse(data[i]));
    return out;
  }
  int active_slots() { return json(http_get(port_, "/health").body)["slots_processing"].get<int>(); }
  bool wait_for(const std::function<bool()>& cond, double seconds = 10) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return cond();
  }

  chat::ChatTemplate tmpl_ = chat::ChatTemplate::chatml();
  std::unique_ptr<ScriptedBackend> backend_;
  std::unique_ptr<server::Server> server_;
  int port_ = 0;
  std::mutex mu_;
  std::string reply_ = "Hello world, this is a reply.";
};

const std::string kToolReply =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, "
    "2]}}\n</tool_call>";
const std::string kTools =
    R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

TEST_F(HttpTest, CompletionWithUsageAndTimings) {
  start();
  HttpResponse r = http_post(port_, "/v1/completions", R"({"prompt": "The model", "model": "example"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.header("content-type").find("application/json"), std::string::npos);
  Json j = json(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "example");
  EXPECT_EQ(j["choices"][0]["text"], reply_);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int64_t>(tokenizer().encode("The model").size()));
  EXPECT_EQ(j["usage"]["completion_tokens"], static_cast<int64_t>(encode(reply_).size()));
  EXPECT_EQ(j["usage"]["total_tokens"],
            j["usage"]["prompt_tokens"].get<int64_t>() + j["usage"]["completion_tokens"].get<int64_t>());
  EXPECT_EQ(j["timings"]["predicted_n"], j["usage"]["completion_tokens"]);
  for (const char* k : {"prompt_ms", "predicted_ms", "prompt_per_second", "predicted_per_second", "draft_n",
                        "draft_n_accepted", "acceptance_per_position"})
    EXPECT_TRUE(j["timings"].contains(k)) << k;
  // max_tokens cuts it: finish_reason length.
  r = http_post(port_, "/v1/completions", R"({"prompt": "The model", "max_tokens": 3})");
  j = json(r.body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  const std::vector<int32_t> ids = encode(reply_);
  EXPECT_EQ(j["choices"][0]["text"], tokenizer().decode(std::vector<int32_t>(ids.begin(), ids.begin() + 3)));
}

TEST_F(HttpTest, CompletionStreamFraming) {
  start();
  HttpResponse r =
      http_post(port_, "/v1/completions",
                R"({"prompt": "The model", "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.chunked);
  EXPECT_NE(r.header("content-type").find("text/event-stream"), std::string::npos);
  std::vector<Json> cs = chunks(r.body);
  ASSERT_GE(cs.size(), 3u);
  std::string text;
  for (size_t i = 0; i + 2 < cs.size(); ++i) {
    EXPECT_EQ(cs[i]["object"], "text_completion");
    EXPECT_TRUE(cs[i]["choices"][0]["finish_reason"].is_null());
    text += cs[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, reply_);
  const Json& last = cs[cs.size() - 2];
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["usage"]["completion_tokens"], static_cast<int64_t>(encode(reply_).size()));
  EXPECT_TRUE(last.contains("timings"));
  EXPECT_TRUE(cs.back()["choices"].empty());  // include_usage
  EXPECT_EQ(cs.back()["usage"], last["usage"]);
  // Every chunk of one response has the same id.
  for (const Json& c : cs) EXPECT_EQ(c["id"], cs[0]["id"]);
}

TEST_F(HttpTest, ChatStreamAndNot) {
  start();
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}]})";
  Json j = json(http_post(port_, "/v1/chat/completions", body).body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], reply_);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const std::string prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int64_t>(tokenizer().encode(prompt).size()));

  HttpResponse r = http_post(port_, "/v1/chat/completions",
                             R"({"stream": true, "messages": [{"role": "user", "content": "hi"}]})");
  std::vector<Json> cs = chunks(r.body);
  ASSERT_GE(cs.size(), 2u);
  EXPECT_EQ(cs[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const Json& c : cs) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    const Json& d = c["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
  }
  EXPECT_EQ(text, reply_);
  EXPECT_EQ(cs.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(cs.back()["usage"], j["usage"]);
}

TEST_F(HttpTest, ToolCallsParsed) {
  start();
  set_reply(kToolReply);
  const std::string body =
      R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": )" + kTools + "}";
  Json j = json(http_post(port_, "/v1/chat/completions", body).body);
  const Json& msg = j["choices"][0]["message"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(msg["content"].is_null()) << msg.dump();
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << msg.dump();
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris", "days": [1, 2]})"));

  // Streaming: one tool_calls delta with index, id and name; no markup in any content delta.
  std::string sbody = body;
  sbody.insert(1, "\"stream\": true, ");
  std::vector<Json> cs = chunks(http_post(port_, "/v1/chat/completions", sbody).body);
  int calls = 0;
  for (const Json& c : cs) {
    const Json& d = c["choices"][0]["delta"];
    if (d.contains("content")) {
      EXPECT_EQ(d["content"].get<std::string>().find("<tool_call>"), std::string::npos);
    }
    if (!d.contains("tool_calls")) continue;
    for (const Json& t : d["tool_calls"]) {
      EXPECT_EQ(t["index"], calls);
      EXPECT_FALSE(t["id"].get<std::string>().empty());
      EXPECT_EQ(t["function"]["name"], "get_weather");
      ++calls;
    }
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cs.back()["choices"][0]["finish_reason"], "tool_calls");

  // Qwen3.5/3.6's XML form, two calls in one reply.
  set_reply(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</"
      "tool_call>\n"
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>");
  j = json(http_post(port_, "/v1/chat/completions", body).body);
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 2u) << j.dump();
  EXPECT_EQ(
      Json::parse(j["choices"][0]["message"]["tool_calls"][1]["function"]["arguments"].get<std::string>()),
      Json::parse(R"({"city": "Rome"})"));
  set_reply(kToolReply);

  // Without tools in the request the same text is plain content; a malformed call stays content too.
  j = json(
      http_post(port_, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}]})").body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], kToolReply);
  set_reply("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {broken\n</tool_call>");
  j = json(http_post(port_, "/v1/chat/completions", body).body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_NE(j["choices"][0]["message"]["content"].get<std::string>().find("broken"), std::string::npos);
}

TEST_F(HttpTest, ReasoningContent) {
  start();
  set_reply("<think>\nLet me think.\n</think>\n\nThe answer.");
  const std::string body = R"({"messages": [{"role": "user", "content": "q"}]})";
  Json j = json(http_post(port_, "/v1/chat/completions", body).body);
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "The answer.");
  std::vector<Json> cs =
      chunks(http_post(port_, "/v1/chat/completions",
                       R"({"stream": true, "messages": [{"role": "user", "content": "q"}]})")
                 .body);
  std::string reasoning, content;
  for (const Json& c : cs) {
    const Json& d = c["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, "Let me think.");
  EXPECT_EQ(content, "The answer.");
  j = json(http_post(port_, "/v1/chat/completions",
                     R"({"reasoning_format": "none", "messages": [{"role": "user", "content": "q"}]})")
               .body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "<think>\nLet me think.\n</think>\n\nThe answer.");
}

TEST_F(HttpTest, StopStrings) {
  start();
  set_reply("one two three four five");
  Json j = json(http_post(port_, "/v1/completions", R"({"prompt": "a", "stop": ["three", "zzz"]})").body);
  EXPECT_EQ(j["choices"][0]["text"], "one two ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(wait_for([&] { return backend_->cancels.load() == 1; }));  // the slot was freed at once
  // Streaming never shows a prefix of the stop string.
  std::vector<Json> cs =
      chunks(http_post(port_, "/v1/completions", R"({"prompt": "a", "stop": "ee f", "stream": true})").body);
  std::string text;
  for (const Json& c : cs) text += c["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "one two thr");
  // A stop string that never completes: everything, held-back prefix included, is released at the end.
  set_reply("one two thr");
  j = json(http_post(port_, "/v1/completions", R"({"prompt": "a", "stop": "three"})").body);
  EXPECT_EQ(j["choices"][0]["text"], "one two thr");
}

TEST_F(HttpTest, Logprobs) {
  start();
  set_reply("abc def");
  const size_t n = encode("abc def").size();
  Json j = json(http_post(port_, "/v1/completions", R"({"prompt": "a", "logprobs": 2})").body);
  const Json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), n);
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  std::string joined;
  for (const Json& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, "abc def");
  j = json(
      http_post(port_, "/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": "q"}], "logprobs": true, "top_logprobs": 3})")
          .body);
  const Json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), n);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 3u);
  EXPECT_TRUE(content[0].contains("bytes"));
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
}

TEST_F(HttpTest, ApplyTemplateModelsProps) {
  server::ServerConfig cfg;
  cfg.props = Json{{"speculative", Json{{"type", "none"}}}};
  start(cfg);
  HttpResponse r = http_post(port_, "/apply-template",
                             R"({"messages": [{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "hi"}]})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(
      json(r.body)["prompt"],
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  r = http_post(port_, "/apply-template",
                R"({"messages": [{"role": "user", "content": "x"}], "tools": )" + kTools + "}");
  EXPECT_NE(json(r.body)["prompt"].get<std::string>().find("get_weather"), std::string::npos);
  r = http_post(port_, "/apply-template", R"({"messages": [{"content": "x"}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(json(r.body)["error"]["message"].get<std::string>().find("role"), std::string::npos);
  Json models = json(http_get(port_, "/v1/models").body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "example");
  Json props = json(http_get(port_, "/props").body);
  EXPECT_EQ(props["speculative"]["type"], "none");
  EXPECT_EQ(props["total_slots"], 2);
  Json toks = json(http_post(port_, "/tokenize", R"({"content": "hello world"})").body);
  EXPECT_EQ(json(http_post(port_, "/detokenize", Json{{"tokens", toks["tokens"]}}.dump()).body)["content"],
            "hello world");
}

// Every bad request gets the right status and an OpenAI-shaped error naming the problem, and none of them
// disturbs the server.
TEST_F(HttpTest, BadInput) {
  server::ServerConfig cfg;
  cfg.max_body_bytes = 4096;
  cfg.defaults.n_ctx = 64;
  start(cfg);
  struct Case {
    std::string path, body;
    int status;
    std::string needle;
  };
  const std::string long_prompt(2000, 'x');
  const std::vector<Case> cases = {
      {"/v1/completions", "{\"prompt\": \"a\",", 400, "not valid JSON"},
      {"/v1/completions", "[]", 400, "JSON object"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": "5"})", 400, "'max_tokens' must be an integer"},
      {"/v1/completions", R"({"prompt": "a", "temperature": true})", 400, "'temperature' must be a number"},
      {"/v1/completions", R"({"prompt": "a", "model": "gpt-4"})", 404, "'gpt-4' does not exist"},
      {"/v1/completions", R"({"prompt": ""})", 400, "'prompt' is empty"},
      {"/v1/completions", R"({"prompt": " "})", 200, ""},
      {"/v1/completions", "{\"prompt\": \"" + long_prompt + "\"}", 400, "the context holds 64"},
      {"/v1/completions", R"({"prompt": "hello", "max_tokens": 63})", 400, "exceeds the context"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 0})", 400, "must be at least 1, got 0"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 1000000})", 400, "the context holds 64 tokens"},
      {"/v1/completions", R"({"prompt": [1, 600]})", 400, "is not a token id"},
      {"/v1/completions", "{\"prompt\": \"" + std::string(5000, 'y') + "\"}", 413, "larger than the limit"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "'messages' must not be empty"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 5}]})", 400, "content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "n": 3})", 400, "'n'"},
      {"/v1/nothing", "{}", 404, "no endpoint POST /v1/nothing"},
  };
  for (const Case& c : cases) {
    HttpResponse r = http_post(port_, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.body.substr(0, 80) << " -> " << r.body;
    if (c.status == 200) continue;
    Json j = Json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    EXPECT_TRUE(j["error"]["type"].is_string());
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.needle), std::string::npos)
        << c.body.substr(0, 80) << " -> " << j["error"]["message"];
  }
  EXPECT_EQ(http_get(port_, "/v1/completions").status, 404);
  // The server is fine afterwards.
  EXPECT_EQ(json(http_post(port_, "/v1/completions", R"({"prompt": "a", "max_tokens": 2})")
                     .body)["usage"]["completion_tokens"],
            2);
  EXPECT_EQ(active_slots(), 0);
}

TEST_F(HttpTest, ApiKey) {
  server::ServerConfig cfg;
  cfg.api_key = "s3cret";
  start(cfg);
  const std::string body = R"({"prompt": "a", "max_tokens": 1})";
  HttpResponse r = http_post(port_, "/v1/completions", body);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json(r.body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(http_post(port_, "/v1/completions", body, {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(http_post(port_, "/v1/completions", body, {{"Authorization", "Bearer s3cret"}}).status, 200);
  EXPECT_EQ(http_post(port_, "/v1/completions", body, {{"X-Api-Key", "s3cret"}}).status, 200);
  EXPECT_EQ(http_get(port_, "/metrics").status, 401);
  EXPECT_EQ(http_get(port_, "/health").status, 200);
  EXPECT_EQ(http_get(port_, "/v1/models").status, 200);
}

// Over capacity (slots busy, queue full) the answer is 503 with Retry-After, at once. The engine's steps are
// held while b waits and c arrives, so a cannot finish and the engine thread cannot take b from the queue in
// between, however slow the machine.
TEST_F(HttpTest, QueueBound) {
  server::ServerConfig cfg;
  cfg.loop.max_queue = 1;
  start(cfg, /*n_slots=*/1);
  backend_->step_delay_ms = 1;
  backend_->endless = true;
  const std::string body = R"({"prompt": "a", "stream": true})";
  HttpConnection a(port_), b(port_);
  a.send("POST", "/v1/completions", body);
  ASSERT_EQ(a.read_head().status, 200);
  ASSERT_FALSE(a.read_body_piece().empty());  // a holds the slot
  backend_->hold_steps(true);
  ASSERT_TRUE(backend_->wait_until_parked());
  b.send("POST", "/v1/completions", body);
  ASSERT_EQ(b.read_head().status, 200);  // b waits in the queue
  HttpResponse c = http_post(port_, "/v1/completions", body);
  EXPECT_EQ(c.status, 503);
  EXPECT_EQ(c.header("retry-after"), "1");
  EXPECT_EQ(json(c.body)["error"]["code"], "server_busy");
  EXPECT_EQ(backend_->submits.load(), 1);  // b never reached the engine
  a.close();
  b.close();
  backend_->hold_steps(false);
  // Both cancelled at their next write (b once it took the slot a freed).
  EXPECT_TRUE(wait_for([&] { return backend_->cancels.load() == 2 && active_slots() == 0; }));
  EXPECT_EQ(http_post(port_, "/v1/completions", R"({"prompt": "a", "max_tokens": 2})").status, 200);
  const std::string metrics = http_get(port_, "/metrics").body;
  EXPECT_NE(metrics.find("mtp_requests_total{endpoint=\"/v1/completions\",status=\"503\"} 1"),
            std::string::npos);
}

// A client that drops a stream frees its slot: the engine is told to cancel, and the next request runs. The
// reply never ends by itself, so only a cancellation frees the slot.
TEST_F(HttpTest, ClientDisconnectFreesSlot) {
  start({}, /*n_slots=*/1);
  backend_->step_delay_ms = 2;
  backend_->endless = true;
  {
    HttpConnection c(port_);
    c.send("POST", "/v1/completions", R"({"prompt": "a", "stream": true})");
    ASSERT_EQ(c.read_head().status, 200);
    const std::string first = c.read_body_piece();
    ASSERT_FALSE(first.empty());
    EXPECT_EQ(active_slots(), 1) << first;
  }  // closed mid-stream
  EXPECT_TRUE(wait_for([&] { return active_slots() == 0; }));
  EXPECT_EQ(backend_->cancels.load(), 1);
  backend_->endless = false;
  set_reply("ok");
  Json j = json(http_post(port_, "/v1/completions", R"({"prompt": "a"})").body);
  EXPECT_EQ(j["choices"][0]["text"], "ok");
  EXPECT_NE(http_get(port_, "/metrics").body.find("mtp_requests_finished_total{reason=\"cancelled\"} 1"),
            std::string::npos);
}

// llama-server's /completion over exact replies: an end token gives stop_type "eos", n_predict "limit", a
// stop string "word" (the text ends before it); a stream ends with its "stop": true event, no [DONE].
TEST_F(HttpTest, NativeCompletionStopTypes) {
  start();
  set_reply("Hello there, world");
  auto complete = [&](const Json& body) {
    HttpResponse r = http_post(port_, "/completion", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return json(r.body);
  };
  Json j = complete(Json{{"prompt", "The model"}, {"return_tokens", true}});
  EXPECT_EQ(j["content"], "Hello there, world");
  EXPECT_EQ(j["stop_type"], "eos");
  EXPECT_EQ(j["stopping_word"], "");
  EXPECT_EQ(j["tokens"], Json(encode(reply_)));
  EXPECT_EQ(j["tokens_predicted"], static_cast<int64_t>(encode(reply_).size()));
  j = complete(Json{{"prompt", "The model"}, {"n_predict", 2}});
  EXPECT_EQ(j["stop_type"], "limit");
  EXPECT_EQ(j["tokens_predicted"], 2);
  EXPECT_EQ(j["truncated"], false);
  j = complete(Json{{"prompt", "The model"}, {"stop", {", w", "zz"}}});
  EXPECT_EQ(j["stop_type"], "word");
  EXPECT_EQ(j["stopping_word"], ", w");
  EXPECT_EQ(j["content"], "Hello there");
  HttpResponse r = http_post(port_, "/completion", R"({"prompt": "The model", "stream": true})");
  std::vector<std::string> data = sse_data(r.body);
  ASSERT_FALSE(data.empty());
  std::string text;
  for (size_t i = 0; i + 1 < data.size(); ++i) text += json(data[i])["content"].get<std::string>();
  EXPECT_EQ(text, reply_);
  EXPECT_EQ(json(data.back())["stop"], true);
  EXPECT_EQ(json(data.back())["stop_type"], "eos");
}

// /slots while two requests run on a backend that never names their slots: each is shown in its own slot,
// the second where the engine would put it (the first free one), marked as assumed.
TEST_F(HttpTest, SlotsShowRunningRequests) {
  start({}, /*n_slots=*/3);
  backend_->step_delay_ms = 5;
  backend_->endless = true;  // both still running whenever /slots is read
  HttpConnection a(port_), b(port_);
  for (HttpConnection* c : {&a, &b}) {
    c->send("POST", "/completion", R"({"prompt": "a", "stream": true})");
    ASSERT_EQ(c->read_head().status, 200);
  }
  Json slots;
  auto processing = [&] {
    int n = 0;
    for (const Json& s : slots) n += s["is_processing"].get<bool>() ? 1 : 0;
    return n;
  };
  EXPECT_TRUE(wait_for([&] {
    slots = json(http_get(port_, "/slots").body);
    return processing() == 2 && slots[0]["next_token"]["n_decoded"].get<int64_t>() > 0;
  })) << slots.dump();
  ASSERT_EQ(slots.size(), 3u);
  EXPECT_TRUE(slots[0]["is_processing"].get<bool>());
  EXPECT_TRUE(slots[1]["is_processing"].get<bool>());
  EXPECT_FALSE(slots[2]["is_processing"].get<bool>());
  EXPECT_NE(slots[0]["id_task"], slots[1]["id_task"]);
  EXPECT_EQ(slots[0]["slot_known"].get<bool>() + slots[1]["slot_known"].get<bool>(), 1) << slots.dump();
  EXPECT_EQ(slots[2]["id_task"], -1);
}

// Shutdown while streaming: the stream ends with a proper error event and [DONE], new connections are
// refused, and shutdown returns within the timeout. The reply never ends by itself, so the stream cannot
// finish normally first.
TEST_F(HttpTest, ShutdownWhileStreaming) {
  server::ServerConfig cfg;
  cfg.shutdown_timeout_s = 0.2;
  start(cfg, 1);
  backend_->step_delay_ms = 2;
  backend_->endless = true;
  HttpConnection c(port_);
  c.send("POST", "/v1/completions", R"({"prompt": "a", "stream": true})");
  ASSERT_EQ(c.read_head().status, 200);
  std::string body = c.read_body_piece();
  ASSERT_FALSE(body.empty());
  const auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([&] { server_->shutdown(); });
  for (std::string piece; !(piece = c.read_body_piece()).empty();) body += piece;
  stopper.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  std::vector<std::string> data = sse_data(body);
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  Json last = Json::parse(data[data.size() - 2]);
  EXPECT_EQ(last["error"]["code"], "shutting_down") << last.dump();
  EXPECT_THROW(HttpConnection{port_}, std::runtime_error);
}

// With time to spare, shutdown lets a running stream finish normally.
TEST_F(HttpTest, ShutdownFinishesShortRequests) {
  server::ServerConfig cfg;
  cfg.shutdown_timeout_s = 30;
  start(cfg, 1);
  backend_->step_delay_ms = 5;
  set_reply("short and sweet");
  HttpConnection c(port_);
  c.send("POST", "/v1/completions", R"({"prompt": "a", "stream": true})");
  ASSERT_EQ(c.read_head().status, 200);
  std::string body = c.read_body_piece();
  std::thread stopper([&] { server_->shutdown(); });
  for (std::string piece; !(piece = c.read_body_piece()).empty();) body += piece;
  stopper.join();
  std::vector<Json> cs = chunks(body);
  EXPECT_EQ(cs.back()["choices"][0]["finish_reason"], "stop");
}

// An engine error fails the running requests with a 500, turns /health to an error, and refuses new work.
// Between cancel_all() and stop() (at shutdown, while the HTTP threads end, seconds with a client's
// keep-alive connection open) the engine thread has nothing to do and must wait, not spin: each pass of its
// loop reads the gauges once, so their count stays put while it waits.
TEST(EngineLoopShutdown, WaitsAfterCancelAll) {
  ScriptedBackend backend(2, [](const std::vector<int32_t>&) { return std::vector<int32_t>{1, 2, 3}; });
  server::Metrics metrics;
  server::EngineLoop loop(backend, tokenizer(), metrics, server::LoopOptions{});
  loop.start();
  loop.drain();
  loop.cancel_all();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the wake-up cancel_all() sent is handled
  const int64_t before = backend.gauge_reads.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_LE(backend.gauge_reads.load() - before, 1);
  loop.stop();
}

TEST_F(HttpTest, EngineFailure) {
  start({}, 1);
  backend_->fail_steps = true;
  HttpResponse r = http_post(port_, "/v1/completions", R"({"prompt": "a"})");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(json(r.body)["error"]["code"], "engine_error");
  EXPECT_NE(json(r.body)["error"]["message"].get<std::string>().find("scripted failure"), std::string::npos);
  r = http_get(port_, "/health");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(json(r.body)["status"], "error");
  r = http_post(port_, "/v1/completions", R"({"prompt": "a", "stream": true})");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(json(r.body)["error"]["code"], "engine_failed");
}

// Many clients at once against a few slots: every one gets its full reply (a load for the ASan build too).
TEST_F(HttpTest, ConcurrentClients) {
  server::ServerConfig cfg;
  start(cfg, 3);
  set_reply("concurrent reply text");
  std::vector<std::future<std::string>> results;
  for (int i = 0; i < 12; ++i) {
    results.push_back(std::async(std::launch::async, [this, i] {
      const bool stream = i % 2 == 0;
      HttpResponse r =
          http_post(port_, i % 3 == 0 ? "/v1/chat/completions" : "/v1/completions",
                    i % 3 == 0 ? Json{{"messages", Json::array({Json{{"role", "user"}, {"content", "x"}}})},
                                      {"stream", stream}}
                                     .dump()
                               : Json{{"prompt", "x"}, {"stream", stream}}.dump());
      if (r.status != 200) return std::string("status ") + std::to_string(r.status);
      if (!stream) {
        Json j = Json::parse(r.body);
        return i % 3 == 0 ? j["choices"][0]["message"]["content"].get<std::string>()
                          : j["choices"][0]["text"].get<std::string>();
      }
      std::string text;
      for (const std::string& d : sse_data(r.body)) {
        if (d == "[DONE]") break;
        Json j = Json::parse(d);
        const Json& c = j["choices"][0];
        if (c.contains("text")) text += c["text"].get<std::string>();
        if (c.contains("delta") && c["delta"].contains("content"))
          text += c["delta"]["content"].get<std::string>();
      }
      return text;
    }));
  }
  for (auto& f : results) EXPECT_EQ(f.get(), "concurrent reply text");
}

}  // namespace
}  // namespace mtp::testing
