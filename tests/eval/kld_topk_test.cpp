// The compact top-k base file through the library: the row against the exact log-softmax, the KLD of a row
// against its own logits (0) and against a known shift (the coarse-grained KLD computed directly, a lower
// bound of the exact KLD short by exactly the rest mass times the tails' KLD, equal to it at k = n_vocab),
// and the file's layout, round trip and refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "eval/kld_topk.h"
#include "logits_fixture.h"
#include "test_util.h"

namespace mtp::eval {
namespace {

using mtp::eval::testing::log_softmax;
using mtp::eval::testing::open_error;
using mtp::eval::testing::random_logits;
using mtp::testing::TempDir;
using mtp::testing::write_bytes;

std::vector<uint32_t> encode(const std::vector<float>& logits, int32_t next, int32_t k) {
  std::vector<uint32_t> row(static_cast<size_t>(topk_row_words(k)));
  encode_top_k(logits, next, k, row);
  return row;
}

int32_t id_at(const std::vector<uint32_t>& row, int j) {
  return std::bit_cast<int32_t>(row[static_cast<size_t>(2 + 2 * j)]);
}
float log_p_at(const std::vector<uint32_t>& row, int j) {
  return std::bit_cast<float>(row[static_cast<size_t>(3 + 2 * j)]);
}

TEST(KldTopK, RowHoldsTheTopKOfTheLogSoftmaxAndTheRestsMass) {
  const std::vector<float> logits = random_logits(301, 1);
  const std::vector<uint32_t> row = encode(logits, 17, 8);
  ASSERT_EQ(row.size(), 2u + 2u * 8u);
  const std::vector<double> exact = log_softmax(logits);
  std::vector<double> sorted = exact;
  std::sort(sorted.rbegin(), sorted.rend());
  double top_mass = 0;
  for (int j = 0; j < 8; ++j) {
    EXPECT_NEAR(log_p_at(row, j), sorted[static_cast<size_t>(j)], 1e-5) << j;
    EXPECT_NEAR(log_p_at(row, j), exact[static_cast<size_t>(id_at(row, j))], 1e-5) << j;
    top_mass += std::exp(exact[static_cast<size_t>(id_at(row, j))]);
  }
  EXPECT_NEAR(std::bit_cast<float>(row[0]), exact[17], 1e-5);
  EXPECT_NEAR(topk_rest_mass(row), 1 - top_mass, 1e-6);
  EXPECT_EQ(std::bit_cast<float>(encode(logits, 17, 301)[1]), -INFINITY);  // k = n_vocab leaves nothing
}

TEST(KldTopK, KldOfARowAgainstItsOwnLogitsIsZero) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const std::vector<float> logits = random_logits(512, seed);
    const TokenComparison t = compare_top_k(logits, encode(logits, 3, 16), 3);
    EXPECT_NEAR(t.kld, 0.0, 1e-6) << seed;
    EXPECT_TRUE(t.same_top);
    EXPECT_NEAR(t.nll, t.nll_base, 1e-5);
    EXPECT_NEAR(t.p_diff, 0.0f, 1e-6);
  }
}

// The model's logits are the base's with +2 on every 7th token and -1.5 on every 11th. With K the base's top
// k, P and Q the two distributions: compact = sum over K of p log(p/q) + p(rest) log(p(rest)/q(rest)), and
// exact - compact = p(rest) * KL(P restricted to the rest || Q restricted to the rest), both renormalized.
TEST(KldTopK, KldAgainstAKnownShiftIsTheCoarseGrainedKldALowerBound) {
  const int64_t n_vocab = 512;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const std::vector<float> base = random_logits(n_vocab, seed);
    std::vector<float> shifted = base;
    for (int64_t i = 0; i < n_vocab; i += 7) shifted[static_cast<size_t>(i)] += 2.0f;
    for (int64_t i = 0; i < n_vocab; i += 11) shifted[static_cast<size_t>(i)] -= 1.5f;
    const std::vector<double> lp = log_softmax(base), lq = log_softmax(shifted);
    double exact = 0;
    for (int64_t i = 0; i < n_vocab; ++i) exact += std::exp(lp[i]) * (lp[i] - lq[i]);
    for (const int32_t k : {4, 32, 128}) {
      const std::vector<uint32_t> row = encode(base, 5, k);
      const TokenComparison t = compare_top_k(shifted, row, 5);
      std::vector<bool> in_top(static_cast<size_t>(n_vocab));
      double head = 0, p_rest = 1, q_rest = 1;
      for (int j = 0; j < k; ++j) {
        const size_t id = static_cast<size_t>(id_at(row, j));
        in_top[id] = true;
        head += std::exp(lp[id]) * (lp[id] - lq[id]);
        p_rest -= std::exp(lp[id]);
        q_rest -= std::exp(lq[id]);
      }
      const double compact = head + p_rest * std::log(p_rest / q_rest);
      double tails = 0;  // KL of the renormalized tails
      for (int64_t i = 0; i < n_vocab; ++i) {
        if (in_top[static_cast<size_t>(i)]) continue;
        const double a = lp[i] - std::log(p_rest), b = lq[i] - std::log(q_rest);
        tails += std::exp(a) * (a - b);
      }
      EXPECT_NEAR(t.kld, compact, 1e-5 * exact) << seed << " k " << k;
      EXPECT_LE(t.kld, exact + 1e-6) << seed << " k " << k;
      EXPECT_NEAR(exact - t.kld, p_rest * tails, 1e-5 * exact) << seed << " k " << k;
      EXPECT_NEAR(t.nll, -lq[5], 1e-5);
      EXPECT_NEAR(t.nll_base, -lp[5], 1e-5);
    }
    EXPECT_NEAR(compare_top_k(shifted, encode(base, 5, n_vocab), 5).kld, exact, 1e-5 * exact) << seed;
  }
}

