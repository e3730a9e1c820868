// The engine's side of the prefix cache (engine.h, prefix_cache.h): a request resumes from the deepest
// checkpoint of its prompt's cached prefix, checkpoints its prompt where planned, and leaves its committed
// state behind when it ends.
#include <algorithm>
#include <limits>

#include "base/check.h"
#include "base/log.h"
#include "engine_impl.h"

namespace mtp {
namespace {

// Where a policy may pause drafting (auto, or a cap on drafting slots), publishing a request's state brings
// its MTP rows up to date only when few catch-up rows wait (a drafting slot has at most a draft's worth). A
// paused slot would otherwise run its whole stretch through the MTP block at the end of every request: on
// an 8-layer 35B-A3B-width file at 2 threads, 150-370 ms a request, more than the 32 tokens it generated.
// The cache then keeps the MTP rows that exist; a later hit drafts from there. Where every slot drafts
// every step, the rows are always brought up to date (a prompt-only request included).
constexpr int64_t kPublishCatchUpRows = 64;

}  // namespace

void Engine::Impl::restore_prefix(Slot& s) {
  CacheUse& use = s.timings.cache;
  use.enabled = true;
  const CacheHit hit = cache->lookup(s.opt.cache_namespace, s.prompt);
  use.matched = hit.matched;
  use.next_checkpoint = hit.next_checkpoint;
  if (hit.pos == 0) return;
  Timer timer;
  const bool mtp_rows = memory.mtp_slot() >= 0;
  const Status attached =
      memory.seq_attach(s.seq, hit.blocks, hit.pos, mtp_rows ? hit.mtp_begin : 0, mtp_rows ? hit.mtp_end : 0);
  MTP_CHECK(attached.ok(), "prefix cache hit: ", attached.message());
  memory.restore_state(s.seq, hit.checkpoint->state, &pool);
  s.prefix.last_hidden = hit.checkpoint->hidden;
  s.prompt_done = s.prefix.restored = hit.pos;
  if (drafter) drafter->resume(s.seq, hit.pos, s.prefix.last_hidden);
  use.cached = hit.pos;
  use.restore_ms = timer.millis();
}

void Engine::Impl::plan_checkpoints(Slot& s) {
  const int64_t n = static_cast<int64_t>(s.prompt.size());
  std::vector<std::pair<int64_t, CheckpointKind>>& plan = s.prefix.plan;
  plan.clear();
  // Message starts: the last ones matter (earlier turns were checkpointed when they were new).
  constexpr size_t kMaxMessageCheckpoints = 16;
  const std::vector<int64_t>& hints = s.opt.checkpoints;
  for (size_t i = hints.size() > kMaxMessageCheckpoints ? hints.size() - kMaxMessageCheckpoints : 0;
       i < hints.size(); ++i)
    if (hints[i] > s.prefix.restored && hints[i] < n) plan.emplace_back(hints[i], CheckpointKind::kMessage);
  // Every K tokens at multiples of K, so that requests sharing a prefix checkpoint the same positions.
  const int64_t every = opt.cache.checkpoint_every;
  if (every > 0)
    for (int64_t p = (s.prefix.restored / every + 1) * every; p < n; p += every)
      plan.emplace_back(p, CheckpointKind::kInterval);
  if (n > s.prefix.restored) plan.emplace_back(n, CheckpointKind::kPromptEnd);
  // By position; of two at one position the message start (listed first) stays, and one too close to its
  // neighbours goes.
  std::stable_sort(plan.begin(), plan.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const int64_t gap = std::max<int64_t>(1, opt.cache.checkpoint_min_gap);
  std::vector<std::pair<int64_t, CheckpointKind>> kept;
  int64_t last = s.prefix.restored;
  for (const auto& c : plan) {
    const bool end = c.second == CheckpointKind::kPromptEnd;
    if (!end && (c.first - last < gap || n - c.first < gap)) continue;
    kept.push_back(c);
    last = c.first;
  }
  plan = std::move(kept);
}

void Engine::Impl::capture_checkpoints(Slot& s) {
  const int64_t end = s.prompt_done + s.step.n_rows;  // the chunk holds positions prompt_done..end-1
  while (!s.prefix.plan.empty() && s.prefix.plan.front().first <= end) {
    Checkpoint c;
    c.pos = s.prefix.plan.front().first;
    c.kind = s.prefix.plan.front().second;
    s.prefix.plan.erase(s.prefix.plan.begin());
    c.state = memory.new_state();
    if (c.state.empty()) {
      log_warn("prefix cache: no memory for a checkpoint of ", memory.state_bytes(), " bytes at position ",
               c.pos);
      continue;
    }
    const int64_t row = s.step.row0 + (c.pos - 1 - s.prompt_done);  // the state after token pos-1
    batch.rows[static_cast<size_t>(row)].capture = c.state.data();
    s.prefix.captured.emplace_back(s.prefix.checkpoints.size(), row);
    s.prefix.checkpoints.push_back(std::move(c));
  }
}

void Engine::Impl::publish(Slot& s) {
  const int64_t n = memory.seq_pos(s.seq);
  if (n == 0) return;
  int64_t mtp_valid = 0;
  if (drafter) {
    const bool may_pause =
        opt.policy.kind == speculative::PolicyKind::kAuto || opt.policy.max_drafting_slots >= 0;
    Expected<int64_t> v =
        drafter->settle(s.seq, may_pause ? kPublishCatchUpRows : std::numeric_limits<int64_t>::max());
    if (!v.ok()) {
      log_warn("prefix cache: request ", s.id, " not cached: ", v.status().message());
      return;
    }
    mtp_valid = *v;
  }
  const Memory::Seq& q = memory.seq(s.seq);
  int64_t mtp_begin = q.mtp_begin, mtp_end = std::min({q.mtp_end, mtp_valid, n});
  if (mtp_end <= mtp_begin) mtp_begin = mtp_end = 0;
  // The state at the end of the history, moved out of the sequence (it is freed next), unless the cache has
  // it already (nothing was computed past the restored checkpoint) or a prompt checkpoint is there.
  const bool have_end = !s.prefix.checkpoints.empty() && s.prefix.checkpoints.back().pos == n;
  if (n > s.prefix.restored && !have_end &&
      static_cast<int64_t>(s.prefix.last_hidden.size()) == model.config().n_embd) {
    Checkpoint c;
    c.pos = n;
    c.kind = n > static_cast<int64_t>(s.prompt.size()) ? CheckpointKind::kGenerationEnd
                                                       : CheckpointKind::kInterval;
    c.state = memory.take_state(s.seq);
    c.hidden = std::move(s.prefix.last_hidden);
    if (!c.state.empty()) s.prefix.checkpoints.push_back(std::move(c));
  }
  std::vector<int32_t> history(static_cast<size_t>(n));
  const int64_t n_prompt = static_cast<int64_t>(s.prompt.size());
  for (int64_t p = 0; p < n; ++p)
    history[static_cast<size_t>(p)] =
        p < n_prompt ? s.prompt[static_cast<size_t>(p)] : s.generated[static_cast<size_t>(p - n_prompt)];
  cache->insert(s.opt.cache_namespace, history, q.blocks, mtp_begin, mtp_end,
                std::move(s.prefix.checkpoints));
  s.prefix.checkpoints.clear();
}

}  // namespace mtp
