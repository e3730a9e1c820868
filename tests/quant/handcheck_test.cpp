// Hand-checked behaviour per type: all-zero rows, constant rows, a single spike, values at the type's
// extremes, and rejection of NaN / Inf / bad lengths / unsupported types. Dequantizers are checked against
// blocks built field by field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/quantize.h"
#include "sha256.h"
#include "test_inputs.h"

namespace mtp {
namespace {

constexpr GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,    GgmlType::BF16,   GgmlType::Q8_0,
                                  GgmlType::Q4_0, GgmlType::Q4_1,   GgmlType::Q5_0,   GgmlType::Q5_1,
                                  GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K,   GgmlType::Q5_K,
                                  GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::Q8_K};

std::vector<uint8_t> quantize_or_die(GgmlType type, const std::vector<float>& x,
                                     const float* imatrix = nullptr) {
  std::vector<uint8_t> out(static_cast<size_t>(row_size(type, static_cast<int64_t>(x.size()))));
  const Status s = quantize_row(type, x.data(), out.data(), static_cast<int64_t>(x.size()), imatrix);
  EXPECT_TRUE(s.ok()) << type_name(type) << ": " << s.message();
  return out;
}

std::vector<float> round_trip(GgmlType type, const std::vector<float>& x, const float* imatrix = nullptr) {
  const std::vector<uint8_t> q = quantize_or_die(type, x, imatrix);
  std::vector<float> y(x.size());
  const Status s = dequantize_row(type, q.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(s.ok()) << s.message();
  return y;
}

std::string hex(const std::vector<uint8_t>& b) {
  return test::to_hex(b.data(), b.size());
}
std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(HandCheck, AllZeroRows) {
  const std::vector<float> zeros(512, 0.0f);
  // Expected encodings (docs/formats.md 3.3, 3.6, 3.7, 3.8 and 5.3): Q4_0 and IQ4_XS store d = -0
  // (0x8000).
  EXPECT_EQ(hex(quantize_or_die(GgmlType::Q8_0, zeros)), std::string(2 * 34 * 16, '0'));
  EXPECT_EQ(hex(quantize_or_die(GgmlType::Q4_0, zeros)), repeat("0080" + repeat("88", 16), 16));
  EXPECT_EQ(hex(quantize_or_die(GgmlType::IQ4_NL, zeros)), repeat("0000" + repeat("88", 16), 16));
  EXPECT_EQ(hex(quantize_or_die(GgmlType::IQ4_XS, zeros)), repeat("0080aaaa00000000" + repeat("88", 128), 2));
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::Q8_K, GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {
    const std::vector<uint8_t> q = quantize_or_die(t, zeros);
    EXPECT_EQ(hex(q), std::string(2 * q.size(), '0')) << type_name(t);
  }
  const std::vector<float> weights(512, 2.0f);
  for (GgmlType t : kAllTypes) {
    for (const float* imatrix :
         {static_cast<const float*>(nullptr), static_cast<const float*>(weights.data())}) {
      for (float y : round_trip(t, zeros, imatrix)) ASSERT_EQ(y, 0.0f) << type_name(t);
    }
  }
}

// A constant row is reproduced to within the fp16 rounding of the scale (and better for the exact formats).
TEST(HandCheck, ConstantRows) {
  for (float c : {0.5f, -0.25f, 3.0f, -1234.5f, 0.0625f}) {
    const std::vector<float> x(256, c);
    for (GgmlType t : kAllTypes) {
      const std::vector<float> y = round_trip(t, x);
      // fp16 scales and values: 2^-11 relative; bf16 values: 2^-9.
      const double relative = t == GgmlType::F32 ? 0.0 : (t == GgmlType::BF16 ? 4e-3 : 2e-3);
      const double tolerance = std::fabs(c) * relative;
      for (float v : y) ASSERT_NEAR(v, c, tolerance) << type_name(t) << " c=" << c;
    }
  }
  // Q8_0 of 0.5: d = fp16(0.5/127), every code 127.
  const std::vector<uint8_t> q = quantize_or_die(GgmlType::Q8_0, std::vector<float>(32, 0.5f));
  EXPECT_EQ(hex(q),
            test::to_hex(std::vector<uint16_t>{fp32_to_fp16(0.5f / 127)}.data(), 2) + repeat("7f", 32));
}

TEST(HandCheck, SingleSpike) {
  for (GgmlType t : kAllTypes) {
    std::vector<float> x(512, 0.0f);
    x[300] = 10.0f;
    const std::vector<float> y = round_trip(t, x);
    EXPECT_NEAR(y[300], 10.0f, 10.0f * 2e-3) << type_name(t);
    // Zeros stay exactly zero except in IQ4, whose table has no zero: the nearest level, 1, costs |d| (at
    // most spike/113, when the spike takes the top level 113) inside the spike's block, and nothing
    // elsewhere.
    const bool iq4 = t == GgmlType::IQ4_NL || t == GgmlType::IQ4_XS;
    for (int i = 0; i < 512; ++i) {
      if (i == 300) continue;
      const bool same_block = i / 32 == 300 / 32;
      const double tolerance = iq4 && same_block ? 10.0 / 113 * 1.01 : 0.0;
      ASSERT_LE(std::fabs(y[i]), tolerance) << type_name(t) << " element " << i;
    }
  }
  // Q4_0: the spike maps to level 0 (value -8d, d = -1.25); every other element to level 8.
  std::vector<float> x(32, 0.0f);
  x[5] = 10.0f;
  EXPECT_EQ(hex(quantize_or_die(GgmlType::Q4_0, x)), "00bd" + repeat("88", 5) + "80" + repeat("88", 10));
}

TEST(HandCheck, ValuesAtTypeExtremes) {
  // Largest finite f16 survives; the first value that rounds to Inf is refused, not written.
  std::vector<float> x(32, 65504.0f);
  EXPECT_EQ(round_trip(GgmlType::F16, x)[0], 65504.0f);
  x[3] = 65520.0f;
  std::vector<uint8_t> out(64);
  Status s = quantize_row(GgmlType::F16, x.data(), out.data(), 32);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("overflows f16"), std::string::npos) << s.message();
  // bf16 keeps the f32 range, but FLT_MAX rounds up to Inf.
  x.assign(32, 3.3e38f);
  EXPECT_NEAR(round_trip(GgmlType::BF16, x)[0], 3.3e38f, 3.3e38f * 4e-3);
  x[0] = std::numeric_limits<float>::max();
  s = quantize_row(GgmlType::BF16, x.data(), out.data(), 32);
  EXPECT_FALSE(s.ok());

  // Q8_0 codes span exactly [-127, 127]; a block whose scale exceeds fp16 range is refused.
  x.assign(32, 0.0f);
  x[0] = -2.0f;
  x[1] = 2.0f;
  const std::vector<uint8_t> q8 = quantize_or_die(GgmlType::Q8_0, x);
  EXPECT_EQ(static_cast<int8_t>(q8[2]), -127);
  EXPECT_EQ(static_cast<int8_t>(q8[3]), 127);
  x[1] = 65504.0f * 127 * 1.01f;
  std::vector<uint8_t> q8_out(34);
  s = quantize_row(GgmlType::Q8_0, x.data(), q8_out.data(), 32);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("non-finite scale"), std::string::npos) << s.message();

