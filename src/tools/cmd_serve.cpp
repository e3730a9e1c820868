// `mtp serve -m MODEL`: the OpenAI-compatible multi-slot server (src/server, docs/architecture.md sections
// 5-6).
//
// Flags follow `mtp run` for speculation and llama-server's spellings where the meaning is the same, so the
// seed's command line runs with minimal edits. GPU-only flags (-ngl, --flash-attn, ...) are accepted with a
// one-line notice. The effective configuration is printed at start and served by GET /props.
//
// SIGINT / SIGTERM: stop accepting, let running requests finish for --shutdown-timeout seconds, cancel the
// rest, exit 0. A second signal during that wait exits at once (status 1).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "base/system_memory.h"
#include "chat/chat_template.h"
#include "command.h"
#include "engine/engine.h"
#include "engine/prefix_cache.h"
#include "kernels/isa.h"
#include "model/model.h"
#include "server/props.h"
#include "server/server.h"
#include "speculative_args.h"
#include "tokenizer/tokenizer.h"

namespace mtp::tools {
namespace {

struct ServeArgs {
  std::string model, head;
  int n_slots = 1;
  int64_t n_ctx = 4096;
  int n_batch = 2048, n_ubatch = 512;
  int threads = 0, threads_http = 0;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key, alias;
  // Speculation (as `mtp run`), with llama-server's spellings mapped onto the same fields.
  std::string spec = "none";
  std::string spec_type;  // llama-server: draft-mtp | none
  int draft_max = 3, draft_min = 0;
  float draft_p_min = 0.0f;
  bool draft_sample = false;
  int64_t draft_vocab = 0;
  std::string draft_vocab_file;
  std::string cache_type_k = "f32", cache_type_v = "f32";
  KvCacheTypes kv;  // the two above, parsed by validate()
  int max_drafting_slots = -1;
  std::string spec_policy = "fixed";
  std::string draft_head = "auto";
  std::optional<speculative::DraftHead> head_choice;  // draft_head, parsed by validate()
  // The prefix cache: --cache-ram MiB (unset: 8192, at most a quarter of physical memory; 0: off; -1: half
  // of physical memory), --cache-checkpoint-every N tokens.
  std::optional<int64_t> cache_ram_mib;
  int64_t checkpoint_every = 4096;
  int64_t checkpoint_min_gap = 64;
  uint64_t cache_ram_bytes = 0;  // resolved by validate()
  // Defaults of requests.
  float temp = 0.8f, top_p = 0.95f, min_p = 0.05f;
  int top_k = 40;
  int64_t seed = -1, n_predict = -1;
  std::string reasoning = "auto", reasoning_format = "deepseek";
  std::string chat_template_kwargs;  // JSON object text
  server::Json template_kwargs = server::Json::object();
  std::string chat_template_file;
  // Server limits.
  size_t max_queue = 64;
  size_t max_body = size_t{8} << 20;
  double shutdown_timeout = 10;
  bool log_requests = false;
  bool log_steps = false;
  // --record FILE: append every accepted generation request to this trace (docs/bench.md); --record-redact
  // keeps lengths and parameters only; --record-answers adds each answer (redacted: its lengths).
  std::string record;
  bool record_redact = false;
  bool record_answers = false;
  // Accepted for compatibility; reported.
  std::vector<std::string> notices;
  std::string env_error;  // a malformed environment setting, refused like a bad flag
};

Expected<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Expected<chat::ChatTemplate> load_template(const ServeArgs& a, const Model& model, const Tokenizer& tok,
                                           std::string& origin) {
  const std::string bos = tok.bos() ? tok.piece(*tok.bos()) : "";
  const std::string eos = tok.eos() ? tok.piece(*tok.eos()) : "";
  if (!a.chat_template_file.empty()) {
    MTP_ASSIGN_OR_RETURN(std::string src, read_text(a.chat_template_file));
    auto t = chat::ChatTemplate::create(src, bos, eos);
    if (!t.ok()) return t.status().with_context(a.chat_template_file);
    origin = a.chat_template_file;
    return t;
  }
  const GgufFile* f = model.file();
  if (f != nullptr && f->metadata().contains("tokenizer.chat_template")) {
    MTP_ASSIGN_OR_RETURN(std::string src, f->metadata().get_string("tokenizer.chat_template"));
    auto t = chat::ChatTemplate::create(src, bos, eos);
    if (!t.ok()) return t.status().with_context(a.model + ": tokenizer.chat_template");
    origin = "the model's tokenizer.chat_template";
    return t;
  }
  origin = "built-in ChatML (the model has no tokenizer.chat_template)";
  return chat::ChatTemplate::chatml(bos, eos.empty() ? "<|im_end|>" : eos);
}

Status validate(ServeArgs& a) {
  if (!a.env_error.empty()) return invalid_argument(a.env_error);
  if (a.reasoning_format == "auto") a.reasoning_format = "deepseek";  // what runs, so /props says it
  if (!a.chat_template_kwargs.empty()) {
    a.template_kwargs = server::Json::parse(a.chat_template_kwargs, nullptr, /*allow_exceptions=*/false);
    if (!a.template_kwargs.is_object())
      return invalid_argument("--chat-template-kwargs must be a JSON object, got '", a.chat_template_kwargs,
                              "'");
    // --reasoning on|off is the same variable: both given, they must agree.
    if (auto et = a.template_kwargs.find("enable_thinking"); et != a.template_kwargs.end() &&
                                                             et->is_boolean() && a.reasoning != "auto" &&
                                                             et->get<bool>() != (a.reasoning == "on"))
      return invalid_argument("--reasoning ", a.reasoning, " and --chat-template-kwargs enable_thinking ",
                              et->dump(), " disagree");
  }
  if (a.n_slots < 1) return invalid_argument("-np must be >= 1, got ", a.n_slots);
  if (a.n_ctx < 2) return invalid_argument("-c must be >= 2, got ", a.n_ctx);
  if (a.n_batch < 1 || a.n_ubatch < 1) return invalid_argument("-b and -ub must be >= 1");
  if (a.port < 0 || a.port > 65535) return invalid_argument("--port must be in 0..65535, got ", a.port);
  if (!a.spec_type.empty()) {
    if (a.spec_type == "draft-mtp" || a.spec_type == "mtp") {
      a.spec = "mtp";
    } else if (a.spec_type == "none") {
      a.spec = "none";
    } else {
      return invalid_argument("--spec-type: only draft-mtp and none are supported, got '", a.spec_type, "'");
    }
  }
  MTP_ASSIGN_OR_RETURN(a.kv, check_spec_args(a.spec, a.head, a.draft_vocab, a.draft_vocab_file,
                                             a.cache_type_k, a.cache_type_v));
  MTP_ASSIGN_OR_RETURN(a.head_choice, parse_draft_head(a.draft_head, a.spec, a.draft_vocab));
  // The engine's own checks of these options, before the model loads.
  MTP_RETURN_IF_ERROR(speculative::check_draft_params({a.draft_max, a.draft_min, a.draft_p_min}));
  SamplerOptions sampling;
  sampling.temperature = a.temp, sampling.top_p = a.top_p, sampling.min_p = a.min_p;
  MTP_RETURN_IF_ERROR(check_sampler_options(sampling, 0));
  if (a.n_predict == 0 || a.n_predict < -1) return invalid_argument("-n must be -1 (no limit) or >= 1");
  // The HTTP pool holds a thread per queued request.
  if (a.max_queue < 1 || a.max_queue > 4096)
    return invalid_argument("--queue must be in 1..4096, got ", a.max_queue);
  if (a.max_body < 1024) return invalid_argument("--max-body must be >= 1024 bytes");
  if (!(a.shutdown_timeout >= 0 && a.shutdown_timeout <= 86400))
    return invalid_argument("--shutdown-timeout must be in 0..86400 s");
  MTP_ASSIGN_OR_RETURN(a.cache_ram_bytes, prefix_cache_budget(a.cache_ram_mib, physical_memory_bytes(), 0));
  if (a.record_redact && a.record.empty()) return invalid_argument("--record-redact needs --record FILE");
  if (a.record_answers && a.record.empty()) return invalid_argument("--record-answers needs --record FILE");
  if (a.checkpoint_min_gap < 1)
    return invalid_argument("--cache-checkpoint-min-gap must be >= 1 token, got ", a.checkpoint_min_gap);
  if (a.checkpoint_every < 0)
    return invalid_argument("--cache-checkpoint-every must be >= 0 tokens (0: none), got ",
                            a.checkpoint_every);
  return Status::Ok();
}

int serve(ServeArgs& a) {
  auto fail = [](const Status& s) { return report_error("serve", s); };
  if (Status s = validate(a); !s.ok()) return fail(s);
  for (const std::string& n : a.notices) std::fprintf(stderr, "mtp serve: note: %s\n", n.c_str());
  // Opened before the model loads, so a path that cannot be written fails at once.
  std::shared_ptr<server::TraceRecorder> recorder;
  if (!a.record.empty()) {
    auto r = server::TraceRecorder::open(a.record, a.record_redact, a.record_answers);
    if (!r.ok()) return fail(r.status());
    recorder = std::move(r).value();
  }

  // Every thread created from here on inherits this mask, so the signals reach only sigwait below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ThreadPool pool(a.threads);
  auto model = Model::load(a.model, a.head, &pool);
  if (!model.ok()) return fail(model.status());
  if (model->vocab().tokens.empty()) return fail(unsupported(a.model, ": the file has no tokenizer"));
  auto tok = Tokenizer::create(model->vocab());
  if (!tok.ok()) return fail(tok.status().with_context(a.model));
  std::string template_origin;
  auto tmpl = load_template(a, *model, *tok, template_origin);
  if (!tmpl.ok()) return fail(tmpl.status());

  EngineOptions eo;
  eo.n_ctx = a.n_ctx;
  eo.n_slots = a.n_slots;
  eo.n_batch = std::min(a.n_batch, a.n_ubatch);
  eo.spec = a.spec == "mtp" ? SpecType::kMtp : SpecType::kNone;
  eo.draft = {a.draft_max, a.draft_min, a.draft_p_min};
  eo.draft.sample = a.draft_sample;
  eo.policy.kind = a.spec_policy == "auto" ? speculative::PolicyKind::kAuto : speculative::PolicyKind::kFixed;
  eo.policy.max_drafting_slots = a.max_drafting_slots;
  eo.head_path = a.head;
  eo.draft_vocab = a.draft_vocab;
  eo.draft_vocab_file = a.draft_vocab_file;
  eo.draft_head = a.head_choice;
  eo.cache_type_k = a.kv.k;
  eo.cache_type_v = a.kv.v;
  eo.end_tokens = default_end_tokens(model->vocab());
  eo.n_sample = tok->n_tokens();
  // The grammar's vocabulary trie now, not in the engine loop's first grammar step.
  eo.prepare_grammar = true;
  // Now that the model is loaded, the default budget leaves room for what it took.
  const uint64_t available = available_memory_bytes();
  if (auto budget = prefix_cache_budget(a.cache_ram_mib, physical_memory_bytes(), available); budget.ok())
    a.cache_ram_bytes = *budget;
  eo.cache.ram_bytes = a.cache_ram_bytes;
  eo.cache.checkpoint_every = a.checkpoint_every;
  eo.cache.checkpoint_min_gap = a.checkpoint_min_gap;
  auto engine = Engine::create(*model, eo, pool);
  if (!engine.ok()) return fail(engine.status());
  // What the engine resolved (the subset head's size, the heads auto chooses from), for /props and the
  // banner.
  eo.draft_vocab = (*engine)->draft_vocab_size();
  eo.policy = (*engine)->policy().options();
  server::EngineBackend backend(**engine);

  server::ServerConfig cfg;
  cfg.host = a.host;
  cfg.port = a.port;
  cfg.api_key = a.api_key;
  cfg.model_path = a.model;
  cfg.alias = a.alias;
  cfg.max_body_bytes = a.max_body;
  cfg.http_threads = a.threads_http;
  cfg.loop.max_queue = a.max_queue;
  cfg.loop.log_steps = a.log_steps;
  cfg.loop.log_cache = a.log_requests;
  cfg.shutdown_timeout_s = a.shutdown_timeout;
  cfg.log_requests = a.log_requests;
  cfg.recorder = recorder;
  server::RequestDefaults& d = cfg.defaults;
  d.sampling.temperature = a.temp;
  d.sampling.top_k = a.top_k;
  d.sampling.top_p = a.top_p;
  d.sampling.min_p = a.min_p;
  d.seed = a.seed;
  d.n_predict = a.n_predict;
  d.draft = eo.draft;
  d.drafting = eo.spec == SpecType::kMtp;
  d.draft_vocab = eo.draft_vocab;
  d.n_ctx = a.n_ctx;
  d.reasoning_format =
      a.reasoning_format == "none" ? chat::ReasoningFormat::kNone : chat::ReasoningFormat::kDeepseek;
  if (a.reasoning != "auto") d.enable_thinking = a.reasoning == "on";
  d.chat_template_kwargs = a.template_kwargs;
  server::PropsInfo info;
  info.version = std::string("mtp.cpp ") + MTP_VERSION;
  info.kernels = kernels::kernels_summary();
  info.threads = pool.size();
  info.total_slots = a.n_slots;
  info.n_batch = a.n_batch;
  info.n_ubatch = a.n_ubatch;
  info.cache_type_k = a.cache_type_k;
  info.cache_type_v = a.cache_type_v;
  info.chat_template_origin = template_origin;
  info.compatibility_notices = a.notices;
  info.resident_bytes = resident_bytes();
  info.packed_weights_bytes = model->packed_bytes();
  info.available_bytes = available;
  info.prefix_cache_budget_bytes = a.cache_ram_bytes;
  cfg.props = server::build_props(cfg, eo, info);
  server::Server srv(cfg, backend, *tok, *tmpl);
  std::fputs(server::describe_props(
                 cfg.props, cfg.alias.empty() ? a.model.substr(a.model.find_last_of('/') + 1) : cfg.alias)
                 .c_str(),
             stdout);
  if (recorder)
    std::printf("  recording requests%s to %s%s\n", a.record_answers ? " and answers" : "", a.record.c_str(),
                a.record_redact ? " (redacted: lengths only)" : "");
  if (Status s = srv.start(); !s.ok()) return fail(s);
  std::printf("mtp serve: listening on http://%s:%d\n", a.host.c_str(), srv.port());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "mtp serve: %s: shutting down (in-flight requests get %.3g s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", a.shutdown_timeout);
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    srv.shutdown();
    done = true;
    kill(getpid(), SIGTERM);  // wakes the sigwait below
  });
  sigwait(&signals, &sig);
  if (!done) {
    std::fprintf(stderr, "mtp serve: second signal: exiting now\n");
    std::_Exit(kExitRuntimeError);
  }
  stopper.join();
  std::fprintf(stderr, "mtp serve: stopped\n");
  return kExitOk;
}

