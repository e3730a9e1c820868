// What the engine tells the drafting policy (draft passes with their rows), and the auto policy in
// the engine. Behaviour only: no assertion depends on how fast anything ran.
#include <gtest/gtest.h>

#include "engine_fixtures.h"
#include "speculative/mtp_drafter.h"

namespace mtp::testing {
namespace {

// Two slots drafting up to 3 tokens with the MTP head, under `policy`.
EngineOptions mtp_options(speculative::PolicyKind policy) {
  EngineOptions eo;
  eo.n_ctx = 512;
  eo.n_slots = 2;
  eo.spec = SpecType::kMtp;
  eo.draft.n_max = 3;
  eo.policy.kind = policy;
  return eo;
}

// The MTP drafter reports every forward pass of a draft() call with its own rows: the first carries the
// catch-up rows kept since the last draft, the later ones only the rows still drafting.
TEST(DraftPasses, EachPassWithItsRows) {
  auto model = Model::load(structured_model(GgmlType::Q8_0));
  ASSERT_TRUE(model.ok()) << model.status().message();
  ThreadPool pool(2);
  auto engine = make_engine(*model, mtp_options(speculative::PolicyKind::kFixed), pool);
  const std::vector<std::vector<int32_t>> prompts = test_prompts(2, 5);
  RequestOptions ro;
  ro.max_tokens = 24;
  ro.ignore_eos = true;
  for (const auto& p : prompts) ASSERT_TRUE(engine->submit(p, ro).ok());
  std::vector<SlotEvent> events;
  int drafting_steps = 0;
  while (!engine->idle()) {
    // What the drafter will run first: the slots' catch-up rows (read before the step drafts).
    int64_t pending = 0;
    for (int32_t seq = 0; seq < 2; ++seq) pending += engine->drafter()->pending_rows(seq);
    events.clear();
    StepInfo info;
    ASSERT_TRUE(engine->step(events, &info).ok());
    if (info.drafting != 2 || info.drafted != 6) continue;  // both slots drafted their full length
    ++drafting_steps;
    const std::span<const speculative::DraftPass> passes = engine->drafter()->last_passes();
    ASSERT_EQ(passes.size(), 3u);  // n_max passes (no p_min)
    EXPECT_EQ(passes[0].rows, info.drafting + pending);
    for (size_t i = 1; i < passes.size(); ++i) EXPECT_EQ(passes[i].rows, info.drafting);
    int64_t rows = 0;
    for (const speculative::DraftPass& p : passes) rows += p.rows;
    EXPECT_EQ(rows - pending, info.drafted);  // every draft row is in one pass
  }
  EXPECT_GT(drafting_steps, 3);
}

// The policy learns how long answers run from the requests that end (by length or a stop token), not from
// cancelled ones: what a request without a max_tokens is expected to run when it prices a backlog.
TEST(AutoPolicy, LearnsTheTypicalAnswerLength) {
  auto model = Model::load(structured_model(GgmlType::Q8_0));
  ASSERT_TRUE(model.ok()) << model.status().message();
  ThreadPool pool(2);
  auto engine = make_engine(*model, mtp_options(speculative::PolicyKind::kAuto), pool);
  EXPECT_EQ(engine->policy().typical_tokens(), 0.0);
  RequestOptions ro;
  ro.max_tokens = 12;
  ro.ignore_eos = true;
  const std::vector<std::vector<int32_t>> prompts = test_prompts(2, 5);
  generate_all(*engine, {prompts[0]}, ro);
  EXPECT_EQ(engine->policy().typical_tokens(), 12.0);
  auto cancelled = engine->submit(prompts[1], ro);
  ASSERT_TRUE(cancelled.ok());
  std::vector<SlotEvent> events;
  StepInfo info;
  ASSERT_TRUE(engine->step(events, &info).ok());
  engine->cancel(*cancelled);
  while (!engine->idle()) ASSERT_TRUE(engine->step(events, &info).ok());
  EXPECT_EQ(engine->policy().typical_tokens(), 12.0);
  ro.max_tokens = 2;
  generate_all(*engine, {prompts[1]}, ro);
  EXPECT_NEAR(engine->policy().typical_tokens(), 0.9 * 12 + 0.1 * 2, 1e-9);
}

// Auto changes every slot's draft length from step to step; the output stays exactly plain decoding's.
TEST(AutoPolicy, OutputIdenticalToPlain) {
  auto model = Model::load(structured_model(GgmlType::Q8_0));
  ASSERT_TRUE(model.ok()) << model.status().message();
  ThreadPool pool(2);
  EngineOptions eo;
  eo.n_ctx = 1024;
  eo.n_slots = 4;
  auto plain_engine = make_engine(*model, eo, pool);
  eo.spec = SpecType::kMtp;
  eo.draft.n_max = 3;
  eo.policy.kind = speculative::PolicyKind::kAuto;
  auto engine = make_engine(*model, eo, pool);
  RequestOptions ro;
  ro.max_tokens = 40;
  ro.ignore_eos = true;
  const std::vector<std::vector<int32_t>> prompts = test_prompts(4, 4);
  const std::vector<Generation> plain = generate_all(*plain_engine, prompts, ro);
  for (int round = 0; round < 2; ++round) {  // the second round runs on what the first measured
    const std::vector<Generation> spec = generate_all(*engine, prompts, ro);
    int64_t drafted = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i << ", round " << round;
      drafted += spec[i].timings.spec.drafted;
    }
    if (round == 0) {
      EXPECT_GT(drafted, 0);  // before any measurement it drafts
    }
  }
}

}  // namespace
}  // namespace mtp::testing
