#include "server/props.h"

#include <cstdio>

namespace mtp::server {
namespace {

Json speculative_props(const EngineOptions& eo) {
  Json s = Json::object();
  s["type"] = eo.spec == SpecType::kMtp ? "draft-mtp" : "none";
  s["n_max"] = eo.draft.n_max;
  s["n_min"] = eo.draft.n_min;
  s["p_min"] = eo.draft.p_min;
  s["sample"] = eo.draft.sample;
  s["max_drafting_slots"] = eo.policy.max_drafting_slots;
  s["policy"] = eo.policy.kind == speculative::PolicyKind::kAuto ? "auto" : "fixed";
  s["head"] = eo.head_path.empty() ? Json() : Json(eo.head_path);
  s["draft_vocab"] = eo.draft_vocab;
  s["draft_head"] = eo.policy.choose_head ? "auto" : speculative::draft_head_name(eo.policy.head);
  s["draft_vocab_file"] = eo.draft_vocab_file.empty() ? Json() : Json(eo.draft_vocab_file);
  return s;
}

Json generation_props(const RequestDefaults& d) {
  Json g = Json::object();
  g["temperature"] = d.sampling.temperature;
  g["top_k"] = d.sampling.top_k;
  g["top_p"] = d.sampling.top_p;
  g["min_p"] = d.sampling.min_p;
  g["seed"] = d.seed;
  g["n_predict"] = d.n_predict;
  return g;
}

// printf appended to a std::string.
template <typename... Args>
void append(std::string& out, const char* format, Args... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  if (n <= 0) return;
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(n) + 1);
  std::snprintf(out.data() + at, static_cast<size_t>(n) + 1, format, args...);
  out.resize(at + static_cast<size_t>(n));
}

void describe_speculative(std::string& out, const Json& s) {
  append(out, "  speculative: %s", s["type"].get<std::string>().c_str());
  if (s["type"] == "draft-mtp") {
    const int slots = s["max_drafting_slots"].get<int>();
    append(out, ", n_max %d, n_min %d, p_min %.3g, policy %s, max drafting slots %s", s["n_max"].get<int>(),
           s["n_min"].get<int>(), s["p_min"].get<double>(), s["policy"].get<std::string>().c_str(),
           slots < 0 ? "unlimited" : std::to_string(slots).c_str());
    if (!s["head"].is_null()) append(out, ", head %s", s["head"].get<std::string>().c_str());
    append(out, ", draft head %s", s["draft_head"].get<std::string>().c_str());
    if (s["sample"].get<bool>()) append(out, ", sampled drafts");
    if (s["draft_vocab"].get<int64_t>() > 0)
      append(out, " (subset of %lld ids%s)", static_cast<long long>(s["draft_vocab"].get<int64_t>()),
             s["draft_head"] == "auto" ? "; the policy chooses it or the full head per batch size" : "");
  }
  out += "\n";
}

void describe_prefix_cache(std::string& out, const Json& pc) {
  if (!pc["enabled"].get<bool>()) {
    out += "  prefix cache: off\n";
    return;
  }
  append(out, "  prefix cache: %lld MiB; checkpoints at prompt ends, generation ends, message starts",
         static_cast<long long>(pc["ram_mib"].get<int64_t>()));
  if (pc["checkpoint_every"].get<int64_t>() > 0)
    append(out, " and every %lld prompt tokens",
           static_cast<long long>(pc["checkpoint_every"].get<int64_t>()));
  out += "\n";
}

}  // namespace

