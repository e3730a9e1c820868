// Checks of the speculation and cache flags `mtp run` and `mtp serve` share, done before the model loads
// (a typo should not cost a multi-gigabyte load first).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "model/memory.h"
#include "speculative/policy.h"

namespace mtp::tools {

// The KV cache formats of --cache-type-k/-v.
struct KvCacheTypes {
  GgmlType k = GgmlType::F32, v = GgmlType::F32;
};

// --spec, --head, --draft-vocab(-file) and --cache-type-k/-v together: flags that only mean something with
// MTP drafting are refused without it rather than silently ignored. Returns the parsed cache types.
// --draft-head: "auto" (nullopt), "full" or "subset". With --draft-vocab N, "full" contradicts it.
inline Expected<std::optional<speculative::DraftHead>> parse_draft_head(const std::string& name,
                                                                        const std::string& spec,
                                                                        int64_t draft_vocab) {
  if (name == "auto") return std::optional<speculative::DraftHead>();
  if (name != "full" && name != "subset")
    return invalid_argument("--draft-head must be auto, full or subset, got '", name, "'");
  if (spec != "mtp") return invalid_argument("--draft-head needs --spec mtp");
  if (name == "full" && draft_vocab > 0)
    return invalid_argument("--draft-vocab needs the subset head: it contradicts --draft-head full");
  return std::optional<speculative::DraftHead>(name == "full" ? speculative::DraftHead::kFull
                                                              : speculative::DraftHead::kSubset);
}

inline Expected<KvCacheTypes> check_spec_args(const std::string& spec, const std::string& head,
                                              int64_t draft_vocab, const std::string& draft_vocab_file,
                                              const std::string& cache_type_k,
                                              const std::string& cache_type_v) {
  if (spec != "none" && spec != "mtp")
    return invalid_argument("--spec must be none or mtp, got '", spec, "'");
  if (!head.empty() && spec != "mtp") return invalid_argument("--head needs --spec mtp");
  if (draft_vocab < 0) return invalid_argument("--draft-vocab must be >= 0, got ", draft_vocab);
  if (!draft_vocab_file.empty() && draft_vocab == 0)
    return invalid_argument("--draft-vocab-file needs --draft-vocab N (how many of its ids to draft over)");
  if (draft_vocab > 0 && spec != "mtp") return invalid_argument("--draft-vocab needs --spec mtp");
  auto k = kv_cache_type_from_name(cache_type_k);
  if (!k.ok()) return k.status().with_context("--cache-type-k");
  auto v = kv_cache_type_from_name(cache_type_v);
  if (!v.ok()) return v.status().with_context("--cache-type-v");
  return KvCacheTypes{*k, *v};
}

}  // namespace mtp::tools
