#include "model/qwen35moe_weights.h"

#include <cmath>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>

#include "base/check.h"
#include "model/qwen35moe_tensors.h"
#include "quant/quantize.h"

namespace mtp {
namespace {

// Norms, vectors and conv taps are stored as floats by every converter; matrices may be any type this build
// can dequantize.
bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

bool type_fits(TensorKind kind, GgmlType type) {
  switch (kind) {
    case TensorKind::kNorm:
    case TensorKind::kVector:
    case TensorKind::kConv:
      return is_float_type(type);
    default:
      return type_traits(type).computable;
  }
}

const char* expected_types(TensorKind kind) {
  switch (kind) {
    case TensorKind::kNorm:
    case TensorKind::kVector:
    case TensorKind::kConv:
      return "f32, f16 or bf16";
    default:
      return "a type this build can dequantize (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_K q3_K q4_K q5_K "
             "q6_K iq4_nl iq4_xs mxfp4)";
  }
}

// Index of the first NaN or infinity in a float tensor (norms, vectors, conv taps: small, so read whole at
// load), or -1. Such a value would not fail anywhere: it would turn every logit into NaN.
int64_t first_non_finite(const TensorView& v) {
  std::vector<float> row(static_cast<size_t>(v.ne[0]));
  for (int64_t r = 0; r < v.n_rows(); ++r) {
    MTP_CHECK(dequantize_row(v.type, v.row(r), row.data(), v.ne[0]).ok());
    for (int64_t i = 0; i < v.ne[0]; ++i)
      if (!std::isfinite(row[static_cast<size_t>(i)])) return r * v.ne[0] + i;
  }
  return -1;
}

// The table's entries, checked against the file and keyed by name. Block structs are then filled by name;
// asking for a name the table does not list is a bug in this file, not in the model file.
class Binder {
 public:
  Status bind_all(const GgufFile& file, const std::vector<TensorDesc>& table) {
    for (const TensorDesc& d : table) {
      const TensorInfo* info = file.find_tensor(d.name);
      if (info == nullptr) {
        if (d.required) {
          return not_found("tensor '", d.name, "' is missing (expected shape ", shape_string(d.ne), ")");
        }
        continue;
      }
      if (info->ne != d.ne) {
        return corrupt("tensor '", d.name, "' has shape ", shape_string(info->ne), ", expected ",
                       shape_string(d.ne));
      }
      if (!type_fits(d.kind, info->type)) {
        return unsupported("tensor '", d.name, "' has type ", type_name(info->type), ", expected ",
                           expected_types(d.kind));
      }
      if (d.ne[0] % type_traits(info->type).block_size != 0) {
        return corrupt("tensor '", d.name, "' row length ", d.ne[0], " is not a multiple of the ",
                       type_name(info->type), " block size");
      }
      // Rows are read through float and 16-bit block fields: a file written with general.alignment 1 or 2
      // can place a tensor where those loads would be misaligned (undefined behaviour), so it is refused.
      const size_t align = info->type == GgmlType::F32 ? 4 : 2;
      if (reinterpret_cast<uintptr_t>(file.tensor_data(*info).data()) % align != 0) {
        return unsupported(
            "tensor '", d.name, "' starts at a file offset that is not a multiple of ", align,
            " (general.alignment too small); rewrite the file with the default alignment of 32");
      }
      TensorView v;
      v.data = file.tensor_data(*info).data();
      v.type = info->type;
      v.ne = info->ne;
      if (is_float_type(v.type)) {
        if (const int64_t at = first_non_finite(v); at >= 0)
          return corrupt("tensor '", d.name, "' holds a NaN or infinity (element ", at, ")");
      }
      views_.emplace(d.name, v);
    }
    for (const TensorDesc& d : table) listed_.emplace(d.name);
    return Status::Ok();
  }

  // A bound tensor; an invalid view for an optional tensor the file lacks.
  TensorView get(const std::string& name) const {
    MTP_CHECK(listed_.count(name) == 1, "tensor '", name, "' is not in the qwen35moe table");
    auto it = views_.find(name);
    return it == views_.end() ? TensorView{} : it->second;
  }
  TensorView get(int64_t layer, const char* suffix) const {
    return get("blk." + std::to_string(layer) + "." + suffix);
  }

