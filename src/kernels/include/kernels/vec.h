// Small f32 vector kernels of the forward pass. The functions in mtp::kernels run the active_isa() version
// (isa.h); mtp::kernels::scalar holds the portable twins the SIMD versions are tested against.
//
// Accuracy: the scalar twins sum in double and use std::exp; the SIMD versions sum in float lanes (fixed
// order for a given n, so every call with the same input gives the same bits) and use a polynomial exp
// accurate to about 2 ulp. n may be any length >= 0.
#pragma once

#include <cstdint>

namespace mtp::kernels {

// out[h] = scale * dot(q[h], k, n) for h < nq: one key row against many queries (attention scores). Each
// query's sum has its own fixed order (lanes accumulated over the vectors in order, summed by a fixed tree,
// then the tail), whatever nq is, so a score does not depend on which other queries share the call.
void dot_queries(const float* k, const float* const* q, int64_t nq, int64_t n, float scale, float* out);
// out[h * out_stride + j] = scale * dot(q[h], k[j], n) for j < nk, h < nq: many keys against many queries,
// each score bitwise what dot_queries gives it (the same order per pair whatever nk, nq and the other pairs),
// with each key and query vector loaded once per register block of pairs instead of once per pair. Each
// query's scores land in its own row (attention's per-query score arrays: no copy after the call).
void dot_keys_queries(const float* const* k, int64_t nk, const float* const* q, int64_t nq, int64_t n,
                      float scale, float* out, int64_t out_stride);
float dot(const float* a, const float* b, int64_t n);
// y += a * x.
void axpy(float a, const float* x, float* y, int64_t n);
// y[e] += p[t] * v[t * v_stride + e] for t = 0 .. n_rows-1 in order, one fused multiply-add per term: the
// bits of axpy row by row, with y held in registers across the rows (attention's weighted sum of V rows).
void axpy_rows(const float* p, const float* v, int64_t v_stride, int64_t n_rows, float* y, int64_t n);
// axpy_rows(p[h], v, v_stride, n_rows, y[h], n) for every h < nq, bit for bit, with each V row read once for
// a register block of queries instead of once per query (attention heads sharing a KV head).
void axpy_rows_queries(const float* const* p, const float* v, int64_t v_stride, int64_t n_rows,
                       float* const* y, int64_t nq, int64_t n);
// out = x * (mean(x^2) + eps)^(-1/2) * w (w == nullptr: no weight). out may alias x.
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);
// In-place softmax (max-subtracted).
void softmax(float* x, int64_t n);
// out = x * sigmoid(x); out may alias x.
void silu(const float* x, float* out, int64_t n);
// out = 1 / (1 + exp(-x)); out may alias x.
void sigmoid(const float* x, float* out, int64_t n);
// out = silu(gate) * up (the SwiGLU of the feed-forward); out may alias either input.
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// The index of the first largest value (greedy sampling over a vocabulary): the i with x[i] > x[j] for all
// j < i and x[i] >= x[j] for all j > i, counting from x[0] (NaN never wins; a NaN x[0] gives 0). n >= 1.
// Exact at every level.
int64_t argmax(const float* x, int64_t n);
// The indices of the k largest of x[0..n), largest first, ties to the lower index: the first k of a stable
// sort by descending value (MoE routing). One pass, each value against the current k-th; 1 <= k <= n.
void top_k(const float* x, int64_t n, int64_t k, int32_t* out);

// One step of the gated delta rule on a d x d state S (row i at src + i * d), for one value head:
//   S' = decay * S;  r = S'^T k;  delta = beta * (v - r);  S' += k delta^T;  out = S'^T q
// into dst (may equal src: in place), and also into snapshot when it is set (a rollback copy of the state
// after this row: where 64-byte aligned, with d * 4 a multiple of 64, streamed, its old lines never read).
struct DeltaRuleRow {
  const float* src;
  float* dst;
  const float* k;
  const float* q;
  const float* v;
  float beta;
  float decay;
  float* out;
  float* snapshot = nullptr;
};
// Steps rows[0..n) in order (row t's src is usually row t-1's dst). Element-wise per column with a fixed
// order over i and fused multiply-adds throughout: every ISA level gives the same bits, and a step's bits do
// not depend on the other rows of the call.
void delta_rule(const DeltaRuleRow* rows, int64_t n, int64_t d);

// Stored rows to f32, exactly (the same bits at every level): fp16 values, and Q8_0 blocks (n a multiple of
// 32; d * q).
void f16_to_f32(const uint16_t* x, float* out, int64_t n);
void q8_0_to_f32(const void* blocks, float* out, int64_t n);

namespace scalar {
void delta_rule(const DeltaRuleRow* rows, int64_t n, int64_t d);
// Columns [c_begin, d) only (the SIMD versions' tail).
void delta_rule_columns(const DeltaRuleRow* rows, int64_t n, int64_t d, int64_t c_begin);
void f16_to_f32(const uint16_t* x, float* out, int64_t n);
void q8_0_to_f32(const void* blocks, float* out, int64_t n);
void dot_queries(const float* k, const float* const* q, int64_t nq, int64_t n, float scale, float* out);
float dot(const float* a, const float* b, int64_t n);
void axpy_rows(const float* p, const float* v, int64_t v_stride, int64_t n_rows, float* y, int64_t n);
void dot_keys_queries(const float* const* k, int64_t nk, const float* const* q, int64_t nq, int64_t n,
                      float scale, float* out, int64_t out_stride);
void axpy_rows_queries(const float* const* p, const float* v, int64_t v_stride, int64_t n_rows,
                       float* const* y, int64_t nq, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);
void softmax(float* x, int64_t n);
int64_t argmax(const float* x, int64_t n);
void silu(const float* x, float* out, int64_t n);
void sigmoid(const float* x, float* out, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
}  // namespace scalar

}  // namespace mtp::kernels
