// The report's two forms: a markdown table for people, a JSON summary for programs (report.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loadgen/report.h"

namespace mtp::loadgen {
namespace {

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// "p50 / p99" of a distribution (p90 too with `with_p90`), "-" when it is empty.
std::string cell(const Dist& d, int decimals, bool with_p90 = false, double scale = 1.0) {
  if (d.n == 0) return "-";
  std::string s = fmt(d.median * scale, decimals);
  if (with_p90) s += " / " + fmt(d.p90 * scale, decimals);
  return s + " / " + fmt(d.p99 * scale, decimals);
}

std::string acceptance_cell(const LevelSummary& s) {
  if (s.spec_requests == 0 || s.draft_n == 0) return "-";
  return fmt(100.0 * static_cast<double>(s.draft_accepted) / static_cast<double>(s.draft_n), 1) + "% of " +
         std::to_string(s.draft_n);
}

void put_dist(Json& j, const char* name, const Dist& d) {
  auto v = [&](double x) { return d.n > 0 ? Json(x) : Json(); };
  j[str_cat("mean_", name, "_ms")] = v(d.mean);
  j[str_cat("median_", name, "_ms")] = v(d.median);
  j[str_cat("std_", name, "_ms")] = v(d.std);
  j[str_cat("p90_", name, "_ms")] = v(d.p90);
  j[str_cat("p99_", name, "_ms")] = v(d.p99);
}

// vLLM's derived spec_decode_* keys from totals: acceptance rate (percent, as vLLM), mean acceptance length
// (1 + accepted / rounds) and per-position rates (accepted at position k / rounds).
void put_spec_rates(Json& j, double draft_tokens, double accepted, double rounds,
                    const std::vector<double>& accepted_per_position) {
  j["spec_decode_acceptance_rate"] = draft_tokens > 0 ? Json(100.0 * accepted / draft_tokens) : Json();
  j["spec_decode_acceptance_length"] = rounds > 0 ? Json(1.0 + accepted / rounds) : Json();
  Json per_pos = Json::array();
  for (double a : accepted_per_position) per_pos.push_back(rounds > 0 ? a / rounds : 0.0);
  j["spec_decode_per_position_acceptance_rates"] = per_pos;
}

// Counters are integers; Prometheus writes them as floats ("12.0").
Json count(double v) {
  return Json(static_cast<int64_t>(std::llround(v)));
}

// From the requests' timings when the server sent them (mtp.cpp, llama-server), else from its /metrics
// counters (vLLM); the counters also under "server_spec_decode" whenever they were scraped.
void put_spec(Json& j, const LevelSummary& s) {
  const SpecCounters& c = s.server_spec;
  if (c.present) {
    j["server_spec_decode"] = spec_counters_json(c);
    for (const char* key : {"num_drafts", "num_draft_tokens", "num_accepted_tokens"})
      j["server_spec_decode"][key] = count(j["server_spec_decode"][key].get<double>());
  }
  if (s.spec_requests > 0) {
    j["spec_decode_draft_tokens"] = s.draft_n;
    j["spec_decode_accepted_tokens"] = s.draft_accepted;
    j["spec_decode_num_drafts"] = s.draft_rounds;
    put_spec_rates(j, static_cast<double>(s.draft_n), static_cast<double>(s.draft_accepted),
                   static_cast<double>(s.draft_rounds), s.accepted_per_position);
  } else if (c.present) {
    j["spec_decode_draft_tokens"] = count(c.draft_tokens);
    j["spec_decode_accepted_tokens"] = count(c.accepted_tokens);
    j["spec_decode_num_drafts"] = count(c.drafts);
    put_spec_rates(j, c.draft_tokens, c.accepted_tokens, c.drafts, c.accepted_per_position);
  }
}

// `group_key` names the group of a per-group summary ("stratum", "turns").
Json level_json(const LevelSummary& s, const char* group_key = "") {
  Json j = {{"max_concurrency", s.concurrency},
            {"request_rate", s.rate > 0 ? Json(s.rate) : Json("inf")},
            {"completed", s.completed},
            {"failed", s.failed},
            {"duration", s.duration_s},
            {"window_s", s.window_s},
            {"window", s.window_steady ? "steady" : "full"},
            {"total_input_tokens", s.total_input_tokens},
            {"total_output_tokens", s.total_output_tokens},
            {"request_throughput", s.request_throughput},
            {"output_throughput", s.output_throughput}};
  put_dist(j, "ttft", s.ttft_ms);
  put_dist(j, "tpot", s.tpot_ms);
  put_dist(j, "itl", s.itl_ms);
  put_dist(j, "e2el", s.e2el_ms);
  j["mean_dispatch_lag_ms"] = s.lag_ms.n > 0 ? Json(s.lag_ms.mean) : Json();
  j["max_dispatch_lag_ms"] = s.lag_ms.n > 0 ? Json(s.lag_ms.max) : Json();
  j["token_sources"] = s.token_sources;
  put_spec(j, s);
  if (!s.group.empty()) j[group_key] = s.group;
  if (!s.server.empty()) j["server"] = s.server;
  return j;
}

}  // namespace

std::string level_label(int concurrency, double rate) {
  if (rate <= 0) return std::to_string(concurrency);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g/s c<=%d", rate, concurrency);
  return buf;
}

std::string markdown_report(const std::vector<LevelSummary>& levels, const std::string& group_title) {
  const bool grouped = !group_title.empty();
  std::string out = grouped ? "| " + group_title + " " : "";
  out +=
      "| c | ok | failed | TTFT ms p50 / p90 / p99 | TPOT ms p50 / p99 | ITL ms p50 / p99 | E2E s p50 / p99 "
      "| output tok/s | req/s | dispatch lag ms mean / max | draft acceptance |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  if (grouped) out.insert(out.find('\n') + 1, "|---");
  for (const LevelSummary& s : levels) {
    const std::string lag = s.lag_ms.n == 0 ? "-" : fmt(s.lag_ms.mean, 2) + " / " + fmt(s.lag_ms.max, 2);
    if (grouped) out += "| " + s.group + " ";
    const std::string level = level_label(s.concurrency, s.rate) + (s.server.empty() ? "" : " " + s.server);
    out += str_cat("| ", level, " | ", s.completed, " | ", s.failed, " | ", cell(s.ttft_ms, 1, true), " | ",
                   cell(s.tpot_ms, 2), " | ", cell(s.itl_ms, 2), " | ", cell(s.e2el_ms, 2, false, 1e-3),
                   " | ", fmt(s.output_throughput, 1), s.window_steady ? "" : "*", " | ",
                   fmt(s.request_throughput, 3), " | ", lag, " | ", acceptance_cell(s), " |\n");
  }
  for (const LevelSummary& s : levels) {
    if (!s.window_steady) {
      out +=
          "\n* no steady-state window (fewer measured requests than workers?): throughput over the whole "
          "level\n";
      break;
    }
  }
  return out;
}

std::string markdown_server_spec(const std::vector<LevelSummary>& levels) {
  std::string rows;
  for (const LevelSummary& s : levels) {
    const SpecCounters& c = s.server_spec;
    if (!c.present) continue;
    std::string positions;
    for (size_t k = 0; k < c.accepted_per_position.size(); ++k)
      positions += (k > 0 ? " / " : "") + fmt(c.position_rate(k), 2);
    const std::string level = level_label(s.concurrency, s.rate) + (s.server.empty() ? "" : " " + s.server);
    rows += str_cat("| ", level, " | ", fmt(c.drafts, 0), " | ", fmt(c.draft_tokens, 0), " | ",
                    fmt(c.accepted_tokens, 0), " | ",
                    c.draft_tokens > 0 ? fmt(100 * c.acceptance_rate(), 1) + "%" : "-", " | ",
                    c.drafts > 0 ? fmt(c.mean_accepted_length(), 2) : "-", " | ",
                    positions.empty() ? "-" : positions, " |\n");
  }
  if (rows.empty()) return "";
  return "| c | drafts | drafted tokens | accepted | acceptance | mean accepted length | acceptance per "
         "position |\n|---:|---:|---:|---:|---:|---:|---|\n" +
         rows;
}

Json json_report(const RunData& run, const std::vector<LevelSummary>& levels, const std::string& source,
                 const std::vector<LevelSummary>& strata, const std::vector<LevelSummary>& turns) {
  Json j = Json::object();
  j["source"] = source;
  j["header"] = run.header;
  j["levels"] = Json::array();
  for (const LevelSummary& s : levels) j["levels"].push_back(level_json(s));
  if (!strata.empty()) {
    j["strata"] = Json::array();
    for (const LevelSummary& s : strata) j["strata"].push_back(level_json(s, "stratum"));
  }
  if (!turns.empty()) {
    j["turns"] = Json::array();
    for (const LevelSummary& s : turns) j["turns"].push_back(level_json(s, "turns"));
  }
  return j;
}

}  // namespace mtp::loadgen
