// Speculative-decoding statistics with llama.cpp's definitions (docs/model.md section 6.2), per sequence and
// in total:
//   rounds       verification rounds that had a draft (llama.cpp's n_call_accept)
//   drafted      drafted tokens, accepted  accepted draft tokens
//   mean acc len = 1 + accepted / rounds (tokens emitted per verification round)
//   acc rate/pos i = (rounds with >= i accepted drafts) / rounds, non-increasing in i.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mtp::speculative {

struct SpecStats {
  int64_t rounds = 0;
  int64_t drafted = 0;
  int64_t accepted = 0;
  // accepted_at[i] = rounds with >= i+1 accepted drafts; drafted_at[i] = rounds that drafted >= i+1 tokens.
  std::vector<int64_t> accepted_at;
  std::vector<int64_t> drafted_at;

  // One verification round that had `n_drafted` > 0 tokens of which the first `n_accepted` were accepted.
  void add_round(int64_t n_drafted, int64_t n_accepted);
  void merge(const SpecStats& other);

  double mean_acc_len() const;  // 1 when there were no rounds
  // (rounds with >= i+1 accepted) / rounds for i < positions drafted; empty without rounds.
  std::vector<double> acc_rate_per_pos() const;
  // accepted / drafted at position i+1 among the rounds that drafted it (conditional acceptance).
  std::vector<double> acc_rate_given_drafted() const;

  // "#gen tokens = D, #acc tokens = A, #mean acc len = X, #acc rate/pos = (r1, r2, ...)" as llama.cpp prints.
  std::string summary() const;
};

}  // namespace mtp::speculative
