#include "model/forward.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/step_profile.h"
#include "forward_pass.h"
#include "kernels/matmul.h"
#include "kernels/pack.h"
#include "kernels/vec.h"
#include "model/reference_ops.h"

namespace mtp {
namespace fwd {

kernels::MatrixView mat(const TensorView& t) {
  kernels::MatrixView v =
      kernels::MatrixView::contiguous(t.type, t.packed != nullptr ? t.packed : t.data, t.ne[0], t.n_rows());
  v.packed = t.packed != nullptr;
  return v;
}

const float* f32_of(Workspace& ws, const TensorView& t) {
  if (t.type == GgmlType::F32) return reinterpret_cast<const float*>(t.data);
  auto it = ws.f32_cache.find(t.data);
  if (it == ws.f32_cache.end()) it = ws.f32_cache.emplace(t.data, ref::to_f32(t)).first;
  return it->second.data();
}

void project(Pass& p, ActCache& acts, const TensorView& w, float* y, int64_t y_stride) {
  if (profile::enabled()) profile::add_weight_bytes(static_cast<double>(w.bytes()));
  kernels::matmul(mat(w), acts.get(w.type, &p.pool), y, y_stride, &p.pool);
}

void project_all(Pass& p, ActCache& acts, std::initializer_list<Projection> list) {
  kernels::MatmulJob jobs[8];
  MTP_CHECK(list.size() <= 8);
  if (profile::enabled())
    for (const Projection& pr : list) profile::add_weight_bytes(static_cast<double>(pr.w->bytes()));
  for (int f = 0; f < 3; ++f) {
    size_t n = 0;
    for (const Projection& pr : list)
      if (static_cast<int>(kernels::act_format(pr.w->type)) == f) jobs[n++] = {mat(*pr.w), pr.y, pr.y_stride};
    if (n == 0) continue;
    kernels::matmul_batch({jobs, n}, acts.get(jobs[0].w.type, &p.pool), &p.pool);
  }
}

void rms_rows(Pass& p, const float* x, const float* w, int64_t rows, int64_t n, float eps, float* out) {
  for_rows(p, rows, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kernels::rms_norm(x + r * n, w, n, eps, out + r * n);
  });
}

namespace {

// Output rows per work item of an expert pass of n_mats matrices (each routed matrix once per expert with
// rows, each shared one once) on n_threads: about 4 items per thread over the whole pass, whole tiles, at
// most a matrix, and, where at most twice the pieces allow it, an item count the threads divide evenly (at
// one decode row the 8 routed down matrices and the shared one are 9 equal items: 5 and 4 on 2 threads). Few
// large items rather than many small ones: an item starting on a new range of weights restarts the memory
// stream and pays the call's fixed costs. Measured at 2 threads on the 35B-A3B widths, one decode row (8
// experts: whole 2048x512 matrices per item instead of 64-row pieces) 3% less time per step, a 4-row verify
// batch 7% less.
int64_t expert_chunk(int64_t n_mats, int64_t n_out, int n_threads) {
  const int64_t t = n_threads, least = std::max<int64_t>(1, (4 * t + n_mats - 1) / n_mats);
  int64_t pieces = least;
  for (int64_t q = least; q <= 2 * least; ++q)
    if (n_mats * q % t == 0) {
      pieces = q;
      break;
    }
  const int64_t rows = (n_out + pieces - 1) / pieces;
  return std::min(n_out, (rows + kernels::kPackRows - 1) / kernels::kPackRows * kernels::kPackRows);
}

// A matrix of an expert pass: a stack of routed experts' matrices (3-D) or the shared expert's (2-D), the
// activations it multiplies and where its outputs go (rows of ne[1] floats).
struct ExpertMatrix {
  const TensorView* t;
  const kernels::PreparedActivations* x;
  float* y;
};

// One pass over the pool for the products of one stage of the experts: each matrix of `routed` for every
// expert e with rows (activation rows rows[s] for its sorted positions s in [offset[e], offset[e+1]), outputs
// at those positions), and each of `shared` over every activation row. The shared expert's products join the
// routed ones so that a stage is one synchronisation, not two; its items hold about as many multiply-adds as
// a routed expert's (n rows against about n_pairs / active rows each).
void expert_pass(Pass& p, const int32_t* offset, const int32_t* rows,
                 std::initializer_list<ExpertMatrix> routed, std::initializer_list<ExpertMatrix> shared) {
  const int64_t n_exp = p.c.n_expert, n = p.n, n_pairs = n * p.c.n_expert_used;
  int64_t active = 0;
  for (int64_t e = 0; e < n_exp; ++e) active += offset[e + 1] > offset[e];
  const int64_t n_mats = active * static_cast<int64_t>(routed.size()) + static_cast<int64_t>(shared.size());
  // Each matrix's product as kernels::product_work prices it (one expert's matrix of a 3-D stack: ne[1]
  // rows), and the weight bytes the pass reads (each matrix once, whatever its rows) for the step profile.
  int64_t work = 0;
  double bytes = 0;
  auto product = [&bytes](const TensorView& t, int64_t n_rows) {
    const int64_t matrix_bytes = mat(t).row_bytes * t.ne[1];
    bytes += static_cast<double>(matrix_bytes);
    return kernels::product_work(matrix_bytes, n_rows);
  };
  for (const ExpertMatrix& m : shared) work += product(*m.t, n);
  for (int64_t e = 0; e < n_exp; ++e)
    for (const ExpertMatrix& m : routed)
      if (offset[e + 1] > offset[e]) work += product(*m.t, offset[e + 1] - offset[e]);
  profile::add_weight_bytes(bytes);
  const int threads = p.pool.threads_for(work);
  std::vector<ExpertItem>& items = p.ws.expert_items;
  items.clear();
  auto add = [&](const kernels::MatrixView& w, const ExpertMatrix& m, const int32_t* r, int64_t n_rows,
                 float* y, int64_t chunk) {
    for (int64_t o0 = 0; o0 < w.n_out; o0 += chunk)
      items.push_back({w, m.x, r, n_rows, o0, std::min(w.n_out, o0 + chunk), y, w.n_out});
  };
  for (const ExpertMatrix& m : shared) {
    const kernels::MatrixView w = mat(*m.t);
    const int64_t chunk = expert_chunk(n_mats, w.n_out, threads);
    const int64_t scaled = chunk * n_pairs / std::max<int64_t>(1, active * n);
    add(w, m, nullptr, n, m.y,
        std::min(w.n_out, std::max(kernels::kPackRows, scaled / kernels::kPackRows * kernels::kPackRows)));
  }
  for (int64_t e = 0; e < n_exp; ++e) {
    if (offset[e + 1] == offset[e]) continue;
    for (const ExpertMatrix& m : routed) {
      kernels::MatrixView w = mat(*m.t);
      w.n_out = m.t->ne[1];
      w = w.stacked_at(e);
      add(w, m, rows + offset[e], offset[e + 1] - offset[e], m.y + offset[e] * w.n_out,
          expert_chunk(n_mats, w.n_out, threads));
    }
  }
  p.pool.parallel_for(items.size(), work, [&](size_t i, int) {
    const ExpertItem& it = items[i];
    kernels::matmul_range(it.w, *it.x, it.rows, it.n_rows, it.o0, it.o1, it.y, it.y_stride);
  });
}

// Routed experts plus the shared expert over ws.f into ws.m.
void moe(Pass& p, const MoeWeights& w) {
  const Qwen35MoeConfig& c = p.c;
  Workspace& ws = p.ws;
  const int64_t n = p.n, ne = c.n_embd, n_exp = c.n_expert, k = c.n_expert_used, n_ff = c.n_ff_exp;
  const int64_t n_sh = c.n_ff_shexp, n_pairs = n * k;
  // Each scope below takes over from the one before (time goes to the innermost open scope).
  profile::Scope routing(profile::Part::kRouting);
  float* logits = ws.small0.data();  // n x n_exp
  ws.acts0.set(ws.f.data(), n, ne, ne);
  project(p, ws.acts0, w.router, logits, n_exp);

  // Routing per row: softmax over all experts, top k (ties: lower index), renormalised. Pair r*k+j is row r's
  // j-th choice.
  int32_t* pair_expert = Workspace::grow(ws.idx0, n_pairs);
  float* pair_w = Workspace::grow(ws.pair_w, n_pairs);
  const float ws_scale = p.params.expert_weights_scale;
  for_rows(p, n, 4 * n_exp, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* pr = logits + r * n_exp;
      kernels::softmax(pr, n_exp);
      int32_t* top = pair_expert + r * k;
      kernels::top_k(pr, n_exp, k, top);
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += pr[top[j]];
      const double denom = std::max(sum, 6.1035e-5);
      for (int64_t j = 0; j < k; ++j) {
        float wt = static_cast<float>(pr[top[j]] / denom);
        if (ws_scale != 0.0f && ws_scale != 1.0f) wt *= ws_scale;
        pair_w[r * k + j] = wt;
      }
    }
  });

