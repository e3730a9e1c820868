#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace mtp::detail {

void check_failed(const char* condition, const char* file, int line, const std::string& detail) {
  std::fprintf(stderr, "mtp: internal error: CHECK(%s) failed at %s:%d%s%s\n", condition, file, line,
               detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace mtp::detail
