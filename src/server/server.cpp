// The HTTP side of `mtp serve` (server.h): cpp-httplib routes, authentication, errors, streaming.
#include "server/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include "page.h"
#include "server/format.h"
#include "server/llama_api.h"
#include "server/tool_grammar.h"

namespace mtp::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kListenBacklog = 1024;  // pending connections the kernel queues for accept()
constexpr const char* kJson = "application/json; charset=utf-8";

void send_json(httplib::Response& res, int status, const Json& j) {
  res.status = status;
  res.set_content(dump_json(j), kJson);
}

void send_error(httplib::Response& res, const ApiError& e, int retry_after_s = 1) {
  if (e.status == 503 || e.status == 429) res.set_header("Retry-After", std::to_string(retry_after_s));
  send_json(res, e.status, e.to_json());
}

// The route a path is counted under in /metrics (unknown paths share one label, so that scans cannot grow
// the label set).
std::string endpoint_label(const std::string& path) {
  static const char* const kKnown[] = {"/",
                                       "/v1/completions",
                                       "/completions",
                                       "/v1/chat/completions",
                                       "/chat/completions",
                                       "/apply-template",
                                       "/tokenize",
                                       "/detokenize",
                                       "/v1/models",
                                       "/models",
                                       "/health",
                                       "/v1/health",
                                       "/metrics",
                                       "/props",
                                       "/completion",
                                       "/slots"};
  for (const char* k : kKnown)
    if (path == k) return k;
  return "other";
}

// The page holds no data: it asks for an API key itself when the server wants one.
bool is_public(const std::string& path) {
  return path == "/" || path == "/health" || path == "/v1/health" || path == "/v1/models" ||
         path == "/models";
}

const char* status_text(int status) {
  switch (status) {
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 413:
      return "request_too_large";
    case 414:
      return "uri_too_long";
    default:
      return "";
  }
}

// The request and response shapes a generation endpoint speaks.
enum class Api { kCompletions, kChat, kNative };

}  // namespace

struct Server::Impl {
  Impl(ServerConfig c, Backend& b, const Tokenizer& t, const chat::ChatTemplate& tm)
      : cfg(std::move(c)), backend(b), tok(t), tmpl(tm), loop(b, t, metrics, cfg.loop) {}

  void routes();
  void generate(const httplib::Request& req, httplib::Response& res, Api api);
  void stream(httplib::Response& res, std::shared_ptr<RequestChannel> ch, std::unique_ptr<GenerationParams> p,
              std::unique_ptr<ResponseFormatter> builder, std::unique_ptr<TraceEntry> trace);
  // Renders a chat body's messages; the error is a 400 naming the problem.
  std::optional<ApiError> render_chat(const GenerationParams& p, std::string& prompt) const;
  // The grammar of a tool call in the template's syntax: from the start under tool_choice "required" or a
  // named function, from the call's opening on under "auto" with tools (a lazy grammar).
  std::optional<ApiError> constrain_tool_calls(GenerationParams& p, const chat::OutputFormat& format) const;
  std::vector<int32_t> tokenize_prompt(const std::string& text) const;
  // The token positions where the last messages of a chat prompt begin (prefix-cache checkpoints).
  std::vector<int64_t> message_positions(const GenerationParams& p, const std::string& text,
                                         const std::vector<int32_t>& tokens) const;
  std::string model_id() const;

  ServerConfig cfg;
  Backend& backend;
  const Tokenizer& tok;
  const chat::ChatTemplate& tmpl;
  Metrics metrics;
  EngineLoop loop;
  httplib::Server http;
  std::thread listener;
  int port = -1;
  std::mutex shutdown_mu;
  bool started = false;
  bool shut = false;
  int64_t created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
};

std::string Server::Impl::model_id() const {
  if (!cfg.alias.empty()) return cfg.alias;
  const size_t slash = cfg.model_path.find_last_of('/');
  return slash == std::string::npos ? cfg.model_path : cfg.model_path.substr(slash + 1);
}

