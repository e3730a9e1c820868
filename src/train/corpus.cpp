#include "train/corpus.h"

#include <fnmatch.h>
#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace mtp::train {
namespace {

namespace fs = std::filesystem;

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  static const char* const kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

bool matches(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

// Whether any component of the relative path matches an exclude pattern.
bool excluded(const fs::path& relative, const std::vector<std::string>& exclude) {
  for (const fs::path& part : relative)
    for (const std::string& pattern : exclude)
      if (matches(pattern, part.string())) return true;
  return false;
}

}  // namespace

bool is_held_out(const std::string& relative_path, double holdout) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : relative_path) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return static_cast<double>(h % 10000) < holdout * 10000.0;
}

Expected<std::vector<CorpusFile>> read_corpus_dir(const CorpusOptions& o) {
  std::error_code ec;
  std::vector<std::string> paths;
  fs::recursive_directory_iterator it(o.dir, ec), end;
  if (ec) return io_error("cannot read corpus directory '", o.dir, "': ", ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return io_error("cannot read corpus directory '", o.dir, "': ", ec.message());
    const fs::file_status st = it->symlink_status(ec);
    if (ec || !fs::is_regular_file(st)) continue;
    const fs::path relative = it->path().lexically_relative(o.dir);
    if (!matches(o.glob, relative.filename().string()) || excluded(relative, o.exclude)) continue;
    paths.push_back(relative.generic_string());
  }
  if (paths.empty()) return invalid_argument("no file in '", o.dir, "' matches '", o.glob, "'");
  std::sort(paths.begin(), paths.end());
  std::vector<CorpusFile> files;
  for (const std::string& path : paths) {
    std::ifstream in(fs::path(o.dir) / path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!in || in.bad()) return io_error("cannot read corpus file '", o.dir, "/", path, "'");
    CorpusFile f{path, ss.str(), "", is_held_out(path, o.holdout)};
    f.sha256 = sha256_hex(f.text);
    files.push_back(std::move(f));
  }
  return files;
}

std::string corpus_manifest(const std::vector<CorpusFile>& files) {
  std::string out = "path\tbytes\tsha256\tsplit\n";
  for (const CorpusFile& f : files)
    out += f.path + "\t" + std::to_string(f.text.size()) + "\t" + f.sha256 + "\t" +
           (f.held_out ? "heldout" : "train") + "\n";
  return out;
}

}  // namespace mtp::train
