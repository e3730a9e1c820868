// Hyperparameters of the qwen35moe architecture (Qwen3.5/3.6-35B-A3B and finetunes), read from and written to
// GGUF metadata exactly as llama.cpp's converter writes them (docs/model.md section 1).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "gguf/metadata.h"

namespace mtp {

inline constexpr const char* kQwen35MoeArch = "qwen35moe";

struct Qwen35MoeConfig {
  int64_t n_vocab = 0;  // rows of token_embd (the metadata has no vocab_size key)
  int64_t context_length = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;  // trunk layers = block_count - nextn_predict_layers
  int64_t n_nextn = 0;  // MTP blocks appended after the trunk (0 or 1)

  // Gated full attention (every full_attention_interval-th layer, and the MTP block).
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // key_length == value_length
  int64_t n_rot = 0;     // rotated dims per head (partial NeoX RoPE)
  float rope_freq_base = 0;
  std::array<int32_t, 4> rope_sections{};  // M-RoPE sections; text-only positions make them irrelevant
  float rms_eps = 0;

  // MoE with a shared expert.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;

  // Gated DeltaNet.
  int64_t ssm_d_conv = 0;   // conv taps
  int64_t ssm_d_state = 0;  // d_k = d_v per head
  int64_t ssm_n_group = 0;  // H_k, key/query heads
  int64_t ssm_dt_rank = 0;  // H_v, value heads
  int64_t ssm_d_inner = 0;  // H_v * d_v

  int64_t full_attention_interval = 4;

  int64_t block_count() const { return n_layer + n_nextn; }
  bool is_full_attention(int64_t layer) const {
    return layer >= n_layer || (layer + 1) % full_attention_interval == 0;
  }
  int64_t gdn_key_dim() const { return ssm_n_group * ssm_d_state; }
  int64_t gdn_value_dim() const { return ssm_d_inner; }
  int64_t gdn_conv_dim() const { return 2 * gdn_key_dim() + gdn_value_dim(); }

  // Internal consistency (divisibility, positive sizes); names the first violated rule.
  Status validate() const;
};

// Reads the qwen35moe.* keys. `n_vocab` comes from the token_embd tensor.
Expected<Qwen35MoeConfig> read_qwen35moe_config(const Metadata& md, int64_t n_vocab);
// Writes general.architecture and every qwen35moe.* key with the types llama.cpp's converter uses.
void write_qwen35moe_config(const Qwen35MoeConfig& config, Metadata& md);

// Named shapes: "tiny" (unit tests; a few MB), "small" (256 wide; per-step overhead benchmarks), "code" (the
// bundled trained model: 128 wide, a 2048-token vocabulary) and "35b-a3b"
// (the real widths; layers chosen by the caller).
Expected<Qwen35MoeConfig> qwen35moe_shape(const std::string& name, int64_t n_layer = 0);

}  // namespace mtp
