// What `mtp bench` measures, as it is written to the raw run file (docs/bench.md, "The JSONL file"): one
// "header" line, then per finished request its "event" lines and one "request" line. Times are nanoseconds on
// the monotonic clock since the run started.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace mtp::loadgen {

// Insertion-ordered, so every line of the run file starts with its "type".
using Json = nlohmann::ordered_json;

// Nanoseconds since construction on the steady clock: every timestamp of one run.
class RunClock {
 public:
  RunClock() : start_(std::chrono::steady_clock::now()) {}
  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// One SSE event of a stream. `kind` is what its delta carried: "content", "reasoning", "tool_call" or
// "empty" (role-only, finish, usage-only chunks).
struct EventRecord {
  int64_t t_ns = 0;
  std::string kind = "empty";
  int64_t chars = 0;  // Unicode code points of the delta's text (content, reasoning, tool-call name+args)
  int64_t predicted_n = -1;  // the chunk's own timings.predicted_n (cumulative), -1 when it had none
  int64_t tokens = -1;       // tokens this event carried (token_split), -1 unknown
};

// One request and its outcome. -1 marks a time or count that was never seen.
struct RequestRecord {
  int64_t id = 0;
  int level = 0;    // the concurrency level it ran under (with a rate: the cap on requests in flight)
  double rate = 0;  // the level's arrival rate in requests/s; 0: closed loop
  int repeat = 0;
  // With --baseline: which server answered ("target" or "baseline") and the prompt number both got.
  std::string server;
  int64_t pair = -1;  // which run of its level under --repeat N, from 0
  int worker = 0;     // which of the level's workers sent it
  bool warmup = false;
  int64_t scheduled_ns = -1, sent_ns = -1, first_token_ns = -1, end_ns = -1;
  int http_status = 0;  // 0: no HTTP response
  bool ok = false;
  std::string error;
  int64_t prompt_tokens = -1, completion_tokens = -1;
  // Where completion_tokens came from: usage, timings (predicted_n), tokenize (POST /tokenize), none.
  std::string count_source = "none";
  std::string count_error;            // why POST /tokenize gave no count, when it was asked for one
  std::string token_source = "none";  // how events[].tokens were found: timings, chars or none
  Json timings;                       // the server's final timings object, null if it sent none
  // Replay only (written when set): the depth stratum of its prompt tokens ("<2048", "2048-8192", ...), its
  // traffic category, the trace line it came from, its turn in its session (1: the first; -1: no session)
  // and, under
  // --history live, whether its history held the server's own replies only ("live") or recorded ones.
  std::string stratum;
  std::string category;  // the trace line's own "category" tag (our trace format), "" when it has none
  std::string trace_source;
  int64_t turn = -1;
  std::string history;
  std::vector<EventRecord> events;
};

// Sets events[].tokens and token_source from what the stream reported (docs/bench.md, "Token counts"): per
// chunk timings.predicted_n when every text event has one ("timings"), else the request's completion_tokens
// spread over the text events by characters ("chars"), each text event at least one token while there are
// enough; "none" when the total is unknown.
void split_tokens(RequestRecord& r);

// The current UTC time as "YYYY-MM-DDTHH:MM:SSZ", for run headers.
std::string utc_now();
// A run file's first line: {"type": "header", "tool", "version", "url", "model", "options", "start_utc",
// "clock"}, the start time now.
Json run_header(const std::string& tool, const std::string& version, const std::string& url,
                const std::string& model, const Json& options);

Json event_json(const RequestRecord& r, const EventRecord& e);
Json request_json(const RequestRecord& r);

// Appends JSON lines to a file, each flushed at once so a run cut short keeps what it measured.
// Thread-safe.
class JsonlWriter {
 public:
  ~JsonlWriter();
  static Expected<std::unique_ptr<JsonlWriter>> open(const std::string& path);
  Status write(const Json& line);
  // The events of a request, then the request line, adjacent in the file.
  Status write_request(const RequestRecord& r);
  const std::string& path() const { return path_; }

 private:
  Status write_locked(const Json& line);

  std::mutex mu_;
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace mtp::loadgen
