// The tool-call probe's scenarios: the built-in set and the scenarios-file format (docs/gate.md).
#include <fstream>
#include <sstream>

#include "base/check.h"
#include "gate/schema.h"
#include "gate/tool_probe.h"

namespace mtp::gate {
namespace {

// Built-in scenarios in the file format, so the built-ins and users' files go through one parser.
// clang-format off
constexpr const char* kBuiltin = R"json({"scenarios": [
 {"name": "weather",
  "tools": [{"type": "function", "function": {"name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "description": "City name, e.g. Paris"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
     "required": ["city"], "additionalProperties": false}}}],
  "messages": [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}],
  "turns": [
   {"expect": {"function": "get_weather", "arguments": {"city": "Paris"}},
    "result": "{\"city\": \"Paris\", \"temperature\": 18, \"unit\": \"celsius\", \"sky\": \"cloudy\"}"},
   {"expect": null},
   {"user": "And in Tokyo?",
    "expect": {"function": "get_weather", "arguments": {"city": "Tokyo"}},
    "result": "{\"city\": \"Tokyo\", \"temperature\": 24, \"unit\": \"celsius\", \"sky\": \"clear\"}"}]},
 {"name": "calculator",
  "tools": [{"type": "function", "function": {"name": "calculate",
    "description": "Evaluate an arithmetic expression exactly",
    "parameters": {"type": "object", "properties": {
      "expression": {"type": "string", "description": "e.g. 2 * (3 + 4)"}},
     "required": ["expression"], "additionalProperties": false}}}],
  "messages": [{"role": "system", "content": "Use the calculate tool for every arithmetic question."},
               {"role": "user", "content": "What is 1234 * 5678? Use the tool."}],
  "turns": [
   {"expect": {"function": "calculate", "arguments": {}}, "result": "7006652"},
   {"expect": null}]},
 {"name": "search",
  "tools": [{"type": "function", "function": {"name": "web_search",
    "description": "Search the web",
    "parameters": {"type": "object", "properties": {
      "query": {"type": "string"},
      "max_results": {"type": "integer"},
      "sites": {"type": "array", "items": {"type": "string"}}},
     "required": ["query"], "additionalProperties": false}}},
   {"type": "function", "function": {"name": "open_page",
    "description": "Fetch a page's text by URL",
    "parameters": {"type": "object", "properties": {"url": {"type": "string"}},
     "required": ["url"], "additionalProperties": false}}}],
  "messages": [{"role": "user", "content": "Search the web for the tallest building in the world, then open the first result."}],
  "turns": [
   {"expect": {"function": "web_search", "arguments": {}},
    "result": "[{\"title\": \"Burj Khalifa\", \"url\": \"https://example.com/burj-khalifa\"}]"},
   {"expect": {"function": "open_page", "arguments": {"url": "https://example.com/burj-khalifa"}},
    "result": "The Burj Khalifa in Dubai is 828 metres tall."},
   {"expect": null}]}
]})json";
// clang-format on

Expected<ToolTurn> parse_turn(const Json& t, const std::string& where) {
  ToolTurn turn;
  if (!t.is_object()) return invalid_argument(where, ": not an object");
  if (auto it = t.find("user"); it != t.end()) {
    if (!it->is_string()) return invalid_argument(where, ": \"user\" must be a string");
    turn.user = it->get<std::string>();
  }
  const auto expect = t.find("expect");
  if (expect == t.end() || expect->is_null()) return turn;
  if (!expect->is_object() || !expect->contains("function") || !(*expect)["function"].is_string() ||
      (*expect)["function"].get<std::string>().empty())
    return invalid_argument(where, ": \"expect\" must be null or {\"function\": NAME, \"arguments\": {...}}");
  turn.function = (*expect)["function"].get<std::string>();
  if (auto it = expect->find("arguments"); it != expect->end()) {
    if (!it->is_object()) return invalid_argument(where, ": \"expect.arguments\" must be an object");
    turn.arguments = *it;
  }
  const auto result = t.find("result");
  if (result == t.end() || !result->is_string())
    return invalid_argument(where,
                            ": a turn that expects a call needs \"result\" (the tool's reply, a string)");
  turn.result = result->get<std::string>();
  return turn;
}

bool names_tool(const Json& tools, const std::string& name) {
  for (const Json& t : tools)
    if (t.is_object() && t.contains("function") && t["function"].is_object() &&
        t["function"].value("name", "") == name)
      return true;
  return false;
}

Expected<ToolScenario> parse_scenario(const Json& j, const std::string& where) {
  if (!j.is_object()) return invalid_argument(where, ": not an object");
  ToolScenario s;
  if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
    return invalid_argument(where, ": \"name\" must be a non-empty string");
  s.name = j["name"].get<std::string>();
  const std::string at = str_cat(where, " '", s.name, "'");
  if (!j.contains("tools") || !j["tools"].is_array() || j["tools"].empty())
    return invalid_argument(at, ": \"tools\" must be a non-empty array");
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    return invalid_argument(at, ": \"messages\" must be a non-empty array");
  if (!j.contains("turns") || !j["turns"].is_array() || j["turns"].empty())
    return invalid_argument(at, ": \"turns\" must be a non-empty array");
  s.tools = j["tools"];
  for (const Json& tool : s.tools) {
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object() ||
        !tool["function"].contains("name") || !tool["function"]["name"].is_string())
      return invalid_argument(at, ": each tool needs {\"function\": {\"name\", \"parameters\"}}");
    const Json& fn = tool["function"];
    if (fn.contains("parameters")) {
      if (Status st = check_schema(fn["parameters"]); !st.ok())
        return invalid_argument(at, ": tool '", fn["name"].get<std::string>(), "': ", st.message());
    }
  }
  s.messages = j["messages"];
  for (size_t i = 0; i < j["turns"].size(); ++i) {
    MTP_ASSIGN_OR_RETURN(ToolTurn turn, parse_turn(j["turns"][i], str_cat(at, ": turn ", i + 1)));
    if (!turn.function.empty() && !names_tool(s.tools, turn.function))
      return invalid_argument(at, ": turn ", i + 1, " expects '", turn.function, "', which no tool defines");
    s.turns.push_back(std::move(turn));
  }
  return s;
}

}  // namespace

Expected<std::vector<ToolScenario>> parse_tool_scenarios(const std::string& text, const std::string& source) {
  const Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) return invalid_argument(source, ": not valid JSON");
  if (!j.is_object() || !j.contains("scenarios") || !j["scenarios"].is_array() || j["scenarios"].empty())
    return invalid_argument(source, ": needs {\"scenarios\": [...]} with at least one scenario");
  std::vector<ToolScenario> out;
  for (size_t i = 0; i < j["scenarios"].size(); ++i) {
    MTP_ASSIGN_OR_RETURN(ToolScenario s,
                         parse_scenario(j["scenarios"][i], str_cat(source, ": scenario ", i + 1)));
    out.push_back(std::move(s));
  }
  return out;
}

Expected<std::vector<ToolScenario>> read_tool_scenarios(const std::string& path) {
  std::ifstream f(path);
  if (!f) return not_found("cannot open '", path, "'");
  std::stringstream text;
  text << f.rdbuf();
  return parse_tool_scenarios(text.str(), path);
}

std::vector<ToolScenario> builtin_tool_scenarios() {
  auto s = parse_tool_scenarios(kBuiltin, "built-in scenarios");
  MTP_CHECK(s.ok(), s.status().message());
  return *s;
}

}  // namespace mtp::gate
