// `mtp bench --url URL -o RUN.jsonl`: closed-loop load at each --concurrency level against any
// OpenAI-compatible server, every SSE event timestamped into the raw run file, then the report of that file
// on stdout (docs/bench.md). Failed requests are counted, not fatal; exit 1 when none succeeded.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "base/timer.h"
#include "command.h"
#include "loadgen/report_sections.h"
#include "loadgen/runner.h"
#include "loadgen_args.h"

namespace mtp::tools {
namespace {

using loadgen::RequestRecord;

// One line on stderr: redrawn in place on a terminal, one line per finished level otherwise (logs).
class BenchProgress {
 public:
  explicit BenchProgress(int per_level) : per_level_(per_level), tty_(isatty(STDERR_FILENO) == 1) {}
  void done(const RequestRecord& r) {
    if (r.level != level_ || r.rate != rate_ || r.repeat != repeat_) start_level(r);
    ++n_;
    failed_ += r.ok ? 0 : 1;
    if (!r.ok && first_error_.empty()) first_error_ = r.error;
    if (tty_) draw("\r");
    if (n_ == per_level_ && !tty_) draw("");
    if (n_ == per_level_ && tty_) std::fputc('\n', stderr);
  }
  int failed_total() const { return failed_total_ + failed_; }
  const std::string& first_error() const { return first_error_; }

 private:
  void start_level(const RequestRecord& r) {
    level_ = r.level;
    rate_ = r.rate;
    repeat_ = r.repeat;
    failed_total_ += failed_;
    n_ = failed_ = 0;
    timer_.reset();
  }
  void draw(const char* lead) {
    char level[64];
    if (rate_ > 0) std::snprintf(level, sizeof level, "rate=%g/s c<=%d", rate_, level_);
    if (rate_ <= 0) std::snprintf(level, sizeof level, "c=%d", level_);
    std::fprintf(stderr, "%smtp bench: %s %d/%d requests, %d failed, %.1f s%s", lead, level, n_, per_level_,
                 failed_, timer_.seconds(), tty_ ? "  " : "\n");
    std::fflush(stderr);
  }

  int per_level_;
  bool tty_;
  double rate_ = 0;
  int repeat_ = 0;
  int level_ = -1, n_ = 0, failed_ = 0, failed_total_ = 0;
  std::string first_error_;
  Timer timer_;
};

struct BenchArgs {
  loadgen::BenchOptions options;
  std::string output, dataset, dataset_format = "auto";
};

void add_prompt_options(CLI::App* cmd, BenchArgs& a) {
  loadgen::BenchOptions& o = a.options;
  CLI::Option* tokens =
      cmd->add_option("--prompt-tokens", o.prompt_tokens, "Prompt length in words, about one token each")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  CLI::Option* tokens_max =
      cmd->add_option("--prompt-tokens-max", o.prompt_tokens_max,
                      "Vary prompt lengths: each uniform in [--prompt-tokens, this] (default: all equal)")
          ->check(CLI::PositiveNumber);
  std::vector<std::string> formats = {"auto"};
  for (const std::string& f : loadgen::trace_formats()) formats.push_back(f);
  cmd->add_option("--dataset", a.dataset,
                  "Prompts from a dataset or trace file (any format mtp replay reads) instead of synthetic "
                  "ones; max_tokens = min(recorded output length, --max-tokens)")
      ->excludes(tokens)
      ->excludes(tokens_max);
  cmd->add_option("--dataset-format", a.dataset_format,
                  "Format of --dataset (auto: from the file name and first line)")
      ->check(CLI::IsMember(formats))
      ->capture_default_str();
}

void add_options(CLI::App* cmd, loadgen::BenchOptions& o, std::string& out) {
  cmd->add_option("--url", o.client.url, "Server base URL, e.g. http://127.0.0.1:8080 (a /v1 suffix is fine)")
      ->required();
  cmd->add_option("--baseline", o.baseline_url,
                  "Second server: every prompt also sent there, interleaved; the report gives paired ratios");
  cmd->add_option("--model", o.model, "Model name to send (default: the first of GET /v1/models)");
  cmd->add_option(
         "--concurrency", o.levels,
         "Concurrency levels, comma-separated (closed loop); with --rate, the largest caps requests in "
         "flight")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--rate", o.rates,
                  "Arrival rates in requests/s, comma-separated: Poisson arrivals, one level each")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--requests", o.requests, "Measured requests per level")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--repeat", o.repeat, "Runs of every level, for 95% confidence intervals over the runs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Warm-up requests per level (distinct prompts, not measured)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-tokens", o.max_tokens, "max_tokens of each request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the synthetic prompts")->capture_default_str();
  cmd->add_option("--temperature", o.temperature, "Sampling temperature to send (default: none sent)");
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Send ignore_eos so every request generates max_tokens");
  add_count_tokens_option(cmd, o.client.count);
  cmd->add_option("--api-key", o.client.api_key, "Bearer token for the Authorization header");
  cmd->add_option("--timeout", o.client.timeout_s, "Connect and read timeout in seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-o,--output", out, "Raw run file to write (JSONL, one line per event and request)")
      ->required();
}

