// The auto policy against a fake clock: an engine loop in miniature whose step costs are deterministic
// functions of the batch (plain rows, verify rows, draft-pass rows) and whose acceptance is a seeded coin per
// draft position, run side by side with plain decoding and with every fixed draft length. What auto must
// keep: never much below plain decoding, and near the best fixed length where drafting pays; also when the
// first step is slow, when a draft pass costs more than the verify rows save, and when costs change mid-run.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <vector>

#include "speculative/policy.h"

namespace mtp::speculative {
namespace {

// Seconds of a trunk step of `rows` decode rows and `verify` draft rows, and of a draft pass of `rows` rows;
// `step` is the step's index, so costs can change mid-run.
struct Costs {
  std::function<double(int64_t step, int64_t rows, int64_t verify)> trunk;
  std::function<double(int64_t step, int64_t rows)> draft;
  std::function<void()> reset = [] {};  // called before each run (costs with a memory of their own)
  // Seconds a step with drafts costs beyond its passes, which the policy is not told of (rollback, state
  // copies, sampling the extra rows): only the step's total shows it.
  double unseen_per_drafting_step = 0;
  std::function<double(int64_t step)> unseen_at = nullptr;  // the same, changing mid-run (added to it)
  // Requests of this many tokens (0: endless); each new one brings a prompt of `prompt_rows` rows the MTP
  // block has not seen (its first draft pass runs them).
  int64_t request_tokens = 0, prompt_rows = 0;
  // The requests' length is not told to the policy (no max_tokens): it learns it from the requests that end.
  bool hide_length = false;
  // Staggered requests whose prompts take a trunk step of their own (simulate() says how), each prompt row
  // costing this much in that step.
  bool prompt_steps = false;
  double prompt_row_seconds = 0;
  // A second head (the vocabulary subset): its draft pass and its conditional acceptance per position.
  std::function<double(int64_t step, int64_t rows)> draft_subset = nullptr;
  double accept_subset = 0;
  // Steps at the start in which one slot generates alone (a sweep's c1 level before this one): the prices
  // measured there carry over to the full batch.
  int64_t solo_steps = 0;
  uint64_t coin_seed = 7;  // the acceptance coins' (every run of one judge() flips the same coins)
  // Content whose predictability changes: the conditional acceptance of draft position `pos` (0-based) at
  // `step`, in place of the run's constant rate.
  std::function<double(int64_t step, int32_t pos)> accept_at = nullptr;
};

struct Run {
  double tokens = 0, seconds = 0;
  int64_t drafting_steps = 0;
  double rate() const { return tokens / seconds; }
};

// `fixed_k` < 0: the auto policy; otherwise every slot drafts fixed_k (0: plain decoding). Each of `slots`
// requests generates without end; position i of a draft is accepted with probability `accept` given the
// ones before it (`costs.accept_subset` with the subset head; the same coins for every run: the seed).
// `head`: the head drafts use, or nullopt: the policy chooses where `costs` has a subset head.
// With costs.prompt_steps, requests start staggered and each new one first spends a step reading its prompt
// (that step's trunk batch has prompt rows beside the other slots' decode rows), so the number of generating
// slots changes from step to step as in a server.
Run simulate(const Costs& costs, int64_t slots, int32_t n_max, double accept, int32_t fixed_k, int64_t steps,
             int64_t from_step = 0, std::optional<DraftHead> head = std::nullopt) {
  PolicyOptions o;
  o.kind = fixed_k < 0 ? PolicyKind::kAuto : PolicyKind::kFixed;
  o.head = head.value_or(DraftHead::kFull);
  o.choose_head = !head && costs.draft_subset != nullptr;
  DraftPolicy policy(o);
  std::array<std::vector<AcceptanceTracker>, kDraftHeads> acc_by_head;
  for (auto& a : acc_by_head) a.resize(static_cast<size_t>(slots));
  std::vector<int64_t> pending(static_cast<size_t>(slots), costs.prompt_rows);  // the MTP block's catch-up
  std::vector<int64_t> generated(static_cast<size_t>(slots), 0);
  std::vector<bool> reading(static_cast<size_t>(slots), false);  // the slot's next step reads its prompt
  if (costs.prompt_steps)
    for (int64_t s = 0; s < slots; ++s) generated[static_cast<size_t>(s)] = s * costs.request_tokens / slots;
  std::mt19937_64 rng(costs.coin_seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  Run r;
  costs.reset();
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<size_t> gen;  // the generating slots
    int64_t prompt_rows = 0;
    for (size_t s = 0; s < reading.size(); ++s) {
      if (s > 0 && step < costs.solo_steps) continue;
      if (reading[s]) prompt_rows += costs.prompt_rows;
      if (!reading[s]) gen.push_back(s);
    }
    const int64_t n = static_cast<int64_t>(gen.size());
    const DraftHead h = policy.head(n);
    const bool subset = h == DraftHead::kSubset;
    std::vector<AcceptanceTracker>& acc = acc_by_head[static_cast<size_t>(h)];
    const double p_accept = subset ? costs.accept_subset : accept;
    std::vector<SlotDemand> demand(gen.size());
    for (size_t i = 0; i < gen.size(); ++i) {
      demand[i] = {fixed_k < 0 ? n_max : fixed_k, &acc[gen[i]], fixed_k == 0 ? 0 : pending[gen[i]],
                   costs.request_tokens > 0 ? costs.request_tokens - generated[gen[i]] : -1,
                   generated[gen[i]]};
      // As the engine: no drafts past the request's end (none on its last token).
      if (demand[i].remaining >= 0)
        demand[i].n_max =
            static_cast<int32_t>(std::clamp<int64_t>(demand[i].remaining - 1, 0, demand[i].n_max));
      if (costs.hide_length) demand[i].remaining = -1;
    }
    const std::vector<int32_t> k = policy.choose(demand, prompt_rows);
    int32_t k_max = 0;
    int64_t verify = 0, tokens = 0;
    for (int32_t x : k) {
      k_max = std::max(k_max, x);
      verify += x;
    }
    double seconds = 0;
    for (int32_t i = 1; i <= k_max; ++i) {  // draft passes; the first carries the catch-up rows
      int64_t rows = 0;
      for (size_t j = 0; j < k.size(); ++j)
        if (k[j] >= i) rows += 1 + (i == 1 ? pending[gen[j]] : 0);
      const double t = subset ? costs.draft_subset(step, rows) : costs.draft(step, rows);
      policy.observe_draft(rows, t);
      seconds += t;
    }
    const double t =
        costs.trunk(step, n, verify) + costs.prompt_row_seconds * static_cast<double>(prompt_rows);
    policy.observe_trunk(n, verify, prompt_rows, t);
    seconds +=
        t + (verify > 0 ? costs.unseen_per_drafting_step + (costs.unseen_at ? costs.unseen_at(step) : 0) : 0);
    std::fill(reading.begin(), reading.end(),
              false);  // prompts read: those slots generate from the next step
    for (size_t j = 0; j < k.size(); ++j) {
      const size_t s = gen[j];
      int64_t accepted = 0;
      while (accepted < k[j] &&
             coin(rng) < (costs.accept_at ? costs.accept_at(step, static_cast<int32_t>(accepted)) : p_accept))
        ++accepted;
      if (k[j] > 0) {
        acc[s].observe(k[j], accepted);
        policy.observe_round(k[j], accepted);
        pending[s] = accepted;  // the rows the MTP block has not seen: the accepted drafts' successors
      } else {
        acc[s].idle_step(policy.acceptance(h));
        ++pending[s];
      }
      tokens += 1 + accepted;
      generated[s] += 1 + accepted;
      if (costs.request_tokens > 0 && generated[s] >= costs.request_tokens) {  // the next request
        policy.observe_request_end(generated[s]);
        generated[s] = 0;
        pending[s] = costs.prompt_rows;
        reading[s] = costs.prompt_steps;
        for (int x = 0; x < kDraftHeads; ++x)
          acc_by_head[static_cast<size_t>(x)][s] = policy.acceptance(static_cast<DraftHead>(x));
      }
    }
    if (verify == 0) policy.idle_step();
    if (prompt_rows == 0 && n > 0) policy.observe_step(n, tokens, seconds, verify > 0);
    if (step >= from_step) {
      r.tokens += static_cast<double>(tokens);
      r.seconds += seconds;
      r.drafting_steps += verify > 0;
    }
  }
  return r;
}

struct Verdict {
  double vs_off = 0, vs_best_fixed = 0;
};

Verdict judge(const char* name, const Costs& costs, int64_t slots, int32_t n_max, double accept,
              int64_t steps, int64_t from_step = 0) {
  const double off = simulate(costs, slots, n_max, accept, 0, steps, from_step).rate();
  double best = off;
  for (int32_t k = 1; k <= n_max; ++k) {
    best = std::max(best, simulate(costs, slots, n_max, accept, k, steps, from_step).rate());
    if (costs.draft_subset)
      best = std::max(best,
                      simulate(costs, slots, n_max, accept, k, steps, from_step, DraftHead::kSubset).rate());
  }
  const double a = simulate(costs, slots, n_max, accept, -1, steps, from_step).rate();
  std::printf(
      "[%s] c%lld: off %.1f, best fixed %.1f, auto %.1f tok/s (%.3fx off, %.3fx best), %lld drafting steps\n",
      name, static_cast<long long>(slots), off, best, a, a / off, a / best,
      (long long)simulate(costs, slots, n_max, accept, -1, steps, from_step).drafting_steps);
  return {a / off, a / best};
}

// Memory-bound steps: a fixed part and a small cost per row; verify rows cost a little more than decode rows.
double memory_bound(int64_t rows, int64_t verify) {
  return 0.010 + 0.0008 * static_cast<double>(rows) + 0.0012 * static_cast<double>(verify);
}

TEST(PolicySim, DraftsWhereItPaysAndNotWhereItLoses) {
  const Costs cheap_draft{[](int64_t, int64_t r, int64_t v) { return memory_bound(r, v); },
                          [](int64_t, int64_t rows) { return 0.0015 + 0.0002 * static_cast<double>(rows); }};
  for (int64_t c : {1, 4}) {
    const Verdict v = judge("cheap draft", cheap_draft, c, 3, 0.85, 400);
    EXPECT_GE(v.vs_off, 1.15) << "c" << c;
    EXPECT_GE(v.vs_best_fixed, 0.95) << "c" << c;
  }
  // A cheap verify with an expensive draft pass (the full vocabulary head on many threads: a draft pass
  // costs more than a whole plain step): drafting loses at any length.
  const Costs dear_draft{[](int64_t, int64_t r, int64_t v) { return memory_bound(r, v); },
                         [](int64_t, int64_t rows) { return 0.014 + 0.0004 * static_cast<double>(rows); }};
  for (int64_t c : {1, 4, 16}) EXPECT_GE(judge("dear draft", dear_draft, c, 3, 0.95, 400).vs_off, 0.98);
}

// The first step of each shape pays one-time costs (3x): priced by it, plain decoding looks dear and drafting
// cheap, or the other way round.
TEST(PolicySim, ASlowFirstStepDoesNotDecide) {
  auto first_slow = [](double t, bool first) { return first ? 3 * t : t; };
  std::vector<bool> seen_plain(64, false), seen_verify(256, false);
  const Costs slow_plain{[&](int64_t, int64_t r, int64_t v) {
                           std::vector<bool>& seen = v > 0 ? seen_verify : seen_plain;
                           const bool first = !seen[static_cast<size_t>(r + v)];
                           seen[static_cast<size_t>(r + v)] = true;
                           return first_slow(memory_bound(r, v), first);
                         },
                         [](int64_t, int64_t rows) { return 0.014 + 0.0004 * static_cast<double>(rows); },
                         [&] {
                           std::fill(seen_plain.begin(), seen_plain.end(), false);
                           std::fill(seen_verify.begin(), seen_verify.end(), false);
                         }};
  for (int64_t c : {1, 4}) {
    EXPECT_GE(judge("slow first step, dear draft", slow_plain, c, 3, 0.95, 400).vs_off, 0.98) << "c" << c;
  }
}

// Drafting pays for the first 200 steps, then the draft pass becomes 13x dearer (another process takes the
// cores, a longer context): auto comes back to plain decoding within a few steps (the draft passes' median
// moves after 3 samples; meanwhile one-token drafts, one pass instead of three, look the cheaper and run a
// step or two) and stays there, its retries costing under 2%.
TEST(PolicySim, CostsThatChangeMidRun) {
  const Costs change{[](int64_t, int64_t r, int64_t v) { return memory_bound(r, v); },
                     [](int64_t step, int64_t rows) {
                       return step < 200 ? 0.0015 + 0.0002 * static_cast<double>(rows)
                                         : 0.020 + 0.0004 * static_cast<double>(rows);
                     }};
  for (int64_t c : {1, 4}) {
    const Verdict first = judge("changes at 200 (steps 0-199)", change, c, 3, 0.9, 200);
    EXPECT_GE(first.vs_off, 1.2) << "c" << c;
    EXPECT_LE(simulate(change, c, 3, 0.9, -1, 210, 200).drafting_steps, 6) << "c" << c;
    EXPECT_GE(judge("changes at 200 (steps 210-799)", change, c, 3, 0.9, 800, 210).vs_off, 0.98) << "c" << c;
  }
}

// Requests of 64 tokens, each with a 256-row prompt its slot's first draft pass runs through the MTP block
// (the step after it pays 50 ms more): the guard does not judge drafting by those steps.
TEST(PolicySim, NewRequestsBacklogsDoNotStopDrafting) {
  Costs requests{[](int64_t, int64_t r, int64_t v) { return memory_bound(r, v); },
                 [](int64_t, int64_t rows) { return 0.0015 + 0.0002 * static_cast<double>(rows); }};
  requests.request_tokens = 64;
  requests.prompt_rows = 256;
  const Verdict alone = judge("new requests", requests, 1, 3, 0.85, 600);
  EXPECT_GE(alone.vs_off, 1.1);
  EXPECT_GE(alone.vs_best_fixed, 0.95);
  // Four slots' backlogs: no fixed length beats plain decoding here.
  EXPECT_GE(judge("new requests", requests, 4, 3, 0.85, 600).vs_off, 0.98);
}

// A tiny model served to a few clients (measured on 2 cores: 4 layers at hidden 256, 0.21 ms a one-row step
// and a 3-row verify 2.04x that, rollback and per-row sampling unseen by the passes' prices): drafting never
// pays. Requests of 64 tokens with 240-token prompts, staggered, each prompt read in a step of its own, so
// the number of generating slots moves between steps and each new request brings a backlog. Auto pays for
// its probes at every batch size it meets, and must stay within 2% of plain decoding.
TEST(PolicySim, ATinyModelServedToAFewClientsDoesNotLose) {
  // Shared cores: every pass's time varies by +-20%, and one in 20 takes 3x (another process ran).
  std::mt19937_64 noise_rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto noisy = [&](double t) { return t * (0.8 + 0.4 * u(noise_rng)) * (u(noise_rng) < 0.05 ? 3 : 1); };
  Costs tiny{[&](int64_t, int64_t r, int64_t v) {
               return noisy(0.00010 + 0.00011 * static_cast<double>(r) + 0.00014 * static_cast<double>(v));
             },
             [&](int64_t, int64_t rows) { return noisy(0.00003 + 0.000005 * static_cast<double>(rows)); },
             [&] { noise_rng.seed(11); }};
  tiny.unseen_per_drafting_step = 0.0003;
  tiny.request_tokens = 64;
  tiny.prompt_rows = 240;
  tiny.prompt_steps = true;
  tiny.prompt_row_seconds = 0.00004;
  for (int64_t c : {1, 2, 4})
    EXPECT_GE(judge("tiny model, staggered requests, noisy", tiny, c, 3, 0.8, 10000).vs_off, 0.98)
        << "c" << c;
}

// Drafting that the passes' prices say pays, but whose steps cost more than their passes (the model cannot
// see it): what the steps deliver stops it, and retries grow rarer.
TEST(PolicySim, ALossTheModelCannotSeeStopsDrafting) {
  Costs unseen{[](int64_t, int64_t r, int64_t v) { return memory_bound(r, v); },
               [](int64_t, int64_t rows) { return 0.0015 + 0.0002 * static_cast<double>(rows); }};
  unseen.unseen_per_drafting_step = 0.030;
  // A bounded number of losing steps: the first probes (up to 3, not judged), then one window of 4 after
  // each pause (64, 256, 1024 steps).
  for (int64_t c : {1, 4}) {
    EXPECT_LE(simulate(unseen, c, 3, 0.85, -1, 2000).drafting_steps, 19) << "c" << c;
    EXPECT_GE(judge("unseen cost", unseen, c, 3, 0.85, 2000).vs_off, 0.98) << "c" << c;
  }
}

// A loss the model cannot see, for a while (another process on the cores during the first 300 steps), then
// drafting pays 15-19%: the guard pauses drafting during the loss, and once it is over drafting must start
// again, each slot first running its backlog (the rows since it last drafted) through the MTP block. With
// requests of 256 tokens, a backlog spread over the 16 steps of a short stretch kept c4 from drafting again
// for the rest of the run (0.86x the best fixed length); over the steps a request has left, it starts again.
// Where the loss stays, the same requests must not make its retries dear. (With requests of unknown length
// the backlog is still spread over 16 steps, and at c4 drafting does not start again: 0.85x.)
TEST(PolicySim, DraftingStartsAgainAfterALossThatPassed) {
  Costs burst{[](int64_t, int64_t r, int64_t v) { return memory_bound(r, v); },
              [](int64_t, int64_t rows) { return 0.0015 + 0.0002 * static_cast<double>(rows); }};
  burst.unseen_at = [](int64_t step) { return step < 300 ? 0.030 : 0.0; };
  burst.request_tokens = 256;
  burst.prompt_rows = 64;
  Costs stays = burst;
  stays.unseen_at = [](int64_t) { return 0.030; };
  for (bool hidden : {false, true}) {
    burst.hide_length = stays.hide_length = hidden;
    for (int64_t c : {1, 4}) {
      EXPECT_GE(judge("a loss that passed", burst, c, 3, 0.85, 2300, 300).vs_best_fixed, 0.95)
          << "c" << c << (hidden ? ", no max_tokens" : "");
      EXPECT_GE(judge("a loss that stays", stays, c, 3, 0.85, 2300, 300).vs_off, 0.98)
          << "c" << c << (hidden ? ", no max_tokens" : "");
    }
  }
}

// The same unseen loss right after start, where the first plain steps paid one-time costs (3x): the plain
// steps the guard compares with must not be priced by them, or the first window of drafting looks like a
// gain and runs on (measured on a tiny model: 32 losing drafting steps before the first verdict).
TEST(PolicySim, SlowFirstPlainStepsDoNotHideALoss) {
  std::vector<bool> seen(64, false);
  Costs unseen{[&](int64_t, int64_t r, int64_t v) {
                 const bool first = v == 0 && !seen[static_cast<size_t>(r)];
                 if (v == 0) seen[static_cast<size_t>(r)] = true;
                 return (first ? 3 : 1) * memory_bound(r, v);
               },
               [](int64_t, int64_t rows) { return 0.0015 + 0.0002 * static_cast<double>(rows); },
               [&] { std::fill(seen.begin(), seen.end(), false); }};
  unseen.unseen_per_drafting_step = 0.020;
  for (int64_t c : {1, 4}) {
    EXPECT_LE(simulate(unseen, c, 3, 0.85, -1, 64).drafting_steps, 8) << "c" << c;
    EXPECT_GE(judge("unseen cost, slow first plain steps", unseen, c, 3, 0.85, 2000).vs_off, 0.98)
        << "c" << c;
  }
}

// Verify rows dearer the more a slot drafts (measured on Zen 3, plain AVX2, c1: one row 22 ms, verifies of 2,
// 3 and 4 rows 33, 47 and 64 ms): one-token drafts pay (+16%), three-token ones lose. The first drafting
// steps run the longest length to measure a verify price, and they lose: judged by them, or stopped by two
// rejections in a row, drafting would stop for good where one-token drafts pay. Auto must try the shorter
// length and keep it.
TEST(PolicySim, AShorterDraftNeverMeasuredIsTried) {
  auto convex = [](int64_t, int64_t r, int64_t v) {
    const double vv = static_cast<double>(v);
    return 0.022 + 0.0117 * static_cast<double>(r - 1) + 0.011 * vv + 0.0015 * vv * (vv - 1);
  };
  const Costs costs{convex,
                    [](int64_t, int64_t rows) { return 0.0020 + 0.0004 * static_cast<double>(rows); }};
  const Verdict c1 = judge("convex verify", costs, 1, 3, 0.87, 600);
  EXPECT_GE(c1.vs_off, 1.10);
  EXPECT_GE(c1.vs_best_fixed, 0.95);
  // At c4 no length pays (four slots' verify rows): trying the unmeasured ones costs little.
  EXPECT_GE(judge("convex verify", costs, 4, 3, 0.87, 600).vs_off, 0.98);
}

// The mirror of the above: a burst of foreign load makes verify rows and draft passes dear for the first 150
// steps (as a sweep's warm-up can), so auto measures drafting as a loss and declines it; then the machine is
// quiet and drafting pays (1.7x at c1, 1.15x at c4). Priced only by what it measured in the burst, auto would
// never draft again (nothing re-measures a price the model declines); it must measure again, at a bounded
// cost, and catch up.
TEST(PolicySim, AStaleDearPriceIsMeasuredAgain) {
  constexpr int64_t kBurst = 150;
  Costs burst{[](int64_t step, int64_t r, int64_t v) {
                return memory_bound(r, 0) + (step < kBurst ? 6 : 1) * 0.0012 * static_cast<double>(v);
              },
              [](int64_t step, int64_t rows) {
                return (step < kBurst ? 4 : 1) * (0.0015 + 0.0002 * static_cast<double>(rows));
              }};
  burst.request_tokens = 64;
  burst.prompt_rows = 32;
  for (int64_t c : {1, 4}) {
    judge("dear during a burst (steps 0-149)", burst, c, 3, 0.85, kBurst);
    const Verdict after = judge("dear during a burst (steps 150-1999)", burst, c, 3, 0.85, 2000, kBurst);
    EXPECT_GE(after.vs_off, 1.05) << "c" << c;
    EXPECT_GE(after.vs_best_fixed, 0.9) << "c" << c;
  }
}

// A c1 level first, then c4 (as a sweep runs them): the verify sizes c1 measured (2-4 rows) are all the model
// knows of verify steps when c4 starts, and its line prices c4's 8- to 16-row verifies from them. Where
// drafting pays at c4, that price must let it start: bounding the sizes above the largest measured one
// pessimistically (their cost per row no lower than the largest's), so that a line from c1 could not start
// drafting at c4 where it loses (on Zen 4 at 2 threads, the 8-layer 35B-A3B-width file, a 16-row verify
// priced at 64 ms ran at 85-94 and auto lost 5% at c4), kept auto from drafting here at all: 0.84x the best
// fixed length with endless requests (each slot's backlog then grows past what a probe may spend), 0.92x
// with 64-token ones.
TEST(PolicySim, PricesMeasuredAtC1LetDraftingStartAtC4WhereItPays) {
  Costs levels{[](int64_t, int64_t r, int64_t v) { return memory_bound(r, v); },
               [](int64_t, int64_t rows) { return 0.0015 + 0.0002 * static_cast<double>(rows); }};
  levels.solo_steps = 200;
  for (int64_t tokens : {0, 64}) {
    levels.request_tokens = tokens;
    levels.prompt_rows = tokens > 0 ? 32 : 0;
    const Verdict v = judge("c1 then c4", levels, 4, 3, 0.85, levels.solo_steps + 2000, levels.solo_steps);
    EXPECT_GE(v.vs_off, 1.1) << tokens;
    EXPECT_GE(v.vs_best_fixed, 0.95) << tokens;
  }
}

// The converse, after a trace on an AMD EPYC Zen 4 (2 threads, the 8-layer 35B-A3B-width file, the subset
// head): plain steps of 1 and 4 rows 17 and 27 ms; at c4 an 8-row verify 50-51 ms and a 16-row one 85-94,
// where the line through c1's verify sizes priced the 16-row one at 64. Here c1's verify sizes bend so that
// the line through them prices it at 65 (30, 32 and 35 ms for 2, 3 and 4 rows: a first extra row of 12.5 ms,
// each further one 2.5), and c4's verify rows cost 5.9 ms each (51 and 98 ms for 8 and 16 rows). The
// structured synthetic text is predictable (0.97 a position with the subset head), so drafting pays 40% at
// c1; at c4 it loses at every length, each new request's 40-row prompt to run through the MTP block first
// (the engine's sweep: auto 5% below MTP off at c4 while c1's verify line priced c4).
TEST(PolicySim, PricesMeasuredAtC1DoNotStartDraftingAtC4WhereItLoses) {
  Costs zen4{[](int64_t, int64_t r, int64_t v) {
               const double plain = 0.0137 + 0.0033 * static_cast<double>(r);
               if (v == 0) return plain;
               return plain + (r == 1 ? 0.0125 + 0.0025 * static_cast<double>(v - 1)
                                      : 0.0059 * static_cast<double>(v));
             },
             [](int64_t, int64_t rows) { return 0.0020 + 0.0004 * static_cast<double>(rows); }};
  zen4.solo_steps = 200;
  zen4.request_tokens = 32;
  zen4.prompt_rows = 40;
  EXPECT_GE(judge("zen4 c1", zen4, 1, 3, 0.97, zen4.solo_steps).vs_off, 1.15);
  // A sweep's level (64 steps), where the first steps decide, and a long run, where the probes come in.
  for (int64_t steps : {64, 2000}) {
    const Verdict c4 = judge("zen4 c1 then c4", zen4, 4, 3, 0.97, zen4.solo_steps + steps, zen4.solo_steps);
    EXPECT_GE(c4.vs_off, 0.98) << steps;
  }
}

// Costs after a plain AVX2 trace of the 40-layer 35B-A3B-width file at c1 (AMD EPYC Zen 4, 2 threads: a plain
// step 64 ms, each verify row 33 ms more, the subset head's passes 2-3 ms), where drafting one to three
// tokens pays about alike. At 0.85 a position, one 4-step window of three-token drafts came out 20% below
// plain decoding to a guard that counted the tokens as the coins fell, and drafting, 20% ahead, paused for 64
// steps (0.81-0.83x the best fixed length); the guard counts them as the estimates expected.
TEST(PolicySim, AnUnluckyWindowDoesNotPauseDraftingThatPays) {
  const Costs avx2{[](int64_t, int64_t r, int64_t v) {
                     return 0.064 * static_cast<double>(r) + 0.033 * static_cast<double>(v);
                   },
                   [](int64_t, int64_t rows) { return 0.002 + 0.0007 * static_cast<double>(rows); }};
  for (int64_t steps : {100, 400}) {
    const Verdict v = judge("avx2, 40 layers, 0.85 a position", avx2, 1, 3, 0.85, steps);
    EXPECT_GE(v.vs_best_fixed, 0.95) << steps;
  }
}

// The noisy plain-AVX2 prices of the 40-layer file at c1 (the case below): plain steps 109 ms, each verify
// row `verify_row` seconds more, a full-head pass 17 ms, a subset pass 4.5 ms (`two_heads`: both, the policy
// choosing; otherwise the subset's passes alone), every pass's time within 15% of that and one in 20 half as
// long again; requests of 80 tokens, each with a 40-row prompt. judge() runs it over `seeds` seeds of the
// noise and the coins; returns the mean and the worst of auto against the best fixed profile.
struct NoisyAvx2 {
  std::mt19937_64 rng;
  uint64_t seed = 0;
  std::uniform_real_distribution<double> u{0.0, 1.0};
  double noisy(double t) { return t * (0.85 + 0.3 * u(rng)) * (u(rng) < 0.05 ? 1.5 : 1); }
  Costs costs(bool two_heads, double verify_row = 0.054) {
    const std::function<double(int64_t, int64_t)> full = [this](int64_t, int64_t rows) {
      return noisy(0.017 + 0.001 * static_cast<double>(rows));
    };
    const std::function<double(int64_t, int64_t)> subset = [this](int64_t, int64_t rows) {
      return noisy(0.0045 + 0.0005 * static_cast<double>(rows));
    };
    Costs c{[this, verify_row](int64_t, int64_t r, int64_t v) {
              return noisy(0.109 * static_cast<double>(r) + verify_row * static_cast<double>(v));
            },
            two_heads ? full : subset, [this] { rng.seed(seed); }};
    if (two_heads) c.draft_subset = subset;
    c.request_tokens = 80;
    c.prompt_rows = 40;
    return c;
  }
  std::pair<double, double> judge_seeds(const char* name, Costs& c, double accept, uint64_t seeds) {
    double sum = 0, worst = 1;
    int runs = 0;
    for (uint64_t s = 1; s <= seeds; ++s) {
      seed = 100 + s;
      c.coin_seed = 200 + s;
      for (int64_t steps : {300, 1000}) {
        const double v = judge(name, c, 1, 3, accept, steps).vs_best_fixed;
        sum += v;
        worst = std::min(worst, v);
        ++runs;
      }
    }
    std::printf("[%s] %.3fx the best fixed profile on average over %d runs, %.3fx in the worst\n", name,
                sum / runs, runs, worst);
    return {sum / runs, worst};
  }
};

// Both heads pay, the subset's more, on noisy steps: a plain AVX2 trace of the 40-layer file at c1 (Intel
// Xeon, 2 threads, --draft-vocab 16384; NoisyAvx2's prices), acceptance 0.95 a position with the full head
// and 0.93 with the subset, so the subset's three-token drafts deliver 11% more. Prices from medians of such
// steps make the model decline drafting now and then (a plain step re-priced by one fast sample); that once
// erased the head's measured rate, and the full head drafted for up to 512 steps in its place: 0.945x the
// best fixed profile over these 16 runs (0.887x in the worst).
TEST(PolicySim, ADeclineOnNoisyPricesDoesNotHandDraftingToTheSlowerHead) {
  NoisyAvx2 noise;
  Costs avx2 = noise.costs(true);
  avx2.accept_subset = 0.93;
  EXPECT_GE(noise.judge_seeds("both heads pay, noisy steps", avx2, 0.95, 8).first, 0.955);
}

// The draft length where acceptance changes with depth or over time (one head, NoisyAvx2's prices): where
// the second and third positions turn hard for 12 steps in every 150, auto should draft three tokens again
// once the stretch is over; where they are always poor, it should not. When each re-pricing plain step's
// sample replaced the plain median, one fast sample made plain decoding look cheap for the next 32 steps and
// auto drafted shorter: 0.981x the best fixed profile on average (0.947x in the worst run) with hard
// stretches, 0.961x with poor deeper positions and 54 ms verify rows. Drafting more on the estimates of
// positions left undrafted (they drift toward the position before, or toward their long-run rate) cost more
// where the deeper positions stay poor (docs/drafting-policy.md).
TEST(PolicySim, DraftLengthWhereDeeperPositionsChange) {
  NoisyAvx2 noise;
  Costs dips = noise.costs(false);
  dips.accept_at = [](int64_t step, int32_t pos) { return pos >= 1 && step % 150 < 12 ? 0.4 : 0.93; };
  const auto [dips_mean, dips_worst] = noise.judge_seeds("hard stretches now and then", dips, 0.93, 8);
  EXPECT_GE(dips_mean, 0.98);
  EXPECT_GE(dips_worst, 0.955);
  for (double deep : {0.2, 0.6}) {
    for (double verify_row : {0.054, 0.005}) {
      Costs poor = noise.costs(false, verify_row);
      poor.accept_at = [deep](int64_t, int32_t pos) { return pos >= 1 ? deep : 0.9; };
      const double mean = noise.judge_seeds("deeper positions poor", poor, 0.9, 4).first;
      EXPECT_GE(mean, 0.967) << deep << ", verify row " << verify_row;
    }
  }
}

// Two heads (the subset's passes cheap, its acceptance lower): auto drafts with the one that delivers more,
// near the best fixed length with the best head, and never much below plain decoding when neither pays.
TEST(PolicySim, ChoosesTheDraftHeadThatDelivers) {
  auto trunk = [](int64_t, int64_t r, int64_t v) { return memory_bound(r, v); };
  auto dear = [](int64_t, int64_t rows) { return 0.014 + 0.0004 * static_cast<double>(rows); };
  auto cheap = [](int64_t, int64_t rows) { return 0.0015 + 0.0002 * static_cast<double>(rows); };
  // The full head as dear as a plain step (35B-A3B widths on many threads), the subset's passes cheap.
  Costs subset_pays{trunk, dear};
  subset_pays.draft_subset = cheap;
  subset_pays.accept_subset = 0.85;
  // Both heads cheap, the subset missing half the tokens the full head gets right.
  Costs full_pays{trunk, cheap};
  full_pays.draft_subset = [](int64_t, int64_t rows) { return 0.0010 + 0.0002 * static_cast<double>(rows); };
  full_pays.accept_subset = 0.45;
  // Neither: the full head dear, the subset nearly always wrong.
  Costs neither{trunk, dear};
  neither.draft_subset = cheap;
  neither.accept_subset = 0.15;
  // Both pay, the subset far more: a full pass 0.4 of a plain step, the subset's a sixth.
  Costs both_pay{trunk, [](int64_t, int64_t rows) { return 0.004 + 0.0004 * static_cast<double>(rows); }};
  both_pay.draft_subset = cheap;
  both_pay.accept_subset = 0.85;
  // The same with a full pass at 0.4 of a plain step (the 8-layer 35B-A3B-width file at c1 on 2 cores: 10 ms
  // against 18), and requests of 32 tokens, each with a 20-row prompt to catch up on. Where a request is on
  // its last token no slot can draft; that step once counted as the model declining the head in use, and
  // after the guard had just handed the subset its try, it went straight back to the full head, which paid a
  // little, and the subset was not tried again for 512 steps (auto 0.81x the best fixed profile at c1).
  Costs both_pay_requests{trunk,
                          [](int64_t, int64_t rows) { return 0.004 + 0.0004 * static_cast<double>(rows); }};
  both_pay_requests.draft_subset = cheap;
  both_pay_requests.accept_subset = 0.85;
  both_pay_requests.request_tokens = 32;
  both_pay_requests.prompt_rows = 20;
  for (int64_t c : {1, 4}) {
    const Verdict bp = judge("both heads pay, the subset more", both_pay, c, 3, 0.95, 600);
    EXPECT_GE(bp.vs_best_fixed, 0.95) << "c" << c;
    const Verdict bpr =
        judge("both heads pay, the subset more; short requests", both_pay_requests, c, 3, 0.95, 600);
    EXPECT_GE(bpr.vs_best_fixed, 0.95) << "c" << c;
    const Verdict sp = judge("full head dear, subset pays", subset_pays, c, 3, 0.95, 600);
    EXPECT_GE(sp.vs_off, 1.15) << "c" << c;
    EXPECT_GE(sp.vs_best_fixed, 0.95) << "c" << c;
    const Verdict fp = judge("full head pays, subset poor", full_pays, c, 3, 0.9, 600);
    EXPECT_GE(fp.vs_off, 1.15) << "c" << c;
    EXPECT_GE(fp.vs_best_fixed, 0.95) << "c" << c;
    EXPECT_GE(judge("neither head pays", neither, c, 3, 0.95, 2000).vs_off, 0.97) << "c" << c;
  }
}

}  // namespace
}  // namespace mtp::speculative
