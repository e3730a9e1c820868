#include "loadgen/repeats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace mtp::loadgen {
namespace {

// t_{0.975, df} for df 1..30; beyond, the Cornish-Fisher expansion about the normal quantile (error < 1e-4).
constexpr double kT975[30] = {12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060,
                              2.2622,  2.2281, 2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199,
                              2.1098,  2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639,
                              2.0595,  2.0555, 2.0518, 2.0484, 2.0452, 2.0423};

// Each repeat's part of the run, its requests copied, so summarize_run gives that repeat's levels.
std::vector<RunData> split_by_repeat(const RunData& run) {
  std::set<int> ids;
  for (const RequestRecord& r : run.requests) ids.insert(r.repeat);
  std::vector<RunData> out;
  for (int k : ids) {
    RunData part{run.header, {}, {}};
    for (const RequestRecord& r : run.requests)
      if (r.repeat == k) part.requests.push_back(r);
    out.push_back(std::move(part));
  }
  return out;
}

std::string interval_cell(const Interval& i, int decimals) {
  if (i.n == 0) return "-";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.*f [%.*f, %.*f]", decimals, i.mean, decimals, i.lo, decimals, i.hi);
  return buf;
}

Json interval_json(const Interval& i) {
  return {{"n", i.n}, {"mean", i.mean}, {"ci95", {i.lo, i.hi}}};
}

}  // namespace

double t975(int df) {
  if (df <= 30) return kT975[std::max(df, 1) - 1];
  const double z = 1.959964, d = df;
  return z + (z * z * z + z) / (4 * d) + (5 * std::pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * d * d);
}

Interval mean_interval(const std::vector<double>& values) {
  Interval out;
  out.n = static_cast<int>(values.size());
  if (values.empty()) return out;
  double sum = 0;
  for (double v : values) sum += v;
  out.mean = sum / out.n;
  out.lo = out.hi = out.mean;
  if (out.n < 2) return out;
  double ss = 0;
  for (double v : values) ss += (v - out.mean) * (v - out.mean);
  const double half = t975(out.n - 1) * std::sqrt(ss / (out.n - 1)) / std::sqrt(static_cast<double>(out.n));
  out.lo = out.mean - half;
  out.hi = out.mean + half;
  return out;
}

std::vector<RepeatSummary> summarize_repeats(const RunData& run) {
  const std::vector<RunData> parts = split_by_repeat(run);
  if (parts.size() < 2) return {};
  struct Values {
    std::vector<double> tput, tpot, ttft;
  };
  std::vector<RepeatSummary> out;
  for (const LevelSummary& s : summarize_run(run))
    out.push_back({s.concurrency, s.rate, s.server, {}, {}, {}});
  std::vector<Values> values(out.size());
  for (const RunData& part : parts) {
    for (const LevelSummary& s : summarize_run(part)) {
      for (size_t k = 0; k < out.size(); ++k) {
        if (out[k].concurrency != s.concurrency || out[k].rate != s.rate || out[k].server != s.server)
          continue;
        if (s.completed > 0) values[k].tput.push_back(s.output_throughput);
        if (s.tpot_ms.n > 0) values[k].tpot.push_back(s.tpot_ms.median);
        if (s.ttft_ms.n > 0) values[k].ttft.push_back(s.ttft_ms.median);
      }
    }
  }
  for (size_t k = 0; k < out.size(); ++k) {
    out[k].output_throughput = mean_interval(values[k].tput);
    out[k].tpot_p50_ms = mean_interval(values[k].tpot);
    out[k].ttft_p50_ms = mean_interval(values[k].ttft);
  }
  return out;
}

std::string markdown_repeats(const std::vector<RepeatSummary>& levels) {
  std::string out =
      "| c | repeats | output tok/s mean [95% CI] | TPOT p50 ms mean [95% CI] | TTFT p50 ms mean [95% CI] |\n"
      "|---:|---:|---:|---:|---:|\n";
  for (const RepeatSummary& s : levels) {
    out += "| " + level_label(s.concurrency, s.rate) + (s.server.empty() ? "" : " " + s.server) + " | " +
           std::to_string(s.output_throughput.n) + " | " + interval_cell(s.output_throughput, 1) + " | " +
           interval_cell(s.tpot_p50_ms, 2) + " | " + interval_cell(s.ttft_p50_ms, 1) + " |\n";
  }
  return out;
}

Json repeats_json(const std::vector<RepeatSummary>& levels) {
  Json out = Json::array();
  for (const RepeatSummary& s : levels) {
    out.push_back({{"max_concurrency", s.concurrency},
                   {"request_rate", s.rate > 0 ? Json(s.rate) : Json("inf")},
                   {"server", s.server.empty() ? Json() : Json(s.server)},
                   {"output_throughput", interval_json(s.output_throughput)},
                   {"median_tpot_ms", interval_json(s.tpot_p50_ms)},
                   {"median_ttft_ms", interval_json(s.ttft_p50_ms)}});
  }
  return out;
}

}  // namespace mtp::loadgen
