// Writes a file so that the final path only ever holds a complete file: the bytes go to a temporary file in
// the same folder, which commit() flushes and renames over the target. If the writer is destroyed (or the
// process dies) before commit(), nothing appears under the final name; the destructor removes the temporary
// file, and so does SIGINT or SIGTERM where the program leaves them at their default (the process then ends
// by that signal). A temporary left by a run killed otherwise (SIGKILL, a crash) is named `.NAME.tmp.XXXXXX`
// beside the target; the next create() for that target says so on stderr.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace mtp {

class AtomicFile {
 public:
  AtomicFile() = default;
  ~AtomicFile();
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  static Expected<AtomicFile> create(const std::string& final_path);
  // A whole file at once (a report, a lock): create, write, commit.
  static Status write_whole(const std::string& final_path, std::string_view bytes);

  Status write(std::span<const uint8_t> bytes);
  Status write_zeros(uint64_t count);
  // Writes at an absolute position without moving the append position (for patching a header).
  Status pwrite(std::span<const uint8_t> bytes, uint64_t offset);
  uint64_t position() const { return position_; }

  // Flushes to disk and renames the temporary file to the final path.
  Status commit();

  const std::string& final_path() const { return final_path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void abandon();
  void release_slot();  // no longer a file for the signal handler to remove

  int fd_ = -1;
  int slot_ = -1;  // in the signal handler's table (atomic_file.cpp); -1 none
  uint64_t position_ = 0;
  std::string final_path_;
  std::string temp_path_;
};

}  // namespace mtp
