// Statistics with llama.cpp's definitions, and the drafting policy (throttle and auto).
#include <gtest/gtest.h>

#include <algorithm>

#include "speculative/policy.h"
#include "speculative/stats.h"

namespace mtp::speculative {
namespace {

TEST(SpecStats, LlamaCppDefinitions) {
  SpecStats s;
  s.add_round(2, 2);
  s.add_round(2, 1);
  s.add_round(2, 0);
  s.add_round(1, 1);
  EXPECT_EQ(s.rounds, 4);
  EXPECT_EQ(s.drafted, 7);
  EXPECT_EQ(s.accepted, 4);
  EXPECT_DOUBLE_EQ(s.mean_acc_len(), 2.0);  // 1 + 4/4
  const std::vector<double> r = s.acc_rate_per_pos();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r[0], 3.0 / 4);  // rounds with >= 1 accepted
  EXPECT_DOUBLE_EQ(r[1], 1.0 / 4);  // rounds with >= 2 accepted
  EXPECT_DOUBLE_EQ(r[0] + r[1], s.mean_acc_len() - 1);
  const std::vector<double> c = s.acc_rate_given_drafted();
  EXPECT_DOUBLE_EQ(c[1], 1.0 / 3);  // position 2 was drafted in 3 rounds
  EXPECT_EQ(s.summary(),
            "#gen tokens = 7, #acc tokens = 4, #mean acc len = 2.000, #acc rate/pos = (0.750, 0.250)");
  SpecStats t;
  t.add_round(3, 3);
  t.merge(s);
  EXPECT_EQ(t.rounds, 5);
  EXPECT_EQ(t.accepted_at, (std::vector<int64_t>{4, 2, 1}));
  EXPECT_EQ(SpecStats{}.summary(),
            "#gen tokens = 0, #acc tokens = 0, #mean acc len = 1.000, #acc rate/pos = ()");
}

TEST(SpecStats, AcceptanceRatesAreNonIncreasing) {
  SpecStats s;
  for (int i = 0; i < 50; ++i) s.add_round(3, i % 4);
  const std::vector<double> r = s.acc_rate_per_pos();
  for (size_t i = 1; i < r.size(); ++i) EXPECT_LE(r[i], r[i - 1]);
}

TEST(DraftPolicy, ThrottleFollowsTheSeedSemantics) {
  PolicyOptions o;
  o.max_drafting_slots = 1;
  DraftPolicy p(o);
  std::vector<SlotDemand> one{{3, nullptr}};
  EXPECT_EQ(p.choose(one), (std::vector<int32_t>{3}));
  std::vector<SlotDemand> four(4, SlotDemand{3, nullptr});
  EXPECT_EQ(p.choose(four), (std::vector<int32_t>(4, 0)));
  o.max_drafting_slots = -1;
  EXPECT_EQ(DraftPolicy(o).choose(four), (std::vector<int32_t>(4, 3)));
  // A slot's own cap of 0 (speculative: false) is never raised.
  std::vector<SlotDemand> mixed{{0, nullptr}, {2, nullptr}};
  EXPECT_EQ(DraftPolicy(o).choose(mixed), (std::vector<int32_t>{0, 2}));
}

TEST(StepCostModel, FitsALineThroughTheMeasuredSizes) {
  StepCostModel m;
  EXPECT_EQ(m.predict(3), 0.0);
  m.observe(1, 1.0);
  m.observe(5, 2.0);
  EXPECT_DOUBLE_EQ(m.predict(1), 1.0);
  EXPECT_DOUBLE_EQ(m.predict(3), 1.5);
  EXPECT_DOUBLE_EQ(m.predict(9), 3.0);  // along the measured slope, 0.25 per row
  m.observe(1, 2.0);                    // the size's moving average moves toward the new sample
  EXPECT_GT(m.predict(1), 1.0);
  EXPECT_LT(m.predict(1), 2.0);
}

TEST(StepCostModel, OneMeasuredCountExtendsAtItsAverageRowCost) {
  StepCostModel m;
  m.observe(4, 2.0);
  EXPECT_DOUBLE_EQ(m.slope(), 0.5);
  EXPECT_DOUBLE_EQ(m.predict(8), 4.0);  // no fixed cost assumed: pessimistic above the measurement
  EXPECT_DOUBLE_EQ(m.predict(1), 0.5);  // and optimistic below it, so a smaller batch gets tried
}

// The engine measures the batch sizes it runs: a few small ones early (c1-c4 with drafting), then a large
// one it never drafted at. Predictions for the unmeasured large batches must follow the curve's slope, not
// a guess that makes extra rows look cheap.
TEST(StepCostModel, ConvergesOnALinearCostCurve) {
  const auto truth = [](int64_t r) { return 0.035 + 0.011 * static_cast<double>(r); };
  StepCostModel m;
  uint32_t noise = 1;
  for (int round = 0; round < 200; ++round) {
    for (int64_t r : {1, 2, 4, 8, 12, 16}) {
      noise = noise * 1664525u + 1013904223u;  // +-2% deterministic noise
      const double e = 1.0 + 0.04 * (static_cast<double>(noise >> 8) / 16777216.0 - 0.5);
      m.observe(r, truth(r) * e);
    }
  }
  for (int64_t r : {1, 3, 8, 16, 24, 32, 48, 64}) EXPECT_NEAR(m.predict(r), truth(r), 0.03 * truth(r)) << r;
}

// One batch size measured once during a burst of foreign load (twice its cost) barely moves the line; the
// sizes measured many times decide it.
TEST(StepCostModel, OneNoisySizeDoesNotDecide) {
  const auto truth = [](int64_t r) { return 0.035 + 0.011 * static_cast<double>(r); };
  StepCostModel m;
  for (int i = 0; i < 20; ++i)
    for (int64_t r : {1, 4, 8, 16}) m.observe(r, truth(r));
  m.observe(12, 2 * truth(12));
  EXPECT_NEAR(m.predict(12), truth(12), 0.1 * truth(12));
  EXPECT_NEAR(m.predict(64), truth(64), 0.1 * truth(64));
  // A size that is measured again and again follows its new cost.
  for (int i = 0; i < 100; ++i) m.observe(12, 2 * truth(12));
  EXPECT_GT(m.predict(12), 1.2 * truth(12));
}

// A forgotten size leaves the line to the others (one size left: its average cost per row again), and is
// priced by that line until measured again.
TEST(StepCostModel, AForgottenSizeIsPricedByTheOthers) {
  StepCostModel m;
  for (int i = 0; i < 3; ++i) {
    m.observe(2, 1.0);
    m.observe(4, 8.0);  // measured in a burst of foreign load
  }
  EXPECT_DOUBLE_EQ(m.predict(4), 8.0);
  m.forget(4);
  EXPECT_FALSE(m.measured(4));
  EXPECT_EQ(m.sizes(), 1);
  EXPECT_EQ(m.samples(), 3);
  EXPECT_DOUBLE_EQ(m.predict(4), 2.0);  // size 2's half a second a row
  m.forget(4);                          // not measured: nothing changes
  EXPECT_EQ(m.samples(), 3);
  m.forget(2);
  EXPECT_FALSE(m.has_data());
  EXPECT_EQ(m.predict(4), 0.0);
  m.observe(4, 2.0);
  EXPECT_DOUBLE_EQ(m.predict(4), 2.0);
}

TEST(DraftPolicy, PromptRowsDoNotFeedTheDecodeTable) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  for (int r = 1; r <= 16; ++r) p.observe_trunk(r, 0, 0, 0.035 + 0.011 * r);
  // A prompt step: 4 decode rows and 200 prompt rows at 0.005 s each.
  for (int i = 0; i < 50; ++i) p.observe_trunk(4, 0, 200, 0.035 + 0.011 * 4 + 200 * 0.005);
  EXPECT_NEAR(p.predict_trunk(64), 0.035 + 0.011 * 64, 1e-9);  // the prompt step did not bend the table
}

