// AVX2 kernels for Q4_K and Q5_K weights x Q8_K activations: a row kernel (one weight row against up to 8
// activation rows, for matrices in the row format; the AVX-512 level uses it too) and a packed-tile kernel
// (16 weight rows of a packed matrix, pack.h, against any number of activation rows), bitwise the same for
// every pair.
//
// Canonical order of one (weight row, activation row) pair at this level, for super-block sb:
//   isum(sb) = sum over sub-blocks j of sc_j * (sum of the 32 q * x of j)    exact: 8*63*32*31*127 < 2^31
//   msum(sb) = sum over j of m_j * (sum of the 32 x of j, from the Q8_K bsums) exact: 8*63*32*127 < 2^31
//   acc  = fma(float(isum(sb)), d(sb) * d_x(sb), acc)
//   accm = fma(float(msum(sb)), dmin(sb) * d_x(sb), accm)       for sb = 0, 1, ... in order, from 0
//   out  = acc - accm
// One conversion and two fmas per super-block, so the packed kernel can keep 8 weight rows in the 8 lanes
// of a register with no horizontal sums (the row kernel reduces each pair's lanes to isum and msum).
//
// The weights are unsigned (4 or 5 bits): vpmaddubsw takes them as its unsigned operand as they are (no sign
// trick), and an int16 lane (two products) is at most 2*15*127 = 3810 in size for Q4_K (2*31*127 = 7874 for
// Q5_K), so the packed kernel sums 8 lines of a sub-block (Q5_K: 4) in int16, at most 30480 (31496), before
// one vpmaddwd by the sub-block's scale. Where the CPU has AVX-VNNI, vpdpbusd sums four products straight
// into int32 and vpmulld applies the scale: the same integers.
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "avx2_util.h"
#include "kernels/isa.h"
#include "matmul_internal.h"
#include "quant/blocks.h"

#if MTP_HAVE_X86_SIMD
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace mtp::kernels::detail {

#if MTP_HAVE_X86_SIMD
namespace {

#define T2 MTP_TARGET_AVX2
#define T2V MTP_TARGET_AVX2_VNNI

// The two formats: Q5_K is Q4_K with a fifth bit per weight (qh, 32 bytes per super-block before qs).
template <bool kFive>
struct K45 {
  static constexpr int64_t kSbBytes = kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  static constexpr int64_t kQsOffset = kFive ? 48 : 16;  // in a block; qh (Q5_K) at 16
  // Packed layout (pack.h): per super-block of a tile a 256-byte header, (Q5_K) 8 lines of qh, then 4
  // pieces of 512 bytes of qs.
  static constexpr int64_t kPackedSbBytes = 16 * kSbBytes;
  static constexpr int64_t kPackedQs = kFive ? 768 : 256;
  // Lines of a sub-block summed in int16 before the scale is applied (the bounds above).
  static constexpr int kLinesPerScale = kFive ? 4 : 8;
};
constexpr int64_t kHeaderBytes = 256;
constexpr int64_t kPieceBytes = 512;
// Prefetch distances along the tile (contiguous; past its end they fetch the next tile), as the IQ4_XS
// packed kernel: into L1 about a super-block ahead, into L2 far enough to cover DRAM latency.
constexpr int64_t kPrefetchL1Bytes = 2304;
constexpr int64_t kPrefetchL2Bytes = 12288;

// Sub-block j's weights from 32 bytes of qs (nibble pairs of sub-blocks 2k, 2k+1) and (Q5_K) the 32 bytes of
// qh whose bit j is their fifth bit (both in the row format's order, or a packed line's).
template <bool kFive>
T2 inline __m256i k45_values(__m256i qs, __m256i qh, int j) {
  const __m256i v = _mm256_and_si256((j & 1) ? _mm256_srli_epi16(qs, 4) : qs, _mm256_set1_epi8(0x0F));
  if constexpr (!kFive) return v;
  const __m256i b = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
  return _mm256_or_si256(v, _mm256_slli_epi16(b, 4));
}

// ---- row format ----

template <bool kFive, int NR>
T2 void k45_row(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  using F = K45<kFive>;
  __m128 acc[NR], accm[NR];
  for (int r = 0; r < NR; ++r) acc[r] = accm[r] = _mm_setzero_ps();
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const uint8_t* blk = w + sb * F::kSbBytes;
    alignas(16) uint8_t sm[16];
    unpack_k_scales(blk + 4, sm);
    const __m128i m = _mm_srli_si128(_mm_load_si128(reinterpret_cast<const __m128i*>(sm)), 8);
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));  // m_j twice, against bsums
    __m256i isum[NR];
    for (int r = 0; r < NR; ++r) isum[r] = _mm256_setzero_si256();
    const __m256i qh = kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)) : __m256i{};
    for (int j = 0; j < 8; ++j) {
      const __m256i t =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + F::kQsOffset + 32 * (j >> 1)));
      const __m256i v = k45_values<kFive>(t, qh, j);
      const __m256i sc = _mm256_set1_epi32(sm[j] * 0x10001);
      for (int r = 0; r < NR; ++r) {
        const __m256i q =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act_sq_bytes(x[r], l) + 256 * sb + 32 * j));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(v, q), sc));
      }
    }
    uint16_t dh[2];
    std::memcpy(dh, blk, 4);
    const float d = _cvtsh_ss(dh[0]), dmin = _cvtsh_ss(dh[1]);
    for (int r = 0; r < NR; ++r) {
      const float xd = act_d(x[r], l)[sb];
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act_bsums(x[r], l) + 16 * sb));
      const int32_t msum = hsum_epi32(_mm256_madd_epi16(bs, mins16));
      acc[r] =
          _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), hsum_epi32(isum[r])), _mm_set_ss(d * xd), acc[r]);
      accm[r] = _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), msum), _mm_set_ss(dmin * xd), accm[r]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = _mm_cvtss_f32(acc[r]) - _mm_cvtss_f32(accm[r]);
}

