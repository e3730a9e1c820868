#include "server/tool_grammar.h"

#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace mtp::server {
namespace {

using Json = nlohmann::ordered_json;

// The wrapper's own rules. Generated rule names start with a schema's rule name ("tool-"), "ref-" or a
// primitive's, so these never collide with them.
constexpr const char* kThinkRule = R"(call-think ::= ([^<] | "<" [^/])* "</think>" [\n]{0,2})";
// A raw XML parameter value: no "</" (a closing tag), "<p" (the next parameter) or "<<" (so every "<" is
// followed by something harmless), which is all the output parser needs to find where the value ends.
constexpr const char* kXmlTextRule = R"(call-text ::= ([^<] | "<" [^/p<])*)";

struct Tool {
  size_t index = 0;  // in the request's tools
  std::string name;
  const Json* parameters = nullptr;
};

Expected<std::vector<Tool>> select_tools(const Json& tools, std::string_view only) {
  if (!tools.is_array()) return invalid_argument("'tools' must be an array");
  std::vector<Tool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const auto fn = t.is_object() ? t.find("function") : t.end();
    if (!t.is_object() || fn == t.end() || !fn->is_object() || !fn->contains("name") ||
        !(*fn)["name"].is_string())
      return invalid_argument(
          str_cat("tools[", i, "] is not {\"type\": \"function\", \"function\": {\"name\"}}"));
    Tool tool{i, (*fn)["name"].get<std::string>(), nullptr};
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) tool.parameters = &*p;
    if (only.empty() || tool.name == only) out.push_back(std::move(tool));
  }
  if (out.empty())
    return invalid_argument(only.empty() ? std::string("'tools' is empty")
                                         : str_cat("no tool in 'tools' is named \"", only, "\""));
  return out;
}

const Json& any_object() {
  static const Json schema = {{"type", "object"}};
  return schema;
}

std::string schema_at(const Tool& t) {
  return str_cat("tools[", t.index, "].function.parameters#");
}

// {"name": "NAME", "arguments": ARGS}, as the templates write it.
std::string json_call(const Tool& t, std::vector<grammar::NamedSchema>& schemas) {
  const std::string args = str_cat("tool-", t.index, "-args");
  schemas.push_back({args, t.parameters ? t.parameters : &any_object(), schema_at(t)});
  return str_cat(grammar::gbnf_literal(str_cat("{\"name\": ", Json(t.name).dump(), ", \"arguments\": ")), " ",
                 args, " \"}\"");
}

// A string enum or const: its values written bare. Empty when the schema is not one.
std::string bare_strings(const Json& schema) {
  std::vector<Json> values;
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array()) values.assign(e->begin(), e->end());
  if (auto c = schema.find("const"); c != schema.end()) values = {*c};
  std::string out;
  for (const Json& v : values) {
    if (!v.is_string()) return "";
    out += (out.empty() ? "(" : " | ") + grammar::gbnf_literal(v.get<std::string>());
  }
  return out.empty() ? out : out + ")";
}

// A raw string parameter: call-text, or with minLength/maxLength that many characters none of which is "<"
// (a count the grammar can keep exactly), or with a pattern the text it matches, again without "<". Empty
// when a bound is not a count or the pattern is refused (the schema compiler then says why).
std::string raw_string(const Json& schema) {
  if (auto p = schema.find("pattern"); p != schema.end()) {
    if (!p->is_string() || schema.contains("minLength") || schema.contains("maxLength")) return "";
    auto text = grammar::raw_pattern_gbnf(p->get<std::string>(), "#");
    if (!text) return "";
    return text->empty() ? "[^<]{0}" : *text;
  }
  auto count = [&](const char* key, int64_t fallback) -> int64_t {
    const auto it = schema.find(key);
    if (it == schema.end()) return fallback;
    return it->is_number_unsigned() && it->get<uint64_t>() <= grammar::kMaxRepetition ? it->get<int64_t>()
                                                                                      : -1;
  };
  const int64_t lo = count("minLength", 0), hi = count("maxLength", -2);
  if (lo < 0 || hi == -1 || (hi >= 0 && hi < lo)) return "";
  if (lo == 0 && hi == -2) return "call-text";
  return str_cat("[^<]{", lo, ",", hi >= 0 ? std::to_string(hi) : "", "}");
}

bool says_string(const Json& schema) {
  const auto type = schema.find("type");
  if (type == schema.end()) return false;
  if (type->is_string()) return *type == "string";
  return type->is_array() && std::find(type->begin(), type->end(), Json("string")) != type->end();
}

// <function=NAME>\n then each parameter as <parameter=KEY>\nVALUE\n</parameter>\n (required ones always,
// optional ones maybe, in the schema's order), then </function>.
Expected<std::string> xml_call(const Tool& t, std::vector<grammar::NamedSchema>& schemas) {
  std::string out = grammar::gbnf_literal(str_cat("<function=", t.name, ">\n"));
  const Json* props = nullptr;
  std::vector<std::string> required;
  if (t.parameters != nullptr && t.parameters->is_object()) {
    if (auto p = t.parameters->find("properties"); p != t.parameters->end() && p->is_object()) props = &*p;
    if (auto r = t.parameters->find("required"); r != t.parameters->end() && r->is_array())
      for (const Json& name : *r)
        if (name.is_string()) required.push_back(name.get<std::string>());
  }
  if (props != nullptr) {
    size_t k = 0;
    for (const auto& [key, sub] : props->items()) {
      std::string value = sub.is_object() ? bare_strings(sub) : "";
      if (value.empty() && sub.is_object() && says_string(sub)) value = raw_string(sub);
      if (value.empty()) {
        value = str_cat("tool-", t.index, "-p", k);
        schemas.push_back({value, &sub, str_cat(schema_at(t), "/properties/", key)});
      }
      const bool req = std::find(required.begin(), required.end(), key) != required.end();
      const std::string param = str_cat(grammar::gbnf_literal(str_cat("<parameter=", key, ">\n")), " ", value,
                                        " ", grammar::gbnf_literal("\n</parameter>\n"));
      out += req ? " " + param : " (" + param + ")?";
      ++k;
    }
  }
  return out + " " + grammar::gbnf_literal("</function>");
}

}  // namespace

Expected<std::string> tool_call_gbnf(const Json& tools, std::string_view only,
                                     const ToolCallGrammarOptions& options) {
  MTP_ASSIGN_OR_RETURN(const std::vector<Tool> selected, select_tools(tools, only));
  std::vector<grammar::NamedSchema> schemas;
  std::string calls;
  for (const Tool& t : selected) {
    std::string call;
    if (options.syntax == chat::ToolCallSyntax::kJson) {
      call = json_call(t, schemas);
    } else {
      MTP_ASSIGN_OR_RETURN(call, xml_call(t, schemas));
    }
    calls += (calls.empty() ? "" : " | ") + call;
  }
  std::string out = str_cat("call ::= ", grammar::gbnf_literal(str_cat(kToolCallOpen, "\n")), " (", calls,
                            ") \"\\n</tool_call>\"\n");
  out += str_cat("root ::= ", options.starts_in_reasoning ? "call-think " : "", "call",
                 options.parallel ? " (\"\\n\" call)*" : "", "\n");
  if (options.starts_in_reasoning) out += str_cat(kThinkRule, "\n");
  if (options.syntax == chat::ToolCallSyntax::kXml) out += str_cat(kXmlTextRule, "\n");
  MTP_ASSIGN_OR_RETURN(const std::string rules, grammar::json_schema_rules(schemas));
  return out + rules;
}

}  // namespace mtp::server
