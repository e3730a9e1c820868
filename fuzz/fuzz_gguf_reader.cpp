// libFuzzer target for the GGUF reader. Any input must parse or fail with a Status; a file that parses must
// have every tensor inside the buffer, and re-encoding its index must give a file that parses to the same
// index.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  auto file = mtp::GgufFile::parse(bytes);
  if (!file.ok()) return 0;

  std::vector<mtp::TensorSpec> specs;
  unsigned checksum = 0;
  for (const mtp::TensorInfo& t : file->tensors()) {
    auto d = file->tensor_data(t);
    if (d.data() < data || d.data() + d.size() > data + size) std::abort();
    if (!d.empty()) checksum += d.front() + d.back();  // touch both ends under ASan
    specs.push_back({t.name, t.type, t.ne});
  }
  std::vector<uint64_t> offsets;
  auto index = mtp::encode_gguf_index(file->metadata(), specs, &offsets);
  if (!index.ok()) std::abort();  // everything the reader accepts, the writer must be able to write
  // Rebuild a whole canonical file from the parsed index and data; it must parse back to the same content.
  std::vector<uint8_t> rebuilt = std::move(*index);
  const size_t data_start = rebuilt.size();
  for (size_t i = 0; i < specs.size(); ++i) {
    auto d = file->tensor_data(file->tensors()[i]);
    rebuilt.resize(data_start + offsets[i], 0);
    rebuilt.insert(rebuilt.end(), d.begin(), d.end());
    if (rebuilt.size() > 4 * size + (1 << 20)) return 0;  // many empty tensors; not worth the memory
  }
  rebuilt.resize((rebuilt.size() + file->alignment() - 1) / file->alignment() * file->alignment(), 0);
  auto again = mtp::GgufFile::parse(rebuilt);
  if (!again.ok()) std::abort();
  if (again->metadata().size() != file->metadata().size()) std::abort();
  for (size_t i = 0; i < again->metadata().size(); ++i) {
    if (!(again->metadata().entries()[i].value == file->metadata().entries()[i].value)) std::abort();
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    auto a = file->tensor_data(file->tensors()[i]);
    auto b = again->tensor_data(again->tensors()[i]);
    if (a.size() != b.size() || !std::equal(a.begin(), a.end(), b.begin())) std::abort();
  }
  return static_cast<int>(checksum & 0);
}
