#include "tokenizer/byte_level.h"

#include <array>

namespace mtp {
namespace {

// Code point <-> byte tables, built once. GPT-2 (openai/gpt-2 encoder.py, bytes_to_unicode): bytes that are
// printable and not space keep their Latin-1 code point; the rest, in byte order, get 256, 257, ...
struct ByteTables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> cp_to_byte;  // the largest code point used is 256 + 67 = 323

  ByteTables() {
    cp_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int cp = keep ? b : next++;
      cp_to_byte[cp] = static_cast<int16_t>(b);
      std::string& s = byte_to_utf8[b];
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {  // all code points here are below 0x800: two bytes
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

inline bool is_cont(uint8_t c) {
  return (c & 0xC0) == 0x80;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) {
  return tables().byte_to_utf8[b];
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const ByteTables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  const ByteTables& t = tables();
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t c0 = static_cast<uint8_t>(text[i]);
    int cp;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if (utf8_char_len(text, i) == 2) {
      cp = ((c0 & 0x1F) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // 3- and 4-byte characters are never in the alphabet
    }
    if (cp >= static_cast<int>(t.cp_to_byte.size()) || t.cp_to_byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.cp_to_byte[cp]));
  }
  return out;
}

size_t utf8_char_len(std::string_view s, size_t i) {
  const size_t n = s.size() - i;
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = at(0);
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;  // continuation byte or overlong 2-byte lead
  if (c < 0xE0) return n >= 2 && is_cont(at(1)) ? 2 : 0;
  if (c < 0xF0) {
    if (n < 3) return 0;
    const uint8_t c1 = at(1);
    // E0 needs A0..BF (no overlongs), ED needs 80..9F (no surrogates).
    const bool ok1 = c == 0xE0   ? (c1 >= 0xA0 && c1 <= 0xBF)
                     : c == 0xED ? (c1 >= 0x80 && c1 <= 0x9F)
                                 : is_cont(c1);
    return ok1 && is_cont(at(2)) ? 3 : 0;
  }
  if (c < 0xF5) {
    if (n < 4) return 0;
    const uint8_t c1 = at(1);
    // F0 needs 90..BF (no overlongs), F4 needs 80..8F (at most U+10FFFF).
    const bool ok1 = c == 0xF0   ? (c1 >= 0x90 && c1 <= 0xBF)
                     : c == 0xF4 ? (c1 >= 0x80 && c1 <= 0x8F)
                                 : is_cont(c1);
    return ok1 && is_cont(at(2)) && is_cont(at(3)) ? 4 : 0;
  }
  return 0;
}

size_t utf8_emittable_prefix(std::string_view s) {
  // Only the last (up to 3) bytes can be the start of an incomplete character; look for its lead byte.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (is_cont(c)) continue;
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (c < 0xC2 || c >= 0xF5 || need <= back) return n;  // ASCII, invalid lead, or already complete
    // Hold back only if the bytes seen so far are a valid prefix: pad with the smallest legal continuation
    // bytes and check the full sequence.
    std::string probe(s.substr(i));
    while (probe.size() < need) probe.push_back(static_cast<char>(0x80));
    if (c == 0xE0 && back == 1) probe[1] = static_cast<char>(0xA0);
    if (c == 0xF0 && back == 1) probe[1] = static_cast<char>(0x90);
    return utf8_char_len(probe, 0) == need ? i : n;
  }
  return n;
}

}  // namespace mtp
