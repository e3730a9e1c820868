// A corrupt-file corpus: a valid file truncated at every byte, and with each field mutated. Every case must
// come back as an error Status (run under ASan/UBSan in CI, so an out-of-bounds read fails the test too).
#include <gtest/gtest.h>

#include <cstring>

#include "gguf/gguf_file.h"
#include "test_util.h"

namespace mtp {
namespace {

// A small valid file with strings, arrays and three tensors.
std::vector<uint8_t> valid_file() {
  Metadata md;
  md.set("general.architecture", Value::string("llama"));
  md.set("llama.block_count", Value::scalar<uint32_t>(2));
  md.set("x.flag", Value::scalar(true));
  md.set("tokenizer.ggml.tokens", Value::string_array({"a", "bc", ""}));
  md.set("x.ints", Value::array<int32_t>({1, -1}));
  md.set("x.nested", Value::array_of_arrays({Value::array<uint8_t>({1})}));
  std::vector<TensorSpec> specs = {{"a", GgmlType::F32, {3, 1, 1, 1}},
                                   {"blk.0.b.weight", GgmlType::Q8_0, {32, 2, 1, 1}},
                                   {"c", GgmlType::F16, {4, 1, 1, 1}}};
  testing::TempDir dir;
  return testing::write_gguf(
      dir.file("v.gguf"), md, specs,
      {testing::random_bytes(12, 1), testing::random_bytes(68, 2), testing::random_bytes(8, 3)});
}

// The bytes parse_copy() parsed last: an exact-size heap copy, so that ASan sees any read past the end.
std::vector<uint8_t>& parsed_bytes() {
  static std::vector<uint8_t> holder;
  return holder;
}

Expected<GgufFile> parse_copy(const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t>& holder = parsed_bytes();
  holder = bytes;
  holder.shrink_to_fit();
  return GgufFile::parse(holder);
}

struct Layout {
  size_t n_tensors_at = 8, n_kv_at = 16, first_key_len_at = 24;
  size_t tensor_info_start = 0;  // first tensor info record
  size_t data_offset = 0;
};

Layout layout_of(const std::vector<uint8_t>& bytes) {
  auto f = GgufFile::parse(bytes);
  Layout l;
  l.tensor_info_start = f->tensors()[0].info_offset;
  l.data_offset = f->data_offset();
  return l;
}

template <typename T>
void put(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

TEST(GgufCorrupt, ValidFileParses) {
  auto bytes = valid_file();
  auto f = parse_copy(bytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->tensors().size(), 3u);
}

TEST(GgufCorrupt, EveryTruncationIsAnError) {
  auto bytes = valid_file();
  auto l = layout_of(bytes);
  // Cutting into the index must fail; cutting only the data section must fail too (tensors outside the file),
  // except the zero padding after the last tensor's bytes.
  const size_t last_needed = bytes.size() - (32 - 8);  // tensor 'c' holds 8 bytes, then padding
  for (size_t n = 0; n < last_needed; ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    auto f = parse_copy(cut);
    EXPECT_FALSE(f.ok()) << "truncated to " << n << " bytes (data at " << l.data_offset << ")";
  }
}

TEST(GgufCorrupt, EverySingleByteMutationOfTheIndexIsSafe) {
  // Flipping any byte of the index may or may not yield a valid file, but must never crash or read out of
  // bounds.
  auto bytes = valid_file();
  auto l = layout_of(bytes);
  for (size_t i = 0; i < l.data_offset; ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x80}, uint8_t{0x7f}, uint8_t{0x01}}) {
      auto m = bytes;
      m[i] = v;
      auto f = parse_copy(m);
      if (f.ok()) {
        // Every tensor inside the mutated buffer, its bytes readable (ASan checks the reads), as the fuzzer.
        const uint8_t* lo = parsed_bytes().data();
        const uint8_t* hi = lo + parsed_bytes().size();
        unsigned touched = 0;
        for (const TensorInfo& t : f->tensors()) {
          auto d = f->tensor_data(t);
          EXPECT_EQ(d.size(), t.n_bytes) << "byte " << i;
          ASSERT_TRUE(d.data() >= lo && d.data() + d.size() <= hi) << "byte " << i << ", tensor " << t.name;
          if (!d.empty()) touched += d.front() + d.back();
        }
        volatile unsigned sink = touched;  // keeps the reads
        (void)sink;
      }
    }
  }
}

