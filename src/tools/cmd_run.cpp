// `mtp run -m MODEL -p PROMPT -n N`: generate text with the engine (engine.h). The prompt is tokenized with
// control tokens matched and processed in batches of -b rows, then N tokens are sampled (greedy by default)
// and streamed to stdout as they complete UTF-8 characters. `--spec mtp` drafts with the model's MTP block
// (or a head file, --head) and verifies the drafts in one batch; the output is the same as `--spec none`.
// `--reference` uses the slow reference forward pass instead (f32, one token at a time).
//
// --dump-logits FILE writes raw little-endian float32 logits, one row of n_vocab per position: the prompt's
// positions first, then one row per generated token (the logits after feeding it). A run that generates G
// tokens writes (n_prompt + G) * n_vocab floats; G < N only when EOS or an end-of-turn token stops it, as in
// the engine (that token is neither printed nor fed).
#include <algorithm>
#include <bit>
#include <cstdio>
#include <memory>
#include <optional>

#include "base/atomic_file.h"
#include "base/system_memory.h"
#include "base/timer.h"
#include "command.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "kernels/isa.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/reference_forward.h"
#include "speculative_args.h"
#include "tokenizer/tokenizer.h"

namespace mtp::tools {
namespace {

static_assert(std::endian::native == std::endian::little, "--dump-logits writes the host's float bytes");

struct RunArgs {
  std::string model;
  std::string prompt;
  int n_predict = 32;
  SamplerOptions sampler;
  bool ignore_eos = false;
  std::string dump_logits;
  int threads = 0;
  int batch = 512;
  bool reference = false;
  std::string spec = "none";
  speculative::DraftParams draft;
  std::string head;
  int64_t draft_vocab = 0;
  std::string draft_vocab_file;
  std::string draft_head = "auto";
  std::string cache_type_k = "f32", cache_type_v = "f32";
};

Status write_row(AtomicFile* dump, const std::vector<float>& logits) {
  if (dump == nullptr) return Status::Ok();
  return dump->write({reinterpret_cast<const uint8_t*>(logits.data()), logits.size() * sizeof(float)});
}

double per_second(int64_t n, double seconds) {
  return seconds > 0 ? static_cast<double>(n) / seconds : 0.0;
}

// Generation through the serving engine: one slot, the same step loop the server runs.
Status run_engine(const RunArgs& a, const KvCacheTypes& kv, std::optional<speculative::DraftHead> head_choice,
                  const Model& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                  ThreadPool& pool) {
  EngineOptions eo;
  eo.n_ctx = static_cast<int64_t>(prompt.size()) + a.n_predict + 1;
  eo.n_slots = 1;
  eo.n_batch = a.batch;
  eo.spec = a.spec == "mtp" ? SpecType::kMtp : SpecType::kNone;
  eo.draft = a.draft;
  eo.head_path = a.head;
  eo.draft_vocab = a.draft_vocab;
  eo.draft_vocab_file = a.draft_vocab_file;
  eo.draft_head = head_choice;
  eo.cache_type_k = kv.k;
  eo.cache_type_v = kv.v;
  eo.end_tokens = default_end_tokens(model.vocab());
  eo.n_sample = tok.n_tokens();
  MTP_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(model, eo, pool));
  RequestOptions ro;
  ro.sampling = a.sampler;
  ro.max_tokens = a.n_predict;
  ro.ignore_eos = a.ignore_eos;
  MTP_ASSIGN_OR_RETURN(uint64_t id, engine->submit(prompt, ro));
  (void)id;
  StreamDecoder decoder(tok);
  std::vector<SlotEvent> events;
  RequestTimings timings;
  while (!engine->idle()) {
    events.clear();
    MTP_RETURN_IF_ERROR(engine->step(events));
    for (const SlotEvent& e : events) {
      for (const GeneratedToken& t : e.tokens) {
        const std::string text = decoder.push(t.id);
        std::fwrite(text.data(), 1, text.size(), stdout);
      }
      std::fflush(stdout);
      if (e.finish == FinishReason::kError) return Status(StatusCode::kInternal, e.error);
      if (e.finish != FinishReason::kNone) timings = e.timings;
    }
  }
  const std::string rest = decoder.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double prompt_s = timings.prompt_ms / 1e3, gen_s = timings.gen_ms / 1e3;
  std::fprintf(stderr,
               "prompt: %lld tokens in %.3f s (%.2f tok/s); generation: %lld tokens in %.3f s (%.2f tok/s); "
               "kernels %s; resident %llu MiB\n",
               static_cast<long long>(timings.n_prompt), prompt_s, per_second(timings.n_prompt, prompt_s),
               static_cast<long long>(timings.n_generated), gen_s, per_second(timings.n_generated - 1, gen_s),
               kernels::kernels_summary(), static_cast<unsigned long long>(resident_bytes() >> 20));
  if (eo.spec == SpecType::kMtp)
    std::fprintf(stderr, "statistics draft-mtp: %s\n", timings.spec.summary().c_str());
  return Status::Ok();
}

Status run(const RunArgs& a) {
  if (a.n_predict < 0) return invalid_argument("-n must be >= 0, got ", a.n_predict);
  // Before the model loads (the engine checks the same again).
  MTP_RETURN_IF_ERROR(check_sampler_options(a.sampler, 0));
  if (a.spec == "mtp") MTP_RETURN_IF_ERROR(speculative::check_draft_params(a.draft));
  MTP_ASSIGN_OR_RETURN(KvCacheTypes kv, check_spec_args(a.spec, a.head, a.draft_vocab, a.draft_vocab_file,
                                                        a.cache_type_k, a.cache_type_v));
  MTP_ASSIGN_OR_RETURN(std::optional<speculative::DraftHead> head_choice,
                       parse_draft_head(a.draft_head, a.spec, a.draft_vocab));
  if (a.reference && (a.cache_type_k != "f32" || a.cache_type_v != "f32"))
    return invalid_argument("--cache-type-k/-v are the engine's; --reference keeps its cache in f32");
  ThreadPool pool(a.threads);
  MTP_ASSIGN_OR_RETURN(Model model, Model::load(a.model, a.head, &pool));
  if (model.vocab().tokens.empty()) return unsupported(a.model, ": the file has no tokenizer");
  MTP_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::create(model.vocab()));
  EncodeOptions enc;
  enc.parse_special = true;
  const std::vector<int32_t> prompt = tok.encode(a.prompt, enc);
  if (prompt.empty()) return invalid_argument("the prompt has no tokens");
  if (!a.reference && a.dump_logits.empty()) return run_engine(a, kv, head_choice, model, tok, prompt, pool);
  if (a.spec != "none")
    return invalid_argument("--spec works with the engine only (not --reference or --dump-logits)");

