// Write-then-read round trips of every metadata type and of tensors of several types, and byte-exact
// reproduction of files written by ggml itself (docs/formats.md section 5).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gguf/gguf_file.h"
#include "test_util.h"

namespace mtp {
namespace {

using testing::TempDir;

Metadata every_value_type() {
  Metadata md;
  md.set("general.architecture", Value::string("test"));
  md.set("t.u8", Value::scalar<uint8_t>(250));
  md.set("t.i8", Value::scalar<int8_t>(-120));
  md.set("t.u16", Value::scalar<uint16_t>(65000));
  md.set("t.i16", Value::scalar<int16_t>(-32000));
  md.set("t.u32", Value::scalar<uint32_t>(4000000000u));
  md.set("t.i32", Value::scalar<int32_t>(-2000000000));
  md.set("t.f32", Value::scalar<float>(-1.5e-7f));
  md.set("t.bool", Value::scalar(true));
  md.set("t.string", Value::string("h\xc3\xa9llo\n"));
  md.set("t.empty_string", Value::string(""));
  md.set("t.u64", Value::scalar<uint64_t>(std::numeric_limits<uint64_t>::max()));
  md.set("t.i64", Value::scalar<int64_t>(std::numeric_limits<int64_t>::min()));
  md.set("t.f64", Value::scalar<double>(3.141592653589793));
  md.set("t.arr_u8", Value::array<uint8_t>({1, 2, 255}));
  md.set("t.arr_i8", Value::array<int8_t>({-1, 127}));
  md.set("t.arr_u16", Value::array<uint16_t>({1, 65535}));
  md.set("t.arr_i16", Value::array<int16_t>({-7}));
  md.set("t.arr_u32", Value::array<uint32_t>({11, 11, 10, 0}));
  md.set("t.arr_i32", Value::array<int32_t>({1, -1}));
  md.set("t.arr_f32", Value::array<float>({0.5f, -0.25f, INFINITY}));
  md.set("t.arr_bool", Value::array<bool>({true, false, true}));
  md.set("t.arr_u64", Value::array<uint64_t>({1ull << 40}));
  md.set("t.arr_i64", Value::array<int64_t>({-(1ll << 40)}));
  md.set("t.arr_f64", Value::array<double>({1e300}));
  md.set("t.arr_empty", Value::array<uint32_t>({}));
  md.set("t.arr_str", Value::string_array({"a", "bc", "", "\xf0\x9f\x99\x82"}));
  md.set("t.arr_arr", Value::array_of_arrays({Value::array<int32_t>({1, 2}), Value::string_array({"x"}),
                                              Value::array_of_arrays({Value::array<uint8_t>({9})})}));
  return md;
}

TEST(GgufRoundTrip, EveryMetadataTypeSurvives) {
  TempDir dir;
  Metadata md = every_value_type();
  testing::write_gguf(dir.file("kv.gguf"), md, {}, {});
  auto f = GgufFile::open(dir.file("kv.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->metadata().size(), md.size());
  for (size_t i = 0; i < md.size(); ++i) {
    EXPECT_EQ(f->metadata().entries()[i].key, md.entries()[i].key);
    EXPECT_TRUE(f->metadata().entries()[i].value == md.entries()[i].value) << md.entries()[i].key;
  }
  EXPECT_EQ(*f->metadata().get<uint32_t>("t.u32"), 4000000000u);
  EXPECT_EQ(*f->metadata().get<int64_t>("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f->metadata().get_string("t.string"), "h\xc3\xa9llo\n");
  EXPECT_EQ(*f->metadata().get_integer_array("t.arr_u32"), (std::vector<int64_t>{11, 11, 10, 0}));
  EXPECT_EQ((**f->metadata().get_string_array("t.arr_str"))[3], "\xf0\x9f\x99\x82");
  const Value* nested = f->metadata().find("t.arr_arr");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->arrays().size(), 3u);
  EXPECT_EQ(nested->arrays()[2].arrays()[0].element<uint8_t>(0), 9);
}

TEST(GgufRoundTrip, TensorsOfSeveralTypesKeepTheirBytes) {
  TempDir dir;
  Metadata md;
  md.set("general.architecture", Value::string("test"));
  std::vector<TensorSpec> specs = {
      {"a.f32", GgmlType::F32, {3, 1, 1, 1}},         {"b.f16", GgmlType::F16, {5, 3, 1, 1}},
      {"c.q8_0", GgmlType::Q8_0, {64, 3, 1, 1}},      {"d.q4_k", GgmlType::Q4_K, {256, 2, 2, 1}},
      {"e.iq4_xs", GgmlType::IQ4_XS, {512, 1, 1, 1}}, {"f.bf16", GgmlType::BF16, {7, 1, 1, 2}},
      {"g.q6_k", GgmlType::Q6_K, {256, 1, 1, 1}},     {"h.empty", GgmlType::F32, {0, 4, 1, 1}},
  };
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < specs.size(); ++i) {
    data.push_back(
        testing::random_bytes(*tensor_byte_size(specs[i].type, specs[i].ne), static_cast<uint32_t>(i)));
  }
  testing::write_gguf(dir.file("t.gguf"), md, specs, data);
  auto f = GgufFile::open(dir.file("t.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f->canonical_layout());
  ASSERT_EQ(f->tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo* t = f->find_tensor(specs[i].name);
    ASSERT_NE(t, nullptr) << specs[i].name;
    EXPECT_EQ(t->type, specs[i].type);
    EXPECT_EQ(t->ne, specs[i].ne);
    EXPECT_EQ(t->offset % 32, 0u);
    auto bytes = f->tensor_data(*t);
    EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.end()), data[i]) << specs[i].name;
  }
}

TEST(GgufRoundTrip, CustomAlignmentIsUsedForPadding) {
  TempDir dir;
  Metadata md;
  md.set("general.alignment", Value::scalar<uint32_t>(256));
  std::vector<TensorSpec> specs = {{"x", GgmlType::F32, {3, 1, 1, 1}}, {"y", GgmlType::F32, {5, 1, 1, 1}}};
  auto bytes = testing::write_gguf(dir.file("a.gguf"), md, specs,
                                   {testing::random_bytes(12, 1), testing::random_bytes(20, 2)});
  auto f = GgufFile::parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->alignment(), 256u);
  EXPECT_EQ(f->data_offset() % 256, 0u);
  EXPECT_EQ(f->find_tensor("y")->offset, 256u);
  EXPECT_EQ(bytes.size(), f->data_offset() + 512);
}

// The 608-byte file ggml wrote (docs/formats.md section 5); our writer must produce the same bytes.
TEST(GgufGolden, ReproducesGgmlTinyFile) {
  auto expected = testing::read_bytes(std::string(MTP_SOURCE_DIR) + "/tests/gguf/data/ggml_tiny.gguf");
  ASSERT_EQ(expected.size(), 608u);
  auto ref = GgufFile::parse(expected);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  EXPECT_EQ(ref->data_offset(), 0x1c0u);
  EXPECT_EQ(*ref->metadata().get<float>("llama.rope.freq_base"), 10000.0f);
  EXPECT_EQ(*ref->metadata().get<bool>("x.flag"), true);
  EXPECT_EQ(*ref->metadata().get_integer_array("x.ints"), (std::vector<int64_t>{1, -1}));
  const TensorInfo* c = ref->find_tensor("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->n_dims, 1u);
  EXPECT_EQ(c->offset, 128u);

  Metadata md;
  md.set("general.architecture", Value::string("llama"));
  md.set("general.alignment", Value::scalar<uint32_t>(32));
  md.set("llama.block_count", Value::scalar<uint32_t>(2));
  md.set("llama.rope.freq_base", Value::scalar<float>(10000.0f));
  md.set("x.flag", Value::scalar(true));
  md.set("tokenizer.ggml.tokens", Value::string_array({"a", "bc", ""}));
  md.set("x.ints", Value::array<int32_t>({1, -1}));
  std::vector<TensorSpec> specs = {{"a", GgmlType::F32, {3, 1, 1, 1}},
                                   {"blk.0.b.weight", GgmlType::Q8_0, {32, 2, 1, 1}},
                                   {"c", GgmlType::F16, {4, 1, 1, 1}}};
  std::vector<std::vector<uint8_t>> data;
  for (const auto& s : specs) {
    auto span = ref->tensor_data(*ref->find_tensor(s.name));
    data.emplace_back(span.begin(), span.end());
  }
  TempDir dir;
  auto ours = testing::write_gguf(dir.file("tiny.gguf"), md, specs, data);
  EXPECT_EQ(ours, expected);
}

TEST(GgufGolden, MetadataOnlyFileIsPaddedLikeGgml) {
  Metadata md;
  md.set("general.architecture", Value::string("x"));
  auto index = encode_gguf_index(md, {});
  ASSERT_TRUE(index.ok());
  // 24-byte header + key (8 + 20) + type (4) + value (8 + 1) = 0x41 bytes, padded to 0x60.
  ASSERT_EQ(index->size(), 96u);
  for (size_t i = 0x41; i < 96; ++i) EXPECT_EQ((*index)[i], 0) << i;
  EXPECT_EQ((*index)[0x40], 'x');
}

TEST(GgufWriter, RejectsBadPlans) {
  TempDir dir;
  Metadata md;
  EXPECT_FALSE(GgufWriter::create(dir.file("a"), md, {{"q", GgmlType::Q8_0, {33, 1, 1, 1}}}).ok());
  EXPECT_FALSE(GgufWriter::create(dir.file("a"), md,
                                  {{"q", GgmlType::F32, {1, 1, 1, 1}}, {"q", GgmlType::F32, {1, 1, 1, 1}}})
                   .ok());
  EXPECT_FALSE(
      GgufWriter::create(dir.file("a"), md, {{std::string(64, 'n'), GgmlType::F32, {1, 1, 1, 1}}}).ok());
  Metadata bad_align;
  bad_align.set("general.alignment", Value::scalar<uint32_t>(48));
  EXPECT_FALSE(GgufWriter::create(dir.file("a"), bad_align, {}).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.file("a")));
}

TEST(GgufWriter, WrongSizesAndEarlyFinishFailWithoutLeavingAFile) {
  TempDir dir;
  Metadata md;
  {
    auto w = GgufWriter::create(dir.file("out.gguf"), md, {{"x", GgmlType::F32, {4, 1, 1, 1}}});
    ASSERT_TRUE(w.ok());
    EXPECT_FALSE(w->write_tensor(testing::random_bytes(12, 0)).ok());
    EXPECT_FALSE(w->write(testing::random_bytes(20, 0)).ok());
    EXPECT_TRUE(w->write(testing::random_bytes(8, 0)).ok());
    EXPECT_FALSE(w->finish().ok());
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(GgufWriter, ChunkedWritesEqualWholeWrites) {
  TempDir dir;
  Metadata md;
  std::vector<TensorSpec> specs = {{"x", GgmlType::F32, {100, 1, 1, 1}}, {"y", GgmlType::F16, {10, 1, 1, 1}}};
  auto x = testing::random_bytes(400, 1), y = testing::random_bytes(20, 2);
  auto whole = testing::write_gguf(dir.file("whole.gguf"), md, specs, {x, y});
  auto w = GgufWriter::create(dir.file("chunked.gguf"), md, specs);
  ASSERT_TRUE(w.ok());
  for (size_t i = 0; i < x.size(); i += 37) {
    ASSERT_TRUE(w->write({x.data() + i, std::min<size_t>(37, x.size() - i)}).ok());
  }
  ASSERT_TRUE(w->write(y).ok());
  ASSERT_TRUE(w->finish().ok());
  EXPECT_EQ(testing::read_bytes(dir.file("chunked.gguf")), whole);
}

}  // namespace
}  // namespace mtp