struct Mutation {
  const char* name;
  std::function<void(std::vector<uint8_t>&, const Layout&)> apply;
  const char* expected_message;  // a fragment of the error
};

TEST(GgufCorrupt, FieldMutationsAreRejectedWithAClearMessage) {
  const std::vector<Mutation> mutations = {
      {"magic", [](auto& b, auto&) { b[0] = 'X'; }, "bad magic"},
      {"version 1", [](auto& b, auto&) { put<uint32_t>(b, 4, 1); }, "version 1"},
      {"version 4", [](auto& b, auto&) { put<uint32_t>(b, 4, 4); }, "version 4"},
      {"big endian", [](auto& b, auto&) { put<uint32_t>(b, 4, 0x03000000); }, "big-endian"},
      {"negative tensor count", [](auto& b, auto& l) { put<int64_t>(b, l.n_tensors_at, -1); },
       "tensor count"},
      {"huge tensor count", [](auto& b, auto& l) { put<int64_t>(b, l.n_tensors_at, 1ll << 40); },
       "tensor count"},
      {"huge kv count", [](auto& b, auto& l) { put<int64_t>(b, l.n_kv_at, 1ll << 50); }, "metadata count"},
      {"key length past end", [](auto& b, auto& l) { put<uint64_t>(b, l.first_key_len_at, 1ull << 20); },
       "truncated"},
      {"key length 2^31", [](auto& b, auto& l) { put<uint64_t>(b, l.first_key_len_at, 1ull << 31); },
       "length"},
      {"empty key", [](auto& b, auto& l) { put<uint64_t>(b, l.first_key_len_at, 0); }, "empty metadata key"},
      {"value type", [](auto& b, auto& l) { put<uint32_t>(b, l.first_key_len_at + 8 + 20, 13); },
       "value type"},
      {"tensor n_dims", [](auto& b, auto& l) { put<uint32_t>(b, l.tensor_info_start + 8 + 1, 5); }, "n_dims"},
      {"negative dim", [](auto& b, auto& l) { put<int64_t>(b, l.tensor_info_start + 8 + 1 + 4, -3); },
       "negative"},
      {"tensor type", [](auto& b, auto& l) { put<int32_t>(b, l.tensor_info_start + 8 + 1 + 4 + 8, 4); },
       "tensor type"},
      {"tensor type 99", [](auto& b, auto& l) { put<int32_t>(b, l.tensor_info_start + 8 + 1 + 4 + 8, 99); },
       "type"},
      {"block size", [](auto& b, auto& l) { put<int32_t>(b, l.tensor_info_start + 8 + 1 + 4 + 8, 8); },
       "block size"},
      {"misaligned offset",
       [](auto& b, auto& l) { put<uint64_t>(b, l.tensor_info_start + 8 + 1 + 4 + 8 + 4, 16); }, "alignment"},
      {"offset past end",
       [](auto& b, auto& l) { put<uint64_t>(b, l.tensor_info_start + 8 + 1 + 4 + 8 + 4, 1ull << 40); },
       "outside"},
      {"offset overflow",
       [](auto& b, auto& l) { put<uint64_t>(b, l.tensor_info_start + 8 + 1 + 4 + 8 + 4, ~0ull << 5); },
       "outside"},
      {"dims overflow",
       [](auto& b, auto& l) {
         // tensor 'a': make it 4-D would shift fields; instead grow ne[0] so the byte size is huge.
         put<int64_t>(b, l.tensor_info_start + 8 + 1 + 4, 1ll << 62);
       },
       "overflows"},
  };
  auto bytes = valid_file();
  auto l = layout_of(bytes);
  for (const auto& m : mutations) {
    auto b = bytes;
    m.apply(b, l);
    auto f = parse_copy(b);
    ASSERT_FALSE(f.ok()) << m.name;
    EXPECT_NE(f.status().message().find(m.expected_message), std::string::npos)
        << m.name << ": " << f.status().message();
  }
}

