// The importance-matrix reader (tools/imatrix.h) on files the fuzzer (fuzz/fuzz_imatrix.cpp) exercises.
#include "surgery/imatrix.h"

#include <gtest/gtest.h>

#include <cstring>

#include "../gguf/test_util.h"
#include "gguf/gguf_file.h"

namespace mtp::surgery {
namespace {

using testing::TempDir;

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A GGUF imatrix for one 2-matrix tensor: sums [4, 2] and counts [1, 2] (the second matrix was never hit).
std::string write_imatrix(const TempDir& dir, const std::string& name, uint32_t alignment,
                          const std::string& padding_key) {
  Metadata md;
  md.set("general.alignment", Value::scalar(alignment));
  md.set(padding_key, Value::scalar(uint32_t{0}));
  const std::string path = dir.file(name);
  testing::write_gguf(path, md,
                      {{"a.in_sum2", GgmlType::F32, {4, 2, 1, 1}}, {"a.counts", GgmlType::F32, {1, 2, 1, 1}}},
                      {f32_bytes({2, 4, 6, 8, 5, 6, 7, 8}), f32_bytes({2, 0})});
  return path;
}

// Alignment 1 lets tensor data start at any byte; the counts were read as a float* and were misaligned
// (UBSan: load of misaligned address) in three of four layouts. Each layout must load the same weights.
TEST(Imatrix, GgufWithByteAlignedDataLoads) {
  TempDir dir;
  bool misaligned = false;
  for (const std::string key : {"k", "kk", "kkk", "kkkk"}) {
    const std::string path = write_imatrix(dir, key + ".gguf", 1, key);
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().message();
    misaligned |= (file->data_offset() + file->tensors()[1].offset) % alignof(float) != 0;
    auto m = load_imatrix(path);
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_EQ(m->weights.count("a"), 1u);
    EXPECT_EQ(m->weights.at("a"), (std::vector<float>{1, 2, 3, 4, 1, 1, 1, 1}));
  }
  EXPECT_TRUE(misaligned) << "no layout put the counts off a 4-byte boundary; the test checks nothing";
}

TEST(Imatrix, LegacyTruncatedValuesAreAnError) {
  TempDir dir;
  // One entry "w", ncall 1, nval 4, but only two values present.
  std::vector<uint8_t> bytes = {1, 0, 0, 0, 1, 0, 0, 0, 'w', 1, 0, 0, 0, 4, 0, 0, 0};
  const std::vector<uint8_t> two = f32_bytes({1, 2});
  bytes.insert(bytes.end(), two.begin(), two.end());
  testing::write_bytes(dir.file("short.dat"), bytes);
  auto m = load_imatrix(dir.file("short.dat"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("bad value count 4"), std::string::npos) << m.status().message();
}

// The legacy trailer (chunk count, dataset name) as llama.cpp reads it: the count alone, a name up to its
// first NUL, and nothing at all are each accepted.
TEST(Imatrix, LegacyTrailerGivesChunksAndDataset) {
  TempDir dir;
  std::vector<uint8_t> entry = {1, 0, 0, 0, 1, 0, 0, 0, 'w', 2, 0, 0, 0, 1, 0, 0, 0};
  const std::vector<uint8_t> value = f32_bytes({6});
  entry.insert(entry.end(), value.begin(), value.end());
  struct Case {
    std::vector<uint8_t> trailer;
    int64_t chunks;
    std::string dataset;
  };
  const Case kCases[] = {{{}, 0, ""},
                         {{7, 0, 0, 0}, 7, ""},
                         {{9, 1, 0, 0, 5, 0, 0, 0, 'w', 'i', 'k', 'i', '!'}, 265, "wiki!"},
                         {{3, 0, 0, 0, 4, 0, 0, 0, 'a', 0, 'b', 'c'}, 3, "a"}};
  for (const Case& c : kCases) {
    std::vector<uint8_t> bytes = entry;
    bytes.insert(bytes.end(), c.trailer.begin(), c.trailer.end());
    testing::write_bytes(dir.file("t.dat"), bytes);
    auto m = load_imatrix(dir.file("t.dat"));
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_EQ(m->weights.at("w"), std::vector<float>{3});  // divided by ncall 2
    EXPECT_EQ(m->chunk_count, c.chunks);
    EXPECT_EQ(m->dataset, c.dataset);
  }
}

}  // namespace
}  // namespace mtp::surgery
