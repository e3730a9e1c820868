// The canonical summation orders the kernel files name, computed here in plain C++ from the weights' bytes
// and the prepared activations: the levels that claim an order must give exactly its bits, so an x86 machine
// at avx2 and an Arm one at neon compute the same numbers (each host checks the levels it has).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/pack.h"
#include "matmul_internal.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

namespace mtp {
namespace {

using kernels::Isa;
using kernels::PreparedActivations;
using test::IsaScope;
using test::Pattern;

// The signed activation value i of a prepared row (stored offset by 128 at avx512).
int act_value(const uint8_t* row, int64_t i, Isa isa) {
  return static_cast<int8_t>(row[i] ^ (isa == Isa::kAvx512 ? 0x80 : 0));
}

// IQ4_XS (matmul_avx2_iq4xs.cpp, matmul_neon.cpp): isum(sb) = sum over j of (ls_j - 32) * (32 products),
// exact; acc = fma(float(isum), d_w * d_x, acc) over sb in order.
float iq4xs_canonical(const uint8_t* w, const uint8_t* x, const kernels::detail::ActLayout& l, Isa isa) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const BlockIQ4_XS* b = reinterpret_cast<const BlockIQ4_XS*>(w) + sb;
    int32_t isum = 0;
    for (int j = 0; j < 8; ++j) {
      const int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((b->scales_h >> (2 * j)) & 3) << 4);
      int32_t s = 0;
      for (int k = 0; k < 16; ++k) {
        const uint8_t q = b->qs[16 * j + k];
        s += kIq4nlValues[q & 15] * act_value(x, 256 * sb + 32 * j + k, isa);
        s += kIq4nlValues[q >> 4] * act_value(x, 256 * sb + 32 * j + 16 + k, isa);
      }
      isum += (ls - 32) * s;
    }
    const float c = fp16_to_fp32(b->d) * kernels::detail::act_d(x, l)[sb];
    acc = std::fma(static_cast<float>(isum), c, acc);
  }
  return acc;
}

// Q8_0 (matmul_avx2_q8_0.cpp, matmul_avx512_q8_0.cpp, matmul_neon.cpp): acc = fma(float(isum_b), d_w * d_x,
// acc) over blocks in order.
float q8_0_canonical(const uint8_t* w, const uint8_t* x, const kernels::detail::ActLayout& l, Isa isa) {
  float acc = 0.0f;
  for (int64_t b = 0; b < l.nb; ++b) {
    const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(w) + b;
    int32_t isum = 0;
    for (int k = 0; k < 32; ++k) isum += blk->qs[k] * act_value(x, 32 * b + k, isa);
    const float c = fp16_to_fp32(blk->d) * kernels::detail::act_d(x, l)[b];
    acc = std::fma(static_cast<float>(isum), c, acc);
  }
  return acc;
}

// MXFP4 (matmul_avx2_q8_0.cpp, matmul_avx512_q8_0.cpp, matmul_neon.cpp): Q8_0's order, the doubled E2M1
// values against the activations, d_w = 2^(e - 128).
float mxfp4_canonical(const uint8_t* w, const uint8_t* x, const kernels::detail::ActLayout& l, Isa isa) {
  float acc = 0.0f;
  for (int64_t b = 0; b < l.nb; ++b) {
    const BlockMXFP4* blk = reinterpret_cast<const BlockMXFP4*>(w) + b;
    int32_t isum = 0;
    for (int k = 0; k < 16; ++k) {
      isum += kMxfp4Values[blk->qs[k] & 0xF] * act_value(x, 32 * b + k, isa);
      isum += kMxfp4Values[blk->qs[k] >> 4] * act_value(x, 32 * b + 16 + k, isa);
    }
    const float c = mxfp4_scale(blk->e) * kernels::detail::act_d(x, l)[b];
    acc = std::fma(static_cast<float>(isum), c, acc);
  }
  return acc;
}

// Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1 (matmul_avx2_q8_0.cpp, matmul_avx512_q8_0.cpp, matmul_neon.cpp): Q8_0's
// order on each block's levels (quant/blocks.h), then for Q4_1 and Q5_1 acc = fma(xsum_b, m_w * d_x, acc),
// xsum_b the block's activation sum.
template <GgmlType kType>
float nibble_canonical(const uint8_t* w, const uint8_t* x, const kernels::detail::ActLayout& l, Isa isa) {
  const int64_t bytes = type_traits(kType).type_size;
  constexpr bool kMin = kType == GgmlType::Q4_1 || kType == GgmlType::Q5_1;
  float acc = 0.0f;
  for (int64_t b = 0; b < l.nb; ++b) {
    const uint8_t* blk = w + b * bytes;
    uint16_t d, m = 0;
    std::memcpy(&d, blk, 2);
    if (kMin) std::memcpy(&m, blk + 2, 2);
    int32_t isum = 0, xsum = 0;
    for (int k = 0; k < 32; ++k) {
      int v = 0;
      if constexpr (kType == GgmlType::Q5_0 || kType == GgmlType::Q5_1) {
        const uint8_t* qh = blk + (kMin ? 4 : 2);
        v = q5_level(qh + 4, qh, k) - (kMin ? 0 : 16);
      } else {
        const uint8_t* qs = blk + (kMin ? 4 : 2);
        const int nibble = k < 16 ? qs[k] & 15 : qs[k - 16] >> 4;
        v = kType == GgmlType::IQ4_NL ? kIq4nlValues[nibble] : kType == GgmlType::Q4_0 ? nibble - 8 : nibble;
      }
      isum += v * act_value(x, 32 * b + k, isa);
      xsum += act_value(x, 32 * b + k, isa);
    }
    const float dx = kernels::detail::act_d(x, l)[b];
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(d) * dx, acc);
    if (kMin) acc = std::fma(static_cast<float>(xsum), fp16_to_fp32(m) * dx, acc);
  }
  return acc;
}

// Q6_K (matmul_avx2_q6k.cpp, matmul_avx512_q6k.cpp, matmul_neon.cpp): isum(sb) = sum over the 16 sub-blocks
// i of sc_i * (16 products of q = u - 32), exact; acc = fma(float(isum), d_w * d_x, acc).
float q6k_canonical(const uint8_t* w, const uint8_t* x, const kernels::detail::ActLayout& l, Isa isa) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(w) + sb;
    int32_t isum = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t t = 0;
      for (int k = 0; k < 16; ++k) {
        // Element e of half h: low 4 bits from ql (byte e % 64, high nibble for e >= 64), top 2 from qh
        // (byte e % 32, bit pair e / 32).
        const int e = (16 * s + k) % 128, h = s / 8;
        const uint8_t ql = b->ql[64 * h + e % 64], qh = b->qh[32 * h + e % 32];
        const int u = (e < 64 ? ql & 15 : ql >> 4) | (((qh >> (2 * (e / 32))) & 3) << 4);
        t += (u - 32) * act_value(x, 256 * sb + 16 * s + k, isa);
      }
      isum += b->scales[s] * t;
    }
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(b->d) * kernels::detail::act_d(x, l)[sb], acc);
  }
  return acc;
}

// Q3_K (matmul_avx2_q3k.cpp, which the AVX-512 level runs too, and matmul_neon.cpp): isum(sb) = sum over the
// 16 sub-blocks i of (scale_i - 32) * (16 products of q - 4), exact; acc = fma(float(isum), d_w * d_x, acc).
// The element layout is written out here from the format (quant/blocks.h), not taken from the quantizer.
float q3k_canonical(const uint8_t* w, const uint8_t* x, const kernels::detail::ActLayout& l, Isa isa) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const BlockQ3_K* b = reinterpret_cast<const BlockQ3_K*>(w) + sb;
    int32_t isum = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t t = 0;
      for (int k = 0; k < 16; ++k) {
        const int e = 16 * s + k;
        const int q = ((b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) |
                      (((b->hmask[e % 32] >> (e / 32)) & 1) << 2);
        t += (q - 4) * act_value(x, 256 * sb + e, isa);
      }
      const int scale = (s < 8 ? b->scales[s] & 15 : b->scales[s - 8] >> 4) |
                        (((b->scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
      isum += (scale - 32) * t;
    }
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(b->d) * kernels::detail::act_d(x, l)[sb], acc);
  }
  return acc;
}

// Q2_K (matmul_avx2_q2k.cpp, which the AVX-512 level runs too, and matmul_neon.cpp): isum(sb) = sum over the
// 16 sub-blocks i of sc_i * (16 products of the two-bit q), msum(sb) = sum over i of m_i * (sum of the 16 x),
// exact; acc = fma(float(isum), d * d_x, acc), accm = fma(float(msum), dmin * d_x, accm); out = acc - accm.
// The layout is written out from the format (quant/blocks.h).
float q2k_canonical(const uint8_t* w, const uint8_t* x, const kernels::detail::ActLayout& l, Isa isa) {
  float acc = 0.0f, accm = 0.0f;
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const BlockQ2_K* b = reinterpret_cast<const BlockQ2_K*>(w) + sb;
    int32_t isum = 0, msum = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t t = 0, sum_x = 0;
      for (int k = 0; k < 16; ++k) {
        const int e = 16 * s + k;
        const int q = (b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        t += q * act_value(x, 256 * sb + e, isa);
        sum_x += act_value(x, 256 * sb + e, isa);
      }
      isum += (b->scales[s] & 15) * t;
      msum += (b->scales[s] >> 4) * sum_x;
    }
    const float xd = kernels::detail::act_d(x, l)[sb];
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(b->d) * xd, acc);
    accm = std::fma(static_cast<float>(msum), fp16_to_fp32(b->dmin) * xd, accm);
  }
  return acc - accm;
}

