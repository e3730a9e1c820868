// One engine step (docs/architecture.md section 4), as the phases run_step calls in order:
//   start_restored_prompts  prompts the prefix cache restored whole sample their first token;
//   choose_draft_lengths    the policy's draft length per generating slot;
//   draft                   the drafter's tokens for the slots that draft;
//   build_batch             one trunk batch: decode/verify rows first, then prompt chunks in slot order;
//   run_trunk               the forward pass, its cost told to the policy;
//   accept_and_roll_back    per generating slot: sample along the draft, keep the accepted rows, feed the
//                           drafter, report tokens;
//   advance_prompts         prompt chunks in: feed the drafter, take checkpoints' hiddens, start generating.
// A finished request publishes its history to the prefix cache in finish() (engine_cache.cpp).
#include <algorithm>

#include "base/timer.h"
#include "engine_impl.h"
#include "model/forward.h"

namespace mtp {

Status Engine::Impl::run_step(std::vector<SlotEvent>& events, StepInfo& info) {
  MTP_RETURN_IF_ERROR(start_restored_prompts(events));
  Timer step_timer;  // the whole step: drafts, trunk, acceptance and the drafter's catch-up (observe_step)
  std::vector<Slot*> gen;
  int64_t prompt_left = 0;
  for (Slot& s : slots) {
    s.step.drafted.clear();
    s.spec.sampled.chosen.clear();
    s.grammar.n_masks = 0;
    if (s.state == SlotState::kGenerate) gen.push_back(&s);
    if (s.state == SlotState::kPrompt) prompt_left += static_cast<int64_t>(s.prompt.size()) - s.prompt_done;
  }
  if (drafter && !gen.empty()) {
    const std::vector<int32_t> k = choose_draft_lengths(gen, prompt_left, info);
    MTP_RETURN_IF_ERROR(draft(gen, k, info));
  }
  if (!build_batch(gen, events, info)) return Status::Ok();
  MTP_RETURN_IF_ERROR(run_trunk(gen, info));
  for (Slot* s : gen)
    if (s->state == SlotState::kGenerate) MTP_RETURN_IF_ERROR(accept_and_roll_back(*s, events, info));
  // What the step delivered, whatever the policy's model predicted (its guard against drafting that loses).
  if (drafter && info.prompt_rows == 0 && !gen.empty())
    policy.observe_step(static_cast<int64_t>(gen.size()), info.generating + info.accepted,
                        step_timer.seconds(), info.drafting > 0);
  return advance_prompts(events);
}

Status Engine::Impl::start_restored_prompts(std::vector<SlotEvent>& events) {
  for (Slot& s : slots) {
    if (s.state != SlotState::kPrompt || s.prompt_done != static_cast<int64_t>(s.prompt.size())) continue;
    MTP_RETURN_IF_ERROR(forward_logits(model, s.prefix.last_hidden, memory, head_out, pool));
    start_generating(s, head_out.logits_of(0).first(static_cast<size_t>(n_sample)), events);
  }
  return Status::Ok();
}

std::vector<int32_t> Engine::Impl::choose_draft_lengths(std::span<Slot* const> gen, int64_t prompt_left,
                                                        StepInfo& info) {
  info.head = policy.head(static_cast<int64_t>(gen.size()));
  const size_t head = static_cast<size_t>(info.head);
  std::vector<speculative::SlotDemand> demand(gen.size());
  for (size_t i = 0; i < gen.size(); ++i) {
    Slot& s = *gen[i];
    int64_t cap = s.spec.params.n_max;
    // No point drafting past max_tokens or the context (a step that accepts every draft emits them and one
    // more token; the last of those must fit at the context's last position).
    if (s.opt.max_tokens >= 0) cap = std::min(cap, s.opt.max_tokens - s.timings.n_generated - 1);
    cap = std::min(cap, opt.n_ctx - memory.seq_pos(s.seq) - 2);
    demand[i].n_max = static_cast<int32_t>(std::max<int64_t>(0, cap));
    demand[i].acceptance = &s.spec.acceptance[head];
    demand[i].catch_up_rows = drafter->pending_rows(s.seq);
    demand[i].generated = s.timings.n_generated;
    if (s.opt.max_tokens >= 0)
      demand[i].remaining = std::max<int64_t>(0, s.opt.max_tokens - s.timings.n_generated);
  }
  const int64_t prompt_rows =
      std::min(prompt_left, std::max<int64_t>(0, opt.n_batch - static_cast<int64_t>(gen.size())));
  return policy.choose(demand, prompt_rows);
}

Status Engine::Impl::draft(std::span<Slot* const> gen, std::span<const int32_t> k, StepInfo& info) {
  const size_t head = static_cast<size_t>(info.head);
  std::vector<speculative::DraftTask> tasks;
  std::vector<Slot*> task_slot;
  int32_t k_max = 0;
  for (size_t i = 0; i < gen.size(); ++i) {
    if (k[i] <= 0) {
      gen[i]->spec.acceptance[head].idle_step(policy.acceptance(info.head));
      continue;
    }
    speculative::DraftTask t;
    t.seq = gen[i]->seq;
    t.last_token = gen[i]->last;
    t.pos = memory.seq_pos(gen[i]->seq);
    t.params = gen[i]->spec.params;
    t.params.n_max = k[i];
    t.params.n_min = std::min(t.params.n_min, k[i]);
    // The policy's head, unless the request asked for the full one (its draft_vocab 0).
    t.params.subset = t.params.subset && info.head == speculative::DraftHead::kSubset;
    t.constraint = draft_constraint(*gen[i]);
    t.chooser = gen[i]->spec.sampled.chooser.get();
    tasks.push_back(std::move(t));
    task_slot.push_back(gen[i]);
    k_max = std::max(k_max, k[i]);
  }
  if (tasks.empty()) {
    policy.idle_step();
    return Status::Ok();
  }
  Timer dt;
  MTP_RETURN_IF_ERROR(drafter->draft(tasks));
  info.draft_seconds = dt.seconds();
  const std::span<const speculative::DraftPass> passes = drafter->last_passes();
  for (const speculative::DraftPass& p : passes) policy.observe_draft(p.rows, p.seconds);
  if (passes.empty())  // a drafter without passes of its own: spread its time evenly
    policy.observe_draft(static_cast<int64_t>(tasks.size()), info.draft_seconds / std::max(k_max, 1));
  info.drafting = static_cast<int32_t>(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    task_slot[i]->step.drafted = std::move(tasks[i].draft);
    trim_draft_to_grammar(*task_slot[i]);
  }
  return Status::Ok();
}

bool Engine::Impl::build_batch(std::span<Slot* const> gen, std::vector<SlotEvent>& events, StepInfo& info) {
  batch.clear();
  for (Slot* sp : gen) {
    Slot& s = *sp;
    const int64_t pos = memory.seq_pos(s.seq);
    while (!s.step.drafted.empty() &&
           !memory.ensure_positions(s.seq, pos + 1 + static_cast<int64_t>(s.step.drafted.size())))
      s.step.drafted.pop_back();
    if (!memory.ensure_positions(s.seq, pos + 1)) {
      events.push_back(finish(s, FinishReason::kLength));
      continue;
    }
    s.step.row0 = batch.size();
    s.step.n_rows = 1 + static_cast<int64_t>(s.step.drafted.size());
    batch.add(s.seq, pos, s.last, true);
    for (size_t i = 0; i < s.step.drafted.size(); ++i)
      batch.add(s.seq, pos + 1 + static_cast<int64_t>(i), s.step.drafted[i], true);
  }
  for (Slot& s : slots) {
    if (s.state != SlotState::kPrompt) continue;
    s.step.n_rows = 0;
    const int64_t room = opt.n_batch - batch.size();
    if (room <= 0) continue;
    const int64_t n = std::min(room, static_cast<int64_t>(s.prompt.size()) - s.prompt_done);
    if (!memory.ensure_positions(s.seq, s.prompt_done + n)) {
      // The shared pool is full: wait for other slots to finish, unless nothing else runs.
      continue;
    }
    s.step.row0 = batch.size();
    s.step.n_rows = n;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = s.prompt_done + i;
      batch.add(s.seq, p, s.prompt[static_cast<size_t>(p)], p + 1 == static_cast<int64_t>(s.prompt.size()));
    }
    if (s.prefix.enabled) capture_checkpoints(s);
    info.prompt_rows += n;
  }
  if (batch.size() > 0) return true;
  // Only prompts that cannot get KV blocks: fail the one that waited longest rather than hang.
  for (Slot& s : slots)
    if (s.state == SlotState::kPrompt) {
      events.push_back(finish(s, FinishReason::kError, "the KV cache is full"));
      break;
    }
  return false;
}

