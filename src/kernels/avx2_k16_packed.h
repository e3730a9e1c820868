// The AVX2 packed-tile kernel shared by the K-quants whose super-block is 16 sub-blocks of 16 (Q6_K and Q3_K
// under signed scales, Q2_K under unsigned scales and mins; kernels/pack.h has their tile layouts): 16 weight
// rows of a packed matrix against any number of activation rows, in the canonical order of avx2_k16_row.h, so
// a packed matrix gives the row kernel's bits. A PackedFormat gives, for the super-block header hdr of a tile
// (its bytes are kPackedSbBytes, the prefetches run kPrefetchLines lines a chunk, 16 chunks a super-block):
//   kHasMins; without mins kOffsetShift: log2 of the format's offset (q = u - 2^kOffsetShift);
//   __m256i scale(hdr, h, s): sub-block s's scales of rows 8h..8h+7 as int32 lanes;
//   __m256i values(hdr, j, g, h): the unsigned values of elements 32 (j % 4) + 4g .. + 3 of chunk j of the
//     super-block (sub-block 2j for g < 4, 2j + 1 after) for rows 8h..8h+7, 4 bytes a row;
//   __m256 d(hdr, h): the super-block scales of rows 8h..8h+7;
//   with mins also __m256i min(hdr, h, s) (as scale) and __m256 dmin(hdr, h) (as d).
#pragma once

#include <cstdint>

#include "avx2_util.h"
#include "matmul_internal.h"

#if MTP_HAVE_X86_SIMD
#include <immintrin.h>

namespace mtp::kernels::detail {

// sum_i sc_i * (the sum of sub-block i's 16 activations), per lane, for one activation row: the scales as
// int16 pairs (sc_2k, sc_2k+1) against the bsums' own pairs.
MTP_TARGET_AVX2 inline __m256i k16_scale_sums(const __m256i* pairs, const int16_t* bsums) {
  __m256i s = _mm256_setzero_si256();
  for (int k = 0; k < 8; ++k)
    s = _mm256_add_epi32(
        s, _mm256_madd_epi16(pairs[k], broadcast_u32(reinterpret_cast<const uint8_t*>(bsums + 2 * k))));
  return s;
}

// Plain AVX2: the vpmaddubsw sums of two lines of a sub-block add in int16 (four products of unsigned values
// <= 63 and int8 activations: at most 4 * 63 * 128 < 2^15), then one vpmaddwd by the scale pair.
template <class F>
struct K16MaddSums {
  static constexpr int kPassRows = 4;
  // isum[r] += sum over sub-blocks of sc * (the u * x of the chunk's lines) for chunk j of super-block sb.
  template <int NR>
  MTP_TARGET_AVX2 static void chunk(const uint8_t* hdr, int h, const __m256i* sc_pair, int64_t sb, int j,
                                    const uint8_t* const* xs, __m256i* isum) {
    for (int g = 0; g < 8; g += 2) {
      const __m256i v0 = F::values(hdr, j, g, h), v1 = F::values(hdr, j, g + 1, h);
      const __m256i sc = sc_pair[2 * j + (g >= 4)];
      for (int r = 0; r < NR; ++r) {
        const uint8_t* xq = xs[r] + 256 * sb + 32 * j + 4 * g;
        const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(v0, broadcast_u32(xq)),
                                           _mm256_maddubs_epi16(v1, broadcast_u32(xq + 4)));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(t, sc));
      }
    }
  }
};

// AVX-VNNI: the four lines of a sub-block in vpdpbusd, then one multiply by the scale.
template <class F>
struct K16VnniSums {
  static constexpr int kPassRows = 8;
  template <int NR>
  MTP_TARGET_AVX2_VNNI static void chunk(const uint8_t* hdr, int h, const __m256i* sc_pair, int64_t sb, int j,
                                         const uint8_t* const* xs, __m256i* isum) {
    for (int g0 = 0; g0 < 8; g0 += 4) {
      __m256i s[NR];
      for (int r = 0; r < NR; ++r) s[r] = _mm256_setzero_si256();
      for (int g = g0; g < g0 + 4; ++g) {
        const __m256i v = F::values(hdr, j, g, h);
        for (int r = 0; r < NR; ++r)
          s[r] = _mm256_dpbusd_avx_epi32(s[r], v, broadcast_u32(xs[r] + 256 * sb + 32 * j + 4 * g));
      }
      // The pair (sc, sc) of each lane, low half: sc as an int32 after sign extension.
      const __m256i sc = _mm256_srai_epi32(_mm256_slli_epi32(sc_pair[2 * j + (g0 >= 4)], 16), 16);
      for (int r = 0; r < NR; ++r) isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(s[r], sc));
    }
  }
};