// One trunk step: decode rows, verify rows, seconds.
struct TrunkSample {
  int64_t rows, verify;
  double seconds;
};

// An auto policy that has observed `samples`, in order, three times over (so each size prices itself).
DraftPolicy auto_policy_after(std::initializer_list<TrunkSample> samples) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  for (int rep = 0; rep < 3; ++rep)
    for (const TrunkSample& t : samples) p.observe_trunk(t.rows, t.verify, 0, t.seconds);
  return p;
}

// A slot that drafted 3 tokens a round for a long time, with conditional acceptance `rate` at every position
// (each position's hits evenly spread over its trials).
AcceptanceTracker tracker_at(double rate) {
  AcceptanceTracker t;
  int64_t trials[3] = {0, 0, 0};
  for (int round = 0; round < 2000; ++round) {
    int accepted = 0;
    for (int j = 0; j < 3; ++j) {
      const int64_t n = trials[j]++;
      if (static_cast<int64_t>((n + 1) * rate) == static_cast<int64_t>(n * rate)) break;
      ++accepted;
    }
    t.observe(3, accepted);
  }
  return t;
}

// Auto: drafts when extra rows are nearly free and acceptance is high; not when each extra row costs a
// whole step or acceptance is poor.
TEST(DraftPolicy, AutoMaximisesExpectedThroughput) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  AcceptanceTracker good, bad;
  for (int i = 0; i < 100; ++i) {
    good.observe(3, 3);
    bad.observe(3, 0);
  }
  {
    DraftPolicy cheap(o);              // memory-bound: rows nearly free, drafting cheap
    for (int rep = 0; rep < 3; ++rep)  // plain steps priced by their own medians
      for (int r = 1; r <= 16; ++r) cheap.observe_trunk(r, 0, 0, 1.0 + 0.05 * (r - 1));
    for (int r = 1; r <= 16; ++r) cheap.observe_draft(r, 0.05);
    std::vector<SlotDemand> s{{3, &good}};
    EXPECT_EQ(cheap.choose(s), (std::vector<int32_t>{3}));
    std::vector<SlotDemand> b{{3, &bad}};
    EXPECT_EQ(cheap.choose(b), (std::vector<int32_t>{0}));
  }
  {
    DraftPolicy dear(o);  // compute-bound: every row costs as much as a step
    for (int r = 1; r <= 64; ++r) dear.observe_trunk(r, 0, 0, 1.0 * r);
    for (int r = 1; r <= 16; ++r) dear.observe_draft(r, 0.3);
    std::vector<SlotDemand> s(16, SlotDemand{3, &good});
    EXPECT_EQ(dear.choose(s), (std::vector<int32_t>(16, 0)));
  }
}

