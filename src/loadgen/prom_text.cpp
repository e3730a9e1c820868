// The Prometheus text format, version 0.0.4 (prom_text.h): a hand-written scanner over one line at a time,
// so a malformed body is an error with its line number, never an exception.
#include "loadgen/prom_text.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace mtp::loadgen {
namespace {

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}

// Reads one sample line from left to right; the first problem is kept in `error`.
class LineScanner {
 public:
  explicit LineScanner(std::string_view line) : s_(line) {}

  std::string parse(PromSample& out) {
    out.name = name();
    if (out.name.empty()) return "no metric name";
    skip_blanks();
    if (peek() == '{') {
      if (std::string why = labels(out); !why.empty()) return why;
    }
    skip_blanks();
    const std::string_view value = token();
    if (value.empty()) return str_cat("no value after '", out.name, "'");
    if (!number(value, out.value)) return str_cat("value '", value, "' is not a number");
    skip_blanks();
    // An optional timestamp (integer milliseconds); anything else after the value is an error.
    const std::string_view stamp = token();
    double ignored = 0;
    if (!stamp.empty() && !number(stamp, ignored)) return str_cat("'", stamp, "' after the value");
    skip_blanks();
    if (pos_ < s_.size()) return "text after the timestamp";
    return "";
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_blanks() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  std::string name() {
    const size_t start = pos_;
    if (!is_name_start(peek())) return "";
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }
  std::string_view token() {
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != ' ' && s_[pos_] != '\t') ++pos_;
    return s_.substr(start, pos_ - start);
  }

  // `{a="x",b="y"}`, a trailing comma allowed (the format permits it).
  std::string labels(PromSample& out) {
    ++pos_;  // '{'
    for (;;) {
      skip_blanks();
      if (peek() == '}') {
        ++pos_;
        return "";
      }
      std::string key = name();
      if (key.empty()) return "a label without a name";
      skip_blanks();
      if (peek() != '=') return str_cat("no '=' after label '", key, "'");
      ++pos_;
      skip_blanks();
      std::string value;
      if (std::string why = quoted(value); !why.empty()) return why;
      out.labels.emplace_back(std::move(key), std::move(value));
      skip_blanks();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != '}') {
        return "labels not closed by '}'";
      }
    }
  }

  // A double-quoted label value with the format's three escapes: \\, \" and \n.
  std::string quoted(std::string& value) {
    if (peek() != '"') return "a label value that is not quoted";
    for (++pos_; pos_ < s_.size(); ++pos_) {
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return "";
      }
      if (c == '\\' && pos_ + 1 < s_.size()) {
        const char next = s_[++pos_];
        value += next == 'n' ? '\n' : next;
      } else {
        value += c;
      }
    }
    return "a label value without its closing quote";
  }

  // A Go-style float: decimal or exponent notation, NaN, +Inf, -Inf.
  static bool number(std::string_view text, double& out) {
    const double inf = std::numeric_limits<double>::infinity();
    if (text == "NaN" || text == "+Inf" || text == "Inf" || text == "-Inf") {
      out = text == "NaN" ? std::numeric_limits<double>::quiet_NaN() : text == "-Inf" ? -inf : inf;
      return true;
    }
    const std::string copy(text);  // strtod needs the terminator
    char* end = nullptr;
    out = std::strtod(copy.c_str(), &end);
    // strtod would also take "inf", "nan" and hex floats; the format has none of those spellings.
    const bool plain = copy.find_first_not_of("0123456789+-.eE") == std::string::npos;
    return plain && end == copy.c_str() + copy.size() && !copy.empty();
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::string PromSample::label(std::string_view key) const {
  for (const auto& [k, v] : labels)
    if (k == key) return v;
  return "";
}

Expected<std::vector<PromSample>> parse_prom_text(std::string_view text) {
  std::vector<PromSample> out;
  int64_t n = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++n;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    PromSample sample;
    if (std::string why = LineScanner(line.substr(first)).parse(sample); !why.empty())
      return corrupt("line ", n, ": ", why);
    out.push_back(std::move(sample));
  }
  return out;
}

}  // namespace mtp::loadgen
