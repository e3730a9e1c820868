// `mtp serve` as a user runs it: the built binary as a child process on an ephemeral port, the real engine
// on the bundled model (tests/data/example.gguf: tiny, structured, with an MTP head), over loopback HTTP.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "../tools/cli_util.h"
#include "gate/schema.h"
#include "http_client.h"
#include "server/api.h"
#include "server_process.h"

namespace mtp::testing {
namespace {

using server::Json;

const std::string kModel = "-m tests/data/example.gguf -t 2";

Json post_json(int port, const std::string& path, const Json& body) {
  HttpResponse r = http_post(port, path, body.dump());
  Json j = Json::parse(r.body, nullptr, false);
  if (r.status != 200) ADD_FAILURE() << path << " " << body.dump() << " -> " << r.status << " " << r.body;
  return j;
}

// The text of a streamed completion or chat completion, checking the SSE framing on the way.
std::string stream_text(const std::string& body, Json* last = nullptr) {
  std::vector<std::string> data = sse_data(body);
  EXPECT_EQ(data.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    Json j = Json::parse(data[i]);
    EXPECT_FALSE(j.contains("error")) << data[i];
    if (j["choices"].empty()) continue;
    const Json& c = j["choices"][0];
    if (c.contains("text")) text += c["text"].get<std::string>();
    if (c.contains("delta") && c["delta"].contains("content"))
      text += c["delta"]["content"].get<std::string>();
    if (last != nullptr && !c["finish_reason"].is_null()) *last = j;
  }
  return text;
}

// Value of one sample line of /metrics ("name{labels}"), 0 when absent.
// A sample's value in /metrics text, 0 when absent.
double sample_value(const std::string& text, const std::string& sample) {
  const size_t at = text.find("\n" + sample + " ");
  if (at == std::string::npos) return 0;
  return std::stod(text.substr(at + sample.size() + 2));
}

double metric(int port, const std::string& sample) {
  return sample_value(http_get(port, "/metrics").body, sample);
}

// /metrics once it shows no slot busy: a reply can reach its client just before the engine publishes the
// gauges of the step that ended it. Empty after 10 s.
std::string idle_metrics(int port) {
  for (int i = 0; i < 1000; ++i) {
    std::string text = http_get(port, "/metrics").body;
    if (text.find("\nmtp_slots_busy 0\n") != std::string::npos) return text;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "";
}

Json completion_body(int i, int max_tokens) {
  Json b = Json{{"prompt", "Request " + std::to_string(i) + " says: the model"},
                {"max_tokens", max_tokens},
                {"ignore_eos", true},
                {"temperature", 0}};
  if (i % 4 == 3) {  // some sampled with a seed: the same seed gives the same bytes, alone or under load
    b["temperature"] = 0.9;
    b["seed"] = 1000 + i;
  }
  if (i % 3 == 1) b["stream"] = true;
  return b;
}

std::string run_completion(int port, const Json& body) {
  HttpResponse r = http_post(port, "/v1/completions", body.dump());
  if (r.status != 200) return "HTTP " + std::to_string(r.status) + ": " + r.body;
  if (body.value("stream", false)) return stream_text(r.body);
  return Json::parse(r.body)["choices"][0]["text"].get<std::string>();
}

// The seed's llama-server command line (minus its GPU-only values) runs, and /props reports what is in force.
TEST(ServeTest, SeedCommandLineAndProps) {
  ServerProcess srv(
      kModel +
      " --alias Ornith -c 2048 -np 3 -b 4096 -ub 512 -ngl 99 --flash-attn on --reasoning off"
      " --reasoning-format deepseek --spec-type draft-mtp --spec-draft-ngl 99 --spec-draft-n-max 2"
      " --spec-draft-n-min 0 --spec-draft-backend-sampling --cont-batching --metrics --cache-ram 0"
      " --ctx-checkpoints 0 --spec-max-drafting-slots 1 --chat-template-kwargs {\"preserve_thinking\":true}");
  EXPECT_NE(srv.banner().find("speculative: draft-mtp, n_max 2"), std::string::npos) << srv.banner();
  Json props = Json::parse(http_get(srv.port(), "/props").body);
  EXPECT_EQ(props["speculative"]["type"], "draft-mtp");
  EXPECT_EQ(props["speculative"]["n_max"], 2);
  EXPECT_EQ(props["speculative"]["max_drafting_slots"], 1);
  EXPECT_EQ(props["speculative"]["policy"], "fixed");
  EXPECT_EQ(props["total_slots"], 3);
  EXPECT_EQ(props["n_ctx"], 2048);
  EXPECT_EQ(props["n_batch_rows_per_step"], 512);
  EXPECT_EQ(props["reasoning"], "off");
  EXPECT_EQ(props["chat_template_kwargs"], Json({{"preserve_thinking", true}}));
  EXPECT_GE(props["compatibility_notices"].size(), 5u);
  // One version and one kernel summary: `mtp --version` prints "mtp VERSION, kernels SUMMARY".
  const std::string version = run_mtp("--version").output;
  const size_t comma = version.find(", kernels ");
  ASSERT_NE(comma, std::string::npos) << version;
  EXPECT_EQ(props["build_info"], "mtp.cpp " + version.substr(4, comma - 4));
  EXPECT_EQ(props["kernels"].get<std::string>() + "\n", version.substr(comma + 10));
  EXPECT_NE(srv.banner().find(" threads, kernels " + props["kernels"].get<std::string>()), std::string::npos)
      << srv.banner();
  EXPECT_EQ(Json::parse(http_get(srv.port(), "/v1/models").body)["data"][0]["id"], "Ornith");
  EXPECT_EQ(Json::parse(http_get(srv.port(), "/health").body)["status"], "ok");
  srv.signal(SIGINT);
  EXPECT_EQ(srv.wait(30), 0);
}

// /metrics passes Prometheus' own checker (names, types, suffixes, HELP and TYPE lines), after requests that
// fill every family: drafting, the prefix cache, finished requests. `make test` installs promtool (Debian's
// prometheus package).
TEST(ServeTest, MetricsPassPromtool) {
  ServerProcess srv(kModel + " --spec mtp --draft-max 2 --spec-policy auto -np 2");
  for (int i = 0; i < 3; ++i) run_completion(srv.port(), completion_body(i, 24));
  const std::string text = http_get(srv.port(), "/metrics").body;
  ASSERT_NE(text.find("mtp_draft_head_tokens_total{head=\"full\"}"), std::string::npos) << text;
  char path[] = "/tmp/mtp-metrics-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const CommandResult r = run_command(std::string("promtool check metrics < ") + path + " 2>&1");
  unlink(path);
  ASSERT_NE(r.exit_code, 127) << "promtool not found: `make test` installs it (Debian package prometheus)";
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "") << r.output;
}

TEST(ServeTest, CompletionsAndChat) {
  ServerProcess srv(kModel + " -np 2");
  const int port = srv.port();
  // What the server holds is printed at start; the default prefix-cache budget is at most half of what was
  // available after loading (and 8 GiB).
  const Json mem = Json::parse(http_get(port, "/props").body)["memory"];
  EXPECT_GT(mem["resident_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(mem["available_bytes"].get<uint64_t>(), 0u);
  EXPECT_LE(mem["prefix_cache_budget_bytes"].get<uint64_t>(), mem["available_bytes"].get<uint64_t>() / 2);
  EXPECT_LE(mem["prefix_cache_budget_bytes"].get<uint64_t>(), uint64_t{8192} << 20);
  EXPECT_TRUE(
      std::regex_search(srv.banner(), std::regex("  memory: resident [1-9][0-9]* MiB \\(packed weights "
                                                 "[0-9]+ MiB\\), [0-9]+ MiB available after loading; "
                                                 "prefix cache up to [0-9]+ MiB\n")))
      << srv.banner();
  Json body = Json{{"prompt", "The model"}, {"max_tokens", 20}, {"temperature", 0}, {"ignore_eos", true}};
  Json whole = post_json(port, "/v1/completions", body);
  const std::string text = whole["choices"][0]["text"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["usage"]["completion_tokens"], 20);
  Json toks = post_json(port, "/tokenize", Json{{"content", "The model"}});
  EXPECT_EQ(whole["usage"]["prompt_tokens"], toks["tokens"].size());
  EXPECT_EQ(whole["timings"]["predicted_n"], 20);
  body["stream"] = true;
  Json last;
  HttpResponse r = http_post(port, "/v1/completions", body.dump());
  EXPECT_EQ(stream_text(r.body, &last), text);
  EXPECT_EQ(last["usage"]["completion_tokens"], 20);

  // A stop string from the middle of that text ends the request there (the engine is told to cancel).
  const std::string stop = text.substr(text.size() / 2, 3);
  Json stopped =
      post_json(port, "/v1/completions",
                Json{{"prompt", "The model"}, {"max_tokens", 20}, {"temperature", 0}, {"stop", stop}});
  EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(stopped["usage"]["completion_tokens"].get<int64_t>(), 20);

  Json chat = Json{{"messages", Json::array({Json{{"role", "user"}, {"content", "Hello"}}})},
                   {"max_tokens", 16},
                   {"temperature", 0}};
  Json c = post_json(port, "/v1/chat/completions", chat);
  EXPECT_EQ(c["object"], "chat.completion");
  const Json& msg = c["choices"][0]["message"];
  const int64_t n = c["usage"]["completion_tokens"];
  EXPECT_GT(n, 0);
  EXPECT_LE(n, 16);
  chat["stream"] = true;
  r = http_post(port, "/v1/chat/completions", chat.dump());
  EXPECT_EQ(stream_text(r.body, &last), msg["content"].is_null() ? "" : msg["content"].get<std::string>());
  EXPECT_EQ(last["usage"]["completion_tokens"], n);
  const std::string prompt = post_json(port, "/apply-template", chat)["prompt"];
  EXPECT_EQ(prompt, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(c["usage"]["prompt_tokens"],
            post_json(port, "/tokenize", Json{{"content", prompt}})["tokens"].size());
}

// The prefix cache as a chat client sees it: turn 2 of a conversation and a repeated prompt reuse what the
// earlier requests left (usage.prompt_tokens_details.cached_tokens, timings.cache_n), an edited last message
// resumes at its start, the replies are those of a server without the cache, and /metrics and /props say so.
TEST(ServeTest, PrefixCacheAcrossTurns) {
  auto chat = [](Json messages) {
    return Json{{"messages", std::move(messages)}, {"max_tokens", 12}, {"temperature", 0}};
  };
  auto user = [](const std::string& text) { return Json{{"role", "user"}, {"content", text}}; };
  Json turn1 = chat(Json::array({user("Hello there, model")}));
  std::vector<Json> replies[2];
  for (const char* cache : {"--cache-ram 0", "--cache-ram 64 --cache-checkpoint-min-gap 1"}) {
    ServerProcess srv(kModel + " -np 2 --spec mtp " + cache);
    const int port = srv.port();
    const bool on = std::string(cache) != "--cache-ram 0";  // every message start checkpointed
    EXPECT_NE(srv.banner().find(on ? "prefix cache: 64 MiB" : "prefix cache: off"), std::string::npos)
        << srv.banner();
    EXPECT_EQ(Json::parse(http_get(port, "/props").body)["prefix_cache"]["enabled"], on);
    std::vector<Json>& r = replies[on ? 1 : 0];
    r.push_back(post_json(port, "/v1/chat/completions", turn1));
    const int64_t p1 = r[0]["usage"]["prompt_tokens"];
    EXPECT_EQ(r[0]["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    const Json said = r[0]["choices"][0]["message"];
    Json turn2 =
        chat(Json::array({user("Hello there, model"),
                          Json{{"role", "assistant"}, {"content", said["content"]}}, user("Go on")}));
    r.push_back(post_json(port, "/v1/chat/completions", turn2));
    // The same conversation with its last message edited: it resumes where that message begins.
    Json edited = turn2;
    edited["messages"][2]["content"] = "Tell me more";
    r.push_back(post_json(port, "/v1/chat/completions", edited));
    r.push_back(post_json(port, "/v1/chat/completions", edited));  // an exact repeat
    Json no_cache = edited;
    no_cache["cache_prompt"] = false;
    r.push_back(post_json(port, "/v1/chat/completions", no_cache));
    // Idle: the KV blocks in use are the prefix cache's (none without a cache); a block held by neither
    // leaked.
    const std::string idle = idle_metrics(port);
    ASSERT_NE(idle, "") << "a slot still busy after 10 s";
    EXPECT_GT(sample_value(idle, "mtp_kv_blocks"), 0);
    EXPECT_EQ(sample_value(idle, "mtp_kv_blocks_used"),
              on ? sample_value(idle, "mtp_prefix_cache_blocks") : 0);
    if (on) {
      EXPECT_GT(sample_value(idle, "mtp_kv_blocks_used"), 0);
    }
    if (!on) {
      for (const Json& x : r) EXPECT_EQ(x["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
      continue;
    }
    EXPECT_GE(r[1]["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), p1);
    EXPECT_EQ(r[1]["timings"]["cache_n"], r[1]["usage"]["prompt_tokens_details"]["cached_tokens"]);
    Json before = edited;
    before["messages"].erase(2);
    before["add_generation_prompt"] = false;
    const std::string head = post_json(port, "/apply-template", before)["prompt"];
    const int64_t start = post_json(port, "/tokenize", Json{{"content", head}})["tokens"].size();
    EXPECT_EQ(r[2]["usage"]["prompt_tokens_details"]["cached_tokens"], start);
    EXPECT_EQ(r[3]["usage"]["prompt_tokens_details"]["cached_tokens"], r[3]["usage"]["prompt_tokens"]);
    EXPECT_EQ(r[3]["timings"]["prompt_n"], 0);
    EXPECT_EQ(r[4]["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_GT(metric(port, "mtp_prefix_cache_tokens_hit_total"), 0);
    EXPECT_GT(metric(port, "mtp_prefix_cache_checkpoints"), 0);
    EXPECT_GT(metric(port, "mtp_prompt_tokens_cached_total"), 0);
  }
  for (size_t i = 0; i < replies[0].size(); ++i)
    EXPECT_EQ(replies[1][i]["choices"][0]["message"], replies[0][i]["choices"][0]["message"])
        << "request " << i;
}

// 16 concurrent requests (greedy, and seeded sampling) give exactly the text each gives alone, with MTP off
// and on, and MTP on gives the same text as MTP off.
TEST(ServeTest, DeterministicUnderLoad) {
  constexpr int kRequests = 16;
  std::vector<std::string> reference;
  for (const char* spec : {"--spec none", "--spec mtp --draft-max 3"}) {
    ServerProcess srv(kModel + " -np 16 -c 4096 " + spec);
    const int port = srv.port();
    std::vector<std::string> alone;
    for (int i = 0; i < kRequests; ++i) alone.push_back(run_completion(port, completion_body(i, 24)));
    std::vector<std::future<std::string>> futures;
    for (int i = 0; i < kRequests; ++i)
      futures.push_back(
          std::async(std::launch::async, [port, i] { return run_completion(port, completion_body(i, 24)); }));
    for (int i = 0; i < kRequests; ++i) {
      EXPECT_EQ(futures[i].get(), alone[i]) << spec << ", request " << i;
      EXPECT_FALSE(alone[i].empty());
    }
    if (reference.empty()) {
      reference = alone;
    } else {
      for (int i = 0; i < kRequests; ++i) EXPECT_EQ(alone[i], reference[i]) << "MTP on vs off, request " << i;
      EXPECT_GT(metric(port, "mtp_draft_tokens_total"), 0);
    }
    srv.signal(SIGTERM);
    EXPECT_EQ(srv.wait(30), 0);
  }
}

// --spec-max-drafting-slots 1: a lone request drafts; four at once do not (the per-step counters by number
// of generating slots prove it), and a lone request drafts again afterwards.
TEST(ServeTest, ThrottleDraftsAtC1NotC4) {
  ServerProcess srv(kModel + " -np 4 --spec mtp --spec-max-drafting-slots 1");
  const int port = srv.port();
  auto drafting = [&](int generating) {
    return metric(port, "mtp_steps_drafting_slots_total{generating=\"" + std::to_string(generating) + "\"}");
  };
  Json body = Json{{"prompt", "The model"}, {"max_tokens", 48}, {"temperature", 0}, {"ignore_eos", true}};
  Json one = post_json(port, "/v1/completions", body);
  EXPECT_GT(one["timings"]["draft_n"].get<int64_t>(), 0);
  const double c1_drafting = drafting(1);
  EXPECT_GT(c1_drafting, 0);
  EXPECT_GT(metric(port, "mtp_draft_tokens_total"), 0);

  body["max_tokens"] = 400;
  std::vector<std::future<Json>> futures;
  for (int i = 0; i < 4; ++i) {
    Json b = body;
    b["prompt"] = "Prompt " + std::to_string(i);
    futures.push_back(
        std::async(std::launch::async, [port, b] { return post_json(port, "/v1/completions", b); }));
  }
  for (auto& f : futures) EXPECT_EQ(f.get()["usage"]["completion_tokens"], 400);
  EXPECT_GT(metric(port, "mtp_steps_total{generating=\"4\"}"), 0);  // the four did run together
  for (int g = 2; g <= 4; ++g) EXPECT_EQ(drafting(g), 0) << g << " slots generating";

  body["max_tokens"] = 48;
  post_json(port, "/v1/completions", body);
  EXPECT_GT(drafting(1), c1_drafting);
}

// "speculative": false means no drafting at all for that request, on a server that drafts by default.
TEST(ServeTest, PerRequestSpeculative) {
  ServerProcess srv(kModel + " -np 2 --spec mtp --draft-max 3");
  const int port = srv.port();
  Json body = Json{{"prompt", "The model"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
  Json off_body = body;
  off_body["speculative"] = false;
  const double before = metric(port, "mtp_draft_tokens_total");
  Json off = post_json(port, "/v1/completions", off_body);
  EXPECT_EQ(off["timings"]["draft_n"], 0);
  EXPECT_EQ(metric(port, "mtp_draft_tokens_total"), before);
  EXPECT_EQ(metric(port, "mtp_drafting_slot_steps_total"), 0);
  Json on = post_json(port, "/v1/completions", body);
  EXPECT_GT(on["timings"]["draft_n"].get<int64_t>(), 0);
  EXPECT_EQ(on["choices"][0]["text"], off["choices"][0]["text"]);
  // A smaller cap for one request: never more than one token per round.
  Json one_body = body;
  one_body["speculative"] = Json{{"n_max", 1}};
  Json one = post_json(port, "/v1/completions", one_body);
  EXPECT_GT(one["timings"]["draft_n"].get<int64_t>(), 0);
  EXPECT_EQ(one["timings"]["draft_n"], one["timings"]["draft_rounds"]);
  EXPECT_LE(one["timings"]["acceptance_per_position"].size(), 1u);
  // Run concurrently with a drafting request, the speculative:false one still drafts nothing.
  auto f = std::async(std::launch::async, [&] { return post_json(port, "/v1/completions", body); });
  Json off2 = post_json(port, "/v1/completions", off_body);
  EXPECT_EQ(off2["timings"]["draft_n"], 0);
  EXPECT_GT(f.get()["timings"]["draft_n"].get<int64_t>(), 0);
}

// What a streamed response says, whatever its chunking (drafting emits several tokens per step): the text,
// the logprobs entries in order, the finish reason and the final usage.
Json stream_summary(const std::string& body) {
  Json text = "", logprobs = Json::array(), finish = nullptr, usage = nullptr;
  for (const std::string& d : sse_data(body)) {
    if (d == "[DONE]") break;
    const Json j = Json::parse(d);
    if (j.contains("usage") && !j["usage"].is_null()) usage = j["usage"]["completion_tokens"];
    if (j["choices"].empty()) continue;
    const Json& c = j["choices"][0];
    if (c.contains("text")) text = text.get<std::string>() + c["text"].get<std::string>();
    if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
      text = text.get<std::string>() + c["delta"]["content"].get<std::string>();
    if (c.contains("logprobs") && c["logprobs"].is_object()) {
      const Json& lp = c["logprobs"];
      if (lp.contains("content"))
        for (const Json& e : lp["content"]) logprobs.push_back(e);
      if (lp.contains("tokens"))
        for (size_t i = 0; i < lp["tokens"].size(); ++i)
          logprobs.push_back(Json{{"token", lp["tokens"][i]},
                                  {"logprob", lp["token_logprobs"][i]},
                                  {"top", lp["top_logprobs"][i]}});
    }
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  return Json{
      {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish}, {"completion_tokens", usage}};
}

// Speculative decoding at the edges of a response, through the server: stop strings met at several places
// of the text (inside an accepted draft or at its end), logprobs with top candidates on both endpoints,
// streamed and not. Each request, drafted, gives byte for byte what it gives with "speculative": false: the
// choices (text, finish reason, logprobs) and the completion token count.
TEST(ServeTest, DraftingChangesNoResponseAtItsEdges) {
  ServerProcess srv(kModel + " -np 1 --spec mtp --draft-max 3");
  const int port = srv.port();
  const Json base = {{"prompt", "The model"}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string text = post_json(port, "/v1/completions", base)["choices"][0]["text"];
  ASSERT_GT(text.size(), 40u);
  std::vector<std::pair<std::string, Json>> requests;  // (endpoint, body)
  for (size_t at : {2u, 5u, 9u, 14u, 22u, 31u}) {
    Json b = base;
    b["stop"] = text.substr(at, 2);
    requests.emplace_back("/v1/completions", b);
  }
  Json lp = base;
  lp["logprobs"] = 3;
  lp["stop"] = text.substr(25, 3);
  requests.emplace_back("/v1/completions", lp);
  const Json chat = {{"messages", Json::array({Json{{"role", "user"}, {"content", "Tell me a story"}}})},
                     {"max_tokens", 32},
                     {"temperature", 0},
                     {"logprobs", true},
                     {"top_logprobs", 4}};
  requests.emplace_back("/v1/chat/completions", chat);
  int64_t drafted = 0, accepted = 0;
  for (const auto& [endpoint, body] : requests) {
    Json off = body;
    off["speculative"] = false;
    const Json plain = post_json(port, endpoint, off), spec = post_json(port, endpoint, body);
    EXPECT_EQ(plain["timings"]["draft_n"], 0);
    drafted += spec["timings"]["draft_n"].get<int64_t>();
    accepted += spec["timings"]["draft_n_accepted"].get<int64_t>();
    EXPECT_EQ(spec["choices"].dump(), plain["choices"].dump()) << endpoint << " " << body.dump();
    EXPECT_EQ(spec["usage"]["completion_tokens"], plain["usage"]["completion_tokens"]) << body.dump();
    Json off_stream = off, on_stream = body;
    off_stream["stream"] = on_stream["stream"] = true;
    off_stream["stream_options"] = on_stream["stream_options"] = Json{{"include_usage", true}};
    const Json plain_s = stream_summary(http_post(port, endpoint, off_stream.dump()).body);
    const Json spec_s = stream_summary(http_post(port, endpoint, on_stream.dump()).body);
    EXPECT_EQ(spec_s.dump(), plain_s.dump()) << endpoint << " " << body.dump();
    EXPECT_NE(plain_s["finish_reason"], nullptr);
  }
  EXPECT_GT(drafted, 0);
  EXPECT_GT(accepted, 0);  // drafts were accepted: the stop strings and logprobs met them
}

// Structured output through every request form: chat with OpenAI's response_format json_schema, completions
// with llama-server's json_schema, /completion with a GBNF grammar; streamed and not, drafting on and off,
// the same bytes, and every JSON output validates (the gate's validator, independent of the compiler).
TEST(ServeTest, StructuredOutput) {
  ServerProcess srv(kModel + " -np 2 --spec mtp --draft-max 3");
  const int port = srv.port();
  const Json schema = Json::parse(R"({"type":"object","properties":{"unit":{"enum":["celsius","fahrenheit"]},
      "ok":{"type":"boolean"},"days":{"type":"integer","minimum":1,"maximum":14},"note":{"type":"string","maxLength":10}},
      "required":["unit","ok"],"additionalProperties":false})");
  Json chat = {
      {"messages", Json::array({Json{{"role", "user"}, {"content", "Weather as JSON"}}})},
      {"max_tokens", 200},
      {"temperature", 0},
      {"response_format",
       {{"type", "json_schema"}, {"json_schema", {{"name", "w"}, {"strict", true}, {"schema", schema}}}}}};
  Json completion = {{"prompt", "The model"},
                     {"max_tokens", 200},
                     {"temperature", 0.7},
                     {"seed", 3},
                     {"json_schema", schema}};
  Json native = {{"prompt", "The model"},
                 {"n_predict", 30},
                 {"seed", 11},
                 {"grammar", "root ::= (\"yes\" | \"no\") \" \" [0-9]{3}"}};
  const std::vector<std::pair<std::string, Json>> requests = {
      {"/v1/chat/completions", chat}, {"/v1/completions", completion}, {"/completion", native}};
  for (const auto& [endpoint, body] : requests) {
    std::string texts[2];
    for (int spec = 0; spec < 2; ++spec) {
      Json b = body;
      b["speculative"] = spec == 1;
      const Json r = post_json(port, endpoint, b);
      const std::string text = endpoint == "/completion" ? r["content"].get<std::string>()
                               : endpoint == "/v1/completions"
                                   ? r["choices"][0]["text"].get<std::string>()
                                   : r["choices"][0]["message"]["content"].get<std::string>();
      b["stream"] = true;
      if (endpoint != "/completion") {
        EXPECT_EQ(stream_text(http_post(port, endpoint, b.dump()).body), text) << endpoint;
      }
      texts[spec] = text;
    }
    EXPECT_EQ(texts[0], texts[1]) << endpoint;
    if (endpoint == "/completion") {
      EXPECT_TRUE(std::regex_match(texts[0], std::regex("(yes|no) [0-9]{3}"))) << texts[0];
      continue;
    }
    const Json value = Json::parse(texts[0], nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << endpoint << ": " << texts[0];
    EXPECT_EQ(gate::schema_violation(schema, value), "") << texts[0];
  }
  Json bad = completion;
  bad["json_schema"]["properties"]["days"]["multipleOf"] = 2;
  const HttpResponse r = http_post(port, "/v1/completions", bad.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("unsupported JSON Schema keyword 'multipleOf' at #/properties/days"),
            std::string::npos)
      << r.body;
}

// The forced call of a chat reply, streamed or not: {"name", "arguments" (a string, as sent),
// "finish_reason"}.
Json forced_call(int port, const Json& body) {
  Json call = Json::object(), calls = Json::array();
  if (!body.value("stream", false)) {
    const Json r = post_json(port, "/v1/chat/completions", body);
    if (!r.contains("choices")) return r;
    const Json& c = r["choices"][0];
    for (const Json& t : c["message"].value("tool_calls", Json::array())) calls.push_back(t["function"]);
    call["finish_reason"] = c["finish_reason"];
  } else {
    std::vector<std::string> data = sse_data(http_post(port, "/v1/chat/completions", body.dump()).body);
    for (size_t i = 0; i + 1 < data.size(); ++i) {
      const Json j = Json::parse(data[i]);
      if (j["choices"].empty()) continue;
      const Json& c = j["choices"][0];
      for (const Json& t : c["delta"].value("tool_calls", Json::array())) calls.push_back(t["function"]);
      if (!c["finish_reason"].is_null()) call["finish_reason"] = c["finish_reason"];
    }
  }
  if (calls.size() == 1) call.update(calls[0]);
  return call;
}

// tool_choice "required" or a named function: the reply is a call (finish_reason "tool_calls") of one of the
// tools, or of the named one, whose arguments validate against its parameters; with and without drafting,
// streamed and not, in the Hermes JSON syntax (the bundled model's ChatML) and in Qwen3.5's XML.
TEST(ServeTest, ForcedToolCalls) {
  ServerProcess srv(kModel + " --spec mtp --draft-max 3");
  ServerProcess qwen(
      kModel + " --spec mtp --draft-max 3 --chat-template-file tests/chat/data/templates/qwen3_5.jinja");
  const Json weather = Json::parse(R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},
      "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},
      "required":["city","unit"],"additionalProperties":false})");
  const Json search = Json::parse(R"({"type":"object","properties":{"query":{"type":"string","maxLength":20},
      "limit":{"type":"integer"}},"required":["query"],"additionalProperties":false})");
  auto tool = [](const std::string& name, const Json& parameters) {
    return Json{{"type", "function"}, {"function", {{"name", name}, {"parameters", parameters}}}};
  };
  Json body = {{"messages", Json::array({Json{{"role", "user"}, {"content", "Weather in Paris?"}}})},
               {"tools", Json::array({tool("get_weather", weather), tool("search", search)})},
               {"max_tokens", 200},
               {"temperature", 0}};
  const std::vector<Json> choices = {"required",
                                     Json{{"type", "function"}, {"function", {{"name", "search"}}}},
                                     Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}};
  for (const int port : {srv.port(), qwen.port()}) {
    Json b = body;
    if (port == qwen.port()) b["chat_template_kwargs"] = {{"enable_thinking", false}};
    for (const Json& choice : choices) {
      Json first;
      for (int variant = 0; variant < 4; ++variant) {  // speculative off/on, streamed or not
        b["tool_choice"] = choice;
        b["speculative"] = variant % 2 == 1;
        b["stream"] = variant >= 2;
        const Json call = forced_call(port, b);
        const std::string where = (port == srv.port() ? "json " : "xml ") + choice.dump() + " variant " +
                                  std::to_string(variant) + ": " + call.dump();
        EXPECT_EQ(call.value("finish_reason", Json()), "tool_calls") << where;
        ASSERT_TRUE(call.contains("name") && call.contains("arguments")) << where;
        const std::string name = call["name"].get<std::string>();
        if (choice.is_object()) {
          EXPECT_EQ(name, choice["function"]["name"]) << where;
        }
        ASSERT_TRUE(name == "get_weather" || name == "search") << where;
        const Json args = Json::parse(call["arguments"].get<std::string>(), nullptr, false);
        ASSERT_TRUE(args.is_object()) << where;
        EXPECT_EQ(gate::schema_violation(name == "search" ? search : weather, args), "") << where;
        if (variant == 0) first = call;
        EXPECT_EQ(call, first) << where;
      }
    }
  }
  // Each server wrote its template's syntax.
  for (const int port : {srv.port(), qwen.port()}) {
    Json b = body;
    b["tool_choice"] = "required";
    b["return_token_sources"] = true;
    b["chat_template_kwargs"] = {{"enable_thinking", false}};
    std::string text;
    for (const Json& t : post_json(port, "/v1/chat/completions", b).value("token_sources", Json::array()))
      text += t["text"].get<std::string>();
    EXPECT_EQ(text.rfind(port == srv.port() ? "<tool_call>\n{\"name\": " : "<tool_call>\n<function=", 0), 0u)
        << text;
  }
  const int port = srv.port();
  Json bad = body;
  bad["tool_choice"] = {{"type", "function"}, {"function", {{"name", "book_flight"}}}};
  HttpResponse r = http_post(port, "/v1/chat/completions", bad.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(
      r.body.find("'tool_choice' names the function \\\"book_flight\\\", which 'tools' does not define"),
      std::string::npos)
      << r.body;
  bad = body;
  bad.erase("tools");
  bad["tool_choice"] = "required";
  r = http_post(port, "/v1/chat/completions", bad.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("needs 'tools'"), std::string::npos) << r.body;
}

// Both draft heads under the auto policy: /props and the banner say so, and a request may name the server's
// subset size (the control tokens it adds do not change the size a request names) or the full head.
TEST(ServeTest, DraftHeadsUnderAuto) {
  ServerProcess srv(kModel + " --spec mtp --draft-max 3 --spec-policy auto --draft-vocab 64");
  EXPECT_NE(srv.banner().find("draft head auto (subset of 64 ids;"), std::string::npos) << srv.banner();
  const Json props = Json::parse(http_get(srv.port(), "/props").body);
  EXPECT_EQ(props["speculative"]["draft_head"], "auto");
  EXPECT_EQ(props["speculative"]["draft_vocab"], 64);
  Json body = Json{{"prompt", "The model"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string plain = post_json(srv.port(), "/v1/completions", body)["choices"][0]["text"];
  for (int n : {64, 0}) {
    body["speculative"] = Json{{"draft_vocab", n}};
    EXPECT_EQ(post_json(srv.port(), "/v1/completions", body)["choices"][0]["text"], plain) << n;
  }
  body["speculative"] = Json{{"draft_vocab", 69}};
  EXPECT_EQ(http_post(srv.port(), "/v1/completions", body.dump()).status, 400);
}

// --log-steps: one stderr line per engine step, saying what the batch held and what was drafted; the counts
// add up to the response's own. Each server is stopped and its output read to the end, so no line can
// arrive after the check.
TEST(ServeTest, LogStepsPrintsEveryStep) {
  ServerProcess srv(kModel + " -np 2 --spec mtp --draft-max 2 --log-steps", 120, /*capture_stderr=*/true);
  Json body = Json{{"prompt", "The model"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  Json r = post_json(srv.port(), "/v1/completions", body);
  srv.signal(SIGTERM);
  const std::string out = srv.read_output_to_end(60);
  EXPECT_EQ(srv.wait(30), 0);
  int64_t steps = 0, drafted = 0, accepted = 0, generating = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("mtp: step ", 0) != 0) continue;
    ++steps;
    long long s, g, rows, prompt, d, dr, ac;
    ASSERT_EQ(std::sscanf(line.c_str(),
                          "mtp: step %lld: generating %lld, rows %lld (prompt %lld), drafting %lld, drafted "
                          "%lld, accepted %lld,",
                          &s, &g, &rows, &prompt, &d, &dr, &ac),
              7)
        << line;
    EXPECT_NE(line.find(" ms (draft "), std::string::npos) << line;
    EXPECT_GE(rows, g + prompt) << line;
    generating += g;
    drafted += dr;
    accepted += ac;
  }
  EXPECT_GT(steps, 1) << out;
  EXPECT_GT(generating, 0);
  EXPECT_EQ(drafted, r["timings"]["draft_n"].get<int64_t>()) << out;
  EXPECT_EQ(accepted, r["timings"]["draft_n_accepted"].get<int64_t>()) << out;
  // Without the flag, no step lines.
  ServerProcess quiet(kModel + " -np 1", 120, /*capture_stderr=*/true);
  post_json(quiet.port(), "/v1/completions", body);
  quiet.signal(SIGTERM);
  EXPECT_EQ(quiet.read_output_to_end(60).find("mtp: step "), std::string::npos);
  EXPECT_EQ(quiet.wait(30), 0);
}

TEST(ServeTest, BadInputAndDisconnect) {
  ServerProcess srv(kModel + " -np 1 -c 64");
  const int port = srv.port();
  HttpResponse r =
      http_post(port, "/v1/completions", Json{{"prompt", std::string(400, 'z') + " the end"}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Json::parse(r.body)["error"]["code"], "context_length_exceeded");
  r = http_post(port, "/v1/completions", Json{{"prompt", Json::array({1, 2, 512})}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("prompt[2]"), std::string::npos);
  // A role the API does not know goes to the template as it is (as llama-server does): ChatML renders it.
  const char* wizard = R"({"messages": [{"role": "wizard", "content": "x"}], "max_tokens": 2})";
  r = http_post(port, "/v1/chat/completions", wizard);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(http_post(port, "/apply-template", wizard).body.find("<|im_start|>wizard\\nx"),
            std::string::npos);
}

// A stream the client drops is cancelled: the slot is freed and the request finishes as "cancelled", not
// after the 8,000 tokens it asked for (which the tiny model takes seconds to generate: a server that did not
// cancel would finish it with reason "length").
TEST(ServeTest, DroppedStreamIsCancelled) {
  ServerProcess srv(kModel + " -np 1 -c 8192");
  const int port = srv.port();
  {
    HttpConnection c(port);
    c.send(
        "POST", "/v1/completions",
        Json{{"prompt", "The model"}, {"max_tokens", 8000}, {"ignore_eos", true}, {"stream", true}}.dump());
    ASSERT_EQ(c.read_head().status, 200);
    ASSERT_FALSE(c.read_body_piece().empty());
  }
  double cancelled = 0;
  for (int i = 0; i < 3000 && cancelled == 0; ++i) {
    cancelled = metric(port, "mtp_requests_finished_total{reason=\"cancelled\"}");
    if (cancelled == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(cancelled, 1);
  EXPECT_EQ(metric(port, "mtp_requests_finished_total{reason=\"length\"}"), 0);
  EXPECT_LT(metric(port, "mtp_generated_tokens_total"), 8000);
  EXPECT_EQ(Json::parse(http_get(port, "/health").body)["slots_processing"], 0);
  Json ok = post_json(port, "/v1/completions", Json{{"prompt", "The model"}, {"max_tokens", 4}});
  EXPECT_GE(ok["usage"]["completion_tokens"].get<int64_t>(), 1);
}

// SIGTERM while a stream runs: past --shutdown-timeout the stream ends with a shutting_down error event and
// [DONE], new connections are refused, exit 0.
TEST(ServeTest, SigtermWhileStreaming) {
  ServerProcess srv(kModel + " -np 2 -c 8192 --shutdown-timeout 0.2");
  const int port = srv.port();
  HttpConnection c(port);
  c.send("POST", "/v1/completions",
         Json{{"prompt", "The model"}, {"max_tokens", 8000}, {"ignore_eos", true}, {"stream", true}}.dump());
  ASSERT_EQ(c.read_head().status, 200);
  std::string body = c.read_body_piece();
  ASSERT_FALSE(body.empty());
  srv.signal(SIGTERM);
  for (std::string piece; !(piece = c.read_body_piece()).empty();) body += piece;
  std::vector<std::string> data = sse_data(body);
  EXPECT_EQ(data.back(), "[DONE]");
  Json last = Json::parse(data[data.size() - 2]);
  // 8000 tokens take at least 8000 steps, far past the 0.2 s the request is given: the shutdown ends it with
  // an error event, not a finish_reason.
  ASSERT_TRUE(last.contains("error")) << last.dump();
  EXPECT_EQ(last["error"]["code"], "shutting_down") << last.dump();
  EXPECT_EQ(srv.wait(30), 0);
  EXPECT_THROW(HttpConnection{port}, std::runtime_error);
}

// The seed's graft scenario served: a trunk without an MTP block drafts with a head-only file (`--head`, or
// llama-server's `-md`), and /props names it.
TEST(ServeTest, DraftsWithAHeadFile) {
  char dir_template[] = "/tmp/mtp_serve_head_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, trunk = dir + "/trunk.gguf", head = dir + "/head.gguf";
  // The bundled model's recipe without --mtp (models/README.md), and the bundled model's block on its own.
  ASSERT_EQ(run_mtp("synth --shape tiny --type q8_0 --structured 1.75 --seed 1 -o " + trunk).exit_code, 0);
  ASSERT_EQ(run_mtp("extract-head tests/data/example.gguf -o " + head).exit_code, 0);
  CommandResult r = run_mtp("serve -m " + trunk + " --spec mtp", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("MTP block"), std::string::npos) << r.output;
  r = run_mtp("serve -m /nonexistent.gguf --head " + head, true);  // a head without drafting: refused first
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--head needs --spec mtp"), std::string::npos) << r.output;
  {
    ServerProcess srv("-m " + trunk + " -t 2 -np 1 --spec-type draft-mtp -md " + head);
    Json props = Json::parse(http_get(srv.port(), "/props").body);
    EXPECT_EQ(props["speculative"]["head"], head);
    const Json body = {
        {"prompt", "The quick brown fox"}, {"max_tokens", 24}, {"ignore_eos", true}, {"temperature", 0}};
    const Json j = post_json(srv.port(), "/v1/completions", body);
    EXPECT_EQ(j["usage"]["completion_tokens"], 24);
    EXPECT_GT(metric(srv.port(), "mtp_draft_tokens_total"), 0);
    EXPECT_GT(metric(srv.port(), "mtp_draft_accepted_tokens_total"), 0);
    srv.signal(SIGTERM);
    EXPECT_EQ(srv.wait(30), 0);
  }
  std::remove(trunk.c_str());
  std::remove(head.c_str());
  rmdir(dir.c_str());
}

TEST(ServeTest, FlagErrors) {
  CommandResult r = run_mtp("serve -m tests/data/example.gguf -np 0", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("-np must be >= 1"), std::string::npos) << r.output;
  r = run_mtp("serve -m tests/data/example.gguf --bogus", true);
  EXPECT_EQ(r.exit_code, 2);
  r = run_mtp("serve -m tests/data/example.gguf --spec-type ngram", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("draft-mtp"), std::string::npos) << r.output;
  // Flags that need drafting, bad cache types and limits are refused before the model is opened.
  for (const char* bad :
       {"--draft-vocab 64", "--spec mtp --draft-vocab-file ids.txt", "--spec mtp --draft-vocab -1",
        "--cache-type-k q3", "--queue 100000", "--shutdown-timeout 1e300", "--chat-template-kwargs '[1]'",
        "--chat-template-kwargs '{\"enable_thinking\": true}' --reasoning off", "--cache-ram -5",
        "--cache-checkpoint-every -1", "--cache-checkpoint-min-gap 0", "--spec mtp --draft-head best",
        "--draft-head full", "--spec mtp --draft-head full --draft-vocab 64"}) {
    r = run_mtp(std::string("serve -m models/no-such-file.gguf ") + bad, true);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_EQ(r.output.find("no-such-file"), std::string::npos) << bad << ": " << r.output;
  }
  r = run_mtp("serve -m models/no-such-file.gguf --draft-vocab 64", true);
  EXPECT_NE(r.output.find("--draft-vocab needs --spec mtp"), std::string::npos) << r.output;
  // More cache than the machine has: whole MiB, and the machine's memory.
  r = run_mtp("serve -m models/no-such-file.gguf --cache-ram 999999999", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(std::regex_search(r.output, std::regex("^mtp serve: --cache-ram 999999999 MiB exceeds this "
                                                     "machine's memory \\([0-9]+ MiB\\)\n$")))
      << r.output;
  r = run_mtp("serve -m models/no-such-file.gguf --spec mtp --draft-head full --draft-vocab 64", true);
  EXPECT_NE(r.output.find("contradicts --draft-head full"), std::string::npos) << r.output;
  r = run_mtp("serve -m models/no-such-file.gguf --draft-vocab-file ids.txt --spec mtp", true);
  EXPECT_NE(r.output.find("--draft-vocab-file needs --draft-vocab N"), std::string::npos) << r.output;
  // A malformed LLAMA_SPEC_MAX_DRAFTING_SLOTS is an error, not "never draft".
  setenv("LLAMA_SPEC_MAX_DRAFTING_SLOTS", "one", 1);
  r = run_mtp("serve -m tests/data/example.gguf --spec mtp --port 70000", true);  // (exits even if ignored)
  unsetenv("LLAMA_SPEC_MAX_DRAFTING_SLOTS");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("LLAMA_SPEC_MAX_DRAFTING_SLOTS='one'"), std::string::npos) << r.output;
  r = run_mtp("serve -m models/no-such-file.gguf", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no-such-file.gguf"), std::string::npos) << r.output;
  r = run_mtp("serve --help", true);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("--spec-max-drafting-slots"), std::string::npos);
}

}  // namespace
}  // namespace mtp::testing
