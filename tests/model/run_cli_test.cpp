// `mtp run` and `mtp tokenize` as a user runs them, on the bundled example model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <sstream>

#include "../gguf/test_util.h"
#include "../tools/cli_util.h"
#include "kernels/isa.h"

namespace mtp {
namespace {

using testing::run_mtp;

constexpr int64_t kExampleVocab = 512;

std::vector<int> parse_ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<int> ids;
  for (int id; in >> id;) ids.push_back(id);
  return ids;
}

TEST(TokenizeCli, PrintsIdsOnOneLineAndPiecesWithDetok) {
  auto r = run_mtp("tokenize -m tests/data/example.gguf -p 'Hello world<|im_start|>'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
  const auto ids = parse_ids(r.output);
  ASSERT_FALSE(ids.empty());
  auto d = run_mtp("tokenize --detok -m tests/data/example.gguf -p 'Hello world<|im_start|>'");
  ASSERT_EQ(d.exit_code, 0);
  EXPECT_NE(d.output.find("\t\"<|im_start|>\""), std::string::npos) << d.output;  // a control token, matched
  EXPECT_EQ(static_cast<size_t>(std::count(d.output.begin(), d.output.end(), '\n')), ids.size());
  EXPECT_EQ(run_mtp("tokenize -m tests/data/example.gguf").exit_code, 2);
  EXPECT_EQ(run_mtp("tokenize -m /nonexistent.gguf -p x").exit_code, 1);
}

TEST(RunCli, GeneratesNTokensAndDumpsEveryPositionsLogits) {
  testing::TempDir dir;
  const std::string prompt = "'The quick brown fox'";
  const auto n_prompt = parse_ids(run_mtp("tokenize -m tests/data/example.gguf -p " + prompt).output).size();
  ASSERT_GT(n_prompt, 0u);
  const int n = 12;
  auto r = run_mtp("run -m tests/data/example.gguf -p " + prompt + " -n 12 --ignore-eos -t 1 --dump-logits " +
                       dir.file("logits.bin"),
                   true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("generation: 12 tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tok/s"), std::string::npos) << r.output;
  const auto bytes = testing::read_bytes(dir.file("logits.bin"));
  EXPECT_EQ(bytes.size(), (n_prompt + n) * kExampleVocab * sizeof(float));
}

// MTP_ISA in the environment starts the kernels at a lower level; the run's summary line and --version name
// the kernels that run. A name not known, or a level this CPU lacks, is a usage error naming what it has.
TEST(RunCli, MtpIsaPicksTheKernelsTheSummaryNames) {
  struct EnvScope {
    ~EnvScope() { unsetenv("MTP_ISA"); }
  } scope;
  const std::string cmd = "run -m tests/data/example.gguf -p 'Once upon a time' -n 4 --ignore-eos -t 1";
  setenv("MTP_ISA", "scalar", 1);
  auto s = run_mtp(cmd, true);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_TRUE(std::regex_search(s.output, std::regex("; kernels scalar; resident [1-9][0-9]* MiB\n")))
      << s.output;
  EXPECT_NE(run_mtp("--version").output.find(", kernels scalar\n"), std::string::npos);
  if (kernels::isa_supported(kernels::Isa::kAvx2)) {
    setenv("MTP_ISA", "avx2", 1);
    auto a = run_mtp(cmd, true);
    EXPECT_NE(a.output.find("; kernels avx2; "), std::string::npos) << a.output;  // plain: AVX-VNNI off
  }
  setenv("MTP_ISA", "avx9", 1);
  auto b = run_mtp(cmd, true);
  EXPECT_EQ(b.exit_code, 2) << b.output;
  EXPECT_EQ(b.output, "mtp: MTP_ISA=avx9: not one of scalar, avx2, avxvnni, avx512, neon\n");
  // A level the CPU lacks: Arm's on x86, avx512 on Arm.
  const char* lacking = kernels::isa_supported(kernels::Isa::kNeon) ? "avx512" : "neon";
  setenv("MTP_ISA", lacking, 1);
  auto c = run_mtp(cmd, true);
  EXPECT_EQ(c.exit_code, 2) << c.output;
  EXPECT_NE(c.output.find(std::string("mtp: MTP_ISA=") + lacking + ": this CPU lacks it (it has scalar"),
            std::string::npos)
      << c.output;
  EXPECT_EQ(c.output.find('\n'), c.output.size() - 1) << c.output;
}

TEST(RunCli, GreedyAndSeededSamplingAreDeterministic) {
  testing::TempDir dir;
  const std::string base = "run -m tests/data/example.gguf -p 'Once upon a time' -n 16 --ignore-eos ";
  auto g1 = run_mtp(base + "--dump-logits " + dir.file("a.bin"));
  auto g2 = run_mtp(base + "-t 2 --dump-logits " + dir.file("b.bin"));
  ASSERT_EQ(g1.exit_code, 0);
  EXPECT_EQ(g1.output, g2.output);
  EXPECT_EQ(testing::read_bytes(dir.file("a.bin")), testing::read_bytes(dir.file("b.bin")));
  const std::string sampled = base + "--temp 0.9 --top-k 50 --top-p 0.9 --seed 7";
  auto s1 = run_mtp(sampled), s2 = run_mtp(sampled);
  ASSERT_EQ(s1.exit_code, 0);
  EXPECT_EQ(s1.output, s2.output);
  EXPECT_FALSE(s1.output.empty());
  // The flags are used: sampling is not greedy, another seed samples other text, and top-k 1 (or a top-p
  // that keeps one token) is greedy again whatever the temperature and seed.
  EXPECT_NE(s1.output, g1.output);
  EXPECT_NE(run_mtp(base + "--temp 0.9 --top-k 50 --top-p 0.9 --seed 8").output, s1.output);
  EXPECT_EQ(run_mtp(base + "--temp 0.9 --top-k 1 --seed 7").output, g1.output);
  EXPECT_EQ(run_mtp(base + "--temp 0.9 --top-k 0 --top-p 0.000001 --seed 7").output, g1.output);
}

TEST(RunCli, UsageAndRuntimeErrors) {
  EXPECT_EQ(run_mtp("run --help").exit_code, 0);
  EXPECT_EQ(run_mtp("tokenize --help").exit_code, 0);
  EXPECT_EQ(run_mtp("run -p hi").exit_code, 2);                                       // no model
  EXPECT_EQ(run_mtp("run -m tests/data/example.gguf -p hi -n -1").exit_code, 2);      // bad count
  EXPECT_EQ(run_mtp("run -m tests/data/example.gguf -p hi --top-p 0").exit_code, 2);  // bad top-p
  auto missing = run_mtp("run -m /nonexistent.gguf -p hi", true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("mtp run: "), std::string::npos) << missing.output;
  auto arch = run_mtp("run -m tests/gguf/data/ggml_tiny.gguf -p hi", true);
  EXPECT_EQ(arch.exit_code, 1);
  EXPECT_NE(arch.output.find("expected 'qwen35moe'"), std::string::npos) << arch.output;
}

}  // namespace
}  // namespace mtp
