// The serving engine (docs/architecture.md sections 3-5): slots, one batch per step for all of them
// (continuous batching), sampling, and MTP speculative decoding with rollback.
//
// Single-threaded: one thread (the server's engine thread, or `mtp run`) owns the Engine and calls submit /
// cancel / step. Each step:
//   1. chooses every generating slot's draft length (fixed, --spec-max-drafting-slots, or the auto policy)
//      and drafts for those slots in batched MTP passes;
//   2. builds ONE trunk batch: each generating slot's [last, d1..dn] rows, then prompt chunks of the slots
//      still reading their prompt, up to n_batch rows in all;
//   3. runs it, then per slot samples with the request's sampler row by row (a draft is accepted while the
//      sampled token equals it, so every emitted token is drawn from the target distribution exactly as
//      without drafting; with the same seed the output is the same bytes), rolls back the rejected rows
//      (Memory::rollback), tells the drafter the kept rows, and reports the new tokens.
//
// With a prefix cache (EngineOptions::cache), a request starts from the deepest checkpoint of its prompt's
// longest cached prefix (restored at submit), the forward pass captures the recurrent state at the prompt
// positions it checkpoints (BatchRow::capture), and when it ends its committed state (KV blocks, the
// recurrent state, the MTP rows) goes into the cache.
// Outputs are bitwise the same with and without the cache: every row is computed as it would be cold.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/prefix_cache.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "model/memory.h"
#include "model/model.h"
#include "speculative/drafter.h"
#include "speculative/policy.h"
#include "speculative/stats.h"

namespace mtp {

enum class SpecType { kNone, kMtp };

// The subset head's size when none is given, and the vocabulary from which auto keeps one beside the full
// head: at 35B-A3B widths (248,320 ids) the full head is half a token's weight bytes, a 16K subset 7% of it.
inline constexpr int64_t kDefaultDraftVocab = 16384;
inline constexpr int64_t kAutoSubsetMinVocab = 65536;

struct EngineOptions {
  int64_t n_ctx = 4096;   // KV positions shared by all slots (`-c`)
  int32_t n_slots = 1;    // `-np`
  int32_t n_batch = 512;  // trunk rows per step at most (`-b`); prompt chunks fill what decode rows leave
  uint64_t max_memory_bytes = 0;          // MemoryOptions::max_bytes
  GgmlType cache_type_k = GgmlType::F32;  // KV cache row formats: F32, F16 or Q8_0 (`--cache-type-k/-v`)
  GgmlType cache_type_v = GgmlType::F32;
  int64_t kv_block_size = 256;  // positions per KV block: also the prefix cache's node size
  PrefixCacheOptions cache;     // cache.ram_bytes == 0: no prefix cache
  SpecType spec = SpecType::kNone;
  speculative::DraftParams draft;     // default per request (`--draft-max/--draft-min/--draft-p-min`)
  speculative::PolicyOptions policy;  // throttle / auto
  // Where the MTP block came from, for reports only: the caller loads a separate head into the Model
  // (Model::load(path, head_path)); the engine drafts with whatever MTP block the model has.
  std::string head_path;
  int64_t draft_vocab = 0;       // > 0: draft over this many ids
  std::string draft_vocab_file;  // ranked ids for draft_vocab (empty: the first N ids)
  // The draft head (`--draft-head`). nullopt = auto: under the auto policy, both heads wherever a subset is
  // worth having (--draft-vocab N, or the first kDefaultDraftVocab ids of a vocabulary of at least
  // kAutoSubsetMinVocab), the policy choosing per batch size; otherwise the subset with --draft-vocab N, the
  // full head without. kSubset without --draft-vocab: kDefaultDraftVocab ids. Overrides policy.head and
  // policy.choose_head.
  std::optional<speculative::DraftHead> draft_head;
  // Tokens that end generation (EOS, end of turn); ids >= n_sample are never sampled (embedding padding).
  std::vector<int32_t> end_tokens;
  int64_t n_sample = 0;  // 0: the model's n_vocab
  // Structured output: build the vocabulary's byte trie in create() (`mtp serve`), so that no step waits for
  // it (0.3 s at 248K ids); otherwise it is built at the first request with a grammar. Built once either way.
  bool prepare_grammar = false;
  // Tests: a drafter other than the MTP one, made once the engine's memory exists (spec must be kMtp).
  std::function<Expected<std::unique_ptr<speculative::Drafter>>(const Model&, Memory&, ThreadPool&)>
      make_drafter;
  // Tests: edits every row's logits before sampling, given the index in the output of the token the row
  // draws (a model made to write something at a chosen place, with and without drafting alike).
  std::function<void(int64_t index, std::span<float> logits)> edit_logits;
};

struct RequestOptions {
  SamplerOptions sampling;
  int64_t max_tokens = -1;  // < 0: until an end token or the context is full
  bool ignore_eos = false;
  // Drafting for this request: nullopt = the engine's defaults; n_max == 0 = never draft.
  std::optional<speculative::DraftParams> speculative;
  int32_t n_probs = 0;  // report this many top log-probabilities per token (0: only the token's own)
  bool logprobs = false;
  // The prefix cache: reuse a cached prefix of the prompt and leave this request's state behind
  // (`cache_prompt`).
  bool cache_prompt = true;
  std::string cache_namespace;  // `cache_salt`: requests of different namespaces never share cached state
  // Prompt positions worth a checkpoint besides the engine's own (message starts: where agent traffic
  // edits the history), ascending; positions outside (0, prompt size) are ignored.
  std::vector<int64_t> checkpoints;
  // Structured output: every sampled token (drafted rows included) is one the grammar allows after the
  // tokens before it, and an end token only where a whole string of the grammar ends; the request stops
  // once the grammar can take nothing more. nullptr: unconstrained.
  std::shared_ptr<const grammar::Grammar> grammar;
  // A lazy grammar (llama-server's lazy grammars, a tool call under tool_choice "auto"): the output is free
  // until `trigger` appears in it (after `after` has, when not empty), then the grammar holds from the
  // trigger's first byte on, so its strings start with the trigger. A token that would complete the trigger
  // with bytes the grammar refuses is never sampled. Without a trigger the grammar holds from the start.
  struct GrammarTrigger {
    std::string text;
    std::string after;
  };
  std::optional<GrammarTrigger> grammar_trigger;
};

enum class FinishReason { kNone, kLength, kStop, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "length", "stop", "cancelled", "error"

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0;              // under the target distribution (log-softmax of the raw logits)
  std::vector<TokenLogprob> top;  // n_probs most likely, when asked
  // How it came: an accepted draft token (the MTP head proposed it and the trunk's sampler drew the same
  // token), or the trunk's own. A request's draft tokens number its timings' spec.accepted.
  bool from_draft = false;
  // On the last token a verify round emitted: how many draft tokens that round checked (0 elsewhere, and on
  // every token of a step that did not draft). The round accepted the from_draft tokens just before it, and
  // this one too when it is from_draft (a request that ended inside the round).
  int32_t round_drafted = 0;
};

// What the prefix cache did for a request.
struct CacheUse {
  bool enabled = false;  // the engine has a cache and the request used it
  int64_t cached = 0;    // prompt tokens restored, not computed (`cached_tokens`)
  int64_t matched = 0;   // prompt tokens whose KV was cached: `cached` plus those behind the checkpoint
  int64_t next_checkpoint = -1;  // when matched > cached: the cached checkpoint just past the match, if any
  double restore_ms = 0;         // copying the checkpoint back
};

struct RequestTimings {
  CacheUse cache;
  int64_t n_prompt = 0;
  int64_t n_generated = 0;
  double prompt_ms = 0;  // submit -> first token
  double gen_ms = 0;     // first token -> last
  speculative::SpecStats spec;
  std::array<speculative::SpecStats, speculative::kDraftHeads>
      by_head;  // rounds by the head that drafted (DraftHead)
};

// What happened to one request in a step.
struct SlotEvent {
  uint64_t request_id = 0;
  int32_t slot = 0;
  std::vector<GeneratedToken> tokens;  // new tokens, in order (end tokens are not included)
  FinishReason finish = FinishReason::kNone;
  std::string error;       // when finish == kError
  RequestTimings timings;  // filled on finish
};

struct StepInfo {
  int64_t trunk_rows = 0;
  int64_t prompt_rows = 0;
  int32_t generating = 0;  // slots that generated this step
  int32_t drafting = 0;    // slots that drafted this step
  int64_t drafted = 0;
  int64_t accepted = 0;
  speculative::DraftHead head = speculative::DraftHead::kFull;  // of this step's drafts
  double seconds = 0;                                           // wall time of the whole step
  double draft_seconds = 0;
};

struct EngineTotals {
  uint64_t steps = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  speculative::SpecStats spec;
  std::array<speculative::SpecStats, speculative::kDraftHeads>
      by_head;  // rounds by the head that drafted (DraftHead)
};

class Engine {
 public:
  // Sizes memory from the options (a clear error when it does not fit), loads --head / draft vocab.
  static Expected<std::unique_ptr<Engine>> create(const Model& model, const EngineOptions& options,
                                                  ThreadPool& pool);
  ~Engine();

