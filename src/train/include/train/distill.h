// `mtp-train distill-head`: trains a trunk's MTP block to draft what the trunk predicts, from the trunk's own
// next-token distributions over a text (docs/training.md). The trunk is frozen and only runs forward, in the
// inference engine (trunk_teacher.h), so that only the block and the LM head are held in libtorch; the
// block starts from a donor model's (a base model's head borrowed for a finetune), the trunk's own, or new
// weights. The file written is the trunk with only its MTP block replaced (every other tensor byte-identical,
// as `mtp graft` writes it). The interface has no libtorch types.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "speculative/stats.h"
#include "train/engine_acceptance.h"

namespace mtp::train {

struct DistillOptions {
  std::string trunk;              // the model whose head is trained (its trunk is kept byte for byte)
  std::string head = {};          // a model or head-only file whose MTP block starts the training; empty:
                                  // the trunk's own block, or new weights when it has none
  std::vector<std::string> data;  // text files, concatenated: the last eval_fraction of their tokens is held
                                  // out (not trained on) for the before/after figures
  double eval_fraction = 0.1;
  std::string output;
  std::string head_type = {};  // the written block's weight type (mtp graft's --head-type); empty: the type
                               // of the block it started from, F32 for a new one
  int64_t steps = 200;
  int64_t batch = 4;
  int64_t seq_len = 64;
  double learning_rate = 1e-3;
  // The share of each batch's windows that are the trunk's own text: a window's first half from the data,
  // the rest sampled from the trunk at T = 1 (a forward per sampled token: several times slower a step).
  double generated_fraction = 0;
  // The block's routed experts stay as they started (the donor's or the trunk's): at 35B-A3B widths they are
  // 0.8 B of the block's 0.85 B parameters, and their gradients and AdamW state about 10 GB.
  bool freeze_experts = false;
  // > 0: the trunk runs first over every window of the run and keeps, per row, the block's inputs and its own
  // K most likely next tokens (about 1 MB a window at 35B-A3B widths), then the engine is freed before the
  // block is built, so a trunk that fills the memory on its own and the block fit one after the other. The
  // KL is then over those K tokens and "any other" (a lower bound of the whole KL), the sampled acceptance
  // over the K (a lower bound too). 0: the whole distribution, the trunk running beside the block.
  int64_t teacher_top_k = 0;
  // The engine's acceptance by draft position before and after (the block training started from, then the
  // file written), decoding `accept.tokens` after each of the first accept_prompts held-out windows;
  // accept.tokens = 0 skips it. accept.threads is taken from `threads`.
  AcceptanceOptions accept = {};
  int64_t accept_prompts = 16;
  uint64_t seed = 1;
  int threads = 1;
};

// Checks every value; the first problem as one message.
Status validate(const DistillOptions& options);

// How well the MTP block drafts for the trunk over held-out text, at the first draft position: the row for
// token t + 1 (with the trunk's hidden at t) against the trunk's distribution for token t + 2.
struct HeadFit {
  int64_t rows = 0;
  double kl = 0;              // mean KL(trunk || head), nats
  double greedy_accept = 0;   // share of rows where the head's argmax is the trunk's
  double sampled_accept = 0;  // mean of sum_x min(p(x), q(x)): rejection sampling's acceptance at T = 1
};

struct DistillSummary {
  HeadFit before, after;
  std::vector<double> losses;  // per step: the batch's mean KL
  int64_t train_tokens = 0, eval_tokens = 0;
  double seconds = 0;       // the optimizer steps
  std::string head_source;  // "donor", "trunk" or "new"
  // The engine's figures (AcceptanceOptions): before is absent for a new block or with accept.tokens = 0.
  std::optional<speculative::SpecStats> engine_before, engine_after;
  int64_t engine_prompts = 0;  // held-out windows they decoded
};

Expected<DistillSummary> distill_head(const DistillOptions& options,
                                      const std::function<void(int64_t step, double loss)>& on_step);

}  // namespace mtp::train
