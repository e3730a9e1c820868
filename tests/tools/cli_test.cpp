// The command line as a user meets it: exit codes, --help, --version, one-line errors, golden inspect output.
#include <gtest/gtest.h>

#include <algorithm>

#include "../gguf/test_util.h"
#include "cli_util.h"
#include "engine/sampler.h"
#include "speculative/drafter.h"

namespace mtp {
namespace {

using testing::run_mtp;

std::string read_text(const std::string& relative) {
  auto bytes = testing::read_bytes(std::string(MTP_SOURCE_DIR) + "/" + relative);
  return {bytes.begin(), bytes.end()};
}

TEST(Cli, VersionAndHelpExitZero) {
  auto v = run_mtp("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.output.rfind("mtp ", 0), 0u) << v.output;
  for (const char* sub : {"", "inspect ", "synth "}) {
    auto h = run_mtp(std::string(sub) + "--help");
    EXPECT_EQ(h.exit_code, 0) << sub;
    EXPECT_NE(h.output.find("Usage"), std::string::npos) << sub;
  }
}

// git-style: an unknown command is named with the list of commands; `mtp help [CMD]` prints the help.
TEST(Cli, UnknownCommandsAndHelp) {
  auto r = run_mtp("frobnicate --x", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output,
            "mtp: 'frobnicate' is not an mtp command; the commands are inspect, synth, graft, extract-head, "
            "quantize, template, run, perplexity, tokenize, serve, draft-vocab, bench, report, replay, gate, "
            "tune ('mtp help CMD' for one)\n");
  auto help = run_mtp("help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.output, run_mtp("--help").output);
  auto run_help = run_mtp("help run");
  EXPECT_EQ(run_help.exit_code, 0);
  EXPECT_EQ(run_help.output, run_mtp("run --help").output);
  EXPECT_NE(run_help.output.find("--draft-max"), std::string::npos);
  EXPECT_EQ(run_mtp("help serve").output, run_mtp("serve --help").output);
  auto bad = run_mtp("help frobnicate", true);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.output.rfind("mtp: 'frobnicate' is not an mtp command", 0), 0u) << bad.output;
  auto none = run_mtp("", true);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.output.find("Subcommands:"), std::string::npos) << none.output;
}

// Messages name what went wrong once: a path once, an option given twice under two aliases by its names.
TEST(Cli, MessagesNameTheProblemOnce) {
  auto synth = run_mtp("synth -o /nonexistent/x.gguf", true);
  EXPECT_EQ(synth.exit_code, 1);
  EXPECT_EQ(synth.output,
            "mtp synth: /nonexistent/x.gguf: cannot create a temporary file in /nonexistent: No such file or "
            "directory\n");
  auto twice = run_mtp("serve -m models/no-such-file.gguf --draft 2 --draft-n 2", true);
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_EQ(
      twice.output,
      "mtp serve: --draft-max is given 2 times (--draft-max, --spec-draft-n-max, --draft or --draft-n name "
      "one option); give it once\n");
  EXPECT_EQ(run_mtp("run -m tests/data/example.gguf -p a --draft-max 2 --draft-max 3", true).output,
            "mtp run: --draft-max is given 2 times; give it once\n");
  // The option parser's own errors: one line naming the command, exit code 2.
  const auto missing = run_mtp("run -p hi", true);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.output, "mtp run: --model is required (mtp run --help lists the options)\n");
  const auto bad_value = run_mtp("run -m tests/data/example.gguf -p hi --temp abc", true);
  EXPECT_EQ(bad_value.exit_code, 2);
  EXPECT_EQ(bad_value.output,
            "mtp run: Could not convert: --temp = abc (mtp run --help lists the options)\n");
  const auto unknown = run_mtp("serve -m tests/data/example.gguf --bogus", true);
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.output.rfind("mtp serve: ", 0), 0u) << unknown.output;
  EXPECT_EQ(std::count(unknown.output.begin(), unknown.output.end(), '\n'), 1) << unknown.output;
}

