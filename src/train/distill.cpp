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
#include <map>
#include <optional>

#include "base/check.h"
#include "base/text_file.h"
#include "base/thread_pool.h"
#include "gguf/gguf_file.h"
#include "quant/quantize.h"
#include "surgery/graft.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"
#include "train/distill_loss.h"
#include "train/engine_acceptance.h"
#include "train/gguf_export.h"
#include "train/qwen_torch.h"
#include "train/trunk_teacher.h"
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

// A tensor of `file`, dequantized, under `name`; finite (a donor's block is not checked by Model::load).
Expected<NamedValues> read_tensor(const GgufFile& file, const TensorInfo& t, std::string name) {
  MTP_ASSIGN_OR_RETURN(NamedValues v, read_stored_tensor(file, t, std::move(name)));
  for (float x : v.values)
    if (!std::isfinite(x)) return corrupt(file.path(), ": ", t.name, " holds a NaN or infinity");
  return v;
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

// What the block learns from for a batch of windows [B, T]: its inputs, the trunk's post-norm hiddens at rows
// 0..T-2 and the token embeddings of tokens 1..T-1 ([B, T-1, n_embd] each), and its target, the trunk's
// distribution for tokens 2..T (its rows 1..T-1): in full (log-probabilities [B, T-1, V]), or its top_k
// tokens (ids and log-probabilities under the full softmax, [B, T-1, K], most likely first).
struct Targets {
  torch::Tensor hidden, embedded;
  torch::Tensor logp;               // in full; undefined with top-K
  torch::Tensor top_ids, top_logp;  // top-K; undefined in full
};

Expected<Targets> targets_of(TrunkTeacher& teacher, const torch::Tensor& tokens, int64_t top_k) {
  MTP_ASSIGN_OR_RETURN(TrunkTeacher::Signals s, teacher.run(tokens));
  const int64_t T = tokens.size(1);
  Targets t;
  t.hidden = s.hidden.index({Slice(), Slice(0, T - 1)}).contiguous();
  t.embedded = teacher.embed(tokens.index({Slice(), Slice(1, T)}));
  const torch::Tensor logp = s.logits.index({Slice(), Slice(1)}).log_softmax(-1);
  if (top_k <= 0) {
    t.logp = logp;
    return t;
  }
  auto [values, ids] = logp.topk(top_k, -1);
  t.top_logp = values.contiguous();
  t.top_ids = ids.contiguous();
  return t;
}

// The block's log-probabilities for the targets' rows: [B, T-1, V].
torch::Tensor student(const QwenTorch& block, const Targets& t) {
  return block.mtp_logits(t.hidden, t.embedded).log_softmax(-1);
}

// KL(trunk || block) per row [B, T-1].
torch::Tensor kl_rows(const Targets& t, const torch::Tensor& logq) {
  return t.logp.defined() ? kl_full(t.logp, logq) : kl_top_k(t.top_logp, t.top_ids, logq);
}

// The held-out figures over batches of targets (`get(i)` gives batch i of n).
Expected<HeadFit> evaluate(const QwenTorch& block, int64_t n,
                           const std::function<Expected<Targets>(int64_t)>& get) {
  torch::NoGradGuard no_grad;
  HeadFit fit;
  double kl = 0, greedy = 0, sampled = 0;
  for (int64_t i = 0; i < n; ++i) {
    MTP_ASSIGN_OR_RETURN(const Targets t, get(i));
    const torch::Tensor logq = student(block, t);
    kl += kl_rows(t, logq).sum().item<double>();
    if (t.logp.defined()) {
      greedy += (t.logp.argmax(-1) == logq.argmax(-1)).sum().item<double>();
      sampled += torch::minimum(t.logp.exp(), logq.exp()).sum(-1).sum().item<double>();
    } else {  // the trunk's top token is its argmax; min(p, q) summed over the top K only: a lower bound
      greedy += (t.top_ids.select(-1, 0) == logq.argmax(-1)).sum().item<double>();
      sampled +=
          torch::minimum(t.top_logp.exp(), logq.gather(-1, t.top_ids).exp()).sum(-1).sum().item<double>();
    }
    fit.rows += logq.size(0) * logq.size(1);
  }
  if (fit.rows > 0) {
    const double rows = static_cast<double>(fit.rows);
    fit.kl = kl / rows;
    fit.greedy_accept = greedy / rows;
    fit.sampled_accept = sampled / rows;
  }
  return fit;
}

}  // namespace

