#include "loadgen/record.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

namespace mtp::loadgen {
namespace {

bool has_text(const EventRecord& e) {
  return e.kind != "empty";
}

// Per-chunk counts from cumulative timings.predicted_n; false when a text event lacks it.
bool split_by_timings(RequestRecord& r) {
  bool any = false;
  for (const EventRecord& e : r.events) {
    if (has_text(e) && e.predicted_n < 0) return false;
    any |= e.predicted_n >= 0;
  }
  if (!any) return false;
  int64_t prev = 0;
  for (EventRecord& e : r.events) {
    e.tokens = e.predicted_n >= prev ? e.predicted_n - prev : 0;
    if (e.predicted_n >= prev) prev = e.predicted_n;
  }
  return true;
}

// `total` tokens over the text events: one each first (a text delta needs at least one new token), the rest
// in proportion to characters with cumulative rounding, so the counts are integers summing to `total`.
void split_by_chars(RequestRecord& r, int64_t total) {
  int64_t n_text = 0, chars = 0;
  for (const EventRecord& e : r.events) {
    n_text += has_text(e) ? 1 : 0;
    chars += has_text(e) ? e.chars : 0;
  }
  for (EventRecord& e : r.events) e.tokens = 0;
  if (n_text == 0) {
    if (!r.events.empty()) r.events.back().tokens = total;  // nothing visible: all at the end
    return;
  }
  const int64_t base = total >= n_text ? 1 : 0;
  const int64_t rest = total - base * n_text;
  int64_t seen_chars = 0, given = 0, seen_events = 0;
  for (EventRecord& e : r.events) {
    if (!has_text(e)) continue;
    seen_chars += e.chars;
    ++seen_events;
    // With no characters at all, spread evenly by event count instead.
    const int64_t upto =
        chars > 0 ? (rest * seen_chars + chars / 2) / chars : (rest * seen_events + n_text / 2) / n_text;
    e.tokens = base + (upto - given);
    given = upto;
  }
}

}  // namespace

void split_tokens(RequestRecord& r) {
  if (split_by_timings(r)) {
    r.token_source = "timings";
  } else if (r.completion_tokens >= 0) {
    split_by_chars(r, r.completion_tokens);
    r.token_source = "chars";
  } else {
    for (EventRecord& e : r.events) e.tokens = -1;
    r.token_source = "none";
  }
}

Json event_json(const RequestRecord& r, const EventRecord& e) {
  return Json{{"type", "event"}, {"req", r.id},
              {"t_ns", e.t_ns},  {"tokens", e.tokens >= 0 ? Json(e.tokens) : Json()},
              {"kind", e.kind},  {"chars", e.chars}};
}

Json request_json(const RequestRecord& r) {
  auto opt = [](int64_t v) { return v >= 0 ? Json(v) : Json(); };
  Json j{{"type", "request"},
         {"id", r.id},
         {"level", r.level},
         {"worker", r.worker},
         {"repeat", r.repeat},
         {"warmup", r.warmup},
         {"scheduled_ns", opt(r.scheduled_ns)},
         {"sent_ns", opt(r.sent_ns)},
         {"first_token_ns", opt(r.first_token_ns)},
         {"end_ns", opt(r.end_ns)},
         {"prompt_tokens", opt(r.prompt_tokens)},
         {"completion_tokens", opt(r.completion_tokens)},
         {"count_source", r.count_source},
         {"token_source", r.token_source},
         {"ok", r.ok},
         {"error", r.ok ? Json() : Json(r.error)},
         {"http_status", r.http_status},
         {"events", r.events.size()},
         {"timings", r.timings}};
  if (!r.count_error.empty()) j["count_error"] = r.count_error;
  if (r.rate > 0) j["rate"] = r.rate;
  if (!r.server.empty()) j["server"] = r.server;
  if (r.pair >= 0) j["pair"] = r.pair;
  if (!r.stratum.empty()) j["stratum"] = r.stratum;
  if (!r.category.empty()) j["category"] = r.category;
  if (!r.trace_source.empty()) j["trace_source"] = r.trace_source;
  if (r.turn >= 0) j["turn"] = r.turn;
  if (!r.history.empty()) j["history"] = r.history;
  return j;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Json run_header(const std::string& tool, const std::string& version, const std::string& url,
                const std::string& model, const Json& options) {
  return Json{{"type", "header"},       {"tool", tool},
              {"version", version},     {"url", url},
              {"model", model},         {"options", options},
              {"start_utc", utc_now()}, {"clock", "ns since the run started, steady clock"}};
}

JsonlWriter::~JsonlWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Expected<std::unique_ptr<JsonlWriter>> JsonlWriter::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return io_error("cannot create '", path, "': ", std::strerror(errno));
  auto w = std::make_unique<JsonlWriter>();
  w->file_ = f;
  w->path_ = path;
  return w;
}

Status JsonlWriter::write(const Json& line) {
  std::lock_guard<std::mutex> lock(mu_);
  return write_locked(line);
}

Status JsonlWriter::write_request(const RequestRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const EventRecord& e : r.events) MTP_RETURN_IF_ERROR(write_locked(event_json(r, e)));
  return write_locked(request_json(r));
}

Status JsonlWriter::write_locked(const Json& line) {
  const std::string s = line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  if (std::fwrite(s.data(), 1, s.size(), file_) != s.size() || std::fflush(file_) != 0)
    return io_error("cannot write '", path_, "': ", std::strerror(errno));
  return Status::Ok();
}

}  // namespace mtp::loadgen
