// Rules files and locks: parsing with one validation pass, the canonical form that is hashed, and the lock's
// checks (docs/gate.md).
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "gate/gate.h"
#include "loadgen/record.h"
#include "rules_text.h"

namespace mtp::gate {
namespace {

const std::map<std::string, Metric>& metric_names() {
  static const std::map<std::string, Metric> names = {
      {"ttft_ms", Metric::kTtftMs},
      {"tpot_ms", Metric::kTpotMs},
      {"e2e_s", Metric::kE2eS},
      {"output_rate", Metric::kOutputRate},
      {"paired_output_rate_ratio", Metric::kPairedOutputRateRatio},
      {"paired_tpot_ratio", Metric::kPairedTpotRatio},
      {"draft_acceptance", Metric::kDraftAcceptance},
      {"failure_rate", Metric::kFailureRate},
      {"greedy_divergence", Metric::kGreedyDivergence},
      {"kld_mean", Metric::kKldMean},
      {"kld_median", Metric::kKldMedian},
      {"kld_p90", Metric::kKldP90},
      {"kld_p95", Metric::kKldP95},
      {"kld_p99", Metric::kKldP99},
      {"kld_p999", Metric::kKldP999},
      {"kld_max", Metric::kKldMax},
      {"same_top_rate", Metric::kSameTopRate},
      {"ppl_ratio", Metric::kPplRatio},
      {"ln_ppl_ratio", Metric::kLnPplRatio},
      {"tool_call_pass_rate", Metric::kToolCallPassRate},
      {"markup_leaks", Metric::kMarkupLeaks},
      {"position_acceptance", Metric::kPositionAcceptance},
      {"mean_acceptance_length", Metric::kMeanAcceptanceLength},
      {"net_speedup", Metric::kNetSpeedup},
  };
  return names;
}

const std::map<std::string, Statistic>& statistic_names() {
  static const std::map<std::string, Statistic> names = {
      {"mean", Statistic::kMean},
      {"median", Statistic::kMedian},
      {"bootstrap_mean", Statistic::kBootstrapMean},
      {"bootstrap_median", Statistic::kBootstrapMedian},
      {"wilson", Statistic::kWilson},
      {"value", Statistic::kValue},
      {"normal", Statistic::kNormal},
      {"count", Statistic::kCount},
      {"bootstrap", Statistic::kBootstrap},
  };
  return names;
}

bool is_proportion(Metric m) {
  return m == Metric::kDraftAcceptance || m == Metric::kFailureRate || m == Metric::kGreedyDivergence ||
         m == Metric::kSameTopRate || m == Metric::kToolCallPassRate || m == Metric::kPositionAcceptance;
}

// Metrics whose samples are replayed or benched requests, which category and stratum select.
bool is_request_metric(Metric m) {
  return !is_kld_metric(m) && m != Metric::kGreedyDivergence && m != Metric::kToolCallPassRate &&
         m != Metric::kMarkupLeaks;
}

// Which statistics judge a metric, and the line that says so when another is asked for.
bool statistic_applies(Metric m, Statistic s, const char** allowed) {
  if (is_proportion(m)) {
    *allowed = "wilson";
    return s == Statistic::kWilson;
  }
  if (m == Metric::kMarkupLeaks) {
    *allowed = "count";
    return s == Statistic::kCount;
  }
  if (m == Metric::kKldMean || m == Metric::kPplRatio || m == Metric::kLnPplRatio) {
    *allowed = "value or normal";
    return s == Statistic::kValue || s == Statistic::kNormal;
  }
  if (m == Metric::kMeanAcceptanceLength || m == Metric::kNetSpeedup) {
    *allowed = "value or bootstrap";
    return s == Statistic::kValue || s == Statistic::kBootstrap;
  }
  if (is_kld_metric(m)) {
    *allowed = "value (a percentile has no standard error)";
    return s == Statistic::kValue;
  }
  *allowed = "mean, median, bootstrap_mean or bootstrap_median";
  return s == Statistic::kMean || s == Statistic::kMedian || s == Statistic::kBootstrapMean ||
         s == Statistic::kBootstrapMedian;
}

std::string known(const auto& names) {
  std::string out;
  for (const auto& [name, value] : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// The replay selections ("category", "stratum") and the draft position of a rule.
Status parse_selection(const nlohmann::json& j, const std::string& rule, Rule& r) {
  for (auto [key, out] : {std::pair{"category", &r.category}, std::pair{"stratum", &r.stratum}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_string() || it->get<std::string>().empty())
      return invalid_argument(rule, ": \"", key, "\" must be a non-empty string");
    if (!is_request_metric(r.metric))
      return invalid_argument(rule, ": \"", key,
                              "\" selects requests of a bench or replay run; this metric has none");
    *out = it->get<std::string>();
  }
  auto position = j.find("position");
  const bool wants = r.metric == Metric::kPositionAcceptance;
  if (position == j.end()) {
    if (wants)
      return invalid_argument(rule, ": position_acceptance needs \"position\" (the draft position, from 1)");
    return Status::Ok();
  }
  if (!wants) return invalid_argument(rule, ": \"position\" applies to position_acceptance only");
  if (!position->is_number_integer() || position->get<int64_t>() < 1 || position->get<int64_t>() > 64)
    return invalid_argument(rule, ": \"position\" must be a draft position, 1 .. 64");
  r.position = static_cast<int>(position->get<int64_t>());
  return Status::Ok();
}

// Reads one rule; the first problem is returned as "rule ID: field: why".
Expected<Rule> parse_rule(const nlohmann::json& j, size_t index) {
  Rule r;
  const std::string where = str_cat("rule ", index + 1);
  if (!j.is_object()) return invalid_argument(where, ": not an object");
  static const char* const kFields[] = {"id",          "metric",    "level",     "server",
                                        "op",          "threshold", "statistic", "confidence",
                                        "min_samples", "category",  "stratum",   "position"};
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields))
      return invalid_argument(where, ": unknown field \"", key, "\"");
  }
  auto text = [&](const char* key, std::string* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string() || it->get<std::string>().empty())
      return invalid_argument(where, ": \"", key, "\" must be a non-empty string");
    *out = it->get<std::string>();
    return Status::Ok();
  };
  MTP_RETURN_IF_ERROR(text("id", &r.id));
  const std::string rule = str_cat("rule '", r.id, "'");
  std::string metric, op, statistic;
  MTP_RETURN_IF_ERROR(text("metric", &metric));
  MTP_RETURN_IF_ERROR(text("op", &op));
  MTP_RETURN_IF_ERROR(text("statistic", &statistic));
  auto m = metric_names().find(metric);
  if (m == metric_names().end())
    return invalid_argument(rule, ": unknown metric '", metric, "' (known: ", known(metric_names()), ")");
  r.metric = m->second;
  auto s = statistic_names().find(statistic);
  if (s == statistic_names().end()) {
    return invalid_argument(rule, ": unknown statistic '", statistic, "' (known: ", known(statistic_names()),
                            ")");
  }
  r.statistic = s->second;
  if (const char* allowed = ""; !statistic_applies(r.metric, r.statistic, &allowed)) {
    return invalid_argument(rule, ": statistic '", statistic, "' does not apply to metric '", metric,
                            "' (it takes ", allowed, ")");
  }
  if (op != ">=" && op != "<=")
    return invalid_argument(rule, ": \"op\" must be \">=\" or \"<=\", got '", op, "'");
  r.at_least = op == ">=";
  auto threshold = j.find("threshold");
  if (threshold == j.end() || !threshold->is_number() || !std::isfinite(threshold->get<double>()))
    return invalid_argument(rule, ": \"threshold\" must be a finite number");
  r.threshold = threshold->get<double>();
  if (auto it = j.find("confidence"); it != j.end()) {
    if (!it->is_number() || !(it->get<double>() > 0.5 && it->get<double>() < 1))
      return invalid_argument(rule, ": \"confidence\" must be a number between 0.5 and 1 (exclusive)");
    r.confidence = it->get<double>();
  }
  if (auto it = j.find("min_samples"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1)
      return invalid_argument(rule, ": \"min_samples\" must be an integer of at least 1");
    r.min_samples = it->get<int64_t>();
  }
  if (auto it = j.find("level"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 1000000)
      return invalid_argument(rule, ": \"level\" must be a concurrency level (a positive integer)");
    r.level = static_cast<int>(it->get<int64_t>());
  }
  if (auto it = j.find("server"); it != j.end()) {
    if (!it->is_string() || (*it != "target" && *it != "baseline"))
      return invalid_argument(rule, ": \"server\" must be \"target\" or \"baseline\"");
    r.server = it->get<std::string>();
  }
  if (is_kld_metric(r.metric) && (r.level || !r.server.empty()))
    return invalid_argument(rule, ": a KL-divergence metric has no \"level\" or \"server\"");
  MTP_RETURN_IF_ERROR(parse_selection(j, rule, r));
  const bool paired = r.metric == Metric::kPairedOutputRateRatio || r.metric == Metric::kPairedTpotRatio ||
                      r.metric == Metric::kNetSpeedup;
  if (paired && !r.server.empty())
    return invalid_argument(rule, ": a paired metric compares both servers; drop \"server\"");
  return r;
}

