// Packing of weight matrices into the tile layouts of kernels/pack.h (portable code: it runs once at load).
#include "kernels/pack.h"

#include <cstddef>
#include <cstring>

#include "base/check.h"
#include "quant/blocks.h"

namespace mtp::kernels {
namespace {

// IQ4_XS: per super-block of a tile a 128-byte header, then per (sub-block j, super-block) 256 bytes of qs.
constexpr int64_t kXsBlockBytes = sizeof(BlockIQ4_XS);
constexpr int64_t kXsHeaderBytes = 128;
constexpr int64_t kXsPieceBytes = 256;
constexpr int64_t kXsQsOffset = 8;  // of qs inside a BlockIQ4_XS
// Q8_0: per block of a tile 32 bytes of scales (all blocks first), then 512 bytes of qs per block.
constexpr int64_t kQ8BlockBytes = sizeof(BlockQ8_0);
constexpr int64_t kQ8ScaleBytes = 32;
constexpr int64_t kQ8PieceBytes = 512;
// Q4_K, Q5_K: per super-block of a tile a 256-byte header, (Q5_K) 512 bytes of qh, then 4 pieces of 512
// bytes of qs.
constexpr int64_t kK45HeaderBytes = 256;
constexpr int64_t kK45PieceBytes = 512;
// Q6_K: per super-block of a tile a 288-byte header, then per half of the super-block 3 x 512 bytes.
constexpr int64_t kQ6KBlockBytes = sizeof(BlockQ6_K);
constexpr int64_t kQ6KHeaderBytes = 288;
constexpr int64_t kQ6KPieceBytes = 512;

// The nibble types of 32 elements (MXFP4, Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1): per block of a tile the 16 rows'
// scale fields (all blocks first: the exponent, or d, then m), then 4 lines of qs and (Q5) one line of qh.
struct NibbleLayout {
  int64_t block;         // bytes of a row's block
  int n_fields;          // scale fields: d, or d and m
  int field_bytes;       // 1 (E8M0) or 2 (fp16)
  int64_t qs_from;       // offset of qs in a row's block
  int64_t qh_from = -1;  // offset of qh, or -1
  int64_t scale_bytes() const { return n_fields * kPackRows * field_bytes; }
  int64_t piece_bytes() const { return qh_from < 0 ? 256 : 320; }
};
NibbleLayout nibble_layout(GgmlType type) {
  switch (type) {
    case GgmlType::MXFP4:
      return {sizeof(BlockMXFP4), 1, 1, 1};
    case GgmlType::Q4_1:
      return {sizeof(BlockQ4_1), 2, 2, 4};
    case GgmlType::Q5_0:
      return {sizeof(BlockQ5_0), 1, 2, 6, 2};
    case GgmlType::Q5_1:
      return {sizeof(BlockQ5_1), 2, 2, 8, 4};
    default:  // Q4_0, IQ4_NL
      return {sizeof(BlockQ4_0), 1, 2, 2};
  }
}
bool is_nibble_type(GgmlType type) {
  return type == GgmlType::MXFP4 || type == GgmlType::Q4_0 || type == GgmlType::IQ4_NL ||
         type == GgmlType::Q4_1 || type == GgmlType::Q5_0 || type == GgmlType::Q5_1;
}
// Q3_K: per super-block of a tile a 224-byte header, 512 bytes of hmask, then 2 x 512 bytes of qs.
constexpr int64_t kQ3KBlockBytes = sizeof(BlockQ3_K);
constexpr int64_t kQ3KHeaderBytes = 224;
constexpr int64_t kQ3KPieceBytes = 512;

// Q2_K: per super-block of a tile a 320-byte header, then 2 x 512 bytes of qs.
constexpr int64_t kQ2KBlockBytes = sizeof(BlockQ2_K);
constexpr int64_t kQ2KHeaderBytes = 320;
constexpr int64_t kQ2KPieceBytes = 512;

// The pieces of row o (of a tile of `type` rows with nb blocks each): move<bytes>(tile_offset, row_offset)
// for every piece. The sizes are compile-time constants so the copies inline to single moves (packing
// streams the whole model once at load).
template <typename Move>
void for_each_piece(GgmlType type, int64_t nb, int64_t o, Move move) {
  if (type == GgmlType::Q8_0) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t from = b * kQ8BlockBytes, q = nb * kQ8ScaleBytes + b * kQ8PieceBytes;
      move.template operator()<2>(b * kQ8ScaleBytes + 2 * o, from);
      for (int64_t g = 0; g < 8; ++g) move.template operator()<4>(q + 64 * g + 4 * o, from + 2 + 4 * g);
    }
    return;
  }
  if (is_nibble_type(type)) {
    const NibbleLayout n = nibble_layout(type);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t from = b * n.block, q = nb * n.scale_bytes() + b * n.piece_bytes();
      for (int f = 0; f < n.n_fields; ++f) {
        const int64_t to = b * n.scale_bytes() + f * kPackRows * n.field_bytes + n.field_bytes * o;
        if (n.field_bytes == 1) {
          move.template operator()<1>(to, from);
        } else {
          move.template operator()<2>(to, from + 2 * f);
        }
      }
      for (int64_t line = 0; line < 4; ++line)
        move.template operator()<4>(q + 64 * line + 4 * o, from + n.qs_from + 4 * line);
      if (n.qh_from >= 0) move.template operator()<4>(q + 256 + 4 * o, from + n.qh_from);
    }
    return;
  }
  if (type == GgmlType::Q6_K) {
    for (int64_t sb = 0; sb < nb; ++sb) {
      const int64_t h = sb * kPackRows * kQ6KBlockBytes, from = sb * kQ6KBlockBytes;
      move.template operator()<2>(h + 2 * o, from + offsetof(BlockQ6_K, d));
      for (int64_t s = 0; s < 16; ++s)
        move.template operator()<1>(h + 32 + 16 * s + o, from + offsetof(BlockQ6_K, scales) + s);
      for (int64_t half = 0; half < 2; ++half) {
        const int64_t base = h + kQ6KHeaderBytes + half * 3 * kQ6KPieceBytes;
        for (int64_t g = 0; g < 8; ++g) {
          for (int64_t p = 0; p < 2; ++p)
            move.template operator()<4>(base + p * kQ6KPieceBytes + 64 * g + 4 * o,
                                        from + 64 * half + 32 * p + 4 * g);
          move.template operator()<4>(base + 2 * kQ6KPieceBytes + 64 * g + 4 * o,
                                      from + offsetof(BlockQ6_K, qh) + 32 * half + 4 * g);
        }
      }
    }
    return;
  }
  if (type == GgmlType::Q3_K) {
    for (int64_t sb = 0; sb < nb; ++sb) {
      const int64_t h = sb * kPackRows * kQ3KBlockBytes, from = sb * kQ3KBlockBytes;
      move.template operator()<2>(h + 2 * o, from + offsetof(BlockQ3_K, d));
      for (int64_t w = 0; w < 3; ++w)
        move.template operator()<4>(h + 32 + 64 * w + 4 * o, from + offsetof(BlockQ3_K, scales) + 4 * w);
      for (int64_t g = 0; g < 8; ++g) {
        move.template operator()<4>(h + kQ3KHeaderBytes + 64 * g + 4 * o,
                                    from + offsetof(BlockQ3_K, hmask) + 4 * g);
        for (int64_t half = 0; half < 2; ++half)
          move.template operator()<4>(h + kQ3KHeaderBytes + (1 + half) * kQ3KPieceBytes + 64 * g + 4 * o,
                                      from + offsetof(BlockQ3_K, qs) + 32 * half + 4 * g);
      }
    }
    return;
  }
  if (type == GgmlType::Q2_K) {
    for (int64_t sb = 0; sb < nb; ++sb) {
      const int64_t h = sb * kPackRows * kQ2KBlockBytes, from = sb * kQ2KBlockBytes;
      move.template operator()<2>(h + 2 * o, from + offsetof(BlockQ2_K, d));
      move.template operator()<2>(h + 32 + 2 * o, from + offsetof(BlockQ2_K, dmin));
      for (int64_t w = 0; w < 4; ++w)
        move.template operator()<4>(h + 64 + 64 * w + 4 * o, from + offsetof(BlockQ2_K, scales) + 4 * w);
      for (int64_t g = 0; g < 8; ++g)
        for (int64_t half = 0; half < 2; ++half)
          move.template operator()<4>(h + kQ2KHeaderBytes + half * kQ2KPieceBytes + 64 * g + 4 * o,
                                      from + offsetof(BlockQ2_K, qs) + 32 * half + 4 * g);
    }
    return;
  }
  if (type == GgmlType::Q4_K || type == GgmlType::Q5_K) {
    const bool five = type == GgmlType::Q5_K;
    const int64_t block = five ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
    const int64_t qs_from = five ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
    const int64_t qs_to = kK45HeaderBytes + (five ? kK45PieceBytes : 0);
    for (int64_t sb = 0; sb < nb; ++sb) {
      const int64_t h = sb * kPackRows * block, from = sb * block;
      move.template operator()<2>(h + 2 * o, from);           // d
      move.template operator()<2>(h + 32 + 2 * o, from + 2);  // dmin
      for (int64_t w = 0; w < 3; ++w) move.template operator()<4>(h + 64 * (w + 1) + 4 * o, from + 4 + 4 * w);
      for (int64_t g = 0; five && g < 8; ++g)
        move.template operator()<4>(h + kK45HeaderBytes + 64 * g + 4 * o,
                                    from + offsetof(BlockQ5_K, qh) + 4 * g);
      for (int64_t k = 0; k < 4; ++k)
        for (int64_t g = 0; g < 8; ++g)
          move.template operator()<4>(h + qs_to + k * kK45PieceBytes + 64 * g + 4 * o,
                                      from + qs_from + 32 * k + 4 * g);
    }
    return;
  }
  for (int64_t sb = 0; sb < nb; ++sb) {
    const int64_t h = sb * kXsHeaderBytes, from = sb * kXsBlockBytes;
    move.template operator()<2>(h + 2 * o, from);           // d
    move.template operator()<2>(h + 32 + 2 * o, from + 2);  // scales_h
    move.template operator()<4>(h + 64 + 4 * o, from + 4);  // scales_l
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t q = nb * kXsHeaderBytes + (j * nb + sb) * kXsPieceBytes;
      for (int64_t line = 0; line < 4; ++line)
        move.template operator()<4>(q + 64 * line + 4 * o, from + kXsQsOffset + 16 * j + 4 * line);
    }
  }
}

