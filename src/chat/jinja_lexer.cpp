// The Jinja lexer: text, tags, and the tokens of expressions inside tags.
#include "jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mtp::chat::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

class Lexer {
 public:
  Lexer(std::string_view src, const JinjaOptions& opt) : opt_(opt) {
    // Newlines are normalized to \n, and one trailing newline is dropped (keep_trailing_newline=False).
    src_.reserve(src.size());
    for (size_t k = 0; k < src.size(); ++k) {
      if (src[k] == '\r') {
        src_ += '\n';
        if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
      } else {
        src_ += src[k];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      std::string text = src_.substr(pos, tag - pos);
      if (tag < src_.size()) {
        char kind = src_[tag + 1];
        char sign = tag + 2 < src_.size() ? src_[tag + 2] : 0;
        if (sign == '-') {
          while (!text.empty() && is_space(text.back())) text.pop_back();
        } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
          size_t l_pos = text.rfind('\n');
          l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
          bool line_starting = pos == 0 || src_[pos - 1] == '\n';
          if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
              std::all_of(text.begin() + static_cast<long>(l_pos), text.end(), is_space)) {
            text.resize(l_pos);
          }
        }
      }
      if (!text.empty()) push(Token::Type::kText, text, line_at(pos));
      if (tag >= src_.size()) break;
      pos = lex_tag(tag);
    }
    push(Token::Type::kEof, "", line_at(src_.size()));
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t pos) const {
    for (size_t k = pos; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return src_.size();
  }

  int line_at(size_t pos) {
    while (line_pos_ < pos && line_pos_ < src_.size()) {
      if (src_[line_pos_++] == '\n') ++line_;
    }
    return line_;
  }

  void push(Token::Type t, std::string text, int line) { tokens_.push_back(Token{t, std::move(text), line}); }

  // Skips what follows a tag's end: all whitespace after `-`, one newline after a block/comment
  // (trim_blocks).
  size_t after_end(size_t pos, bool minus, bool plus, bool block) {
    if (minus) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
    } else if (block && !plus && opt_.trim_blocks && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  size_t lex_tag(size_t tag) {
    int line = line_at(tag);
    char kind = src_[tag + 1];
    size_t pos = tag + 2;
    if (pos < src_.size() && (src_[pos] == '-' || src_[pos] == '+')) ++pos;
    if (kind == '#') {
      size_t end = src_.find("#}", pos);
      if (end == std::string::npos) fail(line, "unclosed comment '{#' (missing '#}')");
      bool minus = end > pos && src_[end - 1] == '-';
      return after_end(end + 2, minus, false, true);
    }
    const char* close = kind == '{' ? "}}" : "%}";
    push(kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", line);
    size_t first_token = tokens_.size();
    while (true) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
      if (pos >= src_.size()) {
        fail(line, str_cat("unclosed ", kind == '{' ? "'{{' (missing '}}')" : "'{%' (missing '%}')"));
      }
      // As Jinja's lexer: the end delimiter only counts outside brackets ("{{ {'a': {}} }}").
      bool minus = src_.compare(pos, 1, "-") == 0 && src_.compare(pos + 1, 2, close) == 0;
      bool plus = src_.compare(pos, 1, "+") == 0 && src_.compare(pos + 1, 2, close) == 0 && kind == '%';
      if (brackets_.empty() && (minus || plus || src_.compare(pos, 2, close) == 0)) {
        push(kind == '{' ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", line_at(pos));
        size_t next = after_end(pos + 2 + (minus || plus ? 1 : 0), minus, plus, kind == '%');
        if (kind == '%' && tokens_.size() == first_token + 2 &&
            tokens_[first_token].type == Token::Type::kName && tokens_[first_token].text == "raw") {
          return lex_raw(next, line);
        }
        return next;
      }
      pos = lex_token(pos);
    }
  }

  // {% raw %}...{% endraw %}: the text in between is data.
  size_t lex_raw(size_t pos, int line) {
    tokens_.resize(tokens_.size() - 3);  // drop BlockBegin, 'raw', BlockEnd
    for (size_t k = pos; k < src_.size(); ++k) {
      if (src_.compare(k, 2, "{%") != 0) continue;
      size_t p = k + 2;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && is_space(src_[p])) ++p;
      bool minus = src_.compare(p, 3, "-%}") == 0;
      if (!minus && src_.compare(p, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos, k - pos);
      if (src_[k + 2] == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      }
      if (!text.empty()) push(Token::Type::kText, text, line);
      return after_end(p + (minus ? 3 : 2), minus, false, true);
    }
    fail(line, "unclosed 'raw' block (missing '{% endraw %}')");
  }

  size_t lex_token(size_t pos) {
    int line = line_at(pos);
    char c = src_[pos];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos;
      while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
      push(Token::Type::kName, src_.substr(pos, end - pos), line);
      return end;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(pos, line);
    if (c == '\'' || c == '"') return lex_string(pos, line);
    static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                       ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", ";"};
    for (const char* op : kOps) {
      size_t n = std::strlen(op);
      if (src_.compare(pos, n, op) == 0) {
        if (n == 1 && (c == '(' || c == '[' || c == '{')) brackets_.push_back(c);
        if (n == 1 && (c == ')' || c == ']' || c == '}')) {
          char open = c == ')' ? '(' : c == ']' ? '[' : '{';
          if (brackets_.empty() || brackets_.back() != open) fail(line, str_cat("unexpected '", op, "'"));
          brackets_.pop_back();
        }
        push(Token::Type::kOp, op, line);
        return pos + n;
      }
    }
    fail(line, str_cat("unexpected character '", std::string(1, c), "'"));
  }

  size_t lex_number(size_t pos, int line) {
    size_t end = pos;
    bool is_float = false;
    auto digits = [&] {
      while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
    };
    digits();
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        end = e;
        digits();
      }
    }
    std::string text;
    for (size_t k = pos; k < end; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    Token t{is_float ? Token::Type::kFloat : Token::Type::kInt, text, line};
    if (is_float) {
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.i = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(line, str_cat("integer literal out of range: ", text));
    }
    tokens_.push_back(std::move(t));
    return end;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Python string literal escapes, as Jinja decodes them (unicode-escape); unknown escapes stay as written.
  size_t lex_string(size_t pos, int line) {
    char q = src_[pos];
    std::string out;
    size_t k = pos + 1;
    while (true) {
      if (k >= src_.size()) fail(line, "unterminated string literal");
      char c = src_[k];
      if (c == q) break;
      if (c != '\\' || k + 1 >= src_.size()) {
        out += c;
        ++k;
        continue;
      }
      char e = src_[k + 1];
      k += 2;
      static const char kSimple[] = "n\nt\tr\rb\bf\fv\va\a0\0";
      const char* s = std::strchr("ntrbfva0", e);
      if (e && s) {
        out += kSimple[2 * (s - "ntrbfva0") + 1];
      } else if (e == '\\' || e == '\'' || e == '"') {
        out += e;
      } else if (e == '\n') {
        // line continuation
      } else if (e == 'x' || e == 'u' || e == 'U') {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (k + n > src_.size()) fail(line, "truncated \\x/\\u escape in string literal");
        uint32_t cp = 0;
        for (size_t d = 0; d < n; ++d) {
          char h = src_[k + d];
          if (!std::isxdigit(static_cast<unsigned char>(h)))
            fail(line, "bad \\x/\\u escape in string literal");
          cp = cp * 16 + static_cast<uint32_t>(
                             std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (cp > 0x10FFFF) fail(line, "escape beyond U+10FFFF in string literal");
        append_utf8(out, cp);
        k += n;
      } else {
        out += '\\';
        out += e;
      }
    }
    push(Token::Type::kString, out, line);
    return k + 1;
  }

  std::string src_;
  const JinjaOptions& opt_;
  std::vector<Token> tokens_;
  std::vector<char> brackets_;  // open brackets inside the current tag
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const JinjaOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace mtp::chat::jinja
