#include "kernels/ceiling.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "kernels/isa.h"
#include "matmul_internal.h"

#if MTP_HAVE_X86_SIMD
#include <immintrin.h>
#endif
#if MTP_HAVE_ARM_DOTPROD
#include <arm_neon.h>
#endif

namespace mtp::kernels {
namespace {

constexpr int kAcc = 12;               // independent accumulators: more than latency x ports on any core here
constexpr int64_t kIterations = 4096;  // per timed call; each iteration is kAcc instructions

volatile int32_t g_sink;  // keeps the sums alive

// Each probe runs kIterations x kAcc products of `lanes` int8 pairs and returns their count. The asm barrier
// on an input makes every iteration's products depend on a value the compiler cannot see, so none is hoisted.
#if MTP_HAVE_X86_SIMD
MTP_TARGET_AVX512 int64_t probe_avx512() {
  __m512i acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i x = _mm512_set1_epi8(3);
  const __m512i y = _mm512_set1_epi8(5);
  for (int64_t it = 0; it < kIterations; ++it) {
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], x, y);
    asm volatile("" : "+v"(x));
  }
  for (int i = 1; i < kAcc; ++i) acc[0] = _mm512_add_epi32(acc[0], acc[i]);
  int32_t lanes[16];
  _mm512_storeu_si512(lanes, acc[0]);
  g_sink = lanes[0];
  return kIterations * kAcc * 64;
}

MTP_TARGET_AVX2_VNNI int64_t probe_avx_vnni() {
  __m256i acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_epi32(i);
  __m256i x = _mm256_set1_epi8(3);
  const __m256i y = _mm256_set1_epi8(5);
  for (int64_t it = 0; it < kIterations; ++it) {
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], x, y);
    asm volatile("" : "+x"(x));
  }
  for (int i = 1; i < kAcc; ++i) acc[0] = _mm256_add_epi32(acc[0], acc[i]);
  g_sink = _mm256_extract_epi32(acc[0], 0);
  return kIterations * kAcc * 32;
}

MTP_TARGET_AVX2 int64_t probe_avx2() {
  __m256i acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_epi32(i);
  __m256i x = _mm256_set1_epi8(3);
  const __m256i y = _mm256_set1_epi8(5), ones = _mm256_set1_epi16(1);
  for (int64_t it = 0; it < kIterations; ++it) {
    for (int i = 0; i < kAcc; ++i)
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), ones));
    asm volatile("" : "+x"(x));
  }
  for (int i = 1; i < kAcc; ++i) acc[0] = _mm256_add_epi32(acc[0], acc[i]);
  g_sink = _mm256_extract_epi32(acc[0], 0);
  return kIterations * kAcc * 32;
}
#endif

#if MTP_HAVE_ARM_DOTPROD
MTP_TARGET_DOTPROD int64_t probe_neon() {
  int32x4_t acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = vdupq_n_s32(i);
  int8x16_t x = vdupq_n_s8(3);
  const int8x16_t y = vdupq_n_s8(5);
  for (int64_t it = 0; it < kIterations; ++it) {
    for (int i = 0; i < kAcc; ++i) acc[i] = vdotq_s32(acc[i], x, y);
    asm volatile("" : "+w"(x));
  }
  for (int i = 1; i < kAcc; ++i) acc[0] = vaddq_s32(acc[0], acc[i]);
  g_sink = vgetq_lane_s32(acc[0], 0);
  return kIterations * kAcc * 16;
}
#endif

using Probe = int64_t (*)();

MaddCeiling choose(Probe* probe) {
  switch (active_isa()) {
#if MTP_HAVE_X86_SIMD
    case Isa::kAvx512:
      *probe = probe_avx512;
      return {"vpdpbusd zmm", 0};
    case Isa::kAvx2:
      if (avx_vnni_active()) {
        *probe = probe_avx_vnni;
        return {"vpdpbusd ymm", 0};
      }
      *probe = probe_avx2;
      return {"vpmaddubsw + vpmaddwd ymm", 0};
#endif
#if MTP_HAVE_ARM_DOTPROD
    case Isa::kNeon:
      *probe = probe_neon;
      return {"sdot", 0};
#endif
    default:
      *probe = nullptr;
      return {};
  }
}

}  // namespace

MaddCeiling int8_madd_ceiling(double seconds) {
  Probe probe = nullptr;
  MaddCeiling c = choose(&probe);
  if (probe == nullptr) return c;
  using Clock = std::chrono::steady_clock;
  const auto slice = std::chrono::duration<double>(std::max(seconds, 1e-3) / 10);
  for (int s = 0; s < 10; ++s) {
    const auto t0 = Clock::now();
    int64_t macs = 0;
    do {
      macs += probe();
    } while (Clock::now() - t0 < slice);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    c.macs_per_second = std::max(c.macs_per_second, static_cast<double>(macs) / secs);
  }
  return c;
}

}  // namespace mtp::kernels
