// `mtp perplexity` as a user runs it, on the bundled tiny model: the base file it writes is deterministic,
// the model against its own base has KLD 0, a Q4_0 copy of the model has a KLD that the gate's KL-divergence
// metrics judge, and mismatched or broken inputs are one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "eval/kld_file.h"
#include "test_util.h"

namespace mtp::eval {
namespace {

using mtp::testing::run_mtp;
using mtp::testing::TempDir;
using Json = nlohmann::json;

constexpr const char* kModel = "tests/data/example.gguf";

// Plain English-like text from a fixed word list and a linear congruential sequence: enough tokens for
// several chunks of 64.
std::string sample_text(uint32_t seed, int words) {
  static const char* const kWords[] = {"the",   "model", "reads", "a",     "token", "and",   "writes",
                                       "next",  "cache", "state", "layer", "head",  "draft", "verify",
                                       "quiet", "river", "stone", "light", "over",  "under"};
  std::string out;
  uint32_t x = seed;
  for (int i = 0; i < words; ++i) {
    x = x * 1664525u + 1013904223u;
    out += kWords[(x >> 16) % 20];
    out += (i % 12 == 11) ? ".\n" : " ";
  }
  return out;
}

std::string write_text(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name), std::ios::binary) << text;
  return dir.file(name);
}

Json json_of(const mtp::testing::CommandResult& r) {
  const Json j = Json::parse(r.output, nullptr, false);
  EXPECT_TRUE(j.is_object()) << r.output;
  return j;
}

// One line of stderr, the error, with the expected exit code.
std::string error_of(const std::string& args, int exit_code) {
  const auto r = mtp::testing::run_command(std::string("cd '") + MTP_SOURCE_DIR + "' && '" + MTP_BINARY +
                                           "' " + args + " 2>&1 >/dev/null");
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  return r.output;
}

class PerplexityCli : public ::testing::Test {
 protected:
  void SetUp() override { text_ = write_text(dir_, "text.txt", sample_text(7, 1200)); }
  std::string base(const std::string& name) {
    const auto r = run_mtp(std::string("perplexity -m ") + kModel + " -f " + text_ +
                           " -c 64 --chunks 4 -t 2 " + "--kl-divergence-base " + dir_.file(name) + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    last_ = json_of(r);
    return dir_.file(name);
  }
  TempDir dir_;
  std::string text_;
  Json last_;
};

TEST_F(PerplexityCli, TheModelAgainstItsOwnBaseHasZeroKld) {
  const std::string a = base("a.kld");
  const double ppl = last_["ppl"]["value"].get<double>();
  EXPECT_GT(ppl, 1.0);
  EXPECT_EQ(last_["scored"], 4 * 31);
  EXPECT_EQ(mtp::testing::read_bytes(a), mtp::testing::read_bytes(base("b.kld")));  // deterministic
  auto f = KldBaseFile::open(a);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->n_ctx(), 64);
  EXPECT_EQ(f->n_chunk(), 4);
  EXPECT_EQ(f->n_vocab(), 512);

