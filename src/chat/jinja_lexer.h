// The lexer of the Jinja subset (private to the chat library). Whitespace control follows Jinja's lexer: `-`
// on a tag strips all whitespace on that side; trim_blocks drops the newline after a block or comment tag;
// lstrip_blocks drops spaces and tabs between a line start and a block or comment tag (`{%+` keeps them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "jinja_value.h"

namespace mtp::chat::jinja {

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type;
  std::string text;
  int line = 0;
  int64_t i = 0;
  double f = 0;
};

// Splits a template into text and tag tokens; throws Error.
std::vector<Token> lex(std::string_view source, const JinjaOptions& options);

}  // namespace mtp::chat::jinja
