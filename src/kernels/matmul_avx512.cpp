// AVX-512 (F/BW/VL/DQ + VNNI): the float-weight kernels (one weight row against up to 8 activation rows, and
// register blocks of weight x activation rows) and the level's kernel table; the quantized types run in the
// matmul_avx512_*.cpp files named below. Each (weight row, activation row) pair runs the same instruction
// sequence whatever the number of rows in the call, so the result of a pair does not depend on the batch.
#include <algorithm>
#include <cstring>

#include "matmul_internal.h"
#include "quant/blocks.h"

#if MTP_HAVE_X86_SIMD
// GCC 12's AVX-512 headers build "undefined" vectors as `__m512 __Y = __Y;`, which -Wuninitialized reports at
// every inlined use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace mtp::kernels::detail {

#if MTP_HAVE_X86_SIMD
namespace {

#define T512 MTP_TARGET_AVX512

T512 inline float hsum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

T512 inline float hsum512(__m512 v) {
  return hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// (The 32-element block types run packed, in matmul_avx512_q8_0.cpp.)
// (The 256-element super-block types: the AVX2 row kernels, and the packed kernels of
// matmul_avx512_q45k.cpp, matmul_avx512_q6k.cpp and matmul_avx512_iq4xs.cpp.)

// ---- float weights with f32 activations (zero-padded to 16) ----

enum class FKind { kF32, kF16, kBF16 };

template <FKind kKind>
T512 inline __m512 load_w16(const uint8_t* w, int64_t i, __mmask16 m) {
  if constexpr (kKind == FKind::kF32) {
    return _mm512_maskz_loadu_ps(m, w + 4 * i);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, w + 2 * i);
    if constexpr (kKind == FKind::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <FKind kKind, int NR>
T512 void float_family(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t c = 0; c < l.nb; ++c) {
    const int64_t left = l.n_in - 16 * c;
    const __mmask16 m =
        left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
    const __m512 wv = load_w16<kKind>(w, 16 * c, m);
    for (int r = 0; r < NR; ++r)
      acc[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(act_f32(x[r]) + 16 * c), acc[r]);
  }
  for (int r = 0; r < NR; ++r) out[r] = hsum512(acc[r]);
}

// Batches of float-weight rows (the router over a prompt chunk or many sequences): weight rows x activation
// rows in register blocks of NW x NX pairs, each weight and activation vector loaded once per block instead
// of once per pair (the row kernel at 8 rows loads 9 vectors per 8 multiply-adds and reads the rows'
// activations from L2 for every weight row). Per pair exactly the row kernel's arithmetic: one accumulator
// over the 16-wide chunks in order, then hsum512, so the results are bitwise those of float_family.
template <FKind kKind, int NW, int NX>
T512 void float_block(const uint8_t* w, int64_t row_bytes, const uint8_t* const* x, const ActLayout& l,
                      float* y, int64_t y_stride) {
  __m512 acc[NW][NX];
  for (int o = 0; o < NW; ++o)
    for (int r = 0; r < NX; ++r) acc[o][r] = _mm512_setzero_ps();
  for (int64_t c = 0; c < l.nb; ++c) {
    const int64_t left = l.n_in - 16 * c;
    const __mmask16 m =
        left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
    __m512 wv[NW];
    for (int o = 0; o < NW; ++o) wv[o] = load_w16<kKind>(w + o * row_bytes, 16 * c, m);
    for (int r = 0; r < NX; ++r) {
      const __m512 xv = _mm512_loadu_ps(act_f32(x[r]) + 16 * c);
      for (int o = 0; o < NW; ++o) acc[o][r] = _mm512_fmadd_ps(wv[o], xv, acc[o][r]);
    }
  }
  // Unrolled, so that acc stays a set of registers: with an indexed loop here GCC keeps the array in memory
  // and stores every accumulator on each step of the loop above (half the speed).
#pragma GCC unroll 16
  for (int o = 0; o < NW; ++o)
#pragma GCC unroll 16
    for (int r = 0; r < NX; ++r) y[r * y_stride + o] = hsum512(acc[o][r]);
}

// TileFn: n_out <= 16 weight rows against nx activation rows, 4 x 4 blocks (the edges: blocks of 1 weight row
// and of 1-3 activation rows).
template <FKind kKind>
T512 void float_tile(const uint8_t* w, int64_t row_bytes, int n_out, const uint8_t* const* x, int64_t nx,
                     const ActLayout& l, float* y, int64_t y_stride) {
  using BlockFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, const ActLayout&, float*, int64_t);
  static constexpr BlockFn kBlocks[2][5] = {{nullptr, float_block<kKind, 1, 1>, float_block<kKind, 1, 2>,
                                             float_block<kKind, 1, 3>, float_block<kKind, 1, 4>},
                                            {nullptr, float_block<kKind, 4, 1>, float_block<kKind, 4, 2>,
                                             float_block<kKind, 4, 3>, float_block<kKind, 4, 4>}};
  for (int o = 0; o < n_out;) {
    const int nw = n_out - o >= 4 ? 4 : 1;
    for (int64_t r = 0; r < nx; r += 4) {
      const int64_t nr = std::min<int64_t>(4, nx - r);
      kBlocks[nw == 4][nr](w + o * row_bytes, row_bytes, x + r, l, y + r * y_stride + o, y_stride);
    }
    o += nw;
  }
}

// ---- dispatch on the number of rows ----

template <FKind kKind>
void float_rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  switch (nr) {
    case 1:
      return float_family<kKind, 1>(w, x, l, out);
    case 2:
      return float_family<kKind, 2>(w, x, l, out);
    case 3:
      return float_family<kKind, 3>(w, x, l, out);
    case 4:
      return float_family<kKind, 4>(w, x, l, out);
    case 5:
      return float_family<kKind, 5>(w, x, l, out);
    case 6:
      return float_family<kKind, 6>(w, x, l, out);
    case 7:
      return float_family<kKind, 7>(w, x, l, out);
    default:
      return float_family<kKind, 8>(w, x, l, out);
  }
}

KernelSet make_set() {
  KernelSet s;
  s.tile_rows = 8;
  s.dot[static_cast<int>(GgmlType::F32)] = float_rows<FKind::kF32>;
  s.dot[static_cast<int>(GgmlType::F16)] = float_rows<FKind::kF16>;
  s.dot[static_cast<int>(GgmlType::BF16)] = float_rows<FKind::kBF16>;
  // Float weights over 4 rows and more: register blocks of 4 weight x 4 activation rows (same bits).
  s.tile[static_cast<int>(GgmlType::F32)] = float_tile<FKind::kF32>;
  s.tile[static_cast<int>(GgmlType::F16)] = float_tile<FKind::kF16>;
  s.tile[static_cast<int>(GgmlType::BF16)] = float_tile<FKind::kBF16>;
  s.tile_min_rows[static_cast<int>(GgmlType::F32)] = 4;
  s.tile_min_rows[static_cast<int>(GgmlType::F16)] = 4;
  s.tile_min_rows[static_cast<int>(GgmlType::BF16)] = 4;
  // Q4_K, Q5_K: the AVX2 row kernel (AVX2 instructions run here too) and the packed AVX-512 kernel that gives
  // its bits (matmul_avx512_q45k.cpp); decode of an 8-layer Q4_K file 1.5-1.8x the row kernels of before.
  // Q3_K: the AVX2 row kernel and the packed AVX-512 kernel that gives its bits (matmul_avx512_q6k.cpp).
  s.dot[static_cast<int>(GgmlType::Q3_K)] = avx2_q3k_rows();
  s.packed[static_cast<int>(GgmlType::Q3_K)] = avx512_q3k_packed();
  s.dot[static_cast<int>(GgmlType::Q2_K)] = avx2_q2k_rows();  // likewise (the same file)
  s.packed[static_cast<int>(GgmlType::Q2_K)] = avx512_q2k_packed();
  s.dot[static_cast<int>(GgmlType::Q4_K)] = avx2_k45_rows(false);
  s.packed[static_cast<int>(GgmlType::Q4_K)] = avx512_k45_packed(false);
  s.dot[static_cast<int>(GgmlType::Q5_K)] = avx2_k45_rows(true);
  s.packed[static_cast<int>(GgmlType::Q5_K)] = avx512_k45_packed(true);
  s.dot[static_cast<int>(GgmlType::Q6_K)] = avx2_q6k_rows();  // the same way, matmul_avx512_q6k.cpp
  s.packed[static_cast<int>(GgmlType::Q6_K)] = avx512_q6k_packed();
  // IQ4_XS: the row and tile kernels of matmul_avx512_iq4xs.cpp (one summation order for both).
  s.dot[static_cast<int>(GgmlType::IQ4_XS)] = avx512_iq4xs_rows();
  s.tile[static_cast<int>(GgmlType::IQ4_XS)] = avx512_iq4xs_tile();
  s.packed[static_cast<int>(GgmlType::IQ4_XS)] = avx512_iq4xs_packed();
  // From 4 rows the tile kernel is faster (kernels_bench); at 1-3 rows the row kernel, on weights streamed
  // from DRAM (the output head). Either gives the same bits.
  s.tile_min_rows[static_cast<int>(GgmlType::IQ4_XS)] = 4;
  // The 32-element block types: one kernel for every batch (matmul_avx512_q8_0.cpp), over packed tiles;
  // MXFP4 there ran an expert-shaped matrix 1.7x the row kernel at one row, 2.3-2.6x at 4-8 rows and on
  // prompt batches.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::MXFP4}) {
    s.tile[static_cast<int>(t)] = avx512_b32_tile(t);
    s.packed[static_cast<int>(t)] = avx512_b32_packed(t);
    s.tile_min_rows[static_cast<int>(t)] = 1;
  }
  return s;
}

}  // namespace

const KernelSet& avx512_kernels() {
  static const KernelSet set = make_set();
  return set;
}

#else

const KernelSet& avx512_kernels() {
  static const KernelSet set;
  return set;
}

#endif

}  // namespace mtp::kernels::detail
