// ggml tensor type ids and their storage traits (docs/formats.md section 2.10). Every id a GGUF may carry
// is described here, so that any file can be inspected and its tensors copied, even those of types that
// mtp.cpp cannot compute with.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace mtp {

// Values are the on-disk ggml_type numbers.
enum class GgmlType : int32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
};

inline constexpr int32_t kGgmlTypeCount = 43;

struct TypeTraits {
  std::string_view name;      // as ggml prints it: "q4_K", "iq4_xs", "f32"
  int64_t block_size = 0;     // elements per block; 0 for removed ids
  int64_t type_size = 0;      // bytes per block
  bool is_quantized = false;  // block-quantized (as opposed to plain floats or integers)
  bool computable = false;    // mtp.cpp can quantize and dequantize it (quant library)
};

// Traits for a raw on-disk id; nullopt for ids that are out of range or removed (block size 0 in ggml).
std::optional<TypeTraits> type_traits(int32_t id);
const TypeTraits& type_traits(GgmlType type);

inline std::string_view type_name(GgmlType type) {
  return type_traits(type).name;
}

// Parses a type name, case-insensitively ("Q6_K", "q6_k", "iq4_xs", "F16").
std::optional<GgmlType> type_from_name(std::string_view name);

// Bytes of one row of `n_elements`; the caller has checked that n_elements is a multiple of the block size.
int64_t row_size(GgmlType type, int64_t n_elements);

// llama_ftype, the value of general.file_type (docs/formats.md section 2.9).
// Returns e.g. "MOSTLY_IQ4_XS" for 30, or an empty view for unknown values.
std::string_view file_type_name(uint32_t file_type);

}  // namespace mtp
