// `mtp-train`: trains a tiny qwen35moe with its MTP block on text files and writes it as an F32 GGUF. The
// interface has no libtorch types, so the command line compiles without torch headers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace mtp::train {

struct TrainOptions {
  std::vector<std::string> corpus;  // text files, concatenated in order
  std::string output;               // the GGUF written at the end
  std::string shape = "tiny";       // a qwen35moe_shape() name
  int64_t steps = 100;              // optimizer steps
  int64_t batch = 4;                // sequences per step
  int64_t seq_len = 64;             // tokens per sequence
  double learning_rate = 3e-3;      // AdamW
  double mtp_weight = 0.3;          // weight of the MTP block's next-next-token loss
  uint64_t seed = 1;
  int threads = 1;  // libtorch intra-op threads
};

// Checks every value; the first problem as one message.
Status validate(const TrainOptions& options);

struct StepReport {
  int64_t step = 0;     // 1-based
  double loss = 0;      // next-token cross-entropy of the trunk (nats per token)
  double mtp_loss = 0;  // next-next-token cross-entropy of the MTP block
};

struct TrainSummary {
  std::vector<StepReport> steps;
  int64_t corpus_tokens = 0;
  int64_t trained_tokens = 0;  // steps x batch x seq_len
  double seconds = 0;          // the optimizer steps only (not tokenization or export)
};

// Trains the vocabulary (our BPE trainer, sized to the shape's vocabulary), tokenizes the corpus, runs the
// steps on random windows of it, and writes `output`. `on_step` (may be empty) sees each step.
Expected<TrainSummary> train(const TrainOptions& options,
                             const std::function<void(const StepReport&)>& on_step);

}  // namespace mtp::train
