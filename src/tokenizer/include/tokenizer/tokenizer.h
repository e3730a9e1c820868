// GPT-2 style byte-level BPE, matching Hugging Face `tokenizers` on the same vocabulary:
//   1. added tokens (control, unknown, user-defined) are cut out of the text first, leftmost-longest;
//   2. each remaining segment is split by the pre-tokenizer regex that Vocab::pre names (PCRE2, UTF + UCP);
//   3. each piece's bytes become GPT-2's byte-level alphabet and are merged by rank (HF's BPE::merge_all).
// Text is bytes: invalid UTF-8 is accepted and round-trips (each maximal run of bytes that are not part of a
// well-formed character is its own pre-token, BPE'd like any other). For the Qwen pre-tokenizers (qwen2,
// qwen35), each segment between added tokens is first normalized to NFC (utf8proc), as HF's Qwen
// tokenizer.json declares and llama.cpp skips: "e" + U+0301 tokenizes as the precomposed "é"; a segment that
// is not well-formed UTF-8 is left as it is. \p{L}/\p{N}/\p{M} follow the Unicode version of the PCRE2 in
// use (10.42: Unicode 14).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/vocab.h"

namespace mtp {

struct EncodeOptions {
  // Match control and unknown tokens ("<|im_start|>") in the text. User-defined tokens are always matched, as
  // HF does for non-special added tokens. Off for untrusted user content that must not inject control tokens.
  bool parse_special = true;
  std::optional<bool> add_bos;  // default: Vocab::add_bos
  std::optional<bool> add_eos;  // default: Vocab::add_eos
};

struct DecodeOptions {
  bool skip_control = false;  // drop control tokens (BOS/EOS/<|im_end|>) from the output
};

class Tokenizer {
 public:
  // Validates the vocabulary (Status kCorrupt for duplicate tokens, merges naming unknown tokens, ids out of
  // range, missing byte tokens; kUnsupported for unknown model or pre-tokenizer names) and builds the
  // lookups.
  static Expected<Tokenizer> create(Vocab vocab);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Thread-safe (const, no shared scratch).
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Concatenated bytes of the tokens. May be invalid UTF-8 (a character can be cut between token runs).
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;

  // The bytes a token stands for (byte-level alphabet undone for normal tokens; raw text for added tokens).
  const std::string& piece(int32_t id) const;

  // The pre-tokenizer's pieces of `text` (no special-token handling), for tests and `mtp tokenize`.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  int32_t n_tokens() const;
  bool valid_id(int32_t id) const { return id >= 0 && id < n_tokens(); }
  TokenType token_type(int32_t id) const;
  // Id of a token by its stored text (vocab form, e.g. "Ġthe"), if present.
  std::optional<int32_t> find_token(std::string_view text) const;
  const Vocab& vocab() const;
  std::optional<int32_t> bos() const { return vocab().bos_id; }
  std::optional<int32_t> eos() const { return vocab().eos_id; }
  std::optional<int32_t> pad() const { return vocab().pad_id; }

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer for streaming: push() returns only text that ends on a complete UTF-8 character, so
// a character split across tokens is emitted once, when its last byte arrives. Bytes that can never complete
// a character (invalid UTF-8) are emitted as they are, so a stream of arbitrary bytes never stalls. flush()
// returns whatever is still held (call it at end of generation).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options = {})
      : tokenizer_(&tokenizer), options_(options) {}

  std::string push(int32_t id);
  std::string flush();
  void reset() { pending_.clear(); }
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::string pending_;
};

}  // namespace mtp