TEST(GgufCorrupt, DuplicateKeysAndTensorNamesAreRejected) {
  Metadata md;
  md.set("k.one", Value::scalar<uint32_t>(1));
  md.set("k.two", Value::scalar<uint32_t>(2));
  testing::TempDir dir;
  auto bytes = testing::write_gguf(dir.file("d.gguf"), md,
                                   {{"t1", GgmlType::F32, {1, 1, 1, 1}}, {"t2", GgmlType::F32, {1, 1, 1, 1}}},
                                   {testing::random_bytes(4, 1), testing::random_bytes(4, 2)});
  auto key_dup = bytes;
  auto pos = std::search(key_dup.begin(), key_dup.end(), std::begin("k.two"), std::end("k.two") - 1);
  std::memcpy(&*pos, "k.one", 5);
  auto f1 = parse_copy(key_dup);
  ASSERT_FALSE(f1.ok());
  EXPECT_NE(f1.status().message().find("duplicate metadata key 'k.one'"), std::string::npos);

  auto name_dup = bytes;
  auto tpos = std::search(name_dup.begin(), name_dup.end(), std::begin("t2"), std::end("t2") - 1);
  std::memcpy(&*tpos, "t1", 2);
  auto f2 = parse_copy(name_dup);
  ASSERT_FALSE(f2.ok());
  EXPECT_NE(f2.status().message().find("duplicate tensor name"), std::string::npos);
}

TEST(GgufCorrupt, OverlappingTensorsAreRejected) {
  Metadata md;
  testing::TempDir dir;
  auto bytes = testing::write_gguf(
      dir.file("o.gguf"), md, {{"t1", GgmlType::F32, {16, 1, 1, 1}}, {"t2", GgmlType::F32, {16, 1, 1, 1}}},
      {testing::random_bytes(64, 1), testing::random_bytes(64, 2)});
  auto f = GgufFile::parse(bytes);
  ASSERT_TRUE(f.ok());
  // Point t2 at offset 32: aligned and inside the file, but inside t1's 64 bytes.
  auto b = bytes;
  put<uint64_t>(b, f->tensors()[1].info_offset + 8 + 2 + 4 + 8 + 4, 32);
  auto g = parse_copy(b);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("overlaps"), std::string::npos) << g.status().message();
}

TEST(GgufCorrupt, BadAlignmentKeyIsRejected) {
  // A valid one-key file (header 24 bytes, key "general.alignment" 8 + 17 bytes) with its value swapped out.
  Metadata ok;
  ok.set("general.alignment", Value::scalar<uint32_t>(32));
  const auto valid = *encode_gguf_index(ok, {});
  for (const Value& v : {Value::scalar<uint32_t>(0), Value::scalar<uint32_t>(48), Value::scalar<uint64_t>(32),
                         Value::scalar<uint32_t>(1u << 30)}) {
    std::vector<uint8_t> patched(valid.begin(), valid.begin() + 24 + 8 + 17);
    patched.insert(patched.end(), {static_cast<uint8_t>(v.type()), 0, 0, 0});
    v.encode(patched);
    auto f = parse_copy(patched);
    ASSERT_FALSE(f.ok()) << v.to_display();
    EXPECT_NE(f.status().message().find("general.alignment"), std::string::npos) << f.status().message();
  }
}

TEST(GgufCorrupt, OpenNamesTheFile) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("junk.gguf"), {'n', 'o', 'p', 'e', 0, 0, 0, 0});
  auto f = GgufFile::open(dir.file("junk.gguf"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("junk.gguf"), std::string::npos);
  EXPECT_NE(f.status().message().find("not a GGUF file"), std::string::npos);
  EXPECT_FALSE(GgufFile::open(dir.file("missing.gguf")).ok());
  EXPECT_FALSE(GgufFile::open(dir.path().string()).ok());
}

}  // namespace
}  // namespace mtp
