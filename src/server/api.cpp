// Request parsing and validation for the OpenAI-compatible endpoints (api.h).
#include "server/api.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>

#include "grammar/json_schema.h"

namespace mtp::server {
namespace {

#define MTP_API_TRY(expr)            \
  do {                               \
    if (auto e_ = (expr)) return e_; \
  } while (0)

using Err = std::optional<ApiError>;

uint64_t random_seed() {
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return gen() >> 1;
}

// The field, or nullptr when absent or null (null means "default" in OpenAI's API).
const Json* field(const Json& body, std::string_view name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string type_name(const Json& j) {
  if (j.is_number_integer()) return "integer";
  if (j.is_number_float()) return "number";
  return j.type_name();
}

ApiError wrong_type(std::string_view name, const char* expected, const Json& got) {
  return bad_request(str_cat("'", name, "' must be ", expected, ", got ", type_name(got)), std::string(name));
}

Err get_bool(const Json& body, std::string_view name, std::optional<bool>& out) {
  const Json* j = field(body, name);
  if (j == nullptr) return std::nullopt;
  if (!j->is_boolean()) return wrong_type(name, "a boolean", *j);
  out = j->get<bool>();
  return std::nullopt;
}

Err get_string(const Json& body, std::string_view name, std::optional<std::string>& out) {
  const Json* j = field(body, name);
  if (j == nullptr) return std::nullopt;
  if (!j->is_string()) return wrong_type(name, "a string", *j);
  out = j->get<std::string>();
  return std::nullopt;
}

// An integer (an integral float such as 5.0 is accepted) in [lo, hi].
Err get_int(const Json& body, std::string_view name, int64_t lo, int64_t hi, std::optional<int64_t>& out) {
  const Json* j = field(body, name);
  if (j == nullptr) return std::nullopt;
  int64_t v = 0;
  if (j->is_number_unsigned()) {
    const uint64_t u = j->get<uint64_t>();
    v = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                       : static_cast<int64_t>(u);
  } else if (j->is_number_integer()) {
    v = j->get<int64_t>();
  } else if (j->is_number_float()) {
    const double d = j->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18)
      return wrong_type(name, "an integer", *j);
    v = static_cast<int64_t>(d);
  } else {
    return wrong_type(name, "an integer", *j);
  }
  if (v < lo || v > hi) {
    const std::string range = hi == std::numeric_limits<int64_t>::max()
                                  ? str_cat("at least ", lo)
                                  : str_cat("between ", lo, " and ", hi);
    return bad_request(str_cat("'", name, "' must be ", range, ", got ", v), std::string(name));
  }
  out = v;
  return std::nullopt;
}

// A finite number in `range` (the option's own range: engine/sampler.h, spec/drafter.h).
Err get_number(const Json& body, std::string_view name, const OptionRange& range,
               std::optional<double>& out) {
  const Json* j = field(body, name);
  if (j == nullptr) return std::nullopt;
  if (!j->is_number()) return wrong_type(name, "a number", *j);
  const double v = j->get<double>();
  if (!std::isfinite(v) || !range.contains(v))
    return bad_request(str_cat("'", name, "' must be in ", range.describe(), ", got ", v), std::string(name));
  out = v;
  return std::nullopt;
}

Err parse_stop(const Json& body, const RequestDefaults& d, std::vector<std::string>& out) {
  const Json* j = field(body, "stop");
  if (j == nullptr) return std::nullopt;
  if (j->is_string()) {
    if (!j->get_ref<const std::string&>().empty()) out.push_back(j->get<std::string>());
    return std::nullopt;
  }
  if (!j->is_array()) return wrong_type("stop", "a string or an array of strings", *j);
  if (j->size() > d.max_stop_strings)
    return bad_request(
        str_cat("'stop' has ", j->size(), " strings; at most ", d.max_stop_strings, " are allowed"), "stop");
  for (size_t i = 0; i < j->size(); ++i) {
    const Json& s = (*j)[i];
    if (!s.is_string()) return wrong_type(str_cat("stop[", i, "]"), "a string", s);
    if (s.get_ref<const std::string&>().empty())
      return bad_request(str_cat("'stop[", i, "]' must not be empty"), "stop");
    out.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// "speculative": false | true | {"n_max", "n_min", "p_min", "draft_vocab", "sample"}, or llama-server's flat
// "speculative.n_max" keys. draft_vocab: 0 = the full draft head, or the server's own --draft-vocab N (the
// subset is gathered once at start, so other sizes are refused).
Err parse_speculative(const Json& body, const RequestDefaults& d, RequestOptions& opt) {
  speculative::DraftParams p = d.draft;
  bool set = false;
  auto fields = [&](const Json& obj, const std::string& prefix) -> Err {
    std::optional<int64_t> n_max, n_min;
    std::optional<double> p_min;
    std::optional<int64_t> draft_vocab;
    std::optional<bool> sample;  // DraftParams::sample: drafts sampled from the head when the request samples
    MTP_API_TRY(get_bool(obj, prefix + "sample", sample));
    if (sample) p.sample = *sample, set = true;
    MTP_API_TRY(get_int(obj, prefix + "draft_vocab", 0, std::numeric_limits<int32_t>::max(), draft_vocab));
    if (draft_vocab) {
      if (*draft_vocab != 0 && *draft_vocab != d.draft_vocab)
        return bad_request(
            str_cat("speculative draft_vocab must be 0 (the full head)",
                    d.draft_vocab > 0 ? str_cat(" or ", d.draft_vocab, " (the server's --draft-vocab)")
                                      : std::string(" (the server runs without --draft-vocab)"),
                    ", got ", *draft_vocab),
            "speculative");
      p.subset = *draft_vocab != 0;
      set = true;
    }
    MTP_API_TRY(get_int(obj, prefix + "n_max", 0, speculative::kMaxDraftTokens, n_max));
    MTP_API_TRY(get_int(obj, prefix + "n_min", 0, speculative::kMaxDraftTokens, n_min));
    MTP_API_TRY(get_number(obj, prefix + "p_min", speculative::kDraftPMin, p_min));
    if (n_max) p.n_max = static_cast<int32_t>(*n_max), set = true;
    if (n_min) p.n_min = static_cast<int32_t>(*n_min), set = true;
    if (p_min) p.p_min = static_cast<float>(*p_min), set = true;
    return std::nullopt;
  };
  if (const Json* j = field(body, "speculative")) {
    if (j->is_boolean()) {
      if (!j->get<bool>()) {
        p.n_max = 0;
        set = true;
      }
    } else if (j->is_object()) {
      for (auto it = j->begin(); it != j->end(); ++it) {
        if (it.key() != "n_max" && it.key() != "n_min" && it.key() != "p_min" && it.key() != "draft_vocab" &&
            it.key() != "sample")
          return bad_request(str_cat("'speculative' has an unknown field '", it.key(),
                                     "' (known: n_max, n_min, p_min, draft_vocab, sample)"),
                             "speculative");
      }
      Json renamed = Json::object();
      for (auto it = j->begin(); it != j->end(); ++it) renamed["speculative." + it.key()] = it.value();
      MTP_API_TRY(fields(renamed, "speculative."));
    } else {
      return wrong_type("speculative", "false, true or an object", *j);
    }
  }
  MTP_API_TRY(fields(body, "speculative."));
  if (Status st = speculative::check_draft_params(p); !st.ok())
    return bad_request(st.message(), "speculative");
  if (set) opt.speculative = p;
  return std::nullopt;
}

// logit_bias in OpenAI's form ({"token id": bias}, bias in [-100, 100]) or llama-server's ([[id, bias], ...],
// bias a number or false for "never"). Token ids are checked against the vocabulary by the engine.
Err parse_logit_bias(const Json& j, std::vector<std::pair<int32_t, float>>& out) {
  constexpr size_t kMaxEntries = 4096;
  if (j.size() > kMaxEntries)
    return bad_request(
        str_cat("'logit_bias' has ", j.size(), " entries; at most ", kMaxEntries, " are allowed"),
        "logit_bias");
  auto add = [&](int64_t id, const Json& bias, const std::string& where) -> Err {
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      return bad_request(str_cat("'", where, "': token id ", id, " is not a token id"), "logit_bias");
    if (bias.is_boolean() && !bias.get<bool>()) {
      out.emplace_back(static_cast<int32_t>(id), -std::numeric_limits<float>::infinity());
      return std::nullopt;
    }
    if (!bias.is_number() || !std::isfinite(bias.get<double>()) || std::fabs(bias.get<double>()) > 100.0)
      return bad_request(
          str_cat("'", where, "' must be a number in [-100, 100] (or false), got ", bias.dump()),
          "logit_bias");
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias.get<double>()));
    return std::nullopt;
  };
  if (j.is_object()) {
    for (const auto& [key, bias] : j.items()) {
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || key.empty())
        return bad_request(str_cat("'logit_bias' keys must be token ids, got \"", key, "\""), "logit_bias");
      MTP_API_TRY(add(id, bias, str_cat("logit_bias.", key)));
    }
    return std::nullopt;
  }
  if (!j.is_array()) return wrong_type("logit_bias", "an object or an array of [id, bias] pairs", j);
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& e = j[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer())
      return wrong_type(str_cat("logit_bias[", i, "]"), "an [id, bias] pair (token ids, not text)", e);
    MTP_API_TRY(add(e[0].get<int64_t>(), e[1], str_cat("logit_bias[", i, "]")));
  }
  return std::nullopt;
}

