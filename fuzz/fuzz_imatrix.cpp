// libFuzzer target for the importance-matrix reader (`mtp quantize --imatrix FILE`), both formats: a GGUF
// file (<name>.in_sum2 / <name>.counts tensors) or llama.cpp's legacy binary one. Any file must give the
// weights or a Status, and weights that load must be finite (the quantizer divides by them).
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "fuzz_file.h"
#include "surgery/imatrix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const mtp::fuzz::MemFile file(data, size);
  auto imatrix = mtp::surgery::load_imatrix(file.path());
  if (!imatrix.ok()) return 0;
  for (const auto& [name, weights] : imatrix->weights) {
    for (float w : weights) {
      if (!std::isfinite(w)) std::abort();
    }
  }
  return 0;
}
