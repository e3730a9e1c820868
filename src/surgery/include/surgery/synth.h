// `mtp synth`: deterministic random-weight qwen35moe GGUF files of a named shape, for tests and benchmarks.
//
// Every tensor's values come from a generator seeded by (seed, tensor name, row), so a tensor is the same
// whatever else the file holds: the trunk of `--mtp` and of a file without it are byte-identical, which is
// what lets tests check `mtp graft` against `mtp synth --mtp`. Rows are generated and encoded in parallel,
// streamed to the writer, so a multi-GB shape needs little memory.
//
// Values are approximately normal: the sum of four uniforms, rescaled (variance 1, tails cut at +-3.46),
// which is ten times cheaper than Box-Muller and plenty for random weights. Scales (chosen so activations
// stay O(1) through any depth): embeddings N(0, 1); every projection N(0, 1/fan_in) so that a normalised
// input gives unit-variance outputs; the projections that write into the residual stream (attn_output,
// ssm_out, ffn_down*) are further scaled by 1/sqrt(2 * trunk layers) as in GPT-2, so the residual grows like
// sqrt(depth) at most; norm weights 1 + N(0, 0.02^2); ssm_a = -exp(U(0, ln 16)) (decays in [-16, -1], as
// Mamba initialises A); ssm_dt.bias = softplus^-1 of a log-uniform dt in [1e-3, 1e-1]; conv taps N(0,
// 1/d_conv).
//
// Structured mode (`--structured NOISE`): the model follows a hidden Markov chain, so that the MTP head
// agrees with the trunk often and speculation can be shown before any trained model exists. A seeded
// permutation sigma of the "text" tokens (printable-ASCII bytes and merges) is the chain: the LM head's row
// sigma(t) is the unit direction of embedding t (scaled so the right logit stands about 10 above the rest),
// so a residual stream that still holds embedding t predicts sigma(t); other tokens (control, unused) get
// near-zero rows and are never predicted. The residual-writing projections are scaled by NOISE: at 0 the
// blocks add nothing and the trunk is exactly the chain; larger NOISE makes the trunk's prediction depend on
// context, through attention and the delta-net state. The MTP block's eh_proj passes the embedding half
// through as the identity (and the hidden half scaled by NOISE), so the head predicts sigma(token) from the
// token it is given: exactly what the trunk predicts one step later when NOISE is 0. Raising NOISE lowers
// acceptance (README gives measured figures).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/qwen35moe_config.h"
#include "model/qwen35moe_tensors.h"
#include "quant/types.h"

namespace mtp::surgery {

struct SynthOptions {
  std::string shape = "tiny";     // qwen35moe_shape() names
  int64_t layers = 0;             // trunk layers; 0 = the shape's default
  bool mtp = false;               // append the MTP block blk.{layers}
  GgmlType type = GgmlType::F32;  // type of the 2-D/3-D weights (norms, vectors, conv and router stay F32)
  uint64_t seed = 1;
  std::string name;  // general.name; default "synth-<shape>"
  // A custom shape (tests, benchmarks): used instead of `shape`/`layers` when set; n_nextn follows `mtp`.
  std::optional<Qwen35MoeConfig> config;
  // Structured mode and its noise level (see above); unset = plain random weights.
  std::optional<double> structured;
};

// The type a tensor of this kind gets in a synthetic file of weight type `type` (with llama.cpp's shape
// fallback when the row length does not divide into blocks).
GgmlType synth_tensor_type(const TensorDesc& desc, GgmlType type);

Status synth_model(const SynthOptions& options, const std::string& path, ThreadPool& pool);

}  // namespace mtp::surgery
