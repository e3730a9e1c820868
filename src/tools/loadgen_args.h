// Options `mtp bench` and `mtp replay` share, declared once.
#pragma once

#include <CLI/CLI.hpp>

#include "loadgen/stream_client.h"

namespace mtp::tools {

// --count-tokens auto|server|tokenize (docs/bench.md, "Token counts").
inline void add_count_tokens_option(CLI::App* cmd, loadgen::TokenCount& count) {
  cmd->add_option("--count-tokens", count,
                  "Output tokens from: auto (usage, else timings, else POST /tokenize on the text), server "
                  "(usage or timings only), tokenize (POST /tokenize always)")
      ->transform(CLI::CheckedTransformer(loadgen::token_count_names()))
      ->default_str("auto");
}

}  // namespace mtp::tools
