#include "model/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/check.h"
#include "base/system_memory.h"
#include "base/thread_pool.h"
#include "workspace.h"

namespace mtp {

namespace {
// Whole MiB, rounded up, for messages.
uint64_t mib(uint64_t b) {
  return (b + (uint64_t{1} << 20) - 1) >> 20;
}
constexpr uint64_t kHugePage = uint64_t{2} << 20;
// States from this size on are rounded up to huge pages (at most half again what they hold; the 8-layer
// 35B-A3B-width benchmark file's 12.6 MB state takes 14 MiB).
constexpr uint64_t kHugeStateMin = 2 * kHugePage;

// A state copy is tens of MB at 35B-A3B widths (62.8 MiB): over the pool's threads in 1 MB pieces, as one
// core's copy runs at a fraction of the machine's bandwidth.
void copy_floats(float* dst, const float* src, int64_t n, ThreadPool* pool) {
  constexpr int64_t kPiece = int64_t{1} << 18;
  if (pool == nullptr || pool->size() == 1 || n <= kPiece) {
    std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  pool->parallel_for(static_cast<size_t>((n + kPiece - 1) / kPiece), [&](size_t i, int) {
    const int64_t b = static_cast<int64_t>(i) * kPiece, e = std::min(n, b + kPiece);
    std::memcpy(dst + b, src + b, sizeof(float) * static_cast<size_t>(e - b));
  });
}
}  // namespace

GdnState GdnState::allocate(int64_t floats) {
  GdnState st;
  const uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(floats, 1)) * sizeof(float);
  // Huge pages where the kernel allows them, for states of several (35B-A3B: 63 MB a state): fewer TLB
  // misses over the 64 KB head states of many sequences. Not for small ones: under transparent huge pages
  // each would hold a whole 2 MiB page (measured on a tiny model: 16 KB prefix-cache checkpoints took 2 MiB
  // of resident memory each, 860 MiB against the cache's 60 MiB of state).
  const bool huge = bytes >= kHugeStateMin;
  const uint64_t align = huge ? kHugePage : 64;
  const uint64_t alloc = (bytes + align - 1) / align * align;
  st.p_.reset(static_cast<float*>(std::aligned_alloc(align, alloc)));
  if (st.p_ == nullptr) return st;
  if (huge) madvise(st.p_.get(), alloc, MADV_HUGEPAGE);
  st.n_ = floats;
  st.alloc_bytes_ = alloc;
  return st;
}

Expected<GgmlType> kv_cache_type_from_name(std::string_view name) {
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "f32") return GgmlType::F32;
  if (lower == "f16") return GgmlType::F16;
  if (lower == "q8_0") return GgmlType::Q8_0;
  return invalid_argument("unknown KV cache type '", name, "' (expected f32, f16 or q8_0)");
}

Memory::Memory(Memory&&) noexcept = default;
Memory& Memory::operator=(Memory&&) noexcept = default;
Memory::~Memory() = default;

