#include "loadgen/report.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <tuple>

namespace mtp::loadgen {
namespace {

// Reads fields of one line; the first problem is kept as `error`.
struct LineReader {
  const Json& j;
  std::string error;

  int64_t i64(const char* key, bool nullable) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (!nullable && error.empty()) error = str_cat("no \"", key, "\"");
      return -1;
    }
    if (!it->is_number_integer()) {
      if (error.empty()) error = str_cat("\"", key, "\" is not an integer");
      return -1;
    }
    return it->get<int64_t>();
  }
  bool boolean(const char* key) {
    auto it = j.find(key);
    if (it != j.end() && it->is_boolean()) return it->get<bool>();
    if (error.empty()) error = str_cat("\"", key, "\" is not true or false");
    return false;
  }
  std::string text(const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : "";
  }
};

std::string read_request(const Json& j, RequestRecord& r) {
  LineReader in{j, ""};
  r.id = in.i64("id", false);
  r.level = static_cast<int>(in.i64("level", false));
  r.worker = static_cast<int>(in.i64("worker", true));
  r.repeat = static_cast<int>(std::max<int64_t>(in.i64("repeat", true), 0));  // absent before --repeat
  r.server = in.text("server");
  r.pair = in.i64("pair", true);
  if (auto it = j.find("rate"); it != j.end() && it->is_number()) r.rate = it->get<double>();
  r.warmup = in.boolean("warmup");
  r.ok = in.boolean("ok");
  r.scheduled_ns = in.i64("scheduled_ns", true);
  r.sent_ns = in.i64("sent_ns", false);
  r.first_token_ns = in.i64("first_token_ns", true);
  r.end_ns = in.i64("end_ns", false);
  r.prompt_tokens = in.i64("prompt_tokens", true);
  r.completion_tokens = in.i64("completion_tokens", true);
  r.count_source = in.text("count_source");
  r.token_source = in.text("token_source");
  r.error = in.text("error");
  r.http_status = static_cast<int>(in.i64("http_status", true));
  if (auto it = j.find("timings"); it != j.end()) r.timings = *it;
  r.stratum = in.text("stratum");  // replay runs only
  r.category = in.text("category");
  r.trace_source = in.text("trace_source");
  r.turn = in.i64("turn", true);
  r.history = in.text("history");
  return in.error;
}

std::string read_server_metrics(const Json& j, ServerMetricsRecord& m) {
  LineReader in{j, ""};
  m.level = static_cast<int>(in.i64("level", false));
  m.repeat = static_cast<int>(std::max<int64_t>(in.i64("repeat", true), 0));
  m.server = in.text("server");
  if (auto it = j.find("rate"); it != j.end() && it->is_number()) m.rate = it->get<double>();
  const auto spec = j.find("spec_decode");
  if (in.error.empty() && (spec == j.end() || !spec_counters_from_json(*spec, m.spec)))
    in.error = "\"spec_decode\" is not an object";
  return in.error;
}

std::string read_event(const Json& j, int64_t& req, EventRecord& e) {
  LineReader in{j, ""};
  req = in.i64("req", false);
  e.t_ns = in.i64("t_ns", false);
  e.tokens = in.i64("tokens", true);
  e.kind = in.text("kind");
  return in.error;
}

}  // namespace

Expected<RunData> read_run(const std::string& path) {
  std::ifstream f(path);
  if (!f) return not_found("cannot open '", path, "'");
  RunData run;
  std::map<int64_t, std::vector<EventRecord>> events;
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Json j = Json::parse(line, nullptr, false);
    std::string why;
    const std::string type =
        j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
    if (j.is_discarded() || !j.is_object()) {
      why = "not a JSON object";
    } else if (type == "header") {
      run.header = j;
    } else if (type == "event") {
      int64_t req = 0;
      EventRecord e;
      why = read_event(j, req, e);
      events[req].push_back(e);
    } else if (type == "request") {
      RequestRecord r;
      why = read_request(j, r);
      run.requests.push_back(std::move(r));
    } else if (type == "server_metrics") {
      ServerMetricsRecord m;
      why = read_server_metrics(j, m);
      run.server_metrics.push_back(std::move(m));
    } else {
      why = "no known \"type\" (header, event, request or server_metrics)";
    }
    if (!why.empty()) return corrupt(path, ":", n, ": ", why);
  }
  for (RequestRecord& r : run.requests) {
    auto it = events.find(r.id);
    if (it == events.end()) continue;
    r.events = std::move(it->second);
    std::stable_sort(r.events.begin(), r.events.end(),
                     [](const EventRecord& a, const EventRecord& b) { return a.t_ns < b.t_ns; });
  }
  return run;
}

