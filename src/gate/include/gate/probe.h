// `mtp gate probe greedy`: the same prompts, greedy, with speculation on (the target) and off (the
// reference); where the outputs first differ, the reference's top-2 log-probability margin says whether that
// is a near-tie flip (batched verification may round a near tie the other way) or a real divergence
// (docs/gate.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gate/gate.h"

namespace mtp::gate {

struct GreedyProbeOptions {
  std::string url;            // the target: speculation on
  std::string reference_url;  // speculation off; empty: `url`, with `reference_body` merged in
  Json reference_body =
      Json::object();  // fields added to every reference request, e.g. {"speculative": false}
  std::string api_key;
  std::string model;  // empty: no "model" field
  int prompts = 20;
  int prompt_tokens = 64;
  int max_tokens = 64;
  // Requests in flight at once: the target's and the reference's requests of each prompt are queued one after
  // the other and taken in that order, so both sides are measured under the same load (batched verification
  // is where near-tie flips appear).
  int concurrency = 1;
  double epsilon = 0.1;  // a top-2 margin (nats) under this is a near tie
  uint64_t seed = 1;
  double timeout_s = 600;
};

// One prompt's verdict: "identical", "near_tie", "divergence", or "failed" (a request failed or carried no
// logprobs; `error` says which).
struct GreedyOutcome {
  int64_t prompt = 0;
  std::string kind;
  int64_t first_diff = -1;  // token index of the first difference
  double margin = 0;        // the reference's top-1 minus top-2 logprob there
  std::string target_token, reference_token;
  std::string error;
  int concurrency = 1;  // the probe's concurrency (a rule's "level" selects it)
};

// Compares two responses' `choices[0].logprobs.content` arrays (OpenAI chat format: token, logprob,
// top_logprobs). A shorter output that is a prefix of the other differs where it ends.
GreedyOutcome classify_greedy(const Json& target_content, const Json& reference_content, double epsilon);

// Runs the probe and writes one header line ("tool": "mtp gate probe greedy", "start_utc", "concurrency")
// and one "probe" line per prompt, in prompt order (each written once it and the prompts before it are
// answered), to `out_path`; fails only when the file cannot be written.
Expected<std::vector<GreedyOutcome>> run_greedy_probe(const GreedyProbeOptions& o,
                                                      const std::string& out_path);

// The "probe" lines of a probe file (header first), for `mtp gate run`; kCorrupt on a malformed line.
struct ProbeFile {
  std::string start_utc;
  std::vector<GreedyOutcome> outcomes;
};
Expected<ProbeFile> read_probe_file(const std::string& path);
bool is_probe_file(const std::string& path);

}  // namespace mtp::gate
