// AVX2 kernels for Q6_K weights x Q8_K activations: a row kernel (one weight row against up to 8 activation
// rows, for matrices in the row format; the AVX-512 level uses it too) and a packed-tile kernel (16 weight
// rows of a packed matrix, pack.h, against any number of activation rows), bitwise the same for every pair.
//
// Canonical order of one (weight row, activation row) pair, for super-block sb, with the weights' unsigned
// six-bit values u (the format's q = u - 32) and the 16 sub-blocks i of 16 elements:
//   isum(sb) = sum_i sc_i * (sum of the 16 u * x of i) - 32 * sum_i sc_i * (sum of the 16 x of i)
//              exact in int32: 16 * 128 * 16 * 63 * 127 < 2^31, the second sum from the Q8_K bsums
//   acc = fma(float(isum(sb)), d(sb) * d_x(sb), acc)           for sb = 0, 1, ... in order, from 0
// The unsigned values are vpmaddubsw's (or vpdpbusd's) unsigned operand as they are: two products sum to at
// most 2 * 63 * 127 = 16002, so two lines of a sub-block add in int16 before one vpmaddwd by the scale.
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "avx2_k16_packed.h"
#include "avx2_k16_row.h"
#include "avx2_util.h"
#include "kernels/isa.h"
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

#define T2 MTP_TARGET_AVX2

// Packed layout (pack.h): per super-block of a tile a 288-byte header (d, then the 16 sub-block scales of the
// 16 rows), then per half H of the super-block 3 pieces of 8 lines of 64 bytes (ql bytes 64H.., 64H+32..,
// qh bytes 32H..).
constexpr int64_t kSbBytes = sizeof(BlockQ6_K);
constexpr int64_t kHeaderBytes = 288;
constexpr int64_t kLinesBytes = 512;

// The unsigned six-bit values of chunk i (0..3) of a half: low nibbles of ql for i < 2, high ones for i >= 2,
// bits 2i, 2i+1 of qh on top.
T2 inline __m256i six_bits(__m256i ql, __m256i qh, int i) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  const __m256i lo = _mm256_and_si256(i >= 2 ? _mm256_srli_epi16(ql, 4) : ql, m4);
  const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i)), m2);
  return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

// ---- row format ----

struct Q6kFormat {
  static constexpr int kOffset = 32;
  static constexpr bool kHasMins = false;
  static constexpr int64_t kBlockBytes = kSbBytes;
  T2 static __m128i scales(const uint8_t* block) {
    return _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const BlockQ6_K*>(block)->scales));
  }
  // Chunk j = 4H + i: elements 128H + 32i .. of half H.
  T2 static __m256i values(const uint8_t* block, int j) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
    const int h = j >> 2, i = j & 3;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h + 32 * (i & 1)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h));
    return six_bits(ql, qh, i);
  }
  T2 static float d(const uint8_t* block) { return _cvtsh_ss(reinterpret_cast<const BlockQ6_K*>(block)->d); }
};

// ---- packed tiles ----
//
// Chunk j = 4H + i of a super-block (elements 128H + 32i ..) comes from line g of the pieces of half H: in
// each, bytes 4o..4o+3 of the line are row o's bytes 4g..4g+3 of the piece's run, so a line gives elements
// 4g..4g+3 of the chunk for 16 rows (half h of the line: rows 8h..8h+7), sub-block 2j for g < 4, 2j+1 after.
struct Q6kPacked {
  static constexpr int64_t kPackedSbBytes = 16 * kSbBytes;
  static constexpr int kPrefetchLines = 4;  // 16 chunks x 4 lines >= 3360 bytes
  static constexpr bool kHasMins = false;
  static constexpr int kOffsetShift = 5;
  T2 static __m256i scale(const uint8_t* hdr, int h, int s) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(hdr + 32 + 16 * s + 8 * h)));
  }
  T2 static __m256i values(const uint8_t* hdr, int j, int g, int h) {
    const int i = j & 3;
    const uint8_t* line = hdr + kHeaderBytes + (j >> 2) * 3 * kLinesBytes + 64 * g + 32 * h;
    return six_bits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + kLinesBytes * (i & 1))),
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 2 * kLinesBytes)), i);
  }
  T2 static __m256 d(const uint8_t* hdr, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 16 * h)));
  }
};

}  // namespace

RowDotFn avx2_q6k_rows() {
  return k16_rows<Q6kFormat>;
}
TileFn avx2_q6k_packed() {
  return k16_packed<Q6kPacked>;
}

#else

RowDotFn avx2_q6k_rows() {
  return nullptr;
}
TileFn avx2_q6k_packed() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
