// The prefix cache (docs/prefix-cache.md): what finished requests leave
// behind, shared by all slots, so that a chat or agent session's next turn computes only what is new.
//
// A radix tree over KV blocks: a node is one block of the Memory's pool (block_size positions) with the
// tokens it holds (1..block_size of them), its children are the blocks that follow it in some cached token
// history, and siblings may share a leading part of their tokens (histories that diverge inside a block).
// Lookup compares tokens, never hashes alone. The Gated DeltaNet state cannot be cut back like KV, so the
// cache also keeps exact copies of it at chosen positions (checkpoints: the end of a prompt, the end of a
// generation, message starts, every K tokens of a long prefill), each with the last token's post-norm hidden
// (its logits, and the MTP drafter's seed). A prompt resumes at the deepest checkpoint within its longest
// cached prefix: the blocks before it are shared (the one it ends in is copied when written), the state
// copied back, and only the tokens after it computed. KV beyond a path's last checkpoint is of no use (a
// resume starts at a checkpoint), so a node lives while a checkpoint at or below it does.
//
// Memory is bounded by one budget (`--cache-ram`) for everything the cache holds beyond live slots: its
// blocks that no slot shares and its checkpoints. Eviction takes the checkpoint of least value per byte it
// frees: value = the tokens it saves over the checkpoint before it on its path, halved every 32 cache events
// since it was last used, four times over for the last checkpoint of a path (the next turn of a session
// resumes there); a hit refreshes only the checkpoint it restored.
//
// Used by the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/memory.h"

namespace mtp {

struct PrefixCacheOptions {
  // What the cache may hold beyond live slots: its own KV blocks and its checkpoints. 0: no cache.
  uint64_t ram_bytes = 0;
  // A checkpoint every this many tokens of a long prompt (0: none), besides prompt ends, generation ends
  // and message starts. One checkpoint of the 35B-A3B shape (62.8 MiB) weighs as much as the F32 KV of about
  // 1,600 positions: 4096 keeps checkpoints under half of a long prompt's KV and bounds what an edit deep in
  // it recomputes to 4096 tokens.
  int64_t checkpoint_every = 4096;
  // A message-start or interval checkpoint closer than this to the position a request resumed from, to the
  // prompt's end or to the checkpoint before it is not taken: it would save almost nothing over its
  // neighbour (in chat traffic a message starts two tokens after the previous reply ends) and cost a whole
  // recurrent state.
  int64_t checkpoint_min_gap = 64;
};

// The prefix cache's RAM budget (PrefixCacheOptions::ram_bytes) from the --cache-ram setting in MiB:
//   unset  the default: 8 GiB, at most a quarter of physical memory and, once the model is loaded
//          (`available` > 0), at most half of the memory still available (a 35B-A3B IQ4_XS model holds
//          about 19 GB of a 24 GB machine);
//   -1     half of physical memory;  0  no cache;  N > 0  N MiB, refused beyond physical memory.
// Errors name the setting; `physical` or `available` 0 means unknown (that cap is skipped).
Expected<uint64_t> prefix_cache_budget(std::optional<int64_t> mib, uint64_t physical, uint64_t available);

enum class CheckpointKind : uint8_t { kInterval, kMessage, kPromptEnd, kGenerationEnd };
const char* checkpoint_kind_name(
    CheckpointKind kind);  // "interval", "message", "prompt_end", "generation_end"

struct Checkpoint {
  int64_t pos = 0;  // the recurrent state after tokens [0, pos); pos >= 1
  CheckpointKind kind = CheckpointKind::kInterval;
  GdnState state;
  std::vector<float> hidden;  // h_final of token pos-1 (n_embd values)
};

// What lookup found for a prompt.
struct CacheHit {
  int64_t matched = 0;  // leading tokens whose KV the cache holds
  int64_t pos = 0;      // the restored checkpoint's position: tokens [0, pos) need no computing (0: none)
  const Checkpoint* checkpoint = nullptr;  // when pos > 0; valid until the cache next changes
  std::vector<int32_t> blocks;             // the KV blocks of positions [0, pos)
  int64_t mtp_begin = 0, mtp_end = 0;      // MTP rows those blocks hold, [mtp_begin, mtp_end) (empty: none)
  int64_t next_checkpoint = -1;  // the first checkpoint past `matched` on the matched path (why: a miss)
};

struct PrefixCacheStats {
  uint64_t lookups = 0;
  uint64_t tokens_looked_up = 0;
  uint64_t tokens_hit = 0;         // restored, not computed
  uint64_t tokens_recomputed = 0;  // matched but behind the restored checkpoint, so computed again
  uint64_t inserts = 0;
  uint64_t evictions = 0;  // checkpoints evicted
  int64_t nodes = 0;
  int64_t checkpoints = 0;
  int64_t shared_blocks = 0;  // held by the cache and also by a live sequence
  uint64_t kv_bytes = 0;      // the cache's blocks no live sequence shares
  uint64_t state_bytes = 0;   // checkpoints (recurrent states and hiddens)
  uint64_t budget_bytes = 0;
};

class PrefixCache {
 public:
  // `memory` must outlive the cache; the cache registers itself as its reclaimer.
  PrefixCache(Memory& memory, PrefixCacheOptions options);
  ~PrefixCache();  // gives every block back
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest cached prefix of `tokens` in namespace `ns` (requests of other namespaces never share) and
  // the deepest checkpoint at or before its end. Refreshes that checkpoint.
  CacheHit lookup(std::string_view ns, std::span<const int32_t> tokens);
  // Publishes a sequence's token history [0, n), n = tokens.size(): its block table (at least ceil(n /
  // block_size) blocks; the cache takes references of its own), the MTP rows valid in it [mtp_begin,
  // mtp_end), and its checkpoints (positions in [1, n]; a position the cache has on this path already keeps
  // the cached one). Nodes the cache holds already keep their block. Then evicts down to the budget.
  void insert(std::string_view ns, std::span<const int32_t> tokens, std::span<const int32_t> blocks,
              int64_t mtp_begin, int64_t mtp_end, std::vector<Checkpoint> checkpoints);
  // Evicts the checkpoint of least value per byte and the nodes only it kept; false when there is none.
  bool evict_one();
  // Evicts until the cache's own bytes are within the budget (live sequences give blocks back over time).
  void trim();
  void clear();

