// A read-only memory map of a whole file. Tensor views point into it, so it must outlive them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace mtp {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path` read-only. An empty file maps to an empty span.
  static Expected<MappedFile> open(const std::string& path);

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Tells the kernel this process is done with [offset, offset + length) for now: the pages leave this
  // process's resident set (they stay in the page cache). Streaming tools call it after each tensor so that
  // their peak RSS stays far below the file size. Reading the range again later is still valid.
  void release(uint64_t offset, uint64_t length) const;

 private:
  void reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace mtp
