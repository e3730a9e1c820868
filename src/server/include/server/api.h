// The OpenAI-compatible request side of the server: JSON bodies of /v1/completions and /v1/chat/completions
// parsed and checked into engine structs, and the error objects the API answers bad input with.
//
// Parsing is strict about the fields it knows (a wrong type or a value out of range is a 400 that names the
// field) and ignores the ones it does not, as OpenAI-compatible servers do: clients send many optional
// fields. llama-server's spellings of the same settings are accepted too (n_predict, n_probs, ignore_eos,
// "speculative.n_max", ...).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "engine/engine.h"

namespace mtp::server {

using Json = nlohmann::ordered_json;

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, or empty (null)
  std::string code;   // a machine-readable code ("context_length_exceeded"), or empty (null)

  Json to_json() const;
};

ApiError bad_request(std::string message, std::string param = "", std::string code = "");
ApiError server_error(int status, std::string message, std::string code = "");

// Parses a request body; the error names the position of a syntax error. The body must be a JSON object.
std::optional<ApiError> parse_json_body(std::string_view body, Json& out);

// Server-wide settings a request falls back to when it does not set them (`mtp serve` flags).
struct RequestDefaults {
  SamplerOptions sampling;  // temperature, top_k, top_p, min_p; seed < 0 below = random
  int64_t seed = -1;
  int64_t n_predict = -1;          // < 0: until an end token or the context is full
  speculative::DraftParams draft;  // the engine's per-request default, for partial overrides
  bool drafting = false;    // the server drafts (--spec mtp), so a request drafts unless it turns it off
  int64_t draft_vocab = 0;  // the engine's --draft-vocab (0: none); a request may pick it or the full head
  chat::ReasoningFormat reasoning_format = chat::ReasoningFormat::kDeepseek;
  std::optional<bool> enable_thinking;  // --reasoning on|off
  // --chat-template-kwargs: template variables of every chat request, under the request's own
  // chat_template_kwargs (a key the request sets wins); an object.
  Json chat_template_kwargs = Json::object();
  int64_t n_ctx = 4096;  // max_tokens may not exceed it
  size_t max_stop_strings = 16;
  int32_t max_top_logprobs = 20;
};

// What one generation request asks for, independent of the endpoint.
struct GenerationParams {
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string model;           // as sent ("" when absent)
  RequestOptions options;      // sampling, max_tokens, ignore_eos, speculative, logprobs
  bool max_tokens_set = false;
  std::vector<std::string> stop;
  bool logprobs = false;  // the endpoint's logprobs object is returned
  // "return_token_sources": each token's text and how it came (draft or trunk) in a "token_sources" array
  // (format.h); an extension, so OpenAI clients that do not ask see nothing new.
  bool token_sources = false;
  // /v1/completions: the prompt as text, or as token ids when `prompt_is_tokens`.
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  // llama-server's /completion: the generated ids in the response; the slot asked for (-1: any).
  bool return_tokens = false;
  int64_t id_slot = -1;
  // /v1/chat/completions
  chat::ChatRequest chat;
  chat::ReasoningFormat reasoning_format = chat::ReasoningFormat::kDeepseek;
  bool parse_tool_calls = true;  // false with "tool_choice": "none"
  // tool_choice "required" ("") or a named function: the reply is forced to be a call of that tool (or of any
  // of `chat.tools`), by a grammar built once the chat template is known (tool_grammar.h).
  std::optional<std::string> forced_tool;
  bool parallel_tool_calls = false;  // with a forced call: more calls may follow the first
};

// The fields shared by both endpoints (sampling, limits, stop, stream, speculative). `chat` selects the
// endpoint's conventions for logprobs (an integer count for completions; a bool plus top_logprobs for chat).
std::optional<ApiError> parse_common(const Json& body, const RequestDefaults& defaults, bool chat,
                                     GenerationParams& out);
std::optional<ApiError> parse_completion_request(const Json& body, const RequestDefaults& defaults,
                                                 GenerationParams& out);
// llama-server's native POST /completion: the /v1/completions fields (n_predict, n_probs, cache_prompt, ...)
// plus return_tokens and id_slot, which must name one of `n_slots` slots or be -1.
std::optional<ApiError> parse_native_completion_request(const Json& body, const RequestDefaults& defaults,
                                                        int32_t n_slots, GenerationParams& out);
// Also used by /apply-template (which needs only the messages, tools and template options).
std::optional<ApiError> parse_chat_request(const Json& body, const RequestDefaults& defaults,
                                           GenerationParams& out);
// Messages, tools, chat_template_kwargs, reasoning options: the part of a chat body that renders the prompt.
std::optional<ApiError> parse_chat_messages(const Json& body, const RequestDefaults& defaults,
                                            GenerationParams& out);

// Whether `requested` (a request's "model") names the served model: empty, the alias, the file name or the
// path.
bool model_matches(std::string_view requested, std::string_view alias, std::string_view path);

// Constant-time comparison of an API key from the Authorization ("Bearer KEY") or X-Api-Key header.
bool api_key_matches(std::string_view authorization, std::string_view x_api_key, std::string_view key);

}  // namespace mtp::server
