#include "surgery/progress.h"

#include <unistd.h>

#include <cstdio>

namespace mtp::surgery {

Progress::Progress(std::string label, uint64_t total_bytes)
    : label_(std::move(label)), total_(total_bytes), enabled_(isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() {
  finish();
}

void Progress::advance(uint64_t bytes) {
  done_ += bytes;
  if (enabled_ && timer_.seconds() - last_draw_ >= 0.1) draw(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_) {
    draw(true);
    std::fputc('\n', stderr);
  }
}

void Progress::draw(bool final) {
  last_draw_ = timer_.seconds();
  const double fraction = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(fraction * kWidth);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[kWidth] = '\0';
  const double rate = last_draw_ > 0 ? static_cast<double>(done_) / last_draw_ : 0;
  const double eta = rate > 0 ? static_cast<double>(total_ - std::min(done_, total_)) / rate : 0;
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %.2f/%.2f GB %6.1f MB/s %s %4.0fs ", label_.c_str(), bar,
               100 * fraction, done_ / 1e9, total_ / 1e9, rate / 1e6, final ? "took" : "ETA ",
               final ? last_draw_ : eta);
  std::fflush(stderr);
}

}  // namespace mtp::surgery