// A flag accepted for llama-server compatibility that changes nothing here: noted once at start.
void accept_noop(CLI::App* cmd, ServeArgs* a, const std::string& names, const std::string& why,
                 bool takes_value) {
  const std::string flag = names.substr(0, names.find(','));
  if (takes_value) {
    cmd->add_option_function<std::string>(
           names, [a, flag, why](const std::string& v) { a->notices.push_back(flag + " " + v + ": " + why); },
           "Accepted for llama-server compatibility: " + why)
        ->expected(1);
  } else {
    cmd->add_flag_function(
        names, [a, flag, why](int64_t) { a->notices.push_back(flag + ": " + why); },
        "Accepted for llama-server compatibility: " + why);
  }
}

// llama-server's single-dash long flags (-np, -ub, ...), which CLI11 cannot declare, as their long forms.
std::vector<std::string> normalize_args(const std::vector<std::string>& in) {
  static const std::pair<const char*, const char*> kLong[] = {{"-np", "--parallel"},
                                                              {"-ub", "--ubatch-size"},
                                                              {"-md", "--model-draft"},
                                                              {"-ngl", "--n-gpu-layers"},
                                                              {"-ngld", "--n-gpu-layers-draft"},
                                                              {"-cb", "--cont-batching"},
                                                              {"-nocb", "--no-cont-batching"},
                                                              {"-kvu", "--kv-unified"},
                                                              {"-ctk", "--cache-type-k"},
                                                              {"-ctv", "--cache-type-v"},
                                                              {"-fa", "--flash-attn"}};
  std::vector<std::string> out;
  for (size_t i = 0; i < in.size(); ++i) {
    std::string arg = in[i];
    for (const auto& [s, l] : kLong)
      if (arg == s) arg = l;
    if (arg == "--flash-attn") {  // a flag in older llama-server, on|off|auto in newer ones
      const bool has_value =
          i + 1 < in.size() && (in[i + 1] == "on" || in[i + 1] == "off" || in[i + 1] == "auto" ||
                                in[i + 1] == "1" || in[i + 1] == "0");
      arg += "=" + (has_value ? in[++i] : std::string("on"));
    }
    out.push_back(arg);
  }
  return out;
}

