// `mtp tune`: one server setting swept over concurrency levels, several runs a cell, and the value to serve
// with (docs/tune.md). The analysis is separate from the processes so that tests can feed it runs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "loadgen/report.h"

namespace mtp::gate {

// One cell: a setting's value at one concurrency level, over its runs.
struct TuneCell {
  std::vector<double> throughput;  // output tok/s of each run's steady window
  double median = 0;
  double score = 0;    // median - 1.4826 * MAD: a robust low estimate, so a noisy cell does not win
  double spread = 0;   // (max - min) / median over the runs
  bool noisy = false;  // spread over kNoisySpread
};

inline constexpr double kNoisySpread = 0.10;

struct TuneResult {
  std::vector<std::string> values;  // in sweep order
  std::vector<int> levels;
  std::map<std::string, std::map<int, TuneCell>> cells;  // value -> level -> cell
  std::map<int, std::string> best_at;                    // level -> the value of the highest score
  // The value whose worst level is closest to that level's best (the highest minimum over levels of
  // score / best score): never far from the best anywhere.
  std::string overall;
  std::map<std::string, double> worst_ratio;  // value -> that minimum
};

// Per-run output throughput of each level of a run file (runs numbered by `repeat`).
std::map<int, std::vector<double>> throughput_per_run(const loadgen::RunData& run);

// Scores every value's run file; `runs` maps value -> its run. Levels are those of the first run.
Expected<TuneResult> analyse_tune(const std::vector<std::string>& values,
                                  const std::map<std::string, loadgen::RunData>& runs);

std::string tune_table(const TuneResult& r, const std::string& setting);

// The command line a value is served with: `serve` plus " --SETTING VALUE" ("default": nothing added).
std::string serve_command(const std::string& serve, const std::string& setting, const std::string& value);

// A server started by `mtp tune`: `sh -c "exec CMD"` in its own process group, output to `log_path`.
class ServerProcess {
 public:
  ~ServerProcess();
  ServerProcess(ServerProcess&& other) noexcept;
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ServerProcess& operator=(ServerProcess&&) = delete;

  // Starts it and waits until GET /v1/models at `url` answers; fails if it exits first or takes longer
  // than `timeout_s` (the log's last line is in the message).
  static Expected<ServerProcess> start(const std::string& command, const std::string& url,
                                       const std::string& log_path, double timeout_s);
  // SIGTERM, then SIGKILL after 15 s; waits for it.
  void stop();

 private:
  explicit ServerProcess(int pid) : pid_(pid) {}
  int pid_ = -1;
};

}  // namespace mtp::gate
