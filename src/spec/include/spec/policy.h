// Which slots draft and how much, per engine step (design.md section 5; field-survey.md section 6).
//
//  * fixed: every generating slot drafts its own n_max.
//  * --spec-max-drafting-slots N (the seed's LLAMA_SPEC_MAX_DRAFTING_SLOTS): a slot drafts only while at most
//    N slots are generating; otherwise nobody drafts this step.
//  * auto: choose each slot's draft length k (0 allowed) to maximise expected tokens per second, from the
//    step time measured online as a function of the trunk rows in the batch (plus the draft passes) and each
//    slot's recent acceptance per draft position. Details in policy.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mtp::spec {

enum class PolicyKind { kFixed, kAuto };

struct PolicyOptions {
  PolicyKind kind = PolicyKind::kFixed;
  int32_t max_drafting_slots = -1;  // < 0: no limit
};

// Step time as a function of rows, learned online: an exponential moving average per row count, with linear
// interpolation between measured counts and a cost of 1 row per extra row beyond them (a pessimistic prior
// until measured).
class StepCostModel {
 public:
  void observe(int64_t rows, double seconds);
  double predict(int64_t rows) const;  // seconds; 0 before any observation
  bool has_data() const { return !ema_.empty(); }

 private:
  std::vector<double> ema_;  // index: rows; < 0 = unmeasured
};

// A slot's recent acceptance per draft position, as exponential moving averages of the conditional rate
// "position i accepted given position i-1 was"; starts optimistic so a new slot gets to try.
class AcceptanceTracker {
 public:
  void observe(int64_t n_drafted, int64_t n_accepted);
  // Probability that draft position i (0-based) is accepted, i.e. the product of the first i+1 conditional
  // rates.
  double p_reach(int32_t i) const;
  // A step in which the slot did not draft: the rates drift back toward the prior, so a slot that stopped
  // drafting after a bad stretch gets to try again later.
  void idle_step();
  void reset() { cond_.clear(); }

 private:
  std::vector<double> cond_;
};

struct SlotDemand {
  int32_t n_max = 0;  // the slot's own cap (0: it does not draft)
  const AcceptanceTracker* acceptance = nullptr;
};

class DraftPolicy {
 public:
  explicit DraftPolicy(const PolicyOptions& options) : opt_(options) {}

  // Draft length per generating slot. `base_rows` = trunk rows the step has anyway (one per generating
  // slot plus prompt chunks).
  std::vector<int32_t> choose(std::span<const SlotDemand> slots, int64_t base_rows) const;

  // Timing feedback from the engine: a trunk forward over `rows` rows, and one draft pass over `rows` rows.
  void observe_trunk(int64_t rows, double seconds) { trunk_.observe(rows, seconds); }
  void observe_draft(int64_t rows, double seconds) { draft_.observe(rows, seconds); }
  const StepCostModel& trunk_cost() const { return trunk_; }
  const StepCostModel& draft_cost() const { return draft_; }
  const PolicyOptions& options() const { return opt_; }

 private:
  PolicyOptions opt_;
  StepCostModel trunk_, draft_;
};

}  // namespace mtp::spec
