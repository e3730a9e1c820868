// Tool-call grammars (a chat request's tool_choice "required" or {"type": "function", "function": {"name"}},
// as OpenAI and llama-server, from the reply's start; under "auto", from the call's opening on): a grammar
// whose every string is a call, in the chat template's tool-call syntax (chat/output_parser.h), of one of the
// request's tools, with arguments that satisfy its "parameters" schema.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "chat/output_parser.h"

namespace mtp::server {

// What opens every call in both syntaxes (a lazy grammar's trigger under tool_choice "auto"), and what closes
// the reasoning before it.
inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kReasoningClose = "</think>";

struct ToolCallGrammarOptions {
  chat::ToolCallSyntax syntax = chat::ToolCallSyntax::kJson;
  // The reply opens inside a reasoning block (the prompt ended with "<think>"): free reasoning without "</",
  // then "</think>", then the call.
  bool starts_in_reasoning = false;
  bool parallel = false;  // one call or more, each on its own line (parallel_tool_calls)
};

// GBNF for calls of the tools in `tools` (OpenAI definitions, [{"type": "function", "function": {"name",
// "parameters"}}]) whose name is `only`, or of any of them when `only` is empty. The arguments follow
// grammar/json_schema.h; in the XML syntax a parameter whose schema says "string" is written raw as the
// template does (without "</", "<p" or "<<"; with minLength/maxLength, that many characters and no "<";
// format not enforced), string enums as their bare values, any other parameter as JSON (a bad bound too,
// so the schema compiler names it). Errors name the tool and the schema keyword, or `only` when no tool
// has that name.
Expected<std::string> tool_call_gbnf(const nlohmann::ordered_json& tools, std::string_view only,
                                     const ToolCallGrammarOptions& options);

}  // namespace mtp::server
