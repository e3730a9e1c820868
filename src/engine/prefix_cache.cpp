// The prefix cache (prefix_cache.h).
#include "engine/prefix_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"

namespace mtp {
namespace {

// Halving time of a checkpoint's value, in cache events (lookups and inserts) since its last use, and the
// weight of a path's last checkpoint.
constexpr double kHalfLifeEvents = 32.0;
constexpr double kTipWeight = 4.0;

}  // namespace

Expected<uint64_t> prefix_cache_budget(std::optional<int64_t> mib, uint64_t physical, uint64_t available) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  if (!mib) {
    uint64_t budget = 8192 * kMiB;
    if (physical > 0) budget = std::min(budget, physical / 4 / kMiB * kMiB);
    if (available > 0) budget = std::min(budget, available / 2 / kMiB * kMiB);
    return budget;
  }
  if (*mib == -1) return physical / 2 / kMiB * kMiB;
  if (*mib < 0 || *mib > (int64_t{1} << 30))
    return invalid_argument("--cache-ram must be MiB >= 0 (0: no prefix cache) or -1 (half of memory), got ",
                            *mib);
  const uint64_t bytes = static_cast<uint64_t>(*mib) * kMiB;
  if (physical > 0 && bytes > physical)
    return invalid_argument("--cache-ram ", *mib, " MiB exceeds this machine's memory (", physical / kMiB,
                            " MiB)");
  return bytes;  // explicit: no quarter-memory cap
}

const char* checkpoint_kind_name(CheckpointKind kind) {
  switch (kind) {
    case CheckpointKind::kInterval:
      return "interval";
    case CheckpointKind::kMessage:
      return "message";
    case CheckpointKind::kPromptEnd:
      return "prompt_end";
    case CheckpointKind::kGenerationEnd:
      return "generation_end";
  }
  return "unknown";
}

struct PrefixCache::Entry {
  Checkpoint c;
  uint64_t last_used = 0;
  uint64_t bytes() const { return c.state.bytes() + c.hidden.size() * sizeof(float); }
};

struct PrefixCache::Node {
  Node* parent = nullptr;  // nullptr for a namespace's root
  int64_t start = 0;       // position of tokens[0] (a multiple of the block size)
  std::vector<int32_t> tokens;
  int32_t block = -1;              // one reference is the cache's; -1 for a root
  int64_t mtp_lo = 0, mtp_hi = 0;  // MTP rows valid in this block: [mtp_lo, mtp_hi), empty when equal
  std::vector<std::unique_ptr<Node>> children;  // only under full nodes
  std::vector<std::unique_ptr<Entry>> entries;  // by position, each in (start, end()]
  int64_t n_sub = 0;                            // checkpoints here and below
  int64_t end() const { return start + static_cast<int64_t>(tokens.size()); }
  // Tokens this node shares with `t` from its start.
  int64_t common(std::span<const int32_t> t) const {
    if (start >= static_cast<int64_t>(t.size())) return 0;
    const auto rest = t.subspan(static_cast<size_t>(start));
    const size_t n = std::min(rest.size(), tokens.size());
    return static_cast<int64_t>(
        std::mismatch(tokens.begin(), tokens.begin() + static_cast<int64_t>(n), rest.begin()).first -
        tokens.begin());
  }
};

PrefixCache::PrefixCache(Memory& memory, PrefixCacheOptions options) : mem_(memory), opt_(options) {
  counters_.budget_bytes = opt_.ram_bytes;
  // Under pool pressure, give back blocks: only evictions that free some count.
  mem_.set_reclaimer([this] {
    const int64_t before = mem_.free_blocks();
    while (evict_one())
      if (mem_.free_blocks() > before) return true;
    return false;
  });
}

PrefixCache::~PrefixCache() {
  mem_.set_reclaimer(nullptr);
  clear();
}

PrefixCache::Node& PrefixCache::root(std::string_view ns) {
  for (auto& [name, node] : roots_)
    if (name == ns) return *node;
  roots_.emplace_back(std::string(ns), std::make_unique<Node>());
  return *roots_.back().second;
}

