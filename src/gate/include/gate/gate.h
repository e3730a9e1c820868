// `mtp gate`: quality gates registered before the numbers exist (docs/gate.md). A rules file names metrics of
// `mtp bench`/`mtp replay` run files, a comparison, a threshold, a minimum sample size and a statistic;
// `freeze` writes a lock with the rules' hash, the UTC time and the hashes of the input files they name;
// `run` refuses rules changed after the lock, inputs that changed, and results measured before it, then
// judges each rule.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace mtp::gate {

using Json = nlohmann::ordered_json;

// kValue and kNormal judge the figures of an `mtp perplexity --kl-divergence --json` report: its point value,
// or that value's one-sided normal bound (value -/+ z * the report's standard error). kCount: the total of a
// count metric (markup_leaks), compared with the threshold as it is. For the ratio-of-sums metrics
// (mean_acceptance_length, net_speedup) kValue is the point ratio and kBootstrap its one-sided percentile
// bootstrap bound, resampling requests (or prompt pairs) whole.
enum class Statistic {
  kMean,
  kMedian,
  kBootstrapMean,
  kBootstrapMedian,
  kWilson,
  kValue,
  kNormal,
  kCount,
  kBootstrap
};

// Per-request metrics (one sample per measured request), paired ratios (one per prompt both servers of a
// --baseline run answered) and proportions (successes over trials, judged with a Wilson bound).
enum class Metric {
  kTtftMs,
  kTpotMs,
  kE2eS,
  kOutputRate,
  kPairedOutputRateRatio,
  kPairedTpotRatio,
  kDraftAcceptance,
  kFailureRate,
  kGreedyDivergence,  // from `mtp gate probe greedy` files: divergences over prompts that completed
  // From an `mtp perplexity --kl-divergence --json` report, one sample per scored token.
  kKldMean,
  kKldMedian,
  kKldP90,
  kKldP95,
  kKldP99,
  kKldP999,
  kKldMax,
  kSameTopRate,  // tokens whose top token matches the base's
  kPplRatio,
  kLnPplRatio,
  kToolCallPassRate,  // from `mtp gate probe tools` files: conversations that passed every check
  kMarkupLeaks,       // from `mtp gate probe tools` files: markup tokens found in content (a count)
  // The acceptance floor, from the server's per-request timings: the share of draft rounds whose draft at
  // `position` was accepted (a proportion), and tokens per verification round, 1 + accepted / rounds.
  kPositionAcceptance,
  kMeanAcceptanceLength,
  // Paired prompts (a `--baseline` bench run, or replay runs of one trace against both servers): the
  // target's aggregate output rate over the baseline's, (sum tokens / sum E2E) / (sum tokens / sum E2E).
  kNetSpeedup,
};

// A metric read from a KL-divergence report.
bool is_kld_metric(Metric m);

struct Rule {
  std::string id;
  Metric metric = Metric::kTpotMs;
  std::optional<int> level;  // only requests of this concurrency level (all measured ones when absent)
  std::string server;        // only "target" or "baseline" requests of a --baseline run ("" = all); for
                             // tool probes, "baseline" is the reference side (speculation off)
  std::string category;      // only replayed requests of this trace category ("" = all)
  std::string stratum;       // only replayed requests of this depth stratum, e.g. "2048-8192" ("" = all)
  int position = 0;          // position_acceptance: the draft position judged, from 1
  bool at_least = true;      // ">=": the lower bound must reach the threshold; "<=": the upper bound
  double threshold = 0;
  Statistic statistic = Statistic::kMean;
  double confidence = 0.95;  // one-sided, for the bootstrap and Wilson bounds
  int64_t min_samples = 1;   // requests, pairs, or trials of a proportion
};

struct Rules {
  std::string name;
  std::vector<std::string> inputs;  // files whose contents the lock pins (models, prompt sets)
  std::vector<Rule> rules;
  std::string canonical;  // the rules file as canonical JSON (sorted keys, no spaces)
  std::string sha256;     // of `canonical`
};

