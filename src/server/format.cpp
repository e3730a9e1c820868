// Response objects and stream chunks (format.h).
#include "server/format.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>

#include "base/check.h"

namespace mtp::server {

std::string dump_json(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string sse_event(const Json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

std::string make_response_id(const char* prefix) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::string id = prefix;
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < 24; ++i) id += kAlnum[gen() % (sizeof kAlnum - 1)];
  return id;
}

Json timings_json(const RequestTimings& t) {
  auto per_second = [](int64_t n, double ms) { return ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0; };
  auto per_token = [](int64_t n, double ms) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  Json j = Json::object();
  // As llama-server: prompt_n counts the prompt tokens computed, cache_n those the prefix cache gave.
  const int64_t computed = t.n_prompt - t.cache.cached;
  j["prompt_n"] = computed;
  j["prompt_ms"] = t.prompt_ms;
  j["prompt_per_token_ms"] = per_token(computed, t.prompt_ms);
  j["prompt_per_second"] = per_second(computed, t.prompt_ms);
  j["cache_n"] = t.cache.cached;  // prompt tokens reused from the prefix cache (llama-server's name)
  j["cache_matched_n"] = t.cache.matched;
  j["predicted_n"] = t.n_generated;
  j["predicted_ms"] = t.gen_ms;
  j["predicted_per_token_ms"] = per_token(t.n_generated, t.gen_ms);
  j["predicted_per_second"] = per_second(t.n_generated, t.gen_ms);
  j["draft_n"] = t.spec.drafted;
  j["draft_n_accepted"] = t.spec.accepted;
  j["draft_rounds"] = t.spec.rounds;
  j["draft_acceptance_rate"] =
      t.spec.drafted > 0 ? static_cast<double>(t.spec.accepted) / static_cast<double>(t.spec.drafted) : 0.0;
  j["mean_acceptance_length"] = t.spec.mean_acc_len();
  j["acceptance_per_position"] = t.spec.acc_rate_per_pos();
  return j;
}

Json token_sources_json(const Update& u) {
  MTP_CHECK(u.token_text.size() == u.tokens.size());
  Json out = Json::array();
  for (size_t i = 0; i < u.tokens.size(); ++i) {
    const GeneratedToken& t = u.tokens[i];
    Json e = Json{{"id", t.id}, {"text", u.token_text[i]}, {"source", t.from_draft ? "draft" : "trunk"}};
    if (t.round_drafted > 0) e["drafted"] = t.round_drafted;
    out.push_back(std::move(e));
  }
  return out;
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, const CacheUse& cache) {
  // cached_tokens: prompt tokens not computed (OpenAI's field); recomputed_tokens: tokens whose KV was cached
  // but lay behind the checkpoint the request resumed from, so were computed again.
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"prompt_tokens_details",
               Json{{"cached_tokens", cache.cached}, {"recomputed_tokens", cache.matched - cache.cached}}}};
}

std::string cache_summary(const RequestTimings& t) {
  const CacheUse& c = t.cache;
  std::string s = str_cat("prompt ", t.n_prompt, " tokens, ", c.cached, " from the prefix cache");
  if (c.cached > 0) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.2f", c.restore_ms);
    s += str_cat(" (restored in ", ms, " ms)");
  }
  if (c.matched > c.cached) {
    s += str_cat("; ", c.matched, " were cached, but ");
    s += c.cached > 0 ? str_cat("the checkpoint nearest before ", c.matched, " is at ", c.cached)
                      : str_cat("no checkpoint lies at or before ", c.matched);
    if (c.next_checkpoint > 0) s += str_cat(" (the next one is at ", c.next_checkpoint, ")");
    s += str_cat(": ", c.matched - c.cached, " recomputed");
  } else if (c.matched == 0) {
    s += "; no cached prefix";
  }
  return s;
}