namespace {

constexpr double kMs = 1e-6, kS = 1e-9;  // ns to ms, ns to s

// ITL per token: the gap from the previous token-carrying event, split evenly over the k tokens of this one.
// The first token-carrying event's tokens belong to TTFT and add no gap.
void add_itl(const RequestRecord& r, std::vector<double>& itl) {
  int64_t prev = -1;
  for (const EventRecord& e : r.events) {
    if (e.tokens <= 0) continue;
    if (prev >= 0)
      for (int64_t k = 0; k < e.tokens; ++k) itl.push_back((e.t_ns - prev) * kMs / e.tokens);
    prev = e.t_ns;
  }
}

void add_spec(const Json& t, LevelSummary& s) {
  if (!t.is_object() || !t.contains("draft_n") || !t["draft_n"].is_number()) return;
  ++s.spec_requests;
  s.draft_n += t["draft_n"].get<int64_t>();
  if (t.contains("draft_n_accepted") && t["draft_n_accepted"].is_number())
    s.draft_accepted += t["draft_n_accepted"].get<int64_t>();
  const int64_t rounds =
      t.contains("draft_rounds") && t["draft_rounds"].is_number() ? t["draft_rounds"].get<int64_t>() : 0;
  s.draft_rounds += rounds;
  const auto pos = t.find("acceptance_per_position");
  if (pos == t.end() || !pos->is_array()) return;
  if (s.accepted_per_position.size() < pos->size()) s.accepted_per_position.resize(pos->size());
  for (size_t i = 0; i < pos->size(); ++i)
    if ((*pos)[i].is_number()) s.accepted_per_position[i] += (*pos)[i].get<double>() * rounds;
}

// The steady-state window: from the moment the last worker sent its first measured request to the moment
// the first worker finished its last one, so every worker was busy throughout. Empty (more workers than
// requests, or one very slow request): the whole duration, flagged.
void set_window(const std::vector<const RequestRecord*>& reqs, LevelSummary& s, int64_t& ws, int64_t& we) {
  std::map<int, std::pair<int64_t, int64_t>> per_worker;  // worker -> first send, last end
  int64_t first = std::numeric_limits<int64_t>::max(), last = 0;
  for (const RequestRecord* r : reqs) {
    auto [it, fresh] = per_worker.try_emplace(r->worker, r->sent_ns, r->end_ns);
    it->second.first = std::min(it->second.first, r->sent_ns);
    it->second.second = std::max(it->second.second, r->end_ns);
    first = std::min(first, r->sent_ns);
    last = std::max(last, r->end_ns);
  }
  ws = 0;
  we = std::numeric_limits<int64_t>::max();
  for (const auto& [w, span] : per_worker) {
    ws = std::max(ws, span.first);
    we = std::min(we, span.second);
  }
  s.duration_s = (last - first) * kS;
  s.window_steady = we > ws;
  if (!s.window_steady) ws = first, we = last;
  s.window_s = (we - ws) * kS;
}

void add_throughput(const std::vector<const RequestRecord*>& reqs, LevelSummary& s) {
  int64_t ws = 0, we = 0;
  set_window(reqs, s, ws, we);
  if (we <= ws) return;
  int64_t tokens = 0, done = 0;
  for (const RequestRecord* r : reqs) {
    if (!r->ok) continue;
    for (const EventRecord& e : r->events)
      if (e.tokens > 0 && e.t_ns >= ws && e.t_ns <= we) tokens += e.tokens;
    done += r->end_ns >= ws && r->end_ns <= we ? 1 : 0;
  }
  s.output_throughput = static_cast<double>(tokens) / s.window_s;
  s.request_throughput = static_cast<double>(done) / s.window_s;
}

// With --repeat, a level's runs are apart in time (the other levels ran between them): one window over all
// would count those gaps. Each run gets its own window; the level's throughput is their mean.
void add_repeat_throughputs(const std::vector<const RequestRecord*>& reqs, LevelSummary& s) {
  std::map<int, std::vector<const RequestRecord*>> runs;
  for (const RequestRecord* r : reqs) runs[r->repeat].push_back(r);
  if (runs.size() == 1) return add_throughput(reqs, s);
  for (const auto& [repeat, part] : runs) {
    LevelSummary one;
    add_throughput(part, one);
    s.duration_s += one.duration_s;
    s.window_s += one.window_s;
    s.window_steady = s.window_steady && one.window_steady;
    s.output_throughput += one.output_throughput / static_cast<double>(runs.size());
    s.request_throughput += one.request_throughput / static_cast<double>(runs.size());
  }
}

// A level is a concurrency (closed loop) or a rate under a concurrency cap.
using LevelKey = std::tuple<int, double, std::string>;  // with --baseline, one per server

LevelKey level_key(const RequestRecord& r) {
  return {r.level, r.rate, r.server};
}

LevelSummary summarize_level(LevelKey level, const std::vector<const RequestRecord*>& reqs) {
  LevelSummary s;
  std::tie(s.concurrency, s.rate, s.server) = level;
  std::vector<double> ttft, tpot, itl, e2el, lag;
  for (const RequestRecord* r : reqs) {
    if (r->scheduled_ns >= 0) lag.push_back((r->sent_ns - r->scheduled_ns) * kMs);
    if (!r->ok) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    ++s.token_sources[r->token_source];
    s.total_input_tokens += std::max<int64_t>(r->prompt_tokens, 0);
    s.total_output_tokens += std::max<int64_t>(r->completion_tokens, 0);
    e2el.push_back((r->end_ns - r->sent_ns) * kMs);
    if (r->first_token_ns >= 0) ttft.push_back((r->first_token_ns - r->sent_ns) * kMs);
    if (r->first_token_ns >= 0 && r->completion_tokens > 1)
      tpot.push_back((r->end_ns - r->first_token_ns) * kMs / static_cast<double>(r->completion_tokens - 1));
    add_itl(*r, itl);
    add_spec(r->timings, s);
  }
  s.ttft_ms = summarize(ttft);
  s.tpot_ms = summarize(tpot);
  s.itl_ms = summarize(itl);
  s.e2el_ms = summarize(e2el);
  s.lag_ms = summarize(lag);
  if (!reqs.empty()) add_repeat_throughputs(reqs, s);
  return s;
}

}  // namespace

