#include "train/qwen_torch.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <set>

#include "base/check.h"
#include "model/qwen35moe_tensors.h"

namespace mtp::train {
namespace {

using torch::indexing::Slice;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The tensors a trained file holds: the required ones, the untied LM head and the MTP block's own head norm
// (the optional MTP head and embedding fall back to output.weight and token_embd.weight, as in real files).
bool exported(const TensorDesc& d) {
  return d.required || d.name == "output.weight" || ends_with(d.name, "nextn.shared_head_norm.weight");
}

// A norm trained as an offset w, stored as 1 + w (every RMSNorm but the Gated DeltaNet's output norm).
bool offset_norm(const TensorDesc& d) {
  return d.kind == TensorKind::kNorm && !ends_with(d.name, "ssm_norm.weight");
}

// GGUF ne (ne[0] contiguous) to a row-major torch shape.
std::vector<int64_t> torch_shape(const TensorDesc& d) {
  switch (d.kind) {
    case TensorKind::kNorm:
    case TensorKind::kVector:
      return {d.ne[0]};
    case TensorKind::kExperts:
      return {d.ne[2], d.ne[1], d.ne[0]};
    default:
      return {d.ne[1], d.ne[0]};
  }
}

bool writes_residual(const std::string& name) {
  return ends_with(name, "attn_output.weight") || ends_with(name, "ssm_out.weight") ||
         name.find("ffn_down") != std::string::npos;
}

// Initial values in the trained parameterisation, at the scales `mtp synth` uses: projections N(0, 1/fan_in)
// (residual writers further scaled by 1/sqrt(2 n_layer)), embeddings N(0, 1), norms 1 + N(0, 0.02²),
// A = -exp(U(0, ln 16)), dt = softplus⁻¹ of a log-uniform value in [1e-3, 1e-1].
torch::Tensor initial_value(const TensorDesc& d, int64_t n_layer, at::Generator& gen) {
  const std::vector<int64_t> shape = torch_shape(d);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  if (d.kind == TensorKind::kNorm) {
    torch::Tensor noise = 0.02 * torch::randn(shape, gen, f32);
    return offset_norm(d) ? noise : 1.0 + noise;
  }
  if (ends_with(d.name, "ssm_a")) return torch::rand(shape, gen, f32) * std::log(16.0);  // A_log
  if (ends_with(d.name, "ssm_dt.bias")) {
    torch::Tensor dt = torch::exp(std::log(1e-3) + torch::rand(shape, gen, f32) * std::log(100.0));
    return dt + torch::log(-torch::expm1(-dt));
  }
  if (d.kind == TensorKind::kEmbedding) return torch::randn(shape, gen, f32);
  double sd = 1.0 / std::sqrt(static_cast<double>(d.ne[0]));
  if (writes_residual(d.name)) sd /= std::sqrt(2.0 * static_cast<double>(n_layer));
  return sd * torch::randn(shape, gen, f32);
}

// x / max(|x|_2, eps) over the last dimension.
torch::Tensor l2_normalize(const torch::Tensor& x, double eps) {
  return x / x.norm(2, {-1}, true).clamp_min(eps);
}

// Partial NeoX RoPE on the first n_rot dims of x [B, T, H, hd] at positions [T] (docs/model.md 3.2 step 4).
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& positions, int64_t n_rot, double base) {
  const int64_t half = n_rot / 2;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor inv = torch::pow(base, torch::arange(half, f64) * (-2.0 / static_cast<double>(n_rot)));
  const torch::Tensor theta = positions.to(torch::kFloat64).unsqueeze(1) * inv.unsqueeze(0);  // [T, half]
  const torch::Tensor c = theta.cos().to(x.dtype()).view({1, -1, 1, half});
  const torch::Tensor s = theta.sin().to(x.dtype()).view({1, -1, 1, half});
  const torch::Tensor x0 = x.index({"...", Slice(0, half)});
  const torch::Tensor x1 = x.index({"...", Slice(half, n_rot)});
  return torch::cat({x0 * c - x1 * s, x0 * s + x1 * c, x.index({"...", Slice(n_rot, torch::indexing::None)})},
                    -1);
}

}  // namespace

