#include "gate/tune.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

#include "loadgen/stats.h"
#include "loadgen/stream_client.h"

namespace mtp::gate {
namespace {

TuneCell make_cell(std::vector<double> runs) {
  TuneCell c;
  c.throughput = std::move(runs);
  c.median = loadgen::median(c.throughput);
  std::vector<double> dev;
  for (double x : c.throughput) dev.push_back(std::abs(x - c.median));
  c.score = c.median - 1.4826 * loadgen::median(dev);
  const auto [lo, hi] = std::minmax_element(c.throughput.begin(), c.throughput.end());
  c.spread = c.median > 0 ? (*hi - *lo) / c.median : 0;
  c.noisy = c.spread > kNoisySpread;
  return c;
}

std::string last_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

std::map<int, std::vector<double>> throughput_per_run(const loadgen::RunData& run) {
  int runs = 0;
  for (const auto& r : run.requests) runs = std::max(runs, r.repeat + 1);
  std::map<int, std::vector<double>> out;
  for (int k = 0; k < runs; ++k) {
    loadgen::RunData one;
    for (const auto& r : run.requests)
      if (r.repeat == k) one.requests.push_back(r);
    for (const loadgen::LevelSummary& s : loadgen::summarize_run(one))
      out[s.concurrency].push_back(s.output_throughput);
  }
  return out;
}

Expected<TuneResult> analyse_tune(const std::vector<std::string>& values,
                                  const std::map<std::string, loadgen::RunData>& runs) {
  TuneResult r;
  r.values = values;
  for (const std::string& v : values) {
    auto it = runs.find(v);
    if (it == runs.end()) return invalid_argument("no run for value '", v, "'");
    for (auto& [level, tput] : throughput_per_run(it->second)) {
      if (std::find(r.levels.begin(), r.levels.end(), level) == r.levels.end()) r.levels.push_back(level);
      r.cells[v][level] = make_cell(tput);
    }
  }
  std::sort(r.levels.begin(), r.levels.end());
  for (int level : r.levels) {
    double best = -1;
    for (const std::string& v : values) {
      auto c = r.cells[v].find(level);
      if (c == r.cells[v].end())
        return corrupt("value '", v, "' has no measured request at concurrency ", level);
      if (c->second.score > best) best = c->second.score, r.best_at[level] = v;
    }
  }
  double best_worst = -1e300;
  for (const std::string& v : values) {
    double worst = 1e300;
    for (int level : r.levels) {
      const double best = r.cells[r.best_at[level]][level].score;
      worst = std::min(worst, best > 0 ? r.cells[v][level].score / best : 0.0);
    }
    r.worst_ratio[v] = worst;
    if (worst > best_worst) best_worst = worst, r.overall = v;
  }
  return r;
}

std::string tune_table(const TuneResult& r, const std::string& setting) {
  std::string out = str_cat("Output tok/s per run: median, and the score median - 1.4826 MAD (",
                            kNoisySpread * 100, "%+ spread between runs marked !)\n\n| ", setting, " |");
  for (int level : r.levels) out += str_cat(" c", level, " |");
  out += " worst / best |\n|---|";
  for (size_t i = 0; i <= r.levels.size(); ++i) out += "---:|";
  out += "\n";
  char buf[64];
  for (const std::string& v : r.values) {
    out += str_cat("| ", v, " |");
    for (int level : r.levels) {
      const TuneCell& c = r.cells.at(v).at(level);
      std::snprintf(buf, sizeof buf, " %.1f (%.1f)%s%s |", c.median, c.score, c.noisy ? " !" : "",
                    r.best_at.at(level) == v ? " *" : "");
      out += buf;
    }
    std::snprintf(buf, sizeof buf, " %.3f |\n", r.worst_ratio.at(v));
    out += buf;
  }
  out += "\n* the best score at that level.\n";
  return out;
}

std::string serve_command(const std::string& serve, const std::string& setting, const std::string& value) {
  return value == "default" ? serve : str_cat(serve, " --", setting, " ", value);
}

ServerProcess::~ServerProcess() {
  stop();
}

ServerProcess::ServerProcess(ServerProcess&& other) noexcept : pid_(other.pid_) {
  other.pid_ = -1;
}

Expected<ServerProcess> ServerProcess::start(const std::string& command, const std::string& url,
                                             const std::string& log_path, double timeout_s) {
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) return io_error("cannot write '", log_path, "'");
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    return io_error("cannot start a process for '", command, "'");
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    const std::string exec = "exec " + command;
    ::execl("/bin/sh", "sh", "-c", exec.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(log);
  ::setpgid(pid, pid);  // as the child does: whichever runs first, stop() can signal the group
  ServerProcess server(pid);
  loadgen::ClientOptions co;
  co.url = url;
  co.timeout_s = 2;
  MTP_ASSIGN_OR_RETURN(auto client, loadgen::StreamClient::create(co));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      server.pid_ = -1;
      return io_error("the server exited before it answered (", log_path, ": ", last_line(log_path), ")");
    }
    if (client->first_model().ok()) return server;
    if (std::chrono::steady_clock::now() > deadline)
      return io_error("the server did not answer within ", timeout_s, " s (", log_path, ": ",
                      last_line(log_path), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void ServerProcess::stop() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 150; ++i) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(-pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace mtp::gate
