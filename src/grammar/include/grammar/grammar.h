// A context-free grammar in llama.cpp's GBNF, parsed and checked, laid out flat for the matcher (matcher.h).
//
// Every rule is a list of alternatives; an alternative is a run of elements in `elems` ending in a kEnd
// element. A kChars element matches one code point from a set of ranges; a kRule element expands a rule.
// Grouping, `*`, `+`, `?` and `{m,n}` become generated rules ("name-N"), as llama.cpp does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace mtp::grammar {

enum class ElemKind : uint8_t { kEnd, kChars, kRule };

struct Element {
  ElemKind kind = ElemKind::kEnd;
  uint32_t arg = 0;  // kChars: index into Grammar::char_sets; kRule: rule index
};

// Code points as sorted, disjoint, inclusive ranges (a negated class is stored as its complement).
struct CharSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool contains(uint32_t cp) const;
  bool intersects(uint32_t lo, uint32_t hi) const;
};

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct Grammar {
  std::vector<std::string> rule_names;
  std::vector<std::vector<uint32_t>> rule_alts;  // [rule][alternative] -> start index in elems
  std::vector<Element> elems;
  std::vector<CharSet> char_sets;
  uint32_t root = 0;
};

// Limits on what a grammar text may expand to, so a request cannot make the parser allocate without bound.
inline constexpr uint32_t kMaxRepetition = 4096;  // m and n of {m,n}
inline constexpr size_t kMaxGrammarElements = 1u << 20;
// And how deep what compiles to a grammar may nest (GBNF groups, JSON Schemas inside schemas, a pattern's
// groups): the parsers recurse once a level.
inline constexpr int kMaxNesting = 256;

// Parses and checks GBNF text. Errors are one line, "line:col: what" where a place is known: malformed
// syntax, an undefined or twice-defined rule, a missing root, left recursion, a rule that can never finish,
// a root that matches only the empty string.
Expected<Grammar> parse_gbnf(std::string_view text, std::string_view root = "root");

// The checks parse_gbnf runs after parsing (grammar_check.cpp); `where` gives each rule's definition place.
Status check_grammar(const Grammar& g, const std::vector<std::string>& where);

}  // namespace mtp::grammar
