// Vector kernels: every SIMD level against the scalar twin, on lengths around the vector widths and on edge
// values; results are reproducible call to call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/vec.h"

namespace mtp {
namespace {

using kernels::Isa;
using test::IsaScope;

const int64_t kLengths[] = {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 100, 257, 2048};

std::vector<float> input(int64_t n, uint32_t seed, float scale) {
  std::vector<float> v = test::make_values(test::Pattern::kGaussian, 1, std::max<int64_t>(n, 1), seed);
  v.resize(static_cast<size_t>(n));
  for (float& f : v) f *= scale;
  return v;
}

// |a - b| <= ulps * ulp(max(|a|, |b|)) + abs_tol.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double ulps, double abs_tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double m = std::max(std::fabs(got[i]), std::fabs(want[i]));
    const double tol = ulps * std::ldexp(1.0, std::ilogb(std::max(m, 1e-38)) - 23) + abs_tol;
    ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
  }
}

TEST(VecKernels, SimdMatchesScalar) {
  for (Isa isa : test::supported_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (int64_t n : kLengths) {
      SCOPED_TRACE(n);
      for (float scale : {1.0f, 30.0f, 1e-3f}) {
        const std::vector<float> a = input(n, 1, scale), b = input(n, 2, 1.0f);
        double mag = 0;
        for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(a[i]) * b[i]);
        EXPECT_NEAR(kernels::dot(a.data(), b.data(), n), kernels::scalar::dot(a.data(), b.data(), n),
                    (n / 8.0 + 8) * std::ldexp(mag, -23) + 1e-30);

        std::vector<float> y1 = b, y2 = b;
        kernels::axpy(0.75f, a.data(), y1.data(), n);
        kernels::scalar::axpy(0.75f, a.data(), y2.data(), n);
        EXPECT_EQ(y1, y2);  // one fma per element either way

        std::vector<float> r1(n), r2(n);
        kernels::rms_norm(a.data(), b.data(), n, 1e-6f, r1.data());
        kernels::scalar::rms_norm(a.data(), b.data(), n, 1e-6f, r2.data());
        expect_close(r1, r2, 4 + n / 64.0, 0, "rms_norm");
        kernels::rms_norm(a.data(), nullptr, n, 1e-6f, r1.data());
        kernels::scalar::rms_norm(a.data(), nullptr, n, 1e-6f, r2.data());
        expect_close(r1, r2, 4 + n / 64.0, 0, "rms_norm (no weight)");

        std::vector<float> s1 = a, s2 = a;
        kernels::softmax(s1.data(), n);
        kernels::scalar::softmax(s2.data(), n);
        expect_close(s1, s2, 8 + n / 64.0, 1e-37, "softmax");

        kernels::silu(a.data(), r1.data(), n);
        kernels::scalar::silu(a.data(), r2.data(), n);
        expect_close(r1, r2, 6, 1e-37, "silu");
        kernels::sigmoid(a.data(), r1.data(), n);
        kernels::scalar::sigmoid(a.data(), r2.data(), n);
        expect_close(r1, r2, 6, 1e-37, "sigmoid");
        kernels::swiglu(a.data(), b.data(), r1.data(), n);
        kernels::scalar::swiglu(a.data(), b.data(), r2.data(), n);
        expect_close(r1, r2, 8, 1e-37, "swiglu");
      }
    }
  }
}

// Attention scores: close to the scalar dots, and each query's score bitwise the same whatever the other
// queries of the call (batch invariance of attention).
TEST(VecKernels, DotQueriesMatchScalarAndIgnoreTheirNeighbours) {
  for (Isa isa : test::supported_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (int64_t n : kLengths) {
      SCOPED_TRACE(n);
      const std::vector<float> k = input(n, 5, 1.0f);
      std::vector<std::vector<float>> qv;
      std::vector<const float*> q;
      for (uint32_t h = 0; h < 11; ++h) qv.push_back(input(n, 20 + h, 2.0f));
      for (const auto& v : qv) q.push_back(v.data());
      std::vector<float> all(11), want(11), one(1);
      kernels::dot_queries(k.data(), q.data(), 11, n, 0.0625f, all.data());
      kernels::scalar::dot_queries(k.data(), q.data(), 11, n, 0.0625f, want.data());
      for (int64_t h = 0; h < 11; ++h) {
        double mag = 0;
        for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(qv[h][i]) * k[i]);
        EXPECT_NEAR(all[h], want[h], 0.0625 * ((n / 8.0 + 8) * std::ldexp(mag, -23) + 1e-30)) << h;
        kernels::dot_queries(k.data(), q.data() + h, 1, n, 0.0625f, one.data());
        EXPECT_EQ(one[0], all[h]) << "query " << h << " alone";
      }
      std::vector<float> part(6);
      kernels::dot_queries(k.data(), q.data() + 3, 6, n, 0.0625f, part.data());
      for (int64_t h = 0; h < 6; ++h) EXPECT_EQ(part[h], all[3 + h]) << "query " << 3 + h << " in 6";
    }
  }
}

