#include "gate/tool_probe.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <thread>

#include "gate/schema.h"
#include "loadgen/record.h"
#include "probe_common.h"

namespace mtp::gate {
namespace {

constexpr const char* kToolsProbeTool = "mtp gate probe tools";

// The `parameters` schema of the tool named `name` (a tool without one takes any arguments); null when no
// tool has that name.
const Json* tool_schema(const Json& tools, const std::string& name) {
  static const Json kAnything = Json::object();
  for (const Json& t : tools)
    if (t.is_object() && t.contains("function") && t["function"].is_object() &&
        t["function"].value("name", "") == name)
      return t["function"].contains("parameters") ? &t["function"]["parameters"] : &kAnything;
  return nullptr;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Strings compare without case ("paris" is Paris); other values exactly (18 equals 18.0).
bool same_value(const Json& got, const Json& want) {
  if (got.is_string() && want.is_string())
    return lower(got.get<std::string>()) == lower(want.get<std::string>());
  return got == want;
}

// A call's function name; "" when it has none.
std::string call_name(const Json& call) {
  if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) return "";
  const Json& fn = call["function"];
  return fn.contains("name") && fn["name"].is_string() ? fn["name"].get<std::string>() : "";
}

// Checks one call: a known tool, JSON arguments valid for its schema. Returns the parsed arguments (null
// when they do not parse) and appends the problems to `reasons`.
Json check_call(const Json& tools, const Json& call, std::vector<std::string>* reasons) {
  const std::string name = call_name(call);
  const Json& fn = call["function"];
  const Json* schema = tool_schema(tools, name);
  if (name.empty() || schema == nullptr) {
    reasons->push_back(str_cat("called '", name, "', which no tool defines"));
    return nullptr;
  }
  if (!fn.contains("arguments") || !fn["arguments"].is_string()) {
    reasons->push_back(str_cat("the call of '", name, "' has no \"arguments\" string"));
    return nullptr;
  }
  Json args = Json::parse(fn["arguments"].get<std::string>(), nullptr, false);
  if (args.is_discarded()) {
    reasons->push_back(
        str_cat("the arguments of '", name, "' are not JSON: ", fn["arguments"].get<std::string>()));
    return nullptr;
  }
  if (std::string w = schema_violation(*schema, args); !w.empty())
    reasons->push_back(str_cat("the arguments of '", name, "' violate its schema: ", w));
  return args;
}

void check_expected_call(const ToolTurn& turn, const Json& calls, const std::vector<Json>& args,
                         std::vector<std::string>* reasons) {
  for (size_t i = 0; i < calls.size(); ++i) {
    if (call_name(calls[i]) != turn.function) continue;
    if (args[i].is_null()) return;  // already reported: the arguments did not parse
    for (const auto& [key, want] : turn.arguments.items()) {
      if (!args[i].is_object() || !args[i].contains(key))
        reasons->push_back(str_cat("argument '", key, "' of '", turn.function, "' is missing"));
      else if (!same_value(args[i][key], want))
        reasons->push_back(str_cat("argument '", key, "' of '", turn.function, "' is ", args[i][key].dump(),
                                   ", expected ", want.dump()));
    }
    return;
  }
  reasons->push_back(str_cat("no call of '", turn.function, "'"));
}

}  // namespace

std::vector<std::string> markup_in(const std::string& content) {
  std::vector<std::string> found;
  for (const char* tag : {"<tool_call>", "</tool_call>", "<think>", "</think>"})
    for (size_t at = content.find(tag); at != std::string::npos; at = content.find(tag, at + 1))
      found.push_back(tag);
  // Special tokens such as <|im_start|>, <|im_end|>, <|endoftext|>: "<|", a short name, "|>".
  for (size_t at = content.find("<|"); at != std::string::npos; at = content.find("<|", at + 2)) {
    const size_t end = content.find("|>", at + 2);
    if (end != std::string::npos && end - at <= 40) found.push_back(content.substr(at, end + 2 - at));
  }
  return found;
}

TurnCheck check_tool_turn(const ToolScenario& scenario, const ToolTurn& turn, const Json& response) {
  TurnCheck out;
  if (!response.is_object() || !response.contains("choices") || !response["choices"].is_array() ||
      response["choices"].empty() || !response["choices"][0].is_object() ||
      !response["choices"][0].contains("message") || !response["choices"][0]["message"].is_object()) {
    out.reasons.push_back("the response has no choices[0].message");
    return out;
  }
  const Json& choice = response["choices"][0];
  const Json& message = choice["message"];
  const std::string finish = choice.contains("finish_reason") && choice["finish_reason"].is_string()
                                 ? choice["finish_reason"].get<std::string>()
                                 : "(none)";
  if (message.contains("content") && message["content"].is_string()) {
    const std::vector<std::string> leaks = markup_in(message["content"].get<std::string>());
    out.leaks = static_cast<int64_t>(leaks.size());
    if (!leaks.empty()) {
      std::string list;
      for (const std::string& l : leaks) list += (list.empty() ? "" : ", ") + l;
      out.reasons.push_back("content leaks markup: " + list);
    }
  }
  const Json calls = message.contains("tool_calls") && message["tool_calls"].is_array()
                         ? message["tool_calls"]
                         : Json::array();
  const std::string want_finish = turn.function.empty() ? "stop" : "tool_calls";
  if (finish != want_finish)
    out.reasons.push_back(str_cat("finish_reason is '", finish, "', expected '", want_finish, "'"));
  if (turn.function.empty()) {
    if (!calls.empty()) out.reasons.push_back("a tool call where a text answer was expected");
    return out;
  }
  std::vector<Json> args;
  for (const Json& call : calls) args.push_back(check_call(scenario.tools, call, &out.reasons));
  check_expected_call(turn, calls, args, &out.reasons);
  return out;
}

namespace {

struct Job {
  const ToolScenario* scenario;
  bool reference;
  int repeat;
};

// The assistant message to send back: role, content and the calls as the server gave them.
Json assistant_turn(const Json& message) {
  Json m = {{"role", "assistant"}, {"content", message.contains("content") ? message["content"] : Json("")}};
  if (message.contains("tool_calls")) m["tool_calls"] = message["tool_calls"];
  return m;
}

// One turn's request: the conversation so far with the tools, greedy; the response's text or why none came.
Expected<std::string> post_turn(const ToolProbeOptions& o, Endpoint& server, const httplib::Headers& headers,
                                const Job& job, const Json& messages) {
  Json body = {{"messages", messages},
               {"tools", job.scenario->tools},
               {"max_tokens", o.max_tokens},
               {"temperature", 0}};
  if (!o.model.empty()) body["model"] = o.model;
  if (job.reference)
    for (const auto& [key, value] : o.reference_body.items()) body[key] = value;
  const auto res =
      server.http->Post(server.prefix + "/v1/chat/completions", headers, body.dump(), "application/json");
  if (!res) return io_error("request failed: ", httplib::to_string(res.error()));
  if (res->status != 200) return io_error("HTTP ", res->status, ": ", res->body.substr(0, 200));
  return res->body;
}

// Plays one conversation; stops at the first turn that fails (the later turns would answer a conversation
// the scenario did not script).
ToolRun play(const ToolProbeOptions& o, Endpoint& server, const httplib::Headers& headers, const Job& job) {
  const ToolScenario& s = *job.scenario;
  ToolRun run{s.name, job.reference ? "reference" : "target", job.repeat, false, 0, {}};
  Json messages = s.messages;
  for (size_t t = 0; t < s.turns.size(); ++t) {
    const ToolTurn& turn = s.turns[t];
    const std::string at = str_cat("turn ", t + 1, ": ");
    if (!turn.user.empty()) messages.push_back({{"role", "user"}, {"content", turn.user}});
    const Expected<std::string> text = post_turn(o, server, headers, job, messages);
    const Json response = text.ok() ? Json::parse(*text, nullptr, false) : Json();
    const TurnCheck check = !text.ok()                ? TurnCheck{{text.status().message()}, 0}
                            : response.is_discarded() ? TurnCheck{{"the response is not JSON"}, 0}
                                                      : check_tool_turn(s, turn, response);
    run.leaks += check.leaks;
    for (const std::string& r : check.reasons) run.reasons.push_back(at + r);
    if (!check.reasons.empty()) return run;
    const Json& message = response["choices"][0]["message"];
    messages.push_back(assistant_turn(message));
    if (turn.function.empty()) continue;
    for (const Json& call : message["tool_calls"])
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", call.contains("id") ? call["id"] : Json("")},
                          {"name", call_name(call)},
                          {"content", turn.result}});
  }
  run.pass = true;
  return run;
}

