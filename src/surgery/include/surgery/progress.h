// A one-line progress bar with throughput and ETA, drawn on stderr only when stderr is a terminal (so logs
// and tests see nothing). Thread-compatible: one thread reports progress.
#pragma once

#include <cstdint>
#include <string>

#include "base/timer.h"

namespace mtp::surgery {

class Progress {
 public:
  Progress(std::string label, uint64_t total_bytes);
  ~Progress();
  void advance(uint64_t bytes);
  void finish();

 private:
  void draw(bool final);

  std::string label_;
  uint64_t total_ = 0;
  uint64_t done_ = 0;
  bool enabled_ = false;
  bool finished_ = false;
  double last_draw_ = -1;
  Timer timer_;
};

}  // namespace mtp::surgery