// Penalties (OpenAI's presence/frequency; llama-server's repeat_penalty and repeat_last_n) and logit_bias.
Err parse_penalties(const Json& body, SamplerOptions& s) {
  std::optional<double> num;
  MTP_API_TRY(get_number(body, "presence_penalty", sampling_range::kPresencePenalty, num));
  if (num) s.presence_penalty = static_cast<float>(*num);
  num.reset();
  MTP_API_TRY(get_number(body, "frequency_penalty", sampling_range::kFrequencyPenalty, num));
  if (num) s.frequency_penalty = static_cast<float>(*num);
  num.reset();
  MTP_API_TRY(get_number(body, "repeat_penalty", sampling_range::kRepeatPenalty, num));
  if (num) s.repeat_penalty = static_cast<float>(*num);
  std::optional<int64_t> n;
  MTP_API_TRY(get_int(body, "repeat_last_n", sampling_range::kRepeatLastNMin,
                      std::numeric_limits<int32_t>::max(), n));
  if (n) s.repeat_last_n = static_cast<int32_t>(*n);
  if (const Json* j = field(body, "logit_bias")) {
    MTP_API_TRY(parse_logit_bias(*j, s.logit_bias));
  }
  return std::nullopt;
}

// A grammar from GBNF text or a JSON Schema, as a 400 naming `param` when it does not compile.
Err compile_grammar(const std::string& gbnf, const char* param, RequestOptions& opt) {
  auto g = grammar::parse_gbnf(gbnf);
  if (!g.ok()) return bad_request(str_cat("'", param, "': ", g.status().message()), param);
  opt.grammar = std::make_shared<const grammar::Grammar>(std::move(*g));
  return std::nullopt;
}
Err compile_schema(const Json& schema, const char* param, RequestOptions& opt) {
  if (!schema.is_object() && !schema.is_boolean()) return wrong_type(param, "a JSON Schema object", schema);
  auto gbnf = grammar::json_schema_to_gbnf(schema);
  if (!gbnf.ok()) return bad_request(str_cat("'", param, "': ", gbnf.status().message()), param);
  return compile_grammar(*gbnf, param, opt);
}