  // Q4_0: the extreme maps to level 0 and the opposite extreme (+8 d) is clipped to level 15.
  x.assign(32, 0.0f);
  x[0] = -8.0f;
  x[16] = 8.0f;
  const std::vector<uint8_t> q4 = quantize_or_die(GgmlType::Q4_0, x);
  EXPECT_EQ(q4[2], 0xF0);  // element 0 -> 0 (low nibble), element 16 -> 15 (high nibble)
  EXPECT_EQ(fp16_to_fp32(static_cast<uint16_t>(q4[0] | (q4[1] << 8))), 1.0f);

  // Q6_K: the sub-block holding the largest scale gets sub-scale -128.
  std::vector<float> x256 = test::gaussian(7, 256);
  x256[40] = 50.0f;
  const std::vector<uint8_t> q6 = quantize_or_die(GgmlType::Q6_K, x256);
  EXPECT_EQ(static_cast<int8_t>(q6[offsetof(BlockQ6_K, scales) + 2]), -128);

  // Wide dynamic range inside one row: blocks are independent, so tiny blocks keep their relative precision.
  // (IQ4's levels are not symmetric, so a block of {a, -a/2} costs it up to ~8%.)
  std::vector<float> wide(512);
  for (int i = 0; i < 512; ++i) wide[i] = (i < 256 ? 1e4f : 1e-2f) * (i % 2 ? 1.0f : -0.5f);
  for (GgmlType t : kAllTypes) {
    const std::vector<float> y = round_trip(t, wide);
    const double relative = (t == GgmlType::IQ4_NL || t == GgmlType::IQ4_XS) ? 0.1 : 0.01;
    for (int i = 0; i < 512; ++i) {
      ASSERT_NEAR(y[i], wide[i], std::fabs(wide[i]) * relative) << type_name(t) << " " << i;
    }
  }
}

