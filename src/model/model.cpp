#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <sys/mman.h>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/pack.h"
#include "model/qwen35moe_tensors.h"
#include "quant/quantize.h"
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
  MTP_RETURN_IF_ERROR(m.check_and_pack(pool));
  return m;
}

Expected<Model> Model::load(const std::string& path, const std::string& head_path, ThreadPool* pool) {
  MTP_ASSIGN_OR_RETURN(Model m, load_unpacked(path));
  if (head_path.empty()) {
    MTP_RETURN_IF_ERROR(m.check_and_pack(pool));
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
  MTP_RETURN_IF_ERROR(m.check_and_pack(pool));
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
  const Status s = m.check_and_pack();
  MTP_CHECK(s.ok(), s.message());
  return m;
}

bool Model::packing_enabled() {
  const char* env = std::getenv("MTP_PACK");
  return env == nullptr || std::string(env) != "0";
}

namespace {

// Every matrix the forward pass multiplies by (vectors and row lookups stay as they are).
std::vector<TensorView*> matrices(Qwen35MoeWeights& w) {
  std::vector<TensorView*> mats;
  auto add_layer = [&](LayerWeights& l) {
    for (TensorView* t :
         {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.output, &l.gdn.qkv, &l.gdn.gate, &l.gdn.beta, &l.gdn.alpha,
          &l.gdn.out, &l.moe.router, &l.moe.gate_exps, &l.moe.up_exps, &l.moe.down_exps, &l.moe.gate_shexp,
          &l.moe.up_shexp, &l.moe.down_shexp})
      mats.push_back(t);
  };
  for (LayerWeights& l : w.layers) add_layer(l);
  mats.push_back(&w.output);
  if (w.mtp) {
    mats.push_back(&w.mtp->eh_proj);
    mats.push_back(&w.mtp->head);
    add_layer(w.mtp->block);
  }
  return mats;
}

// The name of the tensor whose data starts at `data` in `file`, or "" (a model made by from_parts).
std::string tensor_name_at(const GgufFile* file, const uint8_t* data) {
  if (file == nullptr) return "";
  for (const TensorInfo& info : file->tensors())
    if (file->tensor_data(info).data() == data) return info.name;
  return "";
}

// A distinct quantized tensor the load visits (the MTP head is usually the trunk's output itself): `offset`
// is where its packed copy goes, -1 when it is not packed.
struct Source {
  const TensorView* t;
  int64_t offset;
};

// Rows [row0, row0 + rows) of a source, about kPieceBytes of whole tiles (a tile packs on its own).
struct Piece {
  const Source* source;
  int64_t row0, rows;
};

std::vector<Piece> split_into_pieces(const std::vector<Source>& sources) {
  constexpr int64_t kPieceBytes = int64_t{8} << 20;
  std::vector<Piece> pieces;
  for (const Source& s : sources) {
    const int64_t tile_bytes = kernels::kPackRows * s.t->row_bytes();
    const int64_t step = std::max<int64_t>(1, kPieceBytes / tile_bytes) * kernels::kPackRows;
    for (int64_t r = 0; r < s.t->n_rows(); r += step)
      pieces.push_back({&s, r, std::min(step, s.t->n_rows() - r)});
  }
  return pieces;
}

// The first row of a piece with a NaN or infinite block scale, named with the file that holds the tensor
// (`head`: the --head file, or nullptr).
Status scale_error(const Piece& p, const GgufFile* file, const GgufFile* head) {
  const TensorView& t = *p.source->t;
  for (int64_t r = p.row0; r < p.row0 + p.rows; ++r) {
    const Status s = validate_row_data(t.type, t.row(r), t.row_bytes());
    if (s.ok()) continue;
    const GgufFile* owner = head != nullptr && !tensor_name_at(head, t.data).empty() ? head : file;
    const Status e = corrupt("tensor '", tensor_name_at(owner, t.data), "' row ", r, ": ", s.message());
    return owner != nullptr ? e.with_context(owner->path()) : e;
  }
  MTP_CHECK(false, "a piece failed validation but none of its rows did");
  return Status::Ok();
}

}  // namespace

Status Model::check_and_pack(ThreadPool* pool) {
  std::vector<TensorView*> mats = matrices(weights_);
  // Quantized tensors are scanned too where they are not packed: the row lookups, and every matrix under
  // MTP_PACK=0 (norms, vectors and conv taps are floats, checked whole when bound).
  std::vector<const TensorView*> scanned(mats.begin(), mats.end());
  const size_t n_mats = scanned.size();  // the rest are row lookups, never packed
  scanned.push_back(&weights_.token_embd);
  if (weights_.mtp) scanned.push_back(&weights_.mtp->embed_tokens);
  auto matrix = [](const TensorView& t) {
    return kernels::MatrixView::contiguous(t.type, t.data, t.ne[0], t.n_rows());
  };
  // Experts are packed as one matrix of n_expert * n_ff rows, so each expert must start on a tile.
  const bool pack = packing_enabled();
  auto packable = [&](const TensorView& t) {
    return pack && t.ne[1] % kernels::kPackRows == 0 && kernels::has_packed_kernel(t.type) &&
           kernels::can_pack(matrix(t));
  };
  std::vector<Source> sources;
  int64_t total = 0;
  for (size_t i = 0; i < scanned.size(); ++i) {
    const TensorView* t = scanned[i];
    if (!t->valid() || !type_traits(t->type).is_quantized) continue;
    if (std::any_of(sources.begin(), sources.end(), [&](const Source& s) { return s.t->data == t->data; }))
      continue;
    sources.push_back({t, i < n_mats && packable(*t) ? total : -1});
    if (sources.back().offset >= 0) total += (t->n_rows() * t->row_bytes() + 63) / 64 * 64;
  }
  if (total > 0) {
    constexpr int64_t kHugePage = int64_t{2} << 20;
    total = (total + kHugePage - 1) / kHugePage * kHugePage;
    packed_.reset(static_cast<uint8_t*>(std::aligned_alloc(kHugePage, static_cast<size_t>(total))));
    MTP_CHECK(packed_ != nullptr, "out of memory packing ", total, " bytes of weights");
    // Huge pages where the kernel allows them: a fraction of the page faults while packing, and of the TLB
    // misses while streaming weights at decode.
    madvise(packed_.get(), static_cast<size_t>(total), MADV_HUGEPAGE);
    packed_bytes_ = total;
  }
  // Pieces spread over the pool: most of a load's time is the kernel zeroing the fresh pages each piece
  // writes first, which runs on the faulting thread (one thread: ~18 s for 4.2 GB on a VM whose host backs
  // memory lazily). Each piece's block scales are checked just before it is packed, so the file's bytes are
  // read from disk once.
  const std::vector<Piece> pieces = split_into_pieces(sources);
  std::vector<uint8_t> bad(pieces.size(), 0);
  auto visit_piece = [&](size_t i, int) {
    const Piece& p = pieces[i];
    const TensorView& t = *p.source->t;
    const int64_t off = p.row0 * t.row_bytes(), bytes = p.rows * t.row_bytes();
    const uint8_t* src = t.data + off;
    if (!validate_row_data(t.type, src, bytes).ok()) {
      bad[i] = 1;
      return;
    }
    if (p.source->offset >= 0)
      kernels::pack_matrix(kernels::MatrixView::contiguous(t.type, src, t.ne[0], p.rows),
                           packed_.get() + p.source->offset + off);
    // The engine no longer reads these pages (packed), or reads only a few rows of them: let them leave the
    // resident set.
    if (file_) file_->release_pages(src, static_cast<uint64_t>(bytes));
    if (head_file_) head_file_->release_pages(src, static_cast<uint64_t>(bytes));
  };
  if (pool != nullptr)
    pool->parallel_for(pieces.size(), visit_piece);
  else
    for (size_t i = 0; i < pieces.size(); ++i) visit_piece(i, 0);
  for (size_t i = 0; i < pieces.size(); ++i)
    if (bad[i]) return scale_error(pieces[i], file(), head_file());
  for (TensorView* t : mats) {
    const auto it =
        std::find_if(sources.begin(), sources.end(), [&](const Source& s) { return s.t->data == t->data; });
    if (it != sources.end() && it->offset >= 0) t->packed = packed_.get() + it->offset;
  }
  return Status::Ok();
}

}  // namespace mtp
