// Vector kernels: scalar twins, and AVX2 / AVX-512 / NEON versions generated from vec_impl.inc.
#include "kernels/vec.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "kernels/isa.h"
#include "matmul_internal.h"

#if MTP_HAVE_X86_SIMD
// GCC 12's AVX-512 headers build "undefined" vectors as `__m512 __Y = __Y;`, which -Wuninitialized reports at
// every inlined use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif
#if MTP_HAVE_ARM_DOTPROD
#include <arm_neon.h>
#endif

namespace mtp::kernels {

namespace scalar {

float dot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(s);
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = w != nullptr ? (x[i] * scale) * w[i] : x[i] * scale;
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void sigmoid(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void silu(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void delta_rule_columns(const DeltaRuleRow* rows, int64_t n, int64_t d, int64_t c_begin) {
  for (int64_t c = c_begin; c < d; ++c) {
    for (int64_t t = 0; t < n; ++t) {
      const DeltaRuleRow& w = rows[t];
      float r = 0.0f;
      for (int64_t i = 0; i < d; ++i) {
        const float x = w.decay * w.src[i * d + c];
        w.dst[i * d + c] = x;
        r = std::fma(x, w.k[i], r);
      }
      r = w.beta * (w.v[c] - r);
      float o = 0.0f;
      for (int64_t i = 0; i < d; ++i) {
        const float x = std::fma(w.k[i], r, w.dst[i * d + c]);
        w.dst[i * d + c] = x;
        if (w.snapshot != nullptr) w.snapshot[i * d + c] = x;
        o = std::fma(x, w.q[i], o);
      }
      w.out[c] = o;
    }
  }
}

void delta_rule(const DeltaRuleRow* rows, int64_t n, int64_t d) {
  delta_rule_columns(rows, n, d, 0);
}

void axpy_rows(const float* p, const float* v, int64_t v_stride, int64_t n_rows, float* y, int64_t n) {
  for (int64_t t = 0; t < n_rows; ++t) axpy(p[t], v + t * v_stride, y, n);
}

void dot_queries(const float* k, const float* const* q, int64_t nq, int64_t n, float scale, float* out) {
  for (int64_t h = 0; h < nq; ++h) out[h] = scale * dot(q[h], k, n);
}

void dot_keys_queries(const float* const* k, int64_t nk, const float* const* q, int64_t nq, int64_t n,
                      float scale, float* out, int64_t out_stride) {
  for (int64_t h = 0; h < nq; ++h)
    for (int64_t j = 0; j < nk; ++j) out[h * out_stride + j] = scale * dot(q[h], k[j], n);
}

void axpy_rows_queries(const float* const* p, const float* v, int64_t v_stride, int64_t n_rows,
                       float* const* y, int64_t nq, int64_t n) {
  for (int64_t h = 0; h < nq; ++h) axpy_rows(p[h], v, v_stride, n_rows, y[h], n);
}

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace scalar

#if MTP_HAVE_X86_SIMD

namespace avx512 {
#define VT MTP_TARGET_AVX512
using V = __m512;
constexpr int W = 16;
VT inline V vld(const float* p) {
  return _mm512_loadu_ps(p);
}
VT inline void vst(float* p, V v) {
  _mm512_storeu_ps(p, v);
}
VT inline void vstream(float* p, V v) {
  _mm512_stream_ps(p, v);
}
VT inline void vstream_fence() {
  _mm_sfence();
}
VT inline V vset(float a) {
  return _mm512_set1_ps(a);
}
VT inline V vadd(V a, V b) {
  return _mm512_add_ps(a, b);
}
VT inline V vsub(V a, V b) {
  return _mm512_sub_ps(a, b);
}
VT inline V vmul(V a, V b) {
  return _mm512_mul_ps(a, b);
}
VT inline V vdiv(V a, V b) {
  return _mm512_div_ps(a, b);
}
VT inline V vfma(V a, V b, V c) {
  return _mm512_fmadd_ps(a, b, c);
}
VT inline V vmax(V a, V b) {
  return _mm512_max_ps(a, b);
}
VT inline V vmin(V a, V b) {
  return _mm512_min_ps(a, b);
}
VT inline V vround(V a) {
  return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
VT inline V vpow2i(V n) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
VT inline V vlt(V x, V y, V a, V b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_LT_OQ), b, a);
}
VT inline float vhsum(V v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
// out lane i = the sum of v[i]'s lanes, for 16 vectors at once, every one by the same tree (so a sum does not
// depend on which lane it lands in): ((l0 + l2) + (l1 + l3)) within each 128-bit block, then
// (b0 + b1) + (b2 + b3) over the blocks.
VT inline V vsum_lanes(const V* v) {
  V s[8], u[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    s[i] =
        _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(s[2 * i]), b = _mm512_castps_pd(s[2 * i + 1]);
    u[i] =
        _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // u[i], block b: the block-b sums of v[4i .. 4i+3].
  V r[2];
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)
    r[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
}
// The W sums of a full dot_block, lane 4j + h for key j and query h, times scale, into out[h * stride + j]:
// one transposing permute, then a row of 4 keys per query.
VT inline void vstore_key_rows(V sums, float scale, float* out, int64_t stride) {
  const V t = _mm512_mul_ps(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), sums),
      _mm512_set1_ps(scale));
  _mm_storeu_ps(out, _mm512_castps512_ps128(t));
  _mm_storeu_ps(out + stride, _mm512_extractf32x4_ps(t, 1));
  _mm_storeu_ps(out + 2 * stride, _mm512_extractf32x4_ps(t, 2));
  _mm_storeu_ps(out + 3 * stride, _mm512_extractf32x4_ps(t, 3));
}
VT inline float vhmax(V v) {
  return _mm512_reduce_max_ps(v);
}
#include "vec_impl.inc"
#undef VT
}  // namespace avx512

namespace avx2 {
#define VT MTP_TARGET_AVX2
using V = __m256;
constexpr int W = 8;
VT inline V vld(const float* p) {
  return _mm256_loadu_ps(p);
}
VT inline void vst(float* p, V v) {
  _mm256_storeu_ps(p, v);
}
VT inline void vstream(float* p, V v) {
  _mm256_stream_ps(p, v);
}
VT inline void vstream_fence() {
  _mm_sfence();
}
VT inline V vset(float a) {
  return _mm256_set1_ps(a);
}
VT inline V vadd(V a, V b) {
  return _mm256_add_ps(a, b);
}
VT inline V vsub(V a, V b) {
  return _mm256_sub_ps(a, b);
}
VT inline V vmul(V a, V b) {
  return _mm256_mul_ps(a, b);
}
VT inline V vdiv(V a, V b) {
  return _mm256_div_ps(a, b);
}
VT inline V vfma(V a, V b, V c) {
  return _mm256_fmadd_ps(a, b, c);
}
VT inline V vmax(V a, V b) {
  return _mm256_max_ps(a, b);
}
VT inline V vmin(V a, V b) {
  return _mm256_min_ps(a, b);
}
VT inline V vround(V a) {
  return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
VT inline V vpow2i(V n) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
VT inline V vlt(V x, V y, V a, V b) {
  return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, y, _CMP_LT_OQ));
}
VT inline float vhsum(V v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
// out lane i = the sum of v[i]'s lanes, for 8 vectors at once, every one by the same tree:
// ((l0 + l2) + (l1 + l3)) within each 128-bit block, then b0 + b1.
VT inline V vsum_lanes(const V* v) {
  V s[4], u[2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    s[i] =
        _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    const __m256d a = _mm256_castps_pd(s[2 * i]), b = _mm256_castps_pd(s[2 * i + 1]);
    u[i] =
        _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
  }
  return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31));
}
// As the AVX-512 one with 2 keys per block: lane 4j + h into out[h * stride + j].
VT inline void vstore_key_rows(V sums, float scale, float* out, int64_t stride) {
  const V t = _mm256_mul_ps(_mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)),
                            _mm256_set1_ps(scale));
  const __m128 lo = _mm256_castps256_ps128(t), hi = _mm256_extractf128_ps(t, 1);
  _mm_storel_pi(reinterpret_cast<__m64*>(out), lo);
  _mm_storeh_pi(reinterpret_cast<__m64*>(out + stride), lo);
  _mm_storel_pi(reinterpret_cast<__m64*>(out + 2 * stride), hi);
  _mm_storeh_pi(reinterpret_cast<__m64*>(out + 3 * stride), hi);
}
VT inline float vhmax(V v) {
  const __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
}
#include "vec_impl.inc"
#undef VT
}  // namespace avx2

