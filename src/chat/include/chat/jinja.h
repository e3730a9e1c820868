// A strict Jinja2 subset for the chat templates that GGUF files carry in `tokenizer.chat_template`.
//
// It renders what Python's jinja2 renders under the environment Hugging Face transformers uses for chat
// templates (ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on, the loopcontrols extension,
// transformers' `tojson` = json.dumps with ensure_ascii=False and insertion-ordered keys, `raise_exception`,
// `strftime_now`), byte for byte. What it does not support fails with a Status naming the line and the
// construct; it never renders a guess.
//
// JSON: docs/architecture.md section 2 keeps JSON out of the lower libraries, but the input of a chat
// template *is* JSON (OpenAI-style messages and tool definitions), so the chat library uses
// nlohmann::ordered_json as the input type of templates. Ordered, because json.dumps in the reference keeps
// the order of the keys it was given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace mtp::chat {

using Json = nlohmann::ordered_json;

struct JinjaOptions {
  bool trim_blocks = true;    // drop the first newline after a block tag
  bool lstrip_blocks = true;  // drop spaces and tabs before a block tag at the start of a line
  size_t max_output_bytes = size_t{64} << 20;
  int max_call_depth = 64;  // macro calls nested inside each other
  int max_nesting = 256;    // syntax nesting (parser) and depth of input values
  // Statements and expressions being evaluated inside one another, macro calls included (64 calls of a macro
  // whose body nests 256 deep would overflow the stack long before max_call_depth stops them).
  int max_eval_depth = 1024;
  uint64_t max_steps = 20'000'000;  // evaluation steps per render, against runaway loops
};

namespace jinja {
struct Program;
}

class JinjaTemplate {
 public:
  // Parses `source`. Errors name the line: "line 7: unknown filter 'foo'".
  static Expected<JinjaTemplate> parse(std::string_view source, JinjaOptions options = {});

  // Renders with `context` (a JSON object) as the template's variables. Errors name the line; an error the
  // template raised itself (raise_exception) reads "line N: template raised: <message>".
  Expected<std::string> render(const Json& context) const;

 private:
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace mtp::chat
