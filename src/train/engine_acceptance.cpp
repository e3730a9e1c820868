#include "train/engine_acceptance.h"

#include <algorithm>
#include <deque>
#include <memory>

#include "engine/engine.h"

namespace mtp::train {

Status validate(const AcceptanceOptions& o) {
  if (o.tokens < 0 || o.tokens > kMaxAcceptTokens)
    return invalid_argument("--accept-tokens must be in [0, ", kMaxAcceptTokens, "] (0: no engine figures)");
  if (o.draft_max < 1 || o.draft_max > speculative::kMaxDraftTokens)
    return invalid_argument("--accept-draft-max must be in [1, ", speculative::kMaxDraftTokens, "]");
  if (!(o.temperature >= 0)) return invalid_argument("--accept-temp must be 0 (greedy) or more");
  if (o.threads < 1) return invalid_argument("--threads must be at least 1");
  if (o.slots < 1) return invalid_argument("acceptance slots must be at least 1");
  return Status::Ok();
}

Expected<speculative::SpecStats> engine_acceptance(const Model& model,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const AcceptanceOptions& o, ThreadPool& pool) {
  MTP_RETURN_IF_ERROR(validate(o));
  if (!model.has_mtp()) return invalid_argument("the model has no MTP block to draft with");
  if (prompts.empty()) return speculative::SpecStats{};
  size_t longest = 0;
  for (const std::vector<int32_t>& p : prompts) longest = std::max(longest, p.size());

  EngineOptions eo;
  eo.n_slots = static_cast<int32_t>(std::min<size_t>(static_cast<size_t>(o.slots), prompts.size()));
  // Each slot's sequence in whole KV blocks: its prompt, its tokens and one round's draft rows.
  const int64_t per_slot = static_cast<int64_t>(longest) + o.tokens + o.draft_max + 1;
  eo.n_ctx = eo.n_slots * ((per_slot + eo.kv_block_size - 1) / eo.kv_block_size) * eo.kv_block_size;
  eo.spec = SpecType::kMtp;
  eo.draft.n_max = o.draft_max;
  eo.draft.sample = o.temperature > 0;
  eo.draft_head = speculative::DraftHead::kFull;
  MTP_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(model, eo, pool));

  speculative::SpecStats total;
  std::deque<size_t> waiting;
  for (size_t i = 0; i < prompts.size(); ++i) waiting.push_back(i);
  std::vector<SlotEvent> events;
  while (!waiting.empty() || !engine->idle()) {
    while (!waiting.empty() && engine->n_busy() < engine->n_slots()) {
      RequestOptions ro;
      ro.sampling.temperature = static_cast<float>(o.temperature);
      ro.sampling.seed = o.seed + waiting.front();
      ro.max_tokens = o.tokens;
      ro.ignore_eos = true;
      ro.cache_prompt = false;
      MTP_ASSIGN_OR_RETURN(const uint64_t id, engine->submit(prompts[waiting.front()], ro));
      (void)id;
      waiting.pop_front();
    }
    events.clear();
    MTP_RETURN_IF_ERROR(engine->step(events));
    for (const SlotEvent& e : events) {
      if (e.finish == FinishReason::kError) return Status(StatusCode::kInternal, e.error);
      if (e.finish != FinishReason::kNone) total.merge(e.timings.spec);
    }
  }
  return total;
}

Expected<speculative::SpecStats> engine_acceptance(const std::string& model_path,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const AcceptanceOptions& o) {
  MTP_RETURN_IF_ERROR(validate(o));
  ThreadPool pool(o.threads);
  MTP_ASSIGN_OR_RETURN(const Model model, Model::load(model_path, &pool));
  return engine_acceptance(model, prompts, o, pool);
}

}  // namespace mtp::train
