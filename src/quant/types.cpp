#include "quant/types.h"

#include <array>
#include <cctype>

#include "base/check.h"

namespace mtp {
namespace {

struct Entry {
  int32_t id;
  TypeTraits traits;
};

// Block sizes and byte sizes as ggml defines them (docs/formats.md section 2.10).
constexpr Entry kEntries[] = {
    {0, {"f32", 1, 4, false, true}},         {1, {"f16", 1, 2, false, true}},
    {2, {"q4_0", 32, 18, true, true}},       {3, {"q4_1", 32, 20, true, true}},
    {6, {"q5_0", 32, 22, true, true}},       {7, {"q5_1", 32, 24, true, true}},
    {8, {"q8_0", 32, 34, true, true}},       {9, {"q8_1", 32, 36, true, false}},
    {10, {"q2_K", 256, 84, true, true}},     {11, {"q3_K", 256, 110, true, true}},
    {12, {"q4_K", 256, 144, true, true}},    {13, {"q5_K", 256, 176, true, true}},
    {14, {"q6_K", 256, 210, true, true}},    {15, {"q8_K", 256, 292, true, true}},
    {16, {"iq2_xxs", 256, 66, true, false}}, {17, {"iq2_xs", 256, 74, true, false}},
    {18, {"iq3_xxs", 256, 98, true, false}}, {19, {"iq1_s", 256, 50, true, false}},
    {20, {"iq4_nl", 32, 18, true, true}},    {21, {"iq3_s", 256, 110, true, false}},
    {22, {"iq2_s", 256, 82, true, false}},   {23, {"iq4_xs", 256, 136, true, true}},
    {24, {"i8", 1, 1, false, false}},        {25, {"i16", 1, 2, false, false}},
    {26, {"i32", 1, 4, false, false}},       {27, {"i64", 1, 8, false, false}},
    {28, {"f64", 1, 8, false, false}},       {29, {"iq1_m", 256, 56, true, false}},
    {30, {"bf16", 1, 2, false, true}},       {34, {"tq1_0", 256, 54, true, false}},
    {35, {"tq2_0", 256, 66, true, false}},   {39, {"mxfp4", 32, 17, true, true}},
    {40, {"nvfp4", 64, 36, true, false}},    {41, {"q1_0", 128, 18, true, false}},
    {42, {"q2_0", 64, 18, true, false}},
};

const std::array<std::optional<TypeTraits>, kGgmlTypeCount>& table() {
  static const auto t = [] {
    std::array<std::optional<TypeTraits>, kGgmlTypeCount> a{};
    for (const Entry& e : kEntries) a[e.id] = e.traits;
    return a;
  }();
  return t;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

}  // namespace

std::optional<TypeTraits> type_traits(int32_t id) {
  if (id < 0 || id >= kGgmlTypeCount) return std::nullopt;
  return table()[id];
}

const TypeTraits& type_traits(GgmlType type) {
  const auto& entry = table()[static_cast<int32_t>(type)];
  MTP_CHECK(entry.has_value(), "GgmlType ", static_cast<int32_t>(type), " has no traits");
  return *entry;
}

std::optional<GgmlType> type_from_name(std::string_view name) {
  for (const Entry& e : kEntries) {
    if (iequals(e.traits.name, name)) return static_cast<GgmlType>(e.id);
  }
  return std::nullopt;
}

int64_t row_size(GgmlType type, int64_t n_elements) {
  const TypeTraits& t = type_traits(type);
  MTP_CHECK(n_elements % t.block_size == 0, n_elements, " elements is not a multiple of the ", t.name,
            " block size ", t.block_size);
  return n_elements / t.block_size * t.type_size;
}

std::string_view file_type_name(uint32_t file_type) {
  static constexpr std::string_view kNames[] = {
      "ALL_F32",
      "MOSTLY_F16",
      "MOSTLY_Q4_0",
      "MOSTLY_Q4_1",
      "",
      "",
      "",
      "MOSTLY_Q8_0",
      "MOSTLY_Q5_0",
      "MOSTLY_Q5_1",
      "MOSTLY_Q2_K",
      "MOSTLY_Q3_K_S",
      "MOSTLY_Q3_K_M",
      "MOSTLY_Q3_K_L",
      "MOSTLY_Q4_K_S",
      "MOSTLY_Q4_K_M",
      "MOSTLY_Q5_K_S",
      "MOSTLY_Q5_K_M",
      "MOSTLY_Q6_K",
      "MOSTLY_IQ2_XXS",
      "MOSTLY_IQ2_XS",
      "MOSTLY_Q2_K_S",
      "MOSTLY_IQ3_XS",
      "MOSTLY_IQ3_XXS",
      "MOSTLY_IQ1_S",
      "MOSTLY_IQ4_NL",
      "MOSTLY_IQ3_S",
      "MOSTLY_IQ3_M",
      "MOSTLY_IQ2_S",
      "MOSTLY_IQ2_M",
      "MOSTLY_IQ4_XS",
      "MOSTLY_IQ1_M",
      "MOSTLY_BF16",
      "",
      "",
      "",
      "MOSTLY_TQ1_0",
      "MOSTLY_TQ2_0",
      "MOSTLY_MXFP4_MOE",
  };
  if (file_type >= std::size(kNames)) return {};
  return kNames[file_type];
}

}  // namespace mtp
