// Private helpers shared by the reference quantizers: ggml's rounding, the nearest-level search over the IQ4
// table, and the three scale searches (docs/formats.md 3.0). Every expression keeps ggml's evaluation
// order in float; the project is compiled with -ffp-contract=off so that none of them is fused into an FMA.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "quant/blocks.h"

namespace mtp::quant_detail {

inline constexpr float kGroupMaxEps = 1e-15f;  // below this a group counts as all zero

// ggml's nearest_int: round half to even by adding 1.5 * 2^23 and reading the low mantissa bits. Written with
// integer bit operations so that it is defined (and identical to ggml) for any float, even huge or NaN ones.
inline int nearest_int(float value) {
  const float shifted = value + 12582912.0f;
  const uint32_t bits = std::bit_cast<uint32_t>(shifted);
  return static_cast<int>(bits & 0x007FFFFFu) - 0x00400000;
}

// The C cast float -> int8_t as ggml's x86-64 build executes it (cvttss2si to int32, keep the low byte): a
// value outside the int32 range (or NaN) becomes INT32_MIN, whose low byte is 0. Only reachable for
// degenerate scales.
inline int8_t truncate_to_int8(float value) {
  if (!(value > -2147483648.0f && value < 2147483648.0f)) return 0;
  return static_cast<int8_t>(static_cast<int32_t>(value));
}

// C roundf (halves away from zero) followed by ggml's float -> int8_t conversion, without a libm call: v -
// trunc(v) is exact in float, so comparing it with +-0.5 decides the rounding exactly. Out-of-range and NaN
// give 0, as truncate_to_int8 does.
inline int8_t round_away_to_int8(float value) {
  if (!(value > -2147483648.0f && value < 2147483648.0f)) return 0;
  int32_t t = static_cast<int32_t>(value);
  const float fraction = value - static_cast<float>(t);
  if (fraction >= 0.5f) ++t;
  if (fraction <= -0.5f) --t;
  return static_cast<int8_t>(t);
}

// The signed element of largest magnitude (first one on ties) and its magnitude; both 0 for an all-zero
// group.
struct MaxAbs {
  float max = 0;
  float amax = 0;
};
inline MaxAbs arg_max_abs(const float* x, int n) {
  MaxAbs r;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > r.amax) {
      r.amax = ax;
      r.max = x[i];
    }
  }
  return r;
}

// Index into kIq4nlValues of the level nearest to v (ggml's best_index_int8, 3.0.2): ties pick the larger
// level, values beyond the ends pick the end, NaN picks 15 (every comparison of ggml's binary search fails).
//
// ggml runs a binary search and then compares (v - T[hi-1]) < (T[hi] - v) in float. The levels are integers,
// so every midpoint between neighbours is a multiple of 0.5 and the answer is constant on each half-integer
// cell [c/2, c/2 + 0.5). The answer is therefore read from a table indexed by floor(2v) (2v is exact, and so
// is this floor). This table lookup was checked against the literal binary search for every float with |v| <
// 140 (2.25e9 values, 0 mismatches); outside that range both clamp to the end levels. The unit tests repeat
// the check on a dense sample.
inline constexpr int kIq4MinCell = -254;  // cell of v = -127
inline constexpr int kIq4MaxCell = 226;   // cell of v = 113