std::string write_base(const TempDir& dir, const std::string& name, int32_t n_ctx, int32_t n_vocab, int32_t k,
                       int chunks) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n_ctx * chunks; ++i) tokens.push_back((i * 37) % n_vocab);
  auto w = TopKBaseWriter::create(dir.file(name), n_ctx, n_vocab, k, tokens);
  EXPECT_TRUE(w.ok()) << w.status().message();
  const int64_t words = topk_row_words(k), scored = kld_scored_per_chunk(n_ctx);
  for (int c = 0; c < chunks; ++c) {
    std::vector<uint32_t> rows(static_cast<size_t>(scored * words));
    for (int64_t r = 0; r < scored; ++r) {
      encode_top_k(random_logits(n_vocab, static_cast<uint64_t>(100 * c + r)),
                   tokens[static_cast<size_t>(c * n_ctx + n_ctx / 2 + r + 1)], k,
                   std::span(rows).subspan(static_cast<size_t>(r * words), static_cast<size_t>(words)));
    }
    EXPECT_TRUE(w->write_chunk(rows).ok());
  }
  EXPECT_TRUE(w->commit().ok());
  return dir.file(name);
}

TEST(KldTopK, FileLayoutAndRoundTrip) {
  TempDir dir;
  const std::string path = write_base(dir, "base.kldk", 16, 33, 5, 3);
  EXPECT_TRUE(is_topk_base(path));
  auto f = TopKBaseFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->n_ctx(), 16);
  EXPECT_EQ(f->n_vocab(), 33);
  EXPECT_EQ(f->n_chunk(), 3);
  EXPECT_EQ(f->top_k(), 5);
  const std::vector<uint8_t> a = mtp::testing::read_bytes(path);
  ASSERT_EQ(a.size(), 28u + 4u * 48u + 4u * 3u * 7u * 12u);  // header, tokens, 3 chunks x 7 rows x 12 words
  EXPECT_EQ(std::memcmp(a.data(), "_mtpkld_", 8), 0);
  uint32_t version;
  std::memcpy(&version, a.data() + 8, 4);
  EXPECT_EQ(version, 1u);
  auto w = TopKBaseWriter::create(dir.file("copy.kldk"), 16, 33, 5, f->tokens());
  ASSERT_TRUE(w.ok());
  for (int32_t c = 0; c < 3; ++c) ASSERT_TRUE(w->write_chunk(f->chunk_rows(c)).ok());
  ASSERT_TRUE(w->commit().ok());
  EXPECT_EQ(a, mtp::testing::read_bytes(dir.file("copy.kldk")));
}

TEST(KldTopK, TruncatedOrCorruptFilesAreOneLineErrors) {
  TempDir dir;
  const std::vector<uint8_t> good = mtp::testing::read_bytes(write_base(dir, "base.kldk", 16, 33, 5, 2));
  const std::string bad = dir.file("bad.kldk");
  const size_t rows = 28 + 4 * 32;  // where the first row starts
  auto with = [&](size_t offset, auto value) {
    std::vector<uint8_t> b = good;
    std::memcpy(b.data() + offset, &value, sizeof value);
    write_bytes(bad, b);
    return open_error<TopKBaseFile>(bad);
  };
  write_bytes(bad, std::vector<uint8_t>(good.begin(), good.end() - 1));
  EXPECT_NE(open_error<TopKBaseFile>(bad).find("(truncated)"), std::string::npos);
  write_bytes(bad, std::vector<uint8_t>(good.begin(), good.begin() + 20));
  EXPECT_NE(open_error<TopKBaseFile>(bad).find("shorter than the header (truncated)"), std::string::npos);
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  write_bytes(bad, longer);
  EXPECT_NE(open_error<TopKBaseFile>(bad).find("(trailing bytes)"), std::string::npos);
  EXPECT_NE(with(0, 'X').find("no \"_mtpkld_\" header"), std::string::npos);
  EXPECT_NE(with(8, uint32_t{2}).find("compact base version 2; this build reads version 1"),
            std::string::npos);
  EXPECT_NE(with(24, int32_t{34}).find("bad header"), std::string::npos);     // top_k over n_vocab
  EXPECT_NE(with(16, int32_t{0}).find("bad header"), std::string::npos);      // no vocabulary
  EXPECT_NE(with(20, int32_t{0x7fffffff}).find("needs"), std::string::npos);  // sizes past 64 bits
  EXPECT_NE(with(28 + 4 * 3, int32_t{33}).find("token 3 is 33"), std::string::npos);
  // Rows: the first row's entries are at rows + 8 + 8 j (token) and rows + 12 + 8 j (log p).
  EXPECT_NE(with(rows, 0.5f).find("chunk 0, position 8: log p(next) 0.5"), std::string::npos);
  EXPECT_NE(with(rows + 4, NAN).find("log rest mass"), std::string::npos);
  EXPECT_NE(with(rows + 8 + 8, int32_t{-1}).find("entry 1: token -1 outside"), std::string::npos);
  const int32_t first = std::bit_cast<int32_t>(good[rows + 8] | good[rows + 9] << 8 | good[rows + 10] << 16 |
                                               good[rows + 11] << 24);
  EXPECT_NE(with(rows + 8 + 16, first).find("a token appears twice"), std::string::npos);
  EXPECT_NE(with(rows + 12 + 8, 0.0f).find("entry 1: not in descending order"), std::string::npos);
  EXPECT_NE(with(rows + 12, -0.001f).find("sum to"), std::string::npos);
}

}  // namespace
}  // namespace mtp::eval