TEST(HandCheck, NonFiniteInputIsRejected) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (GgmlType t : kAllTypes) {
      std::vector<float> x = test::gaussian(3, 256);
      x[77] = bad;
      std::vector<uint8_t> out(static_cast<size_t>(row_size(t, 256)), 0xAB);
      const Status s = quantize_row(t, x.data(), out.data(), 256);
      ASSERT_FALSE(s.ok()) << type_name(t);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find("column 77"), std::string::npos) << s.message();
      EXPECT_EQ(out, std::vector<uint8_t>(out.size(), 0xAB)) << "nothing may be written";
      // The tensor entry point reports the row.
      std::vector<float> two_rows(512, 0.5f);
      std::copy(x.begin(), x.end(), two_rows.begin() + 256);
      std::vector<uint8_t> out2(2 * out.size());
      const Status st = quantize_tensor(nullptr, t, two_rows.data(), out2.data(), 2, 256, nullptr);
      ASSERT_FALSE(st.ok());
      EXPECT_NE(st.message().find("row 1"), std::string::npos) << st.message();
    }
  }
  // A non-finite imatrix weight is refused too (for types that read it).
  std::vector<float> x = test::gaussian(3, 256);
  std::vector<float> w(256, 1.0f);
  w[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> out(256);
  EXPECT_FALSE(quantize_row(GgmlType::IQ4_XS, x.data(), out.data(), 256, w.data()).ok());
}

TEST(HandCheck, BadLengthsAndTypesAreRejected) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> out(4096);
  Status s = quantize_row(GgmlType::Q4_K, x.data(), out.data(), 300);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("block size 256"), std::string::npos) << s.message();
  EXPECT_FALSE(quantize_row(GgmlType::Q8_0, x.data(), out.data(), 33).ok());
  EXPECT_FALSE(dequantize_row(GgmlType::IQ4_NL, out.data(), x.data(), 48).ok());
  EXPECT_FALSE(quantize_tensor(nullptr, GgmlType::Q6_K, x.data(), out.data(), 1, 300, nullptr).ok());

  s = quantize_row(GgmlType::IQ3_XXS, x.data(), out.data(), 256);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("iq3_xxs"), std::string::npos) << s.message();
  s = dequantize_row(GgmlType::IQ2_XXS, out.data(), x.data(), 256);
  EXPECT_NE(s.message().find("iq2_xxs"), std::string::npos) << s.message();
  EXPECT_FALSE(quantize_tensor(nullptr, GgmlType::Q8_1, x.data(), out.data(), 1, 32, nullptr).ok());

  // Zero-length rows are fine.
  EXPECT_TRUE(quantize_row(GgmlType::Q4_K, x.data(), out.data(), 0).ok());
}

