// The bridge between a Vocab and the `tokenizer.ggml.*` metadata of a GGUF file, plus the tokenizer identity
// that `mtp graft` compares between a trunk and a head.
#pragma once

#include <string>

#include "base/status.h"
#include "gguf/metadata.h"
#include "tokenizer/vocab.h"

namespace mtp {

// Reads the vocabulary keys; missing optional keys take llama.cpp's defaults. Type errors name the key.
Expected<Vocab> vocab_from_gguf(const Metadata& md);
// Writes the keys with the types llama.cpp's converter uses (ids as u32, token types as i32).
void write_vocab_to_gguf(const Vocab& vocab, Metadata& md);

// A 64-bit FNV-1a digest (hex) of the model name, token list, token types and merges: two files with the same
// fingerprint tokenize identically. Not a security hash; it guards against grafting across vocabularies.
// Errors if the file has no tokenizer.ggml.tokens.
Expected<std::string> tokenizer_fingerprint(const Metadata& md);

}  // namespace mtp
