// ChatTemplate: OpenAI-style requests rendered with the model's template, as transformers renders them.
#include "chat/chat_template.h"

#include "base/check.h"

namespace mtp::chat {

const char* const kChatMlTemplate =
    R"JINJA({#- mtp.cpp built-in ChatML template, used when a model has no tokenizer.chat_template. -#}
{%- macro text(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content if part.type == 'text' -%}
            {{- part.text -}}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- set first_system = messages and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if first_system -%}
        {{- text(messages[0].content) + '\n\n' -}}
    {%- endif -%}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif first_system -%}
    {{- '<|im_start|>system\n' + text(messages[0].content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if not (loop.first and first_system) -%}
        {%- if message.role == 'tool' -%}
            {%- if loop.first or loop.previtem.role != 'tool' -%}
                {{- '<|im_start|>user' -}}
            {%- endif -%}
            {{- '\n<tool_response>\n' + text(message.content) + '\n</tool_response>' -}}
            {%- if loop.last or loop.nextitem.role != 'tool' -%}
                {{- '<|im_end|>\n' -}}
            {%- endif -%}
        {%- else -%}
            {{- '<|im_start|>' + message.role + '\n' + text(message.content) -}}
            {%- for call in message.tool_calls or [] -%}
                {%- set fn = call.function if call.function is defined else call -%}
                {{- ('\n' if (loop.first and text(message.content)) or not loop.first else '') -}}
                {{- '<tool_call>\n{"name": ' + (fn.name | tojson) + ', "arguments": ' + (fn.arguments | tojson) + '}\n</tool_call>' -}}
            {%- endfor -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)JINJA";

namespace {

std::string at(const std::string& path, const std::string& what) {
  return path + ": " + what;
}

Expected<Json> normalize_content(const Json& content, const std::string& path) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array())
    return invalid_argument(at(path, "content must be a string, null or an array of parts"));
  for (size_t k = 0; k < content.size(); ++k) {
    const Json& part = content[k];
    std::string p = str_cat(path, "[", k, "]");
    if (!part.is_object()) return invalid_argument(at(p, "content part must be an object"));
    auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      return invalid_argument(at(p, "content part needs a string \"type\""));
    if (*type != "text") {
      return invalid_argument(
          at(p, str_cat("content part type '", type->get<std::string>(), "' is not supported (text only)")));
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string())
      return invalid_argument(at(p, "text part needs a string \"text\""));
  }
  return content;
}

Expected<Json> normalize_tool_call(const Json& call, const std::string& path) {
  if (!call.is_object()) return invalid_argument(at(path, "tool call must be an object"));
  Json out = call;
  if (auto type = call.find("type"); type != call.end() && *type != "function") {
    return invalid_argument(at(path, "tool call \"type\" must be \"function\""));
  }
  auto fn = out.find("function");
  if (fn == out.end() || !fn->is_object())
    return invalid_argument(at(path, "tool call needs a \"function\" object"));
  auto name = fn->find("name");
  if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
    return invalid_argument(at(path + ".function", "needs a non-empty string \"name\""));
  }
  auto args = fn->find("arguments");
  if (args == fn->end() || args->is_null()) {
    (*fn)["arguments"] = Json::object();
  } else if (args->is_string()) {
    Json parsed = Json::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      return invalid_argument(at(path + ".function.arguments", "not a JSON object"));
    }
    *args = std::move(parsed);
  } else if (!args->is_object()) {
    return invalid_argument(at(path + ".function.arguments", "must be an object or a JSON string of one"));
  }
  return out;
}

}  // namespace