torch::Tensor delta_rule_recurrent(const DeltaInputs& in) {
  const int64_t B = in.q.size(0), H = in.q.size(1), T = in.q.size(2), dk = in.q.size(3), dv = in.v.size(3);
  torch::Tensor S = torch::zeros({B, H, dk, dv}, in.v.options());  // S[i_key][i_val]
  std::vector<torch::Tensor> out;
  out.reserve(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const torch::Tensor k = in.k.select(2, t).unsqueeze(-1);  // [B, H, dk, 1]
    const torch::Tensor q = in.q.select(2, t).unsqueeze(-1);
    const torch::Tensor v = in.v.select(2, t);  // [B, H, dv]
    S = S * in.g.select(2, t).exp().view({B, H, 1, 1});
    const torch::Tensor r = (S * k).sum(-2);  // Sᵀ k with the decayed state
    S = S + k * (in.beta.select(2, t).unsqueeze(-1) * (v - r)).unsqueeze(-2);
    out.push_back((S * q).sum(-2));  // Sᵀ q after the write
  }
  return torch::stack(out, 2);
}

// Within a chunk with cumulative log decays Γ (from the chunk start, inclusive) and state S₀ at its start,
// the written values u_t = β_t (v_t - r_t) solve (I + A) U = diag(β) V - diag(β e^Γ) K S₀, with the strictly
// lower A[t][j] = β_t e^(Γ_t - Γ_j) k_t·k_j; then o_t = e^(Γ_t) S₀ᵀ q_t + Σ_(j≤t) e^(Γ_t - Γ_j) (q_t·k_j) u_j
// and S_C = e^(Γ_C) S₀ + Σ_j e^(Γ_C - Γ_j) k_j u_jᵀ. Every exponent is <= 0.
torch::Tensor delta_rule_chunked(const DeltaInputs& in, int64_t chunk_size) {
  MTP_CHECK(chunk_size > 0);
  const int64_t B = in.q.size(0), H = in.q.size(1), T = in.q.size(2), dk = in.q.size(3), dv = in.v.size(3);
  const int64_t C = chunk_size, N = (T + C - 1) / C, pad = N * C - T;
  // Zero padding at the end: causal, so it changes no earlier output.
  auto chunks4 = [&](const torch::Tensor& x) {
    return torch::constant_pad_nd(x, {0, 0, 0, pad}).view({B, H, N, C, x.size(3)});
  };
  auto chunks3 = [&](const torch::Tensor& x) {
    return torch::constant_pad_nd(x, {0, pad}).view({B, H, N, C});
  };
  const torch::Tensor q = chunks4(in.q), k = chunks4(in.k), v = chunks4(in.v);
  const torch::Tensor beta = chunks3(in.beta).unsqueeze(-1),
                      gc = chunks3(in.g).cumsum(-1);  // [.., C, 1], [.., C]
  // decay[t][j] = e^(Γ_t - Γ_j) for j <= t, 0 above the diagonal.
  const torch::Tensor decay = (gc.unsqueeze(-1) - gc.unsqueeze(-2)).tril().exp().tril();
  const torch::Tensor kb = k * beta;
  const torch::Tensor A = (torch::matmul(kb, k.transpose(-1, -2)) * decay).tril(-1);
  const torch::Tensor eye = torch::eye(C, in.v.options());
  const torch::Tensor solved = torch::linalg_solve_triangular(
      A + eye, torch::cat({v * beta, kb * gc.exp().unsqueeze(-1)}, -1), /*upper=*/false, /*left=*/true,
      /*unitriangular=*/true);
  const torch::Tensor u0 = solved.index({"...", Slice(0, dv)});       // U when S₀ = 0
  const torch::Tensor w = solved.index({"...", Slice(dv, dv + dk)});  // U = u0 - w S₀

  torch::Tensor S = torch::zeros({B, H, dk, dv}, in.v.options());
  std::vector<torch::Tensor> out;
  for (int64_t n = 0; n < N; ++n) {
    const torch::Tensor qn = q.select(2, n), kn = k.select(2, n), gn = gc.select(2, n);
    const torch::Tensor u = u0.select(2, n) - torch::matmul(w.select(2, n), S);
    const torch::Tensor intra = torch::matmul(qn, kn.transpose(-1, -2)) * decay.select(2, n);
    out.push_back(torch::matmul(qn * gn.exp().unsqueeze(-1), S) + torch::matmul(intra, u));
    const torch::Tensor last = gn.index({"...", Slice(C - 1, C)});  // Γ_C [B, H, 1]
    S = S * last.exp().unsqueeze(-1) +
        torch::matmul((kn * (last - gn).exp().unsqueeze(-1)).transpose(-1, -2), u);
  }
  return torch::cat(out, 2).index({Slice(), Slice(), Slice(0, T)});
}

