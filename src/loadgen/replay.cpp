#include "loadgen/replay.h"

#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "loadgen/live_history.h"
#include "loadgen/prompts.h"

namespace mtp::loadgen {
namespace {

constexpr int64_t kHashBlock = 512;  // Mooncake's tokens per hash id
// Hash-block prompts come from their own generator stream, apart from the per-request ones.
constexpr uint64_t kBlockSeedSalt = 0x6D6F6F6E63616B65ull;
constexpr uint64_t kMessageSeedSalt = 0x6D65737361676573ull;  // and so do redacted lines' messages

// `words` synthetic words: for Mooncake, one 512-word block per hash id (equal ids, equal text), the last
// cut to fit, and request-unique words after the blocks when the ids do not cover the length.
std::string synthetic_text(const ReplayOptions& o, const TraceRequest& t, int64_t index) {
  const int64_t words = std::max<int64_t>(1, t.prompt_tokens);
  std::string out;
  int64_t have = 0;
  for (int64_t id : t.hash_ids) {
    if (have >= words) break;
    const int64_t n = std::min(kHashBlock, words - have);
    out += (out.empty() ? "" : " ") + synthetic_prompt(o.seed ^ kBlockSeedSalt, id, static_cast<int>(n));
    have += n;
  }
  if (have < words)
    out += (out.empty() ? "" : " ") + synthetic_prompt(o.seed, index, static_cast<int>(words - have));
  return out;
}

// Synthetic messages of a redacted line's roles, the prompt's words shared by characters (each at least
// one). Roles other than system, user and assistant become user: a made-up tool result has no call to answer.
Json synthetic_messages(const ReplayOptions& o, const TraceRequest& t, int64_t index) {
  int64_t chars = 0;
  for (const auto& [role, n] : t.shape) chars += std::max<int64_t>(n, 0);
  const int64_t words = std::max<int64_t>(1, t.prompt_tokens), k = static_cast<int64_t>(t.shape.size());
  Json out = Json::array();
  for (int64_t i = 0; i < k; ++i) {
    const auto& [role, n] = t.shape[static_cast<size_t>(i)];
    const int64_t w = chars > 0 ? words * std::max<int64_t>(n, 0) / chars : words / k;
    const bool known = role == "system" || role == "user" || role == "assistant";
    // Message i of request `index` gets its own generator stream.
    const std::string text = synthetic_prompt(o.seed ^ kMessageSeedSalt, index * 1024 + i,
                                              static_cast<int>(std::max<int64_t>(1, w)));
    out.push_back(Json{{"role", known ? role : "user"}, {"content", text}});
  }
  return out;
}

// Puts `prefix` before the first message's text (a string, or the first part of a content array).
void prefix_messages(Json& messages, const std::string& prefix) {
  if (!messages.is_array() || messages.empty() || !messages[0].is_object()) return;
  Json& content = messages[0]["content"];
  if (content.is_string()) {
    content = prefix + content.get<std::string>();
  } else if (content.is_array()) {
    content.insert(content.begin(), Json{{"type", "text"}, {"text", prefix}});
  } else {
    content = prefix;
  }
}

std::string random_nonce() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

// A session's turns so far; only the worker holding its current turn touches it.
struct SessionState {
  int64_t turns = 0;
  LiveSession live;
  RecordedSession recorded;  // --history recorded: the recorded answers
};

// Whether a request's history can carry live replies: a chat turn of a session with recorded messages.
bool live_turn(const ReplayOptions& o, const TraceRequest& t) {
  return o.live_history && !t.session.empty() && !t.completions && !t.synthetic && t.messages.is_array();
}

// Whether a request's recorded history can take its session's recorded answers (live_history.h).
bool answer_turn(const ReplayOptions& o, const TraceRequest& t) {
  return !o.live_history && !t.session.empty() && !t.completions && !t.synthetic && t.messages.is_array();
}

// What the workers share.
struct Replay {
  Replay(const ReplayOptions& o, const std::vector<TraceRequest>& reqs, JsonlWriter& out,
         const RequestDone& done)
      : o(o), reqs(reqs), out(out), on_done(done) {}

