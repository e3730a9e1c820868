#include "surgery/inspect_report.h"

#include <charconv>

#include "model/qwen35moe_config.h"

namespace mtp::surgery {
namespace {

std::optional<int64_t> optional_integer(const Metadata& md, const std::string& key) {
  auto v = md.get_integer(key);
  if (!v.ok()) return std::nullopt;
  return *v;
}

std::string optional_string(const Metadata& md, const std::string& key) {
  auto v = md.get_string(key);
  return v.ok() ? *v : std::string();
}

std::optional<uint64_t> array_size(const Metadata& md, const std::string& key) {
  const Value* v = md.find(key);
  if (v == nullptr || !v->is_array()) return std::nullopt;
  return v->size();
}

}  // namespace

std::optional<int64_t> block_index(const std::string& tensor_name) {
  static constexpr std::string_view kPrefix = "blk.";
  if (tensor_name.compare(0, kPrefix.size(), kPrefix) != 0) return std::nullopt;
  const char* begin = tensor_name.data() + kPrefix.size();
  const char* end = tensor_name.data() + tensor_name.size();
  int64_t n = 0;
  auto [p, ec] = std::from_chars(begin, end, n);
  if (ec != std::errc() || p == begin || p == end || *p != '.' || n < 0) return std::nullopt;
  return n;
}

InspectReport build_inspect_report(const GgufFile& file) {
  const Metadata& md = file.metadata();
  InspectReport r;
  r.path = file.path();
  r.file_size = file.file_size();
  r.version = file.version();
  r.alignment = file.alignment();
  r.n_kv = md.size();
  r.n_tensors = file.tensors().size();
  r.canonical_layout = file.canonical_layout();
  r.architecture = file.architecture();
  r.name = optional_string(md, "general.name");
  r.head_only = md.contains("mtp.head.format_version");

  const std::string prefix = r.architecture + ".";
  if (!r.architecture.empty()) {
    r.block_count = optional_integer(md, prefix + "block_count");
    r.nextn_predict_layers = optional_integer(md, prefix + "nextn_predict_layers");
  }
  if (r.block_count) r.trunk_layers = *r.block_count - r.nextn_predict_layers.value_or(0);
  if (auto ft = optional_integer(md, "general.file_type"); ft && *ft >= 0)
    r.file_type = static_cast<uint32_t>(*ft);
  if (auto qv = optional_integer(md, "general.quantization_version"); qv && *qv >= 0) {
    r.quantization_version = static_cast<uint32_t>(*qv);
  }
  r.tokenizer_model = optional_string(md, "tokenizer.ggml.model");
  r.tokenizer_pre = optional_string(md, "tokenizer.ggml.pre");
  r.n_tokens = array_size(md, "tokenizer.ggml.tokens");
  r.n_merges = array_size(md, "tokenizer.ggml.merges");

  // Tensors named blk.N.nextn.* mark an MTP block even when the metadata disagrees.
  std::optional<int64_t> first_nextn_block;
  for (const TensorInfo& t : file.tensors()) {
    auto b = block_index(t.name);
    if (b && t.name.find(".nextn.") != std::string::npos) {
      if (!first_nextn_block || *b < *first_nextn_block) first_nextn_block = b;
    }
  }
  std::optional<int64_t> mtp_start;
  if (r.trunk_layers && r.nextn_predict_layers.value_or(0) > 0)
    mtp_start = r.trunk_layers;
  else if (first_nextn_block)
    mtp_start = first_nextn_block;

  std::map<std::string, int64_t> lacking;  // types mtp.cpp cannot compute, with their counts
  std::string first_lacking;
  for (const TensorInfo& t : file.tensors()) {
    if (!type_traits(t.type).computable) {
      ++lacking[std::string(type_name(t.type))];
      if (first_lacking.empty()) first_lacking = t.name;
    }
    TypeUsage& u = r.types[std::string(type_name(t.type))];
    ++u.count;
    u.bytes += t.n_bytes;
    r.sizes.padding += (t.n_bytes + r.alignment - 1) / r.alignment * r.alignment - t.n_bytes;
    auto b = block_index(t.name);
    if (!b) {
      r.sizes.embeddings_output += t.n_bytes;
    } else if (mtp_start && *b >= *mtp_start) {
      r.sizes.mtp += t.n_bytes;
      r.mtp_tensors.push_back(t.name);
      std::string marker = str_cat("blk.", *b, ".nextn.");
      if (t.name.compare(0, marker.size(), marker) == 0) {
        std::string short_name = t.name.substr(marker.size());
        if (auto dot = short_name.rfind(".weight");
            dot != std::string::npos && dot + 7 == short_name.size()) {
          short_name.resize(dot);
        }
        r.nextn_tensors.push_back(short_name);
      }
    } else {
      r.sizes.body += t.n_bytes;
    }
  }
  if (r.architecture != kQwen35MoeArch) {
    r.not_runnable = str_cat("architecture ", r.architecture.empty() ? "missing" : r.architecture,
                             " (mtp.cpp runs qwen35moe)");
  } else if (!lacking.empty()) {
    std::string list;
    for (const auto& [type, n] : lacking)
      list += str_cat(list.empty() ? "" : ", ", type, " (", n, n == 1 ? " tensor)" : " tensors)");
    r.not_runnable = str_cat("types not implemented here: ", list, "; the first is ", first_lacking);
  }
  r.runnable = r.not_runnable.empty();
  r.sizes.index = file.data_offset();
  if (!r.mtp_tensors.empty()) r.mtp_block = mtp_start;

  if (r.nextn_predict_layers.value_or(0) > 0 && r.nextn_tensors.empty()) {
    r.warnings.push_back(str_cat("nextn_predict_layers is ", *r.nextn_predict_layers, " but no blk.",
                                 mtp_start.value_or(-1), ".nextn.* tensors are present"));
  }
  if (first_nextn_block && r.nextn_predict_layers.value_or(0) == 0) {
    r.warnings.push_back(str_cat("blk.", *first_nextn_block,
                                 ".nextn.* tensors are present but nextn_predict_layers is 0 or missing"));
  }
  if (first_nextn_block && r.trunk_layers && r.nextn_predict_layers.value_or(0) > 0 &&
      *first_nextn_block != *r.trunk_layers) {
    r.warnings.push_back(str_cat("nextn tensors are in blk.", *first_nextn_block,
                                 " but the MTP block should be blk.", *r.trunk_layers,
                                 " (block_count - nextn_predict_layers)"));
  }
  if (!r.canonical_layout) {
    r.warnings.push_back("tensor offsets are not the packed running sum that llama.cpp requires");
  }
  return r;
}

}  // namespace mtp::surgery
