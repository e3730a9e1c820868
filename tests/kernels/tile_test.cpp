// The IQ4_XS tile kernel against the row kernel (bitwise, every pair), the SIMD Q8_K activation quantizer
// against quantize_row_q8_K (byte for byte), and the KV-row conversions against their scalar twins.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/matmul.h"
#include "kernels/vec.h"
#include "matmul_internal.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"

namespace mtp {
namespace {

using kernels::ActFormat;
using kernels::Isa;
using kernels::PreparedActivations;
using test::IsaScope;
using test::Pattern;

// Rows with ties of opposite sign for the largest magnitude, all-zero blocks, tiny and huge values.
std::vector<float> edge_rows(int64_t rows, int64_t n_in) {
  std::vector<float> x = test::make_values(Pattern::kGaussian, rows, n_in, 77);
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x.data() + r * n_in;
    switch (r % 5) {
      case 1:  // -a before +a
        xr[3] = -9.0f, xr[200] = 9.0f;
        break;
      case 2:  // +a before -a, and a zero block
        xr[5] = 9.0f, xr[6] = -9.0f;
        std::fill(xr + 256, xr + 512, 0.0f);
        break;
      case 3:
        for (int64_t i = 0; i < n_in; ++i) xr[i] *= 1e-30f;
        break;
      case 4:
        for (int64_t i = 0; i < n_in; ++i) xr[i] *= 1e30f;
        break;
      default:
        break;
    }
  }
  return x;
}

// The two unpackings of Q4_K/Q5_K scales and mins (quant/blocks.h: pair by pair, and word-wise as the SIMD
// decoders use it) against the format's definition (ggml's get_scale_min_k4) on every value of each byte
// position.
// 12 scale bytes for trial t of 4096: every byte value in every position for t < 256, random after.
void scale_bytes(int trial, uint32_t& state, uint8_t s[12]) {
  for (int i = 0; i < 12; ++i) {
    state = state * 1664525u + 1013904223u;
    s[i] = static_cast<uint8_t>(trial < 256 ? trial : state >> 24);
  }
}

TEST(KScales, WordWiseUnpackMatchesTheDefinition) {
  uint32_t state = 12345;
  for (int trial = 0; trial < 4096; ++trial) {
    uint8_t s[12];
    scale_bytes(trial, state, s);
    uint8_t out[16];
    unpack_k_scales(s, out);
    for (int j = 0; j < 8; ++j) {
      const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
      const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      ASSERT_EQ(out[j], sc) << "trial " << trial << ", scale " << j;
      ASSERT_EQ(out[8 + j], m) << "trial " << trial << ", min " << j;
      uint8_t one_sc, one_m;
      unpack_k_scale(j, s, &one_sc, &one_m);
      ASSERT_EQ(one_sc, sc) << "trial " << trial << ", scale " << j;
      ASSERT_EQ(one_m, m) << "trial " << trial << ", min " << j;
    }
  }
}

// The Q3_K scale unpacking (quant/blocks.h) against the format's definition (ggml's quantize_row_q3_K_ref
// packing: low 4 bits in byte j % 8, low nibble for j < 8; high 2 bits in byte 8 + j % 4 at bit 2 (j / 4)) on
// every value of each byte position. (The AVX2 kernel's own unpacking is checked by canonical_test.cpp.)
TEST(KScales, Q3KUnpackMatchesTheDefinition) {
  uint32_t state = 777;
  for (int trial = 0; trial < 4096; ++trial) {
    uint8_t s[12];
    scale_bytes(trial, state, s);
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
      const int expected = low | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
      ASSERT_EQ(unpack_q3_k_scale(j, s), expected) << "trial " << trial << ", scale " << j;
    }
  }
}

