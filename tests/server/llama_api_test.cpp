// llama-server's native API on `mtp serve`: POST /completion, GET /slots and llama-server's
// names in /props, over the real engine on tests/data/example.gguf (the server runs as a child process), and
// the native request parser without HTTP.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "http_client.h"
#include "server/api.h"
#include "server_process.h"

namespace mtp::testing {
namespace {

using server::Json;

constexpr int kSlots = 2;
constexpr int kCtx = 256;

// One server for the tests that do not need their own.
class LlamaApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ =
        std::make_unique<ServerProcess>("-m tests/data/example.gguf -t 2 --spec mtp --draft-max 2 -np " +
                                        std::to_string(kSlots) + " -c " + std::to_string(kCtx));
  }
  static void TearDownTestSuite() { server_.reset(); }
  static int port() { return server_->port(); }

  static Json post(const std::string& path, const Json& body, int expect_status = 200) {
    HttpResponse r = http_post(port(), path, body.dump());
    EXPECT_EQ(r.status, expect_status) << path << " " << body.dump() << " -> " << r.body;
    return Json::parse(r.body, nullptr, false);
  }
  // The prompt's ids as the server tokenizes it for a completion.
  static std::vector<int32_t> tokenize(const std::string& text) {
    return post("/tokenize", Json{{"content", text}})["tokens"].get<std::vector<int32_t>>();
  }
  // Every event of a /completion stream, parsed.
  static std::vector<Json> stream_events(const Json& body) {
    Json b = body;
    b["stream"] = true;
    HttpResponse r = http_post(port(), "/completion", b.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("content-type").rfind("text/event-stream", 0), 0u);
    std::vector<Json> events;
    for (const std::string& d : sse_data(r.body)) {
      EXPECT_NE(d, "[DONE]") << "llama-server's /completion stream has no [DONE]";
      events.push_back(Json::parse(d, nullptr, false));
    }
    return events;
  }

  static std::unique_ptr<ServerProcess> server_;
};

std::unique_ptr<ServerProcess> LlamaApiTest::server_;

Json greedy(Json prompt, int n_predict) {
  return Json{{"prompt", std::move(prompt)},
              {"n_predict", n_predict},
              {"temperature", 0},
              {"ignore_eos", true},
              {"return_tokens", true}};
}

TEST_F(LlamaApiTest, CompletionResponseShape) {
  const Json r = post("/completion", greedy("The model", 12));
  ASSERT_TRUE(r.is_object());
  const std::string content = r["content"];
  EXPECT_FALSE(content.empty());
  EXPECT_EQ(r["tokens"].size(), 12u);
  EXPECT_EQ(r["stop"], true);
  EXPECT_EQ(r["stop_type"], "limit");
  EXPECT_EQ(r["stopping_word"], "");
  EXPECT_EQ(r["tokens_predicted"], 12);
  EXPECT_EQ(r["tokens_evaluated"], tokenize("The model").size());
  EXPECT_EQ(r["truncated"], false);
  EXPECT_EQ(r["id_slot"], -1);
  EXPECT_EQ(r["generation_settings"]["n_ctx"], kCtx);
  EXPECT_EQ(r["generation_settings"]["n_predict"], 12);
  EXPECT_EQ(r["generation_settings"]["temperature"], 0.0);
  EXPECT_EQ(r["generation_settings"]["top_k"], 40);
  const Json& t = r["timings"];
  EXPECT_EQ(t["predicted_n"], 12);
  for (const char* k :
       {"prompt_n", "prompt_ms", "predicted_ms", "predicted_per_second", "draft_n", "draft_n_accepted"})
    EXPECT_TRUE(t.contains(k)) << k;
  EXPECT_GT(t["draft_n"].get<int64_t>(), 0);  // the server drafts with --spec mtp
  // The same request through the OpenAI endpoint gives the same text: one generation path.
  Json openai = greedy("The model", 12);
  openai.erase("return_tokens");
  EXPECT_EQ(post("/v1/completions", openai)["choices"][0]["text"], content);
  // The ids are those of the text.
  EXPECT_EQ(post("/detokenize", Json{{"tokens", r["tokens"]}})["content"], content);
  // Without return_tokens, tokens is empty.
  Json no_tokens = greedy("The model", 4);
  no_tokens.erase("return_tokens");
  EXPECT_EQ(post("/completion", no_tokens)["tokens"], Json::array());
}

