// The prefix cache. A request that resumes from cached state gives bitwise the tokens and logprobs
// of the same request on a cold engine, with MTP on and off, alone and concurrently; the cache places,
// restores and evicts checkpoints as documented, and never frees a block a sequence still uses.
#include <gtest/gtest.h>

#include <map>

#include "engine_fixtures.h"
#include "model/forward.h"
#include "speculative/mtp_drafter.h"

namespace mtp::testing {
namespace {

constexpr int64_t kBlock = 16;  // small blocks: short prompts span several

EngineOptions cache_options(bool spec, uint64_t ram_bytes, int32_t slots = 1) {
  EngineOptions eo;
  eo.n_ctx = 2048;
  eo.n_slots = slots;
  eo.n_batch = 24;  // prompts arrive in several chunks
  eo.kv_block_size = kBlock;
  eo.spec = spec ? SpecType::kMtp : SpecType::kNone;
  eo.draft.n_max = 3;
  eo.cache.ram_bytes = ram_bytes;
  eo.cache.checkpoint_every = 0;
  eo.cache.checkpoint_min_gap = 1;
  return eo;
}

constexpr uint64_t kPlenty = uint64_t{256} << 20;

// Tokens, logprobs and top candidates, bitwise.
bool same(const Generation& a, const Generation& b) {
  if (a.details.size() != b.details.size()) return false;
  for (size_t i = 0; i < a.details.size(); ++i) {
    const GeneratedToken &x = a.details[i], &y = b.details[i];
    if (x.id != y.id || std::memcmp(&x.logprob, &y.logprob, sizeof(float)) != 0 ||
        x.top.size() != y.top.size())
      return false;
    for (size_t k = 0; k < x.top.size(); ++k)
      if (x.top[k].id != y.top[k].id || std::memcmp(&x.top[k].logprob, &y.top[k].logprob, sizeof(float)) != 0)
        return false;
  }
  return true;
}

RequestOptions greedy(int64_t max_tokens) {
  RequestOptions ro;
  ro.max_tokens = max_tokens;
  ro.ignore_eos = true;
  ro.logprobs = true;
  ro.n_probs = 3;
  return ro;
}

std::vector<int32_t> ramp(size_t n, uint64_t seed) {
  std::vector<int32_t> p;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 7;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    p.push_back(static_cast<int32_t>(33 + x % 90));
  }
  return p;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every block is free or the cache's (no leak), with no request running.
void expect_no_leak(const Engine& engine) {
  const Memory& mem = engine.memory();
  int64_t held = 0;
  for (int32_t b = 0; b < mem.n_blocks(); ++b) {
    EXPECT_LE(mem.block_refs(b), 1) << "block " << b << " held twice with no request running";
    held += mem.block_refs(b);
  }
  const int64_t cached = engine.prefix_cache() != nullptr ? engine.prefix_cache()->stats().nodes : 0;
  EXPECT_EQ(held, cached);
  EXPECT_EQ(mem.free_blocks(), mem.n_blocks() - held);
}

// A structured tiny model, a pool, and engines with and without the cache.
class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::load(structured_model(GgmlType::Q8_0));
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::make_unique<Model>(std::move(*m));
  }
  std::unique_ptr<Engine> engine(bool spec, uint64_t ram_bytes, int32_t slots = 1) {
    return make_engine(*model_, cache_options(spec, ram_bytes, slots), pool_);
  }
  std::unique_ptr<Engine> engine(const EngineOptions& eo) { return make_engine(*model_, eo, pool_); }
  const Model& model() const { return *model_; }
  ThreadPool& pool() { return pool_; }

 private:
  std::unique_ptr<Model> model_;
  ThreadPool pool_{2};
};

class PrefixCacheHit : public PrefixCacheTest, public ::testing::WithParamInterface<bool> {};  // MTP on / off

