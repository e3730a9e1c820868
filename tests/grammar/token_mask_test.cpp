#include "grammar/token_mask.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>

namespace mtp::grammar {
namespace {

// Characters of 1, 2 and 3 UTF-8 bytes, so tokens can split a character.
const std::vector<std::string> kAlphabet = {"a", "b", "c", "\xC3\xA9", "\xE2\x82\xAC"};

std::string random_item(std::mt19937& rng, int rule, int n_rules, bool after_char) {
  std::uniform_int_distribution<int> pick(0, 9);
  const int k = pick(rng);
  if (k < 4) return "\"" + kAlphabet[rng() % kAlphabet.size()] + kAlphabet[rng() % kAlphabet.size()] + "\"";
  if (k < 7)
    return std::vector<std::string>{"[a-b]", "[^a]", "[\xC3\xA9-\xE2\x82\xAC]", "[bc\xC3\xA9]",
                                    "."}[rng() % 5];
  // A reference: to a later rule anywhere, to any rule only after a character (no left recursion).
  const int lo = after_char ? 0 : rule + 1;
  if (lo >= n_rules) return "\"c\"";
  return "r" + std::to_string(lo + static_cast<int>(rng() % static_cast<unsigned>(n_rules - lo)));
}

std::string random_grammar(std::mt19937& rng) {
  const int n_rules = 2 + static_cast<int>(rng() % 3);
  std::string text = "root ::= r0\n";
  for (int r = 0; r < n_rules; ++r) {
    text += "r" + std::to_string(r) + " ::= ";
    const int n_alts = 1 + static_cast<int>(rng() % 3);
    for (int a = 0; a < n_alts; ++a) {
      if (a) text += " | ";
      const int n_items = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < n_items; ++i) {
        text += random_item(rng, r, n_rules, i > 0) + " ";
        text += std::vector<std::string>{"", "", "", "*", "+", "?", "{1,2}"}[rng() % 7] + " ";
      }
    }
    text += "\n";
  }
  return text;
}

std::vector<std::string> random_vocab(std::mt19937& rng, size_t n) {
  std::vector<std::string> vocab = {""};  // a special token: never allowed
  std::string bytes;
  for (const auto& c : kAlphabet) bytes += c;
  bytes += "xy";
  while (vocab.size() < n) {
    std::string t;
    const size_t len = 1 + rng() % 4;
    for (size_t i = 0; i < len; ++i) t += bytes[rng() % bytes.size()];  // any bytes: split characters too
    vocab.push_back(t);
  }
  vocab.push_back(vocab[5]);  // a duplicate
  return vocab;
}

// For every token, the matcher run on its bytes alone.
std::vector<uint8_t> brute_force_mask(Matcher& m, Matcher::StateId s, const std::vector<std::string>& vocab) {
  std::vector<uint8_t> allowed(vocab.size(), 0);
  for (size_t id = 0; id < vocab.size(); ++id) {
    if (vocab[id].empty()) continue;
    auto next = m.advance(s, vocab[id]);
    EXPECT_TRUE(next.ok());
    allowed[id] = *next != Matcher::kReject;
  }
  return allowed;
}

TEST(TokenMask, MatchesBruteForceOnRandomGrammarsAndVocabularies) {
  std::mt19937 rng(32);
  int grammars = 0, masks = 0;
  while (grammars < 60) {
    auto g = parse_gbnf(random_grammar(rng));
    if (!g.ok()) continue;  // a random grammar that cannot finish, say
    ++grammars;
    auto m = Matcher::create(std::make_shared<const Grammar>(std::move(*g)));
    ASSERT_TRUE(m.ok());
    const auto vocab = random_vocab(rng, 300);
    const TokenTrie trie(vocab);
    Matcher::StateId s = m->start();
    for (int step = 0; step < 8 && s != Matcher::kReject; ++step, ++masks) {
      std::vector<uint8_t> mask;
      ASSERT_TRUE(fill_token_mask(*m, s, trie, mask).ok());
      ASSERT_EQ(mask, brute_force_mask(*m, s, vocab)) << "grammar " << grammars << " step " << step;
      std::vector<size_t> ok;
      for (size_t id = 0; id < mask.size(); ++id)
        if (mask[id]) ok.push_back(id);
      if (ok.empty()) break;
      s = *m->advance(s, vocab[ok[rng() % ok.size()]]);
    }
  }
  EXPECT_GT(masks, 200);
}

// A state's mask from the cache is the one its walk gives, also across the cache starting over when full.
TEST(TokenMask, CachedMasksAreTheWalkedOnes) {
  std::mt19937 rng(7);
  size_t grammars = 0, hits = 0, checked = 0;
  while (grammars < 40) {
    auto g = parse_gbnf(random_grammar(rng));
    if (!g.ok()) continue;
    ++grammars;
    auto m = Matcher::create(std::make_shared<const Grammar>(std::move(*g)));
    ASSERT_TRUE(m.ok());
    const auto vocab = random_vocab(rng, 300);
    const TokenTrie trie(vocab);
    std::vector<Matcher::StateId> states;
    std::vector<uint8_t> walked, cached;
    for (Matcher::StateId s = m->start(); states.size() < 8 && s != Matcher::kReject;) {
      states.push_back(s);
      ASSERT_TRUE(fill_token_mask(*m, s, trie, walked).ok());
      std::vector<size_t> ok;
      for (size_t id = 0; id < walked.size(); ++id)
        if (walked[id]) ok.push_back(id);
      if (ok.empty()) break;
      s = *m->advance(s, vocab[ok[rng() % ok.size()]]);
    }
    TokenMaskCache cache(3);
    for (int pass = 0; pass < 3; ++pass)
      for (Matcher::StateId s : states) {
        ASSERT_TRUE(fill_token_mask(*m, s, trie, walked).ok());
        ASSERT_TRUE(fill_token_mask(*m, s, trie, cached, &cache).ok());
        ASSERT_EQ(cached, walked) << "grammar " << grammars << " pass " << pass;
        ++checked;
      }
    EXPECT_LE(cache.size(), 3u);
    hits += cache.hits();
  }
  EXPECT_GT(hits, 100u) << "the cache was hardly used (of " << checked << "), so the comparison shows little";
}

TEST(TokenMask, SharedPrefixesAndSpecialTokens) {
  auto g = parse_gbnf(R"(root ::= "ab" [cd] "e")");
  ASSERT_TRUE(g.ok());
  auto m = Matcher::create(std::make_shared<const Grammar>(std::move(*g)));
  ASSERT_TRUE(m.ok());
  const std::vector<std::string> vocab = {"", "a", "ab", "abc", "abce", "abcef", "b", "abd"};
  const TokenTrie trie(vocab);
  std::vector<uint8_t> mask;
  ASSERT_TRUE(fill_token_mask(*m, m->start(), trie, mask).ok());
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 1, 1, 1, 1, 0, 0, 1}));
  ASSERT_TRUE(fill_token_mask(*m, Matcher::kReject, trie, mask).ok());
  EXPECT_EQ(mask, std::vector<uint8_t>(vocab.size(), 0));
}

// Each new state is cheap enough, but a mask that meets many of them would add up: the work of one mask is
// bounded as a whole.
TEST(TokenMask, WorkPerMaskIsBounded) {
  auto g = parse_gbnf(R"(root ::= ("a"?){200} "b")");
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto m = Matcher::create(std::make_shared<const Grammar>(std::move(*g)), MatcherLimits{.max_work = 200000});
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::vector<std::string> vocab;
  for (size_t n = 1; n <= 200; ++n) vocab.push_back(std::string(n, 'a'));
  std::vector<uint8_t> mask;
  const Status st = fill_token_mask(*m, m->start(), TokenTrie(vocab), mask);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(st.message(), "grammar work for one token exceeds 200000 stack expansions");
  // Single tokens stay within the bound: the work is counted per token, not per matcher.
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(m->advance(m->start(), "aaaa").ok());
}

}  // namespace
}  // namespace mtp::grammar
