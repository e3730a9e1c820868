// Arm kernels (the `neon` level: AArch64 NEON with the dot-product extension, ARMv8.2-A and later: Graviton
// 2-4, Ampere Altra, Neoverse, Cortex-A76 and later, Apple M1 and later) for the types the model files carry
// most: IQ4_XS and Q8_0 weights against Q8_K / Q8_0 activations. The other types run their scalar kernels at
// this level.
//
// Canonical order of one (weight row, activation row) pair, that of the AVX2 level (matmul_avx2_iq4xs.cpp,
// matmul_avx2_q8_0.cpp), so an Arm machine and an x86 one at `avx2` give the same bits:
//   IQ4_XS: isum(sb) = sum over sub-blocks j of (ls_j - 32) * (sum of 32 q * w), exact in int32, then
//           acc = fma(float(isum(sb)), d_w(sb) * d_x(sb), acc) for sb = 0, 1, ... in order;
//   Q8_0:   isum_b = the 32 products of block b (exact), then acc = fma(float(isum_b), d_w(b) * d_x(b), acc).
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
template <int NR>
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
TD void iq4xs_row(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  const int8x16_t table = vld1q_s8(kIq4nlValues);
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const BlockIQ4_XS* blk = reinterpret_cast<const BlockIQ4_XS*>(w + sb * sizeof(BlockIQ4_XS));
    int32x4_t isum[kRowsPerCall];
    for (int r = 0; r < NR; ++r) isum[r] = vdupq_n_s32(0);
    for (int j = 0; j < 8; ++j) {
      const int ls = ((blk->scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((blk->scales_h >> (2 * j)) & 3) << 4);
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
    acc = add_scaled<NR>(acc, row_totals<NR>(isum), fp16_to_fp32(blk->d), dx);
  }
  store_rows<NR>(acc, out);
}

// ---- Q8_0 ----

template <int NR>
TD void q8_0_row(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < l.nb; ++b) {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(w + b * sizeof(BlockQ8_0));
    const int8x16_t w0 = vld1q_s8(blk->qs), w1 = vld1q_s8(blk->qs + 16);
    int32x4_t s[kRowsPerCall];
    float dx[kRowsPerCall] = {};
    for (int r = 0; r < NR; ++r) {
      const int8_t* xq = reinterpret_cast<const int8_t*>(x[r]) + 32 * b;
      s[r] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(xq)), w1, vld1q_s8(xq + 16));
      dx[r] = act_d(x[r], l)[b];
    }
    acc = add_scaled<NR>(acc, row_totals<NR>(s), fp16_to_fp32(blk->d), dx);
  }
  store_rows<NR>(acc, out);
}

// One weight row against nr <= kMaxTileRows activation rows, kRowsPerCall at a time.
template <template <int> class Row>
void rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  for (int i = 0; i < nr; i += kRowsPerCall) {
    switch (nr - i) {
      case 1:
        Row<1>::run(w, x + i, l, out + i);
        break;
      case 2:
        Row<2>::run(w, x + i, l, out + i);
        break;
      case 3:
        Row<3>::run(w, x + i, l, out + i);
        break;
      default:
        Row<4>::run(w, x + i, l, out + i);
    }
  }
}

template <int NR>
struct Iq4xs {
  static void run(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
    iq4xs_row<NR>(w, x, l, out);
  }
};
template <int NR>
struct Q8_0 {
  static void run(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
    q8_0_row<NR>(w, x, l, out);
  }
};

KernelSet make_set() {
  KernelSet s = scalar_kernels();
  s.tile_rows = kMaxTileRows;
  s.dot[static_cast<int>(GgmlType::IQ4_XS)] = rows<Iq4xs>;
  s.dot[static_cast<int>(GgmlType::Q8_0)] = rows<Q8_0>;
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
