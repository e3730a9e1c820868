// libFuzzer target for the Jinja chat templates: the input is a template source (what a GGUF's
// `tokenizer.chat_template` holds), parsed and rendered with a fixed conversation that has a system prompt,
// tools, a tool call, reasoning and a tool result, so templates reach their message, tool and thinking
// branches. Every input must render or fail with a Status; the engine's step and output limits (lowered
// here) bound the time and memory of a render.
#include <cstdint>
#include <string>
#include <string_view>

#include "chat/chat_template.h"

namespace {

const mtp::chat::ChatRequest& conversation() {
  static const mtp::chat::ChatRequest request = [] {
    mtp::chat::ChatRequest r;
    r.messages = mtp::chat::Json::parse(R"([
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
      {"role": "assistant", "content": null, "reasoning_content": "Use the tool.",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 \u00b0C"},
      {"role": "assistant", "content": "Sunny.</think>"},
      {"role": "user", "content": "Thanks! \ud83d\ude00"}
    ])");
    r.tools = mtp::chat::Json::parse(R"([{"type": "function", "function": {"name": "weather",
      "description": "Forecast", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "days": {"type": "integer"}}, "required": ["city"]}}}])");
    r.enable_thinking = true;
    r.extra_context = {{"preserve_thinking", true}};
    return r;
  }();
  return request;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  // The default limits (20M steps, 64 MB of output) let one input run for minutes under the sanitizers;
  // runaway loops are found as well against smaller ones.
  mtp::chat::JinjaOptions options;
  options.max_steps = 200'000;
  options.max_output_bytes = 1 << 20;
  auto tmpl = mtp::chat::ChatTemplate::create(source, "<s>", "</s>", options);
  if (!tmpl.ok()) return 0;
  const mtp::chat::ChatRequest& request = conversation();
  auto prompt = tmpl->render(request);
  if (!prompt.ok()) return 0;
  (void)tmpl->message_starts(request, *prompt, 3);
  (void)tmpl->output_format(request, *prompt);
  return 0;
}
