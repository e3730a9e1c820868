// AVX-512 VNNI kernel for Q8_0 weights x Q8_0 activations over packed tiles (kernels/pack.h): the 16 weight
// rows of a tile in the lanes of each vector, any number of activation rows. Row-format matrices are packed
// tile by tile on the fly and run through the same code, so a pair's result does not depend on the layout,
// the batch or the split.
//
// Canonical order of one (weight row, activation row) pair: isum_b = the 32 products of block b summed in
// integers (exact: |isum_b| <= 32 * 127 * 127 < 2^24, so also exact as a float), then
//   y = fma(float(isum_b), d_w(b) * d_x(b), y)      for b = 0, 1, ... in order
// (one rounding for the scale product and one per fma). Activations are stored offset by 128 (u8) for
// vpdpbusd; each lane starts from corr = -128 * (sum of its weights) to cancel the offset.
#include <algorithm>
#include <cstring>

#include "avx512_tile.h"
#include "matmul_internal.h"

#if MTP_HAVE_X86_SIMD
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace mtp::kernels::detail {

#if MTP_HAVE_X86_SIMD
namespace {

#define T512 MTP_TARGET_AVX512

constexpr int64_t kScaleBytes = 32;   // per block: 16 fp16 scales
constexpr int64_t kPieceBytes = 512;  // per block: 8 lines of 16 rows x 4 bytes
// Weights stream from DRAM at decode: each block requests the bytes this far ahead into L1, and further into
// L2 (see the IQ4_XS kernel; one core's 248K-row head from DRAM 42-43 -> 38-39 ms).
constexpr int64_t kPrefetchBytes = 2048;
constexpr int64_t kPrefetchL2Bytes = 12288;

template <int NR>
T512 void q8_0_rows(const uint8_t* tile, int64_t nb, const uint8_t* const* x, const ActLayout& l, int n_out,
                    float* y, int64_t y_stride) {
  const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
  const uint8_t* qs = tile + nb * kScaleBytes;
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* piece = qs + b * kPieceBytes;
    for (int q = 0; q < 8; ++q) {
      _mm_prefetch(reinterpret_cast<const char*>(piece + kPrefetchBytes + 64 * q), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(piece + kPrefetchL2Bytes + 64 * q), _MM_HINT_T1);
    }
    // Integer sums in two chains each (exact, so any grouping gives the same bits): one chain of 8
    // dependent vpdpbusd would leave the kernel latency-bound.
    __m512i wv[8];
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    for (int g = 0; g < 8; g += 2) {
      wv[g] = _mm512_loadu_si512(piece + 64 * g);
      wv[g + 1] = _mm512_loadu_si512(piece + 64 * g + 64);
      s0 = _mm512_dpbusd_epi32(s0, k80, wv[g]);
      s1 = _mm512_dpbusd_epi32(s1, k80, wv[g + 1]);
    }
    const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_add_epi32(s0, s1));
    const __m512 wd =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + b * kScaleBytes)));
    for (int r = 0; r < NR; ++r) {
      const __m512i t = dot32_lanes(corr, x[r] + 32 * b, wv);
      const __m512 c = _mm512_mul_ps(wd, _mm512_set1_ps(act_d(x[r], l)[b]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), c, acc[r]);
    }
  }
  const __mmask16 m =
      n_out >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n_out) - 1);
  for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(y + r * y_stride, m, acc[r]);
}

T512 void q8_0_packed(const uint8_t* tile, int64_t, int n_out, const uint8_t* const* x, int64_t nx,
                      const ActLayout& l, float* y, int64_t y_stride) {
  using RowsFn =
      void (*)(const uint8_t*, int64_t, const uint8_t* const*, const ActLayout&, int, float*, int64_t);
  static constexpr RowsFn kRows[9] = {nullptr,      q8_0_rows<1>, q8_0_rows<2>, q8_0_rows<3>, q8_0_rows<4>,
                                      q8_0_rows<5>, q8_0_rows<6>, q8_0_rows<7>, q8_0_rows<8>};
  // Groups of 8 rows over the same tile (from L1/L2 after the first).
  for (int64_t i = 0; i < nx; i += 8) {
    const int64_t n = std::min<int64_t>(8, nx - i);
    kRows[n](tile, l.nb, x + i, l, n_out, y + i * y_stride, y_stride);
  }
}

// Row-format weights: the tile packed into a per-thread buffer first.
void q8_0_tile(const uint8_t* w, int64_t row_bytes, int n_out, const uint8_t* const* x, int64_t nx,
               const ActLayout& l, float* y, int64_t y_stride) {
  run_packed_on_row_format(q8_0_packed, GgmlType::Q8_0, w, row_bytes, n_out, x, nx, l, y, y_stride);
}

}  // namespace

TileFn avx512_q8_0_packed() {
  return q8_0_packed;
}
TileFn avx512_q8_0_tile() {
  return q8_0_tile;
}

#else

TileFn avx512_q8_0_packed() {
  return nullptr;
}
TileFn avx512_q8_0_tile() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
