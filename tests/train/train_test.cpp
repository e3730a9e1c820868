// mtp-train's foundations: the chunked Gated DeltaNet against the step-by-step recurrence (values and
// gradients), the dispatched MoE against the dense one, the libtorch model against our reference forward on
// its exported GGUF (trunk and MTP block), a corpus directory's files, split and manifest, and short training
// runs that lower the loss and write the loss curve.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "../gguf/test_util.h"
#include "model/model.h"
#include "model/reference_forward.h"
#include "tokenizer/bpe_trainer.h"
#include "train/corpus.h"
#include "train/distill.h"
#include "train/distill_loss.h"
#include "train/gguf_export.h"
#include "train/qwen_torch.h"
#include "train/trainer.h"
#include "train/trunk_teacher.h"

namespace mtp::train {
namespace {

using testing::TempDir;
using torch::indexing::Slice;

Qwen35MoeConfig tiny_config() {
  auto c = qwen35moe_shape("tiny", 0);
  EXPECT_TRUE(c.ok());
  c->n_nextn = 1;
  return *c;
}

// Random delta-rule inputs as the model produces them: unit q and k, beta in (0, 1), decays in (-inf, 0].
DeltaInputs random_inputs(int64_t B, int64_t H, int64_t T, int64_t dk, int64_t dv, uint64_t seed) {
  torch::manual_seed(seed);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  auto unit = [&](int64_t d) {
    torch::Tensor x = torch::randn({B, H, T, d}, f64);
    return x / x.norm(2, {-1}, true);
  };
  DeltaInputs in{unit(dk) / std::sqrt(static_cast<double>(dk)), unit(dk), torch::randn({B, H, T, dv}, f64),
                 torch::sigmoid(torch::randn({B, H, T}, f64)), -torch::exp(torch::randn({B, H, T}, f64))};
  for (torch::Tensor* t : {&in.q, &in.k, &in.v, &in.beta, &in.g}) t->set_requires_grad(true);
  return in;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(DeltaRule, ChunkedMatchesRecurrenceInValuesAndGradients) {
  // T = 37 is not a multiple of the chunk (padding), and spans several chunks (carried state).
  const DeltaInputs in = random_inputs(2, 3, 37, 5, 6, 11);
  const torch::Tensor weights = torch::randn({2, 3, 37, 6}, torch::TensorOptions().dtype(torch::kFloat64));
  const torch::Tensor rec = delta_rule_recurrent(in);
  ASSERT_EQ(rec.sizes(), weights.sizes());
  for (int64_t chunk : {1, 4, 8, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const torch::Tensor chk = delta_rule_chunked(in, chunk);
    EXPECT_LT(max_abs_diff(rec, chk), 1e-10);
    const std::vector<torch::Tensor> inputs = {in.q, in.k, in.v, in.beta, in.g};
    const auto g_rec = torch::autograd::grad({(rec * weights).sum()}, inputs, {}, true);
    const auto g_chk = torch::autograd::grad({(chk * weights).sum()}, inputs, {}, true);
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_GT(g_rec[i].abs().max().item<double>(), 1e-3) << "input " << i;
      EXPECT_LT(max_abs_diff(g_rec[i], g_chk[i]), 1e-10) << "input " << i;
    }
  }
}

TEST(DeltaRule, ChunkedIsStableInFloat) {
  const DeltaInputs in = random_inputs(1, 2, 130, 16, 16, 5);
  auto to_float = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat32); };
  const DeltaInputs f{to_float(in.q), to_float(in.k), to_float(in.v), to_float(in.beta), to_float(in.g)};
  EXPECT_LT(max_abs_diff(delta_rule_recurrent(in).detach(), delta_rule_chunked(f, 64).to(torch::kFloat64)),
            1e-5);
}

TEST(Moe, DispatchedExpertsMatchDenseInValuesAndGradients) {
  torch::manual_seed(9);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).requires_grad(true);
  const int64_t N = 37, n = 12, ff = 7, E = 6, k = 2;
  const torch::Tensor x = torch::randn({N, n}, f64);
  const ExpertWeights w{torch::randn({E, n}, f64), torch::randn({E, ff, n}, f64),
                        torch::randn({E, ff, n}, f64), torch::randn({E, n, ff}, f64)};
  const torch::Tensor weights = torch::randn({N, n}, torch::TensorOptions().dtype(torch::kFloat64));
  const torch::Tensor dense = routed_experts_dense(x, w, k);
  const torch::Tensor dispatched = routed_experts_dispatched(x, w, k);
  EXPECT_GT(dense.abs().max().item<double>(), 1e-2);
  EXPECT_LT(max_abs_diff(dense, dispatched), 1e-12);
  const std::vector<torch::Tensor> inputs = {x, w.router, w.gate, w.up, w.down};
  const auto g_dense = torch::autograd::grad({(dense * weights).sum()}, inputs, {}, true);
  const auto g_disp = torch::autograd::grad({(dispatched * weights).sum()}, inputs, {}, true);
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_GT(g_dense[i].abs().max().item<double>(), 1e-3) << "input " << i;
    EXPECT_LT(max_abs_diff(g_dense[i], g_disp[i]), 1e-10) << "input " << i;
  }
}

