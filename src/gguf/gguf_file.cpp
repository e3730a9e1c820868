#include "gguf/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace mtp {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint64_t kMaxStringLength = uint64_t{1} << 30;
constexpr uint64_t kMaxArrayCount = uint64_t{1} << 30;
constexpr int kMaxArrayDepth = 8;
// Smallest possible records, used to refuse counts the remaining bytes cannot hold before allocating for
// them.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

bool is_power_of_two(uint64_t x) {
  return x != 0 && (x & (x - 1)) == 0;
}

// A bounds-checked little-endian reader over the file. Every failure names what was read and where.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }

  Status need(uint64_t n, std::string_view what) const {
    if (n > left()) {
      return corrupt("truncated at byte ", pos_, " while reading ", what, " (needs ", n, " bytes, ", left(),
                     " left)");
    }
    return Status::Ok();
  }

  template <typename T>
  Status read(T* out, std::string_view what) {
    MTP_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status read_bytes(void* out, uint64_t n, std::string_view what) {
    MTP_RETURN_IF_ERROR(need(n, what));
    if (n > 0) std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
    return Status::Ok();
  }

  Status read_string(std::string* out, std::string_view what) {
    uint64_t start = pos_;
    uint64_t len = 0;
    MTP_RETURN_IF_ERROR(read(&len, what));
    if (len > kMaxStringLength)
      return corrupt("byte ", start, ": ", what, " has length ", len, " (limit 2^30)");
    MTP_RETURN_IF_ERROR(need(len, what));
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

Status read_value_type(Cursor& c, ValueType* out, std::string_view what) {
  uint64_t at = c.pos();
  uint32_t raw = 0;
  MTP_RETURN_IF_ERROR(c.read(&raw, what));
  if (raw >= kValueTypeCount) return corrupt("byte ", at, ": ", what, " is ", raw, ", not a GGUF value type");
  *out = static_cast<ValueType>(raw);
  return Status::Ok();
}

Status read_value(Cursor& c, ValueType type, Value* out, const std::string& key, int depth);

template <typename T>
Status read_scalar(Cursor& c, Value* out) {
  T v{};
  MTP_RETURN_IF_ERROR(c.read(&v, "scalar value"));
  *out = Value::scalar(v);
  return Status::Ok();
}

Status read_array(Cursor& c, Value* out, const std::string& key, int depth) {
  if (depth >= kMaxArrayDepth)
    return corrupt("byte ", c.pos(), ": key '", key, "' nests arrays deeper than 8");
  ValueType elem;
  MTP_RETURN_IF_ERROR(read_value_type(c, &elem, "array element type"));
  uint64_t at = c.pos();
  uint64_t count = 0;
  MTP_RETURN_IF_ERROR(c.read(&count, "array length"));
  uint64_t min_elem = elem == ValueType::String ? 8 : elem == ValueType::Array ? 12 : scalar_size(elem);
  if (count > kMaxArrayCount || count * min_elem > c.left()) {
    return corrupt("byte ", at, ": key '", key, "' has an array of ", count, " ", value_type_name(elem),
                   " elements, more than the ", c.left(), " bytes left can hold");
  }
  if (elem == ValueType::String) {
    std::vector<std::string> items(count);
    for (auto& s : items) MTP_RETURN_IF_ERROR(c.read_string(&s, "array string"));
    *out = Value::string_array(std::move(items));
  } else if (elem == ValueType::Array) {
    std::vector<Value> items(count);
    for (auto& v : items) MTP_RETURN_IF_ERROR(read_array(c, &v, key, depth + 1));
    *out = Value::array_of_arrays(std::move(items));
  } else {
    std::vector<uint8_t> payload(count * min_elem);
    MTP_RETURN_IF_ERROR(c.read_bytes(payload.data(), payload.size(), "array payload"));
    if (elem == ValueType::Bool) {
      for (uint64_t i = 0; i < count; ++i) {
        if (payload[i] > 1)
          return corrupt("byte ", at + 8 + i, ": key '", key, "' has bool byte ", +payload[i]);
      }
    }
    *out = Value::raw_array(elem, count, std::move(payload));
  }
  return Status::Ok();
}

Status read_value(Cursor& c, ValueType type, Value* out, const std::string& key, int depth) {
  uint64_t at = c.pos();
  switch (type) {
    case ValueType::String: {
      std::string s;
      MTP_RETURN_IF_ERROR(c.read_string(&s, "string value"));
      *out = Value::string(std::move(s));
      return Status::Ok();
    }
    case ValueType::Array:
      return read_array(c, out, key, depth);
    case ValueType::Bool: {
      uint8_t b = 0;
      MTP_RETURN_IF_ERROR(c.read(&b, "bool value"));
      if (b > 1) return corrupt("byte ", at, ": key '", key, "' has bool byte ", +b, " (must be 0 or 1)");
      *out = Value::scalar(b != 0);
      return Status::Ok();
    }
    case ValueType::U8:
      return read_scalar<uint8_t>(c, out);
    case ValueType::I8:
      return read_scalar<int8_t>(c, out);
    case ValueType::U16:
      return read_scalar<uint16_t>(c, out);
    case ValueType::I16:
      return read_scalar<int16_t>(c, out);
    case ValueType::U32:
      return read_scalar<uint32_t>(c, out);
    case ValueType::I32:
      return read_scalar<int32_t>(c, out);
    case ValueType::F32:
      return read_scalar<float>(c, out);
    case ValueType::U64:
      return read_scalar<uint64_t>(c, out);
    case ValueType::I64:
      return read_scalar<int64_t>(c, out);
    case ValueType::F64:
      return read_scalar<double>(c, out);
  }
  return corrupt("byte ", at, ": unexpected value type");
}

}  // namespace

// Parses and validates the index of a GGUF file; a friend of GgufFile.
class GgufParser {
 public:
  static Status parse(GgufFile& f) {
    Cursor c(f.bytes_);
    uint32_t magic = 0;
    if (f.bytes_.size() < 4) return corrupt("not a GGUF file: only ", f.bytes_.size(), " bytes");
    MTP_RETURN_IF_ERROR(c.read(&magic, "magic"));
    if (magic != kMagic) return corrupt("not a GGUF file: bad magic at byte 0");
    MTP_RETURN_IF_ERROR(c.read(&f.version_, "version"));
    if (f.version_ == 1) return unsupported("byte 4: GGUF version 1 is not supported (convert the file)");
    if (f.version_ == 0 || (f.version_ & 0xFFFF) == 0) {
      return unsupported("byte 4: GGUF version ", f.version_, " (a big-endian file or a corrupt header)");
    }
    if (f.version_ > 3) return unsupported("byte 4: GGUF version ", f.version_, " is newer than 3");

    int64_t n_tensors = 0, n_kv = 0;
    MTP_RETURN_IF_ERROR(c.read(&n_tensors, "tensor count"));
    MTP_RETURN_IF_ERROR(c.read(&n_kv, "metadata count"));
    if (n_tensors < 0 || static_cast<uint64_t>(n_tensors) > c.left() / kMinTensorInfoBytes) {
      return corrupt("byte 8: tensor count ", n_tensors, " cannot fit in the ", f.bytes_.size(),
                     "-byte file");
    }
    if (n_kv < 0 || static_cast<uint64_t>(n_kv) > c.left() / kMinKvBytes) {
      return corrupt("byte 16: metadata count ", n_kv, " cannot fit in the ", f.bytes_.size(), "-byte file");
    }

    for (int64_t i = 0; i < n_kv; ++i) MTP_RETURN_IF_ERROR(parse_kv(f, c));
    MTP_RETURN_IF_ERROR(parse_alignment(f));

    f.tensors_.reserve(static_cast<size_t>(n_tensors));
    for (int64_t i = 0; i < n_tensors; ++i) MTP_RETURN_IF_ERROR(parse_tensor_info(f, c));

    uint64_t end_of_infos = c.pos();
    f.data_offset_ = (end_of_infos + f.alignment_ - 1) / f.alignment_ * f.alignment_;
    if (n_tensors > 0 && f.data_offset_ > f.bytes_.size()) {
      return corrupt("data section starts at byte ", f.data_offset_, ", past the end of the ",
                     f.bytes_.size(), "-byte file");
    }
    return check_layout(f);
  }

 private:
  static Status parse_kv(GgufFile& f, Cursor& c) {
    uint64_t at = c.pos();
    std::string key;
    MTP_RETURN_IF_ERROR(c.read_string(&key, "metadata key"));
    if (key.empty()) return corrupt("byte ", at, ": empty metadata key");
    if (f.metadata_.contains(key)) return corrupt("byte ", at, ": duplicate metadata key '", key, "'");
    ValueType type;
    MTP_RETURN_IF_ERROR(read_value_type(c, &type, "value type of '" + key + "'"));
    Value value;
    MTP_RETURN_IF_ERROR(read_value(c, type, &value, key, 0));
    f.metadata_.set(std::move(key), std::move(value));
    return Status::Ok();
  }

  static Status parse_alignment(GgufFile& f) {
    const Value* v = f.metadata_.find("general.alignment");
    if (v == nullptr) return Status::Ok();
    auto a = v->get<uint32_t>();
    if (!a) return corrupt("general.alignment has type ", value_type_name(v->type()), ", expected u32");
    if (!is_power_of_two(*a) || *a > kGgufMaxAlignment) {
      return corrupt("general.alignment is ", *a, ", not a power of two up to ", kGgufMaxAlignment);
    }
    f.alignment_ = *a;
    return Status::Ok();
  }

  static Status parse_tensor_info(GgufFile& f, Cursor& c) {
    TensorInfo t;
    t.info_offset = c.pos();
    MTP_RETURN_IF_ERROR(c.read_string(&t.name, "tensor name"));
    auto where = [&] { return str_cat("tensor info at byte ", t.info_offset, " ('", t.name, "')"); };
    if (t.name.empty()) return corrupt(where(), ": empty tensor name");
    if (t.name.size() > kGgufMaxNameLength) {
      return corrupt(where(), ": name is ", t.name.size(), " bytes, the limit is ", kGgufMaxNameLength);
    }
    if (f.tensor_index_.count(t.name) != 0) return corrupt(where(), ": duplicate tensor name");
    MTP_RETURN_IF_ERROR(c.read(&t.n_dims, "tensor n_dims"));
    if (t.n_dims > kGgufMaxDims) return corrupt(where(), ": n_dims is ", t.n_dims, ", the limit is 4");
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      MTP_RETURN_IF_ERROR(c.read(&t.ne[d], "tensor dimension"));
      if (t.ne[d] < 0) return corrupt(where(), ": dimension ", d, " is negative (", t.ne[d], ")");
    }
    int64_t n_elements = 1;
    for (int64_t n : t.ne) {
      if (__builtin_mul_overflow(n_elements, n, &n_elements))
        return corrupt(where(), ": element count overflows");
    }
    int32_t raw_type = 0;
    MTP_RETURN_IF_ERROR(c.read(&raw_type, "tensor type"));
    auto traits = type_traits(raw_type);
    if (!traits) return corrupt(where(), ": unknown or removed tensor type ", raw_type);
    t.type = static_cast<GgmlType>(raw_type);
    if (t.ne[0] % traits->block_size != 0) {
      return corrupt(where(), ": row length ", t.ne[0], " is not a multiple of the ", traits->name,
                     " block size ", traits->block_size);
    }
    uint64_t n_bytes = static_cast<uint64_t>(t.ne[0] / traits->block_size);
    for (uint64_t factor : {static_cast<uint64_t>(traits->type_size), static_cast<uint64_t>(t.ne[1]),
                            static_cast<uint64_t>(t.ne[2]), static_cast<uint64_t>(t.ne[3])}) {
      if (__builtin_mul_overflow(n_bytes, factor, &n_bytes)) return corrupt(where(), ": byte size overflows");
    }
    t.n_bytes = n_bytes;
    MTP_RETURN_IF_ERROR(c.read(&t.offset, "tensor offset"));
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
    return Status::Ok();
  }

  // Every tensor aligned, inside the file and disjoint from the others.
  static Status check_layout(GgufFile& f) {
    const uint64_t data_size = f.bytes_.size() >= f.data_offset_ ? f.bytes_.size() - f.data_offset_ : 0;
    uint64_t expected = 0;
    for (const TensorInfo& t : f.tensors_) {
      auto where = [&] { return str_cat("tensor '", t.name, "' (info at byte ", t.info_offset, ")"); };
      if (t.offset % f.alignment_ != 0) {
        return corrupt(where(), ": offset ", t.offset, " is not a multiple of the alignment ", f.alignment_);
      }
      if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
        return corrupt(where(), ": data [", f.data_offset_ + t.offset, ", +", t.n_bytes,
                       ") lies outside the file (", f.bytes_.size(), " bytes)");
      }
      if (t.offset != expected) f.canonical_layout_ = false;
      expected = t.offset + (t.n_bytes + f.alignment_ - 1) / f.alignment_ * f.alignment_;
    }
    std::vector<size_t> order(f.tensors_.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f.tensors_[a].offset < f.tensors_[b].offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const TensorInfo& prev = f.tensors_[order[i - 1]];
      const TensorInfo& cur = f.tensors_[order[i]];
      if (prev.n_bytes > 0 && cur.n_bytes > 0 && prev.offset + prev.n_bytes > cur.offset) {
        return corrupt("tensor '", cur.name, "' overlaps tensor '", prev.name, "' at data offset ",
                       cur.offset);
      }
    }
    return Status::Ok();
  }
};

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  uint32_t n = effective_n_dims(ne);
  for (uint32_t d = 0; d < n; ++d) s += str_cat(d ? ", " : "", ne[d]);
  return s + "]";
}

uint32_t effective_n_dims(const std::array<int64_t, 4>& ne) {
  for (int d = 3; d >= 1; --d) {
    if (ne[d] != 1) return static_cast<uint32_t>(d + 1);  // ggml tests > 1; != 1 keeps a zero dimension
  }
  return 1;
}

Expected<GgufFile> GgufFile::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped.ok()) return mapped.status();
  GgufFile f;
  f.file_ = std::move(mapped).value();
  f.bytes_ = f.file_.bytes();
  f.name_ = path;
  Status s = GgufParser::parse(f);
  if (!s.ok()) return s.with_context(path);
  return f;
}

Expected<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  GgufFile f;
  f.bytes_ = bytes;
  f.name_ = std::move(name);
  Status s = GgufParser::parse(f);
  if (!s.ok()) return s.with_context(f.name_);
  return f;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string GgufFile::architecture() const {
  const Value* v = metadata_.find("general.architecture");
  const std::string* s = v ? v->get_string() : nullptr;
  return s ? *s : std::string();
}

}  // namespace mtp
