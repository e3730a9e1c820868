// A whole file read into a string (templates, corpora, text to measure on).
#pragma once

#include <string>

#include "base/status.h"

namespace mtp {

// The file's bytes; an I/O error naming the path when it cannot be opened or read.
Expected<std::string> read_text_file(const std::string& path);

}  // namespace mtp
