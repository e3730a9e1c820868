// A small, deterministic byte-level BPE trainer, so that `mtp synth` can give tiny models a real vocabulary.
// Classic algorithm: pre-tokenize the corpus with the same regex the tokenizer uses, then repeatedly merge
// the most frequent adjacent pair (ties: the pair whose (left bytes, right bytes) sorts first), counting each
// distinct pre-token once per occurrence. Quadratic in the number of merges, meant for a few hundred.
//
// Token ids: 0..255 are the byte tokens in byte order (id b is byte b), then one token per merge whose result
// is new, then the control tokens, then the user-defined tokens. scripts/reference/tokenizer/bpe_reference.py
// implements the same trainer independently; the tests check both produce the same merges.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace mtp {

struct BpeTrainOptions {
  std::string pre = "qwen35";  // pre-tokenizer (Vocab::pre) used for training and stored in the vocab
  int min_frequency = 2;       // stop early when the best pair occurs fewer times
  std::vector<std::string> control_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  std::vector<std::string> user_defined_tokens = {"<think>", "</think>"};
  // Special roles, by token text; must name control tokens (empty = none). Qwen's conventions.
  std::string bos = "<|endoftext|>";
  std::string eos = "<|im_end|>";
  std::string pad = "<|endoftext|>";
};

// At most `n_merges` merges. The corpus is plain text (special tokens in it are not recognised). Invalid
// options (unknown pre name, a role naming no control token) are programming errors and fail an MTP_CHECK.
Vocab train_bpe(std::string_view corpus, int n_merges, const BpeTrainOptions& options = {});

// The corpus bundled with the library (src/tokenizer/data/train_corpus.txt, a few KB of English prose, code,
// digits and whitespace written for this project), for tiny models and tests.
std::string_view builtin_training_corpus();

}  // namespace mtp
