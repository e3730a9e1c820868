// The vocabulary-subset draft head: the subset file format and its validation, the ranking that
// builds a subset, the always-included control tokens, and the gathered head, whose logits must equal the
// full head's bitwise for every weight type.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>

#include "../gguf/test_util.h"
#include "../model/fixtures.h"
#include "kernels/matmul.h"
#include "model/forward.h"
#include "model/memory.h"
#include "speculative/draft_vocab.h"
#include "surgery/synth.h"

namespace mtp::speculative {
namespace {

using mtp::testing::contains;
using mtp::testing::fixtures;
using mtp::testing::read_bytes;
using mtp::testing::TempDir;
using mtp::testing::write_bytes;

// A valid file's bytes, built by hand (little-endian u32 fields) so the tests do not trust the writer.
std::vector<uint8_t> file_bytes(uint32_t version, uint32_t n_vocab, uint32_t count,
                                std::vector<uint32_t> ids) {
  std::vector<uint8_t> b = {'M', 'T', 'P', 'D', 'V', 'O', 'C', 'B'};
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  u32(version);
  u32(n_vocab);
  u32(count);
  for (uint32_t id : ids) u32(id);
  return b;
}

// The error message of reading `bytes` as a subset file (empty when it was accepted).
std::string read_error(const TempDir& dir, const std::vector<uint8_t>& bytes) {
  const std::string path = dir.file("ids.bin");
  write_bytes(path, bytes);
  auto r = read_draft_vocab_file(path);
  return r.ok() ? std::string() : r.status().message();
}

TEST(DraftVocabFile, RoundTripKeepsTheRankOrderInTheDocumentedLayout) {
  TempDir dir;
  const std::string path = dir.file("ids.bin");
  const std::vector<int32_t> ids = {300, 7, 0, 511, 42};
  ASSERT_TRUE(write_draft_vocab_file(path, ids, 512).ok());
  EXPECT_EQ(read_bytes(path), file_bytes(1, 512, 5, {300, 7, 0, 511, 42}));
  auto f = read_draft_vocab_file(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->version, 1u);
  EXPECT_EQ(f->n_vocab, 512);
  EXPECT_EQ(f->ids, ids);
  auto checked = read_draft_vocab_file(path, 512);
  ASSERT_TRUE(checked.ok()) << checked.status().message();
  EXPECT_EQ(*checked, ids);
  // Written atomically: nothing but the file itself is left in the folder.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(DraftVocabFile, BadMagicIsReportedWithThePath) {
  TempDir dir;
  std::vector<uint8_t> b = file_bytes(1, 512, 1, {3});
  b[0] = 'G', b[1] = 'G', b[2] = 'U', b[3] = 'F';
  const std::string e = read_error(dir, b);
  EXPECT_TRUE(contains(e, dir.file("ids.bin"))) << e;
  EXPECT_TRUE(contains(e, "not a draft-vocab subset file")) << e;
  EXPECT_TRUE(contains(e, "GGUF")) << e;
  EXPECT_TRUE(contains(read_error(dir, {'h', 'i'}), "not a draft-vocab subset file"));
}

TEST(DraftVocabFile, TruncationAndTrailingBytesAreReported) {
  TempDir dir;
  const std::vector<uint8_t> good = file_bytes(1, 512, 3, {1, 2, 3});
  EXPECT_TRUE(read_error(dir, good).empty());
  EXPECT_TRUE(contains(read_error(dir, {}), "truncated: 0 bytes")) << read_error(dir, {});
  for (size_t cut : {size_t{8}, size_t{12}, size_t{19}}) {
    const std::string e = read_error(dir, {good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)});
    EXPECT_TRUE(contains(e, "truncated")) << cut << ": " << e;
  }
  for (size_t cut : {size_t{20}, size_t{25}, good.size() - 1}) {
    const std::string e = read_error(dir, {good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)});
    EXPECT_TRUE(contains(e, "truncated: the header announces 3 ids (32 bytes)")) << cut << ": " << e;
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_TRUE(contains(read_error(dir, longer), "1 trailing bytes")) << read_error(dir, longer);
}

TEST(DraftVocabFile, HeaderFieldsAreChecked) {
  TempDir dir;
  EXPECT_TRUE(
      contains(read_error(dir, file_bytes(2, 512, 1, {3})), "format version 2; this build reads version 1"));
  EXPECT_TRUE(contains(read_error(dir, file_bytes(1, 0, 1, {0})), "vocabulary size 0"));
  EXPECT_TRUE(contains(read_error(dir, file_bytes(1, 0x80000000u, 1, {0})), "vocabulary size 2147483648"));
  EXPECT_TRUE(contains(read_error(dir, file_bytes(1, 512, 0, {})), "holds no ids"));
  EXPECT_TRUE(
      contains(read_error(dir, file_bytes(1, 2, 3, {0, 1, 0})), "count 3 exceeds the vocabulary size 2"));
  // A count that would overflow a naive size computation is still just a truncated file.
  EXPECT_TRUE(contains(read_error(dir, file_bytes(1, 0x7fffffffu, 0x7fffffffu, {1})), "truncated"));
}

TEST(DraftVocabFile, OutOfRangeAndDuplicateIdsAreReported) {
  TempDir dir;
  std::string e = read_error(dir, file_bytes(1, 512, 3, {5, 512, 7}));
  EXPECT_TRUE(contains(e, "id 512 at index 1 is out of range for a vocabulary of 512 tokens")) << e;
  e = read_error(dir, file_bytes(1, 512, 2, {5, 0xffffffffu}));
  EXPECT_TRUE(contains(e, "id 4294967295 at index 1 is out of range")) << e;
  e = read_error(dir, file_bytes(1, 512, 4, {9, 3, 4, 3}));
  EXPECT_TRUE(contains(e, "id 3 appears more than once (index 1 and 3)")) << e;
  EXPECT_TRUE(contains(e, dir.file("ids.bin"))) << e;
}

TEST(DraftVocabFile, AFileForAnotherVocabularySizeIsRefused) {
  TempDir dir;
  const std::string path = dir.file("ids.bin");
  ASSERT_TRUE(write_draft_vocab_file(path, std::vector<int32_t>{1, 2}, 512).ok());
  auto r = read_draft_vocab_file(path, 248320);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_TRUE(contains(r.status().message(), "built for a vocabulary of 512 tokens, the model has 248320"));
  auto missing = read_draft_vocab_file(dir.file("nope.bin"), 512);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.status().message(), dir.file("nope.bin")));
}

