// `mtp gate freeze RULES` and `mtp gate run RULES RUN.jsonl...`: quality gates registered before their
// results (docs/gate.md). Exit status: 0 every rule passes, 1 a rule fails, 2 an error (a bad option, rules
// changed after the lock, a result older than it, an unreadable file).
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "base/atomic_file.h"
#include "command.h"
#include "gate/gate.h"
#include "gate/probe.h"
#include "gate/tool_probe.h"

namespace mtp::tools {
namespace {

int gate_error(const Status& status) {
  std::fprintf(stderr, "mtp gate: %s\n", status.message().c_str());
  return kExitUsageError;
}

struct GateArgs {
  std::string rules, lock, format = "table", out;
  std::vector<std::string> runs;
  std::vector<std::string> baselines;  // replay runs of the baseline server, paired with the runs' replays
  gate::GreedyProbeOptions probe;
  gate::ToolProbeOptions tools;
  std::string reference_body, scenarios;
  std::string lock_path() const { return lock.empty() ? gate::default_lock_path(rules) : lock; }
};

int freeze(const GateArgs& a) {
  auto rules = gate::read_rules(a.rules);
  if (!rules.ok()) return gate_error(rules.status());
  const std::string path = a.lock_path();
  if (std::filesystem::exists(path)) {
    auto old = gate::read_lock(path);
    if (old.ok() && old->rules_sha256 == rules->sha256) {
      std::printf("%s: already frozen at %s (sha256 %s)\n", a.rules.c_str(), old->frozen_utc.c_str(),
                  rules->sha256.c_str());
      return kExitOk;
    }
    return gate_error(invalid_argument(path,
                                       " exists and pins other rules: a registered gate is not "
                                       "re-registered; freeze the new rules under another name"));
  }
  auto lock = gate::freeze(*rules);
  if (!lock.ok()) return gate_error(lock.status());
  if (Status s = AtomicFile::write_whole(path, gate::lock_json(*lock).dump(2) + "\n"); !s.ok())
    return gate_error(s);
  std::printf("%s: frozen at %s, sha256 %s, %zu rules, %zu inputs pinned -> %s\n", a.rules.c_str(),
              lock->frozen_utc.c_str(), rules->sha256.c_str(), rules->rules.size(), lock->inputs.size(),
              path.c_str());
  return kExitOk;
}

int run(const GateArgs& a) {
  auto rules = gate::read_rules(a.rules);
  if (!rules.ok()) return gate_error(rules.status());
  auto lock = gate::read_lock(a.lock_path());
  if (!lock.ok()) return gate_error(lock.status());
  if (Status s = gate::check_lock(*rules, *lock); !s.ok()) return gate_error(s);
  auto verdicts = gate::judge(*rules, *lock, a.runs, a.baselines);
  if (!verdicts.ok()) return gate_error(verdicts.status());
  std::string text;
  if (a.format == "json")
    text = gate::verdicts_json(*rules, *lock, *verdicts).dump(2) + "\n";
  else if (a.format == "junit")
    text = gate::verdicts_junit(*rules, *verdicts);
  else
    text = gate::verdicts_table(*rules, *verdicts);
  if (a.out.empty()) {
    std::fputs(text.c_str(), stdout);
  } else if (Status s = AtomicFile::write_whole(a.out, text); !s.ok()) {
    return gate_error(s);
  }
  for (const gate::Verdict& v : *verdicts)
    if (!v.pass) return kExitRuntimeError;
  return kExitOk;
}

// --reference and --reference-body, shared by the probes: one of them says how speculation is turned off.
Status reference_options(const std::string& body_text, const std::string& url, gate::Json* body) {
  if (!body_text.empty()) {
    *body = gate::Json::parse(body_text, nullptr, false);
    if (!body->is_object())
      return invalid_argument("--reference-body must be a JSON object, got '", body_text, "'");
  }
  if (url.empty() && body->empty())
    return invalid_argument(
        "give --reference URL (a server with speculation off) or --reference-body "
        "JSON (fields that turn it off on the same server, e.g. '{\"speculative\": false}')");
  return Status::Ok();
}

int probe_greedy(GateArgs& a) {
  if (Status s = reference_options(a.reference_body, a.probe.reference_url, &a.probe.reference_body); !s.ok())
    return gate_error(s);
  auto outcomes = gate::run_greedy_probe(a.probe, a.out);
  if (!outcomes.ok()) return gate_error(outcomes.status());
  std::map<std::string, int> count;
  for (const gate::GreedyOutcome& g : *outcomes) {
    ++count[g.kind];
    if (g.kind == "near_tie" || g.kind == "divergence")
      std::printf(
          "prompt %lld: %s at token %lld (target '%s', reference '%s', reference top-2 margin %.4f)\n",
          static_cast<long long>(g.prompt), g.kind.c_str(), static_cast<long long>(g.first_diff),
          g.target_token.c_str(), g.reference_token.c_str(), g.margin);
    else if (g.kind == "failed")
      std::printf("prompt %lld: failed: %s\n", static_cast<long long>(g.prompt), g.error.c_str());
  }
  std::printf("%zu prompts: %d identical, %d near-tie flips (margin < %g), %d divergences, %d failed -> %s\n",
              outcomes->size(), count["identical"], count["near_tie"], a.probe.epsilon, count["divergence"],
              count["failed"], a.out.c_str());
  return count["failed"] == static_cast<int>(outcomes->size()) ? kExitRuntimeError : kExitOk;
}

int probe_tools(GateArgs& a) {
  gate::ToolProbeOptions& o = a.tools;
  if (Status s = reference_options(a.reference_body, o.reference_url, &o.reference_body); !s.ok())
    return gate_error(s);
  if (a.scenarios.empty()) {
    o.scenarios = gate::builtin_tool_scenarios();
  } else {
    auto scenarios = gate::read_tool_scenarios(a.scenarios);
    if (!scenarios.ok()) return gate_error(scenarios.status());
    o.scenarios = std::move(*scenarios);
  }
  auto runs = gate::run_tool_probe(o, a.out);
  if (!runs.ok()) return gate_error(runs.status());
  std::map<std::string, std::pair<int, int>> passed;  // side -> (passed, runs)
  int64_t leaks = 0;
  for (const gate::ToolRun& r : *runs) {
    auto& [ok, all] = passed[r.side];
    ok += r.pass ? 1 : 0, all += 1;
    leaks += r.leaks;
    if (!r.pass)
      std::printf("%s (%s, repeat %d): %s\n", r.scenario.c_str(), r.side.c_str(), r.repeat,
                  r.reasons.empty() ? "failed" : r.reasons.front().c_str());
  }
  std::printf("%zu conversations: target %d/%d passed, reference %d/%d passed, %lld markup leaks -> %s\n",
              runs->size(), passed["target"].first, passed["target"].second, passed["reference"].first,
              passed["reference"].second, static_cast<long long>(leaks), a.out.c_str());
  return kExitOk;
}

void add_probe_tools(CLI::App* probe, GateArgs* a) {
  CLI::App* t = probe->add_subcommand(
      "tools", "Multi-turn tool-call conversations with speculation on and off; check every call and turn");
  t->add_option("--url", a->tools.url, "The server with speculation on")->required();
  t->add_option("--reference", a->tools.reference_url, "A server with speculation off (default: --url)");
  t->add_option("--reference-body", a->reference_body,
                "JSON fields added to the reference's requests, e.g. '{\"speculative\": false}' (mtp serve)");
  t->add_option("--scenarios", a->scenarios,
                "Scenarios file (JSON; docs/gate.md); default: the built-in set");
  t->add_option("--model", a->tools.model, "The model field to send (default: none)");
  t->add_option("--api-key", a->tools.api_key, "Bearer token");
  t->add_option("--repeat", a->tools.repeat, "Runs of each scenario on each side")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  t->add_option("--concurrency", a->tools.concurrency,
                "Conversations in flight at once, each scenario's target and reference side by side")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  t->add_option("--max-tokens", a->tools.max_tokens, "Tokens generated per turn at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  t->add_option("--timeout", a->tools.timeout_s, "Connect and read timeout, seconds")
      ->check(CLI::PositiveNumber);
  t->add_option("-o,--output", a->out, "Probe file (JSONL) for mtp gate run")->required();
}

}  // namespace

CommandRunner register_gate(CLI::App& app) {
  auto a = std::make_shared<GateArgs>();
  CLI::App* cmd =
      app.add_subcommand("gate", "Quality gates registered before their results: freeze, then run");
  cmd->require_subcommand(1);
  CLI::App* f =
      cmd->add_subcommand("freeze", "Register a rules file: write its lock (sha256, UTC time, inputs)");
  f->add_option("rules", a->rules, "Rules file (JSON, or TOML when it ends in .toml; docs/gate.md)")
      ->required();
  f->add_option("--lock", a->lock, "Lock file (default: RULES.lock)");
  CLI::App* r = cmd->add_subcommand("run", "Judge run files of mtp bench or replay against frozen rules");
  r->add_option("rules", a->rules, "Rules file (JSON, or TOML when it ends in .toml; docs/gate.md)")
      ->required();
  r->add_option("runs", a->runs, "Run files (JSONL) measured after the lock")->required();
  r->add_option("--lock", a->lock, "Lock file (default: RULES.lock)");
  r->add_option("--baseline", a->baselines,
                "An mtp replay run of the baseline server (speculation off), paired by trace line with the "
                "replay runs given (the target); repeatable");
  r->add_option("--format", a->format, "table, json or junit")
      ->check(CLI::IsMember({"table", "json", "junit"}));
  r->add_option("-o,--output", a->out, "Write the verdicts here instead of stdout");
  CLI::App* probe = cmd->add_subcommand("probe", "Measure a probe's results for gate rules");
  probe->require_subcommand(1);
  CLI::App* g = probe->add_subcommand(
      "greedy",
      "Greedy outputs with speculation on and off; classify the first difference by the top-2 margin");
  g->add_option("--url", a->probe.url, "The server with speculation on")->required();
  g->add_option("--reference", a->probe.reference_url, "A server with speculation off (default: --url)");
  g->add_option("--reference-body", a->reference_body,
                "JSON fields added to the reference's requests, e.g. '{\"speculative\": false}' (mtp serve)");
  g->add_option("--model", a->probe.model, "The model field to send (default: none)");
  g->add_option("--api-key", a->probe.api_key, "Bearer token");
  g->add_option("--prompts", a->probe.prompts, "Prompts")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  g->add_option("--prompt-tokens", a->probe.prompt_tokens, "Prompt length in words")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  g->add_option("--max-tokens", a->probe.max_tokens, "Tokens generated per prompt")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  g->add_option("--concurrency", a->probe.concurrency,
                "Requests in flight at once, the target's and the reference's interleaved (load on both)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  g->add_option("--epsilon", a->probe.epsilon, "A top-2 margin (nats) under this is a near tie")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  g->add_option("--seed", a->probe.seed, "Seed of the synthetic prompts")->capture_default_str();
  g->add_option("--timeout", a->probe.timeout_s, "Connect and read timeout, seconds")
      ->check(CLI::PositiveNumber);
  g->add_option("-o,--output", a->out, "Probe file (JSONL) for mtp gate run")->required();
  add_probe_tools(probe, a.get());
  CLI::App* tools = probe->get_subcommand("tools");
  return [a, f, g, tools] {
    if (f->parsed()) return freeze(*a);
    if (g->parsed()) return probe_greedy(*a);
    return tools->parsed() ? probe_tools(*a) : run(*a);
  };
}

}  // namespace mtp::tools
