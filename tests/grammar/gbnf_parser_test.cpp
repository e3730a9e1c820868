#include <gtest/gtest.h>

#include "grammar/grammar.h"

namespace mtp::grammar {
namespace {

std::string error_of(std::string_view text) {
  auto g = parse_gbnf(text);
  return g.ok() ? "" : g.status().message();
}

TEST(GbnfParser, ParsesEveryConstruct) {
  const char* text = R"(# a comment line
root ::= greeting ("," ws name)* "!"? tail{1,3}   # trailing comment
greeting ::= "hi" | "hello" | "\x41\u00e9\n"
name ::= [A-Z] [a-z\-]+ | [^0-9 ,!\n]
ws ::= [ \t]{0,2}
tail ::= (
    "x" |
    "y"
  ) .
)";
  auto g = parse_gbnf(text);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->rule_names[g->root], "root");
  EXPECT_GE(g->rule_names.size(), 5u);
}

TEST(GbnfParser, NegatedClassIsTheComplement) {
  auto g = parse_gbnf("root ::= [^a-c]");
  ASSERT_TRUE(g.ok()) << g.status().message();
  const CharSet& set = g->char_sets[g->elems[g->rule_alts[g->root][0]].arg];
  EXPECT_TRUE(set.contains('`'));
  EXPECT_FALSE(set.contains('a'));
  EXPECT_FALSE(set.contains('c'));
  EXPECT_TRUE(set.contains('d'));
  EXPECT_TRUE(set.contains(kMaxCodePoint));
}

TEST(GbnfParser, MalformedGrammarsNameTheirPlace) {
  EXPECT_EQ(error_of(""), "empty grammar: no rules");
  EXPECT_EQ(error_of("  # only a comment\n"), "empty grammar: no rules");
  EXPECT_EQ(error_of("root ::= \"abc"), "1:10: unterminated string literal");
  EXPECT_EQ(error_of("root ::= [a-"), "1:10: unterminated character class");
  EXPECT_EQ(error_of("root ::= (\"a\" | \"b\""), "1:10: unclosed '(' (opened at 1:10)");
  EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\""), "2:1: rule 'root' is defined twice");
  EXPECT_EQ(error_of("root \"a\""), "1:6: expected '::=' after rule name 'root'");
  EXPECT_EQ(error_of("root ::= * \"a\""), "1:10: '*' with nothing before it to repeat");
  EXPECT_EQ(error_of("root ::= \"a\"{3,1}"), "1:13: repetition {3,1} has its maximum below its minimum");
  EXPECT_EQ(error_of("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')')),
            "1:266: groups nested deeper than 256");
  EXPECT_EQ(error_of("root ::= \"a\"{99999}"), "1:14: repetition count above 4096");
  EXPECT_EQ(error_of("root ::= \"\\q\""), "1:11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root ::= [z-a]"), "1:13: range end before its start in character class");
  EXPECT_EQ(error_of("root ::= \"a\" )"), "1:14: unexpected ')' in rule 'root'");
  EXPECT_EQ(error_of("root ::= a b ::= \"x\""), "1:12: missing newline before rule 'b'");
}

TEST(GbnfParser, UndefinedRuleAndMissingRoot) {
  EXPECT_EQ(error_of("root ::= \"a\" value\n"), "1:14: undefined rule 'value'");
  EXPECT_EQ(error_of("start ::= \"a\""), "grammar has no rule 'root'");
  EXPECT_TRUE(parse_gbnf("start ::= \"a\"", "start").ok());
}

TEST(GbnfParser, LeftRecursionIsRefused) {
  EXPECT_EQ(error_of("root ::= root \"a\" | \"b\""),
            "left recursion, which this matcher cannot run: root -> root");
  EXPECT_EQ(error_of("root ::= x\nx ::= y \"a\" | \"b\"\ny ::= \"\" | x"),
            "left recursion, which this matcher cannot run: x -> y -> x");
  // A nullable prefix hides it: x can expand to x without reading anything.
  EXPECT_EQ(error_of("root ::= x\nx ::= e x \"a\" | \"b\"\ne ::= \"c\"?"),
            "left recursion, which this matcher cannot run: x -> x");
  // A star over something that can be empty loops the same way.
  EXPECT_NE(error_of("root ::= (\"a\"?)*"), "");
  // Right recursion is fine.
  EXPECT_EQ(error_of("root ::= \"a\" root | \"b\""), "");
}

TEST(GbnfParser, GrammarsThatCannotFinishOrAreEmptyAreRefused) {
  EXPECT_EQ(
      error_of("root ::= \"a\" root"),
      "1:1: rule 'root' can never finish (every alternative needs an endless expansion or an empty class)");
  EXPECT_EQ(
      error_of("root ::= \"a\" | x\nx ::= \"b\" x"),
      "2:1: rule 'x' can never finish (every alternative needs an endless expansion or an empty class)");
  EXPECT_EQ(
      error_of("root ::= [^\\x00-\\U0010FFFF]"),
      "1:1: rule 'root' can never finish (every alternative needs an endless expansion or an empty class)");
  EXPECT_EQ(error_of("root ::= \"\""), "1:1: rule 'root' matches only the empty string");
  EXPECT_EQ(error_of("root ::= x?\nx ::= \"\""), "1:1: rule 'root' matches only the empty string");
}

}  // namespace
}  // namespace mtp::grammar
