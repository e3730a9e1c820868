// Drafters for speculative decoding (docs/architecture.md section 4, docs/model.md sections 4-6).
//
// A drafter proposes up to n_max tokens that follow a sequence's last sampled token; the engine verifies
// them in one trunk batch and keeps the prefix the target agrees with. The interface keeps the MTP head
// replaceable: tests use a scripted drafter to force every acceptance length.
//
// Per sequence and step, the engine calls, in this order:
//   draft(tasks)        for the sequences that draft this step (all of them in one call, so a drafter can
//                       batch its work across sequences);
//   observe(seq, ...)   after every trunk batch of the sequence (prompt chunks and verify rows alike), with
//                       the rows that were kept after acceptance and their post-norm hiddens.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/option_range.h"
#include "base/status.h"

namespace mtp::speculative {

// How much to draft (docs/model.md section 4.5; the defaults are llama.cpp's).
struct DraftParams {
  int32_t n_max = 3;   // draft at most this many tokens; 0 = no drafting
  int32_t n_min = 0;   // a draft shorter than this is dropped
  float p_min = 0.0f;  // stop drafting when the top candidate's probability (over the top 10) is below this
  bool subset = true;  // draft over the drafter's vocabulary subset when it has one (false: the full head)
  // When the request samples (temperature > 0): draft by sampling the head's distribution, and the engine
  // keeps drafts by rejection sampling (more drafts kept, the same target distribution; seeded output is no
  // longer the same as without drafting). False: the head's argmax, kept when the target's draw equals it.
  bool sample = false;
};

// The ranges of DraftParams (the engine's options, each request's "speculative" override and the command
// lines' --draft-* flags): n_max in [0, kMaxDraftTokens], n_min in [0, n_max] when drafting, p_min in
// kDraftPMin. kMaxDraftTokens bounds the rollback snapshots a sequence keeps.
inline constexpr int32_t kMaxDraftTokens = 16;
inline constexpr OptionRange kDraftPMin{0, 1};
Status check_draft_params(const DraftParams& p);

// Structured output's hold on a draft: which tokens may stand at each draft position, given the tokens
// drafted before it. The engine implements it over the request's grammar (a copy of the grammar's state,
// advanced along the draft); here it is only a mask, so this layer knows nothing of grammars.
class DraftConstraint {
 public:
  virtual ~DraftConstraint() = default;
  // The tokens allowed at the draft position that follows `drafted` (this draft's tokens so far, after the
  // task's last_token): allowed[id] != 0, one entry per vocabulary id. Empty: no token may follow, so the
  // draft stops. The span stays valid until the next call.
  virtual std::span<const uint8_t> allowed(std::span<const int32_t> drafted) = 0;
  // Every token may stand at the position after `drafted`, so allowed() need not be asked (a lazy grammar
  // whose trigger has not appeared yet).
  virtual bool allows_all(std::span<const int32_t> /*drafted*/) { return false; }
};

// Where drafts are sampled (DraftParams::sample): picks the token at each draft position from the head's
// logits and remembers the distribution it drew from, for the engine's rejection test. The engine implements
// it with the request's sampler settings.
class DraftChooser {
 public:
  virtual ~DraftChooser() = default;
  // `logits[i]` is token ids[i] (token i when ids is empty), refused tokens at -infinity; `position` counts
  // the draft's tokens before this one. Returns an index into logits.
  virtual int32_t choose(std::span<const float> logits, std::span<const int32_t> ids, size_t position) = 0;
};

// One sequence's request for a draft this step.
struct DraftTask {
  int32_t seq = 0;
  int32_t last_token = 0;  // the last sampled token, at position `pos`, not yet in the trunk
  int64_t pos = 0;
  DraftParams params;  // params.n_max > 0
  // Optional (not owned): a drafter that honours it drafts only allowed tokens, its head's choice taken
  // among them; one that does not leaves the engine to cut the draft at the first refused token.
  DraftConstraint* constraint = nullptr;
  // Optional (not owned): picks each draft token in place of the head's argmax.
  DraftChooser* chooser = nullptr;
  std::vector<int32_t> draft;  // out: 0..n_max tokens for positions pos+1, pos+2, ...
};

// One forward pass of a draft() call, for the policy's cost model: its rows (one per sequence still drafting,
// plus, in the first pass, the catch-up rows that ride with it) and its wall time.
struct DraftPass {
  int64_t rows = 0;
  double seconds = 0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string_view name() const = 0;

  // The sequence starts empty (a new request in the slot) and will draft (track = true), or will never
  // draft, so the drafter need not follow it (track = false).
  virtual void begin(int32_t seq, bool track) = 0;
  // After a trunk batch of `seq`: the kept rows are tokens[i] at position pos0 + i, with their post-norm
  // hiddens (tokens.size() x n_embd, row order). Rows rejected by verification are not passed. May run
  // drafter work (an MTP catch-up pass); fails only on an engine error.
  virtual Status observe(int32_t seq, int64_t pos0, std::span<const int32_t> tokens,
                         std::span<const float> hidden) = 0;
  // The sequence, just begun, continues a cached prefix of `pos` tokens (the prefix cache restored its
  // state, the MTP rows included); `hidden` is the trunk's post-norm hidden of token pos-1.
  virtual void resume(int32_t seq, int64_t pos, std::span<const float> hidden) {
    (void)seq, (void)pos, (void)hidden;
  }
  // Before the sequence's state is published to the prefix cache: brings the memory's MTP rows up to date
  // when at most `max_rows` catch-up rows are pending (more are left undone: a stretch without drafting is
  // not paid for at the end of a request), and returns the position before which they are exact rows of the
  // observed history (0: none are).
  virtual Expected<int64_t> settle(int32_t seq, int64_t max_rows) {
    (void)seq, (void)max_rows;
    return int64_t{0};
  }
  // Fills task.draft for every task. Fails only on an engine error (the sequence's state is then unusable).
  virtual Status draft(std::span<DraftTask> tasks) = 0;

  // The passes of the last draft() call; empty for a drafter without passes of its own.
  virtual std::span<const DraftPass> last_passes() const { return {}; }
  // Rows the drafter will run for `seq` before its next draft row (deferred catch-up); 0 when it keeps none.
  virtual int64_t pending_rows(int32_t seq) const {
    (void)seq;
    return 0;
  }
};

}  // namespace mtp::speculative
