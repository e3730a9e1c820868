// The two token mixers of a qwen35moe layer: gated full attention over the KV cache, and the gated DeltaNet
// (a causal conv, then the delta-rule recurrence on a per-head state). docs/model.md gives their math.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/step_profile.h"
#include "forward_pass.h"
#include "kernels/vec.h"
#include "model/reference_ops.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"

namespace mtp::fwd {
namespace {

// NeoX partial RoPE as the reference computes it (angles and rotation in double).
void rope(float* head, int64_t n_rot, const double* cs) {
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double x0 = head[i], x1 = head[i + half], c = cs[2 * i], s = cs[2 * i + 1];
    head[i] = static_cast<float>(x0 * c - x1 * s);
    head[i + half] = static_cast<float>(x0 * s + x1 * c);
  }
}

// One K or V row (n values) into the cache's storage type.
void store_kv(GgmlType type, const float* src, uint8_t* dst, int64_t n) {
  switch (type) {
    case GgmlType::F16: {
      uint16_t* d = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
      return;
    }
    case GgmlType::Q8_0:
      quantize_row_q8_0(src, reinterpret_cast<BlockQ8_0*>(dst), n);
      return;
    default:
      std::memcpy(dst, src, sizeof(float) * n);
  }
}

// The hd values of a stored K or V head row as f32: the row itself (F32), else converted (exactly) into buf.
// hd is a multiple of 32 for Q8_0 (Memory::create checks the head size).
const float* load_kv(GgmlType type, const uint8_t* row, int64_t hd, float* buf) {
  switch (type) {
    case GgmlType::F16:
      kernels::f16_to_f32(reinterpret_cast<const uint16_t*>(row), buf, hd);
      return buf;
    case GgmlType::Q8_0:
      kernels::q8_0_to_f32(row, buf, hd);
      return buf;
    default:
      return reinterpret_cast<const float*>(row);
  }
}

// Requests `bytes` at `row` into L2: attention streams a long context's K and V rows from memory, and the
// hardware prefetchers alone leave a core at a third of a plain read loop's rate there (one core, 256-wide
// heads from DRAM: scores 9 -> 20 G multiply-adds/s with the rows 64 keys ahead requested).
void prefetch_l2(const uint8_t* row, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 2);
}

// Floats from one attention score row to the next for n keys: a whole, odd number of 64-byte lines.
int64_t score_stride(int64_t n) {
  const int64_t lines = (n + 15) / 16;
  return 16 * (lines % 2 == 1 ? lines : lines + 1);
}

}  // namespace