// The type table's `computable` flag and the quantize entry point agree on every type id.
TEST(HandCheck, ComputableTraitsMatchDispatch) {
  for (int32_t id = 0; id < kGgmlTypeCount; ++id) {
    const auto traits = type_traits(id);
    if (!traits) continue;
    EXPECT_EQ(traits->computable, is_quantize_supported(static_cast<GgmlType>(id))) << traits->name;
  }
}

TEST(HandCheck, ValidateRowData) {
  std::vector<uint8_t> block(34, 0);
  EXPECT_TRUE(validate_row_data(GgmlType::Q8_0, block.data(), 34).ok());
  EXPECT_FALSE(validate_row_data(GgmlType::Q8_0, block.data(), 33).ok());
  block[1] = 0x7C;  // d = +Inf
  EXPECT_FALSE(validate_row_data(GgmlType::Q8_0, block.data(), 34).ok());
  std::vector<uint8_t> q4k(144, 0);
  q4k[3] = 0x7E;  // dmin = NaN
  const Status s = validate_row_data(GgmlType::Q4_K, q4k.data(), 144);
  EXPECT_NE(s.message().find("dmin"), std::string::npos) << s.message();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(validate_row_data(GgmlType::F32, &nan, 4).ok());
}

// Dequantizers against blocks assembled field by field from the layout tables of section 3.
TEST(Dequantize, Q4_KLayout) {
  BlockQ4_K b{};
  b.d = fp32_to_fp16(0.5f);
  b.dmin = fp32_to_fp16(0.25f);
  const int sc[8] = {1, 2, 3, 4, 33, 47, 60, 63};
  const int mn[8] = {0, 5, 10, 15, 20, 41, 52, 63};
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i * 7) & 0xFF);
  std::vector<float> y(256);
  ASSERT_TRUE(dequantize_row(GgmlType::Q4_K, &b, y.data(), 256).ok());
  for (int e = 0; e < 256; ++e) {
    const int chunk = e / 64, within = e % 64;
    const uint8_t byte = b.qs[32 * chunk + within % 32];
    const int q = within < 32 ? byte & 15 : byte >> 4;
    const int j = e / 32;
    const float expected =
        0.5f * static_cast<float>(sc[j]) * static_cast<float>(q) - 0.25f * static_cast<float>(mn[j]);
    ASSERT_EQ(y[e], expected) << e;
  }
}