  const auto r = run_mtp(std::string("perplexity -m ") + kModel + " -f " + text_ + " --kl-divergence-base " +
                         a + " --kl-divergence --json -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json j = json_of(r);
  EXPECT_EQ(j["tool"], "mtp perplexity");
  EXPECT_EQ(j["n_ctx"], 64);  // from the base file
  EXPECT_EQ(j["scored"], 4 * 31);
  EXPECT_NEAR(j["kld"]["mean"].get<double>(), 0.0, 1e-6);
  EXPECT_NEAR(j["kld"]["max"].get<double>(), 0.0, 1e-5);
  EXPECT_EQ(j["same_top"]["count"], 4 * 31);
  EXPECT_NEAR(j["ppl_ratio"]["value"].get<double>(), 1.0, 1e-4);
  EXPECT_NEAR(j["ppl"]["value"].get<double>(), ppl, 1e-4 * ppl);
  EXPECT_EQ(j["depth"].size(), 4u);

  const auto text = run_mtp(std::string("perplexity -m ") + kModel + " --kl-divergence-base " + a +
                            " --kl-divergence -t 2");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find("Mean    KLD:"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("Same top p: 100.000"), std::string::npos) << text.output;
}

TEST_F(PerplexityCli, AQuantizedCopyHasAKldTheGateJudges) {
  const std::string a = base("a.kld");
  // The bundled model's weights at 4 bits (Q4_0: tiny's 64-wide rows would send Q4_K to its Q8_0 fallback).
  const std::string q4 = dir_.file("q4.gguf");
  ASSERT_EQ(run_mtp("synth --shape tiny --mtp --type q4_0 --structured 1.75 --seed 1 -o " + q4).exit_code, 0);
  const std::string rules = dir_.file("rules.json");
  std::ofstream(rules) << R"({"gate": "q4", "rules": [
    {"id": "kld", "metric": "kld_mean", "op": "<=", "threshold": 1.0, "statistic": "normal", "min_samples": 100},
    {"id": "kld-tiny", "metric": "kld_mean", "op": "<=", "threshold": 1e-6, "statistic": "value"},
    {"id": "p99", "metric": "kld_p99", "op": "<=", "threshold": 5.0, "statistic": "value"},
    {"id": "top", "metric": "same_top_rate", "op": ">=", "threshold": 0.2, "statistic": "wilson"},
    {"id": "ppl", "metric": "ppl_ratio", "op": "<=", "threshold": 2.0, "statistic": "normal"},
    {"id": "many", "metric": "kld_mean", "op": "<=", "threshold": 1.0, "statistic": "value", "min_samples": 1000}]})";
  ASSERT_EQ(run_mtp("gate freeze " + rules).exit_code, 0);
  const std::string report = dir_.file("q4.json");
  const auto r = run_mtp("perplexity -m " + q4 + " --kl-divergence-base " + a +
                         " --kl-divergence --json -t 2 > " + report);
  ASSERT_EQ(r.exit_code, 0);
  std::ifstream in(report);
  const Json j = Json::parse(in, nullptr, false);
  ASSERT_TRUE(j.is_object());
  const double kld = j["kld"]["mean"].get<double>();
  EXPECT_GT(kld, 1e-4);  // Q4_0 against Q8_0 weights: a real divergence
  EXPECT_LT(kld, 1.0);

  const auto verdict = run_mtp("gate run " + rules + " " + report + " --format json");
  EXPECT_EQ(verdict.exit_code, 1) << verdict.output;
  const Json v = json_of(verdict);
  ASSERT_EQ(v["verdicts"].size(), 6u);
  EXPECT_EQ(v["verdicts"][0]["pass"], true) << verdict.output;
  EXPECT_EQ(v["verdicts"][0]["samples"], 4 * 31);
  EXPECT_NEAR(v["verdicts"][0]["estimate"].get<double>(), kld, 1e-12);
  EXPECT_GT(v["verdicts"][0]["bound"].get<double>(), kld);  // the upper normal bound
  EXPECT_EQ(v["verdicts"][1]["pass"], false);
  EXPECT_EQ(v["verdicts"][2]["pass"], true) << verdict.output;
  EXPECT_EQ(v["verdicts"][3]["pass"], true) << verdict.output;
  EXPECT_EQ(v["verdicts"][4]["pass"], true) << verdict.output;
  EXPECT_EQ(v["verdicts"][5]["pass"], false);
  EXPECT_NE(v["verdicts"][5]["why"].get<std::string>().find("fewer than the 1000"), std::string::npos);

  // A KL-divergence rule judges one report: none, or two, is an error.
  EXPECT_NE(error_of("gate run " + rules + " " + report + " " + report, 2).find("2 given"),
            std::string::npos);
}

