// Which slots draft and how much, per engine step (docs/architecture.md section 5; docs/drafting-policy.md).
//
//  * fixed: every generating slot drafts its own n_max.
//  * --spec-max-drafting-slots N (the seed's LLAMA_SPEC_MAX_DRAFTING_SLOTS): a slot drafts only while at most
//    N slots are generating; otherwise nobody drafts this step.
//  * auto: choose each slot's draft length k (0 allowed) to maximise expected tokens per second, from the
//    step time measured online (trunk decode, verify and prompt rows, MTP draft passes) and each slot's
//    recent acceptance per draft position. Plain decoding is measured first at each batch size; and whatever
//    the model predicts, where drafting steps measurably deliver fewer tokens per second than plain ones,
//    drafting pauses at that batch size (longer after each such verdict). Details in policy.cpp.
//
// Two draft heads: the MTP block's full output head, or its rows for a subset of the vocabulary (cheaper
// passes, lower acceptance; spec/draft_vocab.h). With `choose_head`, auto picks one per batch size by what
// drafting with each measurably delivered (observe_step), trying the other one again now and then.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "speculative/estimates.h"

namespace mtp::speculative {

enum class PolicyKind { kFixed, kAuto };

// The head a draft pass computes logits with.
enum class DraftHead : int32_t { kFull = 0, kSubset = 1 };
inline constexpr int kDraftHeads = 2;
const char* draft_head_name(DraftHead head);  // "full", "subset"

struct PolicyOptions {
  PolicyKind kind = PolicyKind::kFixed;
  int32_t max_drafting_slots = -1;    // < 0: no limit
  DraftHead head = DraftHead::kFull;  // the head, unless choose_head
  bool choose_head = false;  // auto only: the drafter has both heads; pick per batch size by measured outcome
};

struct SlotDemand {
  int32_t n_max = 0;  // the slot's own cap (0: it does not draft)
  const AcceptanceTracker* acceptance = nullptr;
  // Rows the drafter must run through the MTP block before this slot's first draft row (its deferred
  // catch-up: the rows kept since it last drafted); they ride in the first draft pass.
  int64_t catch_up_rows = 0;
  // Tokens the request may still emit (its max_tokens less those emitted); < 0: no limit known. A backlog of
  // catch-up rows is paid once and serves only the rest of the request.
  int64_t remaining = -1;
  // Tokens the request emitted so far: with no limit known, the rest is expected to be what the requests that
  // ended lately ran (observe_request_end) less these.
  int64_t generated = 0;
};

class DraftPolicy {
 public:
  explicit DraftPolicy(const PolicyOptions& options);

  // The head this step's drafts use at a batch size of `slots` generating slots: call before choose(), and
  // give choose() each slot's acceptance for that head. Until the next head() call, the draft passes,
  // rounds and the step observed are this head's.
  DraftHead head(int64_t slots);

  // Draft length per generating slot (one entry of `slots` each; every generating slot has one decode row).
  // `prompt_rows` = prompt-chunk rows the step's trunk batch has as well: they cost the same whatever is
  // drafted, so they do not enter the comparison, but a plain step with them does not measure plain decoding.
  // Not const: it records a draft length it runs to re-measure (see policy.cpp).
  std::vector<int32_t> choose(std::span<const SlotDemand> slots, int64_t prompt_rows = 0);

  // Timing feedback from the engine: a trunk forward of `rows` decode rows (one per generating slot),
  // `verify_rows` draft rows being verified and `prompt_rows` prompt rows; one MTP draft pass of `rows`
  // rows (draft rows and catch-up rows together).
  void observe_trunk(int64_t rows, int64_t verify_rows, int64_t prompt_rows, double seconds);
  void observe_draft(int64_t rows, double seconds);
  // A whole step without prompt rows: `slots` generating slots emitted `tokens` in `seconds` (its draft
  // passes and trunk forward together); `drafted`: some slot drafted.
  void observe_step(int64_t slots, int64_t tokens, double seconds, bool drafted);
  // A verification round of any slot: the engine-wide acceptance, where a new request's estimate starts.
  void observe_round(int64_t n_drafted, int64_t n_accepted);
  // A step in which no slot drafted: the engine-wide rates drift toward the prior, so that after a bad
  // stretch (every slot stopped drafting, no rounds to learn from) requests get to try again.
  void idle_step() { acceptance_[head_index()].idle_step(AcceptanceTracker{}); }
  // A request that ran to its end (a stop token or its max_tokens) after emitting `generated` tokens: the
  // typical length a request without a max_tokens is expected to run.
  void observe_request_end(int64_t generated);
  double typical_tokens() const { return typical_tokens_; }  // 0 before any request ended
  const AcceptanceTracker& acceptance(DraftHead head = DraftHead::kFull) const {
    return acceptance_[static_cast<size_t>(head)];
  }

  // Predicted seconds of a trunk forward of decode rows and verify rows (no prompt rows); for a verify size
  // just measured for the first or second time, deliberately no more than as many plain rows (policy.cpp).
  double predict_trunk(int64_t rows, int64_t verify_rows = 0) const;
  const StepCostModel& draft_cost(DraftHead head = DraftHead::kFull) const {
    return draft_[static_cast<size_t>(head)];
  }
  const PolicyOptions& options() const { return opt_; }

