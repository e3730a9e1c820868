// The Engine's request lifecycle: validation, slots, cancellation, the context limit, end tokens.
#include <gtest/gtest.h>

#include "engine_fixtures.h"

namespace mtp::testing {
namespace {

std::unique_ptr<Engine> engine_for(const Model& model, ThreadPool& pool, bool spec, int64_t n_ctx,
                                   int32_t slots) {
  EngineOptions eo;
  eo.n_ctx = n_ctx;
  eo.n_slots = slots;
  eo.spec = spec ? SpecType::kMtp : SpecType::kNone;
  eo.end_tokens = default_end_tokens(model.vocab());
  return make_engine(model, eo, pool);
}

TEST(EngineApi, BadRequestsAndBusySlots) {
  auto model = Model::load(structured_model(GgmlType::Q8_0));
  ASSERT_TRUE(model.ok());
  ThreadPool pool(2);
  auto engine = engine_for(*model, pool, true, 64, 2);
  RequestOptions ro;
  EXPECT_EQ(engine->submit({}, ro).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit({-1}, ro).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit({static_cast<int32_t>(model->config().n_vocab)}, ro).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(std::vector<int32_t>(64, 40), ro).status().code(), StatusCode::kResourceExhausted);
  RequestOptions bad = ro;
  bad.sampling.top_p = 0;
  EXPECT_EQ(engine->submit({40}, bad).status().code(), StatusCode::kInvalidArgument);
  bad = ro;
  bad.speculative = spec::DraftParams{-1, 0, 0};
  EXPECT_EQ(engine->submit({40}, bad).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine->submit({40}, ro).ok());
  ASSERT_TRUE(engine->submit({41}, ro).ok());
  EXPECT_EQ(engine->n_busy(), 2);
  EXPECT_EQ(engine->submit({42}, ro).status().code(), StatusCode::kResourceExhausted);
  EngineOptions eo;
  eo.n_slots = 0;
  EXPECT_FALSE(Engine::create(*model, eo, pool).ok());
  eo.n_slots = 1;
  eo.spec = SpecType::kMtp;
  eo.draft.n_max = 2;
  eo.draft.n_min = 3;
  EXPECT_FALSE(Engine::create(*model, eo, pool).ok());
}

TEST(EngineApi, CancelFreesTheSlotAndReportsIt) {
  auto model = Model::load(structured_model(GgmlType::Q8_0));
  ASSERT_TRUE(model.ok());
  ThreadPool pool(2);
  auto engine = engine_for(*model, pool, true, 256, 1);
  RequestOptions ro;
  ro.ignore_eos = true;
  auto id = engine->submit({40, 41, 42}, ro);
  ASSERT_TRUE(id.ok());
  std::vector<SlotEvent> events;
  ASSERT_TRUE(engine->step(events).ok());
  ASSERT_TRUE(engine->step(events).ok());
  engine->cancel(*id);
  EXPECT_EQ(engine->n_busy(), 0);
  EXPECT_TRUE(engine->submit({43}, ro).ok());  // the slot is free at once
  events.clear();
  ASSERT_TRUE(engine->step(events).ok());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].request_id, *id);
  EXPECT_EQ(events[0].finish, FinishReason::kCancelled);
  engine->cancel(12345);  // unknown ids are ignored
}

// Without max_tokens a request stops when its next position would not fit the context; drafting or not.
TEST(EngineApi, ContextLimitEndsWithLength) {
  auto model = Model::load(structured_model(GgmlType::Q8_0));
  ASSERT_TRUE(model.ok());
  ThreadPool pool(2);
  RequestOptions ro;
  ro.ignore_eos = true;
  std::vector<Generation> out;
  for (bool spec : {false, true}) {
    auto engine = engine_for(*model, pool, spec, 40, 1);
    out.push_back(generate(*engine, {40, 41, 42, 43, 44}, ro));
    EXPECT_EQ(out.back().finish, FinishReason::kLength);
    // Positions 5..39 hold 35 fed tokens; the 36th is emitted but would need position 40.
    EXPECT_EQ(out.back().tokens.size(), 36u);
  }
  EXPECT_EQ(out[0].tokens, out[1].tokens);
}

TEST(EngineApi, MaxTokensZeroAndOne) {
  auto model = Model::load(structured_model(GgmlType::Q8_0));
  ASSERT_TRUE(model.ok());
  ThreadPool pool(2);
  auto engine = engine_for(*model, pool, true, 64, 1);
  RequestOptions ro;
  ro.max_tokens = 0;
  Generation g = generate(*engine, {40, 41}, ro);
  EXPECT_TRUE(g.tokens.empty());
  EXPECT_EQ(g.finish, FinishReason::kLength);
  EXPECT_EQ(g.timings.n_prompt, 2);
  ro.max_tokens = 1;
  g = generate(*engine, {40, 41}, ro);
  EXPECT_EQ(g.tokens.size(), 1u);
  EXPECT_EQ(g.timings.n_generated, 1);
}

TEST(EngineApi, LogprobsAreLogSoftmax) {
  auto model = Model::load(structured_model(GgmlType::F32, -1));
  ASSERT_TRUE(model.ok());
  ThreadPool pool(2);
  auto engine = engine_for(*model, pool, false, 64, 1);
  RequestOptions ro;
  ro.max_tokens = 3;
  ro.logprobs = true;
  ro.n_probs = 5;
  ro.ignore_eos = true;
  ASSERT_TRUE(engine->submit({40, 41}, ro).ok());
  std::vector<SlotEvent> events;
  std::vector<GeneratedToken> toks;
  while (!engine->idle()) {
    ASSERT_TRUE(engine->step(events).ok());
    for (auto& e : events)
      for (auto& t : e.tokens) toks.push_back(t);
    events.clear();
  }
  ASSERT_EQ(toks.size(), 3u);
  for (const GeneratedToken& t : toks) {
    ASSERT_EQ(t.top.size(), 5u);
    EXPECT_EQ(t.top[0].id, t.id);  // greedy: the top candidate
    EXPECT_FLOAT_EQ(t.top[0].logprob, t.logprob);
    EXPECT_LE(t.logprob, 0.0f);
    for (size_t i = 1; i < t.top.size(); ++i) EXPECT_LE(t.top[i].logprob, t.top[i - 1].logprob);
  }
}

// A prompt longer than the drafter's catch-up backlog (4096 rows) and than -b: the same tokens with drafting.
TEST(EngineApi, LongPromptWithDrafting) {
  auto model = Model::load(structured_model(GgmlType::Q8_0));
  ASSERT_TRUE(model.ok());
  ThreadPool pool(2);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 4200; ++i) prompt.push_back(40 + (i * 7) % 60);
  RequestOptions ro;
  ro.max_tokens = 16;
  ro.ignore_eos = true;
  auto plain = engine_for(*model, pool, false, 8192, 1);
  auto spec = engine_for(*model, pool, true, 8192, 1);
  const Generation a = generate(*plain, prompt, ro), b = generate(*spec, prompt, ro);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_GT(b.timings.spec.rounds, 0);
}

TEST(EngineApi, DefaultEndTokens) {
  Vocab v;
  v.tokens = {"a", "<|im_end|>", "<|endoftext|>", "b"};
  v.token_types = {1, 3, 3, 1};
  v.eos_id = 2;
  EXPECT_EQ(default_end_tokens(v), (std::vector<int32_t>{1, 2}));
}

}  // namespace
}  // namespace mtp::testing