  // Group by expert (counting sort, stable): sorted position s holds pair order[s]; expert e owns
  // [offset[e], offset[e+1]). act_row[s] is the activation row of that pair; slot_of[pair] = s.
  std::vector<int32_t>& offset = ws.idx1;
  offset.assign(static_cast<size_t>(n_exp + 1), 0);
  for (int64_t q = 0; q < n_pairs; ++q) ++offset[pair_expert[q] + 1];
  for (int64_t e = 0; e < n_exp; ++e) offset[e + 1] += offset[e];
  int32_t* act_row = Workspace::grow(ws.idx2, 2 * n_pairs);
  int32_t* slot_of = act_row + n_pairs;
  {
    std::vector<int32_t>& fill = ws.cursor;
    fill.assign(offset.begin(), offset.end() - 1);
    for (int64_t q = 0; q < n_pairs; ++q) {
      const int32_t s = fill[pair_expert[q]]++;
      act_row[s] = static_cast<int32_t>(q / k);
      slot_of[q] = s;
    }
  }

  // The routed experts' rows by sorted position, then the shared expert's n rows (begin_pass sizes the
  // buffers for both).
  profile::Scope experts(profile::Part::kExperts);
  float* gate = ws.big0.data();  // n_pairs x n_ff, then gs: n x n_sh
  float* up = ws.big1.data();
  float* down = ws.big2.data();  // n_pairs x ne, then ys: n x ne
  float* gs = gate + n_pairs * n_ff;
  float* us = up + n_pairs * n_ff;
  float* ys = down + n_pairs * ne;
  auto acts0 = [&](const TensorView& t) { return &ws.acts0.get(t.type, &p.pool); };
  expert_pass(p, offset.data(), act_row,
              {{&w.gate_exps, acts0(w.gate_exps), gate}, {&w.up_exps, acts0(w.up_exps), up}},
              {{&w.gate_shexp, acts0(w.gate_shexp), gs}, {&w.up_shexp, acts0(w.up_shexp), us}});
  for_rows(p, n_pairs + n, 2 * std::max(n_ff, n_sh), [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      if (s < n_pairs)
        kernels::swiglu(gate + s * n_ff, up + s * n_ff, gate + s * n_ff, n_ff);
      else
        kernels::swiglu(gs + (s - n_pairs) * n_sh, us + (s - n_pairs) * n_sh, gs + (s - n_pairs) * n_sh,
                        n_sh);
    }
  });
  ws.acts1.set(gate, n_pairs, n_ff, n_ff);
  ws.acts2.set(gs, n, n_sh, n_sh);
  expert_pass(p, offset.data(), ws.iota.data(),
              {{&w.down_exps, &ws.acts1.get(w.down_exps.type, &p.pool), down}},
              {{&w.down_shexp, &ws.acts2.get(w.down_shexp.type, &p.pool), ys}});

  // Each row's expert outputs added in the order of its top-k list (not expert order): batch invariant. Then
  // the shared expert's, gated by sigmoid(w_gate_shexp . f).
  float* out = ws.m.data();
  const float* shg = f32_of(ws, w.shexp_gate);
  for_rows(p, n, (k + 3) * ne, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* o = out + r * ne;
      std::fill_n(o, ne, 0.0f);
      for (int64_t j = 0; j < k; ++j) kernels::axpy(pair_w[r * k + j], down + slot_of[r * k + j] * ne, o, ne);
      const float s = ref::sigmoid(kernels::dot(shg, ws.f.data() + r * ne, ne));
      kernels::axpy(s, ys + r * ne, o, ne);
    }
  });
}