TEST(QwenTorch, ChunkedAndRecurrentModelsAgree) {
  const QwenTorch model(tiny_config(), 3);
  torch::manual_seed(4);
  const torch::Tensor tokens = torch::randint(512, {2, 70}, torch::TensorOptions().dtype(torch::kInt64));
  const ForwardResult a = model.forward(tokens, true, DeltaForm::kChunked);
  const ForwardResult b = model.forward(tokens, true, DeltaForm::kRecurrent);
  EXPECT_LT(max_abs_diff(a.logits, b.logits), 1e-4);
  EXPECT_LT(max_abs_diff(a.mtp_logits, b.mtp_logits), 1e-4);
}

// Largest |a - b| over the logit range of b.
double relative_to_range(const float* a, const torch::Tensor& b) {
  const torch::Tensor ref = torch::from_blob(const_cast<float*>(a), {b.numel()}, torch::kFloat32);
  return max_abs_diff(ref, b.reshape({-1})) / (b.max() - b.min()).item<double>();
}

TEST(Export, ReferenceForwardOnTheExportedFileMatchesLibtorch) {
  TempDir dir;
  const std::string path = dir.file("trained.gguf");
  const QwenTorch model(tiny_config(), 9);
  ASSERT_TRUE(export_gguf(model, train_bpe(builtin_training_corpus(), 200), "roundtrip", path).ok());
  auto loaded = Model::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ASSERT_TRUE(loaded->has_mtp());

  const int64_t T = 9;
  const torch::Tensor tokens =
      torch::tensor(std::vector<int64_t>{3, 300, 17, 17, 511, 0, 42, 256, 99}).view({1, T});
  torch::NoGradGuard no_grad;
  const ForwardResult want = model.forward(tokens);
  ReferenceState state(loaded->config());
  std::vector<std::vector<float>> hidden;
  for (int64_t p = 0; p < T; ++p) {
    const ForwardOutput got =
        forward_token(*loaded, state, static_cast<int32_t>(tokens[0][p].item<int64_t>()), p, true);
    EXPECT_LT(relative_to_range(got.logits.data(), want.logits[0][p]), 1e-4) << "trunk position " << p;
    hidden.push_back(got.hidden);
  }
  for (int64_t p = 1; p < T; ++p) {
    const ForwardOutput got = mtp_draft_logits(*loaded, state, hidden[p - 1],
                                               static_cast<int32_t>(tokens[0][p].item<int64_t>()), p, true);
    EXPECT_LT(relative_to_range(got.logits.data(), want.mtp_logits[0][p - 1]), 1e-4) << "MTP position " << p;
  }
}

