// `mtp run --spec mtp`: the same text as plain decoding, and llama.cpp's statistics line.
#include <gtest/gtest.h>

#include "../gguf/test_util.h"
#include "../tools/cli_util.h"

namespace mtp {
namespace {

using testing::run_mtp;

TEST(RunSpecCli, SameTextAndStatisticsLine) {
  const std::string base = "run -m tests/data/example.gguf -p 'The quick brown fox' -n 48 --ignore-eos -t 2 ";
  auto plain = run_mtp(base + "--spec none");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  for (const char* d : {"1", "3"}) {
    auto spec = run_mtp(base + "--spec mtp --draft-max " + d);
    ASSERT_EQ(spec.exit_code, 0) << spec.output;
    EXPECT_EQ(spec.output, plain.output) << "--draft-max " << d;
    auto merged = run_mtp(base + "--spec mtp --draft-max " + d, true);
    EXPECT_NE(merged.output.find("statistics draft-mtp: #gen tokens = "), std::string::npos) << merged.output;
    EXPECT_NE(merged.output.find("#mean acc len = "), std::string::npos);
    EXPECT_NE(merged.output.find("#acc rate/pos = ("), std::string::npos);
  }
  // Either draft head: the same text.
  for (const char* head : {"full", "subset --draft-vocab 64", "subset"}) {
    auto spec = run_mtp(base + "--spec mtp --draft-head " + head);
    ASSERT_EQ(spec.exit_code, 0) << head << ": " << spec.output;
    EXPECT_EQ(spec.output, plain.output) << "--draft-head " << head;
  }
  // Seeded sampling is the same with and without drafting.
  auto s1 = run_mtp(base + "--temp 0.8 --seed 5 --spec none");
  auto s2 = run_mtp(base + "--temp 0.8 --seed 5 --spec mtp --draft-max 2 --draft-p-min 0.5");
  ASSERT_EQ(s2.exit_code, 0) << s2.output;
  EXPECT_EQ(s1.output, s2.output);
  EXPECT_NE(s1.output, plain.output);  // and it did sample: --temp is not ignored
}

// The bundled trained model (models/README.md): its greedy and seeded text is the same with MTP drafting, and
// the head drafts tokens the trunk accepts.
TEST(RunSpecCli, TheBundledModelGivesTheSameTextWithMtp) {
  const std::string base = "run -m models/example.gguf -p 'def parse(' -n 64 --ignore-eos -t 1 ";
  auto plain = run_mtp(base + "--spec none");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto spec = run_mtp(base + "--spec mtp --draft-max 3");
  ASSERT_EQ(spec.exit_code, 0) << spec.output;
  EXPECT_EQ(spec.output, plain.output);
  auto merged = run_mtp(base + "--spec mtp --draft-max 3", true);
  ASSERT_NE(merged.output.find("#acc tokens = "), std::string::npos) << merged.output;
  EXPECT_EQ(merged.output.find("#acc tokens = 0,"), std::string::npos) << merged.output;
  auto s1 = run_mtp(base + "--temp 1 --seed 3 --spec none");
  auto s2 = run_mtp(base + "--temp 1 --seed 3 --spec mtp --draft-max 2");
  ASSERT_EQ(s2.exit_code, 0) << s2.output;
  EXPECT_EQ(s1.output, s2.output);
}

TEST(RunSpecCli, BadFlagsAreUsageErrors) {
  const std::string base = "run -m tests/data/example.gguf -p hi -n 4 ";
  EXPECT_EQ(run_mtp(base + "--spec maybe").exit_code, 2);
  EXPECT_EQ(run_mtp(base + "--spec mtp --draft-max -1").exit_code, 2);
  EXPECT_EQ(run_mtp(base + "--spec mtp --draft-max 2 --draft-min 3").exit_code, 2);
  EXPECT_EQ(run_mtp(base + "--spec mtp --draft-p-min 1.5").exit_code, 2);
  EXPECT_EQ(run_mtp(base + "--head tests/data/example.gguf").exit_code, 2);  // --head needs --spec mtp
  EXPECT_EQ(run_mtp(base + "--draft-vocab 64").exit_code, 2);                // --draft-vocab needs --spec mtp
  EXPECT_EQ(run_mtp(base + "--spec mtp --draft-vocab-file ids.txt").exit_code, 2);  // and a count
  EXPECT_EQ(run_mtp(base + "--min-p 1.5").exit_code, 2);
  EXPECT_EQ(run_mtp(base + "--spec mtp --draft-head best").exit_code, 2);
  EXPECT_EQ(run_mtp(base + "--draft-head subset").exit_code, 2);  // needs --spec mtp
  EXPECT_EQ(run_mtp(base + "--reference --cache-type-k q8_0").exit_code, 2);
  // Refused before the model is opened.
  auto early = run_mtp("run -m /nonexistent.gguf -p hi --cache-type-v q3", true);
  EXPECT_EQ(early.exit_code, 2);
  EXPECT_NE(early.output.find("--cache-type-v"), std::string::npos) << early.output;
  auto missing = run_mtp(base + "--spec mtp --head /nonexistent.gguf", true);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("/nonexistent.gguf"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace mtp
