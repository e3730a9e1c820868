// The MTP drafter (docs/model.md sections 4.4-4.5 and 5.4): drafts with the model's NextN block, batched over
// all drafting sequences (draft position i of every sequence is one forward_mtp pass), and keeps the MTP KV
// in step with the trunk.
//
// Catch-up rows are deferred: observe() only records the pairs (token x_p at p, trunk hidden H[p-1]) that the
// MTP KV still lacks, and the next draft() runs them in the same pass as the first draft row. A slot that
// does not draft (throttled, or drafting off for its request) therefore costs nothing; when it drafts again,
// its backlog goes through as one batched pass. Draft rows past the seed row are scratch: the next pass drops
// them (forward_mtp drops the sequence's MTP rows at >= its first row's position).
//
// A task with a DraftConstraint drafts the head's most likely allowed token at each position (its p_min
// confidence is over the allowed tokens too), and stops where nothing it can propose is allowed.
#pragma once

#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "model/batch.h"
#include "model/memory.h"
#include "model/model.h"
#include "speculative/draft_vocab.h"
#include "speculative/drafter.h"

namespace mtp::speculative {

class MtpDrafter final : public Drafter {
 public:
  // `model` must have an MTP block and `memory` must keep MTP KV; both must outlive the drafter. `vocab`
  // (optional, owned by the caller) restricts the draft head to a subset of ids.
  static Expected<std::unique_ptr<MtpDrafter>> create(const Model& model, Memory& memory, ThreadPool& pool,
                                                      DraftVocab* vocab = nullptr);

  std::string_view name() const override { return "draft-mtp"; }
  void begin(int32_t seq, bool track) override;
  Status observe(int32_t seq, int64_t pos0, std::span<const int32_t> tokens,
                 std::span<const float> hidden) override;
  Status draft(std::span<DraftTask> tasks) override;
  void resume(int32_t seq, int64_t pos, std::span<const float> hidden) override;
  Expected<int64_t> settle(int32_t seq, int64_t max_rows) override;

  // Runs the sequence's pending catch-up rows now, so the MTP KV holds every pair up to the last observed
  // row (tests compare it with plain decoding).
  Status sync(int32_t seq);
  // Catch-up rows waiting for the next pass.
  int64_t pending_rows(int32_t seq) const override;
  std::span<const DraftPass> last_passes() const override { return passes_; }

 private:
  MtpDrafter(const Model& model, Memory& memory, ThreadPool& pool, DraftVocab* vocab);

  struct SeqState {
    bool track = false;
    std::vector<int32_t> tokens;  // pending catch-up rows: token at pos_begin + i with h_prev row i
    std::vector<float> h_prev;
    int64_t pos_begin = 0;
    std::vector<float> last_h;  // H of the last observed row (h_prev of the next row); empty at start
    int64_t next_pos = 0;       // position after the last observed row
    // The last draft's seed row (last token at seed_pos with h_prev = last_h) is a valid catch-up row: the
    // next observe() need not run it again.
    int64_t seed_pos = -1;
    int32_t seed_token = -1;
  };
  bool uses_subset(const DraftTask& t) const { return vocab_ != nullptr && t.params.subset; }
  // Appends seq's catch-up rows to batch_ and forgets them.
  void add_catch_up(int32_t seq);
  // Catch-up rows beyond this many are run at observe() time: bounds the memory a long prompt needs
  // (n_embd floats a row: 32 MiB at 35B-A3B widths) while short requests that never draft pay nothing.
  static constexpr int64_t kMaxPending = 4096;

  const Model& model_;
  Memory& memory_;
  ThreadPool& pool_;
  DraftVocab* vocab_;
  std::vector<SeqState> seqs_;
  Batch batch_;
  Outputs out_;
  std::vector<float> sub_h_, sub_logits_;  // subset head: hiddens in, logits out
  std::vector<float> masked_;              // one row's logits under its task's constraint
  std::vector<DraftPass> passes_;          // of the last draft() call
};

// A drafter for tests: proposes tokens from a per-sequence script (script[p] = the token to propose for
// position p), optionally corrupted so that every acceptance length can be forced: the k-th draft() call for
// a sequence replaces the draft's token at index wrong[k % wrong.size()] (if >= 0) by (token + 1) mod
// n_vocab, so at most that many drafts are accepted in that round.
class ScriptedDrafter final : public Drafter {
 public:
  std::string_view name() const override { return "scripted"; }
  void set_script(int32_t seq, std::vector<int32_t> script, int32_t n_vocab);
  void set_wrong(int32_t seq, std::vector<int32_t> wrong);
  void begin(int32_t, bool) override {}
  Status observe(int32_t, int64_t, std::span<const int32_t>, std::span<const float>) override {
    return Status::Ok();
  }
  Status draft(std::span<DraftTask> tasks) override;

 private:
  struct Script {
    std::vector<int32_t> tokens;
    int32_t n_vocab = 0;
    std::vector<int32_t> wrong;
    size_t calls = 0;
  };
  Script& script(int32_t seq);
  std::vector<Script> scripts_;
};

}  // namespace mtp::speculative
