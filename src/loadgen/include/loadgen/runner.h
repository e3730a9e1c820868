// The closed-loop benchmark behind `mtp bench`: for each concurrency level c, c workers each send their next
// request as soon as their previous one ends, until the level's warm-up plus measured requests are done.
// Every finished request goes to the run file at once (record.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/record.h"
#include "loadgen/stream_client.h"

namespace mtp::loadgen {

struct BenchOptions {
  ClientOptions client;
  std::string model;  // empty: the first of GET /v1/models, else no "model" field
  std::vector<int> levels = {1};
  int requests = 10;  // measured requests per level
  int warmup = 1;     // warm-up requests per level, before the measured ones, excluded from metrics
  int prompt_tokens = 128;
  int max_tokens = 128;
  uint64_t seed = 1;
  std::optional<double> temperature;
  bool ignore_eos = false;
  std::string tool_version;  // for the header line
};

// Called after each request (from the worker that ran it; calls are serialized).
using RequestDone = std::function<void(const RequestRecord&)>;

// The run file's first line: what was run and when.
Json header_json(const BenchOptions& o, const std::string& model);

// Runs every level; fails only when the run file cannot be written (request failures are records).
Status run_bench(const BenchOptions& o, JsonlWriter& out, const RequestDone& on_done = nullptr);

}  // namespace mtp::loadgen
