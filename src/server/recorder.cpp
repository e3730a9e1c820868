#include "server/recorder.h"

#include <cerrno>
#include <cstring>

#include "server/format.h"

namespace mtp::server {
namespace {

// Body fields the line states in its own keys; every other field is a parameter, replayed as sent.
bool is_own_field(const std::string& key) {
  static const char* const kOwn[] = {"messages",
                                     "prompt",
                                     "tools",
                                     "model",
                                     "stream",
                                     "max_tokens",
                                     "max_completion_tokens",
                                     "n_predict",
                                     "user",
                                     "prompt_cache_key",
                                     "stream_options"};
  for (const char* k : kOwn)
    if (key == k) return true;
  return false;
}

int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

// Characters of a message's text: a string content, or the text parts of a content array.
int64_t content_chars(const Json& content) {
  if (content.is_string()) return code_points(content.get<std::string>());
  int64_t n = 0;
  if (content.is_array())
    for (const Json& part : content)
      if (part.is_object() && part.contains("text") && part["text"].is_string())
        n += code_points(part["text"].get<std::string>());
  return n;
}

// Redacted messages: [{"role", "chars"}], tool calls counted, no text.
Json message_lengths(const Json& messages) {
  Json out = Json::array();
  for (const Json& m : messages) {
    if (!m.is_object()) continue;  // the server validated the messages; this only guards value() below
    const Json role = m.value("role", Json());
    Json e = {{"role", role.is_string() ? role : Json("")},
              {"chars", content_chars(m.value("content", Json()))}};
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) e["tool_calls"] = m["tool_calls"].size();
    out.push_back(std::move(e));
  }
  return out;
}

// A redacted session id: FNV-1a 64 of the id, so turns still group without the id (often a user name)
// appearing in the file.
std::string hashed_session(const std::string& id) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : id) h = (h ^ c) * 0x100000001b3ull;
  char buf[24];
  std::snprintf(buf, sizeof buf, "h:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// A redacted answer: the characters of its content (or completion text) and reasoning, and its tool calls.
Json answer_lengths(const Json& answer) {
  Json out = {{"chars", content_chars(answer.value("content", answer.value("text", Json())))},
              {"reasoning_chars", content_chars(answer.value("reasoning_content", Json()))}};
  const Json calls = answer.value("tool_calls", Json());
  out["tool_calls"] = calls.is_array() ? calls.size() : 0;
  return out;
}

int64_t ms_since_epoch() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

TraceRecorder::~TraceRecorder() {
  if (file_ != nullptr) std::fclose(file_);
}

Expected<std::unique_ptr<TraceRecorder>> TraceRecorder::open(const std::string& path, bool redact,
                                                             bool answers) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr)
    return io_error("--record: cannot open '", path, "' for appending: ", std::strerror(errno));
  auto r = std::make_unique<TraceRecorder>();
  r->file_ = f;
  r->path_ = path;
  r->redact_ = redact;
  r->answers_ = answers;
  return r;
}

Json TraceRecorder::begin(const Json& body, bool chat) const {
  const double t_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  Json line = {{"type", "trace"}, {"v", 1}, {"t_utc_ms", ms_since_epoch()}, {"t_ms", t_ms}};
  Json session;
  for (const char* key : {"user", "prompt_cache_key"})
    if (session.is_null() && body.contains(key) && body[key].is_string()) session = body[key];
  if (redact_ && session.is_string()) session = hashed_session(session.get<std::string>());
  line["session"] = session;
  line["endpoint"] = chat ? "/v1/chat/completions" : "/v1/completions";
  line["redacted"] = redact_;
  const Json messages = body.value("messages", Json());
  const Json prompt = body.value("prompt", Json());
  const Json tools = body.value("tools", Json());
  if (!redact_) {
    if (chat) line["messages"] = messages;
    if (!chat) line["prompt"] = prompt;
    if (!tools.is_null()) line["tools"] = tools;
  } else {
    if (chat && messages.is_array()) line["message_lengths"] = message_lengths(messages);
    if (!chat && prompt.is_string()) line["prompt_chars"] = code_points(prompt.get<std::string>());
    if (tools.is_array()) line["tools_count"] = tools.size();
  }
  Json params = Json::object();
  for (const auto& [key, value] : body.items()) {
    // Redacted: numbers and flags only (stop strings, schemas and template variables may hold text).
    if (is_own_field(key) || (redact_ && !value.is_number() && !value.is_boolean())) continue;
    params[key] = value;
  }
  line["params"] = params;
  Json max_tokens;
  for (const char* key : {"max_tokens", "max_completion_tokens", "n_predict"})
    if (max_tokens.is_null() && body.contains(key) && body[key].is_number_integer()) max_tokens = body[key];
  line["max_tokens"] = max_tokens;
  const Json stream = body.value("stream", Json());
  line["stream"] = stream.is_boolean() && stream.get<bool>();
  return line;
}

void TraceRecorder::finish(Json line, int64_t prompt_tokens, int64_t completion_tokens,
                           const std::string& finish_reason, const Json& answer) {
  line["prompt_tokens"] = prompt_tokens;
  line["completion_tokens"] = completion_tokens >= 0 ? Json(completion_tokens) : Json();
  line["finish_reason"] = finish_reason;
  if (answers_ && answer.is_object()) {
    if (redact_) {
      line["answer_lengths"] = answer_lengths(answer);
    } else {
      line["answer"] = answer;
    }
  }
  const std::string s = dump_json(line) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (std::fwrite(s.data(), 1, s.size(), file_) == s.size() && std::fflush(file_) == 0) return;
  if (!write_failed_)
    std::fprintf(stderr, "mtp serve: --record: cannot write '%s': %s (further errors not shown)\n",
                 path_.c_str(), std::strerror(errno));
  write_failed_ = true;
}

TraceEntry::~TraceEntry() {
  if (!done_) recorder_->finish(std::move(line_), prompt_tokens_, -1, "cancelled");
}

void TraceEntry::finish(int64_t completion_tokens, const std::string& finish_reason, const Json& answer) {
  if (done_) return;
  done_ = true;
  recorder_->finish(std::move(line_), prompt_tokens_, completion_tokens, finish_reason, answer);
}

}  // namespace mtp::server
