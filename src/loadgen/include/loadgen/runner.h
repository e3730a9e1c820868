// The benchmark behind `mtp bench`: for each concurrency level c, c workers each send their next request as
// soon as their previous one ends (closed loop), until the level's warm-up plus measured requests are done.
// With rates, each level is one rate instead: requests are due at Poisson arrival times and at most the
// largest --concurrency are in flight; a request that finds every worker busy is sent late, and its
// scheduled_ns vs sent_ns shows the lag (coordinated omission) rather than hiding it.
// Prompts are synthetic (prompts.h) or a dataset file's requests. Every finished request goes to the run
// file at once (record.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/record.h"
#include "loadgen/spec_counters.h"
#include "loadgen/stream_client.h"
#include "loadgen/trace.h"

namespace mtp::loadgen {

struct BenchOptions {
  ClientOptions client;
  std::string baseline_url;  // non-empty: every request also goes to this server (same prompt, interleaved)
  std::string model;         // empty: the first of GET /v1/models, else no "model" field
  std::vector<int> levels = {1};
  std::vector<double> rates;  // requests/s, one level each; empty: closed loop at each of `levels`
  int requests = 10;          // measured requests per level
  int repeat = 1;  // runs of every level; each run sweeps all levels, so a drift spreads over them all
  int warmup = 1;  // warm-up requests per level, before the measured ones, excluded from metrics
  int prompt_tokens = 128;
  int prompt_tokens_max = 0;  // > prompt_tokens: each prompt's length uniform in [prompt_tokens, this]
  int max_tokens = 128;
  uint64_t seed = 1;
  std::optional<double> temperature;
  bool ignore_eos = false;
  // --dataset: the requests of a dataset or trace file (trace.h) instead of synthetic prompts, request id n
  // sending entry n mod size as `mtp replay` would, max_tokens = min(its recorded output length, max_tokens).
  std::shared_ptr<const std::vector<TraceRequest>> dataset;
  std::string dataset_path, dataset_format;  // for the header
  int64_t dataset_skipped = 0;               // unreadable lines of an imported dataset left out
  std::string tool_version;                  // for the header line
  Warn on_warning;  // a server's /metrics that cannot be read (the run goes on without it)
};

// The arrival offsets (ns from the level's start) of n requests at `rate` per second: cumulative
// exponential gaps drawn from a generator seeded with (seed, level_index), so a run's schedule is
// reproducible and each level's differs. The first request is due after one gap, not at once.
std::vector<int64_t> poisson_offsets_ns(double rate, int n, uint64_t seed, int level_index);

// Called after each request (from the worker that ran it; calls are serialized).
using RequestDone = std::function<void(const RequestRecord&)>;

// The run file's first line: what was run and when.
Json header_json(const BenchOptions& o, const std::string& model);

// Runs every level; fails only when the run file cannot be written (request failures are records).
Status run_bench(const BenchOptions& o, JsonlWriter& out, const RequestDone& on_done = nullptr);

}  // namespace mtp::loadgen