// OpenAI's response_format: "text", "json_object" (any object; llama-server also reads a "schema" there) or
// "json_schema" with {"name", "schema", "strict"}.
Err parse_response_format(const Json& j, RequestOptions& opt) {
  if (!j.is_object()) return wrong_type("response_format", "an object", j);
  auto t = j.find("type");
  const std::string type = t != j.end() && t->is_string() ? t->get<std::string>() : "";
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    if (auto schema = j.find("schema"); schema != j.end())
      return compile_schema(*schema, "response_format.schema", opt);
    return compile_grammar(grammar::json_object_gbnf(), "response_format", opt);
  }
  if (type == "json_schema") {
    auto js = j.find("json_schema");
    if (js == j.end() || !js->is_object())
      return bad_request("response_format json_schema needs a 'json_schema' object",
                         "response_format.json_schema");
    if (auto strict = js->find("strict"); strict != js->end() && !strict->is_boolean())
      return wrong_type("response_format.json_schema.strict", "a boolean", *strict);
    auto schema = js->find("schema");
    if (schema == js->end())
      return bad_request("response_format.json_schema needs a 'schema'",
                         "response_format.json_schema.schema");
    return compile_schema(*schema, "response_format.json_schema.schema", opt);
  }
  return bad_request("response_format type must be \"text\", \"json_object\" or \"json_schema\"",
                     "response_format");
}