ResponseBuilder::ResponseBuilder(const GenerationParams& params, const Tokenizer& tokenizer,
                                 std::string model, int64_t n_prompt,
                                 std::optional<chat::OutputFormat> format)
    : params_(params),
      tokenizer_(tokenizer),
      id_(make_response_id(format ? "chatcmpl-" : "cmpl-")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      model_(std::move(model)),
      n_prompt_(n_prompt) {
  if (format) parser_.emplace(std::move(*format));
}

Json ResponseBuilder::chunk_base() const {
  Json j = Json::object();
  j["id"] = id_;
  j["object"] = chat() ? "chat.completion.chunk" : "text_completion";
  j["created"] = created_;
  j["model"] = model_;
  j["system_fingerprint"] = "mtp.cpp";
  return j;
}

Json token_logprob_json(const Tokenizer& tokenizer, const GeneratedToken& t, bool with_ids) {
  auto entry = [&](int32_t id, float logprob) {
    const std::string& piece = tokenizer.piece(id);
    Json bytes = Json::array();
    for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
    Json e = Json::object();
    if (with_ids) e["id"] = id;
    e["token"] = piece;
    e["logprob"] = logprob;
    e["bytes"] = std::move(bytes);
    return e;
  };
  Json j = entry(t.id, t.logprob);
  Json top = Json::array();
  for (const TokenLogprob& c : t.top) top.push_back(entry(c.id, c.logprob));
  j["top_logprobs"] = std::move(top);
  return j;
}

Json ResponseBuilder::logprobs_json(const std::vector<GeneratedToken>& tokens) {
  if (chat()) {
    Json content = Json::array();
    for (const GeneratedToken& t : tokens) content.push_back(token_logprob_json(tokenizer_, t, false));
    return Json{{"content", content}};
  }
  Json j = Json{{"tokens", Json::array()},
                {"token_logprobs", Json::array()},
                {"top_logprobs", Json::array()},
                {"text_offset", Json::array()}};
  for (const GeneratedToken& t : tokens) {
    const std::string& piece = tokenizer_.piece(t.id);
    j["tokens"].push_back(piece);
    j["token_logprobs"].push_back(t.logprob);
    Json top = Json::object();
    for (const TokenLogprob& c : t.top) top[tokenizer_.piece(c.id)] = c.logprob;
    j["top_logprobs"].push_back(top);
    j["text_offset"].push_back(text_offset_);
    text_offset_ += piece.size();
  }
  return j;
}

void ResponseBuilder::count(const Update& u) {
  n_generated_ += static_cast<int64_t>(u.tokens.size());
  if (u.done) {
    reason_ = u.finish_reason;
    timings_ = u.timings;
  }
}

std::string ResponseBuilder::finish_reason() const {
  if (chat() && !parser_->result().tool_calls.empty()) return "tool_calls";
  return reason_ == "length" ? "length" : "stop";
}

std::optional<Json> ResponseBuilder::first_chunk() const {
  if (!chat()) return std::nullopt;
  Json c = chunk_base();
  Json delta = Json{{"role", "assistant"}, {"content", ""}};
  c["choices"] =
      Json::array({Json{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  return c;
}

std::vector<Json> ResponseBuilder::chunks(const Update& u) {
  count(u);
  std::vector<Json> out;
  Json lp = params_.logprobs && !u.tokens.empty() ? logprobs_json(u.tokens) : Json();
  Json sources = params_.token_sources && !u.tokens.empty() ? token_sources_json(u) : Json();
  auto choice = [&](Json body_or_delta, const Json& finish) {
    Json ch = Json::object();
    ch["index"] = 0;
    if (chat()) {
      ch["delta"] = std::move(body_or_delta);
    } else {
      ch["text"] = std::move(body_or_delta);
    }
    ch["logprobs"] = lp;
    ch["finish_reason"] = finish;
    lp = Json();  // logprobs go with the first chunk of this update
    Json c = chunk_base();
    c["choices"] = Json::array({ch});
    if (!sources.is_null()) c["token_sources"] = std::move(sources);  // so do token sources
    sources = Json();
    return c;
  };
  if (chat()) {
    chat::OutputDelta d = parser_->feed(u.text);
    if (u.done) {
      chat::OutputDelta rest = parser_->finish();
      d.content += rest.content;
      d.reasoning_content += rest.reasoning_content;
      for (auto& t : rest.tool_calls) d.tool_calls.push_back(std::move(t));
      for (auto& w : rest.warnings) d.warnings.push_back(std::move(w));
    }
    for (auto& w : d.warnings) warnings_.push_back(std::move(w));
    if (!d.content.empty() || !d.reasoning_content.empty() || !d.tool_calls.empty() || !lp.is_null() ||
        !sources.is_null()) {
      Json delta = Json::object();
      if (!d.reasoning_content.empty()) delta["reasoning_content"] = d.reasoning_content;
      if (!d.content.empty()) delta["content"] = d.content;
      if (!d.tool_calls.empty()) {
        Json calls = Json::array();
        for (const chat::ToolCall& t : d.tool_calls) calls.push_back(t.to_json(tool_index_++));
        delta["tool_calls"] = calls;
      }
      out.push_back(choice(delta, nullptr));
    }
  } else if (!u.text.empty() || !lp.is_null() || !sources.is_null()) {
    text_ += u.text;
    out.push_back(choice(u.text, nullptr));
  }
  if (u.done && !u.error) {
    Json last = choice(chat() ? Json::object() : Json(""), finish_reason());
    last["usage"] = usage_json(n_prompt_, n_generated_, timings_.cache);
    last["timings"] = timings_json(timings_);
    out.push_back(std::move(last));
    if (params_.include_usage) {
      Json usage = chunk_base();
      usage["choices"] = Json::array();
      usage["usage"] = usage_json(n_prompt_, n_generated_, timings_.cache);
      out.push_back(std::move(usage));
    }
  }
  return out;
}

void ResponseBuilder::add(const Update& u) {
  count(u);
  if (params_.token_sources)
    for (Json& e : token_sources_json(u)) token_sources_.push_back(std::move(e));
  if (params_.logprobs && !u.tokens.empty()) {
    Json lp = logprobs_json(u.tokens);
    if (logprobs_.is_null()) {
      logprobs_ = std::move(lp);
    } else {
      for (auto it = lp.begin(); it != lp.end(); ++it)
        for (auto& v : it.value()) logprobs_[it.key()].push_back(std::move(v));
    }
  }
  if (chat()) {
    chat::OutputDelta d = parser_->feed(u.text);
    for (auto& w : d.warnings) warnings_.push_back(std::move(w));
    if (u.done) {
      chat::OutputDelta rest = parser_->finish();
      for (auto& w : rest.warnings) warnings_.push_back(std::move(w));
    }
  } else {
    text_ += u.text;
  }
}

Json ResponseBuilder::answer() const {
  return chat() ? parser_->result().to_message_json() : Json{{"text", text_}};
}

Json ResponseBuilder::result() const {
  Json j = Json::object();
  j["id"] = id_;
  j["object"] = chat() ? "chat.completion" : "text_completion";
  j["created"] = created_;
  j["model"] = model_;
  j["system_fingerprint"] = "mtp.cpp";
  Json choice = Json::object();
  choice["index"] = 0;
  if (chat()) {
    choice["message"] = parser_->result().to_message_json();
  } else {
    choice["text"] = text_;
  }
  if (params_.logprobs) {
    choice["logprobs"] =
        logprobs_.is_null() ? (chat() ? Json{{"content", Json::array()}} : Json()) : logprobs_;
  } else {
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = finish_reason();
  j["choices"] = Json::array({choice});
  j["usage"] = usage_json(n_prompt_, n_generated_, timings_.cache);
  j["timings"] = timings_json(timings_);
  if (params_.token_sources) j["token_sources"] = token_sources_;
  return j;
}

}  // namespace mtp::server