// This engine's shape (8-layer 35B-A3B widths on 2 cores): a step costs a fixed part plus the marginal cost
// of a decode row for every row, verify rows included, and a draft pass is cheap. With acceptance 0.85 per
// position a lone request drafts its full length; sixteen generating slots decode plainly. The table holds
// only what the engine ran: small drafted batches and the 16-slot batch without drafts.
TEST(DraftPolicy, AutoDraftsAloneAndNotInASaturatedBatch) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  const auto trunk = [](int64_t r) { return 0.035 + 0.011 * static_cast<double>(r); };
  for (int rep = 0; rep < 3; ++rep)  // plain steps measured often enough to price themselves
    for (int64_t r : {1, 2, 3, 4, 6, 8, 12, 16}) p.observe_trunk(r, 0, 0, trunk(r));
  for (int64_t r = 1; r <= 16; ++r) p.observe_draft(r, 0.003 + 0.001 * static_cast<double>(r));
  const AcceptanceTracker a = tracker_at(0.85);
  ASSERT_NEAR(a.p_reach(0), 0.85, 0.05);
  ASSERT_NEAR(a.p_reach(2), 0.85 * 0.85 * 0.85, 0.1);
  const std::vector<SlotDemand> one{{3, &a, 2}};
  EXPECT_GT(p.choose(one)[0], 0);
  const std::vector<SlotDemand> two(2, SlotDemand{3, &a, 2});
  for (int32_t k : p.choose(two)) EXPECT_GT(k, 0);
  const std::vector<SlotDemand> sixteen(16, SlotDemand{3, &a, 2});
  EXPECT_EQ(p.choose(sixteen), (std::vector<int32_t>(16, 0)));
  const std::vector<SlotDemand> eight(8, SlotDemand{3, &a, 2});
  EXPECT_EQ(p.choose(eight), (std::vector<int32_t>(8, 0)));
}

// A verify size never measured, priced from a plain step and a larger verify size (Zen 3, c1: plain 1, 4 and
// 16 rows 21, 41 and 120 ms, a 4-row verify 69 ms; a 2-row verify ran at 33): no dearer than the chord
// between the two, where the line through the 4-row verify along the plain rows' slope said 56 ms and kept
// one-token drafts from ever running.
TEST(DraftPolicy, AnUnmeasuredVerifySizeIsPricedNoHigherThanTheChord) {
  const DraftPolicy policy = auto_policy_after({{1, 0, 0.021}, {4, 0, 0.041}, {16, 0, 0.120}, {1, 3, 0.069}});
  const double chord = 0.021 + (0.069 - 0.021) / 3;
  EXPECT_LE(policy.predict_trunk(1, 1), chord + 1e-9);
  EXPECT_GE(policy.predict_trunk(1, 1), 0.021);
  EXPECT_NEAR(policy.predict_trunk(1, 3), 0.069, 1e-9);  // measured: its own median
}

