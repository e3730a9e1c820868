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
  // The corpus: either text files concatenated in order (all trained on), or a directory (corpus.h) whose
  // files are joined with <|endoftext|> and split into training and held-out files.
  std::vector<std::string> corpus;
  std::string corpus_dir;
  std::string glob = "*";
  std::vector<std::string> exclude;
  double holdout = 0.02;
  std::string manifest;  // with corpus_dir: the corpus manifest (TSV) written here, when set

  std::string output;  // the GGUF written at the end
  std::string name;    // general.name in the file ("mtp-train-SHAPE" when empty)
  std::string shape;   // a qwen35moe_shape() name; empty: "tiny", or the --init file's
  // Start from this model file's weights, shape and vocabulary instead of new ones (continued training, a
  // finetune of a trained model); any weight types the engine loads. With mtp_weight 0 its MTP block is
  // written back as it was (the finetune that ships with a stale head).
  std::string init;
  int64_t steps = 100;                // optimizer steps (and the length of the cosine schedule)
  double minutes = 0;                 // when > 0, stop after the step that passes this much training time
  int64_t batch = 4;                  // sequences per step
  int64_t seq_len = 64;               // tokens per sequence
  double learning_rate = 3e-3;        // AdamW peak
  std::string schedule = "constant";  // or "cosine": linear warmup, then cosine down to 10% at `steps`
  int64_t warmup = 0;                 // warmup steps of the cosine schedule
  double mtp_weight = 0.3;  // weight of the MTP block's next-next-token loss; 0: the block is frozen
  std::string loss_csv;     // when set: step, losses and held-out losses as CSV
  int64_t eval_every = 0;   // held-out loss on a fixed sample every this many steps (0: never)
  uint64_t seed = 1;
  int threads = 1;  // libtorch intra-op threads
};

// Checks every value; the first problem as one message.
Status validate(const TrainOptions& options);

struct StepReport {
  int64_t step = 0;          // 1-based
  double loss = 0;           // next-token cross-entropy of the trunk (nats per token)
  double mtp_loss = 0;       // next-next-token cross-entropy of the MTP block
  double learning_rate = 0;  // used for this step
  double heldout_loss = -1;  // on the held-out sample after this step; -1 when not evaluated
  double heldout_mtp_loss = -1;
};

struct HeldOut {
  int64_t tokens = 0;         // held-out tokens scored (the trunk's targets)
  int64_t bytes = 0;          // bytes of held-out text
  int64_t stream_tokens = 0;  // tokens of the whole held-out stream
  double loss = 0;            // nats per token
  double mtp_loss = 0;
  double bits_per_byte = 0;  // loss x stream_tokens / bytes / ln 2
};

struct TrainSummary {
  std::vector<StepReport> steps;
  int64_t corpus_tokens = 0;   // the training stream
  int64_t trained_tokens = 0;  // steps run x batch x seq_len
  double seconds = 0;          // the optimizer steps and periodic evaluations (not tokenization or export)
  bool stopped_by_time = false;
  bool has_heldout = false;
  HeldOut heldout;  // over the whole held-out split, after training
};

// Trains the vocabulary (our BPE trainer, sized to the shape's vocabulary) on the training text, or takes
// the --init file's, tokenizes the corpus, runs the steps on random windows of the training stream, and
// writes `output` (and the manifest and loss CSV when asked). `on_step` (may be empty) sees each step.
Expected<TrainSummary> train(const TrainOptions& options,
                             const std::function<void(const StepReport&)>& on_step);

}  // namespace mtp::train
