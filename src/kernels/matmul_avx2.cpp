// AVX2 + FMA + F16C kernels: one weight row against up to 4 activation rows, 32 elements per step.
//
// Integer products use the sign trick (vpmaddubsw cannot saturate with |w| <= 128 and |q| <= 127): per
// 32-bit lane, madd(maddubs(|w|, sign(q, w)), 1) = sum_4 q w exactly. Lanes are converted to float (exact)
// and scaled. Each (weight row, activation row) pair runs the same instruction sequence whatever the number
// of rows in the call.
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

#define T2 MTP_TARGET_AVX2

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

T2 inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

T2 inline __m256i loadu256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Exact sum_4 q w per 32-bit lane; aw = |w| precomputed per weight vector.
T2 inline __m256i idot(__m256i aw, __m256i w, __m256i q) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(q, w)), _mm256_set1_epi16(1));
}

T2 inline float hsum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// 16 bytes of nibble pairs -> 32 int8 through a 16-entry table: [lo(bytes), hi(bytes)].
T2 inline __m256i nibbles32(__m128i v, const int8_t* table) {
  const __m256i z = _mm256_and_si256(
      _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1), _mm256_set1_epi8(0x0F));
  const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
  return _mm256_shuffle_epi8(t, z);
}

constexpr int8_t kQ4_0Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

// ---- 32-element block types with Q8_0 activations ----

constexpr int8_t kU4Values[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// A block's decoder: kBytes, kMin (a second fp16, the min m, follows d: y = d v + m) and vals(block), the 32
// levels v as int8.
template <const int8_t* kTable>
struct DecNibble32 {  // Q4_0, IQ4_NL
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static constexpr bool kMin = false;
  T2 static __m256i vals(const uint8_t* blk) {
    return nibbles32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)), kTable);
  }
};
struct DecQ4_1 {
  static constexpr int kBytes = sizeof(BlockQ4_1);
  static constexpr bool kMin = true;
  T2 static __m256i vals(const uint8_t* blk) {
    return nibbles32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4)), kU4Values);
  }
};

// The fifth bits of Q5_0 / Q5_1 (the u32 qh, bit j for element j) as 0x10 in byte j.
T2 inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}
template <int kQhOffset, int kOffset>
struct DecQ5 {  // Q5_0 (kOffset 16), Q5_1 (0, with a min)
  static constexpr int kBytes = kQhOffset == 2 ? sizeof(BlockQ5_0) : sizeof(BlockQ5_1);
  static constexpr bool kMin = kOffset == 0;
  T2 static __m256i vals(const uint8_t* blk) {
    const __m256i v = _mm256_or_si256(
        nibbles32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQhOffset + 4)), kU4Values),
        fifth_bits(blk + kQhOffset));
    return _mm256_sub_epi8(v, _mm256_set1_epi8(kOffset));
  }
};

template <class Dec, int NR>
T2 void q8_0_family(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < l.nb; ++b) {
    const uint8_t* blk = w + b * Dec::kBytes;
    const __m256i v = Dec::vals(blk);
    const __m256i av = _mm256_sign_epi8(v, v);
    const __m256 wd = _mm256_set1_ps(h2f(load_u16(blk)));
    for (int r = 0; r < NR; ++r) {
      const __m256i q = loadu256(x[r] + 32 * b);
      const __m256 dx = _mm256_loadu_ps(act_dexp(x[r], l) + 8 * b);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot(av, v, q)), _mm256_mul_ps(wd, dx), acc[r]);
      if constexpr (Dec::kMin) {
        // m * d_x * (the sum of the activations), four per lane.
        const __m256i xs =
            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
        const __m256 wm = _mm256_set1_ps(h2f(load_u16(blk + 2)));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(xs), _mm256_mul_ps(wm, dx), acc[r]);
      }
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = hsum256(acc[r]);
}

// (The 256-element super-block types run in matmul_avx2_q45k.cpp, matmul_avx2_q6k.cpp and
// matmul_avx2_iq4xs.cpp.)

// ---- float weights with f32 activations (zero-padded to 16) ----

enum class FKind { kF32, kF16, kBF16 };

