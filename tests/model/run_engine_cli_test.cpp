// `mtp run` on the engine (default) against `--reference`, and prompt batch sizes.
#include <gtest/gtest.h>

#include "../gguf/test_util.h"
#include "../tools/cli_util.h"

namespace mtp {
namespace {

using testing::run_mtp;

TEST(RunEngineCli, SameTextAsReferenceAndBatchSizeDoesNotChangeLogits) {
  testing::TempDir dir;
  const std::string base =
      "run -m tests/data/example.gguf -p 'The quick brown fox jumps' -n 24 --ignore-eos ";
  auto eng = run_mtp(base + "-b 512 --dump-logits " + dir.file("a.bin"));
  auto small = run_mtp(base + "-b 3 -t 1 --dump-logits " + dir.file("b.bin"));
  auto ref = run_mtp(base + "--reference");
  ASSERT_EQ(eng.exit_code, 0) << eng.output;
  EXPECT_EQ(eng.output, ref.output);  // greedy text (the structured model's margins are large)
  EXPECT_EQ(eng.output, small.output);
  EXPECT_EQ(testing::read_bytes(dir.file("a.bin")), testing::read_bytes(dir.file("b.bin")));
  EXPECT_EQ(run_mtp("run -m tests/data/example.gguf -p hi -b 0").exit_code, 2);
}

}  // namespace
}  // namespace mtp
