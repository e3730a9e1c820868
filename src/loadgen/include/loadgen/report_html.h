// `mtp report RUN.jsonl --html OUT.html`: the run as one self-contained HTML page (docs/bench.md, "HTML
// report"): the levels' table, and inline SVG charts of output throughput and TPOT p50/p99 against the
// level, acceptance per draft position, and with --baseline the paired speedup with its 95% interval. No
// script, no stylesheet or font from elsewhere: the file opens offline and can be mailed as it is.
#pragma once

#include <string>

#include "loadgen/report.h"

namespace mtp::loadgen {

std::string html_report(const RunData& run, const std::string& source);

}  // namespace mtp::loadgen
