// AVX-512 VNNI kernels for IQ4_XS weights x Q8_K activations: a row kernel (one weight row against 1..8
// activation rows, used for decode-sized batches) and a tile kernel (16 weight rows against any number of
// activation rows, used for prompt-sized batches), which give bitwise the same result for every pair.
//
// Canonical order of one (weight row, activation row) pair, shared by both kernels: for sub-block j (0..7) of
// super-block sb, the integer sum isum(sb, j) = sum of 32 q * w is exact. With lsdw(sb, j) = float(ls - 32) *
// d_w(sb) (an exact product) and c = lsdw * d_x(sb) (one rounding),
//   A_j = fma(float(isum(sb, j)), c, A_j)      for sb = 0, 1, ... in order, separately for each j,
//   y = ((A_0 + A_1) + (A_4 + A_5)) + ((A_2 + A_3) + (A_6 + A_7)).
// The row kernel keeps the eight A_j of a pair in the lanes of one ymm register; the tile kernel keeps, per
// j, one zmm whose 16 lanes are 16 weight rows, after transposing the weights (4 bytes per lane) once per
// tile.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "avx512_tile.h"
#include "matmul_internal.h"
#include "quant/blocks.h"

#if MTP_HAVE_X86_SIMD
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mtp::kernels::detail {

#if MTP_HAVE_X86_SIMD
namespace {

#define T512 MTP_TARGET_AVX512
// Functions templated on VBMI use: compiled with it, and run with it only where the CPU has it.
#define T512V MTP_TARGET_AVX512_VBMI

bool vbmi_available() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vbmi") != 0;
  }();
  return ok;
}
bool vbmi_enabled = true;  // tests switch it to compare the two paths

constexpr int kSbBytes = sizeof(BlockIQ4_XS);

T512 inline __m512i table512() {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
}

// float(ls_j - 32) * d for the sub-blocks of one super-block, in lane order [0, 2, 4, 6, 1, 3, 5, 7].
T512 inline __m256 lsdw_of(const uint8_t* blk) {
  uint16_t d, sh;
  uint32_t sl;
  std::memcpy(&d, blk, 2);
  std::memcpy(&sh, blk + 2, 2);
  std::memcpy(&sl, blk + 4, 4);
  const __m256i j = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i lo =
      _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(sl)), _mm256_slli_epi32(j, 2)),
                       _mm256_set1_epi32(15));
  const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(sh), _mm256_slli_epi32(j, 1)),
                                      _mm256_set1_epi32(3));
  const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(ls), _mm256_set1_ps(_cvtsh_ss(d)));
}

// 64 int8 weights of chunk k (sub-blocks 2k and 2k+1) of a super-block.
T512 inline __m512i chunk_vals(const uint8_t* qs, int k, __m512i table) {
  const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * k));
  __m512i z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(t));
  z = _mm512_srlv_epi64(z, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
  return _mm512_shuffle_epi8(table, _mm512_and_si512(z, _mm512_set1_epi8(0x0F)));
}

// -128 * (sum of the 4 bytes of w) per 32-bit lane.
T512 inline __m512i corr_of(__m512i w) {
  const __m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(0x80)), w);
  return _mm512_sub_epi32(_mm512_setzero_si512(), c);
}

// The canonical final tree over the lanes [A0, A2, A4, A6, A1, A3, A5, A7].
T512 inline float tree8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // A0+A1, A2+A3, ..
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// ---- row kernel ----

