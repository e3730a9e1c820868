// AVX-512 VNNI kernel for Q4_K and Q5_K weights over packed tiles (kernels/pack.h): the 16 weight rows of a
// tile in the lanes of each vector, any number of activation rows. It follows the canonical order of the
// AVX2 kernels (matmul_avx2_q45k.cpp: exact integer sums of scales and of mins per super-block, then one fma
// for each), whose row kernel is this level's kernel for these types in the row format, so both layouts, and
// both levels, give the same bits.
//
// The 4- or 5-bit weights are vpdpbusd's unsigned operand and the activations' signed values its other one; a
// sub-block of one row is then 8 vpdpbusd (one per line of its piece), a tile line serving all 16 rows at
// once.
#include <cstring>

#include "avx512_tile.h"
#include "matmul_internal.h"
#include "quant/blocks.h"

#if MTP_HAVE_X86_SIMD
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace mtp::kernels::detail {

#if MTP_HAVE_X86_SIMD
namespace {

#define T512 MTP_TARGET_AVX512

constexpr int64_t kHeaderBytes = 256;  // per super-block: d, dmin, the three scale words, of 16 rows
constexpr int64_t kPieceBytes = 512;   // per pair of sub-blocks: 8 lines of 16 rows x 4 bytes
// Per super-block of a tile: the header, (Q5_K) 8 lines of qh, the 4 pieces of qs.
template <bool kFive>
constexpr int64_t kPackedSbBytes = 16 * static_cast<int64_t>(kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
template <bool kFive>
constexpr int64_t kPackedQs = kFive ? 768 : 256;
// Weights stream from DRAM at decode: each super-block requests the bytes this far ahead into L1 and L2
// (as the other packed kernels), a slice before each sub-block (prefetch_slice).
constexpr int64_t kPrefetchL1Bytes = 2304;
constexpr int64_t kPrefetchL2Bytes = 12288;
// Cache lines per slice, one slice per sub-block j: 8 slices cover a super-block (36 lines Q4_K, 44 Q5_K).
template <bool kFive>
constexpr int kPrefetchLines = kFive ? 6 : 5;
static_assert(8 * 64 * kPrefetchLines<false> >= kPackedSbBytes<false>);
static_assert(8 * 64 * kPrefetchLines<true> >= kPackedSbBytes<true>);
// Activation rows per pass over a tile: each pass decodes the tile's nibbles once, for all its rows.
constexpr int kPassRows = 8;

// The six-bit scales and mins of the 16 rows as 32-bit lanes of bytes: u[0] scales 0-3, u[1] scales 4-7,
// u[2] mins 0-3, u[3] mins 4-7 (unpack_k_scales on every lane at once).
T512 inline void scale_words(const uint8_t* hdr, __m512i u[4]) {
  const __m512i w0 = _mm512_loadu_si512(hdr + 64);
  const __m512i w1 = _mm512_loadu_si512(hdr + 128);
  const __m512i w2 = _mm512_loadu_si512(hdr + 192);
  const __m512i low6 = _mm512_set1_epi8(0x3f), low4 = _mm512_set1_epi8(0x0f), top2 = _mm512_set1_epi8(3);
  u[0] = _mm512_and_si512(w0, low6);
  u[1] = _mm512_or_si512(_mm512_and_si512(w2, low4),
                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), top2), 4));
  u[2] = _mm512_and_si512(w1, low6);
  u[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low4),
                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), top2), 4));
}

// sum_j m_j * (the sum of sub-block j's 32 activations), per lane, for one activation row: the mins as int16
// pairs (m0, m2) and (m1, m3) of each word against the same pairs of the row's sub-block sums.
T512 inline __m512i min_sums(const __m512i u[4], const int16_t* bsums) {
  const __m128i b = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums)),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums + 8)));
  const __m128i pairs =
      _mm_shuffle_epi8(b, _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15));
  const __m512i even16 = _mm512_set1_epi32(0x00FF00FF);
  __m512i s = _mm512_setzero_si512();
  for (int k = 0; k < 2; ++k) {
    const __m512i mu = u[2 + k];
    const int32_t pe = _mm_extract_epi32(pairs, 0), po = _mm_extract_epi32(pairs, 1);
    const int32_t qe = _mm_extract_epi32(pairs, 2), qo = _mm_extract_epi32(pairs, 3);
    s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_and_si512(mu, even16), _mm512_set1_epi32(k ? qe : pe)));
    s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_and_si512(_mm512_srli_epi32(mu, 8), even16),
                                              _mm512_set1_epi32(k ? qo : po)));
  }
  return s;
}

