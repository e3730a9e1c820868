// The two hot loops of the reference quantizers, evaluated for several trial scales at once: the IQ4
// candidate sums (IQ4_NL, IQ4_XS) and the trial steps of the asymmetric search (Q4_K, Q5_K). ggml runs the
// trials one after another; here lane k of a vector runs trial k. Each lane performs the same IEEE
// single-precision operations in the same order as the scalar code (SSE2 mulps/addps round exactly like
// mulss/addss, and there is no FMA), so the results are bit-identical. SSE2 is part of the x86-64 baseline:
// no -march flag is involved. Other targets use the scalar loops, as does a build with -DMTP_QUANT_SCALAR
// (which is how the fallback is tested).
#include <algorithm>
#include <cstring>

#include "scale_search.h"

#if defined(__SSE2__) && !defined(MTP_QUANT_SCALAR)
#include <emmintrin.h>
#endif

namespace mtp::quant_detail {

void iq4_candidate_sums_scalar(const float* x, const float* w, const float* inverse_scales, float* sumqx,
                               float* sumq2) {
  for (int c = 0; c < kIq4Candidates; ++c) sumqx[c] = sumq2[c] = 0;
  for (int j = 0; j < 32; ++j) {
    for (int c = 0; c < kIq4Candidates; ++c) {
      const float q = static_cast<float>(kIq4nlValues[best_iq4_index(inverse_scales[c] * x[j])]);
      sumqx[c] += w[j] * q * x[j];
      sumq2[c] += w[j] * q * q;
    }
  }
}

namespace {

// Level of every lane for the asymmetric search: clamp(RNI(iscale * (x - min)), 0, nmax) as float.
struct AmsTrials {
  static constexpr int kMaxTrials = 40;
  static constexpr int kMaxElements = 32;
  alignas(16) float iscale[kMaxTrials];
  alignas(16) float sum_l[kMaxTrials];
  alignas(16) float sum_l2[kMaxTrials];
  alignas(16) float sum_xl[kMaxTrials];
  alignas(16) float this_scale[kMaxTrials];
  alignas(16) float this_min[kMaxTrials];
  alignas(16) float err[kMaxTrials];
  alignas(16) float level[kMaxElements][kMaxTrials];  // level[i][trial]
};

[[maybe_unused]] void ams_trial_sums_scalar(int n, int n_trials, int nmax, const float* x, const float* w,
                                            float min, AmsTrials& t) {
  for (int s = 0; s < n_trials; ++s) t.sum_l[s] = t.sum_l2[s] = t.sum_xl[s] = 0;
  for (int i = 0; i < n; ++i) {
    const float shifted = x[i] - min;
    for (int s = 0; s < n_trials; ++s) {
      const int l = std::max(0, std::min(nmax, nearest_int(t.iscale[s] * shifted)));
      const float lf = static_cast<float>(l);
      t.level[i][s] = lf;
      t.sum_l[s] += w[i] * lf;
      t.sum_l2[s] += w[i] * lf * lf;
      t.sum_xl[s] += w[i] * lf * x[i];
    }
  }
}

[[maybe_unused]] void ams_trial_errors_scalar(int n, int n_trials, const float* x, const float* w,
                                              bool absolute, AmsTrials& t) {
  for (int s = 0; s < n_trials; ++s) t.err[s] = 0;
  for (int i = 0; i < n; ++i) {
    for (int s = 0; s < n_trials; ++s) {
      const float diff = t.this_scale[s] * t.level[i][s] + t.this_min[s] - x[i];
      t.err[s] += w[i] * fit_error(diff, absolute);
    }
  }
}

#if defined(__SSE2__) && !defined(MTP_QUANT_SCALAR)

// ggml's nearest_int on four lanes: add 1.5 * 2^23, keep the low 23 bits, subtract 2^22.
inline __m128i nearest_int4(__m128 v) {
  const __m128 shifted = _mm_add_ps(v, _mm_set1_ps(12582912.0f));
  const __m128i bits = _mm_and_si128(_mm_castps_si128(shifted), _mm_set1_epi32(0x007FFFFF));
  return _mm_sub_epi32(bits, _mm_set1_epi32(0x00400000));
}

void ams_trial_sums(int n, int n_trials, int nmax, const float* x, const float* w, float min, AmsTrials& t) {
  const int n_groups = (n_trials + 3) / 4;
  const __m128 zero = _mm_setzero_ps();
  const __m128 top = _mm_set1_ps(static_cast<float>(nmax));
  __m128 sum_l[AmsTrials::kMaxTrials / 4], sum_l2[AmsTrials::kMaxTrials / 4],
      sum_xl[AmsTrials::kMaxTrials / 4];
  for (int g = 0; g < n_groups; ++g) sum_l[g] = sum_l2[g] = sum_xl[g] = zero;
  for (int i = 0; i < n; ++i) {
    const __m128 shifted = _mm_set1_ps(x[i] - min);
    const __m128 wi = _mm_set1_ps(w[i]);
    const __m128 xi = _mm_set1_ps(x[i]);
    for (int g = 0; g < n_groups; ++g) {
      // The integer level is in [-2^22, 2^22), exactly representable, so clamping in float is exact.
      __m128 lf = _mm_cvtepi32_ps(nearest_int4(_mm_mul_ps(_mm_load_ps(t.iscale + 4 * g), shifted)));
      lf = _mm_min_ps(_mm_max_ps(lf, zero), top);
      _mm_store_ps(&t.level[i][4 * g], lf);
      const __m128 wl = _mm_mul_ps(wi, lf);
      sum_l[g] = _mm_add_ps(sum_l[g], wl);
      sum_l2[g] = _mm_add_ps(sum_l2[g], _mm_mul_ps(wl, lf));
      sum_xl[g] = _mm_add_ps(sum_xl[g], _mm_mul_ps(wl, xi));
    }
  }
  for (int g = 0; g < n_groups; ++g) {
    _mm_store_ps(t.sum_l + 4 * g, sum_l[g]);
    _mm_store_ps(t.sum_l2 + 4 * g, sum_l2[g]);
    _mm_store_ps(t.sum_xl + 4 * g, sum_xl[g]);
  }
}

void ams_trial_errors(int n, int n_trials, const float* x, const float* w, bool absolute, AmsTrials& t) {
  const int n_groups = (n_trials + 3) / 4;
  // |diff| clears the sign bit, exactly as fabsf.
  const __m128 magnitude = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));
  __m128 err[AmsTrials::kMaxTrials / 4];
  for (int g = 0; g < n_groups; ++g) err[g] = _mm_setzero_ps();
  for (int i = 0; i < n; ++i) {
    const __m128 xi = _mm_set1_ps(x[i]);
    const __m128 wi = _mm_set1_ps(w[i]);
    for (int g = 0; g < n_groups; ++g) {
      const __m128 scaled = _mm_mul_ps(_mm_load_ps(t.this_scale + 4 * g), _mm_load_ps(&t.level[i][4 * g]));
      const __m128 diff = _mm_sub_ps(_mm_add_ps(scaled, _mm_load_ps(t.this_min + 4 * g)), xi);
      const __m128 e = absolute ? _mm_and_ps(diff, magnitude) : _mm_mul_ps(diff, diff);
      err[g] = _mm_add_ps(err[g], _mm_mul_ps(wi, e));
    }
  }
  for (int g = 0; g < n_groups; ++g) _mm_store_ps(t.err + 4 * g, err[g]);
}

