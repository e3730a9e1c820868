// Small AVX2 helpers shared by the AVX2 kernel files (each file keeps its own kernels).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/isa.h"
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

// broadcast_u32 as one vpbroadcastd from memory that the compiler may not hoist out of the loop it is in.
// Where the 4-byte groups of several activation rows are the same for both halves of a piece, GCC 12 lifts
// every broadcast of a piece ahead of its first half and keeps them on the stack: a store and a load for
// each, against one load here.
MTP_TARGET_AVX2 inline __m256i broadcast_u32_here(const uint8_t* p) {
  __m256i v;
  asm volatile("vpbroadcastd %1, %0" : "=x"(v) : "m"(*reinterpret_cast<const int32_t*>(p)));
  return v;
}

// acc += x (int32 lanes), with acc itself the destination register. Written as an intrinsic inside a loop,
// GCC 12 puts each sum in a fresh register and copies it back into the accumulator: one extra instruction
// per add, which in the 16-bit prompt kernels made the front end, not the multiply ports, the limit (33
// instructions per 128 products instead of 25 on Zen 3, whose dispatch takes 6 a cycle).
MTP_TARGET_AVX2 inline void add_epi32_into(__m256i& acc, __m256i x) {
  asm("vpaddd %1, %0, %0" : "+x"(acc) : "x"(x));
}

// vpmaddwd of x by the 16-bit pairs at m, read from memory where they are used: a value kept in a register
// across a loop costs one of the 16 that the accumulators need.
MTP_TARGET_AVX2 inline __m256i madd_epi16_mem(__m256i x, const __m256i& m) {
  asm("vpmaddwd %1, %0, %0" : "+x"(x) : "m"(m));
  return x;
}

// The sum of the 8 int32 lanes (exact while it fits).
MTP_TARGET_AVX2 inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// One pass of a packed kernel over a tile: adds NR activation rows' sums to acc[16 r + o].
using PackedPassFn = void (*)(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l, float* acc);

// {nullptr, Pass::run<1>, ..., Pass::run<N>}: a pass kernel per number of rows.
template <class Pass, int... R>
constexpr std::array<PackedPassFn, sizeof...(R) + 1> pass_table(std::integer_sequence<int, R...>) {
  return {nullptr, &Pass::template run<R + 1>...};
}

// The pass table entry (pass_table) for AVX-VNNI sums: Pass::run<NR> flattened into a function compiled with
// AVX-VNNI. A function's target must include its callees' for them to inline, so a pass loop compiled for
// plain AVX2 called its AVX-VNNI sums once per piece, with the piece's index a run-time value (Q6_K at one
// row on Sapphire Rapids: 1.4x the plain AVX2 pass's time; inlined, 1.0x, and 0.7x at 8 rows).
template <class Pass>
struct VnniEntry {
  template <int NR>
  MTP_TARGET_AVX2_VNNI __attribute__((flatten)) static void run(const uint8_t* tile, const uint8_t* const* x,
                                                                const ActLayout& l, float* acc) {
    Pass::template run<NR>(tile, x, l, acc);
  }
};

// A packed tile against nx activation rows, in passes of as many rows as the table has (plain AVX2's, or
// AVX-VNNI's where the switch is on); the first n_out sums of each row are its results.
template <size_t NM, size_t NV>
inline void run_passes(const std::array<PackedPassFn, NM>& madd, const std::array<PackedPassFn, NV>& vnni,
                       const uint8_t* tile, int n_out, const uint8_t* const* x, int64_t nx,
                       const ActLayout& l, float* y, int64_t y_stride) {
  const bool use_vnni = avx_vnni_active();
  const int pass_rows = static_cast<int>(use_vnni ? NV - 1 : NM - 1);
  alignas(32) float acc[16 * (NV > NM ? NV : NM)];
  for (int64_t i = 0; i < nx; i += pass_rows) {
    const int nr = static_cast<int>(nx - i < pass_rows ? nx - i : pass_rows);
    std::memset(acc, 0, sizeof(float) * 16 * nr);
    (use_vnni ? vnni[nr] : madd[nr])(tile, x + i, l, acc);
    for (int r = 0; r < nr; ++r) std::memcpy(y + (i + r) * y_stride, acc + 16 * r, sizeof(float) * n_out);
  }
}

}  // namespace mtp::kernels::detail

#endif