#define MTP_VEC_DISPATCH(name, ...)            \
  switch (active_isa()) {                      \
    case Isa::kAvx512:                         \
      return avx512::name##_impl(__VA_ARGS__); \
    case Isa::kAvx2:                           \
      return avx2::name##_impl(__VA_ARGS__);   \
    case Isa::kNeon:                           \
    case Isa::kScalar:                         \
      break;                                   \
  }                                            \
  return scalar::name(__VA_ARGS__)
#elif MTP_HAVE_ARM_DOTPROD
namespace neon {
#define VT MTP_TARGET_DOTPROD
using V = float32x4_t;
constexpr int W = 4;
VT inline V vld(const float* p) {
  return vld1q_f32(p);
}
VT inline void vst(float* p, V v) {
  vst1q_f32(p, v);
}
// No non-temporal store intrinsic: plain stores, which need no fence.
VT inline void vstream(float* p, V v) {
  vst1q_f32(p, v);
}
VT inline void vstream_fence() {}
VT inline V vset(float a) {
  return vdupq_n_f32(a);
}
VT inline V vadd(V a, V b) {
  return vaddq_f32(a, b);
}
VT inline V vsub(V a, V b) {
  return vsubq_f32(a, b);
}
VT inline V vmul(V a, V b) {
  return vmulq_f32(a, b);
}
VT inline V vdiv(V a, V b) {
  return vdivq_f32(a, b);
}
VT inline V vfma(V a, V b, V c) {
  return vfmaq_f32(c, a, b);
}
VT inline V vmax(V a, V b) {
  return vmaxq_f32(a, b);
}
VT inline V vmin(V a, V b) {
  return vminq_f32(a, b);
}
VT inline V vround(V a) {
  return vrndnq_f32(a);
}
VT inline V vpow2i(V n) {
  return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23));
}
VT inline V vlt(V x, V y, V a, V b) {
  return vbslq_f32(vcltq_f32(x, y), a, b);
}
VT inline float vhsum(V v) {
  return vaddvq_f32(v);
}
VT inline float vhmax(V v) {
  return vmaxvq_f32(v);
}
// out lane i = the sum of v[i]'s lanes, (l0 + l1) + (l2 + l3) for each of the 4 vectors.
VT inline V vsum_lanes(const V* v) {
  return vpaddq_f32(vpaddq_f32(v[0], v[1]), vpaddq_f32(v[2], v[3]));
}
// One key per block (W / 4): lane h, query h's sum, times scale, into out[h * stride].
VT inline void vstore_key_rows(V sums, float scale, float* out, int64_t stride) {
  const V t = vmulq_n_f32(sums, scale);
  out[0] = vgetq_lane_f32(t, 0);
  out[stride] = vgetq_lane_f32(t, 1);
  out[2 * stride] = vgetq_lane_f32(t, 2);
  out[3 * stride] = vgetq_lane_f32(t, 3);
}
#include "vec_impl.inc"
#undef VT
}  // namespace neon

