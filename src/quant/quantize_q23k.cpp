// Q2_K and Q3_K reference quantizers (docs/formats.md 3.15, 3.13).
//
// Q2_K: 16 sub-blocks of 16 elements, each with a 4-bit scale and a 4-bit min under two fp16 super-scales,
// levels q in [0, 3]. Each sub-block's (scale, min) comes from the asymmetric search (3.0.4): without an
// imatrix weighted by |x| with absolute errors, with one by qw * sqrt(sigma2 + x^2) and the 16 scales and
// mins then fitted by the positive search (3.0.5).
//
// Q3_K: 16 sub-blocks of 16 elements, each with a 6-bit scale
// (biased by 32) under one fp16 super-scale, and 3-bit levels l + 4, l in [-4, 3] (2 low bits in qs, the
// third in hmask). Without an imatrix each sub-block's scale comes from a search that refines the levels one
// at a time (ggml make_q3_quants); with one, from the weighted symmetric search that Q6_K uses, and the 16
// scales are themselves quantized by that search.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/fp16.h"
#include "quant/kernels.h"
#include "scale_search.h"

namespace mtp {
namespace {

using quant_detail::AmsParams;
using quant_detail::arg_max_abs;
using quant_detail::kGroupMaxEps;
using quant_detail::nearest_int;
using quant_detail::symmetric_scale_search;

constexpr int kSub3 = 16;
constexpr int kSubBlocks3 = kQK_K / kSub3;
constexpr int kNmax3 = 4;  // levels l in [-4, 3]

int clamp_level3(int l) {
  return std::max(-kNmax3, std::min(kNmax3 - 1, l));
}

// ggml make_q3_quants with do_rmse (docs/formats.md 3.13): levels from the largest element, then up to five
// sweeps that move one level at a time where that raises sum(w x l)^2 / sum(w l^2), w = x^2. Levels L = l
// + 4.
float refined_q3_scale(const float* x, int8_t* levels) {
  const quant_detail::MaxAbs m = arg_max_abs(x, kSub3);
  if (m.amax < kGroupMaxEps) {
    std::memset(levels, 0, kSub3);
    return 0.0f;
  }
  const float iscale = static_cast<float>(-kNmax3) / m.max;
  int l[kSub3];
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < kSub3; ++i) {
    l[i] = clamp_level3(nearest_int(iscale * x[i]));
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l[i]);
    suml2 += w * static_cast<float>(l[i]) * static_cast<float>(l[i]);
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int changed = 0;
    for (int i = 0; i < kSub3; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(l[i]);
      float slx = sumlx - w * x[i] * li;
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * li * li;
      const int candidate = clamp_level3(nearest_int(x[i] * sl2 / slx));
      if (candidate == l[i]) continue;
      const float lc = static_cast<float>(candidate);
      slx += w * x[i] * lc;
      sl2 += w * lc * lc;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        l[i] = candidate;
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < kSub3; ++i) levels[i] = static_cast<int8_t>(l[i] + kNmax3);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Scale code j (6 bits) into the 12 packed bytes, which start zeroed.
void pack_q3_scale(int j, int code, uint8_t* packed) {
  packed[j % 8] |= static_cast<uint8_t>((code & 0xF) << (j < 8 ? 0 : 4));
  packed[8 + j % 4] |= static_cast<uint8_t>((code >> 4) << (2 * (j / 4)));
}

// Steps 1-3 without an imatrix: per-sub-block refined scales, the largest one mapped to code 0 (-32).
void q3_scales_plain(const float* x, BlockQ3_K& y, int8_t* levels) {
  float scales[kSubBlocks3];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < kSubBlocks3; ++j) {
    scales[j] = refined_q3_scale(x + kSub3 * j, levels + kSub3 * j);
    const float a = std::fabs(scales[j]);
    if (a > amax) {
      amax = a;
      max_scale = scales[j];
    }
  }
  if (max_scale == 0) {
    y.d = fp32_to_fp16(0.0f);
    return;
  }
  const float iscale = -32.f / max_scale;
  for (int j = 0; j < kSubBlocks3; ++j) {
    pack_q3_scale(j, std::max(-32, std::min(31, nearest_int(iscale * scales[j]))) + 32, y.scales);
  }
  y.d = fp32_to_fp16(1 / iscale);
}

// Steps 1-3 with an imatrix: weights qw * sqrt(sigma2 + x^2), the weighted symmetric search per sub-block,
// then the same search over the 16 scales (weighted by their sub-blocks' weight sums) gives codes and d.
void q3_scales_weighted(const float* x, const float* qw, BlockQ3_K& y, int8_t* levels) {
  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += x[i] * x[i];
  const float sigma2 = 2 * sumx2 / kQK_K;
  float scales[kSubBlocks3], weight_sums[kSubBlocks3], weights[kSub3];
  for (int j = 0; j < kSubBlocks3; ++j) {
    float sum = 0;
    for (int i = 0; i < kSub3; ++i) {
      const float xi = x[kSub3 * j + i];
      weights[i] = qw[kSub3 * j + i] * std::sqrt(sigma2 + xi * xi);
      sum += weights[i];
    }
    weight_sums[j] = sum;
    scales[j] = symmetric_scale_search(kSub3, kNmax3, x + kSub3 * j, levels + kSub3 * j, weights);
  }
  int8_t codes[kSubBlocks3];
  const float d = symmetric_scale_search(kSubBlocks3, 32, scales, codes, weight_sums);
  for (int j = 0; j < kSubBlocks3; ++j) pack_q3_scale(j, codes[j], y.scales);
  y.d = fp32_to_fp16(d);
}

// The 2-bit levels (or Q3_K's low 2 bits) of elements 128h + {l, +32, +64, +96} into qs[32h + l].
template <typename Level>
void pack_two_bits(const Level* levels, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    const Level* L = levels + 128 * h;
    for (int l = 0; l < 32; ++l) {
      qs[32 * h + l] = static_cast<uint8_t>(L[l] | (L[l + 32] << 2) | (L[l + 64] << 4) | (L[l + 96] << 6));
    }
  }
}

