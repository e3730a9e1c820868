// llama.cpp's KL-divergence base file and statistics through the library: the row encoding against the exact
// log-softmax, the KLD of a row against itself (0) and against a known shift of the logits (a direct
// computation), the statistics against direct computations, and the file's round trip and refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "eval/kld_file.h"
#include "eval/kld_stats.h"
#include "logits_fixture.h"
#include "test_util.h"

namespace mtp::eval {
namespace {

using mtp::eval::testing::log_softmax;
using mtp::eval::testing::open_error;
using mtp::eval::testing::random_logits;
using mtp::testing::TempDir;
using mtp::testing::write_bytes;

std::vector<uint16_t> encode(const std::vector<float>& logits, int32_t next, double* nll = nullptr) {
  std::vector<uint16_t> row(static_cast<size_t>(kld_row_words(static_cast<int64_t>(logits.size()))));
  const double v = encode_log_probs(logits, next, row);
  if (nll != nullptr) *nll = v;
  return row;
}

TEST(KldFile, RowWordsAndScoredPositionsFollowLlamaCpp) {
  EXPECT_EQ(kld_row_words(512), 2 * 256 + 4);
  EXPECT_EQ(kld_row_words(7), 2 * 4 + 4);  // an odd vocabulary is padded to even
  EXPECT_EQ(kld_scored_per_chunk(512), 255);
  EXPECT_EQ(kld_scored_per_chunk(7), 3);
}

TEST(KldFile, RowDecodesToTheLogSoftmaxWithinHalfAStep) {
  const std::vector<float> logits = random_logits(301, 1);
  double nll = 0;
  const std::vector<uint16_t> row = encode(logits, 17, &nll);
  const std::vector<double> exact = log_softmax(logits);
  const std::vector<double> decoded = decode_log_probs(row, 301);
  float scale;
  std::memcpy(&scale, row.data(), sizeof scale);
  const double top = *std::max_element(exact.begin(), exact.end());
  for (size_t i = 0; i < exact.size(); ++i) {
    if (exact[i] < top - 16 + 1e-3) continue;  // under the row's floor: stored as the floor
    EXPECT_NEAR(decoded[i], exact[i], 0.5 * scale + 1e-5) << i;
  }
  EXPECT_NEAR(nll, -exact[17], 1e-5);
  EXPECT_EQ(row.back(), 0);  // the odd vocabulary's padding word
}

TEST(KldFile, KldOfARowAgainstItsOwnLogitsIsZero) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const std::vector<float> logits = random_logits(512, seed);
    const std::vector<uint16_t> row = encode(logits, 3);
    const TokenComparison t = compare_log_probs(logits, row, 3);
    // Not exactly 0: the row's 16-bit codes move each log p by up to half a step (2.4e-4 / 2 nats over a
    // 16-nat span), so the decoded probabilities sum to 1 only within about 1e-5; llama.cpp's self-KLD is
    // the same.
    EXPECT_NEAR(t.kld, 0.0, 3e-5) << seed;
    EXPECT_TRUE(t.same_top);
    EXPECT_NEAR(t.nll, t.nll_base, 2e-4);
    EXPECT_NEAR(t.p_diff, 0.0f, 1e-4);
  }
}

// The model's logits are the base's with a scripted shift: +2 on every 7th token, -1.5 on every 11th. The
// KLD must be sum_i p_base(i) (log p_base(i) - log q(i)) over the base's log p > -16, computed here directly.
TEST(KldFile, KldAgainstAKnownShiftMatchesADirectComputation) {
  const int64_t n_vocab = 512;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const std::vector<float> base = random_logits(n_vocab, seed);
    std::vector<float> shifted = base;
    for (int64_t i = 0; i < n_vocab; i += 7) shifted[static_cast<size_t>(i)] += 2.0f;
    for (int64_t i = 0; i < n_vocab; i += 11) shifted[static_cast<size_t>(i)] -= 1.5f;
    const std::vector<uint16_t> row = encode(base, 5);
    const TokenComparison t = compare_log_probs(shifted, row, 5);

    const std::vector<double> log_p = decode_log_probs(row, n_vocab);  // what the file holds
    const std::vector<double> log_q = log_softmax(shifted);
    const std::vector<double> exact_p = log_softmax(base);
    double direct = 0, direct_exact = 0;
    for (size_t i = 0; i < log_p.size(); ++i) {
      if (log_p[i] > -16) direct += std::exp(log_p[i]) * (log_p[i] - log_q[i]);
      direct_exact += std::exp(exact_p[i]) * (exact_p[i] - log_q[i]);
    }
    EXPECT_GT(direct, 0.01);  // a real divergence, not a rounding
    EXPECT_NEAR(t.kld, direct, 1e-5 * direct) << seed;
    EXPECT_NEAR(t.kld, direct_exact, 1e-3 * direct_exact) << seed;  // the 16-bit rows cost under 0.1%
    EXPECT_NEAR(t.nll, -log_q[5], 1e-5);
    EXPECT_NEAR(t.nll_base, -exact_p[5], 2e-4);
    const bool same = std::max_element(base.begin(), base.end()) - base.begin() ==
                      std::max_element(shifted.begin(), shifted.end()) - shifted.begin();
    EXPECT_EQ(t.same_top, same);
  }
}