Status Engine::Impl::run_trunk(std::span<Slot* const> gen, StepInfo& info) {
  Timer ft;
  MTP_RETURN_IF_ERROR(forward(model, batch, memory, out, pool));
  int64_t verify_rows = 0;
  for (Slot* sp : gen)
    if (sp->state == SlotState::kGenerate) verify_rows += static_cast<int64_t>(sp->step.drafted.size());
  policy.observe_trunk(batch.size() - info.prompt_rows - verify_rows, verify_rows, info.prompt_rows,
                       ft.seconds());
  info.trunk_rows = batch.size();
  return Status::Ok();
}

std::span<const float> Engine::Impl::hidden_rows(int64_t row0, int64_t n) const {
  const int64_t ne = model.config().n_embd;
  return std::span<const float>(out.hidden.data() + row0 * ne, static_cast<size_t>(n * ne));
}

Status Engine::Impl::accept_and_roll_back(Slot& s, std::vector<SlotEvent>& events, StepInfo& info) {
  ++info.generating;
  SlotEvent ev;
  ev.request_id = s.id;
  ev.slot = static_cast<int32_t>(&s - slots.data());
  const int64_t pos0 = memory.seq_pos(s.seq) - s.step.n_rows;
  const int64_t n_draft = s.step.n_rows - 1;
  // Sample row by row along the draft: row i's token follows row i; the first token that differs from the
  // draft (or ends the request) closes the round.
  int64_t used = 0;  // rows whose sampled token was emitted
  bool alive = true;
  int32_t y = 0;
  while (used < s.step.n_rows) {
    const std::span<const float> logits =
        out.logits_of(s.step.row0 + used).first(static_cast<size_t>(n_sample));
    // A sampled draft's row keeps it by the rejection test; the row after the draft (or after a greedy one)
    // draws as without drafting.
    const std::vector<int32_t>& chosen = s.spec.sampled.chosen;
    const bool sampled_draft = used < n_draft && used < static_cast<int64_t>(chosen.size()) &&
                               chosen[static_cast<size_t>(used)] == s.step.drafted[static_cast<size_t>(used)];
    Expected<int32_t> drawn = sampled_draft ? verify_sampled_draft(s, logits, used) : sample_token(s, logits);
    if (!drawn) {  // the slot's memory goes with it, so nothing to roll back
      SlotEvent fin = finish(s, FinishReason::kError, drawn.status().message());
      fin.tokens = std::move(ev.tokens);
      events.push_back(std::move(fin));
      return Status::Ok();
    }
    y = *drawn;
    ++used;
    alive = emit(s, y, logits, ev);
    if (!alive) break;
    if (used > n_draft || y != s.step.drafted[static_cast<size_t>(used - 1)]) break;
  }
  const int64_t accepted = std::min(used - 1, n_draft);
  if (n_draft > 0) {
    mark_sources(ev.tokens, accepted, n_draft);
    s.timings.spec.add_round(n_draft, accepted);
    s.spec.acceptance[static_cast<size_t>(info.head)].observe(n_draft, accepted);
    totals.by_head[static_cast<size_t>(info.head)].add_round(n_draft, accepted);
    policy.observe_round(n_draft, accepted);
    info.drafted += n_draft;
    info.accepted += accepted;
  }
  // Keep rows 0..accepted: [last, d1..d_accepted]; the last sampled token y is the new `last`. A request
  // that ends here keeps them too: its committed state may go into the prefix cache.
  const int64_t next_pos = pos0 + accepted + 1;
  const bool ending = !alive || context_full(next_pos);
  MTP_RETURN_IF_ERROR(memory.rollback(s.seq, accepted + 1));
  if (s.prefix.enabled) {
    const auto h = hidden_rows(s.step.row0 + accepted, 1);
    s.prefix.last_hidden.assign(h.begin(), h.end());
  }
  if (drafter && (!ending || s.prefix.enabled)) {
    std::vector<int32_t> kept{s.last};
    kept.insert(kept.end(), s.step.drafted.begin(), s.step.drafted.begin() + accepted);
    MTP_RETURN_IF_ERROR(drafter->observe(s.seq, pos0, kept, hidden_rows(s.step.row0, accepted + 1)));
  }
  if (report(s, ev, alive, next_pos, events)) return Status::Ok();
  s.last = y;
  events.push_back(std::move(ev));
  return Status::Ok();
}