QwenTorch::QwenTorch(const Qwen35MoeConfig& config, uint64_t seed, ModelParts parts)
    : config_(config), parts_(parts) {
  MTP_CHECK(config_.validate().ok(), config_.validate().message());
  MTP_CHECK(config_.n_nextn == 1, "the trained model has one MTP block");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const TensorDesc& d : qwen35moe_tensors(config_, true)) {
    if (!exported(d)) continue;
    if (parts_ == ModelParts::kMtpBlock && !in_mtp_block(d.name) && d.name != "output.weight") continue;
    order_.push_back(d.name);
    params_[d.name] = initial_value(d, config_.n_layer, gen).set_requires_grad(true);
  }
}

std::vector<torch::Tensor> QwenTorch::parameters() const {
  std::vector<torch::Tensor> out;
  for (const std::string& name : order_) out.push_back(params_.at(name));
  return out;
}

bool QwenTorch::in_mtp_block(const std::string& name) const {
  return name.rfind("blk." + std::to_string(config_.n_layer) + ".", 0) == 0;
}

std::vector<torch::Tensor> QwenTorch::trunk_parameters() const {
  std::vector<torch::Tensor> out;
  for (const std::string& name : order_)
    if (!in_mtp_block(name)) out.push_back(params_.at(name));
  return out;
}

std::vector<torch::Tensor> QwenTorch::mtp_parameters() const {
  std::vector<torch::Tensor> out;
  for (const std::string& name : order_)
    if (in_mtp_block(name)) out.push_back(params_.at(name));
  return out;
}

void QwenTorch::freeze_trunk() {
  for (const std::string& name : order_)
    if (!in_mtp_block(name)) params_.at(name).set_requires_grad(false);
}

void QwenTorch::freeze_block_experts() {
  for (const std::string& name : order_)
    if (in_mtp_block(name) && ends_with(name, "_exps.weight")) params_.at(name).set_requires_grad(false);
}

Status QwenTorch::load_stored(const std::vector<NamedValues>& tensors) {
  std::map<std::string, const NamedValues*> by_name;
  std::vector<std::string> names;
  for (const NamedValues& t : tensors) {
    by_name[t.name] = &t;
    names.push_back(t.name);
  }
  return load_stored(names, [&](const std::string& name) -> Expected<std::vector<float>> {
    return by_name.at(name)->values;
  });
}

Status QwenTorch::load_stored(const std::vector<std::string>& names,
                              const std::function<Expected<std::vector<float>>(const std::string&)>& read) {
  std::set<std::string> given;
  bool has_block = false;
  for (const std::string& name : names) {
    if (params_.count(name) == 0) return unsupported("tensor ", name, " is not one the training model has");
    given.insert(name);
    has_block = has_block || in_mtp_block(name);
  }
  for (const std::string& name : order_)
    if (given.count(name) == 0 && (has_block || !in_mtp_block(name)))  // no MTP block in the file: allowed
      return invalid_argument("tensor ", name, " missing");
  torch::NoGradGuard no_grad;
  for (const std::string& name : order_) {
    if (given.count(name) == 0) continue;
    torch::Tensor& param = params_.at(name);
    MTP_ASSIGN_OR_RETURN(const std::vector<float> v, read(name));
    if (static_cast<int64_t>(v.size()) != param.numel())
      return invalid_argument("tensor ", name, " has ", v.size(), " values, expected ", param.numel());
    torch::Tensor stored = torch::from_blob(const_cast<float*>(v.data()), param.sizes(), torch::kFloat32);
    if (ends_with(name, "ssm_a")) {  // -exp(A_log)
      if (!(stored < 0).all().item<bool>()) return invalid_argument("tensor ", name, " has a value >= 0");
      stored = (-stored).log();
    } else if (ends_with(name, "norm.weight") && !ends_with(name, "ssm_norm.weight")) {
      stored = stored - 1.0;  // 1 + w: exact for stored values in [0.5, 2], so the forward sees the file's
    }
    param.copy_(stored);
  }
  return Status::Ok();
}

torch::Tensor QwenTorch::p(const std::string& name) const {
  auto it = params_.find(name);
  MTP_CHECK(it != params_.end(), "no parameter ", name);
  return it->second;
}

torch::Tensor QwenTorch::norm_weight(const std::string& name) const {
  return ends_with(name, "ssm_norm.weight") ? p(name) : 1.0 + p(name);
}

torch::Tensor QwenTorch::rms_norm(const torch::Tensor& x, const torch::Tensor& w) const {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + config_.rms_eps) * w;
}

