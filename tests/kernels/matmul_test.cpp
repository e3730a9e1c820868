// matmul: scalar reference against a double-precision dot product of the dequantized operands, every SIMD
// level against the scalar reference, and batch invariance (bitwise) per level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/matmul.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/quantize.h"

namespace mtp {
namespace {

using kernels::ActFormat;
using kernels::Isa;
using kernels::MatrixView;
using kernels::PreparedActivations;
using test::IsaScope;
using test::Pattern;

const GgmlType kTypes[] = {GgmlType::Q8_0,   GgmlType::Q4_0,   GgmlType::Q4_1,  GgmlType::Q5_0,
                           GgmlType::Q5_1,   GgmlType::IQ4_NL, GgmlType::MXFP4, GgmlType::Q2_K,
                           GgmlType::Q3_K,   GgmlType::Q4_K,   GgmlType::Q5_K,  GgmlType::Q6_K,
                           GgmlType::IQ4_XS, GgmlType::F16,    GgmlType::BF16,  GgmlType::F32};

// Widths with an odd number of blocks (and, for the float types, not a multiple of 16 or 8).
int64_t odd_width(GgmlType t) {
  switch (kernels::act_format(t)) {
    case ActFormat::kQ8_0:
      return 32 * 13;
    case ActFormat::kQ8_K:
      return 256 * 3;
    case ActFormat::kF32:
      return 333;
  }
  return 0;
}

std::vector<float> run(Isa isa, const test::QuantMatrix& m, const std::vector<float>& x, int64_t n_rows,
                       ThreadPool* pool, PreparedActivations* keep = nullptr) {
  IsaScope scope(isa);
  PreparedActivations local;
  PreparedActivations& acts = keep != nullptr ? *keep : local;
  acts.prepare(kernels::act_format(m.type), x.data(), n_rows, m.n_in, m.n_in);
  std::vector<float> y(static_cast<size_t>(n_rows * m.n_out), -1.0f);
  kernels::matmul(m.view(), acts, y.data(), m.n_out, pool);
  return y;
}

// For each (row, output): the double dot of dequantized weights and dequantized activations, and the sum of
// the absolute products (the scale of rounding errors).
struct Reference {
  std::vector<double> dot, mag;
};

// Q2_K / Q4_K / Q5_K weights are d*sc*q - dmin*m (Q4_1 / Q5_1: d*q + m): the kernels round the two sums
// separately, so their error scales with |d*sc*q| + |dmin*m| rather than with |weight|. Returns that
// magnitude per element (else |weight|).
std::vector<float> term_magnitudes(const test::QuantMatrix& m) {
  std::vector<float> mag(m.deq.size());
  for (size_t i = 0; i < mag.size(); ++i) mag[i] = std::fabs(m.deq[i]);
  if (m.type == GgmlType::Q4_1 || m.type == GgmlType::Q5_1) {
    // d*q + m: the min term is summed on its own.
    const int64_t rb = row_size(m.type, m.n_in), bb = type_traits(m.type).type_size;
    for (int64_t o = 0; o < m.n_out; ++o) {
      for (int64_t b = 0; b < m.n_in / 32; ++b) {
        uint16_t mh;
        std::memcpy(&mh, m.bytes.data() + o * rb + b * bb + 2, 2);
        const float mt = fp16_to_fp32(mh);
        for (int64_t k = 32 * b; k < 32 * b + 32; ++k)
          mag[o * m.n_in + k] = std::fabs(m.deq[o * m.n_in + k] - mt) + std::fabs(mt);
      }
    }
    return mag;
  }
  if (m.type != GgmlType::Q2_K && m.type != GgmlType::Q4_K && m.type != GgmlType::Q5_K) return mag;
  const int64_t rb = row_size(m.type, m.n_in);
  const int64_t bb = type_traits(m.type).type_size;
  const int sub = m.type == GgmlType::Q2_K ? 16 : 32;  // elements per (scale, min) pair
  for (int64_t o = 0; o < m.n_out; ++o) {
    for (int64_t b = 0; b < m.n_in / 256; ++b) {
      const uint8_t* blk = m.bytes.data() + o * rb + b * bb;
      uint16_t dmin;
      std::memcpy(&dmin, blk + (m.type == GgmlType::Q2_K ? 82 : 2), 2);
      const uint8_t* s = m.type == GgmlType::Q2_K ? blk : blk + 4;
      for (int j = 0; j < 256 / sub; ++j) {
        const int mj = m.type == GgmlType::Q2_K ? s[j] >> 4
                       : j < 4                  ? (s[j + 4] & 63)
                                                : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
        const float mt = fp16_to_fp32(dmin) * static_cast<float>(mj);
        for (int k = 0; k < sub; ++k) {
          float& e = mag[o * m.n_in + b * 256 + sub * j + k];
          e = std::fabs(m.deq[o * m.n_in + b * 256 + sub * j + k] + mt) + std::fabs(mt);
        }
      }
    }
  }
  return mag;
}

Reference reference(const test::QuantMatrix& m, const PreparedActivations& acts) {
  const int64_t n_rows = acts.n_rows();
  const std::vector<float> wmag = term_magnitudes(m);
  Reference ref;
  ref.dot.resize(static_cast<size_t>(n_rows * m.n_out));
  ref.mag.resize(ref.dot.size());
  std::vector<float> xr(static_cast<size_t>(m.n_in));
  for (int64_t r = 0; r < n_rows; ++r) {
    acts.dequantize_row(r, xr.data());
    for (int64_t o = 0; o < m.n_out; ++o) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < m.n_in; ++k) {
        const double p = static_cast<double>(m.deq[o * m.n_in + k]) * xr[k];
        s += p;
        a += static_cast<double>(wmag[o * m.n_in + k]) * std::fabs(xr[k]);
      }
      ref.dot[r * m.n_out + o] = s;
      ref.mag[r * m.n_out + o] = a;
    }
  }
  return ref;
}

