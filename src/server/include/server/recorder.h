// `mtp serve --record FILE`: every chat/completions request the server accepts, appended to FILE as one JSON
// line of the trace format `mtp replay` reads (docs/bench.md, "The trace format"), written when its answer
// ends so the line holds both: what was asked (messages or prompt, tools, sampling parameters, max_tokens,
// session) and what came back (prompt and completion tokens, finish reason; with `answers`, the answer
// itself). With `redact`, only lengths and non-text parameters are kept. Lines are flushed one at a time;
// HTTP threads write through one mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "server/api.h"

namespace mtp::server {

class TraceRecorder {
 public:
  ~TraceRecorder();
  // Opens `path` for appending (created if absent); an error names the path. `answers`: each line also holds
  // the answer (redacted: its lengths).
  static Expected<std::unique_ptr<TraceRecorder>> open(const std::string& path, bool redact,
                                                       bool answers = false);

  // The request half of a line, from the accepted body: {"type": "trace", "v", "t_utc_ms", "t_ms", "session",
  // "endpoint", "redacted", messages|prompt (or their lengths), tools, "params", "max_tokens", "stream"}.
  Json begin(const Json& body, bool chat) const;
  // Adds the outcome ({"prompt_tokens", "completion_tokens", "finish_reason"}; with answers, "answer", the
  // ResponseFormatter::answer() object, or redacted "answer_lengths": {"chars", "reasoning_chars",
  // "tool_calls"}) and appends the line. A write error is reported on stderr once; the request it belongs to
  // is not affected.
  void finish(Json line, int64_t prompt_tokens, int64_t completion_tokens, const std::string& finish_reason,
              const Json& answer = Json());

  const std::string& path() const { return path_; }
  bool redact() const { return redact_; }
  bool answers() const { return answers_; }

 private:
  std::mutex mu_;
  std::FILE* file_ = nullptr;
  std::string path_;
  bool redact_ = false;
  bool answers_ = false;
  bool write_failed_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// One request's line: finish() it with the outcome; destroyed unfinished (the client went away, the server
// stopped) it is written with finish_reason "cancelled" and what is known.
class TraceEntry {
 public:
  TraceEntry(std::shared_ptr<TraceRecorder> recorder, Json line, int64_t prompt_tokens)
      : recorder_(std::move(recorder)), line_(std::move(line)), prompt_tokens_(prompt_tokens) {}
  ~TraceEntry();
  TraceEntry(const TraceEntry&) = delete;
  TraceEntry& operator=(const TraceEntry&) = delete;

  // `answer`: ResponseFormatter::answer(), kept when the recorder records answers.
  void finish(int64_t completion_tokens, const std::string& finish_reason, const Json& answer = Json());

 private:
  std::shared_ptr<TraceRecorder> recorder_;
  Json line_;
  int64_t prompt_tokens_;
  bool done_ = false;
};

}  // namespace mtp::server
