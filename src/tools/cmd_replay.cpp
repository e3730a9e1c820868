// `mtp replay TRACE --url URL -o RUN.jsonl`: the requests of a trace (ours from `mtp serve --record`,
// ShareGPT, Mooncake, Azure, BurstGPT, vLLM custom, SGLang agentic) sent to any OpenAI-compatible server,
// closed loop or at the trace's times, into the same raw run file as `mtp bench`; then its report, per depth
// stratum too (docs/bench.md).
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "command.h"
#include "loadgen/replay.h"
#include "loadgen/report_sections.h"
#include "loadgen_args.h"

namespace mtp::tools {
namespace {

struct ReplayArgs {
  loadgen::ReplayOptions o;
  std::string trace, format = "auto", cache = "reuse", history = "recorded", output;
  std::optional<int> concurrency;
  std::vector<int64_t> strata;
  int64_t limit = 0;
};

void add_options(CLI::App* cmd, ReplayArgs& a) {
  cmd->add_option("trace", a.trace,
                  "Trace file: mtp serve --record JSONL, ShareGPT JSON, Mooncake JSONL, Azure or BurstGPT "
                  "CSV, vLLM custom JSONL, SGLang agentic JSON")
      ->required();
  cmd->add_option("--url", a.o.client.url, "Server base URL, e.g. http://127.0.0.1:8080")->required();
  cmd->add_option("--format", a.format, "Trace format (auto: from the file name and first line)")
      ->check(CLI::IsMember(
          {"auto", "mtp", "sharegpt", "mooncake", "azure", "burstgpt", "vllm-custom", "sglang-agentic"}))
      ->capture_default_str();
  cmd->add_option("--model", a.o.model, "Model name to send (default: the first of GET /v1/models)");
  cmd->add_option("--concurrency", a.concurrency,
                  "Closed loop with N workers (default 1); with --time-scale, requests in flight at most "
                  "(default 64)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--time-scale", a.o.time_scale,
                  "Timed arrivals: send each request at its trace time times X (0.5: twice as fast)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-tokens-cap", a.o.max_tokens_cap, "max_tokens = min(recorded output length, M)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--strata", a.strata, "Depth strata: prompt-token bounds, comma-separated, ascending")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cache", a.cache,
                  "reuse: prompts as recorded; defeat: a unique nonce and cache_salt each")
      ->check(CLI::IsMember({"reuse", "defeat"}))
      ->capture_default_str();
  cmd->add_option(
         "--history", a.history,
         "Multi-turn sessions: recorded (each turn's history as in the trace; a recorded answer where "
         "a turn lacks the reply) or live (the server's own replies to the earlier turns)")
      ->check(CLI::IsMember({"recorded", "live"}))
      ->capture_default_str();
  cmd->add_option("--limit", a.limit, "Replay only the first N requests (in arrival order)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a.o.seed, "Seed of the synthetic prompts")->capture_default_str();
  add_count_tokens_option(cmd, a.o.client.count);
  cmd->add_option("--api-key", a.o.client.api_key, "Bearer token for the Authorization header");
  cmd->add_option("--timeout", a.o.client.timeout_s, "Connect and read timeout in seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-o,--output", a.output, "Raw run file to write (JSONL, as mtp bench)")->required();
}

// Flag combinations CLI11 cannot check; kInvalidArgument (exit 2).
Status finish_options(ReplayArgs& a) {
  for (size_t i = 1; i < a.strata.size(); ++i)
    if (a.strata[i] <= a.strata[i - 1]) return invalid_argument("--strata must be ascending");
  a.o.strata = a.strata;
  a.o.concurrency = a.concurrency.value_or(a.o.time_scale ? 64 : 1);
  a.o.defeat_cache = a.cache == "defeat";
  a.o.live_history = a.history == "live";
  a.o.trace = a.trace;
  a.o.tool_version = MTP_VERSION;
  a.o.on_warning = [](const std::string& why) {
    std::fprintf(stderr, "mtp replay: warning: %s\n", why.c_str());
  };
  if (auto url = loadgen::split_url(a.o.client.url); !url.ok()) return url.status();
  return Status::Ok();
}

int run_replay_command(ReplayArgs& a) {
  if (Status s = finish_options(a); !s.ok()) return report_error("replay", s);
  auto format = a.format == "auto" ? loadgen::detect_trace_format(a.trace) : Expected<std::string>(a.format);
  // A file whose format cannot be told is bad input (exit 1), not a bad flag.
  if (!format.ok()) return report_error("replay", corrupt(format.status().message()));
  a.o.format = *format;
  loadgen::TraceSkips skips;
  auto reqs = loadgen::read_trace(a.trace, *format, &skips);
  if (!reqs.ok()) return report_error("replay", reqs.status());
  a.o.skipped_trace_lines = skips.count;
  if (skips.count > 0)
    std::fprintf(stderr, "mtp replay: warning: %lld unreadable lines or turns left out; the first: %s\n",
                 static_cast<long long>(skips.count), skips.first.c_str());
  if (a.limit > 0 && static_cast<size_t>(a.limit) < reqs->size()) reqs->resize(static_cast<size_t>(a.limit));
  if (reqs->empty()) return report_error("replay", corrupt(a.trace, ": no requests"));
  auto writer = loadgen::JsonlWriter::open(a.output);
  if (!writer.ok()) return report_error("replay", writer.status());
  int n = 0, failed = 0;
  std::string first_error;
  const bool tty = isatty(STDERR_FILENO) == 1;  // redrawn in place on a terminal, one line at the end in logs
  const Status status = loadgen::run_replay(a.o, *reqs, **writer, [&](const loadgen::RequestRecord& r) {
    ++n;
    if (!r.ok && failed++ == 0) first_error = r.error;
    if (tty) std::fprintf(stderr, "\rmtp replay: %d/%zu requests, %d failed  ", n, reqs->size(), failed);
  });
  if (tty) std::fputc('\n', stderr);
  std::fprintf(stderr, "mtp replay: %d requests, %d failed\n", n, failed);
  if (!status.ok()) return report_error("replay", status);
  auto run = loadgen::read_run(a.output);
  if (!run.ok()) return report_error("replay", run.status());
  std::fputs(loadgen::markdown_sections(*run).c_str(), stdout);
  if (failed == n) {
    std::fprintf(stderr, "mtp replay: all %d requests failed; the first: %s\n", n, first_error.c_str());
    return kExitRuntimeError;
  }
  return kExitOk;
}

}  // namespace

CommandRunner register_replay(CLI::App& app) {
  auto a = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Replay a trace (recorded, ShareGPT, Mooncake, Azure, BurstGPT, vLLM custom, SGLang agentic) against a "
      "server into a run file");
  add_options(cmd, *a);
  return [a] { return run_replay_command(*a); };
}

}  // namespace mtp::tools
