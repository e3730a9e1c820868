// Structured output in the engine: a request with a grammar samples every row (its first token, each verify
// row of a draft) from logits whose refused tokens are at -infinity. Verification is sequential, so the
// matcher's state at row i is the state after the tokens emitted before it: a rejected draft never advanced
// it, and the output is the same with and without drafting. The draft head is masked the same way: the
// drafter gets a DraftConstraint that advances a copy of the slot's state along the draft, and the masks it
// computes on that path are the ones the verify rows use (each state's mask is computed once a step). A
// drafter that ignores the constraint has its draft cut at the first token the grammar refuses.
//
// A lazy grammar (RequestOptions::grammar_trigger) leaves the output free until its trigger appears; the
// token that completes the trigger starts the grammar, which must accept the bytes from the trigger's first
// one to the token's end, and every row after it is masked as above. Its watch moves with the emitted tokens
// like the matcher's state (and, for a draft, with a copy of both), so drafting leaves the output as it is.
#include <cmath>
#include <limits>

#include "base/check.h"
#include "engine_impl.h"
#include "tokenizer/byte_level.h"

namespace mtp {
namespace {

// The bytes each token stands for: normal tokens out of GPT-2's byte alphabet, user-defined ones as their
// text; control, unknown and unused tokens get none (a grammar never allows them; end tokens are handled
// apart).
std::vector<std::string> vocabulary_bytes(const Vocab& vocab, int64_t n_sample) {
  std::vector<std::string> out(static_cast<size_t>(n_sample));
  for (size_t id = 0; id < out.size() && id < vocab.tokens.size(); ++id) {
    const auto type =
        vocab.token_types.empty() ? TokenType::kNormal : static_cast<TokenType>(vocab.token_types[id]);
    if (type == TokenType::kNormal || type == TokenType::kUndefined || type == TokenType::kByte)
      out[id] = byte_level_to_bytes(vocab.tokens[id]).value_or("");
    else if (type == TokenType::kUserDefined)
      out[id] = vocab.tokens[id];
  }
  return out;
}

using Phase = TriggerWatch::Phase;

// Advances the watch over one more token's bytes. When the trigger completes in them, returns the output's
// bytes from the trigger's first one to the token's end (what the grammar must accept from its start).
std::optional<std::string> watch_token(const RequestOptions::GrammarTrigger& t, TriggerWatch& w,
                                       std::string_view bytes) {
  std::string text = w.tail;
  text += bytes;
  if (w.phase == Phase::kAfter) {
    const size_t at = text.find(t.after);
    if (at == std::string::npos) {
      w.tail = text.substr(text.size() - std::min(text.size(), t.after.size() - 1));
      return std::nullopt;
    }
    w.phase = Phase::kTrigger;
    text.erase(0, at + t.after.size());
  }
  const size_t at = text.find(t.text);
  if (at == std::string::npos) {
    w.tail = text.substr(text.size() - std::min(text.size(), t.text.size() - 1));
    return std::nullopt;
  }
  w.phase = Phase::kFired;
  w.tail.clear();
  return text.substr(at);
}

}  // namespace

// Masks a draft's positions from a copy of the slot's grammar state, advanced along the drafted tokens; the
// slot's own state moves only when tokens are emitted.
class Engine::Impl::GrammarDraftConstraint final : public speculative::DraftConstraint {
 public:
  GrammarDraftConstraint(Impl& engine, Slot& slot) : engine_(engine), slot_(slot) {}
  void restart() {
    state_ = slot_.grammar.state;
    watch_ = slot_.grammar.watch;
    consumed_ = 0;
    refused_ = false;
  }
  bool allows_all(std::span<const int32_t> drafted) override {
    return advance(drafted) && watch_.phase != Phase::kFired;
  }
  std::span<const uint8_t> allowed(std::span<const int32_t> drafted) override {
    if (!advance(drafted)) return {};
    if (watch_.phase != Phase::kFired) return engine_.all_tokens;
    // A matcher limit hit here comes back as the request's error when its verify row is sampled.
    Expected<std::span<const uint8_t>> mask = engine_.grammar_mask(slot_, state_);
    return mask.ok() ? *mask : std::span<const uint8_t>();
  }

