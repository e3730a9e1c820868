// Chunked evaluation for perplexity and KL divergence (perplexity.h): one sequence, reset before each chunk,
// the chunk fed in batches of n_batch rows with logits asked only for the scored positions.
#include "eval/perplexity.h"

#include <algorithm>

#include "base/check.h"
#include "eval/kld_file.h"
#include "model/forward.h"
#include "model/memory.h"

namespace mtp::eval {

int64_t chunk_count(int64_t n_tokens, const ChunkOptions& o) {
  const int64_t whole = n_tokens / o.n_ctx;
  return o.max_chunks < 0 ? whole : std::min(whole, o.max_chunks);
}

Status evaluate_chunks(const Model& model, std::span<const int32_t> tokens, const ChunkOptions& o,
                       ThreadPool& pool, const ChunkLogits& on_chunk) {
  MTP_CHECK(o.n_ctx >= 3 && o.n_batch >= 1);
  MemoryOptions mo;
  mo.n_ctx = o.n_ctx;
  mo.n_seq = 1;
  mo.n_snapshots = 0;  // nothing is rolled back
  mo.mtp = false;
  MTP_ASSIGN_OR_RETURN(Memory memory, Memory::create(model.config(), mo));
  MTP_ASSIGN_OR_RETURN(const int32_t seq, memory.seq_create());
  const int64_t n_vocab = model.config().n_vocab;
  const int64_t first = o.n_ctx / 2, scored = kld_scored_per_chunk(o.n_ctx);
  const std::optional<int32_t> bos = model.vocab().add_bos ? model.vocab().bos_id : std::nullopt;
  std::vector<float> logits(static_cast<size_t>(scored * n_vocab));
  Batch batch;
  Outputs out;
  for (int64_t c = 0; c < chunk_count(static_cast<int64_t>(tokens.size()), o); ++c) {
    memory.seq_reset(seq);
    const int32_t* chunk = tokens.data() + c * o.n_ctx;
    for (int64_t start = 0; start < o.n_ctx; start += o.n_batch) {
      const int64_t n = std::min(o.n_batch, o.n_ctx - start);
      batch.clear();
      for (int64_t i = 0; i < n; ++i) {
        const int64_t pos = start + i;
        const int32_t token = pos == 0 && bos ? *bos : chunk[pos];
        batch.add(seq, pos, token, pos >= first && pos < first + scored);
      }
      MTP_RETURN_IF_ERROR(forward(model, batch, memory, out, pool));
      for (int64_t i = 0; i < n; ++i) {
        const std::span<const float> row = out.logits_of(i);
        if (!row.empty()) std::copy(row.begin(), row.end(), logits.begin() + (start + i - first) * n_vocab);
      }
    }
    MTP_RETURN_IF_ERROR(on_chunk(c, logits));
  }
  return Status::Ok();
}

}  // namespace mtp::eval
