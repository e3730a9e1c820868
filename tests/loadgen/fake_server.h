// An OpenAI-style streaming server in the test process: cpp-httplib on a loopback port, answering
// POST /v1/chat/completions with a scripted SSE stream (each chunk after its own delay; fixed, or chosen per
// request from its body), or with one of the failures the client must survive; and, when asked, GET /metrics
// with vLLM's speculative-decoding counters (404 otherwise, as llama-server without --metrics), and
// POST /tokenize with one token per byte.
#pragma once

#include <httplib.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace mtp::testing {

struct ScriptedChunk {
  int delay_ms = 0;  // before this chunk
  std::string data;  // the SSE data payload (a JSON chunk, "[DONE]", or anything)
};

enum class FakeMode { kStream, kStatus500, kCloseMidStream };

// What one request gets, when the answer depends on the request (FakeServer::respond_with).
struct ScriptedAnswer {
  FakeMode mode = FakeMode::kStream;
  std::vector<ScriptedChunk> script;
};
using Responder = std::function<ScriptedAnswer(const nlohmann::json& body)>;

// What each chat request adds to the server's /metrics counters.
struct ScriptedCounters {
  int drafts = 0, draft_tokens = 0, accepted = 0;
  std::vector<int> accepted_per_position;
};

// vLLM's exposition of the counters after `requests` chat requests, with a histogram and comments around
// them as a real scrape has.
inline std::string vllm_metrics_text(const ScriptedCounters& c, int requests) {
  const std::string labels = R"(engine="0",model_name="fake-model")";
  std::string s =
      "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{" +
      labels +
      "} 0.0\n"
      "vllm:e2e_request_latency_seconds_bucket{" +
      labels + ",le=\"+Inf\"} " + std::to_string(requests) +
      ".0\n"
      "# TYPE vllm:spec_decode_num_drafts_total counter\n";
  auto line = [&](const std::string& name, const std::string& extra, int per_request) {
    s += name + "{" + labels + extra + "} " + std::to_string(per_request * requests) + ".0\n";
  };
  line("vllm:spec_decode_num_drafts_total", "", c.drafts);
  line("vllm:spec_decode_num_draft_tokens_total", "", c.draft_tokens);
  line("vllm:spec_decode_num_accepted_tokens_total", "", c.accepted);
  for (size_t k = 0; k < c.accepted_per_position.size(); ++k)
    line("vllm:spec_decode_num_accepted_tokens_per_pos_total", ",position=\"" + std::to_string(k) + "\"",
         c.accepted_per_position[k]);
  return s;
}

// A chat chunk whose delta carries `field` = `text` ("content", "reasoning_content"); `timings` if not null.
inline std::string delta_chunk(const std::string& field, const std::string& text,
                               const nlohmann::json& timings = nullptr) {
  nlohmann::json c = {{"object", "chat.completion.chunk"},
                      {"choices", {{{"index", 0}, {"delta", {{field, text}}}, {"finish_reason", nullptr}}}}};
  if (!timings.is_null()) c["timings"] = timings;
  return c.dump();
}

// The last chunk: finish_reason, usage and timings.
inline std::string finish_chunk(int prompt_tokens, int completion_tokens, const nlohmann::json& timings) {
  nlohmann::json c = {
      {"object", "chat.completion.chunk"},
      {"choices", {{{"index", 0}, {"delta", nlohmann::json::object()}, {"finish_reason", "stop"}}}},
      {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens}}}};
  if (!timings.is_null()) c["timings"] = timings;
  return c.dump();
}

// "ab" after 5 ms, "cd" 5 ms later, then the finish (4 prompt tokens, 3 completion tokens, `timings`).
inline std::vector<ScriptedChunk> two_delta_script(const nlohmann::json& timings = nullptr) {
  return {{5, delta_chunk("content", "ab")},
          {5, delta_chunk("content", "cd")},
          {0, finish_chunk(4, 3, timings)},
          {0, "[DONE]"}};
}

class FakeServer {
 public:
  FakeServer(std::vector<ScriptedChunk> script, FakeMode mode = FakeMode::kStream)
      : script_(std::move(script)), mode_(mode) {
    server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      ScriptedAnswer answer{mode_, script_};
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_body_ = req.body;
        bodies_.push_back(req.body);
        received_.push_back(std::chrono::steady_clock::now());
        if (responder_) answer = responder_(nlohmann::json::parse(req.body));
      }
      if (answer.mode == FakeMode::kStatus500) {
        res.status = 500;
        res.set_content(R"({"error":{"message":"scripted failure"}})", "application/json");
        return;
      }
      res.set_chunked_content_provider("text/event-stream", [answer](size_t, httplib::DataSink& sink) {
        const auto& script = answer.script;
        for (size_t i = 0; i < script.size(); ++i) {
          if (answer.mode == FakeMode::kCloseMidStream && i == script.size() / 2) return false;  // drop it
          std::this_thread::sleep_for(std::chrono::milliseconds(script[i].delay_ms));
          const std::string ev = "data: " + script[i].data + "\n\n";
          if (!sink.write(ev.data(), ev.size())) return false;
        }
        sink.done();
        return true;
      });
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (metrics_body_.empty() && !counters_) {
        res.status = 404;
        return;
      }
      const int served = static_cast<int>(bodies_.size());
      res.set_content(counters_ ? vllm_metrics_text(*counters_, served) : metrics_body_, "text/plain");
    });
    server_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!tokenize_) {
        res.status = 404;
        return;
      }
      tokenize_bodies_.push_back(req.body);
      const std::string text = nlohmann::json::parse(req.body).value("content", "");
      nlohmann::json tokens = nlohmann::json::array();
      for (size_t i = 0; i < text.size(); ++i) tokens.push_back(static_cast<int>(i));
      res.set_content(nlohmann::json{{"tokens", tokens}}.dump(), "application/json");
    });
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})",
                      "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  // Every later chat request is answered as `r` says for its body, instead of the fixed script.
  void respond_with(Responder r) {
    std::lock_guard<std::mutex> lock(mu_);
    responder_ = std::move(r);
  }
  // GET /metrics: vLLM's counters, `per_request` times the chat requests received so far.
  void serve_counters(const ScriptedCounters& per_request) {
    std::lock_guard<std::mutex> lock(mu_);
    counters_ = per_request;
  }
  // GET /metrics: this text as it is.
  void serve_metrics_text(const std::string& body) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_body_ = body;
  }
  // POST /tokenize: {"tokens": [...]}, one token per byte of "content" (404 until called).
  void serve_tokenize() {
    std::lock_guard<std::mutex> lock(mu_);
    tokenize_ = true;
  }
  std::vector<std::string> tokenize_bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return tokenize_bodies_;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string last_body() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_body_;
  }
  // Every chat request body received, in arrival order, and when each arrived.
  std::vector<std::string> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  std::vector<std::chrono::steady_clock::time_point> received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  std::vector<ScriptedChunk> script_;
  FakeMode mode_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::string last_body_;
  std::vector<std::string> bodies_;
  std::vector<std::chrono::steady_clock::time_point> received_;
  std::optional<ScriptedCounters> counters_;
  Responder responder_;
  std::string metrics_body_;
  bool tokenize_ = false;
  std::vector<std::string> tokenize_bodies_;
};

}  // namespace mtp::testing
