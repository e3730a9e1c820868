// libFuzzer target for llama.cpp's KL-divergence base file (`mtp perplexity --kl-divergence-base FILE
// --kl-divergence`): any file must open or give a Status, and every row of a file that opens must compare
// against a model's logits without a crash.
#include <cstdint>
#include <vector>

#include "eval/kld_file.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const mtp::fuzz::MemFile file(data, size);
  auto base = mtp::eval::KldBaseFile::open(file.path());
  if (!base.ok()) return 0;
  const int64_t n_vocab = base->n_vocab(), words = mtp::eval::kld_row_words(n_vocab);
  const int64_t scored = mtp::eval::kld_scored_per_chunk(base->n_ctx());
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) logits[static_cast<size_t>(i)] = static_cast<float>(i % 7);
  for (int32_t c = 0; c < base->n_chunk(); ++c) {
    const auto rows = base->chunk_rows(c);
    for (int64_t r = 0; r < scored; ++r) {
      const int32_t next = base->tokens()[static_cast<size_t>(c * base->n_ctx() + base->n_ctx() / 2 + r + 1)];
      mtp::eval::compare_log_probs(
          logits, rows.subspan(static_cast<size_t>(r * words), static_cast<size_t>(words)), next);
    }
  }
  return 0;
}
