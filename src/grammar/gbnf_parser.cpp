// GBNF parser: text -> Grammar (grammar.h). The language is llama.cpp's: `name ::= alternatives`, literals in
// double quotes, character classes in brackets (ranges, `^` negation), `.` for any character, parentheses,
// `|`, the postfix operators `*` `+` `?` `{m}` `{m,}` `{m,n}`, and `#` comments. A rule ends at a newline
// unless inside parentheses or right after `|`.
#include <algorithm>
#include <map>
#include <set>

#include "grammar/grammar.h"

namespace mtp::grammar {

bool CharSet::contains(uint32_t cp) const {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const std::pair<uint32_t, uint32_t>& r) { return v < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->second;
}

bool CharSet::intersects(uint32_t lo, uint32_t hi) const {
  for (const auto& [a, b] : ranges)
    if (a <= hi && lo <= b) return true;
  return false;
}

namespace {

using Sequence = std::vector<Element>;

// Sorts and merges ranges; with `negated`, returns the complement within [0, kMaxCodePoint].
CharSet make_char_set(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end());
  CharSet merged;
  for (const auto& r : ranges) {
    if (!merged.ranges.empty() && r.first <= merged.ranges.back().second + 1)
      merged.ranges.back().second = std::max(merged.ranges.back().second, r.second);
    else
      merged.ranges.push_back(r);
  }
  if (!negated) return merged;
  CharSet out;
  uint32_t next = 0;
  for (const auto& [a, b] : merged.ranges) {
    if (a > next) out.ranges.emplace_back(next, a - 1);
    next = b + 1;
  }
  if (next <= kMaxCodePoint) out.ranges.emplace_back(next, kMaxCodePoint);
  return out;
}

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Expected<Grammar> run(std::string_view root_name) {
    skip_space(true);
    while (pos_ < text_.size()) {
      MTP_RETURN_IF_ERROR(parse_rule());
      skip_space(true);
    }
    if (defined_.empty()) return invalid_argument("empty grammar: no rules");
    for (size_t r = 0; r < names_.size(); ++r)
      if (!defined_.count(static_cast<uint32_t>(r)))
        return invalid_argument(where_[r], ": undefined rule '", names_[r], "'");
    auto root = ids_.find(std::string(root_name));
    if (root == ids_.end()) return invalid_argument("grammar has no rule '", root_name, "'");
    Grammar g = flatten(root->second);
    if (g.elems.size() > kMaxGrammarElements)
      return invalid_argument("grammar expands to ", g.elems.size(), " elements; at most ",
                              kMaxGrammarElements, " are allowed");
    MTP_RETURN_IF_ERROR(check_grammar(g, where_));
    return g;
  }