TEST(DraftVocabFile, TheWriterRefusesBadIdsAndLeavesNothing) {
  TempDir dir;
  const std::string path = dir.file("ids.bin");
  Status s = write_draft_vocab_file(path, std::vector<int32_t>{1, 2, 1}, 512);
  EXPECT_TRUE(contains(s.message(), "appears more than once")) << s.message();
  s = write_draft_vocab_file(path, std::vector<int32_t>{1, 512}, 512);
  EXPECT_TRUE(contains(s.message(), "out of range")) << s.message();
  s = write_draft_vocab_file(path, std::vector<int32_t>{-1}, 512);
  EXPECT_TRUE(contains(s.message(), "out of range")) << s.message();
  EXPECT_FALSE(write_draft_vocab_file(path, {}, 512).ok());
  EXPECT_FALSE(write_draft_vocab_file(path, std::vector<int32_t>{0}, 0).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 0);
}

// ---------------------------------------------------------------------------------------------------------

Vocab small_vocab(const std::vector<std::pair<std::string, TokenType>>& tokens) {
  Vocab v;
  for (const auto& [text, type] : tokens) {
    v.tokens.push_back(text);
    v.token_types.push_back(static_cast<int32_t>(type));
  }
  return v;
}

TEST(AlwaysDraftIds, ControlAndUserDefinedTokensAndTheEos) {
  auto m = Model::load(fixtures().tiny_mtp);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Vocab& v = m->vocab();
  const std::vector<int32_t> ids = always_draft_ids(v);
  std::vector<std::string> texts;
  for (int32_t id : ids) texts.push_back(v.tokens[static_cast<size_t>(id)]);
  // The synthetic vocabulary's specials (bpe_trainer.h): three control tokens and two user-defined ones.
  EXPECT_EQ(texts,
            (std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"}));
  ASSERT_TRUE(v.eos_id.has_value());
  EXPECT_TRUE(std::binary_search(ids.begin(), ids.end(), *v.eos_id));
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
}

TEST(AlwaysDraftIds, ChatMarkersAreFoundByTextWhateverTheirType) {
  Vocab v = small_vocab({{"a", TokenType::kNormal},
                         {"<tool_call>", TokenType::kNormal},
                         {"</tool_call>", TokenType::kNormal},
                         {"<|fim_pad|>", TokenType::kControl},
                         {"b", TokenType::kNormal},
                         {"<|im_end|>", TokenType::kNormal},
                         {"[PAD6]", TokenType::kUnused}});
  v.eos_id = 4;  // an odd EOS is still included
  EXPECT_EQ(always_draft_ids(v), (std::vector<int32_t>{1, 2, 3, 4, 5}));
  v.eos_id = 99;  // out of range: ignored rather than trusted
  EXPECT_EQ(always_draft_ids(v), (std::vector<int32_t>{1, 2, 3, 5}));
  EXPECT_TRUE(always_draft_ids(Vocab{}).empty());
}

TEST(AlwaysDraftIds, AHugeSetOfUserDefinedTokensContributesOnlyTheNamedMarkers) {
  std::vector<std::pair<std::string, TokenType>> t;
  for (int i = 0; i < 1100; ++i) t.push_back({"<extra_" + std::to_string(i) + ">", TokenType::kUserDefined});
  t.push_back({"<|im_end|>", TokenType::kControl});
  t.push_back({"</think>", TokenType::kUserDefined});
  EXPECT_EQ(always_draft_ids(small_vocab(t)), (std::vector<int32_t>{1100, 1101}));
}

TEST(RankDraftIds, AlwaysFirstThenByCountThenUnseenByIdWithUnusedLast) {
  Vocab v = small_vocab({{"a", TokenType::kNormal},
                         {"b", TokenType::kNormal},
                         {"[PAD]", TokenType::kUnused},
                         {"c", TokenType::kNormal},
                         {"d", TokenType::kNormal},
                         {"e", TokenType::kNormal},
                         {"<|im_end|>", TokenType::kControl},
                         {"f", TokenType::kNormal}});
  const std::vector<uint64_t> counts = {0, 5, 0, 9, 0, 5, 100, 1};
  const std::vector<int32_t> always = {6};
  auto r = rank_draft_ids(counts, v, 8, always);
  ASSERT_TRUE(r.ok()) << r.status().message();
  // 6 (always; its own count does not matter), 3 (9), 1 and 5 (5 each: lower id first), 7 (1), then unseen 0,
  // 4, and the unused 2 last.
  EXPECT_EQ(*r, (std::vector<int32_t>{6, 3, 1, 5, 7, 0, 4, 2}));
  EXPECT_EQ(*rank_draft_ids(counts, v, 3, always), (std::vector<int32_t>{6, 3, 1}));
  EXPECT_EQ(*rank_draft_ids(counts, v, 6, always), (std::vector<int32_t>{6, 3, 1, 5, 7, 0}));
  EXPECT_EQ(*rank_draft_ids(counts, Vocab{}, 8, {}), (std::vector<int32_t>{6, 3, 1, 5, 7, 0, 2, 4}));
}

TEST(RankDraftIds, Errors) {
  const std::vector<uint64_t> counts(4, 0);
  const std::vector<int32_t> two = {1, 2};
  EXPECT_TRUE(contains(rank_draft_ids(counts, Vocab{}, 0, {}).status().message(), "at least 1"));
  EXPECT_TRUE(
      contains(rank_draft_ids(counts, Vocab{}, 5, {}).status().message(), "exceeds the vocabulary (4"));
  EXPECT_TRUE(contains(rank_draft_ids(counts, Vocab{}, 1, two).status().message(),
                       "smaller than the 2 control tokens"));
  const std::vector<int32_t> bad = {4};
  EXPECT_TRUE(contains(rank_draft_ids(counts, Vocab{}, 2, bad).status().message(), "out of range"));
  EXPECT_FALSE(rank_draft_ids(counts, small_vocab({{"a", TokenType::kNormal}}), 1, {}).ok());
}

// ---------------------------------------------------------------------------------------------------------
// The gathered head.

// A tiny model 256 wide (so every block format, K-quants included, applies to the head), weights of `type`.
std::string typed_model(GgmlType type) {
  static TempDir dir;
  static std::map<GgmlType, std::string> made;
  if (auto it = made.find(type); it != made.end()) return it->second;
  surgery::SynthOptions opt;
  Qwen35MoeConfig c = *qwen35moe_shape("tiny", 2);
  c.n_embd = 256;
  opt.config = c;
  opt.mtp = true;
  opt.type = type;
  opt.seed = 11;
  const std::string path = dir.file(std::string(type_name(type)) + ".gguf");
  ThreadPool pool(2);
  Status s = surgery::synth_model(opt, path, pool);
  if (!s.ok()) throw std::runtime_error(s.message());
  return made[type] = path;
}

std::vector<float> random_rows(int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> h(static_cast<size_t>(rows * n));
  for (float& x : h) x = d(rng);
  return h;
}

// The full head over `rows` hiddens with the same kernel the engine uses.
std::vector<float> full_head(const Model& m, const std::vector<float>& h, int64_t rows, ThreadPool& pool) {
  const TensorView& head = m.weights().mtp->head;
  const auto w = kernels::MatrixView::contiguous(head.type, head.data, head.ne[0], head.ne[1]);
  kernels::PreparedActivations acts;
  acts.prepare(kernels::act_format(head.type), h.data(), rows, head.ne[0], head.ne[0], &pool);
  std::vector<float> y(static_cast<size_t>(rows * head.ne[1]));
  kernels::matmul(w, acts, y.data(), head.ne[1], &pool);
  return y;
}

void expect_bitwise_subset(const DraftVocab& v, const std::vector<float>& full, const std::vector<float>& sub,
                           int64_t rows, int64_t n_vocab) {
  const int64_t n = v.size();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const float a = sub[static_cast<size_t>(r * n + i)],
                  b = full[static_cast<size_t>(r * n_vocab + v.ids()[i])];
      ASSERT_EQ(std::memcmp(&a, &b, sizeof(float)), 0)
          << "row " << r << " id " << v.ids()[i] << ": " << a << " vs " << b;
    }
  }
}

