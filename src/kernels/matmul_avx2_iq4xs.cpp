// AVX2 kernels for IQ4_XS weights x Q8_K activations: a row kernel (one weight row against 1..4 activation
// rows, for matrices in the row format) and a packed-tile kernel (16 weight rows of a packed matrix, pack.h,
// against any number of activation rows), bitwise the same for every pair.
//
// Canonical order of one (weight row, activation row) pair at this level: for super-block sb the integer sum
// isum(sb) = sum over sub-blocks j of (ls_j - 32) * (sum of 32 q * w) is exact in int32 (|ls - 32| <= 32,
// |w|, |q| <= 127: at most 8 * 32 * 32 * 127 * 127 < 2^31), and
//   acc = fma(float(isum(sb)), d_w(sb) * d_x(sb), acc)      for sb = 0, 1, ... in order, from acc = 0.
// Folding the sub-block scales into the integer sums (vpmaddwd by the scale instead of by 1) leaves one
// conversion and one fma per super-block. The row kernel reduces each pair's lanes to isum(sb) and runs the
// fma chain on scalars; the packed kernel keeps 8 weight rows in the 8 lanes of a register (no reduction at
// all), which is what makes batch-1 decode cheap: no horizontal sums, no per-row scale decoding, and the
// activations' 4-byte groups broadcast.
//
// Products use the sign trick of matmul_avx2.cpp: vpmaddubsw(|w|, sign(q, w)) sums two products of at most
// 127 * 127 into an int16 without saturating; where the CPU has AVX-VNNI the packed kernel sums with
// vpdpbusd instead (the same integers).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

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

constexpr int kSbBytes = sizeof(BlockIQ4_XS);
constexpr int64_t kPackedHeaderBytes = 128;
constexpr int64_t kPackedPieceBytes = 256;

T2 inline __m256i table256() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
}

// sum over the 4 bytes of each 32-bit lane of w * q, times the lane's int16 scale pair: exact int32.
T2 inline __m256i scaled_dot4(__m256i w, __m256i aw, __m256i q, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(q, w)), scale16);
}

// An int32 scale per lane as the pair of equal int16 halves vpmaddwd multiplies by.
T2 inline __m256i scale_pairs(__m256i s32) {
  return _mm256_or_si256(_mm256_and_si256(s32, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s32, 16));
}

// ls_j - 32 of a super-block's 8 sub-blocks, one per lane, from scales_h (16 bits) and scales_l (32 bits).
T2 inline __m256i sub_block_scales(uint32_t scales_h, uint32_t scales_l) {
  const __m256i j = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(scales_l)), _mm256_slli_epi32(j, 2)),
      _mm256_set1_epi32(15));
  const __m256i hi = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(scales_h)), _mm256_slli_epi32(j, 1)),
      _mm256_set1_epi32(3));
  return _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
}

// ---- row format ----

template <int NR>
T2 void iq4xs_row(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  const __m256i table = table256(), m4 = _mm256_set1_epi8(0x0F);
  __m128 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm_setzero_ps();
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const uint8_t* blk = w + sb * kSbBytes;
    uint16_t d, sh;
    uint32_t sl;
    std::memcpy(&d, blk, 2);
    std::memcpy(&sh, blk + 2, 2);
    std::memcpy(&sl, blk + 4, 4);
    alignas(32) int32_t ls[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(ls), scale_pairs(sub_block_scales(sh, sl)));
    __m256i isum[NR];
    for (int r = 0; r < NR; ++r) isum[r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      // Bytes 0-15 of the sub-block: low nibbles are elements 0-15, high nibbles 16-31.
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8 + 16 * j));
      const __m256i z =
          _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1), m4);
      const __m256i v = _mm256_shuffle_epi8(table, z);
      const __m256i av = _mm256_sign_epi8(v, v);
      const __m256i s = _mm256_set1_epi32(ls[j]);
      for (int r = 0; r < NR; ++r) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r] + 256 * sb + 32 * j));
        isum[r] = _mm256_add_epi32(isum[r], scaled_dot4(v, av, q, s));
      }
    }
    const float dw = _cvtsh_ss(d);
    for (int r = 0; r < NR; ++r) {
      const __m128 c = _mm_set_ss(dw * act_d(x[r], l)[sb]);
      acc[r] = _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), hsum_epi32(isum[r])), c, acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = _mm_cvtss_f32(acc[r]);
}

void iq4xs_rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  switch (nr) {
    case 1:
      return iq4xs_row<1>(w, x, l, out);
    case 2:
      return iq4xs_row<2>(w, x, l, out);
    case 3:
      return iq4xs_row<3>(w, x, l, out);
    default:
      return iq4xs_row<4>(w, x, l, out);
  }
}

