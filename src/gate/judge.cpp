// Judging rules on run files: the samples each metric takes from the requests, the statistics that bound
// them, and the verdicts' table, JSON and JUnit forms (docs/gate.md).
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string_view>
#include <tuple>

#include "base/check.h"
#include "base/html_escape.h"
#include "gate/gate.h"
#include "gate/kld_report.h"
#include "gate/probe.h"
#include "gate/tool_probe.h"
#include "loadgen/report.h"

namespace mtp::gate {
namespace {

constexpr int kBootstrapResamples = 2000;
constexpr uint64_t kBootstrapSeed = 20261205;

// A request's figures as `mtp report` defines them (docs/bench.md, "Metrics"); -1 where it has none.
double ttft_ms(const loadgen::RequestRecord& r) {
  return r.first_token_ns >= 0 ? 1e-6 * static_cast<double>(r.first_token_ns - r.sent_ns) : -1;
}

double sample_of(Metric m, const loadgen::RequestRecord& r) {
  switch (m) {
    case Metric::kTtftMs:
      return ttft_ms(r);
    case Metric::kTpotMs:
    case Metric::kPairedTpotRatio: {
      const double s = loadgen::request_tpot_s(r);
      return s < 0 ? -1 : 1e3 * s;
    }
    case Metric::kE2eS:
      return 1e-9 * static_cast<double>(r.end_ns - r.sent_ns);
    default:
      return loadgen::request_output_rate(r);
  }
}

bool selected(const Rule& rule, const loadgen::RequestRecord& r) {
  if (r.warmup) return false;
  if (rule.level && r.level != *rule.level) return false;
  if (!rule.category.empty() && r.category != rule.category) return false;
  if (!rule.stratum.empty() && r.stratum != rule.stratum) return false;
  return rule.server.empty() || r.server == rule.server;
}

int64_t timing(const loadgen::Json& t, const char* key) {
  return t.is_object() && t.contains(key) && t[key].is_number_integer() ? t[key].get<int64_t>() : 0;
}

struct Samples {
  std::vector<double> values;         // per request or per pair
  int64_t successes = 0, trials = 0;  // proportions, and counts (successes: the count, trials: conversations)
  std::vector<RatioUnit> units;       // ratio-of-sums metrics: per request or per pair
};

// Draft rounds of a request, and the rounds whose draft at `position` (from 1) was accepted: the server
// reports the latter as a share of rounds (timings.acceptance_per_position, mtp.cpp's and vLLM's definition).
void add_position(const loadgen::Json& t, int position, Samples& s) {
  const int64_t rounds = timing(t, "draft_rounds");
  if (rounds <= 0) return;
  s.trials += rounds;
  const auto pos = t.find("acceptance_per_position");
  if (pos == t.end() || !pos->is_array() || pos->size() < static_cast<size_t>(position)) return;
  const loadgen::Json& rate = (*pos)[static_cast<size_t>(position - 1)];
  if (rate.is_number())
    s.successes +=
        std::clamp<int64_t>(std::llround(rate.get<double>() * static_cast<double>(rounds)), 0, rounds);
}

// One side of a prompt pair for net_speedup: completion tokens and E2E seconds.
struct SideTime {
  double tokens = -1, seconds = -1;
};

void add_units_of_pairs(const std::map<std::tuple<int, int, int64_t>, std::pair<SideTime, SideTime>>& pairs,
                        Samples& s) {
  for (const auto& [key, p] : pairs) {
    const SideTime& t = p.first;
    const SideTime& b = p.second;
    if (t.tokens > 0 && t.seconds > 0 && b.tokens > 0 && b.seconds > 0)
      s.units.push_back({t.tokens, t.seconds, b.tokens, b.seconds});
  }
}

// Everything the run and probe files hold, pooled.
struct Pooled {
  std::vector<loadgen::RequestRecord> requests;
  std::vector<GreedyOutcome> probes;
  std::vector<ToolRun> tool_runs;
  std::vector<KldReport> reports;  // judged one at a time: percentiles do not pool
};

Samples collect_tool_runs(const Rule& rule, const std::vector<ToolRun>& runs) {
  Samples s;
  for (const ToolRun& r : runs) {
    if (!rule.server.empty() && r.side != (rule.server == "baseline" ? "reference" : "target")) continue;
    if (rule.level && r.concurrency != *rule.level) continue;
    s.trials += 1;
    s.successes += rule.metric == Metric::kMarkupLeaks ? r.leaks : (r.pass ? 1 : 0);
  }
  return s;
}

Samples collect(const Rule& rule, const Pooled& pooled) {
  const std::vector<loadgen::RequestRecord>& requests = pooled.requests;
  if (rule.metric == Metric::kToolCallPassRate || rule.metric == Metric::kMarkupLeaks)
    return collect_tool_runs(rule, pooled.tool_runs);
  Samples s;
  if (rule.metric == Metric::kGreedyDivergence) {
    for (const GreedyOutcome& g : pooled.probes) {
      if (g.kind == "failed" || (rule.level && g.concurrency != *rule.level)) continue;
      s.trials += 1;
      s.successes += g.kind == "divergence" ? 1 : 0;
    }
    return s;
  }
  const bool paired =
      rule.metric == Metric::kPairedOutputRateRatio || rule.metric == Metric::kPairedTpotRatio;
  std::map<std::tuple<int, int, int64_t>, std::pair<double, double>>
      pairs;  // (level, repeat, pair) -> ratio terms
  std::map<std::tuple<int, int, int64_t>, std::pair<SideTime, SideTime>> timed;  // the same, for net_speedup
  for (const loadgen::RequestRecord& r : requests) {
    if (!selected(rule, r)) continue;
    if (rule.metric == Metric::kFailureRate) {
      s.trials += 1;
      s.successes += r.ok ? 0 : 1;
      continue;
    }
    if (!r.ok) continue;
    if (rule.metric == Metric::kDraftAcceptance) {
      s.trials += timing(r.timings, "draft_n");
      s.successes += timing(r.timings, "draft_n_accepted");
      continue;
    }
    if (rule.metric == Metric::kPositionAcceptance) {
      add_position(r.timings, rule.position, s);
      continue;
    }
    if (rule.metric == Metric::kMeanAcceptanceLength) {
      const double rounds = static_cast<double>(timing(r.timings, "draft_rounds"));
      if (rounds > 0)
        s.units.push_back({rounds + static_cast<double>(timing(r.timings, "draft_n_accepted")), rounds});
      continue;
    }
    if (rule.metric == Metric::kNetSpeedup) {
      if (r.pair < 0 || r.completion_tokens <= 0) continue;
      auto& p = timed[{r.level, r.repeat, r.pair}];
      (r.server == "baseline" ? p.second : p.first) = {static_cast<double>(r.completion_tokens),
                                                       1e-9 * static_cast<double>(r.end_ns - r.sent_ns)};
      continue;
    }
    const double v = sample_of(rule.metric, r);
    if (v < 0) continue;
    if (!paired) {
      s.values.push_back(v);
    } else if (r.pair >= 0) {
      auto& p = pairs.try_emplace({r.level, r.repeat, r.pair}, -1.0, -1.0).first->second;
      (r.server == "baseline" ? p.second : p.first) = v;
    }
  }
  for (const auto& [key, p] : pairs) {
    if (p.first > 0 && p.second > 0) s.values.push_back(p.first / p.second);
  }
  add_units_of_pairs(timed, s);
  return s;
}

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

const char* statistic_name(Statistic s) {
  switch (s) {
    case Statistic::kMean:
      return "mean";
    case Statistic::kMedian:
      return "median";
    case Statistic::kBootstrapMean:
      return "bootstrap bound of the mean";
    case Statistic::kBootstrapMedian:
      return "bootstrap bound of the median";
    case Statistic::kWilson:
      return "Wilson bound";
    case Statistic::kValue:
      return "value";
    case Statistic::kNormal:
      return "normal bound";
    case Statistic::kCount:
      return "count";
    case Statistic::kBootstrap:
      return "bootstrap bound";
  }
  return "";
}

bool is_point(Statistic s) {
  return s == Statistic::kMean || s == Statistic::kMedian || s == Statistic::kValue || s == Statistic::kCount;
}

// Fills v.pass and v.why from v.bound.
void compare(const Rule& rule, Verdict& v) {
  const bool lower = rule.at_least;
  v.pass = lower ? v.bound >= rule.threshold : v.bound <= rule.threshold;
  const bool point = is_point(rule.statistic);
  v.why = str_cat(point ? "" : (lower ? "lower " : "upper "), statistic_name(rule.statistic),
                  point ? "" : str_cat(" (", number(100 * rule.confidence), "%)"), " ", number(v.bound),
                  lower ? " >= " : " <= ", number(rule.threshold), v.pass ? "" : " fails");
}

bool too_few(const Rule& rule, Verdict& v) {
  if (v.samples >= rule.min_samples) return false;
  v.why = str_cat(v.samples, " samples, fewer than the ", rule.min_samples, " the rule requires");
  return true;
}

// A KL-divergence metric: one sample per scored token of the report.
Verdict judge_kld_rule(const Rule& rule, const KldReport& report) {
  Verdict v;
  v.rule_id = rule.id;
  v.samples = report.scored;
  if (too_few(rule, v)) return v;
  if (rule.statistic == Statistic::kWilson) {
    v.estimate = static_cast<double>(report.same_top) / static_cast<double>(report.scored);
    v.bound = wilson_bound(report.same_top, report.scored, rule.confidence, rule.at_least);
  } else {
    const KldFigure f = kld_figure(report, rule.metric);
    const double z = rule.statistic == Statistic::kNormal ? normal_quantile(rule.confidence) : 0.0;
    v.estimate = f.value;
    v.bound = rule.at_least ? f.value - z * f.err : f.value + z * f.err;
  }
  compare(rule, v);
  return v;
}

Verdict judge_rule(const Rule& rule, const Pooled& pooled) {
  const Samples s = collect(rule, pooled);
  Verdict v;
  v.rule_id = rule.id;
  const bool proportion = rule.statistic == Statistic::kWilson || rule.statistic == Statistic::kCount;
  const bool ratio = rule.metric == Metric::kMeanAcceptanceLength || rule.metric == Metric::kNetSpeedup;
  v.samples = proportion ? s.trials : static_cast<int64_t>(ratio ? s.units.size() : s.values.size());
  if (too_few(rule, v)) {
    if (v.samples == 0 && rule.metric == Metric::kNetSpeedup)
      v.why += " (no prompt pairs: an mtp bench --baseline run, or replays given with --baseline)";
    return v;
  }
  const bool lower = rule.at_least;
  switch (rule.statistic) {
    case Statistic::kWilson:
      v.estimate = static_cast<double>(s.successes) / static_cast<double>(s.trials);
      v.bound = wilson_bound(s.successes, s.trials, rule.confidence, lower);
      break;
    case Statistic::kCount:
      v.estimate = v.bound = static_cast<double>(s.successes);
      break;
    case Statistic::kMean:
      v.estimate = v.bound = mean_of(s.values);
      break;
    case Statistic::kMedian:
      v.estimate = v.bound = loadgen::median(s.values);
      break;
    case Statistic::kBootstrapMean:
      v.estimate = mean_of(s.values);
      v.bound = bootstrap_bound(s.values, false, rule.confidence, lower);
      break;
    case Statistic::kBootstrapMedian:
      v.estimate = loadgen::median(s.values);
      v.bound = bootstrap_bound(s.values, true, rule.confidence, lower);
      break;
    case Statistic::kValue:
      MTP_CHECK(ratio, "value judges KL-divergence reports and ratio-of-sums metrics only (rules.cpp)");
      v.estimate = v.bound = ratio_of_sums(s.units);
      break;
    case Statistic::kBootstrap:
      v.estimate = ratio_of_sums(s.units);
      v.bound = bootstrap_ratio_bound(s.units, rule.confidence, lower);
      break;
    case Statistic::kNormal:
      MTP_CHECK(false, "normal judges KL-divergence reports only (rules.cpp)");
  }
  compare(rule, v);
  return v;
}

// The one-sided bound of the bootstrap distribution `stats`: its (1 - confidence) quantile when `lower`.
double percentile_bound(std::vector<double>& stats, double confidence, bool lower) {
  std::sort(stats.begin(), stats.end());
  const double q = lower ? 1 - confidence : confidence;
  const size_t at = std::min(stats.size() - 1, static_cast<size_t>(q * static_cast<double>(stats.size())));
  return stats[at];
}

// Replay runs of one trace against two servers: each replayed request without a side gets `side` and one
// pair id per trace line, so the paired metrics see them as the two servers of a --baseline bench run.
void pair_replayed(std::vector<loadgen::RequestRecord>& requests, const char* side,
                   std::map<std::string, int64_t>& pair_ids) {
  for (loadgen::RequestRecord& r : requests) {
    if (r.trace_source.empty() || !r.server.empty()) continue;
    r.server = side;
    r.pair = pair_ids.try_emplace(r.trace_source, static_cast<int64_t>(pair_ids.size())).first->second;
  }
}

}  // namespace

double normal_quantile(double p) {
  // Bisection on the CDF 0.5 * erfc(-z / sqrt 2): 200 halvings of [-40, 40] reach double precision.
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double wilson_bound(int64_t successes, int64_t trials, double confidence, bool lower) {
  const double n = static_cast<double>(trials);
  const double p = static_cast<double>(successes) / n;
  const double z = normal_quantile(confidence);
  const double z2 = z * z;
  const double center = (p + z2 / (2 * n)) / (1 + z2 / n);
  const double half = z * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n);
  return lower ? center - half : center + half;
}

double bootstrap_bound(const std::vector<double>& values, bool median, double confidence, bool lower) {
  std::mt19937_64 rng(kBootstrapSeed);
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
  std::vector<double> stats(kBootstrapResamples), resample(values.size());
  for (double& stat : stats) {
    for (double& x : resample) x = values[pick(rng)];
    stat = median ? loadgen::median(resample) : mean_of(resample);
  }
  return percentile_bound(stats, confidence, lower);
}

double ratio_of_sums(const std::vector<RatioUnit>& units) {
  RatioUnit sum{0, 0, 0, 0};
  for (const RatioUnit& u : units) {
    sum.num += u.num;
    sum.den += u.den;
    sum.num_ref += u.num_ref;
    sum.den_ref += u.den_ref;
  }
  return (sum.num / sum.den) / (sum.num_ref / sum.den_ref);
}

double bootstrap_ratio_bound(const std::vector<RatioUnit>& units, double confidence, bool lower) {
  std::mt19937_64 rng(kBootstrapSeed);
  std::uniform_int_distribution<size_t> pick(0, units.size() - 1);
  std::vector<double> stats(kBootstrapResamples);
  std::vector<RatioUnit> resample(units.size());
  for (double& stat : stats) {
    for (RatioUnit& u : resample) u = units[pick(rng)];
    stat = ratio_of_sums(resample);
  }
  return percentile_bound(stats, confidence, lower);
}

// Refuses a file measured before the lock: both times are "YYYY-MM-DDTHH:MM:SSZ", so text order is time
// order.
static Status check_start(const std::string& path, const std::string& start, const Lock& lock) {
  if (start.empty())
    return invalid_argument(path,
                            ": no start time in its header: cannot show it was measured after the lock");
  if (start < lock.frozen_utc) {
    return invalid_argument(path, ": measured at ", start, ", before the rules were frozen at ",
                            lock.frozen_utc,
                            ": a gate judges only results that did not exist when it was registered");
  }
  return Status::Ok();
}

// Reads one file given to `judge` into `pooled`; `side` is "baseline" for a --baseline replay run, "target"
// for the others when replays are paired, "" otherwise.
static Status read_into(const std::string& path, const Lock& lock, const char* side,
                        std::map<std::string, int64_t>& pair_ids, Pooled& pooled) {
  if (std::string_view(side) != "baseline") {
    if (is_kld_report(path)) {
      MTP_ASSIGN_OR_RETURN(KldReport report, read_kld_report(path));
      MTP_RETURN_IF_ERROR(check_start(path, report.start_utc, lock));
      pooled.reports.push_back(report);
      return Status::Ok();
    }
    if (is_probe_file(path)) {
      MTP_ASSIGN_OR_RETURN(ProbeFile pf, read_probe_file(path));
      MTP_RETURN_IF_ERROR(check_start(path, pf.start_utc, lock));
      pooled.probes.insert(pooled.probes.end(), pf.outcomes.begin(), pf.outcomes.end());
      return Status::Ok();
    }
    if (is_tool_probe_file(path)) {
      MTP_ASSIGN_OR_RETURN(ToolProbeFile tf, read_tool_probe_file(path));
      MTP_RETURN_IF_ERROR(check_start(path, tf.start_utc, lock));
      pooled.tool_runs.insert(pooled.tool_runs.end(), tf.runs.begin(), tf.runs.end());
      return Status::Ok();
    }
  }
  MTP_ASSIGN_OR_RETURN(loadgen::RunData run, loadgen::read_run(path));
  const loadgen::Json& h = run.header;
  MTP_RETURN_IF_ERROR(check_start(path,
                                  h.is_object() && h.contains("start_utc") && h["start_utc"].is_string()
                                      ? h["start_utc"].get<std::string>()
                                      : "",
                                  lock));
  if (std::string_view(side) == "baseline" &&
      std::none_of(run.requests.begin(), run.requests.end(), [](const loadgen::RequestRecord& r) {
        return !r.trace_source.empty() && r.server.empty();
      })) {
    return invalid_argument(path,
                            ": --baseline takes an mtp replay run of the baseline server; this file has no ",
                            "replayed requests of its own");
  }
  if (*side != 0) pair_replayed(run.requests, side, pair_ids);
  for (loadgen::RequestRecord& r : run.requests) pooled.requests.push_back(std::move(r));
  return Status::Ok();
}

Expected<std::vector<Verdict>> judge(const Rules& rules, const Lock& lock,
                                     const std::vector<std::string>& runs,
                                     const std::vector<std::string>& baselines) {
  Pooled pooled;
  std::map<std::string, int64_t> pair_ids;  // trace line -> pair id, shared by both sides
  const char* side = baselines.empty() ? "" : "target";
  for (const std::string& path : baselines)
    MTP_RETURN_IF_ERROR(read_into(path, lock, "baseline", pair_ids, pooled));
  for (const std::string& path : runs) MTP_RETURN_IF_ERROR(read_into(path, lock, side, pair_ids, pooled));
  std::vector<Verdict> verdicts;
  for (const Rule& rule : rules.rules) {
    if (!is_kld_metric(rule.metric)) {
      verdicts.push_back(judge_rule(rule, pooled));
      continue;
    }
    // Percentiles of two reports do not pool: a KL-divergence rule judges exactly one.
    if (pooled.reports.size() != 1) {
      return invalid_argument("rule '", rule.id,
                              "' judges one KL-divergence report (mtp perplexity "
                              "--kl-divergence --json); ",
                              pooled.reports.size(), " given");
    }
    verdicts.push_back(judge_kld_rule(rule, pooled.reports.front()));
  }
  return verdicts;
}

std::string verdicts_table(const Rules& rules, const std::vector<Verdict>& verdicts) {
  std::string out = str_cat("gate '", rules.name, "' (rules sha256 ", rules.sha256, ")\n\n",
                            "| rule | verdict | samples | estimate | judged on |\n|---|---|---:|---:|---|\n");
  for (const Verdict& v : verdicts) {
    out += str_cat("| ", v.rule_id, " | ", v.pass ? "pass" : "FAIL", " | ", v.samples, " | ",
                   v.samples > 0 ? number(v.estimate) : "-", " | ", v.why, " |\n");
  }
  const auto failed =
      std::count_if(verdicts.begin(), verdicts.end(), [](const Verdict& v) { return !v.pass; });
  out += str_cat("\n", failed == 0 ? "PASS" : "FAIL", ": ", verdicts.size() - failed, " of ", verdicts.size(),
                 " rules pass\n");
  return out;
}

Json verdicts_json(const Rules& rules, const Lock& lock, const std::vector<Verdict>& verdicts) {
  Json j;
  j["gate"] = rules.name;
  j["rules_sha256"] = rules.sha256;
  j["frozen_utc"] = lock.frozen_utc;
  bool all = true;
  j["verdicts"] = Json::array();
  for (const Verdict& v : verdicts) {
    all = all && v.pass;
    j["verdicts"].push_back({{"rule", v.rule_id},
                             {"pass", v.pass},
                             {"samples", v.samples},
                             {"estimate", v.estimate},
                             {"bound", v.bound},
                             {"why", v.why},
                             {"rules_sha256", rules.sha256}});
  }
  j["pass"] = all;
  return j;
}

std::string verdicts_junit(const Rules& rules, const std::vector<Verdict>& verdicts) {
  const auto failed =
      std::count_if(verdicts.begin(), verdicts.end(), [](const Verdict& v) { return !v.pass; });
  std::string out = str_cat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"",
                            html_escape(rules.name), "\" tests=\"", verdicts.size(), "\" failures=\"", failed,
                            "\">\n  <properties><property name=\"rules_sha256\" value=\"", rules.sha256,
                            "\"/></properties>\n");
  for (const Verdict& v : verdicts) {
    out += str_cat("  <testcase classname=\"", html_escape(rules.name), "\" name=\"", html_escape(v.rule_id),
                   "\"");
    if (v.pass) {
      out += "/>\n";
    } else {
      out += str_cat(">\n    <failure message=\"", html_escape(v.why), "\"/>\n  </testcase>\n");
    }
  }
  return out + "</testsuite>\n";
}

}  // namespace mtp::gate