TEST(Dequantize, Q5_KAndQ6_KAndIQ4_XSLayouts) {
  BlockQ5_K b5{};
  b5.d = fp32_to_fp16(1.0f);
  b5.dmin = 0;
  for (int j = 0; j < 4; ++j) b5.scales[j] = 1;      // sc_j = 1 for j < 4, 0 for j >= 4 (zero high bits)
  for (int j = 4; j < 8; ++j) b5.scales[j + 4] = 1;  // and sc_j = 1 for j >= 4
  for (int i = 0; i < 128; ++i) b5.qs[i] = static_cast<uint8_t>(i % 16 | ((15 - i % 16) << 4));
  for (int l = 0; l < 32; ++l) b5.qh[l] = static_cast<uint8_t>(l * 37);
  std::vector<float> y(256);
  ASSERT_TRUE(dequantize_row(GgmlType::Q5_K, &b5, y.data(), 256).ok());
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, l = e % 32;
    const bool high_half = e % 64 >= 32;
    const int low = high_half ? b5.qs[32 * c + l] >> 4 : b5.qs[32 * c + l] & 15;
    const int bit = (b5.qh[l] >> (2 * c + (high_half ? 1 : 0))) & 1;
    ASSERT_EQ(y[e], static_cast<float>(low + 16 * bit)) << e;
  }

  BlockQ6_K b6{};
  b6.d = fp32_to_fp16(0.125f);
  for (int i = 0; i < 16; ++i) b6.scales[i] = static_cast<int8_t>(i * 17 - 128);
  for (int i = 0; i < 128; ++i) b6.ql[i] = static_cast<uint8_t>(i * 29 + 3);
  for (int i = 0; i < 64; ++i) b6.qh[i] = static_cast<uint8_t>(i * 53 + 1);
  ASSERT_TRUE(dequantize_row(GgmlType::Q6_K, &b6, y.data(), 256).ok());
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const uint8_t ql = b6.ql[64 * h + l + (quarter % 2 ? 32 : 0)];
    const int low = quarter < 2 ? ql & 15 : ql >> 4;
    const int high = (b6.qh[32 * h + l] >> (2 * quarter)) & 3;
    const float expected =
        0.125f * static_cast<float>(b6.scales[e / 16]) * static_cast<float>(low + 16 * high - 32);
    ASSERT_EQ(y[e], expected) << e;
  }

  BlockIQ4_XS bx{};
  bx.d = fp32_to_fp16(0.5f);
  const int ls[8] = {0, 63, 32, 31, 17, 48, 5, 60};
  for (int ib = 0; ib < 8; ++ib) {
    bx.scales_l[ib / 2] |= static_cast<uint8_t>((ls[ib] & 15) << (4 * (ib % 2)));
    bx.scales_h |= static_cast<uint16_t>((ls[ib] >> 4) << (2 * ib));
  }
  for (int i = 0; i < 128; ++i) bx.qs[i] = static_cast<uint8_t>(i * 11);
  ASSERT_TRUE(dequantize_row(GgmlType::IQ4_XS, &bx, y.data(), 256).ok());
  for (int e = 0; e < 256; ++e) {
    const int ib = e / 32, j = e % 32;
    const uint8_t byte = bx.qs[16 * ib + j % 16];
    const int index = j < 16 ? byte & 15 : byte >> 4;
    const float expected = 0.5f * static_cast<float>(ls[ib] - 32) * static_cast<float>(kIq4nlValues[index]);
    ASSERT_EQ(y[e], expected) << e;
  }
}

TEST(Dequantize, SmallBlockTypes) {
  BlockQ4_0 b4{fp32_to_fp16(-0.5f), {}};
  BlockIQ4_NL bn{fp32_to_fp16(0.25f), {}};
  BlockQ8_0 b8{fp32_to_fp16(2.0f), {}};
  for (int j = 0; j < 16; ++j) {
    b4.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    bn.qs[j] = b4.qs[j];
  }
  for (int j = 0; j < 32; ++j) b8.qs[j] = static_cast<int8_t>(j * 8 - 127);
  std::vector<float> y(32);
  ASSERT_TRUE(dequantize_row(GgmlType::Q4_0, &b4, y.data(), 32).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], -0.5f * static_cast<float>(j - 8));
    EXPECT_EQ(y[j + 16], -0.5f * static_cast<float>(15 - j - 8));
  }
  ASSERT_TRUE(dequantize_row(GgmlType::IQ4_NL, &bn, y.data(), 32).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * kIq4nlValues[j]);
    EXPECT_EQ(y[j + 16], 0.25f * kIq4nlValues[15 - j]);
  }
  ASSERT_TRUE(dequantize_row(GgmlType::Q8_0, &b8, y.data(), 32).ok());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 2.0f * static_cast<float>(j * 8 - 127));

  // Q8_K: float scale, bsums consistent with the codes.
  const std::vector<float> x = test::gaussian(11, 256);
  std::vector<uint8_t> q(292);
  ASSERT_TRUE(quantize_row(GgmlType::Q8_K, x.data(), q.data(), 256).ok());
  BlockQ8_K b;
  std::memcpy(&b, q.data(), sizeof(b));
  for (int k = 0; k < 16; ++k) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += b.qs[16 * k + j];
    EXPECT_EQ(b.bsums[k], sum);
  }
  y.resize(256);
  ASSERT_TRUE(dequantize_row(GgmlType::Q8_K, q.data(), y.data(), 256).ok());
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], b.d * static_cast<float>(b.qs[j]));
}

}  // namespace
}  // namespace mtp