double request_output_rate(const RequestRecord& r) {
  if (r.completion_tokens <= 0 || r.end_ns <= r.sent_ns) return -1;
  return static_cast<double>(r.completion_tokens) / ((r.end_ns - r.sent_ns) * kS);
}

double request_tpot_s(const RequestRecord& r) {
  if (r.first_token_ns < 0 || r.completion_tokens < 2 || r.end_ns <= r.first_token_ns) return -1;
  return (r.end_ns - r.first_token_ns) * kS / static_cast<double>(r.completion_tokens - 1);
}

std::vector<LevelSummary> summarize_run(const RunData& run) {
  std::vector<LevelKey> order;  // levels in the order they ran
  std::map<LevelKey, std::vector<const RequestRecord*>> measured;
  for (const RequestRecord& r : run.requests) {
    const LevelKey key = level_key(r);
    if (std::find(order.begin(), order.end(), key) == order.end()) order.push_back(key);
    if (!r.warmup) measured[key].push_back(&r);
  }
  std::vector<LevelSummary> out;
  for (const LevelKey& key : order) {
    out.push_back(summarize_level(key, measured[key]));
    for (const ServerMetricsRecord& m : run.server_metrics)
      if (LevelKey{m.level, m.rate, m.server} == key) add_counters(out.back().server_spec, m.spec);
  }
  return out;
}

namespace {

// Orders stratum labels by the prompt length they start at: "<2048" < "2048-8192" < ">=32768" < "unknown".
int64_t stratum_start(const std::string& label) {
  if (label.starts_with("<")) return -1;
  const size_t digits = label.find_first_of("0123456789");
  // strtoll, not stoll: a label edited by hand must not throw (an out-of-range number saturates).
  return digits == std::string::npos ? std::numeric_limits<int64_t>::max()
                                     : std::strtoll(label.c_str() + digits, nullptr, 10);
}

}  // namespace

namespace {

// One summary per (level, group) of the measured requests `label_of` gives a group ("": none), groups in
// the order `rank` gives their labels.
template <typename LabelOf, typename Rank>
std::vector<LevelSummary> summarize_groups(const RunData& run, LabelOf label_of, Rank rank) {
  std::vector<LevelKey> order;
  std::map<LevelKey, std::map<std::string, std::vector<const RequestRecord*>>> groups;
  for (const RequestRecord& r : run.requests) {
    const std::string label = label_of(r);
    if (label.empty() || r.warmup) continue;
    const LevelKey key = level_key(r);
    if (std::find(order.begin(), order.end(), key) == order.end()) order.push_back(key);
    groups[key][label].push_back(&r);
  }
  std::vector<LevelSummary> out;
  for (const LevelKey& c : order) {
    std::vector<std::string> labels;
    for (const auto& [label, reqs] : groups[c]) labels.push_back(label);
    std::stable_sort(labels.begin(), labels.end(),
                     [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
    for (const std::string& label : labels) {
      out.push_back(summarize_level(c, groups[c][label]));
      out.back().group = label;
    }
  }
  return out;
}

// Turns 1 and 2 on their own, then ranges doubling in length: "3-4", "5-8", ..., ">64".
constexpr int64_t kLastTurnBound = 64;

std::string turn_label(int64_t turn) {
  if (turn < 1) return "";
  if (turn <= 2) return std::to_string(turn);
  if (turn > kLastTurnBound) return str_cat(">", kLastTurnBound);
  int64_t hi = 2;
  while (hi < turn) hi *= 2;
  return str_cat(hi / 2 + 1, "-", hi);
}

int64_t turn_rank(const std::string& label) {
  if (label.starts_with(">")) return std::numeric_limits<int64_t>::max();
  return std::strtoll(label.c_str(), nullptr, 10);
}

}  // namespace

std::vector<LevelSummary> summarize_strata(const RunData& run) {
  return summarize_groups(
      run, [](const RequestRecord& r) { return r.stratum; }, stratum_start);
}

std::vector<LevelSummary> summarize_turns(const RunData& run) {
  return summarize_groups(
      run, [](const RequestRecord& r) { return turn_label(r.turn); }, turn_rank);
}

}  // namespace mtp::loadgen