 private:
  std::string place(size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    return str_cat(line, ":", col);
  }
  template <typename... Args>
  Status error_at(size_t at, const Args&... args) const {
    return invalid_argument(place(at), ": ", args...);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  // Skips blanks and comments; newlines too when `newline_ok`.
  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
        ++pos_;
      } else {
        return;
      }
    }
  }

  uint32_t rule_id(const std::string& name, size_t at) {
    auto [it, inserted] = ids_.emplace(name, static_cast<uint32_t>(names_.size()));
    if (inserted) {
      names_.push_back(name);
      where_.push_back(place(at));
      alts_.emplace_back();
    }
    return it->second;
  }
  uint32_t new_rule(const std::string& base) {
    std::string name;
    do name = str_cat(base, "-", ++generated_);
    while (ids_.count(name));
    const uint32_t id = rule_id(name, pos_);
    defined_.insert(id);
    return id;
  }
  uint32_t add_chars(CharSet set) {
    char_sets_.push_back(std::move(set));
    return static_cast<uint32_t>(char_sets_.size() - 1);
  }

  Status parse_rule() {
    const size_t start = pos_;
    std::string name;
    while (!at_end() && is_word_char(peek())) name += text_[pos_++];
    if (name.empty()) return error_at(start, "expected a rule name, found '", peek(), "'");
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") return error_at(pos_, "expected '::=' after rule name '", name, "'");
    pos_ += 3;
    const uint32_t id = rule_id(name, start);
    if (!defined_.insert(id).second) return error_at(start, "rule '", name, "' is defined twice");
    where_[id] = place(start);
    current_ = name;
    skip_space(true);
    std::vector<Sequence> alts;
    MTP_RETURN_IF_ERROR(parse_alternates(0, alts));
    alts_[id] = std::move(alts);
    if (!at_end() && peek() != '\n') return error_at(pos_, "unexpected '", peek(), "' in rule '", name, "'");
    return Status::Ok();
  }

  Status parse_alternates(int depth, std::vector<Sequence>& alts) {
    alts.emplace_back();
    MTP_RETURN_IF_ERROR(parse_sequence(depth, alts.back()));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alts.emplace_back();
      MTP_RETURN_IF_ERROR(parse_sequence(depth, alts.back()));
    }
    return Status::Ok();
  }

  Status parse_sequence(int depth, Sequence& seq) {
    size_t last_start = seq.size();
    bool has_last = false;
    while (!at_end()) {
      const char c = peek();
      const size_t item_start = seq.size();
      if (c == '"') {
        MTP_RETURN_IF_ERROR(parse_literal(seq));
      } else if (c == '[') {
        MTP_RETURN_IF_ERROR(parse_class(seq));
      } else if (c == '.') {
        ++pos_;
        seq.push_back({ElemKind::kChars, add_chars(make_char_set({{0, kMaxCodePoint}}, false))});
      } else if (c == '(') {
        MTP_RETURN_IF_ERROR(parse_group(depth, seq));
      } else if (is_word_char(c)) {
        const size_t at = pos_;
        std::string name;
        while (!at_end() && is_word_char(peek())) name += text_[pos_++];
        skip_space(depth > 0);
        if (text_.substr(pos_, 3) == "::=") return error_at(at, "missing newline before rule '", name, "'");
        seq.push_back({ElemKind::kRule, rule_id(name, at)});
        last_start = item_start;
        has_last = true;
        continue;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!has_last) return error_at(pos_, "'", c, "' with nothing before it to repeat");
        MTP_RETURN_IF_ERROR(parse_repetition(seq, last_start));
      } else if (c == '<') {
        return error_at(pos_, "token references (<...>) are not supported");
      } else {
        break;
      }
      if (c != '*' && c != '+' && c != '?' && c != '{') last_start = item_start;
      has_last = true;
      skip_space(depth > 0);
    }
    return Status::Ok();
  }

  Status parse_group(int depth, Sequence& seq) {
    if (depth >= kMaxNesting) return error_at(pos_, "groups nested deeper than ", kMaxNesting);
    const size_t open = pos_++;
    skip_space(true);
    std::vector<Sequence> alts;
    MTP_RETURN_IF_ERROR(parse_alternates(depth + 1, alts));
    if (peek() != ')') return error_at(at_end() ? open : pos_, "unclosed '(' (opened at ", place(open), ")");
    ++pos_;
    const uint32_t id = new_rule(current_);
    alts_[id] = std::move(alts);
    seq.push_back({ElemKind::kRule, id});
    return Status::Ok();
  }

  // One code point of a literal or class, with llama.cpp's escapes.
  Expected<uint32_t> parse_char() {
    const size_t at = pos_;
    if (peek() == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n':
          return uint32_t{'\n'};
        case 'r':
          return uint32_t{'\r'};
        case 't':
          return uint32_t{'\t'};
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
          return uint32_t(e);
        case 'x':
          return parse_hex(2, at);
        case 'u':
          return parse_hex(4, at);
        case 'U':
          return parse_hex(8, at);
        default:
          return error_at(at, "unknown escape '\\", e, "'");
      }
    }
    return decode_utf8(at);
  }
  Expected<uint32_t> parse_hex(int digits, size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      int d = h >= '0' && h <= '9'   ? h - '0'
              : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                     : -1;
      if (d < 0) return error_at(at, "expected ", digits, " hex digits in escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodePoint) return error_at(at, "code point ", v, " is beyond U+10FFFF");
    return v;
  }
  Expected<uint32_t> decode_utf8(size_t at) {
    const auto b0 = static_cast<unsigned char>(text_[pos_++]);
    int more = b0 < 0x80             ? 0
               : (b0 & 0xE0) == 0xC0 ? 1
               : (b0 & 0xF0) == 0xE0 ? 2
               : (b0 & 0xF8) == 0xF0 ? 3
                                     : -1;
    if (more < 0) return error_at(at, "invalid UTF-8 in grammar text");
    uint32_t cp = more == 0 ? b0 : b0 & (0x3F >> more);
    for (int i = 0; i < more; ++i) {
      if (at_end() || (static_cast<unsigned char>(peek()) & 0xC0) != 0x80)
        return error_at(at, "invalid UTF-8 in grammar text");
      cp = (cp << 6) | (static_cast<unsigned char>(text_[pos_++]) & 0x3F);
    }
    return cp;
  }

  Status parse_literal(Sequence& seq) {
    const size_t open = pos_++;
    while (peek() != '"') {
      if (at_end() || peek() == '\n') return error_at(open, "unterminated string literal");
      auto cp = parse_char();
      if (!cp) return cp.status();
      seq.push_back({ElemKind::kChars, add_chars(make_char_set({{*cp, *cp}}, false))});
    }
    ++pos_;
    return Status::Ok();
  }

  Status parse_class(Sequence& seq) {
    const size_t open = pos_++;
    const bool negated = peek() == '^';
    if (negated) ++pos_;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (peek() != ']') {
      if (at_end() || peek() == '\n') return error_at(open, "unterminated character class");
      auto lo = parse_char();
      if (!lo) return lo.status();
      uint32_t hi = *lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        const size_t at = pos_;
        auto h = parse_char();
        if (!h) return h.status();
        if (*h < *lo) return error_at(at, "range end before its start in character class");
        hi = *h;
      }
      ranges.emplace_back(*lo, hi);
    }
    ++pos_;
    seq.push_back({ElemKind::kChars, add_chars(make_char_set(std::move(ranges), negated))});
    return Status::Ok();
  }

  // Reads {m}, {m,} or {m,n}; n = UINT32_MAX for no upper bound.
  Status parse_braces(uint32_t& m, uint32_t& n) {
    const size_t open = pos_++;
    auto number = [&](uint32_t& out) {
      skip_space(false);
      const size_t s = pos_;
      uint64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        v = v * 10 + static_cast<uint64_t>(peek() - '0');
        if (v > kMaxRepetition) return error_at(s, "repetition count above ", kMaxRepetition);
        ++pos_;
      }
      if (pos_ == s) return error_at(s, "expected a number in '{...}'");
      out = static_cast<uint32_t>(v);
      skip_space(false);
      return Status::Ok();
    };
    MTP_RETURN_IF_ERROR(number(m));
    n = m;
    if (peek() == ',') {
      ++pos_;
      skip_space(false);
      if (peek() == '}')
        n = UINT32_MAX;
      else
        MTP_RETURN_IF_ERROR(number(n));
    }
    if (peek() != '}') return error_at(open, "unclosed '{'");
    ++pos_;
    if (n < m) return error_at(open, "repetition {", m, ",", n, "} has its maximum below its minimum");
    return Status::Ok();
  }

  // Replaces seq[last_start..] (the item just parsed) by its repetition.
  Status parse_repetition(Sequence& seq, size_t last_start) {
    uint32_t m = 0, n = UINT32_MAX;
    const char op = peek();
    if (op == '{') {
      MTP_RETURN_IF_ERROR(parse_braces(m, n));
    } else {
      ++pos_;
      if (op == '+') m = 1;
      if (op == '?') n = 1;
    }
    const Sequence item(seq.begin() + static_cast<std::ptrdiff_t>(last_start), seq.end());
    seq.resize(last_start);
    if (static_cast<uint64_t>(item.size()) * std::max<uint64_t>(m, n == UINT32_MAX ? 1 : n) >
        kMaxGrammarElements)
      return error_at(pos_, "repetition expands beyond ", kMaxGrammarElements, " elements");
    for (uint32_t i = 0; i < m; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (n == UINT32_MAX) {  // star ::= item star |
      const uint32_t star = new_rule(current_);
      Sequence loop = item;
      loop.push_back({ElemKind::kRule, star});
      alts_[star] = {loop, {}};
      seq.push_back({ElemKind::kRule, star});
    } else if (n > m) {  // opt_k ::= item opt_(k-1) | ; the innermost first
      uint32_t inner = UINT32_MAX;
      for (uint32_t k = 0; k < n - m; ++k) {
        const uint32_t opt = new_rule(current_);
        Sequence body = item;
        if (inner != UINT32_MAX) body.push_back({ElemKind::kRule, inner});
        alts_[opt] = {body, {}};
        inner = opt;
      }
      seq.push_back({ElemKind::kRule, inner});
    }
    return Status::Ok();
  }

  Grammar flatten(uint32_t root) {
    Grammar g;
    g.root = root;
    g.rule_names = names_;
    g.char_sets = std::move(char_sets_);
    g.rule_alts.resize(alts_.size());
    for (size_t r = 0; r < alts_.size(); ++r) {
      for (const Sequence& alt : alts_[r]) {
        g.rule_alts[r].push_back(static_cast<uint32_t>(g.elems.size()));
        g.elems.insert(g.elems.end(), alt.begin(), alt.end());
        g.elems.push_back({ElemKind::kEnd, 0});
      }
    }
    return g;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<std::string> where_;  // "line:col" of each rule's definition (or first use while undefined)
  std::vector<std::vector<Sequence>> alts_;
  std::vector<CharSet> char_sets_;
  std::set<uint32_t> defined_;
  std::string current_;
  uint32_t generated_ = 0;
};

}  // namespace

Expected<Grammar> parse_gbnf(std::string_view text, std::string_view root) {
  return Parser(text).run(root);
}

}  // namespace mtp::grammar