template <int NR>
T512 void iq4xs_row(const uint8_t* w, const uint8_t* const* x, const ActLayout& l, float* out) {
  const __m512i table = table512();
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const uint8_t* blk = w + sb * kSbBytes;
    const __m256 lsdw = lsdw_of(blk);
    __m512i v[4], corr[4];
    for (int k = 0; k < 4; ++k) {
      v[k] = chunk_vals(blk + 8, k, table);
      corr[k] = corr_of(v[k]);
    }
    for (int r = 0; r < NR; ++r) {
      const uint8_t* xs = x[r] + 256 * sb;
      __m512i p[4];
      for (int k = 0; k < 4; ++k) p[k] = _mm512_dpbusd_epi32(corr[k], _mm512_loadu_si512(xs + 64 * k), v[k]);
      // Lanes 0-7 of p[k] belong to sub-block 2k, lanes 8-15 to 2k+1: reduce to
      // [isum0, isum2, isum4, isum6, isum1, isum3, isum5, isum7].
      const __m512i q01 =
          _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
      const __m512i q23 =
          _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
      const __m512i y = _mm512_add_epi32(_mm512_unpacklo_epi64(q01, q23), _mm512_unpackhi_epi64(q01, q23));
      const __m512i u = _mm512_shuffle_i32x4(y, y, _MM_SHUFFLE(3, 1, 2, 0));  // blocks 0, 2 | 1, 3
      const __m256i z = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
      const __m256 c = _mm256_mul_ps(lsdw, _mm256_set1_ps(act_d(x[r], l)[sb]));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(z), c, acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = tree8(acc[r]);
}

void iq4xs_rows(const uint8_t* w, const uint8_t* const* x, int nr, const ActLayout& l, float* out) {
  switch (nr) {
    case 1:
      return iq4xs_row<1>(w, x, l, out);
    case 2:
      return iq4xs_row<2>(w, x, l, out);
    case 3:
      return iq4xs_row<3>(w, x, l, out);
    case 4:
      return iq4xs_row<4>(w, x, l, out);
    case 5:
      return iq4xs_row<5>(w, x, l, out);
    case 6:
      return iq4xs_row<6>(w, x, l, out);
    case 7:
      return iq4xs_row<7>(w, x, l, out);
    default:
      return iq4xs_row<8>(w, x, l, out);
  }
}

// ---- tile kernel ----
//
// The decoded tile: for each (j, sb), in the order j-major, sb-minor: 8 zmm of weights (group g holds, in
// lane o, elements 4g..4g+3 of sub-block j of weight row o), then corr (-128 * the lane's sum of 32 weights,
// int32) and lsdw (float), 640 bytes.
constexpr int kPieceBytes = 10 * 64;

// Per thread, only grows.
struct TileBuffer {
  std::vector<uint8_t> v;
  uint8_t* get(int64_t bytes) {
    if (static_cast<int64_t>(v.size()) < bytes + 64) v.resize(static_cast<size_t>(bytes + 64));
    const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
    return v.data() + ((64 - p % 64) % 64);
  }
};

// Rows row[0..15] (of n_in / 256 super-blocks each) into the tile layout.
T512 void decode_tile(const uint8_t* const* row, int64_t nb, uint8_t* tile) {
  const __m512i table = table512();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nb; ++sb) {
    // Headers: d | scales_h in the low dword, scales_l in the high dword of each row's first 8 bytes.
    alignas(64) uint64_t hdr[16];
    for (int o = 0; o < 16; ++o) std::memcpy(&hdr[o], row[o] + sb * kSbBytes, 8);
    const __m512i h0 = _mm512_load_si512(hdr), h1 = _mm512_load_si512(hdr + 8);
    const __m512i lo32 =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(h0)), _mm512_cvtepi64_epi32(h1), 1);
    const __m512i hi32 =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(_mm512_srli_epi64(h0, 32))),
                           _mm512_cvtepi64_epi32(_mm512_srli_epi64(h1, 32)), 1);
    const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(lo32));
    for (int j = 0; j < 8; ++j) {
      uint8_t* piece = tile + (j * nb + sb) * kPieceBytes;
      // R[a] holds rows a, a+4, a+8, a+12 (one 128-bit block each): the 16 bytes of sub-block j.
      __m512i R[4];
      const int64_t off = sb * kSbBytes + 8 + 16 * j;
      for (int a = 0; a < 4; ++a) {
        __m512i t = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[a] + off)));
        t = _mm512_inserti32x4(t, _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[a + 4] + off)), 1);
        t = _mm512_inserti32x4(t, _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[a + 8] + off)), 2);
        R[a] = _mm512_inserti32x4(t, _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[a + 12] + off)), 3);
      }
      // 4x4 dword transposes inside each 128-bit block: P[q] lane 4b + a = dword q of row 4b + a.
      const __m512i t0 = _mm512_unpacklo_epi32(R[0], R[1]), t1 = _mm512_unpackhi_epi32(R[0], R[1]);
      const __m512i t2 = _mm512_unpacklo_epi32(R[2], R[3]), t3 = _mm512_unpackhi_epi32(R[2], R[3]);
      const __m512i P[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                            _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
      __m512i* wv = reinterpret_cast<__m512i*>(piece);
      __m512i s = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q) {
        const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(P[q], m4));
        const __m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi32(P[q], 4), m4));
        _mm512_store_si512(wv + q, lo);
        _mm512_store_si512(wv + q + 4, hi);
        s = _mm512_dpbusd_epi32(s, _mm512_set1_epi8(static_cast<char>(0x80)), lo);
        s = _mm512_dpbusd_epi32(s, _mm512_set1_epi8(static_cast<char>(0x80)), hi);
      }
      _mm512_store_si512(wv + 8, _mm512_sub_epi32(_mm512_setzero_si512(), s));
      const __m512i lsl = _mm512_and_si512(_mm512_srli_epi32(hi32, 4 * j), _mm512_set1_epi32(15));
      const __m512i lsh = _mm512_and_si512(_mm512_srli_epi32(lo32, 16 + 2 * j), _mm512_set1_epi32(3));
      const __m512i ls =
          _mm512_sub_epi32(_mm512_or_si512(lsl, _mm512_slli_epi32(lsh, 4)), _mm512_set1_epi32(32));
      _mm512_store_ps(reinterpret_cast<float*>(wv + 9), _mm512_mul_ps(_mm512_cvtepi32_ps(ls), dw));
    }
  }
}