TEST(KldStats, MatchDirectComputations) {
  // 9 scored positions per chunk (n_ctx 20: positions 10..18), two chunks, hand-made comparisons.
  KldAccumulator acc(20, 3);
  std::vector<TokenComparison> all;
  for (int c = 0; c < 2; ++c) {
    for (int64_t pos = 10; pos <= 18; ++pos) {
      TokenComparison t;
      t.kld = 0.01 * static_cast<double>(pos - 9 + 10 * c);
      t.nll = 1.0 + 0.1 * static_cast<double>(pos % 4);
      t.nll_base = 1.0 + 0.05 * static_cast<double>(pos % 3);
      t.p_diff = 0.01f * static_cast<float>(pos % 5);
      t.same_top = pos % 3 != 0;
      acc.add(t, pos);
      all.push_back(t);
    }
  }
  const KldSummary s = acc.summary();
  const double n = static_cast<double>(all.size());
  double kld = 0, kld2 = 0, nll = 0, nll_base = 0;
  int64_t same = 0;
  std::vector<double> sorted;
  for (const TokenComparison& t : all) {
    kld += t.kld, kld2 += t.kld * t.kld, nll += t.nll, nll_base += t.nll_base, same += t.same_top;
    sorted.push_back(t.kld);
  }
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(s.scored, 18);
  EXPECT_NEAR(s.kld.value, kld / n, 1e-12);
  EXPECT_NEAR(s.kld.err, std::sqrt((kld2 / n - kld * kld / n / n) / (n - 1)), 1e-9);
  EXPECT_NEAR(s.kld_median, 0.5 * (sorted[8] + sorted[9]), 1e-7);
  EXPECT_NEAR(s.kld_max, sorted.back(), 1e-7);
  EXPECT_NEAR(s.kld_p90, sorted[15] + 0.3 * (sorted[16] - sorted[15]), 1e-6);  // 0.9 * 17 = 15.3
  EXPECT_NEAR(s.ppl.value, std::exp(nll / n), 1e-9);
  EXPECT_NEAR(s.ppl_base.value, std::exp(nll_base / n), 1e-9);
  EXPECT_NEAR(s.ln_ppl_ratio.value, (nll - nll_base) / n, 1e-12);
  EXPECT_NEAR(s.ppl_ratio.value, std::exp((nll - nll_base) / n), 1e-12);
  EXPECT_EQ(s.same_top, same);
  EXPECT_NEAR(s.same_top_rate.value, static_cast<double>(same) / n, 1e-12);
  // Depth: positions 10-12, 13-15, 16-18 (the tokens seen: 11-13, 14-16, 17-19), 6 tokens each.
  ASSERT_EQ(s.depth.size(), 3u);
  for (int b = 0; b < 3; ++b) {
    EXPECT_EQ(s.depth[b].first_depth, 11 + 3 * b);
    EXPECT_EQ(s.depth[b].last_depth, 13 + 3 * b);
    EXPECT_EQ(s.depth[b].tokens, 6);
    double k = 0;
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < 3; ++i) k += all[static_cast<size_t>(9 * c + 3 * b + i)].kld;
    EXPECT_NEAR(s.depth[b].kld_mean, k / 6, 1e-12);
  }
}

