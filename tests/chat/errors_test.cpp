// Bad templates, bad messages and resource limits: clear errors naming the line and construct, no crash.
#include <gtest/gtest.h>

#include "chat/chat_template.h"

namespace mtp::chat {
namespace {

std::string parse_error(const std::string& src) {
  auto t = JinjaTemplate::parse(src);
  EXPECT_FALSE(t.ok()) << "parsed: " << src;
  return t.ok() ? "" : t.status().message();
}

std::string render_error(const std::string& src, const Json& ctx = Json::object(), JinjaOptions opt = {}) {
  auto t = JinjaTemplate::parse(src, opt);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return "";
  auto r = t->render(ctx);
  EXPECT_FALSE(r.ok()) << "rendered: " << src;
  return r.ok() ? "" : r.status().message();
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(TemplateErrors, Syntax) {
  EXPECT_HAS(parse_error("a\nb\n{% for x in y %}\n{{ x }}"), "line 4: unclosed 'for' opened on line 3");
  EXPECT_HAS(parse_error("{% if x %}a{% endfor %}"), "line 1: unexpected '{% endfor %}' inside 'if'");
  EXPECT_HAS(parse_error("{{ x | nosuchfilter }}"), "line 1: unknown filter 'nosuchfilter'");
  EXPECT_HAS(parse_error("\n{{ x is nosuchtest }}"), "line 2: unknown test 'nosuchtest'");
  EXPECT_HAS(parse_error("{% include 'x' %}"), "unsupported tag 'include'");
  EXPECT_HAS(parse_error("{% extends 'x' %}"), "unsupported tag 'extends'");
  EXPECT_HAS(parse_error("{% frobnicate %}"), "unknown tag 'frobnicate'");
  EXPECT_HAS(parse_error("{{ x "), "unclosed '{{'");
  EXPECT_HAS(parse_error("{% if x "), "unclosed '{%'");
  EXPECT_HAS(parse_error("{# never closed"), "unclosed comment");
  EXPECT_HAS(parse_error("{{ 'abc }}"), "unterminated string");
  EXPECT_HAS(parse_error("{{ (1 }}"), "line 1");
  EXPECT_HAS(parse_error("{{ 1 + }}"), "expected an expression, got '}}'");
  EXPECT_HAS(parse_error("{% if %}{% endif %}"), "expected an expression");
  EXPECT_HAS(parse_error("{% break %}"), "'break' outside of a loop");
  EXPECT_HAS(parse_error("{% for x in y recursive %}{% endfor %}"), "unsupported: recursive");
  EXPECT_HAS(parse_error("{{ f(*args) }}"), "unsupported: *args");
  EXPECT_HAS(parse_error("{{ 99999999999999999999 }}"), "integer literal out of range");
  EXPECT_HAS(parse_error("{{ x ? y }}"), "unexpected character '?'");
  EXPECT_HAS(parse_error("{% raw %}never ends"), "unclosed 'raw'");
}

TEST(TemplateErrors, Runtime) {
  EXPECT_HAS(render_error("ok\n{{ raise_exception('Bad role') }}"), "line 2: template raised: Bad role");
  EXPECT_HAS(render_error("{{ x.y }}"), "'x' is undefined");
  EXPECT_HAS(render_error("{{ d.a.b }}", {{"d", Json::object()}}), "'dict object' has no attribute 'a'");
  EXPECT_HAS(render_error("{{ 'a' + 1 }}"), "can only concatenate str");
  EXPECT_HAS(render_error("\n\n{% for x in 3 %}{% endfor %}"), "line 3: 'int' object is not iterable");
  EXPECT_HAS(render_error("{{ [1].append(2) }}"), "unsupported: list.append");
  EXPECT_HAS(render_error("{{ 'x'.format(1) }}"), "unsupported: str.format");
  EXPECT_HAS(render_error("{{ '%s' % 1 }}"), "unsupported: printf-style");
  EXPECT_HAS(render_error("{{ 1 // 0 }}"), "division or modulo by zero");
  EXPECT_HAS(render_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), "takes not more than 1 argument");
  EXPECT_HAS(render_error("{% macro m(a) %}{% endmacro %}{{ m(b=2) }}"), "no keyword argument 'b'");
  EXPECT_HAS(render_error("{% set d = {} %}{% set d.x = 1 %}"), "not a namespace()");
  EXPECT_HAS(render_error("{{ x | tojson }}"), "not JSON serializable");
  EXPECT_HAS(render_error("{{ 9223372036854775807 + 1 }}"), "integer overflow");
  EXPECT_HAS(render_error("{{ range(10000000) | length }}"), "range() too large");
}

TEST(TemplateErrors, Limits) {
  // Unbounded macro recursion.
  EXPECT_HAS(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
             "macro calls nested deeper");
  // Output size.
  JinjaOptions small;
  small.max_output_bytes = 1000;
  EXPECT_HAS(render_error("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", Json::object(), small),
             "template output exceeds 1000 bytes");
  // Runaway loops.
  JinjaOptions few;
  few.max_steps = 10000;
  EXPECT_HAS(render_error("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                          Json::object(), few),
             "evaluation steps");
  // Deeply nested syntax and input.
  EXPECT_HAS(parse_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
             "nested too deeply");
  EXPECT_HAS(parse_error(std::string(2000, '{') + "%"), "line 1");
  Json deep = Json::array();
  for (int k = 0; k < 1000; ++k) deep = Json::array({deep});
  EXPECT_HAS(render_error("{{ x }}", {{"x", deep}}), "nested too deeply");
  // Huge repetition.
  EXPECT_HAS(render_error("{{ 'x' * 1000000000000 }}"), "too large");
}

// Inputs that overflowed the stack (found by fuzz/fuzz_chat_template.cpp and by probing around its
// findings under AddressSanitizer): each must be a clear error instead.
std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int k = 0; k < n; ++k) out += s;
  return out;
}

TEST(TemplateErrors, LongChainsAreRefusedAtParse) {
  // Operators, attribute and subscript chains and filter chains are parsed in loops, one tree level each.
  EXPECT_HAS(parse_error("{{ 1" + repeat(" ~ 1", 5000) + " }}"), "line 1: expression nested too deeply");
  EXPECT_HAS(parse_error("{{ 1" + repeat(" + 1", 5000) + " }}"), "expression nested too deeply");
  EXPECT_HAS(parse_error("{{ x" + repeat("[0]", 3000) + " }}"), "expression nested too deeply");
  EXPECT_HAS(parse_error("{{ x" + repeat(".a", 3000) + " }}"), "expression nested too deeply");
  EXPECT_HAS(parse_error("{{ 1" + repeat("|string", 5000) + " }}"), "expression nested too deeply");
  EXPECT_HAS(parse_error("{{ 1" + repeat(" if 1", 3000) + " }}"), "expression nested too deeply");
  // Chains within the limit still parse and render.
  auto t = JinjaTemplate::parse("{{ 1" + repeat(" ~ 1", 200) + " }}");
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto r = t->render(Json::object());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, std::string(201, '1'));
}