constexpr int kSub2 = 16;
constexpr int kSubBlocks2 = kQK_K / kSub2;

// Codes of 16 non-negative values relative to the largest (which becomes 15), as ggml stores them: the
// rounded int's low byte, shifted by `shift` (0 for scales, 4 for mins). Returns the super-scale.
float q2_codes_by_max(const float* values, int shift, uint8_t* scales) {
  float top = 0;
  for (int j = 0; j < kSubBlocks2; ++j) top = std::max(top, values[j]);
  if (!(top > 0)) return 0.0f;
  const float iscale = 15.f / top;
  for (int j = 0; j < kSubBlocks2; ++j) {
    scales[j] |= static_cast<uint8_t>(nearest_int(iscale * values[j]) << shift);
  }
  return top / 15.f;
}

// Steps 1-3 without an imatrix: weights |x|, absolute errors, codes by the largest scale and min.
void q2_scales_plain(const float* x, BlockQ2_K& y, uint8_t* levels) {
  constexpr AmsParams kPlain{3, -0.5f, 0.1f, 15, true};
  float scales[kSubBlocks2], mins[kSubBlocks2], weights[kSub2];
  uint8_t aux[kSub2];
  for (int j = 0; j < kSubBlocks2; ++j) {
    for (int l = 0; l < kSub2; ++l) weights[l] = std::fabs(x[kSub2 * j + l]);
    scales[j] = quant_detail::asymmetric_scale_search(kSub2, x + kSub2 * j, weights, levels + kSub2 * j,
                                                      &mins[j], aux, kPlain);
  }
  y.d = fp32_to_fp16(q2_codes_by_max(scales, 0, y.scales));
  y.dmin = fp32_to_fp16(q2_codes_by_max(mins, 4, y.scales));
}