// ---- packed tiles ----
//
// A tile is read in memory order: sub-block j outer, super-block sb inner (the pieces of pack.h), each piece
// one 256-byte run of 4 lines. In line L of a piece, half h (rows 8h..8h+7, the lanes of one register) holds
// per row bytes 4L..4L+3 of the sub-block, whose low nibbles are elements 4L..4L+3 and high nibbles
// 16+4L..16+4L+3, so each activation row contributes those two 4-byte groups, broadcast. The integer sums
// isum(sb) of up to kChunk super-blocks wait in memory across the 8 sub-blocks; then the chunk's fma chain
// runs in super-block order, so the sums and their order are those of the row kernel.
//
// Two ways of summing a piece give the same exact integers: MaddSums (AVX2: the sign trick, vpmaddwd by the
// scale) and VnniSums (AVX-VNNI: weights + 128 as the unsigned vpdpbusd operand, one instruction per 4-byte
// group instead of four, the +128 taken back with the activations' sub-block sums, then vpmulld by the
// scale).
constexpr int kChunk = 16;
// Prefetch distances along the tile (it is contiguous; past its end they fetch the next tile): into L1 a
// few pieces ahead, into L2 far enough ahead to cover DRAM latency at one core's share of bandwidth.
constexpr int64_t kPrefetchL1Bytes = 2048;
constexpr int64_t kPrefetchL2Bytes = 12288;

#define T2V MTP_TARGET_AVX2_VNNI

// ls_j - 32 of sub-block j for the 8 rows of half h, one per lane, from the tile header's scales_h (16 bits
// per row) and scales_l (32 bits per row).
T2 inline __m256i packed_scales(const uint8_t* hdr, int h, int j) {
  const __m256i sh =
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 32 + 16 * h)));
  const __m256i sl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hdr + 64 + 32 * h));
  const __m256i lsl = _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(15));
  const __m256i lsh = _mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), _mm256_set1_epi32(3));
  return _mm256_sub_epi32(_mm256_or_si256(lsl, _mm256_slli_epi32(lsh, 4)), _mm256_set1_epi32(32));
}

T2 inline void prefetch_piece(const uint8_t* piece) {
  for (int line = 0; line < 4; ++line) {
    _mm_prefetch(reinterpret_cast<const char*>(piece + kPrefetchL1Bytes + 64 * line), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(piece + kPrefetchL2Bytes + 64 * line), _MM_HINT_T1);
  }
}

// acc[16 r + 8 h + lane] = fma(float(isum), d_w * d_x, acc) for the chunk's n super-blocks from sb0, in
// order.
template <int NR>
T2 inline void add_chunk(const uint8_t* tile, int64_t sb0, int n, const uint8_t* const* x, const ActLayout& l,
                         const __m256i (*isum)[2 * NR], float* acc) {
  for (int b = 0; b < n; ++b) {
    const uint8_t* hdr = tile + (sb0 + b) * kPackedHeaderBytes;
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 16 * h)));
      for (int r = 0; r < NR; ++r) {
        float* a = acc + 16 * r + 8 * h;
        const __m256 c = _mm256_mul_ps(dw, _mm256_set1_ps(act_d(x[r], l)[sb0 + b]));
        _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[b][NR * h + r]), c, _mm256_load_ps(a)));
      }
    }
  }
}

// p[NR h + r] += the sums of piece j of super-block sb (both halves h: rows 8h..8h+7) for NR rows.
struct MaddSums {
  static constexpr int kPassRows = 4;  // the 16 ymm registers hold 4 rows' sums and the decoded weights
  T2 static __m256i table() { return table256(); }
  // Both halves at once, so that each activation broadcast serves 16 weight rows, and the scales are memory
  // operands of vpmaddwd (in registers, they and the constants that build them pushed an accumulator onto
  // the stack). Written half by half, the 4-row pass ran 1.2-1.3x slower on Zen 3 (an L1-resident tile,
  // one thread).
  template <int NR>
  T2 static void piece(__m256i table, const uint8_t* piece, const uint8_t* hdr, int j, int64_t sb,
                       const uint8_t* const* x, const ActLayout&, __m256i* p) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    alignas(32) __m256i s[2];
    for (int h = 0; h < 2; ++h) s[h] = scale_pairs(packed_scales(hdr, h, j));
    for (int line = 0; line < 4; ++line) {
      for (int part = 0; part < 2; ++part) {  // low nibbles: elements 4L.., high nibbles: 16 + 4L..
        __m256i w[2], a[2];
        for (int h = 0; h < 2; ++h) {
          __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(piece + 32 * h + 64 * line));
          if (part == 1) v = _mm256_srli_epi16(v, 4);
          w[h] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
          a[h] = _mm256_sign_epi8(w[h], w[h]);
        }
        // Each product added into its row's sum as it comes, the activations broadcast where they are used:
        // written as one expression per row, GCC 12 lifted the broadcasts of a piece ahead of it and summed
        // the products in a tree, both through the stack.
        for (int r = 0; r < NR; ++r) {
          const __m256i xq = broadcast_u32_here(x[r] + 256 * sb + 32 * j + 4 * line + 16 * part);
          for (int h = 0; h < 2; ++h)
            add_epi32_into(p[NR * h + r],
                           madd_epi16_mem(_mm256_maddubs_epi16(a[h], _mm256_sign_epi8(xq, w[h])), s[h]));
        }
      }
    }
  }
};