  const ReplayOptions& o;
  const std::vector<TraceRequest>& reqs;
  JsonlWriter& out;
  const RequestDone& on_done;
  RunClock clock;
  std::string model, nonce;
  std::mutex mu;  // everything below, and on_done
  std::condition_variable cv;
  std::list<size_t> pending;                     // not yet taken, in arrival order
  std::set<std::string> busy;                    // sessions with a turn in flight
  std::map<std::string, SessionState> sessions;  // nodes stay put, so a worker keeps its pointer
  Status status;

  // The session state of request i (null: no session), its turn counted.
  SessionState* begin_turn(size_t i) {
    if (reqs[i].session.empty()) return nullptr;
    std::lock_guard<std::mutex> lock(mu);
    SessionState* s = &sessions[reqs[i].session];
    ++s->turns;
    return s;
  }

  // The next request whose session is free, or none when all are taken; waits while only busy sessions
  // remain.
  std::optional<size_t> take() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      if (pending.empty() || !status.ok()) return std::nullopt;
      for (auto it = pending.begin(); it != pending.end(); ++it) {
        const std::string& s = reqs[*it].session;
        if (!s.empty() && busy.contains(s)) continue;
        if (!s.empty()) busy.insert(s);
        const size_t i = *it;
        pending.erase(it);
        return i;
      }
      cv.wait(lock);
    }
  }

  void done(size_t i, const RequestRecord& r) {
    const Status written = out.write_request(r);
    std::lock_guard<std::mutex> lock(mu);
    if (!reqs[i].session.empty()) busy.erase(reqs[i].session);
    if (!written.ok() && status.ok()) status = written;  // the others stop after their current request
    if (written.ok() && on_done) on_done(r);
    cv.notify_all();
  }
};

void replay_worker(Replay& rp, int w) {
  auto client = StreamClient::create(rp.o.client);
  if (!client.ok()) {
    std::lock_guard<std::mutex> lock(rp.mu);
    rp.status = client.status();
    rp.cv.notify_all();
    return;
  }
  int64_t free_since = rp.clock.now_ns();  // closed loop: a request is due when its worker is free
  while (std::optional<size_t> i = rp.take()) {
    const TraceRequest& t = rp.reqs[*i];
    RequestRecord r;
    r.id = static_cast<int64_t>(*i);
    r.level = rp.o.concurrency;
    r.worker = w;
    r.trace_source = t.source;
    r.category = t.category;
    r.scheduled_ns = free_since;
    if (rp.o.time_scale) {
      r.scheduled_ns = static_cast<int64_t>(t.arrival_s * *rp.o.time_scale * 1e9);
      const int64_t wait = r.scheduled_ns - rp.clock.now_ns();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
    }
    SessionState* session = rp.begin_turn(*i);
    if (session != nullptr) r.turn = session->turns;
    if (session != nullptr && live_turn(rp.o, t)) {
      const TurnMessages turn = next_turn(session->live, t.messages);
      r.history = turn.live ? "live" : "recorded";
      Reply reply;
      (*client)->run(replay_request(rp.o, t, r.id, rp.model, rp.nonce, &turn.messages), rp.clock, r, &reply);
      finish_turn(session->live, t.messages, turn,
                  r.ok ? std::optional<Reply>(std::move(reply)) : std::nullopt);
    } else if (session != nullptr && answer_turn(rp.o, t)) {
      RecordedSession& rs = session->recorded;
      Json messages = recorded_turn(rs, t.messages);
      (*client)->run(replay_request(rp.o, t, r.id, rp.model, rp.nonce, &messages), rp.clock, r);
      rs = RecordedSession{t.messages, std::move(messages), t.answer};
    } else {
      (*client)->run(replay_request(rp.o, t, r.id, rp.model, rp.nonce), rp.clock, r);
    }
    if (!rp.o.strata.empty())
      r.stratum = stratum_label(rp.o.strata, r.prompt_tokens >= 0 ? r.prompt_tokens : t.prompt_tokens);
    rp.done(*i, r);
    free_since = rp.clock.now_ns();
  }
}

}  // namespace

std::string stratum_label(const std::vector<int64_t>& bounds, int64_t prompt_tokens) {
  if (prompt_tokens < 0) return "unknown";
  for (size_t k = 0; k < bounds.size(); ++k) {
    if (prompt_tokens >= bounds[k]) continue;
    return k == 0 ? str_cat("<", bounds[0]) : str_cat(bounds[k - 1], "-", bounds[k]);
  }
  return str_cat(">=", bounds.back());
}

