#include "train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "model/qwen35moe_config.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "train/gguf_export.h"
#include "train/qwen_torch.h"

namespace mtp::train {
namespace {

Expected<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read corpus file '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error("error reading corpus file '", path, "'");
  return ss.str();
}

// Control and user-defined tokens the BPE trainer adds after the merges.
constexpr int64_t kAddedTokens = 5;

// Cross-entropy of logits [B, T, V] against targets [B, T].
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  const torch::Tensor logp = logits.reshape({-1, logits.size(-1)}).log_softmax(-1);
  return -logp.gather(1, targets.reshape({-1, 1})).mean();
}

}  // namespace

Status validate(const TrainOptions& o) {
  if (o.corpus.empty()) return invalid_argument("--corpus: at least one text file is needed");
  if (o.output.empty()) return invalid_argument("-o: an output file is needed");
  MTP_RETURN_IF_ERROR(qwen35moe_shape(o.shape, 0).status().with_context("--shape"));
  if (o.steps < 1) return invalid_argument("--steps must be at least 1");
  if (o.batch < 1) return invalid_argument("--batch must be at least 1");
  if (o.seq_len < 3) return invalid_argument("--seq-len must be at least 3 (the MTP loss needs t + 2)");
  if (!(o.learning_rate > 0)) return invalid_argument("--lr must be positive");
  if (!(o.mtp_weight >= 0)) return invalid_argument("--mtp-weight must be 0 or more");
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
  return write_f32_gguf(model.config(), padded, tensors, model_name, path);
}

Expected<TrainSummary> train(const TrainOptions& o, const std::function<void(const StepReport&)>& on_step) {
  MTP_RETURN_IF_ERROR(validate(o));
  MTP_ASSIGN_OR_RETURN(Qwen35MoeConfig config, qwen35moe_shape(o.shape, 0));
  config.n_nextn = 1;
  std::string text;
  for (const std::string& path : o.corpus) {
    MTP_ASSIGN_OR_RETURN(std::string part, read_text(path));
    text += part;
    if (!part.empty() && part.back() != '\n') text += '\n';
  }

  // The vocabulary: our BPE trainer, as many merges as the shape's vocabulary leaves room for.
  const int n_merges = static_cast<int>(std::max<int64_t>(0, config.n_vocab - 256 - kAddedTokens));
  const Vocab vocab = train_bpe(text, n_merges);
  MTP_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::create(vocab));
  const std::vector<int32_t> ids = tokenizer.encode(text);
  TrainSummary summary;
  summary.corpus_tokens = static_cast<int64_t>(ids.size());
  if (summary.corpus_tokens <= o.seq_len)
    return invalid_argument("the corpus has ", ids.size(), " tokens; --seq-len ", o.seq_len, " needs more");
  const torch::Tensor corpus = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()), torch::kInt64);

  at::set_num_threads(o.threads);
  QwenTorch model(config, o.seed);
  torch::optim::AdamW optimizer(model.parameters(),
                                torch::optim::AdamWOptions(o.learning_rate).weight_decay(0.01));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed ^ 0x7261696eull);
  const torch::Tensor offsets = torch::arange(o.seq_len, torch::kInt64);

  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= o.steps; ++step) {
    const torch::Tensor begin = torch::randint(summary.corpus_tokens - o.seq_len + 1, {o.batch, 1}, gen,
                                               torch::TensorOptions().dtype(torch::kInt64));
    const torch::Tensor tokens =
        corpus.index_select(0, (begin + offsets).reshape({-1})).view({o.batch, o.seq_len});
    const ForwardResult r = model.forward(tokens);
    using torch::indexing::Slice;
    const torch::Tensor loss =
        cross_entropy(r.logits.index({Slice(), Slice(0, -1)}), tokens.index({Slice(), Slice(1)}));
    const torch::Tensor mtp_loss =
        cross_entropy(r.mtp_logits.index({Slice(), Slice(0, -1)}), tokens.index({Slice(), Slice(2)}));
    optimizer.zero_grad();
    (loss + o.mtp_weight * mtp_loss).backward();
    optimizer.step();
    summary.steps.push_back({step, loss.item<double>(), mtp_loss.item<double>()});
    if (on_step) on_step(summary.steps.back());
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  summary.trained_tokens = o.steps * o.batch * o.seq_len;
  MTP_RETURN_IF_ERROR(export_gguf(model, vocab, "mtp-train-" + o.shape, o.output));
  return summary;
}

}  // namespace mtp::train
