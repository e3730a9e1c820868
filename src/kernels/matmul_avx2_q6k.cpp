// AVX2 kernels for Q6_K weights x Q8_K activations: a row kernel (one weight row against up to 8 activation
// rows, for matrices in the row format; the AVX-512 level uses it too) and a packed-tile kernel (16 weight
// rows of a packed matrix, pack.h, against any number of activation rows), bitwise the same for every pair.
//
// Canonical order of one (weight row, activation row) pair, for super-block sb, with the weights' unsigned
// six-bit values u (the format's q = u - 32) and the 16 sub-blocks i of 16 elements:
//   isum(sb) = sum_i sc_i * (sum of the 16 u * x of i) - 32 * sum_i sc_i * (sum of the 16 x of i)
//              exact in int32: 16 * 128 * 16 * 63 * 127 < 2^31, the second sum from the Q8_K bsums
//   acc = fma(float(isum(sb)), d(sb) * d_x(sb), acc)           for sb = 0, 1, ... in order, from 0
// The unsigned values are vpmaddubsw's (or vpdpbusd's) unsigned operand as they are: two products sum to at
// most 2 * 63 * 127 = 16002, so two lines of a sub-block add in int16 before one vpmaddwd by the scale.
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "avx2_k16_row.h"
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

// Packed layout (pack.h): per super-block of a tile a 288-byte header (d, then the 16 sub-block scales of the
// 16 rows), then per half H of the super-block 3 pieces of 8 lines of 64 bytes (ql bytes 64H.., 64H+32..,
// qh bytes 32H..).
constexpr int64_t kSbBytes = sizeof(BlockQ6_K);
constexpr int64_t kHeaderBytes = 288;
constexpr int64_t kLinesBytes = 512;
constexpr int64_t kPackedSbBytes = 16 * kSbBytes;
constexpr int64_t kPrefetchL1Bytes = 3360;
constexpr int64_t kPrefetchL2Bytes = 13440;

// The unsigned six-bit values of chunk i (0..3) of a half: low nibbles of ql for i < 2, high ones for i >= 2,
// bits 2i, 2i+1 of qh on top.
T2 inline __m256i six_bits(__m256i ql, __m256i qh, int i) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  const __m256i lo = _mm256_and_si256(i >= 2 ? _mm256_srli_epi16(ql, 4) : ql, m4);
  const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i)), m2);
  return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

// ---- row format ----

struct Q6kFormat {
  static constexpr int kOffset = 32;
  static constexpr int64_t kBlockBytes = kSbBytes;
  T2 static __m128i scales(const uint8_t* block) {
    return _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const BlockQ6_K*>(block)->scales));
  }
  // Chunk j = 4H + i: elements 128H + 32i .. of half H.
  T2 static __m256i values(const uint8_t* block, int j) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(block);
    const int h = j >> 2, i = j & 3;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h + 32 * (i & 1)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h));
    return six_bits(ql, qh, i);
  }
  T2 static float d(const uint8_t* block) { return _cvtsh_ss(reinterpret_cast<const BlockQ6_K*>(block)->d); }
};

// ---- packed tiles ----
//
// Chunk j = 4H + i of a super-block (elements 128H + 32i ..) comes from line g of the pieces of half H: in
// each, bytes 4o..4o+3 of the line are row o's bytes 4g..4g+3 of the piece's run, so a line gives elements
// 4g..4g+3 of the chunk for 16 rows (half h of the line: rows 8h..8h+7), sub-block 2j for g < 4, 2j+1 after.

// The scales of 8 rows (half h) of sub-block s as int32 lanes.
T2 inline __m256i packed_scales(const uint8_t* hdr, int h, int s) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(hdr + 32 + 16 * s + 8 * h)));
}

// sum_i sc_i * (the sum of sub-block i's 16 activations), per lane, for one activation row: the scales as
// int16 pairs (sc_2k, sc_2k+1) against the bsums' own pairs.
T2 inline __m256i packed_scale_sums(const __m256i* pairs, const int16_t* bsums) {
  __m256i s = _mm256_setzero_si256();
  for (int k = 0; k < 8; ++k)
    s = _mm256_add_epi32(
        s, _mm256_madd_epi16(pairs[k], broadcast_u32(reinterpret_cast<const uint8_t*>(bsums + 2 * k))));
  return s;
}

struct MaddSums {
  static constexpr int kPassRows = 4;
  // isum[r] += sum over sub-blocks of sc * (the u * x of the chunk's lines) for chunk j of super-block sb.
  template <int NR>
  T2 static void chunk(const uint8_t* half, int i, int h, const __m256i* sc_pair, int64_t sb, int j,
                       const uint8_t* const* xs, __m256i* isum) {
    for (int g = 0; g < 8; g += 2) {
      __m256i v[2];
      for (int e = 0; e < 2; ++e) {
        const uint8_t* line = half + 64 * (g + e) + 32 * h;
        v[e] = six_bits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + kLinesBytes * (i & 1))),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 2 * kLinesBytes)), i);
      }
      const __m256i sc = sc_pair[2 * j + (g >= 4)];
      for (int r = 0; r < NR; ++r) {
        const uint8_t* xq = xs[r] + 256 * sb + 32 * j + 4 * g;
        const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(v[0], broadcast_u32(xq)),
                                           _mm256_maddubs_epi16(v[1], broadcast_u32(xq + 4)));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(t, sc));
      }
    }
  }
};

