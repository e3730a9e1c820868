// The auto policy (docs/drafting-policy.md, goodput form):
//
//   goodput(k) = sum_r E[T_r](k_r) / (T_trunk(n, sum_r k_r) + sum_{i=1..max k} T_draft(rows_i))
//   E[T_r](k)  = 1 + sum_{i<k} p_reach_r(i)
//   rows_1     = #{r : k_r >= 1} + their catch-up rows (steady state),  rows_i = #{r : k_r >= i} for i > 1
//
// plus, for a slot that starts drafting after a stretch without, its backlog of catch-up rows beyond the
// steady state, priced at the draft passes' marginal row cost and spread over the steps its request has left
// (up to kMaxBacklogSteps; without a max_tokens, as long as the requests that ended lately ran), or over
// kBacklogSteps (the least a drafting stretch is expected to last) where nothing says: paid once, it does not
// keep a slot alone from drafting again, but a batch where drafting promises only a few percent does not
// restart it for a step or two (measured at c4: one such step ran 4 slots' 64-row backlogs, 197 ms, for 8
// drafted tokens).
//
// where n is the number of generating slots (one decode row each). A step's prompt rows cost the same
// whatever is drafted, so they are left out: counted, they would dilute the extra rows' cost and make
// drafting look good in every step that reads a prompt, at a marginal rate below plain decoding's.
// k = 0 for every slot is always a
// candidate. The search starts from the best uniform length (a draft pass is shared by all slots, so one
// position at a time is too myopic to start from), then adds one draft position at a time to the slot whose
// next position is most likely to be accepted while goodput improves. A plan that drafts at all must beat
// plain decoding by kMinGain: near break-even (large batches) the cost model's error is larger than the gain,
// and a bad draft in a large batch costs far more than a missed small gain.
//
// Step times are the engine's own measurements, kept per batch size (row count) as the median of its last
// few samples; a size sampled kTrustSamples times is priced by that median, the others by a straight line
// t(rows) = a + b * rows fitted by least squares over the measured sizes,
// each weighted by its samples (up to kMaxCellWeight, so a size measured once counts, but little). A line,
// not interpolation between sizes: in this MoE engine every extra row touches experts of its own, so past the
// first few rows each costs about the same, and the fit is what carries that slope to batch sizes never run.
// It also keeps one noisy or stale size (measured once, during a burst of foreign load) from deciding a step
// on its own, which matters most in large batches: an optimistic cost there is exactly what makes drafting
// in a saturated batch look cheap. With one measured size the line is its average cost per row (no fixed
// cost assumed: pessimistic above it, optimistic below it, so a smaller batch gets tried and measured).
//
// The trunk has two lines: one for plain steps (decode rows only) and one for steps with verify rows. A
// verify row is not a decode row: measured on 2 cores, a batch of a few sequences' verify rows costs 10-30%
// more than as many rows of as many sequences, so a single line fitted to both mis-prices both choices
// (plain decoding looks dearer than it is, drafting cheaper). Each line falls back on the other until it has
// data (a line with one measured size runs through it along the other line's slope), and at a batch size
// whose plain step was not measured kTrustSamples times the policy decodes plainly until it was. While the
// policy drafts at a batch size, its plain price is not measured; after kRefreshSteps trunk steps without,
// one plain step re-prices it (its sample replaces the stale ones where it is more than kRefreshBand off
// their median, and joins them otherwise), so that drift in the machine's speed cannot keep drafting on
// against an outdated comparison; and once a verify step was measured, the policy drafts until kTrustSamples
// were (a first one pays one-time costs, and priced by it alone drafting would stop for good), unless the
// draft passes alone already cost more than drafting gains. Prompt rows cost differently again (no logits),
// so trunk steps with prompt rows feed neither line. Draft passes have a line of their own, over their rows
// (draft rows and catch-up rows); StepCostModel and AcceptanceTracker (speculative/estimates.h) keep the
// prices and the acceptance.
//
// Verify prices get re-measured three more ways: a verify size just measured for the first or second time is
// priced no higher than as many plain rows (its first samples pay one-time costs); while drafting, a stale
// draft length whose promise is close to the plan's is run once every kRefreshSteps steps, its sample
// replacing the stale ones; and where the model declines to draft, a probe budget (a small share of the plain
// steps' time) pays now and then for one step of one-token drafts after the stale prices are forgotten
// (probe() says when).
//
// Whatever the model predicts, a guard compares what drafting steps deliver (their time, for the tokens the
// acceptance estimates expected) with what plain steps do at the same batch size, and pauses drafting there
// where it measurably loses (observe_step()).
//
// With two heads (choose_head), the model prices each head's draft passes and acceptance apart, and the
// guard picks the head: each window of drafting steps measures the head it ran; a head not measured at this
// batch size (or long ago) gets the next window; then the one that delivered more drafts, and drafting
// pauses only where that one loses too. A price never measured (the other head's) thus never decides
// against one that was, and the subset head, whose passes cost a fraction of the full head's on a large
// vocabulary (measured on 2 cores at 35B-A3B widths: the full head's pass as dear as a plain step of an
// 8-layer trunk), is tried wherever drafting runs.
#include "speculative/policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace mtp::speculative {
namespace {

constexpr double kMinGain = 0.05;         // a drafting plan must promise this much more than plain decoding
constexpr double kBacklogSteps = 16;      // steps a drafting stretch's one-time catch-up is spread over
constexpr double kMaxBacklogSteps = 64;   // ... at most, where the request's length is known or expected
constexpr double kLengthEmaWeight = 0.1;  // weight of an ended request's length in the typical length
constexpr int64_t kRefreshSteps = 32;     // trunk steps after which a size's samples are stale
constexpr double kRefreshBand = 0.2;      // a re-pricing plain sample this close to the median joins it
constexpr int64_t kWarmupSteps = 2;       // trunk steps a verify size's first samples keep it cheap
constexpr double kExploreMargin = 0.15;   // a stale draft length this close to the plan's gets re-measured
constexpr int64_t kOutcomeSteps = 8;      // drafting steps the guard judges at a time (observe_step)
constexpr double kClearLoss = 0.15;       // a loss the guard acts on after half of them
constexpr double kSmallLoss = 0.02;       // a loss it acts on after all of them
constexpr int64_t kPauseSteps = 64;       // trunk steps without drafting after a verdict against it
constexpr int64_t kMaxPauseSteps = 4096;  // the pause grows 4x with each verdict in a row against drafting
constexpr int64_t kHeadRetrySteps = 512;  // trunk steps after which a head's measured outcome is stale
constexpr double kProbeShare = 0.01;      // of plain steps' time, spent re-measuring prices drafting lost on
constexpr int64_t kMaxProbeHalvings = 6;  // the share halves after each such probe, down to 1/64 of it

// Trunk steps since size `rows` was last sampled (at[rows]: the step count then, -1 never); huge if never.
int64_t age_of(const std::vector<int64_t>& at, int64_t rows, int64_t now) {
  if (rows < 0 || rows >= static_cast<int64_t>(at.size()) || at[static_cast<size_t>(rows)] < 0)
    return INT64_MAX;
  return now - at[static_cast<size_t>(rows)];
}

// Some slot drafting in `k` first runs a backlog through the MTP block: more catch-up rows than a steady
// round leaves (the rows of a stretch without drafting, a new request's prompt).
bool runs_backlog(std::span<const SlotDemand> slots, const std::vector<int32_t>& k) {
  for (size_t r = 0; r < slots.size(); ++r)
    if (k[r] > 0 && slots[r].catch_up_rows > slots[r].n_max + 1) return true;
  return false;
}

void mark(std::vector<int64_t>& at, int64_t rows, int64_t now) {
  if (static_cast<int64_t>(at.size()) <= rows) at.resize(static_cast<size_t>(rows + 1), -1);
  at[static_cast<size_t>(rows)] = now;
}

}  // namespace

