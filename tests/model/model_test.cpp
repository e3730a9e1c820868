// Loading (binding by the table, error messages, fallbacks) and the trunk's consistency properties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

#include "fixtures.h"
#include "model/reference_forward.h"
#include "model/reference_ops.h"
#include "quant/quantize.h"

namespace mtp {
namespace {

using testing::fixtures;
using testing::rewrite_gguf;

std::string load_error(const std::string& path) {
  auto m = Model::load(path);
  EXPECT_FALSE(m.ok()) << path;
  return m.ok() ? "" : m.status().message();
}

TEST(ModelLoad, BindsEveryTensorOfTheTinyModel) {
  auto m = Model::load(fixtures().tiny_mtp);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Qwen35MoeConfig& c = m->config();
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.n_nextn, 1);
  ASSERT_EQ(m->weights().layers.size(), 4u);
  EXPECT_FALSE(m->weights().layers[0].full_attention);
  EXPECT_TRUE(m->weights().layers[3].full_attention);
  EXPECT_TRUE(m->weights().layers[3].attn.q.valid());
  EXPECT_TRUE(m->weights().layers[0].gdn.conv1d.valid());
  EXPECT_FALSE(m->weights().output_tied);
  ASSERT_TRUE(m->has_mtp());
  const MtpWeights& mtp = *m->weights().mtp;
  EXPECT_TRUE(mtp.own_head_norm);  // synth writes shared_head_norm, as Qwen3.5 files have it
  EXPECT_FALSE(mtp.own_head);      // shared_head_head absent -> output.weight
  EXPECT_EQ(mtp.head.data, m->weights().output.data);
  EXPECT_EQ(mtp.embed_tokens.data, m->weights().token_embd.data);
  EXPECT_TRUE(mtp.block.full_attention);
  EXPECT_EQ(mtp.eh_proj.ne[0], 2 * c.n_embd);
  EXPECT_EQ(m->vocab().tokens.size(), 512u);

