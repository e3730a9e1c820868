// Reply parsing: reasoning and Qwen tool calls, whole and streamed split at every byte boundary.
#include <gtest/gtest.h>

#include "chat/output_parser.h"

namespace mtp::chat {
namespace {

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}, "metric": {"type": "boolean"},
    "opts": {"type": "object"}, "tags": {"type": "array"}}}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
    "query": {"type": "string"}}}}}
])");

OutputFormat format(bool thinking_prompt = false, bool tools = true) {
  OutputFormat f;
  f.starts_in_reasoning = thinking_prompt;
  f.parse_tool_calls = tools;
  f.tools = kTools;
  f.make_id = [](size_t n) { return "call_" + std::to_string(n); };
  return f;
}

// Concatenates the deltas of a stream fed in the given pieces.
ParsedOutput stream(const std::vector<std::string>& pieces, const OutputFormat& f,
                    std::string* leaked = nullptr) {
  OutputParser p(f);
  ParsedOutput acc;
  auto take = [&](const OutputDelta& d) {
    acc.content += d.content;
    acc.reasoning_content += d.reasoning_content;
    for (const auto& c : d.tool_calls) acc.tool_calls.push_back(c);
    for (const auto& w : d.warnings) acc.warnings.push_back(w);
    if (leaked) *leaked += d.content;
  };
  for (const auto& piece : pieces) take(p.feed(piece));
  take(p.finish());
  return acc;
}

void expect_same(const ParsedOutput& a, const ParsedOutput& b, const std::string& where) {
  EXPECT_EQ(a.content, b.content) << where;
  EXPECT_EQ(a.reasoning_content, b.reasoning_content) << where;
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size()) << where;
  for (size_t k = 0; k < a.tool_calls.size(); ++k) {
    EXPECT_EQ(a.tool_calls[k].id, b.tool_calls[k].id) << where;
    EXPECT_EQ(a.tool_calls[k].name, b.tool_calls[k].name) << where;
    EXPECT_EQ(a.tool_calls[k].arguments, b.tool_calls[k].arguments) << where;
  }
  EXPECT_EQ(a.warnings.size(), b.warnings.size()) << where;
}

// Every split into two pieces, and byte-by-byte: the same result as parsing whole.
void expect_split_invariant(const std::string& text, const OutputFormat& f) {
  ParsedOutput whole = parse_output(text, f);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    expect_same(stream({text.substr(0, cut), text.substr(cut)}, f), whole, "cut at " + std::to_string(cut));
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  expect_same(stream(bytes, f), whole, "byte by byte");
}

const std::string kXmlCall =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</"
    "parameter>\n"
    "</function>\n</tool_call>";

TEST(OutputParser, PlainContent) {
  ParsedOutput r = parse_output("Hello, world!", format());
  EXPECT_EQ(r.content, "Hello, world!");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.to_message_json().dump(), R"({"role":"assistant","content":"Hello, world!"})");
}

TEST(OutputParser, ReasoningFromThinkingPrompt) {
  // Qwen3.5/3.6: the prompt ends with "<think>\n", so the reply starts inside the reasoning.
  std::string reply = "The user greets me.\nI should greet back.\n</think>\n\nHello!";
  ParsedOutput r = parse_output(reply, format(true));
  EXPECT_EQ(r.reasoning_content, "The user greets me.\nI should greet back.");
  EXPECT_EQ(r.content, "Hello!");
  expect_split_invariant(reply, format(true));
}

TEST(OutputParser, ReasoningWithOpenTag) {
  std::string reply = "\n<think>\nhmm\n</think>\n\nAnswer.";
  ParsedOutput r = parse_output(reply, format(false));
  EXPECT_EQ(r.reasoning_content, "hmm");
  EXPECT_EQ(r.content, "Answer.");
  expect_split_invariant(reply, format(false));
}

TEST(OutputParser, ReasoningFormatNoneKeepsTags) {
  OutputFormat f = format(false);
  f.reasoning = ReasoningFormat::kNone;
  ParsedOutput r = parse_output("<think>x</think>y", f);
  EXPECT_EQ(r.content, "<think>x</think>y");
  EXPECT_EQ(r.reasoning_content, "");
}

TEST(OutputParser, UnfinishedReasoningStaysReasoning) {
  ParsedOutput r = parse_output("still thinking about it\n", format(true));
  EXPECT_EQ(r.reasoning_content, "still thinking about it");
  EXPECT_EQ(r.content, "");
}

TEST(OutputParser, SingleXmlToolCall) {
  std::string reply = "Let me check.\n\n" + kXmlCall;
  ParsedOutput r = parse_output(reply, format());
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city":"Paris","days":3})");
  EXPECT_EQ(r.tool_calls[0].id, "call_0");
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(
      r.tool_calls[0].to_json(0).dump(),
      R"({"index":0,"id":"call_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":3}"}})");
  Json msg = r.to_message_json();
  EXPECT_EQ(msg["tool_calls"].size(), 1u);
  expect_split_invariant(reply, format());
}

