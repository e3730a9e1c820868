// The weights of a qwen35moe model as plain structs of typed, non-owning views into the mapped GGUF file
// (docs/model.md section 2). Binding goes through the one tensor table (qwen35moe_tensors.h): every view here
// is a table entry whose name, shape and type were checked; nothing is copied or converted.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "model/qwen35moe_config.h"
#include "quant/types.h"

namespace mtp {

// A tensor in its stored format. `ne` in GGUF order (ne[0] = row length, contiguous). Rows of a 3-D expert
// stack are numbered across experts: expert e's row o is row e*ne[1] + o.
struct TensorView {
  const uint8_t* data = nullptr;
  GgmlType type = GgmlType::F32;
  std::array<int64_t, 4> ne{0, 0, 0, 0};
  // The same matrix repacked for the SIMD kernels (kernels/pack.h), owned by the Model; nullptr when not
  // packed. `data` keeps the file's bytes (the reference forward, row lookups and draft heads read those).
  const uint8_t* packed = nullptr;

  bool valid() const { return data != nullptr; }
  int64_t row_length() const { return ne[0]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  int64_t row_bytes() const { return row_size(type, ne[0]); }
  int64_t bytes() const { return row_bytes() * n_rows(); }  // in the file's format
  const uint8_t* row(int64_t r) const { return data + r * row_bytes(); }
};

// Gated full attention (trunk layers with (il+1) % interval == 0, and the MTP block); section 2.3.
struct AttentionWeights {
  TensorView q;       // {n_embd, 2*n_head*head_dim}: per head [query(head_dim) | gate(head_dim)]
  TensorView k;       // {n_embd, n_head_kv*head_dim}
  TensorView v;       // {n_embd, n_head_kv*head_dim}
  TensorView output;  // {n_head*head_dim, n_embd}
  TensorView q_norm;  // {head_dim}
  TensorView k_norm;  // {head_dim}
};

// Gated DeltaNet (all other trunk layers); section 2.4. Value heads are in GGUF (tiled) order.
struct DeltaNetWeights {
  TensorView qkv;      // {n_embd, conv_dim}: q (H_k*d), k (H_k*d), v (H_v*d)
  TensorView gate;     // {n_embd, H_v*d}: z
  TensorView conv1d;   // {d_conv, conv_dim}: taps per channel, tap d_conv-1 multiplies the current token
  TensorView dt_bias;  // {H_v}
  TensorView a;        // {H_v}: A = -exp(A_log), already negated
  TensorView beta;     // {n_embd, H_v}
  TensorView alpha;    // {n_embd, H_v}
  TensorView norm;     // {d}: gated RMSNorm weight shared by all heads
  TensorView out;      // {H_v*d, n_embd}
};

// MoE with a sigmoid-gated shared expert; section 2.5.
struct MoeWeights {
  TensorView router;      // {n_embd, n_expert}
  TensorView gate_exps;   // {n_embd, n_ff_exp, n_expert}
  TensorView up_exps;     // {n_embd, n_ff_exp, n_expert}
  TensorView down_exps;   // {n_ff_exp, n_embd, n_expert}
  TensorView shexp_gate;  // {n_embd}: the shared expert's scalar gate logit weights
  TensorView gate_shexp;  // {n_embd, n_ff_shexp}
  TensorView up_shexp;    // {n_embd, n_ff_shexp}
  TensorView down_shexp;  // {n_ff_shexp, n_embd}
};

struct LayerWeights {
  bool full_attention = false;
  TensorView attn_norm;            // {n_embd}
  TensorView post_attention_norm;  // {n_embd}
  AttentionWeights attn;           // set when full_attention
  DeltaNetWeights gdn;             // set otherwise
  MoeWeights moe;
};

// The MTP/NextN block blk.{n_layer}; section 2.6. Optional tensors are already resolved to their fallbacks,
// so the forward pass never needs to know which were present.
struct MtpWeights {
  TensorView eh_proj;           // {2*n_embd, n_embd}: input [enorm(embedding); hnorm(hidden)]
  TensorView enorm;             // {n_embd}
  TensorView hnorm;             // {n_embd}
  TensorView shared_head_norm;  // {n_embd}; output_norm when absent
  TensorView head;              // {n_embd, n_vocab}; the trunk's output (or token_embd when tied) when absent
  TensorView embed_tokens;      // {n_embd, n_vocab}; token_embd when absent
  bool own_head_norm = false;   // which of the optional tensors the file had (for reports)
  bool own_head = false;
  bool own_embed_tokens = false;
  LayerWeights block;  // full attention + MoE
};

struct Qwen35MoeWeights {
  TensorView token_embd;   // {n_embd, n_vocab}
  TensorView output_norm;  // {n_embd}
  TensorView output;       // {n_embd, n_vocab}; token_embd when the file has no output.weight
  bool output_tied = false;
  std::vector<LayerWeights> layers;  // n_layer trunk layers
  std::optional<MtpWeights> mtp;     // present when the config has n_nextn == 1
};

// Binds every tensor of the table for `config` (with the MTP block when config.n_nextn == 1). Fails on a
// missing required tensor, a shape that differs from the table, or a type that is not usable for its kind,
// naming the tensor with its expected and actual shape or type.
Expected<Qwen35MoeWeights> bind_qwen35moe_weights(const GgufFile& file, const Qwen35MoeConfig& config);

// The MTP block blk.{block} of `file` (a head-only file from `mtp extract-head`, or a full model), bound
// with the shapes `trunk_config` implies; its optional tensors fall back to the trunk's.
Expected<MtpWeights> bind_mtp_block(const GgufFile& file, const Qwen35MoeConfig& trunk_config, int64_t block,
                                    const Qwen35MoeWeights& trunk);

// "[2048, 248320]": ne up to the highest dim that is not 1 (what `mtp inspect` prints).
std::string shape_string(const std::array<int64_t, 4>& ne);

}  // namespace mtp
