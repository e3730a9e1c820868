#include "base/check.h"
#include "speculative/mtp_drafter.h"

namespace mtp::speculative {

ScriptedDrafter::Script& ScriptedDrafter::script(int32_t seq) {
  MTP_CHECK(seq >= 0);
  if (static_cast<int32_t>(scripts_.size()) <= seq) scripts_.resize(static_cast<size_t>(seq) + 1);
  return scripts_[static_cast<size_t>(seq)];
}

void ScriptedDrafter::set_script(int32_t seq, std::vector<int32_t> tokens, int32_t n_vocab) {
  script(seq).tokens = std::move(tokens);
  script(seq).n_vocab = n_vocab;
}

void ScriptedDrafter::set_wrong(int32_t seq, std::vector<int32_t> wrong) {
  script(seq).wrong = std::move(wrong);
  script(seq).calls = 0;
}

Status ScriptedDrafter::draft(std::span<DraftTask> tasks) {
  for (DraftTask& task : tasks) {
    task.draft.clear();
    Script& s = script(task.seq);
    const int32_t wrong = s.wrong.empty() ? -1 : s.wrong[s.calls++ % s.wrong.size()];
    for (int32_t i = 0; i < task.params.n_max; ++i) {
      const int64_t p = task.pos + 1 + i;
      if (p >= static_cast<int64_t>(s.tokens.size())) break;
      int32_t id = s.tokens[static_cast<size_t>(p)];
      if (i == wrong) id = (id + 1) % s.n_vocab;
      task.draft.push_back(id);
    }
    if (static_cast<int32_t>(task.draft.size()) < task.params.n_min) task.draft.clear();
  }
  return Status::Ok();
}

}  // namespace mtp::speculative
