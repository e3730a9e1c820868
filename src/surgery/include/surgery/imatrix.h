// Importance matrices for quantization (docs/formats.md section 4.5), in both formats llama.cpp writes:
// the GGUF one (<name>.in_sum2 and <name>.counts tensors) and the legacy binary one.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace mtp::surgery {

struct Imatrix {
  // Per tensor name: n_mat vectors of ne[0] weights back to back (one per expert matrix of a 3-D tensor).
  std::unordered_map<std::string, std::vector<float>> weights;
  std::string dataset;      // the first dataset named, or empty
  int64_t chunk_count = 0;  // chunks it was computed on, where the file says (0: not said)
};

Expected<Imatrix> load_imatrix(const std::string& path);

}  // namespace mtp::surgery
