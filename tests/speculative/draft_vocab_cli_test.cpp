// `mtp draft-vocab build` and `show`, run as a user would: the file they write is checked against the
// ranking computed here from the same tokenizer, and bad input gives one clear line and the right exit code.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "../gguf/test_util.h"
#include "../model/fixtures.h"
#include "../tools/cli_util.h"
#include "speculative/draft_vocab.h"
#include "tokenizer/tokenizer.h"

namespace mtp::speculative {
namespace {

using mtp::testing::contains;
using mtp::testing::fixtures;
using mtp::testing::run_mtp;
using mtp::testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
  mtp::testing::write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string q(const std::string& s) {
  return "'" + s + "'";
}

class DraftVocabCli : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = fixtures().tiny_mtp;
    auto m = Model::load(model_);
    ASSERT_TRUE(m.ok()) << m.status().message();
    auto tok = Tokenizer::create(m->vocab());
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    tok_.emplace(std::move(tok).value());
  }
  // The ids the build command should write for these texts and recorded ids.
  std::vector<int32_t> expected(const std::vector<std::string>& texts, const std::vector<int32_t>& recorded,
                                int64_t size) const {
    std::vector<uint64_t> counts(static_cast<size_t>(tok_->n_tokens()), 0);
    for (const std::string& t : texts) {
      EncodeOptions opt;
      opt.add_bos = opt.add_eos = false;
      for (int32_t id : tok_->encode(t, opt)) ++counts[static_cast<size_t>(id)];
    }
    for (int32_t id : recorded) ++counts[static_cast<size_t>(id)];
    auto r = rank_draft_ids(counts, tok_->vocab(), size, always_draft_ids(tok_->vocab()));
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.value_or({});
  }

  TempDir dir_;
  std::string model_;
  std::optional<Tokenizer> tok_;
};

TEST_F(DraftVocabCli, BuildRanksTheCorpusTokensAfterTheControlTokens) {
  const std::string a = repeat("the cat sat on the mat. ", 40) + "\n\n",
                    b = repeat("<|im_start|>hello world<|im_end|>\n", 25);
  write_text(dir_.file("a.txt"), a);
  write_text(dir_.file("b.txt"), b);
  const std::string out = dir_.file("ids.bin");
  auto r = run_mtp("draft-vocab build " + q(dir_.file("a.txt")) + " " + q(dir_.file("b.txt")) + " -m " +
                       q(model_) + " -o " + q(out) + " --size 100",
                   true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "from 2 corpus files")) << r.output;
  EXPECT_TRUE(contains(r.output, "wrote          " + out + ": 100 of 512 ids (5 control tokens")) << r.output;
  // Control tokens, seen and unseen ids are disjoint and add up to the subset (the control tokens are in
  // the corpus too).
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.output, m, std::regex(R"(\((\d+) control tokens, (\d+) seen, (\d+) unseen\))")))
      << r.output;
  EXPECT_EQ(std::stoi(m[1]) + std::stoi(m[2]) + std::stoi(m[3]), 100) << r.output;
  EXPECT_GT(std::stoi(m[3]), 0) << r.output;
  EXPECT_TRUE(contains(r.output, "coverage       100.00%")) << r.output;
  auto f = read_draft_vocab_file(out, 512);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const std::vector<int32_t> want = expected({a, b}, {}, 100);
  EXPECT_EQ(*f, want);
  // The control tokens lead; the corpus's most frequent token follows them.
  const std::vector<int32_t> always = always_draft_ids(tok_->vocab());
  EXPECT_TRUE(std::equal(always.begin(), always.end(), f->begin()));

  // show: the summary, then against the model, then every id.
  r = run_mtp("draft-vocab show " + q(out), true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "format         draft-vocab v1, 420 bytes")) << r.output;
  EXPECT_TRUE(contains(r.output, "vocabulary     512 tokens")) << r.output;
  EXPECT_TRUE(contains(r.output, "ids            100 (19.53% of the vocabulary)")) << r.output;
  r = run_mtp("draft-vocab show " + q(out) + " -m " + q(model_), true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "control tokens 5 of 5 always-included tokens in the file\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "top ids        <|endoftext|> | <|im_start|>")) << r.output;
  r = run_mtp("draft-vocab show --ids " + q(out));
  ASSERT_EQ(r.exit_code, 0);
  std::istringstream lines(r.output);
  std::vector<int32_t> printed;
  for (int32_t id; lines >> id;) printed.push_back(id);
  EXPECT_EQ(printed, want);
}

