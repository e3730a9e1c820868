#include "model/reference_forward.h"

#include <cmath>

#include "base/check.h"
#include "model/reference_ops.h"

namespace mtp {

using ref::matvec;
using ref::to_f32;

void AttentionKv::truncate_from(int64_t p) {
  int64_t keep = 0;
  while (keep < size() && pos[keep] < p) ++keep;
  if (keep == size()) return;
  const size_t width = pos.empty() ? 0 : k.size() / pos.size();
  pos.resize(static_cast<size_t>(keep));
  k.resize(static_cast<size_t>(keep) * width);
  v.resize(static_cast<size_t>(keep) * width);
}

ReferenceState::ReferenceState(const Qwen35MoeConfig& config) : config_(config) {
  reset();
}

void ReferenceState::reset() {
  const Qwen35MoeConfig& c = config_;
  layers.assign(static_cast<size_t>(c.n_layer), LayerState{});
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (c.is_full_attention(il)) continue;
    DeltaNetState& s = layers[il].gdn;
    s.conv.assign(static_cast<size_t>((c.ssm_d_conv - 1) * c.gdn_conv_dim()), 0.0f);
    s.ssm.assign(static_cast<size_t>(c.ssm_dt_rank * c.ssm_d_state * c.ssm_d_state), 0.0f);
  }
  mtp = LayerState{};
  n_past = 0;
}

void attention_block(const Qwen35MoeConfig& c, const ModelParams& params, const AttentionWeights& w,
                     const float* a, int64_t pos, AttentionKv& kv, float* out, ThreadPool* pool,
                     ref::Activations act) {
  const int64_t hd = c.head_dim, n_head = c.n_head, n_kv = c.n_head_kv;
  const int64_t q_width = n_head * hd, kv_width = n_kv * hd;

  // 1-2. Projections; attn_q packs [query | gate] per head.
  std::vector<float> qg(static_cast<size_t>(2 * q_width)), q(q_width), gate(q_width), k(kv_width),
      v(kv_width);
  matvec(w.q, a, qg.data(), 0, -1, pool, act);
  matvec(w.k, a, k.data(), 0, -1, pool, act);
  matvec(w.v, a, v.data(), 0, -1, pool, act);
  ref::split_query_gate(qg.data(), n_head, hd, q.data(), gate.data());

  // 3-4. Per-head RMSNorm, then partial NeoX RoPE at `pos` (text-only M-RoPE reduces to this).
  const std::vector<float> q_norm = to_f32(w.q_norm), k_norm = to_f32(w.k_norm);
  for (int64_t h = 0; h < n_head; ++h) {
    ref::rms_norm(&q[h * hd], q_norm.data(), hd, c.rms_eps, &q[h * hd]);
    ref::rope_neox_partial(&q[h * hd], hd, c.n_rot, pos, c.rope_freq_base);
  }
  for (int64_t j = 0; j < n_kv; ++j) {
    ref::rms_norm(&k[j * hd], k_norm.data(), hd, c.rms_eps, &k[j * hd]);
    ref::rope_neox_partial(&k[j * hd], hd, c.n_rot, pos, c.rope_freq_base);
  }

  // The cache holds post-norm, post-RoPE K and V; rows at >= pos are stale (rolled-back drafts).
  kv.truncate_from(pos);
  kv.pos.push_back(pos);
  kv.k.insert(kv.k.end(), k.begin(), k.end());
  kv.v.insert(kv.v.end(), v.begin(), v.end());

  // 5. Causal softmax attention over every cached row; query head h reads KV head h / (n_head / n_kv).
  const float scale = params.attention_scale != 0.0f
                          ? params.attention_scale
                          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t group = n_head / n_kv;
  std::vector<float> o(static_cast<size_t>(q_width));
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t j = h / group;
    ref::attend(&q[h * hd], kv.k.data() + j * hd, kv.v.data() + j * hd, kv.size(), kv_width, hd, scale,
                &o[h * hd]);
  }
  // 6-7. Query gate, output projection.
  ref::apply_sigmoid_gate(o.data(), gate.data(), q_width);
  matvec(w.output, o.data(), out, 0, -1, pool, act);
}