std::string read_text(const std::string& path, Status* status) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *status = not_found("cannot open '", path, "'");
    return "";
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string hex(const unsigned char* bytes, unsigned n) {
  static const char* const kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

bool is_kld_metric(Metric m) {
  switch (m) {
    case Metric::kKldMean:
    case Metric::kKldMedian:
    case Metric::kKldP90:
    case Metric::kKldP95:
    case Metric::kKldP99:
    case Metric::kKldP999:
    case Metric::kKldMax:
    case Metric::kSameTopRate:
    case Metric::kPplRatio:
    case Metric::kLnPplRatio:
      return true;
    default:
      return false;
  }
}

namespace {

// Validates a parsed rules document (JSON, or TOML made JSON) and hashes its canonical form.
Expected<Rules> rules_from_document(const RulesDocument& doc, const std::string& source) {
  const nlohmann::json& j = doc.json;
  if (!j.is_object()) return corrupt(source, ": not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "gate" && key != "inputs" && key != "rules")
      return invalid_argument(source, ": unknown field \"", key, "\" (known: gate, inputs, rules)");
  }
  Rules rules;
  auto name = j.find("gate");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return invalid_argument(source, ": \"gate\" must name the gate (a non-empty string)");
  rules.name = name->get<std::string>();
  if (auto it = j.find("inputs"); it != j.end()) {
    if (!it->is_array()) return invalid_argument(source, ": \"inputs\" must be an array of file paths");
    for (const auto& p : *it) {
      if (!p.is_string() || p.get<std::string>().empty())
        return invalid_argument(source, ": \"inputs\" must be an array of file paths");
      rules.inputs.push_back(p.get<std::string>());
    }
  }
  auto list = j.find("rules");
  if (list == j.end() || !list->is_array() || list->empty())
    return invalid_argument(source, ": \"rules\" must be a non-empty array");
  for (size_t i = 0; i < list->size(); ++i) {
    auto r = parse_rule((*list)[i], i);
    if (!r.ok()) {
      const int64_t line = i < doc.rule_lines.size() ? doc.rule_lines[i] : 0;
      return r.status().with_context(line > 0 ? str_cat(source, ":", line) : source);
    }
    for (const Rule& other : rules.rules) {
      if (other.id == r->id) return invalid_argument(source, ": two rules have the id '", r->id, "'");
    }
    rules.rules.push_back(std::move(*r));
  }
  // nlohmann::json keeps object keys sorted: dump() without indent is the canonical form, so reformatting or
  // reordering the file does not change the hash, while any change of a value does.
  rules.canonical = j.dump();
  rules.sha256 = sha256_hex(rules.canonical);
  return rules;
}

}  // namespace

Expected<Rules> parse_rules(const std::string& text, const std::string& source) {
  MTP_ASSIGN_OR_RETURN(RulesDocument doc, parse_json_document(text, source));
  return rules_from_document(doc, source);
}

Expected<Rules> parse_rules_toml(const std::string& text, const std::string& source) {
  MTP_ASSIGN_OR_RETURN(RulesDocument doc, parse_toml_document(text, source));
  return rules_from_document(doc, source);
}

bool is_toml_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".toml") == 0;
}

