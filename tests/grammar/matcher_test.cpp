#include "grammar/matcher.h"

#include <gtest/gtest.h>

#include <memory>

namespace mtp::grammar {
namespace {

Matcher make(std::string_view text, MatcherLimits limits = {}) {
  auto g = parse_gbnf(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  auto m = Matcher::create(std::make_shared<const Grammar>(std::move(*g)), limits);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(*m);
}

// "complete": the whole string is in the language; "prefix": it can still be extended into one; "reject".
std::string verdict(Matcher& m, std::string_view s) {
  auto st = m.advance(m.start(), s);
  EXPECT_TRUE(st.ok()) << st.status().message();
  if (*st == Matcher::kReject) return "reject";
  return m.is_complete(*st) ? "complete" : "prefix";
}

TEST(Matcher, LiteralsAlternationAndRepetition) {
  Matcher m = make(R"(root ::= ("ab" | "c")+ "!"? [0-9]{2,3})");
  EXPECT_EQ(verdict(m, "ab12"), "complete");
  EXPECT_EQ(verdict(m, "cabc123"), "complete");
  EXPECT_EQ(verdict(m, "c!99"), "complete");
  EXPECT_EQ(verdict(m, "c1"), "prefix");
  EXPECT_EQ(verdict(m, "a"), "prefix");
  EXPECT_EQ(verdict(m, "c1234"), "reject");
  EXPECT_EQ(verdict(m, "12"), "reject");
  EXPECT_EQ(verdict(m, "ac"), "reject");
  EXPECT_EQ(verdict(m, "c!!1"), "reject");
}

TEST(Matcher, RecursionAndEmptyAlternatives) {
  Matcher m = make("root ::= \"(\" inner \")\"\ninner ::= | root inner");
  EXPECT_EQ(verdict(m, "()"), "complete");
  EXPECT_EQ(verdict(m, "(()(()))"), "complete");
  EXPECT_EQ(verdict(m, "(()"), "prefix");
  EXPECT_EQ(verdict(m, "())"), "reject");
  EXPECT_FALSE(m.can_continue(*m.advance(m.start(), "()")));
}

TEST(Matcher, Utf8CharacterClasses) {
  Matcher m = make("root ::= [a-zé€]+ [^a-z]");
  EXPECT_EQ(verdict(m, "é€a\xF0\x9F\x98\x80"), "complete");  // U+1F600 is outside [a-z]
  EXPECT_EQ(verdict(m, "é\xE2"), "prefix");                  // half of the euro sign: still possible
  EXPECT_EQ(verdict(m, "a\xE2\x82\xAC"), "complete");        // "a€": € is in both classes
  EXPECT_EQ(verdict(m, "ab"), "prefix");                     // [^a-z] wants one more
  EXPECT_EQ(verdict(m, "\xC3"), "prefix");                   // a lead byte of é
  EXPECT_EQ(verdict(m, "\xC3\xA8"), "reject");               // è is not in the class
  EXPECT_EQ(verdict(m, "\xF0"), "reject");                   // no 4-byte character fits [a-zé€]
  EXPECT_EQ(verdict(m, "\x80"), "reject");                   // a continuation byte with no lead
  EXPECT_EQ(verdict(m, "a\xC3("), "reject");                 // a broken character
  EXPECT_EQ(verdict(m, "\xC1\xA1"), "reject");               // an overlong "a"
  EXPECT_EQ(verdict(m, "\xE0\x81\xA1"), "reject");           // an overlong "a" in three bytes
  EXPECT_EQ(verdict(m, "\xE0\x80"), "reject");               // can only become an overlong form
  Matcher any = make("root ::= .");
  EXPECT_EQ(verdict(any, "\xF4\x8F\xBF\xBF"), "complete");
  EXPECT_EQ(verdict(any, "\xF5"), "reject");
  EXPECT_EQ(verdict(any, "\xED\xA0\x80"), "reject");  // U+D800, a surrogate, is not a character
}

TEST(Matcher, StatesAreStableForRollback) {
  Matcher m = make(R"(root ::= "{" [a-z]* "}")");
  auto a = *m.advance(m.start(), "{ab");
  auto b = *m.advance(a, "c}");
  EXPECT_TRUE(m.is_complete(b));
  // Going back to `a` is using its id again; the same bytes give the same state.
  EXPECT_EQ(*m.advance(a, "c}"), b);
  EXPECT_EQ(*m.advance(a, "xyz"), *m.advance(m.start(), "{abxyz"));
}

TEST(Matcher, PathologicalGrammarStopsWithAnError) {
  // Every "a" doubles the distinct stacks (each remembers which closer, "b" or "c", it owes).
  Matcher m = make("root ::= \"a\" root \"b\" | \"a\" root \"c\" | \"d\"", MatcherLimits{.max_stacks = 1024});
  auto st = m.advance(m.start(), std::string(64, 'a'));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.status().message().find("stacks; at most 1024 are allowed (too ambiguous)"), std::string::npos)
      << st.status().message();
}

TEST(Matcher, StateSpaceIsBounded) {
  Matcher m = make(R"(root ::= "[" root "]" | "x")", MatcherLimits{.max_states = 100});
  auto st = m.advance(m.start(), std::string(200, '['));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(), "grammar matcher reached its limit of 100 states");
}

}  // namespace
}  // namespace mtp::grammar