// Structured output: llama-server's `grammar` (GBNF) and `json_schema`, OpenAI's `response_format`; at most
// one of them constrains a request.
Err parse_structured_output(const Json& body, RequestOptions& opt) {
  int given = 0;
  if (const Json* j = field(body, "grammar");
      j && !(j->is_string() && j->get_ref<const std::string&>().empty())) {
    if (!j->is_string()) return wrong_type("grammar", "a string of GBNF", *j);
    MTP_API_TRY(compile_grammar(j->get<std::string>(), "grammar", opt));
    ++given;
  }
  if (const Json* j = field(body, "json_schema"); j && !j->is_null()) {
    MTP_API_TRY(compile_schema(*j, "json_schema", opt));
    ++given;
  }
  if (const Json* j = field(body, "response_format"); j && !j->is_null()) {
    auto before = std::move(opt.grammar);
    opt.grammar = nullptr;
    MTP_API_TRY(parse_response_format(*j, opt));
    if (opt.grammar)
      ++given;
    else
      opt.grammar = std::move(before);  // "text" constrains nothing
  }
  if (given > 1)
    return bad_request("give at most one of 'grammar', 'json_schema' and 'response_format' (json)",
                       "grammar");
  return std::nullopt;
}

// Fields whose non-default values need sampler features this server does not have: refused rather than
// silently ignored.
Err refuse_unsupported(const Json& body) {
  std::optional<int64_t> n;
  MTP_API_TRY(get_int(body, "n", 1, std::numeric_limits<int64_t>::max(), n));
  // Each choice would be a request of its own in a slot of its own (its prompt computed again: the prefix
  // cache takes a request's state only when it ends), so clients are better served sending it n times.
  if (n && *n > 1)
    return bad_request(str_cat("'n' must be 1, got ", *n,
                               ": several choices in one response are not supported; send the request n "
                               "times (each with its own seed when sampling)"),
                       "n");
  return std::nullopt;
}

}  // namespace

Json ApiError::to_json() const {
  Json e = Json::object();
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? Json() : Json(param);
  e["code"] = code.empty() ? Json() : Json(code);
  return Json{{"error", e}};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError server_error(int status, std::string message, std::string code) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = "server_error";
  e.code = std::move(code);
  return e;
}

std::optional<ApiError> parse_json_body(std::string_view body, Json& out) {
  if (body.empty()) return bad_request("the request body is empty; a JSON object is expected");
  try {
    out = Json::parse(body);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number beyond double (1e999)
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> "parse error at ..."
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    return bad_request("the request body is not valid JSON: " + what);
  }
  if (!out.is_object()) return bad_request("the request body must be a JSON object, got " + type_name(out));
  return std::nullopt;
}