void add_options(CLI::App& cmd, ServeArgs* a) {
  cmd.add_option("-m,--model", a->model, "GGUF model file (qwen35moe)")->required();
  cmd.add_option("--head,--model-draft", a->head,
                 "GGUF with the MTP head to draft with (default: the model's own MTP block); -md too");
  cmd.add_option("--parallel", a->n_slots, "Slots: requests generated at once (-np)")->capture_default_str();
  cmd.add_option("-c,--ctx-size", a->n_ctx, "KV positions shared by all slots")->capture_default_str();
  cmd.add_option("-b,--batch-size", a->n_batch, "Logical batch size")->capture_default_str();
  cmd.add_option("--ubatch-size", a->n_ubatch, "Physical batch (-ub); an engine step runs min(-b, -ub) rows")
      ->capture_default_str();
  cmd.add_option("-t,--threads", a->threads, "Compute threads (default: all cores)");
  cmd.add_option("--threads-http", a->threads_http, "HTTP threads (default: slots + queue + 8)");
  cmd.add_option("--host", a->host, "Address to bind")->capture_default_str();
  cmd.add_option("--port", a->port, "Port (0: any free port; the bound one is printed)")
      ->capture_default_str();
  cmd.add_option("--api-key", a->api_key, "Require this key (Authorization: Bearer KEY)");
  cmd.add_option("-a,--alias", a->alias, "Model name clients see (default: the file name)");
  cmd.add_option("--spec", a->spec, "Speculative decoding: none | mtp")
      ->check(CLI::IsMember({"none", "mtp"}))
      ->capture_default_str();
  cmd.add_option("--spec-type", a->spec_type, "llama-server spelling of --spec: draft-mtp | none");
  cmd.add_option("--draft-max,--spec-draft-n-max,--draft,--draft-n", a->draft_max, "Draft at most N tokens")
      ->capture_default_str();
  cmd.add_option("--draft-min,--spec-draft-n-min,--draft-n-min", a->draft_min, "Drop drafts shorter than N")
      ->capture_default_str();
  cmd.add_option("--draft-p-min,--spec-draft-p-min", a->draft_p_min,
                 "Stop drafting below this top-candidate probability")
      ->capture_default_str();
  cmd.add_flag("--draft-sample", a->draft_sample,
               "Requests that sample draft by sampling the MTP head, drafts kept by rejection sampling (more "
               "kept, the same distribution; a seed's text differs from drafting off)");
  cmd.add_option("--draft-vocab", a->draft_vocab, "Draft over this many ids (0: the whole vocabulary)");
  cmd.add_option("--draft-vocab-file", a->draft_vocab_file, "Ranked ids for --draft-vocab (mtp draft-vocab)");
  cmd.add_option("--draft-head", a->draft_head,
                 "full | subset | auto: the draft head; auto with --spec-policy auto chooses per batch size "
                 "between the full head and a subset (--draft-vocab N, else 16384 ids of a vocabulary of "
                 "65536 or more)")
      ->capture_default_str();
  cmd.add_option("--cache-type-k", a->cache_type_k, "KV cache format of keys: f32, f16 or q8_0")
      ->capture_default_str();
  cmd.add_option("--cache-type-v", a->cache_type_v, "KV cache format of values: f32, f16 or q8_0")
      ->capture_default_str();
  cmd.add_option("--spec-max-drafting-slots", a->max_drafting_slots,
                 "A slot drafts only while at most N slots generate (default: no limit, or the environment's "
                 "LLAMA_SPEC_MAX_DRAFTING_SLOTS)");
  cmd.add_option("--spec-policy", a->spec_policy, "fixed | auto (per-step draft lengths from measured cost)")
      ->check(CLI::IsMember({"fixed", "auto"}))
      ->capture_default_str();
  cmd.add_option("--temp", a->temp, "Default temperature")->capture_default_str();
  cmd.add_option("--top-k", a->top_k, "Default top-k (0: all)")->capture_default_str();
  cmd.add_option("--top-p", a->top_p, "Default top-p")->capture_default_str();
  cmd.add_option("--min-p", a->min_p, "Default min-p")->capture_default_str();
  cmd.add_option("-s,--seed", a->seed, "Default seed (-1: random per request)")->capture_default_str();
  cmd.add_option("-n,--n-predict", a->n_predict, "Default max tokens (-1: until the context is full)")
      ->capture_default_str();
  cmd.add_option("--reasoning", a->reasoning, "on | off | auto: the template's enable_thinking")
      ->check(CLI::IsMember({"on", "off", "auto"}))
      ->capture_default_str();
  cmd.add_option("--reasoning-format", a->reasoning_format,
                 "deepseek: thinking in reasoning_content; none: left in content")
      ->check(CLI::IsMember({"none", "deepseek", "auto"}))
      ->capture_default_str();
  cmd.add_option("--chat-template-file", a->chat_template_file, "Jinja chat template instead of the model's");
  cmd.add_option("--chat-template-kwargs", a->chat_template_kwargs,
                 "Template variables of every chat request, as a JSON object (e.g. '{\"enable_thinking\": "
                 "false}'); a request's own chat_template_kwargs override them");
  cmd.add_option("--queue", a->max_queue, "Requests that may wait for a slot; more get 503")
      ->capture_default_str();
  cmd.add_option("--max-body", a->max_body, "Largest request body, bytes")->capture_default_str();
  cmd.add_option("--shutdown-timeout", a->shutdown_timeout, "Seconds running requests get on SIGINT/SIGTERM")
      ->capture_default_str();
  cmd.add_option("--cache-ram", a->cache_ram_mib,
                 "Prefix cache MiB: KV blocks and recurrent-state checkpoints kept for later requests "
                 "(default 8192, at most a quarter of memory; 0: off; -1: half of memory)");
  cmd.add_option("--cache-checkpoint-every,--checkpoint-every", a->checkpoint_every,
                 "Checkpoint the recurrent state every N tokens of a long prompt (0: only prompt ends, "
                 "generation ends and message starts)")
      ->capture_default_str();
  cmd.add_option("--cache-checkpoint-min-gap", a->checkpoint_min_gap,
                 "Skip a message-start or interval checkpoint closer than N tokens to another one, to the "
                 "resumed position or to the prompt's end")
      ->capture_default_str();
  cmd.add_flag("--log-requests", a->log_requests,
               "One line per response on stderr, and one per request on what the prefix cache reused");
  cmd.add_flag("--log-steps", a->log_steps,
               "One line per engine step on stderr: slots generating and drafting, rows, drafts, time");
  cmd.add_option("--record", a->record,
                 "Append every chat/completions request and its outcome to this trace file (JSONL, one line "
                 "per request, read by mtp replay)");
  cmd.add_flag("--record-redact", a->record_redact,
               "With --record: keep only lengths and numeric parameters, no message, prompt or tool text");
  cmd.add_flag("--record-answers", a->record_answers,
               "With --record: also keep each answer (content, reasoning, tool calls; with --record-redact "
               "their lengths)");
  const std::string cpu = "ignored, the engine is CPU-only";
  accept_noop(&cmd, a, "--n-gpu-layers,--gpu-layers", cpu, true);
  accept_noop(&cmd, a, "--n-gpu-layers-draft,--spec-draft-ngl", cpu, true);
  accept_noop(&cmd, a, "--flash-attn", cpu, true);
  accept_noop(&cmd, a, "--spec-draft-backend-sampling", cpu, false);
  accept_noop(&cmd, a, "--cont-batching", "continuous batching is always on", false);
  accept_noop(&cmd, a, "--no-cont-batching", "continuous batching is always on", false);
  accept_noop(&cmd, a, "--metrics", "GET /metrics is always on", false);
  accept_noop(&cmd, a, "--jinja", "chat templates are always Jinja", false);
  accept_noop(&cmd, a, "--kv-unified", "the KV pool is always shared by the slots", false);
  accept_noop(&cmd, a, "--no-webui", "there is no web UI", false);
  accept_noop(&cmd, a, "--ctx-checkpoints",
              "the prefix cache's checkpoints are bounded by --cache-ram, not by a count", true);
  accept_noop(&cmd, a, "--cache-reuse", "KV shifting does not apply to recurrent layers", true);
  accept_noop(&cmd, a, "--mlock", "not implemented", false);
  accept_noop(&cmd, a, "--no-mmap", "the model is always mapped", false);
}

}  // namespace