template <bool kFive>
void k45_rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  rows_by_four(nr, [&]<int NR>(int i) { k45_row<kFive, NR>(w, x + i, l, out + i); });
}

// ---- packed tiles ----
//
// A tile is read super-block by super-block (pack.h): a header (d, dmin, the three scale words per row),
// (Q5_K) 8 lines of qh, line g holding per row bytes 4g..4g+3, then for each pair of sub-blocks k = 0..3 a
// piece of 8 lines of 64 bytes; in line g, half h (rows 8h..8h+7, the lanes of one register) holds per row
// bytes 4g..4g+3 of qs[32k..], whose low nibbles are elements 4g..4g+3 of sub-block 2k and high nibbles those
// of sub-block 2k+1, so each activation row contributes one broadcast 4-byte group per line and sub-block.

// The six-bit scales and mins of 8 rows (half h of a header) as 32-bit lanes of bytes: u[0] scales 0-3,
// u[1] scales 4-7, u[2] mins 0-3, u[3] mins 4-7 (unpack_k_scales on every lane at once).
T2 inline void packed_scale_words(const uint8_t* hdr, int h, __m256i u[4]) {
  const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + 64 + 32 * h));
  const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + 128 + 32 * h));
  const __m256i w2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + 192 + 32 * h));
  const __m256i low6 = _mm256_set1_epi8(0x3f), low4 = _mm256_set1_epi8(0x0f), top2 = _mm256_set1_epi8(3);
  u[0] = _mm256_and_si256(w0, low6);
  u[1] = _mm256_or_si256(_mm256_and_si256(w2, low4),
                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w0, 6), top2), 4));
  u[2] = _mm256_and_si256(w1, low6);
  u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), low4),
                         _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w1, 6), top2), 4));
}

