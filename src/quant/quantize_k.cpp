// K-quant reference quantizers Q4_K, Q5_K, Q6_K and the Q8_K activation format (docs/formats.md 3.4-3.6,
// 3.10). One super-block = 256 elements; Q4_K/Q5_K use 8 sub-blocks of 32 with an asymmetric (scale, min)
// pair, Q6_K uses 16 sub-blocks of 16 with a symmetric int8 scale.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/fp16.h"
#include "quant/kernels.h"
#include "scale_search.h"

namespace mtp {
namespace {

using quant_detail::asymmetric_scale_search;
using quant_detail::kGroupMaxEps;
using quant_detail::nearest_int;

constexpr int kSub = 32;  // Q4_K / Q5_K sub-block size
constexpr int kSubBlocks = kQK_K / kSub;

using quant_detail::AmsParams;

// Shared Q4_K/Q5_K scale selection for one super-block x[256]. Fills `levels` (each in [0, nmax]), the packed
// 6-bit scales and the two fp16 super-scales. Steps 1-5 of 3.4.
void quantize_k_super_block(const float* x, const float* qw, const AmsParams& plain,
                            const AmsParams& weighted, uint16_t* d_out, uint16_t* dmin_out,
                            uint8_t packed_scales[kKScaleBytes], uint8_t levels[kQK_K]) {
  float weights[kSub];
  float scales[kSubBlocks];
  float mins[kSubBlocks];
  uint8_t aux[kSub];
  uint8_t scale_codes[kSubBlocks];
  uint8_t min_codes[kSubBlocks];

  if (qw == nullptr) {
    // 1. Per sub-block weights av_x + |x| with av_x the sub-block's RMS.
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < kSubBlocks; ++j) {
      const float* xs = x + j * kSub;
      float sum_x2 = 0;
      for (int l = 0; l < kSub; ++l) sum_x2 += xs[l] * xs[l];
      const float av_x = std::sqrt(sum_x2 / kSub);
      for (int l = 0; l < kSub; ++l) weights[l] = av_x + std::fabs(xs[l]);
      scales[j] = asymmetric_scale_search(kSub, xs, weights, levels + j * kSub, &mins[j], aux, plain);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    // 2-4. Linear 6-bit codes of the scales and mins relative to their maxima.
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.0f;
    for (int j = 0; j < kSubBlocks; ++j) {
      // ggml stores the rounded value in a uint8 (modulo 256) before the min with 63.
      const uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
      const uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
      scale_codes[j] = std::min<uint8_t>(63, ls);
      min_codes[j] = std::min<uint8_t>(63, lm);
    }
    *d_out = fp32_to_fp16(max_scale / 63.f);
    *dmin_out = fp32_to_fp16(max_min / 63.f);
  } else {
    // imatrix: weights qw * sqrt(sigma2 + x^2), sigma2 = 2 * mean square of the super-block; then the scales
    // and mins themselves are fitted by the positive search, weighted by each sub-block's total weight.
    float sum_x2 = 0;
    for (int l = 0; l < kQK_K; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / kQK_K;
    float sub_weight[kSubBlocks];
    for (int j = 0; j < kSubBlocks; ++j) {
      const float* xs = x + j * kSub;
      float sw = 0;
      for (int l = 0; l < kSub; ++l) {
        weights[l] = qw[j * kSub + l] * std::sqrt(sigma2 + xs[l] * xs[l]);
        sw += weights[l];
      }
      sub_weight[j] = sw;
      scales[j] = asymmetric_scale_search(kSub, xs, weights, levels + j * kSub, &mins[j], aux, weighted);
    }
    const float d_block =
        quant_detail::positive_scale_search(kSubBlocks, 63, scales, scale_codes, sub_weight);
    const float m_block = quant_detail::positive_scale_search(kSubBlocks, 63, mins, min_codes, sub_weight);
    for (int j = 0; j < kSubBlocks; ++j) {
      scale_codes[j] = std::min<uint8_t>(63, scale_codes[j]);
      min_codes[j] = std::min<uint8_t>(63, min_codes[j]);
    }
    *d_out = fp32_to_fp16(d_block);
    *dmin_out = fp32_to_fp16(m_block);
  }
  std::memset(packed_scales, 0, kKScaleBytes);
  quant_detail::pack_k_scales(scale_codes, min_codes, packed_scales);

  // 5. Re-fit the levels to the stored (rounded) scales; a zero sub-scale keeps the search's levels.
  const float d = fp16_to_fp32(*d_out);
  const float dmin = fp16_to_fp32(*dmin_out);
  const int nmax = qw ? weighted.nmax : plain.nmax;
  for (int j = 0; j < kSubBlocks; ++j) {
    uint8_t sc, m;
    unpack_k_scale(j, packed_scales, &sc, &m);
    const float dq = d * static_cast<float>(sc);
    if (dq == 0) continue;
    const float dm = dmin * static_cast<float>(m);
    for (int l = 0; l < kSub; ++l) {
      const int level = nearest_int((x[j * kSub + l] + dm) / dq);
      levels[j * kSub + l] = static_cast<uint8_t>(std::clamp(level, 0, nmax));
    }
  }
}

}  // namespace

void quantize_row_q4_K(const float* src, BlockQ4_K* dst, int64_t n, const float* imatrix) {
  constexpr AmsParams kPlain{15, -1.0f, 0.1f, 20};
  constexpr AmsParams kWeighted{15, -0.9f, 0.05f, 36};
  uint8_t levels[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ4_K& y = dst[b];
    quantize_k_super_block(src + b * kQK_K, imatrix ? imatrix + b * kQK_K : nullptr, kPlain, kWeighted, &y.d,
                           &y.dmin, y.scales, levels);
    // 6. Chunk c of 64 elements: byte 32c + l = element 64c + l | element 64c + 32 + l << 4.
    for (int c = 0; c < kQK_K / 64; ++c) {
      for (int l = 0; l < 32; ++l) {
        y.qs[32 * c + l] = static_cast<uint8_t>(levels[64 * c + l] | (levels[64 * c + 32 + l] << 4));
      }
    }
  }
}

void quantize_row_q5_K(const float* src, BlockQ5_K* dst, int64_t n, const float* imatrix) {
  constexpr AmsParams kPlain{31, -0.5f, 0.1f, 15};
  constexpr AmsParams kWeighted{31, -0.9f, 0.05f, 36};
  uint8_t levels[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ5_K& y = dst[b];
    quantize_k_super_block(src + b * kQK_K, imatrix ? imatrix + b * kQK_K : nullptr, kPlain, kWeighted, &y.d,
                           &y.dmin, y.scales, levels);
    // Low nibbles as Q4_K; the fifth bit of element 64c + l is qh[l] bit 2c, of 64c + 32 + l bit 2c + 1.
    std::memset(y.qh, 0, sizeof(y.qh));
    for (int c = 0; c < kQK_K / 64; ++c) {
      for (int l = 0; l < 32; ++l) {
        uint8_t lo = levels[64 * c + l];
        uint8_t hi = levels[64 * c + 32 + l];
        if (lo > 15) {
          lo = static_cast<uint8_t>(lo - 16);
          y.qh[l] |= static_cast<uint8_t>(1u << (2 * c));
        }
        if (hi > 15) {
          hi = static_cast<uint8_t>(hi - 16);
          y.qh[l] |= static_cast<uint8_t>(2u << (2 * c));
        }
        y.qs[32 * c + l] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

void quantize_row_q6_K(const float* src, BlockQ6_K* dst, int64_t n, const float* imatrix) {
  constexpr int kSub6 = 16;
  constexpr int kSubBlocks6 = kQK_K / kSub6;
  int8_t levels[kQK_K];
  float scales[kSubBlocks6];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ6_K& y = dst[b];
    // 1. Symmetric search per 16 elements (levels L = l + 32); imatrix weights are used raw.
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kSubBlocks6; ++ib) {
      const float* qw = imatrix ? imatrix + b * kQK_K + ib * kSub6 : nullptr;
      scales[ib] = quant_detail::symmetric_scale_search(kSub6, 32, x + ib * kSub6, levels + ib * kSub6, qw);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    // 2. A (near-)zero super-block is all zero bytes.
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    // 3-4. int8 sub-scales; the largest one becomes -128.
    const float iscale = -128.f / max_scale;
    y.d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < kSubBlocks6; ++ib) {
      y.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    // 5. Levels against the stored scales; a zero sub-scale keeps the search's levels.
    const float d = fp16_to_fp32(y.d);
    for (int j = 0; j < kSubBlocks6; ++j) {
      const float dq = d * static_cast<float>(y.scales[j]);
      if (dq == 0) continue;
      for (int l = 0; l < kSub6; ++l) {
        const int level = nearest_int(x[j * kSub6 + l] / dq);
        levels[j * kSub6 + l] = static_cast<int8_t>(std::clamp(level, -32, 31) + 32);
      }
    }
    // 6. Halves of 128: ql bytes 64h + l and 64h + 32 + l, qh byte 32h + l, for elements 128h + {l, +32, +64,
    // +96}.
    for (int h = 0; h < 2; ++h) {
      const int8_t* L = levels + 128 * h;
      uint8_t* ql = y.ql + 64 * h;
      uint8_t* qh = y.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        const int e0 = L[l], e1 = L[l + 32], e2 = L[l + 64], e3 = L[l + 96];
        ql[l] = static_cast<uint8_t>((e0 & 0xF) | ((e2 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((e1 & 0xF) | ((e3 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((e0 >> 4) | ((e1 >> 4) << 2) | ((e2 >> 4) << 4) | ((e3 >> 4) << 6));
      }
    }
  }
}

void quantize_row_q8_K(const float* src, BlockQ8_K* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ8_K& y = dst[b];
    const quant_detail::MaxAbs m = quant_detail::arg_max_abs(x, kQK_K);
    if (m.amax == 0) {
      std::memset(&y, 0, sizeof(y));  // ggml leaves bsums untouched here; zero is the deterministic choice
      continue;
    }
    // The largest element maps to -127; the scale stays a full float.
    const float iscale = -127.f / m.max;
    for (int j = 0; j < kQK_K; ++j) y.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int k = 0; k < kQK_K / 16; ++k) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y.qs[16 * k + j];
      y.bsums[k] = static_cast<int16_t>(sum);
    }
    y.d = 1 / iscale;
  }
}

}  // namespace mtp
