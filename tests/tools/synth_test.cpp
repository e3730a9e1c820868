// `mtp synth`: determinism, shapes that follow the tensor table, llama.cpp's conventions, and trunk bytes
// that do not depend on the MTP block (which graft tests rely on).
#include <gtest/gtest.h>

#include <cmath>

#include "../gguf/test_util.h"
#include "cli_util.h"
#include "fixtures.h"
#include "gguf/gguf_file.h"
#include "model/qwen35moe_tensors.h"
#include "quant/quantize.h"
#include "surgery/synth.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace mtp {
namespace {

using surgery::SynthOptions;

std::string synth(const testing::TempDir& dir, const std::string& name, const SynthOptions& opt) {
  return testing::synth_file(dir, name, opt);
}

TEST(Synth, SameSeedSameBytesAnyThreadCount) {
  testing::TempDir dir;
  SynthOptions opt;
  opt.mtp = true;
  opt.type = GgmlType::Q8_0;
  auto a = testing::read_bytes(synth(dir, "a.gguf", opt));
  ThreadPool one(1);
  ASSERT_TRUE(surgery::synth_model(opt, dir.file("b.gguf"), one).ok());
  EXPECT_EQ(a, testing::read_bytes(dir.file("b.gguf")));
  opt.seed = 2;
  EXPECT_NE(a, testing::read_bytes(synth(dir, "c.gguf", opt)));
}

TEST(Synth, TheTestExampleIsWhatSynthWrites) {
  testing::TempDir dir;
  auto r = testing::run_mtp(
      "synth --shape tiny --mtp --type q8_0 --structured 1.75 --seed 1 --name 'mtp.cpp example (tiny "
      "synthetic)' -o " +
      dir.file("example.gguf"));
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(testing::read_bytes(dir.file("example.gguf")),
            testing::read_bytes(std::string(MTP_SOURCE_DIR) + "/tests/data/example.gguf"))
      << "tests/data/example.gguf is stale: regenerate it with the command in tests/data/README.md";
}

TEST(Synth, FileMatchesTheTensorTableAndReadsBackAsConfig) {
  testing::TempDir dir;
  SynthOptions opt;
  opt.mtp = true;
  auto f = GgufFile::open(synth(dir, "m.gguf", opt));
  ASSERT_TRUE(f.ok()) << f.status().message();
  auto config = read_qwen35moe_config(f->metadata(), f->find_tensor("token_embd.weight")->ne[1]);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->n_layer, 4);
  EXPECT_EQ(config->n_nextn, 1);
  EXPECT_EQ(*f->metadata().get<uint32_t>("qwen35moe.block_count"), 5u);
  for (const TensorDesc& d : qwen35moe_tensors(*config, true)) {
    const TensorInfo* t = f->find_tensor(d.name);
    if (!d.required && t == nullptr) continue;
    ASSERT_NE(t, nullptr) << d.name;
    EXPECT_EQ(t->ne, d.ne) << d.name;
  }
  // Conventions llama.cpp relies on: ssm_a has no .weight suffix, norms are F32 and 1-D, the shared-expert
  // gate is a vector, and the MTP block is detected through blk.{block_count-1}.nextn.eh_proj.weight.
  EXPECT_NE(f->find_tensor("blk.0.ssm_a"), nullptr);
  EXPECT_EQ(f->find_tensor("blk.3.attn_q.weight")->ne[1], 2 * 4 * 32);  // query + gate per head
  EXPECT_NE(f->find_tensor("blk.4.nextn.eh_proj.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("blk.0.attn_norm.weight")->type, GgmlType::F32);
  EXPECT_EQ(f->find_tensor("blk.3.attn_qkv.weight"), nullptr);  // layer 3 is full attention
  EXPECT_NE(f->find_tensor("blk.2.attn_qkv.weight"), nullptr);
}

TEST(Synth, TrunkBytesDoNotDependOnTheMtpBlock) {
  testing::TempDir dir;
  SynthOptions opt;
  opt.type = GgmlType::Q8_0;
  auto trunk = GgufFile::open(synth(dir, "t.gguf", opt));
  opt.mtp = true;
  auto full = GgufFile::open(synth(dir, "f.gguf", opt));
  ASSERT_TRUE(trunk.ok() && full.ok());
  for (const TensorInfo& t : trunk->tensors()) {
    const TensorInfo* u = full->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    auto a = trunk->tensor_data(t), b = full->tensor_data(*u);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << t.name;
  }
  EXPECT_EQ(full->tensors().size(), trunk->tensors().size() + 20);
}

TEST(Synth, ValuesAreInASaneRange) {
  testing::TempDir dir;
  SynthOptions opt;
  auto f = GgufFile::open(synth(dir, "v.gguf", opt));
  ASSERT_TRUE(f.ok());
  auto stats = [&](const char* name) {
    const TensorInfo* t = f->find_tensor(name);
    auto d = f->tensor_data(*t);
    const float* x = reinterpret_cast<const float*>(d.data());
    double sum2 = 0, mn = 1e30, mx = -1e30;
    for (int64_t i = 0; i < t->n_elements(); ++i) {
      sum2 += x[i] * x[i];
      mn = std::min<double>(mn, x[i]);
      mx = std::max<double>(mx, x[i]);
    }
    return std::array<double, 3>{std::sqrt(sum2 / t->n_elements()), mn, mx};
  };
  EXPECT_NEAR(stats("token_embd.weight")[0], 1.0, 0.05);
  EXPECT_NEAR(stats("blk.0.ffn_gate_exps.weight")[0], 1.0 / 8.0, 0.01);  // 1/sqrt(64)
  auto a = stats("blk.0.ssm_a");
  EXPECT_LE(a[2], -1.0);
  EXPECT_GE(a[1], -16.0);
  EXPECT_NEAR(stats("blk.0.attn_norm.weight")[0], 1.0, 0.05);
}

TEST(Synth, VocabularyIsARealBpeThatRoundTrips) {
  testing::TempDir dir;
  auto f = GgufFile::open(synth(dir, "tok.gguf", SynthOptions{}));
  ASSERT_TRUE(f.ok());
  auto vocab = vocab_from_gguf(f->metadata());
  ASSERT_TRUE(vocab.ok()) << vocab.status().message();
  EXPECT_EQ(vocab->tokens.size(), 512u);
  EXPECT_GT(vocab->merges.size(), 200u);
  auto tok = Tokenizer::create(*vocab);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  std::string text = "Hello world, the model writes 1234 tokens.\n";
  auto ids = tok->encode(text);
  EXPECT_LT(ids.size(), text.size());  // merges actually apply
  EXPECT_EQ(tok->decode(ids), text);
}

}  // namespace
}  // namespace mtp