CacheHit PrefixCache::lookup(std::string_view ns, std::span<const int32_t> tokens) {
  ++clock_;
  ++counters_.lookups;
  counters_.tokens_looked_up += tokens.size();
  CacheHit hit;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t bs = mem_.options().block_size;
  Node* node = nullptr;
  for (auto& [name, r] : roots_)
    if (name == ns) node = r.get();
  Entry* best = nullptr;
  Node* best_node = nullptr;
  const Node* stop = nullptr;  // the node the match ends in
  while (node != nullptr) {
    Node* down = nullptr;
    for (const auto& child : node->children) {
      const int64_t l = child->common(tokens);
      if (l == 0) continue;
      const int64_t m = child->start + l;
      if (m > hit.matched) hit.matched = m, stop = child.get();
      for (const auto& e : child->entries) {
        if (e->c.pos <= m && (best == nullptr || e->c.pos > best->c.pos)) {
          best = e.get();
          best_node = child.get();
        }
      }
      if (l == static_cast<int64_t>(child->tokens.size()) && l == bs && m < n) down = child.get();
    }
    node = down;
  }
  // For the record of a miss: the nearest checkpoint past the match in the subtree it ends in.
  int64_t next = std::numeric_limits<int64_t>::max();
  std::vector<const Node*> below;
  if (stop != nullptr) below.push_back(stop);
  while (!below.empty()) {
    const Node* p = below.back();
    below.pop_back();
    for (const auto& e : p->entries)
      if (e->c.pos > hit.matched) {
        next = std::min(next, e->c.pos);
        break;
      }
    for (const auto& child : p->children) below.push_back(child.get());
  }
  if (best != nullptr) {
    best->last_used = clock_;
    hit.pos = best->c.pos;
    hit.checkpoint = &best->c;
    for (const Node* p = best_node; p->parent != nullptr; p = p->parent) hit.blocks.push_back(p->block);
    std::reverse(hit.blocks.begin(), hit.blocks.end());
    // The MTP rows: the run of valid rows that ends at the checkpoint, back through whole valid blocks.
    const Node* p = best_node;
    if (p->mtp_hi >= hit.pos && p->mtp_lo < hit.pos) {
      hit.mtp_begin = p->mtp_lo;
      hit.mtp_end = hit.pos;
      while (hit.mtp_begin == p->start && p->parent != nullptr && p->parent->parent != nullptr &&
             p->parent->mtp_hi == p->parent->end() && p->parent->mtp_lo < p->parent->mtp_hi) {
        p = p->parent;
        hit.mtp_begin = p->mtp_lo;
      }
    }
  }
  if (next != std::numeric_limits<int64_t>::max()) hit.next_checkpoint = next;
  counters_.tokens_hit += static_cast<uint64_t>(hit.pos);
  counters_.tokens_recomputed += static_cast<uint64_t>(hit.matched - hit.pos);
  return hit;
}

void PrefixCache::attach(Node& node, std::unique_ptr<Entry> e) {
  MTP_CHECK(e->c.pos > node.start && e->c.pos <= node.end(), "checkpoint at ", e->c.pos, " outside ",
            node.start, "..", node.end());
  auto it = std::lower_bound(node.entries.begin(), node.entries.end(), e->c.pos,
                             [](const std::unique_ptr<Entry>& a, int64_t pos) { return a->c.pos < pos; });
  if (it != node.entries.end() && (*it)->c.pos == e->c.pos) return;  // the same state: keep the cached one
  counters_.state_bytes += e->bytes();
  node.entries.insert(it, std::move(e));
  ++tree_changes_;
  for (Node* p = &node; p != nullptr; p = p->parent) ++p->n_sub;
}