TEST(Export, RefusesIncompleteOrMisshapenTensors) {
  TempDir dir;
  const Qwen35MoeConfig c = tiny_config();
  auto vocab = pad_vocab(train_bpe(builtin_training_corpus(), 50), c.n_vocab);
  ASSERT_TRUE(vocab.ok());
  const Status missing = write_f32_gguf(c, *vocab, {}, "x", dir.file("a.gguf"));
  EXPECT_NE(missing.message().find("missing"), std::string::npos) << missing.message();
  std::vector<NamedValues> tensors;
  for (auto& [name, t] : QwenTorch(c, 1).export_tensors())
    tensors.push_back({name, std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel())});
  EXPECT_TRUE(write_f32_gguf(c, *vocab, tensors, "x", dir.file("c.gguf")).ok());
  for (NamedValues& t : tensors)
    if (t.name == "token_embd.weight") t.values.resize(1);
  const Status wrong = write_f32_gguf(c, *vocab, tensors, "x", dir.file("b.gguf"));
  EXPECT_NE(wrong.message().find("token_embd.weight has 1 values"), std::string::npos) << wrong.message();
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.gguf")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.gguf")));
  EXPECT_FALSE(pad_vocab(*vocab, 10).ok());
}

TEST(Train, AFewStepsLowerTheLoss) {
  TempDir dir;
  const std::string corpus = dir.file("corpus.txt");
  std::ofstream(corpus) << builtin_training_corpus();
  TrainOptions o;
  o.corpus = {corpus};
  o.output = dir.file("out.gguf");
  o.steps = 25;
  o.batch = 4;
  o.seq_len = 32;
  o.learning_rate = 1e-2;
  auto summary = train(o, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  ASSERT_EQ(summary->steps.size(), 25u);
  auto mean = [&](size_t from, size_t to, bool mtp) {
    double s = 0;
    for (size_t i = from; i < to; ++i) s += mtp ? summary->steps[i].mtp_loss : summary->steps[i].loss;
    return s / static_cast<double>(to - from);
  };
  EXPECT_LT(mean(20, 25, false), mean(0, 5, false) - 0.5);
  EXPECT_LT(mean(20, 25, true), mean(0, 5, true) - 0.5);
  auto loaded = Model::load(o.output);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
}

TEST(Train, BadInputIsAClearError) {
  TempDir dir;
  TrainOptions o;
  o.corpus = {dir.file("absent.txt")};
  o.output = dir.file("out.gguf");
  auto missing = train(o, nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("absent.txt"), std::string::npos);
  o.steps = 0;
  EXPECT_NE(validate(o).message().find("--steps"), std::string::npos);
  o.steps = 1;
  o.shape = "huge";
  EXPECT_NE(validate(o).message().find("--shape"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(o.output));
}

// Whether two stored models hold the same values under `prefix` (every tensor whose name starts with it).
bool same_values(const StoredModel& a, const StoredModel& b, const std::string& prefix) {
  std::map<std::string, const std::vector<float>*> by_name;
  for (const NamedValues& t : b.tensors) by_name[t.name] = &t.values;
  int compared = 0;
  for (const NamedValues& t : a.tensors) {
    if (t.name.rfind(prefix, 0) != 0) continue;
    auto it = by_name.find(t.name);
    if (it == by_name.end() || *it->second != t.values) return false;
    ++compared;
  }
  return compared > 0;
}

// A file read back into the training model computes what the model that wrote it did.
TEST(Import, AStoredModelReadBackComputesTheSame) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  const QwenTorch written(tiny_config(), 9);
  ASSERT_TRUE(export_gguf(written, train_bpe(builtin_training_corpus(), 200), "m", path).ok());
  auto stored = read_stored_model(path);
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  QwenTorch read(stored->config, 1234);  // other initial weights, all replaced
  ASSERT_TRUE(read.load_stored(stored->tensors).ok());
  const torch::Tensor tokens =
      torch::tensor(std::vector<int64_t>{3, 300, 17, 17, 511, 0, 42, 256}).view({1, 8});
  torch::NoGradGuard no_grad;
  const ForwardResult want = written.forward(tokens), got = read.forward(tokens);
  EXPECT_LT(max_abs_diff(got.logits, want.logits), 1e-5);
  EXPECT_LT(max_abs_diff(got.mtp_logits, want.mtp_logits), 1e-5);
  // A tensor the training model does not have, or of another size, is refused.
  std::vector<NamedValues> extra = stored->tensors;
  extra.push_back({"blk.4.nextn.shared_head_head.weight", {1.0f}});
  EXPECT_NE(read.load_stored(extra).message().find("shared_head_head"), std::string::npos);
  std::vector<NamedValues> short_one = stored->tensors;
  short_one[0].values.pop_back();
  EXPECT_NE(read.load_stored(short_one).message().find(short_one[0].name), std::string::npos);
}

// --init continues training a model file (here the Q8_0 test model): with no MTP loss, the file written has
// the init file's MTP block values and a changed trunk, the finetune with a stale head; with one, the block
// trains too.
TEST(Train, InitContinuesFromAFileAndAFrozenHeadStaysAsItWas) {
  TempDir dir;
  const std::string init = std::string(MTP_SOURCE_DIR) + "/tests/data/example.gguf";
  const std::string corpus = dir.file("corpus.txt");
  std::ofstream(corpus) << builtin_training_corpus();
  auto before = read_stored_model(init);
  ASSERT_TRUE(before.ok()) << before.status().message();
  TrainOptions o;
  o.corpus = {corpus};
  o.init = init;
  o.steps = 3;
  o.batch = 2;
  o.seq_len = 16;
  for (double mtp_weight : {0.0, 0.3}) {
    o.mtp_weight = mtp_weight;
    o.output = dir.file("ft-" + std::to_string(mtp_weight) + ".gguf");
    auto summary = train(o, nullptr);
    ASSERT_TRUE(summary.ok()) << summary.status().message();
    auto after = read_stored_model(o.output);
    ASSERT_TRUE(after.ok()) << after.status().message();
    EXPECT_EQ(after->config.n_embd, before->config.n_embd);
    EXPECT_EQ(after->vocab.tokens, before->vocab.tokens);
    const std::string block = "blk." + std::to_string(before->config.n_layer) + ".";
    EXPECT_EQ(same_values(*after, *before, block), mtp_weight == 0) << "MTP weight " << mtp_weight;
    EXPECT_FALSE(same_values(*after, *before, "blk.0."));
  }
  o.shape = "tiny";
  EXPECT_NE(validate(o).message().find("--init"), std::string::npos);
  o.shape = "";
  o.init = dir.file("absent.gguf");
  auto missing = train(o, nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("absent.gguf"), std::string::npos);
}

// The top-K divergence is the KL of the two distributions with every token outside p's top K merged into one
// outcome: computed here by merging them, for K = 1, 5 and the whole vocabulary (then the full KL).
TEST(DistillHead, TopKDivergenceIsTheKlWithTheOtherTokensMerged) {
  torch::manual_seed(3);
  const int64_t V = 50;
  const torch::Tensor logp = (2 * torch::randn({4, V})).log_softmax(-1);
  const torch::Tensor logq = (2 * torch::randn({4, V})).log_softmax(-1);
  for (int64_t K : {int64_t{1}, int64_t{5}, V}) {
    auto [top_logp, top_ids] = logp.topk(K, -1);
    const torch::Tensor p = logp.exp(), q = logq.exp();
    const torch::Tensor pk = p.gather(-1, top_ids), qk = q.gather(-1, top_ids);
    // [..., K + 1]: the K tokens, then the rest.
    const torch::Tensor pm = torch::cat({pk, (1 - pk.sum(-1, true)).clamp_min(0)}, -1);
    const torch::Tensor qm = torch::cat({qk, (1 - qk.sum(-1, true)).clamp_min(1e-30)}, -1);
    const torch::Tensor merged = (torch::xlogy(pm, pm) - torch::xlogy(pm, qm)).sum(-1);
    const torch::Tensor got = kl_top_k(top_logp, top_ids, logq);
    EXPECT_LT((got - merged).abs().max().item<double>(), 1e-5) << K;
    EXPECT_TRUE((got <= kl_full(logp, logq) + 1e-5).all().item<bool>()) << K;
    EXPECT_TRUE((got >= -1e-6).all().item<bool>()) << K;
  }
  auto [all_logp, all_ids] = logp.topk(V, -1);
  EXPECT_LT((kl_top_k(all_logp, all_ids, logq) - kl_full(logp, logq)).abs().max().item<double>(), 1e-5);
}

// distill-head's two halves against the whole model in libtorch: the engine's trunk pass (TrunkTeacher) gives
// the hidden states and logits libtorch computes for the same F32 file, and a model of the MTP block alone,
// fed them and the token embeddings, gives the whole model's MTP logits.
TEST(DistillHead, EngineTrunkAndBlockOnlyModelMatchTheWholeModel) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  const QwenTorch whole(tiny_config(), 5);
  ASSERT_TRUE(export_gguf(whole, train_bpe(builtin_training_corpus(), 200), "t", path).ok());
  const int64_t T = 40;
  auto teacher = TrunkTeacher::open(path, "", 2, T);
  ASSERT_TRUE(teacher.ok()) << teacher.status().message();
  torch::manual_seed(6);
  const torch::Tensor tokens = torch::randint(512, {3, T}, torch::TensorOptions().dtype(torch::kInt64));
  auto s = teacher->run(tokens);
  ASSERT_TRUE(s.ok()) << s.status().message();
  torch::NoGradGuard no_grad;
  const ForwardResult r = whole.forward(tokens);
  EXPECT_LT((s->hidden - r.hidden).abs().max().item<double>(), 1e-4);
  EXPECT_LT((s->logits - r.logits).abs().max().item<double>(), 1e-4);
  for (const auto& [name, t] : whole.export_tensors()) {
    if (name != "token_embd.weight") continue;
    EXPECT_TRUE(
        torch::equal(teacher->embed(tokens), t.index_select(0, tokens.reshape({-1})).view({3, T, -1})));
  }

  auto stored = read_stored_model(path);
  ASSERT_TRUE(stored.ok());
  std::erase_if(stored->tensors, [](const NamedValues& t) {
    return t.name != "output.weight" && !t.name.starts_with("blk.4.");
  });
  QwenTorch block(tiny_config(), 7, ModelParts::kMtpBlock);
  ASSERT_TRUE(block.load_stored(stored->tensors).ok());
  using torch::indexing::Slice;
  const torch::Tensor q = block.mtp_logits(s->hidden.index({Slice(), Slice(0, T - 1)}),
                                           teacher->embed(tokens.index({Slice(), Slice(1, T)})));
  EXPECT_LT((q - r.mtp_logits).abs().max().item<double>(), 1e-4);
  // The block model holds the block and the LM head, and writes the block alone.
  EXPECT_EQ(block.parameters().size(), block.mtp_parameters().size() + 1);
  for (const auto& [name, t] : block.export_tensors()) EXPECT_TRUE(name.starts_with("blk.4.")) << name;
}

