#include "base/option_range.h"

namespace mtp {

std::string OptionRange::describe() const {
  return str_cat(lo_open ? "(" : "[", lo, ", ", hi, "]");
}

Status check_in_range(const char* name, double v, const OptionRange& range) {
  if (range.contains(v)) return Status::Ok();
  return invalid_argument(name, " must be in ", range.describe(), ", got ", v);
}

}  // namespace mtp