// The int16 pairs (a_s, a_s+1) of each lane for s = 0, 2, .., 14 (against the bsums' own pairs) from the
// int32 lanes of 16 per-sub-block values.
MTP_TARGET_AVX2 inline void k16_bsum_pairs(const __m256i* v, __m256i* pairs) {
  const __m256i lo = _mm256_set1_epi32(0xFFFF);
  for (int k = 0; k < 8; ++k)
    pairs[k] = _mm256_or_si256(_mm256_and_si256(v[2 * k], lo), _mm256_slli_epi32(v[2 * k + 1], 16));
}

// One pass: adds NR activation rows' sums to acc[16 r + o], half h (rows 8h..8h+7) of a tile at a time.
template <class F, class Sums, int NR>
MTP_TARGET_AVX2 void k16_packed_pass(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l,
                                     float* acc) {
  const uint8_t* xs[NR];
  for (int r = 0; r < NR; ++r) xs[r] = act_sq_bytes(x[r], l);
  alignas(32) float accm[16 * NR] = {};  // the min sums (formats with mins)
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const uint8_t* hdr = tile + sb * F::kPackedSbBytes;
    for (int h = 0; h < 2; ++h) {
      // Per sub-block s: (sc_s, sc_s) for the products; (sc_2k, sc_2k+1), or the mins' pairs, for the bsums.
      __m256i sc[16], sc_pair[16], bs_pair[8];
      for (int s = 0; s < 16; ++s) {
        sc[s] = F::scale(hdr, h, s);
        sc_pair[s] =
            _mm256_or_si256(_mm256_and_si256(sc[s], _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(sc[s], 16));
      }
      if constexpr (F::kHasMins) {
        __m256i mn[16];
        for (int s = 0; s < 16; ++s) mn[s] = F::min(hdr, h, s);
        k16_bsum_pairs(mn, bs_pair);
      } else {
        k16_bsum_pairs(sc, bs_pair);
      }
      __m256i isum[NR];
      for (int r = 0; r < NR; ++r) isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {  // unrolled: the formats' bit positions per chunk become constants
        prefetch_slice<F::kPrefetchLines>(hdr, 8 * h + j, F::kPackedSbBytes, 4 * F::kPackedSbBytes);
        Sums::template chunk<NR>(hdr, h, sc_pair, sb, j, xs, isum);
      }
      const __m256 d = F::d(hdr, h);
      __m256 dmin = _mm256_setzero_ps();  // formats with mins
      if constexpr (F::kHasMins) dmin = F::dmin(hdr, h);
      for (int r = 0; r < NR; ++r) {
        const __m256i corr = k16_scale_sums(bs_pair, act_bsums(x[r], l) + 16 * sb);
        const __m256 xd = _mm256_set1_ps(act_d(x[r], l)[sb]);
        __m256i total = isum[r];
        if constexpr (F::kHasMins) {
          float* am = accm + 16 * r + 8 * h;
          _mm256_store_ps(
              am, _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_mul_ps(dmin, xd), _mm256_load_ps(am)));
        } else {
          total = _mm256_sub_epi32(total, _mm256_slli_epi32(corr, F::kOffsetShift));
        }
        float* a = acc + 16 * r + 8 * h;
        _mm256_store_ps(a,
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, xd), _mm256_load_ps(a)));
      }
    }
  }
  if constexpr (F::kHasMins) {
    for (int i = 0; i < 16 * NR; ++i) acc[i] -= accm[i];
  }
}

template <class F, class Sums>
struct K16Pass {
  template <int NR>
  MTP_TARGET_AVX2 static void run(const uint8_t* tile, const uint8_t* const* x, const ActLayout& l,
                                  float* acc) {
    k16_packed_pass<F, Sums, NR>(tile, x, l, acc);
  }
};

// The TileFn of a format: plain AVX2 passes of 4 rows, AVX-VNNI ones of 8.
template <class F>
void k16_packed(const uint8_t* tile, int64_t, int n_out, const uint8_t* const* x, int64_t nx,
                const ActLayout& l, float* y, int64_t y_stride) {
  using Madd = K16MaddSums<F>;
  using Vnni = K16VnniSums<F>;
  static constexpr auto kMadd =
      pass_table<K16Pass<F, Madd>>(std::make_integer_sequence<int, Madd::kPassRows>());
  static constexpr auto kVnni =
      pass_table<VnniEntry<K16Pass<F, Vnni>>>(std::make_integer_sequence<int, Vnni::kPassRows>());
  run_passes(kMadd, kVnni, tile, n_out, x, nx, l, y, y_stride);
}

}  // namespace mtp::kernels::detail

#endif