// distill-head on a random tiny model: the block's KL to the trunk falls on held-out text, and every tensor
// outside the MTP block is byte-identical to the trunk file's.
TEST(DistillHead, TrainsTheBlockAndKeepsTheTrunkByteForByte) {
  TempDir dir;
  const std::string trunk = dir.file("trunk.gguf"), data = dir.file("data.txt");
  ASSERT_TRUE(
      export_gguf(QwenTorch(tiny_config(), 5), train_bpe(builtin_training_corpus(), 200), "t", trunk).ok());
  std::ofstream(data) << builtin_training_corpus();
  DistillOptions d{.trunk = trunk,
                   .data = {data},
                   .output = dir.file("out.gguf"),
                   .steps = 30,
                   .batch = 4,
                   .seq_len = 32,
                   .learning_rate = 1e-2,
                   .generated_fraction = 0.25};
  auto summary = distill_head(d, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  EXPECT_EQ(summary->head_source, "trunk");
  EXPECT_GT(summary->before.rows, 0);
  EXPECT_LT(summary->after.kl, 0.8 * summary->before.kl);
  EXPECT_GT(summary->after.sampled_accept, summary->before.sampled_accept);
  // The engine's acceptance by draft position, before (the trunk's own block) and after (the file written).
  ASSERT_TRUE(summary->engine_before && summary->engine_after);
  const std::vector<double> before = summary->engine_before->acc_rate_per_pos(),
                            after = summary->engine_after->acc_rate_per_pos();
  ASSERT_EQ(before.size(), 3u);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_GT(summary->engine_before->rounds, 50);
  EXPECT_GT(after[0], before[0] + 0.05);

  auto in = GgufFile::open(trunk), out = GgufFile::open(d.output);
  ASSERT_TRUE(in.ok() && out.ok());
  ASSERT_EQ(in->tensors().size(), out->tensors().size());
  int same = 0, changed = 0;
  for (const TensorInfo& t : in->tensors()) {
    const TensorInfo* u = out->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    const std::span<const uint8_t> a = in->tensor_data(t), b = out->tensor_data(*u);
    const bool equal = std::equal(a.begin(), a.end(), b.begin(), b.end());
    if (t.name.rfind("blk.4.", 0) == 0) {
      changed += !equal;
    } else {
      EXPECT_TRUE(equal) << t.name;
      same += equal;
    }
  }
  EXPECT_GT(same, 0);
  EXPECT_GT(changed, 0);

  // --freeze-experts: the block's routed experts are written as they were, the rest of it trained.
  DistillOptions frozen = d;
  frozen.steps = 5;
  frozen.freeze_experts = true;
  frozen.output = dir.file("frozen.gguf");
  ASSERT_TRUE(distill_head(frozen, nullptr).ok());
  auto f = GgufFile::open(frozen.output);
  ASSERT_TRUE(f.ok());
  int experts = 0, trained = 0;
  for (const TensorInfo& t : in->tensors()) {
    if (t.name.rfind("blk.4.", 0) != 0) continue;
    const std::span<const uint8_t> a = in->tensor_data(t), b = f->tensor_data(*f->find_tensor(t.name));
    const bool equal = std::equal(a.begin(), a.end(), b.begin(), b.end());
    if (t.name.ends_with("_exps.weight")) {
      EXPECT_TRUE(equal) << t.name;
      ++experts;
    } else {
      trained += !equal;
    }
  }
  EXPECT_EQ(experts, 3);
  EXPECT_GT(trained, 0);

  // --teacher-top-k: the trunk first, then the block. With K the whole vocabulary, the same windows, losses
  // and figures as with the trunk beside the block; with a few tokens, the KL still falls.
  DistillOptions live = d;
  live.steps = 6;
  live.output = dir.file("live.gguf");
  DistillOptions first = live;
  first.teacher_top_k = tiny_config().n_vocab;
  first.output = dir.file("first.gguf");
  auto a = distill_head(live, nullptr), b = distill_head(first, nullptr);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().message();
  for (size_t i = 0; i < a->losses.size(); ++i) EXPECT_NEAR(a->losses[i], b->losses[i], 1e-5) << i;
  EXPECT_NEAR(a->before.kl, b->before.kl, 1e-5);
  EXPECT_NEAR(a->after.kl, b->after.kl, 1e-5);
  EXPECT_NEAR(a->after.greedy_accept, b->after.greedy_accept, 1e-9);
  EXPECT_NEAR(a->after.sampled_accept, b->after.sampled_accept, 1e-5);
  first.teacher_top_k = 8;
  first.steps = 30;
  auto few = distill_head(first, nullptr);
  ASSERT_TRUE(few.ok());
  EXPECT_LT(few->after.kl, 0.8 * few->before.kl);
  // Before training, the same block as the full run's: the same argmax agreement, lower bounds of the KL
  // (the other tokens merged) and of the sampled acceptance.
  EXPECT_NEAR(few->before.greedy_accept, a->before.greedy_accept, 1e-9);
  EXPECT_LT(few->before.kl, a->before.kl);
  EXPECT_GT(few->before.kl, 0.0);
  EXPECT_LT(few->before.sampled_accept, a->before.sampled_accept);
  first.teacher_top_k = tiny_config().n_vocab + 1;
  EXPECT_FALSE(distill_head(first, nullptr).ok());

  // A quarter of each batch is the trunk's own text: the same first batch with it loses another KL. Without
  // --accept-tokens, no engine figures.
  const std::string trained_file = d.output;
  d.steps = 1;
  d.output = dir.file("one.gguf");
  d.accept.tokens = 0;
  auto with = distill_head(d, nullptr);
  d.generated_fraction = 0;
  auto without = distill_head(d, nullptr);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_NE(with->losses[0], without->losses[0]);
  EXPECT_FALSE(with->engine_before || with->engine_after);

  // The first run's file as the donor; no steps: the figures before and after are the same, and the engine
  // drafts with the donor's (trained) block before, as that file did after.
  d.head = trained_file;
  d.steps = 0;
  d.accept.tokens = 32;
  auto donor = distill_head(d, nullptr);
  ASSERT_TRUE(donor.ok()) << donor.status().message();
  EXPECT_EQ(donor->head_source, "donor");
  EXPECT_EQ(donor->before.kl, donor->after.kl);
  ASSERT_TRUE(donor->engine_before && donor->engine_after);
  EXPECT_EQ(donor->engine_before->accepted_at, summary->engine_after->accepted_at);
  EXPECT_EQ(donor->engine_after->accepted_at, summary->engine_after->accepted_at);
  // A donor with another vocabulary is refused, naming it, and nothing is written.
  const std::string other = dir.file("other.gguf");
  ASSERT_TRUE(
      export_gguf(QwenTorch(tiny_config(), 6), train_bpe(builtin_training_corpus(), 150), "o", other).ok());
  d.head = other;
  d.output = dir.file("refused.gguf");
  auto refused = distill_head(d, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("other.gguf"), std::string::npos) << refused.status().message();
  EXPECT_FALSE(std::filesystem::exists(d.output));
  d.data = {};
  EXPECT_NE(validate(d).message().find("--data"), std::string::npos);
  d.data = {data};
  d.accept.tokens = kMaxAcceptTokens + 1;
  EXPECT_NE(validate(d).message().find("--accept-tokens"), std::string::npos);
  d.accept.tokens = 32;
  d.accept.draft_max = 0;
  EXPECT_NE(validate(d).message().find("--accept-draft-max"), std::string::npos);
}

void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(Corpus, SortedMatchingFilesWithAManifest) {
  TempDir dir;
  write(dir.path() / "b.py", "abc");
  write(dir.path() / "a/z.py", "x = 1\n");
  write(dir.path() / "a/test/t.py", "skipped\n");
  write(dir.path() / "notes.txt", "skipped\n");
  std::filesystem::create_symlink(dir.path() / "b.py", dir.path() / "link.py");
  auto files = read_corpus_dir({dir.path().string(), "*.py", {"test"}, 0.0});
  ASSERT_TRUE(files.ok()) << files.status().message();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].path, "a/z.py");
  EXPECT_EQ((*files)[1].path, "b.py");
  EXPECT_EQ((*files)[1].text, "abc");
  EXPECT_EQ(corpus_manifest(*files),
            "path\tbytes\tsha256\tsplit\n"
            "a/z.py\t6\t" +
                (*files)[0].sha256 +
                "\ttrain\n"
                "b.py\t3\tba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\ttrain\n");
  EXPECT_FALSE(read_corpus_dir({dir.file("absent"), "*.py", {}, 0.0}).ok());
  auto none = read_corpus_dir({dir.path().string(), "*.rs", {}, 0.0});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no file"), std::string::npos);
}

