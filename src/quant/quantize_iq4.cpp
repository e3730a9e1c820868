// IQ4_NL and IQ4_XS quantizers (docs/formats.md 3.7, 3.8): ggml's quantize_iq4_nl / quantize_iq4_xs with
// NTRY = 7, the functions llama-quantize calls with and without an imatrix.
#include <cmath>
#include <cstring>

#include "quant/fp16.h"
#include "quant/kernels.h"
#include "scale_search.h"

namespace mtp {
namespace {

using quant_detail::best_iq4_index;
using quant_detail::kGroupMaxEps;

constexpr int kIq4Tries = 7;
constexpr int kSubBlock = 32;  // both formats choose a scale per 32 elements

// Sub-block weights: x^2 without imatrix, else qw * sqrt(sigma2 + x^2).
void iq4_weights(const float* x, const float* qw, float sigma2, float* w) {
  if (qw) {
    for (int j = 0; j < kSubBlock; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
  } else {
    for (int j = 0; j < kSubBlock; ++j) w[j] = x[j] * x[j];
  }
}

// Steps 4-5 of 3.7 for one 32-element sub-block whose largest-magnitude element is `max` (nonzero): the scale
// d minimising the weighted error sum w*(x - d*T[BI(x/d)])^2 over 16 candidate inverse scales (the first
// guess and 15 tries). The levels are not kept: both callers recompute them from the final (rounded) scale.
//
// The candidates' sums do not depend on each other, so they are computed side by side (iq4_candidate_sums);
// each candidate still adds its terms in element order, as ggml does, so every sum is bit-identical. The
// comparisons then run in ggml's order.
float iq4_sub_block_scale(const float* x, const float* w, float max) {
  constexpr int kCandidates = 2 * kIq4Tries + 2;
  static_assert(kCandidates == quant_detail::kIq4Candidates);
  const float first_t = static_cast<float>(kIq4nlValues[0]);
  float inverse_scales[kCandidates];
  inverse_scales[0] = 1 / (-max / first_t);
  for (int itry = -kIq4Tries; itry <= kIq4Tries; ++itry) {
    // Negative orientation: the largest element maps near T[0] = -127.
    inverse_scales[itry + kIq4Tries + 1] = static_cast<float>(itry + kIq4nlValues[0]) / max;
  }
  float sumqx[kCandidates], sumq2[kCandidates];
  quant_detail::iq4_candidate_sums(x, w, inverse_scales, sumqx, sumq2);
  float d = sumq2[0] > 0 ? sumqx[0] / sumq2[0] : 0.0f;
  float best = d * sumqx[0];
  for (int c = 1; c < kCandidates; ++c) {
    if (sumq2[c] > 0 && sumqx[c] * sumqx[c] > best * sumq2[c]) {
      d = sumqx[c] / sumq2[c];
      best = d * sumqx[c];
    }
  }
  return d;
}

// Byte j of a 16-byte group holds the index of element j (low nibble) and of element j + 16 (high nibble).
void pack_iq4_indices(const float* x, float inverse_scale, uint8_t* qs) {
  for (int j = 0; j < kSubBlock / 2; ++j) {
    const int lo = best_iq4_index(inverse_scale * x[j]);
    const int hi = best_iq4_index(inverse_scale * x[j + kSubBlock / 2]);
    qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

}  // namespace

void quantize_row_iq4_nl(const float* src, BlockIQ4_NL* dst, int64_t n, const float* imatrix) {
  float weights[kSubBlock];
  const int64_t n_blocks = n / kQK4_NL;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * kQK4_NL;
    float sum_x2 = 0;
    for (int j = 0; j < kQK4_NL; ++j) sum_x2 += x[j] * x[j];
    const float sigma2 = sum_x2 * (2.0f / kQK4_NL);
    iq4_weights(x, imatrix ? imatrix + b * kQK4_NL : nullptr, sigma2, weights);

    const quant_detail::MaxAbs m = quant_detail::arg_max_abs(x, kQK4_NL);
    // A (near-)zero block stores d = 0 and index BI(0) = 8 everywhere (0x88 bytes).
    const float d = m.amax < kGroupMaxEps ? 0.0f : iq4_sub_block_scale(x, weights, m.max);
    dst[b].d = fp32_to_fp16(d);
    pack_iq4_indices(x, d != 0 ? 1 / d : 0.0f, dst[b].qs);  // final indices from the fp32 d
  }
}

void quantize_row_iq4_xs(const float* src, BlockIQ4_XS* dst, int64_t n, const float* imatrix) {
  constexpr int kSubBlocks = kQK_K / kSubBlock;
  float weights[kSubBlock];
  float scales[kSubBlocks];
  const int64_t n_blocks = n / kQK_K;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * kQK_K;
    BlockIQ4_XS& y = dst[b];
    // 1.
    float sum_x2 = 0;
    for (int j = 0; j < kQK_K; ++j) sum_x2 += x[j] * x[j];
    const float sigma2 = sum_x2 * (2.0f / kQK_K);

    // 2. A free scale per sub-block, and the one of largest magnitude.
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < kSubBlocks; ++ib) {
      const float* xb = x + ib * kSubBlock;
      iq4_weights(xb, imatrix ? imatrix + b * kQK_K + ib * kSubBlock : nullptr, sigma2, weights);
      const quant_detail::MaxAbs m = quant_detail::arg_max_abs(xb, kSubBlock);
      scales[ib] = m.amax < kGroupMaxEps ? 0.0f : iq4_sub_block_scale(xb, weights, m.max);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > amax_scale) {
        amax_scale = abs_scale;
        max_scale = scales[ib];
      }
    }

    // 3. Super-scale: 6-bit sub-scales in [-32, 31] times dsb; the largest sub-scale maps to -32.
    const float dsb = -max_scale / 32;
    y.d = fp32_to_fp16(dsb);
    const float id = dsb != 0 ? 1 / dsb : 0.0f;
    y.scales_h = 0;
    std::memset(y.scales_l, 0, sizeof(y.scales_l));

    // 4-5. Quantize each sub-scale, then the indices against the fp32 (not fp16) product dsb * l.
    for (int ib = 0; ib < kSubBlocks; ++ib) {
      int l = quant_detail::nearest_int(id * scales[ib]);
      l = l < -32 ? -32 : (l > 31 ? 31 : l);
      const float dl = dsb * static_cast<float>(l);
      pack_iq4_indices(x + ib * kSubBlock, dl != 0 ? 1 / dl : 0.0f, y.qs + ib * (kSubBlock / 2));
      const unsigned biased = static_cast<unsigned>(l + 32);
      if (ib % 2 == 0) {
        y.scales_l[ib / 2] = static_cast<uint8_t>(biased & 0xF);
      } else {
        y.scales_l[ib / 2] |= static_cast<uint8_t>((biased & 0xF) << 4);
      }
      y.scales_h = static_cast<uint16_t>(y.scales_h | ((biased >> 4) << (2 * ib)));
    }
  }
}

}  // namespace mtp
