// The valid range of a numeric option, defined once beside the option and read by every place that accepts
// it (the engine's checks, the server's request parser, the command lines), so that they cannot disagree.
#pragma once

#include <string>

#include "base/status.h"

namespace mtp {

struct OptionRange {
  double lo = 0, hi = 0;
  bool lo_open = false;  // (lo, hi] instead of [lo, hi]

  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && v <= hi; }  // NaN: false
  // "[0, 1]", "(0, 1]".
  std::string describe() const;
};

// invalid_argument("NAME must be in RANGE, got V") unless `range` contains v.
Status check_in_range(const char* name, double v, const OptionRange& range);

}  // namespace mtp
