// Dequantizers (docs/formats.md section 3). Each product is evaluated in ggml's order, so the
// output equals ggml's to_float bit for bit.
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "scale_search.h"

namespace mtp {

void dequantize_row_q8_0(const BlockQ8_0* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float d = fp16_to_fp32(src[b].d);
    for (int j = 0; j < kQK8_0; ++j) dst[b * kQK8_0 + j] = static_cast<float>(src[b].qs[j]) * d;
  }
}

void dequantize_row_q4_0(const BlockQ4_0* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float d = fp16_to_fp32(src[b].d);
    float* y = dst + b * kQK4_0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>((src[b].qs[j] & 0xF) - 8) * d;
      y[j + kQK4_0 / 2] = static_cast<float>((src[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1(const BlockQ4_1* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float d = fp16_to_fp32(src[b].d), m = fp16_to_fp32(src[b].m);
    float* y = dst + b * kQK4_0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>(src[b].qs[j] & 0xF) * d + m;
      y[j + kQK4_0 / 2] = static_cast<float>(src[b].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const BlockQ5_0* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float d = fp16_to_fp32(src[b].d);
    float* y = dst + b * kQK4_0;
    for (int j = 0; j < kQK4_0; ++j) y[j] = static_cast<float>(q5_level(src[b].qs, src[b].qh, j) - 16) * d;
  }
}

void dequantize_row_q5_1(const BlockQ5_1* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float d = fp16_to_fp32(src[b].d), m = fp16_to_fp32(src[b].m);
    float* y = dst + b * kQK4_0;
    for (int j = 0; j < kQK4_0; ++j) y[j] = static_cast<float>(q5_level(src[b].qs, src[b].qh, j)) * d + m;
  }
}

void dequantize_row_iq4_nl(const BlockIQ4_NL* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_NL; ++b) {
    const float d = fp16_to_fp32(src[b].d);
    float* y = dst + b * kQK4_NL;
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      y[j] = d * static_cast<float>(kIq4nlValues[src[b].qs[j] & 0xF]);
      y[j + kQK4_NL / 2] = d * static_cast<float>(kIq4nlValues[src[b].qs[j] >> 4]);
    }
  }
}

void dequantize_row_mxfp4(const BlockMXFP4* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQKMxfp4; ++b) {
    const float d = mxfp4_scale(src[b].e);
    float* y = dst + b * kQKMxfp4;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      y[j] = static_cast<float>(kMxfp4Values[src[b].qs[j] & 0xF]) * d;
      y[j + kQKMxfp4 / 2] = static_cast<float>(kMxfp4Values[src[b].qs[j] >> 4]) * d;
    }
  }
}

void dequantize_row_iq4_xs(const BlockIQ4_XS* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ4_XS& x = src[b];
    const float d = fp16_to_fp32(x.d);
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const int ls = ((x.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x.scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* qs = x.qs + 16 * ib;
      float* y = dst + b * kQK_K + 32 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

void dequantize_row_q2_K(const BlockQ2_K* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& x = src[b];
    const float d = fp16_to_fp32(x.d), dmin = fp16_to_fp32(x.dmin);
    float* y = dst + b * kQK_K;
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float dl = d * static_cast<float>(x.scales[j] & 0xF);
      const float ml = dmin * static_cast<float>(x.scales[j] >> 4);
      for (int e = 16 * j; e < 16 * j + 16; ++e) y[e] = dl * static_cast<float>(k_two_bits(x.qs, e)) - ml;
    }
  }
}

void dequantize_row_q3_K(const BlockQ3_K* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ3_K& x = src[b];
    const float d = fp16_to_fp32(x.d);
    float* y = dst + b * kQK_K;
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float dl = d * static_cast<float>(unpack_q3_k_scale(j, x.scales) - 32);
      for (int e = 16 * j; e < 16 * j + 16; ++e) y[e] = dl * static_cast<float>(q3_k_level(x, e) - 4);
    }
  }
}

void dequantize_row_q4_K(const BlockQ4_K* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& x = src[b];
    const float d = fp16_to_fp32(x.d);
    const float dmin = fp16_to_fp32(x.dmin);
    float* y = dst + b * kQK_K;
    for (int c = 0; c < kQK_K / 64; ++c) {
      // Sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles) share the 32 bytes of chunk c.
      uint8_t sc, m;
      unpack_k_scale(2 * c, x.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      unpack_k_scale(2 * c + 1, x.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      const uint8_t* q = x.qs + 32 * c;
      for (int l = 0; l < 32; ++l) y[64 * c + l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) y[64 * c + 32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q5_K(const BlockQ5_K* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ5_K& x = src[b];
    const float d = fp16_to_fp32(x.d);
    const float dmin = fp16_to_fp32(x.dmin);
    float* y = dst + b * kQK_K;
    for (int c = 0; c < kQK_K / 64; ++c) {
      uint8_t sc, m;
      unpack_k_scale(2 * c, x.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      unpack_k_scale(2 * c + 1, x.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      const uint8_t* q = x.qs + 32 * c;
      const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * c)),
                    bit_hi = static_cast<uint8_t>(2u << (2 * c));
      for (int l = 0; l < 32; ++l) {
        const int level = (q[l] & 0xF) + ((x.qh[l] & bit_lo) ? 16 : 0);
        y[64 * c + l] = d1 * static_cast<float>(level) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int level = (q[l] >> 4) + ((x.qh[l] & bit_hi) ? 16 : 0);
        y[64 * c + 32 + l] = d2 * static_cast<float>(level) - m2;
      }
    }
  }
}

void dequantize_row_q6_K(const BlockQ6_K* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& x = src[b];
    const float d = fp16_to_fp32(x.d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x.ql + 64 * h;
      const uint8_t* qh = x.qh + 32 * h;
      const int8_t* sc = x.scales + 8 * h;
      float* y = dst + b * kQK_K + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;  // sub-block of 16 within each 32-element quarter
        const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q0);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q1);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q2);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q3);
      }
    }
  }
}

void dequantize_row_q8_K(const BlockQ8_K* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    for (int j = 0; j < kQK_K; ++j) dst[b * kQK_K + j] = src[b].d * static_cast<float>(src[b].qs[j]);
  }
}

void convert_row_f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void convert_row_bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}

}  // namespace mtp