// One pre-norm residual block over ws.x: x += mixer(RMSNorm(x)); x += MoE(RMSNorm(x)).
void residual_block(Pass& p, const LayerWeights& w, int32_t attn_slot, int32_t gdn_index) {
  const int64_t n = p.n, ne = p.c.n_embd;
  Workspace& ws = p.ws;
  float* x = ws.x.data();
  rms_rows(p, x, f32_of(ws, w.attn_norm), n, ne, p.c.rms_eps, ws.a.data());
  if (w.full_attention)
    attention(p, w.attn, attn_slot);
  else
    delta_net(p, w.gdn, gdn_index);
  const float* post_norm = f32_of(ws, w.post_attention_norm);
  for_rows(p, n, 2 * ne, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * ne; i < r1 * ne; ++i) x[i] += ws.m[i];
    for (int64_t r = r0; r < r1; ++r)
      kernels::rms_norm(x + r * ne, post_norm, ne, p.c.rms_eps, ws.f.data() + r * ne);
  });
  moe(p, w.moe);
  for_rows(p, n, ne, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * ne; i < r1 * ne; ++i) x[i] += ws.m[i];
  });
}

// Checks the rows and groups them by sequence (each sequence's rows in order, consecutive positions); takes
// KV blocks; sizes the workspace for n rows.
Status begin_pass(const Model& model, const Batch& batch, Memory& mem, bool mtp) {
  const Qwen35MoeConfig& c = model.config();
  Workspace& ws = mem.workspace();
  const int64_t n = batch.size();
  if (n == 0) return invalid_argument("empty batch");
  ws.seq_group.assign(static_cast<size_t>(mem.n_seq()), -1);
  ws.n_groups = 0;
  for (int64_t r = 0; r < n; ++r) {
    const BatchRow& row = batch.rows[r];
    if (!mem.seq_active(row.seq))
      return invalid_argument("row ", r, ": sequence ", row.seq, " is not active");
    if (row.token < 0 || row.token >= c.n_vocab)
      return invalid_argument("row ", r, ": token ", row.token, " out of range (", c.n_vocab, ")");
    int32_t& g = ws.seq_group[row.seq];
    if (g < 0) {
      if (static_cast<int64_t>(ws.groups.size()) <= ws.n_groups) ws.groups.emplace_back();
      g = static_cast<int32_t>(ws.n_groups++);
      ws.groups[g].seq = row.seq;
      ws.groups[g].rows.clear();
    }
    SeqGroup& sg = ws.groups[g];
    if (!sg.rows.empty() && row.pos != batch.rows[sg.rows.back()].pos + 1)
      return invalid_argument("row ", r, ": sequence ", row.seq, " position ", row.pos, " does not follow ",
                              batch.rows[sg.rows.back()].pos);
    sg.rows.push_back(static_cast<int32_t>(r));
  }
  for (int64_t gr = 0; gr < ws.n_groups; ++gr) {
    const SeqGroup& sg = ws.groups[gr];
    const Memory::Seq& q = mem.seq(sg.seq);
    const int64_t p0 = batch.rows[sg.rows[0]].pos;
    if (!mtp && p0 != q.n_past)
      return invalid_argument("sequence ", sg.seq, " continues at position ", q.n_past, ", not ", p0);
    if (mtp && p0 < 0) return invalid_argument("negative position ", p0);
    if (mtp && q.mtp_end > q.mtp_begin && p0 > q.mtp_end)
      return invalid_argument("sequence ", sg.seq, ": MTP row at ", p0, " leaves a gap after ", q.mtp_end);
  }
  // Blocks before anything changes (on failure, blocks taken for earlier sequences stay attached to them).
  for (int64_t gr = 0; gr < ws.n_groups; ++gr) {
    const SeqGroup& sg = ws.groups[gr];
    const int64_t end = batch.rows[sg.rows.back()].pos + 1;
    // Rows are written from the first one's position on: blocks shared with the prefix cache are copied.
    if (!mem.ensure_positions(sg.seq, end) || !mem.begin_writes(sg.seq, batch.rows[sg.rows[0]].pos)) {
      return Status(StatusCode::kResourceExhausted,
                    str_cat("sequence ", sg.seq, ": no room for position ", end - 1, " (context ",
                            mem.options().n_ctx, ", ", mem.free_blocks(), " free KV blocks)"));
    }
  }

  const int64_t ne = c.n_embd, qw = c.n_head * c.head_dim, kvw = c.n_head_kv * c.head_dim;
  // The MoE's buffers hold the routed pairs' rows and then the shared expert's (moe); the MTP block's input
  // is two rows of ne side by side (forward_mtp).
  const int64_t width =
      std::max({2 * qw, 2 * kvw, c.gdn_conv_dim(), c.gdn_value_dim(),
                c.n_expert_used * c.n_ff_exp + c.n_ff_shexp, (c.n_expert_used + 1) * ne, 2 * ne});
  for (auto* v : {&ws.x, &ws.a, &ws.m, &ws.f}) Workspace::grow(*v, n * ne);
  for (auto* v : {&ws.big0, &ws.big1, &ws.big2}) Workspace::grow(*v, n * width);
  for (auto* v : {&ws.small0, &ws.small1}) Workspace::grow(*v, n * std::max(c.ssm_dt_rank, c.n_expert));
  const int64_t n_pairs = n * c.n_expert_used;
  if (static_cast<int64_t>(ws.iota.size()) < n_pairs) {
    const size_t old = ws.iota.size();
    ws.iota.resize(static_cast<size_t>(n_pairs));
    for (size_t i = old; i < ws.iota.size(); ++i) ws.iota[i] = static_cast<int32_t>(i);
  }
  if (ws.thread_scratch.size() < 64) ws.thread_scratch.resize(64);
  if (ws.delta_rows.size() < 64) ws.delta_rows.resize(64);
  return Status::Ok();
}

