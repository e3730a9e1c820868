#include "grammar/matcher.h"

#include <algorithm>

#include "base/check.h"

namespace mtp::grammar {

Expected<Matcher> Matcher::create(std::shared_ptr<const Grammar> grammar, MatcherLimits limits) {
  Matcher m(std::move(grammar), limits);
  std::vector<int32_t> stacks;
  size_t steps = 0;
  for (uint32_t alt : m.g_->rule_alts[m.g_->root]) {
    const int32_t s = m.g_->elems[alt].kind == ElemKind::kEnd ? kEmptyStack : m.push(alt, kEmptyStack);
    MTP_RETURN_IF_ERROR(m.expand(s, stacks, steps));
  }
  auto start = m.intern_state(std::move(stacks));
  if (!start) return start.status();
  m.start_ = *start;
  return m;
}

int32_t Matcher::push(uint32_t pos, int32_t parent) {
  const uint64_t key = (uint64_t{pos} << 32) | static_cast<uint32_t>(parent + 1);
  auto [it, inserted] = node_ids_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({pos, parent});
  return it->second;
}

// Expands rule references at the top of `stack` until every resulting stack has a character class on top
// (or is empty), appending them to `out`. Terminates because the grammar has no left recursion.
Status Matcher::expand(int32_t stack, std::vector<int32_t>& out, size_t& steps) {
  if (++steps > limits_.max_expand_steps)
    return {StatusCode::kResourceExhausted,
            str_cat("grammar step expands more than ", limits_.max_expand_steps, " stacks (too ambiguous)")};
  if (++work_ > limits_.max_work)
    return {StatusCode::kResourceExhausted,
            str_cat("grammar work for one token exceeds ", limits_.max_work, " stack expansions")};
  if (stack == kEmptyStack) {
    out.push_back(stack);
    return Status::Ok();
  }
  const Node node = nodes_[static_cast<size_t>(stack)];
  const Element& e = g_->elems[node.pos];
  if (e.kind == ElemKind::kChars) {
    out.push_back(stack);
    return Status::Ok();
  }
  const int32_t cont =
      g_->elems[node.pos + 1].kind == ElemKind::kEnd ? node.parent : push(node.pos + 1, node.parent);
  for (uint32_t alt : g_->rule_alts[e.arg]) {
    const int32_t next = g_->elems[alt].kind == ElemKind::kEnd ? cont : push(alt, cont);
    MTP_RETURN_IF_ERROR(expand(next, out, steps));
  }
  return Status::Ok();
}

Expected<std::vector<int32_t>> Matcher::advance_set(int32_t set, uint32_t cp) {
  std::vector<int32_t> out;
  size_t steps = 0;
  for (int32_t stack : sets_[static_cast<size_t>(set)]) {
    if (stack == kEmptyStack) continue;
    const Node node = nodes_[static_cast<size_t>(stack)];
    if (!g_->char_sets[g_->elems[node.pos].arg].contains(cp)) continue;
    const int32_t cont =
        g_->elems[node.pos + 1].kind == ElemKind::kEnd ? node.parent : push(node.pos + 1, node.parent);
    MTP_RETURN_IF_ERROR(expand(cont, out, steps));
  }
  return out;
}

bool Matcher::any_top_intersects(int32_t set, uint32_t lo, uint32_t hi) const {
  for (int32_t stack : sets_[static_cast<size_t>(set)])
    if (stack != kEmptyStack &&
        g_->char_sets[g_->elems[nodes_[static_cast<size_t>(stack)].pos].arg].intersects(lo, hi))
      return true;
  return false;
}

Expected<Matcher::StateId> Matcher::intern_state(std::vector<int32_t> stacks) {
  if (stacks.empty()) return kReject;
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > limits_.max_stacks)
    return Status(StatusCode::kResourceExhausted,
                  str_cat("grammar state holds ", stacks.size(), " stacks; at most ", limits_.max_stacks,
                          " are allowed (too ambiguous)"));
  auto [it, inserted] = set_ids_.emplace(std::move(stacks), static_cast<int32_t>(sets_.size()));
  if (inserted) sets_.push_back(it->first);
  return intern_state_of_set(it->second, 0, 0, 0);
}

