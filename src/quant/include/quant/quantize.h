// Checked quantize / dequantize entry points dispatching on GgmlType. These produce the same bytes
// as ggml_quantize_chunk (what llama-quantize writes) and reject what ggml would silently turn into garbage:
// NaN/Inf input, a row length that is not a multiple of the block size, a scale that overflows fp16.
//
// Supported types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
// IQ4_XS, and Q8_K (activation format).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "base/thread_pool.h"
#include "quant/types.h"

namespace mtp {

// Whether quantize_row / dequantize_row handle `type`.
bool is_quantize_supported(GgmlType type);
// Whether the type's quantizer changes its output when given an imatrix (Q8_0, F16, BF16, F32, Q8_K ignore
// it).
bool uses_imatrix(GgmlType type);

// Quantizes one row of `n` floats into `dst` (row_size(type, n) bytes, aligned for the type's block struct).
// `imatrix`: nullptr, or `n` finite per-column importance weights (ggml's quant_weights) for this row.
// A row must be passed whole: Q4_0 with an imatrix weighs every block by the mean square of the full row.
Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n, const float* imatrix = nullptr);

// Converts one row of `n` elements of `type` back to float.
Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// ggml_validate_row_data: the byte count is a whole number of blocks, every fp16/f32 scale (d, and dmin for
// Q4_K/Q5_K) is finite, and F16/BF16/F32 data is finite. llama-quantize runs this on every quantized tensor.
Status validate_row_data(GgmlType type, const void* data, int64_t n_bytes);

// Whole tensors of n_rows x n_per_row: rows are independent, so they are spread over `pool` (nullptr = the
// calling thread alone) and the bytes do not depend on the thread count. `imatrix` has n_per_row entries,
// shared by all rows (for 3-D expert stacks call once per expert with that expert's slice). On error, the
// reported row is the first failing one and the contents of dst are unspecified.
Status quantize_tensor(ThreadPool* pool, GgmlType type, const float* src, void* dst, int64_t n_rows,
                       int64_t n_per_row, const float* imatrix = nullptr);
Status dequantize_tensor(ThreadPool* pool, GgmlType type, const void* src, float* dst, int64_t n_rows,
                         int64_t n_per_row);

}  // namespace mtp
