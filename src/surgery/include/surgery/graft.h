// GGUF surgery on the MTP block (docs/surgery.md):
//  - graft: trunk A + the MTP block of B (a full model with one, or a head-only file) -> A with B's block
//    renumbered to blk.{n_layer of A}, block_count and nextn_predict_layers set, everything else of A
//    unchanged;
//  - extract-head: the MTP block of a model as a head-only file.
//
// Head-only files hold the MTP block's tensors and the metadata needed to check and use them: every
// `<arch>.*` key of the source, its tokenizer (so graft can compare tokenizers), and `mtp.head.*` keys
// (format version, source block index, vocabulary size, tokenizer fingerprint). They do not carry the
// source's token_embd/output: the head then uses the trunk's, which the vocabulary and tokenizer checks
// guarantee are the same shape and vocabulary, and that keeps a 35B-A3B head at about 0.7 GB instead of
// 1.7 GB. `--with-embeddings` carries them anyway, as the block's own optional
// nextn.embed_tokens / nextn.shared_head_head tensors (which llama.cpp's qwen35moe loader uses when present),
// for a head that must keep drafting with its base model's embeddings (a finetune's trunk may have moved
// them).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "gguf/gguf_file.h"
#include "quant/types.h"

namespace mtp::surgery {

inline constexpr const char* kHeadFormatKey = "mtp.head.format_version";

// The keys that mark a head-only file (what `extract-head` writes and graft reads as one): the format, the
// block index the head came from and the vocabulary width (a head-only file has no token_embd to read it
// from).
void mark_head_only(Metadata& md, int64_t source_block, int64_t n_vocab);

struct GraftOptions {
  std::optional<GgmlType> head_type;  // convert the head's weight matrices to this type
  bool force = false;                 // override the checks that are safe to override (tokenizer, RoPE)
  bool replace = false;               // replace an MTP block the trunk already has
  bool with_embeddings = false;       // carry the head source's token_embd/output as the block's own
};

// One compatibility problem; `overridable` problems are skipped with --force.
struct GraftProblem {
  std::string message;
  bool overridable = false;
};

// Every reason the head of `head` cannot go onto `trunk` (empty when compatible). Each message names both
// values.
std::vector<GraftProblem> check_graft(const GgufFile& trunk, const GgufFile& head,
                                      const GraftOptions& options);

struct GraftResult {
  int64_t block = 0;  // the MTP block's index in the output
  size_t head_tensors = 0;
  uint64_t bytes_written = 0;
  std::vector<std::string> warnings;  // problems overridden by --force
  // Head tensors written in another type than --head-type because their rows do not divide into its blocks
  // (llama.cpp's fallback, as `mtp quantize`): "name: q8_0 instead of q6_K (rows of 64)".
  std::vector<std::string> type_fallbacks;
};

// The MTP block of a model or head-only file, as graft and extract-head find it: blk.{block_count -
// nextn_predict_layers} when the metadata says there is one, else the block holding nextn.* tensors.
struct MtpBlock {
  int64_t index = -1;
  std::vector<const TensorInfo*> tensors;  // every blk.{index}.* tensor of the file
};
Expected<MtpBlock> find_mtp_block(const GgufFile& file);

Expected<GraftResult> graft(const std::string& trunk_path, const std::string& head_path,
                            const std::string& output, const GraftOptions& options, ThreadPool& pool);

Expected<GraftResult> extract_head(const std::string& input, const std::string& output, bool with_embeddings,
                                   ThreadPool& pool);

}  // namespace mtp::surgery
