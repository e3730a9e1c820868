// What `mtp inspect` tells about a GGUF file, computed once from its index (no tensor data is read), then
// printed as text or JSON by cmd_inspect.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"

namespace mtp::surgery {

struct TypeUsage {
  int64_t count = 0;
  uint64_t bytes = 0;
};

// Where the bytes of a file go. Blocks blk.N with N < trunk layers are the body; blk.N at or past it are the
// MTP block(s); every tensor outside the blocks (token_embd, output, output_norm, ...) counts as
// embeddings+output; the index is the header, metadata and tensor infos (with the padding after them).
struct SizeSplit {
  uint64_t body = 0;
  uint64_t mtp = 0;
  uint64_t embeddings_output = 0;
  uint64_t index = 0;
  uint64_t padding = 0;  // alignment padding between tensors
};

struct InspectReport {
  std::string path;
  uint64_t file_size = 0;
  uint32_t version = 0;
  uint64_t alignment = 0;
  size_t n_kv = 0;
  size_t n_tensors = 0;
  bool canonical_layout = true;

  std::string architecture;  // "" if absent
  std::string name;          // general.name
  std::optional<int64_t> block_count;
  std::optional<int64_t> nextn_predict_layers;
  std::optional<int64_t> trunk_layers;     // block_count - nextn_predict_layers
  std::optional<int64_t> mtp_block;        // index of the first MTP block, when one is present
  std::vector<std::string> mtp_tensors;    // every tensor of the MTP block(s), in file order
  std::vector<std::string> nextn_tensors;  // the blk.N.nextn.* subset, short names ("eh_proj", ...)
  bool head_only = false;                  // written by `mtp extract-head`
  std::optional<uint32_t> file_type;
  std::optional<uint32_t> quantization_version;

  std::string tokenizer_model;
  std::string tokenizer_pre;
  std::optional<uint64_t> n_tokens;
  std::optional<uint64_t> n_merges;

  std::map<std::string, TypeUsage> types;  // by type name
  // Whether `mtp run` can compute this file's tensors: the architecture is qwen35moe and every tensor's type
  // is one the quant library decodes. Otherwise `not_runnable` says why in one line (the types it lacks, with
  // their counts, and the first such tensor).
  bool runnable = false;
  std::string not_runnable;
  SizeSplit sizes;
  std::vector<std::string> warnings;  // inconsistencies worth a person's attention
};

InspectReport build_inspect_report(const GgufFile& file);

// Parses "blk.<N>." at the start of a tensor name; nullopt for tensors outside the blocks.
std::optional<int64_t> block_index(const std::string& tensor_name);

}  // namespace mtp::surgery