  std::optional<AtomicFile> dump;
  if (!a.dump_logits.empty()) {
    MTP_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(a.dump_logits));
    dump.emplace(std::move(f));
  }
  AtomicFile* dump_ptr = dump ? &*dump : nullptr;

  if (a.batch <= 0) return invalid_argument("-b must be > 0, got ", a.batch);
  // Prompt: logits are needed only for the last position, unless they are all being dumped.
  std::optional<ReferenceState> ref_state;
  std::optional<Memory> memory;
  int32_t seq = 0;
  Batch batch;
  Outputs outs;
  if (a.reference) {
    ref_state.emplace(model.config());
  } else {
    MemoryOptions mo;
    mo.n_ctx = static_cast<int64_t>(prompt.size()) + a.n_predict + 1;
    mo.n_seq = 1;
    mo.n_snapshots = 0;  // plain decoding never rolls back
    mo.mtp = false;
    mo.cache_type_k = kv.k;
    mo.cache_type_v = kv.v;
    MTP_ASSIGN_OR_RETURN(Memory m, Memory::create(model.config(), mo));
    memory.emplace(std::move(m));
    MTP_ASSIGN_OR_RETURN(seq, memory->seq_create());
  }
  // One engine step over tokens[0..n) at positions pos.., logits for the rows that `want`; `out` gets the
  // last row's logits, dumped rows go to the file.
  auto engine_step = [&](const int32_t* tokens, size_t n, int64_t pos, bool want_all,
                         ForwardOutput& out) -> Status {
    batch.clear();
    for (size_t i = 0; i < n; ++i)
      batch.add(seq, pos + static_cast<int64_t>(i), tokens[i], want_all || i + 1 == n);
    MTP_RETURN_IF_ERROR(forward(model, batch, *memory, outs, pool));
    for (size_t i = 0; i < n; ++i) {
      if (!batch.rows[i].logits) continue;
      const auto l = outs.logits_of(static_cast<int64_t>(i));
      out.logits.assign(l.begin(), l.end());
      if (want_all) MTP_RETURN_IF_ERROR(write_row(dump_ptr, out.logits));
    }
    return Status::Ok();
  };
  ForwardOutput out;
  Timer prompt_timer;
  int64_t n_past = 0;
  if (a.reference) {
    for (size_t i = 0; i < prompt.size(); ++i) {
      const bool want = dump_ptr != nullptr || i + 1 == prompt.size();
      out = forward_token(model, *ref_state, prompt[i], static_cast<int64_t>(i), want, &pool);
      if (dump_ptr != nullptr) MTP_RETURN_IF_ERROR(write_row(dump_ptr, out.logits));
    }
  } else {
    for (size_t i = 0; i < prompt.size(); i += static_cast<size_t>(a.batch)) {
      const size_t n = std::min(prompt.size() - i, static_cast<size_t>(a.batch));
      MTP_RETURN_IF_ERROR(
          engine_step(prompt.data() + i, n, static_cast<int64_t>(i), dump_ptr != nullptr, out));
    }
  }
  n_past = static_cast<int64_t>(prompt.size());
  const double prompt_s = prompt_timer.seconds();

  // Generation. Ids past the tokenizer's table (padding rows of the embedding) are never sampled.
  const size_t n_sample = std::min<size_t>(out.logits.size(), static_cast<size_t>(tok.n_tokens()));
  Sampler sampler(a.sampler);
  const std::vector<int32_t> end_tokens = default_end_tokens(model.vocab());  // as the engine stops
  StreamDecoder decoder(tok);
  int64_t n_gen = 0;
  Timer gen_timer;
  while (n_gen < a.n_predict) {
    const int32_t id = sampler.sample(std::span<const float>(out.logits).first(n_sample));
    if (!a.ignore_eos && std::find(end_tokens.begin(), end_tokens.end(), id) != end_tokens.end()) break;
    ++n_gen;
    const std::string text = decoder.push(id);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (a.reference) {
      out = forward_token(model, *ref_state, id, n_past, true, &pool);
      MTP_RETURN_IF_ERROR(write_row(dump_ptr, out.logits));
    } else {
      MTP_RETURN_IF_ERROR(engine_step(&id, 1, n_past, dump_ptr != nullptr, out));
    }
    ++n_past;
  }
  const double gen_s = gen_timer.seconds();
  const std::string rest = decoder.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (dump_ptr != nullptr) MTP_RETURN_IF_ERROR(dump_ptr->commit());

  std::fprintf(stderr,
               "prompt: %zu tokens in %.3f s (%.2f tok/s); generation: %lld tokens in %.3f s (%.2f tok/s)\n",
               prompt.size(), prompt_s, per_second(static_cast<int64_t>(prompt.size()), prompt_s),
               static_cast<long long>(n_gen), gen_s, per_second(n_gen, gen_s));
  return Status::Ok();
}

}  // namespace

