#include "model/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "kernels/matmul.h"
#include "quant/kernels.h"
#include "quant/quantize.h"

namespace mtp::ref {

float sigmoid(float x) {
  return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
}

float silu(float x) {
  return x * sigmoid(x);
}

float softplus(float x) {
  return x > 20.0f ? x : static_cast<float>(std::log1p(std::exp(static_cast<double>(x))));
}

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

void dequantize_row_of(const TensorView& t, int64_t row, float* out) {
  MTP_CHECK(t.valid() && row >= 0 && row < t.n_rows(), "row ", row, " of ", t.n_rows());
  Status s = dequantize_row(t.type, t.row(row), out, t.row_length());
  MTP_CHECK(s.ok(), s.message());  // types were checked when the weights were bound
}

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.row_length() * t.n_rows()));
  for (int64_t r = 0; r < t.n_rows(); ++r) dequantize_row_of(t, r, out.data() + r * t.row_length());
  return out;
}

namespace {

// x (n values) as the kernels see it for weights of type `weights`: quantized to the activation format they
// pair with and dequantized again; empty when they take f32 as it is.
std::vector<float> rounded_as_kernels(GgmlType weights, const float* x, int64_t n) {
  std::vector<float> out;
  switch (kernels::act_format(weights)) {
    case kernels::ActFormat::kF32:
      break;
    case kernels::ActFormat::kQ8_0: {
      std::vector<BlockQ8_0> q(static_cast<size_t>(n / kQK8_0));
      quantize_row_q8_0(x, q.data(), n);
      out.resize(static_cast<size_t>(n));
      dequantize_row_q8_0(q.data(), out.data(), n);
      break;
    }
    case kernels::ActFormat::kQ8_K: {
      std::vector<BlockQ8_K> q(static_cast<size_t>(n / kQK_K));
      quantize_row_q8_K(x, q.data(), n);
      out.resize(static_cast<size_t>(n));
      dequantize_row_q8_K(q.data(), out.data(), n);
      break;
    }
  }
  return out;
}

}  // namespace

void matvec(const TensorView& w, const float* x, float* y, int64_t row_begin, int64_t n_out, ThreadPool* pool,
            Activations act) {
  if (n_out < 0) n_out = w.n_rows() - row_begin;
  MTP_CHECK(row_begin >= 0 && row_begin + n_out <= w.n_rows());
  const int64_t n_in = w.row_length();
  std::vector<float> rounded;
  if (act == Activations::kAsKernels) rounded = rounded_as_kernels(w.type, x, n_in);
  if (!rounded.empty()) x = rounded.data();
  auto rows = [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t o = begin; o < end; ++o) {
      dequantize_row_of(w, row_begin + o, row.data());
      y[o] = static_cast<float>(dot(row.data(), x, n_in));
    }
  };
  if (pool == nullptr || pool->size() == 1 || n_out < 64) {
    rows(0, n_out);
    return;
  }
  // Blocks of rows; each row's value does not depend on which block or thread computes it.
  const int64_t block = 256;
  const int64_t n_blocks = (n_out + block - 1) / block;
  pool->parallel_for(static_cast<size_t>(n_blocks), [&](size_t b, int) {
    const int64_t begin = static_cast<int64_t>(b) * block;
    rows(begin, std::min(n_out, begin + block));
  });
}

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void l2_norm(float* x, int64_t n, float eps) {
  const double norm = std::sqrt(dot(x, x, n));
  const float scale = static_cast<float>(1.0 / std::max(norm, static_cast<double>(eps)));
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

void softmax(float* x, int64_t n) {
  const float max = *std::max_element(x, x + n);
  double sum = 0;
  std::vector<double> e(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) sum += e[i] = std::exp(static_cast<double>(x[i]) - max);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(e[i] / sum);
}

void rope_neox_partial(float* head, int64_t head_dim, int64_t n_rot, int64_t pos, float base) {
  MTP_CHECK(n_rot % 2 == 0 && n_rot <= head_dim);
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double theta =
        static_cast<double>(pos) * std::pow(static_cast<double>(base), -2.0 * i / static_cast<double>(n_rot));
    const double c = std::cos(theta), s = std::sin(theta);
    const double x0 = head[i], x1 = head[i + half];
    head[i] = static_cast<float>(x0 * c - x1 * s);
    head[i + half] = static_cast<float>(x0 * s + x1 * c);
  }
}

