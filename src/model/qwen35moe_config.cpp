#include "model/qwen35moe_config.h"

#include <cmath>

namespace mtp {
namespace {

std::string key(const char* suffix) {
  return std::string(kQwen35MoeArch) + "." + suffix;
}

}  // namespace

Status Qwen35MoeConfig::validate() const {
  auto positive = [](int64_t v, const char* name) -> Status {
    if (v <= 0) return invalid_argument(name, " must be positive, got ", v);
    return Status::Ok();
  };
  MTP_RETURN_IF_ERROR(positive(n_vocab, "vocabulary size"));
  MTP_RETURN_IF_ERROR(positive(n_embd, "embedding_length"));
  MTP_RETURN_IF_ERROR(positive(n_layer, "trunk layer count"));
  MTP_RETURN_IF_ERROR(positive(n_head, "attention.head_count"));
  MTP_RETURN_IF_ERROR(positive(n_head_kv, "attention.head_count_kv"));
  MTP_RETURN_IF_ERROR(positive(head_dim, "attention.key_length"));
  MTP_RETURN_IF_ERROR(positive(n_expert, "expert_count"));
  MTP_RETURN_IF_ERROR(positive(n_expert_used, "expert_used_count"));
  MTP_RETURN_IF_ERROR(positive(n_ff_exp, "expert_feed_forward_length"));
  MTP_RETURN_IF_ERROR(positive(n_ff_shexp, "expert_shared_feed_forward_length"));
  MTP_RETURN_IF_ERROR(positive(ssm_d_conv, "ssm.conv_kernel"));
  MTP_RETURN_IF_ERROR(positive(ssm_d_state, "ssm.state_size"));
  MTP_RETURN_IF_ERROR(positive(ssm_n_group, "ssm.group_count"));
  MTP_RETURN_IF_ERROR(positive(ssm_dt_rank, "ssm.time_step_rank"));
  MTP_RETURN_IF_ERROR(positive(full_attention_interval, "full_attention_interval"));
  // A NaN or infinite epsilon or RoPE base would not fail anywhere: it would turn every logit into NaN.
  if (!(std::isfinite(rms_eps) && rms_eps > 0))
    return invalid_argument("attention.layer_norm_rms_epsilon must be positive and finite, got ", rms_eps);
  if (!(std::isfinite(rope_freq_base) && rope_freq_base > 0))
    return invalid_argument("rope.freq_base must be positive and finite, got ", rope_freq_base);
  if (n_nextn < 0 || n_nextn > 1)
    return unsupported("nextn_predict_layers is ", n_nextn, "; only 0 or 1 is supported");
  if (n_head % n_head_kv != 0)
    return invalid_argument("head_count ", n_head, " is not a multiple of head_count_kv ", n_head_kv);
  if (n_expert_used > n_expert)
    return invalid_argument("expert_used_count ", n_expert_used, " exceeds expert_count ", n_expert);
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0) {
    return invalid_argument("rope.dimension_count ", n_rot, " must be even and within the head dim ",
                            head_dim);
  }
  if (ssm_dt_rank % ssm_n_group != 0) {
    return invalid_argument("ssm.time_step_rank ", ssm_dt_rank, " is not a multiple of ssm.group_count ",
                            ssm_n_group);
  }
  if (ssm_d_inner != ssm_dt_rank * ssm_d_state) {
    return invalid_argument("ssm.inner_size ", ssm_d_inner,
                            " != time_step_rank * state_size = ", ssm_dt_rank * ssm_d_state);
  }
  return Status::Ok();
}

