#include "train/gguf_export.h"

#include <map>

#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "model/qwen35moe_tensors.h"
#include "quant/quantize.h"
#include "surgery/graft.h"
#include "tokenizer/gguf_vocab.h"

namespace mtp::train {

Expected<Vocab> pad_vocab(Vocab vocab, int64_t n_vocab) {
  if (static_cast<int64_t>(vocab.tokens.size()) > n_vocab)
    return invalid_argument("the vocabulary has ", vocab.tokens.size(), " tokens, more than the model's ",
                            n_vocab);
  if (vocab.token_types.empty())
    vocab.token_types.assign(vocab.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  for (int64_t i = static_cast<int64_t>(vocab.tokens.size()); i < n_vocab; ++i) {
    vocab.tokens.push_back("<|train_pad_" + std::to_string(i) + "|>");
    vocab.token_types.push_back(static_cast<int32_t>(TokenType::kUnused));
  }
  return vocab;
}

Status write_f32_gguf(const Qwen35MoeConfig& config, const Vocab& vocab,
                      const std::vector<NamedValues>& tensors, const std::string& model_name,
                      const std::string& path, bool block_only) {
  MTP_RETURN_IF_ERROR(config.validate());
  if (config.n_nextn != 1) return invalid_argument("a trained model has one MTP block (n_nextn = 1)");
  if (static_cast<int64_t>(vocab.tokens.size()) != config.n_vocab)
    return invalid_argument("the vocabulary has ", vocab.tokens.size(), " tokens, the model ",
                            config.n_vocab);
  std::map<std::string, const NamedValues*> by_name;
  for (const NamedValues& t : tensors) {
    if (!by_name.emplace(t.name, &t).second) return invalid_argument("tensor ", t.name, " given twice");
  }

  std::vector<TensorSpec> specs;
  std::vector<const NamedValues*> order;
  const std::string block = "blk." + std::to_string(config.n_layer) + ".";
  for (const TensorDesc& d : qwen35moe_tensors(config, true)) {
    if (block_only && !d.name.starts_with(block)) continue;
    auto it = by_name.find(d.name);
    if (it == by_name.end()) {
      if (d.required) return invalid_argument("tensor ", d.name, " missing");
      continue;
    }
    const int64_t count = d.ne[0] * d.ne[1] * d.ne[2] * d.ne[3];
    if (static_cast<int64_t>(it->second->values.size()) != count)
      return invalid_argument("tensor ", d.name, " has ", it->second->values.size(), " values, expected ",
                              count);
    specs.push_back({d.name, GgmlType::F32, d.ne});
    order.push_back(it->second);
    by_name.erase(it);
  }
  if (!by_name.empty())
    return invalid_argument("tensor ", by_name.begin()->first, " is not a qwen35moe tensor");

  Metadata md;
  md.set("general.architecture", Value::string(kQwen35MoeArch));
  md.set("general.name", Value::string(model_name));
  md.set("general.file_type", Value::scalar<uint32_t>(0));  // all F32
  write_qwen35moe_config(config, md);
  write_vocab_to_gguf(vocab, md);
  if (block_only) surgery::mark_head_only(md, config.n_layer, config.n_vocab);
  MTP_ASSIGN_OR_RETURN(GgufWriter writer, GgufWriter::create(path, md, specs));
  for (const NamedValues* t : order) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(t->values.data());
    MTP_RETURN_IF_ERROR(writer.write_tensor({bytes, t->values.size() * sizeof(float)}));
  }
  return writer.finish();
}

Expected<NamedValues> read_stored_tensor(const GgufFile& file, const TensorInfo& t, std::string name) {
  NamedValues v{std::move(name), std::vector<float>(static_cast<size_t>(t.n_elements()))};
  MTP_RETURN_IF_ERROR(
      dequantize_tensor(nullptr, t.type, file.tensor_data(t).data(), v.values.data(), t.n_rows(), t.ne[0])
          .with_context(file.path() + ": " + t.name));
  return v;
}

Expected<StoredModel> read_stored_model(const std::string& path) {
  MTP_ASSIGN_OR_RETURN(Model model, Model::load(path));
  auto fail = [&](auto... parts) { return unsupported(path, ": ", parts...); };
  if (model.params().attention_scale != 0 || model.params().expert_weights_scale != 0)
    return fail("attention.scale or expert_weights_scale is set; training does not model them");
  if (model.vocab().tokens.empty()) return fail("the file has no tokenizer");
  StoredModel out{model.config(), model.vocab(), {}};
  const GgufFile& file = *model.file();
  for (const TensorDesc& d : qwen35moe_tensors(model.config(), model.has_mtp())) {
    const TensorInfo* info = file.find_tensor(d.name);
    if (info == nullptr) continue;  // an optional tensor the file does not have (load checked the rest)
    MTP_ASSIGN_OR_RETURN(NamedValues t, read_stored_tensor(file, *info, d.name));
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace mtp::train
