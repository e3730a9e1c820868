// GET /props: the server's effective configuration as one JSON object (llama-server's names where it has
// them; llama_api.h adds its aliases at request time), and the start-up banner `mtp serve` prints from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/api.h"
#include "server/server.h"

namespace mtp::server {

// What /props reports that neither ServerConfig nor EngineOptions holds: the command line's own settings
// and what the process measured at start.
struct PropsInfo {
  std::string version;  // "mtp.cpp X.Y.Z"
  std::string kernels;  // the kernel set in use (kernels_summary())
  int threads = 0;
  int total_slots = 0;
  int64_t n_batch = 0, n_ubatch = 0;  // -b and -ub as given (EngineOptions::n_batch is the smaller)
  std::string cache_type_k, cache_type_v;
  std::string chat_template_origin;
  std::vector<std::string> compatibility_notices;
  uint64_t resident_bytes = 0, packed_weights_bytes = 0, available_bytes = 0, prefix_cache_budget_bytes = 0;
};

// The /props object for a server run with `config` over an engine created with `engine` (as the engine
// resolved it: its draft vocabulary size and policy options).
Json build_props(const ServerConfig& config, const EngineOptions& engine, const PropsInfo& info);

// The banner printed at start: a few lines that say what runs, read from build_props' object.
std::string describe_props(const Json& props, const std::string& model_id);

}  // namespace mtp::server
