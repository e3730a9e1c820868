// Rendering OpenAI-style chat requests into a prompt with a model's chat template, the way Hugging Face
// transformers' apply_chat_template does (same variables, same Jinja environment), plus the ChatML fallback
// for models whose GGUF has no `tokenizer.chat_template`.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/jinja.h"
#include "chat/output_parser.h"

namespace mtp::chat {

struct ChatRequest {
  // OpenAI messages: [{"role": "system"|"developer"|"user"|"assistant"|"tool", "content": str | null |
  // [{"type": "text", "text": str}, ...], "tool_calls": [...], "reasoning_content": str, ...}].
  Json messages = Json::array();
  // OpenAI tool definitions ([{"type": "function", "function": {"name", "description", "parameters"}}]) or
  // null when the request has none.
  Json tools;
  bool add_generation_prompt = true;
  // `--reasoning on|off`: passed to the template as `enable_thinking`; unset leaves the variable undefined,
  // which is the template's default (thinking on for Qwen3.5/3.6).
  std::optional<bool> enable_thinking;
  // More template variables (the request's `chat_template_kwargs`, e.g. {"preserve_thinking": true}); they
  // override the ones above.
  Json extra_context = Json::object();
};

// Checks messages and puts them in the form templates expect. Errors name the message and field
// ("messages[2].tool_calls[0].function.arguments: not a JSON object"). Normalization: tool-call `arguments`
// given as a JSON string (as OpenAI clients send them) become objects, since templates iterate them; content
// parts must be text (this is a text-only engine).
Expected<Json> normalize_messages(const Json& messages);
// Checks tool definitions; null or an empty array mean none.
Status validate_tools(const Json& tools);

// The built-in fallback: ChatML (<|im_start|>role\n...<|im_end|>\n), tool definitions and calls in the
// Hermes/Qwen JSON format. Also in tests/chat/data/templates/chatml.jinja, which a test keeps identical.
extern const char* const kChatMlTemplate;

class ChatTemplate {
 public:
  // Parses `source`; `bos_token`/`eos_token` are the texts of the GGUF's tokenizer.ggml.bos/eos tokens.
  // `options`: the Jinja limits (the fuzzer lowers them so that each input runs in milliseconds).
  static Expected<ChatTemplate> create(std::string_view source, std::string bos_token = "",
                                       std::string eos_token = "", JinjaOptions options = {});
  static ChatTemplate chatml(std::string bos_token = "", std::string eos_token = "<|im_end|>");

  // The prompt for `request`. Errors: bad messages or tools, or the template failed (its message, with the
  // template line).
  Expected<std::string> render(const ChatRequest& request) const;

  // Where the last `last_n` messages but the first begin in `prompt` (what render returned for `request`):
  // the byte length of the rendering of the messages before each, when `prompt` starts with it. The prefix
  // cache checkpoints there: agent traffic edits a history at message starts. Ascending.
  std::vector<size_t> message_starts(const ChatRequest& request, std::string_view prompt,
                                     size_t last_n) const;

  // How to parse the reply to a prompt rendered from `request` (`prompt` is what render returned): whether
  // the output starts inside a reasoning block (the prompt ends with an open <think>), and whether tool
  // calls are parsed (the request has tools).
  OutputFormat output_format(const ChatRequest& request, std::string_view prompt,
                             ReasoningFormat reasoning = ReasoningFormat::kDeepseek) const;

  // The syntax this template writes tool calls in, which its model answers in (output_parser.h): Qwen3.5/
  // 3.6's XML when the template writes "<function=", else Hermes JSON (Qwen2.5/Qwen3, the ChatML fallback).
  ToolCallSyntax tool_call_syntax() const {
    return source_.find("<function=") != std::string::npos ? ToolCallSyntax::kXml : ToolCallSyntax::kJson;
  }

  bool is_fallback() const { return fallback_; }
  const std::string& source() const { return source_; }

 private:
  JinjaTemplate template_;
  std::string source_;
  std::string bos_, eos_;
  bool fallback_ = false;
};

}  // namespace mtp::chat