// Parses and validates a rules file; every problem is one line naming the rule and the field, and a
// malformed file names the line and column ("rules.toml:7:12: ..."). A TOML file holds the same fields as
// the JSON one ([[rules]] tables) and hashes the same: its canonical form is the JSON it spells.
Expected<Rules> parse_rules(const std::string& text, const std::string& source);  // JSON
Expected<Rules> parse_rules_toml(const std::string& text, const std::string& source);
bool is_toml_path(const std::string& path);  // ends in ".toml"
// TOML when the path ends in ".toml", JSON otherwise.
Expected<Rules> read_rules(const std::string& path);

struct LockedInput {
  std::string path;
  uint64_t bytes = 0;
  std::string sha256;
};

struct Lock {
  std::string rules_sha256;
  std::string frozen_utc;  // "YYYY-MM-DDTHH:MM:SSZ"
  std::vector<LockedInput> inputs;
};

// The lock beside a rules file: RULES.lock.
std::string default_lock_path(const std::string& rules_path);
Expected<Lock> freeze(const Rules& rules);
Json lock_json(const Lock& lock);
Expected<Lock> read_lock(const std::string& path);

// Refuses (Status) when the rules changed after the lock or an input's contents differ from it.
Status check_lock(const Rules& rules, const Lock& lock);

struct Verdict {
  std::string rule_id;
  bool pass = false;
  int64_t samples = 0;
  double estimate = 0;  // the point value (mean, median or proportion)
  double bound = 0;     // the value compared with the threshold (the estimate for kMean/kMedian)
  std::string why;      // one line: the comparison made, or why the rule could not pass
};

// Judges every rule on the pooled requests of `runs` (paths of run files, probe files of `mtp gate probe`,
// and at most one KL-divergence report of `mtp perplexity --kl-divergence --json`). Refuses a file whose
// header's start time is before the lock's time, or that has no start time. `baselines`: replay run files
// of the baseline server (speculation off); their requests are paired by trace line with the replayed
// requests of `runs`, which then count as the target's.
Expected<std::vector<Verdict>> judge(const Rules& rules, const Lock& lock,
                                     const std::vector<std::string>& runs,
                                     const std::vector<std::string>& baselines = {});

std::string verdicts_table(const Rules& rules, const std::vector<Verdict>& verdicts);
Json verdicts_json(const Rules& rules, const Lock& lock, const std::vector<Verdict>& verdicts);
std::string verdicts_junit(const Rules& rules, const std::vector<Verdict>& verdicts);

// Statistics, exposed for the tests.
std::string sha256_hex(const std::string& bytes);
Expected<std::string> sha256_file(const std::string& path, uint64_t* bytes);
double normal_quantile(double p);  // the inverse of the standard normal CDF, p in (0, 1)
// One-sided Wilson score bound of successes / trials at `confidence`: the lower bound when `lower`.
double wilson_bound(int64_t successes, int64_t trials, double confidence, bool lower);
// One-sided percentile-bootstrap bound of the mean (or median) of `values`: 2000 resamples from a fixed
// seed, so the same data always gives the same bound.
double bootstrap_bound(const std::vector<double>& values, bool median, double confidence, bool lower);

// One resampling unit of a ratio of sums (a request, or a prompt both servers answered); the figure is
// (sum num / sum den) / (sum num_ref / sum den_ref).
struct RatioUnit {
  double num = 0, den = 0, num_ref = 1, den_ref = 1;
};
double ratio_of_sums(const std::vector<RatioUnit>& units);
// Its one-sided percentile-bootstrap bound, resampling units whole (2000 resamples, the fixed seed).
double bootstrap_ratio_bound(const std::vector<RatioUnit>& units, double confidence, bool lower);

}  // namespace mtp::gate
