// Forced tool-call grammars (server/tool_grammar.h) in both syntaxes: the calls a template writes are
// accepted whole and parse into their arguments; a wrong tool, a missing required parameter, a value of the
// wrong type or text around the call is refused.
#include "server/tool_grammar.h"

#include <gtest/gtest.h>

#include <memory>

#include "chat/output_parser.h"
#include "grammar/matcher.h"

namespace mtp::server {
namespace {

using Json = nlohmann::ordered_json;

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                   "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "now"}}])");

// Whether the grammar takes the whole of `text` (a complete string of it).
bool accepts(const std::string& gbnf, const std::string& text) {
  auto g = grammar::parse_gbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status().message() << "\n" << gbnf;
  if (!g.ok()) return false;
  auto m = grammar::Matcher::create(std::make_shared<const grammar::Grammar>(std::move(*g)));
  EXPECT_TRUE(m.ok());
  auto s = m->advance(m->start(), text);
  return s.ok() && *s != grammar::Matcher::kReject && m->is_complete(*s);
}

std::string gbnf(chat::ToolCallSyntax syntax, std::string_view only = "", bool reasoning = false,
                 bool parallel = false) {
  auto text = tool_call_gbnf(kTools, only, {syntax, reasoning, parallel});
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? *text : "";
}

std::vector<chat::ToolCall> parse(const std::string& reply, bool reasoning = false) {
  chat::OutputFormat f;
  f.tools = kTools;
  f.starts_in_reasoning = reasoning;
  chat::OutputParser p(f);
  p.feed(reply);
  p.finish();
  EXPECT_TRUE(p.result().warnings.empty()) << p.result().warnings[0];
  return p.result().tool_calls;
}

TEST(ToolGrammar, JsonSyntax) {
  const std::string g = gbnf(chat::ToolCallSyntax::kJson);
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
      "\"celsius\"}}\n"
      "</tool_call>";
  EXPECT_TRUE(accepts(g, call));
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  const auto calls = parse(call);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(calls[0].arguments), Json::parse(R"({"city": "Paris", "unit": "celsius"})"));
  EXPECT_FALSE(accepts(g, "Sure. " + call));     // text before
  EXPECT_FALSE(accepts(g, call + "\n" + call));  // a second call
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                       "</tool_call>"));  // unit is required
  EXPECT_FALSE(accepts(g,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                       "\"unit\": \"kelvin\"}}\n</tool_call>"));
  EXPECT_TRUE(accepts(gbnf(chat::ToolCallSyntax::kJson, "", false, true), call + "\n" + call));
  // Named: only that tool.
  EXPECT_FALSE(accepts(gbnf(chat::ToolCallSyntax::kJson, "now"), call));
}

TEST(ToolGrammar, XmlSyntaxAfterReasoning) {
  const std::string g = gbnf(chat::ToolCallSyntax::kXml, "get_weather", true);
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose <CA>, a < b\n</parameter>\n"
      "<parameter=unit>\nfahrenheit\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</"
      "tool_call>";
  const std::string reply = "The user wants the weather.\n</think>\n\n" + call;
  EXPECT_TRUE(accepts(g, reply));
  const auto calls = parse(reply, true);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(calls[0].arguments),
            Json::parse(R"({"city": "San Jose <CA>, a < b", "unit": "fahrenheit", "days": 3})"));
  EXPECT_FALSE(accepts(g, call));  // the reasoning block must close first
  EXPECT_FALSE(accepts(g, "x</think>\n" + std::string(call).replace(call.find("fahrenheit"), 10, "kelvin")));
  EXPECT_FALSE(accepts(g, "x</think>\n" + std::string(call).replace(call.find(">\n3\n"), 4, ">\nthree\n")));
  EXPECT_FALSE(
      accepts(g, "x</think>\n" + std::string(call).replace(call.find(">\n3\n"), 4, ">\n15\n")));  // max 14
  EXPECT_TRUE(accepts(g, "x</think>\n" + std::string(call).replace(call.find(">\n3\n"), 4, ">\n14\n")));
  // A raw string value cannot hold what would end it early.
  EXPECT_FALSE(accepts(g, "x</think>\n" + std::string(call).replace(call.find("San"), 3, "</b>")));
  EXPECT_FALSE(accepts(g,
                       "x</think>\n<tool_call>\n<function=get_weather>\n<parameter=unit>\ncelsius\n"
                       "</parameter>\n</function>\n</tool_call>"));  // city is required
}