// The command lines check sampling and drafting options with the engine's own checks (one range per
// option), before the model loads: the error is the range, not the missing file.
TEST(Cli, OptionRangesAreTheEnginesCheckedBeforeLoading) {
  SamplerOptions s;
  s.top_p = 1.5f;
  const std::string top_p = check_sampler_options(s, 0).message();
  speculative::DraftParams d;
  d.n_max = speculative::kMaxDraftTokens + 1;
  const std::string n_max = speculative::check_draft_params(d).message();
  ASSERT_FALSE(top_p.empty());
  ASSERT_FALSE(n_max.empty());
  const std::string no_model = "-m models/no-such-file.gguf ";
  const std::string too_many = " " + std::to_string(d.n_max);
  const std::pair<std::string, std::string> cases[] = {
      {"run " + no_model + "-p a --top-p 1.5", top_p},
      {"serve " + no_model + "--top-p 1.5", top_p},
      {"run " + no_model + "-p a --spec mtp --draft-max" + too_many, n_max},
      {"serve " + no_model + "--draft-max" + too_many, n_max},
  };
  for (const auto& [args, want] : cases) {
    auto r = run_mtp(args, true);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find(want), std::string::npos) << args << " -> " << r.output;
  }
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(run_mtp("").exit_code, 2);
  EXPECT_EQ(run_mtp("no-such-command").exit_code, 2);
  EXPECT_EQ(run_mtp("inspect").exit_code, 2);
  EXPECT_EQ(run_mtp("inspect --bogus tests/data/example.gguf").exit_code, 2);
  EXPECT_EQ(run_mtp("synth --type q9_9 -o /tmp/never.gguf").exit_code, 2);
  EXPECT_EQ(run_mtp("synth --layers 0 -o /tmp/never.gguf").exit_code, 2);  // not "the shape's default"
}

TEST(Cli, RuntimeErrorsExitOneWithAOneLineMessageNamingTheFile) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("bad.gguf"), {'G', 'G', 'U', 'F', 3, 0, 0, 0, 1});
  auto r = run_mtp("inspect " + dir.file("bad.gguf"), true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;  // exactly one line
  EXPECT_NE(r.output.find("bad.gguf"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
  auto folder = run_mtp("inspect " + dir.path().string(), true);
  EXPECT_EQ(folder.exit_code, 1);
  EXPECT_EQ(folder.output, "mtp inspect: " + dir.path().string() + ": not a regular file\n");
  auto missing = run_mtp("inspect " + dir.file("missing.gguf"), true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("missing.gguf: cannot open"), std::string::npos) << missing.output;
}

TEST(Cli, InspectGoldenOutputOnTheExampleModel) {
  auto text = run_mtp("inspect tests/data/example.gguf");
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_EQ(text.output, read_text("tests/tools/data/example_inspect.txt"));
  auto json = run_mtp("inspect --json --tensors tests/data/example.gguf");
  ASSERT_EQ(json.exit_code, 0);
  EXPECT_EQ(json.output, read_text("tests/tools/data/example_inspect.json"));
}

TEST(Cli, InspectListsTensorsAndMetadata) {
  auto r = run_mtp("inspect --tensors --metadata tests/data/example.gguf");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("blk.4.nextn.eh_proj.weight"), std::string::npos);
  EXPECT_NE(r.output.find("qwen35moe.nextn_predict_layers"), std::string::npos);
  EXPECT_NE(r.output.find("[128, 64]"), std::string::npos);  // eh_proj: {2*n_embd, n_embd}
  // Two files side by side have no per-tensor lists in text: refused rather than ignored.
  EXPECT_EQ(run_mtp("inspect --tensors tests/data/example.gguf tests/data/example.gguf").exit_code, 2);
}

TEST(Cli, InspectHandlesOtherArchitectures) {
  auto r = run_mtp("inspect tests/gguf/data/ggml_tiny.gguf");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("architecture             llama"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("block_count              2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MTP block                absent"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("runs in mtp.cpp          no: architecture llama (mtp.cpp runs qwen35moe)"),
            std::string::npos)
      << r.output;
}

// A qwen35moe file with types mtp.cpp does not compute (as unsloth's UD-IQ files carry) says so, with counts.
TEST(Cli, InspectNamesTheTypesThatDoNotRunHere) {
  testing::TempDir dir;
  Metadata md;
  md.set("general.architecture", Value::string("qwen35moe"));
  testing::write_gguf(dir.file("iq.gguf"), md,
                      {{"blk.0.ffn_up_exps.weight", GgmlType::IQ3_XXS, {256, 2, 1, 1}},
                       {"blk.0.ffn_down_exps.weight", GgmlType::IQ2_XXS, {256, 1, 1, 1}},
                       {"blk.1.ffn_down_exps.weight", GgmlType::IQ2_XXS, {256, 1, 1, 1}},
                       {"output.weight", GgmlType::Q6_K, {256, 1, 1, 1}}},
                      {std::vector<uint8_t>(2 * 98), std::vector<uint8_t>(66), std::vector<uint8_t>(66),
                       std::vector<uint8_t>(210)});
  auto r = run_mtp("inspect " + dir.file("iq.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("runs in mtp.cpp          no: types not implemented here: iq2_xxs (2 tensors), "
                          "iq3_xxs (1 tensor); the first is blk.0.ffn_up_exps.weight"),
            std::string::npos)
      << r.output;
  auto j = run_mtp("inspect --json " + dir.file("iq.gguf"));
  EXPECT_NE(j.output.find("\"runnable\": false"), std::string::npos) << j.output;
}

}  // namespace
}  // namespace mtp
