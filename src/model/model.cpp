#include "model/model.h"

#include "tokenizer/gguf_vocab.h"

namespace mtp {
namespace {

Expected<float> optional_float(const Metadata& md, const std::string& key) {
  if (!md.contains(key)) return 0.0f;
  return md.get<float>(key);
}

}  // namespace

Expected<Model> Model::load(const std::string& path) {
  MTP_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  auto fail = [&](const Status& s) { return s.with_context(path); };

  const std::string arch = file.architecture();
  if (arch != kQwen35MoeArch) {
    return fail(unsupported("architecture is '", arch.empty() ? "(none)" : arch, "', expected '",
                            kQwen35MoeArch, "'"));
  }
  // The metadata has no vocab_size: the embedding's row count is the vocabulary width (section 1).
  const TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr) return fail(not_found("tensor 'token_embd.weight' is missing"));
  auto config = read_qwen35moe_config(file.metadata(), embd->ne[1]);
  if (!config.ok()) return fail(config.status());
  auto weights = bind_qwen35moe_weights(file, *config);
  if (!weights.ok()) return fail(weights.status());

  Model m;
  const Metadata& md = file.metadata();
  const std::string prefix = std::string(kQwen35MoeArch) + ".";
  auto attn_scale = optional_float(md, prefix + "attention.scale");
  if (!attn_scale.ok()) return fail(attn_scale.status());
  auto expert_scale = optional_float(md, prefix + "expert_weights_scale");
  if (!expert_scale.ok()) return fail(expert_scale.status());
  m.params_.attention_scale = *attn_scale;
  m.params_.expert_weights_scale = *expert_scale;

  if (md.contains("tokenizer.ggml.tokens")) {
    auto vocab = vocab_from_gguf(md);
    if (!vocab.ok()) return fail(vocab.status());
    if (static_cast<int64_t>(vocab->tokens.size()) > config->n_vocab) {
      return fail(corrupt("the tokenizer has ", vocab->tokens.size(), " tokens but token_embd only ",
                          config->n_vocab, " rows"));
    }
    m.vocab_ = std::move(vocab).value();
  } else {
    m.vocab_.tokens.clear();
  }
  m.config_ = *config;
  m.weights_ = std::move(weights).value();
  m.file_.emplace(std::move(file));  // the mapping moves with its address unchanged; views stay valid
  return m;
}

Model Model::from_parts(Qwen35MoeConfig config, Qwen35MoeWeights weights, Vocab vocab, ModelParams params) {
  Model m;
  m.config_ = std::move(config);
  m.weights_ = std::move(weights);
  m.vocab_ = std::move(vocab);
  m.params_ = params;
  return m;
}

}  // namespace mtp
