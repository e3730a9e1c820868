// Arm kernels (the `neon` level: AArch64 NEON with the dot-product extension, ARMv8.2-A and later: Graviton
// 2-4, Ampere Altra, Neoverse, Cortex-A76 and later, Apple M1 and later) for the quantized types of the model
// files: IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights against Q8_K activations, the 32-element block types
// (Q8_0, Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1, MXFP4) against Q8_0 ones, and the float types (F32, F16, BF16)
// against f32 activations.
//
// Canonical order of one (weight row, activation row) pair, that of the AVX2 level (matmul_avx2_iq4xs.cpp,
// matmul_avx2_q8_0.cpp, matmul_avx2_q45k.cpp, matmul_avx2_q6k.cpp), so an Arm machine and an x86 one at
// `avx2` give the same bits. Per super-block (block for Q8_0) sb, in order from 0, with exact int32 sums:
//   IQ4_XS: isum(sb) = sum over sub-blocks j of (ls_j - 32) * (sum of 32 q * w);
//           acc = fma(float(isum(sb)), d_w(sb) * d_x(sb), acc)
//   Q8_0 and the other 32-element types: isum_b = the 32 products of block b's levels;
//           acc = fma(float(isum_b), d_w(b) * d_x(b), acc), then for Q4_1 and Q5_1
//           acc = fma(xsum_b, m_w(b) * d_x(b), acc) with xsum_b the block's activation sum
//   Q6_K, Q3_K: isum(sb) = sum over the 16 sub-blocks i of sc_i * (sum of 16 (u - offset) * x); as IQ4_XS
//   Q2_K:   isum as Q6_K's with the unsigned two-bit values, msum(sb) = sum over i of m_i * (sum of 16 x); as
//           Q4_K below
//   Q4_K, Q5_K: isum(sb) = sum over j of sc_j * (sum of 32 q * x), msum(sb) = sum over j of m_j * (sum of
//           32 x); acc = fma(float(isum), d * d_x, acc), accm = fma(float(msum), dmin * d_x, accm);
//           out = acc - accm
// sdot (vdotq_s32) sums 4 products of signed bytes into each int32 lane, so the sums need no sign trick and
// no widening; each activation row keeps its own lanes, and the rows' totals meet in one float register
// whose lane r is row r's fma chain, the same instructions whatever the number of rows (batch invariance).
#include <cstdint>
#include <cstring>

#include "matmul_internal.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

#if MTP_HAVE_ARM_DOTPROD
#include <arm_neon.h>
#endif

