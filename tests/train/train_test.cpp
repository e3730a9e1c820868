// mtp-train's foundations: the chunked Gated DeltaNet against the step-by-step recurrence (values and
// gradients), the libtorch model against our reference forward on its exported GGUF (trunk and MTP block),
// and a short training run that lowers the loss.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <fstream>

#include "../gguf/test_util.h"
#include "model/model.h"
#include "model/reference_forward.h"
#include "tokenizer/bpe_trainer.h"
#include "train/gguf_export.h"
#include "train/qwen_torch.h"
#include "train/trainer.h"

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

}  // namespace
}  // namespace mtp::train