// docs/model.md 3.2. a [B, T, n_embd] -> [B, T, n_embd].
torch::Tensor QwenTorch::attention(const std::string& blk, const torch::Tensor& a,
                                   const torch::Tensor& positions) const {
  const Qwen35MoeConfig& c = config_;
  const int64_t B = a.size(0), T = a.size(1), hd = c.head_dim;
  const torch::Tensor qg = torch::matmul(a, p(blk + "attn_q.weight").t()).view({B, T, c.n_head, 2 * hd});
  torch::Tensor q = qg.index({"...", Slice(0, hd)});
  const torch::Tensor gate = qg.index({"...", Slice(hd, 2 * hd)}).reshape({B, T, c.n_head * hd});
  torch::Tensor k = torch::matmul(a, p(blk + "attn_k.weight").t()).view({B, T, c.n_head_kv, hd});
  torch::Tensor v = torch::matmul(a, p(blk + "attn_v.weight").t()).view({B, T, c.n_head_kv, hd});
  q = rope(rms_norm(q, norm_weight(blk + "attn_q_norm.weight")), positions, c.n_rot, c.rope_freq_base);
  k = rope(rms_norm(k, norm_weight(blk + "attn_k_norm.weight")), positions, c.n_rot, c.rope_freq_base);

  // [B, heads, T, hd]; query head h reads KV head h / (n_head / n_head_kv).
  const int64_t group = c.n_head / c.n_head_kv;
  q = q.permute({0, 2, 1, 3});
  k = k.permute({0, 2, 1, 3}).repeat_interleave(group, 1);
  v = v.permute({0, 2, 1, 3}).repeat_interleave(group, 1);
  const torch::Tensor future = torch::ones({T, T}, torch::kBool).triu(1);
  const torch::Tensor scores = (torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(hd)))
                                   .masked_fill(future, -INFINITY);
  const torch::Tensor o = torch::matmul(scores.softmax(-1), v).permute({0, 2, 1, 3}).reshape({B, T, -1});
  return torch::matmul(o * torch::sigmoid(gate), p(blk + "attn_output.weight").t());
}

// docs/model.md 3.3. a [B, T, n_embd] -> [B, T, n_embd].
torch::Tensor QwenTorch::delta_net(const std::string& blk, const torch::Tensor& a, DeltaForm form) const {
  const Qwen35MoeConfig& c = config_;
  const int64_t B = a.size(0), T = a.size(1), d = c.ssm_d_state, h_k = c.ssm_n_group, h_v = c.ssm_dt_rank;
  const int64_t key_dim = c.gdn_key_dim(), conv_dim = c.gdn_conv_dim();
  const torch::Tensor u = torch::matmul(a, p(blk + "attn_qkv.weight").t());  // [B, T, conv_dim]
  const torch::Tensor z = torch::matmul(a, p(blk + "attn_gate.weight").t()).view({B, T, h_v, d});
  const torch::Tensor b = torch::matmul(a, p(blk + "ssm_beta.weight").t());  // [B, T, H_v]
  const torch::Tensor alpha = torch::matmul(a, p(blk + "ssm_alpha.weight").t());

  // Causal depthwise conv: left-pad d_conv - 1 zeros, so tap d_conv - 1 multiplies the current input.
  const torch::Tensor padded = torch::constant_pad_nd(u.transpose(1, 2), {c.ssm_d_conv - 1, 0});
  const torch::Tensor y = torch::silu(torch::conv1d(padded, p(blk + "ssm_conv1d.weight").unsqueeze(1),
                                                    c10::optional<torch::Tensor>(), torch::IntArrayRef{1},
                                                    torch::IntArrayRef{0}, torch::IntArrayRef{1}, conv_dim))
                              .transpose(1, 2);
  torch::Tensor q = l2_normalize(y.index({"...", Slice(0, key_dim)}).view({B, T, h_k, d}), c.rms_eps);
  torch::Tensor k =
      l2_normalize(y.index({"...", Slice(key_dim, 2 * key_dim)}).view({B, T, h_k, d}), c.rms_eps);
  const torch::Tensor v = y.index({"...", Slice(2 * key_dim, conv_dim)}).view({B, T, h_v, d});
  q = q / std::sqrt(static_cast<double>(d));
  // Tiled value-head order: value head j reads q/k head j mod H_k.
  q = q.repeat({1, 1, h_v / h_k, 1});
  k = k.repeat({1, 1, h_v / h_k, 1});

  const torch::Tensor A = -p(blk + "ssm_a").exp();
  const torch::Tensor g = A * torch::softplus(alpha + p(blk + "ssm_dt.bias"));  // log decay, <= 0
  const DeltaInputs in{q.permute({0, 2, 1, 3}), k.permute({0, 2, 1, 3}), v.permute({0, 2, 1, 3}),
                       torch::sigmoid(b).permute({0, 2, 1}), g.permute({0, 2, 1})};
  const torch::Tensor o =
      (form == DeltaForm::kChunked ? delta_rule_chunked(in, 64) : delta_rule_recurrent(in))
          .permute({0, 2, 1, 3});
  const torch::Tensor gated = rms_norm(o, norm_weight(blk + "ssm_norm.weight")) * torch::silu(z);
  return torch::matmul(gated.reshape({B, T, h_v * d}), p(blk + "ssm_out.weight").t());
}

