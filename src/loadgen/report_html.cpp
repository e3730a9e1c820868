#include "loadgen/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loadgen/paired.h"
#include "loadgen/svg_chart.h"

namespace mtp::loadgen {
namespace {

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}figure{margin:1.5em 0}"
    "figcaption{font-weight:bold;margin-bottom:4px}.grid{stroke:#e4e4e4}.ref{stroke:#888;"
    "stroke-dasharray:4 3}.bar{stroke-width:2}polyline{stroke-width:2}text{font-size:11px}"
    ".yt{text-anchor:end}.xt{text-anchor:middle}.yl{text-anchor:middle}";

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// The x labels of a run's charts: its levels in run order, once each whatever the servers.
std::vector<std::string> level_labels(const std::vector<LevelSummary>& levels) {
  std::vector<std::string> out;
  for (const LevelSummary& s : levels) {
    const std::string label = level_label(s.concurrency, s.rate);
    if (std::find(out.begin(), out.end(), label) == out.end()) out.push_back(label);
  }
  return out;
}

std::vector<std::string> servers_of(const std::vector<LevelSummary>& levels) {
  std::vector<std::string> out;
  for (const LevelSummary& s : levels)
    if (std::find(out.begin(), out.end(), s.server) == out.end()) out.push_back(s.server);
  return out;
}

// One series per server of `figure` over the levels (NaN where a server has no such level).
std::vector<ChartSeries> per_server(const std::vector<LevelSummary>& levels, const std::string& what,
                                    double (*figure)(const LevelSummary&)) {
  const std::vector<std::string> labels = level_labels(levels);
  std::vector<ChartSeries> out;
  for (const std::string& server : servers_of(levels)) {
    ChartSeries s{
        server.empty() ? what : what + " " + server, std::vector<double>(labels.size(), NAN), {}, {}};
    for (const LevelSummary& l : levels) {
      if (l.server != server) continue;
      const auto at = std::find(labels.begin(), labels.end(), level_label(l.concurrency, l.rate));
      s.y[static_cast<size_t>(at - labels.begin())] = figure(l);
    }
    out.push_back(std::move(s));
  }
  return out;
}

double throughput(const LevelSummary& s) {
  return s.output_throughput;
}
double tpot_p50(const LevelSummary& s) {
  return s.tpot_ms.n > 0 ? s.tpot_ms.median : NAN;
}
double tpot_p99(const LevelSummary& s) {
  return s.tpot_ms.n > 0 ? s.tpot_ms.p99 : NAN;
}

// Acceptance per draft position of a level: from the requests' timings (mtp.cpp), else the server's
// counters (vLLM); empty when neither has positions.
std::vector<double> position_rates(const LevelSummary& s) {
  std::vector<double> out;
  if (s.draft_rounds > 0)
    for (double a : s.accepted_per_position) out.push_back(a / static_cast<double>(s.draft_rounds));
  if (out.empty() && s.server_spec.drafts > 0)
    for (size_t k = 0; k < s.server_spec.accepted_per_position.size(); ++k)
      out.push_back(s.server_spec.position_rate(k));
  return out;
}

// One series per level, x the draft position (1-based); nothing when no level has positions.
Chart acceptance_chart(const std::vector<LevelSummary>& levels) {
  Chart c{"Acceptance per draft position", "draft position", "accepted share of rounds", {}, {}, NAN};
  size_t positions = 0;
  for (const LevelSummary& s : levels) {
    std::vector<double> rates = position_rates(s);
    if (rates.empty()) continue;
    positions = std::max(positions, rates.size());
    const std::string name =
        "c=" + level_label(s.concurrency, s.rate) + (s.server.empty() ? "" : " " + s.server);
    c.series.push_back({name, std::move(rates), {}, {}});
  }
  for (size_t k = 0; k < positions; ++k) c.x_labels.push_back(std::to_string(k + 1));
  for (ChartSeries& s : c.series) s.y.resize(positions, NAN);
  return c;
}

Chart speedup_chart(const std::vector<PairedSummary>& pairs) {
  Chart c{"Paired speedup, target/baseline (output rate per request, 95% interval)",
          "level",
          "target / baseline",
          {},
          {},
          1.0};
  ChartSeries s{"output rate ratio", {}, {}, {}};
  for (const PairedSummary& p : pairs) {
    c.x_labels.push_back(level_label(p.concurrency, p.rate));
    s.y.push_back(p.output_rate.n > 0 ? p.output_rate.mean : NAN);
    s.lo.push_back(p.output_rate.n > 1 ? p.output_rate.lo : NAN);
    s.hi.push_back(p.output_rate.n > 1 ? p.output_rate.hi : NAN);
  }
  c.series.push_back(std::move(s));
  return c;
}

std::string figure(const Chart& c) {
  return str_cat("<figure><figcaption>", html_escape(c.title), "</figcaption>", svg_chart(c), "</figure>\n");
}

std::string html_cell(const Dist& d, int decimals) {
  return d.n == 0 ? "-" : fixed(d.median, decimals) + " / " + fixed(d.p99, decimals);
}

std::string levels_table(const std::vector<LevelSummary>& levels) {
  std::string out =
      "<table><tr><th>level</th><th>ok</th><th>failed</th><th>output tok/s</th><th>req/s</th>"
      "<th>TTFT ms p50 / p99</th><th>TPOT ms p50 / p99</th><th>E2E s p50 / "
      "p99</th><th>acceptance</th></tr>\n";
  for (const LevelSummary& s : levels) {
    const double drafted = s.draft_n > 0 ? static_cast<double>(s.draft_n) : s.server_spec.draft_tokens;
    const double accepted =
        s.draft_n > 0 ? static_cast<double>(s.draft_accepted) : s.server_spec.accepted_tokens;
    Dist e2e_s = s.e2el_ms;
    e2e_s.median *= 1e-3;
    e2e_s.p99 *= 1e-3;
    out +=
        str_cat("<tr><td>",
                html_escape(level_label(s.concurrency, s.rate) + (s.server.empty() ? "" : " " + s.server)),
                "</td><td>", s.completed, "</td><td>", s.failed, "</td><td>", fixed(s.output_throughput, 1),
                "</td><td>", fixed(s.request_throughput, 3), "</td><td>", html_cell(s.ttft_ms, 1),
                "</td><td>", html_cell(s.tpot_ms, 2), "</td><td>", html_cell(e2e_s, 2), "</td><td>",
                drafted > 0 ? fixed(100 * accepted / drafted, 1) + "%" : "-", "</td></tr>\n");
  }
  return out + "</table>\n";
}

// What the run was: tool, model, server (without its scheme: the page holds no link), start time.
std::string run_facts(const RunData& run, const std::string& source) {
  auto text = [&](const char* key) {
    return run.header.is_object() && run.header.contains(key) && run.header[key].is_string()
               ? run.header[key].get<std::string>()
               : std::string("?");
  };
  std::string server = text("url");
  if (const size_t scheme = server.find("://"); scheme != std::string::npos)
    server = server.substr(scheme + 3);
  return str_cat("<p>", html_escape(text("tool")), " run <code>", html_escape(source),
                 "</code>: model <code>", html_escape(text("model")), "</code> on <code>",
                 html_escape(server), "</code>, started ", html_escape(text("start_utc")), ".</p>\n");
}

}  // namespace

std::string html_report(const RunData& run, const std::string& source) {
  const std::vector<LevelSummary> levels = summarize_run(run);
  const std::vector<std::string> labels = level_labels(levels);
  std::string out =
      str_cat("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>mtp report: ",
              html_escape(source), "</title><style>", kStyle, "</style></head><body>\n<h1>mtp report</h1>\n",
              run_facts(run, source), levels_table(levels));
  out += figure({"Output throughput", "level", "tokens/s", labels,
                 per_server(levels, "output tok/s", throughput), NAN});
  Chart tpot{
      "TPOT p50 and p99", "level", "ms per output token", labels, per_server(levels, "p50", tpot_p50), NAN};
  for (ChartSeries& s : per_server(levels, "p99", tpot_p99)) tpot.series.push_back(std::move(s));
  out += figure(tpot);
  if (Chart c = acceptance_chart(levels); !c.series.empty()) out += figure(c);
  if (const std::vector<PairedSummary> pairs = summarize_pairs(run); !pairs.empty())
    out += figure(speedup_chart(pairs));
  return out + "</body></html>\n";
}

}  // namespace mtp::loadgen
