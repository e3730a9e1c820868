// AVX2 row kernel for Q3_K weights x Q8_K activations (one weight row against up to 8 activation rows; the
// AVX-512 level uses it too). Q3_K has no packed layout: its matrices keep the file's.
//
// The canonical order is avx2_k16_row.h's, with the weights' unsigned three-bit values u (the format's q =
// u - 4) and sc_i = scale_i - 32; isum is exact in int32 (16 * 32 * 16 * 7 * 127 < 2^31) and two products sum
// to at most 2 * 7 * 127 in vpmaddubsw.
#include <cstdint>

#include "avx2_k16_row.h"
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

struct Q3kFormat {
  static constexpr int kOffset = 4;
  static constexpr int64_t kBlockBytes = sizeof(BlockQ3_K);
  T2 static __m128i scales(const uint8_t* block) {
    alignas(16) uint8_t codes[16];
    unpack_q3_k_scales(reinterpret_cast<const BlockQ3_K*>(block)->scales, codes);
    return _mm_sub_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(codes)), _mm_set1_epi8(32));
  }
  T2 static __m256i values(const uint8_t* block, int j) {
    return three_bits(*reinterpret_cast<const BlockQ3_K*>(block), j);
  }
  T2 static float d(const uint8_t* block) { return _cvtsh_ss(reinterpret_cast<const BlockQ3_K*>(block)->d); }
};

}  // namespace

RowDotFn avx2_q3k_rows() {
  return k16_rows<Q3kFormat>;
}

#else

RowDotFn avx2_q3k_rows() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
