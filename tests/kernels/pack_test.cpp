// Packed weights (kernels/pack.h): the packing is a permutation of the row format's bytes (unpack gives
// them back), and a packed matrix gives bitwise the results of the original at every ISA level, for every
// batch size, row list, output range on tile boundaries, thread count and expert of a stack.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/matmul.h"
#include "kernels/pack.h"
#include "matmul_internal.h"

namespace mtp {
namespace {

using kernels::ActFormat;
using kernels::Isa;
using kernels::MatrixView;
using kernels::PreparedActivations;
using test::IsaScope;
using test::Pattern;

struct Packed {
  std::vector<uint8_t> bytes;
  MatrixView view;
};

Packed pack(const MatrixView& w) {
  Packed p;
  p.bytes.resize(static_cast<size_t>(w.n_out * w.row_bytes));
  p.view = kernels::pack_matrix(w, p.bytes.data());
  return p;
}

TEST(Pack, OnlyWholeTilesOfPackableTypes) {
  const std::vector<float> v = test::make_values(Pattern::kGaussian, 32, 512, 1);
  for (GgmlType type : {GgmlType::IQ4_XS, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::Q4_1,
                        GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::MXFP4, GgmlType::Q2_K, GgmlType::Q3_K,
                        GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const test::QuantMatrix a = test::make_matrix(type, v, 512, 32);
    EXPECT_TRUE(kernels::can_pack(a.view()));
    EXPECT_FALSE(kernels::can_pack(MatrixView::contiguous(type, a.bytes.data(), 512, 24)));
    Packed p = pack(a.view());
    EXPECT_TRUE(p.view.packed);
    EXPECT_FALSE(kernels::can_pack(p.view));  // already packed
  }
  const test::QuantMatrix q = test::make_matrix(GgmlType::F16, v, 512, 32);
  EXPECT_FALSE(kernels::can_pack(q.view()));
}

class PackTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(PackTypes, UnpackRestoresEveryRowByteForByte) {
  const GgmlType type = GetParam();
  for (int64_t n_in : {256, 2048}) {
    const int64_t n_out = 48;
    const test::QuantMatrix m =
        test::make_matrix(type, test::make_values(Pattern::kSpikes, n_out, n_in, 5), n_in, n_out);
    Packed p = pack(m.view());
    EXPECT_NE(0, std::memcmp(p.bytes.data(), m.bytes.data(), p.bytes.size())) << "packing moved nothing";
    std::vector<uint8_t> back(static_cast<size_t>(n_out * m.view().row_bytes));
    kernels::unpack_rows(p.view, 0, n_out, back.data());
    EXPECT_EQ(0, std::memcmp(back.data(), m.bytes.data(), back.size())) << n_in;
    // A range that starts inside a tile.
    const int64_t rb = m.view().row_bytes;
    std::vector<uint8_t> part(static_cast<size_t>(5 * rb));
    kernels::unpack_rows(p.view, 13, 5, part.data());
    EXPECT_EQ(0, std::memcmp(part.data(), m.bytes.data() + 13 * rb, part.size()));
    // One tile packed alone is the packed matrix's tile.
    std::vector<uint8_t> tile(static_cast<size_t>(16 * rb));
    kernels::pack_tile(m.view(), 16, tile.data());
    EXPECT_EQ(0, std::memcmp(tile.data(), p.bytes.data() + 16 * rb, tile.size()));
    // Whole-tile row ranges packed on their own, each at its byte offset (as the loader packs in parallel
    // pieces), give the whole matrix's packing.
    std::vector<uint8_t> pieces(p.bytes.size());
    for (int64_t r0 : {0, 16}) {
      const int64_t rows = r0 == 0 ? 16 : n_out - 16;
      kernels::pack_matrix(MatrixView::contiguous(type, m.bytes.data() + r0 * rb, n_in, rows),
                           pieces.data() + r0 * rb);
    }
    EXPECT_EQ(pieces, p.bytes) << n_in;
  }
}

// Rows with a zero block, huge and tiny magnitudes (the Q8_K scales' extremes).
std::vector<float> activations(int64_t rows, int64_t n_in) {
  std::vector<float> x = test::make_values(Pattern::kGaussian, rows, n_in, 9);
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x.data() + r * n_in;
    for (int64_t i = 0; i < n_in; ++i) {
      if (r % 4 == 1 && i < 256) xr[i] = 0.0f;
      if (r % 4 == 2) xr[i] *= 1e20f;
      if (r % 4 == 3) xr[i] *= 1e-20f;
    }
  }
  return x;
}

TEST_P(PackTypes, PackedMatmulBitwiseEqualsRowFormat) {
  const GgmlType type = GetParam();
  // 4608 inputs: 18 super-blocks, more than the AVX2 packed kernel sums per chunk.
  for (int64_t n_in : {256, 2048, 4608}) {
    const int64_t n_out = 64, rows = 23;
    for (Pattern wp : {Pattern::kGaussian, Pattern::kLarge, Pattern::kSpikes}) {
      const test::QuantMatrix m = test::make_matrix(type, test::make_values(wp, n_out, n_in, 3), n_in, n_out);
      Packed p = pack(m.view());
      const std::vector<float> x = activations(rows, n_in);
      for (Isa isa : test::supported_isas()) {
        IsaScope scope(isa);
        PreparedActivations acts;
        acts.prepare(kernels::act_format(type), x.data(), rows, n_in, n_in);
        // The IQ4_XS decode kernel with and without VBMI's nibble lookup, and the AVX2 one with and without
        // AVX-VNNI (where the CPU has them).
        for (bool vbmi : {true, false}) {
          const bool was = kernels::detail::set_vbmi_enabled(vbmi);
          const bool was_vnni = kernels::avx_vnni_active();
          if (!kernels::set_avx_vnni(vbmi)) kernels::set_avx_vnni(false);
          for (int64_t batch : {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 23}) {
            std::vector<int32_t> list;
            for (int64_t i = 0; i < batch; ++i) list.push_back(static_cast<int32_t>((5 * i + 2) % rows));
            std::vector<float> want(static_cast<size_t>(batch * n_out), -1.0f), got(want.size(), -2.0f);
            kernels::matmul_range(m.view(), acts, list.data(), batch, 0, n_out, want.data(), n_out);
            kernels::matmul_range(p.view, acts, list.data(), batch, 0, 32, got.data(), n_out);
            kernels::matmul_range(p.view, acts, list.data(), batch, 32, n_out, got.data(), n_out);
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
                << isa_name(isa) << " n_in " << n_in << " " << test::pattern_name(wp) << " batch " << batch
                << (kernels::detail::vbmi_active() ? " vbmi" : "")
                << (kernels::avx_vnni_active() ? " vnni" : "");
          }
          kernels::detail::set_vbmi_enabled(was);
          kernels::set_avx_vnni(was_vnni);
        }
      }
    }
  }
}

TEST_P(PackTypes, ThreadsAndExpertStacks) {
  const GgmlType type = GetParam();
  const int64_t n_in = 512, n_out = 48, n_exp = 3, rows = 6;
  const test::QuantMatrix m = test::make_matrix(
      type, test::make_values(Pattern::kGaussian, n_out * n_exp, n_in, 4), n_in, n_out * n_exp);
  Packed p = pack(m.view());
  const std::vector<float> x = activations(rows, n_in);
  ThreadPool pool(3);
  PreparedActivations acts;
  acts.prepare(kernels::act_format(type), x.data(), rows, n_in, n_in);
  for (int64_t e = 0; e < n_exp; ++e) {
    const MatrixView we = MatrixView::stacked(type, m.bytes.data(), n_in, n_out, e);
    MatrixView pe = p.view;
    pe.n_out = n_out;
    pe = pe.stacked_at(e);
    EXPECT_TRUE(pe.packed);
    std::vector<float> want(static_cast<size_t>(rows * n_out)), got(want.size(), -1.0f);
    kernels::matmul(we, acts, want.data(), n_out, nullptr);
    kernels::matmul(pe, acts, got.data(), n_out, &pool);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << "expert " << e;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PackTypes,
                         ::testing::Values(GgmlType::IQ4_XS, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::IQ4_NL,
                                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::MXFP4,
                                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                                           GgmlType::Q6_K),
                         [](const ::testing::TestParamInfo<GgmlType>& i) {
                           return std::string(type_name(i.param));
                         });

// Batches of 9 rows and more, equally spaced (a whole batch, or a row list with a constant step), take their
// integer sums from AMX where the CPU has it, one group of up to 16 rows or two of 16 and up to 16 per kernel
// call and 32 rows at a time: bitwise the VNNI sums' results and each row's result alone, with the VNNI
// kernels for the tail of fewer than 9 rows and for batches that do not qualify (8 rows, irregular lists).
// With VBMI switched off the AMX kernels (which decode with it) are off too and the VNNI decode runs.
TEST(PackIq4Xs, AmxRowsBitwiseEqualVnniAndOneRow) {
  if (!kernels::isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512";
  IsaScope scope(Isa::kAvx512);
  const int64_t n_out = 48, rows = 70;
  for (int64_t n_in : {256, 2048}) {
    for (Pattern wp : {Pattern::kGaussian, Pattern::kLarge, Pattern::kSpikes}) {
      const test::QuantMatrix m =
          test::make_matrix(GgmlType::IQ4_XS, test::make_values(wp, n_out, n_in, 6), n_in, n_out);
      Packed p = pack(m.view());
      const std::vector<float> x = activations(rows, n_in);
      PreparedActivations acts;
      acts.prepare(ActFormat::kQ8_K, x.data(), rows, n_in, n_in);
      const std::vector<float> alone = test::each_row_alone(m.view(), acts, n_out);
      // The first n rows; every second row; 16 rows with a step of 3, then irregular ones; irregular ones.
      std::vector<std::vector<int32_t>> lists;
      for (int n : {8, 9, 11, 12, 13, 15, 16, 17, 20, 24, 31, 32, 41, 64, 70}) {
        lists.emplace_back();
        for (int32_t i = 0; i < n; ++i) lists.back().push_back(i);
      }
      for (int n : {10, 16, 24}) {
        lists.emplace_back();
        for (int32_t i = 0; i < n; ++i) lists.back().push_back(2 * i);
      }
      lists.emplace_back();
      for (int32_t i = 0; i < 16; ++i) lists.back().push_back(3 * i + 1);
      lists.back().push_back(5);
      lists.emplace_back();
      for (int32_t i = 0; i < 18; ++i) lists.back().push_back((11 * i + 5) % rows);
      for (bool amx : {true, false}) {
        const bool amx_was = kernels::detail::set_amx_enabled(amx);
        for (bool vbmi : {true, false}) {
          const bool vbmi_was = kernels::detail::set_vbmi_enabled(vbmi);
          for (const std::vector<int32_t>& list : lists) {
            const int64_t batch = static_cast<int64_t>(list.size());
            // Lists of the first rows run as a whole batch (no row list), as the engine's dense products do.
            const int32_t* rl = list.back() == batch - 1 ? nullptr : list.data();
            std::vector<float> y(static_cast<size_t>(batch * n_out), -1.0f);
            kernels::matmul_range(p.view, acts, rl, batch, 0, 16, y.data(), n_out);
            kernels::matmul_range(p.view, acts, rl, batch, 16, n_out, y.data(), n_out);
            for (int64_t i = 0; i < batch; ++i) {
              ASSERT_EQ(0, std::memcmp(y.data() + i * n_out, alone.data() + list[i] * n_out, n_out * 4))
                  << (kernels::detail::amx_active() ? "AMX" : "VNNI")
                  << (kernels::detail::vbmi_active() ? " vbmi" : "") << " n_in " << n_in << " "
                  << test::pattern_name(wp) << " batch " << batch << " entry " << i;
            }
          }
          kernels::detail::set_vbmi_enabled(vbmi_was);
        }
        kernels::detail::set_amx_enabled(amx_was);
      }
    }
  }
  std::printf("IQ4_XS packed, 9 rows and more: %s\n", kernels::detail::amx_active()
                                                          ? "AMX and VNNI sums tested"
                                                          : "VNNI only (no AMX here, or MTP_AMX=0)");
}

TEST(PackDeathTest, RangeOffTileBoundaryIsRefused) {
  const test::QuantMatrix m =
      test::make_matrix(GgmlType::IQ4_XS, test::make_values(Pattern::kGaussian, 32, 256, 1), 256, 32);
  Packed p = pack(m.view());
  const std::vector<float> x = activations(1, 256);
  PreparedActivations acts;
  acts.prepare(ActFormat::kQ8_K, x.data(), 1, 256, 256);
  std::vector<float> y(32);
  EXPECT_DEATH(kernels::matmul_range(p.view, acts, nullptr, 1, 3, 32, y.data(), 32), "tile boundaries");
}

}  // namespace
}  // namespace mtp
