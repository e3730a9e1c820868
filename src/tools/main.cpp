// mtp: the command-line front end. Exit codes: 0 success, 1 runtime error (bad file, I/O), 2 usage error.
#include <cstdio>
#include <utility>
#include <vector>

#include "command.h"
#include "kernels/isa.h"

namespace mtp::tools {

int report_error(const std::string& command, const Status& status) {
  std::fprintf(stderr, "mtp %s: %s\n", command.c_str(), status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? kExitUsageError : kExitRuntimeError;
}

}  // namespace mtp::tools

int main(int argc, char** argv) {
  using namespace mtp::tools;
  // MTP_ISA (kernels/isa.h) asks for a kernel level; one this CPU lacks is an error, not a silent fallback.
  if (const std::string error = mtp::kernels::isa_env_error(); !error.empty()) {
    std::fprintf(stderr, "mtp: %s\n", error.c_str());
    return kExitUsageError;
  }
  CLI::App app{"mtp: multi-token-prediction toolkit for qwen35moe GGUF models", "mtp"};
  app.set_version_flag("--version",
                       std::string("mtp ") + MTP_VERSION + ", kernels " + mtp::kernels::kernels_summary());
  app.require_subcommand(1);
  app.fallthrough(false);

  std::vector<std::pair<CLI::App*, CommandRunner>> commands;
  auto add = [&](CommandRunner (*reg)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    CommandRunner run = reg(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(run));
  };
  add(register_inspect);
  add(register_synth);
  add(register_graft);
  add(register_extract_head);
  add(register_quantize);
  add(register_template);
  add(register_run);
  add(register_perplexity);
  add(register_tokenize);
  add(register_serve);
  add(register_draft_vocab);
  add(register_bench);
  add(register_report);
  add(register_replay);
  add(register_gate);
  add(register_tune);

  // git-style: `mtp help [CMD]` prints the help; a first word that is no command is named, with the list.
  auto find = [&](const std::string& name) -> CLI::App* {
    for (auto& [sub, run] : commands)
      if (sub->get_name() == name) return sub;
    return nullptr;
  };
  auto unknown = [&](const std::string& name) {
    std::string names;
    for (auto& [sub, run] : commands) names += (names.empty() ? "" : ", ") + sub->get_name();
    std::fprintf(stderr, "mtp: '%s' is not an mtp command; the commands are %s ('mtp help CMD' for one)\n",
                 name.c_str(), names.c_str());
    return kExitUsageError;
  };
  if (argc == 1) {
    std::fputs(app.help().c_str(), stderr);
    return kExitUsageError;
  }
  std::vector<char*> args(argv, argv + argc);
  if (args[1][0] != '-') {
    const std::string word = args[1];
    if (word == "help" && argc == 2) {
      std::fputs(app.help().c_str(), stdout);
      return kExitOk;
    }
    if (word == "help") {  // `mtp help CMD ...` runs as `mtp CMD --help`
      static char help_flag[] = "--help";
      args = {argv[0], argv[2], help_flag};
    }
    if (find(args[1]) == nullptr) return unknown(args[1]);
  }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    CLI::App* sub = find(args[1]);
    return sub != nullptr ? report_parse_error(*sub, e) : (app.exit(e), kExitUsageError);
  }
  for (auto& [sub, run] : commands) {
    if (sub->parsed()) return run();
  }
  return kExitUsageError;
}
