// The compact top-k KL-divergence base file (kld_topk.h): the row encoding, the coarse-grained comparison,
// and the file's writer and validating reader.
#include "eval/kld_topk.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>

#include "base/check.h"

namespace mtp::eval {
namespace {

static_assert(std::endian::native == std::endian::little, "the base file is little-endian");

constexpr int64_t kTopKHeaderBytes = 8 + 4 + 4 * 4;  // magic, version, n_ctx, n_vocab, n_chunk, top_k
constexpr double kMassTolerance = 1e-3;              // how far a row's masses may sum from 1

float load_float(const uint32_t* w) {
  return std::bit_cast<float>(*w);
}
uint32_t float_word(float v) {
  return std::bit_cast<uint32_t>(v);
}
int32_t load_id(const uint32_t* w) {
  return std::bit_cast<int32_t>(*w);
}

// max logit and ln sum exp(logit - max), in double.
std::pair<double, double> softmax_norm(std::span<const float> logits) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  return {mx, std::log(sum)};
}

// Sum of exp(logit - mx) over the tokens not in `sorted_ids` (ascending), without cancellation.
double sum_outside(std::span<const float> logits, const std::vector<int32_t>& sorted_ids, double mx) {
  double sum = 0;
  size_t next_id = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (next_id < sorted_ids.size() && static_cast<size_t>(sorted_ids[next_id]) == i) {
      ++next_id;
      continue;
    }
    sum += std::exp(static_cast<double>(logits[i]) - mx);
  }
  return sum;
}

}  // namespace

int64_t topk_row_words(int64_t top_k) {
  return 2 + 2 * top_k;
}

bool is_topk_base(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[sizeof kTopKMagic] = {};
  return f.read(magic, sizeof magic) && std::memcmp(magic, kTopKMagic, sizeof magic) == 0;
}

double encode_top_k(std::span<const float> logits, int32_t next, int32_t top_k, std::span<uint32_t> row) {
  const int64_t n_vocab = static_cast<int64_t>(logits.size());
  MTP_CHECK(top_k >= 1 && top_k <= n_vocab && static_cast<int64_t>(row.size()) == topk_row_words(top_k));
  MTP_CHECK(next >= 0 && next < n_vocab);
  const auto [mx, lse] = softmax_norm(logits);
  std::vector<int32_t> order(static_cast<size_t>(n_vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  });
  double rest = 0;  // the tokens after the top k, summed directly: no cancellation when little is left
  for (size_t i = static_cast<size_t>(top_k); i < order.size(); ++i)
    rest += std::exp(static_cast<double>(logits[static_cast<size_t>(order[i])]) - mx);
  const double nll = mx + lse - logits[static_cast<size_t>(next)];
  row[0] = float_word(static_cast<float>(-nll));
  row[1] = float_word(rest > 0 ? static_cast<float>(std::log(rest) - lse)
                               : -std::numeric_limits<float>::infinity());
  for (int32_t j = 0; j < top_k; ++j) {
    const int32_t id = order[static_cast<size_t>(j)];
    row[static_cast<size_t>(2 + 2 * j)] = std::bit_cast<uint32_t>(id);
    row[static_cast<size_t>(3 + 2 * j)] =
        float_word(static_cast<float>(logits[static_cast<size_t>(id)] - mx - lse));
  }
  return nll;
}

double topk_rest_mass(std::span<const uint32_t> row) {
  MTP_CHECK(row.size() >= 2);
  return std::exp(static_cast<double>(load_float(row.data() + 1)));
}

