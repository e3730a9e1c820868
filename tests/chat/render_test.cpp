// Golden renders: every template x conversation, and every Jinja snippet, against the reference renders that
// scripts/reference/chat/render_reference.py made with Python's jinja2 (tests/chat/data/expected). Byte for
// byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"

namespace mtp::chat {
namespace {

const std::string kData = std::string(MTP_SOURCE_DIR) + "/tests/chat/data/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json read_json(const std::string& path) {
  return Json::parse(read_file(path));
}

TEST(GoldenRender, TemplatesTimesConversations) {
  Json templates = read_json(kData + "templates.json");
  Json cases = read_json(kData + "cases.json");
  int compared = 0, errors = 0;
  for (const auto& [name, spec] : templates.items()) {
    std::string source = read_file(kData + "templates/" + spec["file"].get<std::string>());
    auto tmpl = ChatTemplate::create(source, spec["bos_token"], spec["eos_token"]);
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.status().message();
    for (const Json& c : cases["cases"]) {
      std::string base = kData + "expected/" + name + "/" + c["name"].get<std::string>();
      SCOPED_TRACE(name + " / " + c["name"].get<std::string>());
      ChatRequest req;
      req.messages = c["messages"];
      if (c.contains("tools")) req.tools = cases["tools"][c["tools"].get<std::string>()];
      req.add_generation_prompt = c.value("add_generation_prompt", true);
      if (c.contains("enable_thinking")) req.enable_thinking = c["enable_thinking"].get<bool>();
      if (c.contains("extra")) req.extra_context = c["extra"];
      auto out = tmpl->render(req);
      if (std::filesystem::exists(base + ".err")) {
        std::string expected = read_file(base + ".err");
        ASSERT_FALSE(out.ok()) << "Python failed (" << expected << ") but we rendered:\n" << *out;
        const std::string prefix = "TemplateError: ";
        if (expected.rfind(prefix, 0) == 0) {
          std::string msg = expected.substr(prefix.size(), expected.size() - prefix.size() - 1);
          EXPECT_NE(out.status().message().find("template raised: " + msg), std::string::npos)
              << out.status().message();
        }
        ++errors;
      } else {
        ASSERT_TRUE(out.ok()) << out.status().message();
        EXPECT_EQ(*out, read_file(base + ".txt"));
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 80);
  EXPECT_GE(errors, 3);
}

TEST(GoldenRender, Snippets) {
  Json snippets = read_json(kData + "snippets.json");
  Json expected = read_json(kData + "expected/snippets.json");
  ASSERT_EQ(snippets.size(), expected.size());
  for (const Json& s : snippets) {
    const std::string name = s["name"];
    SCOPED_TRACE(name);
    const Json& want = expected.at(name);
    auto t = JinjaTemplate::parse(s["template"].get<std::string>());
    if (!t.ok()) {
      EXPECT_TRUE(want.contains("error")) << "parse failed: " << t.status().message();
      continue;
    }
    auto out = t->render(s["context"]);
    if (want.contains("error")) {
      EXPECT_FALSE(out.ok()) << "Python failed (" << want["error"] << ") but we rendered: " << *out;
      if (!out.ok()) {
        EXPECT_NE(out.status().message().find("line 1"), std::string::npos) << out.status().message();
      }
    } else {
      ASSERT_TRUE(out.ok()) << out.status().message();
      EXPECT_EQ(*out, want["output"].get<std::string>());
    }
  }
}

TEST(GoldenRender, BuiltinChatMlMatchesFixture) {
  EXPECT_EQ(std::string(kChatMlTemplate), read_file(kData + "templates/chatml.jinja"));
  ChatTemplate t = ChatTemplate::chatml();
  EXPECT_TRUE(t.is_fallback());
  ChatRequest req;
  req.messages = Json::parse(R"([{"role":"user","content":"Hi"}])");
  EXPECT_EQ(*t.render(req), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(GoldenRender, QwenGenerationPromptAndOutputFormat) {
  auto t = ChatTemplate::create(read_file(kData + "templates/qwen3_5.jinja"), "<|endoftext|>", "<|im_end|>");
  ASSERT_TRUE(t.ok());
  ChatRequest req;
  req.messages = Json::parse(R"([{"role":"user","content":"Hi"}])");
  auto on = t->render(req);
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(*on, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_TRUE(t->output_format(req, *on).starts_in_reasoning);
  EXPECT_FALSE(t->output_format(req, *on).parse_tool_calls);
  req.enable_thinking = false;  // --reasoning off
  auto off = t->render(req);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_FALSE(t->output_format(req, *off).starts_in_reasoning);
  req.tools = Json::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
  EXPECT_TRUE(t->output_format(req, *off).parse_tool_calls);
}

TEST(GoldenRender, StringArgumentsAreNormalized) {
  // OpenAI clients send function.arguments as a JSON string; templates iterate them as a mapping.
  auto t = ChatTemplate::create(read_file(kData + "templates/qwen3_5.jinja"));
  ASSERT_TRUE(t.ok());
  ChatRequest a, b;
  a.messages = Json::parse(R"([{"role":"user","content":"q"},{"role":"assistant","content":"",
      "tool_calls":[{"type":"function","function":{"name":"f","arguments":"{\"x\": 1, \"y\": \"s\"}"}}]}])");
  b.messages = Json::parse(R"([{"role":"user","content":"q"},{"role":"assistant","content":"",
      "tool_calls":[{"type":"function","function":{"name":"f","arguments":{"x": 1, "y": "s"}}}]}])");
  auto ra = t->render(a), rb = t->render(b);
  ASSERT_TRUE(ra.ok()) << ra.status().message();
  EXPECT_EQ(*ra, *rb);
  EXPECT_NE(ra->find("<parameter=x>\n1\n</parameter>"), std::string::npos);
}

}  // namespace
}  // namespace mtp::chat
