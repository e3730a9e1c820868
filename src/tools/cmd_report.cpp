// `mtp report RUN.jsonl [--json OUT.json] [--html OUT.html]`: the metrics of a run file written by `mtp
// bench` or `mtp replay`, computed from the raw events alone (docs/bench.md, "Metrics"): markdown tables on
// stdout; on request a JSON summary with vLLM's result keys and a self-contained HTML page with charts.
#include <cstdio>
#include <memory>

#include "base/atomic_file.h"
#include "command.h"
#include "loadgen/report_html.h"
#include "loadgen/report_sections.h"

namespace mtp::tools {

// Files are written through a temporary file renamed at the end: a reader never sees half a summary or page.
CommandRunner register_report(CLI::App& app) {
  struct Args {
    std::string run, json, html;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("report", "Compute the metrics of an `mtp bench` or `mtp replay` run file");
  cmd->add_option("run", a->run, "Run file (JSONL) written by mtp bench")->required();
  cmd->add_option("--json", a->json, "Also write a JSON summary (vLLM's bench serve result keys) here");
  cmd->add_option("--html", a->html, "Also write a self-contained HTML page with SVG charts here");
  return [a] {
    auto run = loadgen::read_run(a->run);
    if (!run.ok()) return report_error("report", run.status());
    std::fputs(loadgen::markdown_sections(*run).c_str(), stdout);
    if (!a->json.empty()) {
      const Status s = AtomicFile::write_whole(a->json, loadgen::json_sections(*run, a->run).dump(2) + "\n");
      if (!s.ok()) return report_error("report", s);
    }
    if (!a->html.empty()) {
      const Status s = AtomicFile::write_whole(a->html, loadgen::html_report(*run, a->run));
      if (!s.ok()) return report_error("report", s);
    }
    return kExitOk;
  };
}

}  // namespace mtp::tools
