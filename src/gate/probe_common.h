// What the probes share (private to the gate library: it exposes cpp-httplib): an HTTP client for one server
// URL, and the reading of probe files (a header line, then one JSON object per line).
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "gate/gate.h"

namespace mtp::gate {

struct Endpoint {
  std::unique_ptr<httplib::Client> http;
  std::string prefix;
};

// `prefix` is the URL's path, prepended to "/v1/chat/completions". Connect and read timeouts are both
// `timeout_s`.
Expected<Endpoint> endpoint(const std::string& url, double timeout_s);

// The "tool" a probe file's header line names ("" when the first line is no such header).
std::string probe_file_tool(const std::string& path);
// The header's "concurrency" (1 when absent: files written before the probes had it ran one at a time).
int probe_file_concurrency(const std::string& path);

// Reads a probe file: the header's "start_utc" into `start_utc`, every other line (an object with a string
// "type") to `each` with its line number; kCorrupt on a line that is not such an object.
Status read_probe_lines(const std::string& path, std::string* start_utc,
                        const std::function<Status(const Json& line, int64_t n)>& each);

}  // namespace mtp::gate
