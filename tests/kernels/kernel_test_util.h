// Shared helpers of the kernel tests: seeded inputs, quantized weight matrices, ISA iteration.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "quant/quantize.h"

namespace mtp::test {

inline std::vector<kernels::Isa> supported_isas() {
  std::vector<kernels::Isa> v;
  for (kernels::Isa i :
       {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512, kernels::Isa::kNeon}) {
    if (kernels::isa_supported(i)) v.push_back(i);
  }
  return v;
}

// The AVX-VNNI settings to test at a level: at avx2 both plain AVX2 and AVX-VNNI where the CPU has it (the
// kernels that sum with vpdpbusd there read the switch), elsewhere the current one.
inline std::vector<bool> vnni_settings(kernels::Isa isa) {
  if (isa != kernels::Isa::kAvx2 || !kernels::avx_vnni_supported()) return {kernels::avx_vnni_active()};
  return {false, true};
}

// Sets the AVX-VNNI switch, and restores it at scope exit.
class VnniScope {
 public:
  explicit VnniScope(bool on) : saved_(kernels::avx_vnni_active()) { kernels::set_avx_vnni(on); }
  ~VnniScope() { kernels::set_avx_vnni(saved_); }

 private:
  bool saved_;
};

// Restores the active ISA level at scope exit.
class IsaScope {
 public:
  explicit IsaScope(kernels::Isa isa) : saved_(kernels::active_isa()) { kernels::set_active_isa(isa); }
  ~IsaScope() { kernels::set_active_isa(saved_); }

 private:
  kernels::Isa saved_;
};

enum class Pattern { kGaussian, kZeros, kLarge, kSpikes };

inline const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::kGaussian:
      return "gaussian";
    case Pattern::kZeros:
      return "zeros";
    case Pattern::kLarge:
      return "large";
    case Pattern::kSpikes:
      return "spikes";
  }
  return "?";
}

// rows x cols floats. kLarge: magnitudes around 4e3 (F16 stays finite); kSpikes: small noise with one large
// value per row, and every third row all zero.
inline std::vector<float> make_values(Pattern p, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols), 0.0f);
  if (p == Pattern::kZeros) return v;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = v.data() + r * cols;
    if (p == Pattern::kSpikes && r % 3 == 2) continue;
    for (int64_t c = 0; c < cols; ++c) {
      row[c] = g(rng);
      if (p == Pattern::kLarge) row[c] *= 4.0e3f;
      if (p == Pattern::kSpikes) row[c] *= 1.0e-3f;
    }
    if (p == Pattern::kSpikes) row[(r * 7919 + 13) % cols] = (r % 2 ? -1.0f : 1.0f) * 3.0e3f;
  }
  return v;
}

// A weight matrix quantized row by row with the quant library (the bytes llama-quantize writes).
struct QuantMatrix {
  GgmlType type;
  int64_t n_in, n_out;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // dequantized, n_out x n_in
  kernels::MatrixView view() const {
    return kernels::MatrixView::contiguous(type, bytes.data(), n_in, n_out);
  }
};

inline QuantMatrix make_matrix(GgmlType type, const std::vector<float>& src, int64_t n_in, int64_t n_out) {
  QuantMatrix m{type, n_in, n_out, {}, {}};
  const int64_t rb = row_size(type, n_in);
  m.bytes.resize(static_cast<size_t>(rb * n_out + 64));
  m.deq.resize(static_cast<size_t>(n_in * n_out));
  for (int64_t o = 0; o < n_out; ++o) {
    Status s = quantize_row(type, src.data() + o * n_in, m.bytes.data() + o * rb, n_in);
    if (!s.ok()) throw std::runtime_error(s.message());
    s = dequantize_row(type, m.bytes.data() + o * rb, m.deq.data() + o * n_in, n_in);
    if (!s.ok()) throw std::runtime_error(s.message());
  }
  return m;
}

// Every activation row's products computed alone (one single-row call each): rows x n_out, the reference a
// batched call must equal bitwise.
inline std::vector<float> each_row_alone(const kernels::MatrixView& w,
                                         const kernels::PreparedActivations& acts, int64_t n_out) {
  std::vector<float> alone(static_cast<size_t>(acts.n_rows() * n_out));
  for (int32_t r = 0; r < acts.n_rows(); ++r)
    kernels::matmul_range(w, acts, &r, 1, 0, n_out, alone.data() + r * n_out, n_out);
  return alone;
}

}  // namespace mtp::test
