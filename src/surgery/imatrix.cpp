#include "surgery/imatrix.h"

#include <cmath>
#include <cstring>

#include "base/mapped_file.h"
#include "gguf/gguf_file.h"

namespace mtp::surgery {
namespace {

Expected<Imatrix> load_gguf_imatrix(const std::string& path) {
  MTP_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  Imatrix m;
  if (auto ds = f.metadata().get_string_array("imatrix.datasets"); ds.ok() && !(*ds)->empty())
    m.dataset = (**ds)[0];
  if (auto n = f.metadata().get_integer("imatrix.chunk_count"); n.ok()) m.chunk_count = *n;
  for (const TensorInfo& sums : f.tensors()) {
    if (!sums.name.ends_with(".in_sum2")) continue;
    const std::string name = sums.name.substr(0, sums.name.size() - 8);
    const TensorInfo* counts = f.find_tensor(name + ".counts");
    if (counts == nullptr) return corrupt(path, ": '", sums.name, "' has no matching '", name, ".counts'");
    if (sums.type != GgmlType::F32 || counts->type != GgmlType::F32) {
      return corrupt(path, ": imatrix tensors for '", name, "' must be f32");
    }
    const int64_t ne0 = sums.ne[0], n_mat = sums.n_rows();
    if (counts->n_elements() != n_mat) {
      return corrupt(path, ": '", name, ".counts' has ", counts->n_elements(), " values, expected ", n_mat);
    }
    // Read through memcpy: a file with general.alignment below 4 may place the f32 data at any byte.
    const uint8_t* s = f.tensor_data(sums).data();
    const uint8_t* c = f.tensor_data(*counts).data();
    std::vector<float> w(static_cast<size_t>(ne0 * n_mat));
    for (int64_t j = 0; j < n_mat; ++j) {
      float count = 0;
      std::memcpy(&count, c + j * sizeof(float), sizeof(float));
      for (int64_t i = 0; i < ne0; ++i) {
        float v = 1.0f;
        if (count != 0) {
          std::memcpy(&v, s + (j * ne0 + i) * static_cast<int64_t>(sizeof(float)), sizeof(float));
          v /= count;
        }
        w[static_cast<size_t>(j * ne0 + i)] = v;
      }
    }
    m.weights.emplace(name, std::move(w));
  }
  return m;
}

// Legacy: i32 n_entries; per entry: i32 name length, name, i32 ncall, i32 nval, nval f32; then optionally i32
// chunk count, i32 dataset name length, dataset name.
Expected<Imatrix> load_legacy_imatrix(const std::string& path) {
  MTP_ASSIGN_OR_RETURN(MappedFile f, MappedFile::open(path));
  const uint8_t* p = f.data();
  uint64_t left = f.size();
  auto read_i32 = [&](int32_t* out, const char* what) -> Status {
    if (left < 4) return corrupt(path, ": truncated at byte ", f.size() - left, " reading ", what);
    std::memcpy(out, p, 4);
    p += 4;
    left -= 4;
    return Status::Ok();
  };
  Imatrix m;
  int32_t n_entries = 0;
  MTP_RETURN_IF_ERROR(read_i32(&n_entries, "entry count"));
  if (n_entries < 0 || static_cast<uint64_t>(n_entries) > left / 12)
    return corrupt(path, ": bad entry count ", n_entries);
  for (int32_t e = 0; e < n_entries; ++e) {
    int32_t len = 0, ncall = 0, nval = 0;
    MTP_RETURN_IF_ERROR(read_i32(&len, "name length"));
    if (len <= 0 || static_cast<uint64_t>(len) > left) return corrupt(path, ": bad name length ", len);
    std::string name(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
    p += len;
    left -= static_cast<uint64_t>(len);
    MTP_RETURN_IF_ERROR(read_i32(&ncall, "call count"));
    MTP_RETURN_IF_ERROR(read_i32(&nval, "value count"));
    if (nval <= 0 || static_cast<uint64_t>(nval) > left / 4)
      return corrupt(path, ": bad value count ", nval, " for ", name);
    std::vector<float> w(static_cast<size_t>(nval));
    std::memcpy(w.data(), p, static_cast<size_t>(nval) * 4);
    p += static_cast<uint64_t>(nval) * 4;
    left -= static_cast<uint64_t>(nval) * 4;
    if (ncall > 0) {
      for (float& v : w) v /= static_cast<float>(ncall);
    }
    m.weights.emplace(std::move(name), std::move(w));
  }
  // The trailer, read as llama.cpp reads it: what is there is kept, a short tail is not an error.
  int32_t chunks = 0, len = 0;
  if (read_i32(&chunks, "chunk count").ok()) {
    m.chunk_count = chunks;
    if (read_i32(&len, "dataset name length").ok() && len > 0 && static_cast<uint64_t>(len) <= left) {
      m.dataset.assign(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
      m.dataset.resize(std::strlen(m.dataset.c_str()));  // llama.cpp reads a C string: up to the first NUL
    }
  }
  return m;
}

}  // namespace

Expected<Imatrix> load_imatrix(const std::string& path) {
  MTP_ASSIGN_OR_RETURN(MappedFile f, MappedFile::open(path));
  const bool is_gguf = f.size() >= 4 && std::memcmp(f.data(), "GGUF", 4) == 0;
  Expected<Imatrix> m = is_gguf ? load_gguf_imatrix(path) : load_legacy_imatrix(path);
  if (!m.ok()) return m;
  for (const auto& [name, w] : m->weights) {
    for (float v : w) {
      if (!std::isfinite(v)) return corrupt(path, ": imatrix entry '", name, "' has a non-finite value");
    }
  }
  return m;
}

}  // namespace mtp::surgery
