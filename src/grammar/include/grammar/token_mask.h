// The token mask: which tokens of a vocabulary the grammar allows next. The vocabulary's byte strings form a
// trie laid out in preorder, each node with the index just past its subtree, so the walk matches a shared
// prefix once and skips a refused prefix's whole subtree at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/matcher.h"

namespace mtp::grammar {

class TokenTrie {
 public:
  // token_bytes[id] is the token's bytes; an empty string (a special or control token) is never in a mask.
  explicit TokenTrie(const std::vector<std::string>& token_bytes);

  size_t vocab_size() const { return vocab_size_; }
  size_t node_count() const { return nodes_.size(); }

 private:
  friend Status fill_token_mask(Matcher&, Matcher::StateId, const TokenTrie&, std::vector<uint8_t>&);
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

// allowed[id] = 1 for each token whose bytes the grammar accepts from state s (whole or as a prefix of a
// longer string), 0 otherwise; resized to the vocabulary. An error only when the matcher's limits are hit.
Status fill_token_mask(Matcher& m, Matcher::StateId s, const TokenTrie& trie, std::vector<uint8_t>& allowed);

}  // namespace mtp::grammar