TEST(PreparedActivations, Q8KBytesMatchQuantLibrary) {
  const int64_t n_in = 768, rows = 10;
  const std::vector<float> x = edge_rows(rows, n_in);
  for (Isa isa : test::supported_isas()) {
    IsaScope scope(isa);
    PreparedActivations acts;
    acts.prepare(ActFormat::kQ8_K, x.data(), rows, n_in, n_in);
    const kernels::detail::ActLayout& l = acts.layout();
    const uint8_t flip = isa == Isa::kAvx512 ? 0x80 : 0;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<BlockQ8_K> want(static_cast<size_t>(n_in / 256));
      quantize_row_q8_K(x.data() + r * n_in, want.data(), n_in);
      const uint8_t* row = acts.row(r);
      for (int64_t b = 0; b < n_in / 256; ++b) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " row " + std::to_string(r) + " block " +
                     std::to_string(b));
        for (int j = 0; j < 256; ++j)
          ASSERT_EQ(static_cast<int8_t>(row[b * 256 + j] ^ flip), want[b].qs[j]) << j;
        EXPECT_EQ(0, std::memcmp(&kernels::detail::act_d(row, l)[b], &want[b].d, 4));
        EXPECT_EQ(0, std::memcmp(kernels::detail::act_bsums(row, l) + 16 * b, want[b].bsums, 32));
        if (isa != Isa::kAvx512) continue;
        // The signed copy and the per-32 offset terms of the unsigned-weight kernels.
        ASSERT_EQ(0, std::memcmp(kernels::detail::act_sq(row, l) + 256 * b, want[b].qs, 256));
        for (int j = 0; j < 8; ++j) {
          int32_t sum = 0;
          for (int i = 0; i < 32; ++i) sum += want[b].qs[32 * j + i];
          EXPECT_EQ(kernels::detail::act_xcorr(row, l)[8 * b + j], -128 * sum) << "sub-block " << j;
        }
      }
    }
  }
}