  PrefixCacheStats stats() const;
  const PrefixCacheOptions& options() const { return opt_; }
  // The positions of the checkpoints on the path of `tokens` (the whole of it must be cached), in order;
  // for tests.
  std::vector<int64_t> checkpoints_on(std::string_view ns, std::span<const int32_t> tokens) const;

 private:
  struct Node;
  struct Entry;
  Node& root(std::string_view ns);
  void attach(Node& node, std::unique_ptr<Entry> e);
  void remove_node(Node& node);  // a childless node without checkpoints: its block goes back
  void prune_from(Node* node);   // removes nodes up from `node` while no checkpoint keeps them
  uint64_t own_kv_bytes() const;
  // What a walk over the tree counts, remembered until the tree (tree_changes_) or a block's holders
  // (Memory::refs_version) change.
  struct TreeCounts {
    uint64_t tree_changes = 0, refs_version = 0;
    int64_t nodes = 0, checkpoints = 0, shared_blocks = 0, own_blocks = 0;
  };
  const TreeCounts& tree_counts() const;

  Memory& mem_;
  PrefixCacheOptions opt_;
  std::vector<std::pair<std::string, std::unique_ptr<Node>>> roots_;
  uint64_t clock_ = 0;  // cache events: lookups and inserts
  PrefixCacheStats counters_;
  uint64_t tree_changes_ = 0;  // nodes or checkpoints added or removed
  mutable TreeCounts counts_;
  mutable bool counts_valid_ = false;
  mutable std::vector<const Node*> walk_stack_;  // reused by tree_counts()
};

}  // namespace mtp