torch::Tensor kl_full(const torch::Tensor& logp, const torch::Tensor& logq) {
  return (logp.exp() * (logp - logq)).sum(-1);
}

torch::Tensor kl_top_k(const torch::Tensor& top_logp, const torch::Tensor& top_ids,
                       const torch::Tensor& logq) {
  const torch::Tensor logq_top = logq.gather(-1, top_ids);
  const torch::Tensor p_top = top_logp.exp();
  const torch::Tensor p_rest = (1 - p_top.sum(-1)).clamp_min(0);
  const torch::Tensor q_rest = (1 - logq_top.exp().sum(-1)).clamp_min(1e-30);
  return (p_top * (top_logp - logq_top)).sum(-1) + torch::xlogy(p_rest, p_rest) -
         torch::xlogy(p_rest, q_rest);
}

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
  if (o.teacher_top_k < 0) return invalid_argument("--teacher-top-k must be 0 (off) or more");
  if (o.accept_prompts < 1) return invalid_argument("--accept-prompts must be at least 1");
  return validate(o.accept);
}

namespace {

// The held-out windows' first `n` windows as prompts for the engine's acceptance figures.
std::vector<std::vector<int32_t>> prompts_of(const std::vector<torch::Tensor>& batches, int64_t n) {
  std::vector<std::vector<int32_t>> prompts;
  for (const torch::Tensor& b : batches)
    for (int64_t w = 0; w < b.size(0) && static_cast<int64_t>(prompts.size()) < n; ++w) {
      const torch::Tensor ids = b[w].contiguous();
      const int64_t* id = ids.data_ptr<int64_t>();
      prompts.emplace_back(id, id + ids.size(0));
    }
  return prompts;
}

// What the block is trained for and from: the trunk's shape (with one MTP block), vocabulary and file, and
// the donor's file when there is one.
struct BlockSetting {
  const Qwen35MoeConfig& config;
  const Vocab& vocab;
  const GgufFile& trunk_file;
  const GgufFile* donor;
  bool trunk_has_block;
};

// Where each tensor of the block model comes from: the block's LM head is the trunk's (token_embd where the
// file ties them), frozen; the block is the donor's, the trunk's own, or new weights (none read). Sets the
// summary's head_source; returns the written block's weight type.
Expected<std::string> block_sources(
    const DistillOptions& o, const BlockSetting& b,
    std::map<std::string, std::pair<const GgufFile*, const TensorInfo*>>& sources, DistillSummary& summary) {
  const TensorInfo* lm_head = b.trunk_file.find_tensor("output.weight");
  if (lm_head == nullptr) lm_head = b.trunk_file.find_tensor("token_embd.weight");
  MTP_CHECK(lm_head != nullptr, "Model::load checked token_embd");
  sources["output.weight"] = {&b.trunk_file, lm_head};
  const GgufFile* from = b.donor != nullptr ? b.donor : b.trunk_has_block ? &b.trunk_file : nullptr;
  summary.head_source = b.donor != nullptr ? "donor" : b.trunk_has_block ? "trunk" : "new";
  std::string head_type = "f32";
  if (from != nullptr) {
    MTP_ASSIGN_OR_RETURN(surgery::MtpBlock block, surgery::find_mtp_block(*from));
    const std::string prefix = "blk." + std::to_string(block.index) + ".";
    for (const TensorInfo* t : block.tensors)
      sources["blk." + std::to_string(b.config.n_layer) + "." + t->name.substr(prefix.size())] = {from, t};
    head_type = block_type(block);
  }
  return o.head_type.empty() ? head_type : o.head_type;
}

// The training proper: the block model built from its sources, evaluated, trained and evaluated again, then
// written onto the trunk as graft writes it (the trained block as an F32 head-only file beside the output,
// grafted onto the trunk file, every other tensor byte-identical, then removed). Everything libtorch holds
// is freed on return.
Status train_block(const DistillOptions& o, const BlockSetting& b, int64_t n_eval_batches,
                   const std::function<Expected<Targets>(int64_t)>& eval_targets,
                   const std::function<Expected<Targets>(int64_t)>& step_targets,
                   const std::function<void(int64_t, double)>& on_step, DistillSummary& summary) {
  std::map<std::string, std::pair<const GgufFile*, const TensorInfo*>> sources;
  MTP_ASSIGN_OR_RETURN(const std::string head_type, block_sources(o, b, sources, summary));
  QwenTorch model(b.config, o.seed, ModelParts::kMtpBlock);
  std::vector<std::string> names;
  for (const auto& [name, source] : sources) names.push_back(name);
  MTP_RETURN_IF_ERROR(model.load_stored(names, [&](const std::string& name) -> Expected<std::vector<float>> {
    const auto [file, info] = sources.at(name);
    MTP_ASSIGN_OR_RETURN(NamedValues v, read_tensor(*file, *info, name));
    return std::move(v.values);
  }));
  model.freeze_trunk();  // the LM head
  if (o.freeze_experts) model.freeze_block_experts();

  MTP_ASSIGN_OR_RETURN(summary.before, evaluate(model, n_eval_batches, eval_targets));
  std::vector<torch::Tensor> trained = model.mtp_parameters();
  std::erase_if(trained, [](const torch::Tensor& t) { return !t.requires_grad(); });
  torch::optim::AdamW optimizer(
      trained, torch::optim::AdamWOptions(o.learning_rate).betas({0.9, 0.95}).weight_decay(0.0));
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= o.steps; ++step) {
    MTP_ASSIGN_OR_RETURN(const Targets t, step_targets(step));
    const torch::Tensor loss = kl_rows(t, student(model, t)).mean();
    optimizer.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(trained, kClipNorm);
    optimizer.step();
    summary.losses.push_back(loss.item<double>());
    if (on_step) on_step(step, summary.losses.back());
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MTP_ASSIGN_OR_RETURN(summary.after, evaluate(model, n_eval_batches, eval_targets));

  const std::string staged = o.output + ".distill-f32.tmp";
  Status written = export_gguf(model, b.vocab, "distill-head", staged);
  if (written.ok()) {
    surgery::GraftOptions g;
    g.replace = b.trunk_has_block;
    g.head_type = type_from_name(head_type);
    ThreadPool pool(1);
    Expected<surgery::GraftResult> r = surgery::graft(o.trunk, staged, o.output, g, pool);
    if (!r.ok()) written = r.status();
  }
  std::error_code ignored;
  std::filesystem::remove(staged, ignored);
  return written;
}

}  // namespace

