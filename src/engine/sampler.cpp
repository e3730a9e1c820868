#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "base/check.h"
#include "kernels/vec.h"

namespace mtp {

Status check_sampler_options(const SamplerOptions& o, int64_t n_vocab) {
  namespace r = sampling_range;
  MTP_RETURN_IF_ERROR(check_in_range("temperature", o.temperature, r::kTemperature));
  MTP_RETURN_IF_ERROR(check_in_range("top_p", o.top_p, r::kTopP));
  MTP_RETURN_IF_ERROR(check_in_range("min_p", o.min_p, r::kMinP));
  MTP_RETURN_IF_ERROR(check_in_range("presence_penalty", o.presence_penalty, r::kPresencePenalty));
  MTP_RETURN_IF_ERROR(check_in_range("frequency_penalty", o.frequency_penalty, r::kFrequencyPenalty));
  MTP_RETURN_IF_ERROR(check_in_range("repeat_penalty", o.repeat_penalty, r::kRepeatPenalty));
  if (o.repeat_last_n < r::kRepeatLastNMin)
    return invalid_argument("repeat_last_n must be >= ", r::kRepeatLastNMin, ", got ", o.repeat_last_n);
  for (const auto& [id, bias] : o.logit_bias) {
    if (id < 0 || (n_vocab > 0 && id >= n_vocab))
      return invalid_argument("logit_bias token id ", id, " is outside [0, ", n_vocab, ")");
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
      return invalid_argument("logit_bias of token ", id, " must be a number or -infinity");
  }
  return Status::Ok();
}

int32_t Sampler::argmax(std::span<const float> logits) {
  MTP_CHECK(!logits.empty());
  return static_cast<int32_t>(kernels::argmax(logits.data(), static_cast<int64_t>(logits.size())));
}

double Sampler::next_uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

void Sampler::adjust(std::span<const float> logits, std::span<const int32_t> generated,
                     std::vector<float>& out) const {
  out.assign(logits.begin(), logits.end());
  const int64_t n = static_cast<int64_t>(out.size());
  for (const auto& [id, bias] : opt_.logit_bias) {
    MTP_CHECK(id >= 0 && id < n, "logit_bias token id ", id, " outside the vocabulary");
    out[static_cast<size_t>(id)] += bias;
  }
  if (!opt_.penalizes()) return;
  const size_t window = opt_.repeat_last_n < 0
                            ? generated.size()
                            : std::min(generated.size(), static_cast<size_t>(opt_.repeat_last_n));
  std::span<const int32_t> recent = generated.last(window);
  // Each distinct token of the window once, with its count (windows are short: a sort, no hash map).
  std::vector<int32_t> ids(recent.begin(), recent.end());
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    const int32_t id = ids[i];
    MTP_CHECK(id >= 0 && id < n);
    float& l = out[static_cast<size_t>(id)];
    l = l <= 0.0f ? l * opt_.repeat_penalty : l / opt_.repeat_penalty;
    l -= static_cast<float>(j - i) * opt_.frequency_penalty + opt_.presence_penalty;
    i = j;
  }
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> generated) {
  if (!opt_.modifies_logits()) return draw(logits);
  static thread_local std::vector<float> adjusted;
  adjust(logits, generated, adjusted);
  return draw(adjusted);
}

int32_t Sampler::draw(std::span<const float> logits) {
  if (greedy()) return argmax(logits);
  std::vector<int32_t> ids;
  std::vector<double> weights;
  candidates(logits, ids, weights);
  return draw_weighted(ids, weights);  // sums the weights in the order candidates() did
}

double Sampler::candidates(std::span<const float> logits, std::vector<int32_t>& ids,
                           std::vector<double>& weights) const {
  const int64_t n = static_cast<int64_t>(logits.size());
  MTP_CHECK(n > 0 && !greedy());

  // Candidates by descending logit; ties by lower id so the order is total.
  ids.resize(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t keep = n;
  if (opt_.top_k > 0 && opt_.top_k < n) {
    keep = opt_.top_k;
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  } else {
    std::sort(ids.begin(), ids.end(), by_logit);
  }

  // Top-p on the softmax of the raw logits: the smallest prefix whose mass reaches top_p.
  if (opt_.top_p < 1.0f) {
    const double max = logits[ids[0]];
    std::vector<double> e(static_cast<size_t>(keep));
    double sum = 0;
    for (int64_t i = 0; i < keep; ++i) sum += e[i] = std::exp(static_cast<double>(logits[ids[i]]) - max);
    double cum = 0;
    for (int64_t i = 0; i < keep; ++i) {
      cum += e[i] / sum;
      if (cum >= opt_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }

  // Min-p: p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p).
  if (opt_.min_p > 0.0f) {
    const double cut = static_cast<double>(logits[ids[0]]) + std::log(static_cast<double>(opt_.min_p));
    int64_t i = 1;
    while (i < keep && static_cast<double>(logits[ids[i]]) >= cut) ++i;
    keep = i;
  }

  // Temperature: unnormalised softmax weights over the kept candidates.
  ids.resize(static_cast<size_t>(keep));
  const double t = opt_.temperature;
  const double max = logits[ids[0]] / t;
  weights.resize(static_cast<size_t>(keep));
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i)
    sum += weights[i] = std::exp(static_cast<double>(logits[ids[i]]) / t - max);
  return sum;
}

void Sampler::distribution(std::span<const float> logits, std::span<const int32_t> generated,
                           std::vector<int32_t>& ids, std::vector<double>& probs) const {
  static thread_local std::vector<float> adjusted;
  std::span<const float> l = logits;
  if (opt_.modifies_logits()) {
    adjust(logits, generated, adjusted);
    l = adjusted;
  }
  if (greedy()) {
    ids.assign(1, argmax(l));
    probs.assign(1, 1.0);
    return;
  }
  const double sum = candidates(l, ids, probs);
  for (double& p : probs) p /= sum;
}

int32_t Sampler::draw_weighted(std::span<const int32_t> ids, std::span<const double> weights) {
  MTP_CHECK(!ids.empty() && ids.size() == weights.size());
  double sum = 0;
  for (double w : weights) sum += w;
  const double r = next_uniform() * sum;
  double cum = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    cum += weights[i];
    if (r < cum) return ids[i];
  }
  return ids.back();
}

}  // namespace mtp
