// Small helpers for writing GBNF expressions as text (the JSON Schema compiler's number ranges and patterns).
#pragma once

#include <string>
#include <vector>

namespace mtp::grammar::detail {

// a then b, either possibly empty.
inline std::string gbnf_join(const std::string& a, const std::string& b) {
  return a.empty() ? b : b.empty() ? a : a + " " + b;
}

// Any one of parts: parts[0] alone, or a parenthesised alternation; empty for no parts.
inline std::string gbnf_alternatives(const std::vector<std::string>& parts) {
  if (parts.size() == 1) return parts[0];
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "(" : " | ") + p;
  return out.empty() ? out : out + ")";
}

}  // namespace mtp::grammar::detail