// Post-norm hidden of every row into out.hidden, logits of the rows that ask.
void finish(Pass& p, const TensorView& norm, const TensorView& head, Outputs& out) {
  profile::Scope scope(profile::Part::kHead);
  const int64_t n = p.n, ne = p.c.n_embd, nv = p.c.n_vocab;
  Workspace& ws = p.ws;
  out.n_embd = ne;
  out.n_vocab = nv;
  out.hidden.resize(static_cast<size_t>(n * ne));
  rms_rows(p, ws.x.data(), f32_of(ws, norm), n, ne, p.c.rms_eps, out.hidden.data());
  out.logits_index.assign(static_cast<size_t>(n), -1);
  int64_t n_logits = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (!p.batch.rows[r].logits) continue;
    std::memcpy(ws.a.data() + n_logits * ne, out.hidden.data() + r * ne, sizeof(float) * ne);
    out.logits_index[r] = static_cast<int32_t>(n_logits++);
  }
  out.logits.resize(static_cast<size_t>(n_logits * nv));
  if (n_logits == 0) return;
  ws.acts0.set(ws.a.data(), n_logits, ne, ne);
  project(p, ws.acts0, head, out.logits.data(), nv);
}

}  // namespace
}  // namespace fwd

using fwd::begin_pass;
using fwd::f32_of;
using fwd::finish;
using fwd::Pass;
using fwd::project;
using fwd::residual_block;