// Measured on the 8-layer 35B-A3B-width model, 2 threads: plain steps bend (later rows share experts) and a
// saturated batch's verify step costs 4x its plain step. Sizes measured a few times are priced by their own
// averages, not by a line through all sizes, so 16 slots decode plainly while one slot drafts.
TEST(DraftPolicy, MeasuredSizesPriceThemselves) {
  DraftPolicy p =
      auto_policy_after({{1, 0, 0.022}, {2, 0, 0.031}, {16, 0, 0.111}, {1, 3, 0.045}, {16, 48, 0.448}});
  for (int64_t r = 1; r <= 64; ++r) p.observe_draft(r, 0.0025 + 0.0006 * static_cast<double>(r));
  EXPECT_NEAR(p.predict_trunk(16), 0.111, 1e-9);
  EXPECT_NEAR(p.predict_trunk(16, 48), 0.448, 1e-9);
  const AcceptanceTracker a = tracker_at(0.88);
  EXPECT_EQ(p.choose(std::vector<SlotDemand>(16, SlotDemand{3, &a})), (std::vector<int32_t>(16, 0)));
  EXPECT_GT(p.choose(std::vector<SlotDemand>(1, SlotDemand{3, &a}))[0], 0);
}

// Verify rows are priced from steps that had verify rows: here a batch of a few sequences' verify rows costs
// 40% more per row than decode rows of as many sequences (as measured on 2 cores at small batches). Four
// slots then decode plainly (priced as decode rows, drafting 3 each would look 18% better); one slot drafts.
TEST(DraftPolicy, VerifyRowsArePricedFromVerifySteps) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  for (int rep = 0; rep < 3; ++rep) {  // each size measured often enough to be trusted
    for (int64_t n : {1, 2, 4, 8, 16}) p.observe_trunk(n, 0, 0, 0.02 + 0.006 * static_cast<double>(n));
    for (int64_t n : {1, 2, 4}) p.observe_trunk(n, 3 * n, 0, 0.02 + 0.0085 * static_cast<double>(4 * n));
  }
  for (int64_t r = 1; r <= 16; ++r) p.observe_draft(r, 0.004);
  EXPECT_NEAR(p.predict_trunk(4), 0.02 + 0.006 * 4, 1e-9);
  EXPECT_NEAR(p.predict_trunk(4, 12), 0.02 + 0.0085 * 16, 1e-9);
  const AcceptanceTracker a = tracker_at(0.9);
  EXPECT_EQ(p.choose(std::vector<SlotDemand>(4, SlotDemand{3, &a})), (std::vector<int32_t>(4, 0)));
  EXPECT_GT(p.choose(std::vector<SlotDemand>{{3, &a}})[0], 0);
}

// A plain batch size never measured is measured once with a plain step before drafting is priced against
// it; until a line has two sizes it runs through its one along the other line's slope.
TEST(DraftPolicy, MeasuresAPlainBatchSizeBeforeDraftingAndBorrowsASlope) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  p.observe_trunk(1, 0, 0, 0.022);
  for (int64_t n : {1, 2, 4}) p.observe_trunk(n, 3 * n, 0, 0.016 + 0.0075 * static_cast<double>(4 * n));
  for (int64_t r = 1; r <= 16; ++r) p.observe_draft(r, 0.003);
  EXPECT_NEAR(p.predict_trunk(4), 0.022 + 3 * 0.0075, 1e-9);
  const AcceptanceTracker a = tracker_at(0.9);
  const std::vector<SlotDemand> two(2, SlotDemand{3, &a});
  EXPECT_EQ(p.choose(two), (std::vector<int32_t>(2, 0)));  // two slots plain: never measured
  EXPECT_GT(p.choose(two, 5)[0], 0);                       // (not in a step with prompt rows)
  p.observe_trunk(2, 0, 0, 0.030);
  EXPECT_NEAR(p.predict_trunk(4), 0.022 + 3 * 0.008, 1e-9);  // its own line now
  EXPECT_EQ(p.choose(two), (std::vector<int32_t>(2, 0)));    // measured once: not yet its own price
  p.observe_trunk(2, 0, 0, 0.030);
  p.observe_trunk(2, 0, 0, 0.030);
  EXPECT_NEAR(p.predict_trunk(2), 0.030, 1e-9);  // three samples: its own average
  for (int32_t k : p.choose(two)) EXPECT_GT(k, 0);
}

// A slot whose drafts keep being rejected stops drafting, even where verify rows and draft passes are cheap.
TEST(DraftPolicy, AutoStopsDraftingWhenDraftsAreRejected) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  for (int64_t r = 1; r <= 8; ++r) {
    for (int rep = 0; rep < 3; ++rep) p.observe_trunk(r, 0, 0, 0.02 + 0.002 * static_cast<double>(r));
    if (r > 1) p.observe_trunk(1, r - 1, 0, 0.02 + 0.002 * static_cast<double>(r));
    p.observe_draft(r, 0.0005);
  }
  AcceptanceTracker slot;
  const std::vector<SlotDemand> one{{3, &slot}};
  EXPECT_EQ(p.choose(one), (std::vector<int32_t>{3}));  // the prior: worth trying
  for (int i = 0; i < 40; ++i) slot.observe(3, 0);
  EXPECT_EQ(p.choose(one), (std::vector<int32_t>{0}));
}

