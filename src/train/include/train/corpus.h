// A training corpus read from a directory: the files whose names match a glob, found recursively in sorted
// path order (so a corpus is the same on every machine with the same files), some held out for evaluation
// by a hash of their relative path, and a manifest that pins each file by size and sha256. No libtorch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace mtp::train {

struct CorpusOptions {
  std::string dir;         // searched recursively; symbolic links are skipped
  std::string glob = "*";  // fnmatch(3) pattern on the file name
  std::vector<std::string>
      exclude;            // fnmatch(3) patterns; a file with any path component matching is skipped
  double holdout = 0.02;  // fraction of files held out, chosen by hash of the relative path
};

struct CorpusFile {
  std::string path;  // relative to the corpus directory, '/'-separated
  std::string text;
  std::string sha256;  // hex, of text
  bool held_out = false;
};

// Whether a file is held out: FNV-1a 64 of its relative path, modulo 10000, below holdout * 10000. The same
// path is held out on every machine and for every corpus it is in.
bool is_held_out(const std::string& relative_path, double holdout);

// The matching files in sorted relative-path order, read whole; an error when the directory cannot be read or
// nothing matches.
Expected<std::vector<CorpusFile>> read_corpus_dir(const CorpusOptions& options);

// One line per file, tab-separated: relative path, bytes, sha256, "train" or "heldout"; after a header line.
std::string corpus_manifest(const std::vector<CorpusFile>& files);

}  // namespace mtp::train