void attention(Pass& p, const AttentionWeights& w, int32_t slot) {
  const Qwen35MoeConfig& c = p.c;
  Workspace& ws = p.ws;
  const int64_t n = p.n, hd = c.head_dim, n_head = c.n_head, n_kv = c.n_head_kv;
  const int64_t qw = n_head * hd, kvw = n_kv * hd, ne = c.n_embd;
  float* qg = ws.big0.data();           // n x 2qw: per head [query | gate]
  float* k = ws.big1.data();            // n x kvw
  float* v = ws.big1.data() + n * kvw;  // n x kvw
  float* o = ws.big2.data();            // n x qw
  profile::Scope scope(profile::Part::kAttention);
  ws.acts0.set(ws.a.data(), n, ne, ne);
  {
    profile::Scope projections(profile::Part::kProjections);
    project_all(p, ws.acts0, {{&w.q, qg, 2 * qw}, {&w.k, k, kvw}, {&w.v, v, kvw}});
  }

  // Per-head norms, then RoPE at the row's position; then the K/V rows go into the cache.
  const float* q_norm = f32_of(ws, w.q_norm);
  const float* k_norm = f32_of(ws, w.k_norm);
  MTP_CHECK(c.n_rot <= 512, "n_rot ", c.n_rot);
  for_rows(p, n, (n_head + 2 * n_kv) * hd, [&](int64_t r0, int64_t r1) {
    std::array<double, 512> cs;  // cos, sin per rotated pair of this row
    for (int64_t r = r0; r < r1; ++r) {
      const BatchRow& row = p.batch.rows[r];
      for (int64_t i = 0; i < c.n_rot / 2; ++i) {
        const double theta = static_cast<double>(row.pos) * std::pow(static_cast<double>(c.rope_freq_base),
                                                                     -2.0 * i / static_cast<double>(c.n_rot));
        cs[2 * i] = std::cos(theta);
        cs[2 * i + 1] = std::sin(theta);
      }
      for (int64_t h = 0; h < n_head; ++h) {
        float* qh = qg + r * 2 * qw + 2 * h * hd;
        kernels::rms_norm(qh, q_norm, hd, c.rms_eps, qh);
        rope(qh, c.n_rot, cs.data());
      }
      for (int64_t j = 0; j < n_kv; ++j) {
        float* kh = k + r * kvw + j * hd;
        kernels::rms_norm(kh, k_norm, hd, c.rms_eps, kh);
        rope(kh, c.n_rot, cs.data());
      }
      for (int64_t j = 0; j < n_kv; ++j) {
        store_kv(p.mem.kv_type(0), k + r * kvw + j * hd, p.mem.kv_head_row(row.seq, slot, 0, row.pos, j), hd);
        store_kv(p.mem.kv_type(1), v + r * kvw + j * hd, p.mem.kv_head_row(row.seq, slot, 1, row.pos, j), hd);
      }
    }
  });

  // Each (row, head) attends over its sequence's positions [begin, pos]: causal within the batch too. Work
  // items are (sequence, KV head, block of up to kRowBlock consecutive rows, subgroup of the KV head's query
  // heads): every K and V row is read once per item and used by all its queries, instead of once per query.
  // Each query's arithmetic is the same whatever the item: scores in key order, softmax, then V rows added
  // in key order (batch invariant).
  constexpr int64_t kRowBlock = 8;
  const float scale = p.params.attention_scale != 0.0f
                          ? p.params.attention_scale
                          : static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t group = n_head / n_kv;
  MTP_CHECK(group <= 16, "more than 16 query heads per KV head: ", group);
  // Row blocks, and the work: the K and V rows each block reads (cached as 2 bytes a value or fewer), in
  // bytes.
  int64_t blocks = 0, max_keys = 0, work = 0;
  for (int64_t gr = 0; gr < ws.n_groups; ++gr) {
    const SeqGroup& sg = ws.groups[gr];
    const int64_t b = (static_cast<int64_t>(sg.rows.size()) + kRowBlock - 1) / kRowBlock;
    blocks += b;
    work += b * (p.batch.rows[sg.rows.back()].pos + 1) * kvw * 4;
  }
  for (int64_t r = 0; r < n; ++r) max_keys = std::max(max_keys, p.batch.rows[r].pos + 1);
  const int threads = p.pool.threads_for(work);
  // Split the query heads of a KV head only when there are too few items for the threads (a split reads the
  // KV head's rows once per part).
  int64_t n_sub = 1;
  while (blocks * n_kv * n_sub < threads && n_sub < group) {
    ++n_sub;
    while (group % n_sub != 0) ++n_sub;
  }
  const int64_t sub = group / n_sub;       // query heads per item
  std::vector<int32_t>& items = ws.items;  // (group, first row index in it) per row block
  items.clear();
  for (int64_t gr = 0; gr < ws.n_groups; ++gr)
    for (int64_t i = 0; i < static_cast<int64_t>(ws.groups[gr].rows.size()); i += kRowBlock)
      items.push_back(static_cast<int32_t>(gr)), items.push_back(static_cast<int32_t>(i));
  const GgmlType kt = p.mem.kv_type(0), vt = p.mem.kv_type(1);
  const bool f32_v = vt == GgmlType::F32;  // V rows used in place (others are converted per block)
  constexpr int64_t kKeyBlock = 32;        // V rows summed per pass over a query's output (held in registers)
  constexpr int64_t kKeysPerCall = 8;      // K rows scored per call (kernels::dot_keys_queries blocks them)
  constexpr int64_t kPrefetchKeys = 64;    // K and V rows are requested into L2 this many positions ahead
  constexpr int64_t kVChunk = 64;          // V columns per weighted-sum call over F32 rows
  for (int t = 0; t < p.pool.size(); ++t)
    p.scratch(t, kRowBlock * sub * score_stride(max_keys) + (kKeysPerCall + 1 + kKeyBlock) * hd);
  p.pool.parallel_for(static_cast<size_t>(blocks * n_kv * n_sub), work, [&](size_t task, int thread) {
    const int64_t blk = static_cast<int64_t>(task) / (n_kv * n_sub),
                  rest = static_cast<int64_t>(task) % (n_kv * n_sub);
    const int64_t j = rest / n_sub, h0 = j * group + (rest % n_sub) * sub;
    const SeqGroup& sg = ws.groups[items[2 * blk]];
    const int64_t i0 = items[2 * blk + 1],
                  m = std::min<int64_t>(kRowBlock, static_cast<int64_t>(sg.rows.size()) - i0);
    const int64_t begin = p.mtp ? p.mem.seq(sg.seq).mtp_begin : 0;
    const int64_t pos0 = p.batch.rows[sg.rows[i0]].pos;
    const int64_t n_keys_max = pos0 + m - begin;  // the last row's keys
    // Score rows an odd number of cache lines apart: at a stride of a multiple of 4 KB the rows' lines all
    // fall in one L1 set, and each call's stores into them would evict each other.
    const int64_t ld = score_stride(n_keys_max);
    float* sc = ws.thread_scratch[thread].data();  // [row i][head][key], stride ld
    float* kv_buf = sc + m * sub * ld;
    float* sig = kv_buf + kKeysPerCall * hd;
    float* v_block = sig + hd;  // kKeyBlock x hd: V rows converted from F16 / Q8_0
    auto query = [&](int64_t i, int64_t h) { return qg + sg.rows[i0 + i] * 2 * qw + 2 * (h0 + h) * hd; };
    auto scores = [&](int64_t i, int64_t h) { return sc + (i * sub + h) * ld; };
    const float* qs[kRowBlock * 16];  // the item's queries, row-major (i, h)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t h = 0; h < sub; ++h) qs[i * sub + h] = query(i, h);
    // Keys kKeysPerCall at a time against the queries of the rows that see the first of them, straight into
    // their score rows (causal; the few scores of a later key for a row that does not see it yet land past
    // that row's softmax length, where nothing reads them).
    for (int64_t t = 0; t < n_keys_max; t += kKeysPerCall) {
      const int64_t nk = std::min(kKeysPerCall, n_keys_max - t);
      for (int64_t u = t + kPrefetchKeys; u < std::min(n_keys_max, t + kPrefetchKeys + kKeysPerCall); ++u)
        prefetch_l2(p.mem.kv_head_row(sg.seq, slot, 0, begin + u, j), p.mem.kv_head_bytes(0));
      const float* keys[kKeysPerCall];
      for (int64_t u = 0; u < nk; ++u)
        keys[u] = load_kv(kt, p.mem.kv_head_row(sg.seq, slot, 0, begin + t + u, j), hd, kv_buf + u * hd);
      const int64_t i_first = std::max<int64_t>(0, begin + t - pos0), nq = (m - i_first) * sub;
      kernels::dot_keys_queries(keys, nk, qs + i_first * sub, nq, hd, scale, scores(i_first, 0) + t, ld);
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t h = 0; h < sub; ++h) {
        kernels::softmax(scores(i, h), pos0 + i + 1 - begin);
        std::fill_n(o + sg.rows[i0 + i] * qw + (h0 + h) * hd, hd, 0.0f);
      }
    }
    // V rows in blocks of keys within one KV block (one row stride apart), each query's output accumulated
    // over a block at a time: per query, keys in order, one fused multiply-add each (as row-by-row axpy).
    const int64_t kv_block = p.mem.options().block_size;
    for (int64_t t0 = 0; t0 < n_keys_max;) {
      const int64_t pa = begin + t0;
      const int64_t t1 = std::min({n_keys_max, t0 + kKeyBlock, t0 + kv_block - pa % kv_block});
      // V rows kPrefetchKeys ahead into L2: F32 rows by column chunk, just before each chunk's products
      // (weighted_sum), since one burst of a block's 32 rows x 16 lines of requests at its start stalls the
      // core (decode attention at depth 4096-16384 15-16% less time, alternating the two in one process);
      // converted rows here, as their conversion reads each row whole.
      if (!f32_v)
        for (int64_t t = t0 + kPrefetchKeys; t < std::min(n_keys_max, t1 + kPrefetchKeys); ++t)
          prefetch_l2(p.mem.kv_head_row(sg.seq, slot, 1, begin + t, j), p.mem.kv_head_bytes(1));
      const float* v_rows = v_block;
      int64_t v_stride = hd;
      if (f32_v) {
        v_rows = reinterpret_cast<const float*>(p.mem.kv_head_row(sg.seq, slot, 1, pa, j));
        v_stride = hd;
      } else {
        for (int64_t t = t0; t < t1; ++t)
          load_kv(vt, p.mem.kv_head_row(sg.seq, slot, 1, begin + t, j), hd, v_block + (t - t0) * hd);
      }
      // Causal: row i uses the block's first n_use keys; the rows from i_full on see all of them and share
      // one call, the ones before (the block on the diagonal) one call each.
      const int64_t i_full = std::clamp<int64_t>(t1 - 1 + begin - pos0, 0, m);
      auto weighted_sum = [&](int64_t i_begin, int64_t i_end, int64_t n_use) {
        const float* ps[kRowBlock * 16];
        float* ys[kRowBlock * 16];
        for (int64_t i = i_begin; i < i_end; ++i)
          for (int64_t h = 0; h < sub; ++h) {
            ps[(i - i_begin) * sub + h] = scores(i, h) + t0;
            ys[(i - i_begin) * sub + h] = o + sg.rows[i0 + i] * qw + (h0 + h) * hd;
          }
        const int64_t nq = (i_end - i_begin) * sub;
        if (!f32_v) return kernels::axpy_rows_queries(ps, v_rows, v_stride, n_use, ys, nq, hd);
        // By chunks of kVChunk columns: each output element's sum is the same chain of rows either way.
        float* yc[kRowBlock * 16];
        for (int64_t e = 0; e < hd; e += kVChunk) {
          const int64_t w = std::min(kVChunk, hd - e);
          for (int64_t t = t0 + kPrefetchKeys; t < std::min(n_keys_max, t1 + kPrefetchKeys); ++t)
            prefetch_l2(p.mem.kv_head_row(sg.seq, slot, 1, begin + t, j) + 4 * e, 4 * w);
          for (int64_t q = 0; q < nq; ++q) yc[q] = ys[q] + e;
          kernels::axpy_rows_queries(ps, v_rows + e, v_stride, n_use, yc, nq, w);
        }
      };
      for (int64_t i = 0; i < i_full; ++i) {
        const int64_t n_use = std::min(t1, pos0 + i + 1 - begin) - t0;
        if (n_use > 0) weighted_sum(i, i + 1, n_use);
      }
      if (i_full < m) weighted_sum(i_full, m, t1 - t0);
      t0 = t1;
    }
    // Query gate: o *= sigmoid(g).
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t h = 0; h < sub; ++h) {
        float* oh = o + sg.rows[i0 + i] * qw + (h0 + h) * hd;
        kernels::sigmoid(query(i, h) + hd, sig, hd);
        for (int64_t e = 0; e < hd; ++e) oh[e] *= sig[e];
      }
    }
  });
  ws.acts1.set(o, n, qw, qw);
  profile::Scope projections(profile::Part::kProjections);
  project(p, ws.acts1, w.output, ws.m.data(), ne);
}