// Every pair computed by the tile kernel (batches of >= 2 rows) equals the row kernel's (one row at a time),
// bitwise, at the model's widths, on partial tiles and on row lists.
TEST(Iq4XsTile, BitwiseEqualsRowKernel) {
  if (!kernels::isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512";
  IsaScope scope(Isa::kAvx512);
  for (int64_t n_in : {256, 2048}) {
    const int64_t n_out = 37, rows = 21;
    for (Pattern wp : {Pattern::kGaussian, Pattern::kSpikes, Pattern::kLarge}) {
      const test::QuantMatrix m =
          test::make_matrix(GgmlType::IQ4_XS, test::make_values(wp, n_out, n_in, 3), n_in, n_out);
      const std::vector<float> x = edge_rows(rows, n_in);
      PreparedActivations acts;
      acts.prepare(ActFormat::kQ8_K, x.data(), rows, n_in, n_in);
      const std::vector<float> alone = test::each_row_alone(m.view(), acts, n_out);
      for (int64_t batch : {2, 3, 4, 5, 8, 9, 16, 17, 21, 40}) {
        std::vector<int32_t> list;
        for (int64_t i = 0; i < batch; ++i)
          list.push_back(static_cast<int32_t>((7 * i + 3 + i / rows) % rows));
        std::vector<float> y(static_cast<size_t>(batch * n_out), -1.0f);
        const int64_t split = 16 + batch % 5;
        kernels::matmul_range(m.view(), acts, list.data(), batch, 0, split, y.data(), n_out);
        kernels::matmul_range(m.view(), acts, list.data(), batch, split, n_out, y.data(), n_out);
        for (int64_t i = 0; i < batch; ++i) {
          ASSERT_EQ(0, std::memcmp(y.data() + i * n_out, alone.data() + list[i] * n_out, n_out * 4))
              << "n_in " << n_in << " pattern " << test::pattern_name(wp) << " batch " << batch << " entry "
              << i;
        }
      }
    }
  }
}

TEST(VecKernels, KvRowConversionsMatchScalar) {
  const int64_t n = 32 * 9;
  std::vector<float> src = test::make_values(Pattern::kLarge, 1, n, 5);
  src[7] = 0.0f, src[8] = -0.0f, src[9] = 65504.0f, src[10] = 1e-7f;
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
  std::vector<BlockQ8_0> q(static_cast<size_t>(n / 32));
  quantize_row_q8_0(src.data(), q.data(), n);
  std::vector<float> want_h(n), want_q(n);
  kernels::scalar::f16_to_f32(h.data(), want_h.data(), n);
  kernels::scalar::q8_0_to_f32(q.data(), want_q.data(), n);
  std::vector<float> ref_q(n);
  dequantize_row_q8_0(q.data(), ref_q.data(), n);
  EXPECT_EQ(0, std::memcmp(want_q.data(), ref_q.data(), n * 4));
  for (Isa isa : test::supported_isas()) {
    IsaScope scope(isa);
    for (int64_t len : {n, n - 5, int64_t{3}}) {
      std::vector<float> got(n, -1.0f);
      kernels::f16_to_f32(h.data(), got.data(), len);
      EXPECT_EQ(0, std::memcmp(got.data(), want_h.data(), len * 4)) << isa_name(isa) << " f16 " << len;
    }
    std::vector<float> got(n, -1.0f);
    kernels::q8_0_to_f32(q.data(), got.data(), n);
    EXPECT_EQ(0, std::memcmp(got.data(), want_q.data(), n * 4)) << isa_name(isa) << " q8_0";
  }
}

// Element-wise per column with fused multiply-adds: every level gives the scalar twin's bits, in place too,
// and a step's bits are the same in a call of several rows (chained through planes) as alone.
TEST(VecKernels, DeltaRuleMatchesScalarBitwise) {
  for (int64_t d : {int64_t{128}, int64_t{69}, int64_t{16}}) {
    const int64_t n = 3;
    const std::vector<float> s0 = test::make_values(Pattern::kGaussian, d, d, 1);
    const std::vector<float> kqv = test::make_values(Pattern::kGaussian, 3 * n, d, 2);
    auto steps = [&](std::vector<float>& planes, std::vector<float>& out, bool in_place) {
      planes.assign(static_cast<size_t>((n + 1) * d * d), 0.0f);
      std::copy(s0.begin(), s0.end(), planes.begin());
      out.assign(static_cast<size_t>(n * d), -1.0f);
      std::vector<kernels::DeltaRuleRow> rows;
      for (int64_t t = 0; t < n; ++t) {
        const float* base = kqv.data() + 3 * t * d;
        float* src = planes.data() + (in_place ? 0 : t * d * d);
        float* dst = planes.data() + (in_place ? 0 : (t + 1) * d * d);
        rows.push_back({src, dst, base, base + d, base + 2 * d, 0.7f - 0.1f * t, 0.93f, out.data() + t * d});
      }
      return rows;
    };
    std::vector<float> want_s, want_o;
    auto rows = steps(want_s, want_o, false);
    kernels::scalar::delta_rule(rows.data(), n, d);
    double mag = 0;
    for (float x : want_o) mag += std::fabs(x);
    EXPECT_GT(mag, 0.0);
    for (Isa isa : test::supported_isas()) {
      IsaScope scope(isa);
      std::vector<float> s, o;
      rows = steps(s, o, false);
      kernels::delta_rule(rows.data(), n, d);
      EXPECT_EQ(s, want_s) << isa_name(isa) << " d " << d;
      EXPECT_EQ(o, want_o) << isa_name(isa) << " d " << d;
      // One row per call.
      rows = steps(s, o, false);
      for (int64_t t = 0; t < n; ++t) kernels::delta_rule(&rows[t], 1, d);
      EXPECT_EQ(s, want_s) << isa_name(isa) << " row by row, d " << d;
      EXPECT_EQ(o, want_o) << isa_name(isa) << " row by row, d " << d;
      // In place: the final state is the last plane above.
      rows = steps(s, o, true);
      kernels::delta_rule(rows.data(), n, d);
      EXPECT_TRUE(std::equal(s.begin(), s.begin() + d * d, want_s.begin() + n * d * d)) << isa_name(isa);
      EXPECT_EQ(o, want_o) << isa_name(isa) << " in place, d " << d;
    }
  }
}

// The engine's verify pattern: every row in place on the live plane, each row but the last copying the
// state after it into a snapshot plane of its own (64-byte aligned, where the SIMD levels stream it, and one
// float off, where they store it plainly). The live plane ends as, and snapshot t equals, the state after
// that row of a plain chain of out-of-place steps; outputs the same; every level gives the scalar twin's
// bits, and the same chain run out of place on aligned planes too.
TEST(VecKernels, DeltaRuleSnapshotsMatchScalarBitwise) {
  for (int64_t d : {int64_t{128}, int64_t{32}, int64_t{69}}) {
    for (int64_t n = 1; n <= 5; ++n) {
      const std::vector<float> s0 = test::make_values(Pattern::kGaussian, d, d, 3);
      const std::vector<float> kqv = test::make_values(Pattern::kGaussian, 3 * n, d, 4);
      auto row = [&](int64_t t, const float* src, float* dst, float* out, float* snapshot) {
        const float* base = kqv.data() + 3 * t * d;
        return kernels::DeltaRuleRow{src,  dst, base,    base + d, base + 2 * d, 0.6f + 0.05f * t,
                                     0.9f, out, snapshot};
      };
      // Reference: plane t + 1 = the state after row t, out of place.
      std::vector<float> chain(static_cast<size_t>((n + 1) * d * d)), want_out(static_cast<size_t>(n * d));
      std::copy(s0.begin(), s0.end(), chain.begin());
      std::vector<kernels::DeltaRuleRow> ref;
      for (int64_t t = 0; t < n; ++t)
        ref.push_back(row(t, chain.data() + t * d * d, chain.data() + (t + 1) * d * d,
                          want_out.data() + t * d, nullptr));
      kernels::scalar::delta_rule(ref.data(), n, d);

      for (bool aligned : {true, false}) {
        auto run = [&](bool scalar, const char* what) {
          std::vector<float> buf(static_cast<size_t>((n + 1) * d * d + 32), -2.0f), out(n * d, -1.0f);
          const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
          float* live = buf.data() + (64 - p % 64) % 64 / sizeof(float);
          float* snaps = live + d * d + (aligned ? 0 : 1);
          std::copy(s0.begin(), s0.end(), live);
          std::vector<kernels::DeltaRuleRow> rows;
          for (int64_t t = 0; t < n; ++t)
            rows.push_back(row(t, live, live, out.data() + t * d, t + 1 < n ? snaps + t * d * d : nullptr));
          if (scalar)
            kernels::scalar::delta_rule(rows.data(), n, d);
          else
            kernels::delta_rule(rows.data(), n, d);
          const std::string at = std::string(what) + " d " + std::to_string(d) + " n " + std::to_string(n) +
                                 (aligned ? " aligned" : " unaligned");
          EXPECT_TRUE(std::equal(live, live + d * d, chain.begin() + n * d * d)) << at << ": live plane";
          for (int64_t t = 0; t + 1 < n; ++t)
            EXPECT_TRUE(
                std::equal(snaps + t * d * d, snaps + (t + 1) * d * d, chain.begin() + (t + 1) * d * d))
                << at << ": snapshot after row " << t;
          EXPECT_EQ(out, want_out) << at << ": outputs";
        };
        run(true, "scalar");
        for (Isa isa : test::supported_isas()) {
          IsaScope scope(isa);
          run(false, isa_name(isa));
        }
      }
      // The same chain out of place on 64-byte-aligned planes (where the SIMD levels stream the last row's
      // destination, which no later row reads).
      for (Isa isa : test::supported_isas()) {
        IsaScope scope(isa);
        std::vector<float> buf(static_cast<size_t>((n + 1) * d * d + 16), -2.0f), out(n * d, -1.0f);
        const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
        float* planes = buf.data() + (64 - p % 64) % 64 / sizeof(float);
        std::copy(s0.begin(), s0.end(), planes);
        std::vector<kernels::DeltaRuleRow> rows;
        for (int64_t t = 0; t < n; ++t)
          rows.push_back(row(t, planes + t * d * d, planes + (t + 1) * d * d, out.data() + t * d, nullptr));
        kernels::delta_rule(rows.data(), n, d);
        EXPECT_TRUE(std::equal(planes, planes + (n + 1) * d * d, chain.begin()))
            << isa_name(isa) << " d " << d << " n " << n << ": out-of-place planes";
        EXPECT_EQ(out, want_out) << isa_name(isa) << " d " << d << " n " << n << ": out-of-place outputs";
      }
    }
  }
}

}  // namespace
}  // namespace mtp
