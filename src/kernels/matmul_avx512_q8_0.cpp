// AVX-512 VNNI kernels for the 32-element block types with Q8_0 activations over packed tiles
// (kernels/pack.h): Q8_0, Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1 and MXFP4 weights, the 16 weight rows of a tile in
// the lanes of each vector, any number of activation rows. Row-format matrices are packed tile by tile on the
// fly and run through the same code, so a pair's result does not depend on the layout, the batch or the
// split.
//
// Canonical order of one (weight row, activation row) pair: isum_b = the 32 products of block b's levels v
// with the activations, summed in integers (exact: |isum_b| <= 32 * 127 * 127 < 2^24, so also exact as a
// float), then
//   y = fma(float(isum_b), d_w(b) * d_x(b), y)
//   y = fma(xsum_b, m_w(b) * d_x(b), y)           (Q4_1, Q5_1: their min m against the block's activation
//   sum)
// for b = 0, 1, ... in order (one rounding for each scale product and one per fma), with d_w the fp16 scale,
// or MXFP4's 2^(e - 128) (quant/blocks.h's mxfp4_scale) against its doubled E2M1 values. Activations are
// stored offset by 128 (u8) for vpdpbusd; each lane starts from corr = -128 * (sum of its weights) to cancel
// the offset.
#include <algorithm>
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

// Weights stream from DRAM at decode: each block requests the bytes this far ahead into L1, and further into
// L2 (see the IQ4_XS kernel; one core's 248K-row head from DRAM 42-43 -> 38-39 ms).
constexpr int64_t kPrefetchBytes = 2048;
constexpr int64_t kPrefetchL2Bytes = 12288;

// A format: per block of a tile kScaleBytes of the 16 rows' scales (all blocks first), then kPieceBytes of
// weights; weights() gives group g of 4 elements (4g..4g+3) of the 16 rows as int8 in wv[g].
struct Q8_0Tile {
  static constexpr bool kMin = false;
  static constexpr int64_t kScaleBytes = 32;   // 16 fp16 scales
  static constexpr int64_t kPieceBytes = 512;  // 8 lines of 16 rows x 4 bytes
  T512 static void weights(const uint8_t* piece, __m512i* wv) {
    for (int g = 0; g < 8; ++g) wv[g] = _mm512_loadu_si512(piece + 64 * g);
  }
  T512 static __m512 scales(const uint8_t* s) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  }
};

// Group g of a nibble piece: the low nibbles of line g for g < 4, the high ones of line g - 4, through the
// value table (elements 4g..4g+3 either way).
T512 inline void nibble_weights(const uint8_t* piece, const int8_t* values, __m512i* wv) {
  const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int line = 0; line < 4; ++line) {
    const __m512i t = _mm512_loadu_si512(piece + 64 * line);
    wv[line] = _mm512_shuffle_epi8(table, _mm512_and_si512(t, m4));
    wv[line + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(t, 4), m4));
  }
}

constexpr int8_t kQ4_0Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
constexpr int8_t kU4Values[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
constexpr int8_t kQ5_0Values[16] = {-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1};

// Q4_0, IQ4_NL (kMin false) and Q4_1 (levels 0..15, with a min): the fp16 d of the 16 rows (then Q4_1's m),
// and 4 lines of nibble pairs, as MXFP4's.
template <const int8_t* kValues, bool kHasMin>
struct NibbleTile {
  static constexpr bool kMin = kHasMin;
  static constexpr int64_t kScaleBytes = kHasMin ? 64 : 32;
  static constexpr int64_t kPieceBytes = 256;
  T512 static void weights(const uint8_t* piece, __m512i* wv) { nibble_weights(piece, kValues, wv); }
  T512 static __m512 scales(const uint8_t* s) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  }
  T512 static __m512 mins(const uint8_t* s) { return scales(s + 32); }
};

// Q5_0 (levels q - 16) and Q5_1 (levels q, with a min): Q4_0's / Q4_1's nibble lines, then one line of the 16
// rows' u32 qh. Group g's fifth bits are qh bits 4g..4g+3; (qh >> 4g & 0xF) * 0x00204081 moves bit k to bit
// 8k of the lane (the four shifted copies never overlap), so each byte gets its own 0x10.
template <bool kHasMin>
struct Q5Tile {
  static constexpr bool kMin = kHasMin;
  static constexpr int64_t kScaleBytes = kHasMin ? 64 : 32;
  static constexpr int64_t kPieceBytes = 320;
  T512 static void weights(const uint8_t* piece, __m512i* wv) {
    nibble_weights(piece, kHasMin ? kU4Values : kQ5_0Values, wv);
    const __m512i qh = _mm512_loadu_si512(piece + 256);
    for (int g = 0; g < 8; ++g) {
      const __m512i bits = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * g), _mm512_set1_epi32(0xF));
      const __m512i spread = _mm512_and_si512(_mm512_mullo_epi32(bits, _mm512_set1_epi32(0x00204081)),
                                              _mm512_set1_epi32(0x01010101));
      wv[g] = _mm512_add_epi8(wv[g], _mm512_slli_epi32(spread, 4));
    }
  }
  T512 static __m512 scales(const uint8_t* s) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  }
  T512 static __m512 mins(const uint8_t* s) { return scales(s + 32); }
};