CommandRunner register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd =
      app.add_subcommand("run", "Generate text (the batched engine; --reference: the f32 reference forward)");
  cmd->add_option("-m,--model", a->model, "GGUF model file (qwen35moe)")->required();
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text; control tokens like <|im_start|> are matched")
      ->required();
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", a->sampler.temperature, "Temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", a->sampler.top_k, "Keep the k most likely tokens; 0 = all")
      ->capture_default_str();
  cmd->add_option("--top-p", a->sampler.top_p, "Nucleus: keep the smallest set with this much probability")
      ->capture_default_str();
  cmd->add_option("--min-p", a->sampler.min_p,
                  "Keep tokens at least this probable relative to the most likely one; 0 = no cut")
      ->capture_default_str();
  cmd->add_option("--seed", a->sampler.seed, "Sampling seed; the same seed gives the same tokens")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Keep generating after the end-of-sequence token");
  cmd->add_option("--dump-logits", a->dump_logits,
                  "Write every position's logits here: raw little-endian float32, one row of n_vocab per "
                  "position, prompt positions then generated ones");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  cmd->add_option("-b,--batch-size", a->batch, "Prompt rows per forward pass")->capture_default_str();
  cmd->add_option("--spec", a->spec, "Speculative decoding: none, or mtp (draft with the MTP block)")
      ->capture_default_str();
  cmd->add_option("--draft-max", a->draft.n_max, "Draft at most this many tokens per step")
      ->capture_default_str();
  cmd->add_option("--draft-min", a->draft.n_min, "Drop drafts shorter than this")->capture_default_str();
  cmd->add_option("--draft-p-min", a->draft.p_min,
                  "Stop drafting when the draft token's probability (over the top 10) is below this")
      ->capture_default_str();
  cmd->add_flag("--draft-sample", a->draft.sample,
                "When sampling (--temp > 0): draft by sampling the MTP head and keep drafts by rejection "
                "sampling (more drafts kept, the same distribution; a seed's text differs from --spec none)");
  cmd->add_option("--head", a->head, "Draft with the MTP block of this head-only GGUF (mtp extract-head)");
  cmd->add_option("--draft-vocab", a->draft_vocab, "Draft over this many token ids only (0: all)")
      ->capture_default_str();
  cmd->add_option("--draft-vocab-file", a->draft_vocab_file,
                  "Ranked ids for --draft-vocab (mtp draft-vocab build); default: the first N ids");
  cmd->add_option(
         "--draft-head", a->draft_head,
         "full | subset | auto (the subset with --draft-vocab N, else the full head); subset without "
         "--draft-vocab: 16384 ids")
      ->capture_default_str();
  cmd->add_option("--cache-type-k", a->cache_type_k, "KV cache format of keys: f32, f16 or q8_0")
      ->capture_default_str();
  cmd->add_option("--cache-type-v", a->cache_type_v, "KV cache format of values: f32, f16 or q8_0")
      ->capture_default_str();
  cmd->add_flag("--reference", a->reference,
                "Use the slow reference forward pass (f32, one token at a time)");
  return [a] {
    Status s = run(*a);
    return s.ok() ? kExitOk : report_error("run", s);
  };
}

}  // namespace mtp::tools