// The canonical final tree of every pair of a tile: y[r * y_stride + o] = tree over j of a[r][j][o], for
// o < n_out and r < nr (a: nr x 8 x 16 floats).
T512 inline void store_tree(const float* a, int nr, int n_out, float* y, int64_t y_stride) {
  const __mmask16 m =
      n_out >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n_out) - 1);
  for (int r = 0; r < nr; ++r) {
    const float* ar = a + r * 128;
    const __m512 t01 = _mm512_add_ps(_mm512_load_ps(ar), _mm512_load_ps(ar + 16));
    const __m512 t45 = _mm512_add_ps(_mm512_load_ps(ar + 64), _mm512_load_ps(ar + 80));
    const __m512 t23 = _mm512_add_ps(_mm512_load_ps(ar + 32), _mm512_load_ps(ar + 48));
    const __m512 t67 = _mm512_add_ps(_mm512_load_ps(ar + 96), _mm512_load_ps(ar + 112));
    const __m512 t = _mm512_add_ps(_mm512_add_ps(t01, t45), _mm512_add_ps(t23, t67));
    _mm512_mask_storeu_ps(y + r * y_stride, m, t);
  }
}

// NR activation rows against a decoded tile: y[r * y_stride + o] for o < n_out. With pf, the cache lines
// [pf, pf + 64 * pf_lines) are requested into L2 along the way, an eighth per j (see iq4xs_packed).
template <int NR>
T512 void tile_rows(const uint8_t* tile, int64_t nb, const uint8_t* const* x, const ActLayout& l, int n_out,
                    float* y, int64_t y_stride, const uint8_t* pf = nullptr, int64_t pf_lines = 0) {
  alignas(64) float a[NR][8][16];
  for (int j = 0; j < 8; ++j) {
    for (int64_t i = j * pf_lines / 8; i < (j + 1) * pf_lines / 8; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(pf + 64 * i), _MM_HINT_T1);
    __m512 acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nb; ++sb) {
      const __m512i* wv = reinterpret_cast<const __m512i*>(tile + (j * nb + sb) * kPieceBytes);
      // Two dependency chains per row (even and odd g): one chain of 8 is latency-bound. Integer sums, so
      // the split does not change any bit.
      __m512i s0[NR], s1[NR];
      for (int r = 0; r < NR; ++r) s0[r] = _mm512_load_si512(wv + 8), s1[r] = _mm512_setzero_si512();
      for (int g = 0; g < 8; g += 2) {
        const __m512i w0 = _mm512_load_si512(wv + g), w1 = _mm512_load_si512(wv + g + 1);
        for (int r = 0; r < NR; ++r) {
          int32_t x0, x1;
          std::memcpy(&x0, x[r] + 256 * sb + 32 * j + 4 * g, 4);
          std::memcpy(&x1, x[r] + 256 * sb + 32 * j + 4 * g + 4, 4);
          s0[r] = _mm512_dpbusd_epi32(s0[r], _mm512_set1_epi32(x0), w0);
          s1[r] = _mm512_dpbusd_epi32(s1[r], _mm512_set1_epi32(x1), w1);
        }
      }
      const __m512 lsdw = _mm512_load_ps(reinterpret_cast<const float*>(wv + 9));
      for (int r = 0; r < NR; ++r) {
        const __m512 c = _mm512_mul_ps(lsdw, _mm512_set1_ps(act_d(x[r], l)[sb]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0[r], s1[r])), c, acc[r]);
      }
    }
    for (int r = 0; r < NR; ++r) _mm512_store_ps(a[r][j], acc[r]);
  }
  store_tree(a[0][0], NR, n_out, y, y_stride);
}

