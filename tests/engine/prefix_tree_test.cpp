// The prefix cache's tree on its own (engine/prefix_cache.h): token matching, block sharing, checkpoint
// choice, eviction order, the budget and the pool's reclaimer, with states that are plain markers.
#include <gtest/gtest.h>

#include "engine/prefix_cache.h"
#include "engine_fixtures.h"

namespace mtp::testing {
namespace {

constexpr int64_t kTreeBlock = 16;

struct TreeTest : ::testing::Test {
  void SetUp() override {
    auto m = Model::load(structured_model(GgmlType::Q8_0));
    ASSERT_TRUE(m.ok());
    model = std::make_unique<Model>(std::move(*m));
    MemoryOptions mo;
    mo.n_ctx = 256;
    mo.n_seq = 4;
    mo.block_size = kTreeBlock;
    auto mem = Memory::create(model->config(), mo);
    ASSERT_TRUE(mem.ok());
    memory = std::make_unique<Memory>(std::move(*mem));
  }

  // A checkpoint whose state is filled with `marker`.
  Checkpoint checkpoint(int64_t pos, float marker, CheckpointKind kind = CheckpointKind::kInterval) {
    Checkpoint c;
    c.pos = pos;
    c.kind = kind;
    c.state = memory->new_state();
    std::fill_n(c.state.data(), c.state.floats(), marker);
    c.hidden.assign(static_cast<size_t>(model->config().n_embd), marker);
    return c;
  }
  uint64_t checkpoint_bytes() const { return memory->state_bytes() + model->config().n_embd * sizeof(float); }

  // A sequence holding blocks for n positions (their contents do not matter here).
  int32_t sequence(int64_t n) {
    const int32_t s = *memory->seq_create();
    EXPECT_TRUE(memory->ensure_positions(s, n));
    memory->seq(s).n_past = n;
    return s;
  }
  std::span<const int32_t> blocks(int32_t s) const { return memory->seq(s).blocks; }

