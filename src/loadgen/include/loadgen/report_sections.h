// The whole report of a run, as `mtp report`, `mtp bench` and `mtp replay` print it: the main table, then
// whichever of the per-stratum, repeats, paired and server-counter tables the run has data for.
#pragma once

#include <string>

#include "loadgen/report.h"

namespace mtp::loadgen {

std::string markdown_sections(const RunData& run);
// json_report's summary plus "repeats" and "paired" when the run has them.
Json json_sections(const RunData& run, const std::string& source);

}  // namespace mtp::loadgen
