// Scalar reference kernels: the ground truth the SIMD kernels are tested against. Each block's integer sum
// is exact; the scaled block sums are accumulated in double and rounded to float once, so the result is
// within a float rounding of the exact dot product of the dequantized weights with the dequantized
// activations.
#include <cstring>

#include "matmul_internal.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

namespace mtp::kernels::detail {
namespace {

inline int8_t act_q(const uint8_t* row, int64_t i) {
  return static_cast<int8_t>(row[i]);
}

int32_t idot32(const int8_t* w, const uint8_t* x) {
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) s += static_cast<int32_t>(w[j]) * act_q(x, j);
  return s;
}

// Unpacks a Q4_0 / IQ4_NL / MXFP4 16-byte nibble array into 32 values through `table`.
void unpack_nibbles32(const uint8_t* qs, const int8_t* table, int8_t* out) {
  for (int j = 0; j < 16; ++j) {
    out[j] = table[qs[j] & 15];
    out[j + 16] = table[qs[j] >> 4];
  }
}

constexpr int8_t kQ4_0Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

// The block scale: fp16 for Q4_0 and IQ4_NL, an E8M0 exponent for MXFP4.
template <typename Block>
float block_scale(const Block& b) {
  return fp16_to_fp32(b.d);
}
template <>
float block_scale(const BlockMXFP4& b) {
  return mxfp4_scale(b.e);
}

template <typename Block>
float dot_nibble32(const uint8_t* w, const uint8_t* x, const ActLayout& l, const int8_t* table) {
  const Block* b = reinterpret_cast<const Block*>(w);
  const float* xd = act_d(x, l);
  double sum = 0.0;
  int8_t v[32];
  for (int64_t i = 0; i < l.nb; ++i) {
    unpack_nibbles32(b[i].qs, table, v);
    sum += static_cast<double>(block_scale(b[i])) * xd[i] * idot32(v, x + i * 32);
  }
  return static_cast<float>(sum);
}

// Q4_1, Q5_0, Q5_1: decode(block, v) gives a block's 32 levels (Q5_0's minus 16), each y = d * v (+ m for the
// formats with a min): sum over blocks of d_w * d_x * (v . x) (+ m * d_x * (the sum of x)).
template <typename Block, bool kMin, typename Decode>
float dot_block32(const uint8_t* w, const uint8_t* x, const ActLayout& l, Decode decode) {
  const Block* b = reinterpret_cast<const Block*>(w);
  const float* xd = act_d(x, l);
  double sum = 0.0;
  int8_t v[32];
  for (int64_t i = 0; i < l.nb; ++i) {
    decode(b[i], v);
    sum += static_cast<double>(fp16_to_fp32(b[i].d)) * xd[i] * idot32(v, x + i * 32);
    if constexpr (kMin) {
      int32_t xsum = 0;
      for (int j = 0; j < 32; ++j) xsum += act_q(x, i * 32 + j);
      sum += static_cast<double>(fp16_to_fp32(b[i].m)) * xd[i] * xsum;
    }
  }
  return static_cast<float>(sum);
}

template <typename Block>
void q5_levels(const Block& b, int8_t* v, int offset) {
  for (int j = 0; j < 32; ++j) v[j] = static_cast<int8_t>(q5_level(b.qs, b.qh, j) - offset);
}

float dot_q4_1(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_block32<BlockQ4_1, true>(w, x, l, [](const BlockQ4_1& b, int8_t* v) {
    for (int j = 0; j < 16; ++j) {
      v[j] = static_cast<int8_t>(b.qs[j] & 15);
      v[j + 16] = static_cast<int8_t>(b.qs[j] >> 4);
    }
  });
}
float dot_q5_0(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_block32<BlockQ5_0, false>(w, x, l, [](const BlockQ5_0& b, int8_t* v) { q5_levels(b, v, 16); });
}
float dot_q5_1(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_block32<BlockQ5_1, true>(w, x, l, [](const BlockQ5_1& b, int8_t* v) { q5_levels(b, v, 0); });
}

float dot_q8_0(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(w);
  const float* xd = act_d(x, l);
  double sum = 0.0;
  for (int64_t i = 0; i < l.nb; ++i) {
    sum += static_cast<double>(fp16_to_fp32(b[i].d)) * xd[i] * idot32(b[i].qs, x + i * 32);
  }
  return static_cast<float>(sum);
}

float dot_q4_0(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_nibble32<BlockQ4_0>(w, x, l, kQ4_0Values);
}
float dot_iq4_nl(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_nibble32<BlockIQ4_NL>(w, x, l, kIq4nlValues);
}
float dot_mxfp4(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_nibble32<BlockMXFP4>(w, x, l, kMxfp4Values);
}

// Q4_K and Q5_K: levels q in [0, 15] / [0, 31]; y = d*sc_j*q - dmin*m_j.
template <bool kFive>
float dot_q45_k(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  const float* xd = act_d(x, l);
  const int16_t* bsums = act_bsums(x, l);
  const size_t bytes = kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  double sum = 0.0;
  for (int64_t i = 0; i < l.nb; ++i) {
    const uint8_t* blk = w + i * bytes;
    uint16_t d, dmin;
    std::memcpy(&d, blk, 2);
    std::memcpy(&dmin, blk + 2, 2);
    const uint8_t* scales = blk + 4;
    const uint8_t* qh = kFive ? blk + 16 : nullptr;
    const uint8_t* qs = kFive ? blk + 48 : blk + 16;
    int8_t v[256];
    for (int c = 0; c < 4; ++c) {
      for (int j = 0; j < 32; ++j) {
        int lo = qs[32 * c + j] & 15, hi = qs[32 * c + j] >> 4;
        if (kFive) {
          lo += ((qh[j] >> (2 * c)) & 1) << 4;
          hi += ((qh[j] >> (2 * c + 1)) & 1) << 4;
        }
        v[64 * c + j] = static_cast<int8_t>(lo);
        v[64 * c + 32 + j] = static_cast<int8_t>(hi);
      }
    }
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_k_scale(j, scales, &sc, &m);
      isum += sc * idot32(v + 32 * j, x + i * 256 + 32 * j);
      msum += m * (bsums[16 * i + 2 * j] + bsums[16 * i + 2 * j + 1]);
    }
    sum += static_cast<double>(fp16_to_fp32(d)) * xd[i] * isum -
           static_cast<double>(fp16_to_fp32(dmin)) * xd[i] * msum;
  }
  return static_cast<float>(sum);
}

