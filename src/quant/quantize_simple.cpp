// Q8_0, Q4_0 and MXFP4 reference quantizers (docs/formats.md 3.2, 3.3, 3.14) and the plain float conversions
// (3.1).
#include <cmath>
#include <cstring>

#include "quant/fp16.h"
#include "quant/kernels.h"
#include "scale_search.h"

namespace mtp {

using quant_detail::arg_max_abs;
using quant_detail::symmetric_scale_search;
using quant_detail::truncate_to_int8;

void quantize_row_q8_0(const float* src, BlockQ8_0* dst, int64_t n) {
  const int64_t n_blocks = n / kQK8_0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * kQK8_0;
    float amax = 0;
    for (int j = 0; j < kQK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    // The codes use the fp32 scale, not the rounded fp16 one, and round halves away from zero (roundf).
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    dst[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK8_0; ++j) dst[b].qs[j] = quant_detail::round_away_to_int8(x[j] * id);
  }
}

namespace {

// No imatrix: d = max / -8, so the largest-magnitude element lands on level 0 (value -8d); level 16 is
// clipped.
void quantize_block_q4_0_plain(const float* x, BlockQ4_0* y) {
  const quant_detail::MaxAbs m = arg_max_abs(x, kQK4_0);
  const float d = m.max / -8;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  y->d = fp32_to_fp16(d);
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    // ggml converts x*id + 8.5 to int8 by truncation; the result is >= 0 for any finite block.
    const int8_t lo = truncate_to_int8(x[j] * id + 8.5f);
    const int8_t hi = truncate_to_int8(x[j + kQK4_0 / 2] * id + 8.5f);
    const uint8_t q_lo = static_cast<uint8_t>(lo < 15 ? lo : 15);
    const uint8_t q_hi = static_cast<uint8_t>(hi < 15 ? hi : 15);
    y->qs[j] = static_cast<uint8_t>(q_lo | (q_hi << 4));
  }
}

}  // namespace

void quantize_row_q4_0(const float* src, BlockQ4_0* dst, int64_t n, const float* imatrix) {
  const int64_t n_blocks = n / kQK4_0;
  if (imatrix == nullptr) {
    for (int64_t b = 0; b < n_blocks; ++b) quantize_block_q4_0_plain(src + b * kQK4_0, dst + b);
    return;
  }
  // imatrix: weights qw * sqrt(sigma2 + x^2) with sigma2 the mean square of the whole row, then SSS (nmax 8).
  float sum_x2 = 0;
  for (int64_t j = 0; j < n; ++j) sum_x2 += src[j] * src[j];
  const float sigma2 = sum_x2 / static_cast<float>(n);
  float weights[kQK4_0];
  int8_t levels[kQK4_0];
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * kQK4_0;
    const float* qw = imatrix + b * kQK4_0;
    for (int j = 0; j < kQK4_0; ++j) weights[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
    const float d = symmetric_scale_search(kQK4_0, 8, x, levels, weights);
    dst[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      dst[b].qs[j] = static_cast<uint8_t>(levels[j] | (levels[j + kQK4_0 / 2] << 4));
    }
  }
}

namespace {

// The level whose value (kMxfp4Values[i] * d) is nearest to x; the first of equally near ones.
uint8_t nearest_mxfp4_level(float x, float d) {
  uint8_t best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x);
  for (uint8_t i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - x);
    if (err < best_err) best = i, best_err = err;
  }
  return best;
}

}  // namespace

void quantize_row_mxfp4(const float* src, BlockMXFP4* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQKMxfp4; ++b) {
    const float* x = src + b * kQKMxfp4;
    float amax = 0;
    for (int j = 0; j < kQKMxfp4; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    // The exponent puts amax in [4, 8) times 2^(e - 127), the top binade of E2M1 (4, 6). ggml converts the
    // float to uint8_t; through int the conversion is defined for blocks below 2^-125 too, with the bits
    // x86 gives ggml's.
    const uint8_t e =
        amax > 0 ? static_cast<uint8_t>(static_cast<int>(std::floor(std::log2(amax)) - 2 + 127)) : uint8_t{0};
    const float d = mxfp4_scale(e);
    dst[b].e = e;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      dst[b].qs[j] = static_cast<uint8_t>(nearest_mxfp4_level(x[j], d) |
                                          (nearest_mxfp4_level(x[j + kQKMxfp4 / 2], d) << 4));
    }
  }
}

void convert_row_f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void convert_row_f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

}  // namespace mtp
