// Server-sent events, split incrementally: bytes go in as they arrive from the socket, the `data` payload of
// each complete event comes out. Only `data:` lines matter to OpenAI streams; comments (": ping") and other
// fields (event:, id:, retry:) are skipped. Lines may end in LF or CRLF.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mtp::loadgen {

class SseParser {
 public:
  // Appends bytes; returns the data of every event completed by them (several data lines joined by '\n').
  // An event without data lines (a comment only) yields nothing.
  std::vector<std::string> feed(std::string_view bytes);
  // Bytes received that do not yet form a complete event (a stream cut here ended mid-event).
  bool has_partial() const { return !line_.empty() || has_data_; }

 private:
  void end_line(std::vector<std::string>& out);

  std::string line_;  // the current line, without its end
  std::string data_;  // the current event's data so far
  bool has_data_ = false;
};

}  // namespace mtp::loadgen
