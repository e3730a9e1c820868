#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <sys/mman.h>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/pack.h"
#include "model/qwen35moe_tensors.h"
#include "tokenizer/gguf_vocab.h"

namespace mtp {
namespace {

// An optional scale (0 when absent: the default applies). A NaN or infinity would not fail anywhere: it would
// turn every logit into NaN.
Expected<float> optional_scale(const Metadata& md, const std::string& key) {
  if (!md.contains(key)) return 0.0f;
  MTP_ASSIGN_OR_RETURN(const float v, md.get<float>(key));
  if (!std::isfinite(v)) return invalid_argument(key, " must be finite, got ", v);
  return v;
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
  return unsupported("the head does not fit the model: ", problems);
}

}  // namespace

Expected<Model> Model::load(const std::string& path, ThreadPool* pool) {
  MTP_ASSIGN_OR_RETURN(Model m, load_unpacked(path));
  m.pack_weights(pool);
  return m;
}

Expected<Model> Model::load(const std::string& path, const std::string& head_path, ThreadPool* pool) {
  MTP_ASSIGN_OR_RETURN(Model m, load_unpacked(path));
  if (head_path.empty()) {
    m.pack_weights(pool);
    return m;
  }
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
  m.pack_weights(pool);
  return m;
}

Expected<Model> Model::load_unpacked(const std::string& path) {
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
  auto attn_scale = optional_scale(md, prefix + "attention.scale");
  if (!attn_scale.ok()) return fail(attn_scale.status());
  auto expert_scale = optional_scale(md, prefix + "expert_weights_scale");
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
  m.pack_weights();
  return m;
}

bool Model::packing_enabled() {
  const char* env = std::getenv("MTP_PACK");
  return env == nullptr || std::string(env) != "0";
}

void Model::pack_weights(ThreadPool* pool) {
  if (!packing_enabled()) return;
  // Every matrix the engine's forward multiplies by (vectors and row lookups stay as they are).
  std::vector<TensorView*> mats;
  auto add_layer = [&](LayerWeights& l) {
    for (TensorView* t :
         {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.output, &l.gdn.qkv, &l.gdn.gate, &l.gdn.beta, &l.gdn.alpha,
          &l.gdn.out, &l.moe.router, &l.moe.gate_exps, &l.moe.up_exps, &l.moe.down_exps, &l.moe.gate_shexp,
          &l.moe.up_shexp, &l.moe.down_shexp})
      mats.push_back(t);
  };
  for (LayerWeights& l : weights_.layers) add_layer(l);
  mats.push_back(&weights_.output);
  if (weights_.mtp) {
    mats.push_back(&weights_.mtp->eh_proj);
    mats.push_back(&weights_.mtp->head);
    add_layer(weights_.mtp->block);
  }
  auto matrix = [](const TensorView& t) {
    return kernels::MatrixView::contiguous(t.type, t.data, t.ne[0], t.n_rows());
  };
  // Experts are packed as one matrix of n_expert * n_ff rows, so each expert must start on a tile.
  auto packable = [&](const TensorView& t) {
    return t.valid() && t.ne[1] % kernels::kPackRows == 0 && kernels::has_packed_kernel(t.type) &&
           kernels::can_pack(matrix(t));
  };
  // One copy per distinct matrix (the MTP head is usually the trunk's output itself).
  std::vector<const uint8_t*> sources;
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const TensorView* t : mats) {
    if (!packable(*t) || std::find(sources.begin(), sources.end(), t->data) != sources.end()) continue;
    sources.push_back(t->data);
    offsets.push_back(total);
    total += (t->n_rows() * t->row_bytes() + 63) / 64 * 64;
  }
  if (total == 0) return;
  constexpr int64_t kHugePage = int64_t{2} << 20;
  total = (total + kHugePage - 1) / kHugePage * kHugePage;
  packed_.reset(static_cast<uint8_t*>(std::aligned_alloc(kHugePage, static_cast<size_t>(total))));
  MTP_CHECK(packed_ != nullptr, "out of memory packing ", total, " bytes of weights");
  // Huge pages where the kernel allows them: a fraction of the page faults while packing, and of the TLB
  // misses while streaming weights at decode.
  madvise(packed_.get(), static_cast<size_t>(total), MADV_HUGEPAGE);
  packed_bytes_ = total;
  // Pieces of about kPackPieceBytes (whole tiles: a tile packs on its own), spread over the pool: most of a
  // load's time is the kernel zeroing the fresh pages each piece writes first, which runs on the faulting
  // thread (one thread: ~18 s for 4.2 GB on a VM whose host backs memory lazily).
  constexpr int64_t kPackPieceBytes = int64_t{8} << 20;
  struct Piece {
    const TensorView* t;
    int64_t offset, row0, rows;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < sources.size(); ++i) {
    const TensorView* t =
        *std::find_if(mats.begin(), mats.end(), [&](const TensorView* u) { return u->data == sources[i]; });
    const int64_t tile_bytes = kernels::kPackRows * t->row_bytes();
    const int64_t step = std::max<int64_t>(1, kPackPieceBytes / tile_bytes) * kernels::kPackRows;
    for (int64_t r = 0; r < t->n_rows(); r += step)
      pieces.push_back({t, offsets[i], r, std::min(step, t->n_rows() - r)});
  }
  auto pack_piece = [&](size_t i, int) {
    const Piece& p = pieces[i];
    const int64_t off = p.row0 * p.t->row_bytes(), bytes = p.rows * p.t->row_bytes();
    const uint8_t* src = p.t->data + off;
    kernels::pack_matrix(kernels::MatrixView::contiguous(p.t->type, src, p.t->ne[0], p.rows),
                         packed_.get() + p.offset + off);
    // The engine no longer reads these pages: let them leave the resident set.
    if (file_) file_->release_pages(src, static_cast<uint64_t>(bytes));
    if (head_file_) head_file_->release_pages(src, static_cast<uint64_t>(bytes));
  };
  if (pool != nullptr)
    pool->parallel_for(pieces.size(), pack_piece);
  else
    for (size_t i = 0; i < pieces.size(); ++i) pack_piece(i, 0);
  for (TensorView* t : mats) {
    const auto it = std::find(sources.begin(), sources.end(), t->data);
    if (it != sources.end()) t->packed = packed_.get() + offsets[static_cast<size_t>(it - sources.begin())];
  }
}

}  // namespace mtp
