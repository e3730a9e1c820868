// The reply parser: a small state machine over a buffer of text not yet emitted. Text is emitted as soon as
// it cannot be the start of a marker; whitespace next to markers is held back until it is known whether it
// is dropped (around reasoning and tool calls) or content.
#include "chat/output_parser.h"

#include <algorithm>
#include <random>

namespace mtp::chat {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>";
constexpr std::string_view kToolClose = "</tool_call>";
constexpr std::string_view kFuncOpen = "<function=";
constexpr std::string_view kFuncClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// The longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// The bytes at the end of `s` that start a UTF-8 sequence not yet complete.
size_t incomplete_utf8(std::string_view s) {
  for (size_t k = 1; k <= std::min<size_t>(4, s.size()); ++k) {
    unsigned char c = static_cast<unsigned char>(s[s.size() - k]);
    if ((c & 0xC0) == 0x80) continue;
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > k ? k : 0;
  }
  return 0;
}

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string random_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int k = 0; k < 24; ++k) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

// The JSON schema "type" of parameter `param` of tool `tool`, as a list of type names (empty: unknown).
std::vector<std::string> param_types(const Json& tools, const std::string& tool, const std::string& param) {
  if (!tools.is_array()) return {};
  for (const Json& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const Json& fn = t["function"];
    if (!fn.contains("name") || fn["name"] != tool) continue;
    if (!fn.contains("parameters") || !fn["parameters"].is_object()) return {};
    const Json& props = fn["parameters"].value("properties", Json::object());
    if (!props.is_object() || !props.contains(param) || !props[param].is_object()) return {};
    const Json& type = props[param].value("type", Json());
    std::vector<std::string> out;
    if (type.is_string()) out.push_back(type.get<std::string>());
    if (type.is_array()) {
      for (const Json& x : type) {
        if (x.is_string()) out.push_back(x.get<std::string>());
      }
    }
    return out;
  }
  return {};
}

// A parameter value of the XML format: the template writes strings as they are and everything else as JSON
// (Python's str() for numbers and booleans: "True").
Json convert_value(const std::string& value, const std::vector<std::string>& types) {
  auto has = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };
  if (has("string")) return value;
  std::string_view v = trim(value);
  if (has("boolean") && (v == "True" || v == "False")) return v == "True";
  if (has("null") && v == "None") return nullptr;
  Json parsed = Json::parse(v, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_discarded() && !parsed.is_string()) return parsed;
  return value;
}

// <function=NAME>\n<parameter=K>\nV\n</parameter>\n...</function>
bool parse_xml_call(std::string_view s, const Json& tools, std::string* name, Json* args,
                    std::string* error) {
  s = trim(s);
  if (s.substr(0, kFuncOpen.size()) != kFuncOpen) {
    *error = "expected <function=NAME>";
    return false;
  }
  s.remove_prefix(kFuncOpen.size());
  size_t gt = s.find('>');
  if (gt == std::string_view::npos) {
    *error = "unterminated <function=";
    return false;
  }
  *name = std::string(trim(s.substr(0, gt)));
  if (name->empty() || name->find_first_of("<\n") != std::string::npos) {
    *error = "bad function name";
    return false;
  }
  s.remove_prefix(gt + 1);
  *args = Json::object();
  while (true) {
    while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
    if (s.substr(0, kFuncClose.size()) == kFuncClose) {
      if (!trim(s.substr(kFuncClose.size())).empty()) {
        *error = "text after </function>";
        return false;
      }
      return true;
    }
    if (s.substr(0, kParamOpen.size()) != kParamOpen) {
      *error = s.empty() ? "missing </function>" : "unexpected text in the function call";
      return false;
    }
    s.remove_prefix(kParamOpen.size());
    gt = s.find('>');
    if (gt == std::string_view::npos) {
      *error = "unterminated <parameter=";
      return false;
    }
    std::string key(trim(s.substr(0, gt)));
    if (key.empty()) {
      *error = "empty parameter name";
      return false;
    }
    s.remove_prefix(gt + 1);
    size_t end = std::min({s.find(kParamClose), s.find(kParamOpen), s.find(kFuncClose)});
    if (end == std::string_view::npos) {
      *error = "unterminated parameter '" + key + "'";
      return false;
    }
    std::string value(s.substr(0, end));
    if (!value.empty() && value.front() == '\n') value.erase(0, 1);
    if (!value.empty() && value.back() == '\n') value.pop_back();
    if (s.substr(end, kParamClose.size()) == kParamClose) end += kParamClose.size();
    s.remove_prefix(end);
    (*args)[key] = convert_value(value, param_types(tools, *name, key));
  }
}

