// `mtp bench --baseline URL2`: the same prompts sent to two servers, interleaved; the report's paired ratios
// target/baseline per level, each the geometric mean of per-request ratios with a 95% Student-t interval on
// their logarithms (docs/bench.md, "Baseline").
#pragma once

#include <string>
#include <vector>

#include "loadgen/repeats.h"

namespace mtp::loadgen {

struct PairedSummary {
  int concurrency = 0;
  double rate = 0;
  int pairs = 0;         // measured prompts both servers answered
  Interval output_rate;  // per request: completion tokens / E2E, target over baseline
  Interval tpot;         // per request TPOT, target over baseline (below 1: the target is faster)
};

// One per level with both servers' records, in run order; empty for a run without --baseline.
std::vector<PairedSummary> summarize_pairs(const RunData& run);

std::string markdown_pairs(const std::vector<PairedSummary>& levels);
Json pairs_json(const std::vector<PairedSummary>& levels);

}  // namespace mtp::loadgen
