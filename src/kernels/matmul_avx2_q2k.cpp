// AVX2 kernels for Q2_K weights x Q8_K activations: a row kernel (one weight row against up to 8 activation
// rows, for matrices in the row format; the AVX-512 level runs it too) and a packed-tile kernel (16 weight
// rows of a packed matrix, pack.h, against any number of activation rows), bitwise the same for every pair;
// the AVX-512 level's tile kernel gives the same bits (matmul_avx512_q6k.cpp). The canonical order is
// avx2_k16_row.h's with mins: the weights' two-bit values u under the 4-bit scales sc_i, the 4-bit mins m_i
// against the Q8_K bsums; isum and msum are exact in int32 (16
// * 15 * 16 * 3 * 127 and 16 * 15 * 16 * 127 are far below 2^31) and two products sum to at most 2 * 3 * 127
// in vpmaddubsw.
#include <cstdint>

#include "avx2_k16_packed.h"
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

struct Q2kFormat {
  static constexpr int kOffset = 0;
  static constexpr bool kHasMins = true;
  static constexpr int64_t kBlockBytes = sizeof(BlockQ2_K);
  T2 static __m128i scale_bytes(const uint8_t* block) {
    return _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const BlockQ2_K*>(block)->scales));
  }
  // Scale i in the low nibble of scales[i], min i in the high one.
  T2 static __m128i scales(const uint8_t* block) {
    return _mm_and_si128(scale_bytes(block), _mm_set1_epi8(0x0F));
  }
  T2 static __m128i mins(const uint8_t* block) {
    return _mm_and_si128(_mm_srli_epi16(scale_bytes(block), 4), _mm_set1_epi8(0x0F));
  }
  // Chunk j = 4H + i (elements 128H + 32i + 0..31): bits 2i, 2i + 1 of qs bytes 32H..32H + 31.
  T2 static __m256i values(const uint8_t* block, int j) {
    const uint8_t* qs = reinterpret_cast<const BlockQ2_K*>(block)->qs + 32 * (j >> 2);
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
    return _mm256_and_si256(_mm256_srl_epi16(bytes, _mm_cvtsi32_si128(2 * (j & 3))), _mm256_set1_epi8(3));
  }
  T2 static float d(const uint8_t* block) { return _cvtsh_ss(reinterpret_cast<const BlockQ2_K*>(block)->d); }
  T2 static float dmin(const uint8_t* block) {
    return _cvtsh_ss(reinterpret_cast<const BlockQ2_K*>(block)->dmin);
  }
};

// ---- packed tiles ----
//
// Per super-block of a tile (pack.h): d and dmin of the 16 rows, their four scale words (bytes 4w..4w+3 of
// each row's scales), then 8 lines of qs per half; lane o of a word holds row o's bytes.
struct Q2kPacked {
  static constexpr int64_t kPackedSbBytes = 16 * static_cast<int64_t>(sizeof(BlockQ2_K));
  static constexpr int64_t kQsOffset = 320;
  static constexpr int kPrefetchLines = 2;  // 16 chunks x 2 lines >= 1344 bytes
  static constexpr bool kHasMins = true;
  // Scale s (high = 0) or min s (high = 1) of rows 8h..8h+7: a nibble of byte s % 4 of word s / 4.
  T2 static __m256i nibble(const uint8_t* hdr, int h, int s, int high) {
    const __m256i word =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + 64 + 64 * (s >> 2) + 32 * h));
    return _mm256_and_si256(_mm256_srli_epi32(word, 8 * (s & 3) + 4 * high), _mm256_set1_epi32(0x0F));
  }
  T2 static __m256i scale(const uint8_t* hdr, int h, int s) { return nibble(hdr, h, s, 0); }
  T2 static __m256i min(const uint8_t* hdr, int h, int s) { return nibble(hdr, h, s, 1); }
  // Chunk j = 4H + i, line g: bits 2i, 2i + 1 of the qs line of half H.
  T2 static __m256i values(const uint8_t* hdr, int j, int g, int h) {
    const __m256i qs = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(hdr + kQsOffset + 512 * (j >> 2) + 64 * g + 32 * h));
    return _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * (j & 3))), _mm256_set1_epi8(3));
  }
  T2 static __m256 d(const uint8_t* hdr, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 16 * h)));
  }
  T2 static __m256 dmin(const uint8_t* hdr, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 32 + 16 * h)));
  }
};

}  // namespace

RowDotFn avx2_q2k_rows() {
  return k16_rows<Q2kFormat>;
}
TileFn avx2_q2k_packed() {
  return k16_packed<Q2kPacked>;
}

#else

RowDotFn avx2_q2k_rows() {
  return nullptr;
}
TileFn avx2_q2k_packed() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