 private:
  std::unordered_map<std::string, TensorView> views_;
  std::unordered_set<std::string> listed_;
};

LayerWeights bind_layer(const Binder& b, const Qwen35MoeConfig& c, int64_t il) {
  LayerWeights w;
  w.full_attention = c.is_full_attention(il);
  w.attn_norm = b.get(il, "attn_norm.weight");
  w.post_attention_norm = b.get(il, "post_attention_norm.weight");
  if (w.full_attention) {
    w.attn.q = b.get(il, "attn_q.weight");
    w.attn.k = b.get(il, "attn_k.weight");
    w.attn.v = b.get(il, "attn_v.weight");
    w.attn.output = b.get(il, "attn_output.weight");
    w.attn.q_norm = b.get(il, "attn_q_norm.weight");
    w.attn.k_norm = b.get(il, "attn_k_norm.weight");
  } else {
    w.gdn.qkv = b.get(il, "attn_qkv.weight");
    w.gdn.gate = b.get(il, "attn_gate.weight");
    w.gdn.conv1d = b.get(il, "ssm_conv1d.weight");
    w.gdn.dt_bias = b.get(il, "ssm_dt.bias");
    w.gdn.a = b.get(il, "ssm_a");
    w.gdn.beta = b.get(il, "ssm_beta.weight");
    w.gdn.alpha = b.get(il, "ssm_alpha.weight");
    w.gdn.norm = b.get(il, "ssm_norm.weight");
    w.gdn.out = b.get(il, "ssm_out.weight");
  }
  w.moe.router = b.get(il, "ffn_gate_inp.weight");
  w.moe.gate_exps = b.get(il, "ffn_gate_exps.weight");
  w.moe.up_exps = b.get(il, "ffn_up_exps.weight");
  w.moe.down_exps = b.get(il, "ffn_down_exps.weight");
  w.moe.shexp_gate = b.get(il, "ffn_gate_inp_shexp.weight");
  w.moe.gate_shexp = b.get(il, "ffn_gate_shexp.weight");
  w.moe.up_shexp = b.get(il, "ffn_up_shexp.weight");
  w.moe.down_shexp = b.get(il, "ffn_down_shexp.weight");
  return w;
}

// The MTP block blk.{il} with the fallbacks of section 2.6 for its optional tensors (the trunk's).
MtpWeights bind_mtp(const Binder& b, const Qwen35MoeConfig& c, int64_t il, const Qwen35MoeWeights& trunk) {
  MtpWeights m;
  m.block = bind_layer(b, c, il);
  m.eh_proj = b.get(il, "nextn.eh_proj.weight");
  m.enorm = b.get(il, "nextn.enorm.weight");
  m.hnorm = b.get(il, "nextn.hnorm.weight");
  m.shared_head_norm = b.get(il, "nextn.shared_head_norm.weight");
  m.own_head_norm = m.shared_head_norm.valid();
  if (!m.own_head_norm) m.shared_head_norm = trunk.output_norm;
  m.head = b.get(il, "nextn.shared_head_head.weight");
  m.own_head = m.head.valid();
  if (!m.own_head) m.head = trunk.output;
  m.embed_tokens = b.get(il, "nextn.embed_tokens.weight");
  m.own_embed_tokens = m.embed_tokens.valid();
  if (!m.own_embed_tokens) m.embed_tokens = trunk.token_embd;
  return m;
}

}  // namespace

std::string shape_string(const std::array<int64_t, 4>& ne) {
  int n = 1;
  for (int i = 0; i < 4; ++i)
    if (ne[i] != 1) n = i + 1;
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

Expected<Qwen35MoeWeights> bind_qwen35moe_weights(const GgufFile& file, const Qwen35MoeConfig& c) {
  const bool with_mtp = c.n_nextn == 1;
  Binder b;
  MTP_RETURN_IF_ERROR(b.bind_all(file, qwen35moe_tensors(c, with_mtp)));

  Qwen35MoeWeights w;
  w.token_embd = b.get("token_embd.weight");
  w.output_norm = b.get("output_norm.weight");
  w.output = b.get("output.weight");
  if (!w.output.valid()) {
    w.output = w.token_embd;  // tied head (section 2.1)
    w.output_tied = true;
  }
  w.layers.reserve(static_cast<size_t>(c.n_layer));
  for (int64_t il = 0; il < c.n_layer; ++il) w.layers.push_back(bind_layer(b, c, il));

  if (with_mtp) w.mtp = bind_mtp(b, c, c.n_layer, w);
  return w;
}

Expected<MtpWeights> bind_mtp_block(const GgufFile& file, const Qwen35MoeConfig& trunk_config, int64_t block,
                                    const Qwen35MoeWeights& trunk) {
  Qwen35MoeConfig c = trunk_config;
  c.n_layer = block;  // the block's own index, so the table names blk.{block}.* with the trunk's widths
  c.n_nextn = 1;
  Binder b;
  MTP_RETURN_IF_ERROR(b.bind_all(file, qwen35moe_block_tensors(c, block)));
  return bind_mtp(b, c, block, trunk);
}

}  // namespace mtp