  auto plain = Model::load(fixtures().tiny_no_mtp);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_FALSE(plain->has_mtp());
}

TEST(ModelLoad, RejectsAnotherArchitecture) {
  const std::string msg = load_error(std::string(MTP_SOURCE_DIR) + "/tests/gguf/data/ggml_tiny.gguf");
  EXPECT_NE(msg.find("architecture is 'llama', expected 'qwen35moe'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ggml_tiny.gguf"), std::string::npos) << msg;
}

TEST(ModelLoad, MissingTensorIsNamedWithItsExpectedShape) {
  testing::TempDir dir;
  const std::string path = dir.file("renamed.gguf");
  rewrite_gguf(fixtures().tiny_mtp, path, [](TensorSpec& s, std::vector<uint8_t>&) {
    if (s.name == "blk.1.ssm_beta.weight") s.name = "blk.1.ssm_betx.weight";
    return true;
  });
  const std::string msg = load_error(path);
  EXPECT_NE(msg.find("tensor 'blk.1.ssm_beta.weight' is missing (expected shape [64, 4])"), std::string::npos)
      << msg;
}

TEST(ModelLoad, MisshapenTensorIsNamedWithBothShapes) {
  testing::TempDir dir;
  const std::string path = dir.file("misshapen.gguf");
  rewrite_gguf(fixtures().tiny_mtp, path, [](TensorSpec& s, std::vector<uint8_t>&) {
    if (s.name == "blk.0.ssm_beta.weight") s.ne = {32, 8, 1, 1};  // same bytes, wrong shape
    return true;
  });
  const std::string msg = load_error(path);
  EXPECT_NE(msg.find("tensor 'blk.0.ssm_beta.weight' has shape [32, 8], expected [64, 4]"), std::string::npos)
      << msg;
}

TEST(ModelLoad, WrongTypedTensorIsNamedWithBothTypes) {
  testing::TempDir dir;
  const std::string path = dir.file("wrong_type.gguf");
  rewrite_gguf(fixtures().tiny_mtp, path, [](TensorSpec& s, std::vector<uint8_t>& bytes) {
    if (s.name != "blk.2.attn_norm.weight") return true;
    std::vector<float> values(64);
    std::memcpy(values.data(), bytes.data(), 64 * sizeof(float));
    s.type = GgmlType::Q8_0;
    bytes.assign(static_cast<size_t>(row_size(GgmlType::Q8_0, 64)), 0);
    EXPECT_TRUE(quantize_row(GgmlType::Q8_0, values.data(), bytes.data(), 64).ok());
    return true;
  });
  const std::string msg = load_error(path);
  EXPECT_NE(msg.find("tensor 'blk.2.attn_norm.weight' has type q8_0, expected f32, f16 or bf16"),
            std::string::npos)
      << msg;
}

// Every hyperparameter check of qwen35moe_config.cpp, each reached by one edit of the tiny model's metadata
// (4 layers + MTP block, hidden 64, 4 heads of 32 over 2 KV heads, RoPE 8, 8 experts top-2, state 16,
// 2 groups, time_step_rank 4): the load fails with a message that names what is wrong.
TEST(ModelLoad, EveryHyperparameterCheckNamesTheKey) {
  struct Case {
    const char* key;  // without the "qwen35moe." prefix; "-" + key erases it
    std::optional<Value> value;
    const char* expected;
  };
  const auto u32 = [](uint32_t v) { return std::optional<Value>(Value::scalar(v)); };
  const auto f32 = [](float v) { return std::optional<Value>(Value::scalar(v)); };
  const float nan = std::nanf("");
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {"embedding_length", u32(0), "embedding_length must be positive, got 0"},
      {"block_count", u32(1), "trunk layer count must be positive, got 0"},
      {"attention.head_count", u32(0), "attention.head_count must be positive, got 0"},
      {"attention.head_count_kv", u32(0), "attention.head_count_kv must be positive, got 0"},
      {"expert_count", u32(0), "expert_count must be positive, got 0"},
      {"expert_used_count", u32(0), "expert_used_count must be positive, got 0"},
      {"expert_feed_forward_length", u32(0), "expert_feed_forward_length must be positive, got 0"},
      {"expert_shared_feed_forward_length", u32(0), "expert_shared_feed_forward_length must be positive"},
      {"ssm.conv_kernel", u32(0), "ssm.conv_kernel must be positive, got 0"},
      {"ssm.state_size", u32(0), "ssm.state_size must be positive, got 0"},
      {"ssm.group_count", u32(0), "ssm.group_count must be positive, got 0"},
      {"ssm.time_step_rank", u32(0), "ssm.time_step_rank must be positive, got 0"},
      {"full_attention_interval", u32(0), "full_attention_interval must be positive, got 0"},
      {"nextn_predict_layers", u32(2), "nextn_predict_layers is 2; only 0 or 1 is supported"},
      {"attention.head_count", u32(5), "head_count 5 is not a multiple of head_count_kv 2"},
      {"expert_used_count", u32(9), "expert_used_count 9 exceeds expert_count 8"},
      {"rope.dimension_count", u32(7), "rope.dimension_count 7 must be even and within the head dim 32"},
      {"rope.dimension_count", u32(34), "rope.dimension_count 34 must be even and within the head dim 32"},
      {"ssm.group_count", u32(3), "ssm.time_step_rank 4 is not a multiple of ssm.group_count 3"},
      {"ssm.inner_size", u32(65), "ssm.inner_size 65 != time_step_rank * state_size = 64"},
      {"attention.value_length", u32(64), "attention.value_length 64 differs from key_length 32"},
      {"attention.layer_norm_rms_epsilon", f32(nan), "layer_norm_rms_epsilon must be positive and finite"},
      {"attention.layer_norm_rms_epsilon", f32(0), "layer_norm_rms_epsilon must be positive and finite"},
      {"rope.freq_base", f32(inf), "rope.freq_base must be positive and finite, got inf"},
      {"attention.scale", f32(nan), "qwen35moe.attention.scale must be finite, got nan"},
      {"expert_weights_scale", f32(-inf), "qwen35moe.expert_weights_scale must be finite, got -inf"},
      {"-embedding_length", std::nullopt, "metadata key 'qwen35moe.embedding_length' is missing"},
      {"embedding_length", Value::string("64"),
       "metadata key 'qwen35moe.embedding_length' has type string, expected an integer"},
  };
  testing::TempDir dir;
  for (const Case& c : cases) {
    const std::string path = dir.file("edited.gguf");
    const bool erase = c.key[0] == '-';
    const std::string key = std::string(kQwen35MoeArch) + "." + (erase ? c.key + 1 : c.key);
    rewrite_gguf(
        fixtures().tiny_mtp, path, [](TensorSpec&, std::vector<uint8_t>&) { return true; },
        [&](Metadata& md) {
          if (erase)
            md.erase(key);
          else
            md.set(key, *c.value);
        });
    const std::string msg = load_error(path);
    EXPECT_NE(msg.find(c.expected), std::string::npos) << key << ": " << msg;
  }
}

