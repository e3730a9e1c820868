// `mtp gate freeze RULES` and `mtp gate run RULES RUN.jsonl...`: quality gates registered before their
// results (docs/gate.md). Exit status: 0 every rule passes, 1 a rule fails, 2 an error (a bad option, rules
// changed after the lock, a result older than it, an unreadable file).
#include <cstdio>
#include <filesystem>
#include <memory>

#include "base/atomic_file.h"
#include "command.h"
#include "gate/gate.h"

namespace mtp::tools {
namespace {

int gate_error(const Status& status) {
  std::fprintf(stderr, "mtp gate: %s\n", status.message().c_str());
  return kExitUsageError;
}

Status write_text(const std::string& path, const std::string& text) {
  MTP_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path));
  MTP_RETURN_IF_ERROR(f.write({reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  return f.commit();
}

struct GateArgs {
  std::string rules, lock, format = "table", out;
  std::vector<std::string> runs;
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
  if (Status s = write_text(path, gate::lock_json(*lock).dump(2) + "\n"); !s.ok()) return gate_error(s);
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
  auto verdicts = gate::judge(*rules, *lock, a.runs);
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
  } else if (Status s = write_text(a.out, text); !s.ok()) {
    return gate_error(s);
  }
  for (const gate::Verdict& v : *verdicts)
    if (!v.pass) return kExitRuntimeError;
  return kExitOk;
}

}  // namespace

CommandRunner register_gate(CLI::App& app) {
  auto a = std::make_shared<GateArgs>();
  CLI::App* cmd =
      app.add_subcommand("gate", "Quality gates registered before their results: freeze, then run");
  cmd->require_subcommand(1);
  CLI::App* f =
      cmd->add_subcommand("freeze", "Register a rules file: write its lock (sha256, UTC time, inputs)");
  f->add_option("rules", a->rules, "Rules file (JSON; docs/gate.md)")->required();
  f->add_option("--lock", a->lock, "Lock file (default: RULES.lock)");
  CLI::App* r = cmd->add_subcommand("run", "Judge run files of mtp bench or replay against frozen rules");
  r->add_option("rules", a->rules, "Rules file (JSON; docs/gate.md)")->required();
  r->add_option("runs", a->runs, "Run files (JSONL) measured after the lock")->required();
  r->add_option("--lock", a->lock, "Lock file (default: RULES.lock)");
  r->add_option("--format", a->format, "table, json or junit")
      ->check(CLI::IsMember({"table", "json", "junit"}));
  r->add_option("-o,--output", a->out, "Write the verdicts here instead of stdout");
  return [a, f] { return f->parsed() ? freeze(*a) : run(*a); };
}

}  // namespace mtp::tools
