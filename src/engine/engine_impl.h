// The engine's private parts shared by engine.cpp and engine_cache.cpp: a slot's state and Engine::Impl.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/timer.h"
#include "engine/engine.h"
#include "grammar/token_mask.h"
#include "model/batch.h"
#include "speculative/draft_vocab.h"

namespace mtp {

enum class SlotState { kFree, kPrompt, kGenerate };

// A slot's state, grouped by concern: the request (top level), its speculation, its prefix-cache bookkeeping,
// its grammar, and the rows it holds in this step's batch.
// Sampled drafts (DraftParams::sample, engine_spec_sampling.cpp): what each position of this step's draft was
// drawn from (token ids and probabilities), the chooser the drafter draws with, and the verify's scratch.
struct SlotDraftSampling {
  std::unique_ptr<speculative::DraftChooser> chooser;  // null: drafts are the head's argmax
  // This step: the token the chooser drew at each draft position (a drafter that ignores the chooser leaves
  // it short, and its drafts are checked by equality), and what it drew from.
  std::vector<int32_t> chosen;
  std::vector<std::vector<int32_t>> ids;  // per draft position
  std::vector<std::vector<double>> probs;
  std::vector<int32_t> p_ids;  // the target's distribution at the row being verified
  std::vector<double> p, residual;
};

struct SlotSpeculation {
  speculative::DraftParams params;  // effective; n_max == 0: never drafts
  std::array<speculative::AcceptanceTracker, speculative::kDraftHeads> acceptance;  // per DraftHead
  SlotDraftSampling sampled;
};

// The prefix cache (when `enabled`): the cached prefix it started from, the post-norm hidden of the history's
// last token in the trunk, the prompt positions still to checkpoint and the checkpoints taken (published when
// the request ends).
struct SlotPrefix {
  bool enabled = false;
  int64_t restored = 0;
  std::vector<float> last_hidden;
  std::vector<std::pair<int64_t, CheckpointKind>> plan;
  std::vector<Checkpoint> checkpoints;
  std::vector<std::pair<size_t, int64_t>> captured;  // this step: (checkpoint, batch row) for hiddens
};

// Where a lazy grammar's search for its trigger (RequestOptions::grammar_trigger) stands: looking for the
// text it must follow, then for the trigger itself, then fired (the grammar holds). `tail` keeps the output's
// last bytes that may begin the text looked for, fewer than its length.
struct TriggerWatch {
  enum class Phase : uint8_t { kAfter, kTrigger, kFired };
  Phase phase = Phase::kFired;
  std::string tail;
};

// Structured output (RequestOptions::grammar): the matcher and its state after the emitted tokens (a rejected
// draft never advances it, so rollback needs nothing), a lazy grammar's watch for its trigger (the state
// means nothing before it fires), this step's token masks by matcher state (the draft head's masks along its
// path are the ones its verify rows sample under), and one row's masked logits.
struct SlotGrammar {
  struct StateMask {
    grammar::Matcher::StateId state = grammar::Matcher::kReject;
    std::vector<uint8_t> allowed;  // one byte per sampled vocabulary id
  };
  std::optional<grammar::Matcher> matcher;
  grammar::Matcher::StateId state = 0;
  TriggerWatch watch;
  std::vector<StateMask> masks;  // masks[0 .. n_masks) hold this step's; the rest are buffers to reuse
  size_t n_masks = 0;
  grammar::TokenMaskCache mask_cache;  // masks of states that are long to walk, for the whole request
  std::vector<float> masked;
  std::vector<float> edited;                            // EngineOptions::edit_logits' copy of a row
  std::unique_ptr<speculative::DraftConstraint> draft;  // what draft_constraint() hands the drafter
};

// This step: the slot's draft, and its rows row0..row0+n_rows-1 in the trunk batch.
struct SlotStep {
  std::vector<int32_t> drafted;
  int64_t row0 = 0, n_rows = 0;
};

struct Slot {
  SlotState state = SlotState::kFree;
  uint64_t id = 0;
  int32_t seq = -1;
  std::vector<int32_t> prompt;
  int64_t prompt_done = 0;  // prompt tokens already in the trunk
  RequestOptions opt;
  Sampler sampler{SamplerOptions{}};
  int32_t last = 0;  // the last sampled token; at position seq_pos, not yet in the trunk
  Timer since_submit;
  Timer since_first;
  RequestTimings timings;
  std::vector<int32_t> generated;  // emitted tokens: the history's positions prompt.size() + i
  SlotSpeculation spec;
  SlotPrefix prefix;
  SlotGrammar grammar;
  SlotStep step;
};

// log-softmax of `logits` at `id` and, when asked, the n most likely ids (ties by lower id).
GeneratedToken make_token(int32_t id, std::span<const float> logits, bool want_logprobs, int32_t n_probs);
// Marks a verify round's tokens: the first `accepted` came from the draft; the last closes a round of
// n_draft.
void mark_sources(std::vector<GeneratedToken>& round, int64_t accepted, int64_t n_draft);

struct Engine::Impl {
  const Model& model;
  EngineOptions opt;
  ThreadPool& pool;
  Memory memory;
  std::unique_ptr<PrefixCache> cache;  // after `memory`, which it gives its blocks back to
  std::optional<speculative::DraftVocab> draft_vocab;
  std::unique_ptr<speculative::Drafter> drafter;
  speculative::DraftPolicy policy;
  int32_t max_draft = 0;
  int64_t n_sample = 0;
  std::vector<Slot> slots;
  uint64_t next_id = 1;
  std::vector<SlotEvent> cancelled;  // finish events of cancel() calls, reported by the next step
  EngineTotals totals;
  Batch batch;
  Outputs out;
  Outputs head_out;  // logits of restored prompts (forward_logits)
  // Structured output (engine_grammar.cpp): the vocabulary's bytes and their trie, built once (at create()
  // with EngineOptions::prepare_grammar, else at the first request with a grammar).
  std::vector<std::string> token_bytes;
  std::optional<grammar::TokenTrie> token_trie;
  std::vector<uint8_t> all_tokens;  // a mask allowing every sampled id (a lazy grammar before its trigger)
  int32_t grammar_vocab_builds = 0;

