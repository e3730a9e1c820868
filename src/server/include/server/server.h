// `mtp serve`: the OpenAI-compatible HTTP server (docs/architecture.md section 6).
//
// HTTP threads (cpp-httplib's pool) parse, validate, render chat templates, tokenize and queue; the engine
// thread (EngineLoop) owns the Backend. Endpoints:
//   POST /v1/completions, /v1/chat/completions (also without /v1)   streaming (SSE) and not
//   POST /apply-template      {"prompt": "..."} for a chat body, as llama-server answers
//   POST /tokenize, /detokenize
//   POST /completion          llama-server's native completion API (llama_api.h); GET /slots
//   GET  /v1/models (/models), /health (/v1/health), /metrics, /props
//   GET  /                    a chat page that colours each streamed token by how it came (page.h)
// Every error is OpenAI-shaped JSON (api.h). With an API key, every endpoint but /, /health and /v1/models
// needs "Authorization: Bearer KEY" (or "X-Api-Key: KEY").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "chat/chat_template.h"
#include "server/api.h"
#include "server/backend.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/recorder.h"
#include "tokenizer/tokenizer.h"

namespace mtp::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: an ephemeral port (Server::port() tells which)
  std::string api_key;
  std::string model_path;
  std::string alias;  // the model id clients see; default: the file name
  size_t max_body_bytes = size_t{8} << 20;
  int http_threads = 0;  // 0: slots + queue + 8 (every streaming request holds one)
  LoopOptions loop;
  RequestDefaults defaults;
  double shutdown_timeout_s = 10;  // in-flight requests get this long to finish, then they are cancelled
  Json props = Json::object();     // the effective configuration, served by GET /props
  bool log_requests = false;       // one stderr line per response
  std::shared_ptr<TraceRecorder> recorder;  // --record: every accepted generation request; null: off
};

class Server {
 public:
  // `backend`, `tokenizer` and `chat_template` must outlive the server.
  Server(ServerConfig config, Backend& backend, const Tokenizer& tokenizer,
         const chat::ChatTemplate& chat_template);
  ~Server();  // shutdown()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds (an error names the address), then starts the engine thread and the HTTP threads.
  Status start();
  int port() const;
  // Graceful: stops accepting connections, refuses queued requests (503), lets running requests finish for
  // up to shutdown_timeout_s, cancels the rest, and returns when every thread has ended. Idempotent.
  void shutdown();

  Metrics& metrics();
  const ServerConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtp::server
