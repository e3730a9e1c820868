// Issue 7: statistics with llama.cpp's definitions; issue 8: the drafting policy (throttle and auto).
#include <gtest/gtest.h>

#include "spec/policy.h"
#include "spec/stats.h"

namespace mtp::spec {
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
  EXPECT_EQ(p.choose(one, 1), (std::vector<int32_t>{3}));
  std::vector<SlotDemand> four(4, SlotDemand{3, nullptr});
  EXPECT_EQ(p.choose(four, 4), (std::vector<int32_t>(4, 0)));
  o.max_drafting_slots = -1;
  EXPECT_EQ(DraftPolicy(o).choose(four, 4), (std::vector<int32_t>(4, 3)));
  // A slot's own cap of 0 (speculative: false) is never raised.
  std::vector<SlotDemand> mixed{{0, nullptr}, {2, nullptr}};
  EXPECT_EQ(DraftPolicy(o).choose(mixed, 2), (std::vector<int32_t>{0, 2}));
}

TEST(StepCostModel, InterpolatesAndExtrapolates) {
  StepCostModel m;
  EXPECT_EQ(m.predict(3), 0.0);
  m.observe(1, 1.0);
  m.observe(5, 2.0);
  EXPECT_DOUBLE_EQ(m.predict(1), 1.0);
  EXPECT_DOUBLE_EQ(m.predict(3), 1.5);
  EXPECT_GT(m.predict(9), 2.0);
  m.observe(1, 2.0);  // EMA moves toward the new sample
  EXPECT_GT(m.predict(1), 1.0);
  EXPECT_LT(m.predict(1), 2.0);
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
    DraftPolicy cheap(o);  // memory-bound: rows nearly free, drafting cheap
    for (int r = 1; r <= 16; ++r) cheap.observe_trunk(r, 1.0 + 0.05 * (r - 1));
    for (int r = 1; r <= 16; ++r) cheap.observe_draft(r, 0.05);
    std::vector<SlotDemand> s{{3, &good}};
    EXPECT_EQ(cheap.choose(s, 1), (std::vector<int32_t>{3}));
    std::vector<SlotDemand> b{{3, &bad}};
    EXPECT_EQ(cheap.choose(b, 1), (std::vector<int32_t>{0}));
  }
  {
    DraftPolicy dear(o);  // compute-bound: every row costs as much as a step
    for (int r = 1; r <= 64; ++r) dear.observe_trunk(r, 1.0 * r);
    for (int r = 1; r <= 16; ++r) dear.observe_draft(r, 0.3);
    std::vector<SlotDemand> s(16, SlotDemand{3, &good});
    EXPECT_EQ(dear.choose(s, 16), (std::vector<int32_t>(16, 0)));
  }
}

}  // namespace
}  // namespace mtp::spec
