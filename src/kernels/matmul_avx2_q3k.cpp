// AVX2 kernels for Q3_K weights x Q8_K activations: a row kernel (one weight row against up to 8 activation
// rows, for matrices in the row format) and a packed-tile kernel (16 weight rows of a packed matrix, pack.h,
// against any number of activation rows), bitwise the same for every pair; the AVX-512 level uses the row
// kernel and a tile kernel of the same bits (matmul_avx512_q6k.cpp).
//
// The canonical order is avx2_k16_row.h's (avx2_k16_packed.h's for the tiles), with the weights' unsigned
// three-bit values u (the format's q = u - 4) and sc_i = scale_i - 32; isum is exact in int32 (16 * 32 * 16 *
// 7 * 127 < 2^31) and two products sum to at most 2 * 7 * 127 in vpmaddubsw.
#include <cstdint>
#include <cstring>

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
  static constexpr bool kHasMins = false;
  static constexpr int64_t kBlockBytes = sizeof(BlockQ3_K);
  // The 16 scales (quant/blocks.h's unpack_q3_k_scale, lane for lane), in registers: unpacked word-wise
  // through a stack array they cost half of a one-row pass on Zen 3 (four 4-byte stores that a 16-byte load
  // cannot forward from).
  T2 static __m128i scales(const uint8_t* block) {
    const uint8_t* packed = reinterpret_cast<const BlockQ3_K*>(block)->scales;
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed));  // bytes 0-7
    // Low 4 bits: scales 0-7 in the low nibbles of bytes 0-7, scales 8-15 in their high nibbles.
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(b, m4), _mm_and_si128(_mm_srli_epi16(b, 4), m4));
    // High 2 bits: scale j in byte 8 + j % 4 at bit 2 (j / 4); dword k of the four copies shifted by 2k.
    uint32_t top;
    std::memcpy(&top, packed + 8, 4);
    const __m128i high = _mm_and_si128(
        _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(top)), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
  }
  T2 static __m256i values(const uint8_t* block, int j) {
    return three_bits(*reinterpret_cast<const BlockQ3_K*>(block), j);
  }
  T2 static float d(const uint8_t* block) { return _cvtsh_ss(reinterpret_cast<const BlockQ3_K*>(block)->d); }
};

// ---- packed tiles ----
//
// Per super-block of a tile (pack.h): d of the 16 rows, their scale words (bytes 0-3, 4-7, 8-11 of each
// row's scales), 8 lines of hmask, then 8 lines of qs per half. Lane o of a word holds row o's bytes, so
// each scale decodes as unpack_q3_k_scale does, every lane at once.
struct Q3kPacked {
  static constexpr int64_t kPackedSbBytes = 16 * static_cast<int64_t>(sizeof(BlockQ3_K));
  static constexpr int64_t kHmaskOffset = 224, kQsOffset = 224 + 512;
  static constexpr int kPrefetchLines = 2;  // 16 chunks x 2 lines >= 1760 bytes
  static constexpr bool kHasMins = false;
  static constexpr int kOffsetShift = 2;
  // Scale s of rows 8h..8h+7: its low four bits are byte s % 8 of the low words (the high nibble for s >= 8),
  // its high two bits bits 2 (s / 4) of byte s % 4 of word 2.
  T2 static __m256i scale(const uint8_t* hdr, int h, int s) {
    const uint8_t* words = hdr + 32 + 32 * h;  // word k of the 8 rows at words + 64 k
    const __m256i low =
        _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + 64 * ((s & 7) >> 2))),
                          8 * (s & 3) + 4 * (s >> 3));
    const __m256i high = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + 128)),
                                           8 * (s & 3) + 2 * (s >> 2));
    const __m256i v = _mm256_or_si256(_mm256_and_si256(low, _mm256_set1_epi32(0x0F)),
                                      _mm256_slli_epi32(_mm256_and_si256(high, _mm256_set1_epi32(3)), 4));
    return _mm256_sub_epi32(v, _mm256_set1_epi32(32));
  }
  // Chunk j = 4H + i, line g: bits 2i, 2i + 1 of the qs line of half H, bit j of the hmask line as the third.
  T2 static __m256i values(const uint8_t* hdr, int j, int g, int h) {
    const int i = j & 3;
    const __m256i qs = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(hdr + kQsOffset + 512 * (j >> 2) + 64 * g + 32 * h));
    const __m256i hm =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + kHmaskOffset + 64 * g + 32 * h));
    const __m256i low = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * i)), _mm256_set1_epi8(3));
    const __m256i high = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
  }
  T2 static __m256 d(const uint8_t* hdr, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 16 * h)));
  }
};

}  // namespace

RowDotFn avx2_q3k_rows() {
  return k16_rows<Q3kFormat>;
}
TileFn avx2_q3k_packed() {
  return k16_packed<Q3kPacked>;
}

#else

RowDotFn avx2_q3k_rows() {
  return nullptr;
}
TileFn avx2_q3k_packed() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
