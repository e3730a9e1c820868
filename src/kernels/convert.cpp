// Exact conversions of stored rows to f32 (the KV cache's F16 and Q8_0 rows): every ISA level gives the same
// bits, since fp16 -> f32 is exact and d * q (an fp16 scale times an int8) needs at most 19 significant bits.
#include <cstring>

#include "kernels/isa.h"
#include "kernels/vec.h"
#include "matmul_internal.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

#if MTP_HAVE_X86_SIMD
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace mtp::kernels {

namespace scalar {

void f16_to_f32(const uint16_t* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(x[i]);
}

void q8_0_to_f32(const void* blocks, float* out, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(blocks);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) out[i * kQK8_0 + j] = d * static_cast<float>(b[i].qs[j]);
  }
}

}  // namespace scalar

#if MTP_HAVE_X86_SIMD
namespace {

MTP_TARGET_AVX512 void f16_to_f32_avx512(const uint16_t* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(x[i]);
}

MTP_TARGET_AVX512 void q8_0_to_f32_avx512(const void* blocks, float* out, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(blocks);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
    for (int h = 0; h < 2; ++h) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16 * h));
      _mm512_storeu_ps(out + i * kQK8_0 + 16 * h,
                       _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q))));
    }
  }
}

MTP_TARGET_AVX2 void f16_to_f32_avx2(const uint16_t* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(x[i]);
}

MTP_TARGET_AVX2 void q8_0_to_f32_avx2(const void* blocks, float* out, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(blocks);
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
    for (int h = 0; h < 4; ++h) {
      int64_t q8;
      std::memcpy(&q8, b[i].qs + 8 * h, 8);
      const __m256i q = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(q8));
      _mm256_storeu_ps(out + i * kQK8_0 + 8 * h, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
    }
  }
}

}  // namespace
#endif

void f16_to_f32(const uint16_t* x, float* out, int64_t n) {
#if MTP_HAVE_X86_SIMD
  switch (active_isa()) {
    case Isa::kAvx512:
      return f16_to_f32_avx512(x, out, n);
    case Isa::kAvx2:
      return f16_to_f32_avx2(x, out, n);
    case Isa::kNeon:
    case Isa::kScalar:
      break;
  }
#endif
  scalar::f16_to_f32(x, out, n);
}

void q8_0_to_f32(const void* blocks, float* out, int64_t n) {
#if MTP_HAVE_X86_SIMD
  switch (active_isa()) {
    case Isa::kAvx512:
      return q8_0_to_f32_avx512(blocks, out, n);
    case Isa::kAvx2:
      return q8_0_to_f32_avx2(blocks, out, n);
    case Isa::kNeon:
    case Isa::kScalar:
      break;
  }
#endif
  scalar::q8_0_to_f32(blocks, out, n);
}

}  // namespace mtp::kernels