std::optional<ApiError> parse_common(const Json& body, const RequestDefaults& d, bool chat,
                                     GenerationParams& out) {
  MTP_API_TRY(refuse_unsupported(body));
  std::optional<bool> b;
  MTP_API_TRY(get_bool(body, "stream", b));
  out.stream = b.value_or(false);
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) return wrong_type("stream_options", "an object", *so);
    std::optional<bool> iu;
    if (auto e = get_bool(*so, "include_usage", iu)) {
      e->param = "stream_options.include_usage";
      return e;
    }
    out.include_usage = iu.value_or(false);
  }
  std::optional<std::string> model;
  MTP_API_TRY(get_string(body, "model", model));
  out.model = model.value_or("");

  RequestOptions& opt = out.options;
  opt.sampling = d.sampling;
  std::optional<double> num;
  MTP_API_TRY(get_number(body, "temperature", sampling_range::kTemperature, num));
  if (num) opt.sampling.temperature = static_cast<float>(*num);
  num.reset();
  MTP_API_TRY(get_number(body, "top_p", sampling_range::kTopP, num));
  if (num) opt.sampling.top_p = static_cast<float>(*num);
  num.reset();
  MTP_API_TRY(get_number(body, "min_p", sampling_range::kMinP, num));
  if (num) opt.sampling.min_p = static_cast<float>(*num);
  std::optional<int64_t> i;
  MTP_API_TRY(get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max(), i));
  if (i) opt.sampling.top_k = static_cast<int32_t>(std::max<int64_t>(*i, 0));
  i.reset();
  MTP_API_TRY(
      get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), i));
  const int64_t seed = i.value_or(d.seed);
  opt.sampling.seed = seed >= 0 ? static_cast<uint64_t>(seed) : random_seed();
  MTP_API_TRY(parse_penalties(body, opt.sampling));
  MTP_API_TRY(parse_structured_output(body, opt));

  // max_tokens (OpenAI), max_completion_tokens (OpenAI chat), n_predict (llama-server; -1 = unlimited).
  opt.max_tokens = d.n_predict;
  for (const char* name : {"n_predict", "max_tokens", "max_completion_tokens"}) {
    i.reset();
    const bool llama = std::string_view(name) == "n_predict";
    const Json* j = field(body, name);
    if (llama && j && j->is_number_integer() && j->get<int64_t>() == -1) continue;
    // llama-server's -1 is "no limit"; 0 (evaluate the prompt only) has no counterpart here.
    if (llama && j && j->is_number_integer() && j->get<int64_t>() < 1) {
      const std::string range = "-1 (until an end token or the context is full) or at least 1";
      return bad_request(str_cat("'n_predict' must be ", range, ", got ", j->get<int64_t>()), name);
    }
    MTP_API_TRY(get_int(body, name, 1, std::numeric_limits<int64_t>::max(), i));
    // Over the context is the same error, with the same code, as a prompt plus max_tokens over it
    // (server.cpp).
    if (i && *i > d.n_ctx)
      return bad_request(str_cat("'", name, "' is ", *i, "; the context holds ", d.n_ctx,
                                 " tokens (prompt and completion together)"),
                         name, "context_length_exceeded");
    if (i) {
      opt.max_tokens = *i;
      out.max_tokens_set = true;
    }
  }
  b.reset();
  MTP_API_TRY(get_bool(body, "ignore_eos", b));
  opt.ignore_eos = b.value_or(false);
  MTP_API_TRY(parse_stop(body, d, out.stop));
  b.reset();
  MTP_API_TRY(get_bool(body, "return_token_sources", b));
  out.token_sources = b.value_or(false);
  MTP_API_TRY(parse_speculative(body, d, opt));
  // The prefix cache: llama-server's cache_prompt (default true); cache_salt keeps tenants apart (a request
  // reuses only what requests of the same salt left); OpenAI's prompt_cache_key is a routing hint, checked
  // and otherwise unused by a single server.
  b.reset();
  MTP_API_TRY(get_bool(body, "cache_prompt", b));
  opt.cache_prompt = b.value_or(true);
  std::optional<std::string> salt, key;
  MTP_API_TRY(get_string(body, "cache_salt", salt));
  MTP_API_TRY(get_string(body, "prompt_cache_key", key));
  opt.cache_namespace = salt.value_or("");

  // logprobs: completions {"logprobs": N}; chat {"logprobs": true, "top_logprobs": N}; llama-server n_probs.
  const Json* lp = field(body, "logprobs");
  if (chat) {
    b.reset();
    MTP_API_TRY(get_bool(body, "logprobs", b));
    out.logprobs = b.value_or(false);
    i.reset();
    MTP_API_TRY(get_int(body, "top_logprobs", 0, d.max_top_logprobs, i));
    if (i && !out.logprobs && *i > 0)
      return bad_request("'top_logprobs' requires 'logprobs': true", "top_logprobs");
    opt.n_probs = static_cast<int32_t>(i.value_or(0));
  } else if (lp != nullptr) {
    if (lp->is_boolean()) {
      out.logprobs = lp->get<bool>();
    } else {
      i.reset();
      MTP_API_TRY(get_int(body, "logprobs", 0, d.max_top_logprobs, i));
      out.logprobs = true;
      opt.n_probs = static_cast<int32_t>(*i);
    }
  }
  i.reset();
  MTP_API_TRY(get_int(body, "n_probs", 0, d.max_top_logprobs, i));
  if (i && *i > 0) {
    out.logprobs = true;
    opt.n_probs = static_cast<int32_t>(*i);
  }
  opt.logprobs = out.logprobs;
  return std::nullopt;
}