Status forward(const Model& model, const Batch& batch, Memory& mem, Outputs& out, ThreadPool& pool) {
  profile::Scope scope(profile::Part::kOther);
  const Qwen35MoeConfig& c = model.config();
  const Qwen35MoeWeights& w = model.weights();
  MTP_RETURN_IF_ERROR(begin_pass(model, batch, mem, false));
  Workspace& ws = mem.workspace();
  MTP_CHECK(pool.size() <= static_cast<int>(ws.thread_scratch.size()), "at most 64 threads");
  Pass p{c, model.params(), mem, ws, pool, batch, batch.size(), false};

  // GDN planes per sequence: the snapshot rows are its trailing rows that ask for logits, at most K and never
  // the first row (verify rows d1..dn; of a prompt chunk only its last row, if any: prompts are never rolled
  // back, and a snapshot costs a whole state write). Every row updates the live plane in place; the state
  // after each row from the one before the first snapshot row up to the last but one is also copied to a
  // plane of its own (the ones other than the live one, in turn), so the state after any of those rows stays
  // available for rollback. Rows out of place instead (each snapshot row writing its own plane) read each
  // destination's old lines first: a 4-row verify's delta rule took 1.7x as long (one core, states from
  // DRAM: 9.0 against 5.4 us per head and row). A one-row step (plain decode) is a single in-place update.
  const int32_t K = mem.options().n_snapshots, planes = mem.n_planes();
  auto first_snapshot = [&](const SeqGroup& sg) {
    int64_t t = static_cast<int64_t>(sg.rows.size());
    while (t > 1 && static_cast<int64_t>(sg.rows.size()) - t < K && batch.rows[sg.rows[t - 1]].logits) --t;
    return t;
  };
  for (int64_t gr = 0; gr < ws.n_groups; ++gr) {
    SeqGroup& sg = ws.groups[gr];
    const int64_t m = static_cast<int64_t>(sg.rows.size()), first_snap = first_snapshot(sg);
    const int32_t live = mem.seq(sg.seq).live;
    sg.snap.assign(static_cast<size_t>(m), -1);
    for (int64_t t = first_snap - 1; t + 1 < m; ++t)
      sg.snap[t] = static_cast<int32_t>((live + 1 + (t - (first_snap - 1))) % planes);
    // A captured row's state goes to its buffer instead of a plane (the batch cannot be rolled back to it).
    sg.capture.assign(static_cast<size_t>(m), nullptr);
    for (int64_t t = 0; t < m; ++t) {
      sg.capture[t] = batch.rows[sg.rows[t]].capture;
      if (sg.capture[t] != nullptr) sg.snap[t] = -1;
    }
  }

  for (int64_t r = 0; r < p.n; ++r)
    ref::dequantize_row_of(w.token_embd, batch.rows[r].token, ws.x.data() + r * c.n_embd);
  for (int64_t il = 0; il < c.n_layer; ++il)
    residual_block(p, w.layers[il], mem.attn_slot(il), mem.gdn_index(il));

  for (int64_t gr = 0; gr < ws.n_groups; ++gr) {
    const SeqGroup& sg = ws.groups[gr];
    Memory::Seq& q = mem.seq(sg.seq);
    const int64_t m = static_cast<int64_t>(sg.rows.size());
    // The state after row t: its snapshot plane (-1 before the first), after the last row the live plane.
    q.plane_after = sg.snap;
    q.plane_after[static_cast<size_t>(m - 1)] = q.live;
    q.last_p0 = q.n_past;
    q.last_n = m;
    q.n_past += m;
  }
  finish(p, w.output_norm, w.output, out);
  return Status::Ok();
}