TokenComparison compare_top_k(std::span<const float> logits, std::span<const uint32_t> row, int32_t next) {
  const int64_t n_vocab = static_cast<int64_t>(logits.size());
  MTP_CHECK(n_vocab > 0 && row.size() >= 4 && row.size() % 2 == 0);
  MTP_CHECK(next >= 0 && next < n_vocab);
  const int64_t top_k = static_cast<int64_t>(row.size() / 2 - 1);
  const auto [mx, lse] = softmax_norm(logits);
  TokenComparison t;
  t.nll = mx + lse - logits[static_cast<size_t>(next)];
  t.nll_base = -static_cast<double>(load_float(row.data()));
  const int64_t top = std::max_element(logits.begin(), logits.end()) - logits.begin();  // first maximum
  t.same_top = top == load_id(row.data() + 2);
  // KL of the coarse-grained distributions: the top k's own terms, then the "other" outcome's.
  double kld = 0;
  std::vector<int32_t> ids(static_cast<size_t>(top_k));
  for (int64_t j = 0; j < top_k; ++j) {
    const int32_t id = load_id(row.data() + 2 + 2 * j);
    MTP_CHECK(id >= 0 && id < n_vocab);  // the reader checked every row
    ids[static_cast<size_t>(j)] = id;
    const double log_p = load_float(row.data() + 3 + 2 * j);
    kld += std::exp(log_p) * (log_p - (logits[static_cast<size_t>(id)] - mx - lse));
  }
  const double log_rest = load_float(row.data() + 1);
  if (std::isfinite(log_rest)) {
    std::sort(ids.begin(), ids.end());
    const double outside = sum_outside(logits, ids, mx);
    // The model giving the other tokens nothing at all would make the KLD infinite; the smallest double keeps
    // it finite and enormous, as a float logit of -inf cannot occur anyway.
    const double log_rest_q = std::log(std::max(outside, std::numeric_limits<double>::min())) - lse;
    kld += std::exp(log_rest) * (log_rest - log_rest_q);
  }
  t.kld = kld;
  t.p_diff = static_cast<float>(std::exp(-t.nll) - std::exp(-t.nll_base));
  return t;
}

Expected<TopKBaseWriter> TopKBaseWriter::create(const std::string& path, int32_t n_ctx, int32_t n_vocab,
                                                int32_t top_k, std::span<const int32_t> tokens) {
  MTP_CHECK(n_ctx >= 3 && n_vocab > 0 && top_k >= 1 && top_k <= n_vocab && !tokens.empty() &&
            tokens.size() % static_cast<size_t>(n_ctx) == 0);
  const int32_t n_chunk = static_cast<int32_t>(tokens.size() / static_cast<size_t>(n_ctx));
  uint8_t header[kTopKHeaderBytes];
  const uint32_t version = kTopKVersion;
  const int32_t counts[4] = {n_ctx, n_vocab, n_chunk, top_k};
  std::memcpy(header, kTopKMagic, sizeof kTopKMagic);
  std::memcpy(header + sizeof kTopKMagic, &version, sizeof version);
  std::memcpy(header + sizeof kTopKMagic + sizeof version, counts, sizeof counts);
  TopKBaseWriter w;
  MTP_ASSIGN_OR_RETURN(w.out_,
                       ChunkedBaseWriter::create(path, header, tokens, n_chunk,
                                                 kld_scored_per_chunk(n_ctx) * topk_row_words(top_k) * 4));
  return w;
}

Status TopKBaseWriter::write_chunk(std::span<const uint32_t> rows) {
  return out_.write_chunk({reinterpret_cast<const uint8_t*>(rows.data()), rows.size_bytes()});
}

