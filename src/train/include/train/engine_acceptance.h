// Acceptance by draft position as the serving engine sees it: MTP speculative decoding of a set of prompts,
// with llama.cpp's statistics (speculative/stats.h). distill-head reports it before and after training, on
// the held-out text's windows. No libtorch types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model.h"
#include "speculative/stats.h"

namespace mtp::train {

inline constexpr int64_t kMaxAcceptTokens = 65536;

struct AcceptanceOptions {
  int64_t tokens = 32;       // generated after each prompt (end tokens ignored)
  int32_t draft_max = 3;     // drafted tokens a round, every round (the fixed policy, the full head)
  double temperature = 0.0;  // 0: greedy; > 0: sampled, drafts sampled from the head and kept by rejection
  uint64_t seed = 1;         // the sampler's, per prompt (prompt i: seed + i)
  int threads = 1;           // the path form's pool
  int32_t slots = 4;         // prompts decoded at once (each slot holds draft_max + 1 recurrent-state planes)
};

Status validate(const AcceptanceOptions& options);

// Decodes every prompt with MTP drafting (the model's own block) and returns the rounds' statistics over all
// of them. Prompts must be non-empty token ids of the model's vocabulary.
Expected<speculative::SpecStats> engine_acceptance(const Model& model,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const AcceptanceOptions& options, ThreadPool& pool);

// The same on the file at `model_path`, loaded for this and freed on return.
Expected<speculative::SpecStats> engine_acceptance(const std::string& model_path,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const AcceptanceOptions& options);

}  // namespace mtp::train
