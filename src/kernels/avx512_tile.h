// Shared piece of the AVX-512 tile kernels (the 16 weight rows of a tile in the lanes of each vector).
#pragma once

#include <cstdint>
#include <cstring>

#include "matmul_internal.h"

#if MTP_HAVE_X86_SIMD
#include <immintrin.h>

namespace mtp::kernels::detail {

// acc + vpdpbusd(u8, the 4 signed bytes at s8x4 broadcast to every lane), the bytes as the instruction's
// broadcast memory operand ({1to16}) instead of a separate vpbroadcastd. GCC 12 does not fold a set1 into
// vpdpbusd by itself.
MTP_TARGET_AVX512 inline __m512i dpbusd_bcst(__m512i acc, __m512i u8, const uint8_t* s8x4) {
#if defined(__GNUC__) && !defined(__clang__)
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u8), "m"(*reinterpret_cast<const int32_t*>(s8x4)));
  return acc;
#else
  int32_t x;
  std::memcpy(&x, s8x4, 4);
  return _mm512_dpbusd_epi32(acc, u8, _mm512_set1_epi32(x));
#endif
}

// init + the sum of 32 products per lane: activation bytes xs[0..31] broadcast 4 at a time against the
// weight vectors wv[0..7] (lane o: 4 weights of row o). By default the activations are vpdpbusd's unsigned
// operand (stored offset by 128) and the weights int8; with kUnsignedWeights the weights are unsigned and xs
// the signed activations. Two dependency chains: one chain of 8 vpdpbusd is latency-bound, and integer sums
// are exact, so the grouping changes no bit.
//
// With kBroadcastOperand (unsigned weights only) the activation bytes are vpdpbusd's memory operand. On Zen
// 4, alternating the two forms pass by pass over whole forward passes of the 35B-A3B widths (t=2): 4 rows
// 1-5% less time, 5 rows 2-6%, 8 rows 2-3%, 1-2 rows within noise. The 1-row product is memory-bound and
// keeps the separate broadcast.
template <bool kUnsignedWeights = false, bool kBroadcastOperand = false>
MTP_TARGET_AVX512 inline __m512i dot32_lanes(__m512i init, const void* xs, const __m512i* wv) {
  const auto* xb = static_cast<const uint8_t*>(xs);
  __m512i s0 = init, s1 = _mm512_setzero_si512();
  for (int g = 0; g < 8; g += 2) {
    if constexpr (kUnsignedWeights && kBroadcastOperand) {
      s0 = dpbusd_bcst(s0, wv[g], xb + 4 * g);
      s1 = dpbusd_bcst(s1, wv[g + 1], xb + 4 * g + 4);
    } else {
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
  }
  return _mm512_add_epi32(s0, s1);
}

}  // namespace mtp::kernels::detail
#endif
