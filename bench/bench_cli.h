// The benchmark programs' command lines, parsed with CLI11 so that each answers --help with its usage on
// stdout (exit 0) and a malformed or unknown argument with one line on stderr (exit 2).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace mtp::bench {

inline void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (--help for the usage)\n", app.get_name().c_str(), e.what());
    std::exit(2);
  }
}

// Each name through `lookup` (returning std::optional<T>), or one line naming the first unknown one and
// exit 2.
template <typename Lookup>
auto lookup_or_exit(const CLI::App& app, const char* option, const std::vector<std::string>& names,
                    Lookup lookup) {
  std::vector<typename decltype(lookup(names.front()))::value_type> out;
  for (const std::string& name : names) {
    const auto v = lookup(name);
    if (!v) {
      std::fprintf(stderr, "%s: %s: unknown name '%s'\n", app.get_name().c_str(), option, name.c_str());
      std::exit(2);
    }
    out.push_back(*v);
  }
  return out;
}

}  // namespace mtp::bench
