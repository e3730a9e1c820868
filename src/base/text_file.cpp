#include "base/text_file.h"

#include <fstream>
#include <sstream>

namespace mtp {

Expected<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error("cannot read '", path, "'");
  return ss.str();
}

}  // namespace mtp
