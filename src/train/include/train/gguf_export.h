// Writing a trained model as an F32 qwen35moe GGUF, with the converter's conventions already applied by the
// caller (norms as 1 + w, ssm_a = -exp(A_log), tiled value heads): this layer only checks names and sizes
// against the model's tensor table and writes. No libtorch here.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
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
// count; they are written in the order of qwen35moe_tensors().
Status write_f32_gguf(const Qwen35MoeConfig& config, const Vocab& vocab,
                      const std::vector<NamedValues>& tensors, const std::string& model_name,
                      const std::string& path);

}  // namespace mtp::train