bool is_packable_type(GgmlType type) {
  return type == GgmlType::IQ4_XS || type == GgmlType::Q8_0 || type == GgmlType::Q4_K ||
         type == GgmlType::Q5_K || type == GgmlType::Q6_K || type == GgmlType::Q3_K ||
         type == GgmlType::Q2_K || is_nibble_type(type);
}

// Elements per block: 32 for Q8_0 and the nibble types, 256 for the super-block types.
int64_t block_elements(GgmlType type) {
  return type == GgmlType::Q8_0 || is_nibble_type(type) ? 32 : kQK_K;
}

int64_t blocks_per_row(const MatrixView& w) {
  return w.n_in / block_elements(w.type);
}

}  // namespace

bool can_pack(const MatrixView& w) {
  const bool type_ok = (is_packable_type(w.type) && w.n_in % block_elements(w.type) == 0);
  return !w.packed && type_ok && w.n_out % kPackRows == 0 && w.row_bytes == row_size(w.type, w.n_in);
}

MatrixView pack_matrix(const MatrixView& w, uint8_t* dst) {
  MTP_CHECK(can_pack(w), "pack_matrix: ", type_name(w.type), " [", w.n_in, " x ", w.n_out,
            "] is not packable");
  const int64_t nb = blocks_per_row(w), tile_bytes = kPackRows * w.row_bytes;
  for (int64_t t = 0; t < w.n_out / kPackRows; ++t) {
    uint8_t* tile = dst + t * tile_bytes;
    for (int64_t o = 0; o < kPackRows; ++o) {
      const uint8_t* row = w.data + (t * kPackRows + o) * w.row_bytes;
      for_each_piece(w.type, nb, o,
                     [&]<int N>(int64_t to, int64_t from) { std::memcpy(tile + to, row + from, N); });
    }
  }
  MatrixView p = w;
  p.data = dst;
  p.packed = true;
  return p;
}