// A gain within the model's error is not worth a draft: with these costs every draft length promises 3-5%
// more than plain decoding, so auto decodes plainly; with cheaper rows the same slot drafts.
TEST(DraftPolicy, AutoIgnoresGainsWithinTheMargin) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  AcceptanceTracker sure;
  for (int i = 0; i < 200; ++i) sure.observe(3, 3);
  const std::vector<SlotDemand> one{{3, &sure}};
  DraftPolicy dear(o);
  for (int rep = 0; rep < 3; ++rep)
    for (int64_t r = 1; r <= 4; ++r) dear.observe_trunk(r, 0, 0, 1.0 + 16.0 * static_cast<double>(r));
  dear.observe_draft(1, 1e-6);
  EXPECT_EQ(dear.choose(one), (std::vector<int32_t>{0}));
  DraftPolicy cheap(o);
  for (int rep = 0; rep < 3; ++rep)
    for (int64_t r = 1; r <= 4; ++r) cheap.observe_trunk(r, 0, 0, 1.0 + 1.0 * static_cast<double>(r));
  cheap.observe_draft(1, 1e-6);
  EXPECT_EQ(cheap.choose(one), (std::vector<int32_t>{3}));
}

// Catch-up rows ride in the first draft pass. The steady-state ones (last round's accepted drafts) count
// against drafting; a long backlog (a stretch without drafting) is paid once, spread over the steps a
// drafting stretch lasts at least: it does not keep a slot alone from drafting again.
TEST(DraftPolicy, AutoCountsSteadyCatchUpRowsOnly) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  const AcceptanceTracker a = tracker_at(0.85);
  DraftPolicy p(o);
  for (int rep = 0; rep < 3; ++rep)
    for (int64_t r = 1; r <= 8; ++r) p.observe_trunk(r, 0, 0, 0.035 + 0.011 * static_cast<double>(r));
  for (int64_t r = 1; r <= 64; ++r) p.observe_draft(r, 0.003 + 0.004 * static_cast<double>(r));
  EXPECT_GT(p.choose(std::vector<SlotDemand>{{3, &a, 0}})[0], 0);
  EXPECT_GT(p.choose(std::vector<SlotDemand>{{3, &a, 60}})[0], 0);
  // Draft rows dear enough that a round's catch-up rows tip the balance: k = 1 pays without them only.
  DraftPolicy dear(o);
  for (int rep = 0; rep < 3; ++rep)
    for (int64_t r = 1; r <= 8; ++r) dear.observe_trunk(r, 0, 0, 1.0 + 1.0 * static_cast<double>(r));
  for (int64_t r = 1; r <= 8; ++r) dear.observe_draft(r, 0.55 * static_cast<double>(r));
  AcceptanceTracker sure;
  for (int i = 0; i < 200; ++i) sure.observe(1, 1);
  EXPECT_EQ(dear.choose(std::vector<SlotDemand>{{1, &sure, 0}}), (std::vector<int32_t>{1}));
  EXPECT_EQ(dear.choose(std::vector<SlotDemand>{{1, &sure, 5}}), (std::vector<int32_t>{0}));
}

// Four slots where drafting one token each promises ~10% over plain decoding: they draft with a round's
// catch-up rows, but not when each would first run a 64-row backlog through the MTP block for one step's
// gain.
TEST(DraftPolicy, AutoDoesNotRestartDraftingForASmallGainOverALongBacklog) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  for (int rep = 0; rep < 3; ++rep)  // plain steps measured often enough to price themselves
    for (int64_t r = 1; r <= 16; ++r) p.observe_trunk(r, 0, 0, 0.030 + 0.002 * static_cast<double>(r));
  for (int64_t r = 1; r <= 64; ++r) p.observe_draft(r, 0.003 + 0.001 * static_cast<double>(r));
  const AcceptanceTracker a = tracker_at(0.6);
  for (int32_t k : p.choose(std::vector<SlotDemand>(4, SlotDemand{3, &a, 1}))) EXPECT_GT(k, 0);
  EXPECT_EQ(p.choose(std::vector<SlotDemand>(4, SlotDemand{3, &a, 64})), (std::vector<int32_t>(4, 0)));
  // One slot with a large expected gain restarts over the same backlog, with no end of its request in sight
  // or many tokens to go; not for the last 3 tokens of its max_tokens, which would pay it all.
  const AcceptanceTracker high = tracker_at(0.9);
  EXPECT_GT(p.choose(std::vector<SlotDemand>{{3, &high, 64}})[0], 0);
  EXPECT_GT(p.choose(std::vector<SlotDemand>{{3, &high, 64, 200}})[0], 0);
  EXPECT_EQ(p.choose(std::vector<SlotDemand>{{3, &high, 64, 3}}), (std::vector<int32_t>{0}));
}