const char* draft_head_name(DraftHead head) {
  return head == DraftHead::kSubset ? "subset" : "full";
}

DraftPolicy::DraftPolicy(const PolicyOptions& options) : opt_(options), head_(options.head) {
  if (opt_.kind != PolicyKind::kAuto) opt_.choose_head = false;
}

DraftHead DraftPolicy::head(int64_t slots) {
  head_ = opt_.head;
  if (opt_.choose_head && slots > 0) {
    Outcome& o = outcome(slots);
    head_ = o.head;
    o.head_used_at[head_index()] = trunk_steps_;
  }
  return head_;
}

bool DraftPolicy::other_head_stale(const Outcome& o) const {
  // At least as long as this size's pauses, so that a size paused for good does not retry both heads after
  // every pause.
  const int64_t used = o.head_used_at[1 - static_cast<size_t>(o.head)];
  return used < 0 || trunk_steps_ - used > std::max(kHeadRetrySteps, 2 * o.backoff);
}

double DraftPolicy::Outcome::plain_median() const {
  return median_of_first(plain_seconds, static_cast<size_t>(std::min(plain_n, kPlainSteps)));
}

DraftPolicy::Outcome& DraftPolicy::outcome(int64_t slots) {
  if (static_cast<int64_t>(outcome_.size()) <= slots) outcome_.resize(static_cast<size_t>(slots + 1));
  return outcome_[static_cast<size_t>(slots)];
}

bool DraftPolicy::paused(int64_t slots) const {
  return slots < static_cast<int64_t>(outcome_.size()) &&
         outcome_[static_cast<size_t>(slots)].paused_until > trunk_steps_;
}

