#include "tokenizer/gguf_vocab.h"

#include <cstdio>

namespace mtp {
namespace {

Status read_optional_id(const Metadata& md, const char* key, std::optional<int32_t>* out) {
  if (!md.contains(key)) return Status::Ok();
  MTP_ASSIGN_OR_RETURN(int64_t v, md.get_integer(key));
  if (v < 0 || v > INT32_MAX) return corrupt("metadata key '", key, "' is ", v, ", not a token id");
  *out = static_cast<int32_t>(v);
  return Status::Ok();
}

class Fnv1a {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  // Length-prefixed, so that ["ab", "c"] and ["a", "bc"] differ.
  void add_string(const std::string& s) {
    uint64_t n = s.size();
    add(&n, sizeof(n));
    add(s.data(), s.size());
  }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h_));
    return buf;
  }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace

Expected<Vocab> vocab_from_gguf(const Metadata& md) {
  Vocab v;
  MTP_ASSIGN_OR_RETURN(v.model, md.get_string("tokenizer.ggml.model"));
  if (md.contains("tokenizer.ggml.pre")) {
    MTP_ASSIGN_OR_RETURN(v.pre, md.get_string("tokenizer.ggml.pre"));
  } else {
    v.pre = "default";
  }
  MTP_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens, md.get_string_array("tokenizer.ggml.tokens"));
  v.tokens = *tokens;
  if (md.contains("tokenizer.ggml.merges")) {
    MTP_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                         md.get_string_array("tokenizer.ggml.merges"));
    v.merges = *merges;
  }
  if (md.contains("tokenizer.ggml.token_type")) {
    MTP_ASSIGN_OR_RETURN(std::vector<int64_t> types, md.get_integer_array("tokenizer.ggml.token_type"));
    v.token_types.reserve(types.size());
    for (int64_t t : types) v.token_types.push_back(static_cast<int32_t>(t));
  }
  MTP_RETURN_IF_ERROR(read_optional_id(md, "tokenizer.ggml.bos_token_id", &v.bos_id));
  MTP_RETURN_IF_ERROR(read_optional_id(md, "tokenizer.ggml.eos_token_id", &v.eos_id));
  MTP_RETURN_IF_ERROR(read_optional_id(md, "tokenizer.ggml.padding_token_id", &v.pad_id));
  MTP_ASSIGN_OR_RETURN(v.add_bos, md.get_or<bool>("tokenizer.ggml.add_bos_token", false));
  MTP_ASSIGN_OR_RETURN(v.add_eos, md.get_or<bool>("tokenizer.ggml.add_eos_token", false));
  return v;
}

void write_vocab_to_gguf(const Vocab& v, Metadata& md) {
  md.set("tokenizer.ggml.model", Value::string(v.model));
  md.set("tokenizer.ggml.pre", Value::string(v.pre));
  md.set("tokenizer.ggml.tokens", Value::string_array(v.tokens));
  if (!v.token_types.empty()) md.set("tokenizer.ggml.token_type", Value::array<int32_t>(v.token_types));
  md.set("tokenizer.ggml.merges", Value::string_array(v.merges));
  if (v.eos_id) md.set("tokenizer.ggml.eos_token_id", Value::scalar(static_cast<uint32_t>(*v.eos_id)));
  if (v.pad_id) md.set("tokenizer.ggml.padding_token_id", Value::scalar(static_cast<uint32_t>(*v.pad_id)));
  if (v.bos_id) md.set("tokenizer.ggml.bos_token_id", Value::scalar(static_cast<uint32_t>(*v.bos_id)));
  md.set("tokenizer.ggml.add_bos_token", Value::scalar(v.add_bos));
}

Expected<std::string> tokenizer_fingerprint(const Metadata& md) {
  MTP_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens, md.get_string_array("tokenizer.ggml.tokens"));
  Fnv1a h;
  auto model = md.get_string("tokenizer.ggml.model");
  h.add_string(model.ok() ? *model : std::string());
  for (const auto& t : *tokens) h.add_string(t);
  if (const Value* types = md.find("tokenizer.ggml.token_type"); types && types->is_array()) {
    for (uint64_t i = 0; i < types->size(); ++i) {
      int64_t t = types->integer_element(i).value_or(-1);
      h.add(&t, sizeof(t));
    }
  }
  if (auto merges = md.get_string_array("tokenizer.ggml.merges"); merges.ok()) {
    for (const auto& m : **merges) h.add_string(m);
  }
  return h.hex();
}

}  // namespace mtp
