// mtp-train: trains a tiny qwen35moe with an MTP block on text files, or (`mtp-train distill-head`) a model's
// MTP block for its frozen trunk (docs/training.md). A separate executable so that the serving binary `mtp`
// never links libtorch. Exit codes: 0 success, 1 runtime error, 2 usage error.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "train/distill.h"
#include "train/trainer.h"

namespace {

void add_options(CLI::App& app, mtp::train::TrainOptions& o) {
  app.add_option("--corpus", o.corpus, "text files to train on (concatenated)");
  app.add_option("--corpus-dir", o.corpus_dir, "a directory of text files (searched recursively, sorted)");
  app.add_option("--glob", o.glob, "with --corpus-dir: file names to take (fnmatch pattern)")
      ->capture_default_str();
  app.add_option("--exclude", o.exclude, "with --corpus-dir: skip files with a path component matching this");
  app.add_option("--holdout", o.holdout, "with --corpus-dir: fraction of files held out (by path hash)")
      ->capture_default_str();
  app.add_option("--manifest", o.manifest, "with --corpus-dir: write the corpus manifest (TSV) here");
  app.add_option("-o,--output", o.output, "the F32 GGUF to write (required)");
  app.add_option("--name", o.name, "general.name of the file (default mtp-train-SHAPE)");
  app.add_option("--shape", o.shape, "model shape (mtp synth's names: tiny, small, code; default tiny)");
  app.add_option("--init", o.init,
                 "start from this GGUF's weights, shape and vocabulary (continued training; with "
                 "--mtp-weight 0 its MTP block is written back unchanged)");
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
  app.add_option("--minutes", o.minutes, "stop after this much training time (0: no bound)")
      ->capture_default_str();
  app.add_option("--batch", o.batch, "sequences per step")->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "tokens per sequence")->capture_default_str();
  app.add_option("--lr", o.learning_rate, "AdamW (peak) learning rate")->capture_default_str();
  app.add_option("--schedule", o.schedule, "constant, or cosine (warmup, then down to 10% at --steps)")
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "warmup steps of the cosine schedule")->capture_default_str();
  app.add_option("--mtp-weight", o.mtp_weight, "weight of the MTP block's next-next-token loss (0: frozen)")
      ->capture_default_str();
  app.add_option("--loss-csv", o.loss_csv, "write each step's losses (and held-out losses) as CSV here");
  app.add_option("--eval-every", o.eval_every, "held-out loss on a fixed sample every N steps (0: never)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "initial weights and batch sampling")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "libtorch threads")->capture_default_str();
}

void add_distill_options(CLI::App& cmd, mtp::train::DistillOptions& d) {
  cmd.add_option("--trunk", d.trunk, "the model whose MTP block is trained (its trunk stays byte for byte)")
      ->required();
  cmd.add_option("--head", d.head,
                 "start from this model's or head-only file's MTP block (default: the trunk's own, or new)");
  cmd.add_option("--data", d.data, "text files to distill on (concatenated)")->required();
  cmd.add_option("--eval-fraction", d.eval_fraction, "the last part of --data's tokens, held out for figures")
      ->capture_default_str();
  cmd.add_option("-o,--output", d.output, "the model to write (the trunk with the trained block)")
      ->required();
  cmd.add_option("--head-type", d.head_type, "the block's weight type (default: the starting block's)");
  cmd.add_option("--steps", d.steps, "optimizer steps (0: only the figures)")->capture_default_str();
  cmd.add_option("--batch", d.batch, "sequences per step")->capture_default_str();
  cmd.add_option("--seq-len", d.seq_len, "tokens per sequence")->capture_default_str();
  cmd.add_option("--lr", d.learning_rate, "AdamW learning rate")->capture_default_str();
  cmd.add_option("--generated", d.generated_fraction,
                 "share of each batch that is the trunk's own text (half a window of data, the rest sampled)")
      ->capture_default_str();
  cmd.add_flag("--freeze-experts", d.freeze_experts,
               "keep the block's routed experts as they start (less memory: at 35B-A3B widths about 10 GB)");
  cmd.add_option(
         "--teacher-top-k", d.teacher_top_k,
         "run the trunk first over every window, keep its K likeliest tokens, free it, then train "
         "(a trunk that fills the memory alone; 0: the whole distribution, the trunk beside the block)")
      ->capture_default_str();
  cmd.add_option("--accept-tokens", d.accept.tokens,
                 "engine acceptance by draft position before and after: tokens decoded after each held-out "
                 "window (0: skip)")
      ->capture_default_str();
  cmd.add_option("--accept-prompts", d.accept_prompts, "held-out windows decoded for those figures")
      ->capture_default_str();
  cmd.add_option("--accept-draft-max", d.accept.draft_max, "tokens drafted a round for those figures")
      ->capture_default_str();
  cmd.add_option("--accept-temp", d.accept.temperature,
                 "temperature for those figures (0: greedy; above: drafts sampled, rejection sampling)")
      ->capture_default_str();
  cmd.add_option("--seed", d.seed, "window sampling (and a new block's weights)")->capture_default_str();
  cmd.add_option("-t,--threads", d.threads, "libtorch and engine threads")->capture_default_str();
}