  Impl(const Model& m, const EngineOptions& o, ThreadPool& p, Memory mem)
      : model(m), opt(o), pool(p), memory(std::move(mem)), policy(o.policy) {}

  bool is_end(int32_t id, const Slot& s) const {
    if (s.opt.ignore_eos) return false;
    return std::find(opt.end_tokens.begin(), opt.end_tokens.end(), id) != opt.end_tokens.end();
  }

  SlotEvent finish(Slot& s, FinishReason reason, std::string error = {}) {
    SlotEvent e;
    e.request_id = s.id;
    e.slot = static_cast<int32_t>(&s - slots.data());
    e.finish = reason;
    e.error = std::move(error);
    if (s.timings.n_generated > 0) s.timings.gen_ms = s.since_first.millis();
    if (s.state == SlotState::kPrompt) s.timings.prompt_ms = s.since_submit.millis();
    e.timings = s.timings;
    totals.spec.merge(s.timings.spec);
    // How long answers run here: the auto policy's expectation for a request without a max_tokens.
    if (reason == FinishReason::kLength || reason == FinishReason::kStop)
      policy.observe_request_end(s.timings.n_generated);
    if (s.prefix.enabled && reason != FinishReason::kError) publish(s);
    memory.seq_free(s.seq);
    if (cache) cache->trim();  // blocks it shared with this sequence are the cache's alone now
    s = Slot{};
    return e;
  }

  // A slot whose last token (not yet run) sits at `next_pos` can emit no more: it takes the context's last
  // position.
  bool context_full(int64_t next_pos) const { return next_pos + 1 >= opt.n_ctx; }

  // Emits `id` sampled from `logits`; returns false when the request ended (then `ev` carries the finish).
  bool emit(Slot& s, int32_t id, std::span<const float> logits, SlotEvent& ev) {
    if (s.timings.n_generated == 0) {
      s.timings.prompt_ms = s.since_submit.millis();
      s.since_first.reset();
    }
    if (is_end(id, s)) {
      ev.finish = FinishReason::kStop;
      return false;
    }
    ev.tokens.push_back(make_token(id, logits, s.opt.logprobs, s.opt.n_probs));
    s.generated.push_back(id);
    advance_grammar(s, id);
    ++s.timings.n_generated;
    ++totals.generated_tokens;
    if (s.opt.max_tokens >= 0 && s.timings.n_generated >= s.opt.max_tokens) {
      ev.finish = FinishReason::kLength;
      return false;
    }
    if (grammar_finished(s)) {
      ev.finish = FinishReason::kStop;
      return false;
    }
    return true;
  }

  // After a slot's tokens of this step: when the request ended (or the context is full: its last token, at
  // position `next_pos`, takes the context's last place, so prompt and completion together hold n_ctx
  // tokens, as llama-server counts them), reports the tokens with the finish and frees the slot; returns
  // whether it did.
  bool report(Slot& s, SlotEvent& ev, bool alive, int64_t next_pos, std::vector<SlotEvent>& events) {
    if (alive && context_full(next_pos))
      ev.finish = FinishReason::kLength;
    else if (alive)
      return false;
    SlotEvent fin = finish(s, ev.finish);
    fin.tokens = std::move(ev.tokens);
    events.push_back(std::move(fin));
    return true;
  }

