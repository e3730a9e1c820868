// `mtp run`: placeholder registered by the CLI; implemented in issue 5.
#include "command.h"

namespace mtp::tools {

CommandRunner register_run(CLI::App& app) {
  app.add_subcommand("run", "(not implemented yet)");
  return [] { return report_error("run", unsupported("not implemented yet")); };
}

}  // namespace mtp::tools