namespace {

struct Routing {
  torch::Tensor weights;  // [N, k] renormalised top-k probabilities (differentiable)
  torch::Tensor index;    // [N, k] expert ids
};

Routing route(const torch::Tensor& x, const torch::Tensor& router, int64_t k) {
  const torch::Tensor probs = torch::matmul(x, router.t()).softmax(-1);
  auto [top, index] = probs.topk(k, -1);
  return {top / top.sum(-1, true).clamp_min(6.1035e-5), index};
}

// One expert's SwiGLU on rows x [M, n]: gate, up [ff, n], down [n, ff].
torch::Tensor expert_ffn(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& up,
                         const torch::Tensor& down) {
  return torch::matmul(torch::silu(torch::matmul(x, gate.t())) * torch::matmul(x, up.t()), down.t());
}

}  // namespace

torch::Tensor routed_experts_dense(const torch::Tensor& x, const ExpertWeights& w, int64_t k) {
  const Routing r = route(x, w.router, k);
  const torch::Tensor dense =
      torch::zeros({x.size(0), w.router.size(0)}, x.options()).scatter(1, r.index, r.weights);  // [N, E]
  const torch::Tensor gate = torch::einsum("nd,efd->nef", {x, w.gate});
  const torch::Tensor up = torch::einsum("nd,efd->nef", {x, w.up});
  const torch::Tensor y = torch::einsum("nef,edf->ned", {torch::silu(gate) * up, w.down});
  return (y * dense.unsqueeze(-1)).sum(1);
}

// The N x k (row, expert) pairs sorted by expert (stable, so rows stay in order within an expert): each
// expert's rows are one contiguous slice, gathered, run through that expert and added back with their weight.
torch::Tensor routed_experts_dispatched(const torch::Tensor& x, const ExpertWeights& w, int64_t k) {
  const int64_t N = x.size(0), E = w.router.size(0);
  const Routing r = route(x, w.router, k);
  const torch::Tensor expert = r.index.reshape({-1});  // [N k]
  const torch::Tensor order = std::get<1>(expert.sort(c10::optional<bool>(true), /*dim=*/0));
  const torch::Tensor rows = torch::arange(N, expert.options()).repeat_interleave(k).index_select(0, order);
  const torch::Tensor weights = r.weights.reshape({-1}).index_select(0, order).unsqueeze(-1);
  const torch::Tensor counts = torch::bincount(expert, {}, E);
  const int64_t* count = counts.data_ptr<int64_t>();
  // Views of every expert at once: the backward of unbind stacks the experts' gradients into one tensor,
  // where a select per expert (w.gate[e]) would fill a zero tensor of all the experts for each (at 35B-A3B
  // widths 768 fills of 1 GB a step).
  const std::vector<torch::Tensor> gate = w.gate.unbind(0), up = w.up.unbind(0), down = w.down.unbind(0);
  torch::Tensor out = torch::zeros_like(x);
  int64_t begin = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = count[e];
    if (n == 0) continue;
    const torch::Tensor sel = rows.slice(0, begin, begin + n);
    const size_t i = static_cast<size_t>(e);
    const torch::Tensor y = expert_ffn(x.index_select(0, sel), gate[i], up[i], down[i]);
    out = out.index_add(0, sel, y * weights.slice(0, begin, begin + n));
    begin += n;
  }
  return out;
}