std::vector<int32_t> Server::Impl::tokenize_prompt(const std::string& text) const {
  EncodeOptions enc;
  enc.parse_special = true;
  // A template that writes the BOS token itself must not get a second one.
  if (tok.bos() && tok.vocab().add_bos && text.starts_with(tok.piece(*tok.bos()))) enc.add_bos = false;
  return tok.encode(text, enc);
}

std::vector<int64_t> Server::Impl::message_positions(const GenerationParams& p, const std::string& text,
                                                     const std::vector<int32_t>& tokens) const {
  // The messages new in a turn are the last few; earlier ones were checkpointed when they were new.
  constexpr size_t kLastMessages = 8;
  const std::vector<size_t> starts = tmpl.message_starts(p.chat, text, kLastMessages);
  std::vector<int64_t> out;
  if (starts.empty()) return out;
  // Byte offset of each token boundary (a BOS the tokenizer added is not in the text).
  size_t offset = 0, k = 0;
  const bool added_bos =
      !tokens.empty() && tok.bos() && tokens[0] == *tok.bos() && !text.starts_with(tok.piece(*tok.bos()));
  for (size_t t = added_bos ? 1 : 0; t < tokens.size() && k < starts.size(); ++t) {
    while (k < starts.size() && starts[k] < offset) ++k;  // inside a token: no boundary there
    if (k < starts.size() && starts[k] == offset) out.push_back(static_cast<int64_t>(t)), ++k;
    offset += tok.piece(tokens[t]).size();
  }
  return out;
}

std::optional<ApiError> Server::Impl::constrain_tool_calls(GenerationParams& p,
                                                           const chat::OutputFormat& format) const {
  // Under "auto" the reply is free until it opens a call (after its reasoning, where the output parser
  // looks for calls); another constraint of the request's own comes first.
  const bool lazy = !p.forced_tool && format.parse_tool_calls && !p.options.grammar;
  if (!p.forced_tool && !lazy) return std::nullopt;
  const ToolCallGrammarOptions options{tmpl.tool_call_syntax(), format.starts_in_reasoning && !lazy,
                                       p.parallel_tool_calls};
  Expected<std::string> gbnf = tool_call_gbnf(p.chat.tools, p.forced_tool.value_or(""), options);
  // A tool the schema compiler refuses leaves an "auto" reply unconstrained, as it was before lazy
  // grammars: the call is parsed when it is well formed.
  if (!gbnf.ok() && lazy) return std::nullopt;
  if (!gbnf.ok()) return bad_request(str_cat("'tools': ", gbnf.status().message()), "tools");
  Expected<grammar::Grammar> g = grammar::parse_gbnf(*gbnf);
  if (!g.ok() && lazy) return std::nullopt;
  if (!g.ok()) return bad_request(str_cat("'tools': ", g.status().message()), "tools");
  p.options.grammar = std::make_shared<const grammar::Grammar>(std::move(*g));
  if (lazy)
    p.options.grammar_trigger = RequestOptions::GrammarTrigger{
        std::string(kToolCallOpen), format.starts_in_reasoning ? std::string(kReasoningClose) : ""};
  return std::nullopt;
}

std::optional<ApiError> Server::Impl::render_chat(const GenerationParams& p, std::string& prompt) const {
  Expected<std::string> r = tmpl.render(p.chat);
  if (!r.ok()) {
    const bool template_error = r.status().message().rfind("line ", 0) == 0;
    return bad_request((template_error ? "the chat template failed: " : "") + r.status().message(),
                       template_error ? "" : "messages");
  }
  prompt = std::move(r).value();
  return std::nullopt;
}

