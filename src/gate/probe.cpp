#include "gate/probe.h"

#include <httplib.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "loadgen/prompts.h"
#include "loadgen/record.h"
#include "loadgen/stream_client.h"
#include "probe_common.h"

namespace mtp::gate {
namespace {

constexpr const char* kTool = "mtp gate probe greedy";

const Json* content_of(const Json& response) {
  if (!response.is_object() || !response.contains("choices") || !response["choices"].is_array() ||
      response["choices"].empty())
    return nullptr;
  const Json& c = response["choices"][0];
  if (!c.contains("logprobs") || !c["logprobs"].is_object() || !c["logprobs"].contains("content") ||
      !c["logprobs"]["content"].is_array())
    return nullptr;
  return &c["logprobs"]["content"];
}

std::string token_at(const Json& content, size_t i) {
  return i < content.size() && content[i].is_object() && content[i].contains("token") &&
                 content[i]["token"].is_string()
             ? content[i]["token"].get<std::string>()
             : "";
}

// One non-streamed greedy chat completion with the top-2 logprobs; the parsed response or why not.
Expected<Json> complete(httplib::Client& http, const std::string& prefix, const httplib::Headers& headers,
                        const GreedyProbeOptions& o, const std::string& prompt, const Json& extra) {
  Json body = {{"messages", Json::array({Json{{"role", "user"}, {"content", prompt}}})},
               {"max_tokens", o.max_tokens},
               {"temperature", 0},
               {"logprobs", true},
               {"top_logprobs", 2}};
  if (!o.model.empty()) body["model"] = o.model;
  for (const auto& [key, value] : extra.items()) body[key] = value;
  const auto res = http.Post(prefix + "/v1/chat/completions", headers, body.dump(), "application/json");
  if (!res) return io_error("request failed: ", httplib::to_string(res.error()));
  if (res->status != 200) return io_error("HTTP ", res->status, ": ", res->body.substr(0, 200));
  Json j = Json::parse(res->body, nullptr, false);
  if (content_of(j) == nullptr) return corrupt("the response has no choices[0].logprobs.content");
  return j;
}

Json outcome_json(const GreedyOutcome& g) {
  Json j = {{"type", "probe"}, {"prompt", g.prompt}, {"kind", g.kind}};
  if (g.first_diff >= 0) {
    j["first_diff"] = g.first_diff;
    j["margin"] = g.margin;
    j["target_token"] = g.target_token;
    j["reference_token"] = g.reference_token;
  }
  if (!g.error.empty()) j["error"] = g.error;
  return j;
}

}  // namespace

Expected<Endpoint> endpoint(const std::string& url, double timeout_s) {
  MTP_ASSIGN_OR_RETURN(loadgen::SplitUrl u, loadgen::split_url(url));
  Endpoint e{std::make_unique<httplib::Client>(u.origin), u.prefix};
  if (!e.http->is_valid()) return invalid_argument("'", url, "' is not a usable URL");
  const auto t =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(timeout_s));
  e.http->set_connection_timeout(t);
  e.http->set_read_timeout(t);
  return e;
}

GreedyOutcome classify_greedy(const Json& target, const Json& reference, double epsilon) {
  GreedyOutcome g;
  const size_t n = std::max(target.size(), reference.size());
  for (size_t i = 0; i < n; ++i) {
    const std::string t = token_at(target, i), r = token_at(reference, i);
    if (t == r && !t.empty()) continue;
    g.first_diff = static_cast<int64_t>(i);
    g.target_token = t, g.reference_token = r;
    // The reference's own top two at that position: how close its greedy choice was.
    const Json& top = i < reference.size() && reference[i].contains("top_logprobs")
                          ? reference[i]["top_logprobs"]
                          : Json::array();
    if (top.is_array() && top.size() >= 2 && top[0].contains("logprob") && top[1].contains("logprob") &&
        top[0]["logprob"].is_number() && top[1]["logprob"].is_number()) {
      g.margin = top[0]["logprob"].get<double>() - top[1]["logprob"].get<double>();
      g.kind = g.margin < epsilon ? "near_tie" : "divergence";
    } else {
      g.kind = "divergence";  // no margin to excuse it (an output ended early, or no top-2 given)
      g.margin = -1;
    }
    return g;
  }
  g.kind = "identical";
  return g;
}

