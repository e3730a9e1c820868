// Shared piece of the AVX-512 tile kernels (the 16 weight rows of a tile in the lanes of each vector).
#pragma once

#include <cstdint>
#include <cstring>

#include "matmul_internal.h"

#if MTP_HAVE_X86_SIMD
#include <immintrin.h>

namespace mtp::kernels::detail {

// init + the sum of 32 products per lane: activation bytes xs[0..31] broadcast 4 at a time against the
// weight vectors wv[0..7] (lane o: 4 weights of row o). By default the activations are vpdpbusd's unsigned
// operand (stored offset by 128) and the weights int8; with kUnsignedWeights the weights are unsigned and xs
// the signed activations. Two dependency chains: one chain of 8 vpdpbusd is latency-bound, and integer sums
// are exact, so the grouping changes no bit.
template <bool kUnsignedWeights = false>
MTP_TARGET_AVX512 inline __m512i dot32_lanes(__m512i init, const void* xs, const __m512i* wv) {
  const auto* xb = static_cast<const uint8_t*>(xs);
  __m512i s0 = init, s1 = _mm512_setzero_si512();
  for (int g = 0; g < 8; g += 2) {
    int32_t x0, x1;
    std::memcpy(&x0, xb + 4 * g, 4);
    std::memcpy(&x1, xb + 4 * g + 4, 4);
    if constexpr (kUnsignedWeights) {
      s0 = _mm512_dpbusd_epi32(s0, wv[g], _mm512_set1_epi32(x0));
      s1 = _mm512_dpbusd_epi32(s1, wv[g + 1], _mm512_set1_epi32(x1));
    } else {
      s0 = _mm512_dpbusd_epi32(s0, _mm512_set1_epi32(x0), wv[g]);
      s1 = _mm512_dpbusd_epi32(s1, _mm512_set1_epi32(x1), wv[g + 1]);
    }
  }
  return _mm512_add_epi32(s0, s1);
}

}  // namespace mtp::kernels::detail
#endif