// A raw string with a pattern: the text it matches (a search, as JSON Schema has it), none of it "<"; in the
// JSON syntax the same pattern holds over the JSON string's value.
TEST(ToolGrammar, StringPatterns) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "note": {"type": "string", "pattern": "ok"}}}}}])");
  auto xml = tool_call_gbnf(tools, "", {chat::ToolCallSyntax::kXml});
  ASSERT_TRUE(xml.ok()) << xml.status().message();
  auto call = [](const std::string& key, const std::string& value) {
    return "<tool_call>\n<function=f>\n<parameter=" + key + ">\n" + value +
           "\n</parameter>\n</function>\n</tool_call>";
  };
  EXPECT_TRUE(accepts(*xml, call("code", "ABC")));
  EXPECT_FALSE(accepts(*xml, call("code", "ABCD")));
  EXPECT_FALSE(accepts(*xml, call("code", "abc")));
  EXPECT_TRUE(accepts(*xml, call("note", "all ok here")));
  EXPECT_FALSE(accepts(*xml, call("note", "all fine")));
  EXPECT_FALSE(accepts(*xml, call("note", "ok <b>")));
  auto json = tool_call_gbnf(tools, "", {chat::ToolCallSyntax::kJson});
  ASSERT_TRUE(json.ok()) << json.status().message();
  auto jcall = [](const std::string& args) {
    return "<tool_call>\n{\"name\": \"f\", \"arguments\": " + args + "}\n</tool_call>";
  };
  EXPECT_TRUE(accepts(*json, jcall(R"({"code": "XYZ", "note": "\"ok\""})")));
  EXPECT_FALSE(accepts(*json, jcall(R"({"code": "XY"})")));
  Json bad = tools;
  bad[0]["function"]["parameters"]["properties"]["code"]["pattern"] = "(?=A)";
  auto refused = tool_call_gbnf(bad, "", {chat::ToolCallSyntax::kXml});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("lookarounds are not supported"), std::string::npos)
      << refused.status().message();
}

// A raw string with length bounds: that many characters, none of them "<".
TEST(ToolGrammar, XmlStringLengths) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"code": {"type": "string", "minLength": 2, "maxLength": 3}}}}}])");
  auto g = tool_call_gbnf(tools, "", {chat::ToolCallSyntax::kXml});
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto call = [](const std::string& code) {
    return "<tool_call>\n<function=f>\n<parameter=code>\n" + code +
           "\n</parameter>\n</function>\n</tool_call>";
  };
  EXPECT_TRUE(accepts(*g, call("ab")));
  EXPECT_TRUE(accepts(*g, call("a c")));
  EXPECT_FALSE(accepts(*g, call("a")));
  EXPECT_FALSE(accepts(*g, call("abcd")));
  EXPECT_FALSE(accepts(*g, call("a<b")));
  EXPECT_TRUE(accepts(*g, "<tool_call>\n<function=f>\n</function>\n</tool_call>"));  // code is optional
}

TEST(ToolGrammar, Errors) {
  auto named = tool_call_gbnf(kTools, "book_flight", {});
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.status().message(), "no tool in 'tools' is named \"book_flight\"");
  Json tools = kTools;
  tools[0]["function"]["parameters"]["properties"]["days"]["multipleOf"] = 2;
  auto bad = tool_call_gbnf(tools, "", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'multipleOf' at tools[0].function.parameters#/properties/days"),
            std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(tool_call_gbnf(Json::parse(R"([{"type": "function"}])"), "", {}).ok());
  // Names and keys with quotes, backslashes and newlines are escaped; odd parameters are a clear error or
  // nothing to write, in both syntaxes.
  const Json odd = Json::parse(R"([
    {"type": "function", "function": {"name": "a\"b\\\n", "parameters": {"type": "object",
      "properties": {"k\"\n": {"type": "integer"}, "s": {"type": "string", "maxLength": -1}}}}},
    {"type": "function", "function": {"name": "p", "parameters": "x"}}])");
  for (auto syntax : {chat::ToolCallSyntax::kJson, chat::ToolCallSyntax::kXml}) {
    auto quoted = tool_call_gbnf(odd, "a\"b\\\n", {syntax});
    EXPECT_FALSE(quoted.ok());  // maxLength -1
    Json fixed = odd;
    fixed[0]["function"]["parameters"]["properties"].erase("s");
    quoted = tool_call_gbnf(fixed, "a\"b\\\n", {syntax});
    ASSERT_TRUE(quoted.ok()) << quoted.status().message();
    EXPECT_TRUE(grammar::parse_gbnf(*quoted).ok()) << *quoted;
    const std::string args = syntax == chat::ToolCallSyntax::kJson
                                 ? "{\"name\": \"a\\\"b\\\\\\n\", \"arguments\": {\"k\\\"\\n\": 7}}"
                                 : "<function=a\"b\\\n>\n<parameter=k\"\n>\n7\n</parameter>\n</function>";
    EXPECT_TRUE(accepts(*quoted, "<tool_call>\n" + args + "\n</tool_call>")) << *quoted;
    auto plain = tool_call_gbnf(odd, "p", {syntax});
    EXPECT_EQ(plain.ok(), syntax == chat::ToolCallSyntax::kXml) << plain.status().message();
  }
}

}  // namespace
}  // namespace mtp::server