// The --dataset file's requests into the options; an unreadable or empty file is an error naming it (exit 1).
Status load_dataset(BenchArgs& a) {
  loadgen::BenchOptions& o = a.options;
  auto format = a.dataset_format == "auto" ? loadgen::detect_trace_format(a.dataset)
                                           : Expected<std::string>(a.dataset_format);
  // A file whose format cannot be told is bad input, not a bad flag.
  if (!format.ok()) return corrupt("--dataset: ", format.status().message());
  loadgen::TraceSkips skips;
  auto reqs = loadgen::read_trace(a.dataset, *format, &skips);
  if (!reqs.ok()) return Status(reqs.status().code(), "--dataset: " + reqs.status().message());
  if (reqs->empty()) return corrupt("--dataset: ", a.dataset, ": no requests");
  if (skips.count > 0)
    std::fprintf(stderr,
                 "mtp bench: warning: %lld unreadable lines or turns of --dataset left out; the first: %s\n",
                 static_cast<long long>(skips.count), skips.first.c_str());
  o.dataset = std::make_shared<const std::vector<loadgen::TraceRequest>>(std::move(reqs).value());
  o.dataset_path = a.dataset;
  o.dataset_format = *format;
  o.dataset_skipped = skips.count;
  return Status::Ok();
}

int run_bench_command(BenchArgs& a) {
  loadgen::BenchOptions& o = a.options;
  const std::string& path = a.output;
  // A bad URL is a usage error, found before the run file is created.
  if (auto url = loadgen::split_url(o.client.url); !url.ok()) return report_error("bench", url.status());
  if (auto url = loadgen::split_url(o.baseline_url); !o.baseline_url.empty() && !url.ok())
    return report_error("bench", url.status());
  if (o.prompt_tokens_max > 0 && o.prompt_tokens_max < o.prompt_tokens)
    return report_error("bench", invalid_argument("--prompt-tokens-max ", o.prompt_tokens_max,
                                                  " is below --prompt-tokens ", o.prompt_tokens));
  if (!a.dataset.empty())
    if (Status s = load_dataset(a); !s.ok()) return report_error("bench", s);
  auto writer = loadgen::JsonlWriter::open(path);
  if (!writer.ok()) return report_error("bench", writer.status());
  const int servers = o.baseline_url.empty() ? 1 : 2;
  BenchProgress progress(servers * (o.warmup + o.requests));
  o.tool_version = MTP_VERSION;
  o.on_warning = [](const std::string& why) {
    std::fprintf(stderr, "mtp bench: warning: %s\n", why.c_str());
  };
  const Status status = loadgen::run_bench(o, **writer, [&](const RequestRecord& r) { progress.done(r); });
  if (!status.ok()) return report_error("bench", status);
  auto run = loadgen::read_run(path);
  if (!run.ok()) return report_error("bench", run.status());
  std::fputs(loadgen::markdown_sections(*run).c_str(), stdout);
  const size_t levels = o.rates.empty() ? o.levels.size() : o.rates.size();
  const int total = servers * o.repeat * static_cast<int>(levels) * (o.warmup + o.requests);
  if (progress.failed_total() == total) {
    std::fprintf(stderr, "mtp bench: all %d requests failed; the first: %s\n", total,
                 progress.first_error().c_str());
    return kExitRuntimeError;
  }
  return kExitOk;
}

}  // namespace

CommandRunner register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Measure an OpenAI-compatible server: closed-loop load per concurrency level, raw JSONL, report");
  add_options(cmd, a->options, a->output);
  add_prompt_options(cmd, *a);
  return [a] { return run_bench_command(*a); };
}

}  // namespace mtp::tools