// The compact top-k base against llama.cpp's full one, on the same text, from the bundled model, for a Q4_0
// copy of it: the compact KLD is a lower bound of the full one (up to the full rows' 16-bit rounding), close
// to it at k = 64 and equal at k = n_vocab; the model against its own compact base has KLD 0.
TEST_F(PerplexityCli, ACompactTopKBaseBoundsTheFullKldFromBelow) {
  const std::string full = base("full.kld");
  auto compact = [&](int k) {
    const std::string path = dir_.file(str_cat("top", k, ".kld"));
    const auto r =
        run_mtp(std::string("perplexity -m ") + kModel + " -f " + text_ + " -c 64 --chunks 4 -t 2 " +
                "--kl-divergence-base " + path + " --kld-top-k " + std::to_string(k) + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(json_of(r)["base_top_k"], k);
    return path;
  };
  const std::string top64 = compact(64), top512 = compact(512);
  // 28 header bytes, 256 tokens, 4 chunks x 31 rows x (2 + 2 * 64) words: half the full rows at 512 tokens.
  EXPECT_EQ(mtp::testing::read_bytes(top64).size(), 28u + 4u * 256u + 4u * 4u * 31u * 130u);
  EXPECT_LT(mtp::testing::read_bytes(top64).size(), mtp::testing::read_bytes(full).size());
  const std::string q4 = dir_.file("q4.gguf");
  ASSERT_EQ(run_mtp("synth --shape tiny --mtp --type q4_0 --structured 1.75 --seed 1 -o " + q4).exit_code, 0);
  auto kld = [&](const std::string& model, const std::string& base_file) {
    const auto r = run_mtp("perplexity -m " + model + " --kl-divergence-base " + base_file +
                           " --kl-divergence --json -t 2");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return json_of(r);
  };
  const Json self = kld(kModel, top64);
  EXPECT_NEAR(self["kld"]["mean"].get<double>(), 0.0, 1e-6);
  EXPECT_EQ(self["same_top"]["count"], 4 * 31);
  const Json f = kld(q4, full), k64 = kld(q4, top64), k512 = kld(q4, top512);
  const double exact = f["kld"]["mean"].get<double>(), lower = k64["kld"]["mean"].get<double>();
  EXPECT_GT(exact, 1e-4);
  EXPECT_LE(lower, exact * (1 + 1e-3));
  EXPECT_GT(lower, 0.5 * exact);
  EXPECT_GT(k64["base_rest_mass_mean"].get<double>(), 0.0);
  EXPECT_NEAR(k512["kld"]["mean"].get<double>(), exact, 1e-3 * exact);
  EXPECT_EQ(k64["same_top"]["count"], f["same_top"]["count"]);  // exact in both formats
  EXPECT_NEAR(k64["ppl_base"]["value"].get<double>(), f["ppl_base"]["value"].get<double>(),
              1e-3 * f["ppl_base"]["value"].get<double>());
  std::printf("q4 against the bundled model: full KLD %.6f, top-64 %.6f (rest mass %.4f), top-512 %.6f\n",
              exact, lower, k64["base_rest_mass_mean"].get<double>(), k512["kld"]["mean"].get<double>());

  const std::string cmd =
      std::string("perplexity -m ") + kModel + " -f " + text_ + " -c 64 --kl-divergence-base ";
  EXPECT_NE(
      error_of(cmd + dir_.file("x.kld") + " --kld-top-k 513", 2).find("more than the model's vocabulary"),
      std::string::npos);
  EXPECT_NE(error_of(cmd + top64 + " --kl-divergence --kld-top-k 8", 2).find("--kld-top-k sets the format"),
            std::string::npos);
}

TEST_F(PerplexityCli, MismatchedAndBrokenInputsAreOneLineErrors) {
  const std::string a = base("a.kld");
  const std::string cmd = std::string("perplexity -m ") + kModel + " --kl-divergence --kl-divergence-base ";
  const std::string other = write_text(dir_, "other.txt", sample_text(8, 1200));
  EXPECT_NE(error_of(cmd + a + " -f " + other, 1).find("not the text (or the tokenizer) of that base file"),
            std::string::npos);
  EXPECT_NE(error_of(cmd + a + " -c 128", 2).find("was computed with 64"), std::string::npos);

  std::vector<uint8_t> bytes = mtp::testing::read_bytes(a);
  bytes.resize(bytes.size() - 3);
  const std::string cut = dir_.file("cut.kld");
  std::ofstream(cut, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  EXPECT_NE(error_of(cmd + cut, 1).find("(truncated)"), std::string::npos);

  // A base file over another vocabulary (600 ids) with the same tokens.
  auto f = KldBaseFile::open(a);
  ASSERT_TRUE(f.ok());
  auto w = KldBaseWriter::create(dir_.file("v600.kld"), 64, 600, f->tokens());
  ASSERT_TRUE(w.ok());
  std::vector<uint16_t> rows(static_cast<size_t>(kld_scored_per_chunk(64) * kld_row_words(600)));
  for (int c = 0; c < 4; ++c) ASSERT_TRUE(w->write_chunk(rows).ok());
  ASSERT_TRUE(w->commit().ok());
  EXPECT_NE(error_of(cmd + dir_.file("v600.kld"), 1)
                .find("a vocabulary of 600, but tests/data/example.gguf has 512"),
            std::string::npos);

  const std::string short_text = write_text(dir_, "short.txt", "a few words");
  EXPECT_NE(error_of(std::string("perplexity -m ") + kModel + " -f " + short_text + " -c 64", 1)
                .find("needs at least 128 (two chunks)"),
            std::string::npos);
  EXPECT_NE(
      error_of(std::string("perplexity -m ") + kModel + " --kl-divergence", 2).find("--kl-divergence-base"),
      std::string::npos);
}

}  // namespace
}  // namespace mtp::eval
