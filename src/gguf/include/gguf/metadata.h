// The ordered key-value metadata of a GGUF file, with typed getters that report a missing key or a wrong type
// as a Status (the file is untrusted; a wrong type is the file's fault, not a bug).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "gguf/value.h"

namespace mtp {

struct KeyValue {
  std::string key;
  Value value;
};

class Metadata {
 public:
  const std::vector<KeyValue>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const Value* find(std::string_view key) const;

  // Replaces the value in place when the key exists (keeping the file's key order), else appends.
  void set(std::string key, Value value);
  // Removes the key if present and appends it at the end (what ggml's setters do; llama-quantize relies on
  // it).
  void set_last(std::string key, Value value);
  // Sets `key`: in place when it exists, else inserted right after `anchor` (appended if `anchor` is absent).
  void set_after(std::string_view anchor, std::string key, Value value);
  bool erase(std::string_view key);

  template <typename T>
  Expected<T> get(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) return missing(key);
    if (auto x = v->get<T>()) return *x;
    return wrong_type(key, *v, value_type_name(value_type_of<T>()));
  }
  // The value if present, `fallback` if absent; an error only for a present key of the wrong type.
  template <typename T>
  Expected<T> get_or(std::string_view key, T fallback) const {
    if (!contains(key)) return fallback;
    return get<T>(key);
  }
  Expected<std::string> get_string(std::string_view key) const;
  // Any integer type (llama.cpp accepts u32 or i32 for the same hyperparameter).
  Expected<int64_t> get_integer(std::string_view key) const;
  Expected<int64_t> get_integer_or(std::string_view key, int64_t fallback) const;
  // An array of any integer element type, widened.
  Expected<std::vector<int64_t>> get_integer_array(std::string_view key) const;
  // An array of strings, by reference into this Metadata.
  Expected<const std::vector<std::string>*> get_string_array(std::string_view key) const;

 private:
  static Status missing(std::string_view key);
  static Status wrong_type(std::string_view key, const Value& v, std::string_view wanted);
  void reindex();

  std::vector<KeyValue> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace mtp
