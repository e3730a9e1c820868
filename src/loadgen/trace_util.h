// Helpers shared by the trace parsers (trace.cpp, trace_csv.cpp); not part of the library's interface.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "loadgen/trace.h"

namespace mtp::loadgen::trace_detail {

// Calls `fn(line_number, line)` for each line that is not blank (1-based numbers, CR stripped); stops at the
// first error `fn` returns.
inline Status for_each_line(const std::string& text,
                            const std::function<Status(int64_t, std::string_view)>& fn) {
  int64_t n = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    ++n;
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    MTP_RETURN_IF_ERROR(fn(n, line));
  }
  return Status::Ok();
}

// An integer field >= `min`, or a message naming it.
inline std::string int_field(const Json& j, const char* key, int64_t min, int64_t& out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return str_cat("\"", key, "\" is not an integer");
  out = it->get<int64_t>();
  if (out < min) return str_cat("\"", key, "\" is ", out, "; it must be >= ", min);
  return "";
}

// ceil(chars / 4): the usual characters-per-token of English BPE text, for traces that give no counts.
inline int64_t estimate_tokens(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return std::max<int64_t>(1, (n + 3) / 4);
}

// Arrival times relative to the first request, then the requests in arrival order (stable: file order for
// ties). Untimed traces keep file order.
inline void order_by_arrival(std::vector<TraceRequest>& reqs) {
  if (reqs.empty() || reqs.front().arrival_s < 0) return;
  double t0 = reqs.front().arrival_s;
  for (const TraceRequest& r : reqs) t0 = std::min(t0, r.arrival_s);
  for (TraceRequest& r : reqs) r.arrival_s -= t0;
  std::stable_sort(reqs.begin(), reqs.end(),
                   [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
}

}  // namespace mtp::loadgen::trace_detail