Expected<Rules> read_rules(const std::string& path) {
  Status status;
  const std::string text = read_text(path, &status);
  if (!status.ok()) return status;
  return is_toml_path(path) ? parse_rules_toml(text, path) : parse_rules(text, path);
}

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  return hex(digest, n);
}

Expected<std::string> sha256_file(const std::string& path, uint64_t* bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return not_found("cannot open input '", path, "'");
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  *bytes = 0;
  size_t got = 0;
  while ((got = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    EVP_DigestUpdate(ctx, buf.data(), got);
    *bytes += got;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(ctx, digest, &n);
  EVP_MD_CTX_free(ctx);
  if (failed) return io_error("cannot read input '", path, "'");
  return hex(digest, n);
}

std::string default_lock_path(const std::string& rules_path) {
  return rules_path + ".lock";
}

Expected<Lock> freeze(const Rules& rules) {
  Lock lock;
  lock.rules_sha256 = rules.sha256;
  lock.frozen_utc = loadgen::utc_now();
  for (const std::string& path : rules.inputs) {
    LockedInput in;
    in.path = path;
    MTP_ASSIGN_OR_RETURN(in.sha256, sha256_file(path, &in.bytes));
    lock.inputs.push_back(in);
  }
  return lock;
}

Json lock_json(const Lock& lock) {
  Json j;
  j["rules_sha256"] = lock.rules_sha256;
  j["frozen_utc"] = lock.frozen_utc;
  j["inputs"] = Json::array();
  for (const LockedInput& in : lock.inputs)
    j["inputs"].push_back({{"path", in.path}, {"bytes", in.bytes}, {"sha256", in.sha256}});
  return j;
}

Expected<Lock> read_lock(const std::string& path) {
  Status status;
  const std::string text = read_text(path, &status);
  if (!status.ok()) return not_found("no lock at '", path, "': register the rules first (mtp gate freeze)");
  const Json j = Json::parse(text, nullptr, false);
  const auto str = [&](const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
  };
  Lock lock;
  lock.rules_sha256 = str("rules_sha256");
  lock.frozen_utc = str("frozen_utc");
  if (lock.rules_sha256.size() != 64 || lock.frozen_utc.size() != 20 || !j.contains("inputs") ||
      !j["inputs"].is_array())
    return corrupt(path, ": not a gate lock (rules_sha256, frozen_utc and inputs expected)");
  for (const auto& in : j["inputs"]) {
    if (!in.is_object() || !in.contains("path") || !in["path"].is_string() || !in.contains("sha256") ||
        !in["sha256"].is_string() || !in.contains("bytes") || !in["bytes"].is_number_unsigned())
      return corrupt(path, ": an input without path, bytes and sha256");
    lock.inputs.push_back({in["path"], in["bytes"].get<uint64_t>(), in["sha256"]});
  }
  return lock;
}

Status check_lock(const Rules& rules, const Lock& lock) {
  if (rules.sha256 != lock.rules_sha256) {
    return invalid_argument("the rules changed after they were frozen at ", lock.frozen_utc, " (sha256 ",
                            rules.sha256.substr(0, 12), ", locked ", lock.rules_sha256.substr(0, 12),
                            "): a gate is registered before its results; freeze new rules under a new name");
  }
  for (const LockedInput& in : lock.inputs) {
    uint64_t bytes = 0;
    MTP_ASSIGN_OR_RETURN(std::string sha, sha256_file(in.path, &bytes));
    if (sha != in.sha256 || bytes != in.bytes)
      return invalid_argument("input '", in.path, "' changed since the rules were frozen at ",
                              lock.frozen_utc);
  }
  return Status::Ok();
}

}  // namespace mtp::gate
