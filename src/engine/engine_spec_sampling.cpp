// Sampled drafts and their rejection test (speculative::DraftParams::sample, docs/running.md).
//
// Where a request samples (temperature > 0), the head's argmax draft d is kept only when the target's own
// draw equals it, with probability p(d). Instead, each draft position's token is drawn from the head's
// distribution q (the request's top-k, top-p, min-p and temperature over the head's logits; no bias or
// penalties: any q keeps the target exact, a close one keeps more drafts), and the verify keeps d with
// probability min(1, p(d) / q(d)), else draws from max(0, p - q) normalised, p being what the request's
// sampler draws from at that row. Every emitted token then has exactly the target's distribution (the
// speculative sampling of Leviathan et al. and Chen et al., 2023); draft positions are kept with probability
// sum_x min(p(x), q(x)). The draws come from the request's generator in another order than without drafting,
// so a seed no longer gives the same text as `--spec none`.
#include <algorithm>

#include "base/check.h"
#include "engine_impl.h"

namespace mtp {
namespace {

// The request's sampling settings for the head's q: its truncation and temperature, on a generator of its
// own.
SamplerOptions draft_sampling(SamplerOptions o) {
  o.logit_bias.clear();
  o.repeat_penalty = 1.0f;
  o.presence_penalty = o.frequency_penalty = 0.0f;
  o.seed ^= 0x6a09e667f3bcc909ull;
  return o;
}

class SampledDraftChooser final : public speculative::DraftChooser {
 public:
  explicit SampledDraftChooser(Slot& slot) : slot_(slot), sampler_(draft_sampling(slot.opt.sampling)) {}

  int32_t choose(std::span<const float> logits, std::span<const int32_t> ids, size_t position) override {
    SlotDraftSampling& d = slot_.spec.sampled;
    if (d.ids.size() <= position) {
      d.ids.resize(position + 1);
      d.probs.resize(position + 1);
    }
    std::vector<int32_t>& cand = d.ids[position];
    sampler_.distribution(logits, {}, cand, d.probs[position]);  // indices into logits
    const int32_t index = sampler_.draw_weighted(cand, d.probs[position]);
    if (!ids.empty())
      for (int32_t& c : cand) c = ids[static_cast<size_t>(c)];  // the head's subset: token ids
    d.chosen.resize(position);
    d.chosen.push_back(ids.empty() ? index : ids[static_cast<size_t>(index)]);
    return index;
  }

 private:
  Slot& slot_;
  Sampler sampler_;
};

}  // namespace

std::unique_ptr<speculative::DraftChooser> Engine::Impl::make_draft_chooser(Slot& s) const {
  if (!drafter || !s.spec.params.sample || s.spec.params.n_max <= 0 || s.sampler.greedy() ||
      s.grammar.matcher)
    return nullptr;
  return std::make_unique<SampledDraftChooser>(s);
}

Expected<int32_t> Engine::Impl::verify_sampled_draft(Slot& s, std::span<const float> logits, int64_t i) {
  SlotDraftSampling& d = s.spec.sampled;
  MTP_CHECK(i < static_cast<int64_t>(d.chosen.size()) && i < static_cast<int64_t>(d.ids.size()),
            "draft position ", i, " was not sampled");
  const int32_t token = s.step.drafted[static_cast<size_t>(i)];
  const std::vector<int32_t>& q_ids = d.ids[static_cast<size_t>(i)];
  const std::vector<double>& q = d.probs[static_cast<size_t>(i)];
  s.sampler.distribution(logits, s.generated, d.p_ids, d.p);
  // The head's ids run over the model's whole vocabulary; the target samples its first n_sample.
  const size_t n_ids = std::max(logits.size(), static_cast<size_t>(model.config().n_vocab));
  if (q_dense.size() < n_ids) q_dense.assign(n_ids, 0.0);
  for (size_t j = 0; j < q_ids.size(); ++j) q_dense[static_cast<size_t>(q_ids[j])] = q[j];
  double p_token = 0;
  for (size_t j = 0; j < d.p_ids.size(); ++j)
    if (d.p_ids[j] == token) p_token = d.p[j];
  const double q_token = q_dense[static_cast<size_t>(token)];
  int32_t y = token;
  // Keep with probability min(1, p/q): u * q < p for u uniform in [0, 1).
  if (!(q_token > 0 && s.sampler.uniform() * q_token < p_token)) {
    d.residual.resize(d.p.size());
    double mass = 0;
    for (size_t j = 0; j < d.p.size(); ++j)
      mass += d.residual[j] = std::max(0.0, d.p[j] - q_dense[static_cast<size_t>(d.p_ids[j])]);
    // No mass beyond q means p == q, which keeps every draft; only rounding gets here.
    y = s.sampler.draw_weighted(
        d.p_ids, mass > 0 ? std::span<const double>(d.residual) : std::span<const double>(d.p));
  }
  for (int32_t id : q_ids) q_dense[static_cast<size_t>(id)] = 0.0;
  return y;
}

}  // namespace mtp