 private:
  PolicyOptions opt_;
  std::vector<int32_t> plan(std::span<const SlotDemand> slots, int64_t prompt_rows);
  struct Pricing;  // plan()'s prices of one step's draft lengths (policy.cpp)
  // Seconds of a trunk forward of `rows` rows without prompt rows, plain or with verify rows: from that
  // kind's line, helped by the other kind's while it has fewer than two sizes.
  double trunk_line(bool verify, double rows) const;
  bool has_trunk_data() const { return plain_.has_data() || verify_.has_data(); }

  // Trunk steps since a plain step of this many rows, or a verify step of this many rows in all, was last
  // measured; huge if never.
  int64_t plain_age(int64_t rows) const;
  int64_t verify_age(int64_t rows) const;
  int64_t explore_age(int64_t rows) const;  // since choose() last ran a verify size to re-measure it
  // Forgets the verify sizes and this head's draft-pass sizes not measured for a while (a probe, plan()).
  void forget_stale();

  StepCostModel plain_, verify_;    // trunk steps without prompt rows: decode rows only, or with verify rows
  int64_t trunk_steps_ = 0;         // trunk steps observed
  std::vector<int64_t> plain_at_;   // index: rows; trunk_steps_ after that size's last plain sample
  std::vector<int64_t> verify_at_;  // likewise for verify steps, indexed by all their rows
  std::vector<int64_t> explored_at_;   // likewise for the verify sizes choose() ran to re-measure them
  int64_t exploring_ = 0;              // the verify size the last choose() ran to re-measure; 0 none
  std::vector<int64_t> verify_slots_;  // index: a verify step's rows; the decode rows of its last sample
  size_t head_index() const { return static_cast<size_t>(head_); }
  const StepCostModel& draft() const { return draft_[head_index()]; }
  DraftHead head_ = DraftHead::kFull;                      // of the step under way (head())
  std::array<StepCostModel, kDraftHeads> draft_;           // draft passes, per head
  std::array<AcceptanceTracker, kDraftHeads> acceptance_;  // every slot's rounds, per head
  double typical_tokens_ = 0;  // the length of the requests that ended lately (moving average); 0: none yet

  // What steps delivered, per batch size (generating slots), whatever the model predicted: the guard that
  // stops drafting where it measurably loses (policy.cpp).
  struct Outcome {
    static constexpr int64_t kPlainSteps = 8;
    std::array<double, kPlainSteps> plain_seconds{};  // the last plain steps (each emits one token a slot)
    int64_t plain_n = 0;
    double plain_median() const;                 // seconds; plain_n > 0
    double draft_tokens = 0, draft_seconds = 0;  // drafting steps since the last verdict
    int64_t draft_n = 0;
    int64_t backoff = 0;        // trunk steps of the next pause; 0: the first pause's
    int64_t paused_until = -1;  // trunk_steps_ until which this size does not draft
    bool drafting = false;      // the model's last plan at this size drafted (plan(): the margin to go on)
    // Where the model declines to draft: seconds of plain steps set aside for a step that drafts to measure
    // stale prices again, and how often the share set aside was halved (each such probe since drafting last
    // ran by the model's choice).
    double probe_budget = 0;
    int64_t probe_halvings = 0;
    // With choose_head: the head steps use here; when each was last in use here and when its last window
    // of drafting steps was judged (trunk_steps_; -1 never), and what its windows delivered (tokens/s: the
    // mean of the rate before and the last window's, judge()).
    DraftHead head = DraftHead::kFull;
    std::array<int64_t, kDraftHeads> head_used_at{-1, -1};
    std::array<int64_t, kDraftHeads> head_rated_at{-1, -1};
    std::array<double, kDraftHeads> head_rate{};
    // The head's last window delivered no less than plain steps, and the model has not declined it since
    // (where the model declines the head in use, the next step takes the other head if this holds for it).
    std::array<bool, kDraftHeads> head_good{};
  };
  // A window of drafting steps judged: the verdict on drafting at this size, and with choose_head, the head
  // its next drafting steps use.
  void judge(Outcome& o, double draft_rate, double plain_rate);
  // With choose_head: the other head was not in use here for so long that its prices are stale.
  bool other_head_stale(const Outcome& o) const;
  std::vector<Outcome> outcome_;  // index: generating slots
  bool restart_step_ = false;     // the last choose() drafts over a backlog of catch-up rows (policy.cpp)
  // This step's rounds (observe_round): the drafts accepted, and those the engine-wide estimates expected.
  double step_accepted_ = 0, step_expected_ = 0;
  bool measuring_ = false;  // the last plan() drafts only to measure a verify price (policy.cpp)
  bool probing_ = false;    // ... and it re-measures stale prices the model declined on (policy.cpp)
  std::array<std::vector<int64_t>, kDraftHeads> draft_at_;  // per head, as verify_at_ for draft passes
  Outcome& outcome(int64_t slots);
  bool paused(int64_t slots) const;
  // plan()'s last two rules (policy.cpp): a probe of stale prices where the model declines to draft, and a
  // stale draft length re-measured while it drafts.
  bool probe(const Pricing& price, Outcome& o, std::vector<int32_t>& plain);
  void explore(const Pricing& price, double best, double plain, std::vector<int32_t>& k);
};

}  // namespace mtp::speculative