// The guard: every kOutcomeSteps drafting steps at a batch size (half as many for a clear loss, twice as many
// for a small one), their tokens per second against the recent plain steps' at that size. Worse, and drafting
// pauses there for kPauseSteps trunk steps, four times as long after each verdict in a row that went against
// it (up to kMaxPauseSteps), so that where drafting loses for good its retries cost a few percent and less;
// better, and the pause starts short again. It prices nothing: it only overrules the model, whose prices come
// from single passes and can be off (measured at 16 threads: a plain step priced at 23 ms that took 10 kept
// drafting steps of 48 ms going). Nor does it judge the steps that draft the longest length only to measure a
// verify price (plan()): they are the model's probes, not its choice, and judged by them drafting paused at
// c1 on Zen 3 where three-token drafts lost a little and one-token drafts, never run, won 9.5%.
void DraftPolicy::observe_step(int64_t slots, int64_t tokens, double seconds, bool drafted) {
  if (slots <= 0 || tokens <= 0 || seconds <= 0) return;
  Outcome& o = outcome(slots);
  if (!drafted) {
    o.plain_seconds[static_cast<size_t>(o.plain_n++ % Outcome::kPlainSteps)] = seconds;
    // Not after the guard's verdict against drafting here: that was measured, whole steps, and the model's
    // prices then were too optimistic, not too dear (its pauses are the retries).
    if (o.backoff == 0)
      o.probe_budget += kProbeShare / static_cast<double>(int64_t{1} << o.probe_halvings) * seconds;
    return;
  }
  // Drafting by the model's choice measures this size's prices: the probes start over. A step that drafts
  // only to measure (a probe, the first verify steps) is paid from the probes' budget, at what it cost over
  // plain decoding: a probe priced by stale prices can cost more than they said, and the debt delays the
  // next.
  if (!probing_ && !measuring_) {
    o.probe_budget = 0;
    o.probe_halvings = 0;
  } else if (probing_ && o.plain_n > 0) {
    o.probe_budget -= seconds - static_cast<double>(tokens) * o.plain_median() / static_cast<double>(slots);
  }
  if (restart_step_ || measuring_) return;
  // The step's tokens as the acceptance estimates expected them (its drafting slots' expected accepted drafts
  // in place of those accepted): the guard judges what drafting costs, not how the coins fell. Acceptance
  // that falls short is the estimates' to follow (every rejection lowers them, and the model then drafts
  // less, or not at all); counted as they fell, one 4-step window of three-token drafts at 0.85 a position
  // came out 20% below plain decoding and paused drafting that paid 20% for 64 steps (fake clock, c1).
  o.draft_tokens += static_cast<double>(tokens) - step_accepted_ + step_expected_;
  o.draft_seconds += seconds;
  if (++o.draft_n < kOutcomeSteps / 2 || o.plain_n < StepCostModel::kTrustSamples) return;
  // The median of the recent plain steps, not their mean: the first steps at a size pay one-time costs
  // (measured 2-3x), and averaged in they make plain decoding look slow, so a losing window passes.
  const double plain_rate = static_cast<double>(slots) / o.plain_median();
  // A few steps judge a clear loss; a small one takes two windows (acceptance is a coin per position: over 4
  // steps of one draft each, 3 rejections are 1 in 200 at 0.85, and over a window of 8 steps of four slots
  // drafting two or three tokens at 0.85 a position, a rate 6% below its mean is one window in 20). A small
  // loss after one window stopped drafting that paid 18% for good (fake clock, c4, endless requests): after
  // a pause the slots' backlogs had grown past what the model lets a start pay.
  const double draft_rate = o.draft_tokens / o.draft_seconds;
  const bool clear_loss = draft_rate < (1 - kClearLoss) * plain_rate;
  const bool small_loss = !clear_loss && draft_rate < (1 - kSmallLoss) * plain_rate;
  if (!clear_loss && o.draft_n < (small_loss ? 2 : 1) * kOutcomeSteps) return;
  judge(o, draft_rate, plain_rate);
  o.draft_tokens = o.draft_seconds = 0;
  o.draft_n = 0;
}

void DraftPolicy::observe_round(int64_t n_drafted, int64_t n_accepted) {
  AcceptanceTracker& a = acceptance_[head_index()];
  for (int32_t i = 0; i < n_drafted; ++i) step_expected_ += a.p_reach(i);
  step_accepted_ += static_cast<double>(n_accepted);
  a.observe(n_drafted, n_accepted);
}