// Turn 2 of a session (turn 1's prompt, its reply, a new message), a prompt that diverges inside a block, one
// that diverges one token before the cached end, an exact repeat: each bitwise as on a cold engine, with
// the expected number of tokens reused.
TEST_P(PrefixCacheHit, OutputsAreBitwiseThoseOfAColdEngine) {
  const bool spec = GetParam();
  auto cached = engine(spec, kPlenty);
  auto cold = engine(spec, 0);
  const std::vector<int32_t> p1 = ramp(45, 1);
  const Generation r1 = generate(*cached, p1, greedy(20));
  ASSERT_TRUE(same(r1, generate(*cold, p1, greedy(20))));
  EXPECT_EQ(r1.timings.cache.cached, 0);
  EXPECT_TRUE(r1.timings.cache.enabled);

  struct Case {
    const char* name;
    std::vector<int32_t> prompt;
    int64_t want_cached;
  };
  // The history of turn 1 in the trunk: its prompt and all its tokens but the last (not fed back).
  std::vector<int32_t> turn1 = concat(p1, r1.tokens);
  turn1.pop_back();
  std::vector<int32_t> edited = p1;
  edited[37] = edited[37] == 50 ? 51 : 50;  // inside the third block
  std::vector<int32_t> almost = p1;
  almost.back() = almost.back() == 50 ? 51 : 50;
  const std::vector<Case> cases = {
      {"next turn", concat(turn1, ramp(9, 2)), static_cast<int64_t>(turn1.size())},
      {"exact repeat", p1, 45},
      {"diverges inside a block after the prompt end", concat(p1, ramp(5, 3)), 45},
      {"diverges before the prompt-end checkpoint", edited, 0},
      {"diverges one token before the end", almost, 0},
  };
  for (const Case& c : cases) {
    const Generation hit = generate(*cached, c.prompt, greedy(16));
    const Generation want = generate(*cold, c.prompt, greedy(16));
    EXPECT_TRUE(same(hit, want)) << c.name;
    EXPECT_EQ(hit.timings.cache.cached, c.want_cached) << c.name;
    // With the MTP state restored exactly, the drafts are those of the cold run too.
    EXPECT_EQ(hit.timings.spec.drafted, want.timings.spec.drafted) << c.name;
    EXPECT_EQ(hit.timings.spec.accepted, want.timings.spec.accepted) << c.name;
  }
  // The edited prompts matched what the cache held up to their edit, behind any checkpoint.
  const Generation again = generate(*cached, almost, greedy(4));
  EXPECT_EQ(again.timings.cache.cached, 45);  // `almost` itself was cached just above
  expect_no_leak(*cached);
  if (spec) {
    const Generation drafting = generate(*cached, concat(turn1, ramp(9, 2)), greedy(16));
    EXPECT_GT(drafting.timings.spec.accepted, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Mtp, PrefixCacheHit, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "on" : "off"; });

// Seeded sampling: the sampler's draws follow the same logits, so the same seed gives the same tokens.
TEST_F(PrefixCacheTest, SeededSamplingIsThatOfAColdEngine) {
  auto cached = engine(true, kPlenty);
  auto cold = engine(true, 0);
  RequestOptions ro = greedy(24);
  ro.sampling.temperature = 0.8f;
  ro.sampling.top_k = 20;
  const std::vector<int32_t> p = ramp(40, 4);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    ro.sampling.seed = seed;
    const Generation first = generate(*cached, p, ro);
    const Generation second = generate(*cached, p, ro);
    EXPECT_EQ(second.timings.cache.cached, 40);
    const Generation want = generate(*cold, p, ro);
    EXPECT_TRUE(same(first, want)) << "seed " << seed;
    EXPECT_TRUE(same(second, want)) << "seed " << seed;
  }
}