// Q4_K and Q5_K (matmul_avx2_q45k.cpp, matmul_avx512_q45k.cpp, matmul_neon.cpp): isum(sb) = sum over j of
// sc_j * (32 products), msum(sb) = sum over j of m_j * (sum of the 32 x), exact; acc = fma(float(isum),
// d * d_x, acc), accm = fma(float(msum), dmin * d_x, accm); out = acc - accm.
template <bool kFive>
float q45k_canonical(const uint8_t* w, const uint8_t* x, const kernels::detail::ActLayout& l, Isa isa) {
  const int64_t bytes = kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  float acc = 0.0f, accm = 0.0f;
  for (int64_t sb = 0; sb < l.nb; ++sb) {
    const uint8_t* blk = w + sb * bytes;
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + (kFive ? 48 : 16);
    uint16_t d, dmin;
    std::memcpy(&d, blk, 2);
    std::memcpy(&dmin, blk + 2, 2);
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      unpack_k_scale(j, blk + 4, &sc, &m);
      int32_t t = 0, xs = 0;
      for (int k = 0; k < 32; ++k) {
        // Sub-blocks 2c and 2c + 1 are the low and high nibbles of bytes 32c..32c+31; Q5_K's bit j of qh[k].
        const uint8_t q = qs[32 * (j / 2) + k];
        const int v = (j % 2 == 0 ? q & 15 : q >> 4) | (kFive ? ((qh[k] >> j) & 1) << 4 : 0);
        const int xv = act_value(x, 256 * sb + 32 * j + k, isa);
        t += v * xv;
        xs += xv;
      }
      isum += sc * t;
      msum += m * xs;
    }
    const float dx = kernels::detail::act_d(x, l)[sb];
    acc = std::fma(static_cast<float>(isum), fp16_to_fp32(d) * dx, acc);
    accm = std::fma(static_cast<float>(msum), fp16_to_fp32(dmin) * dx, accm);
  }
  return acc - accm;
}

