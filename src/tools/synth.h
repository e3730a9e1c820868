// `mtp synth`: deterministic random-weight qwen35moe GGUF files of a named shape, for tests and benchmarks.
//
// Every tensor's values come from a generator seeded by (seed, tensor name, row), so a tensor is the same
// whatever else the file holds: the trunk of `--mtp` and of a file without it are byte-identical, which is
// what lets tests check `mtp graft` against `mtp synth --mtp`. Rows are generated and encoded in parallel,
// streamed to the writer, so a multi-GB shape needs little memory.
//
// Scales (chosen so activations stay O(1) through any depth): embeddings N(0, 1); every projection
// N(0, 1/fan_in) so that a normalised input gives unit-variance outputs; the projections that write into the
// residual stream (attn_output, ssm_out, ffn_down*, nextn.eh_proj excluded) are further scaled by
// 1/sqrt(2 * blocks) as in GPT-2, so the residual grows like sqrt(depth) at most; norm weights 1 + N(0,
// 0.02^2); ssm_a = -exp(U(0, ln 16)) (decays in [-16, -1], as Mamba initialises A); ssm_dt.bias = softplus^-1
// of a log-uniform dt in [1e-3, 1e-1]; conv taps N(0, 1/d_conv).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/qwen35moe_config.h"
#include "model/qwen35moe_tensors.h"
#include "quant/types.h"

namespace mtp::tools {

struct SynthOptions {
  std::string shape = "tiny";     // qwen35moe_shape() names
  int64_t layers = 0;             // trunk layers; 0 = the shape's default
  bool mtp = false;               // append the MTP block blk.{layers}
  GgmlType type = GgmlType::F32;  // type of the 2-D/3-D weights (norms, vectors, conv and router stay F32)
  uint64_t seed = 1;
  std::string name;  // general.name; default "synth-<shape>"
  // A custom shape (tests, benchmarks): used instead of `shape`/`layers` when set; n_nextn follows `mtp`.
  std::optional<Qwen35MoeConfig> config;
};

// The type a tensor of this kind gets in a synthetic file of weight type `type` (with llama.cpp's shape
// fallback when the row length does not divide into blocks).
GgmlType synth_tensor_type(const TensorDesc& desc, GgmlType type);

// Fills `out` (n_per_row floats) with row `row` of tensor `desc`, deterministically.
void synth_row(const Qwen35MoeConfig& config, const TensorDesc& desc, uint64_t seed, int64_t row, float* out);

Status synth_model(const SynthOptions& options, const std::string& path, ThreadPool& pool);

}  // namespace mtp::tools