void DraftPolicy::judge(Outcome& o, double draft_rate, double plain_rate) {
  double best_rate = draft_rate;
  if (opt_.choose_head) {
    const size_t h = static_cast<size_t>(o.head), other = 1 - h;
    // A head's rate over its recent windows, not its last one alone: acceptance is a coin per position, and
    // one unlucky 4-step window (a clear loss) of the head that paid most had the other take over for 512
    // steps (fake clock: 0.91x the best fixed profile at c1).
    const bool rated_before = o.head_rated_at[h] >= o.head_used_at[h] - kHeadRetrySteps && o.head_rate[h] > 0;
    o.head_rate[h] = rated_before ? 0.5 * (o.head_rate[h] + draft_rate) : draft_rate;
    o.head_rated_at[h] = trunk_steps_;
    o.head_good[h] = o.head_rate[h] >= (1 - kSmallLoss) * plain_rate;
    best_rate = o.head_rate[h];
    if (other_head_stale(o)) {
      o.head = static_cast<DraftHead>(other);  // its own try next, before any verdict on drafting
      return;
    }
    // The other head was in use lately: what its last window delivered, where that was no loss against
    // plain steps now, even if the model declined that head since. The model's prices are medians of noisy
    // steps: a plain step re-priced by one fast sample after a drafting stretch makes it decline every head
    // for a step or two, and when that erased the declined head's rate, the other head, 11% slower, drafted
    // in its place for up to 512 steps (fake clock: plain AVX2 on the 40-layer file, noisy steps).
    const bool rated = o.head_rate[other] >= (1 - kSmallLoss) * plain_rate &&
                       o.head_rated_at[other] >= o.head_used_at[other] - kHeadRetrySteps;
    const double other_rate = rated ? o.head_rate[other] : 0.0;
    if (other_rate > o.head_rate[h]) {
      o.head = static_cast<DraftHead>(other);
      best_rate = other_rate;
    }
  }
  if (best_rate < (1 - kSmallLoss) * plain_rate) {
    o.backoff = o.backoff == 0 ? kPauseSteps : std::min(4 * o.backoff, kMaxPauseSteps);
    o.paused_until = trunk_steps_ + o.backoff;
    o.drafting = false;  // after the pause, drafting must promise the margin again
  } else {
    o.backoff = 0;
  }
}

double DraftPolicy::trunk_line(bool verify, double rows) const {
  const StepCostModel& own = verify ? verify_ : plain_;
  const StepCostModel& other = verify ? plain_ : verify_;
  if (own.sizes() >= 2 || (own.sizes() == 1 && other.sizes() < 2)) return own.predict(rows);
  if (own.sizes() == 1) return own.predict_along(rows, other.slope());
  return other.predict(rows);
}

void DraftPolicy::observe_trunk(int64_t rows, int64_t verify_rows, int64_t prompt_rows, double seconds) {
  ++trunk_steps_;
  if (seconds <= 0 || prompt_rows > 0) return;  // prompt rows cost differently (no logits): not these lines
  if (verify_rows > 0) {
    // The sample of a draft length choose() ran to re-measure it replaces that size's stale samples; other
    // verify samples join their size's median (a size coming back after a while pays one-time costs again).
    const int64_t size = rows + verify_rows;
    mark(verify_at_, size, trunk_steps_);
    mark(verify_slots_, size, rows);
    if (size == exploring_)
      verify_.restart(size, seconds);
    else
      verify_.observe(size, seconds);
    exploring_ = 0;
    return;
  }
  // A plain sample after a long stretch without (choose() asks for one) replaces the old ones where it is
  // more than kRefreshBand off their median: they were taken at another speed of the machine and would
  // outvote it. Closer, it joins them: steps are noisy (plain AVX2 on the 40-layer file, 2 cores: +-15% step
  // to step, one in 20 half as long again), and one fast sample replacing the median made the model decline
  // drafting that paid, for a step and more; on noisy fake-clock cases that cost up to 3% of the best fixed
  // profile (docs/drafting-policy.md). A drift within the band shows once refresh samples of it are the
  // median's majority: three refreshes, about 3 * kRefreshSteps steps.
  const double median = plain_.trusted(rows) ? plain_.predict(static_cast<double>(rows)) : 0.0;
  if (plain_age(rows) > kRefreshSteps && std::abs(seconds - median) > kRefreshBand * median)
    plain_.restart(rows, seconds);
  else
    plain_.observe(rows, seconds);
  mark(plain_at_, rows, trunk_steps_);
}

void DraftPolicy::observe_request_end(int64_t generated) {
  if (generated <= 0) return;
  const double g = static_cast<double>(generated);
  typical_tokens_ = typical_tokens_ > 0 ? (1 - kLengthEmaWeight) * typical_tokens_ + kLengthEmaWeight * g : g;
}

void DraftPolicy::observe_draft(int64_t rows, double seconds) {
  draft_[head_index()].observe(rows, seconds);
  mark(draft_at_[head_index()], rows, trunk_steps_);
}

