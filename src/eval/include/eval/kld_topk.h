// A compact KL-divergence base file: per scored position only the base's top-k log-probabilities, the
// log-probability of the token that follows and the log of the mass outside the top k, for vocabularies where
// llama.cpp's full rows (kld_file.h) are too large: 127 MB per chunk of 512 at 248,320 tokens there, 133 KB
// here at k = 64. Ours only; llama.cpp does not read it.
//
// Layout, little-endian, no padding:
//   "_mtpkld_"                       8 bytes
//   uint32 version (1)
//   int32 n_ctx, int32 n_vocab, int32 n_chunk, int32 top_k
//   int32 tokens[n_chunk * n_ctx]    the evaluated text, chunk after chunk (as in the full file)
//   per chunk, per scored position p = n_ctx/2 .. n_ctx-2 (the logits at p predict the token at p+1), one
//   row of topk_row_words(top_k) = 2 + 2 * top_k 32-bit words:
//     float log p(next), float log(1 - sum of the top k's p) (-inf when nothing is left),
//     then top_k pairs {int32 token, float log p}, most likely first (ties: the lower id first).
//
// The KLD read from it is that of the two distributions coarse-grained to k + 1 outcomes (the base's top k
// tokens, and "any other token"), so by the log-sum inequality it is a lower bound of the exact KLD; the
// missing part is exactly (the base's mass outside its top k) x (the KLD between the two distributions
// renormalized over those other tokens). Same top token, PPL(base) and Δp are exact (to float).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/atomic_file.h"
#include "base/mapped_file.h"
#include "base/status.h"
#include "eval/kld_file.h"

namespace mtp::eval {

inline constexpr char kTopKMagic[8] = {'_', 'm', 't', 'p', 'k', 'l', 'd', '_'};
inline constexpr uint32_t kTopKVersion = 1;

// 32-bit words per row at `top_k`.
int64_t topk_row_words(int64_t top_k);

// Whether the file starts with the compact format's magic (else it may be llama.cpp's).
bool is_topk_base(const std::string& path);

// Encodes one position's logits (n_vocab floats) into `row` (topk_row_words(top_k) words); returns the
// negative log-likelihood of `next`, as encode_log_probs does.
double encode_top_k(std::span<const float> logits, int32_t next, int32_t top_k, std::span<uint32_t> row);

// One scored position against its compact row: the coarse-grained KLD (above), and the rest as exactly as the
// full file gives it.
TokenComparison compare_top_k(std::span<const float> logits, std::span<const uint32_t> row, int32_t next);

// The base's mass outside its top k at one row, exp of its second word.
double topk_rest_mass(std::span<const uint32_t> row);

// Writes a compact base: header and tokens at create(), then one chunk of rows at a time, through a
// temporary file renamed into place at commit().
class TopKBaseWriter {
 public:
  static Expected<TopKBaseWriter> create(const std::string& path, int32_t n_ctx, int32_t n_vocab,
                                         int32_t top_k, std::span<const int32_t> tokens);
  // kld_scored_per_chunk(n_ctx) rows of topk_row_words(top_k) words.
  Status write_chunk(std::span<const uint32_t> rows);
  Status commit() { return out_.commit(); }

 private:
  ChunkedBaseWriter out_;
};

// A compact base, mapped and validated at open(): the magic and version, the header's counts (1 <= top_k <=
// n_vocab), a size exactly what they imply, every token under n_vocab, and every row: finite
// log-probabilities at most 0 in descending order, distinct ids under n_vocab, a finite log p(next), and
// masses summing to 1 within 1e-3. Each failure is one line naming the file and, for a row, the chunk and
// position.
class TopKBaseFile {
 public:
  static Expected<TopKBaseFile> open(const std::string& path);

  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_vocab() const { return n_vocab_; }
  int32_t n_chunk() const { return n_chunk_; }
  int32_t top_k() const { return top_k_; }
  std::span<const int32_t> tokens() const { return tokens_; }
  // The rows of chunk c: kld_scored_per_chunk(n_ctx) x topk_row_words(top_k) words.
  std::span<const uint32_t> chunk_rows(int32_t c) const;
  const std::string& path() const { return map_.path(); }

 private:
  Status check_rows() const;

  MappedFile map_;
  int32_t n_ctx_ = 0, n_vocab_ = 0, n_chunk_ = 0, top_k_ = 0;
  std::vector<int32_t> tokens_;
  const uint32_t* rows_ = nullptr;  // into the map: the rows start at 28 + 4 * tokens bytes, 4-byte aligned
};

}  // namespace mtp::eval
