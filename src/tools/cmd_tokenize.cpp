// `mtp tokenize`: placeholder registered by the CLI; implemented in issue 5.
#include "command.h"

namespace mtp::tools {

CommandRunner register_tokenize(CLI::App& app) {
  app.add_subcommand("tokenize", "(not implemented yet)");
  return [] { return report_error("tokenize", unsupported("not implemented yet")); };
}

}  // namespace mtp::tools
