// KV cache storage types (MemoryOptions::cache_type_k/v: F32, F16, Q8_0): close to the F32 cache, and within
// one type still batch invariant and exactly rolled back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fixtures.h"
#include "model/forward.h"

namespace mtp {
namespace {

using testing::fixtures;

using testing::load;
using testing::tokens;

Memory make_memory(const Model& model, GgmlType kt, GgmlType vt, int32_t n_seq = 3, int64_t n_ctx = 512) {
  MemoryOptions o;
  o.n_ctx = n_ctx;
  o.n_seq = n_seq;
  o.n_snapshots = 4;
  o.block_size = 16;
  o.cache_type_k = kt;
  o.cache_type_v = vt;
  auto m = Memory::create(model.config(), o);
  if (!m.ok()) throw std::runtime_error(m.status().message());
  return std::move(*m);
}

// Every row's logits, `toks` fed in batches of `chunk` rows to a new sequence.
std::vector<std::vector<float>> run(const Model& model, Memory& mem, const std::vector<int32_t>& toks,
                                    size_t chunk, ThreadPool& pool) {
  const int32_t seq = *mem.seq_create();
  std::vector<std::vector<float>> rows;
  Batch b;
  Outputs out;
  for (size_t i = 0; i < toks.size(); i += chunk) {
    b.clear();
    for (size_t j = i; j < std::min(toks.size(), i + chunk); ++j)
      b.add(seq, static_cast<int64_t>(j), toks[j], true);
    Status s = forward(model, b, mem, out, pool);
    EXPECT_TRUE(s.ok()) << s.message();
    for (int64_t r = 0; r < b.size(); ++r)
      rows.emplace_back(out.logits_of(r).begin(), out.logits_of(r).end());
  }
  return rows;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    m = std::max(m, static_cast<double>(std::fabs(b[i])));
  }
  return d / std::max(m, 1e-30);
}

struct Types {
  GgmlType k, v;
  const char* name;
};
const Types kTypes[] = {{GgmlType::F16, GgmlType::F16, "f16"},
                        {GgmlType::Q8_0, GgmlType::Q8_0, "q8_0"},
                        {GgmlType::Q8_0, GgmlType::F16, "k q8_0, v f16"}};

TEST(KvCache, TypeNames) {
  EXPECT_EQ(*kv_cache_type_from_name("f32"), GgmlType::F32);
  EXPECT_EQ(*kv_cache_type_from_name("F16"), GgmlType::F16);
  EXPECT_EQ(*kv_cache_type_from_name("q8_0"), GgmlType::Q8_0);
  const auto bad = kv_cache_type_from_name("q4_0");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("f32, f16 or q8_0"), std::string::npos) << bad.status().message();
}