namespace mtp {
namespace {

// Structured mode: with the blocks silent, the LM head maps the embedding of every text token t to one
// successor sigma(t) with a logit near 10, sigma is a permutation of the text tokens, and control or unused
// tokens are never the answer.
TEST(Synth, StructuredHeadEncodesAPermutationChain) {
  testing::TempDir dir;
  SynthOptions opt;
  opt.mtp = true;
  opt.structured = 0.0;
  auto f = GgufFile::open(testing::synth_file(dir, "s.gguf", opt));
  ASSERT_TRUE(f.ok());
  ASSERT_NE(f->metadata().find("mtp.synth.structured_noise"), nullptr);
  const TensorInfo* e = f->find_tensor("token_embd.weight");
  const TensorInfo* w = f->find_tensor("output.weight");
  const int64_t d = e->ne[0], n_vocab = e->ne[1];
  const float* E = reinterpret_cast<const float*>(f->tensor_data(*e).data());
  const float* W = reinterpret_cast<const float*>(f->tensor_data(*w).data());
  auto vocab = vocab_from_gguf(f->metadata());
  ASSERT_TRUE(vocab.ok());
  std::vector<int> hits(static_cast<size_t>(n_vocab), 0);
  int chain_tokens = 0;
  for (int64_t t = 0; t < n_vocab; ++t) {
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    for (int64_t u = 0; u < n_vocab; ++u) {
      double dot = 0;
      for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(W[u * d + i]) * E[t * d + i];
      logits[static_cast<size_t>(u)] = static_cast<float>(dot);
    }
    const int64_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    if (logits[static_cast<size_t>(best)] < 7.5f) continue;  // t is not a text token: nothing follows it
    ++chain_tokens;
    ++hits[static_cast<size_t>(best)];
    EXPECT_EQ(vocab->token_types[static_cast<size_t>(best)], static_cast<int32_t>(TokenType::kNormal)) << t;
  }
  EXPECT_GT(chain_tokens, 200);
  for (int h : hits) EXPECT_LE(h, 1);  // one predecessor per token: a permutation
  // The MTP block passes the embedding through: eh_proj is the identity on its first half.
  const TensorInfo* eh = f->find_tensor("blk.4.nextn.eh_proj.weight");
  const float* EH = reinterpret_cast<const float*>(f->tensor_data(*eh).data());
  EXPECT_EQ(EH[0], 1.0f);
  EXPECT_EQ(EH[1], 0.0f);
  EXPECT_EQ(EH[2 * d + 1], 1.0f);
}

}  // namespace
}  // namespace mtp