class DraftHead : public ::testing::TestWithParam<GgmlType> {};

TEST_P(DraftHead, SubsetLogitsEqualTheFullHeadBitwise) {
  auto m = Model::load(typed_model(GetParam()));
  ASSERT_TRUE(m.ok()) << m.status().message();
  const TensorView& head = m->weights().mtp->head;
  const int64_t n_embd = head.ne[0], n_vocab = head.ne[1];
  ASSERT_EQ(head.type, GetParam()) << "the synthetic head should have the weight type";
  ThreadPool pool(2), one(1);
  const int64_t rows = 3;
  const std::vector<float> h = random_rows(rows, n_embd, 5);
  const std::vector<float> full = full_head(*m, h, rows, pool);

  // A scattered ranking (file order, not sorted) with control tokens added.
  std::vector<int32_t> ranked;
  for (int32_t id = 0; id < n_vocab; id += 3) ranked.push_back(static_cast<int32_t>((id * 7) % n_vocab));
  const std::vector<int32_t> always = always_draft_ids(m->vocab());
  auto v = DraftVocab::create(*m, ranked, 100, always);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_FALSE(v->full());
  EXPECT_TRUE(std::is_sorted(v->ids().begin(), v->ids().end()));
  for (size_t i = 0; i < 100; ++i) EXPECT_TRUE(v->contains(ranked[i])) << ranked[i];
  for (size_t i = 100; i < ranked.size(); ++i) {
    if (!std::binary_search(always.begin(), always.end(), ranked[i])) {
      EXPECT_FALSE(v->contains(ranked[i]));
    }
  }
  for (int32_t id : always) EXPECT_TRUE(v->contains(id));
  EXPECT_EQ(v->bytes(), static_cast<uint64_t>(v->size() * head.row_bytes()));

  std::vector<float> sub(static_cast<size_t>(rows * v->size()));
  v->logits(h.data(), rows, sub.data(), pool);
  expect_bitwise_subset(*v, full, sub, rows, n_vocab);
  // Any thread count, one row at a time: the same bits.
  std::vector<float> row1(static_cast<size_t>(v->size()));
  v->logits(h.data() + n_embd, 1, row1.data(), one);
  EXPECT_EQ(std::memcmp(row1.data(), sub.data() + v->size(), row1.size() * sizeof(float)), 0);

  // first_n, and the whole vocabulary (used in place).
  auto first = DraftVocab::first_n(*m, 64, always);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->size(), 64 + static_cast<int64_t>(std::count_if(always.begin(), always.end(),
                                                                   [](int32_t id) { return id >= 64; })));
  for (int32_t id = 0; id < 64; ++id) EXPECT_TRUE(first->contains(id));
  sub.resize(static_cast<size_t>(rows * first->size()));
  first->logits(h.data(), rows, sub.data(), pool);
  expect_bitwise_subset(*first, full, sub, rows, n_vocab);
  auto all = DraftVocab::first_n(*m, n_vocab + 5, {});
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->full());
  EXPECT_EQ(all->size(), n_vocab);
  EXPECT_EQ(all->bytes(), static_cast<uint64_t>(n_vocab * head.row_bytes()));
  sub.resize(static_cast<size_t>(rows * n_vocab));
  all->logits(h.data(), rows, sub.data(), pool);
  EXPECT_EQ(std::memcmp(sub.data(), full.data(), full.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Types, DraftHead,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                                           GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ4_XS),
                         [](const ::testing::TestParamInfo<GgmlType>& i) {
                           return std::string(type_name(i.param));
                         });

