// Small helpers shared by the benchmark programs.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace mtp::bench {

// "1,2,4" -> {1, 2, 4}
inline std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::stoll(item));
  return v;
}

}  // namespace mtp::bench