// Steps 1-3 with an imatrix: weights qw * sqrt(sigma2 + x^2) (sigma2 the block's mean square), then the
// positive search over the 16 scales and the 16 mins, each weighted by its sub-block's weight sum.
void q2_scales_weighted(const float* x, const float* qw, BlockQ2_K& y, uint8_t* levels) {
  constexpr AmsParams kWeighted{3, -0.9f, 0.05f, 36};
  float sumx2 = 0;
  for (int i = 0; i < kQK_K; ++i) sumx2 += x[i] * x[i];
  const float sigma2 = sumx2 / kQK_K;
  float scales[kSubBlocks2], mins[kSubBlocks2], weight_sums[kSubBlocks2], weights[kSub2];
  uint8_t aux[kSub2];
  for (int j = 0; j < kSubBlocks2; ++j) {
    float sum = 0;
    for (int l = 0; l < kSub2; ++l) {
      const float xl = x[kSub2 * j + l];
      weights[l] = qw[kSub2 * j + l] * std::sqrt(sigma2 + xl * xl);
      sum += weights[l];
    }
    weight_sums[j] = sum;
    scales[j] = quant_detail::asymmetric_scale_search(kSub2, x + kSub2 * j, weights, levels + kSub2 * j,
                                                      &mins[j], aux, kWeighted);
  }
  uint8_t scale_codes[kSubBlocks2], min_codes[kSubBlocks2];
  y.d = fp32_to_fp16(quant_detail::positive_scale_search(kSubBlocks2, 15, scales, scale_codes, weight_sums));
  y.dmin = fp32_to_fp16(quant_detail::positive_scale_search(kSubBlocks2, 15, mins, min_codes, weight_sums));
  for (int j = 0; j < kSubBlocks2; ++j)
    y.scales[j] = static_cast<uint8_t>(scale_codes[j] | (min_codes[j] << 4));
}

}  // namespace

void quantize_row_q2_K(const float* src, BlockQ2_K* dst, int64_t n, const float* imatrix) {
  uint8_t levels[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ2_K& y = dst[b];
    std::memset(y.scales, 0, sizeof(y.scales));
    if (imatrix != nullptr) {
      q2_scales_weighted(x, imatrix + b * kQK_K, y, levels);
    } else {
      q2_scales_plain(x, y, levels);
    }
    // 4. Levels against the stored scales and mins; a zero sub-scale keeps the search's levels.
    const float d = fp16_to_fp32(y.d), dmin = fp16_to_fp32(y.dmin);
    for (int j = 0; j < kSubBlocks2; ++j) {
      const float dq = d * static_cast<float>(y.scales[j] & 0xF);
      if (dq == 0) continue;
      const float dm = dmin * static_cast<float>(y.scales[j] >> 4);
      for (int l = 0; l < kSub2; ++l) {
        const int level = nearest_int((x[kSub2 * j + l] + dm) / dq);
        levels[kSub2 * j + l] = static_cast<uint8_t>(std::clamp(level, 0, 3));
      }
    }
    // 5.
    pack_two_bits(levels, y.qs);
  }
}

void quantize_row_q3_K(const float* src, BlockQ3_K* dst, int64_t n, const float* imatrix) {
  int8_t levels[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ3_K& y = dst[b];
    std::memset(y.scales, 0, sizeof(y.scales));
    if (imatrix != nullptr) {
      q3_scales_weighted(x, imatrix + b * kQK_K, y, levels);
    } else {
      q3_scales_plain(x, y, levels);
    }
    // 4. Levels against the stored scales; a zero sub-scale keeps the search's levels.
    const float d = fp16_to_fp32(y.d);
    for (int j = 0; j < kSubBlocks3; ++j) {
      const float dq = d * static_cast<float>(unpack_q3_k_scale(j, y.scales) - 32);
      if (dq == 0) continue;
      for (int i = 0; i < kSub3; ++i) {
        levels[kSub3 * j + i] = static_cast<int8_t>(clamp_level3(nearest_int(x[kSub3 * j + i] / dq)) + 4);
      }
    }
    // 5. The high bit of element e into hmask[e % 32] bit e / 32; the low 2 bits of elements 128h + {l, +32,
    // +64, +96} into qs[32h + l].
    std::memset(y.hmask, 0, sizeof(y.hmask));
    for (int e = 0; e < kQK_K; ++e) {
      if (levels[e] > 3) {
        y.hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
        levels[e] = static_cast<int8_t>(levels[e] - 4);
      }
    }
    pack_two_bits(levels, y.qs);
  }
}

}  // namespace mtp
