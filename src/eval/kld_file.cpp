// llama.cpp's KL-divergence base file: the row encoding, the per-position comparison, and the file's writer
// and validating reader. The float arithmetic follows tools/perplexity/perplexity.cpp step by step (float
// where it uses float, double where it uses double), so our numbers and llama.cpp's agree to the last bit
// where the two use the same expf.
#include "eval/kld_file.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/check.h"

namespace mtp::eval {
namespace {

static_assert(std::endian::native == std::endian::little, "the base file is little-endian");

constexpr int64_t kKldHeaderBytes = 8 + 3 * 4;  // magic, n_ctx, n_vocab, n_chunk
constexpr float kLogProbFloor = -16.0f;         // nats under the top logit a row keeps

// ln sum_i exp(logits[i] - max), summed in double as llama.cpp does.
float log_sum_exp(std::span<const float> logits, float max_logit) {
  double sum_exp = 0.0;
  for (const float l : logits) sum_exp += std::exp(l - max_logit);
  return static_cast<float>(std::log(sum_exp));
}

void store_float(uint16_t* words, float v) {
  std::memcpy(words, &v, sizeof v);
}
float load_float(const uint16_t* words) {
  float v;
  std::memcpy(&v, words, sizeof v);
  return v;
}

}  // namespace

int64_t kld_row_words(int64_t n_vocab) {
  return 2 * ((n_vocab + 1) / 2) + 4;
}

int64_t kld_scored_per_chunk(int64_t n_ctx) {
  return n_ctx - 1 - n_ctx / 2;
}

double encode_log_probs(std::span<const float> logits, int32_t next, std::span<uint16_t> row) {
  const int64_t n_vocab = static_cast<int64_t>(logits.size());
  MTP_CHECK(n_vocab > 0 && static_cast<int64_t>(row.size()) == kld_row_words(n_vocab));
  MTP_CHECK(next >= 0 && next < n_vocab);
  const auto [lo, hi] = std::minmax_element(logits.begin(), logits.end());
  const float max_logit = *hi;
  const float min_logit = std::max(*lo, max_logit - 16);
  const float lse = log_sum_exp(logits, max_logit);
  const float min_log_prob = min_logit - max_logit - lse;
  const float scale = (max_logit - min_logit) / 65535.f;
  store_float(row.data(), scale);
  store_float(row.data() + 2, min_log_prob);
  uint16_t* q = row.data() + 4;
  std::fill(q, row.data() + row.size(), uint16_t{0});
  if (scale != 0) {
    const float inv_scale = 1 / scale;
    for (int64_t i = 0; i < n_vocab; ++i) {
      // Round half to even, as ggml's nearest_int does under the default rounding mode; through int, so that
      // a rounding just past 65535 wraps as llama.cpp's int-to-uint16 store does instead of being undefined.
      if (logits[i] > min_logit) {
        const int code = static_cast<int>(std::nearbyint(inv_scale * (logits[i] - min_logit)));
        q[i] = static_cast<uint16_t>(code);
      }
    }
  }
  return max_logit + lse - logits[static_cast<size_t>(next)];
}

TokenComparison compare_log_probs(std::span<const float> logits, std::span<const uint16_t> base_row,
                                  int32_t next) {
  const int64_t n_vocab = static_cast<int64_t>(logits.size());
  MTP_CHECK(n_vocab > 0 && static_cast<int64_t>(base_row.size()) == kld_row_words(n_vocab));
  MTP_CHECK(next >= 0 && next < n_vocab);
  const int64_t top = std::max_element(logits.begin(), logits.end()) - logits.begin();  // first maximum
  float max_logit = logits[static_cast<size_t>(top)];
  const float lse = log_sum_exp(logits, max_logit);
  const float scale = load_float(base_row.data());
  const float min_log_prob = load_float(base_row.data() + 2);
  const uint16_t* q = base_row.data() + 4;

  TokenComparison t;
  const float nll = max_logit + lse - logits[static_cast<size_t>(next)];
  const float nll_base = -(scale * q[next] + min_log_prob);
  t.nll = nll;
  t.nll_base = nll_base;
  max_logit += lse;  // now log p(i) = logits[i] - max_logit
  double sum = 0;
  int64_t top_base = 0;
  float top_base_log_p = 0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const float log_p_base = scale * q[i] + min_log_prob;
    if (i == 0 || log_p_base > top_base_log_p) {
      top_base_log_p = log_p_base;
      top_base = i;
    }
    if (log_p_base > kLogProbFloor) {
      const float p_base = std::exp(log_p_base);
      sum += p_base * (log_p_base - logits[static_cast<size_t>(i)] + max_logit);
    }
  }
  t.kld = sum;
  t.same_top = top == top_base;
  t.p_diff = std::exp(-nll) - std::exp(-nll_base);
  return t;
}

std::vector<double> decode_log_probs(std::span<const uint16_t> row, int64_t n_vocab) {
  MTP_CHECK(static_cast<int64_t>(row.size()) == kld_row_words(n_vocab));
  const float scale = load_float(row.data()), min_log_prob = load_float(row.data() + 2);
  std::vector<double> out(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) out[static_cast<size_t>(i)] = scale * row[4 + i] + min_log_prob;
  return out;
}

