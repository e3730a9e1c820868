// Pre-tokenizer: splits text into the pieces BPE runs on, with the regex `tokenizer.ggml.pre` names. Private
// to the tokenizer library (keeps PCRE2 out of the public headers).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace mtp::tokenizer_detail {

// The pattern as Hugging Face tokenizer.json spells it (Oniguruma syntax), for a `tokenizer.ggml.pre` name;
// nullptr if unknown. The Python reference uses these strings verbatim.
const char* hf_pattern_for_pre(std::string_view pre);

// Rewrites an HF pattern for PCRE2 with UCP: every \s / \S becomes an explicit Unicode White_Space class (or
// its complement), which is what Oniguruma's \s means; PCRE2's own UCP \s differs in U+0085 and U+180E.
std::string hf_pattern_to_pcre2(std::string_view hf_pattern);

// A piece of the input: [begin, begin + size).
struct Span {
  size_t begin;
  size_t size;
};

class PreTokenizer {
 public:
  static Expected<PreTokenizer> create(std::string_view pre);
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Appends the pieces of `text` (arbitrary bytes) to `out`, in order, covering every byte exactly once:
  // regex matches, the gaps between them (HF Split "isolated"), and each maximal run of bytes that is not
  // well-formed UTF-8 (the regex only ever sees valid UTF-8). Thread-safe.
  void split(std::string_view text, std::vector<Span>* out) const;

 private:
  struct Impl;
  explicit PreTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtp::tokenizer_detail
