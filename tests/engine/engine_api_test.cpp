// The Engine's request lifecycle: validation, slots, cancellation, the context limit, end tokens.
#include <gtest/gtest.h>

#include <cmath>

#include "engine_fixtures.h"
#include "model/reference_forward.h"

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
  bad.speculative = speculative::DraftParams{-1, 0, 0};
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

// slot_of names a request's slot from submit on (before any event does, as /slots shows it), the same one
// its events carry, and -1 once it ended or for an unknown id; a freed slot is the next request's.
TEST(EngineApi, SlotOfMatchesTheEvents) {
  RequestOptions ro;
  ro.max_tokens = 4;
  ro.ignore_eos = true;
  auto model = Model::load(structured_model(GgmlType::Q8_0));
  ASSERT_TRUE(model.ok());
  ThreadPool pool(2);
  auto engine = engine_for(*model, pool, true, 256, 3);
  auto a = engine->submit({40, 41, 42}, ro);
  auto b = engine->submit({43, 44}, ro);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(engine->slot_of(*a), 0);
  EXPECT_EQ(engine->slot_of(*b), 1);
  EXPECT_EQ(engine->slot_of(12345), -1);
  engine->cancel(*a);
  EXPECT_EQ(engine->slot_of(*a), -1);
  auto c = engine->submit({45}, ro);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(engine->slot_of(*c), 0);
  std::vector<SlotEvent> events;
  int checked = 0;
  while (!engine->idle()) {
    events.clear();
    ASSERT_TRUE(engine->step(events).ok());
    for (const SlotEvent& ev : events) {
      if (ev.finish != FinishReason::kNone) {
        EXPECT_EQ(engine->slot_of(ev.request_id), -1);
        continue;
      }
      EXPECT_EQ(ev.slot, engine->slot_of(ev.request_id));
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
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
    // Prompt and completion together fill the 40 positions, as llama-server counts them: 35 tokens, the
    // last at position 39 (emitted, never run). With drafts too: a step that accepts all of them ends there.
    EXPECT_EQ(out.back().tokens.size(), 35u);
    if (spec) {
      EXPECT_GT(engine->totals().spec.accepted, 0);  // drafts ran, up to the limit
    }
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

// Each returned logprob is the log-softmax of the reference forward's logits at that position (not merely
// some order-preserving score), and drafting changes none of them: the verify rows' logits are the plain
// rows' (batch invariance).
TEST(EngineApi, LogprobsAreLogSoftmax) {
  auto model = Model::load(structured_model(GgmlType::F32, -1));
  ASSERT_TRUE(model.ok());
  ThreadPool pool(2);
  auto run = [&](bool spec) {
    auto engine = engine_for(*model, pool, spec, 64, 1);
    RequestOptions ro;
    ro.max_tokens = 6;
    ro.logprobs = true;
    ro.n_probs = 5;
    ro.ignore_eos = true;
    EXPECT_TRUE(engine->submit({40, 41}, ro).ok());
    std::vector<SlotEvent> events;
    std::vector<GeneratedToken> toks;
    while (!engine->idle()) {
      EXPECT_TRUE(engine->step(events).ok());
      for (auto& e : events)
        for (auto& t : e.tokens) toks.push_back(t);
      events.clear();
    }
    if (spec) {
      EXPECT_GT(engine->totals().spec.drafted, 0);
    }
    return toks;
  };
  const std::vector<GeneratedToken> plain = run(false), drafted = run(true);
  ASSERT_EQ(plain.size(), 6u);
  ASSERT_EQ(drafted.size(), plain.size());
  // The reference: the f32 forward one token at a time, then log-softmax in double.
  ReferenceState state(model->config());
  std::vector<int32_t> seq{40, 41};
  for (const GeneratedToken& t : plain) seq.push_back(t.id);
  for (size_t p = 0; p + 1 < seq.size(); ++p) {
    const ForwardOutput out = forward_token(*model, state, seq[p], static_cast<int64_t>(p), true, &pool);
    if (p < 1) continue;
    const GeneratedToken& t = plain[p - 1];
    ASSERT_EQ(t.id, seq[p + 1]);
    double max = out.logits[0], sum = 0;
    for (float l : out.logits) max = std::max<double>(max, l);
    for (float l : out.logits) sum += std::exp(static_cast<double>(l) - max);
    auto log_softmax = [&](int32_t id) {
      return static_cast<double>(out.logits[static_cast<size_t>(id)]) - max - std::log(sum);
    };
    EXPECT_NEAR(t.logprob, log_softmax(t.id), 1e-3) << "position " << p;
    ASSERT_EQ(t.top.size(), 5u);
    EXPECT_EQ(t.top[0].id, t.id);  // greedy: the top candidate
    for (size_t i = 0; i < t.top.size(); ++i) {
      EXPECT_NEAR(t.top[i].logprob, log_softmax(t.top[i].id), 1e-3) << "position " << p << " candidate " << i;
      if (i > 0) {
        EXPECT_LE(t.top[i].logprob, t.top[i - 1].logprob);
      }
    }
  }
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(drafted[i].id, plain[i].id) << i;
    EXPECT_EQ(drafted[i].logprob, plain[i].logprob) << i;
    ASSERT_EQ(drafted[i].top.size(), plain[i].top.size()) << i;
    for (size_t j = 0; j < plain[i].top.size(); ++j) {
      EXPECT_EQ(drafted[i].top[j].id, plain[i].top[j].id) << i;
      EXPECT_EQ(drafted[i].top[j].logprob, plain[i].top[j].logprob) << i;
    }
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