Expected<Matcher::StateId> Matcher::intern_state_of_set(int32_t set, uint32_t partial, uint8_t remaining,
                                                        uint8_t length) {
  const std::array<uint32_t, 3> key{static_cast<uint32_t>(set), partial,
                                    uint32_t{remaining} | uint32_t{length} << 8};
  if (auto it = state_ids_.find(key); it != state_ids_.end()) return it->second;
  if (states_.size() >= limits_.max_states)
    return Status(StatusCode::kResourceExhausted,
                  str_cat("grammar matcher reached its limit of ", limits_.max_states, " states"));
  const auto id = static_cast<StateId>(states_.size());
  states_.push_back(State{set, partial, remaining, length, nullptr});
  state_ids_.emplace(key, id);
  return id;
}

// The smallest code point a UTF-8 sequence of each length may encode (shorter forms are overlong, invalid).
constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};

Expected<Matcher::StateId> Matcher::complete_char(int32_t set, uint32_t cp, uint8_t length) {
  if (cp < kMinOfLength[length] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > kMaxCodePoint) return kReject;
  auto stacks = advance_set(set, cp);
  if (!stacks) return stacks.status();
  return intern_state(std::move(*stacks));
}

// One byte from state s: ASCII matches a code point at once; a UTF-8 lead byte starts a character, kept only
// while some stack's class holds a code point that the bits read so far can still become.
Expected<Matcher::StateId> Matcher::next_state(StateId s, uint8_t byte) {
  const State& st = states_[static_cast<size_t>(s)];
  const int32_t set = st.set;
  uint32_t partial = st.partial;
  uint8_t remaining = st.remaining, length = st.length;
  if (remaining == 0) {
    if (byte < 0x80) return complete_char(set, byte, 1);
    if (byte >= 0xC2 && byte <= 0xDF) {
      partial = byte & 0x1F, remaining = length = 2;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      partial = byte & 0x0F, remaining = length = 3;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      partial = byte & 0x07, remaining = length = 4;
    } else {
      return kReject;
    }
    --remaining;
  } else {
    if ((byte & 0xC0) != 0x80) return kReject;
    partial = (partial << 6) | (byte & 0x3F);
    if (--remaining == 0) return complete_char(set, partial, length);
  }
  const uint32_t lo = std::max(partial << (6 * remaining), kMinOfLength[length]);
  const uint32_t hi = std::min((partial << (6 * remaining)) | ((1u << (6 * remaining)) - 1), kMaxCodePoint);
  if (lo > hi || !any_top_intersects(set, lo, hi)) return kReject;
  return intern_state_of_set(set, partial, remaining, length);
}

Expected<Matcher::StateId> Matcher::compute_step(StateId s, uint8_t byte) {
  MTP_CHECK(s >= 0 && static_cast<size_t>(s) < states_.size(), "state ", s);
  auto next = next_state(s, byte);
  if (!next) return next.status();
  State& st = states_[static_cast<size_t>(s)];
  if (!st.next) {
    st.next = std::make_unique<std::array<StateId, 256>>();
    st.next->fill(kUnknown);
  }
  (*st.next)[byte] = *next;
  return *next;
}

Expected<Matcher::StateId> Matcher::advance(StateId s, std::string_view bytes) {
  reset_work();
  for (char c : bytes) {
    if (s == kReject) return kReject;
    auto next = step(s, static_cast<uint8_t>(c));
    if (!next) return next.status();
    s = *next;
  }
  return s;
}

bool Matcher::is_complete(StateId s) const {
  if (s == kReject) return false;
  const State& st = states_[static_cast<size_t>(s)];
  const auto& set = sets_[static_cast<size_t>(st.set)];
  return st.remaining == 0 && !set.empty() && set.front() == kEmptyStack;
}

bool Matcher::can_continue(StateId s) const {
  if (s == kReject) return false;
  const auto& set = sets_[static_cast<size_t>(states_[static_cast<size_t>(s)].set)];
  return !set.empty() && set.back() != kEmptyStack;
}

}  // namespace mtp::grammar