// m_j * (the sum of sub-block j's 32 activations) summed over j, per lane (row), for one activation row:
// the mins as int16 pairs (m0, m2) and (m1, m3) of each word against the same pairs of sub-block sums.
T2 inline __m256i packed_min_sums(const __m256i u[4], const int16_t* bsums) {
  // The 8 sub-block sums B0..B7 (each at most 32 * 127), as the words (B0, B2), (B1, B3), (B4, B6), (B5, B7).
  const __m128i b = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums)),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums + 8)));
  const __m128i pairs =
      _mm_shuffle_epi8(b, _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15));
  const __m256i even16 = _mm256_set1_epi32(0x00FF00FF);
  const __m256i p0 =
      _mm256_madd_epi16(_mm256_and_si256(u[2], even16), _mm256_set1_epi32(_mm_extract_epi32(pairs, 0)));
  const __m256i p1 = _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(u[2], 8), even16),
                                       _mm256_set1_epi32(_mm_extract_epi32(pairs, 1)));
  const __m256i p2 =
      _mm256_madd_epi16(_mm256_and_si256(u[3], even16), _mm256_set1_epi32(_mm_extract_epi32(pairs, 2)));
  const __m256i p3 = _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(u[3], 8), even16),
                                       _mm256_set1_epi32(_mm_extract_epi32(pairs, 3)));
  return _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3));
}

// The scale of sub-block j in each lane: as the int16 pair (sc, sc) for vpmaddwd, or as an int32.
T2 inline __m256i scale_pair(const __m256i u[4], int j) {
  const int b = j & 3;
  const __m256i ctrl =
      _mm256_setr_epi8(b, -1, b, -1, 4 + b, -1, 4 + b, -1, 8 + b, -1, 8 + b, -1, 12 + b, -1, 12 + b, -1, b,
                       -1, b, -1, 4 + b, -1, 4 + b, -1, 8 + b, -1, 8 + b, -1, 12 + b, -1, 12 + b, -1);
  return _mm256_shuffle_epi8(u[j >> 2], ctrl);
}

// isum over one half of one super-block: isum[r] = sum_j sc_j * (the 32 products of sub-block j), per lane
// (hdr: the super-block, whose successors are prefetched; qs: its qs pieces; qh: its qh lines, Q5_K).
template <bool kFive>
struct MaddSums {
  static constexpr int kPassRows = 4;
  template <int NR>
  T2 static void sums(const uint8_t* hdr, const uint8_t* qs, const uint8_t* qh, int h, const __m256i u[4],
                      int64_t sb, const uint8_t* const* x, __m256i* isum) {
    constexpr int kStep = K45<kFive>::kLinesPerScale;
    for (int r = 0; r < NR; ++r) isum[r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      // The super-block ahead, 16 x 3 lines >= 2816 bytes (Q5_K's).
      prefetch_slice<3>(hdr, 8 * h + j, kPrefetchL1Bytes, kPrefetchL2Bytes);
      const uint8_t* piece = qs + (j >> 1) * kPieceBytes + 32 * h;
      const __m256i sc = scale_pair(u, j);
      for (int g0 = 0; g0 < 8; g0 += kStep) {
        __m256i s[NR];
        for (int r = 0; r < NR; ++r) s[r] = _mm256_setzero_si256();
        for (int g = g0; g < g0 + kStep; ++g) {
          const __m256i v = k45_values<kFive>(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(piece + 64 * g)),
              kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 64 * g + 32 * h)) : __m256i{},
              j);
          for (int r = 0; r < NR; ++r)
            s[r] = _mm256_add_epi16(s[r],
                                    _mm256_maddubs_epi16(v, broadcast_u32(x[r] + 256 * sb + 32 * j + 4 * g)));
        }
        for (int r = 0; r < NR; ++r) isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(s[r], sc));
      }
    }
  }
};

