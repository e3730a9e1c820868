// The length-only public traces (trace.h): Mooncake JSONL, the Azure LLM inference CSV and BurstGPT CSV.
// They give arrival times and token counts, no text: every request is synthetic.
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "loadgen/trace.h"
#include "trace_util.h"

namespace mtp::loadgen {
namespace {

using trace_detail::for_each_line;
using trace_detail::int_field;

// The fields of one CSV line; double quotes may enclose a field (a doubled quote inside is one quote).
std::vector<std::string> split_csv(std::string_view line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  for (std::string& f : out) {  // trim spaces
    f.erase(0, f.find_first_not_of(' '));
    f.erase(f.find_last_not_of(' ') + 1);
  }
  return out;
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  // "12.0" (a float-typed column) is accepted when it is whole.
  if (*end == '.') {
    const double d = std::strtod(s.c_str(), &end);
    if (*end != '\0' || d != std::floor(d)) return false;
    out = static_cast<int64_t>(d);
    return true;
  }
  out = v;
  return *end == '\0';
}

bool parse_double(const std::string& s, double& out) {
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0' && std::isfinite(out);
}

// "2023-11-16 18:15:46.6805900" (Azure's TIMESTAMP, UTC) as seconds since the epoch.
bool parse_datetime(const std::string& s, double& out) {
  std::tm tm{};
  int frac_at = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%*[ T]%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &frac_at) != 6)
    return false;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  double frac = 0;
  const std::string rest = s.substr(static_cast<size_t>(frac_at));
  if (!rest.empty() && !(rest[0] == '.' && parse_double("0" + rest, frac))) return false;
  out = static_cast<double>(timegm(&tm)) + frac;
  return true;
}

// A CSV trace: the header names the columns; `read_row` turns one row's fields into a request (or sets
// `skip`), returning "" or why the row is malformed.
using RowReader = std::function<std::string(const std::vector<std::string>&, TraceRequest&, bool& skip)>;

Expected<std::vector<TraceRequest>> parse_csv(
    const std::string& path, const std::string& text, const std::vector<std::string>& columns,
    const std::function<RowReader(const std::vector<size_t>&)>& make) {
  std::vector<TraceRequest> out;
  std::vector<size_t> at;
  RowReader read_row;
  const Status s = for_each_line(text, [&](int64_t n, std::string_view line) {
    const std::vector<std::string> fields = split_csv(line);
    if (at.empty()) {  // the header
      for (const std::string& c : columns) {
        auto it = std::find(fields.begin(), fields.end(), c);
        if (it == fields.end()) return corrupt(path, ":", n, ": the header has no column '", c, "'");
        at.push_back(static_cast<size_t>(it - fields.begin()));
      }
      read_row = make(at);
      return Status::Ok();
    }
    if (fields.size() <= *std::max_element(at.begin(), at.end()))
      return corrupt(path, ":", n, ": ", fields.size(), " fields; the header has more");
    TraceRequest r;
    r.source = str_cat(path, ":", n);
    r.synthetic = true;
    bool skip = false;
    if (std::string why = read_row(fields, r, skip); !why.empty()) return corrupt(path, ":", n, ": ", why);
    if (!skip) out.push_back(std::move(r));
    return Status::Ok();
  });
  MTP_RETURN_IF_ERROR(s);
  if (at.empty()) return corrupt(path, ": no header line");
  trace_detail::order_by_arrival(out);
  return out;
}

// Prompt and output lengths from two columns. A row with 0 of either is skipped: a request that failed in
// the original service (vLLM's BurstGPT loader skips them too), or one nothing can be sent for.
std::string read_lengths(const std::string& in, const std::string& out_s, const char* in_name,
                         const char* out_name, TraceRequest& r, bool& skip) {
  if (!parse_int(in, r.prompt_tokens) || r.prompt_tokens < 0)
    return str_cat(in_name, " '", in, "' is not a token count");
  if (!parse_int(out_s, r.output_tokens) || r.output_tokens < 0)
    return str_cat(out_name, " '", out_s, "' is not a token count");
  skip = r.prompt_tokens == 0 || r.output_tokens == 0;
  return "";
}

}  // namespace

Expected<std::vector<TraceRequest>> parse_mooncake(const std::string& path, const std::string& text) {
  std::vector<TraceRequest> out;
  const Status s = for_each_line(text, [&](int64_t n, std::string_view line) {
    const Json j = Json::parse(line, nullptr, false);
    if (!j.is_object()) return corrupt(path, ":", n, ": not a JSON object");
    TraceRequest r;
    r.source = str_cat(path, ":", n);
    r.synthetic = true;
    int64_t ts = 0;
    std::string why = int_field(j, "timestamp", 0, ts);
    if (why.empty()) why = int_field(j, "input_length", 1, r.prompt_tokens);
    if (why.empty()) why = int_field(j, "output_length", 0, r.output_tokens);
    if (auto h = j.find("hash_ids"); why.empty() && h != j.end()) {
      if (!h->is_array()) why = "\"hash_ids\" is not an array";
      for (size_t i = 0; why.empty() && i < h->size(); ++i) {
        if (!(*h)[i].is_number_integer()) why = str_cat("\"hash_ids\"[", i, "] is not an integer");
        if (why.empty()) r.hash_ids.push_back((*h)[i].get<int64_t>());
      }
    }
    if (!why.empty()) return corrupt(path, ":", n, ": ", why);
    r.arrival_s = static_cast<double>(ts) / 1e3;  // milliseconds in the trace
    if (auto sid = j.find("session_id"); sid != j.end() && (sid->is_string() || sid->is_number()))
      r.session = sid->is_string() ? sid->get<std::string>() : sid->dump();
    out.push_back(std::move(r));
    return Status::Ok();
  });
  MTP_RETURN_IF_ERROR(s);
  trace_detail::order_by_arrival(out);
  return out;
}

Expected<std::vector<TraceRequest>> parse_azure_csv(const std::string& path, const std::string& text) {
  return parse_csv(
      path, text, {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}, [](const std::vector<size_t>& at) {
        return RowReader([at](const std::vector<std::string>& f, TraceRequest& r, bool& skip) -> std::string {
          if (!parse_datetime(f[at[0]], r.arrival_s))
            return str_cat("TIMESTAMP '", f[at[0]], "' is not YYYY-MM-DD HH:MM:SS[.fraction]");
          return read_lengths(f[at[1]], f[at[2]], "ContextTokens", "GeneratedTokens", r, skip);
        });
      });
}

Expected<std::vector<TraceRequest>> parse_burstgpt_csv(const std::string& path, const std::string& text) {
  return parse_csv(
      path, text, {"Timestamp", "Request tokens", "Response tokens"}, [](const std::vector<size_t>& at) {
        return RowReader([at](const std::vector<std::string>& f, TraceRequest& r, bool& skip) -> std::string {
          if (!parse_double(f[at[0]], r.arrival_s) || r.arrival_s < 0)
            return str_cat("Timestamp '", f[at[0]], "' is not seconds >= 0");
          return read_lengths(f[at[1]], f[at[2]], "Request tokens", "Response tokens", r, skip);
        });
      });
}

}  // namespace mtp::loadgen