std::optional<ApiError> parse_completion_request(const Json& body, const RequestDefaults& d,
                                                 GenerationParams& out) {
  MTP_API_TRY(parse_common(body, d, /*chat=*/false, out));
  std::optional<bool> echo;
  MTP_API_TRY(get_bool(body, "echo", echo));
  if (echo.value_or(false)) return bad_request("'echo' is not supported by this server", "echo");
  if (const Json* s = field(body, "suffix");
      s && !(s->is_string() && s->get_ref<const std::string&>().empty()))
    return bad_request("'suffix' is not supported by this server", "suffix");

  const Json* p = field(body, "prompt");
  if (p == nullptr) return bad_request("'prompt' is required", "prompt");
  auto token_array = [&](const Json& arr, const std::string& name) -> Err {
    out.prompt_is_tokens = true;
    out.prompt_tokens.clear();
    for (size_t k = 0; k < arr.size(); ++k) {
      const Json& t = arr[k];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
          t.get<int64_t>() > std::numeric_limits<int32_t>::max())
        return bad_request(str_cat("'", name, "[", k, "]' must be a token id (a non-negative integer)"),
                           "prompt");
      out.prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return std::nullopt;
  };
  const Json* one = p;
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() != 1)
      return bad_request(str_cat("only one prompt per request is supported, got ", p->size()), "prompt");
    one = &p->front();
  }
  if (one->is_string()) {
    out.prompt_text = one->get<std::string>();
    if (out.prompt_text.empty()) return bad_request("'prompt' is empty", "prompt");
  } else if (one->is_array()) {
    MTP_API_TRY(token_array(*one, "prompt"));
    if (out.prompt_tokens.empty()) return bad_request("'prompt' is empty", "prompt");
  } else {
    return wrong_type("prompt", "a string or an array of token ids", *one);
  }
  return std::nullopt;
}

std::optional<ApiError> parse_native_completion_request(const Json& body, const RequestDefaults& d,
                                                        int32_t n_slots, GenerationParams& out) {
  MTP_API_TRY(parse_completion_request(body, d, out));
  std::optional<bool> return_tokens;
  MTP_API_TRY(get_bool(body, "return_tokens", return_tokens));
  out.return_tokens = return_tokens.value_or(false);
  std::optional<int64_t> id_slot;
  MTP_API_TRY(get_int(body, "id_slot", std::numeric_limits<int64_t>::min(),
                      std::numeric_limits<int64_t>::max(), id_slot));
  if (id_slot && (*id_slot < -1 || *id_slot >= n_slots))
    return bad_request(
        str_cat("'id_slot' must be -1 (any slot) or a slot id from 0 to ", n_slots - 1, ", got ", *id_slot),
        "id_slot");
  out.id_slot = id_slot.value_or(-1);
  return std::nullopt;
}