void pack_tile(const MatrixView& w, int64_t o_begin, uint8_t* dst) {
  MTP_CHECK(is_packable_type(w.type));
  MTP_CHECK(!w.packed && o_begin >= 0 && o_begin < w.n_out);
  const int64_t nb = blocks_per_row(w);
  for (int64_t o = 0; o < kPackRows; ++o) {
    const int64_t src = o_begin + o < w.n_out ? o_begin + o : o_begin;
    const uint8_t* row = w.data + src * w.row_bytes;
    for_each_piece(w.type, nb, o,
                   [&]<int N>(int64_t to, int64_t from) { std::memcpy(dst + to, row + from, N); });
  }
}

void unpack_rows(const MatrixView& packed, int64_t o_begin, int64_t n, uint8_t* dst) {
  MTP_CHECK(packed.packed && is_packable_type(packed.type));
  MTP_CHECK(o_begin >= 0 && n >= 0 && o_begin + n <= packed.n_out);
  const int64_t nb = blocks_per_row(packed), tile_bytes = kPackRows * packed.row_bytes;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = o_begin + i;
    const uint8_t* tile = packed.data + (row / kPackRows) * tile_bytes;
    uint8_t* out = dst + i * packed.row_bytes;
    for_each_piece(packed.type, nb, row % kPackRows,
                   [&]<int N>(int64_t from, int64_t to) { std::memcpy(out + to, tile + from, N); });
  }
}

}  // namespace mtp::kernels
