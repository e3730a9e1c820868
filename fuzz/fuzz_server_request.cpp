// libFuzzer target for the server's request parsing: the input is an HTTP request body, parsed as JSON and
// then as both a /v1/completions and a /v1/chat/completions request, the way the handlers do (no HTTP). A
// chat request that parses is rendered with the built-in ChatML template, which checks its messages and
// tools, and a forced tool call's grammar is built and parsed. Every input must give a request or an
// ApiError, and every ApiError must serialize the way the server sends it (dump_json: a parse error can quote
// invalid UTF-8 from the body).
#include <cstdint>
#include <string_view>

#include "chat/chat_template.h"
#include "server/api.h"
#include "server/format.h"
#include "server/tool_grammar.h"

namespace {

void check_error(const std::optional<mtp::server::ApiError>& error) {
  if (error) (void)mtp::server::dump_json(error->to_json());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  mtp::server::Json body;
  auto error = mtp::server::parse_json_body(text, body);
  check_error(error);
  if (error) return 0;

  mtp::server::RequestDefaults defaults;
  defaults.n_ctx = 256;
  defaults.draft_vocab = 64;
  mtp::server::GenerationParams completion;
  check_error(mtp::server::parse_completion_request(body, defaults, completion));

  mtp::server::GenerationParams chat;
  error = mtp::server::parse_chat_request(body, defaults, chat);
  check_error(error);
  if (error) return 0;
  static const mtp::chat::ChatTemplate chatml = mtp::chat::ChatTemplate::chatml();
  auto prompt = chatml.render(chat.chat);
  if (!prompt.ok()) return 0;
  const mtp::chat::OutputFormat format = chatml.output_format(chat.chat, *prompt, chat.reasoning_format);
  // A forced tool call: its grammar in both syntaxes, from whatever tools the body holds.
  if (chat.forced_tool)
    for (auto syntax : {mtp::chat::ToolCallSyntax::kJson, mtp::chat::ToolCallSyntax::kXml}) {
      auto gbnf = mtp::server::tool_call_gbnf(chat.chat.tools, *chat.forced_tool,
                                              {syntax, format.starts_in_reasoning, chat.parallel_tool_calls});
      if (gbnf.ok()) (void)mtp::grammar::parse_gbnf(*gbnf);
    }
  return 0;
}
