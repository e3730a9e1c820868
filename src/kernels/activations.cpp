// PreparedActivations: activation rows quantized once per batch for the weights' dot-product family.
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "kernels/matmul.h"
#include "matmul_internal.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"

#if MTP_HAVE_X86_SIMD
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace mtp::kernels {
namespace {

#if MTP_HAVE_X86_SIMD
// quantize_row_q8_K, bit for bit, into the AVX-512 layout (qs offset by 128): the first element of largest
// magnitude maps to -127, q = min(127, nearest_int(iscale * x)) with ggml's add-1.5*2^23 rounding, d = 1 /
// iscale, bsums of 16. Finite inputs.
MTP_TARGET_AVX512 void prepare_q8_k_avx512(const float* x, int64_t nb, uint8_t* qs, float* d, int16_t* bsums,
                                           int8_t* sq, int32_t* xcorr) {
  const __m512i flip = _mm512_set1_epi32(0x80);
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQK_K;
    __m512 m = _mm512_setzero_ps();
    for (int v = 0; v < 16; ++v) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * v)));
    const float amax = _mm512_reduce_max_ps(m);
    uint8_t* qb = qs + b * kQK_K;
    if (amax == 0.0f) {
      std::memset(qb, 0x80, kQK_K);
      d[b] = 0.0f;
      std::memset(bsums + 16 * b, 0, 32);
      std::memset(sq + b * kQK_K, 0, kQK_K);
      std::memset(xcorr + 8 * b, 0, 32);
      continue;
    }
    int idx = 0;
    for (int v = 0; v < 16; ++v) {
      const __mmask16 k =
          _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + 16 * v)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (k != 0) {
        idx = 16 * v + __builtin_ctz(k);
        break;
      }
    }
    const float iscale = -127.f / xb[idx];
    const __m512 vs = _mm512_set1_ps(iscale);
    for (int v = 0; v < 16; ++v) {
      const __m512 sh =
          _mm512_add_ps(_mm512_mul_ps(vs, _mm512_loadu_ps(xb + 16 * v)), _mm512_set1_ps(12582912.0f));
      __m512i q = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(sh), _mm512_set1_epi32(0x007FFFFF)),
                                   _mm512_set1_epi32(0x00400000));
      q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
      bsums[16 * b + v] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16 * v),
                       _mm512_cvtepi32_epi8(_mm512_xor_si512(q, flip)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(sq + b * kQK_K + 16 * v), _mm512_cvtepi32_epi8(q));
    }
    for (int j = 0; j < 8; ++j) xcorr[8 * b + j] = -128 * (bsums[16 * b + 2 * j] + bsums[16 * b + 2 * j + 1]);
    d[b] = 1 / iscale;
  }
}
#endif

int64_t align64(int64_t n) {
  return (n + 63) & ~int64_t{63};
}

detail::ActLayout make_layout(ActFormat format, Isa isa, int64_t n_in) {
  const int64_t block = act_block_size(format);
  MTP_CHECK(n_in > 0 && n_in % block == 0, "activation width ", n_in, " is not a multiple of ", block);
  detail::ActLayout l;
  l.format = format;
  l.isa = isa;
  l.n_in = n_in;
  switch (format) {
    case ActFormat::kF32: {
      const int64_t n_pad = (n_in + 15) / 16 * 16;
      l.nb = n_pad / 16;
      l.stride = align64(n_pad * 4);
      break;
    }
    case ActFormat::kQ8_0:
      l.nb = n_in / kQK8_0;
      l.d_off = align64(n_in);
      l.aux_off = l.d_off + align64(l.nb * 4);
      l.stride = l.aux_off + align64(l.nb * 4);
      break;
    case ActFormat::kQ8_K:
      l.nb = n_in / kQK_K;
      l.d_off = align64(n_in);
      l.aux_off = l.d_off + align64(l.nb * 4);
      l.stride = l.aux_off + align64(l.nb * 16 * 2);
      if (isa == Isa::kAvx512) {
        l.sq_off = l.stride;
        l.xc_off = l.sq_off + align64(n_in);
        l.stride = l.xc_off + align64(l.nb * 8 * 4);
      }
      break;
  }
  return l;
}

