// Half-precision conversions exactly as ggml's software path (docs/formats.md 3.1, vectors in 5.4).
// Every quantizer stores its scales with fp32_to_fp16, so these must be bit-exact, NaN handling included:
// hardware F16C keeps NaN payload bits, ggml (and this file) always produces sign | 0x7E00.
#pragma once

#include <bit>
#include <cstdint>

namespace mtp {

// IEEE binary16 from binary32, round to nearest even, subnormals handled, |v| >= 65520 -> +-Inf.
// The float arithmetic below is ggml's recipe: scaling by 2^112 then 2^-110 lets the FPU do the rounding of
// the mantissa (and of subnormals), and adding a float built from the exponent aligns the result so that the
// half's bits can be read straight out of the sum.
inline uint16_t fp32_to_fp16(float value) {
  constexpr float kScaleToInf = 0x1.0p+112f;
  constexpr float kScaleToZero = 0x1.0p-110f;
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  float magnitude = std::bit_cast<float>(bits & 0x7FFFFFFFu);
  float base = (magnitude * kScaleToInf) * kScaleToZero;

  const uint32_t shl1 = bits << 1;  // exponent and mantissa, sign shifted out
  const uint32_t sign = bits & 0x80000000u;
  uint32_t bias = shl1 & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;  // smallest exponent of a normal half, minus one

  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const uint32_t base_bits = std::bit_cast<uint32_t>(base);
  const uint32_t exp_bits = (base_bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = base_bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1 > 0xFF000000u ? 0x7E00u : nonsign));
}

// Exact widening of binary16 to binary32 (normals, subnormals, Inf, NaN with its payload kept).
inline float fp16_to_fp32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  const uint32_t mantissa = half & 0x03FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Subnormal or zero: mantissa * 2^-24 is exact in binary32.
  const float magnitude = static_cast<float>(mantissa) * 0x1.0p-24f;
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
}

// bfloat16 from binary32: round to nearest even on the top 16 bits; NaN is forced quiet (payload top bits
// kept).
inline uint16_t fp32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

inline float bf16_to_fp32(uint16_t bf16) {
  return std::bit_cast<float>(static_cast<uint32_t>(bf16) << 16);
}

}  // namespace mtp
