// `mtp template -m MODEL --messages FILE.json [--tools FILE.json]`: prints the prompt that the model's chat
// template (`tokenizer.chat_template`) renders for an OpenAI-style conversation, byte for byte what Hugging
// Face transformers renders, so that renders can be compared with other tools. A model without a template
// gets the built-in ChatML template, and a note on stderr says so.
#include <cstdio>
#include <optional>

#include "base/text_file.h"
#include "chat/chat_template.h"
#include "command.h"
#include "gguf/gguf_file.h"

namespace mtp::tools {
namespace {

struct TemplateArgs {
  std::string model;
  std::string messages;
  std::string tools;
  std::string template_file;
  std::string kwargs;
  std::string reasoning;
  bool no_generation_prompt = false;
};

Expected<chat::Json> read_json(const std::string& path) {
  MTP_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  chat::Json j = chat::Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return corrupt("'", path, "' is not valid JSON");
  return j;
}

// The text of token `key` (tokenizer.ggml.bos_token_id / eos_token_id), or "" when the file has none.
std::string special_token(const Metadata& md, const char* key) {
  auto id = md.get_integer(key);
  auto tokens = md.get_string_array("tokenizer.ggml.tokens");
  if (!id.ok() || !tokens.ok() || *id < 0 || static_cast<size_t>(*id) >= (*tokens)->size()) return "";
  return (**tokens)[static_cast<size_t>(*id)];
}

int run_template(const TemplateArgs& a) {
  auto fail = [](const Status& s) { return report_error("template", s); };
  // What a file holds (a template, the messages) is a bad file, exit code 1, whatever its status says.
  auto bad_file = [&](const Status& s, const std::string& path) {
    return fail(Status(StatusCode::kCorrupt, s.with_context(path).message()));
  };
  chat::ChatRequest req;
  auto messages = read_json(a.messages);
  if (!messages.ok()) return fail(messages.status());
  if (messages->is_object()) {  // an OpenAI request body: {"messages": [...], "tools": [...], ...}
    chat::Json body = *messages;
    req.messages = body.value("messages", chat::Json());
    if (body.contains("tools")) req.tools = body["tools"];
    if (body.contains("chat_template_kwargs")) req.extra_context = body["chat_template_kwargs"];
  } else {
    req.messages = *messages;
  }
  if (!a.tools.empty()) {
    auto tools = read_json(a.tools);
    if (!tools.ok()) return fail(tools.status());
    req.tools = *tools;
  }
  if (!a.kwargs.empty()) {
    req.extra_context = chat::Json::parse(a.kwargs, nullptr, false);
    if (!req.extra_context.is_object())
      return fail(invalid_argument("--chat-template-kwargs must be a JSON object"));
  }
  req.add_generation_prompt = !a.no_generation_prompt;
  if (!a.reasoning.empty()) req.enable_thinking = a.reasoning == "on";

  auto file = GgufFile::open(a.model);
  if (!file.ok()) return fail(file.status());
  const Metadata& md = file->metadata();
  std::string bos = special_token(md, "tokenizer.ggml.bos_token_id");
  std::string eos = special_token(md, "tokenizer.ggml.eos_token_id");

  std::optional<chat::ChatTemplate> tmpl;
  if (!a.template_file.empty()) {
    auto src = read_text_file(a.template_file);
    if (!src.ok()) return fail(src.status());
    auto t = chat::ChatTemplate::create(*src, bos, eos);
    if (!t.ok()) return bad_file(t.status(), a.template_file);
    tmpl = std::move(t).value();
  } else if (md.contains("tokenizer.chat_template")) {
    auto src = md.get_string("tokenizer.chat_template");
    if (!src.ok()) return fail(src.status());
    auto t = chat::ChatTemplate::create(*src, bos, eos);
    if (!t.ok()) return bad_file(t.status(), a.model + ": tokenizer.chat_template");
    tmpl = std::move(t).value();
  } else {
    std::fprintf(stderr,
                 "mtp template: %s has no tokenizer.chat_template; using the built-in ChatML template\n",
                 a.model.c_str());
    tmpl = chat::ChatTemplate::chatml(bos, eos.empty() ? "<|im_end|>" : eos);
  }
  auto prompt = tmpl->render(req);
  if (!prompt.ok()) return bad_file(prompt.status(), a.messages);
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return std::fflush(stdout) == 0 ? kExitOk : kExitRuntimeError;
}

}  // namespace

CommandRunner register_template(CLI::App& app) {
  auto a = std::make_shared<TemplateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "template",
      "Print the prompt a model's chat template renders for OpenAI-style messages (as transformers does)");
  cmd->add_option("-m,--model", a->model, "GGUF model file (its tokenizer.chat_template and bos/eos tokens)")
      ->required();
  cmd->add_option(
         "--messages", a->messages,
         "JSON file: an array of OpenAI messages, or a request body with \"messages\" (and \"tools\")")
      ->required();
  cmd->add_option("--tools", a->tools, "JSON file: an array of OpenAI tool definitions");
  cmd->add_flag("--no-generation-prompt", a->no_generation_prompt,
                "Do not end the prompt with the assistant turn's opening (add_generation_prompt=false)");
  cmd->add_option("--reasoning", a->reasoning,
                  "on|off: the template's enable_thinking (default: the template's)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--chat-template", a->template_file, "Use this Jinja file instead of the model's template");
  cmd->add_option("--chat-template-kwargs", a->kwargs, "More template variables, as a JSON object");
  return [a] { return run_template(*a); };
}

}  // namespace mtp::tools