void DraftPolicy::forget_stale() {
  auto forget = [&](StepCostModel& m, const std::vector<int64_t>& at) {
    for (int64_t r = 1; r < static_cast<int64_t>(at.size()); ++r)
      if (age_of(at, r, trunk_steps_) > kRefreshSteps) m.forget(r);
  };
  forget(verify_, verify_at_);
  forget(draft_[head_index()], draft_at_[head_index()]);
}

int64_t DraftPolicy::plain_age(int64_t rows) const {
  return age_of(plain_at_, rows, trunk_steps_);
}

int64_t DraftPolicy::verify_age(int64_t rows) const {
  return age_of(verify_at_, rows, trunk_steps_);
}

int64_t DraftPolicy::explore_age(int64_t rows) const {
  return age_of(explored_at_, rows, trunk_steps_);
}

double DraftPolicy::predict_trunk(int64_t rows, int64_t verify_rows) const {
  double trunk = trunk_line(verify_rows > 0, static_cast<double>(rows + verify_rows));
  // A verify size measured once or twice, the last time in one of the last kWarmupSteps steps, is priced no
  // higher than as many plain rows: its first samples pay one-time costs, and priced by them it would not run
  // again to correct them (measured: at c2 after c1, a first 4-row verify at 47 ms against a steady 27
  // stopped drafting for the whole level, the line through it and the 2-row size pricing it). So drafting
  // that has just started goes on until a median of the size's own samples prices it. Not a size last seen
  // long ago (at another concurrency, say): that would start drafting, and pay the slots' backlogs, on a
  // guess.
  const int64_t size = rows + verify_rows;
  const bool warming = verify_.measured(size) && !verify_.trusted(size) && verify_age(size) <= kWarmupSteps;
  if (verify_rows > 0 && warming) trunk = std::min(trunk, trunk_line(false, static_cast<double>(size)));
  // A verify size never measured is priced no higher than the chord from this batch's plain step to the
  // next larger verify size measured: the verify line is a guess, and one that prices a length too high
  // keeps it from ever being run and measured (on Zen 3 at c1, the line through the 4-row verify alone,
  // along the plain rows' slope, priced a 2-row verify at 56 ms where it ran at 33, so one-token drafts,
  // +9.5% there, never ran). Exact where the cost grows linearly between the two, optimistic where each
  // extra row costs less than the one before (rows sharing experts); tried once, the size's own samples
  // price it, and where it loses the guard stops it.
  const int64_t hi = verify_rows > 0 && !verify_.measured(size) ? verify_.next_measured(size) : -1;
  if (hi > 0 && plain_.has_data()) {
    const double p0 = trunk_line(false, static_cast<double>(rows)),
                 p1 = verify_.predict(static_cast<double>(hi));
    trunk =
        std::min(trunk, p0 + (p1 - p0) * static_cast<double>(verify_rows) / static_cast<double>(hi - rows));
  }
  // A verify size above every one measured is priced no lower than this batch's plain step plus its verify
  // rows at what each verify row of the largest measured size cost over the plain step of that size's decode
  // rows. The verify line would carry the slope between the sizes measured, and that bends: on an AMD EPYC
  // Zen 4 (2 threads, the 8-layer 35B-A3B-width file) the line through c1's 2- to 4-row verifies priced c4's
  // 16-row verify at 64 ms, where it ran at 94, and auto drafted at c4 and lost 5%; c1's 4-row verify's extra
  // rows (about 4 ms of trunk each) priced c4's 8- and 12-row verifies within 10% of their runs. Not each row
  // at the largest size's whole cost per row: where steps are memory-bound, that would price c4's verify rows
  // at several times their cost and keep drafting that pays there from ever starting.
  const int64_t top = verify_.largest_measured();
  if (verify_rows > 0 && top > 0 && size > top) {
    const int64_t top_slots = verify_slots_[static_cast<size_t>(top)];
    const double per_row =
        (verify_.predict(static_cast<double>(top)) - trunk_line(false, static_cast<double>(top_slots))) /
        static_cast<double>(top - top_slots);
    trunk = std::max(
        trunk, trunk_line(false, static_cast<double>(rows)) + per_row * static_cast<double>(verify_rows));
  }
  // Verify rows never make a step cheaper than the plain step of its decode rows (two lines fitted to
  // noisy data could say so at some sizes; drafting must not look free).
  return verify_rows > 0 ? std::max(trunk, trunk_line(false, static_cast<double>(rows))) : trunk;
}