template <FKind kKind>
T2 inline __m256 load_w8(const uint8_t* w, int64_t i, int64_t n) {
  const int64_t left = n - i;
  if constexpr (kKind == FKind::kF32) {
    if (left >= 8) return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i);
    if (left <= 0) return _mm256_setzero_ps();
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(reinterpret_cast<const float*>(w) + i, m);
  } else {
    __m128i h;
    if (left >= 8) {
      h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i));
    } else {
      alignas(16) uint16_t tmp[8] = {};
      if (left > 0) std::memcpy(tmp, w + 2 * i, static_cast<size_t>(left) * 2);
      h = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
    }
    if constexpr (kKind == FKind::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <FKind kKind, int NR>
T2 void float_family(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t c = 0; c < 2 * l.nb; ++c) {
    const __m256 wv = load_w8<kKind>(w, 8 * c, l.n_in);
    for (int r = 0; r < NR; ++r) acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(act_f32(x[r]) + 8 * c), acc[r]);
  }
  for (int r = 0; r < NR; ++r) out[r] = hsum256(acc[r]);
}

template <class Dec>
void q8_0_rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  switch (nr) {
    case 1:
      return q8_0_family<Dec, 1>(w, x, l, out);
    case 2:
      return q8_0_family<Dec, 2>(w, x, l, out);
    case 3:
      return q8_0_family<Dec, 3>(w, x, l, out);
    default:
      return q8_0_family<Dec, 4>(w, x, l, out);
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
    default:
      return float_family<kKind, 4>(w, x, l, out);
  }
}

KernelSet make_set() {
  KernelSet s;
  s.tile_rows = 4;
  s.dot[static_cast<int>(GgmlType::F32)] = float_rows<FKind::kF32>;
  s.dot[static_cast<int>(GgmlType::F16)] = float_rows<FKind::kF16>;
  s.dot[static_cast<int>(GgmlType::BF16)] = float_rows<FKind::kBF16>;
  // Q8_0: one kernel for every batch (matmul_avx2_q8_0.cpp), over packed tiles.
  s.tile[static_cast<int>(GgmlType::Q8_0)] = avx2_q8_0_tile();
  s.packed[static_cast<int>(GgmlType::Q8_0)] = avx2_q8_0_packed();
  s.tile_min_rows[static_cast<int>(GgmlType::Q8_0)] = 1;
  // MXFP4 likewise (the same file, the same bits as the AVX-512 level).
  s.tile[static_cast<int>(GgmlType::MXFP4)] = avx2_mxfp4_tile();
  s.packed[static_cast<int>(GgmlType::MXFP4)] = avx2_mxfp4_packed();
  s.tile_min_rows[static_cast<int>(GgmlType::MXFP4)] = 1;
  s.dot[static_cast<int>(GgmlType::Q4_0)] = q8_0_rows<DecNibble32<kQ4_0Values>>;
  s.dot[static_cast<int>(GgmlType::Q4_1)] = q8_0_rows<DecQ4_1>;
  s.dot[static_cast<int>(GgmlType::Q5_0)] = q8_0_rows<DecQ5<2, 16>>;
  s.dot[static_cast<int>(GgmlType::Q5_1)] = q8_0_rows<DecQ5<4, 0>>;
  s.dot[static_cast<int>(GgmlType::IQ4_NL)] = q8_0_rows<DecNibble32<kIq4nlValues>>;
  s.dot[static_cast<int>(GgmlType::Q2_K)] = avx2_q2k_rows();
  s.packed[static_cast<int>(GgmlType::Q2_K)] = avx2_q2k_packed();
  s.dot[static_cast<int>(GgmlType::Q3_K)] = avx2_q3k_rows();
  s.packed[static_cast<int>(GgmlType::Q3_K)] = avx2_q3k_packed();
  s.dot[static_cast<int>(GgmlType::Q4_K)] = avx2_k45_rows(false);
  s.packed[static_cast<int>(GgmlType::Q4_K)] = avx2_k45_packed(false);
  s.dot[static_cast<int>(GgmlType::Q5_K)] = avx2_k45_rows(true);
  s.packed[static_cast<int>(GgmlType::Q5_K)] = avx2_k45_packed(true);
  s.dot[static_cast<int>(GgmlType::Q6_K)] = avx2_q6k_rows();
  s.packed[static_cast<int>(GgmlType::Q6_K)] = avx2_q6k_packed();
  s.dot[static_cast<int>(GgmlType::IQ4_XS)] = avx2_iq4xs_rows();
  s.packed[static_cast<int>(GgmlType::IQ4_XS)] = avx2_iq4xs_packed();
  return s;
}

}  // namespace

const KernelSet& avx2_kernels() {
  static const KernelSet set = make_set();
  return set;
}

#else

const KernelSet& avx2_kernels() {
  static const KernelSet set;
  return set;
}

#endif

}  // namespace mtp::kernels::detail