// Float steps in a SIMD reduction over one row: one per block (or per 16 floats), plus the lane tree.
double simd_steps(GgmlType t, int64_t n_in) {
  return static_cast<double>(n_in / std::min<int64_t>(32, type_traits(t).block_size == 1 ? 8 : 32)) + 16.0;
}

class MatmulTypes : public ::testing::TestWithParam<GgmlType> {};

// Scalar reference vs the double dot (tight: operands are the same values, only the final rounding and the
// float dequantization of the operands differ), then every SIMD level vs the scalar reference.
TEST_P(MatmulTypes, ScalarMatchesDoubleAndSimdMatchesScalar) {
  const GgmlType type = GetParam();
  const int64_t n_in = odd_width(type);
  const int64_t n_out = 13;
  for (Pattern wp : {Pattern::kGaussian, Pattern::kLarge, Pattern::kSpikes, Pattern::kZeros}) {
    for (Pattern xp : {Pattern::kGaussian, Pattern::kLarge, Pattern::kSpikes, Pattern::kZeros}) {
      SCOPED_TRACE(std::string(type_name(type)) + " w=" + test::pattern_name(wp) +
                   " x=" + test::pattern_name(xp));
      const test::QuantMatrix m =
          test::make_matrix(type, test::make_values(wp, n_out, n_in, 11), n_in, n_out);
      for (int64_t n_rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 64}) {
        if (n_rows > 9 && !(wp == Pattern::kGaussian && xp == Pattern::kGaussian)) continue;
        const std::vector<float> x =
            test::make_values(xp, n_rows, n_in, 1000 + static_cast<uint32_t>(n_rows));
        PreparedActivations scalar_acts;
        const std::vector<float> ys = run(Isa::kScalar, m, x, n_rows, nullptr, &scalar_acts);
        const Reference ref = reference(m, scalar_acts);
        for (size_t i = 0; i < ys.size(); ++i) {
          const double tol = std::ldexp(ref.mag[i], -21) + std::ldexp(std::fabs(ref.dot[i]), -23);
          ASSERT_NEAR(ys[i], ref.dot[i], tol) << "scalar, row " << i / n_out << " out " << i % n_out;
        }
        for (Isa isa : test::supported_isas()) {
          if (isa == Isa::kScalar) continue;
          for (bool vnni : test::vnni_settings(isa)) {
            test::VnniScope vs(vnni);
            const std::vector<float> yv = run(isa, m, x, n_rows, nullptr);
            for (size_t i = 0; i < yv.size(); ++i) {
              const double tol = simd_steps(type, n_in) * std::ldexp(ref.mag[i], -23) + 1e-30;
              ASSERT_NEAR(yv[i], ys[i], tol) << isa_name(isa) << (vnni ? " vnni" : "") << ", rows " << n_rows
                                             << ", row " << i / n_out << " out " << i % n_out;
            }
          }
        }
      }
    }
  }
}

