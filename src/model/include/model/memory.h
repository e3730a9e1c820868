// Per-sequence state of the engine (docs/architecture.md section 3, docs/model.md sections 4.3 and 5), for
// many sequences at once:
//  * attention KV (post-norm, post-RoPE K and V) of every trunk full-attention layer and of the MTP block, in
//    ONE pool of fixed-size blocks shared by all sequences. A block holds `block_size` consecutive positions
//    of one token history for every attention slot (trunk attention layers, then the MTP block), so a
//    sequence's block table maps position p to block table[p / block_size] for all its layers, and one long
//    sequence may use most of the pool while others stay short. Blocks are reference counted: the prefix
//    cache (engine/prefix_cache.h) keeps finished sequences' blocks, and a sequence that starts from a cached
//    prefix shares them (seq_attach); a shared block is copied before a sequence writes into it (copy on
//    write, in begin_writes). Rows are stored as F32, F16 or Q8_0 (cache_type_k/v; Q8_0: 32-element blocks
//    with an fp16 scale, as llama.cpp's q8_0 cache); attention reads them back as f32.
//  * for every Gated DeltaNet layer the conv window ((d_conv-1) x conv_dim) and the SSM state (H_v x d x d),
//    in K+1 "planes" per sequence (K = max draft length snapshots). Every row of a batch updates the live
//    plane in place; for the snapshot rows (at most K trailing rows that ask for logits, never the first
//    row: verify rows d1..dn, a prompt chunk's last row), the state after the row before each of them is
//    also copied into a plane of its own as the delta rule writes it, so rollback(seq, keep) to any kept row
//    only re-points the live plane: no copy at rollback. The state before a batch is not kept: a plain
//    decode step is one in-place update, the cheapest there is. A plane is a GdnState (every GDN layer's
//    state in one buffer), which is also the prefix cache's checkpoint format: save_state / restore_state
//    copy the live plane, take_state moves it out.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/qwen35moe_config.h"
#include "quant/types.h"

namespace mtp {

class ThreadPool;

struct MemoryOptions {
  int64_t n_ctx = 4096;      // positions in the shared KV pool, all sequences together (`-c`)
  int32_t n_seq = 1;         // sequence slots (`-np`)
  int32_t n_snapshots = 4;   // K: GDN states kept after each of the last K rows but the first (max draft)
  int64_t block_size = 256;  // positions per KV block
  bool mtp = true;           // keep KV for the MTP block (when the model has one)
  // Memory the state may take; 0 = 90% of physical memory. Exceeding it is a clear error at create().
  uint64_t max_bytes = 0;
  // More KV blocks, this many bytes of them, for the prefix cache's own use (beyond the ones the n_ctx
  // positions and n_seq partial blocks need). Not counted against max_bytes: the pool's pages are touched
  // only when used, and the cache bounds what it keeps by its own budget.
  uint64_t extra_kv_bytes = 0;
  // Storage of the attention KV rows (`--cache-type-k/-v`): F32 (exact), F16 or Q8_0.
  GgmlType cache_type_k = GgmlType::F32;
  GgmlType cache_type_v = GgmlType::F32;
};

// "f32", "f16" or "q8_0" (any case) as a KV cache type; kInvalidArgument naming the choices otherwise.
Expected<GgmlType> kv_cache_type_from_name(std::string_view name);

struct Workspace;  // the forward pass's scratch (forward.cpp)

// The recurrent state of one sequence: for every GDN layer g, its conv window then its SSM state, at
// g * (conv_floats + ssm_floats). An owning buffer, 2 MB aligned (huge pages where the kernel allows them);
// movable, not copyable. Empty (data() == nullptr) when default-constructed or when allocation failed.
class GdnState {
 public:
  GdnState() = default;
  // Uninitialized; empty when the allocation fails.
  static GdnState allocate(int64_t floats);
  float* data() { return p_.get(); }
  const float* data() const { return p_.get(); }
  int64_t floats() const { return n_; }
  // What the allocation holds (floats() rounded up to its alignment): what a cache of states accounts.
  uint64_t bytes() const { return alloc_bytes_; }
  bool empty() const { return p_ == nullptr; }

 private:
  struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, FreeDeleter> p_;
  int64_t n_ = 0;
  uint64_t alloc_bytes_ = 0;
};

class Memory {
 public:
  // Sizes everything from the options: ceil(n_ctx / block_size) + n_seq blocks (one partial block per
  // sequence), n_seq * (K+1) GDN planes. Fails with kResourceExhausted, naming the sizes, when that exceeds
  // max_bytes.
  static Expected<Memory> create(const Qwen35MoeConfig& config, const MemoryOptions& options);
  Memory(Memory&&) noexcept;
  Memory& operator=(Memory&&) noexcept;
  ~Memory();