// Eight sessions sharing a system prompt, run concurrently twice (the second round continues each session):
// every reply bitwise as alone on a cold engine, and the second round resumes every session.
TEST_F(PrefixCacheTest, ConcurrentSessionsSharingASystemPrompt) {
  auto cached = engine(true, kPlenty, 8);
  auto cold = engine(true, 0);
  const std::vector<int32_t> system = ramp(37, 9);
  std::vector<std::vector<int32_t>> round1, round2;
  for (uint64_t i = 0; i < 8; ++i) round1.push_back(concat(system, ramp(3 + i, 20 + i)));
  const std::vector<RequestOptions> opts(8, greedy(12));
  const std::vector<Generation> r1 = generate_all(*cached, round1, opts);
  for (size_t i = 0; i < 8; ++i) {
    std::vector<int32_t> history = concat(round1[i], r1[i].tokens);
    history.pop_back();
    round2.push_back(concat(history, ramp(4, 40 + i)));
  }
  const std::vector<Generation> r2 = generate_all(*cached, round2, opts);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_TRUE(same(r1[i], generate(*cold, round1[i], opts[i]))) << "session " << i;
    EXPECT_TRUE(same(r2[i], generate(*cold, round2[i], opts[i]))) << "session " << i;
    EXPECT_EQ(r2[i].timings.cache.cached, static_cast<int64_t>(round2[i].size()) - 4) << "session " << i;
  }
  // The shared system prompt's blocks are held once.
  EXPECT_LT(cached->prefix_cache()->stats().nodes, 8 * 5);
  expect_no_leak(*cached);
}

// A request cancelled during its prompt leaves only what it finished (the chunks done, with the state after
// the last of them); the same prompt then resumes there and gives the cold engine's output.
TEST_F(PrefixCacheTest, CancelledPrefillPublishesOnlyCompletedChunks) {
  auto cached = engine(true, kPlenty);
  auto cold = engine(true, 0);
  const std::vector<int32_t> p = ramp(100, 5);
  auto id = cached->submit(p, greedy(8));
  ASSERT_TRUE(id.ok());
  std::vector<SlotEvent> events;
  ASSERT_TRUE(cached->step(events).ok());
  ASSERT_TRUE(cached->step(events).ok());
  cached->cancel(*id);
  ASSERT_TRUE(cached->step(events).ok());
  const int64_t done = 2 * 24;
  EXPECT_EQ(cached->prefix_cache()->checkpoints_on("", p), std::vector<int64_t>{done});
  const Generation r = generate(*cached, p, greedy(8));
  EXPECT_EQ(r.timings.cache.cached, done);
  EXPECT_EQ(r.timings.cache.matched, done);
  EXPECT_TRUE(same(r, generate(*cold, p, greedy(8))));
  expect_no_leak(*cached);
}

// Checkpoints at message starts and every K tokens of a long prompt; a prompt edited after a message start
// resumes there.
TEST_F(PrefixCacheTest, MessageAndIntervalCheckpoints) {
  EngineOptions eo = cache_options(true, kPlenty);
  eo.cache.checkpoint_every = 32;
  auto cached = engine(eo);
  auto cold = engine(true, 0);
  const std::vector<int32_t> p = ramp(90, 6);
  RequestOptions ro = greedy(0);
  ro.checkpoints = {0, 21, 50, 90, 200};  // outside (0, 90) ignored
  generate(*cached, p, ro);
  EXPECT_EQ(cached->prefix_cache()->checkpoints_on("", p), (std::vector<int64_t>{21, 32, 50, 64, 90}));
  std::vector<int32_t> edited = p;
  edited[55] = edited[55] == 60 ? 61 : 60;
  const Generation r = generate(*cached, edited, greedy(10));
  EXPECT_EQ(r.timings.cache.cached, 50);
  EXPECT_EQ(r.timings.cache.matched, 55);
  EXPECT_EQ(r.timings.cache.next_checkpoint, 64);
  EXPECT_TRUE(same(r, generate(*cold, edited, greedy(10))));
  // With a minimum gap of 12, the ones closer than that to the start, to the previous one or to the end go.
  eo.cache.checkpoint_min_gap = 12;
  auto sparse = engine(eo);
  ro.checkpoints = {5, 21, 30, 50, 85};
  generate(*sparse, p, ro);
  EXPECT_EQ(sparse->prefix_cache()->checkpoints_on("", p), (std::vector<int64_t>{21, 50, 64, 90}));
}

