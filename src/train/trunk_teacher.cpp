#include "train/trunk_teacher.h"

#include <cstring>

#include "base/check.h"
#include "model/batch.h"
#include "model/forward.h"
#include "model/reference_ops.h"

namespace mtp::train {

using torch::indexing::Slice;

Expected<TrunkTeacher> TrunkTeacher::open(const std::string& path, const std::string& head_path, int threads,
                                          int64_t max_tokens) {
  TrunkTeacher t;
  t.pool_ = std::make_unique<ThreadPool>(threads);
  MTP_ASSIGN_OR_RETURN(Model model, Model::load(path, head_path, t.pool_.get()));
  t.model_ = std::make_unique<Model>(std::move(model));
  MemoryOptions mo;
  mo.n_ctx = max_tokens;  // a window at a time
  mo.n_seq = 1;
  mo.n_snapshots = 0;  // nothing is rolled back
  mo.mtp = false;      // the block being trained is not the file's
  MTP_ASSIGN_OR_RETURN(Memory memory, Memory::create(t.model_->config(), mo));
  t.memory_ = std::make_unique<Memory>(std::move(memory));
  MTP_ASSIGN_OR_RETURN(t.seq_, t.memory_->seq_create());
  return t;
}

Expected<TrunkTeacher::Signals> TrunkTeacher::run(const torch::Tensor& tokens) {
  MTP_CHECK(tokens.dim() == 2 && tokens.scalar_type() == torch::kInt64, "tokens must be [B, T] int64");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int64_t n_embd = model_->config().n_embd, n_vocab = model_->config().n_vocab;
  Signals s{torch::empty({B, T, n_embd}, torch::kFloat32), torch::empty({B, T, n_vocab}, torch::kFloat32)};
  const torch::Tensor ids = tokens.contiguous();
  const int64_t* id = ids.data_ptr<int64_t>();
  Batch batch;
  Outputs out;
  for (int64_t b = 0; b < B; ++b) {
    memory_->seq_reset(seq_);
    batch.clear();
    for (int64_t t = 0; t < T; ++t) batch.add(seq_, t, static_cast<int32_t>(id[b * T + t]), true);
    MTP_RETURN_IF_ERROR(forward(*model_, batch, *memory_, out, *pool_));
    std::memcpy(s.hidden[b].data_ptr<float>(), out.hidden.data(), sizeof(float) * T * n_embd);
    float* logits = s.logits[b].data_ptr<float>();
    for (int64_t t = 0; t < T; ++t) {
      const std::span<const float> row = out.logits_of(t);
      std::memcpy(logits + t * n_vocab, row.data(), sizeof(float) * n_vocab);
    }
  }
  return s;
}

torch::Tensor TrunkTeacher::embed(const torch::Tensor& tokens) const {
  const int64_t n_embd = model_->config().n_embd;
  const torch::Tensor ids = tokens.reshape({-1}).contiguous();
  torch::Tensor out = torch::empty({ids.size(0), n_embd}, torch::kFloat32);
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.size(0); ++i)
    ref::dequantize_row_of(model_->weights().token_embd, id[i], out[i].data_ptr<float>());
  std::vector<int64_t> shape(tokens.sizes().begin(), tokens.sizes().end());
  shape.push_back(n_embd);
  return out.view(shape);
}

Expected<torch::Tensor> TrunkTeacher::continue_windows(const torch::Tensor& windows, int64_t keep,
                                                       at::Generator& gen) {
  MTP_CHECK(keep >= 1 && keep <= windows.size(1));
  const int64_t B = windows.size(0), T = windows.size(1), n_vocab = model_->config().n_vocab;
  torch::Tensor out = windows.clone().contiguous();
  int64_t* id = out.data_ptr<int64_t>();
  Batch batch;
  Outputs o;
  for (int64_t b = 0; b < B; ++b) {
    memory_->seq_reset(seq_);
    batch.clear();
    for (int64_t t = 0; t < keep; ++t) batch.add(seq_, t, static_cast<int32_t>(id[b * T + t]), t == keep - 1);
    for (int64_t t = keep; t < T; ++t) {
      MTP_RETURN_IF_ERROR(forward(*model_, batch, *memory_, o, *pool_));
      const std::span<const float> row = o.logits_of(batch.size() - 1);
      const torch::Tensor probs =
          torch::from_blob(const_cast<float*>(row.data()), {n_vocab}, torch::kFloat32).softmax(-1);
      const int64_t next = torch::multinomial(probs, 1, false, gen).item<int64_t>();
      id[b * T + t] = next;
      batch.clear();
      batch.add(seq_, t, static_cast<int32_t>(next), true);
    }
  }
  return out;
}

}  // namespace mtp::train
