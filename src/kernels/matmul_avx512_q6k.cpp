// AVX-512 VNNI kernel for Q6_K weights over packed tiles (kernels/pack.h): the 16 weight rows of a tile in
// the lanes of each vector, any number of activation rows. It follows the canonical order of the AVX2 Q6_K
// kernels (matmul_avx2_q6k.cpp: the unsigned six-bit values' products and the bsums' correction summed
// exactly per super-block, then one fma), whose row kernel is this level's kernel for Q6_K matrices in the
// row format, so both layouts, and both levels, give the same bits.
#include <cstring>

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

constexpr int64_t kHeaderBytes = 288;  // per super-block: d, then the 16 sub-block scales, of 16 rows
constexpr int64_t kLinesBytes = 512;   // a piece: 8 lines of 16 rows x 4 bytes
constexpr int64_t kPackedSbBytes = 16 * static_cast<int64_t>(sizeof(BlockQ6_K));
constexpr int64_t kPrefetchL1Bytes = 3360;
constexpr int64_t kPrefetchL2Bytes = 13440;
// Cache lines per slice, one slice before each of the 8 chunks j of a super-block (52.5 lines in all).
constexpr int kPrefetchLines = 7;
static_assert(8 * 64 * kPrefetchLines >= kPackedSbBytes);
constexpr int kPassRows = 8;

// The unsigned six-bit values of chunk i (0..3) of a half, as the AVX2 kernel decodes them.
T512 inline __m512i six_bits(__m512i ql, __m512i qh, int i) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
  const __m512i lo = _mm512_and_si512(i >= 2 ? _mm512_srli_epi16(ql, 4) : ql, m4);
  const __m512i hi = _mm512_and_si512(_mm512_srl_epi16(qh, _mm_cvtsi32_si128(2 * i)), m2);
  return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
}

// acc + vpdpbusd of 4 lines against the activation bytes xs[0..15], 4 at a time.
T512 inline __m512i dot16(const __m512i* wv, const uint8_t* xs) {
  __m512i s = _mm512_setzero_si512();
  for (int g = 0; g < 4; ++g) {
    int32_t x;
    std::memcpy(&x, xs + 4 * g, 4);
    s = _mm512_dpbusd_epi32(s, wv[g], _mm512_set1_epi32(x));
  }
  return s;
}

template <int NR>
T512 void q6k_pass(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l, float* acc) {
  const uint8_t* xs[NR];
  for (int r = 0; r < NR; ++r) xs[r] = act_sq_bytes(x[r], l);
  const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const uint8_t* hdr = tile + sb * kPackedSbBytes;
    __m512i sc[16];
    for (int s = 0; s < 16; ++s)
      sc[s] = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 32 + 16 * s)));
    __m512i isum[NR];
    for (int r = 0; r < NR; ++r) isum[r] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      prefetch_slice<kPrefetchLines>(hdr, j, kPrefetchL1Bytes, kPrefetchL2Bytes);
      const int i = j & 3;
      const uint8_t* half = hdr + kHeaderBytes + (j >> 2) * 3 * kLinesBytes;
      __m512i wv[8];
      for (int g = 0; g < 8; ++g)
        wv[g] = six_bits(_mm512_loadu_si512(half + kLinesBytes * (i & 1) + 64 * g),
                         _mm512_loadu_si512(half + 2 * kLinesBytes + 64 * g), i);
      for (int r = 0; r < NR; ++r) {
        const uint8_t* xq = xs[r] + 256 * sb + 32 * j;
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(dot16(wv, xq), sc[2 * j]));
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(dot16(wv + 4, xq + 16), sc[2 * j + 1]));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr)));
    for (int r = 0; r < NR; ++r) {
      // sum_s sc_s * bsum_s: the scales as int16 pairs (sc_2k, sc_2k+1) against the bsums' own pairs.
      const int16_t* bs = act_bsums(x[r], l) + 16 * sb;
      __m512i corr = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        int32_t pair;
        std::memcpy(&pair, bs + 2 * k, 4);
        const __m512i scp =
            _mm512_or_si512(_mm512_and_si512(sc[2 * k], lo16), _mm512_slli_epi32(sc[2 * k + 1], 16));
        corr = _mm512_add_epi32(corr, _mm512_madd_epi16(scp, _mm512_set1_epi32(pair)));
      }
      const __m512i total = _mm512_sub_epi32(isum[r], _mm512_slli_epi32(corr, 5));
      const __m512 xd = _mm512_set1_ps(act_d(x[r], l)[sb]);
      float* a = acc + 16 * r;
      _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, xd), _mm512_load_ps(a)));
    }
  }
}

using PassFn = void (*)(const uint8_t*, const uint8_t* const*, const ActLayout&, float*);

void q6k_packed(const uint8_t* tile, int64_t, int n_out, const uint8_t* const* x, int64_t nx,
                const ActLayout& l, float* y, int64_t y_stride) {
  static constexpr PassFn kPass[kPassRows + 1] = {nullptr,     q6k_pass<1>, q6k_pass<2>,
                                                  q6k_pass<3>, q6k_pass<4>, q6k_pass<5>,
                                                  q6k_pass<6>, q6k_pass<7>, q6k_pass<8>};
  alignas(64) float acc[kPassRows * 16];
  for (int64_t i = 0; i < nx; i += kPassRows) {
    const int nr = static_cast<int>(nx - i < kPassRows ? nx - i : kPassRows);
    std::memset(acc, 0, sizeof(float) * 16 * nr);
    kPass[nr](tile, x + i, l, acc);
    for (int r = 0; r < nr; ++r) std::memcpy(y + (i + r) * y_stride, acc + 16 * r, sizeof(float) * n_out);
  }
}

}  // namespace

TileFn avx512_q6k_packed() {
  return q6k_packed;
}

#else

TileFn avx512_q6k_packed() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