#else

void ams_trial_sums(int n, int n_trials, int nmax, const float* x, const float* w, float min, AmsTrials& t) {
  ams_trial_sums_scalar(n, n_trials, nmax, x, w, min, t);
}
void ams_trial_errors(int n, int n_trials, const float* x, const float* w, bool absolute, AmsTrials& t) {
  ams_trial_errors_scalar(n, n_trials, x, w, absolute, t);
}

#endif

}  // namespace

#if defined(__SSE2__) && !defined(MTP_QUANT_SCALAR)

void iq4_candidate_sums(const float* x, const float* w, const float* inverse_scales, float* sumqx,
                        float* sumq2) {
  constexpr int kGroups = kIq4Candidates / 4;
  const __m128 lowest = _mm_set1_ps(static_cast<float>(kIq4MinCell));
  const __m128 highest = _mm_set1_ps(static_cast<float>(kIq4MaxCell));
  __m128 inv[kGroups], sqx[kGroups], sq2[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    inv[g] = _mm_loadu_ps(inverse_scales + 4 * g);
    sqx[g] = sq2[g] = _mm_setzero_ps();
  }
  alignas(16) int32_t cell[4];
  for (int j = 0; j < 32; ++j) {
    const __m128 xj = _mm_set1_ps(x[j]);
    const __m128 wj = _mm_set1_ps(w[j]);
    for (int g = 0; g < kGroups; ++g) {
      // best_iq4_index on four lanes: clamp 2v to the table's cells (NaN goes to the top cell), exact floor.
      const __m128 v = _mm_mul_ps(inv[g], xj);
      const __m128 is_nan = _mm_cmpunord_ps(v, v);
      __m128 twice = _mm_min_ps(_mm_max_ps(_mm_add_ps(v, v), lowest), highest);
      twice = _mm_or_ps(_mm_and_ps(is_nan, highest), _mm_andnot_ps(is_nan, twice));
      __m128i truncated = _mm_cvttps_epi32(twice);
      const __m128 went_up = _mm_cmpgt_ps(_mm_cvtepi32_ps(truncated), twice);
      truncated = _mm_add_epi32(truncated, _mm_castps_si128(went_up));  // -1 where truncation rounded up
      _mm_store_si128(reinterpret_cast<__m128i*>(cell), truncated);
      const float* values = kIq4Cells.value - kIq4MinCell;
      const __m128 q = _mm_setr_ps(values[cell[0]], values[cell[1]], values[cell[2]], values[cell[3]]);
      const __m128 wq = _mm_mul_ps(wj, q);
      sqx[g] = _mm_add_ps(sqx[g], _mm_mul_ps(wq, xj));
      sq2[g] = _mm_add_ps(sq2[g], _mm_mul_ps(wq, q));
    }
  }
  for (int g = 0; g < kGroups; ++g) {
    _mm_storeu_ps(sumqx + 4 * g, sqx[g]);
    _mm_storeu_ps(sumq2 + 4 * g, sq2[g]);
  }
}