int capped_max_tokens(int64_t output_tokens, int cap) {
  if (output_tokens < 0) return cap;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(output_tokens, cap)));
}

ChatRequest replay_request(const ReplayOptions& o, const TraceRequest& t, int64_t index,
                           const std::string& model, const std::string& nonce, const Json* messages) {
  ChatRequest req;
  req.model = model;
  req.completions = t.completions;
  req.max_tokens = capped_max_tokens(t.output_tokens, o.max_tokens_cap);
  req.extra = t.extra;
  // The body's own fields are set here, whatever the trace's parameters say.
  for (const char* key : {"model", "stream", "stream_options", "max_completion_tokens", "n_predict"})
    req.extra.erase(key);
  if (t.synthetic && !t.shape.empty()) {
    req.messages = synthetic_messages(o, t, index);
  } else if (t.synthetic) {
    req.prompt = synthetic_text(o, t, index);
  } else if (t.completions) {
    req.prompt = t.prompt;
  } else {
    req.messages = messages != nullptr ? *messages : t.messages;
  }
  if (!o.defeat_cache) return req;
  const std::string tag = str_cat("[replay ", nonce, " #", index, "]");
  req.extra["cache_salt"] = tag;
  if (req.messages.is_array()) {
    prefix_messages(req.messages, tag + " ");
  } else {
    req.prompt = tag + " " + req.prompt;
  }
  return req;
}

Json replay_header(const ReplayOptions& o, const std::vector<TraceRequest>& reqs, const std::string& model) {
  int64_t capped = 0, unknown = 0;
  for (const TraceRequest& t : reqs) {
    capped += t.output_tokens > o.max_tokens_cap ? 1 : 0;
    unknown += t.output_tokens < 0 ? 1 : 0;
  }
  const Json opts = {{"trace", o.trace},
                     {"format", o.format},
                     {"skipped_trace_lines", o.skipped_trace_lines},
                     {"requests", reqs.size()},
                     {"load", o.time_scale ? "timed" : "closed-loop"},
                     {"concurrency", o.concurrency},
                     {"time_scale", o.time_scale ? Json(*o.time_scale) : Json()},
                     {"max_tokens_cap", o.max_tokens_cap},
                     {"capped_requests", capped},
                     {"unknown_output_requests", unknown},
                     {"strata", o.strata},
                     {"cache", o.defeat_cache ? "defeat" : "reuse"},
                     {"history", o.live_history ? "live" : "recorded"},
                     {"seed", o.seed},
                     {"timeout_s", o.client.timeout_s},
                     {"count_tokens", token_count_name(o.client.count)}};
  return run_header("mtp replay", o.tool_version, o.client.url, model, opts);
}

Status run_replay(const ReplayOptions& o, const std::vector<TraceRequest>& reqs, JsonlWriter& out,
                  const RequestDone& on_done) {
  if (o.time_scale && !reqs.empty() && reqs.front().arrival_s < 0)
    return invalid_argument("--time-scale: the trace has no arrival times; replay it with --concurrency");
  Replay rp(o, reqs, out, on_done);
  MTP_ASSIGN_OR_RETURN(auto probe, StreamClient::create(o.client));
  rp.model = o.model.empty() ? probe->first_model().value_or("") : o.model;
  rp.nonce = random_nonce();
  MTP_RETURN_IF_ERROR(out.write(replay_header(o, reqs, rp.model)));
  for (size_t i = 0; i < reqs.size(); ++i) rp.pending.push_back(i);
  SpecCounterWindow counters(o.client, o.on_warning);
  rp.clock = RunClock();  // time 0 is the first arrival, after the probe and the scrape
  std::vector<std::thread> workers;
  const int n = std::max(1, std::min<int>(o.concurrency, static_cast<int>(reqs.size())));
  for (int w = 0; w < n; ++w) workers.emplace_back(replay_worker, std::ref(rp), w);
  for (std::thread& t : workers) t.join();
  MTP_RETURN_IF_ERROR(rp.status);
  if (Json line = counters.finish(Json{{"level", o.concurrency}, {"repeat", 0}}); !line.is_null())
    MTP_RETURN_IF_ERROR(out.write(line));
  return Status::Ok();
}

}  // namespace mtp::loadgen
