// Throughput and peak memory of the GGUF surgery commands on a multi-GB synthetic model, run as a user runs
// them (the `mtp` binary in a child process; peak RSS and CPU time come from wait4). Prints one table.
//
// Usage: bench_surgery [--dir DIR] [--layers N] [--keep-files]
//   N trunk layers of the 35B-A3B widths at Q8_0, with the MTP block: N = 3 gives about 4.6 GB.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../bench_cli.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {

struct RunStats {
  double wall_s = 0, cpu_s = 0, peak_rss_mb = 0;
  int exit_code = -1;
};

RunStats run(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  RunStats s;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  s.peak_rss_mb = ru.ru_maxrss / 1024.0;
  s.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return s;
}

double gb(const std::string& path) {
  return std::filesystem::file_size(path) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = (std::filesystem::temp_directory_path() / "mtp-bench-surgery").string();
  std::string layers = "3";
  bool keep = false;
  CLI::App app{"Time each surgery step (synth, extract-head, graft, quantize) on 35B-A3B-width files",
               "bench_surgery"};
  app.add_option("--dir", dir, "Folder for the files")->capture_default_str();
  app.add_option("--layers", layers, "Trunk layers")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_flag("--keep-files", keep, "Keep the files afterwards");
  mtp::bench::parse_or_exit(app, argc, argv);
  std::filesystem::create_directories(dir);
  const std::string mtp = MTP_BINARY;
  const std::string full = dir + "/full.gguf", trunk = dir + "/trunk.gguf", head = dir + "/head.gguf",
                    grafted = dir + "/grafted.gguf", iq4 = dir + "/iq4xs.gguf";
  struct Step {
    const char* name;
    std::vector<std::string> args;
    std::string input;  // what the step reads (empty for synth)
    std::string output;
  };
  const std::vector<Step> steps = {
      {"synth --mtp (q8_0)",
       {mtp, "synth", "--shape", "35b-a3b", "--layers", layers, "--mtp", "--type", "q8_0", "-o", full},
       "",
       full},
      {"synth trunk (q8_0)",
       {mtp, "synth", "--shape", "35b-a3b", "--layers", layers, "--type", "q8_0", "-o", trunk},
       "",
       trunk},
      {"extract-head", {mtp, "extract-head", full, "-o", head}, full, head},
      {"graft (trunk + head)",
       {mtp, "graft", "--trunk", trunk, "--head", head, "-o", grafted},
       trunk,
       grafted},
      {"quantize IQ4_XS --keep blk.N.*",
       {mtp, "quantize", full, iq4, "--type", "IQ4_XS", "--keep", "blk." + layers + ".*"},
       full,
       iq4},
  };
  std::printf("%-32s %9s %9s %8s %9s %10s %8s\n", "step", "in GB", "out GB", "wall s", "in GB/s", "peak RSS",
              "cores");
  for (const Step& s : steps) {
    RunStats r = run(s.args);
    if (r.exit_code != 0) {
      std::fprintf(stderr, "step '%s' failed (exit %d)\n", s.name, r.exit_code);
      return 1;
    }
    const double in = s.input.empty() ? 0 : gb(s.input);
    // extract-head reads only the head's bytes, not the whole file.
    const double read = s.input == full && s.output == head ? gb(head) : in;
    std::printf("%-32s %9.3f %9.3f %8.1f %9.3f %7.0f MB %8.2f\n", s.name, in, gb(s.output), r.wall_s,
                read > 0 ? read / r.wall_s : 0.0, r.peak_rss_mb, r.cpu_s / r.wall_s);
    std::fflush(stdout);
  }
  if (!keep) std::filesystem::remove_all(dir);
  return 0;
}
