// A pushdown matcher for a Grammar (grammar.h) that reads bytes, with UTF-8 decoding for the character
// classes, built lazily into a deterministic automaton so that repeated work is table lookups.
//
// A stack is a chain of positions in Grammar::elems (the top is the next element to match, always a kChars
// element after expansion); a state is the set of every stack the bytes so far allow, plus a partly read
// UTF-8 character. Stacks are hash-consed (a node per (position, parent)), so equal stacks are one id and
// stack sets are sorted id vectors, interned too. Each state keeps a 256-entry table of the state each byte
// leads to, filled on first use: the token mask (token_mask.h) then walks a vocabulary trie with one lookup a
// byte.
//
// Work is bounded: a step that expands more than `max_expand_steps` stacks or yields more than `max_stacks`,
// an advance() or a token mask that expands more than `max_work` stacks in all (many new states, each
// within the step limit), or a state space beyond `max_states`, is a kResourceExhausted error, never a
// stall. States are never
// freed while the matcher lives, so a StateId stays valid: rolling back is going back to an earlier id.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace mtp::grammar {

struct MatcherLimits {
  size_t max_stacks = 4096;           // stacks in one state
  size_t max_expand_steps = 1 << 16;  // stack expansions in one step
  size_t max_states = 1 << 15;
  size_t max_work = 1 << 22;  // stack expansions in one advance() or one token mask, all steps together //
                              // states (each holds a 1 KiB table once stepped from)
};

class Matcher {
 public:
  using StateId = int32_t;
  static constexpr StateId kReject = -1;

  static Expected<Matcher> create(std::shared_ptr<const Grammar> grammar, MatcherLimits limits = {});

  StateId start() const { return start_; }
  // The state after `byte`, or kReject when no string of the grammar continues that way.
  Expected<StateId> step(StateId s, uint8_t byte) {
    const StateId cached = states_[s].next ? (*states_[s].next)[byte] : kUnknown;
    return cached != kUnknown ? Expected<StateId>(cached) : compute_step(s, byte);
  }
  // The state after all of `bytes` (kReject as soon as one is refused).
  Expected<StateId> advance(StateId s, std::string_view bytes);
  // A whole string of the grammar ends here (no character half read).
  bool is_complete(StateId s) const;
  // Some byte may follow.
  bool can_continue(StateId s) const;
  size_t state_count() const { return states_.size(); }
  // Starts a new unit of work for MatcherLimits::max_work (advance() starts its own; the token mask calls
  // it).
  void reset_work() { work_ = 0; }

 private:
  static constexpr StateId kUnknown = -2;
  static constexpr int32_t kEmptyStack = -1;  // the stack with nothing left to match
  struct Node {
    uint32_t pos;
    int32_t parent;
  };
  struct State {
    int32_t set;            // index into sets_
    uint32_t partial = 0;   // the bits of a UTF-8 character read so far
    uint8_t remaining = 0;  // its continuation bytes still to come
    uint8_t length = 0;     // its whole length in bytes (2 to 4), for the overlong check
    std::unique_ptr<std::array<StateId, 256>> next;
  };

  Matcher(std::shared_ptr<const Grammar> g, MatcherLimits limits) : g_(std::move(g)), limits_(limits) {}
  int32_t push(uint32_t pos, int32_t parent);
  Status expand(int32_t stack, std::vector<int32_t>& out, size_t& steps);
  // The stacks after matching code point `cp` from set `set` (empty when none can).
  Expected<std::vector<int32_t>> advance_set(int32_t set, uint32_t cp);
  bool any_top_intersects(int32_t set, uint32_t lo, uint32_t hi) const;
  Expected<StateId> intern_state(std::vector<int32_t> stacks);
  Expected<StateId> intern_state_of_set(int32_t set, uint32_t partial, uint8_t remaining, uint8_t length);
  Expected<StateId> complete_char(int32_t set, uint32_t cp, uint8_t length);
  Expected<StateId> compute_step(StateId s, uint8_t byte);
  Expected<StateId> next_state(StateId s, uint8_t byte);

  std::shared_ptr<const Grammar> g_;
  MatcherLimits limits_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<std::vector<int32_t>> sets_;
  std::map<std::vector<int32_t>, int32_t> set_ids_;
  std::vector<State> states_;
  std::map<std::array<uint32_t, 3>, StateId> state_ids_;
  StateId start_ = kReject;
  size_t work_ = 0;
};

}  // namespace mtp::grammar