#else

void iq4_candidate_sums(const float* x, const float* w, const float* inverse_scales, float* sumqx,
                        float* sumq2) {
  iq4_candidate_sums_scalar(x, w, inverse_scales, sumqx, sumq2);
}

#endif

// 3.0.4 with the trials of step 5 evaluated in batches (see the comment in step 5 for why the batches
// restart).
float asymmetric_scale_search(int n, const float* x, const float* weights, uint8_t* levels, float* the_min,
                              uint8_t* aux, const AmsParams& p) {
  const int nmax = p.nmax;
  const int n_trials = p.nstep + 1;
  if (n > AmsTrials::kMaxElements || n_trials > AmsTrials::kMaxTrials || n_trials < 1) {
    return asymmetric_scale_search_scalar(n, x, weights, levels, the_min, aux, p);
  }
  // 1-3.
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(levels, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.0f;
  }
  // 4.
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
    levels[i] = static_cast<uint8_t>(l);
    const float diff = scale * static_cast<float>(l) + min - x[i];
    best += weights[i] * fit_error(diff, p.absolute_error);
  }
  // 5. A trial that wins replaces `min`, and every later trial uses the new min (in x - min and in max -
  // min), so trials are only independent until one wins. Evaluate a batch of trials with the current min; the
  // first winner in trial order is exact (all before it used the same min); accept it and restart right after
  // it.
  constexpr int kBatch = 8;  // 2 vectors: enough independent chains to hide add latency, little rework
  AmsTrials t;
  int first = 0;
  while (first < n_trials) {
    const int lanes = std::min(kBatch, n_trials - first);
    const int padded = (lanes + 3) / 4 * 4;  // padding lanes compute values that are never read
    for (int k = 0; k < padded; ++k) {
      const float trial = static_cast<float>(first + k);
      t.iscale[k] = (p.rmin + p.rdelta * trial + static_cast<float>(nmax)) / (max - min);
    }
    ams_trial_sums(n, padded, nmax, x, weights, min, t);
    bool solvable[kBatch];
    for (int k = 0; k < padded; ++k) {
      const float det = sum_w * t.sum_l2[k] - t.sum_l[k] * t.sum_l[k];
      float this_scale = 0, this_min = 0;
      if (k < lanes) solvable[k] = det > 0;
      if (det > 0) {
        this_scale = (sum_w * t.sum_xl[k] - sum_x * t.sum_l[k]) / det;
        this_min = (t.sum_l2[k] * sum_x - t.sum_l[k] * t.sum_xl[k]) / det;
        if (this_min > 0) {
          this_min = 0;
          this_scale = t.sum_xl[k] / t.sum_l2[k];
        }
      }
      t.this_scale[k] = this_scale;
      t.this_min[k] = this_min;
    }
    ams_trial_errors(n, padded, x, weights, p.absolute_error, t);
    int winner = -1;
    for (int k = 0; k < lanes; ++k) {
      if (solvable[k] && t.err[k] < best) {
        winner = k;
        break;
      }
    }
    if (winner < 0) {
      first += lanes;
      continue;
    }
    best = t.err[winner];
    scale = t.this_scale[winner];
    min = t.this_min[winner];
    for (int i = 0; i < n; ++i) levels[i] = static_cast<uint8_t>(t.level[i][winner]);
    first += winner + 1;
  }
  (void)aux;  // the per-trial levels live in AmsTrials
  // 6.
  *the_min = -min;
  return scale;
}

}  // namespace mtp::quant_detail