struct VnniSums {
  static constexpr int kPassRows = 8;
  template <int NR>
  T2V static void chunk(const uint8_t* half, int i, int h, const __m256i* sc_pair, int64_t sb, int j,
                        const uint8_t* const* xs, __m256i* isum) {
    for (int g0 = 0; g0 < 8; g0 += 4) {
      __m256i s[NR];
      for (int r = 0; r < NR; ++r) s[r] = _mm256_setzero_si256();
      for (int g = g0; g < g0 + 4; ++g) {
        const uint8_t* line = half + 64 * g + 32 * h;
        const __m256i v =
            six_bits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + kLinesBytes * (i & 1))),
                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 2 * kLinesBytes)), i);
        for (int r = 0; r < NR; ++r)
          s[r] = _mm256_dpbusd_avx_epi32(s[r], v, broadcast_u32(xs[r] + 256 * sb + 32 * j + 4 * g));
      }
      // The pair (sc, sc) of each lane, low half: sc as an int32 after sign extension.
      const __m256i sc = _mm256_srai_epi32(_mm256_slli_epi32(sc_pair[2 * j + (g0 >= 4)], 16), 16);
      for (int r = 0; r < NR; ++r) isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(s[r], sc));
    }
  }
};

template <class Sums, int NR>
T2 void packed_pass(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l, float* acc) {
  const uint8_t* xs[NR];
  for (int r = 0; r < NR; ++r) xs[r] = act_sq_bytes(x[r], l);
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const uint8_t* hdr = tile + sb * kPackedSbBytes;
    for (int h = 0; h < 2; ++h) {
      // Per sub-block s: (sc_s, sc_s) for the products, and (sc_2k, sc_2k+1) for the bsums' correction.
      __m256i sc_pair[16], bs_pair[8];
      for (int s = 0; s < 16; s += 2) {
        const __m256i a = packed_scales(hdr, h, s), b = packed_scales(hdr, h, s + 1);
        const __m256i lo = _mm256_set1_epi32(0xFFFF);
        sc_pair[s] = _mm256_or_si256(_mm256_and_si256(a, lo), _mm256_slli_epi32(a, 16));
        sc_pair[s + 1] = _mm256_or_si256(_mm256_and_si256(b, lo), _mm256_slli_epi32(b, 16));
        bs_pair[s / 2] = _mm256_or_si256(_mm256_and_si256(a, lo), _mm256_slli_epi32(b, 16));
      }
      __m256i isum[NR];
      for (int r = 0; r < NR; ++r) isum[r] = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        prefetch_slice<4>(hdr, 8 * h + j, kPrefetchL1Bytes, kPrefetchL2Bytes);  // 16 x 4 lines >= 3360 bytes
        Sums::template chunk<NR>(hdr + kHeaderBytes + (j >> 2) * 3 * kLinesBytes, j & 3, h, sc_pair, sb, j,
                                 xs, isum);
      }
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 16 * h)));
      for (int r = 0; r < NR; ++r) {
        const __m256i corr = packed_scale_sums(bs_pair, act_bsums(x[r], l) + 16 * sb);
        const __m256i total = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(corr, 5));
        float* a = acc + 16 * r + 8 * h;
        const __m256 xd = _mm256_set1_ps(act_d(x[r], l)[sb]);
        _mm256_store_ps(a,
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, xd), _mm256_load_ps(a)));
      }
    }
  }
}

template <class Sums>
struct Pass {
  template <int NR>
  T2 static void run(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l, float* acc) {
    packed_pass<Sums, NR>(tile, x, l, acc);
  }
};

void q6k_packed(const uint8_t* tile, int64_t, int n_out, const uint8_t* const* x, int64_t nx,
                const ActLayout& l, float* y, int64_t y_stride) {
  static constexpr auto kMadd =
      pass_table<Pass<MaddSums>>(std::make_integer_sequence<int, MaddSums::kPassRows>());
  static constexpr auto kVnni =
      pass_table<Pass<VnniSums>>(std::make_integer_sequence<int, VnniSums::kPassRows>());
  run_passes(kMadd, kVnni, tile, n_out, x, nx, l, y, y_stride);
}

}  // namespace

RowDotFn avx2_q6k_rows() {
  return k16_rows<Q6kFormat>;
}
TileFn avx2_q6k_packed() {
  return q6k_packed;
}

#else

RowDotFn avx2_q6k_rows() {
  return nullptr;
}
TileFn avx2_q6k_packed() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
