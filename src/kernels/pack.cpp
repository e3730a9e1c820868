// Packing of weight matrices into the tile layouts of kernels/pack.h (portable code: it runs once at load).
#include "kernels/pack.h"

#include <cstring>

#include "base/check.h"
#include "quant/blocks.h"

namespace mtp::kernels {
namespace {

constexpr int64_t kSbBytes = sizeof(BlockIQ4_XS);
constexpr int64_t kHeaderBytes = 128;   // per super-block of a tile
constexpr int64_t kQsPieceBytes = 256;  // per (sub-block, super-block) of a tile
constexpr int64_t kQsOffset = 8;        // of qs inside a BlockIQ4_XS

// The byte offsets, inside a tile of nb super-blocks, of the pieces of row o's super-block sb: calls
// move(tile_offset, block_offset, bytes) for each piece (block_offset inside the row-format block).
template <typename Move>
void for_each_piece(int64_t nb, int64_t o, int64_t sb, Move move) {
  const int64_t h = sb * kHeaderBytes;
  move(h + 2 * o, 0, 2);       // d
  move(h + 32 + 2 * o, 2, 2);  // scales_h
  move(h + 64 + 4 * o, 4, 4);  // scales_l
  for (int64_t j = 0; j < 8; ++j) {
    const int64_t q = nb * kHeaderBytes + (j * nb + sb) * kQsPieceBytes;
    for (int64_t line = 0; line < 4; ++line) move(q + 64 * line + 4 * o, kQsOffset + 16 * j + 4 * line, 4);
  }
}

}  // namespace

bool can_pack(const MatrixView& w) {
  return !w.packed && w.type == GgmlType::IQ4_XS && w.n_out % kPackRows == 0 && w.n_in % kQK_K == 0 &&
         w.row_bytes == row_size(w.type, w.n_in);
}

MatrixView pack_matrix(const MatrixView& w, uint8_t* dst) {
  MTP_CHECK(can_pack(w), "pack_matrix: ", type_name(w.type), " [", w.n_in, " x ", w.n_out,
            "] is not packable");
  const int64_t nb = w.n_in / kQK_K, tile_bytes = kPackRows * w.row_bytes;
  for (int64_t t = 0; t < w.n_out / kPackRows; ++t) {
    uint8_t* tile = dst + t * tile_bytes;
    for (int64_t o = 0; o < kPackRows; ++o) {
      const uint8_t* row = w.data + (t * kPackRows + o) * w.row_bytes;
      for (int64_t sb = 0; sb < nb; ++sb) {
        const uint8_t* blk = row + sb * kSbBytes;
        for_each_piece(nb, o, sb,
                       [&](int64_t to, int64_t from, int64_t n) { std::memcpy(tile + to, blk + from, n); });
      }
    }
  }
  MatrixView p = w;
  p.data = dst;
  p.packed = true;
  return p;
}

void unpack_rows(const MatrixView& packed, int64_t o_begin, int64_t n, uint8_t* dst) {
  MTP_CHECK(packed.packed && packed.type == GgmlType::IQ4_XS);
  MTP_CHECK(o_begin >= 0 && n >= 0 && o_begin + n <= packed.n_out);
  const int64_t nb = packed.n_in / kQK_K, tile_bytes = kPackRows * packed.row_bytes;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = o_begin + i, o = row % kPackRows;
    const uint8_t* tile = packed.data + (row / kPackRows) * tile_bytes;
    for (int64_t sb = 0; sb < nb; ++sb) {
      uint8_t* blk = dst + i * packed.row_bytes + sb * kSbBytes;
      for_each_piece(nb, o, sb, [&](int64_t from, int64_t to, int64_t bytes) {
        std::memcpy(blk + to, tile + from, bytes);
      });
    }
  }
}

}  // namespace mtp::kernels