template <bool kFive>
struct VnniSums {
  static constexpr int kPassRows = 8;
  template <int NR>
  T2V static void sums(const uint8_t* hdr, const uint8_t* qs, const uint8_t* qh, int h, const __m256i u[4],
                       int64_t sb, const uint8_t* const* x, __m256i* isum) {
    for (int r = 0; r < NR; ++r) isum[r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      // The super-block ahead, 16 x 3 lines >= 2816 bytes (Q5_K's).
      prefetch_slice<3>(hdr, 8 * h + j, kPrefetchL1Bytes, kPrefetchL2Bytes);
      const uint8_t* piece = qs + (j >> 1) * kPieceBytes + 32 * h;
      __m256i s[NR];
      for (int r = 0; r < NR; ++r) s[r] = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) {
        const __m256i v = k45_values<kFive>(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(piece + 64 * g)),
            kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 64 * g + 32 * h)) : __m256i{},
            j);
        for (int r = 0; r < NR; ++r)
          s[r] = _mm256_dpbusd_avx_epi32(s[r], v, broadcast_u32(x[r] + 256 * sb + 32 * j + 4 * g));
      }
      // The pair (sc, 0) of each lane as an int32 is sc.
      const __m256i sc = _mm256_and_si256(scale_pair(u, j), _mm256_set1_epi32(0xFFFF));
      for (int r = 0; r < NR; ++r) isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(s[r], sc));
    }
  }
};

// acc[16 r + 8 h + lane] and accm[...] take super-block sb of NR rows, in the canonical order (xs: the
// rows' signed values).
template <bool kFive, template <bool> class Sums, int NR>
T2 inline void packed_super_block(const uint8_t* tile, int64_t sb, const uint8_t* const* x,
                                  const uint8_t* const* xs, const ActLayout& l, float* acc, float* accm) {
  using F = K45<kFive>;
  const uint8_t* hdr = tile + sb * F::kPackedSbBytes;
  for (int h = 0; h < 2; ++h) {
    __m256i u[4];
    packed_scale_words(hdr, h, u);
    __m256i isum[NR];
    Sums<kFive>::template sums<NR>(hdr, hdr + F::kPackedQs, hdr + kHeaderBytes, h, u, sb, xs, isum);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 16 * h)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 32 + 16 * h)));
    for (int r = 0; r < NR; ++r) {
      const __m256 xd = _mm256_set1_ps(act_d(x[r], l)[sb]);
      const __m256i msum = packed_min_sums(u, act_bsums(x[r], l) + 16 * sb);
      float* a = acc + 16 * r + 8 * h;
      float* am = accm + 16 * r + 8 * h;
      _mm256_store_ps(a,
                      _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(d, xd), _mm256_load_ps(a)));
      _mm256_store_ps(am,
                      _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, xd), _mm256_load_ps(am)));
    }
  }
}

// One pass (avx2_util.h's run_passes): acc[16 r + o] = the scale sums minus the min sums of NR rows.
template <bool kFive, template <bool> class Sums>
struct Pass {
  template <int NR>
  T2 static void run(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l, float* acc) {
    const uint8_t* xs[NR];
    for (int r = 0; r < NR; ++r) xs[r] = act_sq_bytes(x[r], l);
    alignas(32) float accm[16 * NR] = {};
    for (int64_t sb = 0; sb < l.nb; ++sb) packed_super_block<kFive, Sums, NR>(tile, sb, x, xs, l, acc, accm);
    for (int i = 0; i < 16 * NR; ++i) acc[i] -= accm[i];
  }
};

template <bool kFive>
void k45_packed(const uint8_t* tile, int64_t, int n_out, const uint8_t* const* x, int64_t nx,
                const ActLayout& l, float* y, int64_t y_stride) {
  static constexpr auto kMadd =
      pass_table<Pass<kFive, MaddSums>>(std::make_integer_sequence<int, MaddSums<kFive>::kPassRows>());
  static constexpr auto kVnni = pass_table<VnniEntry<Pass<kFive, VnniSums>>>(
      std::make_integer_sequence<int, VnniSums<kFive>::kPassRows>());
  run_passes(kMadd, kVnni, tile, n_out, x, nx, l, y, y_stride);
}

}  // namespace

RowDotFn avx2_k45_rows(bool five) {
  return five ? k45_rows<true> : k45_rows<false>;
}
TileFn avx2_k45_packed(bool five) {
  return five ? k45_packed<true> : k45_packed<false>;
}

#else

RowDotFn avx2_k45_rows(bool) {
  return nullptr;
}
TileFn avx2_k45_packed(bool) {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
