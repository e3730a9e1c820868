// Runs `mtp serve ... --port 0` as a child process and finds the port it bound from its
// "listening on http://HOST:PORT" line.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mtp::testing {

class ServerProcess {
 public:
  // `args` are split on spaces (no quoting); run from the source tree root. Throws if the server does not
  // print its port within `timeout_s`. With `capture_stderr`, stderr goes into the same pipe as stdout.
  explicit ServerProcess(const std::string& args, double timeout_s = 120, bool capture_stderr = false) {
    std::vector<std::string> argv_s = {MTP_BINARY, "serve", "--port", "0"};
    std::istringstream ss(args);
    for (std::string a; ss >> a;) argv_s.push_back(a);
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      if (capture_stderr) dup2(out[1], STDERR_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      if (chdir(MTP_SOURCE_DIR) != 0) _exit(127);
      std::vector<char*> argv;
      for (std::string& s : argv_s) argv.push_back(s.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    ::close(out[1]);
    out_fd_ = out[0];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    const std::string marker = "listening on http://";
    while (port_ < 0) {
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("server did not start: " + output_);
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(out_fd_, buf, sizeof buf);
      if (n <= 0) throw std::runtime_error("server exited before listening: " + output_);
      output_.append(buf, static_cast<size_t>(n));
      size_t m = output_.find(marker);
      if (m == std::string::npos) continue;
      size_t nl = output_.find('\n', m);
      if (nl == std::string::npos) continue;
      std::string url = output_.substr(m + marker.size(), nl - m - marker.size());
      port_ = std::stoi(url.substr(url.rfind(':') + 1));
    }
  }
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // What the server printed on stdout before it listened (its effective configuration).
  const std::string& banner() const { return output_; }
  // Everything the process printed, read until it closes its output (it exits) or `timeout_s` passes: after
  // a signal that stops it, the whole output, with nothing left to arrive later.
  const std::string& read_output_to_end(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(out_fd_, buf, sizeof buf);
      if (n <= 0) break;
      output_.append(buf, static_cast<size_t>(n));
    }
    return output_;
  }

  void signal(int sig) { kill(pid_, sig); }
  // Waits for the exit; returns the exit status, or -1 after `timeout_s` (the process is then killed) or when
  // it died from a signal.
  int wait(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        exited_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = -1;
  bool exited_ = false;
  std::string output_;
};

}  // namespace mtp::testing
