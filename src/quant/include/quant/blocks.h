// On-disk block layouts of the ggml quantization formats (docs/formats.md 3.2-3.10). All multi-byte fields
// are little-endian; fp16 fields are stored as raw uint16_t bits (see fp16.h). The structs have no padding,
// so an array of them is exactly the bytes of a tensor row.
#pragma once

#include <cstdint>
#include <cstring>

namespace mtp {

inline constexpr int kQK4_0 = 32;  // elements per Q4_0 / Q8_0 / IQ4_NL block
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK4_NL = 32;
inline constexpr int kQK_K = 256;        // elements per K-quant / IQ4_XS / Q8_K super-block
inline constexpr int kKScaleBytes = 12;  // packed 6-bit (scale, min) pairs of Q4_K and Q5_K

// Q8_0: y = qs[j] * d.
struct BlockQ8_0 {
  uint16_t d;         // fp16 scale
  int8_t qs[kQK8_0];  // element j
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0: y = (nibble - 8) * d. Byte j: element j in the low nibble, element j + 16 in the high nibble.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: y = nibble * d + m, nibbles arranged as in Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: y = (q - 16) * d with q = nibble | (bit j of qh) << 4 for element j (nibbles arranged as in Q4_0).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // a little-endian u32: bit j is the fifth bit of element j
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: y = q * d + m with q as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// The 5-bit level (0..31) of element j (0..31) of a Q5_0 / Q5_1 block.
inline int q5_level(const uint8_t* qs, const uint8_t* qh, int j) {
  const int nibble = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
  return nibble | (((qh[j / 8] >> (j % 8)) & 1) << 4);
}

// IQ4_NL: y = d * kIq4nlValues[nibble], nibbles arranged as in Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK4_NL / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// MXFP4 (OCP microscaling, E2M1 values under an E8M0 exponent): y = mxfp4_scale(e) * kMxfp4Values[nibble],
// nibbles arranged as in Q4_0.
inline constexpr int kQKMxfp4 = 32;
struct BlockMXFP4 {
  uint8_t e;  // E8M0: the block's power-of-two exponent, biased by 127
  uint8_t qs[kQKMxfp4 / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);

// Q2_K: 16 sub-blocks of 16, each with a 4-bit scale (low nibble of scales[j]) and a 4-bit min (high nibble);
// y = (d * sc_j) * q - dmin * m_j, q in [0, 3]. Element e's 2 bits: qs[32(e / 128) + e % 32] >> (2 ((e % 128)
// / 32)), as Q3_K's low bits.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 16 sub-blocks of 16 with 6-bit scales (biased by 32); y = (d * (sc_j - 32)) * (q - 4), q in [0, 7].
// Element e's low 2 bits: qs[32(e / 128) + e % 32] >> (2 ((e % 128) / 32)); its high bit (set: q >= 4) in
// hmask[e % 32] bit e / 32. Scale j: low 4 bits in scales[j % 8] (low nibble for j < 8, high for j >= 8),
// high 2 bits in scales[8 + j % 4] bits 2 (j / 4), 2 (j / 4) + 1.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q4_K: 8 sub-blocks of 32; y = d*sc_j * q - dmin*m_j with 6-bit (sc_j, m_j) packed in `scales`.
// qs[32c + l] holds element 64c + l (low nibble) and 64c + 32 + l (high nibble), c = 0..3.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: Q4_K plus a fifth bit per element: qh[l] bit 2c is for element 64c + l, bit 2c+1 for 64c + 32 + l.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16 with int8 scales; y = (d * scales[e/16]) * (L - 32), L in [0, 63].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];  // low 4 bits
  uint8_t qh[kQK_K / 4];  // high 2 bits
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (biased by 32); y = d*(ls - 32) * kIq4nlValues[nibble].
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;             // bits 2ib, 2ib+1: high 2 bits of sub-block ib's scale
  uint8_t scales_l[kQK_K / 64];  // low 4 bits: byte ib/2, low nibble for even ib, high for odd
  uint8_t qs[kQK_K / 2];         // sub-block ib owns bytes 16ib..16ib+15, arranged as Q4_0
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// Q8_K: the activation format the K-quants and IQ4_XS are dotted with. Scale is a full float.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // bsums[k] = sum of qs[16k .. 16k+15]
};
static_assert(sizeof(BlockQ8_K) == 292);

// The 16 non-linear levels shared by IQ4_NL and IQ4_XS (docs/formats.md 3.0.1).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The 16 E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6, then their negatives) doubled, so they are integers that
// int8 products take as they are; mxfp4_scale halves the exponent to match.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as a float, exactly: half of the E8M0 scale 2^(e - 127). e = 0 and 1 are subnormal floats; e =
// 255 (NaN in the OCP format) is taken, as ggml takes it, as 2^127.
inline float mxfp4_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// The 6-bit scale j (0..15, before the bias of 32 is taken off) of a Q3_K super-block's 12 scale bytes.
inline int unpack_q3_k_scale(int j, const uint8_t* packed) {
  const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
  return low | (((packed[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

// The 2 bits of element e (0..255) in the qs of a Q2_K super-block, or the low 2 bits in Q3_K's.
inline int k_two_bits(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// The 3-bit level q (0..7; the value is q - 4) of element e (0..255) of a Q3_K super-block.
inline int q3_k_level(const BlockQ3_K& b, int e) {
  return k_two_bits(b.qs, e) | (((b.hmask[e % 32] >> (e / 32)) & 1) << 2);
}

// The 6-bit (scale, min) pair j (0..7) of a Q4_K / Q5_K super-block's 12 scale bytes: pairs 0-3 in the low
// 6 bits of bytes 0-3 (scales) and 4-7 (mins); pairs 4-7 in the nibbles of bytes 8-11, with their top 2 bits
// in the top bits of bytes 0-7. The definition every decoder and the quantizer share.
inline void unpack_k_scale(int j, const uint8_t* packed, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

// All 8 pairs at once, word-wise on the little-endian layout (a handful of integer ops, where a loop over
// unpack_k_scale costs a dozen per pair; the kernels run it once per 256 weights): out = scales 0-7, then
// mins 0-7. The same values as unpack_k_scale (tested on every byte value).
inline void unpack_k_scales(const uint8_t* packed, uint8_t out[16]) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kTop2 = 0x03030303;
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t u[4] = {w[0] & kLow6, (w[2] & kLow4) | (((w[0] >> 6) & kTop2) << 4), w[1] & kLow6,
                         ((w[2] >> 4) & kLow4) | (((w[1] >> 6) & kTop2) << 4)};
  std::memcpy(out, u, 16);
}

}  // namespace mtp
