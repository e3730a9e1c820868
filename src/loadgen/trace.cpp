// Trace files: format detection, our own trace format and ShareGPT (trace.h). The CSV and Mooncake readers
// are in trace_csv.cpp.
#include "loadgen/trace.h"

#include <fstream>
#include <sstream>

#include "trace_util.h"

namespace mtp::loadgen {
namespace {

using trace_detail::estimate_tokens;
using trace_detail::for_each_line;
using trace_detail::int_field;

Expected<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string first_line(const std::string& text) {
  size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return "";
  return text.substr(start, text.find('\n', start) - start);
}

// A string or boolean field, or `fallback` when absent or of another type (Json::value would throw).
std::string string_or(const Json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
bool bool_or(const Json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

int64_t int_or(const Json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

// The request fields of one line of our trace; "" or why it cannot be replayed.
std::string read_mtp_line(const Json& j, TraceRequest& r) {
  if (!j.is_object() || string_or(j, "type", "") != "trace")
    return "not a trace line (no \"type\": \"trace\")";
  const std::string endpoint = string_or(j, "endpoint", "");
  if (endpoint.ends_with("/chat/completions")) {
    r.completions = false;
  } else if (endpoint.ends_with("/completions")) {
    r.completions = true;
  } else {
    return str_cat("\"endpoint\" '", endpoint, "' is not /v1/chat/completions or /v1/completions");
  }
  if (auto t = j.find("t_ms"); t != j.end() && t->is_number()) r.arrival_s = t->get<double>() / 1e3;
  if (auto s = j.find("session"); s != j.end() && s->is_string()) r.session = s->get<std::string>();
  if (auto c = j.find("category"); c != j.end() && !c->is_null()) {
    if (!c->is_string() || c->get<std::string>().empty()) return "\"category\" is not a non-empty string";
    r.category = c->get<std::string>();
  }
  if (auto it = j.find("prompt_tokens"); it != j.end() && !it->is_null()) {
    if (std::string why = int_field(j, "prompt_tokens", 1, r.prompt_tokens); !why.empty()) return why;
  }
  const bool redacted = bool_or(j, "redacted", false);
  const Json prompt = j.value("prompt", Json());
  if (redacted || (r.completions && !prompt.is_string())) {
    // No text (redacted, or a prompt of token ids): made up at the recorded length.
    if (r.prompt_tokens < 1) return "a line without text needs \"prompt_tokens\"";
    r.synthetic = true;
    if (auto m = j.find("message_lengths"); !r.completions && m != j.end() && m->is_array())
      for (const Json& e : *m)
        if (e.is_object()) r.shape.emplace_back(string_or(e, "role", "user"), int_or(e, "chars", 0));
  } else if (r.completions) {
    r.prompt = prompt.get<std::string>();
  } else {
    r.messages = j.value("messages", Json());
    if (!r.messages.is_array() || r.messages.empty()) return "\"messages\" is not a non-empty array";
  }
  if (auto p = j.find("params"); p != j.end() && !p->is_null()) {
    if (!p->is_object()) return "\"params\" is not an object";
    r.extra = *p;
  }
  if (auto t = j.find("tools"); t != j.end() && t->is_array()) r.extra["tools"] = *t;
  // The session goes back as the request's `user` (a redacted line's is a hash: it stays out).
  if (!redacted && !r.session.empty()) r.extra["user"] = r.session;
  if (auto a = j.find("answer"); a != j.end() && !a->is_null()) {
    if (!a->is_object()) return "\"answer\" is not an object";
    r.answer = *a;
  }
  for (const char* key : {"completion_tokens", "max_tokens"}) {
    auto it = j.find(key);
    if (r.output_tokens >= 0 || it == j.end() || it->is_null()) continue;
    if (std::string why = int_field(j, key, 0, r.output_tokens); !why.empty()) return why;
  }
  return "";
}

// "system", "user" or "assistant" for a ShareGPT speaker; "" for an unknown one.
std::string sharegpt_role(const std::string& from) {
  if (from == "human" || from == "user") return "user";
  if (from == "gpt" || from == "assistant" || from == "chatgpt" || from == "bard" || from == "bing")
    return "assistant";
  if (from == "system") return "system";
  return "";
}

// The requests of one conversation: one per user turn, with the turns before it as recorded history and the
// reply after it as the output length.
std::string read_conversation(const Json& conv, const std::string& where, std::vector<TraceRequest>& out) {
  if (!conv.is_object()) return "not an object";
  auto turns = conv.find("conversations");
  if (turns == conv.end() || !turns->is_array()) return "no \"conversations\" array";
  std::string session = where;
  if (auto id = conv.find("id"); id != conv.end() && (id->is_string() || id->is_number()))
    session = id->is_string() ? id->get<std::string>() : id->dump();
  Json history = Json::array();
  for (size_t k = 0; k < turns->size(); ++k) {
    const Json& t = (*turns)[k];
    if (!t.is_object() || !t.contains("from") || !t["from"].is_string() || !t.contains("value") ||
        !t["value"].is_string())
      return str_cat("turn ", k + 1, " has no string \"from\" and \"value\"");
    const std::string role = sharegpt_role(t["from"].get<std::string>());
    if (role.empty())
      return str_cat("turn ", k + 1, ": unknown speaker '", t["from"].get<std::string>(), "'");
    const std::string value = t["value"].get<std::string>();
    if (role == "assistant" && !out.empty() && out.back().session == session && out.back().output_tokens < 0)
      out.back().output_tokens = estimate_tokens(value);
    history.push_back(Json{{"role", role}, {"content", value}});
    if (role != "user") continue;
    TraceRequest r;
    r.source = str_cat(where, " turn ", k + 1);
    r.session = session;
    r.messages = history;
    int64_t tokens = 0;
    for (const Json& m : history) tokens += estimate_tokens(m["content"].get<std::string>());
    r.prompt_tokens = tokens;
    out.push_back(std::move(r));
  }
  return "";
}

// The line of byte `offset` in `text`, 1-based.
int64_t line_of(const std::string& text, size_t offset) {
  return 1 + std::count(text.begin(),
                        text.begin() + static_cast<std::ptrdiff_t>(std::min(offset, text.size())), '\n');
}

}  // namespace

const std::vector<std::string>& trace_formats() {
  static const std::vector<std::string> kFormats = {"mtp",      "sharegpt",    "mooncake",      "azure",
                                                    "burstgpt", "vllm-custom", "sglang-agentic"};
  return kFormats;
}

Expected<std::string> detect_trace_format(const std::string& path) {
  MTP_ASSIGN_OR_RETURN(std::string text, read_file(path));
  const std::string line = first_line(text);
  if (ends_with(path, ".csv")) {
    if (line.find("ContextTokens") != std::string::npos) return std::string("azure");
    if (line.find("Request tokens") != std::string::npos) return std::string("burstgpt");
    return invalid_argument(path, ":1: a CSV header of neither the Azure trace (TIMESTAMP,ContextTokens,",
                            "GeneratedTokens) nor BurstGPT (Timestamp,...,Request tokens,Response tokens)");
  }
  if (!line.empty() && line[0] == '[') return std::string("sharegpt");
  Json j = Json::parse(line, nullptr, false);
  // A pretty-printed JSON object's first line is not JSON alone: SGLang's agentic trace is one object.
  if (j.is_discarded() && !line.empty() && line[0] == '{') j = Json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("conversations")) return std::string("sglang-agentic");
  if (j.is_object() && j.contains("input_length")) return std::string("mooncake");
  if (j.is_object() && j.value("type", Json()) == "trace") return std::string("mtp");
  if (j.is_object() && j.contains("prompt")) return std::string("vllm-custom");
  return invalid_argument(path, ":1: cannot tell the trace format from this line; give --format");
}

Expected<std::vector<TraceRequest>> read_trace(const std::string& path, const std::string& format,
                                               TraceSkips* skips) {
  std::string f = format;
  if (f == "auto") {
    MTP_ASSIGN_OR_RETURN(f, detect_trace_format(path));
  }
  MTP_ASSIGN_OR_RETURN(std::string text, read_file(path));
  if (f == "mtp") return parse_mtp_trace(path, text);
  if (f == "sharegpt") return parse_sharegpt(path, text);
  if (f == "mooncake") return parse_mooncake(path, text);
  if (f == "azure") return parse_azure_csv(path, text);
  if (f == "burstgpt") return parse_burstgpt_csv(path, text);
  if (f == "vllm-custom") return parse_vllm_custom(path, text, skips);
  if (f == "sglang-agentic") return parse_sglang_agentic(path, text, skips);
  return invalid_argument(
      "--format '", format,
      "' is not auto, mtp, sharegpt, mooncake, azure, burstgpt, vllm-custom or sglang-agentic");
}

Expected<std::vector<TraceRequest>> parse_mtp_trace(const std::string& path, const std::string& text) {
  std::vector<TraceRequest> out;
  bool all_timed = true;
  const Status s = for_each_line(text, [&](int64_t n, std::string_view line) {
    const Json j = Json::parse(line, nullptr, false);
    TraceRequest r;
    r.source = str_cat(path, ":", n);
    const std::string why = j.is_discarded() ? "not JSON" : read_mtp_line(j, r);
    if (!why.empty()) return corrupt(path, ":", n, ": ", why);
    all_timed = all_timed && r.arrival_s >= 0;
    out.push_back(std::move(r));
    return Status::Ok();
  });
  MTP_RETURN_IF_ERROR(s);
  if (!all_timed)
    for (TraceRequest& r : out) r.arrival_s = -1;
  trace_detail::order_by_arrival(out);
  return out;
}

Expected<std::vector<TraceRequest>> parse_sharegpt(const std::string& path, const std::string& text) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return corrupt(path, ":", line_of(text, e.byte > 0 ? e.byte - 1 : 0), ": not JSON (", e.what(), ")");
  }
  if (!doc.is_array()) return corrupt(path, ":1: a ShareGPT file is a JSON array of conversations");
  std::vector<TraceRequest> out;
  for (size_t i = 0; i < doc.size(); ++i) {
    const std::string where = str_cat(path, ": entry ", i + 1);
    if (std::string why = read_conversation(doc[i], where, out); !why.empty())
      return corrupt(where, ": ", why);
  }
  return out;
}

}  // namespace mtp::loadgen