namespace mtp::kernels::detail {

#if MTP_HAVE_ARM_DOTPROD
namespace {

#define TD MTP_TARGET_DOTPROD

constexpr int kRowsPerCall = 4;  // the float register of row sums has 4 lanes

// Lane r of the result is the sum of the 4 lanes of s[r] (exact: the integers fit), r < NR; other lanes 0.
template <int NR>
TD inline int32x4_t row_totals(const int32x4_t* s) {
  const int32x4_t z = vdupq_n_s32(0);
  const int32x4_t a = vpaddq_s32(s[0], NR > 1 ? s[1] : z);
  const int32x4_t b = vpaddq_s32(NR > 2 ? s[2] : z, NR > 3 ? s[3] : z);
  return vpaddq_s32(a, b);
}

// acc[r] = fma(float(isum[r]), dw * d_x[r], acc[r]) in lane r.
TD inline float32x4_t add_scaled(float32x4_t acc, int32x4_t isum, float dw, const float (&dx)[kRowsPerCall]) {
  const float32x4_t c = vmulq_n_f32(vld1q_f32(dx), dw);
  return vfmaq_f32(acc, vcvtq_f32_s32(isum), c);
}

template <int NR>
TD inline void store_rows(float32x4_t acc, float* out) {
  float v[kRowsPerCall];
  vst1q_f32(v, acc);
  for (int r = 0; r < NR; ++r) out[r] = v[r];
}

// ---- IQ4_XS ----

template <int NR>
struct Iq4xsRow {
  TD static void run(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
    const int8x16_t table = vld1q_s8(kIq4nlValues);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t sb = 0; sb < l.nb; ++sb) {
      const BlockIQ4_XS* blk = reinterpret_cast<const BlockIQ4_XS*>(w + sb * sizeof(BlockIQ4_XS));
      int32x4_t isum[kRowsPerCall];
      for (int r = 0; r < NR; ++r) isum[r] = vdupq_n_s32(0);
      for (int j = 0; j < 8; ++j) {
        const int ls =
            ((blk->scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((blk->scales_h >> (2 * j)) & 3) << 4);
        // Bytes 0-15 of the sub-block: low nibbles are elements 0-15, high nibbles 16-31.
        const uint8x16_t q = vld1q_u8(blk->qs + 16 * j);
        const int8x16_t wlo = vqtbl1q_s8(table, vandq_u8(q, m4));
        const int8x16_t whi = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
        for (int r = 0; r < NR; ++r) {
          const int8_t* xq = reinterpret_cast<const int8_t*>(x[r]) + 256 * sb + 32 * j;
          const int32x4_t d = vdotq_s32(vdotq_s32(vdupq_n_s32(0), wlo, vld1q_s8(xq)), whi, vld1q_s8(xq + 16));
          isum[r] = vmlaq_n_s32(isum[r], d, ls - 32);
        }
      }
      float dx[kRowsPerCall] = {};
      for (int r = 0; r < NR; ++r) dx[r] = act_d(x[r], l)[sb];
      acc = add_scaled(acc, row_totals<NR>(isum), fp16_to_fp32(blk->d), dx);
    }
    store_rows<NR>(acc, out);
  }
};

// ---- the 32-element block types ----
//
// A decoder gives a block's bytes (kBytes), its levels as two int8x16 (elements 0-15 and 16-31), its scale,
// and for the formats with a min (kMin) the min.

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

struct DecQ8_0 {
  static constexpr int64_t kBytes = sizeof(BlockQ8_0);
  static constexpr bool kMin = false;
  TD static void levels(const uint8_t* blk, int8x16_t* v) {
    v[0] = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 2));
    v[1] = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 18));
  }
  static float d(const uint8_t* blk) { return fp16_to_fp32(load_u16(blk)); }
};

constexpr int8_t kQ4_0Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
constexpr int8_t kU4Values[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// 16 bytes of nibble pairs at qs through a table: the low nibbles are elements 0-15, the high ones 16-31.
TD inline void nibble_levels(const uint8_t* qs, const int8_t* values, int8x16_t* v) {
  const int8x16_t table = vld1q_s8(values);
  const uint8x16_t q = vld1q_u8(qs);
  v[0] = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0F)));
  v[1] = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
}

// Q4_0, IQ4_NL (fp16 d at 0, qs at 2), Q4_1 (d, m, qs at 4), MXFP4 (an E8M0 exponent, qs at 1).
template <const int8_t* kValues, GgmlType kType>
struct DecNibbles {
  static constexpr int64_t kBytes = kType == GgmlType::Q4_1 ? 20 : kType == GgmlType::MXFP4 ? 17 : 18;
  static constexpr bool kMin = kType == GgmlType::Q4_1;
  TD static void levels(const uint8_t* blk, int8x16_t* v) {
    nibble_levels(blk + (kType == GgmlType::Q4_1 ? 4 : kType == GgmlType::MXFP4 ? 1 : 2), kValues, v);
  }
  static float d(const uint8_t* blk) {
    return kType == GgmlType::MXFP4 ? mxfp4_scale(blk[0]) : fp16_to_fp32(load_u16(blk));
  }
  static float m(const uint8_t* blk) { return fp16_to_fp32(load_u16(blk + 2)); }
};

// Q5_0 (d, qh at 2, qs at 6; levels q - 16) and Q5_1 (d, m, qh at 4, qs at 8; levels q): the nibbles plus
// 0x10 where bit j of the u32 qh is set (byte j / 8 of qh tested against bit j % 8).
template <bool kHasMin>
struct DecQ5 {
  static constexpr int64_t kBytes = kHasMin ? 24 : 22;
  static constexpr bool kMin = kHasMin;
  TD static void levels(const uint8_t* blk, int8x16_t* v) {
    const uint8_t* qh = blk + (kHasMin ? 4 : 2);
    nibble_levels(qh + 4, kU4Values, v);
    const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t bytes = vcombine_u8(vdup_n_u8(qh[2 * h]), vdup_n_u8(qh[2 * h + 1]));
      const uint8x16_t fifth = vandq_u8(vtstq_u8(bytes, bit), vdupq_n_u8(0x10));
      v[h] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(v[h]), fifth)),
                      vdupq_n_s8(kHasMin ? 0 : 16));
    }
  }
  static float d(const uint8_t* blk) { return fp16_to_fp32(load_u16(blk)); }
  static float m(const uint8_t* blk) { return fp16_to_fp32(load_u16(blk + 2)); }
};

