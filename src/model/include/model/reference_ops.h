// The small operations of the qwen35moe reference forward pass (docs/model.md sections 0.1 and 3), as plain
// scalar loops over f32 vectors, each small enough to check by hand.
//
// Precision rule (the reference's ground truth): activations, states and weights are f32; every sum of more
// than two terms (dot products, sums of squares, softmax denominators, attention and expert mixes) is
// accumulated in double, in index order, and rounded to f32 once. Nothing depends on thread count or timing,
// so every result is deterministic bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "model/qwen35moe_weights.h"

namespace mtp::ref {

float sigmoid(float x);
float silu(float x);      // x * sigmoid(x)
float softplus(float x);  // x if x > 20, else log(1 + e^x)

// Σ a[i] b[i] in double.
double dot(const float* a, const float* b, int64_t n);

// The whole tensor as f32 (norm weights and other small vectors).
std::vector<float> to_f32(const TensorView& t);
// Row `row` of a tensor (an embedding lookup), dequantized into out[0 .. row_length).
void dequantize_row_of(const TensorView& t, int64_t row, float* out);

// What a matrix-vector product's input goes through before the dot products.
//   kExact:     the f32 values as they are (the ground truth).
//   kAsKernels: first rounded as the engine's matmul kernels round activations for that weight type (ggml's
//               vec_dot_type): quantize_row_q8_0 then dequantized for Q8_0, Q4_0, IQ4_NL and MXFP4 weights,
//               quantize_row_q8_K for the K-quants and IQ4_XS, unchanged for F32, F16 and BF16. The engine
//               then differs from the reference only by float summation order, so a comparison can be tight
//               where the activation rounding (~1% of a logit range, and MoE routing flips) would hide a
//               wrong kernel.
enum class Activations { kExact, kAsKernels };

// y[o] = Σ_i W[i, row_begin + o] · x[i] for o in [0, n_out): rows [row_begin, row_begin + n_out) of `w`, each
// dequantized and dotted with x (length w.row_length()), x first rounded as `act` says. n_out = -1 means all
// rows. Rows are spread over `pool` when given; each row is computed the same way whatever the thread, so
// results do not change.
void matvec(const TensorView& w, const float* x, float* y, int64_t row_begin = 0, int64_t n_out = -1,
            ThreadPool* pool = nullptr, Activations act = Activations::kExact);

// out = x · (mean(x²) + eps)^(-1/2) ⊙ w over n elements (out may alias x).
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);
// x ← x / max(‖x‖₂, eps) (llama.cpp's ggml_l2_norm).
void l2_norm(float* x, int64_t n, float eps);
// In-place softmax (max-subtracted).
void softmax(float* x, int64_t n);

// NeoX ("half split") RoPE on the first n_rot dims of one head of head_dim values; the rest pass through.
// For i < n_rot/2: θ = pos · base^(−2i/n_rot), (x_i, x_{i+n_rot/2}) ← rotation of that pair by θ.
void rope_neox_partial(float* head, int64_t head_dim, int64_t n_rot, int64_t pos, float base);

// attn_q's packed output (n_head blocks of [query(head_dim) | gate(head_dim)]) split into the queries and the
// gates, each n_head*head_dim, heads in order.
void split_query_gate(const float* qg, int64_t n_head, int64_t head_dim, float* q, float* gate);
// o ← o ⊙ σ(gate) element-wise (the query gate of section 3.2 step 6).
void apply_sigmoid_gate(float* o, const float* gate, int64_t n);

// One query head over n_keys cached positions: out = Σ_t softmax_t(scale · q·k_t) v_t. Key/value t of this
// KV head starts at keys[t * stride] / values[t * stride].
void attend(const float* q, const float* keys, const float* values, int64_t n_keys, int64_t stride,
            int64_t head_dim, float scale, float* out);

// One step of the causal depthwise conv (section 3.3 step 2), without the SiLU. `window` holds the previous
// d_conv-1 inputs, oldest first, window[i * channels + c]; `taps` is ssm_conv1d as f32, taps[c * d_conv + i]
// (tap d_conv-1 multiplies the current input). y[c] = Σ_i taps[c][i] · concat(window, x)[i][c]. The window
// then shifts by one and takes x.
void conv_step(float* window, const float* x, const float* taps, int64_t channels, int64_t d_conv, float* y);

// One step of the gated delta rule for one value head (section 3.3 step 6). S is d_k x d_v, S[i * d_v + v].
//   S ← exp(g) S;  r = Sᵀk;  δ = β (v − r);  S ← S + k δᵀ;  o = Sᵀq
void delta_rule_step(float* S, const float* k, const float* q, const float* v, float beta, float g,
                     int64_t d_k, int64_t d_v, float* o);

struct ExpertChoice {
  int32_t expert = 0;
  float weight = 0;
};
// Softmax over all router logits, the top k probabilities (ties: lower index first), renormalised by
// max(Σ top-k, 6.1035e-5), then multiplied by `weights_scale` when it is neither 0 nor 1 (section 3.4).
// Returned in descending probability order.
std::vector<ExpertChoice> route_top_k(const float* logits, int64_t n_expert, int64_t k, float weights_scale);

}  // namespace mtp::ref