TEST(OutputParser, MultipleCallsNestedArgumentsAndSchemaTypes) {
  std::string reply =
      "<think>\nplan\n</think>\n\n"
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n"
      "<parameter=zip>\n01310\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n"
      "<parameter=opts>\n{\"hourly\": [1, 2], \"alerts\": {\"level\": \"high\"}}\n</parameter>\n"
      "<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=search>\n<parameter=query>\nline one\nline "
      "two\n</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"json \\\"format\\\"\", \"n\": "
      "{\"deep\": [1, {\"x\": null}]}}}\n</tool_call>";
  ParsedOutput r = parse_output(reply, format());
  EXPECT_EQ(r.reasoning_content, "plan");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 3u);
  // "01310" stays a string because the schema says so; True is the template's Python rendering of true.
  EXPECT_EQ(
      r.tool_calls[0].arguments,
      R"({"city":"São Paulo","zip":"01310","metric":true,"opts":{"hourly":[1,2],"alerts":{"level":"high"}},"tags":["a","b"]})");
  EXPECT_EQ(r.tool_calls[1].arguments, R"({"query":"line one\nline two"})");
  EXPECT_EQ(r.tool_calls[2].arguments, R"({"query":"json \"format\"","n":{"deep":[1,{"x":null}]}})");
  EXPECT_EQ(r.tool_calls[2].id, "call_2");
  EXPECT_EQ(r.to_message_json()["content"], nullptr);
  expect_split_invariant(reply, format());
}

TEST(OutputParser, BareFunctionBlockAndTextAround) {
  std::string reply = "Sure: <function=search>\n<parameter=query>\nx\n</parameter>\n</function> done.";
  ParsedOutput r = parse_output(reply, format());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"query":"x"})");
  EXPECT_EQ(r.content, "Sure:done.");
  expect_split_invariant(reply, format());
}

TEST(OutputParser, MalformedCallIsContentWithWarning) {
  std::string reply =
      "Try this.\n<tool_call>\n<function=search>\n<parameter=query>\nunterminated\n</tool_call> after";
  ParsedOutput r = parse_output(reply, format());
  EXPECT_TRUE(r.tool_calls.empty());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("malformed tool call"), std::string::npos);
  EXPECT_EQ(r.content, reply);  // returned as text, never dropped
  expect_split_invariant(reply, format());

  std::string json_bad = "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": }\n</tool_call>";
  ParsedOutput j = parse_output(json_bad, format());
  EXPECT_TRUE(j.tool_calls.empty());
  EXPECT_EQ(j.content, json_bad);
  EXPECT_EQ(j.warnings.size(), 1u);
}

TEST(OutputParser, TruncatedCallAtEndIsContentWithWarning) {
  std::string reply = "ok <tool_call>\n<function=search>\n<parameter=query>\nabc";
  ParsedOutput r = parse_output(reply, format());
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, reply);
  EXPECT_EQ(r.warnings.size(), 1u);
  expect_split_invariant(reply, format());
  // A complete function block without </tool_call> (stopped early) is still a call.
  ParsedOutput s = parse_output(
      "<tool_call>\n<function=search>\n<parameter=query>\nq\n</parameter>\n</function>", format());
  ASSERT_EQ(s.tool_calls.size(), 1u);
  EXPECT_TRUE(s.warnings.empty());
}

TEST(OutputParser, NoToolsMeansMarkupIsText) {
  ParsedOutput r = parse_output(kXmlCall, format(false, /*tools=*/false));
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, kXmlCall);
}

TEST(OutputParser, NoPartialMarkupLeaksWhileStreaming) {
  std::string reply = "Text <tool_ca then more. " + kXmlCall + " tail <functio";
  OutputParser p(format());
  std::string emitted;
  for (size_t k = 0; k < reply.size(); ++k) {
    OutputDelta d = p.feed(reply.substr(k, 1));
    emitted += d.content;
    // Never a marker prefix at the end of what was emitted so far, and never a call's markup.
    EXPECT_EQ(emitted.find("<tool_call>"), std::string::npos);
    EXPECT_EQ(emitted.find("<parameter"), std::string::npos);
    EXPECT_FALSE(emitted.size() >= 5 && emitted.substr(emitted.size() - 5) == "<tool") << emitted;
  }
  emitted += p.finish().content;
  // Whitespace next to a tool call is dropped.
  EXPECT_EQ(emitted, "Text <tool_ca then more.tail <functio");
  EXPECT_EQ(p.result().tool_calls.size(), 1u);
}

TEST(OutputParser, Utf8NeverSplitInDeltas) {
  std::string reply = "é日😀 and </think> ignored";
  OutputParser p(format());
  for (char c : reply) {
    OutputDelta d = p.feed(std::string(1, c));
    for (size_t k = 0; k < d.content.size(); ++k) {
      unsigned char b = static_cast<unsigned char>(d.content[k]);
      if (k == 0) {
        EXPECT_NE(b & 0xC0, 0x80) << "delta starts inside a UTF-8 sequence";
      }
    }
  }
  p.finish();
  EXPECT_EQ(p.result().content, reply);
}

TEST(OutputParser, SplitInvarianceOverAMixedReply) {
  std::string reply = "Thinking é\n</think>\n\nI'll call two tools.\n\n" + kXmlCall + "\n" + kXmlCall +
                      "\n\nAnd a summary 😀.  ";
  expect_split_invariant(reply, format(true));
}

}  // namespace
}  // namespace mtp::chat
