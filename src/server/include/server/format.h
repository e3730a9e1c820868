// The response side of the OpenAI-compatible endpoints: completion and chat completion objects, their
// streamed chunks (server-sent events), usage, logprobs and the `timings` object (llama-server's names plus
// the speculative-decoding statistics).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "server/api.h"
#include "server/engine_loop.h"
#include "tokenizer/tokenizer.h"

namespace mtp::server {

// JSON text of `j`; invalid UTF-8 in generated text is replaced by U+FFFD instead of failing.
std::string dump_json(const Json& j);
// One server-sent event: "data: <json>\n\n".
std::string sse_event(const Json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// "cmpl-..." / "chatcmpl-..." followed by 24 random alphanumerics.
std::string make_response_id(const char* prefix);

Json timings_json(const RequestTimings& t);
// One generated token with its log-probability and alternatives: {"id" (with_ids), "token", "logprob",
// "bytes", "top_logprobs": [{"id", "token", "logprob", "bytes"}, ...]} (OpenAI chat's shape; llama-server's
// completion_probabilities add the ids).
Json token_logprob_json(const Tokenizer& tokenizer, const GeneratedToken& t, bool with_ids);
// The "return_token_sources" extension: one entry per token of `u`, {"id", "text", "source": "draft" or
// "trunk", "drafted": N on the token that closes a verify round of N drafts (absent elsewhere)}.
Json token_sources_json(const Update& u);
Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, const CacheUse& cache = {});
// One line on what the prefix cache did for a request, and why it did not reuse more.
std::string cache_summary(const RequestTimings& timings);

// Builds one request's response from the engine thread's updates, whole or as stream chunks, in the shape
// of one API: the HTTP side drives every endpoint's requests through this interface.
class ResponseFormatter {
 public:
  virtual ~ResponseFormatter() = default;
  // Streaming: the chunks to send for this update (each one SSE event), the final ones included when the
  // update is the last one.
  virtual std::vector<Json> chunks(const Update& u) = 0;
  // A chunk sent before any token (chat's assistant role), if the API has one.
  virtual std::optional<Json> first_chunk() const { return std::nullopt; }
  // Whether a stream ends with "data: [DONE]" (OpenAI's convention; llama-server's /completion has none).
  virtual bool ends_with_done() const { return true; }
  // Not streaming: accumulates updates; result() once the last one was added.
  virtual void add(const Update& u) = 0;
  virtual Json result() const = 0;
  // As recorded in traces: "stop", "length" or "tool_calls".
  virtual std::string finish_reason() const = 0;
  // Tokens generated so far.
  virtual int64_t completion_tokens() const = 0;
  // The answer so far, streamed or not, for `mtp serve --record-answers`: chat, the assistant message
  // {"role", "content", "reasoning_content"?, "tool_calls"?}; completions, {"text"}.
  virtual Json answer() const = 0;
  virtual const std::vector<std::string>& warnings() const = 0;
};

// OpenAI's completion and chat completion objects.
class ResponseBuilder final : public ResponseFormatter {
 public:
  // `format` is set for chat requests (the reply is parsed into content, reasoning_content and tool_calls).
  ResponseBuilder(const GenerationParams& params, const Tokenizer& tokenizer, std::string model,
                  int64_t n_prompt, std::optional<chat::OutputFormat> format);

  // Streaming: the chunks to send for this update (each one SSE event), including the final chunk (and the
  // usage chunk when stream_options.include_usage) when the update is the last one.
  std::vector<Json> chunks(const Update& u) override;
  // The first chunk of a chat stream (the assistant role), sent before any token.
  std::optional<Json> first_chunk() const override;

  void add(const Update& u) override;
  Json result() const override;

  // "stop", "length" or "tool_calls" (chat replies that produced tool calls).
  std::string finish_reason() const override;
  int64_t completion_tokens() const override { return n_generated_; }
  Json answer() const override;
  const std::vector<std::string>& warnings() const override { return warnings_; }

 private:
  bool chat() const { return parser_.has_value(); }
  Json chunk_base() const;
  Json logprobs_json(const std::vector<GeneratedToken>& tokens);
  void count(const Update& u);

  const GenerationParams& params_;
  const Tokenizer& tokenizer_;
  std::string id_;
  int64_t created_;
  std::string model_;
  int64_t n_prompt_;
  std::optional<chat::OutputParser> parser_;
  int tool_index_ = 0;
  // Accumulated (the text also while streaming, for answer()).
  std::string text_;
  Json logprobs_ = Json();
  Json token_sources_ = Json::array();
  size_t text_offset_ = 0;
  int64_t n_generated_ = 0;
  std::string reason_;
  RequestTimings timings_;
  std::vector<std::string> warnings_;
};

}  // namespace mtp::server
