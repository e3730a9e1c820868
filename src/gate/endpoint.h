// An HTTP client for one server URL, shared by the probes (private to the gate library: it exposes
// cpp-httplib). `prefix` is the URL's path, prepended to "/v1/chat/completions".
#pragma once

#include <httplib.h>

#include <memory>
#include <string>

#include "base/status.h"

namespace mtp::gate {

struct Endpoint {
  std::unique_ptr<httplib::Client> http;
  std::string prefix;
};

// Connect and read timeouts are both `timeout_s`.
Expected<Endpoint> endpoint(const std::string& url, double timeout_s);

}  // namespace mtp::gate
