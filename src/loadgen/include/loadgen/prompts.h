// Synthetic prompts of a chosen length, made of common English words. Each common lower-case word with its
// leading space is one token in the BPE vocabularies of the usual models (Qwen, Llama), so `words` words are
// about that many tokens; the chat template adds its own few. The exact count is what the server reports
// (usage.prompt_tokens), recorded per request.
#pragma once

#include <cstdint>
#include <string>

namespace mtp::loadgen {

// A prompt of `words` words drawn from a generator seeded by (seed, id): the same pair gives the same prompt,
// different pairs give unrelated word sequences (a prefix cache shares at most a few leading words).
std::string synthetic_prompt(uint64_t seed, int64_t id, int words);

// The length of prompt `id`: `lo` when `hi` <= `lo`, else uniform in [lo, hi] from a generator seeded by
// (seed, id), independent of the prompt's words.
int prompt_length(uint64_t seed, int64_t id, int lo, int hi);

}  // namespace mtp::loadgen
