#include "surgery/synth.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/log.h"
#include "gguf/gguf_writer.h"
#include "quant/quantize.h"
#include "surgery/quant_policy.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/gguf_vocab.h"

namespace mtp::surgery {
namespace {

// splitmix64: a tiny, well-mixed generator whose output is the same on every platform (unlike std::
// distributions, whose algorithms the standard leaves open).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  // Approximately N(0, 1): four 16-bit uniforms from one draw, summed (Irwin-Hall, n = 4) and rescaled.
  float normal() {
    const uint64_t r = next();
    const uint32_t sum = static_cast<uint32_t>(r & 0xffff) + static_cast<uint32_t>((r >> 16) & 0xffff) +
                         static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
    return (static_cast<float>(sum) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
  }

 private:
  uint64_t s_;
};

uint64_t name_hash(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool writes_residual(const std::string& name) {
  return name.ends_with("attn_output.weight") || name.ends_with("ssm_out.weight") ||
         name.find("ffn_down") != std::string::npos;
}

Vocab synth_vocab(int64_t n_vocab) {
  // A real BPE vocabulary trained on the bundled corpus, padded with unused tokens up to the model's width.
  const int64_t n_specials = 5;
  int n_merges = static_cast<int>(std::clamp<int64_t>(n_vocab - 256 - n_specials, 0, 400));
  Vocab v = train_bpe(builtin_training_corpus(), n_merges);
  if (v.token_types.empty()) v.token_types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  for (int64_t i = static_cast<int64_t>(v.tokens.size()); i < n_vocab; ++i) {
    v.tokens.push_back("<|synth_pad_" + std::to_string(i) + "|>");
    v.token_types.push_back(static_cast<int32_t>(TokenType::kUnused));
  }
  return v;
}

}  // namespace

GgmlType synth_tensor_type(const TensorDesc& desc, GgmlType type) {
  switch (desc.kind) {
    case TensorKind::kNorm:
    case TensorKind::kVector:
    case TensorKind::kConv:
    case TensorKind::kRouter:
      return GgmlType::F32;
    default:
      return computable_fallback(type, desc.ne[0]);
  }
}

namespace {

// Everything a row's values depend on: the shape, the seed and, in structured mode, the chain.
class RowGenerator {
 public:
  RowGenerator(const Qwen35MoeConfig& config, uint64_t seed, std::optional<double> structured,
               const Vocab& vocab)
      : c_(config), seed_(seed), structured_(structured) {
    if (structured_) build_chain(vocab);
  }