void Server::Impl::generate(const httplib::Request& req, httplib::Response& res, Api api) {
  const bool chat = api == Api::kChat;
  Json body;
  auto p = std::make_unique<GenerationParams>();
  if (auto e = parse_json_body(req.body, body)) return send_error(res, *e);
  std::optional<ApiError> invalid;
  switch (api) {
    case Api::kChat:
      invalid = parse_chat_request(body, cfg.defaults, *p);
      break;
    case Api::kCompletions:
      invalid = parse_completion_request(body, cfg.defaults, *p);
      break;
    case Api::kNative:
      invalid = parse_native_completion_request(body, cfg.defaults, loop.n_slots(), *p);
      break;
  }
  if (invalid) return send_error(res, *invalid);
  if (!model_matches(p->model, model_id(), cfg.model_path)) {
    ApiError e = bad_request(
        str_cat("the model '", p->model, "' does not exist; this server serves '", model_id(), "'"), "model",
        "model_not_found");
    e.status = 404;
    return send_error(res, e);
  }
  GenerationJob job;
  std::optional<chat::OutputFormat> format;
  if (chat) {
    std::string text;
    if (auto e = render_chat(*p, text)) return send_error(res, *e);
    job.prompt = tokenize_prompt(text);
    if (p->options.cache_prompt) p->options.checkpoints = message_positions(*p, text, job.prompt);
    format = tmpl.output_format(p->chat, text, p->reasoning_format);
    format->parse_tool_calls = format->parse_tool_calls && p->parse_tool_calls;
    if (auto e = constrain_tool_calls(*p, *format)) return send_error(res, *e);
  } else if (p->prompt_is_tokens) {
    for (size_t i = 0; i < p->prompt_tokens.size(); ++i)
      if (!tok.valid_id(p->prompt_tokens[i]))
        return send_error(res,
                          bad_request(str_cat("'prompt[", i, "]' = ", p->prompt_tokens[i],
                                              " is not a token id (the vocabulary has ", tok.n_tokens(), ")"),
                                      "prompt"));
    job.prompt = p->prompt_tokens;
  } else {
    job.prompt = tokenize_prompt(p->prompt_text);
  }
  const int64_t n_prompt = static_cast<int64_t>(job.prompt.size());
  const int64_t n_ctx = cfg.defaults.n_ctx;
  if (n_prompt == 0)
    return send_error(res, bad_request("the prompt has no tokens", chat ? "messages" : "prompt"));
  if (n_prompt >= n_ctx)
    return send_error(res, bad_request(str_cat("the prompt has ", n_prompt, " tokens; the context holds ",
                                               n_ctx, " (prompt and completion together)"),
                                       chat ? "messages" : "prompt", "context_length_exceeded"));
  if (p->max_tokens_set && n_prompt + p->options.max_tokens > n_ctx)
    return send_error(
        res, bad_request(str_cat("the prompt (", n_prompt, " tokens) plus max_tokens (",
                                 p->options.max_tokens, ") exceeds the context of ", n_ctx, " tokens"),
                         "max_tokens", "context_length_exceeded"));
  // The server's default n_predict is cut to what the context leaves. Without any limit the request stays
  // unlimited (-1): the engine ends it when the context is full, and the drafting policy, seeing no length,
  // expects it to run as long as the requests that ended lately did, not to the end of the context.
  if (p->options.max_tokens >= 0 && n_prompt + p->options.max_tokens > n_ctx)
    p->options.max_tokens = n_ctx - n_prompt;
  job.options = p->options;
  job.stop = p->stop;
  job.may_draft = cfg.defaults.drafting &&
                  (p->options.speculative ? p->options.speculative->n_max : cfg.defaults.draft.n_max) > 0;

  auto submitted = loop.submit(std::move(job));
  if (auto* e = std::get_if<ApiError>(&submitted)) return send_error(res, *e, cfg.loop.retry_after_s);
  std::shared_ptr<RequestChannel> ch = std::get<std::shared_ptr<RequestChannel>>(std::move(submitted));
  // Accepted: from here on the request is recorded, whatever becomes of it.
  std::unique_ptr<TraceEntry> trace;
  if (cfg.recorder)
    trace = std::make_unique<TraceEntry>(cfg.recorder, cfg.recorder->begin(body, chat), n_prompt);
  std::unique_ptr<ResponseFormatter> builder;
  if (api == Api::kNative) {
    builder = std::make_unique<NativeResponseBuilder>(*p, tok, model_id(), n_prompt, n_ctx);
  } else {
    builder = std::make_unique<ResponseBuilder>(*p, tok, model_id(), n_prompt, std::move(format));
  }
  if (p->stream) return stream(res, std::move(ch), std::move(p), std::move(builder), std::move(trace));

  std::vector<Update> updates;
  for (;;) {
    updates.clear();
    ch->wait(updates, std::chrono::milliseconds(500));
    for (const Update& u : updates) {
      if (u.error) {
        if (trace) trace->finish(builder->completion_tokens(), "error", builder->answer());
        return send_error(res, *u.error, cfg.loop.retry_after_s);
      }
      builder->add(u);
      if (!u.done) continue;
      if (trace) trace->finish(builder->completion_tokens(), builder->finish_reason(), builder->answer());
      for (const std::string& w : builder->warnings())
        std::fprintf(stderr, "mtp serve: warning: %s\n", w.c_str());
      return send_json(res, 200, builder->result());
    }
  }
}