Expected<ChunkedBaseWriter> ChunkedBaseWriter::create(const std::string& path,
                                                      std::span<const uint8_t> header,
                                                      std::span<const int32_t> tokens, int64_t n_chunk,
                                                      int64_t chunk_bytes) {
  ChunkedBaseWriter w;
  MTP_ASSIGN_OR_RETURN(w.file_, AtomicFile::create(path));
  MTP_RETURN_IF_ERROR(w.file_.write(header));
  MTP_RETURN_IF_ERROR(w.file_.write({reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size_bytes()}));
  w.chunk_bytes_ = chunk_bytes;
  w.chunks_left_ = n_chunk;
  return w;
}

Status ChunkedBaseWriter::write_chunk(std::span<const uint8_t> rows) {
  MTP_CHECK(chunks_left_ > 0 && static_cast<int64_t>(rows.size()) == chunk_bytes_);
  --chunks_left_;
  return file_.write(rows);
}

Status ChunkedBaseWriter::commit() {
  MTP_CHECK(chunks_left_ == 0);
  return file_.commit();
}

Expected<KldBaseWriter> KldBaseWriter::create(const std::string& path, int32_t n_ctx, int32_t n_vocab,
                                              std::span<const int32_t> tokens) {
  MTP_CHECK(n_ctx >= 3 && n_vocab > 0 && !tokens.empty() && tokens.size() % static_cast<size_t>(n_ctx) == 0);
  const int32_t n_chunk = static_cast<int32_t>(tokens.size() / static_cast<size_t>(n_ctx));
  uint8_t header[kKldHeaderBytes];
  const int32_t counts[3] = {n_ctx, n_vocab, n_chunk};
  std::memcpy(header, kKldMagic, sizeof kKldMagic);
  std::memcpy(header + sizeof kKldMagic, counts, sizeof counts);
  KldBaseWriter w;
  MTP_ASSIGN_OR_RETURN(w.out_,
                       ChunkedBaseWriter::create(path, header, tokens, n_chunk,
                                                 kld_scored_per_chunk(n_ctx) * kld_row_words(n_vocab) * 2));
  return w;
}

Status KldBaseWriter::write_chunk(std::span<const uint16_t> rows) {
  return out_.write_chunk({reinterpret_cast<const uint8_t*>(rows.data()), rows.size_bytes()});
}

Expected<KldBaseFile> KldBaseFile::open(const std::string& path) {
  KldBaseFile f;
  MTP_ASSIGN_OR_RETURN(f.map_, MappedFile::open(path));
  const uint8_t* p = f.map_.data();
  const int64_t size = static_cast<int64_t>(f.map_.size());
  if (size < kKldHeaderBytes || std::memcmp(p, kKldMagic, sizeof kKldMagic) != 0) {
    return corrupt(path,
                   ": not a KL-divergence base file (no \"_logits_\" header; llama-perplexity "
                   "--kl-divergence-base or mtp perplexity --kl-divergence-base writes one)");
  }
  int32_t header[3];
  std::memcpy(header, p + 8, sizeof header);
  f.n_ctx_ = header[0];
  f.n_vocab_ = header[1];
  f.n_chunk_ = header[2];
  if (f.n_ctx_ < 3 || f.n_vocab_ < 1 || f.n_chunk_ < 1) {
    return corrupt(path, ": bad header: n_ctx ", f.n_ctx_, ", n_vocab ", f.n_vocab_, ", n_chunk ", f.n_chunk_,
                   " (needs n_ctx >= 3 and positive counts)");
  }
  const auto n_tokens = static_cast<unsigned __int128>(f.n_ctx_) * static_cast<unsigned>(f.n_chunk_);
  const auto expected = kKldHeaderBytes + 4 * n_tokens +
                        2 * n_tokens / static_cast<unsigned>(f.n_ctx_) *
                            static_cast<unsigned __int128>(kld_scored_per_chunk(f.n_ctx_)) *
                            static_cast<unsigned __int128>(kld_row_words(f.n_vocab_));
  if (expected != static_cast<unsigned __int128>(size)) {
    const uint64_t need = expected > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(expected);
    return corrupt(path, ": ", size, " bytes, but its header (n_ctx ", f.n_ctx_, ", n_vocab ", f.n_vocab_,
                   ", n_chunk ", f.n_chunk_, ") needs ", need,
                   static_cast<uint64_t>(size) < need ? " (truncated)" : " (trailing bytes)");
  }
  f.tokens_.resize(static_cast<size_t>(n_tokens));
  std::memcpy(f.tokens_.data(), p + kKldHeaderBytes, f.tokens_.size() * sizeof(int32_t));
  for (size_t i = 0; i < f.tokens_.size(); ++i) {
    if (f.tokens_[i] < 0 || f.tokens_[i] >= f.n_vocab_)
      return corrupt(path, ": token ", i, " is ", f.tokens_[i], ", outside the vocabulary of ", f.n_vocab_);
  }
  f.rows_ = reinterpret_cast<const uint16_t*>(p + kKldHeaderBytes + 4 * static_cast<int64_t>(n_tokens));
  return f;
}

std::span<const uint16_t> KldBaseFile::chunk_rows(int32_t c) const {
  MTP_CHECK(c >= 0 && c < n_chunk_);
  const int64_t words = kld_scored_per_chunk(n_ctx_) * kld_row_words(n_vocab_);
  return {rows_ + c * words, static_cast<size_t>(words)};
}

}  // namespace mtp::eval