// Q2_K: levels q in [0, 3]; y = d*sc_j * q - dmin*m_j with 4-bit (sc_j, m_j) in scales[j].
float dot_q2_k(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  const BlockQ2_K* b = reinterpret_cast<const BlockQ2_K*>(w);
  const float* xd = act_d(x, l);
  const int16_t* bsums = act_bsums(x, l);
  double sum = 0.0;
  for (int64_t i = 0; i < l.nb; ++i) {
    int32_t isum = 0, msum = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t t = 0;
      for (int e = 16 * s; e < 16 * s + 16; ++e) t += k_two_bits(b[i].qs, e) * act_q(x, i * 256 + e);
      isum += (b[i].scales[s] & 15) * t;
      msum += (b[i].scales[s] >> 4) * bsums[16 * i + s];
    }
    sum += static_cast<double>(fp16_to_fp32(b[i].d)) * xd[i] * isum -
           static_cast<double>(fp16_to_fp32(b[i].dmin)) * xd[i] * msum;
  }
  return static_cast<float>(sum);
}

// A format with 16 sub-blocks of 16 under signed scales: decode(block, v, scales) gives a super-block's 256
// values and 16 scales; sum over super-blocks i of d_w * d_x * sum_s scales[s] * (the 16 v * x of s).
template <class Block, class Decode>
float dot_sub16(const uint8_t* w, const uint8_t* x, const ActLayout& l, Decode decode) {
  const Block* b = reinterpret_cast<const Block*>(w);
  const float* xd = act_d(x, l);
  double sum = 0.0;
  for (int64_t i = 0; i < l.nb; ++i) {
    int8_t v[256];
    int scales[16];
    decode(b[i], v, scales);
    int32_t isum = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t t = 0;
      for (int j = 0; j < 16; ++j) t += v[16 * s + j] * act_q(x, i * 256 + 16 * s + j);
      isum += scales[s] * t;
    }
    sum += static_cast<double>(fp16_to_fp32(b[i].d)) * xd[i] * isum;
  }
  return static_cast<float>(sum);
}

// Q3_K: levels q - 4 in [-4, 3] under 6-bit scales sc_j - 32 (quant/blocks.h).
float dot_q3_k(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_sub16<BlockQ3_K>(w, x, l, [](const BlockQ3_K& b, int8_t* v, int* scales) {
    for (int e = 0; e < 256; ++e) v[e] = static_cast<int8_t>(q3_k_level(b, e) - 4);
    for (int s = 0; s < 16; ++s) scales[s] = unpack_q3_k_scale(s, b.scales) - 32;
  });
}