// docs/model.md 3.4: the routed experts (dispatched) plus the sigmoid-gated shared expert.
torch::Tensor QwenTorch::moe(const std::string& blk, const torch::Tensor& f) const {
  const Qwen35MoeConfig& c = config_;
  const torch::Tensor x = f.reshape({-1, c.n_embd});  // [N, n]
  const torch::Tensor routed =
      routed_experts_dispatched(x,
                                {p(blk + "ffn_gate_inp.weight"), p(blk + "ffn_gate_exps.weight"),
                                 p(blk + "ffn_up_exps.weight"), p(blk + "ffn_down_exps.weight")},
                                c.n_expert_used);
  const torch::Tensor shared = expert_ffn(x, p(blk + "ffn_gate_shexp.weight"), p(blk + "ffn_up_shexp.weight"),
                                          p(blk + "ffn_down_shexp.weight"));
  const torch::Tensor s =
      torch::sigmoid(torch::matmul(x, p(blk + "ffn_gate_inp_shexp.weight")).unsqueeze(-1));
  return (routed + s * shared).view(f.sizes());
}

torch::Tensor QwenTorch::residual_block(const std::string& blk, bool full_attention, const torch::Tensor& x,
                                        const torch::Tensor& positions, DeltaForm form) const {
  const torch::Tensor a = rms_norm(x, norm_weight(blk + "attn_norm.weight"));
  const torch::Tensor h = x + (full_attention ? attention(blk, a, positions) : delta_net(blk, a, form));
  return h + moe(blk, rms_norm(h, norm_weight(blk + "post_attention_norm.weight")));
}

ForwardResult QwenTorch::forward(const torch::Tensor& tokens, bool with_mtp, DeltaForm form) const {
  const Qwen35MoeConfig& c = config_;
  MTP_CHECK(parts_ == ModelParts::kAll, "forward() needs the trunk");
  MTP_CHECK(tokens.dim() == 2 && tokens.scalar_type() == torch::kInt64, "tokens must be [B, T] int64");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const torch::Tensor embd = p("token_embd.weight");
  torch::Tensor x = embd.index_select(0, tokens.reshape({-1})).view({B, T, c.n_embd});
  const torch::Tensor positions = torch::arange(T, torch::kInt64);
  for (int64_t il = 0; il < c.n_layer; ++il)
    x = residual_block("blk." + std::to_string(il) + ".", c.is_full_attention(il), x, positions, form);
  ForwardResult r;
  r.hidden = rms_norm(x, norm_weight("output_norm.weight"));
  const torch::Tensor head = p("output.weight");
  r.logits = torch::matmul(r.hidden, head.t());
  if (!with_mtp || T < 2) return r;

  const torch::Tensor next = tokens.index({Slice(), Slice(1, T)}).reshape({-1});
  r.mtp_logits = mtp_logits(r.hidden.index({Slice(), Slice(0, T - 1)}),
                            embd.index_select(0, next).view({B, T - 1, c.n_embd}), form);
  return r;
}

// docs/model.md 4.1-4.3: the row for token t + 1 (at position t + 1) reads the trunk's hidden at t.
torch::Tensor QwenTorch::mtp_logits(const torch::Tensor& hidden, const torch::Tensor& embedded,
                                    DeltaForm form) const {
  const Qwen35MoeConfig& c = config_;
  MTP_CHECK(hidden.dim() == 3 && hidden.size(2) == c.n_embd && embedded.sizes() == hidden.sizes(),
            "hidden and embedded must both be [B, T, n_embd]");
  const std::string blk = "blk." + std::to_string(c.n_layer) + ".";
  const torch::Tensor e = rms_norm(embedded, norm_weight(blk + "nextn.enorm.weight"));
  const torch::Tensor h = rms_norm(hidden, norm_weight(blk + "nextn.hnorm.weight"));
  torch::Tensor m = torch::matmul(torch::cat({e, h}, -1), p(blk + "nextn.eh_proj.weight").t());
  m = residual_block(blk, true, m, torch::arange(1, hidden.size(1) + 1, torch::kInt64), form);
  return torch::matmul(rms_norm(m, norm_weight(blk + "nextn.shared_head_norm.weight")),
                       p("output.weight").t());
}

std::vector<std::pair<std::string, torch::Tensor>> QwenTorch::export_tensors() const {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const std::string& name : order_) {
    if (parts_ == ModelParts::kMtpBlock && !in_mtp_block(name)) continue;
    torch::Tensor t = p(name).detach();
    if (ends_with(name, "ssm_a"))
      t = -t.exp();
    else if (ends_with(name, "norm.weight"))
      t = norm_weight(name).detach();
    out.emplace_back(name, t.to(torch::kFloat32).contiguous());
  }
  return out;
}

}  // namespace mtp::train
