// AVX2 kernels for Q8_0 and MXFP4 weights x Q8_0 activations over packed tiles (kernels/pack.h): 8 weight
// rows of a tile in the lanes of each register, any number of activation rows. Row-format matrices are packed
// tile by tile on the fly and run through the same code (as at the AVX-512 level), so a pair's result does
// not depend on the layout, the batch or the split.
//
// Canonical order of one (weight row, activation row) pair, that of the AVX-512 kernels
// (matmul_avx512_q8_0.cpp), so both levels give the same bits: isum_b = the 32 products of block b summed in
// integers (exact), then y = fma(float(isum_b), d_w(b) * d_x(b), y) for b = 0, 1, ... in order, d_w the fp16
// scale of Q8_0 or MXFP4's 2^(e - 128).
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
  static constexpr int64_t kScaleBytes = 32;   // 16 fp16 scales
  static constexpr int64_t kPieceBytes = 512;  // 8 lines of 16 rows x 4 bytes
  T2 static __m256i group(const uint8_t* piece, int h, int g) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(piece + 64 * g + 32 * h));
  }
  T2 static __m256 scales(const uint8_t* s, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16 * h)));
  }
};

struct Mxfp4Tile {
  static constexpr int64_t kScaleBytes = 16;   // 16 E8M0 exponents
  static constexpr int64_t kPieceBytes = 256;  // 4 lines of 16 rows x 4 bytes of nibble pairs
  // Group g: the low nibbles of line g for g < 4, the high ones of line g - 4, through the value table.
  T2 static __m256i group(const uint8_t* piece, int h, int g) {
    const __m256i table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
    const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(piece + 64 * (g & 3) + 32 * h));
    const __m256i nibbles = g < 4 ? t : _mm256_srli_epi16(t, 4);
    return _mm256_shuffle_epi8(table, _mm256_and_si256(nibbles, _mm256_set1_epi8(0x0F)));
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
      for (int r = 0; r < NR; ++r) {
        float* a = acc + 16 * r + 8 * h;
        const __m256 c = _mm256_mul_ps(wd, _mm256_set1_ps(act_d(x[r], l)[b]));
        _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r]), c, _mm256_load_ps(a)));
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
  static constexpr auto kVnni = pass_table<Pass<F, Vnni>>(std::make_integer_sequence<int, Vnni::kPassRows>());
  run_passes(kMadd, kVnni, tile, n_out, x, nx, l, y, y_stride);
}

// Row-format weights: the tile packed into a per-thread buffer first.
template <class F, GgmlType kType>
void b32_tile(const uint8_t* w, int64_t row_bytes, int n_out, const uint8_t* const* x, int64_t nx,
              const ActLayout& l, float* y, int64_t y_stride) {
  run_packed_on_row_format(b32_packed<F>, kType, w, row_bytes, n_out, x, nx, l, y, y_stride);
}

}  // namespace

TileFn avx2_q8_0_packed() {
  return b32_packed<Q8_0Tile>;
}
TileFn avx2_q8_0_tile() {
  return b32_tile<Q8_0Tile, GgmlType::Q8_0>;
}
TileFn avx2_mxfp4_packed() {
  return b32_packed<Mxfp4Tile>;
}
TileFn avx2_mxfp4_tile() {
  return b32_tile<Mxfp4Tile, GgmlType::MXFP4>;
}

#else

TileFn avx2_q8_0_packed() {
  return nullptr;
}
TileFn avx2_q8_0_tile() {
  return nullptr;
}
TileFn avx2_mxfp4_packed() {
  return nullptr;
}
TileFn avx2_mxfp4_tile() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
