// Private interface between the matmul driver and the per-ISA row kernels.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/matmul.h"
#include "quant/types.h"

// Per-function ISA targets: the library is compiled without -m flags, so only functions carrying these
// attributes use the extensions, and they run only after CPUID said yes (isa.cpp).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MTP_HAVE_X86_SIMD 1
#define MTP_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MTP_TARGET_AVX2_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define MTP_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define MTP_TARGET_AVX512_VBMI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c")))
#else
#define MTP_HAVE_X86_SIMD 0
#endif
// AArch64 with the dot-product extension (sdot), likewise per function, after Linux's HWCAP check (isa.cpp).
#if defined(__aarch64__) && defined(__GNUC__) && defined(__linux__)
#define MTP_HAVE_ARM_DOTPROD 1
#define MTP_TARGET_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#else
#define MTP_HAVE_ARM_DOTPROD 0
#endif

namespace mtp::kernels::detail {

// Slice k of the prefetches for the data ahead of a packed super-block at p: kLines cache lines at
// p + 64 kLines k, into L1 from l1 bytes ahead (prefetcht0) and into L2 from l2 bytes ahead (prefetcht1).
// The packed K-quant kernels issue one slice per chunk of a super-block's work rather than all of them at its
// start: a burst of 70-110 prefetches at once left one-row passes waiting on memory (on Zen 3 a Q6_K pass
// over the output head's shape ran 1.7x faster spread out; docs/kernels.md has the figures per level).
template <int kLines>
inline void prefetch_slice(const uint8_t* p, int k, int64_t l1, int64_t l2) {
  const uint8_t* q = p + 64 * kLines * k;
  for (int m = 0; m < kLines; ++m) {
    __builtin_prefetch(q + l1 + 64 * m, 0, 3);
    __builtin_prefetch(q + l2 + 64 * m, 0, 2);
  }
}

// Byte layout of one prepared activation row (all offsets from the row start, 64-byte aligned).
//   kQ8_0: qs[n_in] int8 | d[nb] f32 (the fp16 block scale, widened) | xsum[nb] f32 (the sum of each block's
//          32 values, exact: for the weight formats with a min)
//   kQ8_K: qs[n_in] int8 | d[nb] f32 | bsums[nb * 16] int16
//          and for Isa::kAvx512 also sq[n_in] int8 (qs unflipped) | xcorr[nb * 8] int32 (-128 * the sum of
//          each 32-element sub-block), for kernels whose weights are the unsigned vpdpbusd operand
//   kF32:  x[n_pad] f32, zero-padded to a multiple of 16
// For Isa::kAvx512 the int8 values are stored offset by 128 (qs ^ 0x80, as uint8) for vpdpbusd.
struct ActLayout {
  ActFormat format = ActFormat::kF32;
  Isa isa = Isa::kScalar;
  int64_t n_in = 0;
  int64_t nb = 0;  // blocks per row (32 or 256 elements; n_pad / 16 for kF32)
  int64_t d_off = 0;
  int64_t aux_off = 0;  // xsum (kQ8_0) or bsums (kQ8_K)
  int64_t sq_off = 0;   // kQ8_K: signed qs (Isa::kAvx512: a copy, then xcorr at xc_off; else 0: qs itself)
  int64_t xc_off = 0;
  int64_t stride = 0;  // bytes per row
};

inline constexpr int kMaxTileRows = 8;

// out[r] = dot(weight row w, activation row x[r]) for r in [0, nr), 1 <= nr <= kMaxTileRows. Each pair is
// computed with the same instruction sequence whatever nr is (batch invariance).
using RowDotFn = void (*)(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& layout,
                          float* out);

// Weight rows of one call of a TileFn.
inline constexpr int kTileOut = 16;

// y[i * y_stride + o] = dot(weight row o, activation row x[i]) for o in [0, n_out), 1 <= n_out <= kTileOut,
// i in [0, nx); weight row o at w + o * row_bytes. Bitwise the same as the type's RowDotFn for every pair, so
// the driver may pick either for any batch.
using TileFn = void (*)(const uint8_t* w, int64_t row_bytes, int n_out, const uint8_t* const* x, int64_t nx,
                        const ActLayout& layout, float* y, int64_t y_stride);

struct KernelSet {
  RowDotFn dot[kGgmlTypeCount] = {};
  int tile_rows = 1;  // rows the kernel handles per call at best
  TileFn tile[kGgmlTypeCount] = {};
  int tile_min_rows[kGgmlTypeCount] = {};  // activation rows from which `tile` is used (with a tile kernel)
  // Kernels over one tile of a packed matrix (kernels/pack.h; w = the tile, n_out = its rows), for any nx;
  // bitwise the same as `dot` for every pair. Types without one here are unpacked tile by tile.
  TileFn packed[kGgmlTypeCount] = {};
};

const KernelSet& scalar_kernels();
const KernelSet& avx2_kernels();    // empty set where not compiled
const KernelSet& avx512_kernels();  // empty set where not compiled
const KernelSet& neon_kernels();    // empty set where not compiled
const KernelSet& kernels_for(Isa isa);

// matmul_avx2_iq4xs.cpp (nullptr where not compiled).
RowDotFn avx2_iq4xs_rows();
TileFn avx2_iq4xs_packed();
// matmul_avx2_q45k.cpp (nullptr where not compiled): Q4_K (five = false) and Q5_K.
RowDotFn avx2_k45_rows(bool five);
TileFn avx2_k45_packed(bool five);
// matmul_avx512_iq4xs.cpp (nullptr where not compiled).
RowDotFn avx512_iq4xs_rows();
TileFn avx512_iq4xs_tile();
TileFn avx512_iq4xs_packed();
// A row-format tile (n_out rows from w) through a packed kernel: packed into a per-thread buffer first.
void run_packed_on_row_format(TileFn packed, GgmlType type, const uint8_t* w, int64_t row_bytes, int n_out,
                              const uint8_t* const* x, int64_t nx, const ActLayout& l, float* y,
                              int64_t y_stride);
// matmul_avx2_q8_0.cpp (nullptr where not compiled, or for another type): the packed kernels of the
// 32-element block types (Q8_0, Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1, MXFP4) and their row-format wrappers, in the
// order of the AVX-512 ones.
TileFn avx2_b32_packed(GgmlType type);
TileFn avx2_b32_tile(GgmlType type);
// matmul_avx2_q2k.cpp (nullptr where not compiled).
RowDotFn avx2_q2k_rows();
TileFn avx2_q2k_packed();
// matmul_avx2_q3k.cpp (nullptr where not compiled).
RowDotFn avx2_q3k_rows();
TileFn avx2_q3k_packed();
// matmul_avx2_q6k.cpp (nullptr where not compiled).
RowDotFn avx2_q6k_rows();
TileFn avx2_q6k_packed();
// matmul_avx512_q45k.cpp (nullptr where not compiled): follows the order of avx2_k45_rows.
TileFn avx512_k45_packed(bool five);
// matmul_avx512_q6k.cpp (nullptr where not compiled): follows the order of avx2_q6k_rows.
TileFn avx512_q6k_packed();
// matmul_avx512_q6k.cpp too: follow the orders of avx2_q3k_rows and avx2_q2k_rows.
TileFn avx512_q3k_packed();
TileFn avx512_q2k_packed();
// matmul_avx512_q8_0.cpp (nullptr where not compiled, or for another type): likewise.
TileFn avx512_b32_packed(GgmlType type);
TileFn avx512_b32_tile(GgmlType type);
// Whether the IQ4_XS packed kernel takes the integer sums of batches of 9 rows or more (equally spaced) from
// AMX (the CPU and OS allow it, MTP_AMX=0 is not in the environment, and VBMI is on: the AMX kernels decode
// with it). Same bits either way.
// set_amx_enabled returns the previous setting (tests, benchmarks).
bool amx_active();
bool set_amx_enabled(bool on);
// Whether the IQ4_XS packed decode kernel unpacks nibbles with VBMI's vpermb (the CPU has it, and tests did
// not switch it off). Same bits either way. set_vbmi_enabled returns the previous setting.
bool vbmi_active();
bool set_vbmi_enabled(bool on);

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

inline const float* act_d(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const float*>(row + l.d_off);
}
inline const float* act_xsum(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const float*>(row + l.aux_off);
}
inline const int16_t* act_bsums(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const int16_t*>(row + l.aux_off);
}
// The signed int8 values of a Q8_K row at every level (sq_off is 0 where qs are stored unflipped).
inline const int8_t* act_sq(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const int8_t*>(row + l.sq_off);
}
inline const uint8_t* act_sq_bytes(const uint8_t* row, const ActLayout& l) {
  return row + l.sq_off;
}
inline const int32_t* act_xcorr(const uint8_t* row, const ActLayout& l) {
  return reinterpret_cast<const int32_t*>(row + l.xc_off);
}
inline const float* act_f32(const uint8_t* row) {
  return reinterpret_cast<const float*>(row);
}

}  // namespace mtp::kernels::detail
