// AVX-512 (F/BW/VL/DQ + VNNI) kernels: one weight row against up to 8 activation rows.
//
// Integer products use vpdpbusd (u8 x s8). The activations are stored offset by 128 (u = q + 128, unsigned)
// and the weights decoded to signed int8 w, so per 32-bit lane dpbusd gives sum_4 (q + 128) w; starting the
// accumulation from corr = -128 sum_4 w (computed once per weight vector, also with dpbusd) makes every lane
// the exact sum_4 q w. Lanes are converted to float (exact: they stay below 2^24, see the bounds below) and
// scaled. Each (weight row, activation row) pair runs the same instruction sequence whatever the number of
// rows in the call, so the result of a pair does not depend on the batch.
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

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

T512 inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

// -128 * (sum of the 4 bytes of w) per 32-bit lane.
T512 inline __m512i corr_of(__m512i w) {
  const __m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(0x80)), w);
  return _mm512_sub_epi32(_mm512_setzero_si512(), c);
}

T512 inline __m512 two_halves(float lo, float hi) {
  return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1);
}

T512 inline float hsum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

T512 inline float hsum512(__m512 v) {
  return hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// 32 bytes of nibble pairs (two 16-byte groups, byte j: element j low, element j + 16 high) -> 64 int8 values
// through a 16-entry table: [lo(g0), hi(g0), lo(g1), hi(g1)].
T512 inline __m512i nibbles64(__m256i t, __m512i table) {
  __m512i z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(t));
  z = _mm512_srlv_epi64(z, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
  return _mm512_shuffle_epi8(table, _mm512_and_si512(z, _mm512_set1_epi8(0x0F)));
}

T512 inline __m512i table_of(const int8_t* t16) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t16)));
}

constexpr int8_t kQ4_0Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

// ---- 32-element block types, dotted with Q8_0 activations (Q8_0 itself: matmul_avx512_q8_0.cpp) ----
// vals2: blocks b and b+1 -> 64 int8; vals1: block b in the low half, zeros above.

constexpr int8_t kU4Values[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// A block's decoder: kBytes, kMin (a second fp16, the min m, follows d: y = d v + m), and the levels v as int8
// of blocks b, b+1 (vals2) or of block b in the low half, zeros above (vals1); the nibbles start at byte
// kOffsetQs of a block.
template <const int8_t* kTable, int kBlockBytes = sizeof(BlockQ4_0), int kOffsetQs = 2, bool kHasMin = false>
struct DecNibble32 {  // Q4_0, IQ4_NL; Q4_1 (levels 0..15, with a min)
  static constexpr int kBytes = kBlockBytes;
  static constexpr bool kMin = kHasMin;
  T512 static __m512i vals2(const uint8_t* blk) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffsetQs));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kBytes + kOffsetQs));
    return nibbles64(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1), table_of(kTable));
  }
  T512 static __m512i vals1(const uint8_t* blk) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffsetQs));
    const __m256i z = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(a), _mm_srli_epi16(a, 4), 1), _mm256_set1_epi8(0x0F));
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kTable)));
    return _mm512_zextsi256_si512(_mm256_shuffle_epi8(t, z));
  }
};

// Q5_0 (levels - 16) and Q5_1 (levels 0..31, with a min): the nibbles as Q4_1's, plus 0x10 in byte j of a
// block where bit j of its u32 qh is set (a masked add: the u32 is the byte mask as it is).
template <int kQhOffset, int kOffset>
struct DecQ5 {
  static constexpr int kBytes = kQhOffset == 2 ? sizeof(BlockQ5_0) : sizeof(BlockQ5_1);
  static constexpr bool kMin = kOffset == 0;
  using Nibbles = DecNibble32<kU4Values, kBytes, kQhOffset + 4>;
  T512 static __m512i with_fifth(__m512i v, __mmask64 bits) {
    return _mm512_sub_epi8(_mm512_mask_add_epi8(v, bits, v, _mm512_set1_epi8(0x10)),
                           _mm512_set1_epi8(kOffset));
  }
  T512 static __mmask64 qh_bits(const uint8_t* blk) {
    uint32_t q;
    std::memcpy(&q, blk + kQhOffset, 4);
    return q;
  }
  T512 static __m512i vals2(const uint8_t* blk) {
    const __mmask64 bits = qh_bits(blk) | (static_cast<__mmask64>(qh_bits(blk + kBytes)) << 32);
    return with_fifth(Nibbles::vals2(blk), bits);
  }
  T512 static __m512i vals1(const uint8_t* blk) {
    // Zeros above the block stay zero: the offset only applies to its 32 bytes.
    const __m512i v = with_fifth(Nibbles::vals1(blk), qh_bits(blk));
    return _mm512_maskz_mov_epi8(0xFFFFFFFFull, v);
  }
};

