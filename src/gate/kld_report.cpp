// Reading `mtp perplexity --kl-divergence --json` reports for the gate (kld_report.h).
#include "gate/kld_report.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace mtp::gate {
namespace {

constexpr const char* kKldReportTool = "mtp perplexity";

// `j[a][b]` as a finite number, or kCorrupt naming "a.b".
Status number_at(const Json& j, const char* a, const char* b, const std::string& path, double* out) {
  const std::string name = b == nullptr ? a : str_cat(a, ".", b);
  const Json* v = j.contains(a) ? &j[a] : nullptr;
  if (v != nullptr && b != nullptr) v = v->is_object() && v->contains(b) ? &(*v)[b] : nullptr;
  if (v == nullptr || !v->is_number() || !std::isfinite(v->get<double>())) {
    return corrupt(path, ": no number \"", name,
                   "\" (a KL-divergence report comes from mtp perplexity --kl-divergence --json)");
  }
  *out = v->get<double>();
  return Status::Ok();
}

// The file as one JSON value: its first line when that is a whole value (a report as printed, or a JSONL
// run or probe file's header), else the whole file (a report reformatted, e.g. by jq); discarded when
// neither parses.
Json parse_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string first;
  std::getline(f, first);
  Json j = Json::parse(first, nullptr, false);
  if (!j.is_discarded()) return j;
  std::stringstream rest;
  rest << f.rdbuf();
  return Json::parse(first + "\n" + rest.str(), nullptr, false);
}

}  // namespace

bool is_kld_report(const std::string& path) {
  const Json j = parse_file(path);
  return j.is_object() && j.contains("tool") && j["tool"] == kKldReportTool;
}

Expected<KldReport> read_kld_report(const std::string& path) {
  if (!std::ifstream(path)) return not_found("cannot open '", path, "'");
  const Json j = parse_file(path);
  if (!j.is_object()) return corrupt(path, ": not a JSON object");
  if (!j.contains("kl_divergence_base") || !j.contains("kld")) {
    return corrupt(path,
                   ": a perplexity report without KL divergence (run mtp perplexity with "
                   "--kl-divergence)");
  }
  KldReport r;
  if (j.contains("start_utc") && j["start_utc"].is_string()) r.start_utc = j["start_utc"].get<std::string>();
  double scored = 0, same_top = 0;
  MTP_RETURN_IF_ERROR(number_at(j, "scored", nullptr, path, &scored));
  MTP_RETURN_IF_ERROR(number_at(j, "kld", "mean", path, &r.kld_mean));
  MTP_RETURN_IF_ERROR(number_at(j, "kld", "err", path, &r.kld_err));
  MTP_RETURN_IF_ERROR(number_at(j, "kld", "median", path, &r.kld_median));
  MTP_RETURN_IF_ERROR(number_at(j, "kld", "p90", path, &r.kld_p90));
  MTP_RETURN_IF_ERROR(number_at(j, "kld", "p95", path, &r.kld_p95));
  MTP_RETURN_IF_ERROR(number_at(j, "kld", "p99", path, &r.kld_p99));
  MTP_RETURN_IF_ERROR(number_at(j, "kld", "p999", path, &r.kld_p999));
  MTP_RETURN_IF_ERROR(number_at(j, "kld", "max", path, &r.kld_max));
  MTP_RETURN_IF_ERROR(number_at(j, "same_top", "count", path, &same_top));
  MTP_RETURN_IF_ERROR(number_at(j, "ppl_ratio", "value", path, &r.ppl_ratio));
  MTP_RETURN_IF_ERROR(number_at(j, "ppl_ratio", "err", path, &r.ppl_ratio_err));
  MTP_RETURN_IF_ERROR(number_at(j, "ln_ppl_ratio", "value", path, &r.ln_ppl_ratio));
  MTP_RETURN_IF_ERROR(number_at(j, "ln_ppl_ratio", "err", path, &r.ln_ppl_ratio_err));
  r.scored = static_cast<int64_t>(scored);
  r.same_top = static_cast<int64_t>(same_top);
  if (r.scored < 0 || r.same_top < 0 || r.same_top > r.scored)
    return corrupt(path, ": same_top.count ", r.same_top, " is not within 0 .. scored ", r.scored);
  return r;
}

KldFigure kld_figure(const KldReport& r, Metric m) {
  switch (m) {
    case Metric::kKldMean:
      return {r.kld_mean, r.kld_err};
    case Metric::kKldMedian:
      return {r.kld_median, 0};
    case Metric::kKldP90:
      return {r.kld_p90, 0};
    case Metric::kKldP95:
      return {r.kld_p95, 0};
    case Metric::kKldP99:
      return {r.kld_p99, 0};
    case Metric::kKldP999:
      return {r.kld_p999, 0};
    case Metric::kKldMax:
      return {r.kld_max, 0};
    case Metric::kPplRatio:
      return {r.ppl_ratio, r.ppl_ratio_err};
    case Metric::kLnPplRatio:
      return {r.ln_ppl_ratio, r.ln_ppl_ratio_err};
    default:
      return {};
  }
}

}  // namespace mtp::gate