// The subcommand takes its arguments raw and parses them itself, so that llama-server's single-dash long
// flags (-np 16, -ub 512, -ngl 99) work: CLI11 allows only one letter after a single dash.
CommandRunner register_serve(CLI::App& app) {
  CLI::App* cmd =
      app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching and MTP");
  cmd->set_help_flag();
  cmd->prefix_command();
  cmd->allow_extras();
  return [cmd] {
    ServeArgs a;
    if (const char* env = std::getenv("LLAMA_SPEC_MAX_DRAFTING_SLOTS"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(env, &end, 10);
      if (*end != '\0' || errno != 0 || v < -1 || v > 1 << 20)
        a.env_error =
            std::string("LLAMA_SPEC_MAX_DRAFTING_SLOTS='") + env + "' is not a slot count (-1 or more)";
      else
        a.max_drafting_slots = static_cast<int>(v);
    }
    CLI::App inner{
        "OpenAI-compatible HTTP server with continuous batching and MTP speculative decoding. "
        "llama-server's spellings are accepted (-np, -ub, -md, --spec-type draft-mtp, "
        "--spec-draft-n-max, ...); GPU-only flags are noted and ignored.",
        "mtp serve"};
    add_options(inner, &a);
    std::vector<std::string> args = normalize_args(cmd->remaining());
    std::vector<const char*> argv{"mtp serve"};
    for (const std::string& s : args) argv.push_back(s.c_str());
    try {
      inner.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::CallForHelp& e) {
      return inner.exit(e);
    } catch (const CLI::ParseError& e) {
      return report_parse_error(inner, e, "serve");
    }
    return serve(a);
  };
}

}  // namespace mtp::tools
