#include "train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>
#include <torch/types.h>  // before clip_grad.h, which uses torch::Tensor without including it

#include <torch/nn/utils/clip_grad.h>

#include <chrono>
#include <cmath>
#include <numbers>
#include <sstream>

#include "base/atomic_file.h"
#include "base/text_file.h"
#include "model/qwen35moe_config.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "train/corpus.h"
#include "train/gguf_export.h"
#include "train/qwen_torch.h"
#include "windows.h"

namespace mtp::train {
namespace {

using torch::indexing::Slice;

// A corpus file's text; the error says it is one.
Expected<std::string> read_text(const std::string& path) {
  Expected<std::string> text = read_text_file(path);
  if (!text.ok()) return io_error("corpus file: ", text.status().message());
  return text;
}

// Control and user-defined tokens the BPE trainer adds after the merges.
constexpr int64_t kAddedTokens = 5;
// Held-out windows scored every --eval-every steps (evenly spaced over the held-out stream).
constexpr int64_t kEvalWindows = 32;
// The cosine schedule ends at this fraction of the peak learning rate.
constexpr double kFinalLrFraction = 0.1;

// The texts to train on and to hold out. With --corpus the files are one document (concatenated, each ended
// by a newline) and nothing is held out; with --corpus-dir each file is a document.
struct Corpus {
  std::vector<std::string> train, heldout;
  bool separate_documents = false;  // <|endoftext|> after each document
};

Expected<Corpus> load_corpus(const TrainOptions& o) {
  Corpus c;
  if (o.corpus_dir.empty()) {
    std::string text;
    for (const std::string& path : o.corpus) {
      MTP_ASSIGN_OR_RETURN(std::string part, read_text(path));
      text += part;
      if (!part.empty() && part.back() != '\n') text += '\n';
    }
    c.train.push_back(std::move(text));
    return c;
  }
  MTP_ASSIGN_OR_RETURN(std::vector<CorpusFile> files,
                       read_corpus_dir({o.corpus_dir, o.glob, o.exclude, o.holdout}));
  if (!o.manifest.empty()) MTP_RETURN_IF_ERROR(AtomicFile::write_whole(o.manifest, corpus_manifest(files)));
  for (CorpusFile& f : files) (f.held_out ? c.heldout : c.train).push_back(std::move(f.text));
  if (c.train.empty()) return invalid_argument("--holdout ", o.holdout, " leaves no file to train on");
  c.separate_documents = true;
  return c;
}

torch::Tensor token_stream(const Tokenizer& tokenizer, const std::vector<std::string>& docs,
                           std::optional<int32_t> separator) {
  std::vector<int64_t> ids;
  for (const std::string& doc : docs) {
    for (int32_t id : tokenizer.encode(doc)) ids.push_back(id);
    if (separator) ids.push_back(*separator);
  }
  return torch::tensor(ids, torch::kInt64);
}

// Summed cross-entropy of logits [B, T, V] against targets [B, T].
torch::Tensor summed_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  const torch::Tensor logp = logits.reshape({-1, logits.size(-1)}).log_softmax(-1);
  return -logp.gather(1, targets.reshape({-1, 1})).sum();
}

struct Losses {
  torch::Tensor loss, mtp_loss;  // summed over the batch
  int64_t count = 0, mtp_count = 0;
};

// The trunk predicts tokens 1..T-1; the MTP block tokens 2..T-1.
Losses batch_losses(const QwenTorch& model, const torch::Tensor& tokens) {
  const ForwardResult r = model.forward(tokens);
  const int64_t B = tokens.size(0), T = tokens.size(1);
  return {
      summed_cross_entropy(r.logits.index({Slice(), Slice(0, -1)}), tokens.index({Slice(), Slice(1)})),
      summed_cross_entropy(r.mtp_logits.index({Slice(), Slice(0, -1)}), tokens.index({Slice(), Slice(2)})),
      B * (T - 1), B * (T - 2)};
}

// Mean losses over non-overlapping windows of `stream` (all of them, or `max_windows` evenly spaced).
HeldOut evaluate(const QwenTorch& model, const torch::Tensor& stream, int64_t seq_len, int64_t batch,
                 int64_t max_windows) {
  torch::NoGradGuard no_grad;
  double sum = 0, mtp_sum = 0;
  int64_t count = 0, mtp_count = 0;
  for (const torch::Tensor& tokens : spread_windows(stream, seq_len, batch, max_windows)) {
    const Losses l = batch_losses(model, tokens);
    sum += l.loss.item<double>();
    mtp_sum += l.mtp_loss.item<double>();
    count += l.count;
    mtp_count += l.mtp_count;
  }
  HeldOut h;
  h.tokens = count;
  h.loss = count > 0 ? sum / static_cast<double>(count) : 0;
  h.mtp_loss = mtp_count > 0 ? mtp_sum / static_cast<double>(mtp_count) : 0;
  return h;
}

double scheduled_lr(const TrainOptions& o, int64_t step) {
  if (o.schedule == "constant") return o.learning_rate;
  if (step <= o.warmup) return o.learning_rate * static_cast<double>(step) / static_cast<double>(o.warmup);
  const double span = static_cast<double>(std::max<int64_t>(1, o.steps - o.warmup));
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup) / span);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return o.learning_rate * (kFinalLrFraction + (1.0 - kFinalLrFraction) * cosine);
}

