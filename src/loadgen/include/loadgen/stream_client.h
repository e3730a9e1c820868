// One streaming chat-completions request at a time over a kept-alive connection, every SSE event timestamped
// as it arrives (record.h). Whatever goes wrong (no connection, an HTTP error, a stream cut short, an event
// that is not JSON, an error event) ends the request as a failure with a message; nothing throws.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "loadgen/record.h"

namespace mtp::loadgen {

// Where a request's output token count comes from (docs/bench.md, "Token counts"). kAuto: the stream's
// `usage`, else its final `timings.predicted_n`, else POST /tokenize on the text it carried; kServer: usage
// or timings only (unknown otherwise); kTokenize: POST /tokenize always, whatever the stream reported.
enum class TokenCount { kAuto, kServer, kTokenize };

struct ClientOptions {
  std::string url;  // http://host:port, optionally with a path prefix; "/v1/chat/completions" is appended
  std::string api_key;
  double timeout_s = 600;  // connect and per-read timeout
  TokenCount count = TokenCount::kAuto;
};

// The --count-tokens values by name ("auto", "server", "tokenize"), and the name of one.
const std::map<std::string, TokenCount>& token_count_names();
const char* token_count_name(TokenCount c);

struct ChatRequest {
  std::string model;  // empty: no "model" field
  std::string prompt;
  int max_tokens = 128;
  std::optional<double> temperature;
  bool ignore_eos = false;
  // Replay (loadgen/replay.h): the recorded messages instead of one user message with `prompt` (null: none),
  // body fields sent as recorded (tools, sampling parameters, cache_salt), and the completions endpoint
  // (POST /v1/completions with `prompt`).
  Json messages;
  Json extra = Json::object();
  bool completions = false;
};

// The text a stream carried, put together from its deltas (`mtp replay --history live` sends it back as the
// next turn's assistant message): content (or a completions stream's text), reasoning, and the tool calls,
// each {"id", "type": "function", "function": {"name", "arguments"}} merged by its delta index.
struct Reply {
  std::string content, reasoning;
  Json tool_calls = Json::array();
};

// The JSON body sent for `req`: stream with usage, one user message (or `messages`, or a completions
// prompt), then `extra`'s fields where the body has none of its own.
Json chat_body(const ChatRequest& req);

class StreamClient {
 public:
  ~StreamClient();
  // Fails (kInvalidArgument) only on a URL it cannot parse.
  static Expected<std::unique_ptr<StreamClient>> create(const ClientOptions& options);

  // Sends `req` and fills `r` (sent, first token, end, events, usage, timings, ok or error); `r`'s id, level,
  // worker, warmup and scheduled_ns are the caller's. With `reply`, also the text the stream carried.
  void run(const ChatRequest& req, const RunClock& clock, RequestRecord& r, Reply* reply = nullptr);

  // The number of tokens the server's POST /tokenize gives for `text` ({"content": text}, no special tokens
  // added; llama-server's and mtp serve's endpoint), or an error.
  Expected<int64_t> count_tokens(const std::string& text);

  // The first model id from GET /v1/models, or an error.
  Expected<std::string> first_model();

  // The body of GET `path` (under the URL's prefix, e.g. "/metrics"); an error for no answer or a status
  // other than 200.
  Expected<std::string> get_text(const std::string& path);

 private:
  // One try; true when it failed at once on a kept-alive connection the server had closed.
  bool run_attempt(const ChatRequest& req, const RunClock& clock, RequestRecord& r, Reply* reply);
  // Sets a finished request's completion_tokens from POST /tokenize where the options call for it.
  void count_by_tokenize(RequestRecord& r, const Reply& reply);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "scheme://host:port" and the path prefix ("" or "/x") of a --url value, or kInvalidArgument.
struct SplitUrl {
  std::string origin;
  std::string prefix;
};
Expected<SplitUrl> split_url(const std::string& url);

}  // namespace mtp::loadgen