// The first verify steps pay one-time costs; one slow first sample must not stop drafting for good (nothing
// would measure verify steps again): the policy drafts until a median of verify samples prices them.
TEST(DraftPolicy, AutoDoesNotStopDraftingOnOneSlowFirstVerifyStep) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  const AcceptanceTracker a = tracker_at(0.9);
  const std::vector<SlotDemand> slot{{3, &a, 1}};
  for (int step = 0; step < 3; ++step) {  // plain decoding first, until its median prices it
    EXPECT_EQ(p.choose(slot)[0], 0);
    p.observe_trunk(1, 0, 0, 0.025);
  }
  EXPECT_EQ(p.choose(slot)[0], 3);  // no drafting data: measure
  p.observe_trunk(1, 3, 0, 0.300);  // a first verify step, 10x a steady one
  for (int64_t r = 1; r <= 16; ++r) p.observe_draft(r, 0.002 + 0.0005 * static_cast<double>(r));
  for (int step = 0; step < 20; ++step) {
    const int32_t k = p.choose(slot)[0];
    ASSERT_GT(k, 0) << step;
    p.observe_trunk(1, k, 0, 0.025 + 0.004 * k);
  }
}

// An auto policy that measured plain steps of 1 and 2 slots and one slot drafting one token, each three
// times, and cheap draft passes (c1 and the start of c2).
DraftPolicy policy_after_c1_and_c2() {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  for (int rep = 0; rep < 3; ++rep) {
    p.observe_trunk(1, 0, 0, 0.020);
    p.observe_trunk(2, 0, 0, 0.021);
    p.observe_trunk(1, 1, 0, 0.024);
  }
  for (int64_t r = 1; r <= 16; ++r) p.observe_draft(r, 0.002);
  return p;
}

// A verify size new to the engine pays one-time costs in its first step. Measured at c2 after c1: the first
// 4-row verify took 47 ms against a steady 27, and priced by it (the line through it and the trusted 2-row
// size) drafting never ran again. A size measured once or twice is priced no higher than as many plain rows,
// so it runs until a median of its own samples prices it.
TEST(DraftPolicy, AutoRemeasuresAVerifySizeAfterOneSlowFirstStep) {
  DraftPolicy p = policy_after_c1_and_c2();
  p.observe_trunk(2, 2, 0, 0.047);  // c2's first verify step
  const AcceptanceTracker a = tracker_at(0.85);
  const std::vector<SlotDemand> two(2, SlotDemand{1, &a});
  for (int step = 0; step < 20; ++step) {
    ASSERT_EQ(p.choose(two), (std::vector<int32_t>{1, 1})) << step;
    p.observe_trunk(2, 2, 0, 0.027);
  }
  // A size whose own samples keep saying it is dear stays dear.
  DraftPolicy q = policy_after_c1_and_c2();
  int drafted = 0;
  for (int step = 0; step < 100; ++step) {
    const std::vector<int32_t> k = q.choose(two);
    drafted += k[0] + k[1] > 0;
    q.observe_trunk(2, k[0] + k[1], 0, k[0] + k[1] > 0 ? 0.047 : 0.021);
  }
  EXPECT_LE(drafted, 3);  // until its third sample makes the size trusted
}

// That warm-up price is for drafting that has just started. A verify size measured once long ago (two slots
// drafting 3 at c2, 8 rows) does not get it at c4 (four slots drafting 1, also 8 rows): there it would start
// drafting on a guess, and each slot would first run its backlog through the MTP block.
TEST(DraftPolicy, AutoDoesNotStartDraftingOnAnOldSingleSample) {
  DraftPolicy p = policy_after_c1_and_c2();
  p.observe_trunk(2, 6, 0, 0.070);
  for (int step = 0; step < 40; ++step) p.observe_trunk(4, 0, 0, 0.030);
  const AcceptanceTracker a = tracker_at(0.85);
  EXPECT_EQ(p.choose(std::vector<SlotDemand>(4, SlotDemand{1, &a, 32})), std::vector<int32_t>(4, 0));
}

