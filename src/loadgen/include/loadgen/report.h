// `mtp report`: the metrics of a run, computed from its raw JSONL file alone (docs/bench.md, "Metrics"), so a
// definition can change without running the benchmark again.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/record.h"
#include "loadgen/spec_counters.h"
#include "loadgen/stats.h"

namespace mtp::loadgen {

// A "server_metrics" line: a server's counters changed by one run of one level (spec_counters.h).
struct ServerMetricsRecord {
  int level = 0;
  double rate = 0;
  int repeat = 0;
  std::string server;  // with --baseline: "target" or "baseline"
  SpecCounters spec;
};

struct RunData {
  Json header;                          // null when the file has no header line
  std::vector<RequestRecord> requests;  // in file order, each with its events
  std::vector<ServerMetricsRecord> server_metrics;
};

// Reads a run file. A line that is not JSON or lacks a required field fails with "PATH:LINE: why".
Expected<RunData> read_run(const std::string& path);

// The figures of one concurrency level, over its measured (not warm-up) requests.
struct LevelSummary {
  int concurrency = 0;  // with a rate: the cap on requests in flight
  double rate = 0;      // arrival rate in requests/s; 0: closed loop
  std::string server;   // with --baseline: "target" or "baseline"
  // Set in per-group summaries of replay runs: the depth stratum ("2048-8192") or the turns ("3-4").
  std::string group;
  int completed = 0, failed = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double duration_s = 0;      // first measured send to last measured end
  double window_s = 0;        // the steady-state window's length
  bool window_steady = true;  // false: the steady window was empty and the whole duration was used
  double output_throughput = 0, request_throughput = 0;  // per second over the window
  Dist ttft_ms, tpot_ms, itl_ms, e2el_ms, lag_ms;
  std::map<std::string, int> token_sources;  // requests per token_source
  // Speculative decoding, summed over requests whose timings have draft_n.
  int spec_requests = 0;
  int64_t draft_n = 0, draft_accepted = 0, draft_rounds = 0;
  std::vector<double> accepted_per_position;  // accepted drafts at each position, summed (rate * rounds)
  // The same from the server's /metrics counters (vLLM), summed over the level's runs; not per stratum.
  SpecCounters server_spec;
};

std::vector<LevelSummary> summarize_run(const RunData& run);

// One request's figures over its whole life, -1 where it has none: completion tokens per second of E2E, and
// TPOT in seconds (first token to end over the tokens after the first). Paired ratios and gates use them.
double request_output_rate(const RequestRecord& r);
double request_tpot_s(const RequestRecord& r);
// One summary per (level, depth stratum) of a run whose requests carry strata (`mtp replay --strata`), in
// level order, then by prompt length; empty for other runs.
std::vector<LevelSummary> summarize_strata(const RunData& run);
// One summary per (level, turn range) of a replay run whose requests carry turns (sessions): turns 1 and 2,
// then "3-4", "5-8", ... up to ">64"; empty for other runs. TTFT by turn shows what a prefix cache reuses.
std::vector<LevelSummary> summarize_turns(const RunData& run);

// A level as the tables name it: "4" (closed loop), "0.5/s c<=4" (a rate, then the cap on requests in
// flight).
std::string level_label(int concurrency, double rate);

// A markdown table, one row per level (with a first column `group_title` for per-group summaries).
std::string markdown_report(const std::vector<LevelSummary>& levels, const std::string& group_title = "");
// A table of the server's /metrics speculative-decoding figures per level; "" when no level has them.
std::string markdown_server_spec(const std::vector<LevelSummary>& levels);
// The JSON summary: {"source", "header", "levels": [...]} with vLLM's result keys per level, "strata": [...]
// (each also with "stratum") when `strata` is not empty, and "turns": [...] (each with "turns") when
// `turns` is not empty.
Json json_report(const RunData& run, const std::vector<LevelSummary>& levels, const std::string& source,
                 const std::vector<LevelSummary>& strata = {}, const std::vector<LevelSummary>& turns = {});

}  // namespace mtp::loadgen
