// llama-server's native response shapes (llama_api.h).
#include "server/llama_api.h"

namespace mtp::server {

Json generation_params_json(const RequestOptions& options, int64_t n_predict, int64_t seed,
                            const std::vector<std::string>& stop) {
  const speculative::DraftParams draft = options.speculative.value_or(speculative::DraftParams{});
  Json j = Json::object();
  j["n_predict"] = n_predict;
  j["seed"] = seed;
  j["temperature"] = options.sampling.temperature;
  j["top_k"] = options.sampling.top_k;
  j["top_p"] = options.sampling.top_p;
  j["min_p"] = options.sampling.min_p;
  j["stop"] = stop;
  j["max_tokens"] = n_predict;
  j["ignore_eos"] = options.ignore_eos;
  j["n_probs"] = options.n_probs;
  j["cache_prompt"] = options.cache_prompt;
  if (options.speculative) {  // otherwise the server's settings, which /props shows
    j["speculative.n_max"] = draft.n_max;
    j["speculative.n_min"] = draft.n_min;
    j["speculative.p_min"] = draft.p_min;
  }
  return j;
}

NativeResponseBuilder::NativeResponseBuilder(const GenerationParams& params, const Tokenizer& tokenizer,
                                             std::string model, int64_t n_prompt, int64_t n_ctx)
    : params_(params), tokenizer_(tokenizer), model_(std::move(model)), n_prompt_(n_prompt), n_ctx_(n_ctx) {}

void NativeResponseBuilder::count(const Update& u) {
  n_generated_ += static_cast<int64_t>(u.tokens.size());
  has_new_line_ = has_new_line_ || u.text.find('\n') != std::string::npos;
  if (u.done) {
    reason_ = u.finish_reason;
    stop_word_ = u.stop_word;
    timings_ = u.timings;
  }
}

Json NativeResponseBuilder::probabilities_json(const std::vector<GeneratedToken>& tokens) const {
  Json j = Json::array();
  for (const GeneratedToken& t : tokens) j.push_back(token_logprob_json(tokenizer_, t, true));
  return j;
}

std::string NativeResponseBuilder::stop_type() const {
  if (!stop_word_.empty()) return "word";
  if (reason_ == "length") return "limit";
  if (reason_ == "stop") return "eos";
  return "none";
}

std::vector<Json> NativeResponseBuilder::chunks(const Update& u) {
  count(u);
  text_ += u.text;  // for answer(); the stream's final event carries no text
  std::vector<Json> out;
  const bool probs = params_.options.n_probs > 0 && !u.tokens.empty();
  if (!u.text.empty() || (params_.return_tokens && !u.tokens.empty()) || probs) {
    Json c = Json::object();
    c["index"] = 0;
    c["content"] = u.text;
    Json ids = Json::array();
    if (params_.return_tokens)
      for (const GeneratedToken& t : u.tokens) ids.push_back(t.id);
    c["tokens"] = std::move(ids);
    c["stop"] = false;
    c["id_slot"] = params_.id_slot;
    c["tokens_predicted"] = n_generated_;
    c["tokens_evaluated"] = n_prompt_;
    if (probs) c["completion_probabilities"] = probabilities_json(u.tokens);
    out.push_back(std::move(c));
  }
  if (u.done && !u.error) out.push_back(final_json(/*stream=*/true));
  return out;
}

void NativeResponseBuilder::add(const Update& u) {
  count(u);
  text_ += u.text;
  for (const GeneratedToken& t : u.tokens) token_ids_.push_back(t.id);
  if (params_.options.n_probs > 0)
    for (Json& p : probabilities_json(u.tokens)) probabilities_.push_back(std::move(p));
}

Json NativeResponseBuilder::final_json(bool stream) const {
  Json j = Json::object();
  j["index"] = 0;
  j["content"] = stream ? "" : text_;
  Json ids = Json::array();
  if (params_.return_tokens && !stream) ids = token_ids_;
  j["tokens"] = std::move(ids);
  j["id_slot"] = params_.id_slot;
  j["stop"] = true;
  j["model"] = model_;
  j["tokens_predicted"] = n_generated_;
  j["tokens_evaluated"] = n_prompt_;
  Json settings = generation_params_json(params_.options, params_.options.max_tokens,
                                         static_cast<int64_t>(params_.options.sampling.seed), params_.stop);
  settings["n_ctx"] = n_ctx_;
  settings["model"] = model_;
  settings["stream"] = params_.stream;
  settings["return_tokens"] = params_.return_tokens;
  j["generation_settings"] = std::move(settings);
  j["prompt"] = params_.prompt_is_tokens ? tokenizer_.decode(params_.prompt_tokens) : params_.prompt_text;
  j["has_new_line"] = has_new_line_;
  // We never shift the context: a request that reached its end stopped there ("limit").
  j["truncated"] = reason_ == "length" && n_prompt_ + n_generated_ >= n_ctx_;
  j["stop_type"] = stop_type();
  j["stopping_word"] = stop_word_;
  j["tokens_cached"] = timings_.cache.cached;
  j["timings"] = timings_json(timings_);
  if (params_.options.n_probs > 0 && !stream) j["completion_probabilities"] = probabilities_;
  return j;
}

Json NativeResponseBuilder::result() const {
  return final_json(/*stream=*/false);
}

Json slots_json(const std::vector<SlotInfo>& slots, int64_t n_ctx) {
  Json out = Json::array();
  for (const SlotInfo& s : slots) {
    Json j = Json::object();
    j["id"] = s.id;
    j["id_task"] = s.id_task;
    j["n_ctx"] = n_ctx;
    j["speculative"] = s.speculative;
    j["is_processing"] = s.is_processing;
    j["n_prompt_tokens"] = s.n_prompt;
    j["next_token"] = Json{{"has_next_token", s.is_processing},
                           {"n_remain", s.is_processing ? s.n_remain : -1},
                           {"n_decoded", s.n_decoded}};
    j["slot_known"] = s.slot_known;
    if (s.last) {
      // The prompt tokens the prefix cache gave and the drafts accepted are known once a request ends.
      j["last_request"] = Json{{"finish_reason", s.last_finish_reason},
                               {"n_prompt_tokens", s.last->n_prompt},
                               {"n_prompt_tokens_cache", s.last->cache.cached},
                               {"n_decoded", s.last->n_generated},
                               {"timings", timings_json(*s.last)}};
    } else {
      j["last_request"] = nullptr;
    }
    out.push_back(std::move(j));
  }
  return out;
}

void add_llama_props(Json& props, const RequestDefaults& d) {
  Json& g = props["default_generation_settings"];
  if (!g.is_object()) g = Json::object();
  RequestOptions defaults;
  defaults.sampling = d.sampling;
  g["n_ctx"] = d.n_ctx;
  g["speculative"] = d.drafting && d.draft.n_max > 0;
  g["is_processing"] = false;
  Json params =
      generation_params_json(defaults, d.n_predict < 0 ? -1 : d.n_predict, d.seed < 0 ? -1 : d.seed, {});
  params["speculative.n_max"] = d.draft.n_max;
  params["speculative.n_min"] = d.draft.n_min;
  params["speculative.p_min"] = d.draft.p_min;
  g["params"] = std::move(params);
  if (!props.contains("modalities")) props["modalities"] = Json{{"vision", false}};
}

}  // namespace mtp::server
