// The qwen35moe model (docs/model.md sections 3-4) in libtorch, for training tiny configs: the same math as
// the reference forward (src/model/reference_forward.cpp), over a batch of sequences at once.
//
// Parameters are kept under their GGUF names and in the GGUF layout (a tensor with ne = {IN, OUT, E} is a
// torch tensor [E, OUT, IN], row-major, so y = x Wᵀ), with two exceptions that make training behave as in the
// original model: RMSNorm weights are trained as offsets w (the file stores 1 + w, as the converter does),
// except the Gated DeltaNet's `ssm_norm`, which is stored as trained; and the decay is trained as A_log (the
// file's `ssm_a` is -exp(A_log)). Value heads are kept in the GGUF (tiled) order: value head j reads
// query/key head j mod H_k, so the export needs no reordering.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/qwen35moe_config.h"
#include "train/gguf_export.h"

namespace mtp::train {

// Inputs of the delta rule, per sequence and value head: q, k [B, H, T, d_k] (L2-normalised, q scaled by
// 1/sqrt(d)), v [B, H, T, d_v], beta [B, H, T] in (0, 1), g [B, H, T] the log decay (<= 0).
struct DeltaInputs {
  torch::Tensor q, k, v, beta, g;
};

// o [B, H, T, d_v] with zero initial state (docs/model.md 3.3 step 6), one token at a time.
torch::Tensor delta_rule_recurrent(const DeltaInputs& in);
// The same outputs computed chunk by chunk (chunk_size tokens), with matrix products inside a chunk and the
// state carried between chunks: what training uses.
torch::Tensor delta_rule_chunked(const DeltaInputs& in, int64_t chunk_size);

enum class DeltaForm { kChunked, kRecurrent };

// The routed experts of one MoE layer (docs/model.md 3.4), GGUF layout: router [E, n], gate and up
// [E, ff, n], down [E, n, ff].
struct ExpertWeights {
  torch::Tensor router, gate, up, down;
};

// The routed half of the MoE over rows x [N, n] -> [N, n]: softmax over all experts, the top k renormalised.
// The dispatched form gathers each expert's rows and runs only the chosen experts (what training uses); the
// dense form runs every expert on every row and lets the top-k weights select (k / E of its work is kept).
// Both give the same values and the same gradients (the router's through the kept probabilities).
torch::Tensor routed_experts_dispatched(const torch::Tensor& x, const ExpertWeights& w, int64_t k);
torch::Tensor routed_experts_dense(const torch::Tensor& x, const ExpertWeights& w, int64_t k);

struct ForwardResult {
  torch::Tensor hidden;      // [B, T, n_embd] post-norm trunk hidden (the vector the LM head reads)
  torch::Tensor logits;      // [B, T, n_vocab]: row t predicts token t + 1
  torch::Tensor mtp_logits;  // [B, T - 1, n_vocab]: row t (token t + 1 with hidden t) predicts token t + 2
};

// What a QwenTorch holds: the whole model, or only the MTP block and the LM head its logits read (distilling
// a block for a trunk that runs elsewhere: at 35B-A3B widths the trunk does not fit in memory as f32).
enum class ModelParts { kAll, kMtpBlock };

class QwenTorch {
 public:
  // Random initial weights (the scales `mtp synth` uses), seeded. The config must validate and have
  // n_nextn = 1: the model always has its MTP block.
  QwenTorch(const Qwen35MoeConfig& config, uint64_t seed, ModelParts parts = ModelParts::kAll);

  const Qwen35MoeConfig& config() const { return config_; }
  ModelParts parts() const { return parts_; }
  // Every trainable tensor (requires_grad), in the order of qwen35moe_tensors().
  std::vector<torch::Tensor> parameters() const;
  // The same less the MTP block's own tensors (blk.{n_layer}.*): what trains when the MTP block is to stay
  // as it is.
  std::vector<torch::Tensor> trunk_parameters() const;
  // The MTP block's own tensors.
  std::vector<torch::Tensor> mtp_parameters() const;
  // The trunk's tensors stop recording gradients (distilling the MTP block: the trunk only runs forward).
  void freeze_trunk();
  // The MTP block's routed experts (ffn_{gate,up,down}_exps) stop recording gradients too.
  void freeze_block_experts();

  // Replaces the weights by a file's (gguf_export.h: read_stored_model), undoing the converter's conventions:
  // every trainable tensor must be there, except the MTP block's when `tensors` has none of them (a file
  // without an MTP block: the block keeps its initial weights); a tensor the model does not train (e.g. the
  // optional nextn.shared_head_head) or of another size is refused.
  Status load_stored(const std::vector<NamedValues>& tensors);
  // The same from a source that has the tensors `names` and gives each one's values when asked (`read`):
  // at most one tensor's values are held beside the model's (at 35B-A3B widths the LM head alone is 2 GB).
  Status load_stored(const std::vector<std::string>& names,
                     const std::function<Expected<std::vector<float>>(const std::string&)>& read);

  // tokens [B, T] (int64). The MTP logits are computed when with_mtp and T >= 2. The whole model only.
  ForwardResult forward(const torch::Tensor& tokens, bool with_mtp = true,
                        DeltaForm form = DeltaForm::kChunked) const;
  // The MTP block alone (docs/model.md 4.1-4.3): hidden [B, T', n_embd] the trunk's post-norm hiddens at
  // positions 0..T'-1 and embedded [B, T', n_embd] the token embeddings (token_embd rows) of the tokens at
  // 1..T'; row t (position t + 1) predicts the token at t + 2: [B, T', n_vocab].
  torch::Tensor mtp_logits(const torch::Tensor& hidden, const torch::Tensor& embedded,
                           DeltaForm form = DeltaForm::kChunked) const;

  // The tensors as the GGUF file stores them (norms as 1 + w, ssm_a = -exp(A_log)), float32, contiguous, in
  // the order of qwen35moe_tensors(); with their GGUF names. With ModelParts::kMtpBlock, the block's only
  // (a head-only file, as `mtp extract-head` writes).
  std::vector<std::pair<std::string, torch::Tensor>> export_tensors() const;

 private:
  bool in_mtp_block(const std::string& name) const;  // blk.{n_layer}.*
  torch::Tensor p(const std::string& name) const;
  torch::Tensor norm_weight(const std::string& name) const;
  torch::Tensor residual_block(const std::string& blk, bool full_attention, const torch::Tensor& x,
                               const torch::Tensor& positions, DeltaForm form) const;
  torch::Tensor attention(const std::string& blk, const torch::Tensor& a,
                          const torch::Tensor& positions) const;
  torch::Tensor delta_net(const std::string& blk, const torch::Tensor& a, DeltaForm form) const;
  torch::Tensor moe(const std::string& blk, const torch::Tensor& f) const;
  torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w) const;

  Qwen35MoeConfig config_;
  ModelParts parts_ = ModelParts::kAll;
  std::vector<std::string> order_;               // GGUF names, qwen35moe_tensors() order
  std::map<std::string, torch::Tensor> params_;  // trained parameterisation (see the header comment)
};

}  // namespace mtp::train

#include "base/status.h"
#include "tokenizer/vocab.h"

namespace mtp::train {

// Writes the model as an F32 GGUF (export_tensors()) with `vocab` padded to the model's vocabulary size.
Status export_gguf(const QwenTorch& model, const Vocab& vocab, const std::string& model_name,
                   const std::string& path);

}  // namespace mtp::train