namespace {

// tool_choice: "auto" (the default), "none" (tools hidden from the template, calls not parsed), "required"
// (a call of one of the tools) or {"type": "function", "function": {"name": NAME}} (a call of that tool); the
// last two constrain the reply with a grammar, so they exclude the other constraints.
Err parse_tool_choice(const Json& tc, GenerationParams& out) {
  if (tc.is_string() && tc == "auto") return std::nullopt;
  if (tc.is_string() && tc == "none") {
    out.chat.tools = Json();
    out.parse_tool_calls = false;
    return std::nullopt;
  }
  const bool named = tc.is_object() && tc.value("type", Json()) == "function";
  if (!(tc.is_string() && tc == "required") && !named)
    return bad_request(
        str_cat("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                "\"function\": {\"name\": ...}}, got ",
                tc.dump()),
        "tool_choice");
  std::string name;
  if (named) {
    const auto fn = tc.find("function");
    if (fn == tc.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      return bad_request("'tool_choice.function.name' must be a string", "tool_choice");
    name = (*fn)["name"].get<std::string>();
  }
  if (out.chat.tools.is_null())
    return bad_request(str_cat("'tool_choice' ", tc.dump(), " needs 'tools'"), "tool_choice");
  if (named) {
    bool found = false;
    for (const Json& t : out.chat.tools)
      found = found || (t.is_object() && t.contains("function") && t["function"].is_object() &&
                        t["function"].value("name", Json()) == name);
    if (!found)
      return bad_request(
          str_cat("'tool_choice' names the function \"", name, "\", which 'tools' does not define"),
          "tool_choice");
  }
  if (out.options.grammar)
    return bad_request(
        "a forced 'tool_choice' and 'grammar', 'json_schema' or 'response_format' (json) "
        "cannot be combined",
        "tool_choice");
  out.forced_tool = std::move(name);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_chat_messages(const Json& body, const RequestDefaults& d,
                                            GenerationParams& out) {
  const Json* m = field(body, "messages");
  if (m == nullptr) return bad_request("'messages' is required", "messages");
  if (!m->is_array()) return wrong_type("messages", "an array", *m);
  if (m->empty()) return bad_request("'messages' must not be empty", "messages");
  out.chat.messages = *m;
  if (const Json* t = field(body, "tools")) {
    if (!t->is_array()) return wrong_type("tools", "an array", *t);
    if (!t->empty()) out.chat.tools = *t;
  }
  out.parse_tool_calls = true;
  if (const Json* tc = field(body, "tool_choice")) MTP_API_TRY(parse_tool_choice(*tc, out));
  std::optional<bool> parallel;
  MTP_API_TRY(get_bool(body, "parallel_tool_calls", parallel));
  out.parallel_tool_calls = parallel.value_or(false);
  out.chat.enable_thinking = d.enable_thinking;
  out.chat.extra_context = d.chat_template_kwargs.is_object() ? d.chat_template_kwargs : Json::object();
  if (const Json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) return wrong_type("chat_template_kwargs", "an object", *kw);
    out.chat.extra_context.update(*kw);  // the request's keys over the defaults
  }
  if (auto et = out.chat.extra_context.find("enable_thinking");
      et != out.chat.extra_context.end() && et->is_boolean())
    out.chat.enable_thinking = et->get<bool>();
  std::optional<bool> agp;
  MTP_API_TRY(get_bool(body, "add_generation_prompt", agp));
  out.chat.add_generation_prompt = agp.value_or(true);
  out.reasoning_format = d.reasoning_format;
  std::optional<std::string> rf;
  MTP_API_TRY(get_string(body, "reasoning_format", rf));
  if (rf) {
    if (*rf == "none") {
      out.reasoning_format = chat::ReasoningFormat::kNone;
    } else if (*rf == "deepseek" || *rf == "auto" || *rf == "deepseek-legacy") {
      out.reasoning_format = chat::ReasoningFormat::kDeepseek;
    } else {
      return bad_request(
          str_cat("'reasoning_format' must be \"none\", \"deepseek\" or \"auto\", got \"", *rf, "\""),
          "reasoning_format");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> parse_chat_request(const Json& body, const RequestDefaults& d,
                                           GenerationParams& out) {
  MTP_API_TRY(parse_common(body, d, /*chat=*/true, out));
  return parse_chat_messages(body, d, out);
}

bool model_matches(std::string_view requested, std::string_view alias, std::string_view path) {
  if (requested.empty() || requested == alias || requested == path) return true;
  const size_t slash = path.find_last_of('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return requested == base;
}

bool api_key_matches(std::string_view authorization, std::string_view x_api_key, std::string_view key) {
  std::string_view given = x_api_key;
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() > kBearer.size() && authorization.substr(0, kBearer.size()) == kBearer)
    given = authorization.substr(kBearer.size());
  // Compare every byte whatever the first difference, so the time does not tell how much of a key matched.
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  for (size_t k = 0; k < key.size(); ++k)
    diff |= static_cast<unsigned>(static_cast<unsigned char>(k < given.size() ? given[k] : 0) ^
                                  static_cast<unsigned char>(key[k]));
  return diff == 0 && !key.empty();
}

}  // namespace mtp::server