TEST(KvCache, SizesAndUnsupportedTypes) {
  Model model = load(fixtures().tiny_q8_mtp);
  MemoryOptions o;
  const uint64_t f32 = Memory::create(model.config(), o)->bytes();
  o.cache_type_k = o.cache_type_v = GgmlType::F16;
  const uint64_t f16 = Memory::create(model.config(), o)->bytes();
  o.cache_type_k = o.cache_type_v = GgmlType::Q8_0;
  const uint64_t q8 = Memory::create(model.config(), o)->bytes();
  EXPECT_LT(f16, f32);
  EXPECT_LT(q8, f16);
  o.cache_type_v = GgmlType::BF16;
  const auto m = Memory::create(model.config(), o);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

// Tolerance on the median over rows of max|logit - logit with F32 cache| / max|logit with F32 cache|. F16
// rounds each K/V value to 11 significant bits (relative 2^-12), Q8_0 to 1/254 of its 32-block's largest
// magnitude; the attention output moves by about that and the ~4 chained layers of the tiny model keep it
// about that size (with Q8_0 weights the per-row activation quantization absorbs most F16 roundings).
// Measured (tiny Q8_0): f16 median 0, max 6e-3; q8_0 median 4e-3, max 9e-3. Bounds: median 2e-3 / 3e-2,
// max 10x that.
TEST(KvCache, CloseToF32Cache) {
  Model model = load(fixtures().tiny_q8_mtp);
  ThreadPool pool(2, ThreadPool::kSplitAll);
  const std::vector<int32_t> toks = tokens(40, model.config().n_vocab, 17);
  Memory ref_mem = make_memory(model, GgmlType::F32, GgmlType::F32);
  const auto want = run(model, ref_mem, toks, 24, pool);  // a prompt batch, then rows of 16 more
  for (const Types& t : kTypes) {
    Memory mem = make_memory(model, t.k, t.v);
    const auto got = run(model, mem, toks, 24, pool);
    std::vector<double> d;
    for (size_t i = 0; i < got.size(); ++i) d.push_back(rel_diff(got[i], want[i]));
    std::sort(d.begin(), d.end());
    std::printf("[%s cache] relative logit difference to f32 cache: median %.3g, max %.3g\n", t.name,
                d[d.size() / 2], d.back());
    const double bound = t.k == GgmlType::F16 ? 2e-3 : 3e-2;
    EXPECT_LT(d[d.size() / 2], bound) << t.name;
    EXPECT_LT(d.back(), 10 * bound) << t.name;
  }
}

TEST(KvCache, BatchInvariantPerType) {
  Model model = load(fixtures().tiny_q8_mtp);
  ThreadPool pool(2, ThreadPool::kSplitAll);
  const std::vector<int32_t> toks = tokens(20, model.config().n_vocab, 9);
  for (const Types& t : kTypes) {
    Memory m1 = make_memory(model, t.k, t.v);
    const auto whole = run(model, m1, toks, 20, pool);
    Memory m2 = make_memory(model, t.k, t.v);
    EXPECT_EQ(whole, run(model, m2, toks, 1, pool)) << t.name;
    Memory m3 = make_memory(model, t.k, t.v);
    EXPECT_EQ(whole, run(model, m3, toks, 7, pool)) << t.name;
    // Next to another sequence in every batch.
    Memory m4 = make_memory(model, t.k, t.v);
    const int32_t a = *m4.seq_create(), o = *m4.seq_create();
    Batch b;
    Outputs out;
    std::vector<std::vector<float>> mixed;
    for (size_t i = 0; i < toks.size(); i += 4) {
      b.clear();
      b.add(o, m4.seq_pos(o), toks[(i + 3) % toks.size()], true);
      for (size_t j = i; j < std::min(toks.size(), i + 4); ++j)
        b.add(a, static_cast<int64_t>(j), toks[j], true);
      ASSERT_TRUE(forward(model, b, m4, out, pool).ok());
      for (int64_t r = 0; r < b.size(); ++r)
        if (b.rows[r].seq == a) mixed.emplace_back(out.logits_of(r).begin(), out.logits_of(r).end());
    }
    EXPECT_EQ(whole, mixed) << t.name;
  }
}

TEST(KvCache, RollbackEqualsNeverProcessedPerType) {
  Model model = load(fixtures().tiny_q8_mtp);
  ThreadPool pool(2, ThreadPool::kSplitAll);
  const int64_t vocab = model.config().n_vocab;
  const std::vector<int32_t> prefix = tokens(17, vocab, 4), drafts = tokens(4, vocab, 8),
                             cont = tokens(3, vocab, 12);
  for (const Types& t : kTypes) {
    for (int64_t m = 0; m <= 4; ++m) {
      Memory mem = make_memory(model, t.k, t.v, 1);
      run(model, mem, prefix, 17, pool);  // sequence 0
      Batch b;
      Outputs out;
      for (int64_t j = 0; j < 4; ++j) b.add(0, 17 + j, drafts[j], true);
      ASSERT_TRUE(forward(model, b, mem, out, pool).ok());
      if (m == 0) {  // the state before a batch is not kept (its first row updates in place)
        EXPECT_FALSE(mem.rollback(0, 0).ok());
        continue;
      }
      ASSERT_TRUE(mem.rollback(0, m).ok());
      std::vector<int32_t> rest(drafts.begin(), drafts.begin() + m);
      rest.insert(rest.end(), cont.begin(), cont.end());
      b.clear();
      for (size_t j = m; j < rest.size(); ++j) b.add(0, 17 + static_cast<int64_t>(j), rest[j], true);
      ASSERT_TRUE(forward(model, b, mem, out, pool).ok());
      Memory ref_mem = make_memory(model, t.k, t.v, 1);
      std::vector<int32_t> all = prefix;
      all.insert(all.end(), rest.begin(), rest.end());
      const auto want = run(model, ref_mem, all, 17, pool);
      for (int64_t r = 0; r < b.size(); ++r) {
        const auto got = out.logits_of(r);
        EXPECT_TRUE(std::equal(got.begin(), got.end(), want[17 + m + r].begin())) << t.name << " keep " << m;
      }
    }
  }
}

// The MTP block's KV uses the same storage.
TEST(KvCache, MtpHeadRunsOnQuantizedCache) {
  Model model = load(fixtures().tiny_q8_mtp);
  ThreadPool pool(2, ThreadPool::kSplitAll);
  const std::vector<int32_t> toks = tokens(12, model.config().n_vocab, 21);
  std::vector<float> logits[2];
  int i = 0;
  for (GgmlType t : {GgmlType::F32, GgmlType::Q8_0}) {
    Memory mem = make_memory(model, t, t, 1);
    ASSERT_EQ(*mem.seq_create(), 0);
    Batch b;
    Outputs out;
    for (size_t j = 0; j < toks.size(); ++j) b.add(0, static_cast<int64_t>(j), toks[j], false);
    ASSERT_TRUE(forward(model, b, mem, out, pool).ok());
    const Outputs trunk = out;
    b.clear();
    for (size_t p = 1; p < toks.size(); ++p)
      b.add_mtp(0, static_cast<int64_t>(p), toks[p], trunk.hidden_of(static_cast<int64_t>(p - 1)),
                p + 1 == toks.size());
    ASSERT_TRUE(forward_mtp(model, b, mem, out, pool).ok());
    logits[i++].assign(out.logits_of(b.size() - 1).begin(), out.logits_of(b.size() - 1).end());
  }
  EXPECT_LT(rel_diff(logits[1], logits[0]), 0.1);
}

}  // namespace
}  // namespace mtp