Expected<Memory> Memory::create(const Qwen35MoeConfig& c, const MemoryOptions& o) {
  if (o.n_ctx <= 0) return invalid_argument("context size must be > 0, got ", o.n_ctx);
  if (o.n_seq <= 0) return invalid_argument("sequence slots must be > 0, got ", o.n_seq);
  if (o.n_snapshots < 0) return invalid_argument("snapshots must be >= 0, got ", o.n_snapshots);
  if (o.block_size <= 0) return invalid_argument("KV block size must be > 0, got ", o.block_size);
  for (GgmlType t : {o.cache_type_k, o.cache_type_v}) {
    if (t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::Q8_0)
      return invalid_argument("KV cache type ", type_name(t), " is not supported (f32, f16 or q8_0)");
    if (t == GgmlType::Q8_0 && c.head_dim % 32 != 0)
      return invalid_argument("a q8_0 KV cache needs a head size that is a multiple of 32, not ", c.head_dim);
  }
  Memory m;
  m.config_ = c;
  m.opt_ = o;
  m.attn_slot_.assign(static_cast<size_t>(c.n_layer), -1);
  m.gdn_index_.assign(static_cast<size_t>(c.n_layer), -1);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (c.is_full_attention(il))
      m.attn_slot_[il] = m.n_attn_slots_++;
    else
      m.gdn_index_[il] = m.n_gdn_++;
  }
  if (o.mtp && c.n_nextn > 0) m.mtp_slot_ = m.n_attn_slots_++;
  m.kv_width_ = c.n_head_kv * c.head_dim;
  m.conv_floats_ = (c.ssm_d_conv - 1) * c.gdn_conv_dim();
  m.ssm_floats_ = c.ssm_dt_rank * c.ssm_d_state * c.ssm_d_state;

  m.kv_bytes_row_[0] = row_size(o.cache_type_k, m.kv_width_);
  m.kv_bytes_row_[1] = row_size(o.cache_type_v, m.kv_width_);
  m.kv_bytes_head_[0] = row_size(o.cache_type_k, c.head_dim);
  m.kv_bytes_head_[1] = row_size(o.cache_type_v, c.head_dim);
  const uint64_t block_bytes = m.block_bytes();
  const int64_t n_guaranteed = (o.n_ctx + o.block_size - 1) / o.block_size + o.n_seq;
  const int64_t n_blocks =
      n_guaranteed + static_cast<int64_t>(o.extra_kv_bytes / std::max<uint64_t>(block_bytes, 1));
  const uint64_t kv_bytes = static_cast<uint64_t>(n_blocks) * block_bytes;
  const uint64_t gdn_floats =
      static_cast<uint64_t>(o.n_seq) * m.n_planes() * m.n_gdn_ * (m.conv_floats_ + m.ssm_floats_);
  m.kv_bytes_ = kv_bytes;
  m.gdn_bytes_ = gdn_floats * sizeof(float);
  const uint64_t limit = o.max_bytes != 0 ? o.max_bytes : physical_memory_bytes() / 10 * 9;
  const uint64_t guaranteed = static_cast<uint64_t>(n_guaranteed) * block_bytes + m.gdn_bytes_;
  if (limit != 0 && guaranteed > limit) {
    return Status(
        StatusCode::kResourceExhausted,
        str_cat("the model state does not fit: KV cache for ", o.n_ctx, " positions (", n_guaranteed,
                " blocks of ", o.block_size, ", ", m.n_attn_slots_, " attention layers, K ",
                type_name(o.cache_type_k), ", V ", type_name(o.cache_type_v), ") takes ",
                mib(guaranteed - m.gdn_bytes_), " MiB and the recurrent state of ", o.n_seq, " sequences x ",
                m.n_planes(), " planes x ", m.n_gdn_, " delta-net layers takes ", mib(m.gdn_bytes_), " MiB; ",
                mib(limit), " MiB available (reduce -c, -np or the draft length)"));
  }
  const uint64_t kv_alloc = (std::max<uint64_t>(kv_bytes, 1) + kHugePage - 1) / kHugePage * kHugePage;
  m.kv_.reset(static_cast<uint8_t*>(std::aligned_alloc(kHugePage, kv_alloc)));
  if (m.kv_ == nullptr) {
    return Status(StatusCode::kResourceExhausted,
                  str_cat("cannot allocate ", mib(kv_alloc), " MiB for the KV cache (this machine has ",
                          mib(physical_memory_bytes()), " MiB)"));
  }
  // Huge pages where the kernel allows them: attention streams every K and V row of a long context per
  // step, and in 4 KB pages (4 rows of a 256-wide F32 head) each page costs a TLB miss and restarts the
  // hardware prefetcher.
  madvise(m.kv_.get(), kv_alloc, MADV_HUGEPAGE);
  // The blocks the sequences are guaranteed (n_ctx of them and one partial block each) are touched now, as
  // the GDN planes below: blocks are handed out from block 0, so these are the ones the first requests write,
  // and a first touch costs a page fault and a zeroed page (on a virtual machine whose host backs memory
  // lazily, 16-52 ms per 2 MiB huge page), which would land on the first steps of the first requests and,
  // as an engine with an MTP block has more KV per position, misprice drafting against plain decoding. The
  // blocks beyond them (the prefix cache's budget) are touched as the cache grows into them.
  std::memset(m.kv_.get(), 0,
              std::min<uint64_t>(kv_alloc, static_cast<uint64_t>(n_guaranteed) * block_bytes));
  // Every GDN plane is touched now rather than on its first snapshot: a first touch costs a page fault and a
  // zeroed page per 4 KB, which otherwise lands on the first few decode and verify steps of each request
  // (measured 2-3x a steady step at 16 slots) and misleads the auto policy's step-time model.
  m.planes_.resize(static_cast<size_t>(o.n_seq) * static_cast<size_t>(m.n_planes()));
  for (GdnState& plane : m.planes_) {
    plane = m.new_state();
    if (plane.empty()) {
      return Status(StatusCode::kResourceExhausted, str_cat("cannot allocate ", mib(m.gdn_bytes_),
                                                            " MiB for the recurrent state (this machine has ",
                                                            mib(physical_memory_bytes()), " MiB)"));
    }
    std::fill_n(plane.data(), plane.floats(), 0.0f);
  }
  m.free_.resize(static_cast<size_t>(n_blocks));
  m.refs_.assign(static_cast<size_t>(n_blocks), 0);
  // Handed out from the back: block 0 first.
  for (int64_t b = 0; b < n_blocks; ++b) m.free_[b] = static_cast<int32_t>(n_blocks - 1 - b);
  m.seqs_.resize(static_cast<size_t>(o.n_seq));
  m.ws_ = std::make_unique<Workspace>();
  return m;
}

