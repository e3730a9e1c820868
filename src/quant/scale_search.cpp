// The scale searches and the K-quant scale packing of docs/formats.md 3.0.3-3.0.6, step by step as ggml
// evaluates them. Comments number the steps. Products are written left to right, "a·b·c = (a·b)·c", as ggml
// does.
#include "scale_search.h"

#include <algorithm>
#include <cstring>

namespace mtp::quant_detail {

float symmetric_scale_search(int n, int nmax, const float* x, int8_t* levels, const float* weights) {
  // 1. An all-(near-)zero group gets levels 0 (not nmax) and scale 0.
  const MaxAbs m = arg_max_abs(x, n);
  if (m.amax < kGroupMaxEps) {
    std::memset(levels, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  auto clamp_level = [nmax](int l) { return std::max(-nmax, std::min(nmax - 1, l)); };

  // 2-4. First guess: the largest element maps to level -nmax.
  float iscale = static_cast<float>(-nmax) / m.max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_level(nearest_int(iscale * x[i]));
    levels[i] = static_cast<int8_t>(l + nmax);
    const float w = weights ? weights[i] : x[i] * x[i];
    const float lf = static_cast<float>(l);
    sumlx += w * x[i] * lf;
    suml2 += w * lf * lf;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;

  // 5. Try nine slightly smaller and nine slightly larger inverse scales; keep the best weighted fit.
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / m.max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const float lf = static_cast<float>(clamp_level(nearest_int(iscale * x[i])));
      const float w = weights ? weights[i] : x[i] * x[i];
      sumlx += w * x[i] * lf;
      suml2 += w * lf * lf;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        levels[i] = static_cast<int8_t>(nmax + clamp_level(nearest_int(iscale * x[i])));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float asymmetric_scale_search_scalar(int n, const float* x, const float* weights, uint8_t* levels,
                                     float* the_min, uint8_t* aux, const AmsParams& p) {
  const int nmax = p.nmax;
  // 1. Range and weighted sums.
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  // 2-3. The offset is never positive; a constant group needs no levels.
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(levels, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.0f;
  }
  auto clamp_level = [nmax](int l) { return std::max(0, std::min(nmax, l)); };

  // 4. Error of the plain min/max fit.
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_level(nearest_int(iscale * (x[i] - min)));
    levels[i] = static_cast<uint8_t>(l);
    const float diff = scale * static_cast<float>(l) + min - x[i];
    best += weights[i] * fit_error(diff, p.absolute_error);
  }

  // 5. Scan inverse scales; for each set of levels solve the weighted least squares for (scale, min).
  for (int is = 0; is <= p.nstep; ++is) {
    iscale = (p.rmin + p.rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_level(nearest_int(iscale * (x[i] - min)));
      aux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float lf = static_cast<float>(l);
      sum_l += w * lf;
      sum_l2 += w * lf * lf;
      sum_xl += w * lf * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(aux[i]) + this_min - x[i];
        err += weights[i] * fit_error(diff, p.absolute_error);
      }
      if (err < best) {
        std::memcpy(levels, aux, static_cast<size_t>(n));
        best = err;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  // 6.
  *the_min = -min;
  return scale;
}

float positive_scale_search(int n, int nmax, const float* x, uint8_t* levels, const float* weights) {
  // 1.
  float max = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupMaxEps) {
    std::memset(levels, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  // 2. Error of the plain max fit (levels not clamped here).
  float iscale = static_cast<float>(nmax) / max;
  for (int i = 0; i < n; ++i) levels[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
  const float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(levels[i]);
    best += weights[i] * diff * diff;
  }
  // 3. Nearby inverse scales.
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
      const float diff = x[i] - scale_is * static_cast<float>(l);
      mse += weights[i] * diff * diff;
    }
    if (mse < best) {
      best = mse;
      iscale = iscale_is;
    }
  }
  // 4. Levels for the chosen inverse scale and the sums of the least-squares scale.
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    levels[i] = static_cast<uint8_t>(l);
    const float lf = static_cast<float>(l);
    sumlx += weights[i] * x[i] * lf;
    suml2 += weights[i] * lf * lf;
  }
  // 5. Coordinate descent: move one level at a time to its optimum given the others, while that helps.
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = weights[i];
      const float old_l = static_cast<float>(levels[i]);
      float slx = sumlx - w * x[i] * old_l;
      float sl2 = suml2 - w * old_l * old_l;
      if (slx > 0 && sl2 > 0) {
        const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
        if (new_l != levels[i]) {
          const float nl = static_cast<float>(new_l);
          slx += w * x[i] * nl;
          sl2 += w * nl * nl;
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            levels[i] = static_cast<uint8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  // 6.
  return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

void pack_k_scales(const uint8_t scale[8], const uint8_t min[8], uint8_t packed[kKScaleBytes]) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = scale[j];
    packed[j + 4] = min[j];
  }
  for (int j = 4; j < 8; ++j) {
    packed[j + 4] = static_cast<uint8_t>((scale[j] & 0xF) | ((min[j] & 0xF) << 4));
    packed[j - 4] |= static_cast<uint8_t>((scale[j] >> 4) << 6);
    packed[j] |= static_cast<uint8_t>((min[j] >> 4) << 6);
  }
}

}  // namespace mtp::quant_detail