// The engine's own MTP pass: the subset logits of its post-norm hidden equal its logits at those ids.
TEST(DraftHead, MatchesTheLogitsOfForwardMtp) {
  auto m = Model::load(fixtures().tiny_q8_mtp);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ThreadPool pool(2);
  MemoryOptions mo;
  mo.n_ctx = 64;
  auto mem = Memory::create(m->config(), mo);
  ASSERT_TRUE(mem.ok()) << mem.status().message();
  const int32_t seq = *mem->seq_create();
  const std::vector<int32_t> tokens = {21, 305, 77, 140, 9};
  Batch b;
  for (size_t p = 0; p < tokens.size(); ++p) b.add(seq, static_cast<int64_t>(p), tokens[p], false);
  Outputs trunk, mtp;
  ASSERT_TRUE(forward(*m, b, *mem, trunk, pool).ok());
  b.clear();
  for (size_t p = 1; p < tokens.size(); ++p)
    b.add_mtp(seq, static_cast<int64_t>(p), tokens[p], trunk.hidden_of(static_cast<int64_t>(p) - 1), true);
  ASSERT_TRUE(forward_mtp(*m, b, *mem, mtp, pool).ok());

  auto v = DraftVocab::first_n(*m, 200, always_draft_ids(m->vocab()));
  ASSERT_TRUE(v.ok()) << v.status().message();
  const int64_t rows = b.size(), n = v->size(), nv = m->config().n_vocab;
  std::vector<float> sub(static_cast<size_t>(rows * n));
  v->logits(mtp.hidden.data(), rows, sub.data(), pool);
  expect_bitwise_subset(*v, mtp.logits, sub, rows, nv);
  // The subset's argmax is the full argmax whenever that lies in the subset, and always an id of the subset.
  for (int64_t r = 0; r < rows; ++r) {
    const std::span<const float> full = mtp.logits_of(r);
    const int32_t best = static_cast<int32_t>(std::max_element(full.begin(), full.end()) - full.begin());
    const int32_t drafted = v->argmax({sub.data() + r * n, static_cast<size_t>(n)});
    EXPECT_TRUE(v->contains(drafted));
    if (v->contains(best)) {
      EXPECT_EQ(drafted, best) << "row " << r;
    }
  }
}

