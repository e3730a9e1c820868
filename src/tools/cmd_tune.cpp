// `mtp tune --serve CMD --setting NAME --values A,B,...`: starts the server once per value (settings fixed
// at start), runs `mtp bench` on it (several runs a level), scores each cell robustly and prints the value to
// serve with, per concurrency level and overall, with its command line; with --gate RULES, only a value that
// passes the frozen gate is recommended (docs/tune.md). Exit status: 0 a recommendation, 1 none passed the
// gate or a run failed, 2 a bad option or rules.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "command.h"
#include "gate/gate.h"
#include "gate/tune.h"
#include "loadgen/runner.h"

namespace mtp::tools {
using gate::analyse_tune, gate::serve_command, gate::ServerProcess, gate::tune_table;
namespace {

struct TuneArgs {
  std::string serve, setting, out_dir = "tune", gate_rules;
  std::vector<std::string> values;
  loadgen::BenchOptions bench;
  int port = 18080;
  double start_timeout_s = 600;
};

std::string file_name(const std::string& value) {
  std::string s;
  for (char c : value) s += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  return s;
}

// Serves `value`, runs the bench into DIR/VALUE.jsonl and stops the server.
Status measure(const TuneArgs& a, const std::string& value, const std::string& run_path) {
  const std::string url = str_cat("http://127.0.0.1:", a.port);
  const std::string cmd =
      str_cat(serve_command(a.serve, a.setting, value), " --host 127.0.0.1 --port ", a.port);
  std::fprintf(stderr, "mtp tune: %s=%s: %s\n", a.setting.c_str(), value.c_str(), cmd.c_str());
  const std::string log = a.out_dir + "/" + file_name(value) + ".server.log";
  MTP_ASSIGN_OR_RETURN(ServerProcess server, ServerProcess::start(cmd, url, log, a.start_timeout_s));
  loadgen::BenchOptions o = a.bench;
  o.client.url = url;
  o.tool_version = MTP_VERSION;
  MTP_ASSIGN_OR_RETURN(auto writer, loadgen::JsonlWriter::open(run_path));
  int failed = 0;
  MTP_RETURN_IF_ERROR(
      loadgen::run_bench(o, *writer, [&](const loadgen::RequestRecord& r) { failed += !r.ok; }));
  server.stop();
  if (failed > 0)
    std::fprintf(stderr, "mtp tune: %s=%s: %d requests failed\n", a.setting.c_str(), value.c_str(), failed);
  return Status::Ok();
}

int tune(const TuneArgs& a) {
  std::optional<gate::Rules> rules;
  std::optional<gate::Lock> lock;
  if (!a.gate_rules.empty()) {  // refused before an hour of measuring, not after
    auto r = gate::read_rules(a.gate_rules);
    if (!r.ok()) return report_error("tune", invalid_argument(r.status().message()));
    auto l = gate::read_lock(gate::default_lock_path(a.gate_rules));
    if (!l.ok()) return report_error("tune", invalid_argument(l.status().message()));
    if (Status s = gate::check_lock(*r, *l); !s.ok()) return report_error("tune", s);
    rules = std::move(*r), lock = std::move(*l);
  }
  std::error_code ec;
  std::filesystem::create_directories(a.out_dir, ec);
  if (ec) return report_error("tune", io_error("cannot create '", a.out_dir, "': ", ec.message()));
  std::map<std::string, loadgen::RunData> runs;
  std::map<std::string, std::string> run_paths;
  for (const std::string& v : a.values) {
    const std::string path = a.out_dir + "/" + file_name(v) + ".jsonl";
    if (Status s = measure(a, v, path); !s.ok())
      return report_error("tune", s.with_context(a.setting + "=" + v));
    auto run = loadgen::read_run(path);
    if (!run.ok()) return report_error("tune", run.status());
    runs[v] = std::move(*run);
    run_paths[v] = path;
  }
  auto result = analyse_tune(a.values, runs);
  if (!result.ok()) return report_error("tune", result.status());
  std::fputs(tune_table(*result, a.setting).c_str(), stdout);
  for (int level : result->levels)
    std::printf("best at c%d: %s=%s\n", level, a.setting.c_str(), result->best_at.at(level).c_str());
  const std::string& pick = result->overall;
  if (rules) {
    auto verdicts = gate::judge(*rules, *lock, {run_paths.at(pick)});
    if (!verdicts.ok()) return report_error("tune", verdicts.status());
    std::fputs(("\n" + gate::verdicts_table(*rules, *verdicts)).c_str(), stdout);
    for (const gate::Verdict& v : *verdicts) {
      if (v.pass) continue;
      std::printf("\nno recommendation: %s=%s, the best overall, fails the gate's rule '%s' (%s)\n",
                  a.setting.c_str(), pick.c_str(), v.rule_id.c_str(), v.why.c_str());
      return kExitRuntimeError;
    }
  }
  std::printf("\nrecommended: %s=%s (within %.1f%% of the best score at every level%s)\n  %s\n",
              a.setting.c_str(), pick.c_str(), 100 * (1 - result->worst_ratio.at(pick)),
              rules ? ", and it passes the gate" : "", serve_command(a.serve, a.setting, pick).c_str());
  return kExitOk;
}

}  // namespace

CommandRunner register_tune(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  a->bench.levels = {1, 4, 16};
  a->bench.repeat = 3;
  a->bench.requests = 8;
  CLI::App* cmd = app.add_subcommand(
      "tune", "Sweep one server setting over concurrency levels and recommend the value to serve with");
  cmd->add_option("--serve", a->serve, "The server's command line, without --host/--port (added per value)")
      ->required();
  cmd->add_option("--setting", a->setting, "The option swept, without dashes (e.g. spec-max-drafting-slots)")
      ->required();
  cmd->add_option("--values", a->values, "Its values, comma-separated; 'default' leaves the option out")
      ->delimiter(',')
      ->required();
  cmd->add_option("--concurrency", a->bench.levels, "Concurrency levels")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--runs", a->bench.repeat, "Runs of every level per value (at least 3 for a robust score)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--requests", a->bench.requests, "Measured requests per level and run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", a->bench.warmup, "Warm-up requests per level")->check(CLI::NonNegativeNumber);
  cmd->add_option("--prompt-tokens", a->bench.prompt_tokens, "Prompt length in words")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-tokens", a->bench.max_tokens, "max_tokens of each request")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", a->bench.temperature, "Sampling temperature to send");
  cmd->add_flag("--ignore-eos", a->bench.ignore_eos, "Send ignore_eos so every request generates max_tokens");
  cmd->add_option("--port", a->port, "Port the server is started on (127.0.0.1)")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  cmd->add_option("--start-timeout", a->start_timeout_s, "Seconds to wait for a server to answer")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--gate", a->gate_rules,
                  "Frozen gate rules the recommendation must pass (mtp gate freeze)");
  cmd->add_option("-o,--output-dir", a->out_dir, "Folder for the run files and server logs")
      ->capture_default_str();
  return [a] { return tune(*a); };
}

}  // namespace mtp::tools
