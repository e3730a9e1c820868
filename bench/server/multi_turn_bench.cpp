// Multi-turn agent sessions against an OpenAI-compatible server: per turn, the time to first
// token, the prompt tokens the server reports it reused, and (--cold) the same request with cache_prompt
// false, i.e. what the turn costs without a prefix cache.
//
//   multi_turn_bench (--url http://127.0.0.1:8080 | -m MODEL [--extra "ARGS"]) [--profile 8k|32k]
//                    [--turns 8] [--max-tokens 32] [--cold] [--date-change T] [--seed 1] [--jsonl FILE]
//
// A session is what a coding agent sends: a system prompt with tool descriptions and today's date, then per
// turn the model's last reply and a tool result that grows the conversation to the profile's size by the
// last turn (8K or 32K tokens, sized with the server's /tokenize), and a short task. The edits agents make
// are in it: every other turn sends back only the second half of the model's reply (as clients that strip
// the previous turn's reasoning do), and at turn --date-change the date in the system prompt changes (0:
// never), which no prefix cache can help with. Greedy replies of --max-tokens tokens.
//
// The numbers come from the client (time to the first non-empty content or reasoning delta of a stream) and
// from the server's own report: timings.cache_n (mtp serve and llama-server) or
// usage.prompt_tokens_details.cached_tokens. -m starts `mtp serve` on MODEL (with --extra's flags) for the
// run; --url measures any running server, llama-server included.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "../bench_cli.h"
#include "server_process.h"

namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string url, model, extra, profile = "8k", jsonl;
  int turns = 8, max_tokens = 32, date_change = -1;
  bool cold = false;
  uint64_t seed = 1;
};

// Deterministic filler text: words of a small code-and-prose vocabulary.
class Words {
 public:
  explicit Words(uint64_t seed) : gen_(seed) {}
  std::string take(int64_t n) {
    static const char* const kWords[] = {
        "the",    "function", "returns", "value",  "error", "file",    "line",   "test",  "build", "call",
        "result", "struct",   "config",  "path",   "index", "buffer",  "thread", "lock",  "read",  "write",
        "cache",  "block",    "token",   "model",  "state", "request", "server", "slot",  "step",  "batch",
        "0x1f",   "42",       "main.cc", "void",   "int",   "return;", "if",     "else",  "for",   "{",
        "}",      "(",        ");",      "assert", "ok",    "failed",  "passed", "debug", "info",  "warn"};
    std::string s;
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) s += (i % 12 == 0) ? "\n" : " ";
      s += kWords[gen_() % (sizeof kWords / sizeof kWords[0])];
    }
    return s;
  }

 private:
  std::mt19937_64 gen_;
};

struct Endpoint {
  std::string host;
  int port = 0;
};

Endpoint parse_url(const std::string& url) {
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("--url needs host:port, got '" + url + "'");
  return {rest.substr(0, colon), std::stoi(rest.substr(colon + 1))};
}

// One streamed chat completion as the client saw it.
struct TurnResult {
  double ttft_ms = -1, total_ms = 0;
  std::string content;
  int64_t prompt_tokens = -1, cached = -1;  // -1: the server did not say
  double server_prompt_ms = -1;
  std::string error;
};

// The server's own words for a failed request: OpenAI's {"error": {"message": ...}}, else the body as sent
// (a streamed request's error body reaches the content receiver, not the response).
std::string error_message(const std::string& body) {
  const Json j = Json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message"))
    return j["error"]["message"].get<std::string>();
  return body.empty() ? "(no body)" : body;
}

TurnResult chat(const Endpoint& ep, Json body) {
  body["stream"] = true;
  body["stream_options"] = Json{{"include_usage", true}};
  httplib::Client cli(ep.host, ep.port);
  cli.set_read_timeout(3600);
  cli.set_write_timeout(600);
  TurnResult r;
  std::string pending;
  const auto t0 = Clock::now();
  auto ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); };
  auto on_event = [&](const std::string& data) {
    if (data == "[DONE]") return;
    const Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded()) return;
    if (j.contains("error")) r.error = j["error"].dump();
    if (j.contains("choices") && !j["choices"].empty()) {
      const Json& d = j["choices"][0].value("delta", Json::object());
      for (const char* key : {"content", "reasoning_content"}) {
        if (d.contains(key) && d[key].is_string() && !d[key].get<std::string>().empty()) {
          if (r.ttft_ms < 0) r.ttft_ms = ms();
          if (std::string(key) == "content") r.content += d[key].get<std::string>();
        }
      }
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const Json& u = j["usage"];
      if (u.contains("prompt_tokens")) r.prompt_tokens = u["prompt_tokens"];
      if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].contains("cached_tokens"))
        r.cached = u["prompt_tokens_details"]["cached_tokens"];
    }
    if (j.contains("timings") && j["timings"].is_object()) {
      const Json& t = j["timings"];
      if (t.contains("cache_n")) r.cached = t["cache_n"];
      if (t.contains("prompt_ms")) r.server_prompt_ms = t["prompt_ms"];
      if (t.contains("cache_n") && t.contains("prompt_n"))
        r.prompt_tokens = t["cache_n"].get<int64_t>() + t["prompt_n"].get<int64_t>();
    }
  };
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    pending.append(data, n);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) on_event(event.substr(6));
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!cli.send(req, res, err))
    r.error = "HTTP: " + httplib::to_string(err);
  else if (res.status != 200)
    r.error = "HTTP " + std::to_string(res.status) + ": " + error_message(res.body + pending);
  r.total_ms = ms();
  return r;
}