  // A free sequence slot, reset to empty; kResourceExhausted when all n_seq are in use.
  Expected<int32_t> seq_create();
  void seq_free(int32_t seq);
  // Empty caches, zero recurrent state (keeps the slot).
  void seq_reset(int32_t seq);
  // Starts an empty active sequence from a cached prefix: its block table becomes `blocks` (shared: their
  // reference counts go up), covering trunk positions [0, n_past) and MTP rows [mtp_begin, mtp_end) (empty
  // when equal). The recurrent state is not touched (restore_state sets it). kInvalidArgument when the
  // sequence is not empty or the blocks do not cover the positions.
  Status seq_attach(int32_t seq, std::span<const int32_t> blocks, int64_t n_past, int64_t mtp_begin,
                    int64_t mtp_end);
  bool seq_active(int32_t seq) const;
  // Trunk positions processed: the next trunk row of this sequence must be at this position.
  int64_t seq_pos(int32_t seq) const;
  // The MTP block's cached positions [begin, end) (empty when begin == end).
  int64_t mtp_begin(int32_t seq) const;
  int64_t mtp_end(int32_t seq) const;

  // Keeps the first `keep_rows` rows of this sequence's last trunk batch (n rows at p0..p0+n-1): the GDN
  // state becomes the one after row keep_rows-1, the trunk KV is truncated to positions < p0 + keep_rows and
  // the MTP KV to the same bound. Valid when keep_rows >= 1 and rows keep_rows..n-1 were snapshot rows (at
  // most K trailing rows that asked for logits, not the first; keep_rows = n is always valid); otherwise an
  // error that says so. Single use until the next trunk batch of the sequence.
  Status rollback(int32_t seq, int64_t keep_rows);
  // Drops the MTP KV rows at positions >= pos.
  void truncate_mtp(int32_t seq, int64_t pos);

  // --- Recurrent state copies (prefix-cache checkpoints). `pool` (optional) spreads the copy over threads.
  int64_t state_floats() const { return n_gdn_ * (conv_floats_ + ssm_floats_); }
  uint64_t state_bytes() const { return static_cast<uint64_t>(state_floats()) * sizeof(float); }
  // A new buffer of state_floats() (uninitialized); empty when the allocation fails.
  GdnState new_state() const { return GdnState::allocate(state_floats()); }
  // The live plane into `dst` (sized state_floats()).
  void save_state(int32_t seq, GdnState& dst, ThreadPool* pool = nullptr) const;
  // `src` into the live plane; the last batch can no longer be rolled back.
  void restore_state(int32_t seq, const GdnState& src, ThreadPool* pool = nullptr);
  // Moves the live plane out (no copy) and gives the sequence a fresh buffer in its place, whose contents are
  // undefined until seq_reset/restore_state: for a sequence about to be freed. Empty when no buffer could be
  // allocated (nothing changed then).
  GdnState take_state(int32_t seq);

  // --- KV blocks.
  int64_t n_blocks() const { return static_cast<int64_t>(refs_.size()); }
  uint64_t block_bytes() const;
  int32_t block_refs(int32_t block) const { return refs_[static_cast<size_t>(block)]; }
  // Changes whenever any block's holders change: what is derived from block_refs() is current while it
  // stays the same.
  uint64_t refs_version() const { return refs_version_; }
  // Another holder of `block` (the prefix cache); release_block drops one, and the last one frees it.
  void retain_block(int32_t block);
  void release_block(int32_t block);
  // Called when the pool has no free block; returns whether it freed any (the prefix cache evicts). Retried
  // until a block is free or it returns false.
  void set_reclaimer(std::function<bool()> reclaim) { reclaim_ = std::move(reclaim); }
  // The sequence will write KV rows at positions >= `from` (trunk and MTP): every shared block it holds
  // from there on is replaced by a private copy (the rows before `from` copied). False, with nothing but
  // completed copies changed, when no block can be had.
  bool begin_writes(int32_t seq, int64_t from);

  const MemoryOptions& options() const { return opt_; }
  uint64_t bytes() const;  // everything allocated
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