  // Fills `out` (ne[0] floats) with row `row` of tensor `desc`.
  void row(const TensorDesc& desc, int64_t row, float* out) const {
    SplitMix64 rng(seed_ ^ name_hash(desc.name) ^ (static_cast<uint64_t>(row) * 0xd1b54a32d192ed03ull));
    const int64_t n = desc.ne[0];
    const std::string& name = desc.name;
    if (structured_ && desc.kind == TensorKind::kOutput) return chain_output_row(row, out);
    if (structured_ && name.ends_with("nextn.eh_proj.weight")) return identity_eh_proj_row(rng, row, out);
    switch (desc.kind) {
      case TensorKind::kNorm:
        for (int64_t i = 0; i < n; ++i) out[i] = 1.0f + 0.02f * rng.normal();
        return;
      case TensorKind::kVector:
        if (name.ends_with("ssm_a")) {
          for (int64_t i = 0; i < n; ++i)
            out[i] = static_cast<float>(-std::exp(rng.uniform() * std::log(16.0)));
        } else if (name.ends_with("ssm_dt.bias")) {
          for (int64_t i = 0; i < n; ++i) {
            const double dt = std::exp(std::log(1e-3) + rng.uniform() * (std::log(1e-1) - std::log(1e-3)));
            out[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus^-1(dt)
          }
        } else {
          gaussian(rng, 1.0 / std::sqrt(static_cast<double>(n)), n, out);
        }
        return;
      case TensorKind::kEmbedding:
        gaussian(rng, 1.0, n, out);
        return;
      default: {
        double sd = 1.0 / std::sqrt(static_cast<double>(n));  // kConv, kMatrix, kExperts, kRouter, kOutput
        // Trunk depth, not block_count: the trunk of a file must not depend on whether it has an MTP block.
        if (writes_residual(name)) sd *= residual_scale();
        gaussian(rng, sd, n, out);
        return;
      }
    }
  }

 private:
  static void gaussian(SplitMix64& rng, double sd, int64_t n, float* out) {
    const float s = static_cast<float>(sd);
    for (int64_t i = 0; i < n; ++i) out[i] = s * rng.normal();
  }

  double residual_scale() const {
    const double depth = 1.0 / std::sqrt(2.0 * static_cast<double>(c_.n_layer));
    return structured_ ? depth * *structured_ : depth;
  }

  // The chain runs over the tokens that decode to printable ASCII (bytes 0x20-0x7e and merges of them), so
  // the structured model writes readable text and never emits control or unused tokens.
  void build_chain(const Vocab& vocab) {
    std::vector<int32_t> text;
    for (size_t id = 0; id < vocab.tokens.size() && static_cast<int64_t>(id) < c_.n_vocab; ++id) {
      if (!vocab.token_types.empty() && vocab.token_types[id] != static_cast<int32_t>(TokenType::kNormal))
        continue;
      auto bytes = byte_level_to_bytes(vocab.tokens[id]);
      if (!bytes || bytes->empty()) continue;
      if (std::all_of(bytes->begin(), bytes->end(), [](char ch) { return ch >= 0x20 && ch <= 0x7e; })) {
        text.push_back(static_cast<int32_t>(id));
      }
    }
    // A seeded Fisher-Yates shuffle makes sigma: text[i] -> shuffled[i].
    std::vector<int32_t> shuffled = text;
    SplitMix64 rng(seed_ ^ 0x5eed5eed5eed5eedull);
    for (size_t i = shuffled.size(); i > 1; --i) std::swap(shuffled[i - 1], shuffled[rng.next() % i]);
    predecessor_.assign(static_cast<size_t>(c_.n_vocab), -1);
    for (size_t i = 0; i < text.size(); ++i) predecessor_[static_cast<size_t>(shuffled[i])] = text[i];
  }

  // LM head row u: the unit direction of the embedding of sigma^-1(u), scaled so that a residual stream
  // holding that embedding (RMS 1, so a dot product of about sqrt(n_embd) with the unit direction) gives u a
  // logit near 10.
  void chain_output_row(int64_t u, float* out) const {
    const int64_t d = c_.n_embd;
    const int32_t from = predecessor_[static_cast<size_t>(u)];
    if (from < 0) {
      SplitMix64 rng(seed_ ^ static_cast<uint64_t>(u) * 0x9e3779b97f4a7c15ull);
      gaussian(rng, 0.1 / std::sqrt(static_cast<double>(d)), d, out);
      return;
    }
    TensorDesc embd{"token_embd.weight", {d, c_.n_vocab, 1, 1}, TensorKind::kEmbedding, true, -1};
    row(embd, from, out);
    double norm2 = 0;
    for (int64_t i = 0; i < d; ++i) norm2 += static_cast<double>(out[i]) * out[i];
    const float scale = static_cast<float>(10.0 / std::sqrt(static_cast<double>(d)) / std::sqrt(norm2));
    for (int64_t i = 0; i < d; ++i) out[i] *= scale;
  }

  // eh_proj row o (inputs: [normed embedding (d); normed hidden (d)]): the identity on the embedding half,
  // noise on the hidden half.
  void identity_eh_proj_row(SplitMix64& rng, int64_t o, float* out) const {
    const int64_t d = c_.n_embd;
    for (int64_t i = 0; i < d; ++i) out[i] = i == o ? 1.0f : 0.0f;
    gaussian(rng, *structured_ / std::sqrt(static_cast<double>(d)), d, out + d);
  }

  const Qwen35MoeConfig& c_;
  uint64_t seed_;
  std::optional<double> structured_;
  std::vector<int32_t> predecessor_;  // sigma^-1, -1 for tokens outside the chain
};

}  // namespace

Status synth_model(const SynthOptions& opt, const std::string& path, ThreadPool& pool) {
  Qwen35MoeConfig config;
  if (opt.config) {
    config = *opt.config;
  } else {
    MTP_ASSIGN_OR_RETURN(config, qwen35moe_shape(opt.shape, opt.layers));
  }
  config.n_nextn = opt.mtp ? 1 : 0;
  MTP_RETURN_IF_ERROR(config.validate());
  if (!is_quantize_supported(opt.type)) {
    return invalid_argument("weight type ", type_name(opt.type),
                            " cannot be produced (supported: f32, f16, bf16, ",
                            "q8_0, q4_0, q4_K, q5_K, q6_K, iq4_nl, iq4_xs)");
  }
  const std::vector<TensorDesc> descs = qwen35moe_tensors(config, opt.mtp);

  Metadata md;
  md.set("general.architecture", Value::string(kQwen35MoeArch));
  md.set("general.name", Value::string(opt.name.empty() ? "synth-" + opt.shape : opt.name));
  md.set("general.file_type", Value::scalar(file_type_for(opt.type)));
  md.set("general.quantization_version", Value::scalar<uint32_t>(2));
  write_qwen35moe_config(config, md);
  md.set("mtp.synth.seed", Value::scalar<uint64_t>(opt.seed));
  if (opt.structured)
    md.set("mtp.synth.structured_noise", Value::scalar(static_cast<float>(*opt.structured)));
  const Vocab vocab = synth_vocab(config.n_vocab);
  write_vocab_to_gguf(vocab, md);
  const RowGenerator generator(config, opt.seed, opt.structured, vocab);

  std::vector<TensorSpec> specs;
  std::vector<const TensorDesc*> written;
  for (const TensorDesc& d : descs) {
    // Optional MTP tensors that real files omit (shared_head_head, embed_tokens) are left out here too.
    if (!d.required && d.name != "output.weight" && d.name.find("shared_head_norm") == std::string::npos)
      continue;
    specs.push_back({d.name, synth_tensor_type(d, opt.type), d.ne});
    written.push_back(&d);
  }
  MTP_ASSIGN_OR_RETURN(GgufWriter writer, GgufWriter::create(path, md, specs));

  std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
  std::vector<uint8_t> chunk;
  for (size_t ti = 0; ti < specs.size(); ++ti) {
    const TensorDesc& d = *written[ti];
    const GgmlType type = specs[ti].type;
    const int64_t n_per_row = d.ne[0];
    const int64_t n_rows = d.ne[1] * d.ne[2] * d.ne[3];
    const int64_t row_bytes = row_size(type, n_per_row);
    // About 8 MB of F32 per chunk keeps memory flat and both cores busy.
    const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t{8} << 20) / (4 * n_per_row));
    for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_chunk) {
      const int64_t nr = std::min(rows_per_chunk, n_rows - r0);
      chunk.resize(static_cast<size_t>(nr * row_bytes));
      std::vector<Status> errors(static_cast<size_t>(pool.size()));
      pool.parallel_for(static_cast<size_t>(nr), [&](size_t i, int t) {
        auto& buf = scratch[static_cast<size_t>(t)];
        buf.resize(static_cast<size_t>(n_per_row));
        generator.row(d, r0 + static_cast<int64_t>(i), buf.data());
        Status s =
            quantize_row(type, buf.data(), chunk.data() + static_cast<int64_t>(i) * row_bytes, n_per_row);
        if (!s.ok()) errors[static_cast<size_t>(t)] = s;
      });
      for (const Status& s : errors) MTP_RETURN_IF_ERROR(s.with_context("tensor '" + d.name + "'"));
      MTP_RETURN_IF_ERROR(writer.write(chunk));
    }
  }
  return writer.finish();
}

}  // namespace mtp::surgery
