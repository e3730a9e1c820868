// AVX-512 VNNI kernels for Q6_K, Q3_K and Q2_K weights over packed tiles (kernels/pack.h): the shared
// 16-sub-block pass of avx512_k16_packed.h with each format's decoding. They follow the canonical order of
// the AVX2 kernels (matmul_avx2_q6k.cpp, matmul_avx2_q3k.cpp, matmul_avx2_q2k.cpp: the unsigned values'
// products and the bsums' correction, or Q2_K's min sums, summed exactly per super-block, then one fma each),
// whose row kernels are this level's kernels for matrices in the row format, so both layouts, and both
// levels, give the same bits.
#include <cstring>

#include "avx512_k16_packed.h"
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

// The unsigned six-bit values of chunk i (0..3) of a half, as the AVX2 kernel decodes them.
T512 inline __m512i six_bits(__m512i ql, __m512i qh, int i) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
  const __m512i lo = _mm512_and_si512(i >= 2 ? _mm512_srli_epi16(ql, 4) : ql, m4);
  const __m512i hi = _mm512_and_si512(_mm512_srl_epi16(qh, _mm_cvtsi32_si128(2 * i)), m2);
  return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));
}

struct Q6kPacked {
  static constexpr int64_t kPackedSbBytes = 16 * static_cast<int64_t>(sizeof(BlockQ6_K));
  static constexpr int kPrefetchLines = 7;  // 8 chunks x 7 lines >= 3360 bytes
  static constexpr bool kHasMins = false;
  static constexpr int kOffsetShift = 5;
  T512 static __m512i scale(const uint8_t* hdr, int s) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 32 + 16 * s)));
  }
  // Chunk j = 4H + i, line g of the pieces of half H.
  T512 static __m512i values(const uint8_t* hdr, int j, int g) {
    const int i = j & 3;
    const uint8_t* line = hdr + kHeaderBytes + (j >> 2) * 3 * kLinesBytes + 64 * g;
    return six_bits(_mm512_loadu_si512(line + kLinesBytes * (i & 1)),
                    _mm512_loadu_si512(line + 2 * kLinesBytes), i);
  }
  T512 static __m512 d(const uint8_t* hdr) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr)));
  }
};

// Per super-block of a tile: d of the 16 rows, their scale words (bytes 0-3, 4-7, 8-11 of each row's scales,
// lane o holding row o's), 8 lines of hmask, then 8 lines of qs per half.
struct Q3kPacked {
  static constexpr int64_t kPackedSbBytes = 16 * static_cast<int64_t>(sizeof(BlockQ3_K));
  static constexpr int64_t kHmaskOffset = 224, kQsOffset = 224 + 512;
  static constexpr int kPrefetchLines = 4;  // 8 chunks x 4 lines >= 1760 bytes
  static constexpr bool kHasMins = false;
  static constexpr int kOffsetShift = 2;
  // Scale s (quant/blocks.h's unpack_q3_k_scale, minus 32): its low four bits are byte s % 8 of the low
  // words (the high nibble for s >= 8), its high two bits bits 2 (s / 4) of byte s % 4 of word 2.
  T512 static __m512i scale(const uint8_t* hdr, int s) {
    const __m512i low =
        _mm512_srli_epi32(_mm512_loadu_si512(hdr + 32 + 64 * ((s & 7) >> 2)), 8 * (s & 3) + 4 * (s >> 3));
    const __m512i high = _mm512_srli_epi32(_mm512_loadu_si512(hdr + 32 + 128), 8 * (s & 3) + 2 * (s >> 2));
    const __m512i v = _mm512_or_si512(_mm512_and_si512(low, _mm512_set1_epi32(0x0F)),
                                      _mm512_slli_epi32(_mm512_and_si512(high, _mm512_set1_epi32(3)), 4));
    return _mm512_sub_epi32(v, _mm512_set1_epi32(32));
  }
  // Chunk j = 4H + i, line g: bits 2i, 2i + 1 of the qs line of half H, bit j of the hmask line as the third.
  T512 static __m512i values(const uint8_t* hdr, int j, int g) {
    const __m512i qs = _mm512_loadu_si512(hdr + kQsOffset + 512 * (j >> 2) + 64 * g);
    const __m512i hm = _mm512_loadu_si512(hdr + kHmaskOffset + 64 * g);
    const __m512i low =
        _mm512_and_si512(_mm512_srl_epi16(qs, _mm_cvtsi32_si128(2 * (j & 3))), _mm512_set1_epi8(3));
    const __m512i high = _mm512_and_si512(_mm512_srl_epi16(hm, _mm_cvtsi32_si128(j)), _mm512_set1_epi8(1));
    return _mm512_or_si512(low, _mm512_slli_epi16(high, 2));
  }
  T512 static __m512 d(const uint8_t* hdr) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr)));
  }
};

// Per super-block of a tile (pack.h): d and dmin of the 16 rows, their four scale words (bytes 4w..4w+3 of
// each row's scales), then 8 lines of qs per half. Byte s % 4 of word s / 4 holds scale s (low nibble) and
// min s (high nibble) of the lane's row.
struct Q2kPacked {
  static constexpr int64_t kPackedSbBytes = 16 * static_cast<int64_t>(sizeof(BlockQ2_K));
  static constexpr int64_t kQsOffset = 320;
  static constexpr int kPrefetchLines = 3;  // 8 chunks x 3 lines >= 1344 bytes
  static constexpr bool kHasMins = true;
  T512 static __m512i nibble(const uint8_t* hdr, int s, int high) {
    const __m512i word = _mm512_loadu_si512(hdr + 64 + 64 * (s >> 2));
    return _mm512_and_si512(_mm512_srli_epi32(word, 8 * (s & 3) + 4 * high), _mm512_set1_epi32(0x0F));
  }
  T512 static __m512i scale(const uint8_t* hdr, int s) { return nibble(hdr, s, 0); }
  T512 static __m512i min(const uint8_t* hdr, int s) { return nibble(hdr, s, 1); }
  // Chunk j = 4H + i, line g: bits 2i, 2i + 1 of the qs line of half H.
  T512 static __m512i values(const uint8_t* hdr, int j, int g) {
    const __m512i qs = _mm512_loadu_si512(hdr + kQsOffset + 512 * (j >> 2) + 64 * g);
    return _mm512_and_si512(_mm512_srl_epi16(qs, _mm_cvtsi32_si128(2 * (j & 3))), _mm512_set1_epi8(3));
  }
  T512 static __m512 d(const uint8_t* hdr) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr)));
  }
  T512 static __m512 dmin(const uint8_t* hdr) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + 32)));
  }
};

}  // namespace

TileFn avx512_q2k_packed() {
  return k16_packed512<Q2kPacked>;
}
TileFn avx512_q6k_packed() {
  return k16_packed512<Q6kPacked>;
}
TileFn avx512_q3k_packed() {
  return k16_packed512<Q3kPacked>;
}

#else

TileFn avx512_q2k_packed() {
  return nullptr;
}
TileFn avx512_q6k_packed() {
  return nullptr;
}
TileFn avx512_q3k_packed() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
