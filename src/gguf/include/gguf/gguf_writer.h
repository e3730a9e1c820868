// Streaming GGUF v3 writer (docs/formats.md section 2.7). The whole index (metadata and tensor infos) is
// known up front, since each tensor's byte size follows from its type and shape; it is written first, then
// the tensor data is streamed in index order, so a 20 GB file needs only as much memory as one chunk. The
// layout is the one ggml requires: offsets are the running sum of sizes padded to the alignment, and every
// tensor, the last included, is followed by zero padding. The file appears under its name only after
// finish().
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/atomic_file.h"
#include "base/status.h"
#include "gguf/metadata.h"
#include "quant/types.h"

namespace mtp {

struct TensorSpec {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
};

// Byte size of a tensor of `type` and shape `ne`; an error if the row length is not a multiple of the block
// size or the size overflows.
Expected<uint64_t> tensor_byte_size(GgmlType type, const std::array<int64_t, 4>& ne);

// The index bytes (header, metadata, tensor infos, padding) of a file with this content; also what the writer
// writes first. `data_offsets` receives each tensor's offset in the data section.
Expected<std::vector<uint8_t>> encode_gguf_index(const Metadata& metadata,
                                                 const std::vector<TensorSpec>& tensors,
                                                 std::vector<uint64_t>* data_offsets = nullptr);

class GgufWriter {
 public:
  GgufWriter() = default;
  GgufWriter(GgufWriter&&) noexcept = default;
  GgufWriter& operator=(GgufWriter&&) noexcept = default;

  // Checks the plan (names, shapes, types, alignment key) and writes the index to a temporary file beside
  // `path`.
  static Expected<GgufWriter> create(const std::string& path, const Metadata& metadata,
                                     std::vector<TensorSpec> tensors);

  // Appends bytes of the current tensor (tensors go in the order given to create). A tensor may arrive in any
  // number of pieces; a piece never spans two tensors.
  Status write(std::span<const uint8_t> bytes);
  // Writes one whole tensor: `bytes` must be its full size.
  Status write_tensor(std::span<const uint8_t> bytes);
  // Checks every tensor was written in full, then flushes and renames into place.
  Status finish();

  size_t n_tensors() const { return tensors_.size(); }
  size_t current_tensor() const { return current_; }
  uint64_t tensor_bytes(size_t i) const { return sizes_[i]; }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  Status close_tensor();

  AtomicFile file_;
  std::vector<TensorSpec> tensors_;
  std::vector<uint64_t> sizes_;
  uint64_t alignment_ = 32;
  uint64_t total_bytes_ = 0;
  size_t current_ = 0;
  uint64_t written_in_current_ = 0;
};

}  // namespace mtp