// A file written with general.alignment 1 places tensors at odd offsets, where float loads would be
// misaligned: refused by name. The same tensors at the default alignment load.
TEST(ModelLoad, MisalignedTensorDataIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("packed.gguf");
  rewrite_gguf(
      fixtures().tiny_mtp, path, [](TensorSpec&, std::vector<uint8_t>&) { return true; },
      [](Metadata& md) { md.set("general.alignment", Value::scalar(uint32_t{1})); });
  const std::string msg = load_error(path);
  EXPECT_NE(msg.find("starts at a file offset that is not a multiple of"), std::string::npos) << msg;
  EXPECT_NE(msg.find("general.alignment too small"), std::string::npos) << msg;
}

// A NaN in a norm, vector or conv tap would turn every logit into NaN without failing anywhere: the load
// refuses it and names the tensor and the element.
TEST(ModelLoad, NonFiniteFloatTensorIsRefused) {
  testing::TempDir dir;
  const float inf = std::numeric_limits<float>::infinity();
  for (const char* name : {"blk.1.ssm_a", "output_norm.weight"}) {
    for (float bad : {std::nanf(""), inf, -inf}) {
      const std::string path = dir.file("nan.gguf");
      rewrite_gguf(fixtures().tiny_mtp, path, [&](TensorSpec& s, std::vector<uint8_t>& bytes) {
        if (s.name == name) std::memcpy(bytes.data() + 3 * sizeof(float), &bad, sizeof(float));
        return true;
      });
      const std::string msg = load_error(path);
      EXPECT_NE(msg.find(std::string("tensor '") + name + "' holds a NaN or infinity (element 3)"),
                std::string::npos)
          << msg;
    }
  }
}

// The same in a quantized tensor's block scale (the fp16 d of a Q8_0 block): refused with the tensor, row and
// block named, whether the tensor is packed at load (an expert stack, the MTP projection) or read in place
// (the embedding's rows; every matrix with MTP_PACK=0).
TEST(ModelLoad, NonFiniteBlockScaleIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("bad_scale.gguf");
  for (const char* pack : {"1", "0"}) {
    setenv("MTP_PACK", pack, 1);
    for (const char* name : {"blk.0.ffn_up_exps.weight", "token_embd.weight", "blk.4.nextn.eh_proj.weight"}) {
      for (uint16_t bad : {uint16_t{0x7E00}, uint16_t{0x7C00}}) {  // fp16 NaN, +Inf
        rewrite_gguf(fixtures().tiny_q8_mtp, path, [&](TensorSpec& s, std::vector<uint8_t>& bytes) {
          if (s.name != name) return true;
          EXPECT_EQ(s.type, GgmlType::Q8_0);
          const int64_t row_bytes = s.ne[0] / 32 * 34;
          std::memcpy(bytes.data() + 3 * row_bytes + 1 * 34, &bad, sizeof bad);  // row 3, block 1
          return true;
        });
        const std::string msg = load_error(path);
        EXPECT_NE(msg.find(path + ": tensor '" + name + "' row 3: q8_0 block 1 has a non-finite scale d"),
                  std::string::npos)
            << "MTP_PACK=" << pack << ": " << msg;
      }
    }
  }
  unsetenv("MTP_PACK");
  // A --head file's block is checked too, and the error names that file.
  auto m = Model::load(fixtures().tiny_q8_mtp, path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(path + ": tensor 'blk.4.nextn.eh_proj.weight' row 3"),
            std::string::npos)
      << m.status().message();
  EXPECT_TRUE(Model::load(fixtures().tiny_q8_mtp, fixtures().tiny_q8_mtp).ok());
}