TEST(Corpus, HoldsOutAboutTheAskedFractionByPath) {
  int held = 0;
  for (int i = 0; i < 20000; ++i) held += is_held_out("pkg" + std::to_string(i) + "/mod.py", 0.05) ? 1 : 0;
  EXPECT_GT(held, 800);
  EXPECT_LT(held, 1200);
  EXPECT_FALSE(is_held_out("pkg1/mod.py", 0.0));
  EXPECT_EQ(is_held_out("a/b.py", 0.3), is_held_out("a/b.py", 0.3));
}

// A corpus directory with at least one held-out and one training file, from the bundled corpus's lines.
std::string split_corpus_dir(const TempDir& dir, double holdout) {
  const std::string root = dir.file("corpus");
  std::istringstream lines{std::string(builtin_training_corpus())};
  std::string line, text;
  int file = 0;
  bool held = false, trained = false;
  while (std::getline(lines, line)) {
    text += line + "\n";
    if (text.size() < 400) continue;
    const std::string name = "f" + std::to_string(file++) + ".py";
    (is_held_out(name, holdout) ? held : trained) = true;
    write(std::filesystem::path(root) / name, text);
    text.clear();
  }
  EXPECT_TRUE(held && trained);
  return root;
}

TEST(Train, CorpusDirectoryRunWritesManifestLossCurveAndHeldOutLoss) {
  TempDir dir;
  TrainOptions o;
  o.corpus_dir = split_corpus_dir(dir, 0.3);
  o.glob = "*.py";
  o.holdout = 0.3;
  o.manifest = dir.file("manifest.tsv");
  o.loss_csv = dir.file("loss.csv");
  o.eval_every = 2;
  o.output = dir.file("out.gguf");
  o.steps = 5;
  o.seq_len = 16;
  o.schedule = "cosine";
  o.warmup = 2;
  auto summary = train(o, nullptr);
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  ASSERT_TRUE(summary->has_heldout);
  EXPECT_GT(summary->heldout.tokens, 0);
  EXPECT_GT(summary->heldout.loss, 0);
  EXPECT_NEAR(summary->heldout.bits_per_byte,
              summary->heldout.loss * static_cast<double>(summary->heldout.stream_tokens) /
                  static_cast<double>(summary->heldout.bytes) / std::log(2.0),
              1e-9);
  // Warmup, then cosine down to 10% of the peak at the last step.
  ASSERT_EQ(summary->steps.size(), 5u);
  EXPECT_NEAR(summary->steps[0].learning_rate, o.learning_rate / 2, 1e-12);
  EXPECT_NEAR(summary->steps[1].learning_rate, o.learning_rate, 1e-12);
  EXPECT_NEAR(summary->steps[4].learning_rate, o.learning_rate * 0.1, 1e-12);
  for (size_t i = 0; i < 5; ++i) {  // steps 2, 4 and the last (5) are evaluated
    const bool evaluated = i == 1 || i == 3 || i == 4;
    EXPECT_EQ(summary->steps[i].heldout_loss > 0, evaluated) << "step " << i + 1;
    EXPECT_EQ(summary->steps[i].heldout_mtp_loss > 0, evaluated) << "step " << i + 1;
  }
  std::ifstream csv(o.loss_csv);
  std::string header, row;
  std::getline(csv, header);
  EXPECT_EQ(header, "step,loss,mtp_loss,lr,heldout_loss,heldout_mtp_loss");
  int rows = 0;
  while (std::getline(csv, row)) ++rows;
  EXPECT_EQ(rows, 5);
  std::ifstream manifest(o.manifest);
  std::string text((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\theldout\n"), std::string::npos);
  EXPECT_NE(text.find("\ttrain\n"), std::string::npos);
  EXPECT_TRUE(Model::load(o.output).ok());
}

TEST(Train, CorpusOptionsAreChecked) {
  TempDir dir;
  TrainOptions o;
  o.output = dir.file("out.gguf");
  EXPECT_NE(validate(o).message().find("--corpus-dir"), std::string::npos);  // neither
  o.corpus = {"a.txt"};
  o.corpus_dir = dir.path().string();
  EXPECT_NE(validate(o).message().find("either"), std::string::npos);  // both
  o.corpus_dir.clear();
  o.eval_every = 5;
  EXPECT_NE(validate(o).message().find("--eval-every"), std::string::npos);
  o.eval_every = 0;
  o.schedule = "linear";
  EXPECT_NE(validate(o).message().find("--schedule"), std::string::npos);
  o.schedule = "cosine";
  o.warmup = o.steps;
  EXPECT_NE(validate(o).message().find("--warmup"), std::string::npos);
  o.warmup = 0;
  o.corpus.clear();
  o.corpus_dir = dir.file("absent");
  auto missing = train(o, nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("absent"), std::string::npos);
  o.corpus_dir = split_corpus_dir(dir, 0.3);
  o.holdout = 0;
  o.eval_every = 1;
  auto nothing_held = train(o, nullptr);
  ASSERT_FALSE(nothing_held.ok());
  EXPECT_NE(nothing_held.status().message().find("holds out no file"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(o.output));
}

}  // namespace
}  // namespace mtp::train
