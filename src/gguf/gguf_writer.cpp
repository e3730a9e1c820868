#include "gguf/gguf_writer.h"

#include <unordered_set>

#include "gguf/gguf_file.h"
#include "le_bytes.h"

namespace mtp {
namespace {

using gguf_bytes::put_u32;
using gguf_bytes::put_u64;

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put_u64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
uint64_t pad(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

Expected<uint64_t> alignment_of(const Metadata& md) {
  const Value* v = md.find("general.alignment");
  if (v == nullptr) return kGgufDefaultAlignment;
  auto a = v->get<uint32_t>();
  if (!a || *a == 0 || (*a & (*a - 1)) != 0 || *a > kGgufMaxAlignment) {
    return invalid_argument("general.alignment must be a u32 power of two up to ", kGgufMaxAlignment,
                            ", got ", v->to_display());
  }
  return static_cast<uint64_t>(*a);
}

}  // namespace

Expected<uint64_t> tensor_byte_size(GgmlType type, const std::array<int64_t, 4>& ne) {
  const TypeTraits& t = type_traits(type);
  for (int64_t n : ne) {
    if (n < 0) return invalid_argument("negative dimension ", n);
  }
  if (ne[0] % t.block_size != 0) {
    return invalid_argument("row length ", ne[0], " is not a multiple of the ", t.name, " block size ",
                            t.block_size);
  }
  uint64_t bytes = static_cast<uint64_t>(ne[0] / t.block_size);
  for (uint64_t f : {static_cast<uint64_t>(t.type_size), static_cast<uint64_t>(ne[1]),
                     static_cast<uint64_t>(ne[2]), static_cast<uint64_t>(ne[3])}) {
    if (__builtin_mul_overflow(bytes, f, &bytes)) return invalid_argument("tensor byte size overflows");
  }
  return bytes;
}

Expected<std::vector<uint8_t>> encode_gguf_index(const Metadata& metadata,
                                                 const std::vector<TensorSpec>& tensors,
                                                 std::vector<uint64_t>* data_offsets) {
  MTP_ASSIGN_OR_RETURN(uint64_t alignment, alignment_of(metadata));
  std::vector<uint8_t> out;
  out.insert(out.end(), {'G', 'G', 'U', 'F'});
  put_u32(out, 3);
  put_u64(out, tensors.size());
  put_u64(out, metadata.size());
  for (const KeyValue& kv : metadata.entries()) {
    if (kv.key.empty()) return invalid_argument("empty metadata key");
    put_string(out, kv.key);
    put_u32(out, static_cast<uint32_t>(kv.value.type()));
    kv.value.encode(out);
  }
  std::unordered_set<std::string> names;
  uint64_t offset = 0;
  if (data_offsets) data_offsets->clear();
  for (const TensorSpec& t : tensors) {
    if (t.name.empty() || t.name.size() > kGgufMaxNameLength) {
      return invalid_argument("tensor name '", t.name, "' must be 1 to ", kGgufMaxNameLength, " bytes");
    }
    if (!names.insert(t.name).second) return invalid_argument("duplicate tensor name '", t.name, "'");
    auto size = tensor_byte_size(t.type, t.ne);
    if (!size.ok()) return size.status().with_context("tensor '" + t.name + "'");
    put_string(out, t.name);
    uint32_t n_dims = effective_n_dims(t.ne);
    put_u32(out, n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) put_u64(out, static_cast<uint64_t>(t.ne[d]));
    put_u32(out, static_cast<uint32_t>(t.type));
    put_u64(out, offset);
    if (data_offsets) data_offsets->push_back(offset);
    offset += pad(*size, alignment);
  }
  // ggml pads after the infos even when there are no tensors.
  out.resize(pad(out.size(), alignment), 0);
  return out;
}

Expected<GgufWriter> GgufWriter::create(const std::string& path, const Metadata& metadata,
                                        std::vector<TensorSpec> tensors) {
  GgufWriter w;
  MTP_ASSIGN_OR_RETURN(w.alignment_, alignment_of(metadata));
  MTP_ASSIGN_OR_RETURN(std::vector<uint8_t> index, encode_gguf_index(metadata, tensors));
  for (const TensorSpec& t : tensors) {
    uint64_t size = *tensor_byte_size(t.type, t.ne);  // validated by encode_gguf_index
    w.sizes_.push_back(size);
    w.total_bytes_ += pad(size, w.alignment_);
  }
  w.total_bytes_ += index.size();
  w.tensors_ = std::move(tensors);
  MTP_ASSIGN_OR_RETURN(w.file_, AtomicFile::create(path));
  MTP_RETURN_IF_ERROR(w.file_.write(index));
  return w;
}

Status GgufWriter::write(std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    // Zero-size tensors have no bytes; skip past them to the tensor these bytes belong to.
    while (current_ < tensors_.size() && sizes_[current_] == 0) MTP_RETURN_IF_ERROR(close_tensor());
    if (current_ >= tensors_.size()) return invalid_argument("write past the last tensor");
    uint64_t room = sizes_[current_] - written_in_current_;
    if (bytes.size() > room) {
      return invalid_argument("tensor '", tensors_[current_].name, "': ", bytes.size(), " bytes given, ",
                              room, " expected");
    }
    MTP_RETURN_IF_ERROR(file_.write(bytes));
    written_in_current_ += bytes.size();
    bytes = {};
    if (written_in_current_ == sizes_[current_]) MTP_RETURN_IF_ERROR(close_tensor());
  }
  return Status::Ok();
}

Status GgufWriter::write_tensor(std::span<const uint8_t> bytes) {
  if (current_ >= tensors_.size()) return invalid_argument("write past the last tensor");
  if (written_in_current_ != 0 || bytes.size() != sizes_[current_]) {
    return invalid_argument("tensor '", tensors_[current_].name, "' is ", sizes_[current_], " bytes, got ",
                            bytes.size());
  }
  if (bytes.empty()) return close_tensor();
  return write(bytes);
}

Status GgufWriter::close_tensor() {
  MTP_RETURN_IF_ERROR(file_.write_zeros(pad(sizes_[current_], alignment_) - sizes_[current_]));
  ++current_;
  written_in_current_ = 0;
  return Status::Ok();
}

Status GgufWriter::finish() {
  while (current_ < tensors_.size() && sizes_[current_] == 0) MTP_RETURN_IF_ERROR(close_tensor());
  if (current_ != tensors_.size()) {
    return invalid_argument("finish() before tensor '", tensors_[current_].name, "' was written (", current_,
                            " of ", tensors_.size(), " done)");
  }
  return file_.commit();
}

}  // namespace mtp
