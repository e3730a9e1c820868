// A batch of rows for the batched forward pass (model/forward.h; docs/architecture.md section 3): rows {seq,
// pos, token} from any number of sequences, e.g. prompt chunks, single decode rows and verify rows [last,
// d1..dn] in one batch. Rows of one sequence must have consecutive positions in batch order (they need not be
// adjacent in the batch); a row sees its sequence's cached positions and the earlier rows of its sequence in
// this batch (causal).
//
// Outputs: the post-norm hidden of every row (the MTP head needs all of them, docs/model.md section 4.4) and
// the logits of the rows that asked for them, packed in batch order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mtp {

struct BatchRow {
  int32_t seq = 0;
  int64_t pos = 0;
  int32_t token = 0;
  bool logits = false;  // compute this row's logits
  // Trunk rows: when set, the recurrent state after this row is also written here, laid out as a GdnState
  // (Memory::state_floats() floats), as the delta rule computes it: a prefix-cache checkpoint inside a
  // prompt chunk, with no chunk split and no extra copy.
  float* capture = nullptr;
};

struct Batch {
  std::vector<BatchRow> rows;
  // MTP batches only: the h_prev of each row, rows.size() x n_embd (section 4.1: the trunk's post-norm hidden
  // of pos-1, or the previous draft step's h_mtp). Empty for trunk batches.
  std::vector<float> h_prev;

  void clear() {
    rows.clear();
    h_prev.clear();
  }
  void add(int32_t seq, int64_t pos, int32_t token, bool logits) {
    rows.push_back({seq, pos, token, logits});
  }
  // An MTP row with its h_prev (n_embd values).
  void add_mtp(int32_t seq, int64_t pos, int32_t token, std::span<const float> h, bool logits) {
    rows.push_back({seq, pos, token, logits});
    h_prev.insert(h_prev.end(), h.begin(), h.end());
  }
  int64_t size() const { return static_cast<int64_t>(rows.size()); }
};

struct Outputs {
  int64_t n_embd = 0;
  int64_t n_vocab = 0;
  std::vector<float> hidden;          // rows x n_embd: h_final (trunk) or h_mtp (MTP) of every row
  std::vector<float> logits;          // (rows that asked) x n_vocab, in batch order
  std::vector<int32_t> logits_index;  // per batch row: its row in `logits`, or -1

  std::span<const float> hidden_of(int64_t row) const {
    return {hidden.data() + row * n_embd, static_cast<size_t>(n_embd)};
  }
  // Empty when the row did not ask for logits.
  std::span<const float> logits_of(int64_t row) const {
    const int32_t i = logits_index[static_cast<size_t>(row)];
    if (i < 0) return {};
    return {logits.data() + static_cast<int64_t>(i) * n_vocab, static_cast<size_t>(n_vocab)};
  }
};

}  // namespace mtp