// Lane bound: |sum_4 q w| <= 4 * 127 * 127 < 2^16, exact in float; the block scale is applied in float. The
// min formats add m * d_x * (the sum of the activations, four per lane: dpbusd of the offset activations with
// ones, less 4 * 128).
template <class Dec, int NR>
T512 void q8_0_family(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i ones = _mm512_set1_epi8(1);
  const int64_t nb = l.nb;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* blk = w + b * Dec::kBytes;
    const __m512i v = Dec::vals2(blk);
    const __m512 wd = two_halves(h2f(load_u16(blk)), h2f(load_u16(blk + Dec::kBytes)));
    const __m512i corr = corr_of(v);
    for (int r = 0; r < NR; ++r) {
      const __m512i xv = _mm512_loadu_si512(x[r] + 32 * b);
      const __m512i p = _mm512_dpbusd_epi32(corr, xv, v);
      const __m512 dx = _mm512_loadu_ps(act_dexp(x[r], l) + 8 * b);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(wd, dx), acc[r]);
      if constexpr (Dec::kMin) {
        const __m512i xs = _mm512_dpbusd_epi32(_mm512_set1_epi32(-512), xv, ones);
        const __m512 wm = two_halves(h2f(load_u16(blk + 2)), h2f(load_u16(blk + Dec::kBytes + 2)));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(xs), _mm512_mul_ps(wm, dx), acc[r]);
      }
    }
  }
  if (b < nb) {
    const uint8_t* blk = w + b * Dec::kBytes;
    const __m512i v = Dec::vals1(blk);
    const __m512 wd = _mm512_zextps256_ps512(_mm256_set1_ps(h2f(load_u16(blk))));
    const __m512i corr = corr_of(v);
    for (int r = 0; r < NR; ++r) {
      const __m512i xv =
          _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r] + 32 * b)));
      const __m512i p = _mm512_dpbusd_epi32(corr, xv, v);
      const __m512 dx = _mm512_zextps256_ps512(_mm256_loadu_ps(act_dexp(x[r], l) + 8 * b));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(wd, dx), acc[r]);
      if constexpr (Dec::kMin) {
        const __m512i xs = _mm512_dpbusd_epi32(_mm512_zextsi256_si512(_mm256_set1_epi32(-512)), xv,
                                               _mm512_zextsi256_si512(_mm256_set1_epi8(1)));
        const __m512 wm = _mm512_zextps256_ps512(_mm256_set1_ps(h2f(load_u16(blk + 2))));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(xs), _mm512_mul_ps(wm, dx), acc[r]);
      }
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = hsum512(acc[r]);
}

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

template <class Dec>
void q8_0_rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  switch (nr) {
    case 1:
      return q8_0_family<Dec, 1>(w, x, l, out);
    case 2:
      return q8_0_family<Dec, 2>(w, x, l, out);
    case 3:
      return q8_0_family<Dec, 3>(w, x, l, out);
    case 4:
      return q8_0_family<Dec, 4>(w, x, l, out);
    case 5:
      return q8_0_family<Dec, 5>(w, x, l, out);
    case 6:
      return q8_0_family<Dec, 6>(w, x, l, out);
    case 7:
      return q8_0_family<Dec, 7>(w, x, l, out);
    default:
      return q8_0_family<Dec, 8>(w, x, l, out);
  }
}

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
  s.dot[static_cast<int>(GgmlType::Q4_0)] = q8_0_rows<DecNibble32<kQ4_0Values>>;
  s.dot[static_cast<int>(GgmlType::Q4_1)] = q8_0_rows<DecNibble32<kU4Values, sizeof(BlockQ4_1), 4, true>>;
  s.dot[static_cast<int>(GgmlType::Q5_0)] = q8_0_rows<DecQ5<2, 16>>;
  s.dot[static_cast<int>(GgmlType::Q5_1)] = q8_0_rows<DecQ5<4, 0>>;
  s.dot[static_cast<int>(GgmlType::IQ4_NL)] = q8_0_rows<DecNibble32<kIq4nlValues>>;
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
  // Q8_0: one kernel for every batch (matmul_avx512_q8_0.cpp), over packed tiles.
  s.tile[static_cast<int>(GgmlType::Q8_0)] = avx512_q8_0_tile();
  s.packed[static_cast<int>(GgmlType::Q8_0)] = avx512_q8_0_packed();
  s.tile_min_rows[static_cast<int>(GgmlType::Q8_0)] = 1;
  // MXFP4 likewise (the same file): an expert-shaped matrix 1.7x the row kernel at one row,
  // 2.3-2.6x at 4-8 rows and on prompt batches.
  s.tile[static_cast<int>(GgmlType::MXFP4)] = avx512_mxfp4_tile();
  s.packed[static_cast<int>(GgmlType::MXFP4)] = avx512_mxfp4_packed();
  s.tile_min_rows[static_cast<int>(GgmlType::MXFP4)] = 1;
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
