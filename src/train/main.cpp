// mtp-train: trains a tiny qwen35moe with an MTP block on text files (docs/training.md). A separate
// executable so that the serving binary `mtp` never links libtorch. Exit codes: 0 success, 1 runtime error, 2
// usage error.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "train/trainer.h"

int main(int argc, char** argv) {
  mtp::train::TrainOptions o;
  CLI::App app{"mtp-train: train a tiny qwen35moe model with an MTP block on text files (libtorch, CPU)",
               "mtp-train"};
  app.add_option("--corpus", o.corpus, "text files to train on (concatenated)")->required();
  app.add_option("-o,--output", o.output, "the F32 GGUF to write")->required();
  app.add_option("--shape", o.shape, "model shape (mtp synth's names: tiny, small)")->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
  app.add_option("--batch", o.batch, "sequences per step")->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "tokens per sequence")->capture_default_str();
  app.add_option("--lr", o.learning_rate, "AdamW learning rate")->capture_default_str();
  app.add_option("--mtp-weight", o.mtp_weight, "weight of the MTP block's next-next-token loss")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "initial weights and batch sampling")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "libtorch threads")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (mtp::Status s = mtp::train::validate(o); !s.ok()) {
    std::fprintf(stderr, "mtp-train: %s\n", s.message().c_str());
    return 2;
  }
  auto summary = mtp::train::train(o, [](const mtp::train::StepReport& r) {
    std::printf("step %lld loss %.4f mtp_loss %.4f\n", static_cast<long long>(r.step), r.loss, r.mtp_loss);
    std::fflush(stdout);
  });
  if (!summary.ok()) {
    std::fprintf(stderr, "mtp-train: %s\n", summary.status().message().c_str());
    return summary.status().code() == mtp::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::printf("trained %lld tokens in %.2f s (%.0f tokens/s); corpus %lld tokens; wrote %s\n",
              static_cast<long long>(summary->trained_tokens), summary->seconds,
              static_cast<double>(summary->trained_tokens) / summary->seconds,
              static_cast<long long>(summary->corpus_tokens), o.output.c_str());
  return 0;
}