// Literal form of 3.0.2, kept as the definition the table is built from (and tested against).
constexpr int best_iq4_index_by_search(float v) {
  if (v <= kIq4nlValues[0]) return 0;
  if (v >= kIq4nlValues[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < static_cast<float>(kIq4nlValues[mid])) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return (v - static_cast<float>(kIq4nlValues[hi - 1])) < (static_cast<float>(kIq4nlValues[hi]) - v) ? hi - 1
                                                                                                     : hi;
}

struct Iq4CellTable {
  uint8_t index[kIq4MaxCell - kIq4MinCell + 1];
  float value[kIq4MaxCell - kIq4MinCell + 1];  // kIq4nlValues[index], as float
  constexpr Iq4CellTable() : index{}, value{} {
    for (int c = kIq4MinCell; c <= kIq4MaxCell; ++c) {
      const int i = best_iq4_index_by_search(static_cast<float>(c) * 0.5f);
      index[c - kIq4MinCell] = static_cast<uint8_t>(i);
      value[c - kIq4MinCell] = static_cast<float>(kIq4nlValues[i]);
    }
  }
};
inline constexpr Iq4CellTable kIq4Cells{};

inline int best_iq4_index(float v) {
  if (v != v) return 15;
  float twice = 2.0f * v;  // exact (an overflow to +-Inf is clamped below)
  if (twice < static_cast<float>(kIq4MinCell)) twice = static_cast<float>(kIq4MinCell);
  if (twice > static_cast<float>(kIq4MaxCell)) twice = static_cast<float>(kIq4MaxCell);
  // Exact floor: truncate, then step down if truncation went up (negative non-integers).
  int cell = static_cast<int>(twice);
  if (static_cast<float>(cell) > twice) --cell;
  return kIq4Cells.index[cell - kIq4MinCell];
}

// SSS, symmetric scale search (ggml make_qx_quants, rmse_type 1; 3.0.3). Levels L[i] in [0, 2*nmax - 1]
// encode l = L - nmax. weights == nullptr means w_i = x_i^2. Returns the (possibly negative) scale.
float symmetric_scale_search(int n, int nmax, const float* x, int8_t* levels, const float* weights);

// Weighted sums of the IQ4 search for 16 candidate inverse scales over one 32-element sub-block: for each
// candidate c, sumqx[c] = sum_j (w_j*q)*x_j and sumq2[c] = sum_j (w_j*q)*q with q =
// T[BI(inverse_scales[c]*x_j)], each accumulated in element order. The SSE2 build computes four candidates
// per instruction (same IEEE single operations per lane, so the same bits); the scalar version is the
// portable fallback and the test reference.
inline constexpr int kIq4Candidates = 16;
void iq4_candidate_sums(const float* x, const float* w, const float* inverse_scales, float* sumqx,
                        float* sumq2);
void iq4_candidate_sums_scalar(const float* x, const float* w, const float* inverse_scales, float* sumqx,
                               float* sumq2);

// AMS, asymmetric scale/min search (ggml make_qkx2_quants / make_qkx3_quants; 3.0.4). Levels in [0, nmax];
// trial inverse scales (rmin + rdelta * k + nmax) / (max - min), k = 0..nstep; each fit's error is the
// weighted sum of squared differences, or of absolute ones (Q2_K without an imatrix: ggml's use_mad).
struct AmsParams {
  int nmax;
  float rmin;
  float rdelta;
  int nstep;
  bool absolute_error = false;
};
inline float fit_error(float diff, bool absolute) {
  return absolute ? std::fabs(diff) : diff * diff;
}
// `aux` is n bytes of scratch. Writes the non-negative `the_min` (value ~ scale*L - the_min), returns scale.
// n <= 32 and nstep <= 39. The nstep + 1 trial scales are evaluated side by side (SSE2 where available); the
// scalar variant evaluates them one after another exactly as the spec lists, and serves as the test
// reference.
float asymmetric_scale_search(int n, const float* x, const float* weights, uint8_t* levels, float* the_min,
                              uint8_t* aux, const AmsParams& p);
float asymmetric_scale_search_scalar(int n, const float* x, const float* weights, uint8_t* levels,
                                     float* the_min, uint8_t* aux, const AmsParams& p);

// QP, positive scale search for the 6-bit super-scales (ggml make_qp_quants; 3.0.5). x >= 0.
float positive_scale_search(int n, int nmax, const float* x, uint8_t* levels, const float* weights);

// Packing of the 8 (scale, min) 6-bit pairs of Q4_K / Q5_K into 12 bytes (3.0.6).
void pack_k_scales(const uint8_t scale[8], const uint8_t min[8], uint8_t packed[kKScaleBytes]);

}  // namespace mtp::quant_detail
