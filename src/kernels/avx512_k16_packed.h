// The AVX-512 VNNI packed-tile kernel shared by the K-quants whose super-block is 16 sub-blocks of 16 (Q6_K
// and Q3_K under signed scales, Q2_K under unsigned scales and mins; kernels/pack.h has their tile layouts):
// the 16 weight rows of a tile in the lanes of each vector, any number of activation rows. It follows the
// canonical order of avx2_k16_row.h (the AVX2 kernels of these types, whose row kernels are this level's for
// the row format), so both layouts, and both levels, give the same bits. A PackedFormat gives, for the
// super-block header hdr of a tile (its bytes are kPackedSbBytes; the prefetches run kPrefetchLines lines a
// chunk, 8 chunks a super-block):
//   kHasMins; without mins kOffsetShift: log2 of the format's offset (q = u - 2^kOffsetShift);
//   __m512i scale(hdr, s): sub-block s's scales of the 16 rows as int32 lanes;
//   __m512i values(hdr, j, g): the unsigned values of elements 32 (j % 4) + 4g .. + 3 of chunk j of the
//     super-block (sub-block 2j for g < 4, 2j + 1 after) for the 16 rows, 4 bytes a row;
//   __m512 d(hdr): the super-block scales of the 16 rows;
//   with mins also __m512i min(hdr, s) (as scale) and __m512 dmin(hdr) (as d).
#pragma once

#include <cstdint>
#include <cstring>

#include "matmul_internal.h"

#if MTP_HAVE_X86_SIMD
#include <immintrin.h>

namespace mtp::kernels::detail {

// The sum of vpdpbusd of 4 lines against the activation bytes xs[0..15], 4 at a time.
MTP_TARGET_AVX512 inline __m512i k16_dot16(const __m512i* wv, const uint8_t* xs) {
  __m512i s = _mm512_setzero_si512();
  for (int g = 0; g < 4; ++g) {
    int32_t x;
    std::memcpy(&x, xs + 4 * g, 4);
    s = _mm512_dpbusd_epi32(s, wv[g], _mm512_set1_epi32(x));
  }
  return s;
}

template <class F, int NR>
MTP_TARGET_AVX512 void k16_pass512(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l,
                                   float* acc) {
  const uint8_t* xs[NR];
  for (int r = 0; r < NR; ++r) xs[r] = act_sq_bytes(x[r], l);
  const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
  alignas(64) float accm[16 * NR] = {};  // the min sums (formats with mins)
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const uint8_t* hdr = tile + sb * F::kPackedSbBytes;
    __m512i sc[16], bs[16];  // bs: what multiplies the bsums (the mins, or the scales)
    for (int s = 0; s < 16; ++s) sc[s] = F::scale(hdr, s);
    for (int s = 0; s < 16; ++s) {
      if constexpr (F::kHasMins) {
        bs[s] = F::min(hdr, s);
      } else {
        bs[s] = sc[s];
      }
    }
    __m512i isum[NR];
    for (int r = 0; r < NR; ++r) isum[r] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      prefetch_slice<F::kPrefetchLines>(hdr, j, F::kPackedSbBytes, 4 * F::kPackedSbBytes);
      __m512i wv[8];
      for (int g = 0; g < 8; ++g) wv[g] = F::values(hdr, j, g);
      for (int r = 0; r < NR; ++r) {
        const uint8_t* xq = xs[r] + 256 * sb + 32 * j;
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(k16_dot16(wv, xq), sc[2 * j]));
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(k16_dot16(wv + 4, xq + 16), sc[2 * j + 1]));
      }
    }
    const __m512 d = F::d(hdr);
    __m512 dmin = _mm512_setzero_ps();  // formats with mins
    if constexpr (F::kHasMins) dmin = F::dmin(hdr);
    for (int r = 0; r < NR; ++r) {
      // sum_s bs_s * bsum_s: int16 pairs (bs_2k, bs_2k+1) against the bsums' own pairs.
      const int16_t* bsums = act_bsums(x[r], l) + 16 * sb;
      __m512i corr = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        int32_t pair;
        std::memcpy(&pair, bsums + 2 * k, 4);
        const __m512i p =
            _mm512_or_si512(_mm512_and_si512(bs[2 * k], lo16), _mm512_slli_epi32(bs[2 * k + 1], 16));
        corr = _mm512_add_epi32(corr, _mm512_madd_epi16(p, _mm512_set1_epi32(pair)));
      }
      const __m512 xd = _mm512_set1_ps(act_d(x[r], l)[sb]);
      __m512i total = isum[r];
      if constexpr (F::kHasMins) {
        float* am = accm + 16 * r;
        _mm512_store_ps(
            am, _mm512_fmadd_ps(_mm512_cvtepi32_ps(corr), _mm512_mul_ps(dmin, xd), _mm512_load_ps(am)));
      } else {
        total = _mm512_sub_epi32(total, _mm512_slli_epi32(corr, F::kOffsetShift));
      }
      float* a = acc + 16 * r;
      _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, xd), _mm512_load_ps(a)));
    }
  }
  if constexpr (F::kHasMins) {
    for (int i = 0; i < 16 * NR; ++i) acc[i] -= accm[i];
  }
}

// The TileFn of a format: passes of up to 8 activation rows.
template <class F>
void k16_packed512(const uint8_t* tile, int64_t, int n_out, const uint8_t* const* x, int64_t nx,
                   const ActLayout& l, float* y, int64_t y_stride) {
  constexpr int kPassRows = 8;
  using PassFn = void (*)(const uint8_t*, const uint8_t* const*, const ActLayout&, float*);
  static constexpr PassFn kPass[kPassRows + 1] = {nullptr,           k16_pass512<F, 1>, k16_pass512<F, 2>,
                                                  k16_pass512<F, 3>, k16_pass512<F, 4>, k16_pass512<F, 5>,
                                                  k16_pass512<F, 6>, k16_pass512<F, 7>, k16_pass512<F, 8>};
  alignas(64) float acc[kPassRows * 16];
  for (int64_t i = 0; i < nx; i += kPassRows) {
    const int nr = static_cast<int>(nx - i < kPassRows ? nx - i : kPassRows);
    std::memset(acc, 0, sizeof(float) * 16 * nr);
    kPass[nr](tile, x + i, l, acc);
    for (int r = 0; r < nr; ++r) std::memcpy(y + (i + r) * y_stride, acc + 16 * r, sizeof(float) * n_out);
  }
}

}  // namespace mtp::kernels::detail

#endif