// Every activation row against a decoded tile. With pf, the groups of 8 rows request the pf_bytes at pf
// (the next packed tile) into L2 while they compute, each group its share.
T512 void run_tile(const uint8_t* tile, const uint8_t* const* x, int64_t nx, const ActLayout& l, int n_out,
                   float* y, int64_t y_stride, const uint8_t* pf = nullptr, int64_t pf_bytes = 0) {
  int64_t i = 0;
  const int64_t groups = nx / 8, pf_lines = groups > 0 ? (pf_bytes + 63) / 64 : 0;
  for (; i + 8 <= nx; i += 8) {
    const int64_t g = i / 8, l0 = g * pf_lines / groups, l1 = (g + 1) * pf_lines / groups;
    tile_rows<8>(tile, l.nb, x + i, l, n_out, y + i * y_stride, y_stride, pf + 64 * l0, l1 - l0);
  }
  float* yi = y + i * y_stride;
  switch (nx - i) {
    case 0:
      break;
    case 1:
      return tile_rows<1>(tile, l.nb, x + i, l, n_out, yi, y_stride);
    case 2:
      return tile_rows<2>(tile, l.nb, x + i, l, n_out, yi, y_stride);
    case 3:
      return tile_rows<3>(tile, l.nb, x + i, l, n_out, yi, y_stride);
    case 4:
      return tile_rows<4>(tile, l.nb, x + i, l, n_out, yi, y_stride);
    case 5:
      return tile_rows<5>(tile, l.nb, x + i, l, n_out, yi, y_stride);
    case 6:
      return tile_rows<6>(tile, l.nb, x + i, l, n_out, yi, y_stride);
    default:
      return tile_rows<7>(tile, l.nb, x + i, l, n_out, yi, y_stride);
  }
}

T512 void iq4xs_tile(const uint8_t* w, int64_t row_bytes, int n_out, const uint8_t* const* x, int64_t nx,
                     const ActLayout& l, float* y, int64_t y_stride) {
  static thread_local TileBuffer buf;
  uint8_t* tile = buf.get(8 * l.nb * kPieceBytes);
  const uint8_t* row[16];
  for (int o = 0; o < 16; ++o) row[o] = w + (o < n_out ? o : 0) * row_bytes;
  decode_tile(row, l.nb, tile);
  run_tile(tile, x, nx, l, n_out, y, y_stride);
}