template <class Dec>
struct B32 {
  template <int NR>
  struct Row {
    TD static void run(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
      float32x4_t acc = vdupq_n_f32(0.0f);
      for (int64_t b = 0; b < l.nb; ++b) {
        const uint8_t* blk = w + b * Dec::kBytes;
        int8x16_t v[2];
        Dec::levels(blk, v);
        int32x4_t s[kRowsPerCall];
        float dx[kRowsPerCall] = {}, xsum[kRowsPerCall] = {};
        for (int r = 0; r < NR; ++r) {
          const int8_t* xq = reinterpret_cast<const int8_t*>(x[r]) + 32 * b;
          s[r] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), v[0], vld1q_s8(xq)), v[1], vld1q_s8(xq + 16));
          dx[r] = act_d(x[r], l)[b];
          xsum[r] = act_xsum(x[r], l)[b];
        }
        acc = add_scaled(acc, row_totals<NR>(s), Dec::d(blk), dx);
        if constexpr (Dec::kMin) {
          acc = vfmaq_f32(acc, vld1q_f32(xsum), vmulq_n_f32(vld1q_f32(dx), Dec::m(blk)));
        }
      }
      store_rows<NR>(acc, out);
    }
  };
};

// ---- Q6_K ----

// The 128 six-bit values of half h of a Q6_K super-block, minus 32, as 8 sub-blocks of 16 (sub-block 8h + i).
TD inline void q6k_half(const BlockQ6_K& b, int h, int8x16_t (&v)[8]) {
  const uint8_t* ql = b.ql + 64 * h;
  const uint8_t* qh = b.qh + 32 * h;
  const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(0x03);
  const uint8x16_t l[4] = {vld1q_u8(ql), vld1q_u8(ql + 16), vld1q_u8(ql + 32), vld1q_u8(ql + 48)};
  const uint8x16_t hb[2] = {vld1q_u8(qh), vld1q_u8(qh + 16)};
  for (int i = 0; i < 8; ++i) {
    // Sub-blocks 0-3: low nibbles of ql bytes 0-63; 4-7: their high nibbles; qh bit pairs 0, 2, 4, 6.
    const uint8x16_t lo = i < 4 ? vandq_u8(l[i], m4) : vshrq_n_u8(l[i - 4], 4);
    const int shift = 2 * (i / 2);
    const uint8x16_t hi = vandq_u8(vshlq_u8(hb[i % 2], vdupq_n_s8(static_cast<int8_t>(-shift))), m3);
    v[i] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32));
  }
}

struct Q6kDec {
  static constexpr bool kMin = false;
  TD static void half(const uint8_t* blk, int h, int8x16_t (&v)[8]) {
    q6k_half(*reinterpret_cast<const BlockQ6_K*>(blk), h, v);
  }
  static int scale(const uint8_t* blk, int s) { return reinterpret_cast<const BlockQ6_K*>(blk)->scales[s]; }
  static float d(const uint8_t* blk) { return fp16_to_fp32(reinterpret_cast<const BlockQ6_K*>(blk)->d); }
};

// The two low bits of sub-blocks 8h..8h+7 of a Q2_K / Q3_K super-block (sub-block 8h + i: bits 2 (i / 2) of
// qs bytes 32h + 16 (i % 2)..+15).
TD inline void two_bits_half(const uint8_t* qs, int h, uint8x16_t (&u)[8]) {
  const uint8x16_t q[2] = {vld1q_u8(qs + 32 * h), vld1q_u8(qs + 32 * h + 16)};
  for (int i = 0; i < 8; ++i) {
    u[i] = vandq_u8(vshlq_u8(q[i % 2], vdupq_n_s8(static_cast<int8_t>(-2 * (i / 2)))), vdupq_n_u8(3));
  }
}

