#include "surgery/graft.h"

#include <algorithm>

#include "gguf/gguf_writer.h"
#include "model/qwen35moe_config.h"
#include "model/qwen35moe_tensors.h"
#include "surgery/inspect_report.h"
#include "surgery/quant_policy.h"
#include "surgery/quantize_plan.h"
#include "surgery/tensor_stream.h"
#include "tokenizer/gguf_vocab.h"

namespace mtp::surgery {
namespace {

// Where a file's MTP block is and what it needs from a trunk.
struct HeadView {
  int64_t block = -1;                      // source block index
  std::vector<const TensorInfo*> tensors;  // blk.{block}.* in file order
  int64_t n_vocab = 0;
  bool head_only = false;
};

std::string arch_key(const GgufFile& f, const char* suffix) {
  return f.architecture() + "." + suffix;
}

int64_t vocab_size(const GgufFile& f) {
  if (const TensorInfo* t = f.find_tensor("token_embd.weight")) return t->ne[1];
  return f.metadata().get_integer_or("mtp.head.n_vocab", 0).value_or(0);
}

// The MTP block: blk.{block_count - nextn_predict_layers} when the metadata says there is one, else the block
// holding nextn.* tensors.
Expected<HeadView> find_head(const GgufFile& f) {
  HeadView h;
  h.head_only = f.metadata().contains(kHeadFormatKey);
  h.n_vocab = vocab_size(f);
  const int64_t nextn = f.metadata().get_integer_or(arch_key(f, "nextn_predict_layers"), 0).value_or(0);
  const auto block_count = f.metadata().get_integer(arch_key(f, "block_count"));
  if (nextn > 0 && block_count.ok()) h.block = *block_count - nextn;
  if (h.block < 0) {
    for (const TensorInfo& t : f.tensors()) {
      auto b = block_index(t.name);
      if (b && t.name.find(".nextn.") != std::string::npos) h.block = *b;
    }
  }
  if (h.block < 0)
    return not_found(f.path(), " has no MTP block (no nextn_predict_layers, no blk.N.nextn.*)");
  for (const TensorInfo& t : f.tensors()) {
    if (block_index(t.name) == h.block) h.tensors.push_back(&t);
  }
  if (h.tensors.empty()) return not_found(f.path(), " has no tensors in its MTP block blk.", h.block);
  return h;
}

// "blk.40.attn_q.weight" -> "attn_q.weight"
std::string block_suffix(const std::string& name) {
  return name.substr(name.find('.', 4) + 1);
}

std::string renamed(const std::string& name, int64_t block) {
  return str_cat("blk.", block, ".", block_suffix(name));
}

bool trunk_has_mtp(const GgufFile& trunk, int64_t n_layer) {
  for (const TensorInfo& t : trunk.tensors()) {
    if (auto b = block_index(t.name); b && *b >= n_layer) return true;
  }
  return false;
}

struct TrunkView {
  Qwen35MoeConfig config;  // n_layer = the trunk's layers; n_nextn as stored
};

Expected<TrunkView> read_trunk(const GgufFile& trunk) {
  if (trunk.architecture() != kQwen35MoeArch) {
    return unsupported(trunk.path(), ": architecture is '", trunk.architecture(), "'; graft supports ",
                       kQwen35MoeArch);
  }
  const TensorInfo* embd = trunk.find_tensor("token_embd.weight");
  if (embd == nullptr) return unsupported(trunk.path(), ": no token_embd.weight; is it a head-only file?");
  TrunkView v;
  auto config = read_qwen35moe_config(trunk.metadata(), embd->ne[1]);
  if (!config.ok()) return config.status().with_context(trunk.path());
  v.config = *config;
  return v;
}

void copy_keys_with_prefix(const Metadata& from, const std::string& prefix, Metadata& to) {
  for (const KeyValue& kv : from.entries()) {
    if (kv.key.compare(0, prefix.size(), prefix) == 0) to.set(kv.key, kv.value);
  }
}

struct OutputTensor {
  const GgufFile* source;
  const TensorInfo* tensor;
  std::string name;
  GgmlType to;
};

Expected<uint64_t> write_all(const std::string& path, const Metadata& md,
                             const std::vector<OutputTensor>& items, ThreadPool& pool, const char* label) {
  std::vector<TensorSpec> specs;
  uint64_t in_bytes = 0;
  for (const OutputTensor& o : items) {
    specs.push_back({o.name, o.to, o.tensor->ne});
    in_bytes += o.tensor->n_bytes;
  }
  MTP_ASSIGN_OR_RETURN(GgufWriter writer, GgufWriter::create(path, md, specs));
  Progress progress(label, in_bytes);
  for (const OutputTensor& o : items) {
    MTP_RETURN_IF_ERROR(stream_tensor(writer, *o.source, *o.tensor, o.to, pool, nullptr, &progress));
  }
  MTP_RETURN_IF_ERROR(writer.finish());
  progress.finish();
  return writer.total_bytes();
}

// The block's own embedding and LM head, taken from the source's token_embd / output (tied: token_embd).
std::vector<std::pair<const TensorInfo*, std::string>> own_embeddings(const GgufFile& f, const HeadView& h) {
  std::vector<std::pair<const TensorInfo*, std::string>> out;
  auto has = [&](const char* suffix) {
    return f.find_tensor(str_cat("blk.", h.block, ".nextn.", suffix)) != nullptr;
  };
  const TensorInfo* embd = f.find_tensor("token_embd.weight");
  const TensorInfo* output = f.find_tensor("output.weight");
  if (!has("embed_tokens.weight") && embd) out.push_back({embd, "nextn.embed_tokens.weight"});
  if (!has("shared_head_head.weight") && (output || embd))
    out.push_back({output ? output : embd, "nextn.shared_head_head.weight"});
  return out;
}

}  // namespace

Expected<MtpBlock> find_mtp_block(const GgufFile& file) {
  MTP_ASSIGN_OR_RETURN(HeadView h, find_head(file));
  return MtpBlock{h.block, std::move(h.tensors)};
}

std::vector<GraftProblem> check_graft(const GgufFile& trunk, const GgufFile& head,
                                      const GraftOptions& options) {
  std::vector<GraftProblem> problems;
  auto fail = [&](bool overridable, auto&&... parts) {
    problems.push_back({str_cat(parts...), overridable});
  };
  auto trunk_view = read_trunk(trunk);
  if (!trunk_view.ok()) {
    fail(false, trunk_view.status().message());
    return problems;
  }
  const Qwen35MoeConfig& tc = trunk_view->config;
  auto hv = find_head(head);
  if (!hv.ok()) {
    fail(false, hv.status().message());
    return problems;
  }
  if (head.architecture() != trunk.architecture()) {
    fail(false, "architecture: trunk has '", trunk.architecture(), "', head has '", head.architecture(), "'");
    return problems;
  }
  if (!options.replace && (tc.n_nextn > 0 || trunk_has_mtp(trunk, tc.n_layer))) {
    fail(false, "the trunk already has an MTP block (nextn_predict_layers ", tc.n_nextn,
         "); use --replace to swap it");
  }
  auto hc = read_qwen35moe_config(head.metadata(), hv->n_vocab);
  if (!hc.ok()) {
    fail(false, "head metadata: ", hc.status().message());
    return problems;
  }
  auto compare = [&](const char* what, int64_t t, int64_t h, bool overridable = false) {
    if (t != h) fail(overridable, what, ": trunk has ", t, ", head has ", h);
  };
  compare("embedding_length", tc.n_embd, hc->n_embd);
  compare("vocabulary size", tc.n_vocab, hc->n_vocab);
  compare("attention.head_count", tc.n_head, hc->n_head);
  compare("attention.head_count_kv", tc.n_head_kv, hc->n_head_kv);
  compare("attention.key_length", tc.head_dim, hc->head_dim);
  compare("expert_count", tc.n_expert, hc->n_expert);
  compare("expert_used_count", tc.n_expert_used, hc->n_expert_used, true);
  compare("expert_feed_forward_length", tc.n_ff_exp, hc->n_ff_exp);
  compare("expert_shared_feed_forward_length", tc.n_ff_shexp, hc->n_ff_shexp);
  compare("rope.dimension_count", tc.n_rot, hc->n_rot, true);
  if (tc.rope_freq_base != hc->rope_freq_base) {
    fail(true, "rope.freq_base: trunk has ", tc.rope_freq_base, ", head has ", hc->rope_freq_base);
  }

  auto tf = tokenizer_fingerprint(trunk.metadata());
  auto hf = tokenizer_fingerprint(head.metadata());
  if (!tf.ok() || !hf.ok()) {
    fail(true, "tokenizer: cannot compare (", !tf.ok() ? "trunk" : "head", " has no tokenizer.ggml.tokens)");
  } else if (*tf != *hf) {
    fail(true, "tokenizer: trunk fingerprint ", *tf, ", head fingerprint ", *hf,
         " (token lists or merges differ; --force if you know they tokenize alike)");
  }

  // Every tensor of the head's block against the block the trunk's configuration implies.
  std::vector<TensorDesc> expected = qwen35moe_block_tensors(tc, tc.n_layer);
  for (const TensorInfo* t : hv->tensors) {
    const std::string want = renamed(t->name, tc.n_layer);
    auto it =
        std::find_if(expected.begin(), expected.end(), [&](const TensorDesc& d) { return d.name == want; });
    if (it == expected.end()) {
      fail(false, "head tensor '", t->name, "' has no place in a ", kQwen35MoeArch, " MTP block");
    } else if (it->ne != t->ne) {
      TensorInfo shape_of_expected = *t;
      shape_of_expected.ne = it->ne;
      std::string what =
          block_suffix(t->name).find("_exps") != std::string::npos
              ? str_cat(" (experts x width: trunk config implies ", tc.n_expert, " x ", tc.n_ff_exp, ")")
              : std::string();
      fail(false, "head tensor '", t->name, "' has shape ", t->shape_string(),
           ", the trunk's config implies ", shape_of_expected.shape_string(), what);
    }
  }
  for (const TensorDesc& d : expected) {
    if (!d.required) continue;
    const std::string src = str_cat("blk.", hv->block, ".", block_suffix(d.name));
    if (head.find_tensor(src) == nullptr)
      fail(false, "the head's MTP block lacks required tensor '", src, "'");
  }
  if (options.with_embeddings) {
    const bool has_own =
        head.find_tensor(str_cat("blk.", hv->block, ".nextn.embed_tokens.weight")) != nullptr;
    if (!has_own && head.find_tensor("token_embd.weight") == nullptr) {
      fail(false, "--with-embeddings: ", head.path(),
           " carries no embeddings (extract the head with --with-embeddings)");
    }
  }
  return problems;
}

Expected<GraftResult> graft(const std::string& trunk_path, const std::string& head_path,
                            const std::string& output, const GraftOptions& options, ThreadPool& pool) {
  MTP_ASSIGN_OR_RETURN(GgufFile trunk, GgufFile::open(trunk_path));
  MTP_ASSIGN_OR_RETURN(GgufFile head, GgufFile::open(head_path));
  GraftResult result;
  std::string refusals;
  for (const GraftProblem& p : check_graft(trunk, head, options)) {
    if (p.overridable && options.force)
      result.warnings.push_back(p.message);
    else
      refusals += (refusals.empty() ? "" : "; ") + p.message + (p.overridable ? " [--force overrides]" : "");
  }
  if (!refusals.empty()) return unsupported("cannot graft ", head_path, " onto ", trunk_path, ": ", refusals);

  MTP_ASSIGN_OR_RETURN(TrunkView tv, read_trunk(trunk));
  MTP_ASSIGN_OR_RETURN(HeadView hv, find_head(head));
  const int64_t n_layer = tv.config.n_layer;
  result.block = n_layer;

  Metadata md = trunk.metadata();
  const std::string block_count_key = arch_key(trunk, "block_count");
  md.set(block_count_key, Value::scalar(static_cast<uint32_t>(n_layer + 1)));
  md.set_after(block_count_key, arch_key(trunk, "nextn_predict_layers"), Value::scalar<uint32_t>(1));

  std::vector<OutputTensor> items;
  for (const TensorInfo& t : trunk.tensors()) {
    if (auto b = block_index(t.name); b && *b >= n_layer) continue;  // an old MTP block (--replace)
    items.push_back({&trunk, &t, t.name, t.type});
  }
  auto head_type = [&](const TensorInfo& t) {
    if (!options.head_type || why_not_quantizable(t)) return t.type;
    return computable_fallback(*options.head_type, t.ne[0]);
  };
  for (const TensorInfo* t : hv.tensors)
    items.push_back({&head, t, renamed(t->name, n_layer), head_type(*t)});
  if (options.with_embeddings) {
    for (const auto& [t, suffix] : own_embeddings(head, hv)) {
      items.push_back({&head, t, str_cat("blk.", n_layer, ".", suffix), head_type(*t)});
    }
  }
  result.head_tensors = 0;
  for (const OutputTensor& o : items) {
    if (o.source != &head) continue;
    ++result.head_tensors;
    if (options.head_type && !why_not_quantizable(*o.tensor) && o.to != *options.head_type)
      result.type_fallbacks.push_back(str_cat(o.name, ": ", type_name(o.to), " instead of ",
                                              type_name(*options.head_type), " (rows of ", o.tensor->ne[0],
                                              ")"));
  }
  MTP_ASSIGN_OR_RETURN(result.bytes_written, write_all(output, md, items, pool, "graft"));
  return result;
}

void mark_head_only(Metadata& md, int64_t source_block, int64_t n_vocab) {
  md.set(kHeadFormatKey, Value::scalar<uint32_t>(1));
  md.set("mtp.head.source_block", Value::scalar(static_cast<uint32_t>(source_block)));
  md.set("mtp.head.n_vocab", Value::scalar(static_cast<uint64_t>(n_vocab)));
}

Expected<GraftResult> extract_head(const std::string& input, const std::string& output, bool with_embeddings,
                                   ThreadPool& pool) {
  MTP_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(input));
  if (f.architecture() != kQwen35MoeArch) {
    return unsupported(input, ": architecture is '", f.architecture(), "'; extract-head supports ",
                       kQwen35MoeArch);
  }
  MTP_ASSIGN_OR_RETURN(HeadView hv, find_head(f));
  Metadata md;
  md.set("general.architecture", Value::string(f.architecture()));
  const std::string name = f.metadata().get_string("general.name").value_or("model");
  md.set("general.name", Value::string(name + " (MTP head)"));
  for (const char* key : {"general.file_type", "general.quantization_version"}) {
    if (const Value* v = f.metadata().find(key)) md.set(key, *v);
  }
  copy_keys_with_prefix(f.metadata(), f.architecture() + ".", md);
  copy_keys_with_prefix(f.metadata(), "tokenizer.", md);
  mark_head_only(md, hv.block, hv.n_vocab);
  if (auto fp = tokenizer_fingerprint(f.metadata()); fp.ok())
    md.set("mtp.head.tokenizer_fingerprint", Value::string(*fp));

  std::vector<OutputTensor> items;
  for (const TensorInfo* t : hv.tensors) items.push_back({&f, t, t->name, t->type});
  if (with_embeddings) {
    for (const auto& [t, suffix] : own_embeddings(f, hv))
      items.push_back({&f, t, str_cat("blk.", hv.block, ".", suffix), t->type});
  }
  GraftResult result;
  result.block = hv.block;
  result.head_tensors = items.size();
  MTP_ASSIGN_OR_RETURN(result.bytes_written, write_all(output, md, items, pool, "extract-head"));
  return result;
}

}  // namespace mtp::surgery
