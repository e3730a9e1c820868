// The model over a text in chunks, as llama-perplexity runs it: the tokens are cut into chunks of n_ctx
// (a tail shorter than a chunk is dropped), each chunk is evaluated from an empty context (its first token
// replaced by BOS when the vocabulary adds one), and the logits of the second half, positions n_ctx/2 ..
// n_ctx-2, are handed to the caller: position p predicts token p + 1, so every scored token has at least
// n_ctx/2 tokens of context.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model.h"

namespace mtp::eval {

struct ChunkOptions {
  int64_t n_ctx = 512;
  int64_t n_batch = 512;    // rows per forward pass
  int64_t max_chunks = -1;  // -1: every whole chunk
};

// Chunks in `n_tokens` tokens at these options.
int64_t chunk_count(int64_t n_tokens, const ChunkOptions& o);

// Called once per chunk with its index and its scored logits: kld_scored_per_chunk(n_ctx) rows of n_vocab
// floats, in position order.
using ChunkLogits = std::function<Status(int64_t chunk, std::span<const float> logits)>;

// Runs chunk_count() chunks of `tokens` through the batched forward pass (model/forward.h); fails on a
// forward error or the callback's.
Status evaluate_chunks(const Model& model, std::span<const int32_t> tokens, const ChunkOptions& o,
                       ThreadPool& pool, const ChunkLogits& on_chunk);

}  // namespace mtp::eval
