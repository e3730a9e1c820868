// `mtp report RUN.jsonl [--json OUT.json]`: the metrics of a run file written by `mtp bench`, computed from
// the raw events alone (docs/bench.md, "Metrics"): a markdown table on stdout, a JSON summary with vLLM's
// result keys on request.
#include <cstdio>
#include <memory>

#include "base/atomic_file.h"
#include "command.h"
#include "loadgen/paired.h"
#include "loadgen/repeats.h"
#include "loadgen/report.h"

namespace mtp::tools {
namespace {

Status write_json(const std::string& path, const loadgen::Json& j) {
  MTP_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path));
  const std::string text = j.dump(2) + "\n";
  MTP_RETURN_IF_ERROR(f.write({reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  return f.commit();
}

}  // namespace

CommandRunner register_report(CLI::App& app) {
  struct Args {
    std::string run, json;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("report", "Compute the metrics of an `mtp bench` or `mtp replay` run file");
  cmd->add_option("run", a->run, "Run file (JSONL) written by mtp bench")->required();
  cmd->add_option("--json", a->json, "Also write a JSON summary (vLLM's bench serve result keys) here");
  return [a] {
    auto run = loadgen::read_run(a->run);
    if (!run.ok()) return report_error("report", run.status());
    const std::vector<loadgen::LevelSummary> levels = loadgen::summarize_run(*run);
    std::fputs(loadgen::markdown_report(levels).c_str(), stdout);
    // Replay runs with --strata: the same figures per prompt-length range.
    const std::vector<loadgen::LevelSummary> strata = loadgen::summarize_strata(*run);
    if (!strata.empty())
      std::fputs(("\nPer depth stratum:\n\n" + loadgen::markdown_report(strata)).c_str(), stdout);
    // Runs with --repeat: mean and 95% interval over the repeats.
    const std::vector<loadgen::RepeatSummary> repeats = loadgen::summarize_repeats(*run);
    if (!repeats.empty())
      std::fputs(("\nOver the repeats:\n\n" + loadgen::markdown_repeats(repeats)).c_str(), stdout);
    // Runs with --baseline: paired ratios target/baseline.
    const std::vector<loadgen::PairedSummary> pairs = loadgen::summarize_pairs(*run);
    if (!pairs.empty())
      std::fputs(("\nPaired, target/baseline:\n\n" + loadgen::markdown_pairs(pairs)).c_str(), stdout);
    if (!a->json.empty()) {
      loadgen::Json j = loadgen::json_report(*run, levels, a->run, strata);
      if (!repeats.empty()) j["repeats"] = loadgen::repeats_json(repeats);
      if (!pairs.empty()) j["paired"] = loadgen::pairs_json(pairs);
      const Status s = write_json(a->json, j);
      if (!s.ok()) return report_error("report", s);
    }
    return kExitOk;
  };
}

}  // namespace mtp::tools
