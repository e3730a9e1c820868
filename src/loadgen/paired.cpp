#include "loadgen/paired.h"

#include <cmath>
#include <cstdio>
#include <map>

namespace mtp::loadgen {
namespace {

struct Pair {
  const RequestRecord* target = nullptr;
  const RequestRecord* baseline = nullptr;
};

// The ratio's geometric mean and interval: the t interval of the log ratios, exponentiated. Logs because a
// ratio of 2 and one of 0.5 should cancel, and the interval of a ratio is not symmetric.
Interval log_interval(const std::vector<double>& logs) {
  Interval i = mean_interval(logs);
  i.mean = std::exp(i.mean);
  i.lo = std::exp(i.lo);
  i.hi = std::exp(i.hi);
  return i;
}

PairedSummary summarize_level(int c, double rate, const std::map<int64_t, Pair>& pairs) {
  PairedSummary s{c, rate, 0, {}, {}};
  std::vector<double> rates, tpots;
  for (const auto& [id, p] : pairs) {
    if (!p.target || !p.baseline || !p.target->ok || !p.baseline->ok) continue;
    ++s.pairs;
    const double ta = request_output_rate(*p.target), ba = request_output_rate(*p.baseline);
    if (ta > 0 && ba > 0) rates.push_back(std::log(ta / ba));
    const double tt = request_tpot_s(*p.target), bt = request_tpot_s(*p.baseline);
    if (tt > 0 && bt > 0) tpots.push_back(std::log(tt / bt));
  }
  s.output_rate = log_interval(rates);
  s.tpot = log_interval(tpots);
  return s;
}

std::string ratio_cell(const Interval& i) {
  if (i.n == 0) return "-";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3f [%.3f, %.3f]", i.mean, i.lo, i.hi);
  return buf;
}

Json ratio_json(const Interval& i) {
  return {{"n", i.n}, {"geomean", i.mean}, {"ci95", {i.lo, i.hi}}};
}

}  // namespace

std::vector<PairedSummary> summarize_pairs(const RunData& run) {
  using Key = std::pair<int, double>;
  std::vector<Key> order;
  std::map<Key, std::map<int64_t, Pair>> levels;
  for (const RequestRecord& r : run.requests) {
    if (r.server.empty() || r.pair < 0 || r.warmup) continue;
    const Key key{r.level, r.rate};
    if (!levels.count(key)) order.push_back(key);
    Pair& p = levels[key][r.pair];
    (r.server == "baseline" ? p.baseline : p.target) = &r;
  }
  std::vector<PairedSummary> out;
  for (const Key& key : order) out.push_back(summarize_level(key.first, key.second, levels[key]));
  return out;
}

std::string markdown_pairs(const std::vector<PairedSummary>& levels) {
  std::string out =
      "| c | pairs | output tok/s per request, target/baseline [95% CI] | TPOT target/baseline [95% CI] |\n"
      "|---:|---:|---:|---:|\n";
  for (const PairedSummary& s : levels)
    out += "| " + level_label(s.concurrency, s.rate) + " | " + std::to_string(s.pairs) + " | " +
           ratio_cell(s.output_rate) + " | " + ratio_cell(s.tpot) + " |\n";
  return out;
}

Json pairs_json(const std::vector<PairedSummary>& levels) {
  Json out = Json::array();
  for (const PairedSummary& s : levels) {
    out.push_back({{"max_concurrency", s.concurrency},
                   {"request_rate", s.rate > 0 ? Json(s.rate) : Json("inf")},
                   {"pairs", s.pairs},
                   {"output_rate_ratio", ratio_json(s.output_rate)},
                   {"tpot_ratio", ratio_json(s.tpot)}});
  }
  return out;
}

}  // namespace mtp::loadgen
