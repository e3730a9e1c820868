// Type decisions shared by `mtp synth` and `mtp quantize`: llama.cpp's shape fallback and the file type
// (general.file_type) that names a weight type.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace mtp::surgery {

// llama.cpp's tensor_type_fallback (docs/formats.md section 4.4): the type used when rows of `ne0`
// elements do not divide into blocks of `wanted`. F16 when even the fallback does not divide.
GgmlType llama_type_fallback(GgmlType wanted, int64_t ne0);

// llama_type_fallback, then, if the result is a type mtp.cpp cannot encode (none of the fallbacks today: they
// are IQ4_NL, Q4_0, Q5_0, Q5_1, Q8_0 and F16), the nearest one it can: Q8_0 when the row divides into
// 32-element blocks, else F16.
GgmlType computable_fallback(GgmlType wanted, int64_t ne0);

// The llama_ftype for a file whose weights are mostly `type` (Q4_K -> Q4_K_M, Q5_K -> Q5_K_M, as
// llama-quantize names them).
uint32_t file_type_for(GgmlType type);

}  // namespace mtp::surgery