struct VnniSums {
  static constexpr int kPassRows = 8;
  // p[r] += the sums of half h of piece j of super-block sb (ph: the piece + 32 h) for NR rows.
  T2V static __m256i table() {
    alignas(16) uint8_t u[16];
    for (int i = 0; i < 16; ++i) u[i] = static_cast<uint8_t>(kIq4nlValues[i] + 128);
    return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(u)));
  }
  template <int NR>
  T2V static void half(__m256i table, const uint8_t* ph, const uint8_t* hdr, int h, int j, int64_t sb,
                       const uint8_t* const* x, const ActLayout& l, __m256i* p) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    // Each lane's sum starts at -128 * (the sum of the sub-block's 32 activations).
    __m256i d[NR];
    for (int r = 0; r < NR; ++r) {
      const int16_t* bs = act_bsums(x[r], l) + 16 * sb + 2 * j;
      d[r] = _mm256_set1_epi32(-128 * (bs[0] + bs[1]));
    }
    for (int line = 0; line < 4; ++line) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ph + 64 * line));
      const __m256i wlo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
      const __m256i whi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
      for (int r = 0; r < NR; ++r) {
        const uint8_t* xq = x[r] + 256 * sb + 32 * j + 4 * line;
        d[r] = _mm256_dpbusd_avx_epi32(d[r], wlo, broadcast_u32(xq));
        d[r] = _mm256_dpbusd_avx_epi32(d[r], whi, broadcast_u32(xq + 16));
      }
    }
    const __m256i s = packed_scales(hdr, h, j);
    for (int r = 0; r < NR; ++r) p[r] = _mm256_add_epi32(p[r], _mm256_mullo_epi32(d[r], s));
  }
  template <int NR>
  T2V static void piece(__m256i table, const uint8_t* piece, const uint8_t* hdr, int j, int64_t sb,
                        const uint8_t* const* x, const ActLayout& l, __m256i* p) {
    for (int h = 0; h < 2; ++h) half<NR>(table, piece + 32 * h, hdr, h, j, sb, x, l, p + NR * h);
  }
};

#define MTP_PACKED_PREFIX madd
#define MTP_PACKED_SUMS MaddSums
#define MTP_PACKED_TARGET T2
#include "matmul_avx2_iq4xs_packed.inc"

#define MTP_PACKED_PREFIX vnni
#define MTP_PACKED_SUMS VnniSums
#define MTP_PACKED_TARGET T2V
#include "matmul_avx2_iq4xs_packed.inc"

// ---- prompt-sized batches on plain AVX2 ----
//
// The sign trick costs three multiply-port instructions per 32 products (vpsignb, vpmaddubsw, vpmaddwd) and
// repeats the tile's nibble decoding for every pass of 4 rows. For wider batches each super-block of the tile
// is decoded once into 16-bit weights already multiplied by their sub-block scale, (ls - 32) * w (|.| <= 32 *
// 127, exact in int16), and each activation row is widened to 16 bits: then one vpmaddwd gives 16 products
// and one vpaddd adds them, with 4 rows x 16 weight rows of sums in registers. The sums are the same exact
// integers isum(sb) and the fma chain is add_chunk's, so the results are bitwise those of the other paths.
// Activation rows per register tile: 8 accumulators (with 5 or 6 rows GCC keeps them in memory).
constexpr int kWideRows = 4;
constexpr int kWideMinRows = 9;   // below, the 4-row passes over the tile measured as fast or faster
constexpr int kPairsPerSb = 128;  // 16-bit pairs in a super-block of 256
using WidePairs = int32_t[kPairsPerSb][16];  // pair k of weight rows 0..15: elements 2k, 2k+1, scaled

