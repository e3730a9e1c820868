// The report `mtp perplexity --kl-divergence --json` prints (docs/perplexity.md): one JSON object with
// "tool": "mtp perplexity", "start_utc", "scored" (the scored tokens) and the statistics, read here for the
// KL-divergence metrics of a gate.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "gate/gate.h"

namespace mtp::gate {

struct KldReport {
  std::string start_utc;
  int64_t scored = 0;
  double kld_mean = 0, kld_err = 0;
  double kld_median = 0, kld_p90 = 0, kld_p95 = 0, kld_p99 = 0, kld_p999 = 0, kld_max = 0;
  int64_t same_top = 0;
  double ppl_ratio = 0, ppl_ratio_err = 0, ln_ppl_ratio = 0, ln_ppl_ratio_err = 0;
};

// Whether the file is one JSON object from `mtp perplexity` (one line as printed, or reformatted).
bool is_kld_report(const std::string& path);
// kCorrupt naming the field when a figure is missing, or when the report is a plain perplexity run (no
// --kl-divergence).
Expected<KldReport> read_kld_report(const std::string& path);

// The point value and standard error (0 where the report gives none) of a KL-divergence metric.
struct KldFigure {
  double value = 0, err = 0;
};
KldFigure kld_figure(const KldReport& r, Metric m);

}  // namespace mtp::gate