TEST(TemplateErrors, WorkIsChargedBySize) {
  // Growing a list or a string by concatenation in a loop is quadratic: each copy costs steps by its size.
  JinjaOptions few;
  few.max_steps = 100000;
  EXPECT_HAS(
      render_error("{% set ns = namespace(a=[]) %}{% for i in range(5000) %}{% set ns.a = ns.a + [i] %}"
                   "{% endfor %}",
                   Json::object(), few),
      "evaluation steps");
  EXPECT_HAS(render_error("{% set ns = namespace(s='') %}{% for i in range(5000) %}{% set ns.s = ns.s ~ "
                          "('x' * 64) %}{% endfor %}",
                          Json::object(), few),
             "evaluation steps");
  // A repetition count that wrapped size_t around when multiplied by the length passed the size check.
  EXPECT_HAS(render_error("{{ ('abcd' * 4611686018427387904) | length }}"), "sequence repetition too large");
  // Empty sequences repeat to themselves at once, and range() stops short of INT64_MAX without overflow.
  auto t = JinjaTemplate::parse(
      "{{ ('' * 9223372036854775807) | length }} {{ ([] * 9223372036854775807) | length }} "
      "{{ range(9223372036854775800, 9223372036854775807, 5) | list }} {{ range(-9223372036854775807, "
      "-9223372036854775807 - 1, -9223372036854775807) | list }} {{ range(5, 0, -2) | list }}");
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto r = t->render(Json::object());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "0 0 [9223372036854775800, 9223372036854775805] [-9223372036854775807] [5, 3, 1]");
}

