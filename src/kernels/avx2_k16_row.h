// The AVX2 row kernel shared by the K-quants whose super-block is 16 sub-blocks of 16, with unsigned values
// u: under signed scales with the format's q = u - Format::kOffset, Q6_K (u in [0, 63], offset 32) and Q3_K
// (u in [0, 7], offset 4); under unsigned scales and mins, Q2_K (u in [0, 3], y = d sc_i u - dmin m_i). One
// weight row against NR <= 4 activation rows, in the canonical order the kernel files name:
//   isum(sb) = sum_i sc_i * (sum of the 16 u * x of i) - kOffset * sum_i sc_i * (sum of the 16 x of i)
//   acc = fma(float(isum(sb)), d(sb) * d_x(sb), acc)           for sb = 0, 1, ... in order, from 0
// and with mins (kOffset 0), as Q4_K's order (matmul_avx2_q45k.cpp):
//   msum(sb) = sum_i m_i * (sum of the 16 x of i)
//   accm = fma(float(msum(sb)), dmin(sb) * d_x(sb), accm);   out = acc - accm
// The unsigned values are vpmaddubsw's unsigned operand as they are. A Format gives:
//   kOffset, kBlockBytes, kHasMins;
//   __m128i scales(block): the 16 sc_i as int8;  __m256i values(block, j): the u of elements 32j .. 32j + 31;
//   float d(block); with mins also __m128i mins(block): the 16 m_i as uint8, and float dmin(block).
#pragma once

#include <cstdint>

#include "avx2_util.h"
#include "matmul_internal.h"

#if MTP_HAVE_X86_SIMD
#include <immintrin.h>

namespace mtp::kernels::detail {

template <class Format, int NR>
MTP_TARGET_AVX2 void k16_row(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  __m128 acc[NR], accm[NR];
  for (int r = 0; r < NR; ++r) acc[r] = accm[r] = _mm_setzero_ps();
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const uint8_t* b = w + sb * Format::kBlockBytes;
    const __m256i sc16 = _mm256_cvtepi8_epi16(Format::scales(b));  // against the 16 bsums
    alignas(32) int16_t sc[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), sc16);
    __m256i isum[NR];
    for (int r = 0; r < NR; ++r) isum[r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i v = Format::values(b, j);
      // Elements 0-15 of the chunk (the low 128 bits) have scale 2j, 16-31 scale 2j + 1: int16 pairs.
      const __m256i pairs = _mm256_insertf128_si256(_mm256_castsi128_si256(_mm_set1_epi16(sc[2 * j])),
                                                    _mm_set1_epi16(sc[2 * j + 1]), 1);
      for (int r = 0; r < NR; ++r) {
        const __m256i q =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act_sq_bytes(x[r], l) + 256 * sb + 32 * j));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(v, q), pairs));
      }
    }
    const float d = Format::d(b);
    for (int r = 0; r < NR; ++r) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act_bsums(x[r], l) + 16 * sb));
      const float xd = act_d(x[r], l)[sb];
      if constexpr (Format::kHasMins) {
        const int32_t msum = hsum_epi32(_mm256_madd_epi16(bs, _mm256_cvtepu8_epi16(Format::mins(b))));
        accm[r] =
            _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), msum), _mm_set_ss(Format::dmin(b) * xd), accm[r]);
      }
      int32_t total = hsum_epi32(isum[r]);
      if constexpr (Format::kOffset != 0) total -= Format::kOffset * hsum_epi32(_mm256_madd_epi16(bs, sc16));
      acc[r] = _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), total), _mm_set_ss(d * xd), acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    out[r] = Format::kHasMins ? _mm_cvtss_f32(acc[r]) - _mm_cvtss_f32(accm[r]) : _mm_cvtss_f32(acc[r]);
  }
}

// Up to 8 activation rows, 4 at a time.
template <class Format>
void k16_rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  rows_by_four(nr, [&]<int NR>(int i) { k16_row<Format, NR>(w, x + i, l, out + i); });
}

}  // namespace mtp::kernels::detail

#endif