void Server::Impl::stream(httplib::Response& res, std::shared_ptr<RequestChannel> ch,
                          std::unique_ptr<GenerationParams> p, std::unique_ptr<ResponseFormatter> builder,
                          std::unique_ptr<TraceEntry> trace) {
  struct State {
    std::unique_ptr<GenerationParams> params;  // the builder refers to it
    std::unique_ptr<ResponseFormatter> builder;
    std::shared_ptr<RequestChannel> ch;
    std::unique_ptr<TraceEntry> trace;  // null when not recording
    void record(const char* reason) {
      if (trace)
        trace->finish(builder->completion_tokens(), reason != nullptr ? reason : builder->finish_reason(),
                      builder->answer());
    }
    // A stream that ends otherwise (the client went away, the server stopped) is recorded as cancelled, with
    // the tokens generated until then; finish() is once only.
    ~State() { record("cancelled"); }
  };
  auto st = std::make_shared<State>();
  st->params = std::move(p);
  st->trace = std::move(trace);
  st->builder = std::move(builder);
  st->ch = std::move(ch);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // One provider call writes the whole stream, so a server stop() does not cut it short (httplib checks for
  // shutdown only between calls); the engine loop's cancel_all() ends it instead.
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          if (sink.write(s.data(), s.size())) return true;
          st->ch->cancel();  // the client went away: free the slot
          return false;
        };
        if (std::optional<Json> first = st->builder->first_chunk(); first && !write(sse_event(*first)))
          return false;
        // OpenAI's streams end with [DONE]; llama-server's /completion ends with its "stop": true event.
        auto end = [&] { return !st->builder->ends_with_done() || write(kSseDone); };
        std::vector<Update> updates;
        for (;;) {
          updates.clear();
          st->ch->wait(updates, std::chrono::milliseconds(500));
          for (const Update& u : updates) {
            if (u.error) {
              st->record("error");
              if (!write(sse_event(u.error->to_json())) || !end()) return false;
              sink.done();
              return true;
            }
            for (const Json& c : st->builder->chunks(u))
              if (!write(sse_event(c))) return false;
            if (u.done) {
              st->record(nullptr);
              for (const std::string& w : st->builder->warnings())
                std::fprintf(stderr, "mtp serve: warning: %s\n", w.c_str());
              if (!end()) return false;
              sink.done();
              return true;
            }
          }
        }
      },
      [st](bool success) {
        if (!success) st->ch->cancel();
      });
}

