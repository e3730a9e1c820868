// What the forward pass's block functions share (private to the model library): the pass's context, weight
// views, projections over the thread pool, and row loops split over it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "model/batch.h"
#include "model/memory.h"
#include "model/model.h"
#include "workspace.h"

namespace mtp::fwd {

struct Pass {
  const Qwen35MoeConfig& c;
  const ModelParams& params;
  Memory& mem;
  Workspace& ws;
  ThreadPool& pool;
  const Batch& batch;
  int64_t n;  // rows
  bool mtp;   // the MTP block's pass

  float* scratch(int thread, int64_t floats) { return Workspace::grow(ws.thread_scratch[thread], floats); }
};

// The packed copy when the model has one (kernels/pack.h: same results, faster kernels).
kernels::MatrixView mat(const TensorView& t);

// A small vector (norm weights, conv taps, gates) as f32: the mapped data itself when stored as F32. Not
// thread-safe (it fills the workspace's cache): call it before a parallel loop, not inside one.
const float* f32_of(Workspace& ws, const TensorView& t);

void project(Pass& p, ActCache& acts, const TensorView& w, float* y, int64_t y_stride);

// Several projections of the same input: one pass over the pool per activation format among their weights
// (usually one). Results as project() each.
struct Projection {
  const TensorView* w;
  float* y;
  int64_t y_stride;
};
void project_all(Pass& p, ActCache& acts, std::initializer_list<Projection> list);

// Row loops (norms, gates, SwiGLU, the expert combine) split over the pool once they hold enough work to pay
// for a dispatch: below kRowsParallelMin values in all they run on the calling thread, as a decode step's
// do. A 512-row prompt step spent 73 of its 1,112 ms in such loops on one thread (2 threads, 35B-A3B widths),
// a share that grows with the thread count. Pieces hold at least kRowsPieceMin values, at most 4 a thread.
inline constexpr int64_t kRowsParallelMin = 32768;
inline constexpr int64_t kRowsPieceMin = 8192;

// Calls fn(r0, r1) over [0, n) in contiguous pieces, on the pool when n rows of `values_per_row` each are
// worth it. Each row's arithmetic must not depend on the piece it falls in, so the split never changes a
// result.
template <typename Fn>
void for_rows(Pass& p, int64_t n, int64_t values_per_row, Fn&& fn) {
  const int64_t total = n * values_per_row;
  const int64_t threads = p.pool.size();
  if (threads == 1 || n < 2 || total < kRowsParallelMin) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t pieces = std::max<int64_t>(2, std::min({n, 4 * threads, total / kRowsPieceMin}));
  p.pool.parallel_for(static_cast<size_t>(pieces), [&](size_t i, int) {
    const int64_t k = static_cast<int64_t>(i);
    fn(n * k / pieces, n * (k + 1) / pieces);
  });
}

// out = RMSNorm(x) * w per row of n values.
void rms_rows(Pass& p, const float* x, const float* w, int64_t rows, int64_t n, float eps, float* out);

// Gated full attention over ws.a (n x n_embd) into ws.m; KV slot `slot` of the memory.
void attention(Pass& p, const AttentionWeights& w, int32_t slot);

// Gated DeltaNet over ws.a into ws.m; GDN layer index `gi` of the memory.
void delta_net(Pass& p, const DeltaNetWeights& w, int32_t gi);

}  // namespace mtp::fwd
