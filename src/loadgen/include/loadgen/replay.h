// `mtp replay`: the requests of a trace (loadgen/trace.h) sent to a server, closed loop at a concurrency or
// at the trace's arrival times scaled by a factor, every request into the same raw run file as `mtp bench`
// (record.h) with its depth stratum. Turns of one session go in trace order, one at a time, with their
// recorded history or the server's live replies (live_history.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/record.h"
#include "loadgen/runner.h"
#include "loadgen/stream_client.h"
#include "loadgen/trace.h"

namespace mtp::loadgen {

struct ReplayOptions {
  ClientOptions client;
  std::string model;                 // empty: the first of GET /v1/models
  std::string trace, format;         // for the header
  int64_t skipped_trace_lines = 0;   // for the header: lines of an imported dataset left out as unreadable
  int concurrency = 1;               // closed loop: workers; timed: requests in flight at most
  std::optional<double> time_scale;  // set: timed arrivals at trace time * time_scale
  int max_tokens_cap = 512;          // max_tokens = min(recorded output length, cap)
  std::vector<int64_t> strata;       // ascending prompt-token bounds; empty: no strata
  bool defeat_cache = false;         // a unique nonce before each prompt and a distinct cache_salt
  bool live_history = false;         // later turns carry the server's replies (live_history.h)
  uint64_t seed = 1;                 // synthetic prompts
  std::string tool_version;
  Warn on_warning;  // a server's /metrics that cannot be read (the replay goes on without it)
};

// The stratum of a prompt length: "<B0", "B0-B1", ..., ">=Bn"; "unknown" for -1.
std::string stratum_label(const std::vector<int64_t>& bounds, int64_t prompt_tokens);

// The max_tokens sent for a recorded output length (-1: unknown, the cap).
int capped_max_tokens(int64_t output_tokens, int cap);

// What is sent for trace request `index`: recorded text (or `messages` instead of the recorded ones, when
// given), or synthetic text of the recorded length (Mooncake hash blocks shared as in the trace); with
// defeat_cache, `nonce` and the index before the prompt and as cache_salt.
ChatRequest replay_request(const ReplayOptions& o, const TraceRequest& t, int64_t index,
                           const std::string& model, const std::string& nonce,
                           const Json* messages = nullptr);

Json replay_header(const ReplayOptions& o, const std::vector<TraceRequest>& reqs, const std::string& model);

// Sends every request; fails only when the run file cannot be written or the options do not fit the trace
// (timed arrivals from a trace without times).
Status run_replay(const ReplayOptions& o, const std::vector<TraceRequest>& reqs, JsonlWriter& out,
                  const RequestDone& on_done = nullptr);

}  // namespace mtp::loadgen