Status Engine::Impl::advance_prompts(std::vector<SlotEvent>& events) {
  for (Slot& s : slots) {
    if (s.state != SlotState::kPrompt || s.step.n_rows == 0) continue;
    const int64_t pos0 = s.prompt_done;
    if (drafter)
      MTP_RETURN_IF_ERROR(drafter->observe(s.seq, pos0,
                                           std::span<const int32_t>(s.prompt).subspan(
                                               static_cast<size_t>(pos0), static_cast<size_t>(s.step.n_rows)),
                                           hidden_rows(s.step.row0, s.step.n_rows)));
    s.prompt_done += s.step.n_rows;
    totals.prompt_tokens += static_cast<uint64_t>(s.step.n_rows);
    if (s.prefix.enabled) {
      const auto h = hidden_rows(s.step.row0 + s.step.n_rows - 1, 1);
      s.prefix.last_hidden.assign(h.begin(), h.end());
      for (const auto& [index, row] : s.prefix.captured) {
        const auto hc = hidden_rows(row, 1);
        s.prefix.checkpoints[index].hidden.assign(hc.begin(), hc.end());
      }
      s.prefix.captured.clear();
    }
    if (s.prompt_done < static_cast<int64_t>(s.prompt.size())) continue;
    start_generating(s, out.logits_of(s.step.row0 + s.step.n_rows - 1).first(static_cast<size_t>(n_sample)),
                     events);
  }
  return Status::Ok();
}

}  // namespace mtp
