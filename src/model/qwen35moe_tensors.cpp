#include "model/qwen35moe_tensors.h"

#include <algorithm>

namespace mtp {
namespace {

TensorDesc desc(int64_t layer, const std::string& suffix, std::array<int64_t, 4> ne, TensorKind kind,
                bool required = true) {
  return {"blk." + std::to_string(layer) + "." + suffix, ne, kind, required, layer};
}

void add_attention(const Qwen35MoeConfig& c, int64_t il, std::vector<TensorDesc>& out) {
  const int64_t q_width = c.n_head * c.head_dim;
  const int64_t kv_width = c.n_head_kv * c.head_dim;
  // attn_q packs query and gate per head: rows [h*2d, h*2d+d) query, [h*2d+d, (h+1)*2d) gate.
  out.push_back(desc(il, "attn_q.weight", {c.n_embd, 2 * q_width, 1, 1}, TensorKind::kMatrix));
  out.push_back(desc(il, "attn_k.weight", {c.n_embd, kv_width, 1, 1}, TensorKind::kMatrix));
  out.push_back(desc(il, "attn_v.weight", {c.n_embd, kv_width, 1, 1}, TensorKind::kMatrix));
  out.push_back(desc(il, "attn_output.weight", {q_width, c.n_embd, 1, 1}, TensorKind::kMatrix));
  out.push_back(desc(il, "attn_q_norm.weight", {c.head_dim, 1, 1, 1}, TensorKind::kNorm));
  out.push_back(desc(il, "attn_k_norm.weight", {c.head_dim, 1, 1, 1}, TensorKind::kNorm));
}

void add_delta_net(const Qwen35MoeConfig& c, int64_t il, std::vector<TensorDesc>& out) {
  out.push_back(desc(il, "attn_qkv.weight", {c.n_embd, c.gdn_conv_dim(), 1, 1}, TensorKind::kMatrix));
  out.push_back(desc(il, "attn_gate.weight", {c.n_embd, c.gdn_value_dim(), 1, 1}, TensorKind::kMatrix));
  out.push_back(desc(il, "ssm_conv1d.weight", {c.ssm_d_conv, c.gdn_conv_dim(), 1, 1}, TensorKind::kConv));
  out.push_back(desc(il, "ssm_dt.bias", {c.ssm_dt_rank, 1, 1, 1}, TensorKind::kVector));
  out.push_back(desc(il, "ssm_a", {c.ssm_dt_rank, 1, 1, 1}, TensorKind::kVector));
  out.push_back(desc(il, "ssm_beta.weight", {c.n_embd, c.ssm_dt_rank, 1, 1}, TensorKind::kMatrix));
  out.push_back(desc(il, "ssm_alpha.weight", {c.n_embd, c.ssm_dt_rank, 1, 1}, TensorKind::kMatrix));
  out.push_back(desc(il, "ssm_norm.weight", {c.ssm_d_state, 1, 1, 1}, TensorKind::kNorm));
  out.push_back(desc(il, "ssm_out.weight", {c.gdn_value_dim(), c.n_embd, 1, 1}, TensorKind::kMatrix));
}

void add_moe(const Qwen35MoeConfig& c, int64_t il, std::vector<TensorDesc>& out) {
  out.push_back(desc(il, "ffn_gate_inp.weight", {c.n_embd, c.n_expert, 1, 1}, TensorKind::kRouter));
  out.push_back(
      desc(il, "ffn_gate_exps.weight", {c.n_embd, c.n_ff_exp, c.n_expert, 1}, TensorKind::kExperts));
  out.push_back(desc(il, "ffn_up_exps.weight", {c.n_embd, c.n_ff_exp, c.n_expert, 1}, TensorKind::kExperts));
  out.push_back(
      desc(il, "ffn_down_exps.weight", {c.n_ff_exp, c.n_embd, c.n_expert, 1}, TensorKind::kExperts));
  out.push_back(desc(il, "ffn_gate_inp_shexp.weight", {c.n_embd, 1, 1, 1}, TensorKind::kVector));
  out.push_back(desc(il, "ffn_gate_shexp.weight", {c.n_embd, c.n_ff_shexp, 1, 1}, TensorKind::kMatrix));
  out.push_back(desc(il, "ffn_up_shexp.weight", {c.n_embd, c.n_ff_shexp, 1, 1}, TensorKind::kMatrix));
  out.push_back(desc(il, "ffn_down_shexp.weight", {c.n_ff_shexp, c.n_embd, 1, 1}, TensorKind::kMatrix));
}

}  // namespace

std::vector<TensorDesc> qwen35moe_block_tensors(const Qwen35MoeConfig& c, int64_t il) {
  std::vector<TensorDesc> out;
  out.push_back(desc(il, "attn_norm.weight", {c.n_embd, 1, 1, 1}, TensorKind::kNorm));
  out.push_back(desc(il, "post_attention_norm.weight", {c.n_embd, 1, 1, 1}, TensorKind::kNorm));
  if (c.is_full_attention(il))
    add_attention(c, il, out);
  else
    add_delta_net(c, il, out);
  add_moe(c, il, out);
  if (il >= c.n_layer) {
    // The MTP block: input norms and the projection of [embedding; hidden] (docs/model.md section 2.6).
    out.push_back(desc(il, "nextn.eh_proj.weight", {2 * c.n_embd, c.n_embd, 1, 1}, TensorKind::kMatrix));
    out.push_back(desc(il, "nextn.enorm.weight", {c.n_embd, 1, 1, 1}, TensorKind::kNorm));
    out.push_back(desc(il, "nextn.hnorm.weight", {c.n_embd, 1, 1, 1}, TensorKind::kNorm));
    out.push_back(desc(il, "nextn.shared_head_norm.weight", {c.n_embd, 1, 1, 1}, TensorKind::kNorm, false));
    out.push_back(
        desc(il, "nextn.shared_head_head.weight", {c.n_embd, c.n_vocab, 1, 1}, TensorKind::kOutput, false));
    out.push_back(
        desc(il, "nextn.embed_tokens.weight", {c.n_embd, c.n_vocab, 1, 1}, TensorKind::kEmbedding, false));
  }
  std::sort(out.begin(), out.end(), [](const TensorDesc& a, const TensorDesc& b) { return a.name < b.name; });
  return out;
}

std::vector<TensorDesc> qwen35moe_tensors(const Qwen35MoeConfig& c, bool with_mtp) {
  // Non-block tensors in name order, as llama.cpp's weights map orders them.
  std::vector<TensorDesc> out = {
      {"output.weight", {c.n_embd, c.n_vocab, 1, 1}, TensorKind::kOutput, false, -1},
      {"output_norm.weight", {c.n_embd, 1, 1, 1}, TensorKind::kNorm, true, -1},
      {"token_embd.weight", {c.n_embd, c.n_vocab, 1, 1}, TensorKind::kEmbedding, true, -1},
  };
  const int64_t n_blocks = c.n_layer + (with_mtp ? 1 : 0);
  for (int64_t il = 0; il < n_blocks; ++il) {
    auto block = qwen35moe_block_tensors(c, il);
    out.insert(out.end(), block.begin(), block.end());
  }
  return out;
}

}  // namespace mtp