// One row: quantized exactly as quantize_row_q8_0 / quantize_row_q8_K (the ggml reference), then scattered
// into the layout.
void prepare_row(const detail::ActLayout& l, const float* x, uint8_t* row) {
  const uint8_t flip = l.isa == Isa::kAvx512 ? 0x80 : 0x00;
  switch (l.format) {
    case ActFormat::kF32: {
      float* dst = reinterpret_cast<float*>(row);
      std::memcpy(dst, x, static_cast<size_t>(l.n_in) * 4);
      for (int64_t i = l.n_in; i < l.nb * 16; ++i) dst[i] = 0.0f;
      return;
    }
    case ActFormat::kQ8_0: {
      float* d = reinterpret_cast<float*>(row + l.d_off);
      float* xsum = reinterpret_cast<float*>(row + l.aux_off);
      for (int64_t b = 0; b < l.nb; ++b) {
        BlockQ8_0 blk;
        quantize_row_q8_0(x + b * kQK8_0, &blk, kQK8_0);
        int32_t sum = 0;
        for (int j = 0; j < kQK8_0; ++j) {
          row[b * kQK8_0 + j] = static_cast<uint8_t>(blk.qs[j]) ^ flip;
          sum += blk.qs[j];
        }
        d[b] = fp16_to_fp32(blk.d);
        xsum[b] = static_cast<float>(sum);
      }
      return;
    }
    case ActFormat::kQ8_K: {
      float* d = reinterpret_cast<float*>(row + l.d_off);
      int16_t* bsums = reinterpret_cast<int16_t*>(row + l.aux_off);
#if MTP_HAVE_X86_SIMD
      if (l.isa == Isa::kAvx512) {
        return prepare_q8_k_avx512(x, l.nb, row, d, bsums, reinterpret_cast<int8_t*>(row + l.sq_off),
                                   reinterpret_cast<int32_t*>(row + l.xc_off));
      }
#endif
      for (int64_t b = 0; b < l.nb; ++b) {
        BlockQ8_K blk;
        quantize_row_q8_K(x + b * kQK_K, &blk, kQK_K);
        for (int j = 0; j < kQK_K; ++j) row[b * kQK_K + j] = static_cast<uint8_t>(blk.qs[j]) ^ flip;
        d[b] = blk.d;
        std::memcpy(bsums + b * 16, blk.bsums, sizeof(blk.bsums));
      }
      return;
    }
  }
}

}  // namespace

PreparedActivations::PreparedActivations() : layout_(std::make_unique<detail::ActLayout>()) {}
PreparedActivations::~PreparedActivations() {
  std::free(buf_);
}
PreparedActivations::PreparedActivations(PreparedActivations&& o) noexcept
    : layout_(std::move(o.layout_)),
      buf_(std::exchange(o.buf_, nullptr)),
      capacity_(std::exchange(o.capacity_, 0)),
      n_rows_(std::exchange(o.n_rows_, 0)) {
  o.layout_ = std::make_unique<detail::ActLayout>();
}
PreparedActivations& PreparedActivations::operator=(PreparedActivations&& o) noexcept {
  if (this != &o) {
    std::free(buf_);
    layout_ = std::exchange(o.layout_, std::make_unique<detail::ActLayout>());
    buf_ = std::exchange(o.buf_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    n_rows_ = std::exchange(o.n_rows_, 0);
  }
  return *this;
}

void PreparedActivations::reserve(ActFormat format, int64_t n_rows, int64_t n_in) {
  const detail::ActLayout l = make_layout(format, active_isa(), n_in);
  const int64_t need = l.stride * n_rows;
  if (need <= capacity_) return;
  std::free(buf_);
  buf_ = static_cast<uint8_t*>(std::aligned_alloc(64, static_cast<size_t>(align64(need))));
  MTP_CHECK(buf_ != nullptr, "out of memory for ", need, " bytes of activations");
  capacity_ = need;
  n_rows_ = 0;
}

// Rows are spread over the pool from this many values in all: a decode step's few rows (the routed experts'
// down input at one row: 8 x 512 values, a few microseconds) cost less on the calling thread than a dispatch.
constexpr int64_t kParallelPrepareValues = 16384;

void PreparedActivations::prepare(ActFormat format, const float* x, int64_t n_rows, int64_t n_in,
                                  int64_t x_stride, ThreadPool* pool) {
  MTP_CHECK(n_rows >= 0);
  reserve(format, n_rows, n_in);
  *layout_ = make_layout(format, active_isa(), n_in);
  n_rows_ = n_rows;
  const detail::ActLayout& l = *layout_;
  auto one = [&](size_t r, int) { prepare_row(l, x + r * x_stride, buf_ + r * l.stride); };
  if (pool != nullptr && n_rows > 1 && n_rows * n_in >= kParallelPrepareValues) {
    pool->parallel_for(static_cast<size_t>(n_rows), one);
  } else {
    for (int64_t r = 0; r < n_rows; ++r) one(static_cast<size_t>(r), 0);
  }
}

ActFormat PreparedActivations::format() const {
  return layout_->format;
}
Isa PreparedActivations::isa() const {
  return layout_->isa;
}
int64_t PreparedActivations::n_rows() const {
  return n_rows_;
}
int64_t PreparedActivations::n_in() const {
  return layout_->n_in;
}
const uint8_t* PreparedActivations::row(int64_t r) const {
  return buf_ + r * layout_->stride;
}

void PreparedActivations::dequantize_row(int64_t r, float* out) const {
  MTP_CHECK(r >= 0 && r < n_rows_);
  const detail::ActLayout& l = *layout_;
  const uint8_t* p = row(r);
  if (l.format == ActFormat::kF32) {
    std::memcpy(out, p, static_cast<size_t>(l.n_in) * 4);
    return;
  }
  const uint8_t flip = l.isa == Isa::kAvx512 ? 0x80 : 0x00;
  const int64_t block = act_block_size(l.format);
  const float* d = detail::act_d(p, l);
  for (int64_t i = 0; i < l.n_in; ++i) {
    out[i] = d[i / block] * static_cast<float>(static_cast<int8_t>(p[i] ^ flip));
  }
}

}  // namespace mtp::kernels