Expected<DistillSummary> distill_head(const DistillOptions& o,
                                      const std::function<void(int64_t, double)>& on_step) {
  MTP_RETURN_IF_ERROR(validate(o));
  at::set_num_threads(o.threads);
  // The trunk runs in the engine (with the donor's block when there is one, for the engine's "before"
  // figures); libtorch holds the block and the LM head it reads.
  std::optional<TrunkTeacher> teacher;
  MTP_ASSIGN_OR_RETURN(teacher, TrunkTeacher::open(o.trunk, o.head, o.threads, o.seq_len));
  // What is needed of the trunk's model once the engine may be gone (--teacher-top-k).
  const Model& trunk = teacher->model();
  if (trunk.params().attention_scale != 0 || trunk.params().expert_weights_scale != 0)
    return unsupported(o.trunk,
                       ": attention.scale or expert_weights_scale is set; training does not model them");
  if (trunk.vocab().tokens.empty()) return unsupported(o.trunk, ": the file has no tokenizer");
  if (o.teacher_top_k > trunk.config().n_vocab)
    return invalid_argument("--teacher-top-k ", o.teacher_top_k, " is more than the vocabulary's ",
                            trunk.config().n_vocab, " tokens");
  const bool trunk_has_block = trunk.config().n_nextn > 0;
  Qwen35MoeConfig config = trunk.config();
  config.n_nextn = 1;
  const Vocab vocab = trunk.vocab();
  MTP_ASSIGN_OR_RETURN(GgufFile trunk_file, GgufFile::open(o.trunk));  // outlives the engine
  DistillSummary summary;
  // A donor is checked as graft checks it (its block replaces the trunk's).
  std::optional<GgufFile> donor;
  if (!o.head.empty()) {
    MTP_ASSIGN_OR_RETURN(donor, GgufFile::open(o.head));
    surgery::GraftOptions check;
    check.replace = true;
    for (const surgery::GraftProblem& p : surgery::check_graft(trunk_file, *donor, check))
      return invalid_argument("--head ", o.head, ": ", p.message);
  }

  MTP_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::create(vocab));
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
  const std::vector<torch::Tensor> eval_windows =
      spread_windows(eval_stream, o.seq_len, o.batch, kEvalWindows);
  const std::vector<std::vector<int32_t>> prompts = prompts_of(eval_windows, o.accept_prompts);
  summary.engine_prompts = static_cast<int64_t>(prompts.size());
  AcceptanceOptions accept = o.accept;
  accept.threads = o.threads;
  if (accept.tokens > 0 && trunk.has_mtp()) {
    MTP_ASSIGN_OR_RETURN(summary.engine_before, engine_acceptance(trunk, prompts, accept, teacher->pool()));
  }

  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed ^ 0x64697374ull);
  // A step's windows: random ones of the training tokens, a share of them continued by the trunk.
  auto train_windows = [&]() -> Expected<torch::Tensor> {
    torch::Tensor tokens = random_windows(train_stream, o.batch, o.seq_len, gen);
    const int64_t own =
        static_cast<int64_t>(std::lround(o.generated_fraction * static_cast<double>(o.batch)));
    if (own > 0) {
      MTP_ASSIGN_OR_RETURN(const torch::Tensor generated,
                           teacher->continue_windows(tokens.index({Slice(0, own)}), o.seq_len / 2, gen));
      tokens.index_put_({Slice(0, own)}, generated);
    }
    return tokens;
  };
  // With --teacher-top-k, the trunk first runs over every window of the run (the same windows, drawn in the
  // same order), keeping the block's inputs and the trunk's top K, and the engine is freed before the block
  // is built: a trunk that fills the memory on its own and the block then fit one after the other.
  std::vector<Targets> cached_eval, cached_train;
  if (o.teacher_top_k > 0) {
    for (const torch::Tensor& w : eval_windows) {
      MTP_ASSIGN_OR_RETURN(Targets t, targets_of(*teacher, w, o.teacher_top_k));
      cached_eval.push_back(std::move(t));
    }
    for (int64_t step = 1; step <= o.steps; ++step) {
      MTP_ASSIGN_OR_RETURN(const torch::Tensor tokens, train_windows());
      MTP_ASSIGN_OR_RETURN(Targets t, targets_of(*teacher, tokens, o.teacher_top_k));
      cached_train.push_back(std::move(t));
    }
    teacher.reset();
  }
  auto eval_targets = [&](int64_t i) -> Expected<Targets> {
    if (!teacher) return cached_eval[static_cast<size_t>(i)];
    return targets_of(*teacher, eval_windows[static_cast<size_t>(i)], 0);
  };
  auto step_targets = [&](int64_t step) -> Expected<Targets> {
    if (!teacher) return cached_train[static_cast<size_t>(step - 1)];
    MTP_ASSIGN_OR_RETURN(const torch::Tensor tokens, train_windows());
    return targets_of(*teacher, tokens, 0);
  };
  const BlockSetting setting{config, vocab, trunk_file, donor ? &*donor : nullptr, trunk_has_block};
  MTP_RETURN_IF_ERROR(train_block(o, setting, static_cast<int64_t>(eval_windows.size()), eval_targets,
                                  step_targets, on_step, summary));
  // The written file in the engine, alone in memory.
  teacher.reset();
  if (accept.tokens > 0) {
    MTP_ASSIGN_OR_RETURN(summary.engine_after, engine_acceptance(o.output, prompts, accept));
  }
  return summary;
}

}  // namespace mtp::train
