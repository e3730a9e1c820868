// AVX2 kernels for Q8_0, Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1 and MXFP4 weights x Q8_0 activations over packed
// tiles (kernels/pack.h): 8 weight rows of a tile in the lanes of each register, any number of activation
// rows. Row-format matrices are packed
// tile by tile on the fly and run through the same code (as at the AVX-512 level), so a pair's result does
// not depend on the layout, the batch or the split.
//
// Canonical order of one (weight row, activation row) pair, that of the AVX-512 kernels
// (matmul_avx512_q8_0.cpp), so both levels give the same bits: isum_b = the 32 products of block b summed in
// integers (exact), then y = fma(float(isum_b), d_w(b) * d_x(b), y) and, for Q4_1 and Q5_1, y =
// fma(xsum_b, m_w(b) * d_x(b), y), for b = 0, 1, ... in order, d_w the fp16 scale or MXFP4's 2^(e - 128).
//
// Plain AVX2 sums with the sign trick (vpmaddubsw(|w|, sign(x, w)), then vpmaddwd by 1); with AVX-VNNI the
// activations are vpdpbusd's unsigned operand after a flip by 128 and each lane starts from -128 times the
// sum of its weights (shared by all activation rows of a pass).
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

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
#define T2V MTP_TARGET_AVX2_VNNI

constexpr int64_t kPrefetchL1Bytes = 2048;
constexpr int64_t kPrefetchL2Bytes = 12288;

// A format: per block of a tile kScaleBytes of the 16 rows' scales (all blocks first), then kPieceBytes of
// weights; group() gives group g of 4 elements (4g..4g+3) of rows 8h..8h+7 as int8. (Plain AVX2 takes one
// group at a time: with all 8 live, its 4-row pass ran a third slower.)
struct Q8_0Tile {
  static constexpr bool kMin = false;
  static constexpr int64_t kScaleBytes = 32;   // 16 fp16 scales
  static constexpr int64_t kPieceBytes = 512;  // 8 lines of 16 rows x 4 bytes
  T2 static __m256i group(const uint8_t* piece, int h, int g) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(piece + 64 * g + 32 * h));
  }
  T2 static __m256 scales(const uint8_t* s, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16 * h)));
  }
};

// Group g of a nibble piece for rows 8h..8h+7: the low nibbles of line g for g < 4, the high ones of line g -
// 4, through the value table (elements 4g..4g+3 either way).
T2 inline __m256i nibble_group(const uint8_t* piece, const int8_t* values, int h, int g) {
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
  const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(piece + 64 * (g & 3) + 32 * h));
  const __m256i nibbles = g < 4 ? t : _mm256_srli_epi16(t, 4);
  return _mm256_shuffle_epi8(table, _mm256_and_si256(nibbles, _mm256_set1_epi8(0x0F)));
}

constexpr int8_t kQ4_0Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
constexpr int8_t kU4Values[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
constexpr int8_t kQ5_0Values[16] = {-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1};

T2 inline __m256 half_scales(const uint8_t* s, int h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16 * h)));
}

// Q4_0, IQ4_NL (kMin false) and Q4_1 (levels 0..15, with a min): the fp16 d of the 16 rows (then Q4_1's m),
// and 4 lines of nibble pairs, as MXFP4's.
template <const int8_t* kValues, bool kHasMin>
struct NibbleTile {
  static constexpr bool kMin = kHasMin;
  static constexpr int64_t kScaleBytes = kHasMin ? 64 : 32;
  static constexpr int64_t kPieceBytes = 256;
  T2 static __m256i group(const uint8_t* piece, int h, int g) { return nibble_group(piece, kValues, h, g); }
  T2 static __m256 scales(const uint8_t* s, int h) { return half_scales(s, h); }
  T2 static __m256 mins(const uint8_t* s, int h) { return half_scales(s + 32, h); }
};

// Q5_0 (levels q - 16) and Q5_1 (levels q, with a min): Q4_0's / Q4_1's nibble lines, then one line of the 16
// rows' u32 qh; group g's fifth bits (qh bits 4g..4g+3) spread to bit 4 of each byte by one multiply, as at
// the AVX-512 level (matmul_avx512_q8_0.cpp).
template <bool kHasMin>
struct Q5Tile {
  static constexpr bool kMin = kHasMin;
  static constexpr int64_t kScaleBytes = kHasMin ? 64 : 32;
  static constexpr int64_t kPieceBytes = 320;
  T2 static __m256i group(const uint8_t* piece, int h, int g) {
    const __m256i v = nibble_group(piece, kHasMin ? kU4Values : kQ5_0Values, h, g);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(piece + 256 + 32 * h));
    const __m256i bits = _mm256_and_si256(_mm256_srli_epi32(qh, 4 * g), _mm256_set1_epi32(0xF));
    const __m256i spread = _mm256_and_si256(_mm256_mullo_epi32(bits, _mm256_set1_epi32(0x00204081)),
                                            _mm256_set1_epi32(0x01010101));
    return _mm256_add_epi8(v, _mm256_slli_epi32(spread, 4));
  }
  T2 static __m256 scales(const uint8_t* s, int h) { return half_scales(s, h); }
  T2 static __m256 mins(const uint8_t* s, int h) { return half_scales(s + 32, h); }
};

