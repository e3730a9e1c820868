// `mtp template`: the binary prints what the library renders (the Python reference renders, byte for byte).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct Result {
  int exit_code = -1;
  std::string out;
};

Result run_mtp(const std::string& args) {
  std::string cmd = std::string("cd '") + MTP_SOURCE_DIR + "' && '" + MTP_BINARY + "' " + args;
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string expected(const std::string& rel) {
  std::ifstream in(std::string(MTP_SOURCE_DIR) + "/tests/chat/data/expected/" + rel, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TemplateCli, FallbackChatMlForModelWithoutTemplate) {
  Result r = run_mtp(
      "template -m tests/data/example.gguf --messages tests/chat/data/cli/tool_call_single.json 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, expected("chatml/tool_call_single.txt"));
  Result note = run_mtp(
      "template -m tests/data/example.gguf --messages tests/chat/data/cli/system_user.json 2>&1 >/dev/null");
  EXPECT_NE(note.out.find("has no tokenizer.chat_template; using the built-in ChatML template"),
            std::string::npos);
}

TEST(TemplateCli, TemplateFileAndReasoningOff) {
  Result r = run_mtp(
      "template -m tests/data/example.gguf --messages tests/chat/data/cli/system_user.json "
      "--chat-template tests/chat/data/templates/qwen3_5.jinja --reasoning off 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, expected("qwen3_5/system_user_thinking_off.txt"));
}

TEST(TemplateCli, Errors) {
  EXPECT_EQ(run_mtp("template -m tests/data/example.gguf --messages /nonexistent.json 2>/dev/null").exit_code,
            1);
  EXPECT_EQ(run_mtp("template -m tests/data/example.gguf --messages tests/chat/data/cli/system_user.json "
                    "--reasoning maybe 2>/dev/null")
                .exit_code,
            2);
  // A bad file is exit code 1 (README, exit codes), a bad flag 2.
  Result bad = run_mtp("template -m tests/data/example.gguf --messages tests/chat/data/cases.json 2>&1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.out.find("tests/chat/data/cases.json: messages must be an array"), std::string::npos)
      << bad.out;
  const std::string broken_json = ::testing::TempDir() + "mtp-template-broken.json";
  std::ofstream(broken_json) << "[{";
  Result broken = run_mtp("template -m tests/data/example.gguf --messages " + broken_json + " 2>&1");
  EXPECT_EQ(broken.exit_code, 1);
  EXPECT_EQ(broken.out, "mtp template: '" + broken_json + "' is not valid JSON\n");
}

}  // namespace