uint64_t Memory::bytes() const {
  return kv_bytes_ + gdn_bytes_;
}

Expected<int32_t> Memory::seq_create() {
  for (int32_t s = 0; s < n_seq(); ++s) {
    if (seqs_[s].active) continue;
    seqs_[s].active = true;
    seq_reset(s);
    return s;
  }
  return Status(StatusCode::kResourceExhausted, str_cat("all ", n_seq(), " sequence slots are in use"));
}

void Memory::seq_free(int32_t s) {
  MTP_CHECK(s >= 0 && s < n_seq());
  seq_reset(s);
  seqs_[s].active = false;
}

void Memory::seq_reset(int32_t s) {
  MTP_CHECK(s >= 0 && s < n_seq());
  Seq& q = seqs_[s];
  q.n_past = q.mtp_begin = q.mtp_end = 0;
  q.live = 0;
  q.last_p0 = q.last_n = 0;
  q.plane_after.assign(static_cast<size_t>(n_planes()), -1);
  trim_blocks(s);
  for (int32_t g = 0; g < n_gdn_; ++g) std::fill_n(gdn_state(s, q.live, g), conv_floats_ + ssm_floats_, 0.0f);
}

bool Memory::seq_active(int32_t s) const {
  return s >= 0 && s < n_seq() && seqs_[s].active;
}
int64_t Memory::seq_pos(int32_t s) const {
  return seqs_[s].n_past;
}
int64_t Memory::mtp_begin(int32_t s) const {
  return seqs_[s].mtp_begin;
}
int64_t Memory::mtp_end(int32_t s) const {
  return seqs_[s].mtp_end;
}