// Q6_K: six-bit values - 32 under int8 scales.
float dot_q6_k(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_sub16<BlockQ6_K>(w, x, l, [](const BlockQ6_K& b, int8_t* v, int* scales) {
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      for (int j = 0; j < 32; ++j) {
        v[128 * h + j] = static_cast<int8_t>(((ql[j] & 15) | (((qh[j] >> 0) & 3) << 4)) - 32);
        v[128 * h + 32 + j] = static_cast<int8_t>(((ql[j + 32] & 15) | (((qh[j] >> 2) & 3) << 4)) - 32);
        v[128 * h + 64 + j] = static_cast<int8_t>(((ql[j] >> 4) | (((qh[j] >> 4) & 3) << 4)) - 32);
        v[128 * h + 96 + j] = static_cast<int8_t>(((ql[j + 32] >> 4) | (((qh[j] >> 6) & 3) << 4)) - 32);
      }
    }
    for (int s = 0; s < 16; ++s) scales[s] = b.scales[s];
  });
}

float dot_iq4_xs(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  const BlockIQ4_XS* b = reinterpret_cast<const BlockIQ4_XS*>(w);
  const float* xd = act_d(x, l);
  double sum = 0.0;
  for (int64_t i = 0; i < l.nb; ++i) {
    int32_t isum = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls =
          ((b[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((b[i].scales_h >> (2 * ib)) & 3) << 4);
      int8_t v[32];
      unpack_nibbles32(b[i].qs + 16 * ib, kIq4nlValues, v);
      isum += (ls - 32) * idot32(v, x + i * 256 + 32 * ib);
    }
    sum += static_cast<double>(fp16_to_fp32(b[i].d)) * xd[i] * isum;
  }
  return static_cast<float>(sum);
}

template <typename Load>
float dot_float(const uint8_t* w, const uint8_t* x, const ActLayout& l, Load load) {
  const float* xf = act_f32(x);
  double sum = 0.0;
  for (int64_t i = 0; i < l.n_in; ++i) sum += static_cast<double>(load(w, i)) * xf[i];
  return static_cast<float>(sum);
}

float dot_f32(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_float(w, x, l, [](const uint8_t* p, int64_t i) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  });
}
float dot_f16(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_float(w, x, l, [](const uint8_t* p, int64_t i) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return fp16_to_fp32(v);
  });
}
float dot_bf16(const uint8_t* w, const uint8_t* x, const ActLayout& l) {
  return dot_float(w, x, l, [](const uint8_t* p, int64_t i) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return bf16_to_fp32(v);
  });
}

template <float (*kDot)(const uint8_t*, const uint8_t*, const ActLayout&)>
void rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  for (int r = 0; r < nr; ++r) out[r] = kDot(w, x[r], l);
}

KernelSet make_set() {
  KernelSet s;
  s.tile_rows = 4;
  s.dot[static_cast<int>(GgmlType::F32)] = rows<dot_f32>;
  s.dot[static_cast<int>(GgmlType::F16)] = rows<dot_f16>;
  s.dot[static_cast<int>(GgmlType::BF16)] = rows<dot_bf16>;
  s.dot[static_cast<int>(GgmlType::Q8_0)] = rows<dot_q8_0>;
  s.dot[static_cast<int>(GgmlType::Q4_0)] = rows<dot_q4_0>;
  s.dot[static_cast<int>(GgmlType::Q4_1)] = rows<dot_q4_1>;
  s.dot[static_cast<int>(GgmlType::Q5_0)] = rows<dot_q5_0>;
  s.dot[static_cast<int>(GgmlType::Q5_1)] = rows<dot_q5_1>;
  s.dot[static_cast<int>(GgmlType::IQ4_NL)] = rows<dot_iq4_nl>;
  s.dot[static_cast<int>(GgmlType::MXFP4)] = rows<dot_mxfp4>;
  s.dot[static_cast<int>(GgmlType::Q2_K)] = rows<dot_q2_k>;
  s.dot[static_cast<int>(GgmlType::Q3_K)] = rows<dot_q3_k>;
  s.dot[static_cast<int>(GgmlType::Q4_K)] = rows<dot_q45_k<false>>;
  s.dot[static_cast<int>(GgmlType::Q5_K)] = rows<dot_q45_k<true>>;
  s.dot[static_cast<int>(GgmlType::Q6_K)] = rows<dot_q6_k>;
  s.dot[static_cast<int>(GgmlType::IQ4_XS)] = rows<dot_iq4_xs>;
  return s;
}

}  // namespace

const KernelSet& scalar_kernels() {
  static const KernelSet set = make_set();
  return set;
}

}  // namespace mtp::kernels::detail