// While one slot drafts k tokens, the verify sizes of the other lengths go unmeasured. One priced in a slow
// stretch would never run again (measured at c1: drafting 3 priced at 42 ms against a steady 35 kept a slot
// at 2, 15% slower): a stale length whose promise is close to the plan's runs once, and its sample replaces
// the stale ones.
// One slot's steady verify step of k drafts, and a policy that measured k = 1, 2 at that price and k = 3 in a
// slow stretch (0.040 against a steady 0.034).
double one_slot_verify_cost(int32_t k) {
  return 0.022 + 0.004 * k;
}
DraftPolicy policy_with_a_slow_length() {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  for (int rep = 0; rep < 3; ++rep) {
    p.observe_trunk(1, 0, 0, 0.020);
    p.observe_trunk(1, 1, 0, one_slot_verify_cost(1));
    p.observe_trunk(1, 2, 0, one_slot_verify_cost(2));
    p.observe_trunk(1, 3, 0, 0.040);
  }
  for (int64_t r = 1; r <= 16; ++r) p.observe_draft(r, 0.002);
  return p;
}

TEST(DraftPolicy, AutoRemeasuresAStaleDraftLength) {
  DraftPolicy p = policy_with_a_slow_length();
  const auto verify_cost = one_slot_verify_cost;
  const AcceptanceTracker a = tracker_at(0.85);
  const std::vector<SlotDemand> one{{3, &a}};
  ASSERT_EQ(p.choose(one)[0], 2);  // priced by the slow samples, drafting 3 looks 8% worse than 2
  std::vector<int32_t> chosen;
  for (int step = 0; step < 100; ++step) {
    const int32_t k = p.choose(one)[0];
    chosen.push_back(k);
    p.observe_trunk(1, k, 0, k > 0 ? verify_cost(k) : 0.020);
  }
  const auto first3 = std::find(chosen.begin(), chosen.end(), 3);
  ASSERT_NE(first3, chosen.end());
  EXPECT_LE(first3 - chosen.begin(), 36);                         // within kRefreshSteps and a few
  EXPECT_GE(std::count(chosen.end() - 50, chosen.end(), 3), 45);  // then it stays (a few re-measuring steps)
}

// The re-measuring step may run fewer drafts than it asked for (p_min, a full cache); the attempt counts, so
// a stale length is tried once per kRefreshSteps, not every step.
TEST(DraftPolicy, AutoRetriesAStaleDraftLengthOncePerRefresh) {
  DraftPolicy p = policy_with_a_slow_length();
  const auto verify_cost = one_slot_verify_cost;
  const AcceptanceTracker a = tracker_at(0.85);
  const std::vector<SlotDemand> one{{3, &a}};
  int tried3 = 0;
  for (int step = 0; step < 100; ++step) {
    const int32_t k = p.choose(one)[0];
    tried3 += k == 3;
    const int32_t ran = std::min(k, 2);  // the drafter stops after 2 (say, p_min)
    p.observe_trunk(1, ran, 0, ran > 0 ? verify_cost(ran) : 0.020);
  }
  EXPECT_GE(tried3, 1);
  EXPECT_LE(tried3, 4);
}

// Re-measuring runs only the slots the plan drafts: a slot kept idle (its drafts are rejected) would first
// run its whole backlog through the MTP block.
TEST(DraftPolicy, AutoRemeasuresOnlyTheDraftingSlots) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  auto verify_cost = [](int64_t extra) { return 0.024 + 0.004 * static_cast<double>(extra); };
  for (int rep = 0; rep < 3; ++rep) {
    p.observe_trunk(1, 0, 0, 0.020);
    p.observe_trunk(2, 0, 0, 0.022);
    for (int64_t extra : {1, 2, 4, 5, 6}) p.observe_trunk(2, extra, 0, verify_cost(extra));
    p.observe_trunk(2, 3, 0, 0.040);  // the good slot drafting 3, priced in a slow stretch (steady: 0.036)
  }
  for (int64_t r = 1; r <= 64; ++r) p.observe_draft(r, 0.002);
  const AcceptanceTracker good = tracker_at(0.85), bad = tracker_at(0.05);
  const std::vector<SlotDemand> slots{{3, &good, 0}, {3, &bad, 64}};
  int tried3 = 0;
  for (int step = 0; step < 100; ++step) {
    const std::vector<int32_t> k = p.choose(slots);
    ASSERT_EQ(k[1], 0) << step;
    tried3 += k[0] == 3;
    p.observe_trunk(2, k[0], 0, k[0] > 0 ? verify_cost(k[0]) : 0.022);
  }
  EXPECT_GE(tried3, 1);  // the good slot's stale length was re-measured (and then kept: it is cheap)
}