TEST_F(LlamaApiTest, TokenIdsPromptEqualsTextPrompt) {
  const Json text = post("/completion", greedy("Once upon a time", 16));
  const Json ids = post("/completion", greedy(tokenize("Once upon a time"), 16));
  EXPECT_EQ(ids["tokens_evaluated"], text["tokens_evaluated"]);
  EXPECT_EQ(ids["tokens"], text["tokens"]);
  EXPECT_EQ(ids["content"], text["content"]);
  EXPECT_EQ(ids["tokens"].size(), 16u);
}

TEST_F(LlamaApiTest, StreamCarriesContentTokensAndAFinalStopEvent) {
  const Json whole = post("/completion", greedy("The model", 12));
  const std::vector<Json> events = stream_events(greedy("The model", 12));
  ASSERT_GE(events.size(), 2u);
  std::string content;
  Json tokens = Json::array();
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_TRUE(events[i].is_object());
    EXPECT_EQ(events[i]["stop"], false);
    content += events[i]["content"].get<std::string>();
    for (const Json& id : events[i]["tokens"]) tokens.push_back(id);
  }
  const Json& last = events.back();
  EXPECT_EQ(last["stop"], true);
  EXPECT_EQ(last["stop_type"], "limit");
  EXPECT_EQ(last["tokens_predicted"], 12);
  EXPECT_EQ(last["timings"]["predicted_n"], 12);
  content += last["content"].get<std::string>();
  EXPECT_EQ(content, whole["content"]);
  EXPECT_EQ(tokens, whole["tokens"]);
}

TEST_F(LlamaApiTest, StopWordAndUnlimitedPredict) {
  const std::string text = post("/completion", greedy("The model", 20))["content"];
  ASSERT_GE(text.size(), 6u);
  const std::string stop = text.substr(text.size() / 2, 3);
  Json body = greedy("The model", 20);
  body["stop"] = Json::array({stop});
  const Json r = post("/completion", body);
  EXPECT_EQ(r["stop_type"], "word");
  EXPECT_EQ(r["stopping_word"], stop);
  EXPECT_EQ(r["content"], text.substr(0, text.find(stop)));
  EXPECT_LT(r["tokens_predicted"].get<int64_t>(), 20);
  const std::vector<Json> events = stream_events(body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["stop_type"], "word");
  EXPECT_EQ(events.back()["stopping_word"], stop);

  // n_predict -1: until an end token or the context is full (then "limit", and truncated).
  Json unlimited = greedy("The model", -1);
  const Json u = post("/completion", unlimited);
  const int64_t total = u["tokens_evaluated"].get<int64_t>() + u["tokens_predicted"].get<int64_t>();
  if (u["stop_type"] == "limit") {
    EXPECT_EQ(total, kCtx);
    EXPECT_EQ(u["truncated"], true);
  } else {
    EXPECT_EQ(u["stop_type"], "eos");
    EXPECT_LT(total, kCtx);
  }
}

TEST_F(LlamaApiTest, SlotsAndProps) {
  post("/completion", greedy("The model", 6));
  const Json slots = Json::parse(http_get(port(), "/slots").body);
  ASSERT_TRUE(slots.is_array());
  ASSERT_EQ(slots.size(), static_cast<size_t>(kSlots));
  int with_last = 0;
  for (int k = 0; k < kSlots; ++k) {
    const Json& s = slots[static_cast<size_t>(k)];
    EXPECT_EQ(s["id"], k);
    EXPECT_EQ(s["n_ctx"], kCtx);
    EXPECT_EQ(s["is_processing"], false);
    EXPECT_EQ(s["id_task"], -1);
    EXPECT_TRUE(s["next_token"].contains("n_decoded"));
    if (!s["last_request"].is_null()) {
      ++with_last;
      EXPECT_GT(s["last_request"]["n_decoded"].get<int64_t>(), 0);
      EXPECT_TRUE(s["last_request"]["timings"].contains("draft_n_accepted"));
    }
  }
  EXPECT_GE(with_last, 1);

  const Json props = Json::parse(http_get(port(), "/props").body);
  EXPECT_EQ(props["total_slots"], kSlots);
  EXPECT_EQ(props["model_path"], "tests/data/example.gguf");
  EXPECT_TRUE(props["chat_template"].is_string());
  EXPECT_TRUE(props["build_info"].is_string());
  const Json& g = props["default_generation_settings"];
  EXPECT_EQ(g["n_ctx"], kCtx);
  EXPECT_EQ(g["speculative"], true);
  EXPECT_EQ(g["params"]["n_predict"], -1);
  EXPECT_EQ(g["params"]["speculative.n_max"], 2);
  EXPECT_NEAR(g["params"]["temperature"].get<double>(), 0.8, 1e-6);
  EXPECT_NEAR(g["temperature"].get<double>(), 0.8, 1e-6);  // our own field stays
}