// cache_prompt = false neither reuses nor leaves anything; namespaces (cache_salt) never share.
TEST_F(PrefixCacheTest, OptOutAndNamespaces) {
  auto cached = engine(false, kPlenty);
  const std::vector<int32_t> p = ramp(30, 7);
  RequestOptions off = greedy(4);
  off.cache_prompt = false;
  generate(*cached, p, off);
  EXPECT_EQ(cached->prefix_cache()->stats().nodes, 0);
  EXPECT_EQ(generate(*cached, p, off).timings.cache.cached, 0);
  RequestOptions a = greedy(4), b = greedy(4);
  a.cache_namespace = "alice";
  b.cache_namespace = "bob";
  generate(*cached, p, a);
  EXPECT_EQ(generate(*cached, p, b).timings.cache.cached, 0);
  EXPECT_EQ(generate(*cached, p, a).timings.cache.cached, 30);
  EXPECT_EQ(generate(*cached, p, greedy(4)).timings.cache.cached, 0);
}

// The state a hit restores equals, bit for bit, the state of the same tokens computed from scratch.
TEST_F(PrefixCacheTest, RestoredStateEqualsStateFromScratch) {
  auto cached = engine(true, kPlenty);
  const std::vector<int32_t> p = ramp(53, 8);
  generate(*cached, p, greedy(0));
  auto id = cached->submit(concat(p, {40, 41}), greedy(1));
  ASSERT_TRUE(id.ok());
  const int32_t seq = cached->seq_of(*id);
  EXPECT_EQ(cached->memory().seq_pos(seq), 53);
  GdnState restored = cached->memory().new_state();
  cached->memory().save_state(seq, restored);

  MemoryOptions mo;
  mo.n_ctx = 256;
  mo.block_size = kBlock;
  auto mem = Memory::create(model().config(), mo);
  ASSERT_TRUE(mem.ok());
  const int32_t s = *mem->seq_create();
  auto drafter = speculative::MtpDrafter::create(model(), *mem, pool());
  ASSERT_TRUE(drafter.ok());
  (*drafter)->begin(s, true);
  Batch batch;
  Outputs out;
  for (size_t i = 0; i < p.size(); i += 10) {  // other chunks than the engine's
    batch.clear();
    for (size_t j = i; j < std::min(p.size(), i + 10); ++j)
      batch.add(s, static_cast<int64_t>(j), p[j], j + 1 == p.size());
    ASSERT_TRUE(forward(model(), batch, *mem, out, pool()).ok());
    ASSERT_TRUE(
        (*drafter)
            ->observe(s, static_cast<int64_t>(i), std::span(p).subspan(i, batch.rows.size()), out.hidden)
            .ok());
  }
  ASSERT_TRUE((*drafter)->sync(s).ok());
  GdnState scratch = mem->new_state();
  mem->save_state(s, scratch);
  ASSERT_EQ(restored.floats(), scratch.floats());
  EXPECT_EQ(std::memcmp(restored.data(), scratch.data(), restored.bytes()), 0);
  // The trunk's KV and the MTP block's rows (pairs from position 1 on), bitwise.
  const Memory& cm = cached->memory();
  EXPECT_EQ(cm.mtp_begin(seq), 1);
  EXPECT_EQ(cm.mtp_end(seq), 53);
  ASSERT_EQ(mem->mtp_begin(s), 1);
  const int64_t hd = model().config().head_dim;
  int64_t rows = 0;
  for (int32_t slot = 0; slot < cm.n_attn_slots(); ++slot)
    for (int kv = 0; kv < 2; ++kv)
      for (int64_t pos = slot == cm.mtp_slot() ? 1 : 0; pos < 53; ++pos)
        for (int64_t h = 0; h < model().config().n_head_kv; ++h, ++rows)
          ASSERT_EQ(std::memcmp(cm.kv_head_row(seq, slot, kv, pos, h), mem->kv_head_row(s, slot, kv, pos, h),
                                static_cast<size_t>(hd) * sizeof(float)),
                    0)
              << "slot " << slot << " kv " << kv << " position " << pos << " head " << h;
  EXPECT_GT(rows, 0);
  std::vector<SlotEvent> events;
  while (!cached->idle()) ASSERT_TRUE(cached->step(events).ok());
}