#define MTP_VEC_DISPATCH(name, ...)                                      \
  if (active_isa() == Isa::kNeon) return neon::name##_impl(__VA_ARGS__); \
  return scalar::name(__VA_ARGS__)
#else
#define MTP_VEC_DISPATCH(name, ...) return scalar::name(__VA_ARGS__)
#endif

float dot(const float* a, const float* b, int64_t n) {
  MTP_VEC_DISPATCH(dot, a, b, n);
}
void axpy(float a, const float* x, float* y, int64_t n) {
  MTP_VEC_DISPATCH(axpy, a, x, y, n);
}
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
  MTP_VEC_DISPATCH(rms_norm, x, w, n, eps, out);
}
void softmax(float* x, int64_t n) {
  MTP_VEC_DISPATCH(softmax, x, n);
}
void silu(const float* x, float* out, int64_t n) {
  MTP_VEC_DISPATCH(silu, x, out, n);
}
void sigmoid(const float* x, float* out, int64_t n) {
  MTP_VEC_DISPATCH(sigmoid, x, out, n);
}
void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  MTP_VEC_DISPATCH(swiglu, gate, up, out, n);
}
void delta_rule(const DeltaRuleRow* rows, int64_t n, int64_t d) {
  MTP_VEC_DISPATCH(delta_rule, rows, n, d);
}
void axpy_rows(const float* p, const float* v, int64_t v_stride, int64_t n_rows, float* y, int64_t n) {
  MTP_VEC_DISPATCH(axpy_rows, p, v, v_stride, n_rows, y, n);
}
void dot_queries(const float* k, const float* const* q, int64_t nq, int64_t n, float scale, float* out) {
  MTP_VEC_DISPATCH(dot_queries, k, q, nq, n, scale, out);
}
void dot_keys_queries(const float* const* k, int64_t nk, const float* const* q, int64_t nq, int64_t n,
                      float scale, float* out, int64_t out_stride) {
  MTP_VEC_DISPATCH(dot_keys_queries, k, nk, q, nq, n, scale, out, out_stride);
}
void axpy_rows_queries(const float* const* p, const float* v, int64_t v_stride, int64_t n_rows,
                       float* const* y, int64_t nq, int64_t n) {
  MTP_VEC_DISPATCH(axpy_rows_queries, p, v, v_stride, n_rows, y, nq, n);
}
void top_k(const float* x, int64_t n, int64_t k, int32_t* out) {
  MTP_CHECK(k >= 1 && k <= n, "top ", k, " of ", n);
  // Insertion into out[0..have): past the entries smaller than v only, so equal values keep index order; a
  // full list takes v only above its last entry.
  int64_t have = 0;
  for (int64_t e = 0; e < n; ++e) {
    const float v = x[e];
    if (have == k && !(v > x[out[k - 1]])) continue;
    int64_t i = have < k ? have++ : k - 1;
    for (; i > 0 && v > x[out[i - 1]]; --i) out[i] = out[i - 1];
    out[i] = static_cast<int32_t>(e);
  }
}

int64_t argmax(const float* x, int64_t n) {
  MTP_CHECK(n >= 1, "argmax of an empty vector");
  MTP_VEC_DISPATCH(argmax, x, n);
}

}  // namespace mtp::kernels
