// Acceptance tests: every vector of docs/formats.md 5.2, 5.3 and 5.4 (made with ggml) reproduced exactly.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/quantize.h"
#include "sha256.h"
#include "spec_vectors.h"
#include "test_inputs.h"

namespace mtp {
namespace {

using test::sha256_hex;
using test::to_hex;

std::string hex_of(const std::vector<uint8_t>& bytes) {
  return to_hex(bytes.data(), bytes.size());
}

TEST(SpecVectors, HalfConversions_5_4) {
  for (const speculative::HalfVector& v : speculative::kHalfVectors) {
    const float f = std::bit_cast<float>(v.f32_bits);
    SCOPED_TRACE(testing::Message() << std::hex << "f32 bits 0x" << v.f32_bits);
    EXPECT_EQ(fp32_to_bf16(f), v.bf16);
    if (!v.has_fp16) continue;
    const uint16_t h = fp32_to_fp16(f);
    EXPECT_EQ(h, v.fp16);
    // Decoding is the exact IEEE widening: compare with the half's own value.
    const float back = fp16_to_fp32(h);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0) {
      EXPECT_TRUE(std::isnan(back));
    } else {
      const float expected = std::ldexp(static_cast<float>((h & 0x3FF) | ((h & 0x7C00) ? 0x400 : 0)),
                                        std::max(1, (h >> 10) & 0x1F) - 25);
      const float signed_expected = (h & 0x8000) ? -expected : expected;
      if ((h & 0x7C00) == 0x7C00) {
        EXPECT_TRUE(std::isinf(back));
        EXPECT_EQ(std::signbit(back), (h & 0x8000) != 0);
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(back), std::bit_cast<uint32_t>(signed_expected));
      }
    }
  }
  // Spot values of the table's "fp16 -> f32" column.
  EXPECT_EQ(fp16_to_fp32(0x2e66), 0.0999755859375f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), 0x1.0p-24f);
  EXPECT_EQ(fp16_to_fp32(0x03ff), 0x3FFp-24f);
  EXPECT_EQ(std::bit_cast<uint32_t>(fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
}

// Every finite half decodes and re-encodes to itself.
TEST(SpecVectors, HalfRoundTripAllFinite) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;
    ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))), h);
  }
}

TEST(SpecVectors, SmallVectors_5_2) {
  const std::vector<float> s1 = test::spec_s1();
  const std::vector<float> s2 = test::spec_s2();
  const std::vector<float> w2 = test::spec_w2();
  for (const speculative::SmallVector& v : speculative::kSmallVectors) {
    const std::string input = v.input;
    SCOPED_TRACE(input + " " + std::string(type_name(v.type)) + (v.with_imatrix ? " imatrix" : ""));
    const std::vector<float>& x = input == "S1" ? s1 : s2;
    const std::vector<uint8_t> bytes =
        test::quantize_bytes(v.type, x, 1, v.with_imatrix ? w2.data() : nullptr);
    EXPECT_EQ(hex_of(bytes), v.hex);
  }
}

TEST(SpecVectors, TensorInputMatches_5_3) {
  const std::vector<float> t = test::spec_tensor_t();
  ASSERT_EQ(t.size(), 2048u);
  EXPECT_EQ(sha256_hex(t.data(), t.size() * sizeof(float)),
            "06a5532795a54a034e8066d29dc882cf4658a970a4742ac2c1fa2c071168a5d7");
  EXPECT_EQ(to_hex(t.data(), 16), "88449dbe80211a3d84eb173f58e5efbe");
}

TEST(SpecVectors, Sha256KnownAnswers) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(SpecVectors, TensorHashes_5_3) {
  const std::vector<float> t = test::spec_tensor_t();
  const std::vector<float> qw = test::spec_imatrix_t();
  for (const speculative::TensorHash& h : speculative::kTensorHashes) {
    SCOPED_TRACE(std::string(type_name(h.type)) + (h.with_imatrix ? " imatrix" : ""));
    const std::vector<uint8_t> bytes =
        test::quantize_bytes(h.type, t, 4, h.with_imatrix ? qw.data() : nullptr);
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), h.bytes);
    EXPECT_EQ(sha256_hex(bytes.data(), bytes.size()), h.sha256);
    const size_t row_bytes = bytes.size() / 4;
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(sha256_hex(bytes.data() + r * row_bytes, row_bytes).substr(0, 16), h.row_prefix[r])
          << "row " << r;
    }
    // The types that ignore an imatrix give the same bytes with one.
    if (!uses_imatrix(h.type)) {
      EXPECT_EQ(test::quantize_bytes(h.type, t, 4, qw.data()), bytes);
    }
  }
}

TEST(SpecVectors, TensorBlocks_5_3) {
  const std::vector<float> t = test::spec_tensor_t();
  for (const speculative::TensorBlock& b : speculative::kTensorBlocks) {
    SCOPED_TRACE(testing::Message() << type_name(b.type) << " row " << b.row << " block " << b.block);
    const std::vector<uint8_t> bytes = test::quantize_bytes(b.type, t, 4);
    const int64_t block_bytes = type_traits(b.type).type_size;
    const int64_t offset = b.row * row_size(b.type, 512) + b.block * block_bytes;
    EXPECT_EQ(to_hex(bytes.data() + offset, static_cast<size_t>(block_bytes)), b.hex);
  }
}

// MXFP4's dequantizer against ggml's floats: T's blocks, and every E8M0 exponent (the subnormal scales of e =
// 0 and 1, and e = 255) with every level.
TEST(SpecVectors, Mxfp4DequantizesAsGgml) {
  const std::vector<float> t = test::spec_tensor_t();
  const std::vector<uint8_t> bytes = test::quantize_bytes(GgmlType::MXFP4, t, 4);
  std::vector<float> y(t.size());
  ASSERT_TRUE(dequantize_row(GgmlType::MXFP4, bytes.data(), y.data(), static_cast<int64_t>(y.size())).ok());
  EXPECT_EQ(sha256_hex(y.data(), y.size() * 4), speculative::kMxfp4DequantizedT);
  std::vector<uint8_t> blocks(256 * sizeof(BlockMXFP4));
  for (int e = 0; e < 256; ++e) {
    blocks[17 * e] = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) blocks[17 * e + 1 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  }
  std::vector<float> all(256 * 32);
  ASSERT_TRUE(
      dequantize_row(GgmlType::MXFP4, blocks.data(), all.data(), static_cast<int64_t>(all.size())).ok());
  EXPECT_EQ(sha256_hex(all.data(), all.size() * 4), speculative::kMxfp4DequantizedEveryExponent);
}

TEST(SpecVectors, DequantizedAsGgml) {
  const std::vector<float> t = test::spec_tensor_t();
  for (const speculative::DequantizedHash& h : speculative::kDequantizedT) {
    SCOPED_TRACE(type_name(h.type));
    const std::vector<uint8_t> bytes = test::quantize_bytes(h.type, t, 4);
    std::vector<float> y(t.size());
    ASSERT_TRUE(dequantize_row(h.type, bytes.data(), y.data(), static_cast<int64_t>(y.size())).ok());
    EXPECT_EQ(sha256_hex(y.data(), y.size() * 4), h.sha256);
  }
}

}  // namespace
}  // namespace mtp