// {"name": ..., "arguments": {...}}
bool parse_json_call(std::string_view s, std::string* name, Json* args, std::string* error) {
  Json j = Json::parse(trim(s), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "not a JSON object";
    return false;
  }
  if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty()) {
    *error = "no \"name\"";
    return false;
  }
  *name = j["name"].get<std::string>();
  Json a = j.contains("arguments") ? j["arguments"] : j.value("parameters", Json::object());
  if (a.is_string()) a = Json::parse(a.get<std::string>(), nullptr, false);
  if (a.is_null()) a = Json::object();
  if (a.is_discarded() || !a.is_object()) {
    *error = "\"arguments\" is not a JSON object";
    return false;
  }
  *args = std::move(a);
  return true;
}

}  // namespace

Json ToolCall::to_json(int index) const {
  Json j = Json::object();
  if (index >= 0) j["index"] = index;
  j["id"] = id;
  j["type"] = "function";
  j["function"] = {{"name", name}, {"arguments", arguments}};
  return j;
}

Json ParsedOutput::to_message_json() const {
  Json m = Json::object();
  m["role"] = "assistant";
  m["content"] = content.empty() && !tool_calls.empty() ? Json(nullptr) : Json(content);
  if (!reasoning_content.empty()) m["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCall& c : tool_calls) calls.push_back(c.to_json());
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

OutputParser::OutputParser(OutputFormat format) : format_(std::move(format)) {
  if (format_.reasoning == ReasoningFormat::kNone) {
    state_ = State::kContent;
  } else {
    state_ = format_.starts_in_reasoning ? State::kReasoning : State::kStart;
  }
}

OutputDelta OutputParser::feed(std::string_view text) {
  OutputDelta out;
  if (finished_) return out;
  buf_.append(text);
  process(false, out);
  return out;
}

OutputDelta OutputParser::finish() {
  OutputDelta out;
  if (finished_) return out;
  process(true, out);
  if (!pending_ws_.empty() && state_ == State::kContent) {
    out.content += pending_ws_;
    result_.content += pending_ws_;
    pending_ws_.clear();
  }
  finished_ = true;
  return out;
}

void OutputParser::emit_content(std::string text, OutputDelta& out) {
  if (text.empty()) return;
  text = pending_ws_ + text;
  pending_ws_.clear();
  size_t end = text.size();
  while (end > 0 && is_ws(text[end - 1])) --end;
  pending_ws_ = text.substr(end);
  text.resize(end);
  out.content += text;
  result_.content += text;
}

void OutputParser::emit_reasoning(std::string text, OutputDelta& out) {
  if (!reasoning_started_) {
    size_t p = 0;
    while (p < text.size() && is_ws(text[p])) ++p;
    text.erase(0, p);
    if (text.empty()) return;
    reasoning_started_ = true;
  }
  // Trailing whitespace is held in pending_ws_ too: it is dropped at </think> and at the end.
  text = pending_ws_ + text;
  pending_ws_.clear();
  size_t end = text.size();
  while (end > 0 && is_ws(text[end - 1])) --end;
  pending_ws_ = text.substr(end);
  text.resize(end);
  out.reasoning_content += text;
  result_.reasoning_content += text;
}

void OutputParser::finish_tool_call(std::string_view inner, bool terminated, OutputDelta& out) {
  std::string name, error;
  Json args;
  bool ok;
  if (tool_open_ == kFuncOpen) {
    ok = parse_xml_call(str_cat(kFuncOpen, inner, kFuncClose), format_.tools, &name, &args, &error);
  } else {
    std::string_view body = trim(inner);
    if (!body.empty() && body.front() == '{') {
      ok = parse_json_call(body, &name, &args, &error);
    } else {
      ok = parse_xml_call(body, format_.tools, &name, &args, &error);
    }
  }
  if (ok) {
    ToolCall call{format_.make_id ? format_.make_id(n_calls_) : random_id(), name, dump(args)};
    ++n_calls_;
    out.tool_calls.push_back(call);
    result_.tool_calls.push_back(std::move(call));
    ws_before_call_.clear();
    strip_leading_ws_ = true;
    return;
  }
  std::string close = tool_open_ == kFuncOpen ? std::string(kFuncClose) : std::string(kToolClose);
  std::string raw = str_cat(tool_open_, inner, terminated ? close : "");
  std::string warning = str_cat("malformed tool call returned as content: ", error,
                                terminated ? "" : str_cat(" (no ", close, ")"));
  out.warnings.push_back(warning);
  result_.warnings.push_back(std::move(warning));
  pending_ws_ = std::move(ws_before_call_);
  ws_before_call_.clear();
  emit_content(std::move(raw), out);
}

void OutputParser::process(bool final, OutputDelta& out) {
  while (true) {
    switch (state_) {
      case State::kStart: {
        size_t p = 0;
        while (p < buf_.size() && is_ws(buf_[p])) ++p;
        std::string_view rest = std::string_view(buf_).substr(p);
        if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
          buf_.erase(0, p + kThinkOpen.size());
          state_ = State::kReasoning;
          continue;
        }
        if (!final && rest.size() < kThinkOpen.size() && kThinkOpen.substr(0, rest.size()) == rest) return;
        state_ = State::kContent;
        continue;
      }
      case State::kReasoning: {
        size_t pos = buf_.find(kThinkClose);
        if (pos != std::string::npos) {
          emit_reasoning(buf_.substr(0, pos), out);
          pending_ws_.clear();
          buf_.erase(0, pos + kThinkClose.size());
          state_ = State::kContent;
          strip_leading_ws_ = true;
          continue;
        }
        size_t keep = final ? 0 : std::max(partial_suffix(buf_, kThinkClose), incomplete_utf8(buf_));
        emit_reasoning(buf_.substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        if (final) pending_ws_.clear();
        return;
      }
      case State::kContent: {
        if (strip_leading_ws_) {
          size_t p = 0;
          while (p < buf_.size() && is_ws(buf_[p])) ++p;
          buf_.erase(0, p);
          if (buf_.empty()) return;
          strip_leading_ws_ = false;
        }
        if (format_.parse_tool_calls) {
          size_t a = buf_.find(kToolOpen), b = buf_.find(kFuncOpen);
          size_t pos = std::min(a, b);
          if (pos != std::string::npos) {
            emit_content(buf_.substr(0, pos), out);
            ws_before_call_ = std::move(pending_ws_);
            pending_ws_.clear();
            tool_open_ = std::string(pos == a ? kToolOpen : kFuncOpen);
            scanned_ = 0;
            buf_.erase(0, pos + tool_open_.size());
            state_ = State::kToolCall;
            continue;
          }
        }
        size_t keep = 0;
        if (!final) {
          keep = incomplete_utf8(buf_);
          if (format_.parse_tool_calls) {
            keep = std::max({keep, partial_suffix(buf_, kToolOpen), partial_suffix(buf_, kFuncOpen)});
          }
        }
        emit_content(buf_.substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      case State::kToolCall: {
        std::string_view close = tool_open_ == kFuncOpen ? kFuncClose : kToolClose;
        // Resume the search where the last feed stopped: a long call streamed in small deltas stays linear.
        size_t pos = buf_.find(close, scanned_ > close.size() ? scanned_ - close.size() : 0);
        scanned_ = buf_.size();
        if (pos != std::string::npos) {
          std::string inner = buf_.substr(0, pos);
          buf_.erase(0, pos + close.size());
          state_ = State::kContent;
          finish_tool_call(inner, true, out);
          continue;
        }
        if (!final) return;
        std::string inner = std::move(buf_);
        buf_.clear();
        state_ = State::kContent;
        finish_tool_call(inner, false, out);
        return;
      }
    }
  }
}

ParsedOutput parse_output(std::string_view text, const OutputFormat& format) {
  OutputParser p(format);
  p.feed(text);
  p.finish();
  return p.result();
}

}  // namespace mtp::chat