// F32, F16, BF16 (matmul_avx2.cpp, matmul_neon.cpp): 8 lanes, lane k summing the products of elements 8c + k
// by fma in order of c (weights past n_in 0, activations zero-padded), then ((a0 + a4) + (a2 + a6)) +
// ((a1 + a5) + (a3 + a7)).
template <GgmlType kType>
float float_canonical(const uint8_t* w, const uint8_t* x, const kernels::detail::ActLayout& l, Isa) {
  const float* xf = kernels::detail::act_f32(x);
  float a[8] = {};
  for (int64_t c = 0; c < 2 * l.nb; ++c)
    for (int k = 0; k < 8; ++k) {
      const int64_t i = 8 * c + k;
      float wv = 0.0f;
      if (i < l.n_in) {
        if constexpr (kType == GgmlType::F32) {
          std::memcpy(&wv, w + 4 * i, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, w + 2 * i, 2);
          wv = kType == GgmlType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
        }
      }
      a[k] = std::fma(wv, xf[i], a[k]);
    }
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

struct Case {
  GgmlType type;
  std::vector<Isa> levels;  // the levels whose kernels claim the order
  float (*canonical)(const uint8_t*, const uint8_t*, const kernels::detail::ActLayout&, Isa);
};

const std::vector<Isa> kAllButScalar = {Isa::kAvx2, Isa::kAvx512, Isa::kNeon};

void PrintTo(const Case& c, std::ostream* os) {
  *os << type_name(c.type);
}

class CanonicalOrder : public ::testing::TestWithParam<Case> {};

// Row format and (where the level packs the type) packed, every batch size up to 9, every pattern.
TEST_P(CanonicalOrder, LevelsGiveTheCanonicalBits) {
  const Case& c = GetParam();
  const kernels::ActFormat format = kernels::act_format(c.type);
  const int64_t n_in = format == kernels::ActFormat::kQ8_K   ? 256 * 3
                       : format == kernels::ActFormat::kQ8_0 ? 32 * 13
                                                             : 333;  // a tail of 5 past a multiple of 8
  const int64_t n_out = 35, n_rows = 9;                              // two whole tiles and a partial one
  const int64_t rb = row_size(c.type, n_in);
  int tested = 0;
  for (Isa isa : c.levels) {
    if (!kernels::isa_supported(isa)) continue;
    for (bool vnni : test::vnni_settings(isa)) {
      test::VnniScope vs(vnni);
      IsaScope scope(isa);
      for (Pattern p : {Pattern::kGaussian, Pattern::kLarge, Pattern::kSpikes}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + (vnni ? " vnni " : " ") + test::pattern_name(p));
        const test::QuantMatrix m =
            test::make_matrix(c.type, test::make_values(p, n_out, n_in, 21), n_in, n_out);
        const std::vector<float> x = test::make_values(p, n_rows, n_in, 22);
        PreparedActivations acts;
        acts.prepare(kernels::act_format(c.type), x.data(), n_rows, n_in, n_in);
        std::vector<kernels::MatrixView> views = {m.view()};
        std::vector<uint8_t> packed;
        if (kernels::has_packed_kernel(c.type)) {  // whole tiles only
          const kernels::MatrixView whole = kernels::MatrixView::contiguous(c.type, m.bytes.data(), n_in, 32);
          packed.resize(static_cast<size_t>(32 * rb));
          views.push_back(kernels::pack_matrix(whole, packed.data()));
        }
        for (const kernels::MatrixView& v : views) {
          for (int64_t rows = 1; rows <= n_rows; ++rows) {
            std::vector<float> y(static_cast<size_t>(rows * v.n_out));
            std::vector<int32_t> list(static_cast<size_t>(rows));
            for (int64_t i = 0; i < rows; ++i) list[static_cast<size_t>(i)] = static_cast<int32_t>(i);
            kernels::matmul_range(v, acts, list.data(), rows, 0, v.n_out, y.data(), v.n_out);
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t o = 0; o < v.n_out; ++o) {
                const float want = c.canonical(m.bytes.data() + o * rb, acts.row(r), acts.layout(), isa);
                const float got = y[static_cast<size_t>(r * v.n_out + o)];
                ASSERT_EQ(0, std::memcmp(&want, &got, 4))
                    << (v.packed ? "packed" : "rows") << ", batch " << rows << ", row " << r << " out " << o
                    << ": " << got << " vs " << want;
              }
          }
        }
      }
      ++tested;
    }
  }
  if (tested == 0) GTEST_SKIP() << "this CPU has none of the levels";
}

INSTANTIATE_TEST_SUITE_P(
    Types, CanonicalOrder,
    ::testing::Values(Case{GgmlType::IQ4_XS, {Isa::kAvx2, Isa::kNeon}, iq4xs_canonical},
                      Case{GgmlType::Q8_0, kAllButScalar, q8_0_canonical},
                      Case{GgmlType::MXFP4, kAllButScalar, mxfp4_canonical},
                      Case{GgmlType::Q4_0, kAllButScalar, nibble_canonical<GgmlType::Q4_0>},
                      Case{GgmlType::IQ4_NL, kAllButScalar, nibble_canonical<GgmlType::IQ4_NL>},
                      Case{GgmlType::Q4_1, kAllButScalar, nibble_canonical<GgmlType::Q4_1>},
                      Case{GgmlType::Q5_0, kAllButScalar, nibble_canonical<GgmlType::Q5_0>},
                      Case{GgmlType::Q5_1, kAllButScalar, nibble_canonical<GgmlType::Q5_1>},
                      Case{GgmlType::Q6_K, kAllButScalar, q6k_canonical},
                      Case{GgmlType::Q3_K, kAllButScalar, q3k_canonical},
                      Case{GgmlType::Q2_K, kAllButScalar, q2k_canonical},
                      Case{GgmlType::Q4_K, kAllButScalar, q45k_canonical<false>},
                      Case{GgmlType::Q5_K, kAllButScalar, q45k_canonical<true>},
                      Case{GgmlType::F32, {Isa::kAvx2, Isa::kNeon}, float_canonical<GgmlType::F32>},
                      Case{GgmlType::F16, {Isa::kAvx2, Isa::kNeon}, float_canonical<GgmlType::F16>},
                      Case{GgmlType::BF16, {Isa::kAvx2, Isa::kNeon}, float_canonical<GgmlType::BF16>}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(type_name(i.param.type)); });

}  // namespace
}  // namespace mtp