  std::unique_ptr<Model> model;
  std::unique_ptr<Memory> memory;
};

std::vector<int32_t> ids(int64_t n, int32_t base) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(base + static_cast<int32_t>(i % 50));
  return t;
}

TEST_F(TreeTest, SharesBlocksAndPicksTheDeepestCheckpointWithinTheMatch) {
  PrefixCache cache(*memory, {uint64_t{1} << 30});
  const std::vector<int32_t> a = ids(40, 10);
  const int32_t s = sequence(40);
  std::vector<Checkpoint> cs;
  cs.push_back(checkpoint(20, 2.0f));
  cs.push_back(checkpoint(40, 4.0f));
  cache.insert("", a, blocks(s), 1, 40, std::move(cs));
  EXPECT_EQ(memory->block_refs(blocks(s)[0]), 2);  // the sequence's and the cache's

  std::vector<int32_t> longer = a;
  longer.push_back(7);
  CacheHit hit = cache.lookup("", longer);
  EXPECT_EQ(hit.matched, 40);
  EXPECT_EQ(hit.pos, 40);
  ASSERT_NE(hit.checkpoint, nullptr);
  EXPECT_EQ(hit.checkpoint->state.data()[0], 4.0f);
  EXPECT_EQ(hit.blocks, std::vector<int32_t>(blocks(s).begin(), blocks(s).end()));
  EXPECT_EQ(hit.mtp_begin, 1);
  EXPECT_EQ(hit.mtp_end, 40);

  std::vector<int32_t> edited = a;
  edited[30] = 99;  // inside the second block
  hit = cache.lookup("", edited);
  EXPECT_EQ(hit.matched, 30);
  EXPECT_EQ(hit.pos, 20);
  EXPECT_EQ(hit.checkpoint->state.data()[0], 2.0f);
  EXPECT_EQ(hit.blocks.size(), 2u);
  EXPECT_EQ(hit.next_checkpoint, 40);

  edited[5] = 99;
  hit = cache.lookup("", edited);
  EXPECT_EQ(hit.matched, 5);
  EXPECT_EQ(hit.pos, 0);
  EXPECT_EQ(hit.checkpoint, nullptr);
  EXPECT_EQ(cache.lookup("other", a).matched, 0);  // another namespace
  const PrefixCacheStats st = cache.stats();
  EXPECT_EQ(st.lookups, 4u);
  EXPECT_EQ(st.tokens_hit, 60u);
  EXPECT_EQ(st.tokens_recomputed, 15u);  // 30 - 20 and 5 - 0
}

TEST_F(TreeTest, AHistoryThatExtendsACachedPartialBlockTakesItsPlace) {
  PrefixCache cache(*memory, {uint64_t{1} << 30});
  const std::vector<int32_t> a = ids(40, 10);
  const int32_t s1 = sequence(20), s2 = sequence(40);
  std::vector<Checkpoint> c1, c2;
  c1.push_back(checkpoint(20, 1.0f));
  c2.push_back(checkpoint(40, 2.0f));
  cache.insert("", std::span(a).first(20), blocks(s1), 0, 0, std::move(c1));
  cache.insert("", a, blocks(s2), 0, 0, std::move(c2));
  // Block 0 is s1's (the same tokens: the cached one stays), block 1 now s2's full copy, block 2 s2's.
  EXPECT_EQ(cache.stats().nodes, 3);
  EXPECT_EQ(memory->block_refs(blocks(s1)[0]), 2);
  EXPECT_EQ(memory->block_refs(blocks(s1)[1]), 1);  // only s1 holds it now
  EXPECT_EQ(memory->block_refs(blocks(s2)[1]), 2);
  EXPECT_EQ(cache.checkpoints_on("", a), (std::vector<int64_t>{20, 40}));
  // A history diverging inside block 1 is a sibling there.
  std::vector<int32_t> b = a;
  b[25] = 77;
  const int32_t s3 = sequence(30);
  std::vector<Checkpoint> c3;
  c3.push_back(checkpoint(30, 3.0f));
  cache.insert("", std::span(b).first(30), blocks(s3), 0, 0, std::move(c3));
  EXPECT_EQ(cache.stats().nodes, 4);
  EXPECT_EQ(cache.lookup("", b).pos, 30);
  EXPECT_EQ(cache.lookup("", a).pos, 40);
  std::vector<int32_t> c = b;
  c[28] = 5;
  const CacheHit hit = cache.lookup("", c);  // both siblings: 25 and 28 tokens of block 1 match
  EXPECT_EQ(hit.matched, 28);
  EXPECT_EQ(hit.pos, 20);
}

TEST_F(TreeTest, EvictionTakesStaleInteriorCheckpointsFirstAndKeepsTheBudget) {
  const uint64_t budget = 3 * checkpoint_bytes() + 6 * memory->block_bytes();
  PrefixCache cache(*memory, {budget});
  const std::vector<int32_t> a = ids(48, 10), b = ids(48, 30);
  const int32_t sa = sequence(48);
  std::vector<Checkpoint> ca;
  ca.push_back(checkpoint(16, 1.0f));
  ca.push_back(checkpoint(32, 1.0f));
  ca.push_back(checkpoint(48, 1.0f, CheckpointKind::kGenerationEnd));
  cache.insert("", a, blocks(sa), 0, 0, std::move(ca));
  memory->seq_free(sa);
  EXPECT_EQ(cache.checkpoints_on("", a), (std::vector<int64_t>{16, 32, 48}));
  // A second session: over the budget, the first one's interior checkpoints go before its end.
  const int32_t sb = sequence(48);
  std::vector<Checkpoint> cb;
  cb.push_back(checkpoint(48, 2.0f, CheckpointKind::kGenerationEnd));
  cache.insert("", b, blocks(sb), 0, 0, std::move(cb));
  memory->seq_free(sb);
  cache.trim();
  const PrefixCacheStats st = cache.stats();
  EXPECT_LE(st.kv_bytes + st.state_bytes, budget);
  EXPECT_GE(st.evictions, 1u);
  EXPECT_EQ(cache.checkpoints_on("", b), std::vector<int64_t>{48});
  const std::vector<int64_t> left = cache.checkpoints_on("", a);
  ASSERT_FALSE(left.empty());
  EXPECT_EQ(left.back(), 48);
  // Evicting everything gives every block back.
  while (cache.evict_one()) {
  }
  EXPECT_EQ(cache.stats().nodes, 0);
  EXPECT_EQ(memory->free_blocks(), memory->n_blocks());
}

// The gauges follow the blocks' holders, not only the tree: when the live sequence that shares the cache's
// blocks ends, they become the cache's own (stats() is read after every server step and remembers its walk).
TEST_F(TreeTest, StatsFollowALiveSequenceGivingItsBlocksBack) {
  PrefixCache cache(*memory, {uint64_t{1} << 30});
  const std::vector<int32_t> a = ids(40, 10);
  const int32_t s = sequence(40);
  std::vector<Checkpoint> cs;
  cs.push_back(checkpoint(40, 1.0f));
  cache.insert("", a, blocks(s), 0, 0, std::move(cs));
  const int64_t n_blocks = static_cast<int64_t>(blocks(s).size());
  PrefixCacheStats st = cache.stats();
  EXPECT_EQ(st.nodes, n_blocks);
  EXPECT_EQ(st.shared_blocks, n_blocks);
  EXPECT_EQ(st.kv_bytes, 0u);
  EXPECT_EQ(cache.stats().shared_blocks, n_blocks);  // read again, nothing changed
  memory->seq_free(s);
  st = cache.stats();
  EXPECT_EQ(st.nodes, n_blocks);
  EXPECT_EQ(st.shared_blocks, 0);
  EXPECT_EQ(st.kv_bytes, static_cast<uint64_t>(n_blocks) * memory->block_bytes());
  // A new sequence taking the cached blocks shares them again.
  const int32_t t = *memory->seq_create();
  ASSERT_TRUE(memory->seq_attach(t, cache.lookup("", a).blocks, 40, 0, 0).ok());
  EXPECT_EQ(cache.stats().shared_blocks, n_blocks);
  EXPECT_EQ(cache.stats().kv_bytes, 0u);
  EXPECT_EQ(cache.stats().checkpoints, 1);
}

TEST_F(TreeTest, APoolWithoutFreeBlocksReclaimsFromTheCache) {
  PrefixCache cache(*memory, {uint64_t{1} << 30});
  // Fill the pool with cached histories, then ask for all of it for a live sequence.
  int32_t n = 0;
  while (memory->free_blocks() >= 3) {
    const std::vector<int32_t> t = ids(40, 10 + 60 * n);
    const int32_t s = sequence(40);
    std::vector<Checkpoint> c;
    c.push_back(checkpoint(40, static_cast<float>(n)));
    cache.insert("", t, blocks(s), 0, 0, std::move(c));
    memory->seq_free(s);
    ++n;
  }
  ASSERT_GT(n, 3);
  const int32_t s = *memory->seq_create();
  EXPECT_TRUE(memory->ensure_positions(s, 256));
  EXPECT_GT(cache.stats().evictions, 0u);
  // The oldest sessions went first.
  EXPECT_TRUE(cache.checkpoints_on("", ids(40, 10)).empty());
}

// --cache-ram's budget: the default is capped by physical memory and, once the model is loaded, by what is
// still available; -1 is half of memory; explicit values stand unless larger than the machine.
TEST(PrefixCacheBudget, DefaultLeavesRoomForTheModelAndExplicitValuesStand) {
  constexpr uint64_t GiB = uint64_t{1} << 30, MiB = uint64_t{1} << 20;
  EXPECT_EQ(*prefix_cache_budget(std::nullopt, 64 * GiB, 0), 8 * GiB);
  EXPECT_EQ(*prefix_cache_budget(std::nullopt, 16 * GiB, 0), 4 * GiB);           // a quarter of memory
  EXPECT_EQ(*prefix_cache_budget(std::nullopt, 24 * GiB, 5 * GiB), 2560 * MiB);  // half of what is left
  EXPECT_EQ(*prefix_cache_budget(std::nullopt, 0, 0), 8 * GiB);                  // nothing known
  EXPECT_EQ(*prefix_cache_budget(-1, 24 * GiB, 1 * GiB), 12 * GiB);
  EXPECT_EQ(*prefix_cache_budget(0, 24 * GiB, 1 * GiB), 0u);
  EXPECT_EQ(*prefix_cache_budget(20000, 24 * GiB, 1 * GiB), 20000 * MiB);  // explicit: no cap by what is left
  const Expected<uint64_t> too_big = prefix_cache_budget(30000, 24 * GiB, 0);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("exceeds this machine's memory"), std::string::npos);
  EXPECT_FALSE(prefix_cache_budget(-2, 24 * GiB, 0).ok());
}

}  // namespace
}  // namespace mtp::testing