void Server::Impl::routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (cfg.api_key.empty() || is_public(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    if (api_key_matches(req.get_header_value("Authorization"), req.get_header_value("X-Api-Key"),
                        cfg.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = 401;
    e.type = "authentication_error";
    e.code = "invalid_api_key";
    e.message = req.has_header("Authorization") || req.has_header("X-Api-Key")
                    ? "invalid API key"
                    : "an API key is required: send \"Authorization: Bearer KEY\"";
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.status = res.status;
    e.code = status_text(res.status);
    if (res.status == 404) {
      e.message = str_cat("no endpoint ", req.method, " ", req.path);
    } else if (res.status == 413) {
      e.message = str_cat("the request body is larger than the limit of ", cfg.max_body_bytes, " bytes");
    } else {
      e.message = str_cat("HTTP ", res.status);
      if (res.status >= 500) e.type = "server_error";
    }
    send_json(res, res.status, e.to_json());
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, server_error(500, "internal error: " + what));
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.on_response(endpoint_label(req.path), res.status);
    if (cfg.log_requests)
      std::fprintf(stderr, "mtp serve: %s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
  });

  // llama-server serves its native API at /completions too; here that path is OpenAI's (as it always was),
  // so the native one is /completion only.
  for (const char* path : {"/v1/completions", "/completions"})
    http.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, Api::kCompletions);
    });
  for (const char* path : {"/v1/chat/completions", "/chat/completions"})
    http.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, Api::kChat);
    });
  http.Post("/completion", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Api::kNative);
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(chat_page().data(), chat_page().size(), "text/html; charset=utf-8");
  });
  http.Get("/slots", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, slots_json(loop.slots(), cfg.defaults.n_ctx));
  });
  http.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    Json body;
    GenerationParams p;
    if (auto e = parse_json_body(req.body, body)) return send_error(res, *e);
    if (auto e = parse_chat_messages(body, cfg.defaults, p)) return send_error(res, *e);
    std::string prompt;
    if (auto e = render_chat(p, prompt)) return send_error(res, *e);
    send_json(res, 200, Json{{"prompt", prompt}});
  });
  http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    Json body;
    if (auto e = parse_json_body(req.body, body)) return send_error(res, *e);
    auto c = body.find("content");
    if (c == body.end() || !c->is_string())
      return send_error(res, bad_request("'content' must be a string", "content"));
    bool special = true;
    if (auto s = body.find("parse_special"); s != body.end()) {
      if (!s->is_boolean())
        return send_error(res, bad_request("'parse_special' must be a boolean", "parse_special"));
      special = s->get<bool>();
    }
    EncodeOptions enc;
    enc.parse_special = special;
    enc.add_bos = false;
    send_json(res, 200, Json{{"tokens", tok.encode(c->get<std::string>(), enc)}});
  });
  http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    Json body;
    if (auto e = parse_json_body(req.body, body)) return send_error(res, *e);
    auto t = body.find("tokens");
    if (t == body.end() || !t->is_array())
      return send_error(res, bad_request("'tokens' must be an array", "tokens"));
    std::vector<int32_t> ids;
    for (const Json& v : *t) {
      if (!v.is_number_integer() || !tok.valid_id(static_cast<int32_t>(v.get<int64_t>())) ||
          v.get<int64_t>() != static_cast<int32_t>(v.get<int64_t>()))
        return send_error(res, bad_request("'tokens' must hold token ids of this vocabulary", "tokens"));
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    send_json(res, 200, Json{{"content", tok.decode(ids)}});
  });

  auto models = [this](const httplib::Request&, httplib::Response& res) {
    Json m = Json{{"id", model_id()},
                  {"object", "model"},
                  {"created", created},
                  {"owned_by", "mtp.cpp"},
                  {"meta", Json{{"path", cfg.model_path}, {"n_ctx", cfg.defaults.n_ctx}}}};
    send_json(res, 200, Json{{"object", "list"}, {"data", Json::array({m})}});
  };
  http.Get("/v1/models", models);
  http.Get("/models", models);
  auto health = [this](const httplib::Request&, httplib::Response& res) {
    const Gauges g = loop.gauges();
    const bool ok = loop.healthy();
    send_json(res, ok ? 200 : 500,
              Json{{"status", ok ? "ok" : "error"},
                   {"slots_idle", g.slots_total - g.slots_busy},
                   {"slots_processing", g.slots_busy},
                   {"queue_length", g.queue_length}});
  };
  http.Get("/health", health);
  http.Get("/v1/health", health);
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(loop.gauges()), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    Json j = cfg.props;
    const Gauges g = loop.gauges();
    j["model_alias"] = model_id();
    j["total_slots"] = g.slots_total;
    j["slots_busy"] = g.slots_busy;
    j["queue_length"] = g.queue_length;
    j["chat_template"] = tmpl.source();
    j["chat_template_builtin_chatml"] = tmpl.is_fallback();
    add_llama_props(j, cfg.defaults);
    send_json(res, 200, j);
  });
}