// The weighted sum of rows is axpy row by row, bit for bit, at every level and for any row stride.
TEST(VecKernels, AxpyRowsIsAxpyPerRow) {
  for (Isa isa : test::supported_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (int64_t n : kLengths) {
      for (int64_t rows : {0, 1, 5, 33}) {
        const int64_t stride = n + 3;
        const std::vector<float> v = input(rows * stride, 31, 1.5f), p = input(rows, 32, 0.5f),
                                 y0 = input(n, 33, 1.0f);
        std::vector<float> got = y0, want = y0, scalar = y0;
        kernels::axpy_rows(p.data(), v.data(), stride, rows, got.data(), n);
        for (int64_t t = 0; t < rows; ++t) kernels::axpy(p[t], v.data() + t * stride, want.data(), n);
        kernels::scalar::axpy_rows(p.data(), v.data(), stride, rows, scalar.data(), n);
        EXPECT_EQ(got, want) << "n " << n << " rows " << rows;
        EXPECT_EQ(got, scalar) << "n " << n << " rows " << rows;
      }
    }
  }
}

// Many keys against many queries: each score bitwise dot_queries' for its key (so attention may block keys
// and queries in registers without changing a bit), for every count of keys and queries around the register
// blocks, and close to the scalar twin.
TEST(VecKernels, DotKeysQueriesIsDotQueriesPerKey) {
  for (Isa isa : test::supported_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (int64_t n : kLengths) {
      SCOPED_TRACE(n);
      std::vector<std::vector<float>> kv, qv;
      std::vector<const float*> k, q;
      for (uint32_t j = 0; j < 7; ++j) kv.push_back(input(n, 40 + j, 1.0f));
      for (uint32_t h = 0; h < 9; ++h) qv.push_back(input(n, 60 + h, 2.0f));
      for (const auto& v : kv) k.push_back(v.data());
      for (const auto& v : qv) q.push_back(v.data());
      for (int64_t nk : {1, 2, 3, 4, 7}) {
        for (int64_t nq : {1, 3, 4, 5, 8, 9}) {
          // Each query's row of scores at a stride wider than nk; what lies between the rows stays untouched.
          const int64_t stride = nk + 3;
          constexpr float kUntouched = -7.5f;
          std::vector<float> got(static_cast<size_t>(nq * stride), kUntouched), want(static_cast<size_t>(nq)),
              scalar(static_cast<size_t>(nq * stride));
          kernels::dot_keys_queries(k.data(), nk, q.data(), nq, n, 0.0625f, got.data(), stride);
          kernels::scalar::dot_keys_queries(k.data(), nk, q.data(), nq, n, 0.0625f, scalar.data(), stride);
          for (int64_t h = 0; h < nq; ++h)
            for (int64_t j = nk; j < stride; ++j) EXPECT_EQ(got[h * stride + j], kUntouched);
          for (int64_t j = 0; j < nk; ++j) {
            kernels::dot_queries(k[j], q.data(), nq, n, 0.0625f, want.data());
            for (int64_t h = 0; h < nq; ++h) {
              EXPECT_EQ(got[h * stride + j], want[h])
                  << "key " << j << " of " << nk << ", query " << h << " of " << nq;
              double mag = 0;
              for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(qv[h][i]) * kv[j][i]);
              EXPECT_NEAR(got[h * stride + j], scalar[h * stride + j],
                          0.0625 * ((n / 8.0 + 8) * std::ldexp(mag, -23) + 1e-30));
            }
          }
        }
      }
    }
  }
}

// Several queries' weighted sums of the same V rows: axpy_rows per query, bit for bit, at every level, for
// counts of queries around the register blocks and any row stride.
TEST(VecKernels, AxpyRowsQueriesIsAxpyRowsPerQuery) {
  for (Isa isa : test::supported_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (int64_t n : kLengths) {
      for (int64_t rows : {0, 1, 5, 33}) {
        for (int64_t nq : {1, 2, 3, 4, 5, 9}) {
          const int64_t stride = n + 3;
          const std::vector<float> v = input(rows * stride, 71, 1.5f);
          std::vector<std::vector<float>> p, got, want, scalar;
          std::vector<const float*> pp;
          std::vector<float*> yp, sp;
          for (int64_t h = 0; h < nq; ++h) {
            p.push_back(input(rows, 80 + static_cast<uint32_t>(h), 0.5f));
            got.push_back(input(n, 90 + static_cast<uint32_t>(h), 1.0f));
          }
          want = scalar = got;
          for (int64_t h = 0; h < nq; ++h) {
            pp.push_back(p[h].data());
            yp.push_back(got[h].data());
            sp.push_back(scalar[h].data());
            kernels::axpy_rows(p[h].data(), v.data(), stride, rows, want[h].data(), n);
          }
          kernels::axpy_rows_queries(pp.data(), v.data(), stride, rows, yp.data(), nq, n);
          kernels::scalar::axpy_rows_queries(pp.data(), v.data(), stride, rows, sp.data(), nq, n);
          for (int64_t h = 0; h < nq; ++h) {
            EXPECT_EQ(got[h], want[h]) << "n " << n << " rows " << rows << " query " << h << " of " << nq;
            EXPECT_EQ(got[h], scalar[h]) << "n " << n << " rows " << rows << " query " << h << " of " << nq;
          }
        }
      }
    }
  }
}