  // Queues a request into a free slot. Errors: kInvalidArgument (empty prompt, ids out of range, bad
  // options), kResourceExhausted (no free slot, or the prompt does not fit the context).
  Expected<uint64_t> submit(std::vector<int32_t> prompt, const RequestOptions& options);
  // Ends a request at the next step boundary (the slot is free on return); a finish event with kCancelled
  // is reported by the next step(). Unknown ids are ignored.
  void cancel(uint64_t request_id);

  // One step over all busy slots; appends the events. Does nothing when idle.
  Status step(std::vector<SlotEvent>& events, StepInfo* info = nullptr);

  bool idle() const;
  int32_t n_slots() const;
  int32_t n_busy() const;
  // The slot a running request occupies (SlotEvent::slot), -1 when unknown or finished: /slots reports a
  // request from its submission on, before its first event names the slot.
  int32_t slot_of(uint64_t request_id) const;
  const EngineOptions& options() const;
  const EngineTotals& totals() const;
  const Model& model() const;
  // The policy's learned step-time model (for /props and benches).
  const speculative::DraftPolicy& policy() const;
  // The subset draft head's size as asked for (--draft-vocab N, or the default auto chose; the control tokens
  // chat needs come on top), which a request may name; 0 without one.
  int64_t draft_vocab_size() const;
  // The largest draft a request may ask for (memory keeps this many GDN snapshots); 0 without speculation.
  int32_t max_draft() const;

  // The prefix cache, or nullptr without one.
  const PrefixCache* prefix_cache() const;

  // For tests and benches: the state, the drafter (nullptr without speculation), a request's sequence slot
  // in the memory (-1 when unknown or finished).
  const Memory& memory() const;
  speculative::Drafter* drafter();
  int32_t seq_of(uint64_t request_id) const;
  // How many times the grammar's vocabulary trie was built (0 or 1).
  int32_t grammar_vocab_builds() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// EOS and the end-of-turn tokens of the vocabulary (<|im_end|>, <|endoftext|>, <|eot_id|>, ... when present).
std::vector<int32_t> default_end_tokens(const Vocab& vocab);

}  // namespace mtp