Expected<Qwen35MoeConfig> read_qwen35moe_config(const Metadata& md, int64_t n_vocab) {
  MTP_ASSIGN_OR_RETURN(std::string arch, md.get_string("general.architecture"));
  if (arch != kQwen35MoeArch)
    return unsupported("architecture is '", arch, "', expected '", kQwen35MoeArch, "'");
  Qwen35MoeConfig c;
  c.n_vocab = n_vocab;
  auto integer = [&](const char* suffix, int64_t* out) -> Status {
    MTP_ASSIGN_OR_RETURN(*out, md.get_integer(key(suffix)));
    return Status::Ok();
  };
  auto integer_or = [&](const char* suffix, int64_t fallback, int64_t* out) -> Status {
    MTP_ASSIGN_OR_RETURN(*out, md.get_integer_or(key(suffix), fallback));
    return Status::Ok();
  };
  int64_t block_count = 0;
  MTP_RETURN_IF_ERROR(integer("block_count", &block_count));
  MTP_RETURN_IF_ERROR(integer_or("nextn_predict_layers", 0, &c.n_nextn));
  c.n_layer = block_count - c.n_nextn;
  MTP_RETURN_IF_ERROR(integer_or("context_length", 0, &c.context_length));
  MTP_RETURN_IF_ERROR(integer("embedding_length", &c.n_embd));
  MTP_RETURN_IF_ERROR(integer("attention.head_count", &c.n_head));
  MTP_RETURN_IF_ERROR(integer("attention.head_count_kv", &c.n_head_kv));
  MTP_RETURN_IF_ERROR(integer("attention.key_length", &c.head_dim));
  int64_t value_length = 0;
  MTP_RETURN_IF_ERROR(integer_or("attention.value_length", c.head_dim, &value_length));
  if (value_length != c.head_dim) {
    return unsupported("attention.value_length ", value_length, " differs from key_length ", c.head_dim);
  }
  MTP_RETURN_IF_ERROR(integer("rope.dimension_count", &c.n_rot));
  MTP_ASSIGN_OR_RETURN(c.rope_freq_base, md.get<float>(key("rope.freq_base")));
  MTP_ASSIGN_OR_RETURN(c.rms_eps, md.get<float>(key("attention.layer_norm_rms_epsilon")));
  if (md.contains(key("rope.dimension_sections"))) {
    MTP_ASSIGN_OR_RETURN(auto sections, md.get_integer_array(key("rope.dimension_sections")));
    for (size_t i = 0; i < sections.size() && i < 4; ++i)
      c.rope_sections[i] = static_cast<int32_t>(sections[i]);
  }
  MTP_RETURN_IF_ERROR(integer("expert_count", &c.n_expert));
  MTP_RETURN_IF_ERROR(integer("expert_used_count", &c.n_expert_used));
  MTP_RETURN_IF_ERROR(integer("expert_feed_forward_length", &c.n_ff_exp));
  MTP_RETURN_IF_ERROR(integer_or("expert_shared_feed_forward_length", c.n_ff_exp, &c.n_ff_shexp));
  MTP_RETURN_IF_ERROR(integer("ssm.conv_kernel", &c.ssm_d_conv));
  MTP_RETURN_IF_ERROR(integer("ssm.state_size", &c.ssm_d_state));
  MTP_RETURN_IF_ERROR(integer("ssm.group_count", &c.ssm_n_group));
  MTP_RETURN_IF_ERROR(integer("ssm.time_step_rank", &c.ssm_dt_rank));
  MTP_RETURN_IF_ERROR(integer("ssm.inner_size", &c.ssm_d_inner));
  MTP_RETURN_IF_ERROR(integer_or("full_attention_interval", 4, &c.full_attention_interval));
  MTP_RETURN_IF_ERROR(c.validate());
  return c;
}