// One pass: acc[16 r + o] and accm[16 r + o] over all super-blocks, for NR activation rows (xs: their signed
// values).
template <bool kFive, int NR>
T512 void k45_pass(const uint8_t* tile, const uint8_t* const* x, const uint8_t* const* xs, const ActLayout& l,
                   float* acc, float* accm) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1), byte = _mm512_set1_epi32(0xFF);
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const uint8_t* hdr = tile + sb * kPackedSbBytes<kFive>;
    __m512i u[4];
    scale_words(hdr, u);
    __m512i isum[NR];
    for (int r = 0; r < NR; ++r) isum[r] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      prefetch_slice<kPrefetchLines<kFive>>(hdr, j, kPrefetchL1Bytes, kPrefetchL2Bytes);
      const uint8_t* piece = hdr + kPackedQs<kFive> + (j >> 1) * kPieceBytes;
      __m512i wv[8];
      for (int g = 0; g < 8; ++g) {
        const __m512i t = _mm512_loadu_si512(piece + 64 * g);
        wv[g] = _mm512_and_si512((j & 1) ? _mm512_srli_epi16(t, 4) : t, m4);
        if constexpr (kFive) {  // bit j of the line's qh bytes is the fifth bit
          const __m512i qh = _mm512_loadu_si512(hdr + kHeaderBytes + 64 * g);
          const __m512i b = _mm512_and_si512(_mm512_srl_epi16(qh, _mm_cvtsi32_si128(j)), one);
          wv[g] = _mm512_or_si512(wv[g], _mm512_slli_epi16(b, 4));
        }
      }
      const __m512i sc = _mm512_and_si512(_mm512_srlv_epi32(u[j >> 2], _mm512_set1_epi32(8 * (j & 3))), byte);
      for (int r = 0; r < NR; ++r) {
        const __m512i s = dot32_lanes<true>(_mm512_setzero_si512(), xs[r] + 256 * sb + 32 * j, wv);
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(s, sc));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + 32)));
    for (int r = 0; r < NR; ++r) {
      const __m512 xd = _mm512_set1_ps(act_d(x[r], l)[sb]);
      const __m512i msum = min_sums(u, act_bsums(x[r], l) + 16 * sb);
      float* a = acc + 16 * r;
      float* am = accm + 16 * r;
      _mm512_store_ps(a,
                      _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(d, xd), _mm512_load_ps(a)));
      _mm512_store_ps(am,
                      _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, xd), _mm512_load_ps(am)));
    }
  }
}

template <bool kFive, int NR>
T512 void k45_pass_rows(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l, float* acc,
                        float* accm) {
  const uint8_t* xs[NR];
  for (int r = 0; r < NR; ++r) xs[r] = act_sq_bytes(x[r], l);
  k45_pass<kFive, NR>(tile, x, xs, l, acc, accm);
}

using PassFn = void (*)(const uint8_t*, const uint8_t* const*, const ActLayout&, float*, float*);

template <bool kFive>
void k45_packed(const uint8_t* tile, int64_t, int n_out, const uint8_t* const* x, int64_t nx,
                const ActLayout& l, float* y, int64_t y_stride) {
  static constexpr PassFn kPass[kPassRows + 1] = {nullptr,
                                                  k45_pass_rows<kFive, 1>,
                                                  k45_pass_rows<kFive, 2>,
                                                  k45_pass_rows<kFive, 3>,
                                                  k45_pass_rows<kFive, 4>,
                                                  k45_pass_rows<kFive, 5>,
                                                  k45_pass_rows<kFive, 6>,
                                                  k45_pass_rows<kFive, 7>,
                                                  k45_pass_rows<kFive, 8>};
  alignas(64) float acc[kPassRows * 16], accm[kPassRows * 16];
  for (int64_t i = 0; i < nx; i += kPassRows) {
    const int nr = static_cast<int>(nx - i < kPassRows ? nx - i : kPassRows);
    std::memset(acc, 0, sizeof(float) * 16 * nr);
    std::memset(accm, 0, sizeof(float) * 16 * nr);
    kPass[nr](tile, x + i, l, acc, accm);
    for (int r = 0; r < nr; ++r) {
      float* yr = y + (i + r) * y_stride;
      for (int o = 0; o < n_out; ++o) yr[o] = acc[16 * r + o] - accm[16 * r + o];
    }
  }
}

}  // namespace

TileFn avx512_k45_packed(bool five) {
  return five ? k45_packed<true> : k45_packed<false>;
}

#else

TileFn avx512_k45_packed(bool) {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
