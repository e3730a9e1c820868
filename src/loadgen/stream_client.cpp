#include "loadgen/stream_client.h"

#include <httplib.h>

#include "loadgen/sse.h"

namespace mtp::loadgen {
namespace {

constexpr size_t kErrorBodyMax = 300;  // bytes of an HTTP error body kept in the message

int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

const Json* member(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string string_at(const Json& j, const char* key) {
  const Json* v = member(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : "";
}

int64_t int_at(const Json& j, const char* key) {
  const Json* v = member(j, key);
  return v != nullptr && v->is_number() ? v->get<int64_t>() : -1;
}

// Code points of the tool-call names and argument fragments in a delta's tool_calls array.
int64_t tool_call_chars(const Json& calls) {
  int64_t n = 0;
  if (!calls.is_array()) return 0;
  for (const Json& c : calls) {
    const Json* f = member(c, "function");
    if (f == nullptr) continue;
    n += code_points(string_at(*f, "name")) + code_points(string_at(*f, "arguments"));
  }
  return n;
}

// What one chunk's first choice carried: its kind and characters, and whether it finished the choice.
void read_choice(const Json& chunk, EventRecord& e, bool& finished) {
  const Json* choices = member(chunk, "choices");
  if (choices == nullptr || !choices->is_array() || choices->empty()) return;
  const Json& choice = (*choices)[0];
  if (member(choice, "finish_reason") != nullptr) finished = true;
  // A completions stream carries its text in the choice itself.
  const int64_t text = code_points(string_at(choice, "text"));
  const Json* delta = member(choice, "delta");
  e.chars = text;
  e.kind = text > 0 ? "content" : "empty";
  if (delta == nullptr) return;
  const int64_t content = code_points(string_at(*delta, "content"));
  const int64_t reasoning =
      code_points(string_at(*delta, "reasoning_content")) + code_points(string_at(*delta, "reasoning"));
  const Json* calls = member(*delta, "tool_calls");
  const int64_t tools = calls != nullptr ? tool_call_chars(*calls) : 0;
  const bool any_call = calls != nullptr && calls->is_array() && !calls->empty();
  e.chars = content + reasoning + tools;
  e.kind = content > 0 ? "content" : reasoning > 0 ? "reasoning" : any_call ? "tool_call" : "empty";
}

// Adds the first choice's delta text of `chunk` to `reply`. A tool call's first delta brings its id and name,
// later ones with the same index more of its arguments.
void add_to_reply(const Json& chunk, Reply& reply) {
  const Json* choices = member(chunk, "choices");
  if (choices == nullptr || !choices->is_array() || choices->empty()) return;
  const Json& choice = (*choices)[0];
  reply.content += string_at(choice, "text");
  const Json* delta = member(choice, "delta");
  if (delta == nullptr) return;
  reply.content += string_at(*delta, "content");
  reply.reasoning += string_at(*delta, "reasoning_content") + string_at(*delta, "reasoning");
  const Json* calls = member(*delta, "tool_calls");
  if (calls == nullptr || !calls->is_array()) return;
  for (const Json& c : *calls) {
    const Json* index = member(c, "index");
    const int64_t i = index != nullptr && index->is_number_integer() ? index->get<int64_t>() : 0;
    if (i < 0 || i > 1024) continue;  // a bogus index must not grow the array without bound
    while (static_cast<int64_t>(reply.tool_calls.size()) <= i)
      reply.tool_calls.push_back(
          Json{{"id", ""}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
    Json& call = reply.tool_calls[static_cast<size_t>(i)];
    if (const std::string id = string_at(c, "id"); !id.empty()) call["id"] = id;
    if (const Json* f = member(c, "function")) {
      call["function"]["name"] = call["function"]["name"].get<std::string>() + string_at(*f, "name");
      call["function"]["arguments"] =
          call["function"]["arguments"].get<std::string>() + string_at(*f, "arguments");
    }
  }
}

std::string error_text(const Json& err) {
  const std::string msg = string_at(err, "message");
  return msg.empty() ? err.dump() : msg;
}

std::string transport_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "connect timed out";
    case httplib::Error::Read:
      return "connection lost or read timed out";
    case httplib::Error::Write:
      return "cannot send the request";
    default:
      return "request failed";
  }
}

// The state of one stream while its bytes arrive.
struct Stream {
  Stream(const RunClock& clock, RequestRecord& r, Reply* reply) : clock(clock), r(r), reply(reply) {}

  const RunClock& clock;
  RequestRecord& r;
  Reply* reply;  // null: the text is not kept
  SseParser sse;
  std::string body;  // an error response's body (first kErrorBodyMax bytes)
  std::string error;
  bool done = false, finished = false;

  // False stops reading: the stream is bad and the request has failed.
  bool on_bytes(const char* data, size_t n) {
    if (r.http_status != 200) {
      body.append(data, std::min(n, kErrorBodyMax - std::min(kErrorBodyMax, body.size())));
      return true;
    }
    const int64_t t = clock.now_ns();
    for (std::string& payload : sse.feed(std::string_view(data, n)))
      if (!on_event(payload, t)) return false;
    return true;
  }

  bool on_event(const std::string& payload, int64_t t) {
    if (payload == "[DONE]") return done = true;
    const Json chunk = Json::parse(payload, nullptr, false);
    if (chunk.is_discarded()) {
      error = str_cat("malformed JSON in SSE event ", r.events.size() + 1, ": ", payload.substr(0, 120));
      return false;
    }
    if (const Json* err = member(chunk, "error")) {
      error = "error event: " + error_text(*err);
      return false;
    }
    EventRecord e;
    e.t_ns = t;
    read_choice(chunk, e, finished);
    if (reply != nullptr) add_to_reply(chunk, *reply);
    if (const Json* usage = member(chunk, "usage")) {
      r.prompt_tokens = int_at(*usage, "prompt_tokens");
      r.completion_tokens = int_at(*usage, "completion_tokens");
    }
    if (const Json* timings = member(chunk, "timings"); timings != nullptr && timings->is_object()) {
      r.timings = *timings;
      e.predicted_n = int_at(*timings, "predicted_n");
    }
    if (e.kind != "empty" && r.first_token_ns < 0) r.first_token_ns = t;
    r.events.push_back(std::move(e));
    return true;
  }
};

// Sets ok/error from how the exchange ended, then the token counts.
void conclude(Stream& s, const httplib::Result& res) {
  RequestRecord& r = s.r;
  if (!s.error.empty()) {
    r.error = s.error;
  } else if (!res) {
    r.error = str_cat(transport_error(res.error()), " (", httplib::to_string(res.error()), ")");
  } else if (r.http_status != 200) {
    r.error = str_cat("HTTP ", r.http_status, ": ", s.body);
  } else if (!s.done && !s.finished) {
    r.error = "the stream ended before [DONE] or a finish_reason";
  } else {
    r.ok = true;
  }
  if (r.completion_tokens >= 0) {
    r.count_source = "usage";
  } else if (int_at(r.timings, "predicted_n") >= 0) {
    r.completion_tokens = int_at(r.timings, "predicted_n");
    r.count_source = "timings";
  }
  split_tokens(r);
}

}  // namespace

Expected<SplitUrl> split_url(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || (url.substr(0, scheme) != "http" && url.substr(0, scheme) != "https"))
    return invalid_argument("--url '", url, "' is not an http:// or https:// URL");
  const size_t path = url.find('/', scheme + 3);
  SplitUrl s{url.substr(0, path), path == std::string::npos ? "" : url.substr(path)};
  if (s.origin.size() == scheme + 3) return invalid_argument("--url '", url, "' has no host");
  while (!s.prefix.empty() && s.prefix.back() == '/') s.prefix.pop_back();
  // "http://h:p/v1" and "http://h:p" both mean the same server.
  if (s.prefix.size() >= 3 && s.prefix.compare(s.prefix.size() - 3, 3, "/v1") == 0)
    s.prefix.resize(s.prefix.size() - 3);
  return s;
}

Json chat_body(const ChatRequest& req) {
  Json body = Json::object();
  if (!req.model.empty()) body["model"] = req.model;
  if (req.completions) {
    body["prompt"] = req.prompt;
  } else {
    body["messages"] = req.messages.is_array()
                           ? req.messages
                           : Json::array({Json{{"role", "user"}, {"content", req.prompt}}});
  }
  body["max_tokens"] = req.max_tokens;
  body["stream"] = true;
  body["stream_options"] = Json{{"include_usage", true}};
  if (req.temperature) body["temperature"] = *req.temperature;
  if (req.ignore_eos) body["ignore_eos"] = true;
  for (const auto& [key, value] : req.extra.items())
    if (!body.contains(key)) body[key] = value;
  return body;
}

const std::map<std::string, TokenCount>& token_count_names() {
  static const std::map<std::string, TokenCount> kNames = {
      {"auto", TokenCount::kAuto}, {"server", TokenCount::kServer}, {"tokenize", TokenCount::kTokenize}};
  return kNames;
}

const char* token_count_name(TokenCount c) {
  for (const auto& [name, value] : token_count_names())
    if (value == c) return name.c_str();
  return "auto";
}

struct StreamClient::Impl {
  httplib::Client http;
  std::string prefix;
  httplib::Headers headers;
  TokenCount count = TokenCount::kAuto;
  explicit Impl(const std::string& origin) : http(origin) {}
};

StreamClient::~StreamClient() = default;

Expected<std::unique_ptr<StreamClient>> StreamClient::create(const ClientOptions& options) {
  MTP_ASSIGN_OR_RETURN(SplitUrl url, split_url(options.url));
  auto c = std::make_unique<StreamClient>();
  c->impl_ = std::make_unique<Impl>(url.origin);
  if (!c->impl_->http.is_valid()) return invalid_argument("--url '", options.url, "' is not usable");
  c->impl_->prefix = url.prefix;
  c->impl_->count = options.count;
  const auto timeout = std::chrono::duration<double>(options.timeout_s);
  c->impl_->http.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  c->impl_->http.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  c->impl_->http.set_keep_alive(true);
  // Without it, Nagle's algorithm holds the request body until the server acknowledges the headers (up to
  // its delayed-ACK time, 40 ms on Linux), which would land in every TTFT. Python's aiohttp does the same.
  c->impl_->http.set_tcp_nodelay(true);
  if (!options.api_key.empty()) c->impl_->headers.emplace("Authorization", "Bearer " + options.api_key);
  return c;
}

void StreamClient::run(const ChatRequest& req, const RunClock& clock, RequestRecord& r, Reply* reply) {
  // Counting by /tokenize needs the text even where the caller does not.
  Reply own;
  Reply* text = reply != nullptr || impl_->count == TokenCount::kServer ? reply : &own;
  // A kept-alive connection the server closed after its last response (llama-server does, after a stream)
  // fails at once with no byte of answer: the request never reached a live connection, so it goes again,
  // once, on a fresh one. Any other failure, or one after a response began, is the request's.
  const RequestRecord blank = r;
  if (run_attempt(req, clock, r, text)) {
    r = blank;
    if (text != nullptr) *text = Reply{};
    run_attempt(req, clock, r, text);
  }
  if (text != nullptr) count_by_tokenize(r, *text);
}

void StreamClient::count_by_tokenize(RequestRecord& r, const Reply& reply) {
  const bool wanted = impl_->count == TokenCount::kTokenize ||
                      (impl_->count == TokenCount::kAuto && r.count_source == "none");
  if (!r.ok || !wanted) return;
  // The text as delivered: markup the server parsed out (think tags, tool-call tags) is not in it.
  std::string text = reply.reasoning + reply.content;
  for (const Json& call : reply.tool_calls) {
    const Json& f = call["function"];
    text += f["name"].get<std::string>() + f["arguments"].get<std::string>();
  }
  Expected<int64_t> n = text.empty() ? Expected<int64_t>(int64_t{0}) : count_tokens(text);
  if (!n.ok()) {
    r.count_error = n.status().message();
    return;
  }
  r.completion_tokens = *n;
  r.count_source = "tokenize";
  split_tokens(r);
}

Expected<int64_t> StreamClient::count_tokens(const std::string& text) {
  const std::string body = Json{{"content", text}, {"add_special", false}}.dump();
  httplib::Result res =
      impl_->http.Post(impl_->prefix + "/tokenize", impl_->headers, body, "application/json");
  // A kept-alive connection the server closed after the stream (llama-server): once more on a fresh one.
  if (!res && (res.error() == httplib::Error::Read || res.error() == httplib::Error::Write))
    res = impl_->http.Post(impl_->prefix + "/tokenize", impl_->headers, body, "application/json");
  if (!res) return io_error("POST /tokenize: ", transport_error(res.error()));
  if (res->status != 200) return io_error("POST /tokenize: HTTP ", res->status);
  const Json j = Json::parse(res->body, nullptr, false);
  // llama-server and mtp serve answer {"tokens": [...]}; vLLM also gives "count".
  if (const Json* tokens = member(j, "tokens"); tokens != nullptr && tokens->is_array())
    return static_cast<int64_t>(tokens->size());
  if (const int64_t count = int_at(j, "count"); count >= 0) return count;
  return corrupt("POST /tokenize: the answer has no \"tokens\" array");
}

bool StreamClient::run_attempt(const ChatRequest& req, const RunClock& clock, RequestRecord& r,
                               Reply* reply) {
  Stream s(clock, r, reply);
  httplib::Request hr;
  hr.method = "POST";
  hr.path = impl_->prefix + (req.completions ? "/v1/completions" : "/v1/chat/completions");
  hr.headers = impl_->headers;
  hr.headers.emplace("Content-Type", "application/json");
  hr.headers.emplace("Accept", "text/event-stream");
  hr.body = chat_body(req).dump();
  hr.response_handler = [&](const httplib::Response& res) {
    r.http_status = res.status;
    return true;
  };
  hr.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) { return s.on_bytes(data, n); };
  r.sent_ns = clock.now_ns();
  const httplib::Result res = impl_->http.send(hr);
  r.end_ns = clock.now_ns();
  if (res && r.http_status == 0) r.http_status = res->status;
  conclude(s, res);
  return !res && (res.error() == httplib::Error::Read || res.error() == httplib::Error::Write) &&
         r.http_status == 0;
}

Expected<std::string> StreamClient::get_text(const std::string& path) {
  const httplib::Result res = impl_->http.Get(impl_->prefix + path, impl_->headers);
  if (!res) return io_error("GET ", path, ": ", transport_error(res.error()));
  if (res->status == 404) return not_found("GET ", path, ": HTTP 404");
  if (res->status != 200) return io_error("GET ", path, ": HTTP ", res->status);
  return res->body;
}

Expected<std::string> StreamClient::first_model() {
  MTP_ASSIGN_OR_RETURN(std::string body, get_text("/v1/models"));
  const Json j = Json::parse(body, nullptr, false);
  const Json* data = member(j, "data");
  if (data == nullptr || !data->is_array() || data->empty())
    return corrupt("GET /v1/models: no model listed");
  const std::string id = string_at((*data)[0], "id");
  if (id.empty()) return corrupt("GET /v1/models: the first model has no id");
  return id;
}

}  // namespace mtp::loadgen