int32_t Memory::take_free_block() {
  while (free_.empty())
    if (!reclaim_ || !reclaim_()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  MTP_CHECK(refs_[static_cast<size_t>(b)] == 0, "free block ", b, " has holders");
  refs_[static_cast<size_t>(b)] = 1;
  ++refs_version_;
  return b;
}

void Memory::retain_block(int32_t b) {
  MTP_CHECK(b >= 0 && b < n_blocks() && refs_[static_cast<size_t>(b)] > 0, "retain of free block ", b);
  ++refs_[static_cast<size_t>(b)];
  ++refs_version_;
}

void Memory::release_block(int32_t b) {
  MTP_CHECK(b >= 0 && b < n_blocks() && refs_[static_cast<size_t>(b)] > 0, "release of free block ", b);
  if (--refs_[static_cast<size_t>(b)] == 0) free_.push_back(b);
  ++refs_version_;
}

uint64_t Memory::block_bytes() const {
  return static_cast<uint64_t>(n_attn_slots_) * static_cast<uint64_t>(opt_.block_size) *
         static_cast<uint64_t>(kv_bytes_row_[0] + kv_bytes_row_[1]);
}

bool Memory::ensure_positions(int32_t s, int64_t end) {
  if (end > opt_.n_ctx) return false;
  Seq& q = seqs_[s];
  const int64_t need = (end + opt_.block_size - 1) / opt_.block_size - static_cast<int64_t>(q.blocks.size());
  for (int64_t i = 0; i < need; ++i) {
    const int32_t b = take_free_block();
    if (b < 0) return false;  // the blocks taken so far stay attached (trimmed when the sequence shrinks)
    q.blocks.push_back(b);
  }
  return true;
}

bool Memory::begin_writes(int32_t s, int64_t from) {
  Seq& q = seqs_[static_cast<size_t>(s)];
  const int64_t bs = opt_.block_size;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(from, 0) / bs); i < q.blocks.size(); ++i) {
    const int32_t old = q.blocks[i];
    if (refs_[static_cast<size_t>(old)] == 1) continue;
    const int32_t b = take_free_block();
    if (b < 0) return false;
    // The rows before `from` of every slot, K and V, every head (the rest will be written before it is read).
    const int64_t keep = std::clamp<int64_t>(from - static_cast<int64_t>(i) * bs, 0, bs);
    const uint64_t slot_bytes = static_cast<uint64_t>(bs) * (kv_bytes_row_[0] + kv_bytes_row_[1]);
    for (int32_t slot = 0; slot < n_attn_slots_ && keep > 0; ++slot) {
      for (int kv = 0; kv < 2; ++kv) {
        const uint64_t part = kv == 0 ? 0 : static_cast<uint64_t>(bs) * kv_bytes_row_[0];
        for (int64_t h = 0; h * kv_bytes_head_[kv] < kv_bytes_row_[kv]; ++h) {
          const uint64_t off = (static_cast<uint64_t>(slot) * slot_bytes) + part +
                               static_cast<uint64_t>(h * bs) * kv_bytes_head_[kv];
          std::memcpy(kv_.get() + static_cast<uint64_t>(b) * block_bytes() + off,
                      kv_.get() + static_cast<uint64_t>(old) * block_bytes() + off,
                      static_cast<size_t>(keep * kv_bytes_head_[kv]));
        }
      }
    }
    q.blocks[i] = b;
    release_block(old);
  }
  return true;
}

void Memory::trim_blocks(int32_t s) {
  Seq& q = seqs_[s];
  const int64_t end = std::max(q.n_past, q.mtp_end);
  const size_t keep = static_cast<size_t>((end + opt_.block_size - 1) / opt_.block_size);
  while (q.blocks.size() > keep) {
    release_block(q.blocks.back());
    q.blocks.pop_back();
  }
}

