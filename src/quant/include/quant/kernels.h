// Per-type row kernels: the reference quantizers (same bytes as ggml's ggml_quantize_chunk, i.e. what
// llama-quantize writes) and the dequantizers. These trust their arguments; quantize.h is the checked entry
// point (finite input, block multiples, output validation) that callers should normally use.
//
// Preconditions for every function here: `n` is a multiple of the type's block size, `src` has n finite
// values, `dst` has room for n / block_size blocks (or n floats). `imatrix`, where accepted, is nullptr or n
// per-column importance weights for this row's columns (docs/formats.md 3.11).
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace mtp {

// Block size 32 (quantize_simple.cpp). Q8_0 has no imatrix variant: ggml ignores it.
void quantize_row_q8_0(const float* src, BlockQ8_0* dst, int64_t n);
// With an imatrix the scale search uses weights qw * sqrt(sigma2 + x^2), sigma2 taken over the whole row, so
// a Q4_0 row must be quantized in one call.
void quantize_row_q4_0(const float* src, BlockQ4_0* dst, int64_t n, const float* imatrix);

// Q4_1, Q5_0, Q5_1 (quantize_simple.cpp): likewise one call per row with an imatrix.
void quantize_row_q4_1(const float* src, BlockQ4_1* dst, int64_t n, const float* imatrix);
void quantize_row_q5_0(const float* src, BlockQ5_0* dst, int64_t n, const float* imatrix);
void quantize_row_q5_1(const float* src, BlockQ5_1* dst, int64_t n, const float* imatrix);

// MXFP4 (quantize_simple.cpp): ggml's quantize_row_mxfp4_ref, which has no imatrix variant.
void quantize_row_mxfp4(const float* src, BlockMXFP4* dst, int64_t n);

// IQ4 family (quantize_iq4.cpp). IQ4_NL is ggml's quantize_iq4_nl (7 tries), not quantize_row_iq4_nl_ref.
void quantize_row_iq4_nl(const float* src, BlockIQ4_NL* dst, int64_t n, const float* imatrix);
void quantize_row_iq4_xs(const float* src, BlockIQ4_XS* dst, int64_t n, const float* imatrix);

// K-quants, super-block 256 (quantize_k.cpp; Q2_K and Q3_K in quantize_q23k.cpp).
void quantize_row_q2_K(const float* src, BlockQ2_K* dst, int64_t n, const float* imatrix);
void quantize_row_q3_K(const float* src, BlockQ3_K* dst, int64_t n, const float* imatrix);
void quantize_row_q4_K(const float* src, BlockQ4_K* dst, int64_t n, const float* imatrix);
void quantize_row_q5_K(const float* src, BlockQ5_K* dst, int64_t n, const float* imatrix);
void quantize_row_q6_K(const float* src, BlockQ6_K* dst, int64_t n, const float* imatrix);
// Activation format. Unlike ggml, an all-zero super-block also gets zeroed bsums (ggml leaves them
// untouched).
void quantize_row_q8_K(const float* src, BlockQ8_K* dst, int64_t n);

// Plain float formats (block size 1).
void convert_row_f32_to_f16(const float* src, uint16_t* dst, int64_t n);
void convert_row_f32_to_bf16(const float* src, uint16_t* dst, int64_t n);

// Dequantizers (dequantize.cpp): exact float formulas of docs/formats.md section 3.
void dequantize_row_q8_0(const BlockQ8_0* src, float* dst, int64_t n);
void dequantize_row_q4_0(const BlockQ4_0* src, float* dst, int64_t n);
void dequantize_row_q4_1(const BlockQ4_1* src, float* dst, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* src, float* dst, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* src, float* dst, int64_t n);
void dequantize_row_iq4_nl(const BlockIQ4_NL* src, float* dst, int64_t n);
void dequantize_row_mxfp4(const BlockMXFP4* src, float* dst, int64_t n);
void dequantize_row_iq4_xs(const BlockIQ4_XS* src, float* dst, int64_t n);
void dequantize_row_q2_K(const BlockQ2_K* src, float* dst, int64_t n);
void dequantize_row_q3_K(const BlockQ3_K* src, float* dst, int64_t n);
void dequantize_row_q4_K(const BlockQ4_K* src, float* dst, int64_t n);
void dequantize_row_q5_K(const BlockQ5_K* src, float* dst, int64_t n);
void dequantize_row_q6_K(const BlockQ6_K* src, float* dst, int64_t n);
void dequantize_row_q8_K(const BlockQ8_K* src, float* dst, int64_t n);
void convert_row_f16_to_f32(const uint16_t* src, float* dst, int64_t n);
void convert_row_bf16_to_f32(const uint16_t* src, float* dst, int64_t n);

}  // namespace mtp