TEST(ModelLoad, AbsentOutputIsTiedToTheEmbedding) {
  testing::TempDir dir;
  const std::string path = dir.file("tied.gguf");
  rewrite_gguf(fixtures().tiny_mtp, path, [](TensorSpec& s, std::vector<uint8_t>&) {
    return s.name != "output.weight" && s.name != "blk.4.nextn.shared_head_norm.weight";
  });
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Qwen35MoeWeights& w = m->weights();
  EXPECT_TRUE(w.output_tied);
  EXPECT_EQ(w.output.data, w.token_embd.data);
  EXPECT_EQ(w.mtp->head.data, w.token_embd.data);  // the MTP head follows the trunk's
  EXPECT_FALSE(w.mtp->own_head_norm);
  EXPECT_EQ(w.mtp->shared_head_norm.data, w.output_norm.data);  // section 2.6 fallback
  ReferenceState st(m->config());
  ForwardOutput out = forward_token(*m, st, 5, 0);
  // Tied head: logit t is the dot of the hidden with token t's embedding.
  std::vector<float> e(64);
  ref::dequantize_row_of(w.token_embd, 9, e.data());
  EXPECT_FLOAT_EQ(out.logits[9], static_cast<float>(ref::dot(e.data(), out.hidden.data(), 64)));
}

const std::vector<int32_t> kPrompt = {11, 300, 7, 42, 99, 256, 1, 500};

std::vector<ForwardOutput> feed(const Model& m, ReferenceState& st, const std::vector<int32_t>& tokens,
                                ThreadPool* pool = nullptr) {
  std::vector<ForwardOutput> out;
  for (int32_t t : tokens) out.push_back(forward_token(m, st, t, st.n_past, true, pool));
  return out;
}

// The reference is strictly one token at a time (no batch entry point), so "prompt at once vs token by token"
// becomes: independent states fed the same tokens agree bit for bit, reset() reproduces a fresh state, and
// threads do not change any value. The chunked delta-rule test below checks the recurrence against the
// all-at-once (chunked) algorithm.
TEST(ReferenceForward, IndependentStatesResetAndThreadsAgreeBitForBit) {
  auto m = Model::load(fixtures().tiny_q8_mtp);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ReferenceState a(m->config()), b(m->config());
  auto ra = feed(*m, a, kPrompt);
  ThreadPool pool(2, ThreadPool::kSplitAll);
  auto rb = feed(*m, b, kPrompt, &pool);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].logits, rb[i].logits) << "position " << i;
    EXPECT_EQ(ra[i].hidden, rb[i].hidden) << "position " << i;
  }
  a.reset();
  auto again = feed(*m, a, kPrompt);
  for (size_t i = 0; i < ra.size(); ++i) EXPECT_EQ(ra[i].logits, again[i].logits) << "position " << i;
  // The state matters: the same token after a different prefix gives other logits.
  ReferenceState c(m->config());
  feed(*m, c, {12});
  EXPECT_NE(forward_token(*m, c, kPrompt[1], 1).logits, ra[1].logits);
  // Logits are finite and the hidden is post-norm (RMS close to the norm weights' ~1).
  for (float v : ra.back().logits) ASSERT_TRUE(std::isfinite(v));
  const double rms = std::sqrt(ref::dot(ra.back().hidden.data(), ra.back().hidden.data(), 64) / 64);
  EXPECT_NEAR(rms, 1.0, 0.1);
}

TEST(ReferenceForward, LogitsHeadIsTheOutputMatrixTimesTheHidden) {
  auto m = Model::load(fixtures().tiny_mtp);
  ASSERT_TRUE(m.ok());
  ReferenceState st(m->config());
  auto out = feed(*m, st, {3, 4});
  std::vector<float> row(64);
  ref::dequantize_row_of(m->weights().output, 17, row.data());
  EXPECT_FLOAT_EQ(out[1].logits[17], static_cast<float>(ref::dot(row.data(), out[1].hidden.data(), 64)));
}