struct Mxfp4Tile {
  static constexpr bool kMin = false;
  static constexpr int64_t kScaleBytes = 16;   // 16 E8M0 exponents
  static constexpr int64_t kPieceBytes = 256;  // 4 lines of 16 rows x 4 bytes of nibble pairs
  T512 static void weights(const uint8_t* piece, __m512i* wv) { nibble_weights(piece, kMxfp4Values, wv); }
  // mxfp4_scale lane by lane: (e - 1) << 23 as float bits, the subnormal 2^21 << e for e = 0, 1.
  T512 static __m512 scales(const uint8_t* s) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(v, _mm512_set1_epi32(1)), 23);
    const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), v);
    const __mmask16 small = _mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subnormal));
  }
};

template <class F, int NR>
T512 void b32_rows(const uint8_t* tile, int64_t nb, const uint8_t* const* x, const ActLayout& l, int n_out,
                   float* y, int64_t y_stride) {
  const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
  const uint8_t* qs = tile + nb * F::kScaleBytes;
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* piece = qs + b * F::kPieceBytes;
    for (int q = 0; q < F::kPieceBytes / 64; ++q) {
      _mm_prefetch(reinterpret_cast<const char*>(piece + kPrefetchBytes + 64 * q), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(piece + kPrefetchL2Bytes + 64 * q), _MM_HINT_T1);
    }
    // Integer sums in two chains each (exact, so any grouping gives the same bits): one chain of 8
    // dependent vpdpbusd would leave the kernel latency-bound.
    __m512i wv[8];
    F::weights(piece, wv);
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    for (int g = 0; g < 8; g += 2) {
      s0 = _mm512_dpbusd_epi32(s0, k80, wv[g]);
      s1 = _mm512_dpbusd_epi32(s1, k80, wv[g + 1]);
    }
    const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_add_epi32(s0, s1));
    const __m512 wd = F::scales(tile + b * F::kScaleBytes);
    __m512 wm = _mm512_setzero_ps();  // the min formats' m
    if constexpr (F::kMin) wm = F::mins(tile + b * F::kScaleBytes);
    for (int r = 0; r < NR; ++r) {
      const __m512i t = dot32_lanes(corr, x[r] + 32 * b, wv);
      const __m512 dx = _mm512_set1_ps(act_d(x[r], l)[b]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(wd, dx), acc[r]);
      if constexpr (F::kMin) {
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(act_xsum(x[r], l)[b]), _mm512_mul_ps(wm, dx), acc[r]);
      }
    }
  }
  const __mmask16 m =
      n_out >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n_out) - 1);
  for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(y + r * y_stride, m, acc[r]);
}

template <class F>
T512 void b32_packed(const uint8_t* tile, int64_t, int n_out, const uint8_t* const* x, int64_t nx,
                     const ActLayout& l, float* y, int64_t y_stride) {
  using RowsFn =
      void (*)(const uint8_t*, int64_t, const uint8_t* const*, const ActLayout&, int, float*, int64_t);
  static constexpr RowsFn kRows[9] = {nullptr,        b32_rows<F, 1>, b32_rows<F, 2>,
                                      b32_rows<F, 3>, b32_rows<F, 4>, b32_rows<F, 5>,
                                      b32_rows<F, 6>, b32_rows<F, 7>, b32_rows<F, 8>};
  // Groups of 8 rows over the same tile (from L1/L2 after the first).
  for (int64_t i = 0; i < nx; i += 8) {
    const int64_t n = std::min<int64_t>(8, nx - i);
    kRows[n](tile, l.nb, x + i, l, n_out, y + i * y_stride, y_stride);
  }
}

// Row-format weights: the tile packed into a per-thread buffer first.
template <class F, GgmlType kType>
void b32_tile(const uint8_t* w, int64_t row_bytes, int n_out, const uint8_t* const* x, int64_t nx,
              const ActLayout& l, float* y, int64_t y_stride) {
  run_packed_on_row_format(b32_packed<F>, kType, w, row_bytes, n_out, x, nx, l, y, y_stride);
}

}  // namespace

TileFn avx512_b32_packed(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0:
      return b32_packed<Q8_0Tile>;
    case GgmlType::Q4_0:
      return b32_packed<NibbleTile<kQ4_0Values, false>>;
    case GgmlType::IQ4_NL:
      return b32_packed<NibbleTile<kIq4nlValues, false>>;
    case GgmlType::Q4_1:
      return b32_packed<NibbleTile<kU4Values, true>>;
    case GgmlType::Q5_0:
      return b32_packed<Q5Tile<false>>;
    case GgmlType::Q5_1:
      return b32_packed<Q5Tile<true>>;
    case GgmlType::MXFP4:
      return b32_packed<Mxfp4Tile>;
    default:
      return nullptr;
  }
}
TileFn avx512_b32_tile(GgmlType type) {
  switch (type) {
    case GgmlType::Q8_0:
      return b32_tile<Q8_0Tile, GgmlType::Q8_0>;
    case GgmlType::Q4_0:
      return b32_tile<NibbleTile<kQ4_0Values, false>, GgmlType::Q4_0>;
    case GgmlType::IQ4_NL:
      return b32_tile<NibbleTile<kIq4nlValues, false>, GgmlType::IQ4_NL>;
    case GgmlType::Q4_1:
      return b32_tile<NibbleTile<kU4Values, true>, GgmlType::Q4_1>;
    case GgmlType::Q5_0:
      return b32_tile<Q5Tile<false>, GgmlType::Q5_0>;
    case GgmlType::Q5_1:
      return b32_tile<Q5Tile<true>, GgmlType::Q5_1>;
    case GgmlType::MXFP4:
      return b32_tile<Mxfp4Tile, GgmlType::MXFP4>;
    default:
      return nullptr;
  }
}

#else

TileFn avx512_b32_packed(GgmlType) {
  return nullptr;
}
TileFn avx512_b32_tile(GgmlType) {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
