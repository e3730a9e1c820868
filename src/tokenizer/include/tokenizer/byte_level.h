// GPT-2's reversible byte <-> unicode alphabet and strict UTF-8 helpers. Byte-level BPE vocabularies store
// every normal token in this alphabet (the 188 printable Latin-1 bytes map to themselves, the other 68 bytes
// to U+0100..U+0143, so that no token contains whitespace or control characters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mtp {

// UTF-8 of the alphabet character for byte `b` (" " -> "Ġ", "\n" -> "Ċ").
const std::string& byte_to_unicode(uint8_t b);

// Maps every byte of `bytes` into the alphabet ("hello world" -> "helloĠworld").
std::string bytes_to_byte_level(std::string_view bytes);

// Inverse of bytes_to_byte_level; nullopt if `text` has a character outside the alphabet or is not UTF-8.
std::optional<std::string> byte_level_to_bytes(std::string_view text);

// Length (1-4) of the well-formed UTF-8 character starting at s[i] (Unicode Table 3-7: no overlongs, no
// surrogates, at most U+10FFFF), or 0 if the bytes there do not form one.
size_t utf8_char_len(std::string_view s, size_t i);

// Number of leading bytes of `s` that a streaming consumer may emit now: everything except a trailing
// incomplete sequence that could still become a valid character when more bytes arrive.
size_t utf8_emittable_prefix(std::string_view s);

}  // namespace mtp