// Q3_K: the low bits, the third from hmask bytes 16 (i % 2)..+15 bit 4h + i / 2, minus 4.
struct Q3kDec {
  static constexpr bool kMin = false;
  TD static void half(const uint8_t* blk, int h, int8x16_t (&v)[8]) {
    const BlockQ3_K& b = *reinterpret_cast<const BlockQ3_K*>(blk);
    uint8x16_t u[8];
    two_bits_half(b.qs, h, u);
    const uint8x16_t hm[2] = {vld1q_u8(b.hmask), vld1q_u8(b.hmask + 16)};
    for (int i = 0; i < 8; ++i) {
      const uint8x16_t bit =
          vandq_u8(vshlq_u8(hm[i % 2], vdupq_n_s8(static_cast<int8_t>(-(4 * h + i / 2)))), vdupq_n_u8(1));
      v[i] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(u[i], vshlq_n_u8(bit, 2))), vdupq_n_s8(4));
    }
  }
  static int scale(const uint8_t* blk, int s) {
    return unpack_q3_k_scale(s, reinterpret_cast<const BlockQ3_K*>(blk)->scales) - 32;
  }
  static float d(const uint8_t* blk) { return fp16_to_fp32(reinterpret_cast<const BlockQ3_K*>(blk)->d); }
};

// Q2_K: the two bits as they are, under 4-bit scales, with 4-bit mins.
struct Q2kDec {
  static constexpr bool kMin = true;
  TD static void half(const uint8_t* blk, int h, int8x16_t (&v)[8]) {
    uint8x16_t u[8];
    two_bits_half(reinterpret_cast<const BlockQ2_K*>(blk)->qs, h, u);
    for (int i = 0; i < 8; ++i) v[i] = vreinterpretq_s8_u8(u[i]);
  }
  static int scale(const uint8_t* blk, int s) {
    return reinterpret_cast<const BlockQ2_K*>(blk)->scales[s] & 15;
  }
  static int min(const uint8_t* blk, int s) {
    return reinterpret_cast<const BlockQ2_K*>(blk)->scales[s] >> 4;
  }
  static float d(const uint8_t* blk) { return fp16_to_fp32(reinterpret_cast<const BlockQ2_K*>(blk)->d); }
  static float dmin(const uint8_t* blk) {
    return fp16_to_fp32(reinterpret_cast<const BlockQ2_K*>(blk)->dmin);
  }
};

// 16 sub-blocks of 16 under scales (avx2_k16_row.h's order: the signed levels' sums are that file's isum, as
// exact integers); with mins msum = sum_s m_s * bsum_s, accm = fma(float(msum), dmin * d_x, accm), out = acc
// - accm.
template <class Dec, size_t kBlockBytes>
struct K16 {
  template <int NR>
  struct Row {
    TD static void run(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
      float32x4_t acc = vdupq_n_f32(0.0f), accm = vdupq_n_f32(0.0f);
      for (int64_t sb = 0; sb < l.nb; ++sb) {
        const uint8_t* blk = w + sb * kBlockBytes;
        int32x4_t isum[kRowsPerCall];
        int32_t msum[kRowsPerCall] = {};
        for (int r = 0; r < NR; ++r) isum[r] = vdupq_n_s32(0);
        for (int h = 0; h < 2; ++h) {
          int8x16_t v[8];
          Dec::half(blk, h, v);
          for (int i = 0; i < 8; ++i) {
            const int s = 8 * h + i;
            for (int r = 0; r < NR; ++r) {
              const int8_t* xq = reinterpret_cast<const int8_t*>(x[r]) + 256 * sb + 16 * s;
              isum[r] =
                  vmlaq_n_s32(isum[r], vdotq_s32(vdupq_n_s32(0), v[i], vld1q_s8(xq)), Dec::scale(blk, s));
              if constexpr (Dec::kMin) msum[r] += Dec::min(blk, s) * act_bsums(x[r], l)[16 * sb + s];
            }
          }
        }
        float dx[kRowsPerCall] = {};
        for (int r = 0; r < NR; ++r) dx[r] = act_d(x[r], l)[sb];
        acc = add_scaled(acc, row_totals<NR>(isum), Dec::d(blk), dx);
        if constexpr (Dec::kMin) accm = add_scaled(accm, vld1q_s32(msum), Dec::dmin(blk), dx);
      }
      store_rows<NR>(Dec::kMin ? vsubq_f32(acc, accm) : acc, out);
    }
  };
};

// ---- Q4_K and Q5_K ----

