// Small AVX2 helpers shared by the AVX2 kernel files (each file keeps its own kernels).
#pragma once

#include <cstdint>
#include <cstring>

#include "matmul_internal.h"

#if MTP_HAVE_X86_SIMD
#include <immintrin.h>

namespace mtp::kernels::detail {

// The 4 bytes at p in every 32-bit lane (an activation row's 4-byte group against 8 weight rows).
MTP_TARGET_AVX2 inline __m256i broadcast_u32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The sum of the 8 int32 lanes (exact while it fits).
MTP_TARGET_AVX2 inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Up to kMaxTileRows activation rows, 4 at a time, through kernel.template operator()<NR>(first row): each
// pair's instructions are the same whatever nr is (batch invariance).
template <class Kernel>
inline void rows_by_four(int nr, Kernel&& kernel) {
  for (int i = 0; i < nr; i += 4) {
    switch (nr - i) {
      case 1:
        kernel.template operator()<1>(i);
        break;
      case 2:
        kernel.template operator()<2>(i);
        break;
      case 3:
        kernel.template operator()<3>(i);
        break;
      default:
        kernel.template operator()<4>(i);
    }
  }
}

}  // namespace mtp::kernels::detail

#endif
