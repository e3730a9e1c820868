// A loaded qwen35moe model: the mapped GGUF file, its hyperparameters, its weights bound by name, and its
// vocabulary. Immutable after load; any number of sequences (each with its own state) may read it at once.
#pragma once

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "model/qwen35moe_config.h"
#include "model/qwen35moe_weights.h"
#include "tokenizer/vocab.h"

namespace mtp {

class ThreadPool;

// Optional hyperparameters that Qwen35MoeConfig does not carry (docs/model.md section 1); absent in the
// 35B-A3B files, so their defaults leave the math as written in sections 3-4.
struct ModelParams {
  float attention_scale = 0;       // `attention.scale`; 0 = 1/sqrt(head_dim)
  float expert_weights_scale = 0;  // `expert_weights_scale`; applied only when not 0 and not 1
};

class Model {
 public:
  Model(Model&&) noexcept = default;
  Model& operator=(Model&&) noexcept = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Maps and validates `path`: architecture qwen35moe, hyperparameters, every tensor of the table (name,
  // shape, type), no NaN or infinity in float tensors or in quantized tensors' block scales. Errors name the
  // file and, for tensors, the tensor with its expected and actual shape/type, or the element, row and block.
  // With `pool`, the weights are repacked (below) on its threads.
  static Expected<Model> load(const std::string& path, ThreadPool* pool = nullptr);
  // The same, drafting with the MTP block of `head_path` (a head-only file from `mtp extract-head`, or any
  // qwen35moe file with an MTP block) instead of the model's own; empty: the model's own. The head must
  // match the model: widths, attention and expert shapes, RoPE, vocabulary size and tokenizer; each
  // mismatch is refused with both values named.
  static Expected<Model> load(const std::string& path, const std::string& head_path,
                              ThreadPool* pool = nullptr);

  // A model over weights the caller owns (tests build tiny models in memory this way); the views must
  // outlive the model.
  static Model from_parts(Qwen35MoeConfig config, Qwen35MoeWeights weights, Vocab vocab = {},
                          ModelParams params = {});

  // Every load repacks the weight matrices that the active kernels run faster packed (kernels/pack.h) into
  // memory of its own, once, and releases the file's pages of them. MTP_PACK=0 in the environment turns
  // this off (the file's bytes are then used directly; the results are the same).
  static bool packing_enabled();
  // Bytes of packed copies this model holds (0 when nothing was packed).
  int64_t packed_bytes() const { return packed_bytes_; }

  const Qwen35MoeConfig& config() const { return config_; }
  const Qwen35MoeWeights& weights() const { return weights_; }
  const ModelParams& params() const { return params_; }
  // Empty (no tokens) when the file has no tokenizer.
  const Vocab& vocab() const { return vocab_; }
  bool has_mtp() const { return weights_.mtp.has_value(); }
  // The mapped file, or nullptr for a model made by from_parts.
  const GgufFile* file() const { return file_ ? &*file_ : nullptr; }
  // The head file the MTP block came from, or nullptr.
  const GgufFile* head_file() const { return head_file_ ? &*head_file_ : nullptr; }

 private:
  Model() = default;
  static Expected<Model> load_unpacked(const std::string& path);
  // Checks every quantized block scale the engine reads (a NaN or infinity there would turn every logit
  // into NaN without failing anywhere) and packs the matrices, in one pass over the file's bytes.
  Status check_and_pack(ThreadPool* pool = nullptr);

  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };

  std::optional<GgufFile> file_;       // owns the mapping the weight views point into (stable across moves)
  std::optional<GgufFile> head_file_;  // the --head file, when its block replaced the model's own
  Qwen35MoeConfig config_;
  Qwen35MoeWeights weights_;
  ModelParams params_;
  Vocab vocab_;
  std::unique_ptr<uint8_t, FreeDeleter> packed_;  // the packed copies the weight views point into
  int64_t packed_bytes_ = 0;
};

}  // namespace mtp