// Bytes {0, 1} of each 4-byte group of a 128-bit lane first, then bytes {2, 3}.
T2 inline __m256i split_pairs(__m256i w) {
  const __m256i order =
      _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
  // Qwords [lane 0 {0,1}, lane 1 {0,1}, lane 0 {2,3}, lane 1 {2,3}]: rows 0-7's first pairs, then second.
  return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(w, order), 0xD8);
}

// Super-block sb of the tile as out[k][o]: for sub-block j, line L of its piece (elements 4L..4L+3 in the
// low nibbles, 16+4L.. in the high ones) fills pairs 16j + 2L, +1 and 16j + 8 + 2L, +1.
T2 void decode_wide(const uint8_t* tile, int64_t nb, int64_t sb, WidePairs& out) {
  const __m256i table = table256(), m4 = _mm256_set1_epi8(0x0F);
  const uint8_t* hdr = tile + sb * kPackedHeaderBytes;
  const uint8_t* qs = tile + nb * kPackedHeaderBytes;
  for (int j = 0; j < 8; ++j) {
    const uint8_t* piece = qs + (j * nb + sb) * kPackedPieceBytes;
    for (int h = 0; h < 2; ++h) {
      const __m256i s = scale_pairs(packed_scales(hdr, h, j));
      for (int line = 0; line < 4; ++line) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(piece + 32 * h + 64 * line));
        const __m256i nib[2] = {_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)};
        for (int part = 0; part < 2; ++part) {
          const __m256i w = split_pairs(_mm256_shuffle_epi8(table, nib[part]));
          const int k = 16 * j + 8 * part + 2 * line;
          const __m256i w0 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(w)), s);
          const __m256i w1 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(w, 1)), s);
          _mm256_store_si256(reinterpret_cast<__m256i*>(&out[k][8 * h]), w0);
          _mm256_store_si256(reinterpret_cast<__m256i*>(&out[k + 1][8 * h]), w1);
        }
      }
    }
  }
}

// acc[16 r + o] = fma(float(isum(sb)), d_w * d_x, acc) for NR activation rows against the decoded
// super-block.
template <int NR>
T2 void wide_rows(const WidePairs& w, const uint8_t* tile, int64_t sb, const uint8_t* const* x,
                  const ActLayout& l, float* acc) {
  alignas(32) int16_t xw[NR][256];
  for (int r = 0; r < NR; ++r) {
    const uint8_t* q = x[r] + 256 * sb;
    for (int i = 0; i < 256; i += 16)
      _mm256_store_si256(reinterpret_cast<__m256i*>(&xw[r][i]),
                         _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i))));
  }
  // Rows 0-7 and 8-15 of the tile in separate arrays: GCC keeps those in registers (a [NR][2] array spilled).
  __m256i lo[NR], hi[NR];
  for (int r = 0; r < NR; ++r) lo[r] = hi[r] = _mm256_setzero_si256();
  for (int k = 0; k < kPairsPerSb; ++k) {
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(&w[k][0]));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(&w[k][8]));
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      int32_t pair;
      std::memcpy(&pair, &xw[r][2 * k], 4);
      const __m256i xv = _mm256_set1_epi32(pair);
      add_epi32_into(lo[r], _mm256_madd_epi16(w0, xv));
      add_epi32_into(hi[r], _mm256_madd_epi16(w1, xv));
    }
  }
  const uint8_t* hdr = tile + sb * kPackedHeaderBytes;
  for (int h = 0; h < 2; ++h) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hdr + 16 * h)));
    for (int r = 0; r < NR; ++r) {
      float* a = acc + 16 * r + 8 * h;
      const __m256 c = _mm256_mul_ps(dw, _mm256_set1_ps(act_d(x[r], l)[sb]));
      _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(h == 0 ? lo[r] : hi[r]), c, _mm256_load_ps(a)));
    }
  }
}

using WideRowsFn = void (*)(const WidePairs&, const uint8_t*, int64_t, const uint8_t* const*,
                            const ActLayout&, float*);

