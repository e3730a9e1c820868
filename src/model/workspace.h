// The forward pass's scratch (private to the model library): activation buffers that only grow, so after
// warm-up a forward pass allocates nothing.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/vec.h"

namespace mtp {

// Activation rows quantized lazily per dot-product family: one input (e.g. the normed hidden feeding q, k and
// v) is quantized at most once per format whatever the weight types.
struct ActCache {
  kernels::PreparedActivations prepared[3];
  bool ready[3] = {false, false, false};
  const float* x = nullptr;
  int64_t n_rows = 0, n_in = 0, stride = 0;

  void set(const float* x_, int64_t n_rows_, int64_t n_in_, int64_t stride_) {
    x = x_, n_rows = n_rows_, n_in = n_in_, stride = stride_;
    ready[0] = ready[1] = ready[2] = false;
  }
  const kernels::PreparedActivations& get(GgmlType weight_type, ThreadPool* pool) {
    const kernels::ActFormat f = kernels::act_format(weight_type);
    const int i = static_cast<int>(f);
    if (!ready[i]) {
      prepared[i].prepare(f, x, n_rows, n_in, stride, pool);
      ready[i] = true;
    }
    return prepared[i];
  }
};

// The rows of one sequence in a batch, in order, and (trunk batches) the GDN snapshot planes they fill (every
// row updates the sequence's live plane in place).
struct SeqGroup {
  int32_t seq = 0;
  std::vector<int32_t> rows;
  std::vector<int32_t> snap;    // per row: the plane that gets a copy of the state after it, or -1
  std::vector<float*> capture;  // per row: a GdnState buffer that gets it instead (BatchRow::capture)
};

// One product of an expert pass (forward.cpp's expert_pass): output rows [o0, o1) of w over activation rows
// rows[0..n_rows) of x (rows == nullptr: the first n_rows), into y (row i at y + i * y_stride).
struct ExpertItem {
  kernels::MatrixView w;
  const kernels::PreparedActivations* x;
  const int32_t* rows;
  int64_t n_rows, o0, o1;
  float* y;
  int64_t y_stride;
};

struct Workspace {
  std::vector<SeqGroup> groups;
  int64_t n_groups = 0;
  std::vector<int32_t> seq_group;         // per sequence slot: index in groups, or -1
  std::vector<int32_t> iota;              // 0, 1, 2, ... (filled by the forward pass)
  std::vector<int32_t> items;             // attention work items
  std::vector<ExpertItem> expert_items;   // MoE work items
  std::vector<int32_t> cursor;            // MoE grouping
  std::vector<float> x, a, m, f;          // rows x n_embd: residual, normed input, block output, MoE input
  std::vector<float> big0, big1, big2;    // rows x (widest projection)
  std::vector<float> small0, small1;      // rows x H_v (beta, alpha) or n_expert (router)
  std::vector<int32_t> idx0, idx1, idx2;  // row lists
  std::vector<float> pair_w;              // MoE: per (row, k) weight
  std::vector<std::vector<float>> thread_scratch;              // per thread: attention scores, KV rows as f32
  std::vector<std::vector<kernels::DeltaRuleRow>> delta_rows;  // per thread: one head's delta-rule steps
  ActCache acts0, acts1, acts2;
  // Small non-F32 vectors (norm weights, conv taps) dequantized once, by data address.
  std::unordered_map<const void*, std::vector<float>> f32_cache;
  std::unordered_map<const void*, std::vector<float>> conv_taps;  // conv1d weights as d_conv x conv_dim

  template <typename T>
  static T* grow(std::vector<T>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v.data();
  }
};

}  // namespace mtp