// MoE routing's top k: exactly the first k of a stable sort by descending value (ties to the lower index),
// with many ties, all equal, and k from 1 to n.
TEST(VecKernels, TopKIsAStableSortsFirstK) {
  std::mt19937 rng(5);
  for (int64_t n : {1, 2, 7, 256}) {
    for (int values : {2, 5, 1000000}) {  // few distinct values: ties everywhere
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = static_cast<float>(rng() % values) * 0.25f;
      std::vector<int32_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
      for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{8}, n}) {
        if (k > n) continue;
        std::vector<int32_t> got(static_cast<size_t>(k), -1);
        kernels::top_k(x.data(), n, k, got.data());
        EXPECT_EQ(got, std::vector<int32_t>(order.begin(), order.begin() + k)) << "n " << n << " k " << k;
      }
    }
  }
}

// Greedy sampling's argmax: exactly the scalar loop's index (first largest, NaN never wins) at every level.
TEST(VecKernels, ArgmaxMatchesScalar) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> cases;
  for (int64_t n : kLengths)
    if (n > 0) cases.push_back(input(n, 7, 1.0f));
  for (int64_t n : {int64_t{33}, int64_t{100}, int64_t{248320}}) {
    std::vector<float> ties(static_cast<size_t>(n), 1.0f);  // all equal: index 0
    cases.push_back(ties);
    ties[static_cast<size_t>(n / 2)] = 2.0f;  // one peak, then the same peak later and in other lanes
    ties[static_cast<size_t>(n - 1)] = 2.0f;
    ties[static_cast<size_t>(n / 2 + 5)] = 2.0f;
    cases.push_back(ties);
    std::vector<float> neg(static_cast<size_t>(n), -inf);  // nothing beats x[0]
    cases.push_back(neg);
    neg[static_cast<size_t>(n - 2)] = -1e30f;
    cases.push_back(neg);
    std::vector<float> nans = input(n, 9, 3.0f);  // NaNs never win, a NaN first element does
    for (size_t i = 3; i < nans.size(); i += 7) nans[i] = nan;
    cases.push_back(nans);
    nans[0] = nan;
    cases.push_back(nans);
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f);  // -0 == +0
    zeros[static_cast<size_t>(n / 3)] = -0.0f;
    zeros[0] = -0.0f;
    cases.push_back(zeros);
  }
  std::vector<float> big = input(5000, 11, 1.0f);
  big[4999] = 100.0f;  // in the tail after the last whole vector
  cases.push_back(big);
  for (Isa isa : test::supported_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (size_t c = 0; c < cases.size(); ++c) {
      const int64_t n = static_cast<int64_t>(cases[c].size());
      EXPECT_EQ(kernels::argmax(cases[c].data(), n), kernels::scalar::argmax(cases[c].data(), n))
          << "case " << c << " n " << n;
    }
  }
  EXPECT_EQ(kernels::scalar::argmax(big.data(), 5000), 4999);
}

TEST(VecKernels, EdgeValues) {
  const std::vector<float> x = {0.0f,  -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 100.0f, -100.0f, 1e4f,
                                -1e4f, 20.0f, -20.0f, 0.5f,    -0.5f, 3.0f,   -3.0f,  87.3f,   -87.3f};
  for (Isa isa : test::supported_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    std::vector<float> r1(x.size()), r2(x.size());
    kernels::sigmoid(x.data(), r1.data(), static_cast<int64_t>(x.size()));
    kernels::scalar::sigmoid(x.data(), r2.data(), static_cast<int64_t>(x.size()));
    expect_close(r1, r2, 6, 1e-37, "sigmoid");
    kernels::silu(x.data(), r1.data(), static_cast<int64_t>(x.size()));
    kernels::scalar::silu(x.data(), r2.data(), static_cast<int64_t>(x.size()));
    expect_close(r1, r2, 6, 1e-37, "silu");
    std::vector<float> s1 = x, s2 = x;
    kernels::softmax(s1.data(), static_cast<int64_t>(x.size()));
    kernels::scalar::softmax(s2.data(), static_cast<int64_t>(x.size()));
    expect_close(s1, s2, 8, 1e-37, "softmax");
    // A spike: all mass on one element, the rest underflows to exactly 0.
    std::vector<float> spike(40, -200.0f);
    spike[17] = 5.0f;
    kernels::softmax(spike.data(), 40);
    for (int i = 0; i < 40; ++i) EXPECT_EQ(spike[i], i == 17 ? 1.0f : 0.0f);
    // Same input, same bits.
    std::vector<float> a = input(257, 3, 2.0f), b1(257), b2(257);
    kernels::swiglu(a.data(), a.data(), b1.data(), 257);
    kernels::swiglu(a.data(), a.data(), b2.data(), 257);
    EXPECT_EQ(b1, b2);
  }
}

}  // namespace
}  // namespace mtp