// The chunked ("all at once") gated delta rule of docs/model.md 3.3, written out with plain matrices for one
// head, must reproduce the per-token recurrence.
TEST(ReferenceForward, DeltaRuleRecurrenceMatchesTheChunkedForm) {
  const int T = 6, dk = 3, dv = 2;
  std::vector<std::vector<double>> K(T, std::vector<double>(dk)), Q = K, V(T, std::vector<double>(dv));
  std::vector<double> beta(T), g(T);
  uint32_t seed = 12345;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return (seed >> 8) / double(1 << 24) * 2 - 1;
  };
  for (int t = 0; t < T; ++t) {
    double nk = 0;
    for (int i = 0; i < dk; ++i) nk += (K[t][i] = rnd()) * K[t][i];
    for (int i = 0; i < dk; ++i) K[t][i] /= std::sqrt(nk);  // L2-normed keys, as the block feeds them
    for (int i = 0; i < dk; ++i) Q[t][i] = rnd();
    for (int i = 0; i < dv; ++i) V[t][i] = rnd();
    beta[t] = 0.5 + 0.5 * rnd() * 0.9;
    g[t] = -0.3 * (1 + rnd());
  }
  // Per token, in float, through the op under test; the state starts non-zero (S0) to check the carry term.
  std::vector<float> S(dk * dv);
  for (auto& s : S) s = static_cast<float>(rnd());
  const std::vector<float> S0 = S;
  std::vector<std::vector<float>> O(T, std::vector<float>(dv));
  for (int t = 0; t < T; ++t) {
    std::vector<float> k(K[t].begin(), K[t].end()), q(Q[t].begin(), Q[t].end()), v(V[t].begin(), V[t].end());
    ref::delta_rule_step(S.data(), k.data(), q.data(), v.data(), float(beta[t]), float(g[t]), dk, dv,
                         O[t].data());
  }
  // Chunked form in double: γ = cumsum g; L[i][j] = β_i (k_i·k_j) e^{γ_i-γ_j} (j<i); T = (I+L)^-1;
  // U = T diag(β) V; W = T diag(β e^γ) K; Vn = U - W S0;
  // O = (Q ⊙ e^γ) S0 + tril_incl(Q Kᵀ ⊙ e^{γ_i-γ_j}) Vn; S_end = e^{γ_last} S0 + (K ⊙ e^{γ_last-γ})ᵀ Vn.
  auto kdot = [&](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (int i = 0; i < dk; ++i) s += a[i] * b[i];
    return s;
  };
  std::vector<double> gam(T);
  for (int t = 0; t < T; ++t) gam[t] = g[t] + (t ? gam[t - 1] : 0);
  // Solve (I+L) X = B by forward substitution instead of forming T.
  auto solve = [&](std::vector<std::vector<double>> B) {
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < i; ++j) {
        const double l = beta[i] * kdot(K[i], K[j]) * std::exp(gam[i] - gam[j]);
        for (size_t c = 0; c < B[i].size(); ++c) B[i][c] -= l * B[j][c];
      }
    return B;
  };
  std::vector<std::vector<double>> bV(T, std::vector<double>(dv)), bK(T, std::vector<double>(dk));
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < dv; ++c) bV[t][c] = beta[t] * V[t][c];
    for (int i = 0; i < dk; ++i) bK[t][i] = beta[t] * std::exp(gam[t]) * K[t][i];
  }
  auto U = solve(bV), W = solve(bK);
  std::vector<std::vector<double>> Vn(T, std::vector<double>(dv));
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < dv; ++c) {
      double ws = 0;
      for (int i = 0; i < dk; ++i) ws += W[t][i] * S0[i * dv + c];
      Vn[t][c] = U[t][c] - ws;
    }
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < dv; ++c) {
      double o = 0;
      for (int i = 0; i < dk; ++i) o += Q[t][i] * std::exp(gam[t]) * S0[i * dv + c];
      for (int j = 0; j <= t; ++j) o += kdot(Q[t], K[j]) * std::exp(gam[t] - gam[j]) * Vn[j][c];
      EXPECT_NEAR(O[t][c], o, 1e-5) << "t=" << t << " c=" << c;
    }
  for (int i = 0; i < dk; ++i)
    for (int c = 0; c < dv; ++c) {
      double s = std::exp(gam[T - 1]) * S0[i * dv + c];
      for (int t = 0; t < T; ++t) s += K[t][i] * std::exp(gam[T - 1] - gam[t]) * Vn[t][c];
      EXPECT_NEAR(S[i * dv + c], s, 1e-5);
    }
}

}  // namespace
}  // namespace mtp
