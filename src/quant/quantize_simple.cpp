// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and MXFP4 reference quantizers (docs/formats.md 3.2, 3.3, 3.16, 3.14), in that
// order, and the plain float conversions (3.1).
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

// The mean square of a row: the sigma2 of the importance weights below.
float row_sigma2(const float* src, int64_t n) {
  float sum_x2 = 0;
  for (int64_t j = 0; j < n; ++j) sum_x2 += src[j] * src[j];
  return sum_x2 / static_cast<float>(n);
}
// Importance weights qw * sqrt(sigma2 + x^2) for one 32-element block.
void block_weights(const float* x, const float* qw, float sigma2, float* weights) {
  for (int j = 0; j < kQK4_0; ++j) weights[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

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
  const float sigma2 = row_sigma2(src, n);
  float weights[kQK4_0];
  int8_t levels[kQK4_0];
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * kQK4_0;
    block_weights(x, imatrix + b * kQK4_0, sigma2, weights);
    const float d = symmetric_scale_search(kQK4_0, 8, x, levels, weights);
    dst[b].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      dst[b].qs[j] = static_cast<uint8_t>(levels[j] | (levels[j + kQK4_0 / 2] << 4));
    }
  }
}

namespace {

// Packs 32 levels of 5 bits: nibbles as Q4_0, the fifth bits into the u32 qh (bit j for element j).
void pack_five_bits(const uint8_t* levels, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < kQK4_0 / 2; ++j) {
    const uint8_t lo = levels[j], hi = levels[j + kQK4_0 / 2];
    qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
    high |= static_cast<uint32_t>((lo >> 4) & 1) << j;
    high |= static_cast<uint32_t>((hi >> 4) & 1) << (j + kQK4_0 / 2);
  }
  std::memcpy(qh, &high, 4);
}

// Q4_1 / Q5_1 without an imatrix: d = (max - min) / nmax, min itself as m, levels (x - min) / d + 0.5
// truncated (ggml clamps Q4_1's to 15 and converts Q5_1's to uint8 as they are).
template <int kNmax>
float min_max_levels(const float* x, uint8_t* levels, float* min_out) {
  float min = x[0], max = x[0];
  for (int j = 1; j < kQK4_0; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / kNmax;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK4_0; ++j) {
    const int8_t l = truncate_to_int8((x[j] - min) * id + 0.5f);
    levels[j] = static_cast<uint8_t>(kNmax == 15 && l > 15 ? 15 : l);
  }
  *min_out = min;
  return d;
}

// Q4_1 and Q5_1 (nmax 15, 31): per block the min/max fit, or with an imatrix the asymmetric search (3.0.4,
// make_qkx3_quants: rmin -0.9, rdelta 0.05, 36 steps).
template <int kNmax, typename Block, typename Pack>
void quantize_row_min_type(const float* src, Block* dst, int64_t n, const float* imatrix, Pack pack) {
  const int64_t n_blocks = n / kQK4_0;
  const float sigma2 = imatrix != nullptr ? row_sigma2(src, n) : 0.0f;
  float weights[kQK4_0];
  uint8_t levels[kQK4_0], aux[kQK4_0];
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * kQK4_0;
    float d, m;
    if (imatrix == nullptr) {
      d = min_max_levels<kNmax>(x, levels, &m);
    } else {
      block_weights(x, imatrix + b * kQK4_0, sigma2, weights);
      float the_min;
      d = quant_detail::asymmetric_scale_search(kQK4_0, x, weights, levels, &the_min, aux,
                                                {kNmax, -0.9f, 0.05f, 36});
      m = -the_min;
    }
    dst[b].d = fp32_to_fp16(d);
    dst[b].m = fp32_to_fp16(m);
    pack(levels, dst[b]);
  }
}

}  // namespace

void quantize_row_q4_1(const float* src, BlockQ4_1* dst, int64_t n, const float* imatrix) {
  quantize_row_min_type<15>(src, dst, n, imatrix, [](const uint8_t* levels, BlockQ4_1& y) {
    for (int j = 0; j < kQK4_0 / 2; ++j) y.qs[j] = static_cast<uint8_t>(levels[j] | (levels[j + 16] << 4));
  });
}

void quantize_row_q5_1(const float* src, BlockQ5_1* dst, int64_t n, const float* imatrix) {
  quantize_row_min_type<31>(src, dst, n, imatrix,
                            [](const uint8_t* levels, BlockQ5_1& y) { pack_five_bits(levels, y.qs, y.qh); });
}

// Q5_0: d = max / -16 and levels x / d + 16.5 truncated, clamped to 31; with an imatrix the symmetric search
// (3.0.3, nmax 16).
void quantize_row_q5_0(const float* src, BlockQ5_0* dst, int64_t n, const float* imatrix) {
  const int64_t n_blocks = n / kQK4_0;
  const float sigma2 = imatrix != nullptr ? row_sigma2(src, n) : 0.0f;
  float weights[kQK4_0];
  int8_t signed_levels[kQK4_0];
  uint8_t levels[kQK4_0];
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * kQK4_0;
    float d;
    if (imatrix == nullptr) {
      const quant_detail::MaxAbs m = arg_max_abs(x, kQK4_0);
      d = m.max / -16;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      for (int j = 0; j < kQK4_0; ++j) {
        const int8_t l = truncate_to_int8(x[j] * id + 16.5f);
        levels[j] = static_cast<uint8_t>(l < 31 ? l : 31);
      }
    } else {
      block_weights(x, imatrix + b * kQK4_0, sigma2, weights);
      d = symmetric_scale_search(kQK4_0, 16, x, signed_levels, weights);
      for (int j = 0; j < kQK4_0; ++j) levels[j] = static_cast<uint8_t>(signed_levels[j]);
    }
    dst[b].d = fp32_to_fp16(d);
    pack_five_bits(levels, dst[b].qs, dst[b].qh);
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
