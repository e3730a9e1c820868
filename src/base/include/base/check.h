// Always-on invariant checks. A failed MTP_CHECK is a bug in mtp.cpp, never a reaction to bad input: input is
// reported through Status. The message names the condition, the place and any detail given.
#pragma once

#include "base/status.h"

namespace mtp::detail {
[[noreturn]] void check_failed(const char* condition, const char* file, int line, const std::string& detail);
}  // namespace mtp::detail

#define MTP_CHECK(cond, ...)                                                                                 \
  do {                                                                                                       \
    if (!(cond)) [[unlikely]]                                                                                \
      ::mtp::detail::check_failed(#cond, __FILE__, __LINE__, ::mtp::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