// A base file of `chunks` chunks of n_ctx tokens over a vocabulary of n_vocab, with random logits.
std::string write_base(const TempDir& dir, const std::string& name, int32_t n_ctx, int32_t n_vocab,
                       int chunks) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n_ctx * chunks; ++i) tokens.push_back((i * 37) % n_vocab);
  auto w = KldBaseWriter::create(dir.file(name), n_ctx, n_vocab, tokens);
  EXPECT_TRUE(w.ok()) << w.status().message();
  const int64_t words = kld_row_words(n_vocab), scored = kld_scored_per_chunk(n_ctx);
  for (int c = 0; c < chunks; ++c) {
    std::vector<uint16_t> rows(static_cast<size_t>(scored * words));
    for (int64_t r = 0; r < scored; ++r) {
      const std::vector<float> l = random_logits(n_vocab, static_cast<uint64_t>(100 * c + r));
      encode_log_probs(l, tokens[static_cast<size_t>(c * n_ctx + n_ctx / 2 + r + 1)],
                       std::span(rows).subspan(static_cast<size_t>(r * words), static_cast<size_t>(words)));
    }
    EXPECT_TRUE(w->write_chunk(rows).ok());
  }
  EXPECT_TRUE(w->commit().ok());
  return dir.file(name);
}

TEST(KldFile, RoundTripsBitForBit) {
  TempDir dir;
  const std::string path = write_base(dir, "base.kld", 16, 33, 3);
  auto f = KldBaseFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->n_ctx(), 16);
  EXPECT_EQ(f->n_vocab(), 33);
  EXPECT_EQ(f->n_chunk(), 3);
  // Written again from what was read: the same bytes.
  auto w = KldBaseWriter::create(dir.file("copy.kld"), f->n_ctx(), f->n_vocab(), f->tokens());
  ASSERT_TRUE(w.ok());
  for (int32_t c = 0; c < f->n_chunk(); ++c) ASSERT_TRUE(w->write_chunk(f->chunk_rows(c)).ok());
  ASSERT_TRUE(w->commit().ok());
  const std::vector<uint8_t> a = mtp::testing::read_bytes(path),
                             b = mtp::testing::read_bytes(dir.file("copy.kld"));
  EXPECT_EQ(a, b);
  // The layout: magic, three int32, the tokens, then rows.
  ASSERT_EQ(a.size(), 20u + 4u * 48u + 2u * 3u * 7u * 38u);
  EXPECT_EQ(std::memcmp(a.data(), "_logits_", 8), 0);
  int32_t header[3];
  std::memcpy(header, a.data() + 8, sizeof header);
  EXPECT_EQ(header[0], 16);
  EXPECT_EQ(header[1], 33);
  EXPECT_EQ(header[2], 3);
}

TEST(KldFile, TruncatedOrCorruptFilesAreOneLineErrors) {
  TempDir dir;
  const std::vector<uint8_t> good = mtp::testing::read_bytes(write_base(dir, "base.kld", 16, 33, 2));
  const std::string bad = dir.file("bad.kld");

  write_bytes(bad, std::vector<uint8_t>(good.begin(), good.end() - 1));
  EXPECT_NE(open_error<KldBaseFile>(bad).find("(truncated)"), std::string::npos);
  write_bytes(bad, std::vector<uint8_t>(good.begin(), good.begin() + 10));
  EXPECT_NE(open_error<KldBaseFile>(bad).find("not a KL-divergence base file"), std::string::npos);
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  write_bytes(bad, longer);
  EXPECT_NE(open_error<KldBaseFile>(bad).find("(trailing bytes)"), std::string::npos);

  std::vector<uint8_t> magic = good;
  magic[1] = 'L';
  write_bytes(bad, magic);
  EXPECT_NE(open_error<KldBaseFile>(bad).find("no \"_logits_\" header"), std::string::npos);

  std::vector<uint8_t> tiny_ctx = good;
  const int32_t two = 2;
  std::memcpy(tiny_ctx.data() + 8, &two, 4);
  write_bytes(bad, tiny_ctx);
  EXPECT_NE(open_error<KldBaseFile>(bad).find("bad header: n_ctx 2"), std::string::npos);

  std::vector<uint8_t> token = good;
  const int32_t outside = 33;
  std::memcpy(token.data() + 20 + 4 * 5, &outside, 4);
  write_bytes(bad, token);
  EXPECT_NE(open_error<KldBaseFile>(bad).find("token 5 is 33, outside the vocabulary of 33"),
            std::string::npos);

  std::vector<uint8_t> huge = good;  // a header whose sizes overflow 64 bits is refused, not wrapped
  const int32_t big = 0x7fffffff;
  std::memcpy(huge.data() + 8, &big, 4);
  std::memcpy(huge.data() + 12, &big, 4);
  std::memcpy(huge.data() + 16, &big, 4);
  write_bytes(bad, huge);
  EXPECT_NE(open_error<KldBaseFile>(bad).find("(truncated)"), std::string::npos);

  EXPECT_NE(open_error<KldBaseFile>(dir.file("missing.kld")).find("missing.kld"), std::string::npos);
}

}  // namespace
}  // namespace mtp::eval