Status forward_logits(const Model& model, std::span<const float> hidden, Memory& mem, Outputs& out,
                      ThreadPool& pool) {
  const Qwen35MoeConfig& c = model.config();
  const int64_t ne = c.n_embd, nv = c.n_vocab;
  if (hidden.empty() || static_cast<int64_t>(hidden.size()) % ne != 0)
    return invalid_argument("forward_logits: ", hidden.size(), " values are not rows of ", ne);
  const int64_t n = static_cast<int64_t>(hidden.size()) / ne;
  Workspace& ws = mem.workspace();
  Workspace::grow(ws.a, n * ne);
  std::copy(hidden.begin(), hidden.end(), ws.a.begin());
  out.n_embd = ne;
  out.n_vocab = nv;
  out.hidden.assign(hidden.begin(), hidden.end());
  out.logits_index.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) out.logits_index[static_cast<size_t>(r)] = static_cast<int32_t>(r);
  out.logits.resize(static_cast<size_t>(n * nv));
  const Batch none;
  Pass p{c, model.params(), mem, ws, pool, none, n, false};
  ws.acts0.set(ws.a.data(), n, ne, ne);
  project(p, ws.acts0, model.weights().output, out.logits.data(), nv);
  return Status::Ok();
}

Status forward_mtp(const Model& model, const Batch& batch, Memory& mem, Outputs& out, ThreadPool& pool) {
  const Qwen35MoeConfig& c = model.config();
  if (!model.has_mtp()) return invalid_argument("the model has no MTP block");
  if (mem.mtp_slot() < 0) return invalid_argument("the memory keeps no MTP KV");
  const int64_t ne = c.n_embd;
  if (static_cast<int64_t>(batch.h_prev.size()) != batch.size() * ne)
    return invalid_argument("MTP batch has ", batch.h_prev.size(), " h_prev values for ", batch.size(),
                            " rows");
  MTP_RETURN_IF_ERROR(begin_pass(model, batch, mem, true));
  Workspace& ws = mem.workspace();
  MTP_CHECK(pool.size() <= static_cast<int>(ws.thread_scratch.size()), "at most 64 threads");
  const MtpWeights& mw = *model.weights().mtp;
  Pass p{c, model.params(), mem, ws, pool, batch, batch.size(), true};

  // Cached MTP rows at >= the first row's position are stale; the rows extend [begin, end).
  for (int64_t gr = 0; gr < ws.n_groups; ++gr) {
    const SeqGroup& sg = ws.groups[gr];
    Memory::Seq& q = mem.seq(sg.seq);
    const int64_t p0 = batch.rows[sg.rows[0]].pos;
    if (q.mtp_end == q.mtp_begin || p0 < q.mtp_begin) q.mtp_begin = p0;
    q.mtp_end = p0 + static_cast<int64_t>(sg.rows.size());
  }

  // x0 = eh_proj . [enorm(E[token]); hnorm(h_prev)]
  float* cat = ws.big0.data();  // n x 2ne
  const float* enorm = f32_of(ws, mw.enorm);
  const float* hnorm = f32_of(ws, mw.hnorm);
  for (int64_t r = 0; r < p.n; ++r) {
    float* e = ws.a.data() + r * ne;
    ref::dequantize_row_of(mw.embed_tokens, batch.rows[r].token, e);
    kernels::rms_norm(e, enorm, ne, c.rms_eps, cat + r * 2 * ne);
    kernels::rms_norm(batch.h_prev.data() + r * ne, hnorm, ne, c.rms_eps, cat + r * 2 * ne + ne);
  }
  ws.acts1.set(cat, p.n, 2 * ne, 2 * ne);
  project(p, ws.acts1, mw.eh_proj, ws.x.data(), ne);
  residual_block(p, mw.block, mem.mtp_slot(), -1);
  finish(p, mw.shared_head_norm, mw.head, out);
  return Status::Ok();
}

}  // namespace mtp
