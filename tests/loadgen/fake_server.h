// An OpenAI-style streaming server in the test process: cpp-httplib on a loopback port, answering
// POST /v1/chat/completions with a scripted SSE stream (each chunk after its own delay), or with one of the
// failures the client must survive.
#pragma once

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace mtp::testing {

struct ScriptedChunk {
  int delay_ms = 0;  // before this chunk
  std::string data;  // the SSE data payload (a JSON chunk, "[DONE]", or anything)
};

enum class FakeMode { kStream, kStatus500, kCloseMidStream };

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
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_body_ = req.body;
        bodies_.push_back(req.body);
        received_.push_back(std::chrono::steady_clock::now());
      }
      if (mode_ == FakeMode::kStatus500) {
        res.status = 500;
        res.set_content(R"({"error":{"message":"scripted failure"}})", "application/json");
        return;
      }
      res.set_chunked_content_provider("text/event-stream", [this](size_t, httplib::DataSink& sink) {
        for (size_t i = 0; i < script_.size(); ++i) {
          if (mode_ == FakeMode::kCloseMidStream && i == script_.size() / 2) return false;  // drop the socket
          std::this_thread::sleep_for(std::chrono::milliseconds(script_[i].delay_ms));
          const std::string ev = "data: " + script_[i].data + "\n\n";
          if (!sink.write(ev.data(), ev.size())) return false;
        }
        sink.done();
        return true;
      });
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
};

}  // namespace mtp::testing
