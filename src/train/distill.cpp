#include "train/distill.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>
#include <torch/types.h>  // before clip_grad.h, which uses torch::Tensor without including it

#include <torch/nn/utils/clip_grad.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "base/text_file.h"
#include "base/thread_pool.h"
#include "gguf/gguf_file.h"
#include "quant/quantize.h"
#include "surgery/graft.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"
#include "train/gguf_export.h"
#include "train/qwen_torch.h"
#include "windows.h"

namespace mtp::train {
namespace {

using torch::indexing::Slice;

constexpr int64_t kEvalWindows = 64;  // held-out windows the before/after figures are taken over, at most

// The weight type of an MTP block's matrices (that of nextn.eh_proj; F32 when it has none).
std::string block_type(const surgery::MtpBlock& block) {
  for (const TensorInfo* t : block.tensors)
    if (t->name.ends_with(".nextn.eh_proj.weight")) return std::string(type_name(t->type));
  return "f32";
}

// A donor's MTP block (a full model or a head-only file), dequantized and renamed to block `to`.
Expected<std::vector<NamedValues>> read_block(const GgufFile& file, const surgery::MtpBlock& block,
                                              int64_t to) {
  const std::string from = "blk." + std::to_string(block.index) + ".";
  std::vector<NamedValues> out;
  for (const TensorInfo* t : block.tensors) {
    NamedValues v{"blk." + std::to_string(to) + "." + t->name.substr(from.size()),
                  std::vector<float>(static_cast<size_t>(t->n_elements()))};
    MTP_RETURN_IF_ERROR(dequantize_tensor(nullptr, t->type, file.tensor_data(*t).data(), v.values.data(),
                                          t->n_rows(), t->ne[0])
                            .with_context(file.path() + ": " + t->name));
    for (float x : v.values)
      if (!std::isfinite(x)) return corrupt(file.path(), ": ", t->name, " holds a NaN or infinity");
    out.push_back(std::move(v));
  }
  return out;
}

torch::Tensor token_stream(const Tokenizer& tokenizer, const std::vector<std::string>& files,
                           Status& status) {
  std::vector<int64_t> ids;
  for (const std::string& path : files) {
    Expected<std::string> text = read_text_file(path);
    if (!text.ok()) {
      status = io_error("--data: ", text.status().message());
      return {};
    }
    for (int32_t id : tokenizer.encode(*text)) ids.push_back(id);
  }
  return torch::tensor(ids, torch::kInt64);
}

// KL(trunk || head) per row, the trunk's distribution for token t + 2 (its logits at t + 1) against the MTP
// row for token t + 1: [B, T - 1].
struct Pair {
  torch::Tensor logp, logq;
};

Pair teacher_and_student(const QwenTorch& model, const torch::Tensor& tokens) {
  const ForwardResult r = model.forward(tokens);
  return {r.logits.index({Slice(), Slice(1)}).detach().log_softmax(-1), r.mtp_logits.log_softmax(-1)};
}

torch::Tensor kl_rows(const Pair& p) {
  return (p.logp.exp() * (p.logp - p.logq)).sum(-1);
}

HeadFit evaluate(const QwenTorch& model, const torch::Tensor& stream, int64_t seq_len, int64_t batch) {
  torch::NoGradGuard no_grad;
  HeadFit fit;
  double kl = 0, greedy = 0, sampled = 0;
  for (const torch::Tensor& tokens : spread_windows(stream, seq_len, batch, kEvalWindows)) {
    const Pair p = teacher_and_student(model, tokens);
    kl += kl_rows(p).sum().item<double>();
    greedy += (p.logp.argmax(-1) == p.logq.argmax(-1)).sum().item<double>();
    sampled += torch::minimum(p.logp.exp(), p.logq.exp()).sum(-1).sum().item<double>();
    fit.rows += p.logp.size(0) * p.logp.size(1);
  }
  if (fit.rows > 0) {
    const double rows = static_cast<double>(fit.rows);
    fit.kl = kl / rows;
    fit.greedy_accept = greedy / rows;
    fit.sampled_accept = sampled / rows;
  }
  return fit;
}

// The trunk's own text: each window's first half kept, the rest replaced by what the trunk samples after it
// at T = 1, one token at a time (the drafts the block will meet come from the trunk, not from the data).
torch::Tensor continue_windows(const QwenTorch& model, const torch::Tensor& windows, at::Generator& gen) {
  torch::NoGradGuard no_grad;
  const int64_t T = windows.size(1), keep = T / 2;
  torch::Tensor out = windows.clone();
  for (int64_t t = keep; t < T; ++t) {
    const torch::Tensor logits = model.forward(out.index({Slice(), Slice(0, t)}), false).logits;
    const torch::Tensor probs = logits.index({Slice(), t - 1}).softmax(-1);
    out.index_put_({Slice(), t}, torch::multinomial(probs, 1, false, gen).squeeze(1));
  }
  return out;
}

}  // namespace

Status validate(const DistillOptions& o) {
  if (o.trunk.empty()) return invalid_argument("--trunk: the model whose head is trained is needed");
  if (o.data.empty()) return invalid_argument("--data: at least one text file is needed");
  if (o.output.empty()) return invalid_argument("-o: an output file is needed");
  if (!(o.eval_fraction > 0 && o.eval_fraction < 1))
    return invalid_argument("--eval-fraction must be in (0, 1)");
  if (!o.head_type.empty() && !type_from_name(o.head_type))
    return invalid_argument("--head-type: unknown type '", o.head_type, "'");
  if (o.steps < 0) return invalid_argument("--steps must be 0 (evaluate only) or more");
  if (o.batch < 1) return invalid_argument("--batch must be at least 1");
  if (o.seq_len < 3) return invalid_argument("--seq-len must be at least 3");
  if (!(o.learning_rate > 0)) return invalid_argument("--lr must be positive");
  if (!(o.generated_fraction >= 0 && o.generated_fraction <= 1))
    return invalid_argument("--generated must be in [0, 1]");
  if (o.threads < 1) return invalid_argument("--threads must be at least 1");
  return Status::Ok();
}

Expected<DistillSummary> distill_head(const DistillOptions& o,
                                      const std::function<void(int64_t, double)>& on_step) {
  MTP_RETURN_IF_ERROR(validate(o));
  MTP_ASSIGN_OR_RETURN(StoredModel trunk, read_stored_model(o.trunk));
  MTP_ASSIGN_OR_RETURN(GgufFile trunk_file, GgufFile::open(o.trunk));
  const bool trunk_has_block = trunk.config.n_nextn > 0;
  Qwen35MoeConfig config = trunk.config;
  config.n_nextn = 1;
  DistillSummary summary;

  // The starting block: the donor's (checked as graft checks it; it replaces the trunk's), the trunk's own
  // (already among the trunk's tensors), or new weights.
  std::vector<NamedValues> weights = std::move(trunk.tensors);
  std::string head_type = "f32";
  if (!o.head.empty()) {
    MTP_ASSIGN_OR_RETURN(GgufFile donor, GgufFile::open(o.head));
    surgery::GraftOptions check;
    check.replace = true;
    for (const surgery::GraftProblem& p : surgery::check_graft(trunk_file, donor, check))
      return invalid_argument("--head ", o.head, ": ", p.message);
    MTP_ASSIGN_OR_RETURN(surgery::MtpBlock block, surgery::find_mtp_block(donor));
    MTP_ASSIGN_OR_RETURN(std::vector<NamedValues> donated, read_block(donor, block, config.n_layer));
    const std::string own = "blk." + std::to_string(config.n_layer) + ".";
    std::erase_if(weights, [&](const NamedValues& t) { return t.name.starts_with(own); });
    for (NamedValues& t : donated) weights.push_back(std::move(t));
    head_type = block_type(block);
    summary.head_source = "donor";
  } else if (trunk_has_block) {
    MTP_ASSIGN_OR_RETURN(surgery::MtpBlock block, surgery::find_mtp_block(trunk_file));
    head_type = block_type(block);
    summary.head_source = "trunk";
  } else {
    summary.head_source = "new";
  }
  if (!o.head_type.empty()) head_type = o.head_type;

  at::set_num_threads(o.threads);
  QwenTorch model(config, o.seed);
  MTP_RETURN_IF_ERROR(model.load_stored(weights));
  weights = {};
  model.freeze_trunk();

  MTP_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::create(trunk.vocab));
  Status read_status = Status::Ok();
  const torch::Tensor all = token_stream(tokenizer, o.data, read_status);
  MTP_RETURN_IF_ERROR(read_status);
  const int64_t n_eval = static_cast<int64_t>(static_cast<double>(all.size(0)) * o.eval_fraction);
  const torch::Tensor train_stream = all.index({Slice(0, all.size(0) - n_eval)});
  const torch::Tensor eval_stream = all.index({Slice(all.size(0) - n_eval)});
  summary.train_tokens = train_stream.size(0);
  summary.eval_tokens = eval_stream.size(0);
  if (summary.eval_tokens < o.seq_len || summary.train_tokens <= o.seq_len)
    return invalid_argument("--data has ", all.size(0), " tokens: too few for --seq-len ", o.seq_len,
                            " with --eval-fraction ", o.eval_fraction);

