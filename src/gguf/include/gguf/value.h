// GGUF metadata values (docs/formats.md section 2.2): scalars, strings and arrays, arrays of arrays
// included. Values own their data, so metadata can be copied from one file into another.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace mtp {

// On-disk gguf_type ids.
enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
inline constexpr uint32_t kValueTypeCount = 13;

std::string_view value_type_name(ValueType type);  // "u32", "string", "array", ...
// Payload bytes of one scalar; 0 for String and Array.
size_t scalar_size(ValueType type);
bool is_integer(ValueType type);

// Maps a C++ type to the GGUF type that stores it.
template <typename T>
constexpr ValueType value_type_of() {
  if constexpr (std::is_same_v<T, uint8_t>)
    return ValueType::U8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return ValueType::I8;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return ValueType::U16;
  else if constexpr (std::is_same_v<T, int16_t>)
    return ValueType::I16;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return ValueType::U32;
  else if constexpr (std::is_same_v<T, int32_t>)
    return ValueType::I32;
  else if constexpr (std::is_same_v<T, float>)
    return ValueType::F32;
  else if constexpr (std::is_same_v<T, bool>)
    return ValueType::Bool;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return ValueType::U64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return ValueType::I64;
  else if constexpr (std::is_same_v<T, double>)
    return ValueType::F64;
  else
    static_assert(sizeof(T) == 0, "not a GGUF scalar type");
}

class Value {
 public:
  Value() = default;

  template <typename T>
  static Value scalar(T v) {
    Value out;
    out.type_ = value_type_of<T>();
    std::memcpy(&out.bits_, &v, sizeof(T));
    return out;
  }
  static Value string(std::string s);
  template <typename T>
  static Value array(const std::vector<T>& items) {
    Value out;
    out.type_ = ValueType::Array;
    out.elem_type_ = value_type_of<T>();
    out.count_ = items.size();
    out.raw_.resize(items.size() * sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
      for (size_t i = 0; i < items.size(); ++i) out.raw_[i] = items[i] ? 1 : 0;
    } else if (!items.empty()) {
      std::memcpy(out.raw_.data(), items.data(), out.raw_.size());
    }
    return out;
  }
  static Value string_array(std::vector<std::string> items);
  static Value array_of_arrays(std::vector<Value> items);  // each item must itself be an array
  // A numeric array from its packed little-endian payload (count * scalar_size(elem) bytes).
  static Value raw_array(ValueType elem, uint64_t count, std::vector<uint8_t> payload);

  ValueType type() const { return type_; }
  bool is_array() const { return type_ == ValueType::Array; }

  // Scalar access; nullopt when the stored type is not exactly T.
  template <typename T>
  std::optional<T> get() const {
    if (type_ != value_type_of<T>()) return std::nullopt;
    T v;
    std::memcpy(&v, &bits_, sizeof(T));
    return v;
  }
  // Any integer scalar type widened to int64 (u64 above INT64_MAX gives nullopt).
  std::optional<int64_t> get_integer() const;
  const std::string* get_string() const { return type_ == ValueType::String ? &str_ : nullptr; }

  // Array access.
  ValueType elem_type() const { return elem_type_; }
  uint64_t size() const { return count_; }
  const std::vector<std::string>& strings() const { return strings_; }  // elem_type String
  const std::vector<Value>& arrays() const { return arrays_; }          // elem_type Array
  const std::vector<uint8_t>& raw() const { return raw_; }              // numeric elem types, packed LE
  template <typename T>
  T element(uint64_t i) const {
    T v;
    std::memcpy(&v, raw_.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  // Numeric element i of any integer element type, widened.
  std::optional<int64_t> integer_element(uint64_t i) const;

  // Bytes this value occupies in a GGUF file after its type tag (payload; arrays include their header).
  uint64_t encoded_size() const;
  // Appends the encoded payload (without the type tag) to `out`.
  void encode(std::vector<uint8_t>& out) const;

  // Short human-readable form: scalars in full, strings quoted and cut, arrays as "[u32 x 4: 11, 11, 10, 0]".
  std::string to_display(size_t max_items = 8) const;

  bool operator==(const Value& other) const;

 private:
  ValueType type_ = ValueType::U8;
  ValueType elem_type_ = ValueType::U8;
  uint64_t bits_ = 0;   // scalar payload
  uint64_t count_ = 0;  // array element count
  std::string str_;
  std::vector<uint8_t> raw_;
  std::vector<std::string> strings_;
  std::vector<Value> arrays_;
};

}  // namespace mtp
