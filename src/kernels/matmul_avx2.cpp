// AVX2 + FMA + F16C: the float-weight kernels (one weight row against up to 4 activation rows) and the
// level's kernel table. Each (weight row, activation row) pair runs the same instruction sequence whatever
// the number of rows in the call.
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

T2 inline float hsum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// (The 32-element block types run packed, in matmul_avx2_q8_0.cpp.)
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
  // The 32-element block types: one kernel for every batch (matmul_avx2_q8_0.cpp), over packed tiles.
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::MXFP4}) {
    s.tile[static_cast<int>(t)] = avx2_b32_tile(t);
    s.packed[static_cast<int>(t)] = avx2_b32_packed(t);
    s.tile_min_rows[static_cast<int>(t)] = 1;
  }
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