Server::Server(ServerConfig config, Backend& backend, const Tokenizer& tokenizer,
               const chat::ChatTemplate& chat_template)
    : impl_(std::make_unique<Impl>(std::move(config), backend, tokenizer, chat_template)) {}

Server::~Server() {
  shutdown();
}

Status Server::start() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.shutdown_mu);
  if (s.started) return Status::Ok();
  const int n_threads = s.cfg.http_threads > 0
                            ? s.cfg.http_threads
                            : s.backend.n_slots() + static_cast<int>(s.cfg.loop.max_queue) + 8;
  s.http.new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
  s.http.set_payload_max_length(s.cfg.max_body_bytes);
  s.http.set_keep_alive_max_count(1000);
  s.http.set_keep_alive_timeout(5);
  s.http.set_read_timeout(10);
  s.http.set_write_timeout(10);
  // Each SSE event is its own small write: without TCP_NODELAY, Nagle's algorithm holds every event after
  // the first until the client acknowledges it (up to its delayed-ACK time, 40 ms on Linux), so a stream
  // arrives in bursts and TTFT grows by that delay.
  s.http.set_tcp_nodelay(true);
  // Debian's cpp-httplib (a compiled library) listens with a backlog of 5: 64 clients reconnecting at once
  // overflowed the accept queue. The listening socket is remembered here (this replaces httplib's default
  // option, SO_REUSEADDR, so that is set too) and listen() is called again with a deeper queue after the
  // bind; the kernel caps it at net.core.somaxconn.
  auto listening = std::make_shared<int>(-1);
  s.http.set_socket_options([listening](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    *listening = static_cast<int>(sock);
  });
  s.routes();
  if (s.cfg.port == 0) {
    s.port = s.http.bind_to_any_port(s.cfg.host);
    if (s.port < 0) return io_error("cannot bind ", s.cfg.host, " on an ephemeral port");
  } else {
    if (!s.http.bind_to_port(s.cfg.host, s.cfg.port))
      return io_error("cannot bind ", s.cfg.host, ":", s.cfg.port,
                      " (in use, or not an address of this machine)");
    s.port = s.cfg.port;
  }
  if (*listening >= 0) ::listen(*listening, kListenBacklog);
  s.loop.start();
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  while (!s.http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.started = true;
  return Status::Ok();
}

int Server::port() const {
  return impl_->port;
}

void Server::shutdown() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.shutdown_mu);
  if (s.shut) return;
  s.shut = true;
  if (!s.started) return;
  s.loop.drain();  // new requests and queued ones: 503
  s.http.stop();   // no new connections; the running handlers continue
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(s.cfg.shutdown_timeout_s * 1e3));
  s.loop.wait_idle(deadline);
  s.loop.cancel_all();
  if (s.listener.joinable()) s.listener.join();  // every HTTP thread has ended
  s.loop.stop();
}

Metrics& Server::metrics() {
  return impl_->metrics;
}
const ServerConfig& Server::config() const {
  return impl_->cfg;
}

}  // namespace mtp::server