struct Mxfp4Tile {
  static constexpr bool kMin = false;
  static constexpr int64_t kScaleBytes = 16;   // 16 E8M0 exponents
  static constexpr int64_t kPieceBytes = 256;  // 4 lines of 16 rows x 4 bytes of nibble pairs
  T2 static __m256i group(const uint8_t* piece, int h, int g) {
    return nibble_group(piece, kMxfp4Values, h, g);
  }
  // mxfp4_scale lane by lane: (e - 1) << 23 as float bits, the subnormal 2^21 << e for e = 0, 1.
  T2 static __m256 scales(const uint8_t* s, int h) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 8 * h)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small));
  }
};

// s[r] = the 32 products of block b for half h of the piece (8 rows), per lane.
template <class F>
struct MaddSums {
  static constexpr int kPassRows = 4;
  template <int NR>
  T2 static void block(const uint8_t* piece, int h, int64_t b, const uint8_t* const* x, __m256i* s) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < NR; ++r) s[r] = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i w = F::group(piece, h, g);
      const __m256i aw = _mm256_sign_epi8(w, w);
      for (int r = 0; r < NR; ++r) {
        const __m256i q = _mm256_sign_epi8(broadcast_u32(x[r] + 32 * b + 4 * g), w);
        s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, q), ones));
      }
    }
  }
};

template <class F>
struct VnniSums {
  static constexpr int kPassRows = 8;
  template <int NR>
  T2V static void block(const uint8_t* piece, int h, int64_t b, const uint8_t* const* x, __m256i* s) {
    const __m256i k80 = _mm256_set1_epi8(static_cast<char>(0x80));
    __m256i wv[8], corr = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      wv[g] = F::group(piece, h, g);
      corr = _mm256_dpbusd_avx_epi32(corr, k80, wv[g]);
    }
    corr = _mm256_sub_epi32(_mm256_setzero_si256(), corr);
    for (int r = 0; r < NR; ++r) {
      __m256i t = corr;
      for (int g = 0; g < 8; ++g)
        t = _mm256_dpbusd_avx_epi32(t, _mm256_xor_si256(broadcast_u32(x[r] + 32 * b + 4 * g), k80), wv[g]);
      s[r] = t;
    }
  }
};

template <class F, class Sums, int NR>
T2 void b32_pass(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l, float* acc) {
  const uint8_t* qs = tile + l.nb * F::kScaleBytes;
  for (int64_t b = 0; b < l.nb; ++b) {
    const uint8_t* piece = qs + b * F::kPieceBytes;
    for (int line = 0; line < F::kPieceBytes / 64; ++line) {
      _mm_prefetch(reinterpret_cast<const char*>(piece + kPrefetchL1Bytes + 64 * line), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(piece + kPrefetchL2Bytes + 64 * line), _MM_HINT_T1);
    }
    for (int h = 0; h < 2; ++h) {
      __m256i s[NR];
      Sums::template block<NR>(piece, h, b, x, s);
      const __m256 wd = F::scales(tile + b * F::kScaleBytes, h);
      __m256 wm = _mm256_setzero_ps();  // the min formats' m
      if constexpr (F::kMin) wm = F::mins(tile + b * F::kScaleBytes, h);
      for (int r = 0; r < NR; ++r) {
        float* a = acc + 16 * r + 8 * h;
        const __m256 dx = _mm256_set1_ps(act_d(x[r], l)[b]);
        __m256 y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r]), _mm256_mul_ps(wd, dx), _mm256_load_ps(a));
        if constexpr (F::kMin) {
          y = _mm256_fmadd_ps(_mm256_set1_ps(act_xsum(x[r], l)[b]), _mm256_mul_ps(wm, dx), y);
        }
        _mm256_store_ps(a, y);
      }
    }
  }
}

template <class F, class Sums>
struct Pass {
  template <int NR>
  T2 static void run(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l, float* acc) {
    b32_pass<F, Sums, NR>(tile, x, l, acc);
  }
};

template <class F>
void b32_packed(const uint8_t* tile, int64_t, int n_out, const uint8_t* const* x, int64_t nx,
                const ActLayout& l, float* y, int64_t y_stride) {
  using Madd = MaddSums<F>;
  using Vnni = VnniSums<F>;
  static constexpr auto kMadd = pass_table<Pass<F, Madd>>(std::make_integer_sequence<int, Madd::kPassRows>());
  static constexpr auto kVnni =
      pass_table<VnniEntry<Pass<F, Vnni>>>(std::make_integer_sequence<int, Vnni::kPassRows>());
  run_passes(kMadd, kVnni, tile, n_out, x, nx, l, y, y_stride);
}

// Row-format weights: the tile packed into a per-thread buffer first.
template <class F, GgmlType kType>
void b32_tile(const uint8_t* w, int64_t row_bytes, int n_out, const uint8_t* const* x, int64_t nx,
              const ActLayout& l, float* y, int64_t y_stride) {
  run_packed_on_row_format(b32_packed<F>, kType, w, row_bytes, n_out, x, nx, l, y, y_stride);
}

}  // namespace

TileFn avx2_b32_packed(GgmlType type) {
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
TileFn avx2_b32_tile(GgmlType type) {
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

TileFn avx2_b32_packed(GgmlType) {
  return nullptr;
}
TileFn avx2_b32_tile(GgmlType) {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
