// libFuzzer target for the KL-divergence base files `mtp perplexity --kl-divergence` reads: llama.cpp's full
// rows and the compact top-k rows, told apart by the magic as the command does. Any file must open or give a
// Status, and every row of a file that opens must compare against a model's logits without a crash.
#include <cstdint>
#include <vector>

#include "eval/kld_file.h"
#include "eval/kld_topk.h"
#include "fuzz_file.h"

namespace {

constexpr int32_t kMaxVocab = 1 << 18;  // larger than any vocabulary we serve (Qwen3.5: 248,320)

// Each scored row of every chunk against `logits`, through `compare(chunk, row, next)`.
template <typename File, typename Compare>
void compare_all(const File& base, Compare&& compare) {
  const int64_t scored = mtp::eval::kld_scored_per_chunk(base.n_ctx());
  for (int32_t c = 0; c < base.n_chunk(); ++c) {
    for (int64_t r = 0; r < scored; ++r)
      compare(c, r, base.tokens()[static_cast<size_t>(c * base.n_ctx() + base.n_ctx() / 2 + r + 1)]);
  }
}

std::vector<float> logits_of(int64_t n_vocab) {
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) logits[static_cast<size_t>(i)] = static_cast<float>(i % 7);
  return logits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const mtp::fuzz::MemFile file(data, size);
  if (mtp::eval::is_topk_base(file.path())) {
    auto base = mtp::eval::TopKBaseFile::open(file.path());
    // A compact file's size does not grow with n_vocab, so a few bytes can claim 2^31 tokens; the command
    // refuses any n_vocab but its model's before comparing, so logits that large are never formed there.
    if (!base.ok() || base->n_vocab() > kMaxVocab) return 0;
    const std::vector<float> logits = logits_of(base->n_vocab());
    const int64_t words = mtp::eval::topk_row_words(base->top_k());
    compare_all(*base, [&](int32_t c, int64_t r, int32_t next) {
      const auto row =
          base->chunk_rows(c).subspan(static_cast<size_t>(r * words), static_cast<size_t>(words));
      mtp::eval::compare_top_k(logits, row, next);
      mtp::eval::topk_rest_mass(row);
    });
    return 0;
  }
  auto base = mtp::eval::KldBaseFile::open(file.path());
  if (!base.ok()) return 0;
  const std::vector<float> logits = logits_of(base->n_vocab());
  const int64_t words = mtp::eval::kld_row_words(base->n_vocab());
  compare_all(*base, [&](int32_t c, int64_t r, int32_t next) {
    mtp::eval::compare_log_probs(
        logits, base->chunk_rows(c).subspan(static_cast<size_t>(r * words), static_cast<size_t>(words)),
        next);
  });
  return 0;
}