// ---- packed weights (kernels/pack.h) ----
//
// The packed tile already holds each line of 16 rows x 4 bytes that the tile kernel's weight vectors are
// made of, so decoding is a mask, a shift and the table lookup per vector. The integer sums, scales and
// float steps are the tile kernel's, in the same order: the results are bitwise those of the row-format
// kernels.

constexpr int64_t kPackedHeaderBytes = 128;
// Weights stream from DRAM at decode: each piece requests the bytes this far ahead into L1 (into the next
// tile at the end of one; matrices are contiguous), which the out-of-order window alone does not reach
// (kernels_bench --packed, engine_bench: none 0.82x, 1 KB 0.93x, 2 KB 1.0x, 4 KB 0.95x decode speed), and
// further ahead into L2, which keeps more lines in flight than L1's fill buffers allow (one core's products:
// 2048x512 from DRAM 45-53 -> 37-47 us, the 248K-row head 26-27 -> 19-24 ms; 8-32 KB all helped).
constexpr int64_t kPackedPrefetchBytes = 2048;
constexpr int64_t kPackedPrefetchL2Bytes = 12288;
constexpr int64_t kPackedPieceBytes = 256;

// float(ls_j - 32) * d for the 16 rows of super-block header `h`.
T512 inline __m512 packed_lsdw(const uint8_t* h, int j) {
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
  const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 32)));
  const __m512i sl = _mm512_loadu_si512(h + 64);
  const __m512i lsl = _mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(15));
  const __m512i lsh = _mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3));
  const __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lsl, _mm512_slli_epi32(lsh, 4)), _mm512_set1_epi32(32));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(ls), dw);
}

// The 8 weight vectors of one (j, sb) piece and their corr (-128 * the lane's sum of 32 weights).
T512 inline __m512i packed_vals(const uint8_t* piece, __m512i table, __m512i* wv) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), k80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
  for (int q = 0; q < 4; ++q) {
    const __m512i v = _mm512_loadu_si512(piece + 64 * q);
    wv[q] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4));
    wv[q + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
    s0 = _mm512_dpbusd_epi32(s0, k80, wv[q]);
    s1 = _mm512_dpbusd_epi32(s1, k80, wv[q + 4]);
  }
  return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_add_epi32(s0, s1));
}

// ---- decode-sized batches over a packed tile: unsigned weights against signed activations ----
//
// Here the weights are vpdpbusd's unsigned operand (level + 128, 1..241) and the activations its signed one
// (ActLayout::sq), so the offset term, 128 * the sub-block's activation sum, is one precomputed integer per
// (activation row, sub-block) (ActLayout::xcorr) instead of eight vpdpbusd per piece over the weights. The
// integer sums are exact either way: bitwise the same results as the signed-weight kernels.

// The 16 IQ4_NL levels + 128 in each 128-bit lane (so also a 64-entry table indexed by the low 6 bits with
// the low 4 bits deciding, for vpermb).
T512 inline __m512i table512_u() {
  alignas(16) uint8_t u[16];
  for (int i = 0; i < 16; ++i) u[i] = static_cast<uint8_t>(kIq4nlValues[i] + 128);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(u)));
}

// The 8 unsigned weight vectors of one (j, sb) piece. With VBMI, vpermb reads only an index's low 6 bits and
// the table repeats every 16 bytes, so the nibbles need no masking: 12 instructions instead of 20.
template <bool kVbmi>
T512V inline void packed_vals_u(const uint8_t* piece, __m512i table, __m512i* wv) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int q = 0; q < 4; ++q) {
    const __m512i v = _mm512_loadu_si512(piece + 64 * q);
    if constexpr (kVbmi) {
      wv[q] = _mm512_permutexvar_epi8(v, table);
      wv[q + 4] = _mm512_permutexvar_epi8(_mm512_srli_epi16(v, 4), table);
    } else {
      wv[q] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, m4));
      wv[q + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
    }
  }
}