 private:
  // Moves the copy along the draft's new tokens; false once one of them is refused.
  bool advance(std::span<const int32_t> drafted) {
    MTP_CHECK(drafted.size() >= consumed_, "a draft only grows between allowed() calls");
    for (; consumed_ < drafted.size() && !refused_; ++consumed_) {
      const int32_t id = drafted[consumed_];
      // Nothing follows an end token; an id outside the sampled vocabulary was never allowed.
      auto next = engine_.is_end(id, slot_) || id < 0 || id >= engine_.n_sample
                      ? Expected<grammar::Matcher::StateId>(grammar::Matcher::kReject)
                      : engine_.next_grammar_state(slot_, watch_, state_, id);
      refused_ = !next.ok() || *next == grammar::Matcher::kReject;
      if (!refused_) state_ = *next;
    }
    return !refused_;
  }

  Impl& engine_;
  Slot& slot_;
  grammar::Matcher::StateId state_ = grammar::Matcher::kReject;
  TriggerWatch watch_;
  size_t consumed_ = 0;  // drafted tokens state_ and watch_ are after
  bool refused_ = false;
};

void Engine::Impl::prepare_grammar_vocab() {
  if (token_trie) return;
  token_bytes = vocabulary_bytes(model.vocab(), n_sample);
  token_trie.emplace(token_bytes);
  all_tokens.assign(static_cast<size_t>(n_sample), 1);
  ++grammar_vocab_builds;
}

Status Engine::Impl::start_grammar(Slot& s) {
  if (!s.opt.grammar) return Status::Ok();
  if (model.vocab().tokens.empty()) return invalid_argument("a grammar needs the model's vocabulary");
  prepare_grammar_vocab();
  MTP_ASSIGN_OR_RETURN(grammar::Matcher matcher, grammar::Matcher::create(s.opt.grammar));
  s.grammar.state = matcher.start();
  s.grammar.matcher.emplace(std::move(matcher));
  if (const auto& t = s.opt.grammar_trigger) {
    if (t->text.empty()) return invalid_argument("a grammar trigger must not be empty");
    s.grammar.watch.phase = t->after.empty() ? Phase::kTrigger : Phase::kAfter;
  }
  return Status::Ok();
}

Expected<grammar::Matcher::StateId> Engine::Impl::next_grammar_state(Slot& s, TriggerWatch& watch,
                                                                     grammar::Matcher::StateId state,
                                                                     int32_t id) {
  const std::string& bytes = token_bytes[static_cast<size_t>(id)];
  if (watch.phase == Phase::kFired) return s.grammar.matcher->advance(state, bytes);
  const std::optional<std::string> from_trigger = watch_token(*s.opt.grammar_trigger, watch, bytes);
  if (!from_trigger) return state;
  return s.grammar.matcher->advance(s.grammar.matcher->start(), *from_trigger);
}

Expected<std::span<const uint8_t>> Engine::Impl::grammar_mask(Slot& s, grammar::Matcher::StateId state) {
  SlotGrammar& g = s.grammar;
  for (size_t i = 0; i < g.n_masks; ++i)
    if (g.masks[i].state == state) return std::span<const uint8_t>(g.masks[i].allowed);
  // A step needs at most a draft's positions and the row after it; past that (never in practice), start over.
  if (g.n_masks > static_cast<size_t>(speculative::kMaxDraftTokens) + 1) g.n_masks = 0;
  if (g.n_masks == g.masks.size()) g.masks.emplace_back();
  SlotGrammar::StateMask& m = g.masks[g.n_masks];
  m.state = grammar::Matcher::kReject;  // until filled: a failed fill leaves no entry behind
  MTP_RETURN_IF_ERROR(grammar::fill_token_mask(*g.matcher, state, *token_trie, m.allowed, &g.mask_cache));
  // End tokens end the output only where the grammar may end; with ignore_eos they would be text, which no
  // grammar rule holds.
  const bool may_end = g.matcher->is_complete(state) && !s.opt.ignore_eos;
  for (int32_t id : opt.end_tokens)
    if (id >= 0 && id < n_sample) m.allowed[static_cast<size_t>(id)] = may_end;
  m.state = state;
  ++g.n_masks;
  return std::span<const uint8_t>(m.allowed);
}

speculative::DraftConstraint* Engine::Impl::draft_constraint(Slot& s) {
  if (!s.grammar.matcher) return nullptr;
  if (!s.grammar.draft) s.grammar.draft = std::make_unique<GrammarDraftConstraint>(*this, s);
  auto* constraint = static_cast<GrammarDraftConstraint*>(s.grammar.draft.get());
  constraint->restart();
  return constraint;
}

Expected<int32_t> Engine::Impl::sample_before_trigger(Slot& s, std::span<const float> logits) {
  auto allowed = [&](int32_t id) {
    if (is_end(id, s)) return true;
    TriggerWatch watch = s.grammar.watch;
    auto next = next_grammar_state(s, watch, s.grammar.state, id);
    return next.ok() && *next != grammar::Matcher::kReject;
  };
  const int32_t id = s.sampler.sample(logits, s.generated);
  if (allowed(id)) return id;
  // Rare (the output starts the trigger and goes on as the grammar does not), so the whole vocabulary is
  // checked only then.
  s.grammar.masked.assign(logits.begin(), logits.end());
  for (int32_t other = 0; other < static_cast<int32_t>(s.grammar.masked.size()); ++other)
    if (!allowed(other))
      s.grammar.masked[static_cast<size_t>(other)] = -std::numeric_limits<float>::infinity();
  const int32_t again = s.sampler.sample(s.grammar.masked, s.generated);
  if (!allowed(again)) return invalid_argument("every token here fires the grammar's trigger wrongly");
  return again;
}

Expected<int32_t> Engine::Impl::sample_token(Slot& s, std::span<const float> logits) {
  if (opt.edit_logits) {
    s.grammar.edited.assign(logits.begin(), logits.end());
    opt.edit_logits(static_cast<int64_t>(s.generated.size()), s.grammar.edited);
    logits = s.grammar.edited;
  }
  if (!s.grammar.matcher) return s.sampler.sample(logits, s.generated);
  if (s.grammar.watch.phase != Phase::kFired) return sample_before_trigger(s, logits);
  MTP_ASSIGN_OR_RETURN(const std::span<const uint8_t> mask, grammar_mask(s, s.grammar.state));
  s.grammar.masked.assign(logits.begin(), logits.end());
  bool any = false;
  for (size_t id = 0; id < s.grammar.masked.size(); ++id) {
    if (!mask[id]) s.grammar.masked[id] = -std::numeric_limits<float>::infinity();
    any = any || mask[id];
  }
  if (!any) return invalid_argument("the grammar allows no token of this vocabulary here");
  const int32_t id = s.sampler.sample(s.grammar.masked, s.generated);
  // A sampler may still land on a refused token when every allowed one is cut (a logit_bias of -infinity).
  if (!mask[static_cast<size_t>(id)])
    return invalid_argument("every token the grammar allows here is excluded by logit_bias");
  return id;
}

void Engine::Impl::advance_grammar(Slot& s, int32_t id) {
  if (!s.grammar.matcher) return;
  auto next = next_grammar_state(s, s.grammar.watch, s.grammar.state, id);
  // The mask was computed from this state with this matcher, so the step is cached and allowed.
  MTP_CHECK(next.ok() && *next != grammar::Matcher::kReject, "token ", id,
            " was sampled against the grammar");
  s.grammar.state = *next;
}

void Engine::Impl::trim_draft_to_grammar(Slot& s) {
  if (!s.grammar.matcher) return;
  grammar::Matcher::StateId state = s.grammar.state;
  TriggerWatch watch = s.grammar.watch;
  size_t keep = 0;
  for (; keep < s.step.drafted.size(); ++keep) {
    const int32_t id = s.step.drafted[keep];
    if (id < 0 || static_cast<size_t>(id) >= token_bytes.size()) break;
    const bool fired = watch.phase == Phase::kFired;
    if (is_end(id, s)) {  // the end of the output: allowed where the grammar may end, and nothing after it
      keep += !fired || s.grammar.matcher->is_complete(state) ? 1 : 0;
      break;
    }
    // Tokens without bytes (control ones) are free text before the trigger, never in the grammar's.
    if (fired && token_bytes[static_cast<size_t>(id)].empty()) break;
    auto next = next_grammar_state(s, watch, state, id);  // an error here comes back when the row is sampled
    if (!next.ok() || *next == grammar::Matcher::kReject) break;
    state = *next;
  }
  s.step.drafted.resize(keep);
}

bool Engine::Impl::grammar_finished(const Slot& s) const {
  return s.grammar.matcher && s.grammar.watch.phase == Phase::kFired &&
         !s.grammar.matcher->can_continue(s.grammar.state);
}

}  // namespace mtp