void delta_net(Pass& p, const DeltaNetWeights& w, int32_t gi) {
  const Qwen35MoeConfig& c = p.c;
  Workspace& ws = p.ws;
  Memory& mem = p.mem;
  const int64_t n = p.n, ne = c.n_embd, h_k = c.ssm_n_group, h_v = c.ssm_dt_rank, d = c.ssm_d_state;
  const int64_t key_dim = c.gdn_key_dim(), value_dim = c.gdn_value_dim(), cd = c.gdn_conv_dim();
  const int64_t d_conv = c.ssm_d_conv, n_prev = d_conv - 1;
  float* u = ws.big0.data();  // n x cd, convolved in place
  float* z = ws.big1.data();  // n x value_dim
  float* o = ws.big2.data();  // n x value_dim
  float* b = ws.small0.data();
  float* al = ws.small1.data();
  profile::Scope scope(profile::Part::kDeltaNet);
  ws.acts0.set(ws.a.data(), n, ne, ne);
  {
    profile::Scope projections(profile::Part::kProjections);
    project_all(p, ws.acts0,
                {{&w.qkv, u, cd}, {&w.gate, z, value_dim}, {&w.beta, b, h_v}, {&w.alpha, al, h_v}});
  }
  // Taps as d_conv rows of conv_dim (tap i of every channel contiguous), so the channel loop vectorizes.
  auto taps_it = ws.conv_taps.find(w.conv1d.data);
  if (taps_it == ws.conv_taps.end()) {
    const float* taps = f32_of(ws, w.conv1d);
    std::vector<float> t(static_cast<size_t>(d_conv * cd));
    for (int64_t ci = 0; ci < cd; ++ci)
      for (int64_t i = 0; i < d_conv; ++i) t[i * cd + ci] = taps[ci * d_conv + i];
    taps_it = ws.conv_taps.emplace(w.conv1d.data, std::move(t)).first;
  }
  const float* taps_t = taps_it->second.data();

  // Conv per sequence over [window; its rows' inputs], in chunks of channels: one pass over the pool for all
  // sequences (chunks of 4 KB rows: the windows are read from DRAM, and 1 KB pieces measured 1.6x slower at
  // 16 sequences). An item copies its channels' window and inputs first (the outputs overwrite u in place),
  // then the window after each row that has a snapshot plane goes to that plane and the window after the
  // last row to the live plane (in place, an item writes only channels it has already read). Chunks hold
  // whole heads of d channels, so an item also L2-normalises the q and k heads among its channels (and
  // scales q) for its rows.
  const int64_t conv_chunk = std::max<int64_t>(1, 1024 / d) * d;
  const int64_t n_chunks = (cd + conv_chunk - 1) / conv_chunk;
  const float q_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  // Work in bytes' worth: a channel-row (its taps, SiLU, copies) costs a thread about what 16 bytes of a
  // weight stream do (one decode row at 35B-A3B widths, 8,192 channels: about 35 us on one thread).
  const int64_t conv_work = (ws.n_groups * n_prev + n) * cd * 16;
  p.pool.parallel_for(static_cast<size_t>(ws.n_groups * n_chunks), conv_work, [&](size_t item, int thread) {
    const SeqGroup& sg = ws.groups[static_cast<int64_t>(item) / n_chunks];
    const int64_t m = static_cast<int64_t>(sg.rows.size());
    const int64_t c0 = static_cast<int64_t>(item) % n_chunks * conv_chunk, nc = std::min(cd - c0, conv_chunk);
    float* hist = p.scratch(thread, (n_prev + m) * nc);  // (n_prev + m) x nc
    const int32_t live = mem.seq(sg.seq).live;
    const float* window = mem.conv_state(sg.seq, live, gi);
    for (int64_t i = 0; i < n_prev; ++i) std::memcpy(hist + i * nc, window + i * cd + c0, sizeof(float) * nc);
    for (int64_t t = 0; t < m; ++t)
      std::memcpy(hist + (n_prev + t) * nc, u + sg.rows[t] * cd + c0, sizeof(float) * nc);
    for (int64_t t = 0; t < m; ++t) {
      float* y = u + sg.rows[t] * cd + c0;
      std::fill_n(y, nc, 0.0f);  // per channel: 0 + tap 0 * x + tap 1 * x ..., in tap order
      for (int64_t i = 0; i < d_conv; ++i) {
        const float* tap = taps_t + i * cd + c0;
        const float* h = hist + (t + i) * nc;
        for (int64_t ci = 0; ci < nc; ++ci) y[ci] += tap[ci] * h[ci];
      }
      kernels::silu(y, y, nc);
      for (int64_t h = c0 / d; h < std::min(2 * h_k, (c0 + nc) / d); ++h) {
        float* x = u + sg.rows[t] * cd + h * d;
        const float s = 1.0f / std::max(std::sqrt(kernels::dot(x, x, d)), c.rms_eps);
        for (int64_t i = 0; i < d; ++i) x[i] *= s;
        if (h < h_k)
          for (int64_t i = 0; i < d; ++i) x[i] *= q_scale;
      }
    }
    const int64_t state_stride = mem.conv_floats() + mem.ssm_floats();
    for (int64_t t = 0; t < m; ++t) {
      const int32_t plane = t + 1 == m ? live : sg.snap[t];
      float* const outs[2] = {
          plane < 0 ? nullptr : mem.conv_state(sg.seq, plane, gi),
          sg.capture.empty() || sg.capture[t] == nullptr ? nullptr : sg.capture[t] + gi * state_stride};
      for (float* out : outs) {
        if (out == nullptr) continue;
        for (int64_t i = 0; i < n_prev; ++i)
          std::memcpy(out + i * cd + c0, hist + (t + 1 + i) * nc, sizeof(float) * nc);
      }
    }
  });

  // The recurrence: one task per (sequence, value head), rows in order, in place on the live plane (the
  // head's 64 KB state stays in cache from row to row); a row with a snapshot plane also writes the state
  // after it there. (kernels::delta_rule: the reference delta_rule_step with fused multiply-adds.) A task
  // takes its head's gates first, and applies its head's gated RMSNorm (norm, then * silu(z)) after.
  const float* dt_bias = f32_of(ws, w.dt_bias);
  const float* ssm_a = f32_of(ws, w.a);
  const float* norm = f32_of(ws, w.norm);
  // Work: every head's d x d state read and written once a row, in bytes.
  const int64_t rule_work = n * h_v * d * d * 2 * static_cast<int64_t>(sizeof(float));
  p.pool.parallel_for(static_cast<size_t>(ws.n_groups * h_v), rule_work, [&](size_t task, int thread) {
    const SeqGroup& sg = ws.groups[static_cast<int64_t>(task) / h_v];
    const int64_t j = static_cast<int64_t>(task) % h_v, kh = j % h_k;
    std::vector<kernels::DeltaRuleRow>& steps = ws.delta_rows[thread];
    float* const state = mem.ssm_state(sg.seq, mem.seq(sg.seq).live, gi) + j * d * d;
    steps.clear();
    for (size_t t = 0; t < sg.rows.size(); ++t) {
      const int64_t row = sg.rows[t];
      const float* y = u + row * cd;
      const float beta = ref::sigmoid(b[row * h_v + j]);
      const float alpha = ssm_a[j] * ref::softplus(al[row * h_v + j] + dt_bias[j]);
      float* snapshot = sg.snap[t] < 0 ? nullptr : mem.ssm_state(sg.seq, sg.snap[t], gi) + j * d * d;
      if (!sg.capture.empty() && sg.capture[t] != nullptr)
        snapshot =
            sg.capture[t] + gi * (mem.conv_floats() + mem.ssm_floats()) + mem.conv_floats() + j * d * d;
      steps.push_back({state, state, y + key_dim + kh * d, y + kh * d, y + 2 * key_dim + j * d, beta,
                       std::exp(alpha), o + row * value_dim + j * d, snapshot});
    }
    kernels::delta_rule(steps.data(), static_cast<int64_t>(steps.size()), d);
    for (const int32_t row : sg.rows) {
      float* oj = o + row * value_dim + j * d;
      float* zj = z + row * value_dim + j * d;
      kernels::rms_norm(oj, norm, d, c.rms_eps, oj);
      kernels::silu(zj, zj, d);
      for (int64_t i = 0; i < d; ++i) oj[i] *= zj[i];
    }
  });
  ws.acts1.set(o, n, value_dim, value_dim);
  profile::Scope projections(profile::Part::kProjections);
  project(p, ws.acts1, w.out, ws.m.data(), ne);
}

}  // namespace mtp::fwd