void write_qwen35moe_config(const Qwen35MoeConfig& c, Metadata& md) {
  auto u32 = [&](const char* suffix, int64_t v) {
    md.set(key(suffix), Value::scalar(static_cast<uint32_t>(v)));
  };
  md.set("general.architecture", Value::string(kQwen35MoeArch));
  u32("context_length", c.context_length);
  u32("embedding_length", c.n_embd);
  u32("block_count", c.block_count());
  if (c.n_nextn > 0) u32("nextn_predict_layers", c.n_nextn);
  u32("attention.head_count", c.n_head);
  u32("attention.head_count_kv", c.n_head_kv);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  md.set(key("attention.layer_norm_rms_epsilon"), Value::scalar(c.rms_eps));
  u32("rope.dimension_count", c.n_rot);
  md.set(key("rope.freq_base"), Value::scalar(c.rope_freq_base));
  md.set(key("rope.dimension_sections"), Value::array<int32_t>({c.rope_sections[0], c.rope_sections[1],
                                                                c.rope_sections[2], c.rope_sections[3]}));
  u32("expert_count", c.n_expert);
  u32("expert_used_count", c.n_expert_used);
  u32("expert_feed_forward_length", c.n_ff_exp);
  u32("expert_shared_feed_forward_length", c.n_ff_shexp);
  u32("ssm.conv_kernel", c.ssm_d_conv);
  u32("ssm.state_size", c.ssm_d_state);
  u32("ssm.group_count", c.ssm_n_group);
  u32("ssm.time_step_rank", c.ssm_dt_rank);
  u32("ssm.inner_size", c.ssm_d_inner);
  u32("full_attention_interval", c.full_attention_interval);
}

Expected<Qwen35MoeConfig> qwen35moe_shape(const std::string& name, int64_t n_layer) {
  Qwen35MoeConfig c;
  c.rope_sections = {11, 11, 10, 0};
  c.rms_eps = 1e-6f;
  c.rope_freq_base = 1e7f;
  c.ssm_d_conv = 4;
  c.full_attention_interval = 4;
  if (name == "tiny") {
    // 4 layers (3 GDN + 1 attention), hidden 64, 8 experts top-2: a few MB, fast enough for every unit test.
    c.n_vocab = 512;
    c.context_length = 4096;
    c.n_embd = 64;
    c.n_layer = n_layer > 0 ? n_layer : 4;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim = 32;
    c.n_rot = 8;
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff_exp = 32;
    c.n_ff_shexp = 32;
    c.ssm_d_state = 16;
    c.ssm_n_group = 2;
    c.ssm_dt_rank = 4;
  } else if (name == "small") {
    // 4 layers, hidden 256, 8 experts top-2, 512-token vocabulary: rows long enough for every block type
    // (K-quants need 256), small enough that a decode step is fixed cost, not bandwidth (per-step overhead).
    c.n_vocab = 512;
    c.context_length = 4096;
    c.n_embd = 256;
    c.n_layer = n_layer > 0 ? n_layer : 4;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim = 64;
    c.n_rot = 16;
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff_exp = 256;
    c.n_ff_shexp = 256;
    c.ssm_d_state = 32;
    c.ssm_n_group = 4;
    c.ssm_dt_rank = 8;
  } else if (name == "code") {
    // The bundled trained model (models/README.md): 4 layers, hidden 128, 8 experts top-2, a 2048-token
    // vocabulary; small enough to train in under an hour on 2 CPU cores.
    c.n_vocab = 2048;
    c.context_length = 4096;
    c.n_embd = 128;
    c.n_layer = n_layer > 0 ? n_layer : 4;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim = 32;
    c.n_rot = 8;
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff_exp = 128;
    c.n_ff_shexp = 128;
    c.ssm_d_state = 32;
    c.ssm_n_group = 2;
    c.ssm_dt_rank = 4;
  } else if (name == "35b-a3b") {
    // Qwen3.5/3.6-35B-A3B widths (docs/model.md section 1); the real model has 40 trunk layers.
    c.n_vocab = 248320;
    c.context_length = 262144;
    c.n_embd = 2048;
    c.n_layer = n_layer > 0 ? n_layer : 40;
    c.n_head = 16;
    c.n_head_kv = 2;
    c.head_dim = 256;
    c.n_rot = 64;
    c.n_expert = 256;
    c.n_expert_used = 8;
    c.n_ff_exp = 512;
    c.n_ff_shexp = 512;
    c.ssm_d_state = 128;
    c.ssm_n_group = 16;
    c.ssm_dt_rank = 32;
  } else {
    return invalid_argument("unknown shape '", name, "' (known: tiny, small, code, 35b-a3b)");
  }
  c.ssm_d_inner = c.ssm_dt_rank * c.ssm_d_state;
  MTP_RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace mtp
