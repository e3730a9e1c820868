#include "model/model.h"

#include "model/qwen35moe_tensors.h"
#include "tokenizer/gguf_vocab.h"

namespace mtp {
namespace {

Expected<float> optional_float(const Metadata& md, const std::string& key) {
  if (!md.contains(key)) return 0.0f;
  return md.get<float>(key);
}

// Why the head's block cannot draft for `trunk` (empty when it can).
Status check_head(const Qwen35MoeConfig& tc, const Metadata& trunk_md, const GgufFile& head,
                  const Qwen35MoeConfig& hc) {
  std::string problems;
  auto compare = [&](const char* what, auto t, auto h) {
    if (t != h) problems += str_cat(problems.empty() ? "" : "; ", what, ": model has ", t, ", head has ", h);
  };
  compare("embedding_length", tc.n_embd, hc.n_embd);
  compare("vocabulary size", tc.n_vocab, hc.n_vocab);
  compare("attention.head_count", tc.n_head, hc.n_head);
  compare("attention.head_count_kv", tc.n_head_kv, hc.n_head_kv);
  compare("attention.key_length", tc.head_dim, hc.head_dim);
  compare("rope.dimension_count", tc.n_rot, hc.n_rot);
  compare("rope.freq_base", tc.rope_freq_base, hc.rope_freq_base);
  compare("expert_count", tc.n_expert, hc.n_expert);
  compare("expert_used_count", tc.n_expert_used, hc.n_expert_used);
  compare("expert_feed_forward_length", tc.n_ff_exp, hc.n_ff_exp);
  compare("expert_shared_feed_forward_length", tc.n_ff_shexp, hc.n_ff_shexp);
  auto tf = tokenizer_fingerprint(trunk_md);
  auto hf = tokenizer_fingerprint(head.metadata());
  if (tf.ok() && hf.ok() && *tf != *hf) compare("tokenizer fingerprint", *tf, *hf);
  if (problems.empty()) return Status::Ok();
  return invalid_argument("the head does not fit the model: ", problems);
}

}  // namespace

Expected<Model> Model::load(const std::string& path, const std::string& head_path) {
  MTP_ASSIGN_OR_RETURN(Model m, load(path));
  if (head_path.empty()) return m;
  MTP_ASSIGN_OR_RETURN(GgufFile head, GgufFile::open(head_path));
  auto fail = [&](const Status& s) { return s.with_context(head_path); };
  if (head.architecture() != kQwen35MoeArch)
    return fail(unsupported("architecture is '", head.architecture(), "', expected '", kQwen35MoeArch, "'"));
  const Metadata& md = head.metadata();
  const std::string prefix = std::string(kQwen35MoeArch) + ".";
  int64_t n_vocab = 0;
  if (const TensorInfo* e = head.find_tensor("token_embd.weight"))
    n_vocab = e->ne[1];
  else
    n_vocab = md.get_integer_or("mtp.head.n_vocab", 0).value_or(0);
  auto hc = read_qwen35moe_config(md, n_vocab);
  if (!hc.ok()) return fail(hc.status());
  // The block: mtp.head.source_block in head-only files, else the file's own MTP block.
  int64_t block = md.get_integer_or("mtp.head.source_block", -1).value_or(-1);
  if (block < 0 && hc->n_nextn == 1) block = hc->n_layer;
  if (block < 0) return fail(not_found("no MTP block (no mtp.head.source_block, no nextn_predict_layers)"));
  MTP_RETURN_IF_ERROR(fail(check_head(m.config_, m.file_->metadata(), head, *hc)));
  auto mtp = bind_mtp_block(head, m.config_, block, m.weights_);
  if (!mtp.ok()) return fail(mtp.status());
  m.weights_.mtp = *mtp;
  m.config_.n_nextn = 1;
  m.head_file_.emplace(std::move(head));
  return m;
}

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