TEST_F(DraftVocabCli, BuildFromRecordedIds) {
  write_text(dir_.file("ids.txt"), "# ids a server produced\n300 5 5\n\n9 5 # trailing comment\n9\r\n");
  const std::string out = dir_.file("rec.bin");
  auto r = run_mtp("draft-vocab build --from-ids " + q(dir_.file("ids.txt")) + " -m " + q(model_) + " -o " +
                       q(out) + " --size 10",
                   true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "counted        6 tokens (0 from 0 corpus files, 6 from 1 id files), 3 distinct ids"))
      << r.output;
  auto f = read_draft_vocab_file(out, 512);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(*f, expected({}, {300, 5, 5, 9, 5, 9}, 10));
  // After the 5 control tokens: 5 (three times), 9 (twice), 300, then the lowest unseen ids 0 and 1.
  EXPECT_EQ(std::vector<int32_t>(f->begin() + 5, f->end()), (std::vector<int32_t>{5, 9, 300, 0, 1}));
  // Corpus and ids add up; --from-ids takes one file, so a corpus file after it stays a corpus file.
  write_text(dir_.file("c.txt"), "hello hello hello");
  r = run_mtp("draft-vocab build --from-ids " + q(dir_.file("ids.txt")) + " " + q(dir_.file("c.txt")) +
                  " -m " + q(model_) + " -o " + q(out) + " --size 12",
              true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(*read_draft_vocab_file(out, 512), expected({"hello hello hello"}, {300, 5, 5, 9, 5, 9}, 12));
}

TEST_F(DraftVocabCli, BadInputGivesOneClearLine) {
  const std::string out = dir_.file("bad.bin");
  write_text(dir_.file("corpus.txt"), "some text");
  const std::string base = " -m " + q(model_) + " -o " + q(out);
  write_text(dir_.file("words.txt"), "12 13\n14 abc\n");
  // A bad file is exit code 1, a bad flag 2.
  auto r = run_mtp("draft-vocab build --from-ids " + q(dir_.file("words.txt")) + base + " --size 10", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, dir_.file("words.txt") + ":2: 'abc' is not a token id")) << r.output;
  write_text(dir_.file("range.txt"), "1\n2\n512\n");
  r = run_mtp("draft-vocab build --from-ids " + q(dir_.file("range.txt")) + base + " --size 10", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, ":3: id 512 is out of range (vocabulary of 512 tokens)")) << r.output;
  r = run_mtp("draft-vocab build " + q(dir_.file("corpus.txt")) + base + " --size 513", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(
      contains(r.output, "mtp draft-vocab build: subset size 513 exceeds the vocabulary (512 tokens)"))
      << r.output;
  // The size is checked before any corpus is read.
  r = run_mtp("draft-vocab build " + q(dir_.file("missing.txt")) + base + " --size 0", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "subset size must be at least 1 (got 0)")) << r.output;
  r = run_mtp("draft-vocab build " + q(dir_.file("corpus.txt")) + base + " --size 3", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "smaller than the 5 control tokens")) << r.output;
  r = run_mtp("draft-vocab build" + base + " --size 10", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "nothing to count")) << r.output;
  r = run_mtp("draft-vocab build " + q(dir_.file("missing.txt")) + base + " --size 10", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, dir_.file("missing.txt") + ": cannot open")) << r.output;
  r = run_mtp("draft-vocab build " + q(dir_.file("corpus.txt")) + " -m " + q(dir_.file("corpus.txt")) +
                  " -o " + q(out) + " --size 10",
              true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out)) << "a failed build must leave no output";
  r = run_mtp("draft-vocab", true);
  EXPECT_EQ(r.exit_code, 2) << r.output;

  // show: a corrupt file, and a file built for another vocabulary size.
  write_text(out, "MTPDVOCB\x01");
  r = run_mtp("draft-vocab show " + q(out), true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "mtp draft-vocab show: " + out + ": truncated: 9 bytes")) << r.output;
  ASSERT_TRUE(write_draft_vocab_file(out, std::vector<int32_t>{1, 700}, 1000).ok());
  r = run_mtp("draft-vocab show " + q(out) + " -m " + q(model_), true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "built for a vocabulary of 1000 tokens")) << r.output;
}

}  // namespace
}  // namespace mtp::speculative
