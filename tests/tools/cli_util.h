// Runs the `mtp` binary the way a user would and captures what it prints.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace mtp::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout (stderr too when merged)
};

// Runs a shell command line and captures its stdout (exit code 127: the shell did not find the program).
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs `mtp <args>` from the source tree root; `merge_stderr` appends 2>&1.
inline CommandResult run_mtp(const std::string& args, bool merge_stderr = false) {
  return run_command(std::string("cd '") + MTP_SOURCE_DIR + "' && '" + MTP_BINARY + "' " + args +
                     (merge_stderr ? " 2>&1" : " 2>/dev/null"));
}

}  // namespace mtp::testing
