#include "gguf/metadata.h"

namespace mtp {

const Value* Metadata::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].value;
}

void Metadata::set(std::string key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].value = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.push_back({std::move(key), std::move(value)});
}

void Metadata::set_last(std::string key, Value value) {
  erase(key);
  set(std::move(key), std::move(value));
}

void Metadata::set_after(std::string_view anchor, std::string key, Value value) {
  auto anchor_it = index_.find(std::string(anchor));
  if (contains(key) || anchor_it == index_.end()) {
    set(std::move(key), std::move(value));
    return;
  }
  entries_.insert(entries_.begin() + static_cast<std::ptrdiff_t>(anchor_it->second) + 1,
                  {std::move(key), std::move(value)});
  reindex();
}

bool Metadata::erase(std::string_view key) {
  auto it = index_.find(std::string(key));
  if (it == index_.end()) return false;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(it->second));
  reindex();
  return true;
}

void Metadata::reindex() {
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].key, i);
}

Status Metadata::missing(std::string_view key) {
  return not_found("metadata key '", key, "' is missing");
}

Status Metadata::wrong_type(std::string_view key, const Value& v, std::string_view wanted) {
  std::string has(value_type_name(v.type()));
  if (v.is_array()) has = str_cat("array of ", value_type_name(v.elem_type()));
  return corrupt("metadata key '", key, "' has type ", has, ", expected ", wanted);
}

Expected<std::string> Metadata::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (const std::string* s = v->get_string()) return *s;
  return wrong_type(key, *v, "string");
}

Expected<int64_t> Metadata::get_integer(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (auto x = v->get_integer()) return *x;
  return wrong_type(key, *v, "an integer");
}

Expected<int64_t> Metadata::get_integer_or(std::string_view key, int64_t fallback) const {
  if (!contains(key)) return fallback;
  return get_integer(key);
}

Expected<std::vector<int64_t>> Metadata::get_integer_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (!v->is_array() || !is_integer(v->elem_type())) return wrong_type(key, *v, "an array of integers");
  std::vector<int64_t> out(v->size());
  for (uint64_t i = 0; i < v->size(); ++i) {
    auto x = v->integer_element(i);
    if (!x) return corrupt("metadata key '", key, "' element ", i, " does not fit in int64");
    out[i] = *x;
  }
  return out;
}

Expected<const std::vector<std::string>*> Metadata::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return missing(key);
  if (!v->is_array() || v->elem_type() != ValueType::String)
    return wrong_type(key, *v, "an array of strings");
  return &v->strings();
}

}  // namespace mtp
