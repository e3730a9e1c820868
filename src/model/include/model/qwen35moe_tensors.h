// The one table of qwen35moe tensors: every name, its shape (ne order, ne[0] fastest), what kind of tensor it
// is and whether it is required (docs/model.md section 2). Weight binding, `mtp synth`, `mtp graft` and
// `mtp quantize` all read this table, so the architecture's layout is stated once.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/qwen35moe_config.h"

namespace mtp {

enum class TensorKind {
  kEmbedding,  // token_embd: rows looked up by token id
  kOutput,     // LM head
  kMatrix,     // a 2-D projection
  kExperts,    // a 3-D stack of per-expert matrices
  kRouter,     // ffn_gate_inp: expert logits
  kNorm,       // an RMSNorm weight (stays F32)
  kVector,     // other 1-D parameters (ssm_a, ssm_dt.bias, shared-expert gate; stay F32)
  kConv,       // ssm_conv1d taps (stays F32)
};

struct TensorDesc {
  std::string name;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  TensorKind kind = TensorKind::kMatrix;
  bool required = true;
  int64_t layer = -1;  // block index, -1 outside the blocks
};

// Every tensor of the model in llama.cpp's canonical order: non-block tensors, then blk.0, blk.1, ... each in
// name order. With `with_mtp`, the MTP block blk.{n_layer} is included (its optional tensors marked so).
std::vector<TensorDesc> qwen35moe_tensors(const Qwen35MoeConfig& config, bool with_mtp);

// The tensors of one block: a trunk layer (attention or GDN by the interval rule) or the MTP block.
std::vector<TensorDesc> qwen35moe_block_tensors(const Qwen35MoeConfig& config, int64_t layer);

}  // namespace mtp
