#include "loadgen/sse.h"

namespace mtp::loadgen {

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> out;
  for (char c : bytes) {
    if (c == '\n') {
      end_line(out);
    } else {
      line_ += c;
    }
  }
  return out;
}

void SseParser::end_line(std::vector<std::string>& out) {
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  if (line_.empty()) {  // a blank line ends the event
    if (has_data_) out.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line_.rfind("data:", 0) == 0) {
    std::string_view value(line_);
    value.remove_prefix(5);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (has_data_) data_ += '\n';
    data_ += value;
    has_data_ = true;
  }
  line_.clear();
}

}  // namespace mtp::loadgen