// Up to 8 activation rows straight from a packed tile (decode-sized batches: nothing goes through memory).
template <int NR, bool kVbmi>
T512V void packed_rows(const uint8_t* tile, int64_t nb, const uint8_t* const* x, const ActLayout& l,
                       int n_out, float* y, int64_t y_stride) {
  const __m512i table = table512_u();
  const uint8_t* qs = tile + nb * kPackedHeaderBytes;
  alignas(64) float a[NR][8][16];
  for (int j = 0; j < 8; ++j) {
    __m512 acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nb; ++sb) {
      __m512i wv[8];
      const uint8_t* piece = qs + (j * nb + sb) * kPackedPieceBytes;
      for (int q = 0; q < 4; ++q) {
        _mm_prefetch(reinterpret_cast<const char*>(piece + kPackedPrefetchBytes + 64 * q), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(piece + kPackedPrefetchL2Bytes + 64 * q), _MM_HINT_T1);
      }
      packed_vals_u<kVbmi>(piece, table, wv);
      const __m512 lsdw = packed_lsdw(tile + sb * kPackedHeaderBytes, j);
      for (int r = 0; r < NR; ++r) {
        const __m512i init = _mm512_set1_epi32(act_xcorr(x[r], l)[8 * sb + j]);
        const __m512i s = dot32_lanes<true, (NR >= 2)>(init, act_sq(x[r], l) + 256 * sb + 32 * j, wv);
        const __m512 c = _mm512_mul_ps(lsdw, _mm512_set1_ps(act_d(x[r], l)[sb]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), c, acc[r]);
      }
    }
    for (int r = 0; r < NR; ++r) _mm512_store_ps(a[r][j], acc[r]);
  }
  store_tree(a[0][0], NR, n_out, y, y_stride);
}

#include "matmul_avx512_iq4xs_amx.inc"

// A packed tile into the decoded-tile layout of decode_tile (for batches that reuse it many times).
T512 void decode_packed(const uint8_t* tile, int64_t nb, uint8_t* out) {
  const __m512i table = table512();
  const uint8_t* qs = tile + nb * kPackedHeaderBytes;
  for (int j = 0; j < 8; ++j) {
    for (int64_t sb = 0; sb < nb; ++sb) {
      __m512i* wv = reinterpret_cast<__m512i*>(out + (j * nb + sb) * kPieceBytes);
      __m512i v[8];
      const __m512i corr = packed_vals(qs + (j * nb + sb) * kPackedPieceBytes, table, v);
      for (int g = 0; g < 8; ++g) _mm512_store_si512(wv + g, v[g]);
      _mm512_store_si512(wv + 8, corr);
      _mm512_store_ps(reinterpret_cast<float*>(wv + 9), packed_lsdw(tile + sb * kPackedHeaderBytes, j));
    }
  }
}

