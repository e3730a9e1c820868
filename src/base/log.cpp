#include "base/log.h"

#include <atomic>
#include <cstdio>

namespace mtp {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
}  // namespace

void set_log_level(LogLevel level) {
  g_level.store(level);
}
LogLevel log_level() {
  return g_level.load(std::memory_order_relaxed);
}

void log_line(LogLevel level, const std::string& message) {
  static const char* const kPrefix[] = {"debug: ", "", "warning: ", "error: ", ""};
  std::fprintf(stderr, "mtp: %s%s\n", kPrefix[static_cast<int>(level)], message.c_str());
}

}  // namespace mtp