// A row's outputs are bitwise the same alone, in batches of any size and composition, under any output split
// and with 1 or 2 threads.
TEST_P(MatmulTypes, BatchInvariantPerIsa) {
  const GgmlType type = GetParam();
  const int64_t n_in = odd_width(type);
  const int64_t n_out = 21;
  const int64_t n_rows = 19;
  const test::QuantMatrix m =
      test::make_matrix(type, test::make_values(Pattern::kGaussian, n_out, n_in, 5), n_in, n_out);
  const std::vector<float> x = test::make_values(Pattern::kGaussian, n_rows, n_in, 6);
  ThreadPool pool(2, ThreadPool::kSplitAll);
  for (Isa isa : test::supported_isas())
    for (bool vnni : test::vnni_settings(isa)) {
      test::VnniScope vs(vnni);
      SCOPED_TRACE(std::string(type_name(type)) + " " + isa_name(isa) + (vnni ? " vnni" : ""));
      const std::vector<float> full = run(isa, m, x, n_rows, &pool);
      EXPECT_EQ(full, run(isa, m, x, n_rows, nullptr));
      // Each row alone.
      for (int64_t r = 0; r < n_rows; ++r) {
        const std::vector<float> xr(x.begin() + r * n_in, x.begin() + (r + 1) * n_in);
        const std::vector<float> alone = run(isa, m, xr, 1, nullptr);
        ASSERT_EQ(0, std::memcmp(alone.data(), full.data() + r * n_out, n_out * sizeof(float)))
            << "row " << r;
      }
      // Batches of other sizes, given as row lists (reversed, strided), with split output ranges.
      IsaScope scope(isa);
      PreparedActivations acts;
      acts.prepare(kernels::act_format(type), x.data(), n_rows, n_in, n_in);
      for (int64_t batch : {2, 3, 5, 8, 9, 13}) {
        std::vector<int32_t> rows;
        for (int64_t i = 0; i < batch; ++i)
          rows.push_back(static_cast<int32_t>(((n_rows - 1 - 3 * i) % n_rows + n_rows) % n_rows));
        std::vector<float> y(static_cast<size_t>(batch * n_out), -1.0f);
        const int64_t split = 1 + batch % 7;
        kernels::matmul_range(m.view(), acts, rows.data(), batch, 0, split, y.data(), n_out);
        kernels::matmul_range(m.view(), acts, rows.data(), batch, split, n_out, y.data(), n_out);
        for (int64_t i = 0; i < batch; ++i) {
          ASSERT_EQ(0,
                    std::memcmp(y.data() + i * n_out, full.data() + rows[i] * n_out, n_out * sizeof(float)))
              << "batch " << batch << " entry " << i;
        }
      }
    }
}

std::string type_param_name(const ::testing::TestParamInfo<GgmlType>& info) {
  return std::string(type_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTypes, ::testing::ValuesIn(kTypes), type_param_name);

// MXFP4 scales over the whole E8M0 range a model can hold, one exponent per weight row (0 and 1 are subnormal
// floats): every level against the scalar kernel, whose scale matches ggml's dequantizer bit for bit
// (tests/quant/spec_vectors_test.cpp). Rows 0 and 1 are about 1e-36, their scale product with the
// activations' subnormal, so they get a relative 1e-2; a wrong subnormal decode gives 0, inf or a NaN.
TEST(MatmulMxfp4, EveryExponentMatchesScalar) {
  constexpr int64_t kIn = 256, kOut = 16, kRows = 3;
  const uint8_t kExps[kOut] = {0, 1, 2, 3, 10, 60, 100, 120, 127, 128, 129, 140, 160, 180, 200, 220};
  test::QuantMatrix m{GgmlType::MXFP4, kIn, kOut, {}, {}};
  m.bytes.resize(static_cast<size_t>(kOut * row_size(GgmlType::MXFP4, kIn)));
  uint32_t seed = 12345;
  for (size_t i = 0; i < m.bytes.size(); ++i) {
    seed = seed * 1664525u + 1013904223u;
    m.bytes[i] = static_cast<uint8_t>(seed >> 24);
  }
  for (int64_t o = 0; o < kOut; ++o)
    for (int64_t b = 0; b < kIn / 32; ++b) m.bytes[static_cast<size_t>((o * kIn / 32 + b) * 17)] = kExps[o];
  m.deq.resize(static_cast<size_t>(kIn * kOut));
  ASSERT_TRUE(dequantize_row(GgmlType::MXFP4, m.bytes.data(), m.deq.data(), kIn * kOut).ok());
  const std::vector<float> x = test::make_values(Pattern::kGaussian, kRows, kIn, 7);
  PreparedActivations scalar_acts;
  const std::vector<float> ys = run(Isa::kScalar, m, x, kRows, nullptr, &scalar_acts);
  const Reference ref = reference(m, scalar_acts);
  for (Isa isa : test::supported_isas()) {
    if (isa == Isa::kScalar) continue;
    const std::vector<float> yv = run(isa, m, x, kRows, nullptr);
    for (size_t i = 0; i < yv.size(); ++i) {
      const int64_t o = static_cast<int64_t>(i) % kOut;
      const double rel = o < 2 ? 1e-2 : simd_steps(GgmlType::MXFP4, kIn) * std::ldexp(1.0, -23);
      ASSERT_TRUE(std::isfinite(yv[i]) && ref.mag[i] > 0) << isa_name(isa) << " out " << o;
      ASSERT_NEAR(yv[i], ys[i], rel * ref.mag[i]) << isa_name(isa) << ", e = " << int{kExps[o]};
    }
  }
}

// The prepared rows are exactly the ggml reference activation quantization.
TEST(PreparedActivations, MatchesQuantLibrary) {
  const int64_t n_in = 512;
  const std::vector<float> x = test::make_values(Pattern::kSpikes, 3, n_in, 9);
  for (Isa isa : test::supported_isas()) {
    IsaScope scope(isa);
    for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_K, ActFormat::kF32}) {
      PreparedActivations acts;
      acts.prepare(f, x.data(), 3, n_in, n_in);
      EXPECT_EQ(acts.isa(), isa);
      for (int64_t r = 0; r < 3; ++r) {
        std::vector<float> got(n_in), want(n_in);
        acts.dequantize_row(r, got.data());
        const float* xr = x.data() + r * n_in;
        if (f == ActFormat::kQ8_0) {
          std::vector<BlockQ8_0> b(n_in / 32);
          quantize_row_q8_0(xr, b.data(), n_in);
          dequantize_row_q8_0(b.data(), want.data(), n_in);
        } else if (f == ActFormat::kQ8_K) {
          std::vector<BlockQ8_K> b(n_in / 256);
          quantize_row_q8_K(xr, b.data(), n_in);
          dequantize_row_q8_K(b.data(), want.data(), n_in);
        } else {
          want.assign(xr, xr + n_in);
        }
        EXPECT_EQ(got, want) << isa_name(isa) << " format " << static_cast<int>(f) << " row " << r;
      }
    }
  }
}

