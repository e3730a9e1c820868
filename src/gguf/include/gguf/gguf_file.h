// A GGUF v2/v3 file opened for reading (docs/formats.md section 2). Opening maps the file and validates
// the whole index (header, metadata, tensor infos, layout) without touching tensor data; tensor data is then
// viewed in place, zero-copy. Every check of section 2.6 is applied, so a file that opens is safe to index.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "gguf/metadata.h"
#include "quant/types.h"

namespace mtp {

inline constexpr uint64_t kGgufDefaultAlignment = 32;
// Larger alignments are refused: files in the wild use 32 to 4096, and a hostile value would make every
// tensor's padding (and a writer's index) as large as the alignment.
inline constexpr uint64_t kGgufMaxAlignment = uint64_t{1} << 20;
inline constexpr size_t kGgufMaxNameLength = 63;  // ggml's GGML_MAX_NAME (64) includes the NUL
inline constexpr int kGgufMaxDims = 4;

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  uint32_t n_dims = 1;                    // as stored
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // element counts, ne[0] fastest; unused dims are 1
  uint64_t offset = 0;                    // relative to the start of the data section
  uint64_t n_bytes = 0;
  uint64_t info_offset = 0;  // where this tensor's info record starts in the file (for messages)

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  // "[2048, 248320]": the dims up to the highest one that is not 1 (ggml's n_dims rule).
  std::string shape_string() const;
};

class GgufFile {
 public:
  GgufFile() = default;
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  // Maps and validates `path`. Errors name the file, the problem and the byte offset.
  static Expected<GgufFile> open(const std::string& path);
  // Validates bytes owned by the caller, which must outlive the result (tests, fuzzing).
  static Expected<GgufFile> parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  const std::string& path() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }
  // True when the offsets are exactly the running sum of padded sizes, which ggml requires to load a file.
  bool canonical_layout() const { return canonical_layout_; }

  const Metadata& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  std::span<const uint8_t> tensor_data(const TensorInfo& info) const {
    return bytes_.subspan(data_offset_ + info.offset, info.n_bytes);
  }

  // Drops bytes [begin, begin + length) of a tensor's data from this process's resident set once they have
  // been streamed (see MappedFile::release); a no-op for files parsed from caller memory.
  void release_tensor_pages(const TensorInfo& info, uint64_t begin, uint64_t length) const {
    file_.release(data_offset_ + info.offset + begin, length);
  }

  // The same for any bytes of this file's tensor data given by address (ignored outside the mapping).
  void release_pages(const uint8_t* p, uint64_t length) const {
    if (file_.data() != nullptr && p >= file_.data() && p < file_.data() + file_.size())
      file_.release(static_cast<uint64_t>(p - file_.data()), length);
  }

  // general.architecture, or "" when absent or not a string.
  std::string architecture() const;

 private:
  friend class GgufParser;

  MappedFile file_;
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  bool canonical_layout_ = true;
  Metadata metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// ggml's n_dims rule: the index of the highest dimension with ne > 1, plus one, and at least 1. Unlike ggml,
// a zero dimension also counts, so that an empty tensor keeps its shape (and its zero size) when written.
uint32_t effective_n_dims(const std::array<int64_t, 4>& ne);

}  // namespace mtp
