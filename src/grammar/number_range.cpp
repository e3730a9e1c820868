#include "number_range.h"

#include <algorithm>
#include <set>
#include <vector>

#include "base/check.h"
#include "base/status.h"
#include "gbnf_text.h"

namespace mtp::grammar::detail {
namespace {

constexpr int64_t kMaxIntegral = 9'999'999'999'999'999;  // 16 digits, as the unbounded rules
constexpr int kFractionDigits = 16;
constexpr int kSignificantDigits = 15;  // decimals of this many significant digits parse to distinct doubles

std::string digit_class(char lo, char hi) {
  return lo == hi ? str_cat("\"", lo, "\"") : str_cat("[", lo, "-", hi, "]");
}

std::string any_digits(size_t n) {
  return n == 0 ? "" : n == 1 ? "[0-9]" : str_cat("[0-9]{", n, "}");
}

// The digit strings of x.size() digits (leading zeros allowed) from x to y, x <= y, x.size() == y.size().
std::string digits_between(const std::string& x, const std::string& y) {
  const size_t n = x.size();
  if (x == y) return n == 0 ? "" : str_cat("\"", x, "\"");
  const std::string xr = x.substr(1), yr = y.substr(1);
  if (x[0] == y[0]) return gbnf_join(digit_class(x[0], x[0]), digits_between(xr, yr));
  // First digit x[0] with the rest from xr up, y[0] with the rest up to yr, and every rest between them.
  std::vector<std::string> parts;
  char from = x[0], to = y[0];
  if (xr.find_first_not_of('0') != std::string::npos)
    parts.push_back(gbnf_join(digit_class(from, from), digits_between(xr, std::string(n - 1, '9')))), ++from;
  const bool y_whole = yr.find_first_not_of('9') == std::string::npos;
  if (!y_whole) --to;
  if (from <= to) parts.push_back(gbnf_join(digit_class(from, to), any_digits(n - 1)));
  if (!y_whole)
    parts.push_back(gbnf_join(digit_class(y[0], y[0]), digits_between(std::string(n - 1, '0'), yr)));
  return gbnf_alternatives(parts);
}

// The whole numbers from a to b written without leading zeros; empty when a > b.
std::string naturals(int64_t a, int64_t b) {
  if (a > b) return "";
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  std::vector<std::string> parts;
  // Lengths whose every number is in, consecutive, as one part: [1-9] [0-9]{m,n}.
  size_t full_from = 0;
  auto flush = [&](size_t to) {
    if (full_from == 0) return;
    const size_t m = full_from - 1, n = to - 1;
    parts.push_back(n == 0   ? "[1-9]"
                    : m == n ? str_cat("[1-9] ", any_digits(n))
                             : str_cat("[1-9] [0-9]{", m, ",", n, "}"));
    full_from = 0;
  };
  for (size_t d = sa.size(); d <= sb.size(); ++d) {
    const std::string lo = d == sa.size() ? sa : "1" + std::string(d - 1, '0');
    const std::string hi = d == sb.size() ? sb : std::string(d, '9');
    if (lo == "1" + std::string(d - 1, '0') && hi == std::string(d, '9')) {
      if (full_from == 0) full_from = d;
      continue;
    }
    flush(d - 1);
    parts.push_back(digits_between(lo, hi));
  }
  flush(sb.size());
  return gbnf_alternatives(parts);
}

int significant_digits(int64_t v) {
  return v == 0 ? 0 : static_cast<int>(std::to_string(v).size());
}

// Which fractions may follow an integral part: none or only zeros (the value is the integral part), some
// with a digit other than 0 (above it), each of at most `digits` digits.
struct Fractions {
  bool whole = false;
  bool above = false;
  int digits = kFractionDigits;
  bool operator==(const Fractions&) const = default;
  Fractions operator&(const Fractions& o) const {
    return {whole && o.whole, above && o.above, std::min(digits, o.digits)};
  }
};
constexpr Fractions kAny{true, true, kFractionDigits};
constexpr Fractions kNone{false, false, 0};

// GBNF for the fractions of f (without the integral part); `ok` is false when f allows none.
std::string fraction_text(const Fractions& f, bool integers, bool* ok) {
  *ok = f.whole || (f.above && f.digits > 0 && !integers);
  if (!*ok || integers || f.digits == 0) return "";
  const std::string k = f.digits == 1 ? "" : str_cat("{1,", f.digits, "}");
  if (f.whole && f.above) return str_cat("(\".\" [0-9]", k, ")?");
  if (f.whole) return str_cat("(\".\" [0]", k, ")?");
  // At least one digit other than 0: the first such is digit j + 1.
  std::vector<std::string> parts;
  for (int j = 0; j < f.digits; ++j) {
    const int rest = f.digits - 1 - j;
    parts.push_back(gbnf_join(gbnf_join(j == 0   ? ""
                                        : j == 1 ? "\"0\""
                                                 : str_cat("[0]{", j, "}"),
                                        "[1-9]"),
                              rest == 0 ? "" : str_cat("[0-9]{0,", rest, "}")));
  }
  return gbnf_join("\".\"", gbnf_alternatives(parts));
}

struct Side {
  int64_t value = 0;
  bool exclusive = false;
};

// The fractions allowed after integral part i for a magnitude y = i.f within [lower, upper].
Fractions fractions_of(int64_t i, Side lower, const std::optional<Side>& upper) {
  Fractions f = kAny;
  if (i < lower.value) return kNone;
  if (i == lower.value && lower.exclusive)  // above the bound, and not parsing back to it
    f = f & Fractions{false, true, kSignificantDigits - significant_digits(i)};
  if (!upper) return f;
  const int64_t h = upper->value;
  if (i > h || (i == h && upper->exclusive)) return kNone;
  if (i == h) return f & Fractions{true, false, kFractionDigits};
  if (i == h - 1 && upper->exclusive)  // below the bound, and not parsing up to it
    f = f & Fractions{true, true, kSignificantDigits - significant_digits(i)};
  return f;
}

// The magnitudes y = i.f, 0 <= y, within [lower, upper] (upper absent: 16 integral digits).
std::string magnitudes(Side lower, const std::optional<Side>& upper, bool integers) {
  // The allowed fractions change only at these integral parts: runs of them between these points share the
  // first one's, and neighbouring runs that allow the same fractions merge.
  std::set<int64_t> points{0, lower.value};
  if (upper) points.insert({upper->value - 1, upper->value});
  std::vector<int64_t> at;
  for (int64_t p : points)
    if (p >= 0 && p <= kMaxIntegral) at.push_back(p);
  struct Run {
    int64_t a, b;
    Fractions f;
  };
  std::vector<Run> runs;
  auto add = [&](int64_t a, int64_t b) {
    if (a > b) return;
    Fractions f = fractions_of(a, lower, upper);
    if (integers) f = {f.whole, false, 0};  // only whether the integral part itself is within
    if (!runs.empty() && runs.back().b + 1 == a && runs.back().f == f) {
      runs.back().b = b;
    } else {
      runs.push_back({a, b, f});
    }
  };
  for (size_t k = 0; k < at.size(); ++k) {
    add(at[k], at[k]);
    add(at[k] + 1, k + 1 < at.size() ? at[k + 1] - 1 : kMaxIntegral);
  }
  std::vector<std::string> parts;
  for (const Run& r : runs) {
    bool ok = false;
    const std::string frac = fraction_text(r.f, integers, &ok);
    if (ok) parts.push_back(gbnf_join(naturals(r.a, r.b), frac));
  }
  return gbnf_alternatives(parts);
}

}  // namespace

std::string number_range(std::optional<NumberBound> lo, std::optional<NumberBound> hi, bool integers) {
  for (const auto& b : {lo, hi})
    MTP_CHECK(!b || significant_digits(b->value < 0 ? -b->value : b->value) <= kMaxBoundDigits);
  std::vector<std::string> parts;
  // x >= 0: the magnitude is x.
  if (!hi || hi->value >= 0) {
    const Side lower = lo && lo->value >= 0 ? Side{lo->value, lo->exclusive} : Side{0, false};
    std::optional<Side> upper;
    if (hi) upper = Side{hi->value, hi->exclusive};
    if (std::string m = magnitudes(lower, upper, integers); !m.empty()) parts.push_back(m);
  }
  // x < 0: the magnitude -x is above 0, so no "-0".
  if (!lo || lo->value < 0) {
    const Side lower = hi && hi->value < 0 ? Side{-hi->value, hi->exclusive} : Side{0, true};
    std::optional<Side> upper;
    if (lo) upper = Side{-lo->value, lo->exclusive};
    if (std::string m = magnitudes(lower, upper, integers); !m.empty())
      parts.push_back(gbnf_join("\"-\"", m));
  }
  return gbnf_alternatives(parts);
}

}  // namespace mtp::grammar::detail
