#include "loadgen/report_sections.h"

#include "loadgen/paired.h"
#include "loadgen/repeats.h"

namespace mtp::loadgen {
namespace {

std::string section(const std::string& title, const std::string& table) {
  return table.empty() ? "" : "\n" + title + ":\n\n" + table;
}

}  // namespace

std::string markdown_sections(const RunData& run) {
  const std::vector<LevelSummary> levels = summarize_run(run);
  std::string out = markdown_report(levels);
  // Replay runs with --strata: the same figures per prompt-length range.
  if (const auto strata = summarize_strata(run); !strata.empty())
    out += section("Per depth stratum", markdown_report(strata, "prompt tokens"));
  // Replay runs with sessions: the same figures per turn, so a prefix cache's effect on TTFT shows.
  if (const auto turns = summarize_turns(run); !turns.empty())
    out += section("Per turn of a session", markdown_report(turns, "turn"));
  // Runs with --repeat: mean and 95% interval over the repeats.
  if (const auto repeats = summarize_repeats(run); !repeats.empty())
    out += section("Over the repeats", markdown_repeats(repeats));
  // Runs with --baseline: paired ratios target/baseline.
  if (const auto pairs = summarize_pairs(run); !pairs.empty())
    out += section("Paired, target/baseline", markdown_pairs(pairs));
  // Servers with vLLM's counters on /metrics.
  out += section("Speculative decoding, from the server's /metrics", markdown_server_spec(levels));
  return out;
}

Json json_sections(const RunData& run, const std::string& source) {
  Json j = json_report(run, summarize_run(run), source, summarize_strata(run), summarize_turns(run));
  if (const auto repeats = summarize_repeats(run); !repeats.empty()) j["repeats"] = repeats_json(repeats);
  if (const auto pairs = summarize_pairs(run); !pairs.empty()) j["paired"] = pairs_json(pairs);
  return j;
}

}  // namespace mtp::loadgen