  // --- For the forward pass. ---
  struct Seq {
    bool active = false;
    int64_t n_past = 0;
    int64_t mtp_begin = 0, mtp_end = 0;
    std::vector<int32_t> blocks;  // block table
    int32_t live = 0;             // GDN plane holding the current state
    // The last trunk batch: rows p0..p0+n-1; plane_after[t] = plane with the state after row t, or -1.
    int64_t last_p0 = 0, last_n = 0;
    std::vector<int32_t> plane_after;
  };
  Seq& seq(int32_t s) { return seqs_[static_cast<size_t>(s)]; }
  const Seq& seq(int32_t s) const { return seqs_[static_cast<size_t>(s)]; }
  int32_t n_seq() const { return static_cast<int32_t>(seqs_.size()); }
  int32_t n_planes() const { return opt_.n_snapshots + 1; }
  int32_t n_attn_slots() const { return n_attn_slots_; }
  int32_t mtp_slot() const { return mtp_slot_; }  // -1 when there is no MTP KV
  int32_t attn_slot(int64_t layer) const { return attn_slot_[static_cast<size_t>(layer)]; }
  int32_t gdn_index(int64_t layer) const { return gdn_index_[static_cast<size_t>(layer)]; }
  int64_t kv_width() const { return kv_width_; }
  // Blocks so that positions < end are addressable; false (nothing changed) when the pool is exhausted or
  // end > n_ctx.
  bool ensure_positions(int32_t s, int64_t end);
  // K (kv = 0) or V (kv = 1) values of KV head h of `slot` at position p of sequence s: head_dim values
  // stored as kv_type(kv), kv_head_bytes(kv) bytes. A block holds, per slot, its positions' K rows then V
  // rows, head by head ([K, V][head][position]): attention reads one head's rows of a block as one contiguous
  // stream (a core reads half-rows of interleaved heads at a third of the rate).
  uint8_t* kv_head_row(int32_t s, int32_t slot, int kv, int64_t p, int64_t h) {
    const Seq& q = seqs_[static_cast<size_t>(s)];
    const int64_t bs = opt_.block_size, b = q.blocks[static_cast<size_t>(p / bs)];
    const int64_t slot_base = (b * n_attn_slots_ + slot) * bs * (kv_bytes_row_[0] + kv_bytes_row_[1]);
    return kv_.get() + slot_base + (kv == 0 ? 0 : bs * kv_bytes_row_[0]) +
           (h * bs + p % bs) * kv_bytes_head_[kv];
  }
  const uint8_t* kv_head_row(int32_t s, int32_t slot, int kv, int64_t p, int64_t h) const {
    return const_cast<Memory*>(this)->kv_head_row(s, slot, kv, p, h);
  }
  GgmlType kv_type(int kv) const { return kv == 0 ? opt_.cache_type_k : opt_.cache_type_v; }
  int64_t kv_head_bytes(int kv) const { return kv_bytes_head_[kv]; }
  int64_t conv_floats() const { return conv_floats_; }
  int64_t ssm_floats() const { return ssm_floats_; }
  float* conv_state(int32_t s, int32_t plane, int32_t g) { return gdn_state(s, plane, g); }
  float* ssm_state(int32_t s, int32_t plane, int32_t g) { return gdn_state(s, plane, g) + conv_floats_; }
  Workspace& workspace() { return *ws_; }

 private:
  Memory() = default;
  float* gdn_state(int32_t s, int32_t plane, int32_t g) {
    return planes_[static_cast<size_t>(s) * static_cast<size_t>(n_planes()) + static_cast<size_t>(plane)]
               .data() +
           g * (conv_floats_ + ssm_floats_);
  }
  GdnState& live_plane(int32_t s) {
    return planes_[static_cast<size_t>(s) * static_cast<size_t>(n_planes()) +
                   static_cast<size_t>(seqs_[static_cast<size_t>(s)].live)];
  }
  void trim_blocks(int32_t s);
  // A free block (its reference count 1), asking the reclaimer when there is none; -1 when none can be had.
  int32_t take_free_block();

  Qwen35MoeConfig config_;
  MemoryOptions opt_;
  int32_t n_attn_slots_ = 0, mtp_slot_ = -1, n_gdn_ = 0;
  std::vector<int32_t> attn_slot_, gdn_index_;  // per trunk layer, -1 when not of that kind
  int64_t kv_width_ = 0, conv_floats_ = 0, ssm_floats_ = 0;
  int64_t kv_bytes_row_[2] = {0, 0};   // bytes of one K / V row (all KV heads)
  int64_t kv_bytes_head_[2] = {0, 0};  // bytes of one head's part of it
  // KV is not zero-filled (pages are touched only when used; rows are written before they are read); the GDN
  // planes are zeroed at create (touched once up front) and a sequence's again by seq_create/seq_reset.
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  // n_blocks x n_attn_slots x {K, V} x KV heads x block_size head rows, 2 MB aligned
  std::unique_ptr<uint8_t, FreeDeleter> kv_;
  // n_seq x planes, each n_gdn x (conv + ssm) (with conv and ssm multiples of 16 floats, every head's state
  // is 64-byte aligned: snapshots are written with streaming stores)
  std::vector<GdnState> planes_;
  uint64_t kv_bytes_ = 0, gdn_bytes_ = 0;
  std::vector<int32_t> free_;
  std::vector<int32_t> refs_;  // per block: holders (sequences' tables and the prefix cache); 0 = free
  uint64_t refs_version_ = 0;
  std::function<bool()> reclaim_;
  std::vector<Seq> seqs_;
  std::unique_ptr<Workspace> ws_;
};

}  // namespace mtp