TEST_F(LlamaApiTest, BadInputIsA400WithOneLine) {
  auto expect_400 = [&](const std::string& body, const std::string& needle) {
    HttpResponse r = http_post(port(), "/completion", body);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.body;
    const Json j = Json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    const std::string message = j["error"]["message"];
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << body << " -> " << message;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  };
  expect_400("{\"prompt\": \"a\",,}", "not valid JSON");
  expect_400("[1]", "JSON object");
  expect_400(R"({"prompt": 42})", "'prompt' must be a string or an array of token ids");
  expect_400(R"({"prompt": {"text": "a"}})", "'prompt' must be");
  expect_400(R"({"prompt": [1, 999999]})", "'prompt[1]' = 999999 is not a token id");
  expect_400(R"({"prompt": [1, -3]})", "token id");
  expect_400(Json{{"prompt", std::vector<int32_t>(kCtx + 10, 1)}}.dump(), "the context holds");
  expect_400(R"({"prompt": "a", "n_predict": -2})", "'n_predict' must be -1");
  expect_400(R"({"prompt": "a", "n_predict": 0})", "'n_predict' must be -1");
  expect_400(R"({"prompt": "a", "n_predict": 100000})", "'n_predict' is 100000");
  expect_400(R"({"prompt": "a", "id_slot": 2})", "'id_slot' must be -1 (any slot) or a slot id from 0 to 1");
  expect_400(R"({"prompt": "a", "id_slot": -2})", "'id_slot'");
  expect_400(R"({"prompt": "a", "return_tokens": "yes"})", "'return_tokens' must be a boolean");
  expect_400(R"({"prompt": "a", "n_probs": 1000})", "'n_probs'");
  // A slot in range is accepted (and, as documented, not pinned), and echoed.
  EXPECT_EQ(post("/completion", Json{{"prompt", "a"}, {"n_predict", 2}, {"id_slot", 1}})["id_slot"], 1);
  // The server is still up.
  EXPECT_EQ(http_get(port(), "/health").status, 200);
}

TEST_F(LlamaApiTest, ProbabilitiesWithNProbs) {
  Json body = greedy("The model", 3);
  body["n_probs"] = 2;
  const Json r = post("/completion", body);
  ASSERT_EQ(r["completion_probabilities"].size(), 3u);
  const Json& first = r["completion_probabilities"][0];
  EXPECT_EQ(first["id"], r["tokens"][0]);
  EXPECT_EQ(first["top_logprobs"].size(), 2u);
  EXPECT_TRUE(first["top_logprobs"][0].contains("id"));
  EXPECT_LE(first["logprob"].get<double>(), 0.0);
}

