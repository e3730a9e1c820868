// Parse errors of the subcommands' options, in the words of the rest of the command line (command.h).
#include <cstdio>
#include <string>

#include "command.h"

namespace mtp::tools {

int report_parse_error(CLI::App& app, const CLI::ParseError& e, const std::string& command) {
  const std::string what = e.what(), marker = ": At Most 1 required but received ";
  const size_t at = what.find(marker);
  const CLI::Option* opt = at == std::string::npos ? nullptr : app.get_option_no_throw(what.substr(0, at));
  if (opt == nullptr) {
    app.exit(e);
    return kExitUsageError;
  }
  std::string aliases;  // " (--a, --b or --c name one option)" where it has several names
  const std::vector<std::string>& names = opt->get_lnames();
  for (size_t i = 0; i < names.size() && names.size() > 1; ++i)
    aliases += (i == 0 ? " (" : i + 1 == names.size() ? " or " : ", ") + std::string("--") + names[i];
  if (!aliases.empty()) aliases += " name one option)";
  std::fprintf(stderr, "mtp %s: %s is given %s times%s; give it once\n",
               (command.empty() ? app.get_name() : command).c_str(), what.substr(0, at).c_str(),
               what.substr(at + marker.size()).c_str(), aliases.c_str());
  return kExitUsageError;
}

}  // namespace mtp::tools