Json build_props(const ServerConfig& cfg, const EngineOptions& eo, const PropsInfo& info) {
  const RequestDefaults& d = cfg.defaults;
  Json p = Json::object();
  p["build_info"] = info.version;
  p["model_path"] = cfg.model_path;
  p["n_ctx"] = eo.n_ctx;
  p["n_batch"] = info.n_batch;
  p["cache_type_k"] = info.cache_type_k;
  p["cache_type_v"] = info.cache_type_v;
  p["n_ubatch"] = info.n_ubatch;
  p["n_batch_rows_per_step"] = eo.n_batch;
  p["threads"] = info.threads;
  p["kernels"] = info.kernels;
  p["host"] = cfg.host;
  p["api_key"] = !cfg.api_key.empty();
  p["speculative"] = speculative_props(eo);
  p["default_generation_settings"] = generation_props(d);
  p["reasoning"] = !d.enable_thinking ? "auto" : *d.enable_thinking ? "on" : "off";
  p["reasoning_format"] = d.reasoning_format == chat::ReasoningFormat::kNone ? "none" : "deepseek";
  p["chat_template_kwargs"] = d.chat_template_kwargs;
  p["chat_template_origin"] = info.chat_template_origin;
  p["limits"] = Json{{"max_queue", cfg.loop.max_queue},
                     {"max_body_bytes", cfg.max_body_bytes},
                     {"shutdown_timeout_s", cfg.shutdown_timeout_s}};
  p["prefix_cache"] = Json{{"enabled", eo.cache.ram_bytes > 0},
                           {"ram_mib", eo.cache.ram_bytes >> 20},
                           {"checkpoint_every", eo.cache.checkpoint_every},
                           {"checkpoint_min_gap", eo.cache.checkpoint_min_gap},
                           {"block_size", eo.kv_block_size}};
  p["compatibility_notices"] = info.compatibility_notices;
  p["total_slots"] = info.total_slots;
  p["memory"] = {{"resident_bytes", info.resident_bytes},
                 {"packed_weights_bytes", info.packed_weights_bytes},
                 {"available_bytes", info.available_bytes},
                 {"prefix_cache_budget_bytes", info.prefix_cache_budget_bytes}};
  return p;
}

std::string describe_props(const Json& p, const std::string& model_id) {
  std::string out;
  append(out, "mtp serve: %s (%s)\n", p["model_path"].get<std::string>().c_str(), model_id.c_str());
  append(out,
         "  slots %d, context %lld tokens (shared), %lld rows per step (-b %lld, -ub %lld), %d threads, "
         "kernels %s\n",
         p["total_slots"].get<int>(), static_cast<long long>(p["n_ctx"].get<int64_t>()),
         static_cast<long long>(p["n_batch_rows_per_step"].get<int64_t>()),
         static_cast<long long>(p["n_batch"].get<int64_t>()),
         static_cast<long long>(p["n_ubatch"].get<int64_t>()), p["threads"].get<int>(),
         p["kernels"].get<std::string>().c_str());
  const Json& m = p["memory"];
  auto mib = [&](const char* key) { return static_cast<unsigned long long>(m[key].get<uint64_t>() >> 20); };
  append(out,
         "  memory: resident %llu MiB (packed weights %llu MiB), %llu MiB available after loading; prefix "
         "cache up "
         "to %llu MiB\n",
         mib("resident_bytes"), mib("packed_weights_bytes"), mib("available_bytes"),
         mib("prefix_cache_budget_bytes"));
  describe_speculative(out, p["speculative"]);
  const Json& g = p["default_generation_settings"];
  append(out, "  defaults: temperature %.3g, top_k %d, top_p %.3g, min_p %.3g, seed %lld, n_predict %lld\n",
         g["temperature"].get<double>(), g["top_k"].get<int>(), g["top_p"].get<double>(),
         g["min_p"].get<double>(), static_cast<long long>(g["seed"].get<int64_t>()),
         static_cast<long long>(g["n_predict"].get<int64_t>()));
  append(out, "  chat template: %s; reasoning %s, format %s\n",
         p["chat_template_origin"].get<std::string>().c_str(), p["reasoning"].get<std::string>().c_str(),
         p["reasoning_format"].get<std::string>().c_str());
  if (!p["chat_template_kwargs"].empty())
    out += "  chat template kwargs: " + p["chat_template_kwargs"].dump() + "\n";
  describe_prefix_cache(out, p["prefix_cache"]);
  const Json& l = p["limits"];
  append(out, "  queue %zu, body limit %zu bytes, shutdown timeout %.3g s, api key %s\n",
         l["max_queue"].get<size_t>(), l["max_body_bytes"].get<size_t>(),
         l["shutdown_timeout_s"].get<double>(), p["api_key"].get<bool>() ? "required" : "none");
  return out;
}

}  // namespace mtp::server