// Super-block outer: each is decoded once, then every group of kWideRows activation rows sums against it.
// This order reads a tile's pieces across it (sub-block j of super-block sb at j * nb + sb), which the
// hardware prefetcher does not follow, so each super-block requests its share of the next tile into L2 (the
// next tile of a matrix follows this one; past the last, a prefetch is harmless). Measured on Zen 4, one
// thread, the output head's shape (2048 x 248,320, streamed from memory): 12 rows 153 -> 97 ms, 16 rows
// 174 -> 123 ms (the 4-row passes take 104 and 139), where the whole next tile requested at once (a burst
// of 270 requests) gave 125 and 150, and into L1 117 and 140; cache-resident matrices unchanged.
void iq4xs_packed_wide(const uint8_t* tile, int64_t tile_bytes, int n_out, const uint8_t* const* x,
                       int64_t nx, const ActLayout& l, float* y, int64_t y_stride) {
  static constexpr WideRowsFn kGroups[] = {nullptr, wide_rows<1>, wide_rows<2>, wide_rows<3>, wide_rows<4>};
  struct alignas(32) Row16 {
    float v[16];
  };
  static thread_local std::vector<Row16> acc;
  acc.assign(static_cast<size_t>(nx), Row16{});
  alignas(32) WidePairs w;
  const int64_t share = (tile_bytes / l.nb + 63) / 64 * 64;  // bytes of the next tile per super-block
  const uint8_t* next = tile + tile_bytes;
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    for (int64_t b = sb * share; b < std::min(tile_bytes, (sb + 1) * share); b += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next + b), _MM_HINT_T1);
    decode_wide(tile, l.nb, sb, w);
    for (int64_t i = 0; i < nx; i += kWideRows) {
      const int nr = static_cast<int>(nx - i < kWideRows ? nx - i : kWideRows);
      kGroups[nr](w, tile, sb, x + i, l, acc[static_cast<size_t>(i)].v);
    }
  }
  for (int64_t r = 0; r < nx; ++r)
    std::memcpy(y + r * y_stride, acc[static_cast<size_t>(r)].v, sizeof(float) * n_out);
}

using BlockFn = void (*)(const uint8_t*, int64_t, const uint8_t* const*, const ActLayout&, float*);

// Activation rows run pass_rows at a time: each pass decodes the tile's weights once.
void run_packed(const BlockFn* blocks, int pass_rows, const uint8_t* tile, int n_out, const uint8_t* const* x,
                int64_t nx, const ActLayout& l, float* y, int64_t y_stride) {
  alignas(32) float acc[VnniSums::kPassRows * 16];
  for (int64_t i = 0; i < nx; i += pass_rows) {
    const int nr = static_cast<int>(nx - i < pass_rows ? nx - i : pass_rows);
    std::memset(acc, 0, sizeof(float) * 16 * nr);
    blocks[nr](tile, l.nb, x + i, l, acc);
    for (int r = 0; r < nr; ++r) std::memcpy(y + (i + r) * y_stride, acc + 16 * r, sizeof(float) * n_out);
  }
}

void iq4xs_packed(const uint8_t* tile, int64_t row_bytes, int n_out, const uint8_t* const* x, int64_t nx,
                  const ActLayout& l, float* y, int64_t y_stride) {
  static constexpr BlockFn kMadd[] = {nullptr, madd_block<1>, madd_block<2>, madd_block<3>, madd_block<4>};
  static constexpr BlockFn kVnni[] = {nullptr,       vnni_block<1>, vnni_block<2>,
                                      vnni_block<3>, vnni_block<4>, vnni_block<5>,
                                      vnni_block<6>, vnni_block<7>, vnni_block<8>};
  static constexpr BlockFn kVnniSb[] = {nullptr,          vnni_block_sb<1>, vnni_block_sb<2>,
                                        vnni_block_sb<3>, vnni_block_sb<4>, vnni_block_sb<5>,
                                        vnni_block_sb<6>, vnni_block_sb<7>, vnni_block_sb<8>};
  // One pass reads the tile from memory: in memory order. Several passes find it in cache after the first;
  // on plain AVX2 they stay in memory order too (Zen 3, one thread, the output head's shape: 8 rows in two
  // passes 81 ms against 124 super-block outer, kernels_bench --packed).
  const bool vnni = avx_vnni_active();
  if (!vnni && nx >= kWideMinRows)
    return iq4xs_packed_wide(tile, kTileOut * row_bytes, n_out, x, nx, l, y, y_stride);
  const int pass_rows = vnni ? VnniSums::kPassRows : MaddSums::kPassRows;
  const BlockFn* blocks = vnni ? (nx <= pass_rows ? kVnni : kVnniSb) : kMadd;
  run_packed(blocks, pass_rows, tile, n_out, x, nx, l, y, y_stride);
}

}  // namespace

RowDotFn avx2_iq4xs_rows() {
  return iq4xs_rows;
}
TileFn avx2_iq4xs_packed() {
  return iq4xs_packed;
}

#else

RowDotFn avx2_iq4xs_rows() {
  return nullptr;
}
TileFn avx2_iq4xs_packed() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
