// GBNF for JSON numbers between bounds (the JSON Schema compiler's "minimum", "maximum", "exclusiveMinimum"
// and "exclusiveMaximum"), exact in their decimal text: a string matches if and only if the number it writes
// lies within the bounds, and so does the double it parses to (the bounds are whole numbers of at most
// kMaxBoundDigits digits, so doubles hold them exactly and parsing, which rounds monotonically, cannot carry
// a number across an inclusive bound; next to an exclusive bound the fraction is cut to 15 significant
// digits, which parse to a double other than the bound's).
//
// The text is the same as the unbounded rules' (json_schema.cpp): an optional '-', an integral part without
// leading zeros of at most 16 digits, for numbers a fraction of at most 16 digits; bounded numbers have no
// exponent, and no "-0".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mtp::grammar::detail {

// Bounds beyond this many digits are refused by the caller.
constexpr int kMaxBoundDigits = 15;

struct NumberBound {
  int64_t value = 0;
  bool exclusive = false;
};

// The numbers within the bounds (an absent bound: as far as 16 integral digits reach), integers only when
// `integers`, as a GBNF expression without the trailing whitespace; empty when there are none. Bounds must be
// at most kMaxBoundDigits digits.
std::string number_range(std::optional<NumberBound> lo, std::optional<NumberBound> hi, bool integers);

}  // namespace mtp::grammar::detail
