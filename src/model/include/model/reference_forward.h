// The reference forward pass of qwen35moe and its MTP head (docs/model.md sections 3 and 4): one token at a
// time, f32 activations, weights dequantized row by row, plain loops (precision rule in reference_ops.h).
// Every faster path is checked against this one.
//
// Per-sequence state is explicit (ReferenceState) and owned by the caller; the Model is only read, so one
// model can serve many states.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "model/model.h"
#include "model/reference_ops.h"

namespace mtp {

// The attention K/V of one full-attention block for one sequence: post-norm, post-RoPE keys and values, one
// row of n_head_kv*head_dim per cached position.
struct AttentionKv {
  std::vector<int64_t> pos;  // position of each row, increasing
  std::vector<float> k;      // rows x n_head_kv*head_dim
  std::vector<float> v;

  int64_t size() const { return static_cast<int64_t>(pos.size()); }
  // Drops every row at position >= p (stale rows of rejected drafts).
  void truncate_from(int64_t p);
};

// A Gated DeltaNet layer's recurrent state for one sequence (zeros at sequence start).
struct DeltaNetState {
  std::vector<float> conv;  // (d_conv-1) x conv_dim pre-conv inputs, oldest first: conv[i*conv_dim + c]
  std::vector<float> ssm;   // H_v x d_k x d_v: S_j[i][v] at (j*d_k + i)*d_v + v (value heads in GGUF order)
};

struct LayerState {
  AttentionKv kv;     // full-attention layers
  DeltaNetState gdn;  // GDN layers
};

struct ReferenceState {
  explicit ReferenceState(const Qwen35MoeConfig& config);
  // Back to the start of a sequence: empty caches, zero recurrent state.
  void reset();

  std::vector<LayerState> layers;  // one per trunk layer
  LayerState mtp;                  // the MTP block's own attention cache, mtp.kv (section 4.3)
  int64_t n_past = 0;              // trunk positions processed; the next forward_token must use pos n_past
  // How every matrix product of this sequence's passes treats its input (reference_ops.h): exact f32 unless
  // a test compares with the engine's kernels at their own activation precision.
  ref::Activations activations = ref::Activations::kExact;

 private:
  Qwen35MoeConfig config_;
};

struct ForwardOutput {
  std::vector<float> logits;  // n_vocab; empty when not requested
  std::vector<float> hidden;  // n_embd, the post-norm hidden the head reads (h_final, or h_mtp for the MTP)
};

// --- Blocks. Each reads a normed input `a`/`f` (n_embd) and writes its n_embd output, residual not added;
// `act` is what their matrix products do with their inputs (reference_ops.h). ---

// Gated full attention (section 3.2): the row for `pos` is written into `kv` (rows at >= pos are dropped
// first), then the query attends over every cached row.
void attention_block(const Qwen35MoeConfig& c, const ModelParams& params, const AttentionWeights& w,
                     const float* a, int64_t pos, AttentionKv& kv, float* out, ThreadPool* pool = nullptr,
                     ref::Activations act = ref::Activations::kExact);
// Gated DeltaNet (section 3.3): one recurrent step of the conv window and the delta rule.
void delta_net_block(const Qwen35MoeConfig& c, const DeltaNetWeights& w, const float* a, DeltaNetState& state,
                     float* out, ThreadPool* pool = nullptr, ref::Activations act = ref::Activations::kExact);
// Routed experts plus the sigmoid-gated shared expert (section 3.4).
void moe_ffn(const Qwen35MoeConfig& c, const ModelParams& params, const MoeWeights& w, const float* f,
             float* out, ThreadPool* pool = nullptr, ref::Activations act = ref::Activations::kExact);
// One pre-norm residual block: x += mixer(RMSNorm(x)); x += MoE(RMSNorm(x)). The mixer is attention (with
// `kv`) or GDN (with `gdn`) as the layer says.
void residual_block(const Qwen35MoeConfig& c, const ModelParams& params, const LayerWeights& w, float* x,
                    int64_t pos, LayerState& state, ThreadPool* pool = nullptr,
                    ref::Activations act = ref::Activations::kExact);

// --- Whole passes. ---

// The trunk for `token` at `pos` (== state.n_past): embedding, every layer, output_norm (-> hidden) and, when
// `want_logits`, the LM head.
ForwardOutput forward_token(const Model& model, ReferenceState& state, int32_t token, int64_t pos,
                            bool want_logits = true, ThreadPool* pool = nullptr);

// One MTP row (section 4.1): `token` is the token at position `pos` and `h_prev` the post-norm hidden that
// predicted it (the trunk's hidden of pos-1, or the previous draft step's h_mtp). Writes the MTP KV row at
// `pos` (llama.cpp's convention: the token's position), dropping MTP rows at >= pos. Returns h_mtp (after
// shared_head_norm) as `hidden` and, when `want_logits`, the draft logits for position pos+1.
ForwardOutput mtp_draft_logits(const Model& model, ReferenceState& state, std::span<const float> h_prev,
                               int32_t token, int64_t pos, bool want_logits = true,
                               ThreadPool* pool = nullptr);

// The MTP block up to h_mtp, no head (what catch-up rows need); same state effects as mtp_draft_logits.
std::vector<float> mtp_head(const Model& model, ReferenceState& state, std::span<const float> h_prev,
                            int32_t token, int64_t pos, ThreadPool* pool = nullptr);

}  // namespace mtp