void print_fit(const char* when, const mtp::train::HeadFit& f) {
  std::printf(
      "%s: %lld held-out rows, KL %.4f nats, draft position 1 acceptance: greedy %.3f, sampled (T=1) %.3f\n",
      when, static_cast<long long>(f.rows), f.kl, f.greedy_accept, f.sampled_accept);
}

void print_engine(const char* when, const std::optional<mtp::speculative::SpecStats>& s) {
  if (!s) return;
  std::printf("%s: acceptance by draft position (", when);
  const std::vector<double> rates = s->acc_rate_per_pos();
  for (size_t i = 0; i < rates.size(); ++i) std::printf("%s%.3f", i ? ", " : "", rates[i]);
  std::printf("), mean accepted length %.3f over %lld rounds\n", s->mean_acc_len(),
              static_cast<long long>(s->rounds));
}

int run_distill(const mtp::train::DistillOptions& d) {
  if (mtp::Status s = mtp::train::validate(d); !s.ok()) {
    std::fprintf(stderr, "mtp-train distill-head: %s\n", s.message().c_str());
    return 2;
  }
  auto summary = mtp::train::distill_head(d, [&](int64_t step, double loss) {
    if (step == 1 || step % 10 == 0 || step == d.steps)
      std::printf("step %lld kl %.4f\n", static_cast<long long>(step), loss);
    std::fflush(stdout);
  });
  if (!summary.ok()) {
    std::fprintf(stderr, "mtp-train distill-head: %s\n", summary.status().message().c_str());
    return summary.status().code() == mtp::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const std::string from =
      summary->head_source == "new" ? "a new head" : "head from the " + summary->head_source;
  std::printf("%s; %lld training tokens, %lld held out\n", from.c_str(),
              static_cast<long long>(summary->train_tokens), static_cast<long long>(summary->eval_tokens));
  print_fit("before", summary->before);
  print_fit("after", summary->after);
  if (summary->engine_after) {
    std::printf("in the engine: %lld held-out windows, %lld tokens decoded after each, %d drafted a round, ",
                static_cast<long long>(summary->engine_prompts), static_cast<long long>(d.accept.tokens),
                d.accept.draft_max);
    if (d.accept.temperature > 0)
      std::printf("T=%g (drafts sampled from the head, rejection sampling)\n", d.accept.temperature);
    else
      std::printf("greedy\n");
  }
  print_engine("before", summary->engine_before);
  print_engine("after", summary->engine_after);
  std::printf("%zu steps in %.2f s; wrote %s\n", summary->losses.size(), summary->seconds, d.output.c_str());
  return 0;
}

void print_step(const mtp::train::StepReport& r) {
  std::printf("step %lld loss %.4f mtp_loss %.4f lr %.3g", static_cast<long long>(r.step), r.loss, r.mtp_loss,
              r.learning_rate);
  if (r.heldout_loss >= 0)
    std::printf(" heldout_loss %.4f heldout_mtp_loss %.4f", r.heldout_loss, r.heldout_mtp_loss);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  mtp::train::TrainOptions o;
  CLI::App app{"mtp-train: train a tiny qwen35moe model with an MTP block on text files (libtorch, CPU)",
               "mtp-train"};
  add_options(app, o);
  mtp::train::DistillOptions d;
  CLI::App* distill = app.add_subcommand(
      "distill-head", "train a model's MTP block for its frozen trunk, from the trunk's own predictions");
  add_distill_options(*distill, d);
  CLI11_PARSE(app, argc, argv);
  if (distill->parsed()) return run_distill(d);

  if (mtp::Status s = mtp::train::validate(o); !s.ok()) {
    std::fprintf(stderr, "mtp-train: %s\n", s.message().c_str());
    return 2;
  }
  auto summary = mtp::train::train(o, print_step);
  if (!summary.ok()) {
    std::fprintf(stderr, "mtp-train: %s\n", summary.status().message().c_str());
    return summary.status().code() == mtp::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (summary->stopped_by_time) std::printf("stopped by --minutes after %zu steps\n", summary->steps.size());
  if (summary->has_heldout) {
    const mtp::train::HeldOut& h = summary->heldout;
    std::printf(
        "held-out: %lld tokens scored, loss %.4f nats/token (MTP %.4f), %.4f bits/byte (%lld tokens, %lld "
        "bytes)\n",
        static_cast<long long>(h.tokens), h.loss, h.mtp_loss, h.bits_per_byte,
        static_cast<long long>(h.stream_tokens), static_cast<long long>(h.bytes));
  }
  std::printf("trained %lld tokens in %.2f s (%.0f tokens/s); corpus %lld tokens; wrote %s\n",
              static_cast<long long>(summary->trained_tokens), summary->seconds,
              static_cast<double>(summary->trained_tokens) / summary->seconds,
              static_cast<long long>(summary->corpus_tokens), o.output.c_str());
  return 0;
}
