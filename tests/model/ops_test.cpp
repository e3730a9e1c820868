// Hand-computed cases for every small operation of the reference forward pass: each expected value below can
// be checked on paper (the comments show the arithmetic).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/reference_forward.h"
#include "model/reference_ops.h"

namespace mtp {
namespace {

TEST(RefOps, RmsNorm) {
  // mean(x²) = 4, scale 1/2: x/2 ⊙ w.
  const float x[4] = {2, -2, 2, -2}, w[4] = {1, 2, 3, 4};
  float out[4];
  ref::rms_norm(x, w, 4, 0.0f, out);
  EXPECT_FLOAT_EQ(out[0], 1);
  EXPECT_FLOAT_EQ(out[1], -2);
  EXPECT_FLOAT_EQ(out[2], 3);
  EXPECT_FLOAT_EQ(out[3], -4);
  // eps inside the root: mean 1, eps 3 -> scale 1/sqrt(4).
  const float y[2] = {1, 1}, ones[2] = {1, 1};
  ref::rms_norm(y, ones, 2, 3.0f, out);
  EXPECT_FLOAT_EQ(out[0], 0.5f);
  EXPECT_FLOAT_EQ(out[1], 0.5f);
}

TEST(RefOps, L2NormDividesByTheNormOrEps) {
  float x[2] = {3, 4};
  ref::l2_norm(x, 2, 1e-6f);
  EXPECT_FLOAT_EQ(x[0], 0.6f);
  EXPECT_FLOAT_EQ(x[1], 0.8f);
  float tiny[2] = {1e-7f, 0};  // ‖x‖ < eps: divided by eps (llama.cpp), not by the norm
  ref::l2_norm(tiny, 2, 1e-6f);
  EXPECT_NEAR(tiny[0], 0.1f, 1e-7);
  float zero[2] = {0, 0};
  ref::l2_norm(zero, 2, 1e-6f);
  EXPECT_EQ(zero[0], 0.0f);
}

TEST(RefOps, RopePartialRotatesOnlyTheFirstDims) {
  // head_dim 4, n_rot 2: the single pair (x0, x1) turns by θ = pos; x2, x3 pass through.
  float h[4] = {1, 2, 3, 4};
  ref::rope_neox_partial(h, 4, 2, 1, 10000.0f);
  EXPECT_NEAR(h[0], std::cos(1.0) - 2 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(h[1], std::sin(1.0) + 2 * std::cos(1.0), 1e-6);
  EXPECT_EQ(h[2], 3.0f);
  EXPECT_EQ(h[3], 4.0f);
}

TEST(RefOps, RopeNeoxPairsDimIWithDimIPlusHalf) {
  // n_rot 4 of a 6-dim head at pos 2, base 10000: pair 0 = (x0, x2) turns by 2, pair 1 = (x1, x3) by
  // 2 * 10000^(-2/4) = 0.02; x4, x5 untouched.
  float h[6] = {1, 0, 0, 1, 5, 6};
  ref::rope_neox_partial(h, 6, 4, 2, 10000.0f);
  EXPECT_NEAR(h[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(h[2], std::sin(2.0), 1e-6);
  EXPECT_NEAR(h[1], -std::sin(0.02), 1e-6);
  EXPECT_NEAR(h[3], std::cos(0.02), 1e-6);
  EXPECT_EQ(h[4], 5.0f);
  EXPECT_EQ(h[5], 6.0f);
  float p0[4] = {1, 2, 3, 4};  // position 0 is the identity
  ref::rope_neox_partial(p0, 4, 4, 0, 1e7f);
  EXPECT_EQ(p0[0], 1.0f);
  EXPECT_EQ(p0[3], 4.0f);
}

TEST(RefOps, QueryGateSplitsPerHeadAndGatesWithSigmoid) {
  // Two heads of 2: attn_q's output is [q0 | g0 | q1 | g1].
  const float qg[8] = {1, 2, 0, 100, 3, 4, -100, 0};
  float q[4], g[4];
  ref::split_query_gate(qg, 2, 2, q, g);
  EXPECT_EQ(std::vector<float>(q, q + 4), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(std::vector<float>(g, g + 4), (std::vector<float>{0, 100, -100, 0}));
  float o[4] = {1, 1, 1, 1};
  ref::apply_sigmoid_gate(o, g, 4);
  EXPECT_FLOAT_EQ(o[0], 0.5f);  // σ(0)
  EXPECT_FLOAT_EQ(o[1], 1.0f);  // σ(100)
  EXPECT_NEAR(o[2], 0.0f, 1e-30);
  EXPECT_FLOAT_EQ(o[3], 0.5f);
}

TEST(RefOps, AttendIsASoftmaxWeightedMeanOfValues) {
  // Two keys; scores 0 and ln 3 -> weights 1/4, 3/4.
  const float q[1] = {1};
  const float keys[2] = {0, std::log(3.0f)}, values[2] = {4, 8};
  float out[1];
  ref::attend(q, keys, values, 2, 1, 1, 1.0f, out);
  EXPECT_NEAR(out[0], 0.25 * 4 + 0.75 * 8, 1e-5);
}

TEST(RefOps, ConvWindowShiftsAndTheLastTapTakesTheCurrentInput) {
  // 2 channels, 3 taps. Channel 0 taps (1, 10, 100) read (x[t-2], x[t-1], x[t]) as digits; channel 1 only
  // passes the current input.
  const float taps[6] = {1, 10, 100, 0, 0, 1};
  std::vector<float> window(4, 0.0f);
  float y[2];
  const float x1[2] = {1, 5}, x2[2] = {2, 6}, x3[2] = {3, 7};
  ref::conv_step(window.data(), x1, taps, 2, 3, y);
  EXPECT_EQ(y[0], 100.0f);  // 1*0 + 10*0 + 100*1
  EXPECT_EQ(y[1], 5.0f);
  ref::conv_step(window.data(), x2, taps, 2, 3, y);
  EXPECT_EQ(y[0], 210.0f);  // 1*0 + 10*1 + 100*2
  ref::conv_step(window.data(), x3, taps, 2, 3, y);
  EXPECT_EQ(y[0], 321.0f);  // 1*1 + 10*2 + 100*3
  EXPECT_EQ(y[1], 7.0f);
  EXPECT_EQ(window, (std::vector<float>{2, 6, 3, 7}));  // the last two inputs, oldest first
}

TEST(RefOps, DeltaRuleOnATwoByTwoHead) {
  std::vector<float> S(4, 0.0f);  // S[i][v] at i*2 + v
  float o[2];
  // Step 1: no decay (g = 0), β = 1, k = e0, v = (1, 2): δ = v, S = k δᵀ = [[1, 2], [0, 0]];
  // o = Sᵀ q with q = (1, 1) -> (1, 2).
  const float k1[2] = {1, 0}, q1[2] = {1, 1}, v1[2] = {1, 2};
  ref::delta_rule_step(S.data(), k1, q1, v1, 1.0f, 0.0f, 2, 2, o);
  EXPECT_EQ(S, (std::vector<float>{1, 2, 0, 0}));
  EXPECT_FLOAT_EQ(o[0], 1);
  EXPECT_FLOAT_EQ(o[1], 2);
  // Step 2: decay e^g = 1/2 first: S = [[.5, 1], [0, 0]]. k = (.6, .8): r = Sᵀk = (.3, .6).
  // β = .5, v = (0, 1): δ = .5 (v - r) = (-.15, .2). S += k δᵀ: [[.41, 1.12], [-.12, .16]].
  // Read-out after the update with q = e1: o = row 1 = (-.12, .16).
  const float k2[2] = {0.6f, 0.8f}, q2[2] = {0, 1}, v2[2] = {0, 1};
  ref::delta_rule_step(S.data(), k2, q2, v2, 0.5f, std::log(0.5f), 2, 2, o);
  EXPECT_NEAR(S[0], 0.41, 1e-6);
  EXPECT_NEAR(S[1], 1.12, 1e-6);
  EXPECT_NEAR(S[2], -0.12, 1e-6);
  EXPECT_NEAR(S[3], 0.16, 1e-6);
  EXPECT_NEAR(o[0], -0.12, 1e-6);
  EXPECT_NEAR(o[1], 0.16, 1e-6);
}

TEST(RefOps, RoutingSoftmaxTopKRenormalised) {
  // p ∝ (1, 2, 3, 4): top-2 = experts 3 (0.4) and 2 (0.3), renormalised to 4/7 and 3/7.
  const float logits[4] = {0, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  auto r = ref::route_top_k(logits, 4, 2, 0.0f);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].expert, 3);
  EXPECT_EQ(r[1].expert, 2);
  EXPECT_NEAR(r[0].weight, 4.0 / 7, 1e-6);
  EXPECT_NEAR(r[1].weight, 3.0 / 7, 1e-6);
  // expert_weights_scale multiplies after renormalising; 1 and 0 mean "none".
  auto scaled = ref::route_top_k(logits, 4, 2, 2.0f);
  EXPECT_NEAR(scaled[0].weight, 8.0 / 7, 1e-6);
  EXPECT_NEAR(ref::route_top_k(logits, 4, 2, 1.0f)[0].weight, 4.0 / 7, 1e-6);
  // Ties go to the lower index; top-1 of a tie renormalises to weight 1.
  const float flat[3] = {0, 0, 0};
  auto tie = ref::route_top_k(flat, 3, 1, 0.0f);
  EXPECT_EQ(tie[0].expert, 0);
  EXPECT_FLOAT_EQ(tie[0].weight, 1.0f);
}

TEST(RefOps, ScalarFunctions) {
  EXPECT_FLOAT_EQ(ref::sigmoid(0), 0.5f);
  EXPECT_FLOAT_EQ(ref::silu(0), 0.0f);
  EXPECT_NEAR(ref::silu(1), 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
  EXPECT_FLOAT_EQ(ref::softplus(30), 30.0f);  // identity above 20
  EXPECT_NEAR(ref::softplus(0), std::log(2.0), 1e-7);
}

// A whole moe_ffn small enough to follow by hand: n_embd 2, 3 experts of width 1, top-2, F32 weights that
// this test owns.
TEST(RefBlocks, MoeRoutesRenormalisesAndAddsTheGatedSharedExpert) {
  Qwen35MoeConfig c;
  c.n_embd = 2;
  c.n_expert = 3;
  c.n_expert_used = 2;
  c.n_ff_exp = 1;
  c.n_ff_shexp = 1;
  auto view = [](const std::vector<float>& v, std::array<int64_t, 4> ne) {
    return TensorView{reinterpret_cast<const uint8_t*>(v.data()), GgmlType::F32, ne};
  };
  // Router rows (one per expert) read f = (1, 0): logits (0, ln 3, 0) -> p = (.2, .6, .2); top-2 = expert 1
  // then expert 0 (tie with 2 broken by index): weights .6/.8 = .75 and .25.
  const std::vector<float> router = {0, 0, std::log(3.0f), 0, 0, 0};
  const std::vector<float> gate = {1, 0, 2, 0, 3, 0};  // expert e: gate row (e+1, 0)
  const std::vector<float> up = {1, 0, 1, 0, 1, 0};
  const std::vector<float> down = {1, 0, 0,
                                   1, 5, 5};      // expert e: down rows (one input each) for outputs 0, 1
  const std::vector<float> sh_gate_inp = {0, 0};  // σ(0) = 1/2
  const std::vector<float> sh_gate = {1, 0}, sh_up = {2, 0}, sh_down = {1, 1};
  MoeWeights w;
  w.router = view(router, {2, 3, 1, 1});
  w.gate_exps = view(gate, {2, 1, 3, 1});
  w.up_exps = view(up, {2, 1, 3, 1});
  w.down_exps = view(down, {1, 2, 3, 1});
  w.shexp_gate = view(sh_gate_inp, {2, 1, 1, 1});
  w.gate_shexp = view(sh_gate, {2, 1, 1, 1});
  w.up_shexp = view(sh_up, {2, 1, 1, 1});
  w.down_shexp = view(sh_down, {1, 2, 1, 1});
  const float f[2] = {1, 0};
  float out[2];
  moe_ffn(c, ModelParams{}, w, f, out);
  // Expert 0: h = silu(1)·1, y = (h, 0). Expert 1: h = silu(2), y = (0, h). Shared: silu(1)·2 to both.
  const double s1 = ref::silu(1), s2 = ref::silu(2);
  EXPECT_NEAR(out[0], 0.25 * s1 + 0.5 * 2 * s1, 1e-6);
  EXPECT_NEAR(out[1], 0.75 * s2 + 0.5 * 2 * s1, 1e-6);
}

}  // namespace
}  // namespace mtp