// Expert views of a 3-D stack and reuse of one prepared buffer across calls (no reallocation after warm-up).
TEST(Matmul, StackedExpertViewAndBufferReuse) {
  const int64_t n_in = 256, n_out = 8, n_exp = 3;
  const test::QuantMatrix all = test::make_matrix(
      GgmlType::IQ4_XS, test::make_values(Pattern::kGaussian, n_out * n_exp, n_in, 3), n_in, n_out * n_exp);
  const std::vector<float> x = test::make_values(Pattern::kGaussian, 4, n_in, 4);
  PreparedActivations acts;
  acts.reserve(ActFormat::kQ8_K, 4, n_in);
  const uint8_t* before = acts.row(0);
  acts.prepare(ActFormat::kQ8_K, x.data(), 4, n_in, n_in);
  EXPECT_EQ(before, acts.row(0));
  std::vector<float> y_all(4 * n_out * n_exp), y_e(4 * n_out);
  kernels::matmul(all.view(), acts, y_all.data(), n_out * n_exp, nullptr);
  for (int64_t e = 0; e < n_exp; ++e) {
    const MatrixView v = MatrixView::stacked(GgmlType::IQ4_XS, all.bytes.data(), n_in, n_out, e);
    kernels::matmul(v, acts, y_e.data(), n_out, nullptr);
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t o = 0; o < n_out; ++o)
        EXPECT_EQ(y_e[r * n_out + o], y_all[r * n_out * n_exp + e * n_out + o]);
    }
  }
}

// Several matrices in one pass over the pool give what one matmul each gives, bitwise.
TEST(Matmul, BatchOfJobsEqualsOneCallEach) {
  const int64_t n_in = 512, rows = 3;
  const std::vector<float> x = test::make_values(Pattern::kGaussian, rows, n_in, 8);
  ThreadPool pool(3, ThreadPool::kSplitAll);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::IQ4_XS, GgmlType::F32}) {
    std::vector<test::QuantMatrix> ms;
    for (int64_t n_out : {64, 37, 512})
      ms.push_back(
          test::make_matrix(type, test::make_values(Pattern::kGaussian, n_out, n_in, 9), n_in, n_out));
    PreparedActivations acts;
    acts.prepare(kernels::act_format(type), x.data(), rows, n_in, n_in);
    std::vector<std::vector<float>> want, got;
    std::vector<kernels::MatmulJob> jobs;
    for (const test::QuantMatrix& m : ms) {
      want.emplace_back(static_cast<size_t>(rows * m.n_out));
      got.emplace_back(static_cast<size_t>(rows * m.n_out), -1.0f);
      kernels::matmul(m.view(), acts, want.back().data(), m.n_out, nullptr);
    }
    for (size_t i = 0; i < ms.size(); ++i) jobs.push_back({ms[i].view(), got[i].data(), ms[i].n_out});
    kernels::matmul_batch(jobs, acts, &pool);
    EXPECT_EQ(want, got) << type_name(type);
  }
}

}  // namespace
}  // namespace mtp