int64_t count_tokens(const Endpoint& ep, const std::string& text) {
  httplib::Client cli(ep.host, ep.port);
  auto res = cli.Post("/tokenize", Json{{"content", text}}.dump(), "application/json");
  if (!res || res->status != 200) throw std::runtime_error("/tokenize failed");
  return static_cast<int64_t>(Json::parse(res->body)["tokens"].size());
}

int run(const Options& o) {
  std::unique_ptr<mtp::testing::ServerProcess> own;
  Endpoint ep;
  const int64_t target = o.profile == "32k" ? 32768 : 8192;
  if (!o.model.empty()) {
    // A context the profile fits in (its tokens, the replies, a margin), unless --extra sets one.
    const bool sets_context = std::regex_search(o.extra, std::regex(R"((^|\s)(-c|--ctx-size)(\s|=|$))"));
    const int64_t n_ctx = (target * 5 / 4 + int64_t{o.max_tokens} * o.turns + 1023) / 1024 * 1024;
    const std::string context = sets_context ? "" : " -c " + std::to_string(n_ctx);
    own = std::make_unique<mtp::testing::ServerProcess>("-m " + o.model + context + " " + o.extra, 600);
    ep = {"127.0.0.1", own->port()};
  } else {
    ep = parse_url(o.url);
  }
  const int date_change = o.date_change >= 0 ? o.date_change : o.turns / 2 + 1;
  Words words(o.seed);
  // Tokens per word of the filler, from the server's own tokenizer.
  const std::string probe = words.take(400);
  const double tokens_per_word = static_cast<double>(count_tokens(ep, probe)) / 400.0;
  const int64_t tool_words =
      static_cast<int64_t>(static_cast<double>(target) * 0.92 / std::max(1, o.turns - 1) / tokens_per_word);
  std::printf(
      "multi_turn_bench: %s:%d, profile %s (%lld tokens by turn %d), tool results of ~%lld words, "
      "%.2f tokens/word, date change at turn %d\n",
      ep.host.c_str(), ep.port, o.profile.c_str(), static_cast<long long>(target), o.turns,
      static_cast<long long>(tool_words), tokens_per_word, date_change);
  std::printf("%4s %7s %7s %9s %9s %10s %9s  %s\n", "turn", "prompt", "cached", "ttft_ms", "srv_pp_ms",
              o.cold ? "cold_ttft" : "", o.cold ? "speedup" : "", "edit");
  std::ofstream jsonl;
  if (!o.jsonl.empty()) jsonl.open(o.jsonl);
  Words sys_words(o.seed + 1);  // the same system prompt text before and after the date changes
  const std::string sys_body = sys_words.take(300);
  auto system = [&](int turn) {
    const std::string date = turn >= date_change && date_change > 0 ? "2026-12-04" : "2026-12-03";
    return Json{{"role", "system"},
                {"content", "You are a coding agent working in a C++ repository. Today's date: " + date +
                                ".\n\nTools:\n- read_file(path): the file's text\n- run(command): exit code "
                                "and output\n\n" +
                                sys_body}};
  };
  Json history = Json::array();
  double sum_ttft = 0, sum_cold = 0;
  bool halved = false;  // the previous reply went back halved
  for (int t = 1; t <= o.turns; ++t) {
    std::string edit = halved ? "previous reply halved; " : "";
    Json msgs = Json::array({system(t)});
    for (const Json& m : history) msgs.push_back(m);
    std::string user = "Task " + std::to_string(t) + ": " + words.take(40);
    if (t > 1) user = "<tool_response>\n" + words.take(tool_words) + "\n</tool_response>\n" + user;
    msgs.push_back(Json{{"role", "user"}, {"content", user}});
    if (t == date_change) edit += "date changed; ";
    const Json body = Json{{"messages", msgs}, {"max_tokens", o.max_tokens}, {"temperature", 0}};
    const TurnResult r = chat(ep, body);
    if (!r.error.empty()) {
      std::fprintf(stderr, "multi_turn_bench: turn %d failed: %s\n", t, r.error.c_str());
      return 1;
    }
    TurnResult c;
    if (o.cold) {
      Json cold_body = body;
      cold_body["cache_prompt"] = false;
      c = chat(ep, cold_body);
      if (!c.error.empty()) {
        std::fprintf(stderr, "multi_turn_bench: turn %d (cold) failed: %s\n", t, c.error.c_str());
        return 1;
      }
    }
    // The next turn carries this reply, halved on even turns (the previous reasoning stripped).
    std::string reply = r.content;
    halved = t % 2 == 0;
    if (halved) reply = reply.substr(reply.size() / 2);
    history.push_back(Json{{"role", "user"}, {"content", user}});
    history.push_back(Json{{"role", "assistant"}, {"content", reply}});
    if (t > 1) {
      sum_ttft += r.ttft_ms;
      sum_cold += c.ttft_ms;
    }
    std::printf("%4d %7lld %7lld %9.1f %9.1f", t, static_cast<long long>(r.prompt_tokens),
                static_cast<long long>(r.cached), r.ttft_ms, r.server_prompt_ms);
    if (o.cold)
      std::printf(" %10.1f %8.1fx", c.ttft_ms, r.ttft_ms > 0 ? c.ttft_ms / r.ttft_ms : 0.0);
    else
      std::printf(" %10s %9s", "", "");
    std::printf("  %s\n", edit.c_str());
    std::fflush(stdout);
    if (jsonl) {
      Json line = {{"turn", t},
                   {"prompt_tokens", r.prompt_tokens},
                   {"cached_tokens", r.cached},
                   {"ttft_ms", r.ttft_ms},
                   {"total_ms", r.total_ms},
                   {"server_prompt_ms", r.server_prompt_ms},
                   {"edit", edit}};
      if (o.cold) line["cold_ttft_ms"] = c.ttft_ms;
      jsonl << line.dump() << "\n";
    }
  }
  std::printf("turns 2-%d: time to first token %.1f s", o.turns, sum_ttft / 1e3);
  if (o.cold) std::printf(", cold %.1f s (%.1fx)", sum_cold / 1e3, sum_ttft > 0 ? sum_cold / sum_ttft : 0.0);
  std::printf("\n");
  // Ours: what the cache holds for this session.
  httplib::Client cli(ep.host, ep.port);
  if (auto res = cli.Get("/metrics"); res && res->status == 200) {
    for (const char* name : {"mtp_prefix_cache_bytes{kind=\"kv\"}",
                             "mtp_prefix_cache_bytes{kind=\"recurrent\"}", "mtp_prefix_cache_checkpoints"}) {
      const size_t at = res->body.find(std::string("\n") + name + " ");
      if (at != std::string::npos)
        std::printf(
            "%s %s\n", name,
            res->body
                .substr(at + std::strlen(name) + 2, res->body.find('\n', at + 1) - at - std::strlen(name) - 2)
                .c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Multi-turn agent sessions against an OpenAI-compatible server: time to first token per turn",
               "multi_turn_bench"};
  auto* url = app.add_option("--url", o.url, "A running server, http://HOST:PORT");
  auto* model = app.add_option("-m,--model", o.model, "Start `mtp serve` on this GGUF for the run");
  url->excludes(model);
  app.add_option("--extra", o.extra, "More `mtp serve` flags (with -m)");
  app.add_option("--profile", o.profile, "8k | 32k: tokens by the last turn")
      ->check(CLI::IsMember({"8k", "32k"}))
      ->capture_default_str();
  app.add_option("--turns", o.turns, "Turns per session")->check(CLI::Range(2, 64))->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens, "Reply length")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_flag("--cold", o.cold, "Also send each turn with cache_prompt false (the cold path)");
  app.add_option("--date-change", o.date_change, "Turn whose system prompt has a new date (0: never)");
  app.add_option("--seed", o.seed, "Text seed")->capture_default_str();
  app.add_option("--jsonl", o.jsonl, "One JSON line per turn into FILE");
  mtp::bench::parse_or_exit(app, argc, argv);
  if (o.url.empty() && o.model.empty()) {
    std::fprintf(stderr, "multi_turn_bench: give --url or -m\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multi_turn_bench: %s\n", e.what());
    return 1;
  }
}
