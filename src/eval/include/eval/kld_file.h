// llama.cpp's KL-divergence base file (`llama-perplexity --kl-divergence-base FILE`), read and written byte
// for byte as tools/perplexity/perplexity.cpp does, so a file from either tool works with the other.
//
// Layout, little-endian, no padding:
//   "_logits_"                       8 bytes
//   int32 n_ctx, int32 n_vocab, int32 n_chunk
//   int32 tokens[n_chunk * n_ctx]    the evaluated text, chunk after chunk (before any BOS substitution)
//   per chunk, per scored position p = n_ctx/2 .. n_ctx-2 (the logits at p predict the token at p+1):
//     one row of row_words(n_vocab) = 2*((n_vocab+1)/2) + 4 uint16:
//       float scale, float min_log_prob (the first 4 words), then n_vocab words q[i], then padding to even:
//       log p(i) = scale * q[i] + min_log_prob. The row spans the 16 nats under the top logit (or the full
//       range when that is narrower) in 65535 steps; logits below it store 0, i.e. they read back as the
//       floor, and readers skip every log p <= -16 when summing the KLD.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/atomic_file.h"
#include "base/mapped_file.h"
#include "base/status.h"

namespace mtp::eval {

inline constexpr char kKldMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

// uint16 words per row for a vocabulary of n_vocab.
int64_t kld_row_words(int64_t n_vocab);
// Rows per chunk: the scored positions n_ctx/2 .. n_ctx-2.
int64_t kld_scored_per_chunk(int64_t n_ctx);

// Encodes one position's logits into `row` (kld_row_words(logits.size()) words) as llama.cpp does, and
// returns the negative log-likelihood of `next` computed from the float logits (max + ln sum exp - logit).
double encode_log_probs(std::span<const float> logits, int32_t next, std::span<uint16_t> row);

// One scored position compared with its base row, as llama.cpp computes it.
struct TokenComparison {
  double kld = 0;       // sum over base log p > -16 of p_base * (log p_base - log p)
  double nll = 0;       // -log p(next) from the logits
  double nll_base = 0;  // -log p_base(next) from the row
  float p_diff = 0;     // p(next) - p_base(next)
  bool same_top = false;
};
TokenComparison compare_log_probs(std::span<const float> logits, std::span<const uint16_t> base_row,
                                  int32_t next);

// The decoded log-probabilities of a row (n_vocab of them), for tests and direct computations.
std::vector<double> decode_log_probs(std::span<const uint16_t> row, int64_t n_vocab);

// The writing both base formats share (this file's and kld_topk.h's): their header bytes and the tokens at
// create(), then n_chunk chunks of chunk_bytes each, through a temporary file renamed into place at commit().
class ChunkedBaseWriter {
 public:
  static Expected<ChunkedBaseWriter> create(const std::string& path, std::span<const uint8_t> header,
                                            std::span<const int32_t> tokens, int64_t n_chunk,
                                            int64_t chunk_bytes);
  Status write_chunk(std::span<const uint8_t> rows);  // chunk_bytes bytes
  Status commit();                                    // after the n_chunk-th chunk

 private:
  AtomicFile file_;
  int64_t chunk_bytes_ = 0;
  int64_t chunks_left_ = 0;
};

// Writes a base file: the header and tokens at create(), then one chunk of rows at a time, through a
// temporary file renamed into place at commit().
class KldBaseWriter {
 public:
  static Expected<KldBaseWriter> create(const std::string& path, int32_t n_ctx, int32_t n_vocab,
                                        std::span<const int32_t> tokens);
  // kld_scored_per_chunk(n_ctx) rows of kld_row_words(n_vocab) words.
  Status write_chunk(std::span<const uint16_t> rows);
  Status commit() { return out_.commit(); }

 private:
  ChunkedBaseWriter out_;
};

// A base file, mapped and validated at open(): the magic, positive sizes, a size that is exactly the header,
// tokens and rows they imply, and every token id under n_vocab. Each failure is one line naming the file.
class KldBaseFile {
 public:
  static Expected<KldBaseFile> open(const std::string& path);

  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_vocab() const { return n_vocab_; }
  int32_t n_chunk() const { return n_chunk_; }
  std::span<const int32_t> tokens() const { return tokens_; }
  // The rows of chunk c: kld_scored_per_chunk(n_ctx) x kld_row_words(n_vocab) words.
  std::span<const uint16_t> chunk_rows(int32_t c) const;
  const std::string& path() const { return map_.path(); }

 private:
  MappedFile map_;
  int32_t n_ctx_ = 0, n_vocab_ = 0, n_chunk_ = 0;
  std::vector<int32_t> tokens_;
  const uint16_t* rows_ = nullptr;  // into the map: the rows start at 20 + 4 * tokens bytes, 4-byte aligned
};

}  // namespace mtp::eval
