// Helpers shared by the gguf tests: temporary folders and small valid files to mutate.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"

namespace mtp::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mtp-test-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    path_ = mkdtemp(buf.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Whether `part` occurs in `s`.
inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// Writes a GGUF with the given content, tensor data filled from `data` in order; returns the file bytes.
inline std::vector<uint8_t> write_gguf(const std::string& path, const Metadata& md,
                                       const std::vector<TensorSpec>& tensors,
                                       const std::vector<std::vector<uint8_t>>& data) {
  auto w = GgufWriter::create(path, md, tensors);
  if (!w.ok()) throw std::runtime_error(w.status().message());
  for (const auto& d : data) {
    Status s = w->write_tensor(d);
    if (!s.ok()) throw std::runtime_error(s.message());
  }
  Status s = w->finish();
  if (!s.ok()) throw std::runtime_error(s.message());
  return read_bytes(path);
}

}  // namespace mtp::testing
