// Small f32 vector kernels of the forward pass. The functions in mtp::kernels run the active_isa() version
// (isa.h); mtp::kernels::scalar holds the portable twins the SIMD versions are tested against.
//
// Accuracy: the scalar twins sum in double and use std::exp; the SIMD versions sum in float lanes (fixed
// order for a given n, so every call with the same input gives the same bits) and use a polynomial exp
// accurate to about 2 ulp. n may be any length >= 0.
#pragma once

#include <cstdint>

namespace mtp::kernels {

float dot(const float* a, const float* b, int64_t n);
// y += a * x.
void axpy(float a, const float* x, float* y, int64_t n);
// out = x * (mean(x^2) + eps)^(-1/2) * w (w == nullptr: no weight). out may alias x.
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);
// In-place softmax (max-subtracted).
void softmax(float* x, int64_t n);
// out = x * sigmoid(x); out may alias x.
void silu(const float* x, float* out, int64_t n);
// out = 1 / (1 + exp(-x)); out may alias x.
void sigmoid(const float* x, float* out, int64_t n);
// out = silu(gate) * up (the SwiGLU of the feed-forward); out may alias either input.
void swiglu(const float* gate, const float* up, float* out, int64_t n);

namespace scalar {
float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);
void softmax(float* x, int64_t n);
void silu(const float* x, float* out, int64_t n);
void sigmoid(const float* x, float* out, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
}  // namespace scalar

}  // namespace mtp::kernels