// The one slot /slots shows processing while `body` (a streamed /completion) runs. The bundled model decodes
// thousands of tokens a second, so on a loaded machine an 8000-token request can end before /slots is asked:
// such an attempt proves nothing and is repeated (a few times at most); /slots must show the request in
// every attempt where it is still running.
Json running_slot(int port, const Json& body) {
  // A request whose client went away ends at the engine's next step: none left from an earlier call.
  auto any_processing = [port] {
    for (const Json& s : Json::parse(http_get(port, "/slots").body))
      if (s["is_processing"].get<bool>()) return true;
    return false;
  };
  for (int i = 0; i < 500 && any_processing(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  Json slots;
  for (int attempt = 0; attempt < 5; ++attempt) {
    HttpConnection c(port);
    c.send("POST", "/completion", body.dump());
    EXPECT_EQ(c.read_head().status, 200);
    EXPECT_FALSE(c.read_body_piece().empty());
    slots = Json::parse(http_get(port, "/slots").body);
    EXPECT_EQ(slots.size(), 3u);
    bool any = false;
    for (const Json& s : slots) any = any || s["is_processing"].get<bool>();
    if (any) break;
    // Not shown: only acceptable if the request had already finished, i.e. its stream ends with its result.
    const std::string rest = c.read_body();
    EXPECT_NE(rest.find("\"stop\":true"), std::string::npos) << "a running request is missing from /slots";
  }
  Json running;
  int processing = 0;
  for (const Json& s : slots) {
    if (!s["is_processing"].get<bool>()) continue;
    ++processing;
    running = s;
  }
  EXPECT_EQ(processing, 1) << slots.dump();
  return running;
}

// A running request shows in /slots: processing, its prompt, tokens decoded so far, what it may still
// decode, and that it drafts. Without n_predict it may decode until the context is full: n_remain -1, as
// llama-server shows it, and the engine is given no length (so the drafting policy does not take the
// context's end for the request's).
TEST(LlamaApiSlotsTest, RunningRequestShows) {
  ServerProcess srv("-m tests/data/example.gguf -t 2 -np 3 -c 8192 --spec mtp");
  const Json limited =
      Json{{"prompt", "The model"}, {"n_predict", 8000}, {"ignore_eos", true}, {"stream", true}};
  Json unlimited = limited;
  unlimited.erase("n_predict");
  for (const Json& body : {limited, unlimited}) {
    const Json s = running_slot(srv.port(), body);
    ASSERT_TRUE(s.is_object());
    EXPECT_GE(s["id_task"].get<int64_t>(), 0);
    EXPECT_GT(s["n_prompt_tokens"].get<int64_t>(), 0);
    EXPECT_GE(s["next_token"]["n_decoded"].get<int64_t>(), 1);
    if (body.contains("n_predict"))
      EXPECT_GT(s["next_token"]["n_remain"].get<int64_t>(), 0);
    else
      EXPECT_EQ(s["next_token"]["n_remain"].get<int64_t>(), -1);
    EXPECT_EQ(s["speculative"], true);
    EXPECT_EQ(s["slot_known"], true);
  }
}

}  // namespace
}  // namespace mtp::testing

namespace mtp::server {
namespace {

std::optional<ApiError> native(const std::string& body, GenerationParams* out = nullptr) {
  RequestDefaults d;
  d.n_ctx = 256;
  GenerationParams p;
  Json j;
  if (auto e = parse_json_body(body, j)) return e;
  auto e = parse_native_completion_request(j, d, /*n_slots=*/4, p);
  if (out != nullptr) *out = p;
  return e;
}

// The field a refusal names, or "(accepted)".
std::string refused_param(const std::string& body) {
  std::optional<ApiError> e = native(body);
  return e ? e->param : "(accepted)";
}

TEST(NativeApiParseTest, FieldsAndRanges) {
  GenerationParams p;
  ASSERT_FALSE(native(R"({"prompt": "a", "return_tokens": true, "id_slot": 3, "n_predict": -1})", &p));
  EXPECT_TRUE(p.return_tokens);
  EXPECT_EQ(p.id_slot, 3);
  EXPECT_EQ(p.options.max_tokens, -1);
  EXPECT_TRUE(p.options.cache_prompt);  // llama-server's default
  ASSERT_FALSE(native(R"({"prompt": [1, 2], "cache_prompt": false, "n_predict": 7})", &p));
  EXPECT_TRUE(p.prompt_is_tokens);
  EXPECT_FALSE(p.options.cache_prompt);
  EXPECT_EQ(p.options.max_tokens, 7);
  EXPECT_FALSE(p.return_tokens);
  EXPECT_EQ(p.id_slot, -1);
  EXPECT_EQ(refused_param(R"({"prompt": "a", "id_slot": 4})"), "id_slot");
  EXPECT_EQ(refused_param(R"({"prompt": "a", "id_slot": 1.5})"), "id_slot");
  EXPECT_EQ(refused_param(R"({"prompt": "a", "n_predict": -5})"), "n_predict");
  EXPECT_EQ(refused_param(R"({"prompt": "a", "n_predict": 0})"), "n_predict");
  EXPECT_EQ(refused_param(R"({"prompt": true})"), "prompt");
  EXPECT_EQ(refused_param(R"({})"), "prompt");
}

}  // namespace
}  // namespace mtp::server
