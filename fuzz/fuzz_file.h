// Shared plumbing of the libFuzzer targets whose parser takes a path, not bytes (Model::load, the draft-vocab
// and imatrix readers): the input is written to an anonymous in-memory file and handed over by its
// /proc/self/fd path, so each run reads exactly the fuzzer's bytes through the same open/mmap code as a real
// file, with no disk I/O and nothing left behind.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace mtp::fuzz {

class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(memfd_create("fuzz_input", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();  // the harness itself is broken, not the input
    size_t done = 0;
    while (done < size) {
      ssize_t n = write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace mtp::fuzz
