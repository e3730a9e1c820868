#include "json_pattern.h"

#include <bitset>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "gbnf_text.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace mtp::grammar::detail {
namespace {

// A set of characters: its ASCII members, and whether every non-ASCII character is in it too (patterns are
// ASCII, so a set holds all non-ASCII characters or none).
struct CharSet {
  std::bitset<128> ascii;
  bool non_ascii = false;

  static CharSet of(int c) {
    CharSet s;
    s.ascii.set(static_cast<size_t>(c));
    return s;
  }
  static CharSet range(int a, int b) {
    CharSet s;
    for (int c = a; c <= b; ++c) s.ascii.set(static_cast<size_t>(c));
    return s;
  }
  CharSet operator|(const CharSet& o) const {
    CharSet s = *this;
    s.ascii |= o.ascii;
    s.non_ascii = s.non_ascii || o.non_ascii;
    return s;
  }
  CharSet operator~() const {
    CharSet s;
    s.ascii = ~ascii;
    s.non_ascii = !non_ascii;
    return s;
  }
  // The one member of a single-character set, else -1.
  int single() const {
    if (non_ascii || ascii.count() != 1) return -1;
    for (int c = 0; c < 128; ++c)
      if (ascii[static_cast<size_t>(c)]) return c;
    return -1;
  }
};

// ECMAScript's \d, \w and \s (the last on ASCII: the space, \t \n \v \f \r).
CharSet digit_set() {
  return CharSet::range('0', '9');
}
CharSet word_set() {
  return CharSet::range('a', 'z') | CharSet::range('A', 'Z') | digit_set() | CharSet::of('_');
}
CharSet space_set() {
  return CharSet::of(' ') | CharSet::range('\t', '\r');
}

std::string hex_byte(int c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", c);
  return buf;
}

// GBNF class items for the members of `s`, every one as \xHH, runs as ranges.
std::string class_items(const std::bitset<128>& s) {
  std::string out;
  for (int c = 0; c < 128;) {
    if (!s[static_cast<size_t>(c)]) {
      ++c;
      continue;
    }
    int e = c;
    while (e + 1 < 128 && s[static_cast<size_t>(e + 1)]) ++e;
    out += e == c ? hex_byte(c) : hex_byte(c) + "-" + hex_byte(e);
    c = e + 1;
  }
  return out;
}

// The short JSON escape of \b \t \n \f \r.
std::string short_escape(int c) {
  return c == '\b' ? "\\b" : c == '\t' ? "\\t" : c == '\n' ? "\\n" : c == '\f' ? "\\f" : "\\r";
}

// One character of `s` as written: in a JSON string (printable ASCII as itself, '"' and '\' escaped, the
// control characters as their short escapes or \u00XX, anything else as itself), or raw (every character as
// itself but '<', which would start the markup around a raw value). Empty when no character can be written.
std::string render(const CharSet& s, bool raw) {
  std::bitset<128> as_itself;
  for (int c = 0; c < 128; ++c)
    as_itself[static_cast<size_t>(c)] =
        s.ascii[static_cast<size_t>(c)] && (raw ? c != '<' : c >= 0x20 && c != 0x7F && c != '"' && c != '\\');
  std::vector<std::string> parts;
  const int single = CharSet{as_itself, false}.single();
  if (s.non_ascii) {
    parts.push_back("[^" + class_items(~as_itself) + "]");
  } else if (single >= 0x20 && single < 0x7F) {
    parts.push_back(gbnf_literal(std::string(1, static_cast<char>(single))));
  } else if (as_itself.any()) {
    parts.push_back("[" + class_items(as_itself) + "]");
  }
  if (!raw) {
    if (s.ascii['"']) parts.push_back(gbnf_literal("\\\""));
    if (s.ascii['\\']) parts.push_back(gbnf_literal("\\\\"));
    for (int c : {'\b', '\t', '\n', '\f', '\r'})
      if (s.ascii[static_cast<size_t>(c)]) parts.push_back(gbnf_literal(short_escape(c)));
    // The control characters of the set (and DEL) as \u00XX too, the one way for most of them.
    std::string hex;
    for (int high = 0; high < 2; ++high) {
      std::string lows;
      for (int low = 0; low < 16; ++low)
        if (s.ascii[static_cast<size_t>(16 * high + low)]) lows += "0123456789abcdef"[low];
      if (!lows.empty()) hex += str_cat(hex.empty() ? "" : " | ", "\"", high, "\" [", lows, "]");
    }
    if (s.ascii[0x7F]) hex += str_cat(hex.empty() ? "" : " | ", "\"7f\"");
    if (!hex.empty()) parts.push_back(str_cat(gbnf_literal("\\u00"), " (", hex, ")"));
  }
  return gbnf_alternatives(parts);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class PatternParser {
 public:
  PatternParser(std::string_view pattern, const std::string& at, bool raw)
      : p_(pattern), at_(at), raw_(raw) {}

  Expected<std::string> run() {
    for (char c : p_)
      if (static_cast<unsigned char>(c) >= 0x80) return fail("non-ASCII characters are not supported");
    size_t begin = 0, end = p_.size();
    const bool from_start = !p_.empty() && p_[0] == '^';
    if (from_start) begin = 1;
    size_t slashes = 0;
    while (end >= 2 + slashes && p_[end - 2 - slashes] == '\\') ++slashes;
    const bool to_end = end > begin && p_[end - 1] == '$' && slashes % 2 == 0;
    if (to_end) --end;
    i_ = begin;
    end_ = end;
    int branches = 0;
    auto body = alternation(0, &branches);
    if (!body) return body.status();
    if (i_ != end_) return fail("unbalanced ')'");
    if ((from_start || to_end) && branches > 1) return fail("an anchor beside a top-level '|'");
    const std::string any = raw_ ? "[^<]*" : "char*";
    return gbnf_join(gbnf_join(from_start ? "" : any, *body), to_end ? "" : any);
  }

 private:
  Status fail(const std::string& why) const {
    constexpr size_t kShown = 60;  // of a long pattern, its start
    const std::string shown =
        p_.size() <= kShown ? std::string(p_) : std::string(p_.substr(0, kShown)) + "...";
    return unsupported("JSON Schema at ", at_, ": 'pattern' ", nlohmann::json(shown).dump(), ": ", why);
  }

  bool more() const { return i_ < end_; }
  char peek() const { return p_[i_]; }

  // branch ('|' branch)*; *branches counts them.
  Expected<std::string> alternation(int depth, int* branches) {
    std::vector<std::string> alts;
    for (;;) {
      auto seq = sequence(depth);
      if (!seq) return seq.status();
      alts.push_back(*seq);
      if (!more() || peek() != '|') break;
      ++i_;
    }
    *branches = static_cast<int>(alts.size());
    if (alts.size() == 1) return alts[0];
    // An empty branch makes the others optional.
    std::string out;
    bool optional = false;
    for (const std::string& a : alts) {
      if (a.empty()) optional = true;
      if (!a.empty()) out += (out.empty() ? "(" : " | ") + a;
    }
    return out.empty() ? out : out + (optional ? ")?" : ")");
  }

  Expected<std::string> sequence(int depth) {
    std::string out;
    while (more() && peek() != '|' && peek() != ')') {
      auto a = atom(depth);
      if (!a) return a.status();
      auto q = quantified(*a);
      if (!q) return q.status();
      out = gbnf_join(out, *q);
    }
    if (more() && peek() == ')' && depth == 0) return fail("unbalanced ')'");
    return out;
  }

  Expected<std::string> atom(int depth) {
    const char c = p_[i_++];
    switch (c) {
      case '(': {
        if (depth + 1 >= kMaxNesting) return fail(str_cat("groups nested deeper than ", kMaxNesting));
        if (p_.substr(i_, 2) == "?=" || p_.substr(i_, 2) == "?!" || p_.substr(i_, 3) == "?<=" ||
            p_.substr(i_, 3) == "?<!")
          return fail("lookarounds are not supported");
        if (p_.substr(i_, 2) == "?:") {
          i_ += 2;
        } else if (p_.substr(i_, 2) == "?<") {
          const size_t close = p_.find('>', i_);
          if (close == std::string_view::npos || close >= end_) return fail("unterminated group name");
          i_ = close + 1;
        } else if (more() && peek() == '?') {
          return fail("unknown group '(?'");
        }
        int branches = 0;
        auto inner = alternation(depth + 1, &branches);
        if (!inner) return inner.status();
        if (!more() || peek() != ')') return fail("unbalanced '('");
        ++i_;
        return inner->empty() ? std::string() : "(" + *inner + ")";
      }
      case '[': {
        auto set = class_body();
        if (!set) return set.status();
        return one_of(*set);
      }
      case '.':
        return one_of(~(CharSet::of('\n') | CharSet::of('\r')));
      case '\\': {
        auto set = escape(false);
        if (!set) return set.status();
        return one_of(*set);
      }
      case '^':
      case '$':
        return fail("an anchor inside the pattern is not supported");
      case '*':
      case '+':
      case '?':
        return fail(str_cat("nothing to repeat before '", c, "'"));
      default:
        if (c == '{' && quantifier_at(i_ - 1)) return fail("nothing to repeat before '{'");
        return one_of(CharSet::of(c));
    }
  }

  Expected<std::string> one_of(const CharSet& s) const {
    const std::string r = render(s, raw_);
    if (r.empty()) return fail("a class that matches no character");
    return r;
  }

  // Whether a {n}, {n,} or {n,m} quantifier starts at `at` (otherwise '{' is a literal, as ECMAScript has
  // it).
  bool quantifier_at(size_t at) const {
    size_t k = at + 1;
    const size_t digits_from = k;
    while (k < end_ && std::isdigit(static_cast<unsigned char>(p_[k]))) ++k;
    if (k == digits_from) return false;
    if (k < end_ && p_[k] == ',') {
      ++k;
      while (k < end_ && std::isdigit(static_cast<unsigned char>(p_[k]))) ++k;
    }
    return k < end_ && p_[k] == '}';
  }

  Expected<std::string> quantified(const std::string& a) {
    if (!more()) return a;
    std::string q;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++i_;
    } else if (c == '{' && quantifier_at(i_)) {
      const size_t close = p_.find('}', i_);
      const std::string body(p_.substr(i_ + 1, close - i_ - 1));
      i_ = close + 1;
      const size_t comma = body.find(',');
      const std::string lo = body.substr(0, comma);
      const std::string hi = comma == std::string::npos ? lo : body.substr(comma + 1);
      auto number = [](const std::string& s) { return s.size() > 6 ? int64_t{1} << 40 : std::stoll(s); };
      if (number(lo) > kMaxRepetition || (!hi.empty() && number(hi) > kMaxRepetition))
        return fail(str_cat("a repetition above ", kMaxRepetition));
      if (!hi.empty() && number(hi) < number(lo)) return fail("a repetition {n,m} with m below n");
      q = "{" + body + "}";
    } else {
      return a;
    }
    if (more() && peek() == '?') ++i_;  // lazy: the same strings
    if (more() && (peek() == '*' || peek() == '+' || peek() == '?' || (peek() == '{' && quantifier_at(i_))))
      return fail("nothing to repeat");
    return a.empty() ? a : "(" + a + ")" + q;
  }

  // One member of a class: a character, or an escape (\d, \w, ... stand for several).
  Expected<CharSet> class_item() {
    if (peek() != '\\') return CharSet::of(static_cast<unsigned char>(p_[i_++]));
    ++i_;
    return escape(true);
  }

  // After '[': the class's members (its complement for [^...]).
  Expected<CharSet> class_body() {
    const bool negated = more() && peek() == '^';
    if (negated) ++i_;
    CharSet set;
    for (;;) {
      if (!more()) return fail("unterminated '['");
      if (peek() == ']') break;  // at once: [] has no member, [^] every character
      auto first = class_item();
      if (!first) return first.status();
      const int lo = first->single();
      const bool range = lo >= 0 && i_ + 1 < end_ && peek() == '-' && p_[i_ + 1] != ']';
      if (!range) {  // after \d and the like a '-' is itself
        set = set | *first;
        continue;
      }
      ++i_;  // '-'
      auto last = class_item();
      if (!last) return last.status();
      const int hi = last->single();
      if (hi < 0) return fail("a class escape as a range's end");
      if (hi < lo) return fail("a range out of order");
      set = set | CharSet::range(lo, hi);
    }
    ++i_;  // ']'
    return negated ? ~set : set;
  }

  // After '\': the characters the escape stands for.
  Expected<CharSet> escape(bool in_class) {
    if (!more()) return fail("it ends in '\\'");
    const char c = p_[i_++];
    switch (c) {
      case 'd':
        return digit_set();
      case 'D':
        return ~digit_set();
      case 'w':
        return word_set();
      case 'W':
        return ~word_set();
      case 's':
        return space_set();
      case 'S':
        return ~space_set();
      case 't':
        return CharSet::of('\t');
      case 'n':
        return CharSet::of('\n');
      case 'r':
        return CharSet::of('\r');
      case 'f':
        return CharSet::of('\f');
      case 'v':
        return CharSet::of('\v');
      case 'b':
        if (in_class) return CharSet::of('\b');
        return fail("word boundaries (\\b) are not supported");
      case '0':
        if (more() && std::isdigit(static_cast<unsigned char>(peek()))) return fail("octal escapes");
        return CharSet::of(0);
      case 'x':
      case 'u': {
        const size_t n = c == 'x' ? 2 : 4;
        int v = 0;
        for (size_t k = 0; k < n; ++k) {
          const int h = i_ + k < end_ ? hex_value(p_[i_ + k]) : -1;
          if (h < 0) return fail(str_cat("a malformed \\", c, " escape"));
          v = v * 16 + h;
        }
        i_ += n;
        if (v >= 0x80) return fail("non-ASCII characters are not supported");
        return CharSet::of(v);
      }
      default:
        if (std::isdigit(static_cast<unsigned char>(c))) return fail("backreferences are not supported");
        if (std::isalnum(static_cast<unsigned char>(c)))
          return fail(str_cat("the escape \\", c, " is not supported"));
        return CharSet::of(c);  // escaped punctuation
    }
  }

  std::string_view p_;
  std::string at_;
  bool raw_;
  size_t i_ = 0, end_ = 0;
};

}  // namespace

Expected<std::string> pattern_to_gbnf(std::string_view pattern, const std::string& at, bool raw) {
  return PatternParser(pattern, at, raw).run();
}

}  // namespace mtp::grammar::detail