std::vector<int32_t> DraftPolicy::choose(std::span<const SlotDemand> slots, int64_t prompt_rows) {
  const int64_t n = static_cast<int64_t>(slots.size());
  step_accepted_ = step_expected_ = 0;
  const bool refresh = prompt_rows == 0 && plain_age(n) > kRefreshSteps;  // plan() re-prices plain decoding
  std::vector<int32_t> k = plan(slots, prompt_rows);
  // Where the model prices drafting with this head below plain decoding, the next step uses the other head
  // if it went untried for long (or ever): a price never measured must not stay unmeasured because the
  // measured one lost; or if its last window delivered, and the model has not declined it since. Not where
  // no slot could draft (each request on its last token): that says nothing of the head.
  if (opt_.choose_head && prompt_rows == 0 && !refresh && n > 0 && plain_.trusted(n) && !paused(n) &&
      std::all_of(k.begin(), k.end(), [](int32_t x) { return x == 0; }) &&
      std::any_of(slots.begin(), slots.end(), [](const SlotDemand& s) { return s.n_max > 0; })) {
    Outcome& o = outcome(n);
    const size_t h = head_index(), other = 1 - h;
    o.head_good[h] = false;
    if (other_head_stale(o) || o.head_good[other]) o.head = static_cast<DraftHead>(other);
  }
  // A step in which a drafting slot first runs a backlog through the MTP block (the rows of a stretch without
  // drafting, a new request's prompt) pays a one-time cost: the guard does not judge drafting by it (judged
  // by the first steps after a pause, drafting would pause again, its backlog paid for nothing).
  restart_step_ = runs_backlog(slots, k);
  return k;
}

// What plan() prices one step's draft lengths with (the goodput form at the top of this file): a length per
// generating slot, k = 0 for plain decoding.
struct DraftPolicy::Pricing {
  const DraftPolicy& policy;
  std::span<const SlotDemand> slots;

  size_t n() const { return slots.size(); }
  // Expected accepted drafts of slot r drafting `len` tokens.
  double accepted(size_t r, int32_t len) const {
    double a = 0;
    for (int32_t i = 0; i < len; ++i) a += slots[r].acceptance ? slots[r].acceptance->p_reach(i) : 0.0;
    return a;
  }
  // The steps a slot's backlog is spread over when it drafts `len`: the steps the rest of its request takes
  // at that length, up to kMaxBacklogSteps, or kBacklogSteps where its length cannot be told. A slot
  // a few tokens from its max_tokens pays its whole backlog for those few (measured at c4 on Zen 3, four
  // slots near the end of 32-token requests ran their 60-row backlogs in one 483 ms step, against 70 ms plain
  // steps); one with hundreds left pays it once for all of them (spread over 16 steps, at c4 the backlogs
  // kept drafting that paid 15% from starting again after a pause for 1,600 steps, fake clock).
  double backlog_steps(size_t r, int32_t len) const {
    double left = static_cast<double>(slots[r].remaining);
    if (left < 0) {
      // No max_tokens: the typical request's length less what this one emitted; past it, or before any
      // request ended, the least a drafting stretch is expected to last.
      left = policy.typical_tokens() - static_cast<double>(slots[r].generated);
      if (left <= 0) return kBacklogSteps;
    }
    return std::clamp(left / (1 + accepted(r, len)), 1.0, kMaxBacklogSteps);
  }
  // Seconds of a step. verify_free: the verify rows priced at nothing (what the draft passes alone leave of
  // drafting's gain); backlog_once: the backlogs paid in this step, not spread (what one drafting step
  // costs).
  double step_time(const std::vector<int32_t>& ks, bool verify_free = false,
                   bool backlog_once = false) const {
    const StepCostModel& draft = policy.draft();
    int32_t kmax = 0;
    for (int32_t x : ks) kmax = std::max(kmax, x);
    const int64_t extra = verify_rows(ks) - static_cast<int64_t>(n());
    double t = policy.predict_trunk(static_cast<int64_t>(n()), verify_free ? 0 : extra);
    double backlog = 0;  // catch-up rows beyond the steady state, each over the steps it is spread across
    for (int32_t i = 1; i <= kmax; ++i) {
      double rows = 0;
      for (size_t r = 0; r < n(); ++r) {
        if (ks[r] < i) continue;
        // The first pass carries the slot's catch-up rows: in steady state the drafts it accepted last
        // round. A longer backlog (the rows of a stretch without drafting) is paid once, whenever the slot
        // drafts again, and then serves every later draft of the request: spread over kBacklogSteps (in
        // full it would keep a slot from ever drafting again, its backlog growing every step it waits).
        const double steady = std::min(static_cast<double>(slots[r].catch_up_rows), accepted(r, ks[r]));
        rows += 1 + (i == 1 ? steady : 0);
        if (i == 1)
          backlog += (static_cast<double>(slots[r].catch_up_rows) - steady) /
                     (backlog_once ? 1.0 : backlog_steps(r, ks[r]));
      }
      t += draft.predict(rows);
    }
    return t + draft.slope() * backlog;
  }
  double expected_tokens(const std::vector<int32_t>& ks) const {
    double t = 0;
    for (size_t r = 0; r < n(); ++r) t += 1 + accepted(r, ks[r]);
    return t;
  }
  // The trunk rows of a step: one decode row a slot and its drafts.
  int64_t verify_rows(const std::vector<int32_t>& ks) const {
    int64_t rows = static_cast<int64_t>(n());
    for (int32_t x : ks) rows += x;
    return rows;
  }
  double goodput(const std::vector<int32_t>& ks) const {
    return expected_tokens(ks) / std::max(step_time(ks), 1e-9);
  }
  int32_t max_cap() const {
    int32_t cap = 0;
    for (const SlotDemand& d : slots) cap = std::max(cap, d.n_max);
    return cap;
  }
  // The same length for every slot that has an acceptance estimate (capped by its own n_max), 0 for the rest;
  // `only`: just the slots it drafts.
  std::vector<int32_t> uniform(int32_t len, const std::vector<int32_t>* only = nullptr) const {
    std::vector<int32_t> u(n(), 0);
    for (size_t r = 0; r < n(); ++r) {
      const bool drafts = only != nullptr ? (*only)[r] > 0 : slots[r].acceptance != nullptr;
      u[r] = drafts ? std::min(len, slots[r].n_max) : 0;
    }
    return u;
  }

