#include "grammar/token_mask.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"

namespace mtp::grammar {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes) : vocab_size_(token_bytes.size()) {
  std::vector<uint32_t> order;
  for (uint32_t id = 0; id < token_bytes.size(); ++id)
    if (!token_bytes[id].empty()) order.push_back(id);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return token_bytes[a] < token_bytes[b]; });
  build(token_bytes, order, 0, order.size(), 0);
}

// order[lo, hi) are the tokens sharing their first `depth` bytes, sorted, so those exactly `depth` long come
// first and the rest group by their next byte. Appends the children of that prefix's node in preorder.
void TokenTrie::build(const std::vector<std::string>& bytes, std::vector<uint32_t>& order, size_t lo,
                      size_t hi, size_t depth) {
  while (lo < hi && bytes[order[lo]].size() == depth)
    ++lo;  // the parent's own tokens, recorded by the caller
  while (lo < hi) {
    const auto byte = static_cast<uint8_t>(bytes[order[lo]][depth]);
    size_t group_end = lo;
    while (group_end < hi && static_cast<uint8_t>(bytes[order[group_end]][depth]) == byte) ++group_end;
    const size_t index = nodes_.size();
    nodes_.push_back({byte, static_cast<uint16_t>(depth + 1), 0, static_cast<uint32_t>(ids_.size()), 0});
    for (size_t i = lo; i < group_end && bytes[order[i]].size() == depth + 1; ++i) {
      ids_.push_back(static_cast<int32_t>(order[i]));
      ++nodes_[index].n_tokens;
    }
    build(bytes, order, lo, group_end, depth + 1);
    nodes_[index].end = static_cast<uint32_t>(nodes_.size());
    lo = group_end;
  }
}

namespace {

void unpack_bits(const std::vector<uint64_t>& bits, std::vector<uint8_t>& allowed) {
  for (size_t id = 0; id < allowed.size(); ++id)
    allowed[id] = static_cast<uint8_t>((bits[id >> 6] >> (id & 63)) & 1);
}

std::vector<uint64_t> pack_bits(const std::vector<uint8_t>& allowed) {
  std::vector<uint64_t> bits((allowed.size() + 63) / 64, 0);
  for (size_t id = 0; id < allowed.size(); ++id)
    bits[id >> 6] |= static_cast<uint64_t>(allowed[id] != 0) << (id & 63);
  return bits;
}

}  // namespace

Status fill_token_mask(Matcher& m, Matcher::StateId s, const TokenTrie& trie, std::vector<uint8_t>& allowed,
                       TokenMaskCache* cache) {
  allowed.assign(trie.vocab_size_, 0);
  m.reset_work();
  if (s == Matcher::kReject) return Status::Ok();
  if (cache != nullptr) {
    if (auto it = cache->masks_.find(s); it != cache->masks_.end()) {
      unpack_bits(it->second, allowed);
      ++cache->hits_;
      return Status::Ok();
    }
  }
  size_t visited = 0;  // trie nodes stepped through: what this walk cost
  // state_at[d] is the matcher's state after the first d bytes of the current node's path.
  std::vector<Matcher::StateId> state_at(1, s);
  const auto& nodes = trie.nodes_;
  for (size_t i = 0; i < nodes.size();) {
    const TokenTrie::Node& n = nodes[i];
    ++visited;
    auto next = m.step(state_at[n.depth - 1], n.byte);
    if (!next) return next.status();
    if (*next == Matcher::kReject) {
      i = n.end;
      continue;
    }
    if (state_at.size() <= n.depth) state_at.resize(n.depth + 1);
    state_at[n.depth] = *next;
    for (uint32_t t = 0; t < n.n_tokens; ++t) allowed[static_cast<size_t>(trie.ids_[n.first_token + t])] = 1;
    ++i;
  }
  if (cache != nullptr && cache->max_entries_ > 0 && visited >= std::max<size_t>(1, nodes.size() / 64)) {
    if (cache->masks_.size() >= cache->max_entries_) cache->masks_.clear();
    cache->masks_.emplace(s, pack_bits(allowed));
  }
  return Status::Ok();
}

}  // namespace mtp::grammar
