// Minimal leveled logging to stderr. Messages are single lines; the level is set once at start-up.
#pragma once

#include <string>

#include "base/status.h"

namespace mtp {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kQuiet = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_info(const Args&... args) {
  if (log_level() <= LogLevel::kInfo) log_line(LogLevel::kInfo, str_cat(args...));
}
template <typename... Args>
void log_warn(const Args&... args) {
  if (log_level() <= LogLevel::kWarn) log_line(LogLevel::kWarn, str_cat(args...));
}
template <typename... Args>
void log_debug(const Args&... args) {
  if (log_level() <= LogLevel::kDebug) log_line(LogLevel::kDebug, str_cat(args...));
}

}  // namespace mtp
