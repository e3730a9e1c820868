// AVX2 row kernel for Q3_K weights x Q8_K activations (one weight row against up to 8 activation rows; the
// AVX-512 level uses it too). Q3_K has no packed layout: its matrices keep the file's.
//
// Canonical order of one (weight row, activation row) pair, for super-block sb, with the weights' unsigned
// three-bit values u (the format's q = u - 4) and the 16 sub-blocks i of 16 elements, sc_i = scale_i - 32:
//   isum(sb) = sum_i sc_i * (sum of the 16 u * x of i) - 4 * sum_i sc_i * (sum of the 16 x of i)
//              exact in int32 (16 * 32 * 16 * 7 * 127 < 2^31), the second sum from the Q8_K bsums
//   acc = fma(float(isum(sb)), d(sb) * d_x(sb), acc)           for sb = 0, 1, ... in order, from 0
// The unsigned values are vpmaddubsw's unsigned operand as they are (two products: at most 2 * 7 * 127).
#include <cstdint>

#include "avx2_util.h"
#include "kernels/isa.h"
#include "matmul_internal.h"
#include "quant/blocks.h"

#if MTP_HAVE_X86_SIMD
#include <immintrin.h>
#endif

namespace mtp::kernels::detail {

#if MTP_HAVE_X86_SIMD
namespace {

#define T2 MTP_TARGET_AVX2

// The unsigned values of chunk j = 4H + i of a super-block (elements 128H + 32i + 0..31): bits 2i, 2i + 1 of
// qs bytes 32H.., and bit j of hmask bytes 0..31 as the third bit.
T2 inline __m256i three_bits(const BlockQ3_K& b, int j) {
  const int h = j >> 2, i = j & 3;
  const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h));
  const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
  const __m256i low = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * i)), _mm256_set1_epi8(3));
  const __m256i high = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
  return _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
}

template <int NR>
T2 void q3k_row(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  __m128 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm_setzero_ps();
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const auto* b = reinterpret_cast<const BlockQ3_K*>(w + sb * sizeof(BlockQ3_K));
    alignas(16) uint8_t codes[16];
    unpack_q3_k_scales(b->scales, codes);
    const __m128i sc8 =
        _mm_sub_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(codes)), _mm_set1_epi8(32));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);  // the 16 sc_i as int16, against the 16 bsums
    alignas(32) int16_t sc[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), sc16);
    __m256i isum[NR];
    for (int r = 0; r < NR; ++r) isum[r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i v = three_bits(*b, j);
      // Elements 0-15 of the chunk (the low 128 bits) have scale 2j, 16-31 scale 2j + 1: int16 pairs.
      const __m256i pairs = _mm256_insertf128_si256(_mm256_castsi128_si256(_mm_set1_epi16(sc[2 * j])),
                                                    _mm_set1_epi16(sc[2 * j + 1]), 1);
      for (int r = 0; r < NR; ++r) {
        const __m256i q =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act_sq_bytes(x[r], l) + 256 * sb + 32 * j));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(v, q), pairs));
      }
    }
    const float d = _cvtsh_ss(b->d);
    for (int r = 0; r < NR; ++r) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act_bsums(x[r], l) + 16 * sb));
      const int32_t total = hsum_epi32(isum[r]) - 4 * hsum_epi32(_mm256_madd_epi16(bs, sc16));
      const float xd = act_d(x[r], l)[sb];
      acc[r] = _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), total), _mm_set_ss(d * xd), acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = _mm_cvtss_f32(acc[r]);
}

void q3k_rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  rows_by_four(nr, [&]<int NR>(int i) { q3k_row<NR>(w, x + i, l, out + i); });
}

}  // namespace

RowDotFn avx2_q3k_rows() {
  return q3k_rows;
}

#else

RowDotFn avx2_q3k_rows() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
