// How subcommands plug into the `mtp` binary: each registers itself on the CLI11 app and returns the function
// to run when it was chosen. The function returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "base/status.h"

namespace mtp::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeError = 1;
inline constexpr int kExitUsageError = 2;

using CommandRunner = std::function<int()>;

CommandRunner register_inspect(CLI::App& app);
CommandRunner register_synth(CLI::App& app);
CommandRunner register_run(CLI::App& app);
CommandRunner register_perplexity(CLI::App& app);
CommandRunner register_tokenize(CLI::App& app);
CommandRunner register_quantize(CLI::App& app);
CommandRunner register_graft(CLI::App& app);
CommandRunner register_extract_head(CLI::App& app);
CommandRunner register_template(CLI::App& app);
CommandRunner register_serve(CLI::App& app);
CommandRunner register_draft_vocab(CLI::App& app);
CommandRunner register_bench(CLI::App& app);
CommandRunner register_report(CLI::App& app);
CommandRunner register_replay(CLI::App& app);
CommandRunner register_gate(CLI::App& app);
CommandRunner register_tune(CLI::App& app);

// Prints "mtp <command>: <message>" on stderr and returns the exit code that fits the status.
int report_error(const std::string& command, const Status& status);

// Prints a parse error of a command's options (`command`: its name, default the app's) and returns
// kExitUsageError. CLI11's "--draft-max: At Most 1 required but received 2", for one option given twice,
// also under two of its aliases, becomes "mtp serve: --draft-max is given 2 times (--draft-max, --draft
// ... name one option); give it once".
int report_parse_error(CLI::App& app, const CLI::ParseError& e, const std::string& command = "");

}  // namespace mtp::tools
