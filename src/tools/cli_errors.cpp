// Parse errors of the subcommands' options, in the words of the rest of the command line (command.h).
#include <cstdio>
#include <string>

#include "command.h"

namespace mtp::tools {

int report_parse_error(CLI::App& app, const CLI::ParseError& e, const std::string& command) {
  const std::string what = e.what(), marker = ": At Most 1 required but received ";
  const size_t at = what.find(marker);
  const CLI::Option* opt = at == std::string::npos ? nullptr : app.get_option_no_throw(what.substr(0, at));
  const std::string name = command.empty() ? app.get_name() : command;
  if (opt == nullptr) {
    // CLI11's own words ("--model is required", "Could not convert: --temp = abc"), on one line that names
    // the command, as every other error of `mtp` does.
    std::string line = what;
    for (char& c : line)
      if (c == '\n') c = ' ';
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::fprintf(stderr, "mtp %s: %s (mtp %s --help lists the options)\n", name.c_str(), line.c_str(),
                 name.c_str());
    return kExitUsageError;
  }
  std::string aliases;  // " (--a, --b or --c name one option)" where it has several names
  const std::vector<std::string>& names = opt->get_lnames();
  for (size_t i = 0; i < names.size() && names.size() > 1; ++i)
    aliases += (i == 0 ? " (" : i + 1 == names.size() ? " or " : ", ") + std::string("--") + names[i];
  if (!aliases.empty()) aliases += " name one option)";
  std::fprintf(stderr, "mtp %s: %s is given %s times%s; give it once\n", name.c_str(),
               what.substr(0, at).c_str(), what.substr(at + marker.size()).c_str(), aliases.c_str());
  return kExitUsageError;
}

}  // namespace mtp::tools
