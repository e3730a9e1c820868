#include "loadgen/spec_counters.h"

#include <cstdlib>

namespace mtp::loadgen {
namespace {

// The exposition appends `_total` to counters; older servers and hand-written files may not.
bool is_counter(const std::string& name, std::string_view base) {
  if (!name.starts_with(base)) return false;
  const std::string_view rest = std::string_view(name).substr(base.size());
  return rest.empty() || rest == "_total";
}

constexpr std::string_view kDrafts = "vllm:spec_decode_num_drafts";
constexpr std::string_view kDraftTokens = "vllm:spec_decode_num_draft_tokens";
constexpr std::string_view kAccepted = "vllm:spec_decode_num_accepted_tokens";
constexpr std::string_view kPerPosition = "vllm:spec_decode_num_accepted_tokens_per_pos";
constexpr size_t kMaxPositions = 64;  // a label beyond this is not a draft position we can plot

void add_position(SpecCounters& c, const PromSample& s) {
  const std::string pos = s.label("position");
  char* end = nullptr;
  const long k = std::strtol(pos.c_str(), &end, 10);
  if (pos.empty() || *end != '\0' || k < 0 || static_cast<size_t>(k) >= kMaxPositions) return;
  if (c.accepted_per_position.size() <= static_cast<size_t>(k)) c.accepted_per_position.resize(k + 1);
  c.accepted_per_position[static_cast<size_t>(k)] += s.value;
}

double number_at(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0;
}

}  // namespace

SpecCounters spec_counters(const std::vector<PromSample>& samples) {
  SpecCounters c;
  for (const PromSample& s : samples) {
    const bool per_position = is_counter(s.name, kPerPosition);
    if (per_position) add_position(c, s);
    if (is_counter(s.name, kDrafts)) c.drafts += s.value;
    if (is_counter(s.name, kDraftTokens)) c.draft_tokens += s.value;
    if (is_counter(s.name, kAccepted)) c.accepted_tokens += s.value;
    c.present = c.present || per_position || is_counter(s.name, kDrafts) ||
                is_counter(s.name, kDraftTokens) || is_counter(s.name, kAccepted);
  }
  return c;
}

SpecCounters counters_delta(const SpecCounters& after, const SpecCounters& before) {
  SpecCounters d;
  d.present = after.present && before.present;
  if (!d.present) return d;
  d.drafts = after.drafts - before.drafts;
  d.draft_tokens = after.draft_tokens - before.draft_tokens;
  d.accepted_tokens = after.accepted_tokens - before.accepted_tokens;
  d.accepted_per_position = after.accepted_per_position;
  for (size_t k = 0; k < d.accepted_per_position.size() && k < before.accepted_per_position.size(); ++k)
    d.accepted_per_position[k] -= before.accepted_per_position[k];
  return d;
}

void add_counters(SpecCounters& sum, const SpecCounters& more) {
  if (!more.present) return;
  sum.present = true;
  sum.drafts += more.drafts;
  sum.draft_tokens += more.draft_tokens;
  sum.accepted_tokens += more.accepted_tokens;
  if (sum.accepted_per_position.size() < more.accepted_per_position.size())
    sum.accepted_per_position.resize(more.accepted_per_position.size());
  for (size_t k = 0; k < more.accepted_per_position.size(); ++k)
    sum.accepted_per_position[k] += more.accepted_per_position[k];
}

Json spec_counters_json(const SpecCounters& c) {
  return Json{{"num_drafts", c.drafts},
              {"num_draft_tokens", c.draft_tokens},
              {"num_accepted_tokens", c.accepted_tokens},
              {"num_accepted_tokens_per_pos", c.accepted_per_position}};
}

bool spec_counters_from_json(const Json& j, SpecCounters& out) {
  if (!j.is_object()) return false;
  out = SpecCounters();
  out.present = true;
  out.drafts = number_at(j, "num_drafts");
  out.draft_tokens = number_at(j, "num_draft_tokens");
  out.accepted_tokens = number_at(j, "num_accepted_tokens");
  if (auto it = j.find("num_accepted_tokens_per_pos"); it != j.end() && it->is_array())
    for (const Json& v : *it) out.accepted_per_position.push_back(v.is_number() ? v.get<double>() : 0);
  return true;
}

SpecCounterWindow::SpecCounterWindow(const ClientOptions& server, Warn warn)
    : server_(server), warn_(std::move(warn)) {
  // A scrape must not hold the run up as long as a generation may take.
  server_.timeout_s = std::min(server_.timeout_s, 10.0);
  before_ = scrape();
}

SpecCounters SpecCounterWindow::scrape() {
  // A client per scrape, closed at once: a kept-alive idle connection would hold one of the server's HTTP
  // threads through the level being measured.
  auto client = StreamClient::create(server_);
  if (!client.ok()) return {};
  auto body = (*client)->get_text("/metrics");
  if (!body.ok()) return {};  // no /metrics here: nothing to say
  auto samples = parse_prom_text(*body);
  if (!samples.ok()) {
    if (warn_)
      warn_(str_cat("GET ", server_.url, "/metrics is not Prometheus text (", samples.status().message(),
                    "); its counters are left out"));
    return {};
  }
  return spec_counters(*samples);
}

Json SpecCounterWindow::finish(const Json& where) {
  if (!before_.present) return nullptr;  // not scraped again: the server had no counters a moment ago
  const SpecCounters delta = counters_delta(scrape(), before_);
  if (!delta.present) return nullptr;
  Json line = {{"type", "server_metrics"}};
  for (const auto& [key, value] : where.items()) line[key] = value;
  line["source"] = "GET /metrics";
  line["spec_decode"] = spec_counters_json(delta);
  return line;
}

}  // namespace mtp::loadgen