// The 32 levels (0-15, or 0-31 with Q5_K's fifth bit) of sub-block j of a super-block, as two int8x16.
template <bool kFive>
TD inline void q45k_sub_block(const uint8_t* blk, int j, int8x16_t (&v)[2]) {
  const uint8_t* qs =
      blk + (kFive ? 48 : 16) + 32 * (j / 2);  // chunk j / 2: sub-blocks j (low), j + 1 (high)
  for (int k = 0; k < 2; ++k) {
    const uint8x16_t q = vld1q_u8(qs + 16 * k);
    uint8x16_t lv = j % 2 == 0 ? vandq_u8(q, vdupq_n_u8(0x0F)) : vshrq_n_u8(q, 4);
    if (kFive) {
      const uint8x16_t qh = vld1q_u8(blk + 16 + 16 * k);
      const uint8x16_t bit = vandq_u8(vshlq_u8(qh, vdupq_n_s8(static_cast<int8_t>(-j))), vdupq_n_u8(1));
      lv = vorrq_u8(lv, vshlq_n_u8(bit, 4));
    }
    v[k] = vreinterpretq_s8_u8(lv);
  }
}

template <bool kFive, int NR>
struct Q45kRow {
  TD static void run(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
    const size_t bytes = kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
    float32x4_t acc = vdupq_n_f32(0.0f), accm = vdupq_n_f32(0.0f);
    for (int64_t sb = 0; sb < l.nb; ++sb) {
      const uint8_t* blk = w + sb * bytes;
      uint16_t d, dmin;
      std::memcpy(&d, blk, 2);
      std::memcpy(&dmin, blk + 2, 2);
      int32x4_t isum[kRowsPerCall];
      int32_t msum[kRowsPerCall] = {};
      for (int r = 0; r < NR; ++r) isum[r] = vdupq_n_s32(0);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        unpack_k_scale(j, blk + 4, &sc, &m);
        int8x16_t v[2];
        q45k_sub_block<kFive>(blk, j, v);
        for (int r = 0; r < NR; ++r) {
          const int8_t* xq = reinterpret_cast<const int8_t*>(x[r]) + 256 * sb + 32 * j;
          const int32x4_t p =
              vdotq_s32(vdotq_s32(vdupq_n_s32(0), v[0], vld1q_s8(xq)), v[1], vld1q_s8(xq + 16));
          isum[r] = vmlaq_n_s32(isum[r], p, sc);
          const int16_t* bs = act_bsums(x[r], l) + 16 * sb + 2 * j;
          msum[r] += m * (bs[0] + bs[1]);
        }
      }
      float dx[kRowsPerCall] = {};
      for (int r = 0; r < NR; ++r) dx[r] = act_d(x[r], l)[sb];
      acc = add_scaled(acc, row_totals<NR>(isum), fp16_to_fp32(d), dx);
      accm = add_scaled(accm, vld1q_s32(msum), fp16_to_fp32(dmin), dx);
    }
    store_rows<NR>(vsubq_f32(acc, accm), out);
  }
};

// ---- float weights (F32, F16, BF16) with f32 activations (zero-padded to 16) ----
//
// The avx2 level's order (matmul_avx2.cpp): 8 lanes, lane k summing elements 8c + k by fma in order of c
// (two 4-lane registers here), then ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).

enum class FKind { kF32, kF16, kBF16 };

// Weights 8c..8c+7 as floats (lo: the first 4), zeros past n.
template <FKind kKind>
TD inline void load_w8(const uint8_t* w, int64_t c, int64_t n, float32x4_t& lo, float32x4_t& hi) {
  constexpr int kSize = kKind == FKind::kF32 ? 4 : 2;
  const int64_t left = n - 8 * c;
  alignas(16) uint8_t tail[32];  // filled only for the row's last, partial chunk
  const uint8_t* p = w + 8 * c * kSize;
  if (left < 8) {
    std::memset(tail, 0, sizeof(tail));
    if (left > 0) std::memcpy(tail, p, static_cast<size_t>(left) * kSize);
    p = tail;
  }
  if constexpr (kKind == FKind::kF32) {
    lo = vld1q_f32(reinterpret_cast<const float*>(p));
    hi = vld1q_f32(reinterpret_cast<const float*>(p) + 4);
  } else if constexpr (kKind == FKind::kF16) {
    const float16x8_t h = vreinterpretq_f16_u8(vld1q_u8(p));
    lo = vcvt_f32_f16(vget_low_f16(h));
    hi = vcvt_f32_f16(vget_high_f16(h));
  } else {
    const uint16x8_t b = vreinterpretq_u16_u8(vld1q_u8(p));
    lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16));
    hi = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(b), 16));
  }
}

