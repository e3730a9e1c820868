// The token mask: which tokens of a vocabulary the grammar allows next. The vocabulary's byte strings form a
// trie laid out in preorder, each node with the index just past its subtree, so the walk matches a shared
// prefix once and skips a refused prefix's whole subtree at once.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "grammar/matcher.h"

namespace mtp::grammar {

class TokenMaskCache;

class TokenTrie {
 public:
  // token_bytes[id] is the token's bytes; an empty string (a special or control token) is never in a mask.
  explicit TokenTrie(const std::vector<std::string>& token_bytes);

  size_t vocab_size() const { return vocab_size_; }
  size_t node_count() const { return nodes_.size(); }

 private:
  friend Status fill_token_mask(Matcher&, Matcher::StateId, const TokenTrie&, std::vector<uint8_t>&,
                                TokenMaskCache*);
  struct Node {
    uint8_t byte;
    uint16_t depth;        // 1 for the root's children
    uint32_t end;          // index just past this node's subtree
    uint32_t first_token;  // tokens whose bytes end here: ids_[first_token .. first_token + n_tokens)
    uint32_t n_tokens;
  };
  void build(const std::vector<std::string>& bytes, std::vector<uint32_t>& order, size_t lo, size_t hi,
             size_t depth);

  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  size_t vocab_size_ = 0;
};

// Masks kept for the states whose trie walk was long: inside a free string most of the vocabulary is allowed
// and the walk visits most of the trie, and every ordinary character of the string leads back to the same
// state, so a state met again costs a copy of its mask instead of a walk. A state's mask depends on nothing
// but the state (its whole set of stacks) and the vocabulary, so a kept mask is exact; one cache serves one
// matcher and one trie. Bounded: at most `max_entries` masks of vocabulary/8 bytes (31 KB at 248K tokens);
// when full it starts over.
class TokenMaskCache {
 public:
  TokenMaskCache() = default;  // not explicit: a member of aggregates built with {} (the engine's Slot)
  explicit TokenMaskCache(size_t max_entries) : max_entries_(max_entries) {}
  size_t hits() const { return hits_; }
  size_t size() const { return masks_.size(); }

 private:
  friend Status fill_token_mask(Matcher&, Matcher::StateId, const TokenTrie&, std::vector<uint8_t>&,
                                TokenMaskCache*);
  size_t max_entries_ = 64;
  size_t hits_ = 0;
  std::unordered_map<Matcher::StateId, std::vector<uint64_t>> masks_;  // a bit per token id
};

// allowed[id] = 1 for each token whose bytes the grammar accepts from state s (whole or as a prefix of a
// longer string), 0 otherwise; resized to the vocabulary. An error only when the matcher's limits are hit.
// With a cache, a state whose walk visited at least 1/64 of the trie keeps its mask there.
Status fill_token_mask(Matcher& m, Matcher::StateId s, const TokenTrie& trie, std::vector<uint8_t>& allowed,
                       TokenMaskCache* cache = nullptr);

}  // namespace mtp::grammar
