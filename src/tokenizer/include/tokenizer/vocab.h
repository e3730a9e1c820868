// The tokenizer's input data, as a plain struct: exactly what a GGUF file stores under `tokenizer.ggml.*` for
// a GPT-2 style byte-level BPE vocabulary. Kept free of any file format so that the GGUF loader (gguf
// library), the BPE trainer and tests can all fill it; Tokenizer::create validates it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mtp {

// llama.cpp's token types (`tokenizer.ggml.token_type`), same numeric values so they can be copied as stored.
enum class TokenType : int32_t {
  kUndefined = 0,  // treated as normal
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special tokens (<|im_start|>): matched in the text only when parsing specials
  kUserDefined = 4,  // added tokens (<think>): always matched in the text before BPE
  kUnused = 5,       // padding entries; never produced by encode
  kByte = 6,
};

struct Vocab {
  // `tokenizer.ggml.model`; only "gpt2" (byte-level BPE) is supported.
  std::string model = "gpt2";
  // `tokenizer.ggml.pre`: selects the pre-tokenizer regex. "qwen2", "qwen35", "gpt2" and "default" (or empty,
  // as llama.cpp treats a missing key) are known.
  std::string pre = "qwen35";
  // `tokenizer.ggml.tokens`: normal tokens in GPT-2's byte-to-unicode alphabet ("Ġthe" for " the"); control
  // and user-defined tokens as their raw text ("<|im_end|>"), as llama.cpp's converter writes them.
  std::vector<std::string> tokens;
  // `tokenizer.ggml.merges`: "left right", ranked by position (first = merged first).
  std::vector<std::string> merges;
  // `tokenizer.ggml.token_type`, TokenType values; empty means every token is normal.
  std::vector<int32_t> token_types;
  std::optional<int32_t> bos_id;  // `tokenizer.ggml.bos_token_id`
  std::optional<int32_t> eos_id;  // `tokenizer.ggml.eos_token_id`
  std::optional<int32_t> pad_id;  // `tokenizer.ggml.padding_token_id`
  bool add_bos = false;           // `tokenizer.ggml.add_bos_token`
  bool add_eos = false;           // `tokenizer.ggml.add_eos_token`
  // HF BPE `ignore_merges`: a pre-token that is itself a token is emitted whole without merging. Off for
  // Qwen.
  bool ignore_merges = false;
};

}  // namespace mtp
