// `mtp quantize`: rewrite a GGUF with each tensor's type chosen by plan_quantization (quantize_plan.h),
// streaming one tensor at a time (peak memory: a few 16 MB chunks plus the index), all cores, temp + rename.
#pragma once

#include <string>

#include "base/thread_pool.h"
#include "surgery/imatrix.h"
#include "surgery/quantize_plan.h"

namespace mtp::surgery {

struct QuantizeResult {
  QuantizePlan plan;
  double seconds = 0;
};

// The output's metadata: the input's keys in order, then general.quantization_version and general.file_type
// moved to the end (as llama-quantize does), split keys removed, imatrix provenance added when one is used
// (its path, first dataset, entry count and chunk count, as llama-quantize writes them).
Metadata quantized_metadata(const GgufFile& input, const QuantizeOptions& options, const Imatrix* imatrix,
                            const std::string& imatrix_path);

Expected<QuantizeResult> quantize_file(const std::string& input_path, const std::string& output_path,
                                       const QuantizeOptions& options, const Imatrix* imatrix,
                                       const std::string& imatrix_path, ThreadPool& pool);

}  // namespace mtp::surgery