Expected<Json> normalize_messages(const Json& messages) {
  if (!messages.is_array()) return invalid_argument("messages must be an array");
  if (messages.empty()) return invalid_argument("messages must not be empty");
  Json out = Json::array();
  for (size_t k = 0; k < messages.size(); ++k) {
    std::string path = str_cat("messages[", k, "]");
    const Json& m = messages[k];
    if (!m.is_object()) return invalid_argument(at(path, "message must be an object"));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string() || role->get<std::string>().empty()) {
      return invalid_argument(at(path, "message needs a non-empty string \"role\""));
    }
    Json msg = m;
    if (auto c = m.find("content"); c != m.end()) {
      MTP_ASSIGN_OR_RETURN(msg["content"], normalize_content(*c, path + ".content"));
    }
    if (auto rc = m.find("reasoning_content"); rc != m.end() && !rc->is_null() && !rc->is_string()) {
      return invalid_argument(at(path + ".reasoning_content", "must be a string"));
    }
    if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      if (*role != "assistant") return invalid_argument(at(path, "only assistant messages have tool_calls"));
      if (!calls->is_array()) return invalid_argument(at(path + ".tool_calls", "must be an array"));
      Json list = Json::array();
      for (size_t c = 0; c < calls->size(); ++c) {
        MTP_ASSIGN_OR_RETURN(Json call,
                             normalize_tool_call((*calls)[c], str_cat(path, ".tool_calls[", c, "]")));
        list.push_back(std::move(call));
      }
      msg["tool_calls"] = std::move(list);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

Status validate_tools(const Json& tools) {
  if (tools.is_null()) return Status::Ok();
  if (!tools.is_array()) return invalid_argument("tools must be an array");
  for (size_t k = 0; k < tools.size(); ++k) {
    std::string path = str_cat("tools[", k, "]");
    const Json& t = tools[k];
    if (!t.is_object()) return invalid_argument(at(path, "tool must be an object"));
    if (auto type = t.find("type"); type == t.end() || *type != "function") {
      return invalid_argument(at(path, "tool \"type\" must be \"function\""));
    }
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object())
      return invalid_argument(at(path, "tool needs a \"function\" object"));
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
      return invalid_argument(at(path + ".function", "needs a non-empty string \"name\""));
    }
    if (auto params = fn->find("parameters");
        params != fn->end() && !params->is_object() && !params->is_null()) {
      return invalid_argument(at(path + ".function.parameters", "must be a JSON schema object"));
    }
  }
  return Status::Ok();
}

Expected<ChatTemplate> ChatTemplate::create(std::string_view source, std::string bos_token,
                                            std::string eos_token, JinjaOptions options) {
  MTP_ASSIGN_OR_RETURN(JinjaTemplate t, JinjaTemplate::parse(source, options));
  ChatTemplate out;
  out.template_ = std::move(t);
  out.source_ = std::string(source);
  out.bos_ = std::move(bos_token);
  out.eos_ = std::move(eos_token);
  return out;
}

ChatTemplate ChatTemplate::chatml(std::string bos_token, std::string eos_token) {
  auto t = create(kChatMlTemplate, std::move(bos_token), std::move(eos_token));
  MTP_CHECK(t.ok(), "built-in ChatML template does not parse: ", t.status().message());
  t->fallback_ = true;
  return std::move(t).value();
}

Expected<std::string> ChatTemplate::render(const ChatRequest& request) const {
  MTP_ASSIGN_OR_RETURN(Json messages, normalize_messages(request.messages));
  MTP_RETURN_IF_ERROR(validate_tools(request.tools));
  if (!request.extra_context.is_null() && !request.extra_context.is_object()) {
    return invalid_argument("chat_template_kwargs must be an object");
  }
  // The variables transformers' apply_chat_template passes (tools=None when there are none).
  Json ctx = Json::object();
  ctx["messages"] = std::move(messages);
  ctx["tools"] = request.tools;
  ctx["add_generation_prompt"] = request.add_generation_prompt;
  ctx["bos_token"] = bos_;
  ctx["eos_token"] = eos_;
  if (request.enable_thinking) ctx["enable_thinking"] = *request.enable_thinking;
  if (request.extra_context.is_object()) {
    for (const auto& [k, v] : request.extra_context.items()) ctx[k] = v;
  }
  return template_.render(ctx);
}

std::vector<size_t> ChatTemplate::message_starts(const ChatRequest& request, std::string_view prompt,
                                                 size_t last_n) const {
  std::vector<size_t> out;
  if (!request.messages.is_array()) return out;
  const size_t n = request.messages.size();
  ChatRequest prefix = request;
  prefix.add_generation_prompt = false;
  for (size_t i = n > last_n ? n - last_n : 1; i < n; ++i) {
    if (i == 0) continue;
    prefix.messages = Json::array();
    for (size_t k = 0; k < i; ++k) prefix.messages.push_back(request.messages[k]);
    Expected<std::string> text = render(prefix);
    // A template may refuse a prefix (no user message yet) or render earlier messages differently once more
    // follow them (reasoning kept only after the last user turn): then there is no offset for this message.
    if (!text.ok() || text->empty() || !prompt.starts_with(*text)) continue;
    if (out.empty() || text->size() > out.back()) out.push_back(text->size());
  }
  return out;
}

OutputFormat ChatTemplate::output_format(const ChatRequest& request, std::string_view prompt,
                                         ReasoningFormat reasoning) const {
  OutputFormat f;
  f.reasoning = reasoning;
  size_t end = prompt.find_last_not_of(" \t\r\n");
  std::string_view trimmed = end == std::string_view::npos ? std::string_view() : prompt.substr(0, end + 1);
  f.starts_in_reasoning = trimmed.size() >= 7 && trimmed.substr(trimmed.size() - 7) == "<think>";
  f.parse_tool_calls = request.tools.is_array() && !request.tools.empty();
  f.tools = request.tools;
  return f;
}

}  // namespace mtp::chat
