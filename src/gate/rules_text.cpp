// Rules files as JSON or TOML text (docs/gate.md). toml++ was chosen over yaml-cpp: TOML maps one to one onto
// the JSON the rules are hashed as (no implicit typing of bare words, no anchors or merge keys), and its
// parser reports the line and column of every error.
#include "rules_text.h"

#include <toml++/toml.h>
#include <cmath>

namespace mtp::gate {
namespace {

// The 1-based line and column of byte offset `at` (exclusive) of `text`.
std::pair<int64_t, int64_t> line_and_column(const std::string& text, size_t at) {
  int64_t line = 1, column = 1;
  for (size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line, column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// nlohmann's message is "[json.exception.parse_error.101] parse error at line L, column C: WHAT"; the part
// after the position says what was wrong.
std::string json_error_what(const std::string& message) {
  const size_t column = message.find("column ");
  const size_t colon = column == std::string::npos ? column : message.find(": ", column);
  return colon == std::string::npos ? message : message.substr(colon + 2);
}

Status toml_value_error(const toml::node& node, const std::string& source, const char* what) {
  return invalid_argument(source, ":", node.source().begin.line, ":", node.source().begin.column, ": ", what);
}

Expected<nlohmann::json> to_json(const toml::node& node, const std::string& source);

Expected<nlohmann::json> table_to_json(const toml::table& table, const std::string& source) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : table) {
    MTP_ASSIGN_OR_RETURN(out[std::string(key.str())], to_json(value, source));
  }
  return out;
}

Expected<nlohmann::json> to_json(const toml::node& node, const std::string& source) {
  if (const toml::table* t = node.as_table()) return table_to_json(*t, source);
  if (const toml::array* a = node.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const toml::node& item : *a) {
      MTP_ASSIGN_OR_RETURN(nlohmann::json j, to_json(item, source));
      out.push_back(std::move(j));
    }
    return out;
  }
  if (const auto* s = node.as_string()) return nlohmann::json(s->get());
  if (const auto* i = node.as_integer()) return nlohmann::json(i->get());
  if (const auto* b = node.as_boolean()) return nlohmann::json(b->get());
  if (const auto* f = node.as_floating_point()) {
    if (!std::isfinite(f->get())) return toml_value_error(node, source, "nan and inf have no JSON form");
    return nlohmann::json(f->get());
  }
  return toml_value_error(node, source, "a date or time has no JSON form; quote it as a string");
}

}  // namespace

Expected<RulesDocument> parse_json_document(const std::string& text, const std::string& source) {
  RulesDocument doc;
  try {
    doc.json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based, the byte the parser stopped at; the position is that of the byte before it.
    const auto [line, column] = line_and_column(text, e.byte > 0 ? e.byte - 1 : 0);
    return corrupt(source, ":", line, ":", column, ": ", json_error_what(e.what()));
  }
  return doc;
}

Expected<RulesDocument> parse_toml_document(const std::string& text, const std::string& source) {
  RulesDocument doc;
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return corrupt(source, ":", e.source().begin.line, ":", e.source().begin.column, ": ", e.description());
  }
  MTP_ASSIGN_OR_RETURN(doc.json, table_to_json(table, source));
  if (const toml::array* rules = table["rules"].as_array()) {
    for (const toml::node& rule : *rules) doc.rule_lines.push_back(rule.source().begin.line);
  }
  return doc;
}

}  // namespace mtp::gate