// While the policy drafts at a batch size it never measures that size's plain step, and the machine's speed
// drifts: a plain price from a slow stretch must not keep it drafting. Every so often one plain step
// re-prices it, its sample replacing the stale ones (a median would keep the old price).
TEST(DraftPolicy, AutoRepricesAStalePlainStepWhileDrafting) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  const int64_t n = 16;
  auto verify_cost = [](int64_t rows) { return 0.100 + 0.005 * static_cast<double>(rows); };
  for (int rep = 0; rep < 5; ++rep) p.observe_trunk(n, 0, 0, 0.300);  // measured in a slow stretch
  for (int rep = 0; rep < 3; ++rep)
    for (int64_t extra : {16, 32}) p.observe_trunk(n, extra, 0, verify_cost(n + extra));
  for (int64_t r = 1; r <= 64; ++r) p.observe_draft(r, 0.003 + 0.001 * static_cast<double>(r));
  const AcceptanceTracker a = tracker_at(0.6);
  const std::vector<SlotDemand> slots(n, SlotDemand{3, &a, 1});
  // Runs steps as the engine would; returns the number of drafting steps before the first plain one.
  auto steps_until_plain = [&](int limit) {
    for (int step = 0; step < limit; ++step) {
      const std::vector<int32_t> k = p.choose(slots);
      int64_t extra = 0;
      for (int32_t x : k) extra += x;
      if (extra == 0) return step;
      p.observe_trunk(n, extra, 0, verify_cost(n + extra));
    }
    return limit;
  };
  const int first = steps_until_plain(200);
  EXPECT_GT(first, 8);  // it drafts for a while: verify steps are cheap against the plain price
  EXPECT_LT(first, 200);
  p.observe_trunk(n, 0, 0, 0.300);  // the same price again: drafting resumes at once
  EXPECT_GT(steps_until_plain(1), 0);
  EXPECT_LT(steps_until_plain(200), 200);
  p.observe_trunk(n, 0, 0, 0.150);  // the machine is faster now: plain beats drafting, one sample suffices
  for (int step = 0; step < 50; ++step) {
    EXPECT_EQ(p.choose(slots), std::vector<int32_t>(n, 0)) << step;
    p.observe_trunk(n, 0, 0, 0.150);
  }
}

// The re-pricing plain step is one noisy sample: where it is within 20% of the plain price it joins that
// price's median (one fast sample replacing it made the model decline drafting that paid); a drift within
// that band shows once three refreshes carried it, one beyond it at once (the test above).
TEST(DraftPolicy, AutoRepricesPlainStepsByAMedianWithinTheNoise) {
  PolicyOptions o;
  o.kind = PolicyKind::kAuto;
  DraftPolicy p(o);
  for (int rep = 0; rep < 5; ++rep) p.observe_trunk(1, 0, 0, 0.100);
  for (int rep = 0; rep < 3; ++rep) p.observe_trunk(1, 1, 0, 0.105);
  p.observe_draft(1, 0.003);
  const AcceptanceTracker a = tracker_at(0.9);
  const std::vector<SlotDemand> slot(1, SlotDemand{1, &a, 1});
  // Drafting steps until the policy asks for a plain one; then that step at `seconds`.
  auto refresh = [&](double seconds) {
    int step = 0;
    for (; step < 100 && p.choose(slot)[0] > 0; ++step) p.observe_trunk(1, 1, 0, 0.105);
    ASSERT_LT(step, 100);
    p.observe_trunk(1, 0, 0, seconds);
  };
  refresh(0.085);  // 15% faster: noise, as far as one sample tells
  EXPECT_NEAR(p.predict_trunk(1), 0.100, 1e-9);
  refresh(0.085);
  EXPECT_NEAR(p.predict_trunk(1), 0.100, 1e-9);
  refresh(0.085);  // the third: the median moves
  EXPECT_NEAR(p.predict_trunk(1), 0.085, 1e-9);
  refresh(0.060);  // 30% off: the machine's speed changed, the sample replaces the others at once
  EXPECT_NEAR(p.predict_trunk(1), 0.060, 1e-9);
}

// The engine-wide acceptance is where a new request's estimate starts and where an idle slot's drifts: a
// slot that stopped drafting after a bad stretch comes back toward what other requests see.
TEST(AcceptanceTracker, IdleSlotsDriftTowardTheEngineWideRates) {
  PolicyOptions o;
  DraftPolicy p(o);
  for (int i = 0; i < 200; ++i) p.observe_round(3, 3);
  EXPECT_GT(p.acceptance().p_reach(2), 0.99);
  AcceptanceTracker slot;
  for (int i = 0; i < 200; ++i) slot.observe(3, 0);
  EXPECT_LT(slot.p_reach(0), 0.01);
  for (int i = 0; i < 300; ++i) slot.idle_step(p.acceptance());
  EXPECT_GT(slot.p_reach(0), 0.9);
}

}  // namespace
}  // namespace mtp::speculative