std::string loss_csv(const std::vector<StepReport>& steps) {
  std::ostringstream out;
  out << "step,loss,mtp_loss,lr,heldout_loss,heldout_mtp_loss\n";
  for (const StepReport& s : steps) {
    out << s.step << ',' << s.loss << ',' << s.mtp_loss << ',' << s.learning_rate << ',';
    if (s.heldout_loss >= 0)
      out << s.heldout_loss << ',' << s.heldout_mtp_loss;
    else
      out << ',';
    out << '\n';
  }
  return out.str();
}

std::string shape_name(const TrainOptions& o) {
  return o.shape.empty() ? "tiny" : o.shape;
}

// The model to train and its vocabulary: new (random weights of the shape, a vocabulary trained on the
// training text) or the --init file's.
struct Start {
  Qwen35MoeConfig config;
  Vocab vocab;
  std::vector<NamedValues> weights;  // empty: the random initial weights
};

Expected<Start> start_from(const TrainOptions& o, const Corpus& corpus) {
  Start s;
  if (!o.init.empty()) {
    MTP_ASSIGN_OR_RETURN(StoredModel m, read_stored_model(o.init));
    s.config = m.config;
    s.config.n_nextn = 1;  // a file without an MTP block gets a new one
    s.vocab = std::move(m.vocab);
    s.weights = std::move(m.tensors);
    return s;
  }
  MTP_ASSIGN_OR_RETURN(s.config, qwen35moe_shape(shape_name(o), 0));
  s.config.n_nextn = 1;
  // Our BPE trainer on the training text, as many merges as the shape's vocabulary leaves room for.
  std::string train_text;
  for (const std::string& doc : corpus.train) train_text += doc;
  const int n_merges = static_cast<int>(std::max<int64_t>(0, s.config.n_vocab - 256 - kAddedTokens));
  s.vocab = train_bpe(train_text, n_merges);
  return s;
}

}  // namespace

Status validate(const TrainOptions& o) {
  if (o.corpus.empty() == o.corpus_dir.empty())
    return invalid_argument("give either --corpus FILE... or --corpus-dir DIR");
  if (o.output.empty()) return invalid_argument("-o: an output file is needed");
  if (!o.init.empty() && !o.shape.empty())
    return invalid_argument("--shape and --init: the shape is the --init file's");
  if (o.init.empty()) MTP_RETURN_IF_ERROR(qwen35moe_shape(shape_name(o), 0).status().with_context("--shape"));
  if (!(o.holdout >= 0 && o.holdout < 1)) return invalid_argument("--holdout must be in [0, 1)");
  if (o.corpus_dir.empty() && (!o.manifest.empty() || o.eval_every > 0))
    return invalid_argument("--manifest and --eval-every need --corpus-dir (held-out files)");
  if (o.steps < 1) return invalid_argument("--steps must be at least 1");
  if (!(o.minutes >= 0)) return invalid_argument("--minutes must be 0 (no bound) or positive");
  if (o.batch < 1) return invalid_argument("--batch must be at least 1");
  if (o.seq_len < 3) return invalid_argument("--seq-len must be at least 3 (the MTP loss needs t + 2)");
  if (!(o.learning_rate > 0)) return invalid_argument("--lr must be positive");
  if (o.schedule != "constant" && o.schedule != "cosine")
    return invalid_argument("--schedule must be constant or cosine, not '", o.schedule, "'");
  if (o.warmup < 0 || o.warmup >= o.steps) return invalid_argument("--warmup must be in [0, --steps)");
  if (!(o.mtp_weight >= 0)) return invalid_argument("--mtp-weight must be 0 or more");
  if (o.eval_every < 0) return invalid_argument("--eval-every must be 0 (never) or positive");
  if (o.threads < 1) return invalid_argument("--threads must be at least 1");
  return Status::Ok();
}

