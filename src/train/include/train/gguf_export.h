// Writing a trained model as an F32 qwen35moe GGUF, with the converter's conventions already applied by the
// caller (norms as 1 + w, ssm_a = -exp(A_log), tiled value heads): this layer only checks names and sizes
// against the model's tensor table and writes. And reading one back (any weight types the engine loads,
// dequantized to F32) to train on from it. No libtorch here.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "model/qwen35moe_config.h"
#include "tokenizer/vocab.h"

namespace mtp::train {

struct NamedValues {
  std::string name;           // GGUF tensor name
  std::vector<float> values;  // in GGUF order (ne[0] contiguous)
};

// `vocab` padded with unused tokens to `n_vocab` entries (the model's embedding rows); an error when it is
// already longer.
Expected<Vocab> pad_vocab(Vocab vocab, int64_t n_vocab);

// Writes `config` (with its MTP block, n_nextn = 1), the vocabulary and the tensors, all F32, to `path`
// (through a temporary file). Every tensor the file needs must be given exactly once, with ne's element
// count; they are written in the order of qwen35moe_tensors(). With block_only, the MTP block's tensors
// alone (a head-only file, as `mtp extract-head` writes): the trunk's may not be given.
Status write_f32_gguf(const Qwen35MoeConfig& config, const Vocab& vocab,
                      const std::vector<NamedValues>& tensors, const std::string& model_name,
                      const std::string& path, bool block_only = false);

// A qwen35moe file's weights as F32 values, as the file stores them (the converter's conventions), with its
// hyperparameters and vocabulary.
struct StoredModel {
  Qwen35MoeConfig config;  // n_nextn as in the file (0: no MTP block)
  Vocab vocab;
  std::vector<NamedValues> tensors;  // every tensor the file has, in qwen35moe_tensors() order
};

// One tensor of a model file dequantized to F32, under `name` (its own, or the training model's for it).
Expected<NamedValues> read_stored_tensor(const GgufFile& file, const TensorInfo& tensor, std::string name);

// Loads `path` as the engine does (every check of Model::load: architecture, shapes, types, no NaN), then
// dequantizes each tensor to F32. Refused: a file with `attention.scale` or `expert_weights_scale` set (the
// training model has no such knobs), or one without a tokenizer.
Expected<StoredModel> read_stored_model(const std::string& path);

}  // namespace mtp::train
