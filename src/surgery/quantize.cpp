#include "surgery/quantize.h"

#include <filesystem>

#include "base/log.h"
#include "base/timer.h"
#include "surgery/tensor_stream.h"

namespace mtp::surgery {

Metadata quantized_metadata(const GgufFile& input, const QuantizeOptions& options, const Imatrix* imatrix,
                            const std::string& imatrix_path) {
  Metadata md = input.metadata();
  md.set_last("general.quantization_version", Value::scalar<uint32_t>(2));
  md.set_last("general.file_type", Value::scalar<uint32_t>(options.target.file_type));
  md.erase("split.no");
  md.erase("split.count");
  md.erase("split.tensors.count");
  if (imatrix != nullptr) {
    // llama-quantize passes the strings through 128-byte override buffers: at most 127 bytes survive.
    md.set_last("quantize.imatrix.file", Value::string(imatrix_path.substr(0, 127)));
    if (!imatrix->dataset.empty()) {
      md.set_last("quantize.imatrix.dataset", Value::string(imatrix->dataset.substr(0, 127)));
    }
    md.set_last("quantize.imatrix.entries_count",
                Value::scalar(static_cast<uint32_t>(imatrix->weights.size())));
    if (imatrix->chunk_count > 0) {
      md.set_last("quantize.imatrix.chunks_count",
                  Value::scalar(static_cast<uint32_t>(imatrix->chunk_count)));
    }
  }
  return md;
}

Expected<QuantizeResult> quantize_file(const std::string& input_path, const std::string& output_path,
                                       const QuantizeOptions& options, const Imatrix* imatrix,
                                       const std::string& imatrix_path, ThreadPool& pool) {
  std::error_code ec;
  if (std::filesystem::equivalent(input_path, output_path, ec)) {
    return invalid_argument("the output ", output_path, " is the input file; write to another path");
  }
  MTP_ASSIGN_OR_RETURN(GgufFile input, GgufFile::open(input_path));
  QuantizeResult result;
  MTP_ASSIGN_OR_RETURN(result.plan, plan_quantization(input, options));

  std::vector<TensorSpec> specs;
  for (const TensorPlan& p : result.plan.tensors) specs.push_back({p.tensor->name, p.to, p.tensor->ne});
  Metadata md = quantized_metadata(input, options, imatrix, imatrix_path);
  MTP_ASSIGN_OR_RETURN(GgufWriter writer, GgufWriter::create(output_path, md, specs));

  Timer timer;
  Progress progress("quantize", result.plan.in_bytes);
  for (const TensorPlan& p : result.plan.tensors) {
    const float* weights = nullptr;
    if (imatrix != nullptr && p.to != p.tensor->type) {
      auto it = imatrix->weights.find(p.tensor->name);
      if (it != imatrix->weights.end()) {
        const int64_t n_mat = p.tensor->ne[2] * p.tensor->ne[3];
        if (static_cast<int64_t>(it->second.size()) != p.tensor->ne[0] * n_mat) {
          return invalid_argument("imatrix entry '", p.tensor->name, "' has ", it->second.size(),
                                  " values, expected ", p.tensor->ne[0] * n_mat);
        }
        weights = it->second.data();
      }
    }
    if (weights == nullptr && p.to != p.tensor->type &&
        requires_imatrix(p.tensor->name, p.to, options.target.file_type)) {
      return invalid_argument("tensor '", p.tensor->name,
                              "': the importance matrix has no entry for it, and ", options.target.name,
                              " needs one for its ", type_name(p.to), " tensors");
    }
    MTP_RETURN_IF_ERROR(stream_tensor(writer, input, *p.tensor, p.to, pool, weights, &progress));
  }
  MTP_RETURN_IF_ERROR(writer.finish());
  progress.finish();
  result.seconds = timer.seconds();
  return result;
}

}  // namespace mtp::surgery