T512 void iq4xs_packed(const uint8_t* tile, int64_t, int n_out, const uint8_t* const* x, int64_t nx,
                       const ActLayout& l, float* y, int64_t y_stride) {
  using RowsFn =
      void (*)(const uint8_t*, int64_t, const uint8_t* const*, const ActLayout&, int, float*, int64_t);
  static constexpr RowsFn kRows[2][9] = {
      {nullptr, packed_rows<1, false>, packed_rows<2, false>, packed_rows<3, false>, packed_rows<4, false>,
       packed_rows<5, false>, packed_rows<6, false>, packed_rows<7, false>, packed_rows<8, false>},
      {nullptr, packed_rows<1, true>, packed_rows<2, true>, packed_rows<3, true>, packed_rows<4, true>,
       packed_rows<5, true>, packed_rows<6, true>, packed_rows<7, true>, packed_rows<8, true>}};
  const bool vbmi = vbmi_enabled && vbmi_available();
  const RowsFn* rows = kRows[vbmi];
  // 9 rows and more, equally spaced, through AMX where the CPU has it, 32 at a time (amx_rows, amx_rows2).
  // Measured against VNNI over packed matrices (a throwaway harness alternating the two paths; one thread,
  // two): 2048 x 32768, 9-16 rows 1.08-1.45x, 1.06-1.53x; 17-32 rows 0.94-1.32x, 1.03-1.28x; 4096 x 8192,
  // 9-32 rows 1.12-1.62x, 1.15-1.40x; 40-512 rows 1.07-1.21x, 0.94-1.19x. 8 rows measured 0.89-1.22x: VNNI
  // stays below 9.
  // The AMX kernels decode with VBMI: off with it (tests switch it off to cover the other decode).
  if (nx >= 9 && vbmi && amx_enabled && amx_available() && equally_spaced(x, static_cast<int>(nx))) {
    int64_t i = 0;
    for (; nx - i > 32; i += 32)
      amx_kernel(32)(tile, l.nb, x + i, l, n_out, y + i * y_stride, y_stride, i == 0);
    if (nx - i >= 9)
      return amx_kernel(nx - i)(tile, l.nb, x + i, l, n_out, y + i * y_stride, y_stride, i == 0);
    x += i, nx -= i, y += i * y_stride;
  }
  if (nx <= 8) return rows[nx](tile, l.nb, x, l, n_out, y, y_stride);
  // A few rows more than 8 over a wide tile: the packed tile twice, straight (8 rows, then the rest), beats
  // decoding it once into memory, where the decoded tile (8 * nb pieces of 640 bytes: 40 KB at n_in 2048)
  // and the rows' activations no longer fit L1 together. Measured on one core (Intel): 2048 inputs, 9-12
  // rows, 1.02-1.19x; 4096 inputs, 9-13 rows, 1.05-1.25x; 512 inputs (a 10 KB decoded tile) 0.9x; 14-16 rows
  // even. On an AMD EPYC host, t=2, alternating in one process: 13-16 rows 1.05-1.27x over the 248K-row head
  // and a GDN input projection (2048 inputs), 1.0-1.2x over its output projection (4096 inputs); 20 rows
  // 0.94-1.09x, 24-32 even, so up to 16.
  if (nx <= 16 && l.nb >= 8) {
    rows[8](tile, l.nb, x, l, n_out, y, y_stride);
    return rows[nx - 8](tile, l.nb, x + 8, l, n_out, y + 8 * y_stride, y_stride);
  }
  static thread_local TileBuffer buf;
  uint8_t* decoded = buf.get(8 * l.nb * kPieceBytes);
  decode_packed(tile, l.nb, decoded);
  // Many rows make this compute-bound: the next tile (tiles are contiguous; past the end of the matrix the
  // requests are harmless) streams in while this one is multiplied, instead of stalling its decode.
  const int64_t tile_bytes = l.nb * (kPackedHeaderBytes + 8 * kPackedPieceBytes);
  run_tile(decoded, x, nx, l, n_out, y, y_stride, tile + tile_bytes, tile_bytes);
}

}  // namespace

bool set_vbmi_enabled(bool on) {
  const bool was = vbmi_enabled;
  vbmi_enabled = on;
  return was;
}
bool vbmi_active() {
  return vbmi_enabled && vbmi_available();
}

bool set_amx_enabled(bool on) {
  const bool was = amx_enabled;
  amx_enabled = on;
  return was;
}
bool amx_active() {
  return amx_enabled && amx_available() && vbmi_active();
}

RowDotFn avx512_iq4xs_rows() {
  return iq4xs_rows;
}
TileFn avx512_iq4xs_tile() {
  return iq4xs_tile;
}
TileFn avx512_iq4xs_packed() {
  return iq4xs_packed;
}

#else

bool set_vbmi_enabled(bool) {
  return false;
}
bool vbmi_active() {
  return false;
}
bool set_amx_enabled(bool) {
  return false;
}
bool amx_active() {
  return false;
}
RowDotFn avx512_iq4xs_rows() {
  return nullptr;
}
TileFn avx512_iq4xs_tile() {
  return nullptr;
}
TileFn avx512_iq4xs_packed() {
  return nullptr;
}

#endif

}  // namespace mtp::kernels::detail