  // The prompt is in: samples the first token from `logits` and reports it.
  void start_generating(Slot& s, std::span<const float> logits, std::vector<SlotEvent>& events) {
    SlotEvent ev;
    ev.request_id = s.id;
    ev.slot = static_cast<int32_t>(&s - slots.data());
    s.state = SlotState::kGenerate;
    bool alive = s.opt.max_tokens != 0;
    if (alive) {
      Expected<int32_t> first = sample_token(s, logits);
      if (!first) {
        events.push_back(finish(s, FinishReason::kError, first.status().message()));
        return;
      }
      s.last = *first;
      alive = emit(s, s.last, logits, ev);
    } else {
      s.timings.prompt_ms = s.since_submit.millis();
      ev.finish = FinishReason::kLength;
    }
    if (report(s, ev, alive, memory.seq_pos(s.seq), events)) return;
    events.push_back(std::move(ev));
  }

  // Structured output (engine_grammar.cpp). start_grammar: at submit, the request's matcher (and the
  // vocabulary trie on first use). grammar_mask: the tokens allowed in matcher state `state` (end tokens
  // where the grammar may end), computed once a step per state. sample_token: the slot's sampler over the
  // logits with the tokens the grammar refuses at -infinity (an error when it allows none, or when the
  // matcher hits its limits). advance_grammar: the state after an emitted token. grammar_finished: nothing
  // more can follow.
  void prepare_grammar_vocab();
  Status start_grammar(Slot& s);
  Expected<std::span<const uint8_t>> grammar_mask(Slot& s, grammar::Matcher::StateId state);
  Expected<int32_t> sample_token(Slot& s, std::span<const float> logits);
  void advance_grammar(Slot& s, int32_t id);
  bool grammar_finished(const Slot& s) const;
  // The matcher's state after token `id` from `state`, with the trigger search at `watch` (advanced too):
  // unchanged while the trigger has not fired, the state after the bytes from the trigger on when it fires
  // in this token, kReject when the grammar refuses the token.
  Expected<grammar::Matcher::StateId> next_grammar_state(Slot& s, TriggerWatch& watch,
                                                         grammar::Matcher::StateId state, int32_t id);
  // Before a lazy grammar's trigger: the slot's sampler over the logits, drawn again without the tokens
  // that would fire the trigger with bytes the grammar refuses when it lands on one.
  Expected<int32_t> sample_before_trigger(Slot& s, std::span<const float> logits);
  // The drafter's view of the slot's grammar (nullptr without one): masks along the draft path from a copy
  // of the slot's state. Valid until the slot's next draft_constraint call.
  speculative::DraftConstraint* draft_constraint(Slot& s);
  // Sampled drafts: the chooser a request gets (null where drafts stay the head's argmax: greedy sampling,
  // a grammar, no drafting), and the verify of draft position i: the draft if the rejection test keeps it,
  // else a draw from what the target gives beyond the head.
  std::unique_ptr<speculative::DraftChooser> make_draft_chooser(Slot& s) const;
  Expected<int32_t> verify_sampled_draft(Slot& s, std::span<const float> logits, int64_t i);
  std::vector<double> q_dense;  // n_sample entries, zero outside a verify; the head's q at one position
  class GrammarDraftConstraint;
  // Cuts the slot's draft at its first token the grammar refuses after the ones before it (a drafter that
  // ignores the constraint): verification samples under the same mask, so that row and the rows after it
  // could only be rejected.
  void trim_draft_to_grammar(Slot& s);

  // Prefix cache (engine_cache.cpp).
  void restore_prefix(Slot& s);
  void plan_checkpoints(Slot& s);
  // The planned checkpoints inside the slot's prompt chunk of this step (its rows s.step.row0..): each
  // captures the state after its row as the forward pass computes it.
  void capture_checkpoints(Slot& s);
  void publish(Slot& s);

  // One step (engine_step.cpp): run_step calls the phases below in this order.
  Status run_step(std::vector<SlotEvent>& events, StepInfo& info);
  Status start_restored_prompts(std::vector<SlotEvent>& events);
  std::vector<int32_t> choose_draft_lengths(std::span<Slot* const> gen, int64_t prompt_left, StepInfo& info);
  Status draft(std::span<Slot* const> gen, std::span<const int32_t> k, StepInfo& info);
  // False when no row could be placed (then a waiting prompt was failed, or nothing runs).
  bool build_batch(std::span<Slot* const> gen, std::vector<SlotEvent>& events, StepInfo& info);
  Status run_trunk(std::span<Slot* const> gen, StepInfo& info);
  Status accept_and_roll_back(Slot& s, std::vector<SlotEvent>& events, StepInfo& info);
  Status advance_prompts(std::vector<SlotEvent>& events);
  // Rows row0..row0+n-1 of the last trunk pass's post-norm hiddens, [n, n_embd].
  std::span<const float> hidden_rows(int64_t row0, int64_t n) const;
};

}  // namespace mtp