Status export_gguf(const QwenTorch& model, const Vocab& vocab, const std::string& model_name,
                   const std::string& path) {
  MTP_ASSIGN_OR_RETURN(Vocab padded, pad_vocab(vocab, model.config().n_vocab));
  std::vector<NamedValues> tensors;
  for (auto& [name, t] : model.export_tensors()) {
    const float* data = t.data_ptr<float>();
    tensors.push_back({name, std::vector<float>(data, data + t.numel())});
  }
  return write_f32_gguf(model.config(), padded, tensors, model_name, path,
                        model.parts() == ModelParts::kMtpBlock);
}

Expected<TrainSummary> train(const TrainOptions& o, const std::function<void(const StepReport&)>& on_step) {
  MTP_RETURN_IF_ERROR(validate(o));
  MTP_ASSIGN_OR_RETURN(Corpus corpus, load_corpus(o));
  if (o.eval_every > 0 && corpus.heldout.empty())
    return invalid_argument("--eval-every: --holdout ", o.holdout, " holds out no file");
  MTP_ASSIGN_OR_RETURN(Start init, start_from(o, corpus));
  const Qwen35MoeConfig& config = init.config;
  const Vocab& vocab = init.vocab;
  MTP_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::create(vocab));
  const std::optional<int32_t> separator = corpus.separate_documents ? vocab.bos_id : std::nullopt;
  const torch::Tensor stream = token_stream(tokenizer, corpus.train, separator);
  const torch::Tensor heldout = token_stream(tokenizer, corpus.heldout, separator);
  TrainSummary summary;
  summary.corpus_tokens = stream.size(0);
  if (summary.corpus_tokens <= o.seq_len)
    return invalid_argument("the corpus has ", summary.corpus_tokens, " tokens; --seq-len ", o.seq_len,
                            " needs more");

  at::set_num_threads(o.threads);
  QwenTorch model(config, o.seed);
  if (!init.weights.empty()) MTP_RETURN_IF_ERROR(model.load_stored(init.weights).with_context(o.init));
  init.weights = {};
  // Without an MTP loss the block is left out of the optimizer (weight decay alone would still move it).
  const std::vector<torch::Tensor> trained = o.mtp_weight > 0 ? model.parameters() : model.trunk_parameters();
  torch::optim::AdamW optimizer(
      trained, torch::optim::AdamWOptions(o.learning_rate).betas({0.9, 0.95}).weight_decay(0.01));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed ^ 0x7261696eull);

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (int64_t step = 1; step <= o.steps; ++step) {
    const double lr = scheduled_lr(o, step);
    for (auto& group : optimizer.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    const torch::Tensor tokens = random_windows(stream, o.batch, o.seq_len, gen);
    const Losses l = batch_losses(model, tokens);
    const torch::Tensor loss = l.loss / static_cast<double>(l.count);
    const torch::Tensor mtp_loss = l.mtp_loss / static_cast<double>(l.mtp_count);
    optimizer.zero_grad();
    (loss + o.mtp_weight * mtp_loss).backward();
    torch::nn::utils::clip_grad_norm_(trained, kClipNorm);
    optimizer.step();
    StepReport report{step, loss.item<double>(), mtp_loss.item<double>(), lr};
    if (o.eval_every > 0 && (step % o.eval_every == 0 || step == o.steps)) {
      const HeldOut h = evaluate(model, heldout, o.seq_len, o.batch, kEvalWindows);
      report.heldout_loss = h.loss;
      report.heldout_mtp_loss = h.mtp_loss;
    }
    summary.steps.push_back(report);
    if (on_step) on_step(report);
    if (o.minutes > 0 && elapsed() > o.minutes * 60.0) {
      summary.stopped_by_time = step < o.steps;
      break;
    }
  }
  summary.seconds = elapsed();
  summary.trained_tokens = static_cast<int64_t>(summary.steps.size()) * o.batch * o.seq_len;
  if (heldout.size(0) >= o.seq_len) {
    summary.has_heldout = true;
    summary.heldout = evaluate(model, heldout, o.seq_len, o.batch, 0);
    summary.heldout.stream_tokens = heldout.size(0);
    for (const std::string& doc : corpus.heldout) summary.heldout.bytes += static_cast<int64_t>(doc.size());
    summary.heldout.bits_per_byte = summary.heldout.loss *
                                    static_cast<double>(summary.heldout.stream_tokens) /
                                    static_cast<double>(summary.heldout.bytes) / std::numbers::ln2;
  }
  if (!o.loss_csv.empty()) MTP_RETURN_IF_ERROR(AtomicFile::write_whole(o.loss_csv, loss_csv(summary.steps)));
  const std::string name = o.name.empty() ? "mtp-train-" + (o.init.empty() ? shape_name(o) : "init") : o.name;
  MTP_RETURN_IF_ERROR(export_gguf(model, vocab, name, o.output));
  return summary;
}

}  // namespace mtp::train