Expected<std::vector<GreedyOutcome>> run_greedy_probe(const GreedyProbeOptions& o,
                                                      const std::string& out_path) {
  MTP_ASSIGN_OR_RETURN(Endpoint target, endpoint(o.url, o.timeout_s));
  MTP_ASSIGN_OR_RETURN(Endpoint reference,
                       endpoint(o.reference_url.empty() ? o.url : o.reference_url, o.timeout_s));
  httplib::Headers headers;
  if (!o.api_key.empty()) headers.emplace("Authorization", "Bearer " + o.api_key);
  MTP_ASSIGN_OR_RETURN(auto out, loadgen::JsonlWriter::open(out_path));
  loadgen::Json header = {{"type", "header"},
                          {"tool", kTool},
                          {"url", o.url},
                          {"reference_url", o.reference_url.empty() ? o.url : o.reference_url},
                          {"reference_body", o.reference_body},
                          {"epsilon", o.epsilon},
                          {"start_utc", loadgen::utc_now()}};
  MTP_RETURN_IF_ERROR(out->write(header));
  std::vector<GreedyOutcome> outcomes;
  for (int p = 0; p < o.prompts; ++p) {
    const std::string prompt = loadgen::synthetic_prompt(o.seed, p, o.prompt_tokens);
    auto t = complete(*target.http, target.prefix, headers, o, prompt, Json::object());
    auto r = complete(*reference.http, reference.prefix, headers, o, prompt, o.reference_body);
    GreedyOutcome g;
    if (!t.ok() || !r.ok()) {
      g.kind = "failed";
      g.error = !t.ok() ? "target: " + t.status().message() : "reference: " + r.status().message();
    } else {
      g = classify_greedy(*content_of(*t), *content_of(*r), o.epsilon);
    }
    g.prompt = p;
    MTP_RETURN_IF_ERROR(out->write(outcome_json(g)));
    outcomes.push_back(g);
  }
  return outcomes;
}

std::string probe_file_tool(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!std::getline(f, line)) return "";
  const Json j = Json::parse(line, nullptr, false);
  return j.is_object() && j.value("type", "") == "header" && j.contains("tool") && j["tool"].is_string()
             ? j["tool"].get<std::string>()
             : "";
}

Status read_probe_lines(const std::string& path, std::string* start_utc,
                        const std::function<Status(const Json& line, int64_t n)>& each) {
  std::ifstream f(path);
  if (!f) return not_found("cannot open '", path, "'");
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    if (line.empty()) continue;
    const Json j = Json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
      return corrupt(path, ":", n, ": not a probe file line");
    if (j["type"] != "header") {
      MTP_RETURN_IF_ERROR(each(j, n));
    } else if (j.contains("start_utc") && j["start_utc"].is_string()) {
      *start_utc = j["start_utc"].get<std::string>();
    }
  }
  return Status::Ok();
}

bool is_probe_file(const std::string& path) {
  return probe_file_tool(path) == kTool;
}

Expected<ProbeFile> read_probe_file(const std::string& path) {
  ProbeFile pf;
  MTP_RETURN_IF_ERROR(read_probe_lines(path, &pf.start_utc, [&](const Json& j, int64_t n) -> Status {
    if (j["type"] != "probe" || !j.contains("kind") || !j["kind"].is_string())
      return corrupt(path, ":", n, ": a probe line without \"kind\"");
    GreedyOutcome g;
    g.kind = j["kind"].get<std::string>();
    if (j.contains("prompt") && j["prompt"].is_number_integer()) g.prompt = j["prompt"].get<int64_t>();
    pf.outcomes.push_back(g);
    return Status::Ok();
  }));
  return pf;
}

}  // namespace mtp::gate