TEST(DraftHead, ArgmaxTiesGoToTheLowestId) {
  auto m = Model::load(fixtures().tiny_mtp);
  ASSERT_TRUE(m.ok());
  const std::vector<int32_t> ranked = {40, 10, 30, 20};
  auto v = DraftVocab::create(*m, ranked, 4, {});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(std::vector<int32_t>(v->ids().begin(), v->ids().end()), (std::vector<int32_t>{10, 20, 30, 40}));
  EXPECT_EQ(v->argmax(std::vector<float>{1, 3, 3, 2}), 20);
  EXPECT_EQ(v->argmax(std::vector<float>{5, 5, 5, 5}), 10);
  EXPECT_EQ(v->argmax(std::vector<float>{-1, -2, -3, 0}), 40);
}

TEST(DraftHead, Errors) {
  auto m = Model::load(fixtures().tiny_mtp);
  ASSERT_TRUE(m.ok());
  const std::vector<int32_t> ranked = {1, 2, 3};
  auto msg = [](const Expected<DraftVocab>& e) { return e.ok() ? std::string("ok") : e.status().message(); };
  EXPECT_TRUE(contains(msg(DraftVocab::create(*m, ranked, 0, {})), "at least 1"));
  EXPECT_TRUE(contains(msg(DraftVocab::first_n(*m, -5, {})), "at least 1"));
  const std::vector<int32_t> out_of_range = {1, 512};
  EXPECT_TRUE(
      contains(msg(DraftVocab::create(*m, out_of_range, 2, {})), "draft id 512 at index 1 is out of range"));
  const std::vector<int32_t> negative = {-3};
  EXPECT_TRUE(contains(msg(DraftVocab::create(*m, ranked, 3, negative)), "always-included id -3"));
  const std::vector<int32_t> dup = {4, 5, 4};
  EXPECT_TRUE(contains(msg(DraftVocab::create(*m, dup, 3, {})), "appears more than once"));
  // Only the part of the ranking that is used matters: the duplicate at index 2 is past size 2.
  EXPECT_TRUE(DraftVocab::create(*m, dup, 2, {}).ok());
  EXPECT_TRUE(contains(msg(DraftVocab::create(*m, {}, 10, {})), "empty"));
  // A ranking shorter than size: all of it.
  auto short_ranking = DraftVocab::create(*m, ranked, 1000, {});
  ASSERT_TRUE(short_ranking.ok());
  EXPECT_EQ(short_ranking->size(), 3);

  auto no_mtp = Model::load(fixtures().tiny_no_mtp);
  ASSERT_TRUE(no_mtp.ok());
  EXPECT_TRUE(contains(msg(DraftVocab::first_n(*no_mtp, 10, {})), "no MTP block"));
  EXPECT_TRUE(contains(msg(DraftVocab::create(*no_mtp, ranked, 3, {})), "no MTP block"));
}

}  // namespace
}  // namespace mtp::speculative