void PrefixCache::insert(std::string_view ns, std::span<const int32_t> tokens,
                         std::span<const int32_t> blocks, int64_t mtp_begin, int64_t mtp_end,
                         std::vector<Checkpoint> checkpoints) {
  ++clock_;
  ++counters_.inserts;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t bs = mem_.options().block_size;
  MTP_CHECK(static_cast<int64_t>(blocks.size()) >= (n + bs - 1) / bs, blocks.size(), " blocks for ", n,
            " positions");
  std::sort(checkpoints.begin(), checkpoints.end(),
            [](const Checkpoint& a, const Checkpoint& b) { return a.pos < b.pos; });
  for (const Checkpoint& c : checkpoints)
    MTP_CHECK(c.pos >= 1 && c.pos <= n && c.state.floats() == mem_.state_floats(), "checkpoint at ", c.pos,
              " of ", n);
  Node* node = &root(ns);
  size_t ci = 0;
  for (int64_t k = 0; k * bs < n; ++k) {
    const int64_t s0 = k * bs, s1 = std::min(n, s0 + bs);
    const std::span<const int32_t> seg =
        tokens.subspan(static_cast<size_t>(s0), static_cast<size_t>(s1 - s0));
    const int32_t blk = blocks[static_cast<size_t>(k)];
    int64_t lo = std::max(mtp_begin, s0), hi = std::min(mtp_end, s1);
    if (lo >= hi) lo = hi = s0;
    Node* c = nullptr;
    for (const auto& child : node->children) {
      const int64_t l = child->common(tokens);
      const int64_t len = static_cast<int64_t>(child->tokens.size());
      if (l == len && len == s1 - s0) {  // the same tokens: keep the block with more MTP rows
        c = child.get();
        if (c->block != blk && hi - lo > c->mtp_hi - c->mtp_lo) {
          mem_.retain_block(blk);
          mem_.release_block(c->block);
          c->block = blk;
          c->mtp_lo = lo, c->mtp_hi = hi;
        }
        break;
      }
      if (l == len && len < s1 - s0) {  // a cached partial block this one extends: it takes its place
        c = child.get();
        mem_.retain_block(blk);
        mem_.release_block(c->block);
        c->block = blk;
        c->tokens.assign(seg.begin(), seg.end());
        c->mtp_lo = lo, c->mtp_hi = hi;
        break;
      }
      if (l == s1 - s0 && l < len) {  // this history ends inside a longer cached block
        c = child.get();
        break;
      }
    }
    if (c == nullptr) {
      auto fresh = std::make_unique<Node>();
      fresh->parent = node;
      fresh->start = s0;
      fresh->tokens.assign(seg.begin(), seg.end());
      fresh->block = blk;
      mem_.retain_block(blk);
      fresh->mtp_lo = lo, fresh->mtp_hi = hi;
      c = fresh.get();
      node->children.push_back(std::move(fresh));
    }
    for (; ci < checkpoints.size() && checkpoints[ci].pos <= s1; ++ci) {
      auto e = std::make_unique<Entry>();
      e->c = std::move(checkpoints[ci]);
      e->last_used = clock_;
      attach(*c, std::move(e));
    }
    node = c;
  }
  prune_from(node);  // a history without a checkpoint at its end leaves nothing behind it
  ++tree_changes_;
  trim();
}

void PrefixCache::remove_node(Node& node) {
  MTP_CHECK(node.parent != nullptr && node.children.empty() && node.entries.empty(), "removing a live node");
  mem_.release_block(node.block);
  ++tree_changes_;
  auto& siblings = node.parent->children;
  siblings.erase(std::find_if(siblings.begin(), siblings.end(),
                              [&](const std::unique_ptr<Node>& p) { return p.get() == &node; }));
}

void PrefixCache::prune_from(Node* node) {
  while (node != nullptr && node->parent != nullptr && node->n_sub == 0) {
    Node* parent = node->parent;
    remove_node(*node);
    node = parent;
  }
}

bool PrefixCache::evict_one() {
  const uint64_t block = mem_.block_bytes();
  double best_density = std::numeric_limits<double>::infinity();
  Node* best_node = nullptr;
  size_t best_index = 0;
  // Depth first, with the position of the deepest checkpoint above each node.
  struct Item {
    Node* node;
    int64_t prev;
  };
  std::vector<Item> stack;
  for (auto& [ns, root] : roots_) stack.push_back({root.get(), 0});
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    Node& node = *it.node;
    int64_t prev = it.prev;
    for (size_t i = 0; i < node.entries.size(); ++i) {
      const Entry& e = *node.entries[i];
      const bool tip =
          i + 1 == node.entries.size() && node.n_sub == static_cast<int64_t>(node.entries.size());
      const double age = static_cast<double>(clock_ - e.last_used);
      const double value =
          static_cast<double>(e.c.pos - prev) * std::exp2(-age / kHalfLifeEvents) * (tip ? kTipWeight : 1.0);
      uint64_t freed = e.bytes();
      for (const Node* p = &node; p->parent != nullptr && p->n_sub == 1; p = p->parent)
        if (mem_.block_refs(p->block) == 1) freed += block;
      const double density = value / static_cast<double>(std::max<uint64_t>(freed, 1));
      if (density < best_density) {
        best_density = density;
        best_node = &node;
        best_index = i;
      }
      prev = e.c.pos;
    }
    for (auto& child : node.children) stack.push_back({child.get(), prev});
  }
  if (best_node == nullptr) return false;
  counters_.state_bytes -= best_node->entries[best_index]->bytes();
  best_node->entries.erase(best_node->entries.begin() + static_cast<int64_t>(best_index));
  ++tree_changes_;
  for (Node* p = best_node; p != nullptr; p = p->parent) --p->n_sub;
  ++counters_.evictions;
  prune_from(best_node);
  return true;
}

