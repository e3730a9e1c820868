// How long opening a GGUF takes: map, then parse and validate the whole index (every tensor info, every
// metadata key), without touching tensor data. The file is sparse (the data section is a hole), so a 40 GB
// file costs no disk, and any read of tensor data would show up as page faults.
//
// Usage: bench_gguf_open [n_tensors=10000] [tensor_mib=4] [repeats=20]
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "../bench_cli.h"
#include "base/timer.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

int main(int argc, char** argv) {
  using namespace mtp;
  int64_t n_tensors = 10000, tensor_mib = 4;
  int repeats = 20;
  CLI::App app{"Time to open and validate a sparse GGUF with many tensors and a 150,000-token vocabulary",
               "bench_gguf_open"};
  app.add_option("n_tensors", n_tensors, "Tensors in the file")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("tensor_mib", tensor_mib, "MiB per tensor")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("repeats", repeats, "Times to open it")->check(CLI::Range(1, 100000))->capture_default_str();
  bench::parse_or_exit(app, argc, argv);

  Metadata md;
  md.set("general.architecture", Value::string("bench"));
  std::vector<std::string> tokens(150000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = "tok" + std::to_string(i);
  md.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  std::vector<TensorSpec> specs;
  for (int64_t i = 0; i < n_tensors; ++i) {
    specs.push_back(
        {"blk." + std::to_string(i / 20) + ".t" + std::to_string(i % 20) + ".weight",
         GgmlType::Q8_0,
         {1024, tensor_mib * 1024 * 1024 / 1088, 1, 1}});  // rows of 1024 q8_0 values = 1088 bytes
  }
  std::vector<uint64_t> offsets;
  auto index = encode_gguf_index(md, specs, &offsets);
  if (!index.ok()) {
    std::fprintf(stderr, "%s\n", index.status().message().c_str());
    return 1;
  }
  uint64_t data_bytes =
      offsets.back() + (*tensor_byte_size(specs.back().type, specs.back().ne) + 31) / 32 * 32;
  std::string path = (std::filesystem::temp_directory_path() / "mtp-bench-open.gguf").string();
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0 || ::write(fd, index->data(), index->size()) != static_cast<ssize_t>(index->size()) ||
      ::ftruncate(fd, static_cast<off_t>(index->size() + data_bytes)) != 0) {
    std::perror(path.c_str());
    return 1;
  }
  ::close(fd);

  std::vector<double> ms;
  long faults_before = 0, faults_after = 0;
  for (int r = 0; r < repeats; ++r) {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    faults_before = ru.ru_minflt + ru.ru_majflt;
    Timer t;
    auto f = GgufFile::open(path);
    ms.push_back(t.millis());
    getrusage(RUSAGE_SELF, &ru);
    faults_after = ru.ru_minflt + ru.ru_majflt;
    if (!f.ok() || f->tensors().size() != static_cast<size_t>(n_tensors)) {
      std::fprintf(stderr, "open failed: %s\n", f.status().message().c_str());
      return 1;
    }
  }
  std::sort(ms.begin(), ms.end());
  std::printf("gguf open+validate: %lld tensors, 150000-string vocab, index %.2f MB, file %.1f GB (sparse)\n",
              static_cast<long long>(n_tensors), index->size() / 1e6, (index->size() + data_bytes) / 1e9);
  std::printf("  median %.2f ms, min %.2f ms, max %.2f ms over %d opens\n", ms[ms.size() / 2], ms.front(),
              ms.back(), repeats);
  std::printf("  page faults during the last open: %ld (index pages only: %.0f)\n",
              faults_after - faults_before, index->size() / 4096.0);
  std::filesystem::remove(path);
  return 0;
}
