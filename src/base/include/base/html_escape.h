// Escapes text for HTML and XML, attributes included: & < > " and ' become entities (what Jinja's `escape`
// filter writes, and what a JUnit report's attributes need).
#pragma once

#include <string>

namespace mtp {

inline std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace mtp