  // The model's best lengths and their goodput: the best uniform length (a draft pass is shared by all
  // slots, so one position at a time is too myopic to start from), then one more draft position at a time
  // for the slot whose next one is the most likely to be accepted, while goodput improves. No margin yet.
  // `best`: plain decoding's goodput on the way in, the plan's on the way out.
  std::vector<int32_t> best_plan(double& best) const {
    std::vector<int32_t> k(n(), 0);
    const int32_t cap = max_cap();
    for (int32_t len = 1; len <= cap; ++len) {
      const std::vector<int32_t> u = uniform(len);
      const double g = goodput(u);
      if (g > best) {
        best = g;
        k = u;
      }
    }
    for (;;) {
      int64_t pick = -1;
      double gain = 0;
      for (size_t r = 0; r < n(); ++r) {
        if (k[r] >= slots[r].n_max || slots[r].acceptance == nullptr) continue;
        const double g = slots[r].acceptance->p_reach(k[r]);
        if (g > gain) {
          gain = g;
          pick = static_cast<int64_t>(r);
        }
      }
      if (pick < 0) break;
      ++k[static_cast<size_t>(pick)];
      const double g = goodput(k);
      if (g <= best) {
        --k[static_cast<size_t>(pick)];
        break;
      }
      best = g;
    }
    return k;
  }
};

std::vector<int32_t> DraftPolicy::plan(std::span<const SlotDemand> slots, int64_t prompt_rows) {
  const size_t n = slots.size();
  const int64_t slots_n = static_cast<int64_t>(n);
  std::vector<int32_t> k(n, 0);
  exploring_ = 0;
  measuring_ = probing_ = false;
  if (opt_.max_drafting_slots >= 0 && slots_n > opt_.max_drafting_slots) return k;
  if (opt_.kind == PolicyKind::kFixed) {
    for (size_t r = 0; r < n; ++r) k[r] = slots[r].n_max;
    return k;
  }
  // Auto. Plain decoding at this batch size first, until its own median prices it (a step without prompt
  // rows, whose time then is the plain line's): a first step pays one-time costs (measured 2-3x), and priced
  // by it alone plain decoding would look dear next to anything. Where drafting measurably loses, not at all.
  if (prompt_rows == 0 && !plain_.trusted(slots_n)) return k;
  if (paused(slots_n)) return k;
  // Then, without measurements of drafting yet, draft (the first step measures the shapes).
  if (!has_trunk_data() || !draft().has_data()) {
    for (size_t r = 0; r < n; ++r) k[r] = slots[r].n_max;
    measuring_ = true;
    return k;
  }
  const Pricing price{*this, slots};
  const double plain = price.goodput(k);
  double best = plain;
  k = price.best_plan(best);
  const bool fresh_plain = prompt_rows == 0 && plain_age(slots_n) <= kRefreshSteps;
  // The first verify steps pay one-time costs (measured: a first 4-row verify at 183 ms against a steady 40),
  // and a verify price from them alone would stop drafting for good, no later verify step correcting it: once
  // measured, keep drafting until verify steps were measured kTrustSamples times, so that a median prices
  // them. Not where the draft passes alone cost more than drafting gains (verify rows free): those are
  // measured already, and need no second look.
  if (fresh_plain && verify_.samples() > 0 && verify_.samples() < StepCostModel::kTrustSamples) {
    const std::vector<int32_t> full = price.uniform(std::numeric_limits<int32_t>::max());
    if (price.expected_tokens(full) / std::max(price.step_time(full, true), 1e-9) > plain) {
      measuring_ = true;
      return full;
    }
  }
  // The margin is to start drafting; drafting goes on while it promises no less than plain decoding, as its
  // prices are then measured ones. Without that, the noise of the acceptance estimates (two rejections in a
  // row move a slot's by a fifth) stops drafting that pays by 10% every few dozen steps. Not where a slot
  // would first run a backlog through the MTP block (a new request's prompt): that is a start again.
  Outcome& o = outcome(slots_n);
  if (best < plain * (o.drafting && !runs_backlog(slots, k) ? 1.0 : 1 + kMinGain))
    std::fill(k.begin(), k.end(), 0);
  o.drafting = std::any_of(k.begin(), k.end(), [](int32_t x) { return x > 0; });
  // While drafting, the plain price of this batch size is not measured, and the machine's speed drifts
  // (shared cores: tens of percent over minutes); a plain estimate from a slow stretch would keep drafting
  // in a batch where it loses (measured: -18% at c16). So after kRefreshSteps one plain step re-prices it,
  // at a cost of about 1/kRefreshSteps of drafting's gain where drafting pays.
  if (prompt_rows == 0 && !fresh_plain) std::fill(k.begin(), k.end(), 0);
  if (fresh_plain && !o.drafting && probe(price, o, k)) return k;
  if (prompt_rows == 0) explore(price, best, plain, k);
  return k;
}

