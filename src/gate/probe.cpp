#include "gate/probe.h"

#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "loadgen/prompts.h"
#include "loadgen/record.h"
#include "loadgen/stream_client.h"
#include "probe_common.h"

namespace mtp::gate {
namespace {

constexpr const char* kGreedyProbeTool = "mtp gate probe greedy";

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

namespace {

// The probe's requests in flight and its file: request 2p is prompt p's target, 2p + 1 its reference, taken
// in that order by `concurrency` workers. A prompt's line is written as soon as it and every earlier prompt
// have both replies, so the file keeps prompt order and a probe cut short keeps what it measured.
class GreedyRun {
 public:
  GreedyRun(const GreedyProbeOptions& o, const httplib::Headers& headers, loadgen::JsonlWriter& out)
      : o_(o), headers_(headers), out_(out), replies_(2 * static_cast<size_t>(o.prompts)) {}

  Expected<std::vector<GreedyOutcome>> run() {
    std::vector<std::thread> workers;
    for (int w = 0; w < std::max(1, o_.concurrency); ++w) workers.emplace_back([this] { work(); });
    for (std::thread& w : workers) w.join();
    if (!status_.ok()) return status_;
    return std::move(outcomes_);
  }

 private:
  // Each worker has its own clients (an httplib::Client is not shared between threads).
  void work() {
    auto target = endpoint(o_.url, o_.timeout_s);
    auto reference = endpoint(o_.reference_url.empty() ? o_.url : o_.reference_url, o_.timeout_s);
    for (size_t i = next_++; i < replies_.size(); i = next_++) {
      const bool is_reference = i % 2 == 1;
      const std::string prompt =
          loadgen::synthetic_prompt(o_.seed, static_cast<int64_t>(i / 2), o_.prompt_tokens);
      Endpoint& e = is_reference ? *reference : *target;
      Expected<Json> reply = complete(*e.http, e.prefix, headers_, o_, prompt,
                                      is_reference ? o_.reference_body : Json::object());
      std::lock_guard<std::mutex> lock(mu_);
      replies_[i] = std::move(reply);
      write_ready();
    }
  }

  // Under mu_: classifies and writes every prompt whose turn has come and whose two replies are in.
  void write_ready() {
    while (outcomes_.size() < static_cast<size_t>(o_.prompts)) {
      const size_t p = outcomes_.size();
      std::optional<Expected<Json>>&t = replies_[2 * p], &r = replies_[2 * p + 1];
      if (!t || !r) return;
      GreedyOutcome g;
      if (!t->ok() || !r->ok()) {
        g.kind = "failed";
        g.error = !t->ok() ? "target: " + t->status().message() : "reference: " + r->status().message();
      } else {
        g = classify_greedy(*content_of(**t), *content_of(**r), o_.epsilon);
      }
      g.prompt = static_cast<int64_t>(p);
      g.concurrency = o_.concurrency;
      if (Status s = out_.write(outcome_json(g)); !s.ok() && status_.ok()) status_ = s;
      outcomes_.push_back(std::move(g));
      t.reset(), r.reset();  // a long probe does not keep every response
    }
  }

  const GreedyProbeOptions& o_;
  const httplib::Headers& headers_;
  loadgen::JsonlWriter& out_;
  std::atomic<size_t> next_{0};
  std::mutex mu_;
  std::vector<std::optional<Expected<Json>>> replies_;
  std::vector<GreedyOutcome> outcomes_;
  Status status_;
};

}  // namespace

Expected<std::vector<GreedyOutcome>> run_greedy_probe(const GreedyProbeOptions& o,
                                                      const std::string& out_path) {
  // Fail on a bad URL before any request.
  MTP_RETURN_IF_ERROR(endpoint(o.url, o.timeout_s).status());
  MTP_RETURN_IF_ERROR(endpoint(o.reference_url.empty() ? o.url : o.reference_url, o.timeout_s).status());
  httplib::Headers headers;
  if (!o.api_key.empty()) headers.emplace("Authorization", "Bearer " + o.api_key);
  MTP_ASSIGN_OR_RETURN(auto out, loadgen::JsonlWriter::open(out_path));
  loadgen::Json header = {{"type", "header"},
                          {"tool", kGreedyProbeTool},
                          {"url", o.url},
                          {"reference_url", o.reference_url.empty() ? o.url : o.reference_url},
                          {"reference_body", o.reference_body},
                          {"epsilon", o.epsilon},
                          {"concurrency", o.concurrency},
                          {"start_utc", loadgen::utc_now()}};
  MTP_RETURN_IF_ERROR(out->write(header));
  return GreedyRun(o, headers, *out).run();
}

// A probe file's header line (null when the first line is no header).
Json probe_header(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!std::getline(f, line)) return nullptr;
  Json j = Json::parse(line, nullptr, false);
  return j.is_object() && j.value("type", "") == "header" ? j : Json(nullptr);
}

std::string probe_file_tool(const std::string& path) {
  const Json h = probe_header(path);
  return h.is_object() && h.contains("tool") && h["tool"].is_string() ? h["tool"].get<std::string>() : "";
}

int probe_file_concurrency(const std::string& path) {
  const Json h = probe_header(path);
  return h.is_object() && h.contains("concurrency") && h["concurrency"].is_number_integer() &&
                 h["concurrency"].get<int64_t>() >= 1 && h["concurrency"].get<int64_t>() <= 1000000
             ? static_cast<int>(h["concurrency"].get<int64_t>())
             : 1;
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
  return probe_file_tool(path) == kGreedyProbeTool;
}

Expected<ProbeFile> read_probe_file(const std::string& path) {
  ProbeFile pf;
  const int concurrency = probe_file_concurrency(path);
  MTP_RETURN_IF_ERROR(read_probe_lines(path, &pf.start_utc, [&](const Json& j, int64_t n) -> Status {
    if (j["type"] != "probe" || !j.contains("kind") || !j["kind"].is_string())
      return corrupt(path, ":", n, ": a probe line without \"kind\"");
    GreedyOutcome g;
    g.kind = j["kind"].get<std::string>();
    if (j.contains("prompt") && j["prompt"].is_number_integer()) g.prompt = j["prompt"].get<int64_t>();
    g.concurrency = concurrency;
    pf.outcomes.push_back(g);
    return Status::Ok();
  }));
  return pf;
}

}  // namespace mtp::gate
