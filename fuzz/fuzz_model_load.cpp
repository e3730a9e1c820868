// libFuzzer target for Model::load: the input is a whole GGUF model file, loaded as the model and as its own
// MTP head (`--head`), so both the trunk's and the head's validation run, and a file that passes is repacked
// for the kernels. Any file must give a model or a Status (AddressSanitizer checks that validation keeps
// every weight view inside the mapping while packing reads them).
#include <cstdint>
#include <cstdlib>

#include "fuzz_file.h"
#include "model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const mtp::fuzz::MemFile file(data, size);
  auto model = mtp::Model::load(file.path(), file.path());
  if (!model.ok()) return 0;
  if (static_cast<int64_t>(model->vocab().tokens.size()) > model->config().n_vocab) std::abort();
  if (!model->has_mtp()) std::abort();  // loading with a head either binds its block or fails
  return 0;
}