Status Memory::seq_attach(int32_t s, std::span<const int32_t> blocks, int64_t n_past, int64_t mtp_begin,
                          int64_t mtp_end) {
  if (!seq_active(s)) return invalid_argument("attach to inactive sequence ", s);
  Seq& q = seqs_[static_cast<size_t>(s)];
  if (q.n_past != 0 || q.mtp_end != q.mtp_begin || !q.blocks.empty())
    return invalid_argument("sequence ", s, " is not empty");
  const int64_t bs = opt_.block_size;
  if (n_past < 0 || n_past > opt_.n_ctx || mtp_begin < 0 || mtp_end < mtp_begin || mtp_end > n_past)
    return invalid_argument("attach of ", n_past, " positions (MTP rows ", mtp_begin, "..", mtp_end, ")");
  if (static_cast<int64_t>(blocks.size()) != (n_past + bs - 1) / bs)
    return invalid_argument(blocks.size(), " blocks for ", n_past, " positions of ", bs);
  for (int32_t b : blocks) retain_block(b);
  q.blocks.assign(blocks.begin(), blocks.end());
  q.n_past = n_past;
  q.mtp_begin = mtp_end > mtp_begin ? mtp_begin : 0;
  q.mtp_end = mtp_end > mtp_begin ? mtp_end : 0;
  q.last_p0 = q.last_n = 0;
  return Status::Ok();
}

void Memory::save_state(int32_t s, GdnState& dst, ThreadPool* pool) const {
  MTP_CHECK(seq_active(s) && dst.floats() == state_floats(), "save_state: bad sequence or buffer");
  const GdnState& live = planes_[static_cast<size_t>(s) * static_cast<size_t>(n_planes()) +
                                 static_cast<size_t>(seqs_[static_cast<size_t>(s)].live)];
  copy_floats(dst.data(), live.data(), state_floats(), pool);
}

void Memory::restore_state(int32_t s, const GdnState& src, ThreadPool* pool) {
  MTP_CHECK(seq_active(s) && src.floats() == state_floats(), "restore_state: bad sequence or buffer");
  copy_floats(live_plane(s).data(), src.data(), state_floats(), pool);
  Seq& q = seqs_[static_cast<size_t>(s)];
  q.last_p0 = q.last_n = 0;
  std::fill(q.plane_after.begin(), q.plane_after.end(), -1);
}

GdnState Memory::take_state(int32_t s) {
  MTP_CHECK(seq_active(s), "take_state of inactive sequence ", s);
  GdnState fresh = new_state();
  if (fresh.empty()) return fresh;
  std::swap(fresh, live_plane(s));
  Seq& q = seqs_[static_cast<size_t>(s)];
  q.last_p0 = q.last_n = 0;
  std::fill(q.plane_after.begin(), q.plane_after.end(), -1);
  return fresh;
}

void Memory::truncate_mtp(int32_t s, int64_t pos) {
  Seq& q = seqs_[s];
  q.mtp_end = std::min(q.mtp_end, std::max(pos, q.mtp_begin));
  if (q.mtp_end == q.mtp_begin) q.mtp_begin = q.mtp_end = 0;
  trim_blocks(s);
}

Status Memory::rollback(int32_t s, int64_t keep) {
  if (!seq_active(s)) return invalid_argument("rollback of inactive sequence ", s);
  Seq& q = seqs_[s];
  if (q.last_n == 0) return invalid_argument("sequence ", s, " has no batch to roll back");
  if (keep < 0 || keep > q.last_n)
    return invalid_argument("rollback keeps ", keep, " of ", q.last_n, " rows");
  if (keep == q.last_n) return Status::Ok();
  if (keep == 0) {
    return invalid_argument("sequence ", s,
                            ": the state before its last batch is not kept (rollback keeps at "
                            "least one row)");
  }
  const int32_t plane = q.plane_after[static_cast<size_t>(keep - 1)];
  if (plane < 0) {
    return invalid_argument("sequence ", s, ": the state after ", keep, " of ", q.last_n,
                            " rows was not kept (", opt_.n_snapshots, " snapshots)");
  }
  q.live = plane;
  q.n_past = q.last_p0 + keep;
  // Single use: the planes of later rows become free for the next batch.
  q.last_n = 0;
  std::fill(q.plane_after.begin(), q.plane_after.end(), -1);
  truncate_mtp(s, q.n_past);
  trim_blocks(s);
  return Status::Ok();
}

}  // namespace mtp