template <FKind kKind, int NR>
struct FloatRow {
  TD static void run(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
    float32x4_t lo[kRowsPerCall], hi[kRowsPerCall];
    for (int r = 0; r < NR; ++r) lo[r] = hi[r] = vdupq_n_f32(0.0f);
    for (int64_t c = 0; c < 2 * l.nb; ++c) {
      float32x4_t wl, wh;
      load_w8<kKind>(w, c, l.n_in, wl, wh);
      for (int r = 0; r < NR; ++r) {
        const float* xr = act_f32(x[r]) + 8 * c;
        lo[r] = vfmaq_f32(lo[r], wl, vld1q_f32(xr));
        hi[r] = vfmaq_f32(hi[r], wh, vld1q_f32(xr + 4));
      }
    }
    for (int r = 0; r < NR; ++r) {
      const float32x4_t s = vaddq_f32(lo[r], hi[r]);                      // a_k + a_{k+4}
      const float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));  // (s0 + s2), (s1 + s3)
      out[r] = vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
    }
  }
};

// One weight row against nr <= kMaxTileRows activation rows, 4 (kRowsPerCall) at a time.
template <template <int> class Row>
void rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  static_assert(kRowsPerCall == 4, "rows_by_four");
  rows_by_four(nr, [&]<int NR>(int i) { Row<NR>::run(w, x + i, l, out + i); });
}

template <int NR>
using Q4kRow = Q45kRow<false, NR>;
template <int NR>
using Q5kRow = Q45kRow<true, NR>;
template <int NR>
using F32Row = FloatRow<FKind::kF32, NR>;
template <int NR>
using F16Row = FloatRow<FKind::kF16, NR>;
template <int NR>
using Bf16Row = FloatRow<FKind::kBF16, NR>;

KernelSet make_set() {
  KernelSet s = scalar_kernels();
  s.tile_rows = kMaxTileRows;
  s.dot[static_cast<int>(GgmlType::IQ4_XS)] = rows<Iq4xsRow>;
  s.dot[static_cast<int>(GgmlType::Q8_0)] = rows<B32<DecQ8_0>::Row>;
  s.dot[static_cast<int>(GgmlType::Q4_0)] = rows<B32<DecNibbles<kQ4_0Values, GgmlType::Q4_0>>::Row>;
  s.dot[static_cast<int>(GgmlType::IQ4_NL)] = rows<B32<DecNibbles<kIq4nlValues, GgmlType::IQ4_NL>>::Row>;
  s.dot[static_cast<int>(GgmlType::Q4_1)] = rows<B32<DecNibbles<kU4Values, GgmlType::Q4_1>>::Row>;
  s.dot[static_cast<int>(GgmlType::MXFP4)] = rows<B32<DecNibbles<kMxfp4Values, GgmlType::MXFP4>>::Row>;
  s.dot[static_cast<int>(GgmlType::Q5_0)] = rows<B32<DecQ5<false>>::Row>;
  s.dot[static_cast<int>(GgmlType::Q5_1)] = rows<B32<DecQ5<true>>::Row>;
  s.dot[static_cast<int>(GgmlType::Q6_K)] = rows<K16<Q6kDec, sizeof(BlockQ6_K)>::Row>;
  s.dot[static_cast<int>(GgmlType::Q3_K)] = rows<K16<Q3kDec, sizeof(BlockQ3_K)>::Row>;
  s.dot[static_cast<int>(GgmlType::Q2_K)] = rows<K16<Q2kDec, sizeof(BlockQ2_K)>::Row>;
  s.dot[static_cast<int>(GgmlType::Q4_K)] = rows<Q4kRow>;
  s.dot[static_cast<int>(GgmlType::Q5_K)] = rows<Q5kRow>;
  s.dot[static_cast<int>(GgmlType::F32)] = rows<F32Row>;
  s.dot[static_cast<int>(GgmlType::F16)] = rows<F16Row>;
  s.dot[static_cast<int>(GgmlType::BF16)] = rows<Bf16Row>;
  return s;
}

}  // namespace

const KernelSet& neon_kernels() {
  static const KernelSet set = make_set();
  return set;
}

#else

const KernelSet& neon_kernels() {
  static const KernelSet empty;
  return empty;
}

#endif

}  // namespace mtp::kernels::detail