// Where a policy may pause drafting (here a cap of 0 drafting slots, so nothing drafts), a request is
// published without running its stretch through the MTP block at the end: a later hit has no MTP rows, and
// its output is still the cold engine's. Where every slot drafts, the rows are brought up to date as before.
TEST_F(PrefixCacheTest, PausedDraftingPublishesWithoutCatchingUp) {
  const std::vector<int32_t> p = ramp(100, 8);  // more catch-up rows than a publish runs when paused
  auto cold = engine(true, 0);
  for (int32_t cap : {-1, 0}) {
    EngineOptions eo = cache_options(true, kPlenty);
    eo.policy.max_drafting_slots = cap;
    auto cached = engine(eo);
    generate(*cached, p, greedy(0));
    auto id = cached->submit(concat(p, {40, 41}), greedy(1));
    ASSERT_TRUE(id.ok());
    const int32_t seq = cached->seq_of(*id);
    EXPECT_EQ(cached->memory().seq_pos(seq), 100) << "cap " << cap;
    EXPECT_EQ(cached->memory().mtp_end(seq), cap < 0 ? 100 : 0) << "cap " << cap;
    std::vector<SlotEvent> events;
    while (!cached->idle()) ASSERT_TRUE(cached->step(events).ok());
    const std::vector<int32_t> turn2 = concat(p, ramp(9, 2));
    EXPECT_TRUE(same(generate(*cached, turn2, greedy(12)), generate(*cold, turn2, greedy(12))))
        << "cap " << cap;
  }
}

// Under a budget of a few checkpoints, a stream of sessions evicts; a long request running all along (its
// blocks shared with the cache) still gives the cold output, the cache stays within its budget, and no
// block leaks.
TEST_F(PrefixCacheTest, EvictionUnderASmallBudget) {
  EngineOptions probe_opts = cache_options(true, kPlenty);
  auto probe = engine(probe_opts);
  const uint64_t per_ckpt = probe->memory().state_bytes() + model().config().n_embd * sizeof(float);
  const uint64_t budget = 3 * per_ckpt + 4 * probe->memory().block_bytes();
  auto cached = engine(true, budget, 2);
  auto cold = engine(true, 0);
  const std::vector<int32_t> base = ramp(40, 10);
  generate(*cached, base, greedy(2));
  // The long request resumes from `base` (sharing its blocks) and runs while others come and go.
  const std::vector<int32_t> long_prompt = concat(base, ramp(30, 11));
  auto long_id = cached->submit(long_prompt, greedy(250));
  ASSERT_TRUE(long_id.ok());
  Generation long_reply;
  std::vector<SlotEvent> events;
  uint64_t other = 0;
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> others;
  std::map<uint64_t, Generation> other_replies;
  for (int step = 0; !cached->idle(); ++step) {
    if (step % 2 == 0 && cached->n_busy() < 2 && other < 12) {
      std::vector<int32_t> p = concat(ramp(20 + other % 5, 100 + other), ramp(other % 3 + 1, 200 + other));
      auto id = cached->submit(p, greedy(5));
      ASSERT_TRUE(id.ok());
      others.emplace_back(*id, p);
      ++other;
    }
    events.clear();
    ASSERT_TRUE(cached->step(events).ok());
    for (SlotEvent& e : events) {
      Generation& r = e.request_id == *long_id ? long_reply : other_replies[e.request_id];
      for (GeneratedToken& t : e.tokens) r.details.push_back(std::move(t));
    }
    const PrefixCacheStats st = cached->prefix_cache()->stats();
    EXPECT_LE(st.state_bytes, budget);
  }
  EXPECT_GE(other, 10u);
  EXPECT_TRUE(same(long_reply, generate(*cold, long_prompt, greedy(250))));
  for (const auto& [id, p] : others) EXPECT_TRUE(same(other_replies[id], generate(*cold, p, greedy(5))));
  const PrefixCacheStats st = cached->prefix_cache()->stats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_LE(st.kv_bytes + st.state_bytes, budget);
  expect_no_leak(*cached);
}

}  // namespace
}  // namespace mtp::testing
