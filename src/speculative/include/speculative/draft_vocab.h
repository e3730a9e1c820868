// A vocabulary subset for the draft head: the MTP drafter computes logits only over these ids and
// drafts the argmax among them. Verification is unchanged, so output is exactly what it would be without the
// subset; only acceptance and draft cost move.
//
// The subset's rows of the head matrix are gathered once, at construction, into one compact matrix of the
// same quant type, so a draft step reads only those rows. Each logit is computed by the same kernel on the
// same row bytes as the full head, so a subset logit equals the full head's logit for that id bitwise.
//
// Subset file (`mtp draft-vocab build`): see draft_vocab.cpp for the exact layout; it is validated on read
// (magic, version, count, size, ids in range, no duplicates) with errors naming the file and the problem.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model.h"
#include "tokenizer/vocab.h"

namespace mtp::speculative {

inline constexpr uint32_t kDraftVocabFileVersion = 1;

// The content of a subset file.
struct DraftVocabFile {
  uint32_t version = kDraftVocabFileVersion;
  int64_t n_vocab = 0;       // the vocabulary size the ids were chosen for
  std::vector<int32_t> ids;  // rank order (most useful first), distinct, each < n_vocab
};

// Reads and validates a subset file on its own (no model): every structural check, ids against the file's
// own n_vocab. Errors (kCorrupt, kIo, kUnsupported for a newer version) start with the path.
Expected<DraftVocabFile> read_draft_vocab_file(const std::string& path);
// Reads and validates a subset file against a vocabulary of n_vocab ids: as above, and the file must have
// been built for exactly n_vocab ids (kInvalidArgument naming both sizes otherwise). The ids come back in
// file order (most frequent first).
Expected<std::vector<int32_t>> read_draft_vocab_file(const std::string& path, int64_t n_vocab);
// Writes ids (at least one, distinct, each in [0, n_vocab)) atomically (temp + rename); checks them first and
// writes nothing when they are invalid.
Status write_draft_vocab_file(const std::string& path, std::span<const int32_t> ids, int64_t n_vocab);

// The tokens a draft subset always holds, ascending: what chat needs the drafter to be able to propose.
//   * the EOS id (`tokenizer.ggml.eos_token_id`; <|im_end|> for Qwen);
//   * every control and user-defined token (TokenType kControl / kUserDefined): end of turn and end of text,
//     <think>/</think>, <tool_call>/</tool_call>, <tool_response>, ... (a few dozen in Qwen's vocabulary);
//   * the chat markers found by text whatever their type: <|im_end|>, <|endoftext|>, <|im_start|>, <think>,
//     </think>, <tool_call>, </tool_call>, <tool_response>, </tool_response>.
// A vocabulary with more than 1024 control and user-defined tokens (not a chat vocabulary this code knows)
// contributes only the EOS id and the named markers.
std::vector<int32_t> always_draft_ids(const Vocab& vocab);

// Ranks token ids for a subset file of `size` ids from observed counts (counts[id], counts.size() = n_vocab):
// `always` first (in the given order, duplicates dropped), then every id seen at least once by count
// (highest first, ties by lower id), then the unseen ids by increasing id (the merge order puts frequent
// tokens first), unused tokens (TokenType kUnused in `vocab`, when it has types) last. Errors: size < 1,
// size > n_vocab, size smaller than the number of distinct `always` ids, an `always` id out of range, or a
// vocab with tokens whose count differs from counts.size().
Expected<std::vector<int32_t>> rank_draft_ids(std::span<const uint64_t> counts, const Vocab& vocab,
                                              int64_t size, std::span<const int32_t> always);

class DraftVocab {
 public:
  // The subset: the first min(size, ranked.size()) of `ranked` (the file's ids, or 0, 1, 2, ... for "first
  // N"), plus every id of `always` (control tokens chat needs: end of turn, tool-call markers) not already in
  // it. The ids are then sorted ascending. The head is the MTP block's (model.weights().mtp->head). When the
  // subset is the whole vocabulary, the head is used in place (nothing is copied). Errors: size <= 0, a model
  // without an MTP block, a head type the kernels cannot multiply, `ranked` or `always` ids out of range,
  // duplicates in the part of `ranked` that is used.
  static Expected<DraftVocab> create(const Model& model, std::span<const int32_t> ranked, int64_t size,
                                     std::span<const int32_t> always);
  // ranked = 0, 1, 2, ...: the tokenizer's merge order puts frequent tokens first. size >= n_vocab gives the
  // whole vocabulary.
  static Expected<DraftVocab> first_n(const Model& model, int64_t size, std::span<const int32_t> always);

  DraftVocab(DraftVocab&&) noexcept;
  DraftVocab& operator=(DraftVocab&&) noexcept;
  ~DraftVocab();

  int64_t size() const;
  std::span<const int32_t> ids() const;  // ascending
  bool full() const;                     // the subset is the whole vocabulary
  bool contains(int32_t id) const;       // binary search over ids()
  // Logits over the subset for n_rows post-norm hiddens (h: n_rows x n_embd, finite): out[r * size() + i] is
  // the logit of ids()[i]. Not thread-safe (reuses one activation buffer).
  void logits(const float* h, int64_t n_rows, float* out, ThreadPool& pool);
  // The vocabulary id with the highest of one row of subset logits (size() values); ties go to the lowest id,
  // as greedy sampling over the full vocabulary does.
  int32_t argmax(std::span<const float> row) const;
  // Bytes of the matrix a draft step reads: the gathered rows, or the whole head when full().
  uint64_t bytes() const;

 private:
  DraftVocab();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtp::speculative