Expected<TopKBaseFile> TopKBaseFile::open(const std::string& path) {
  TopKBaseFile f;
  MTP_ASSIGN_OR_RETURN(f.map_, MappedFile::open(path));
  const uint8_t* p = f.map_.data();
  const int64_t size = static_cast<int64_t>(f.map_.size());
  if (size < 12 || std::memcmp(p, kTopKMagic, sizeof kTopKMagic) != 0)
    return corrupt(path, ": not a compact KL-divergence base file (no \"_mtpkld_\" header)");
  uint32_t version = 0;
  std::memcpy(&version, p + 8, sizeof version);
  if (version != kTopKVersion)
    return unsupported(path, ": compact base version ", version, "; this build reads version ", kTopKVersion);
  if (size < kTopKHeaderBytes)
    return corrupt(path, ": ", size, " bytes, shorter than the header (truncated)");
  int32_t header[4];
  std::memcpy(header, p + 12, sizeof header);
  f.n_ctx_ = header[0];
  f.n_vocab_ = header[1];
  f.n_chunk_ = header[2];
  f.top_k_ = header[3];
  if (f.n_ctx_ < 3 || f.n_vocab_ < 1 || f.n_chunk_ < 1 || f.top_k_ < 1 || f.top_k_ > f.n_vocab_) {
    return corrupt(path, ": bad header: n_ctx ", f.n_ctx_, ", n_vocab ", f.n_vocab_, ", n_chunk ", f.n_chunk_,
                   ", top_k ", f.top_k_, " (needs n_ctx >= 3, positive counts and top_k <= n_vocab)");
  }
  using U128 = unsigned __int128;
  const U128 n_tokens = static_cast<U128>(f.n_ctx_) * static_cast<unsigned>(f.n_chunk_);
  const U128 expected = kTopKHeaderBytes + 4 * n_tokens +
                        4 * static_cast<U128>(f.n_chunk_) *
                            static_cast<U128>(kld_scored_per_chunk(f.n_ctx_)) *
                            static_cast<U128>(topk_row_words(f.top_k_));
  if (expected != static_cast<U128>(size)) {
    const uint64_t need = expected > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(expected);
    return corrupt(path, ": ", size, " bytes, but its header (n_ctx ", f.n_ctx_, ", n_chunk ", f.n_chunk_,
                   ", top_k ", f.top_k_, ") needs ", need,
                   static_cast<uint64_t>(size) < need ? " (truncated)" : " (trailing bytes)");
  }
  f.tokens_.resize(static_cast<size_t>(n_tokens));
  std::memcpy(f.tokens_.data(), p + kTopKHeaderBytes, f.tokens_.size() * sizeof(int32_t));
  for (size_t i = 0; i < f.tokens_.size(); ++i) {
    if (f.tokens_[i] < 0 || f.tokens_[i] >= f.n_vocab_)
      return corrupt(path, ": token ", i, " is ", f.tokens_[i], ", outside the vocabulary of ", f.n_vocab_);
  }
  f.rows_ = reinterpret_cast<const uint32_t*>(p + kTopKHeaderBytes + 4 * static_cast<int64_t>(n_tokens));
  MTP_RETURN_IF_ERROR(f.check_rows());
  return f;
}

// "" when one row is a distribution as the writer writes it, else why not.
static std::string row_problem(std::span<const uint32_t> row, int32_t n_vocab, std::vector<int32_t>& ids) {
  const float log_next = load_float(row.data()), log_rest = load_float(row.data() + 1);
  if (!std::isfinite(log_next) || log_next > 0)
    return str_cat("log p(next) ", log_next, " is not a log-probability");
  if (std::isnan(log_rest) || log_rest > 0)
    return str_cat("log rest mass ", log_rest, " is not a log-probability");
  const int64_t k = static_cast<int64_t>(row.size() / 2 - 1);
  double mass = std::exp(static_cast<double>(log_rest));
  ids.clear();
  for (int64_t j = 0; j < k; ++j) {
    const int32_t id = load_id(row.data() + 2 + 2 * j);
    const float log_p = load_float(row.data() + 3 + 2 * j);
    if (id < 0 || id >= n_vocab)
      return str_cat("entry ", j, ": token ", id, " outside the vocabulary of ", n_vocab);
    if (!std::isfinite(log_p) || log_p > 0)
      return str_cat("entry ", j, ": log p ", log_p, " is not a log-probability");
    if (j > 0 && log_p > load_float(row.data() + 1 + 2 * j))
      return str_cat("entry ", j, ": not in descending order of probability");
    ids.push_back(id);
    mass += std::exp(static_cast<double>(log_p));
  }
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) return "a token appears twice";
  if (std::abs(mass - 1) > kMassTolerance) return str_cat("its probabilities sum to ", mass, ", not 1");
  return "";
}

Status TopKBaseFile::check_rows() const {
  const int64_t scored = kld_scored_per_chunk(n_ctx_), words = topk_row_words(top_k_);
  std::vector<int32_t> ids;
  for (int32_t c = 0; c < n_chunk_; ++c) {
    const std::span<const uint32_t> rows = chunk_rows(c);
    for (int64_t r = 0; r < scored; ++r) {
      const std::string why = row_problem(
          rows.subspan(static_cast<size_t>(r * words), static_cast<size_t>(words)), n_vocab_, ids);
      if (!why.empty()) return corrupt(path(), ": chunk ", c, ", position ", n_ctx_ / 2 + r, ": ", why);
    }
  }
  return Status::Ok();
}

std::span<const uint32_t> TopKBaseFile::chunk_rows(int32_t c) const {
  MTP_CHECK(c >= 0 && c < n_chunk_);
  const int64_t words = kld_scored_per_chunk(n_ctx_) * topk_row_words(top_k_);
  return {rows_ + c * words, static_cast<size_t>(words)};
}

}  // namespace mtp::eval