// Where the model declines to draft, nothing measures its drafting prices again: a verify or draft-pass price
// from a slow stretch (a burst of foreign load, a sweep's warm-up) would keep this size from ever drafting
// (measured on Zen 3: a c1 level that never drafted where a run minutes later gained 17.6%). So plain steps
// here set aside kProbeShare of their time, and once that covers what one-token drafts would cost over plain
// decoding in one step (the backlogs paid at once, by the old prices, plus the model's margin of error), one
// step drafts them: the cheapest drafting step, one pass. Before it, every verify and draft-pass size not
// measured for kRefreshSteps is forgotten (the machine's speed is in doubt, not one size's), so drafting
// starts over as on its first steps: the probe and the next verify steps measure, unjudged, and the model
// decides on their prices. What the probe step cost over plain decoding is taken from the budget
// (observe_step): priced by stale prices it can cost more than they said. Each probe that does not lead to
// drafting by the model's choice halves the share, so where drafting loses for good the probes cost ever
// less. `plain` is the plain plan (k = 0 everywhere); true when it was replaced by the probe.
bool DraftPolicy::probe(const Pricing& price, Outcome& o, std::vector<int32_t>& plain) {
  const size_t n = price.n();
  std::vector<int32_t> one(n);
  for (size_t r = 0; r < n; ++r) one[r] = price.slots[r].acceptance && price.slots[r].n_max > 0 ? 1 : 0;
  const int64_t rows = price.verify_rows(one);
  if (rows == static_cast<int64_t>(n) || verify_age(rows) <= kRefreshSteps) return false;
  const double plain_token = price.step_time(plain) / static_cast<double>(n);
  const double excess =
      (1 + kMinGain) * price.step_time(one, false, true) - price.expected_tokens(one) * plain_token;
  if (o.probe_budget <= 0 || o.probe_budget < excess) return false;
  forget_stale();
  probing_ = measuring_ = true;
  o.probe_halvings = std::min(o.probe_halvings + 1, kMaxProbeHalvings);
  plain = std::move(one);
  return true;
}

// While drafting, the other draft lengths' verify sizes go unmeasured, and one priced in a slow stretch would
// never be run again (measured at c1: k = 3 priced at 42 ms against a steady 35 kept the slot at k = 2, 15%
// below drafting 3). So a uniform length over the slots the plan drafts, whose verify size was measured
// before, is run once every kRefreshSteps trunk steps when it promises within kExploreMargin of the plan and
// no less than plain decoding; its sample replaces the size's stale ones. The attempt is what counts (a step
// may run fewer drafts: p_min, the cache). Only the drafting slots: a slot the plan keeps idle would first
// run its backlog through the MTP block. `best` and `plain`: the goodput of the model's best plan and of
// plain decoding.
void DraftPolicy::explore(const Pricing& price, double best, double plain, std::vector<int32_t>& k) {
  const int64_t plan_rows = price.verify_rows(k);
  if (plan_rows == static_cast<int64_t>(price.n())) return;
  const int32_t cap = price.max_cap();
  for (int32_t len = 1; len <= cap; ++len) {
    const std::vector<int32_t> u = price.uniform(len, &k);
    const int64_t rows = price.verify_rows(u);
    if (rows == plan_rows || !verify_.measured(rows) || verify_age(rows) <= kRefreshSteps ||
        explore_age(rows) <= kRefreshSteps)
      continue;
    const double g = price.goodput(u);
    if (g < best * (1 - kExploreMargin) || g < plain) continue;
    k = u;
    exploring_ = rows;
    mark(explored_at_, rows, trunk_steps_);
    return;
  }
}

}  // namespace mtp::speculative
