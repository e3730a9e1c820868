// Speculative-decoding counters a server exposes on `GET /metrics` (vLLM's names:
// vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens,
// _num_accepted_tokens_per_pos{position="k"}, each with the exposition's `_total` suffix), scraped before and
// after each level so the run file holds what the level changed (docs/bench.md, "Server counters").
// Cumulative since the server started, so only deltas mean anything; and server-wide, so other clients'
// traffic lands in them too.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loadgen/prom_text.h"
#include "loadgen/record.h"
#include "loadgen/stream_client.h"

namespace mtp::loadgen {

struct SpecCounters {
  bool present = false;  // the scrape (or every line summed) had the counters
  double drafts = 0;     // draft rounds
  double draft_tokens = 0, accepted_tokens = 0;
  std::vector<double> accepted_per_position;  // accepted tokens at draft position k

  double acceptance_rate() const { return draft_tokens > 0 ? accepted_tokens / draft_tokens : 0; }
  // Tokens per verification round: the target's own token plus the accepted drafts (vLLM's definition).
  double mean_accepted_length() const { return drafts > 0 ? 1 + accepted_tokens / drafts : 0; }
  // The share of rounds whose draft at position k was accepted.
  double position_rate(size_t k) const { return drafts > 0 ? accepted_per_position[k] / drafts : 0; }
};

// The counters in a scrape, summed over label sets other than `position` (several engines, models).
SpecCounters spec_counters(const std::vector<PromSample>& samples);
// after - before, position by position; present only when both are.
SpecCounters counters_delta(const SpecCounters& after, const SpecCounters& before);
// Adds `more` into `sum` (levels run several times under --repeat).
void add_counters(SpecCounters& sum, const SpecCounters& more);

// {"num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos": [...]}, and back
// (false when `j` is not such an object).
Json spec_counters_json(const SpecCounters& c);
bool spec_counters_from_json(const Json& j, SpecCounters& out);

using Warn = std::function<void(const std::string&)>;

// One server's counters around one level: scraped when constructed, again in finish(). A server that does
// not answer /metrics (no route, another status, unreachable) is skipped quietly; a body that is not the
// text format is reported through `warn` (one line) and skipped. Never fails the run.
class SpecCounterWindow {
 public:
  SpecCounterWindow(const ClientOptions& server, Warn warn);
  // The run-file line of the level's change: {"type": "server_metrics", <where's fields>, "source",
  // "spec_decode": {...}}, or null when either scrape had no counters.
  Json finish(const Json& where);

 private:
  SpecCounters scrape();

  ClientOptions server_;
  Warn warn_;
  SpecCounters before_;
};

}  // namespace mtp::loadgen