  summary.before = evaluate(model, eval_stream, o.seq_len, o.batch);
  const std::vector<torch::Tensor> trained = model.mtp_parameters();
  torch::optim::AdamW optimizer(
      trained, torch::optim::AdamWOptions(o.learning_rate).betas({0.9, 0.95}).weight_decay(0.0));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed ^ 0x64697374ull);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= o.steps; ++step) {
    torch::Tensor tokens = random_windows(train_stream, o.batch, o.seq_len, gen);
    const int64_t own =
        static_cast<int64_t>(std::lround(o.generated_fraction * static_cast<double>(o.batch)));
    if (own > 0)
      tokens.index_put_({Slice(0, own)}, continue_windows(model, tokens.index({Slice(0, own)}), gen));
    const torch::Tensor loss = kl_rows(teacher_and_student(model, tokens)).mean();
    optimizer.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(trained, kClipNorm);
    optimizer.step();
    summary.losses.push_back(loss.item<double>());
    if (on_step) on_step(step, summary.losses.back());
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  summary.after = evaluate(model, eval_stream, o.seq_len, o.batch);

  // The block onto the trunk as graft writes it: the trained model as an F32 file beside the output, its
  // block grafted onto the trunk file (every other tensor of the trunk byte-identical), the F32 file removed.
  const std::string staged = o.output + ".distill-f32.tmp";
  Status written = export_gguf(model, trunk.vocab, "distill-head", staged);
  if (written.ok()) {
    surgery::GraftOptions g;
    g.replace = trunk_has_block;
    g.head_type = type_from_name(head_type);
    ThreadPool pool(1);
    Expected<surgery::GraftResult> r = surgery::graft(o.trunk, staged, o.output, g, pool);
    if (!r.ok()) written = r.status();
  }
  std::error_code ignored;
  std::filesystem::remove(staged, ignored);
  MTP_RETURN_IF_ERROR(written);
  return summary;
}

}  // namespace mtp::train
