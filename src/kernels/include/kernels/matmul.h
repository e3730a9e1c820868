// y = W x over a batch of activation rows, with W in its GGUF block format (docs/architecture.md section 3).
//
// How the engine calls it:
//   1. Once per batch and per distinct input (e.g. the normed hidden state that feeds q/k/v, or the one that
//      feeds every expert's gate and up projections), quantize the activation rows for the weights'
//      dot-product family:  acts.prepare(act_format(w.type), x, n_rows, n_in, x_stride); One
//      PreparedActivations serves every weight type of that family (act_format) and width n_in. Keep it alive
//      and reuse it: its buffer only grows, so after warm-up there is no allocation.
//   2. y[i * y_stride + o] = sum_k W[o][k] * x_i[k]:
//        matmul(w, acts, y, y_stride, pool);                 // all rows, output rows spread over the pool
//        matmul_range(w, acts, rows, n, o_begin, o_end, y, y_stride);   // the caller splits the work
//   MoE: prepare the layer input once for all rows; for each expert e with routed rows r_0..r_{n-1},
//      MatrixView we = expert_view(gate_exps, e) and call matmul_range(we, acts, rows, n, ...), which
//      computes output row i of y from activation row rows[i], so rows grouped by expert need no copy. Work
//      items (expert, output-row range) can then be spread over the pool by the engine itself.
//
// Determinism: y[i][o] depends only on W row o and activation row rows[i]; it is bitwise the same whatever
// the other rows, the batch size, the output split or the thread count (fixed reduction order per pair).
// Different Isa levels may differ in the last bits.
//
// Precision: quantized weights are dotted with activations quantized per row as ggml does (vec_dot_type):
//   Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL  x Q8_0 (32-element blocks, fp16 scale; MXFP4 likewise, its scale an
//   E8M0 exponent; Q4_1 and Q5_1 add their min times the sum of the activations)
//   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS x Q8_K (256-element blocks, f32 scale, 16-element sums)
//   F32, F16, BF16 x F32 (no activation rounding)
// Integer block sums are exact; only the float scaling and the sum over blocks round.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "base/thread_pool.h"
#include "kernels/isa.h"
#include "quant/types.h"

namespace mtp::kernels {

// A weight matrix: n_out rows of n_in elements, row o at data + o * row_bytes (GGUF ne = {n_in, n_out}).
struct MatrixView {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t row_bytes = 0;
  bool packed = false;  // rows interleaved in tiles (kernels/pack.h); same offsets per row and per matrix

  // Rows stored back to back (row_bytes = row_size(type, n_in)).
  static MatrixView contiguous(GgmlType type, const void* data, int64_t n_in, int64_t n_out);
  // Matrix `index` of a stack of `count`-many [n_in x n_out] matrices stored back to back (an expert of a
  // 3-D tensor ne = {n_in, n_out, n_expert}).
  static MatrixView stacked(GgmlType type, const void* data, int64_t n_in, int64_t n_out, int64_t index);
  // Matrix `index` of a stack of n_out-row matrices stored back to back, this view being the whole stack's
  // first matrix (keeps `packed`).
  MatrixView stacked_at(int64_t index) const;
};

// Whether matmul handles weights of this type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS).
bool is_matmul_supported(GgmlType type);

enum class ActFormat : int { kF32 = 0, kQ8_0 = 1, kQ8_K = 2 };
// The activation format a weight type is dotted with (MTP_CHECKs that the type is supported).
ActFormat act_format(GgmlType weight_type);
// Block size the activation width must be a multiple of (1, 32 or 256).
int64_t act_block_size(ActFormat format);

namespace detail {
struct ActLayout;
}

// Activation rows quantized for one dot-product family, in a private SIMD-friendly layout (one row per
// activation, 64-byte aligned). Logically the rows are exactly quantize_row_q8_0 / quantize_row_q8_K of the
// input (dequantize_row shows the values the products see).
class PreparedActivations {
 public:
  PreparedActivations();
  ~PreparedActivations();
  PreparedActivations(PreparedActivations&&) noexcept;
  PreparedActivations& operator=(PreparedActivations&&) noexcept;

  // Quantizes n_rows rows (row r at x + r * x_stride floats, n_in finite values; n_in a multiple of
  // act_block_size(format)) with the kernels of active_isa(). Rows are spread over `pool` when given and
  // they hold enough values to pay for a dispatch.
  void prepare(ActFormat format, const float* x, int64_t n_rows, int64_t n_in, int64_t x_stride,
               ThreadPool* pool = nullptr);
  // Grows the buffer for later prepare() calls of at most this size (warm-up).
  void reserve(ActFormat format, int64_t n_rows, int64_t n_in);

  ActFormat format() const;
  Isa isa() const;
  int64_t n_rows() const;
  int64_t n_in() const;
  // Row r as the products see it, dequantized (d * q, or the f32 values).
  void dequantize_row(int64_t r, float* out) const;

  const detail::ActLayout& layout() const { return *layout_; }
  const uint8_t* row(int64_t r) const;

 private:
  std::unique_ptr<detail::ActLayout> layout_;
  uint8_t* buf_ = nullptr;
  int64_t capacity_ = 0;
  int64_t n_rows_ = 0;
};

// y[i * y_stride + o] = sum_k W[o][k] * x_i[k] for every activation row i and o in [0, w.n_out). Output rows
// are spread over `pool` (nullptr: the calling thread). Requires act_format(w.type) == x.format() and
// w.n_in == x.n_in().
void matmul(const MatrixView& w, const PreparedActivations& x, float* y, int64_t y_stride, ThreadPool* pool);

// Several products of the same activation rows in one pass over the pool: y_i = W_i x for each job (one
// synchronisation instead of one per matrix, and a thread that finishes one matrix goes on to the next).
// The same results as a matmul per job.
struct MatmulJob {
  MatrixView w;
  float* y = nullptr;
  int64_t y_stride = 0;
};
void matmul_batch(std::span<const MatmulJob> jobs, const PreparedActivations& x, ThreadPool* pool);

// A product's work for ThreadPool::threads_for: the weight bytes it streams, each activation row past the
// first adding a quarter (a 4-row verify costs about 1.7x one row).
inline int64_t product_work(int64_t weight_bytes, int64_t rows) {
  return weight_bytes + weight_bytes * (rows - 1) / 4;
}

// On the calling thread: for i in [0, n_rows) and o in [o_begin, o_end),
//   y[i * y_stride + o] = sum_k W[o][k] * x_{rows[i]}[k]
// (rows == nullptr: rows[i] = i). y points at output row 0, column 0 (o is absolute, not o - o_begin).
// A packed w (kernels/pack.h) needs o_begin and o_end on tile boundaries (multiples of kPackRows, or n_out).
void matmul_range(const MatrixView& w, const PreparedActivations& x, const int32_t* rows, int64_t n_rows,
                  int64_t o_begin, int64_t o_end, float* y, int64_t y_stride);

}  // namespace mtp::kernels