void delta_net_block(const Qwen35MoeConfig& c, const DeltaNetWeights& w, const float* a, DeltaNetState& state,
                     float* out, ThreadPool* pool, ref::Activations act) {
  const int64_t h_k = c.ssm_n_group, h_v = c.ssm_dt_rank, d = c.ssm_d_state;
  const int64_t key_dim = c.gdn_key_dim(), value_dim = c.gdn_value_dim(), conv_dim = c.gdn_conv_dim();
  MTP_CHECK(static_cast<int64_t>(state.conv.size()) == (c.ssm_d_conv - 1) * conv_dim);
  MTP_CHECK(static_cast<int64_t>(state.ssm.size()) == h_v * d * d);

  // 1. Projections from the same normed input.
  std::vector<float> u(conv_dim), z(value_dim), b(h_v), alpha(h_v);
  matvec(w.qkv, a, u.data(), 0, -1, pool, act);
  matvec(w.gate, a, z.data(), 0, -1, pool, act);
  matvec(w.beta, a, b.data(), 0, -1, pool, act);
  matvec(w.alpha, a, alpha.data(), 0, -1, pool, act);

  // 2. Causal depthwise conv over [window; u], then SiLU. z is not convolved.
  const std::vector<float> taps = to_f32(w.conv1d);  // conv_dim rows of d_conv taps
  std::vector<float> y(conv_dim);
  ref::conv_step(state.conv.data(), u.data(), taps.data(), conv_dim, c.ssm_d_conv, y.data());
  for (float& e : y) e = ref::silu(e);

  // 3-4. Split into q (H_k heads), k (H_k heads), v (H_v heads); L2-normalise q and k heads; q /= sqrt(d).
  float* q = y.data();
  float* k = y.data() + key_dim;
  const float* v = y.data() + 2 * key_dim;
  const float q_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (int64_t h = 0; h < h_k; ++h) {
    ref::l2_norm(q + h * d, d, c.rms_eps);
    ref::l2_norm(k + h * d, d, c.rms_eps);
    for (int64_t i = 0; i < d; ++i) q[h * d + i] *= q_scale;
  }

  // 5-6. Gates and the delta rule per value head; v-head j reads q/k head j mod H_k (GGUF tiled order).
  const std::vector<float> dt_bias = to_f32(w.dt_bias), ssm_a = to_f32(w.a);
  std::vector<float> o(value_dim);
  for (int64_t j = 0; j < h_v; ++j) {
    const float beta = ref::sigmoid(b[j]);
    const float g = ssm_a[j] * ref::softplus(alpha[j] + dt_bias[j]);  // log decay, <= 0
    const int64_t kh = j % h_k;
    ref::delta_rule_step(&state.ssm[j * d * d], k + kh * d, q + kh * d, v + j * d, beta, g, d, d, &o[j * d]);
  }

  // 7. Gated RMSNorm per head (shared weight, norm before gate), 8. output projection.
  const std::vector<float> norm = to_f32(w.norm);
  for (int64_t j = 0; j < h_v; ++j) {
    ref::rms_norm(&o[j * d], norm.data(), d, c.rms_eps, &o[j * d]);
    for (int64_t i = 0; i < d; ++i) o[j * d + i] *= ref::silu(z[j * d + i]);
  }
  matvec(w.out, o.data(), out, 0, -1, pool, act);
}

void moe_ffn(const Qwen35MoeConfig& c, const ModelParams& params, const MoeWeights& w, const float* f,
             float* out, ThreadPool* pool, ref::Activations act) {
  const int64_t n = c.n_embd, n_ff = c.n_ff_exp, n_ff_sh = c.n_ff_shexp;

  // 1-2. Router softmax over all experts, top-k, renormalised.
  std::vector<float> logits(c.n_expert);
  matvec(w.router, f, logits.data(), 0, -1, pool, act);
  const std::vector<ref::ExpertChoice> chosen =
      ref::route_top_k(logits.data(), c.n_expert, c.n_expert_used, params.expert_weights_scale);

  // 3. Routed experts: expert e's matrices are rows [e*OUT, (e+1)*OUT) of the 3-D stacks.
  std::vector<double> acc(static_cast<size_t>(n), 0.0);
  std::vector<float> g(n_ff), u(n_ff), y(n);
  for (const ref::ExpertChoice& e : chosen) {
    matvec(w.gate_exps, f, g.data(), e.expert * n_ff, n_ff, pool, act);
    matvec(w.up_exps, f, u.data(), e.expert * n_ff, n_ff, pool, act);
    for (int64_t i = 0; i < n_ff; ++i) g[i] = ref::silu(g[i]) * u[i];
    matvec(w.down_exps, g.data(), y.data(), e.expert * n, n, pool, act);
    for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(e.weight) * y[i];
  }

  // 4. Shared expert, gated by a scalar sigmoid of one dot product.
  std::vector<float> gs(n_ff_sh), us(n_ff_sh), ys(n);
  matvec(w.gate_shexp, f, gs.data(), 0, -1, pool, act);
  matvec(w.up_shexp, f, us.data(), 0, -1, pool, act);
  for (int64_t i = 0; i < n_ff_sh; ++i) gs[i] = ref::silu(gs[i]) * us[i];
  matvec(w.down_shexp, gs.data(), ys.data(), 0, -1, pool, act);
  const std::vector<float> shexp_gate = to_f32(w.shexp_gate);
  const float s = ref::sigmoid(static_cast<float>(ref::dot(shexp_gate.data(), f, n)));

  // 5. MoE(f) = R + s * Sh.
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(acc[i] + static_cast<double>(s) * ys[i]);
}

