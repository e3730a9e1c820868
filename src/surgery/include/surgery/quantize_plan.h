// `mtp quantize` decides each tensor's output type with llama-quantize's policy (llama.cpp
// src/llama-quant.cpp, as summarized in docs/formats.md section 4), so that its files match what
// llama-quantize would write for the same target, plus two mtp.cpp options: `--keep GLOB` (copy matching
// tensors unchanged) and any input type (requantizing goes through F32).
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "quant/types.h"

namespace mtp::surgery {

struct QuantizeTarget {
  std::string name;        // as the user writes it: "IQ4_XS", "Q4_K", ...
  uint32_t file_type = 0;  // llama_ftype written to general.file_type
  GgmlType default_type = GgmlType::F32;
};

// The targets `mtp quantize --type` accepts: Q8_0, Q4_0, Q3_K (= Q3_K_M), Q3_K_S, Q3_K_M, Q3_K_L, Q4_K
// (= Q4_K_M), Q4_K_S, Q4_K_M, Q5_K (= Q5_K_M),
// Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, MXFP4_MOE, F16, BF16, F32 (case-insensitive), or a llama_ftype
// number.
Expected<QuantizeTarget> parse_quantize_target(const std::string& text);

struct TensorTypeOverride {
  std::string pattern;  // as given (lowercased, like llama-quantize)
  std::regex regex;     // ECMAScript, matched with regex_search
  GgmlType type;
};

struct QuantizeOptions {
  QuantizeTarget target;
  std::vector<std::string> keep;                 // globs (fnmatch): tensors copied unchanged
  std::vector<TensorTypeOverride> tensor_types;  // --tensor-type PATTERN=TYPE, first match wins
  std::optional<GgmlType> output_type;           // --output-tensor-type
  std::optional<GgmlType> token_embedding_type;  // --token-embedding-type
  bool pure = false;                             // --pure: no mixture rules
  bool leave_output = false;                     // --leave-output-tensor
  bool has_imatrix = false;
};

// Parses "PATTERN=TYPE" as llama-quantize does (the pattern is lowercased; the first '=' splits).
Expected<TensorTypeOverride> parse_tensor_type_override(const std::string& text);

struct TensorPlan {
  const TensorInfo* tensor = nullptr;
  GgmlType to = GgmlType::F32;
  std::string reason;  // why this type: "kept (--keep)", "1-D", "attn_v n_gqa>=4", "fallback from q4_K", ...
  uint64_t out_bytes = 0;
};

struct QuantizePlan {
  std::vector<TensorPlan> tensors;  // in output order (llama.cpp's: non-block tensors, then by block number)
  uint64_t in_bytes = 0;
  uint64_t out_bytes = 0;
};

// Why llama-quantize never converts this tensor ("1-D, kept", "norm, kept", ...), or nullptr when it may.
const char* why_not_quantizable(const TensorInfo& tensor, bool leave_output = false);

// Orders tensor names the way llama.cpp's weights map does: parse "blk.N." (-1 when absent), sort by N, then
// by byte-wise name.
// llama-quantize's tensor_requires_imatrix: whether a tensor planned as `to` in a file of `file_type` must
// have importance weights. Of the types mtp.cpp writes, only Q2_K in a Q2_K_S file (not the token embedding
// or the output matrix) does.
bool requires_imatrix(const std::string& name, GgmlType to, uint32_t file_type);

bool llama_tensor_order_less(const std::string& a, const std::string& b);

Expected<QuantizePlan> plan_quantization(const GgufFile& input, const QuantizeOptions& options);

}  // namespace mtp::surgery