Json run_json(const ToolRun& r) {
  return {{"type", "tool_run"}, {"scenario", r.scenario}, {"side", r.side},      {"repeat", r.repeat},
          {"pass", r.pass},     {"leaks", r.leaks},       {"reasons", r.reasons}};
}

}  // namespace

Expected<std::vector<ToolRun>> run_tool_probe(const ToolProbeOptions& o, const std::string& out_path) {
  const std::string reference_url = o.reference_url.empty() ? o.url : o.reference_url;
  // Fail on a bad URL before any request.
  MTP_RETURN_IF_ERROR(endpoint(o.url, o.timeout_s).status());
  MTP_RETURN_IF_ERROR(endpoint(reference_url, o.timeout_s).status());
  httplib::Headers headers;
  if (!o.api_key.empty()) headers.emplace("Authorization", "Bearer " + o.api_key);
  MTP_ASSIGN_OR_RETURN(auto out, loadgen::JsonlWriter::open(out_path));
  Json names = Json::array();
  for (const ToolScenario& s : o.scenarios) names.push_back(s.name);
  MTP_RETURN_IF_ERROR(out->write(loadgen::Json{{"type", "header"},
                                               {"tool", kToolsProbeTool},
                                               {"url", o.url},
                                               {"reference_url", reference_url},
                                               {"reference_body", o.reference_body},
                                               {"scenarios", names},
                                               {"repeat", o.repeat},
                                               {"concurrency", o.concurrency},
                                               {"start_utc", loadgen::utc_now()}}));
  // Each scenario's target and reference conversations are queued one after the other, so at a concurrency
  // above 1 both sides run beside each other, under the same load.
  std::vector<Job> jobs;
  for (int r = 0; r < o.repeat; ++r)
    for (const ToolScenario& s : o.scenarios)
      for (bool reference : {false, true}) jobs.push_back({&s, reference, r});
  // `concurrency` workers, each with its own clients, take conversations in order; lines are written in
  // job order afterwards so the file does not depend on timing.
  std::vector<ToolRun> runs(jobs.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    auto target = endpoint(o.url, o.timeout_s);
    auto reference = endpoint(reference_url, o.timeout_s);
    for (size_t i = next++; i < jobs.size(); i = next++) {
      runs[i] = play(o, jobs[i].reference ? *reference : *target, headers, jobs[i]);
      runs[i].concurrency = o.concurrency;
    }
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < std::max(1, o.concurrency); ++w) workers.emplace_back(worker);
  for (std::thread& w : workers) w.join();
  for (const ToolRun& r : runs) MTP_RETURN_IF_ERROR(out->write(run_json(r)));
  return runs;
}

bool is_tool_probe_file(const std::string& path) {
  return probe_file_tool(path) == kToolsProbeTool;
}

Expected<ToolProbeFile> read_tool_probe_file(const std::string& path) {
  ToolProbeFile pf;
  const int concurrency = probe_file_concurrency(path);
  MTP_RETURN_IF_ERROR(read_probe_lines(path, &pf.start_utc, [&](const Json& j, int64_t n) -> Status {
    if (j["type"] != "tool_run" || !j.contains("pass") || !j["pass"].is_boolean() || !j.contains("leaks") ||
        !j["leaks"].is_number_integer() || !j.contains("side") || !j["side"].is_string())
      return corrupt(path, ":", n, ": a tool_run line needs \"pass\", \"leaks\" and \"side\"");
    ToolRun r;
    r.pass = j["pass"].get<bool>();
    r.leaks = j["leaks"].get<int64_t>();
    r.side = j["side"].get<std::string>();
    r.scenario = j.value("scenario", "");
    r.concurrency = concurrency;
    pf.runs.push_back(std::move(r));
    return Status::Ok();
  }));
  return pf;
}

}  // namespace mtp::gate