void split_query_gate(const float* qg, int64_t n_head, int64_t head_dim, float* q, float* gate) {
  for (int64_t h = 0; h < n_head; ++h) {
    std::copy_n(qg + 2 * h * head_dim, head_dim, q + h * head_dim);
    std::copy_n(qg + 2 * h * head_dim + head_dim, head_dim, gate + h * head_dim);
  }
}

void apply_sigmoid_gate(float* o, const float* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] *= sigmoid(gate[i]);
}

void attend(const float* q, const float* keys, const float* values, int64_t n_keys, int64_t stride,
            int64_t head_dim, float scale, float* out) {
  std::vector<float> p(static_cast<size_t>(n_keys));
  for (int64_t t = 0; t < n_keys; ++t)
    p[t] = static_cast<float>(dot(q, keys + t * stride, head_dim) * static_cast<double>(scale));
  softmax(p.data(), n_keys);
  for (int64_t d = 0; d < head_dim; ++d) {
    double acc = 0;
    for (int64_t t = 0; t < n_keys; ++t) acc += static_cast<double>(p[t]) * values[t * stride + d];
    out[d] = static_cast<float>(acc);
  }
}

void conv_step(float* window, const float* x, const float* taps, int64_t channels, int64_t d_conv, float* y) {
  const int64_t n_prev = d_conv - 1;
  for (int64_t c = 0; c < channels; ++c) {
    double acc = 0;
    for (int64_t i = 0; i < n_prev; ++i)
      acc += static_cast<double>(taps[c * d_conv + i]) * window[i * channels + c];
    acc += static_cast<double>(taps[c * d_conv + n_prev]) * x[c];
    y[c] = static_cast<float>(acc);
  }
  // Shift: drop the oldest input, append x.
  if (n_prev > 0) {
    std::copy(window + channels, window + n_prev * channels, window);
    std::copy_n(x, channels, window + (n_prev - 1) * channels);
  }
}

void delta_rule_step(float* S, const float* k, const float* q, const float* v, float beta, float g,
                     int64_t d_k, int64_t d_v, float* o) {
  const float decay = std::exp(g);
  for (int64_t i = 0; i < d_k * d_v; ++i) S[i] *= decay;
  std::vector<float> delta(static_cast<size_t>(d_v));
  for (int64_t c = 0; c < d_v; ++c) {
    double r = 0;  // (Sᵀk)[c] with the decayed state
    for (int64_t i = 0; i < d_k; ++i) r += static_cast<double>(S[i * d_v + c]) * k[i];
    delta[c] = beta * (v[c] - static_cast<float>(r));
  }
  for (int64_t i = 0; i < d_k; ++i)
    for (int64_t c = 0; c < d_v; ++c) S[i * d_v + c] += k[i] * delta[c];
  for (int64_t c = 0; c < d_v; ++c) {
    double acc = 0;  // read-out after the update
    for (int64_t i = 0; i < d_k; ++i) acc += static_cast<double>(S[i * d_v + c]) * q[i];
    o[c] = static_cast<float>(acc);
  }
}

std::vector<ExpertChoice> route_top_k(const float* logits, int64_t n_expert, int64_t k, float weights_scale) {
  MTP_CHECK(k > 0 && k <= n_expert);
  std::vector<float> p(logits, logits + n_expert);
  softmax(p.data(), n_expert);
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += p[order[i]];
  const double denom = std::max(sum, 6.1035e-5);
  std::vector<ExpertChoice> out;
  for (int64_t i = 0; i < k; ++i) {
    float w = static_cast<float>(p[order[i]] / denom);
    if (weights_scale != 0.0f && weights_scale != 1.0f) w *= weights_scale;
    out.push_back({order[i], w});
  }
  return out;
}

}  // namespace mtp::ref