void residual_block(const Qwen35MoeConfig& c, const ModelParams& params, const LayerWeights& w, float* x,
                    int64_t pos, LayerState& state, ThreadPool* pool, ref::Activations act) {
  const int64_t n = c.n_embd;
  std::vector<float> a(n), m(n);
  const std::vector<float> attn_norm = to_f32(w.attn_norm), post_norm = to_f32(w.post_attention_norm);
  ref::rms_norm(x, attn_norm.data(), n, c.rms_eps, a.data());
  if (w.full_attention)
    attention_block(c, params, w.attn, a.data(), pos, state.kv, m.data(), pool, act);
  else
    delta_net_block(c, w.gdn, a.data(), state.gdn, m.data(), pool, act);
  for (int64_t i = 0; i < n; ++i) x[i] += m[i];
  ref::rms_norm(x, post_norm.data(), n, c.rms_eps, a.data());
  moe_ffn(c, params, w.moe, a.data(), m.data(), pool, act);
  for (int64_t i = 0; i < n; ++i) x[i] += m[i];
}

ForwardOutput forward_token(const Model& model, ReferenceState& state, int32_t token, int64_t pos,
                            bool want_logits, ThreadPool* pool) {
  const Qwen35MoeConfig& c = model.config();
  const Qwen35MoeWeights& w = model.weights();
  MTP_CHECK(token >= 0 && token < c.n_vocab, "token ", token, " out of range (", c.n_vocab, ")");
  MTP_CHECK(pos == state.n_past, "trunk position ", pos, " but ", state.n_past, " processed");
  MTP_CHECK(static_cast<int64_t>(state.layers.size()) == c.n_layer, "state made for another model");

  std::vector<float> x(c.n_embd);  // the residual stream; embedding not scaled
  ref::dequantize_row_of(w.token_embd, token, x.data());
  for (int64_t il = 0; il < c.n_layer; ++il)
    residual_block(c, model.params(), w.layers[il], x.data(), pos, state.layers[il], pool, state.activations);
  state.n_past = pos + 1;

  ForwardOutput out;
  out.hidden.resize(c.n_embd);
  const std::vector<float> output_norm = to_f32(w.output_norm);
  ref::rms_norm(x.data(), output_norm.data(), c.n_embd, c.rms_eps, out.hidden.data());
  if (want_logits) {
    out.logits.resize(c.n_vocab);
    matvec(w.output, out.hidden.data(), out.logits.data(), 0, -1, pool, state.activations);
  }
  return out;
}

std::vector<float> mtp_head(const Model& model, ReferenceState& state, std::span<const float> h_prev,
                            int32_t token, int64_t pos, ThreadPool* pool) {
  const Qwen35MoeConfig& c = model.config();
  MTP_CHECK(model.has_mtp(), "the model has no MTP block");
  MTP_CHECK(token >= 0 && token < c.n_vocab, "token ", token, " out of range (", c.n_vocab, ")");
  MTP_CHECK(static_cast<int64_t>(h_prev.size()) == c.n_embd, "h_prev has ", h_prev.size(), " values");
  const MtpWeights& m = *model.weights().mtp;
  const int64_t n = c.n_embd;

  // concat(RMSNorm(E[token]; enorm), RMSNorm(h_prev; hnorm)): embedding first, hidden second.
  std::vector<float> e(n), cat(2 * n);
  ref::dequantize_row_of(m.embed_tokens, token, e.data());
  const std::vector<float> enorm = to_f32(m.enorm), hnorm = to_f32(m.hnorm);
  ref::rms_norm(e.data(), enorm.data(), n, c.rms_eps, cat.data());
  ref::rms_norm(h_prev.data(), hnorm.data(), n, c.rms_eps, cat.data() + n);

  std::vector<float> x(n);
  matvec(m.eh_proj, cat.data(), x.data(), 0, -1, pool, state.activations);
  residual_block(c, model.params(), m.block, x.data(), pos, state.mtp, pool, state.activations);

  std::vector<float> h_mtp(n);
  const std::vector<float> head_norm = to_f32(m.shared_head_norm);
  ref::rms_norm(x.data(), head_norm.data(), n, c.rms_eps, h_mtp.data());
  return h_mtp;
}

ForwardOutput mtp_draft_logits(const Model& model, ReferenceState& state, std::span<const float> h_prev,
                               int32_t token, int64_t pos, bool want_logits, ThreadPool* pool) {
  ForwardOutput out;
  out.hidden = mtp_head(model, state, h_prev, token, pos, pool);
  if (want_logits) {
    out.logits.resize(model.config().n_vocab);
    matvec(model.weights().mtp->head, out.hidden.data(), out.logits.data(), 0, -1, pool, state.activations);
  }
  return out;
}

}  // namespace mtp