const PrefixCache::TreeCounts& PrefixCache::tree_counts() const {
  // The server reads the gauges after every engine step; the walk is over every cached block, so it runs
  // only when the tree or some block's holders changed since the last one.
  if (counts_valid_ && counts_.tree_changes == tree_changes_ && counts_.refs_version == mem_.refs_version())
    return counts_;
  TreeCounts t;
  t.tree_changes = tree_changes_;
  t.refs_version = mem_.refs_version();
  walk_stack_.clear();
  for (const auto& [ns, root] : roots_) walk_stack_.push_back(root.get());
  while (!walk_stack_.empty()) {
    const Node* node = walk_stack_.back();
    walk_stack_.pop_back();
    if (node->parent != nullptr) {
      ++t.nodes;
      const int32_t refs = mem_.block_refs(node->block);
      if (refs > 1) ++t.shared_blocks;
      if (refs == 1) ++t.own_blocks;
    }
    t.checkpoints += static_cast<int64_t>(node->entries.size());
    for (const auto& child : node->children) walk_stack_.push_back(child.get());
  }
  counts_ = t;
  counts_valid_ = true;
  return counts_;
}

uint64_t PrefixCache::own_kv_bytes() const {
  return static_cast<uint64_t>(tree_counts().own_blocks) * mem_.block_bytes();
}

void PrefixCache::trim() {
  while (own_kv_bytes() + counters_.state_bytes > opt_.ram_bytes && evict_one()) {
  }
}

void PrefixCache::clear() {
  ++tree_changes_;
  for (auto& [ns, root] : roots_) {
    // Children before parents: a node's block goes back once nothing below it is left.
    std::vector<Node*> order{root.get()};
    for (size_t i = 0; i < order.size(); ++i)
      for (auto& child : order[i]->children) order.push_back(child.get());
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* node = *it;
      for (auto& e : node->entries) counters_.state_bytes -= e->bytes();
      node->entries.clear();
      node->n_sub = 0;
      if (node->parent != nullptr) remove_node(*node);
    }
  }
  roots_.clear();
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = counters_;
  const TreeCounts& t = tree_counts();
  s.nodes = t.nodes;
  s.shared_blocks = t.shared_blocks;
  s.checkpoints = t.checkpoints;
  s.kv_bytes = static_cast<uint64_t>(t.own_blocks) * mem_.block_bytes();
  return s;
}

std::vector<int64_t> PrefixCache::checkpoints_on(std::string_view ns, std::span<const int32_t> tokens) const {
  std::vector<int64_t> out;
  const Node* node = nullptr;
  for (const auto& [name, root] : roots_)
    if (name == ns) node = root.get();
  while (node != nullptr) {
    const Node* down = nullptr;
    for (const auto& child : node->children) {
      const int64_t len = static_cast<int64_t>(child->tokens.size());
      if (child->common(tokens) ==
              std::min<int64_t>(len, static_cast<int64_t>(tokens.size()) - child->start) &&
          child->start < static_cast<int64_t>(tokens.size())) {
        down = child.get();
        break;
      }
    }
    if (down == nullptr) break;
    for (const auto& e : down->entries)
      if (e->c.pos <= static_cast<int64_t>(tokens.size())) out.push_back(e->c.pos);
    node = down;
  }
  return out;
}

}  // namespace mtp
