// libFuzzer target for the draft-vocab subset file reader (`--draft-vocab FILE`): any file must give the
// subset or a Status, and a subset that reads back must hold distinct ids below its own vocabulary size.
#include <cstdint>
#include <cstdlib>
#include <unordered_set>

#include "fuzz_file.h"
#include "speculative/draft_vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const mtp::fuzz::MemFile file(data, size);
  auto parsed = mtp::speculative::read_draft_vocab_file(file.path());
  if (!parsed.ok()) return 0;
  std::unordered_set<int32_t> seen;
  for (int32_t id : parsed->ids) {
    if (id < 0 || id >= parsed->n_vocab || !seen.insert(id).second) std::abort();
  }
  // The same file against a model's vocabulary: the seed's own size, and one it was not built for.
  (void)mtp::speculative::read_draft_vocab_file(file.path(), parsed->n_vocab);
  (void)mtp::speculative::read_draft_vocab_file(file.path(), 512);
  return 0;
}
