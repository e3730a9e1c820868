// Parsing the model's reply into OpenAI fields: `content`, `reasoning_content` (deepseek reasoning format)
// and `tool_calls`, whole or streamed. Formats of the Qwen family:
//   reasoning   <think>\n...\n</think>\n\n  (Qwen3.5/3.6 put "<think>\n" in the prompt, so the reply starts
//               inside it and only "</think>" appears)
//   tool call   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
//               (Qwen3.5/3.6, Qwen3-Coder), or <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
//               (Qwen2.5/Qwen3, Hermes).
// The streaming parser never emits a partial marker (or a partial UTF-8 sequence) as text, and any split of
// the same reply into deltas gives the same concatenated result as parsing it whole. A tool call that does
// not parse is returned as content with a warning, never dropped.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja.h"

namespace mtp::chat {

enum class ReasoningFormat {
  kNone,      // the reply is content as generated, <think> tags included
  kDeepseek,  // thinking goes to reasoning_content, apart from content
};

// <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> or the <function=NAME> form above.
enum class ToolCallSyntax { kJson, kXml };

struct ToolCall {
  std::string id;  // "call_..."
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's function.arguments)
  // {"id", "type": "function", "function": {"name", "arguments"}}; with "index" when index >= 0 (streaming).
  Json to_json(int index = -1) const;
};

struct OutputFormat {
  ReasoningFormat reasoning = ReasoningFormat::kDeepseek;
  bool starts_in_reasoning = false;  // the prompt ended with an open <think>
  bool parse_tool_calls = true;
  // The request's tool definitions: the XML format's parameter values are converted by the declared JSON
  // schema type (a "string" parameter stays a string even when it looks like a number).
  Json tools;
  // Makes the id of the n-th call of this reply; the default is "call_" + 24 random alphanumerics.
  std::function<std::string(size_t)> make_id;
};

struct ParsedOutput {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  std::vector<std::string> warnings;  // e.g. a malformed tool call returned as content

  // The OpenAI assistant message: {"role": "assistant", "content": str|null, "reasoning_content"?,
  // "tool_calls"?}. content is null when empty and there are tool calls.
  Json to_message_json() const;
};

// One step of streamed output.
struct OutputDelta {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;  // complete calls, in order
  std::vector<std::string> warnings;
  bool empty() const {
    return content.empty() && reasoning_content.empty() && tool_calls.empty() && warnings.empty();
  }
};

class OutputParser {
 public:
  explicit OutputParser(OutputFormat format);

  // Feeds generated text (any split, even inside a UTF-8 sequence) and returns what can be emitted now.
  OutputDelta feed(std::string_view text);
  // Ends the reply: flushes what was held back and returns the last delta.
  OutputDelta finish();
  // Everything emitted so far, accumulated.
  const ParsedOutput& result() const { return result_; }

 private:
  enum class State { kStart, kReasoning, kContent, kToolCall };
  void process(bool final, OutputDelta& out);
  void emit_content(std::string text, OutputDelta& out);
  void emit_reasoning(std::string text, OutputDelta& out);
  void finish_tool_call(std::string_view raw, bool terminated, OutputDelta& out);

  OutputFormat format_;
  State state_;
  std::string buf_;
  bool strip_leading_ws_ = false;  // after </think> or a tool call
  bool reasoning_started_ = false;
  std::string tool_open_;       // the marker that opened the current tool call
  std::string pending_ws_;      // trailing whitespace held back (dropped before a tool call or </think>)
  std::string ws_before_call_;  // the whitespace before a tool call, restored if the call is malformed
  size_t scanned_ = 0;          // bytes of buf_ already searched for the end of the current tool call
  size_t n_calls_ = 0;
  bool finished_ = false;
  ParsedOutput result_;
};

ParsedOutput parse_output(std::string_view text, const OutputFormat& format);

}  // namespace mtp::chat