TEST(TemplateErrors, DeepEvaluationIsRefused) {
  // Each call of the macro evaluates a 240-level expression; 64 calls deep was ~15000 frames.
  EXPECT_HAS(render_error("{% macro f(n) %}{{ " + std::string(240, '-') + "f(n) }}{% endmacro %}{{ f(1) }}"),
             "template evaluation nested deeper than 1024");
}

TEST(TemplateErrors, DeepOrCyclicValuesAreRefused) {
  // A loop nesting a list one level per iteration.
  EXPECT_HAS(render_error("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
                          "{% endfor %}{{ ns.x | length }}"),
             "value nested deeper than 512 levels");
  // A namespace holding itself, directly, through a list, or through a dict's bound method; and one
  // namespace inside another.
  EXPECT_HAS(render_error("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns }}"),
             "cannot assign a namespace (or a value holding one) to attribute 'self'");
  EXPECT_HAS(render_error("{% set ns = namespace(a=1) %}{% set ns.l = [ns] %}{{ ns }}"),
             "cannot assign a namespace");
  EXPECT_HAS(render_error("{% set ns = namespace() %}{% set d = dict(x=ns) %}{% set ns.f = d.items %}"),
             "cannot assign a namespace");
  EXPECT_HAS(render_error("{% set a = namespace(x=1) %}{% set b = namespace(y=a) %}"),
             "a namespace() cannot hold another namespace");
  // What chat templates do with a namespace still works.
  auto t = JinjaTemplate::parse(
      "{% set ns = namespace(found=false, roles=[]) %}{% for m in messages %}{% set ns.found = true %}"
      "{% set ns.roles = ns.roles + [m.role] %}{% endfor %}{{ ns.found }} {{ ns.roles | tojson }}");
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto r = t->render({{"messages", Json::array({{{"role", "user"}}, {{"role", "assistant"}}})}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "True [\"user\", \"assistant\"]");
}

TEST(MessageErrors, ClearMessages) {
  ChatTemplate t = ChatTemplate::chatml();
  auto err = [&](const std::string& messages, const std::string& tools = "null") {
    ChatRequest r;
    r.messages = Json::parse(messages);
    r.tools = Json::parse(tools);
    auto out = t.render(r);
    EXPECT_FALSE(out.ok()) << messages;
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    return out.ok() ? "" : out.status().message();
  };
  EXPECT_HAS(err("{}"), "messages must be an array");
  EXPECT_HAS(err("[]"), "messages must not be empty");
  EXPECT_HAS(err("[1]"), "messages[0]: message must be an object");
  EXPECT_HAS(err(R"([{"content":"x"}])"), "messages[0]: message needs a non-empty string \"role\"");
  EXPECT_HAS(err(R"([{"role":"user","content":5}])"), "messages[0].content: content must be a string");
  EXPECT_HAS(err(R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])"),
             "messages[0].content[0]: content part type 'image_url' is not supported (text only)");
  EXPECT_HAS(err(R"([{"role":"user","content":[{"type":"text"}]}])"), "text part needs a string \"text\"");
  EXPECT_HAS(
      err(R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{oops"}}]}])"),
      "messages[1].tool_calls[0].function.arguments: not a JSON object");
  EXPECT_HAS(err(R"([{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}])"),
             "messages[0].tool_calls[0].function: needs a non-empty string \"name\"");
  EXPECT_HAS(err(R"([{"role":"user","tool_calls":[]}])"), "only assistant messages have tool_calls");
  EXPECT_HAS(err(R"([{"role":"user","content":"x"}])", R"({"a":1})"), "tools must be an array");
  EXPECT_HAS(err(R"([{"role":"user","content":"x"}])", R"([{"type":"function","function":{}}])"),
             "tools[0].function: needs a non-empty string \"name\"");
}

TEST(MessageErrors, TemplateRejectionsPassThrough) {
  auto t = ChatTemplate::create(
      "{%- for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('Unexpected message role.') }}{% endif %}{% endfor %}");
  ASSERT_TRUE(t.ok());
  ChatRequest r;
  r.messages = Json::parse(R"([{"role":"user","content":"x"},{"role":"wizard","content":"y"}])");
  auto out = t->render(r);
  ASSERT_FALSE(out.ok());
  EXPECT_HAS(out.status().message(), "template raised: Unexpected message role.");
}

}  // namespace
}  // namespace mtp::chat
