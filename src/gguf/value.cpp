#include "gguf/value.h"

#include <cinttypes>
#include <cstdio>
#include <limits>

#include "base/check.h"
#include "le_bytes.h"

namespace mtp {
namespace {

using gguf_bytes::put_u32;
using gguf_bytes::put_u64;

std::string quote(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max_chars) out += "...";
  return out + "\"";
}

// Formats a scalar whose payload bytes are at `p`.
std::string scalar_display(ValueType type, const uint8_t* p) {
  char buf[64];
  auto load = [&](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (type) {
    case ValueType::U8:
      return std::to_string(load(uint8_t{}));
    case ValueType::I8:
      return std::to_string(load(int8_t{}));
    case ValueType::U16:
      return std::to_string(load(uint16_t{}));
    case ValueType::I16:
      return std::to_string(load(int16_t{}));
    case ValueType::U32:
      return std::to_string(load(uint32_t{}));
    case ValueType::I32:
      return std::to_string(load(int32_t{}));
    case ValueType::U64:
      return std::to_string(load(uint64_t{}));
    case ValueType::I64:
      return std::to_string(load(int64_t{}));
    case ValueType::F32:
      std::snprintf(buf, sizeof(buf), "%g", load(float{}));
      return buf;
    case ValueType::F64:
      std::snprintf(buf, sizeof(buf), "%g", load(double{}));
      return buf;
    case ValueType::Bool:
      return p[0] ? "true" : "false";
    default:
      MTP_CHECK(false, "not a scalar type");
      return {};
  }
}

}  // namespace

std::string_view value_type_name(ValueType type) {
  static constexpr std::string_view kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<uint32_t>(type);
  return i < kValueTypeCount ? kNames[i] : std::string_view("invalid");
}

size_t scalar_size(ValueType type) {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    default:
      return 0;
  }
}

bool is_integer(ValueType type) {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

Value Value::string(std::string s) {
  Value out;
  out.type_ = ValueType::String;
  out.str_ = std::move(s);
  return out;
}

Value Value::string_array(std::vector<std::string> items) {
  Value out;
  out.type_ = ValueType::Array;
  out.elem_type_ = ValueType::String;
  out.count_ = items.size();
  out.strings_ = std::move(items);
  return out;
}

Value Value::array_of_arrays(std::vector<Value> items) {
  for (const Value& v : items) MTP_CHECK(v.is_array(), "array_of_arrays item is not an array");
  Value out;
  out.type_ = ValueType::Array;
  out.elem_type_ = ValueType::Array;
  out.count_ = items.size();
  out.arrays_ = std::move(items);
  return out;
}

Value Value::raw_array(ValueType elem, uint64_t count, std::vector<uint8_t> payload) {
  MTP_CHECK(scalar_size(elem) > 0 && payload.size() == count * scalar_size(elem), "raw_array payload size");
  Value out;
  out.type_ = ValueType::Array;
  out.elem_type_ = elem;
  out.count_ = count;
  out.raw_ = std::move(payload);
  return out;
}

static std::optional<int64_t> widen(ValueType type, const uint8_t* p) {
  auto load = [&](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (type) {
    case ValueType::U8:
      return load(uint8_t{});
    case ValueType::I8:
      return load(int8_t{});
    case ValueType::U16:
      return load(uint16_t{});
    case ValueType::I16:
      return load(int16_t{});
    case ValueType::U32:
      return load(uint32_t{});
    case ValueType::I32:
      return load(int32_t{});
    case ValueType::I64:
      return load(int64_t{});
    case ValueType::U64: {
      uint64_t v = load(uint64_t{});
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(v);
    }
    default:
      return std::nullopt;
  }
}

std::optional<int64_t> Value::get_integer() const {
  return widen(type_, reinterpret_cast<const uint8_t*>(&bits_));
}

std::optional<int64_t> Value::integer_element(uint64_t i) const {
  if (type_ != ValueType::Array || i >= count_ || !is_integer(elem_type_)) return std::nullopt;
  return widen(elem_type_, raw_.data() + i * scalar_size(elem_type_));
}

uint64_t Value::encoded_size() const {
  switch (type_) {
    case ValueType::String:
      return 8 + str_.size();
    case ValueType::Array: {
      uint64_t n = 4 + 8;
      if (elem_type_ == ValueType::String) {
        for (const auto& s : strings_) n += 8 + s.size();
      } else if (elem_type_ == ValueType::Array) {
        for (const auto& a : arrays_) n += a.encoded_size();
      } else {
        n += raw_.size();
      }
      return n;
    }
    default:
      return scalar_size(type_);
  }
}

void Value::encode(std::vector<uint8_t>& out) const {
  switch (type_) {
    case ValueType::String:
      put_u64(out, str_.size());
      out.insert(out.end(), str_.begin(), str_.end());
      return;
    case ValueType::Array:
      put_u32(out, static_cast<uint32_t>(elem_type_));
      put_u64(out, count_);
      if (elem_type_ == ValueType::String) {
        for (const auto& s : strings_) {
          put_u64(out, s.size());
          out.insert(out.end(), s.begin(), s.end());
        }
      } else if (elem_type_ == ValueType::Array) {
        // Each element of an array of arrays carries its own element type and count (no outer type tag).
        for (const auto& a : arrays_) a.encode(out);
      } else {
        out.insert(out.end(), raw_.begin(), raw_.end());
      }
      return;
    case ValueType::Bool:
      out.push_back((bits_ & 0xff) ? 1 : 0);
      return;
    default: {
      const auto* p = reinterpret_cast<const uint8_t*>(&bits_);
      out.insert(out.end(), p, p + scalar_size(type_));
    }
  }
}

std::string Value::to_display(size_t max_items) const {
  if (type_ == ValueType::String) return quote(str_, 120);
  if (type_ != ValueType::Array) return scalar_display(type_, reinterpret_cast<const uint8_t*>(&bits_));
  std::string out = str_cat("[", value_type_name(elem_type_), " x ", count_);
  uint64_t shown = count_ < max_items ? count_ : max_items;
  for (uint64_t i = 0; i < shown; ++i) {
    out += i == 0 ? ": " : ", ";
    if (elem_type_ == ValueType::String)
      out += quote(strings_[i], 40);
    else if (elem_type_ == ValueType::Array)
      out += arrays_[i].to_display(4);
    else
      out += scalar_display(elem_type_, raw_.data() + i * scalar_size(elem_type_));
  }
  if (shown < count_) out += ", ...";
  return out + "]";
}

bool Value::operator==(const Value& other) const {
  if (type_ != other.type_) return false;
  switch (type_) {
    case ValueType::String:
      return str_ == other.str_;
    case ValueType::Array:
      return elem_type_ == other.elem_type_ && count_ == other.count_ && raw_ == other.raw_ &&
             strings_ == other.strings_ && arrays_ == other.arrays_;
    case ValueType::Bool:
      return ((bits_ & 0xff) != 0) == ((other.bits_ & 0xff) != 0);
    default:
      return bits_ == other.bits_;
  }
}

}  // namespace mtp
