// A reader of the Prometheus text exposition format (what `GET /metrics` returns on vLLM, SGLang and
// llama-server): one sample per line, `name{label="value",...} value [timestamp]`, with `#` comment lines
// (HELP, TYPE) and blank lines ignored. Enough for counters and gauges with labels; histogram and summary
// series are read as the plain samples they are written as (`_bucket`, `_sum`, `_count`).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace mtp::loadgen {

struct PromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written, values unescaped
  double value = 0;

  // The value of label `key`, or "" when the sample has none.
  std::string label(std::string_view key) const;
};

// Every sample of a scrape, in file order. A line that is not a sample, a comment or blank fails with
// "line N: why" (the whole body is then not trusted: a server that answers /metrics with something else,
// an HTML error page, is not read as zero counters).
Expected<std::vector<PromSample>> parse_prom_text(std::string_view text);

}  // namespace mtp::loadgen
