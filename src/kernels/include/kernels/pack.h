// Weight matrices repacked once at load for the SIMD kernels (docs/architecture.md section 3; the layouts
// below are summarized in docs/formats.md section 6).
//
// A packed matrix has the row format's bytes per row and total size, so stacked experts and output-row
// ranges keep their byte offsets; inside, rows are interleaved in tiles of kPackRows. matmul and
// matmul_range take packed views (MatrixView::packed) with output ranges on tile boundaries; at ISA levels
// without a packed kernel they unpack each tile and run the row-format kernels, so every level computes the
// same results as over the original matrix.
//
// Tile t holds rows 16t..16t+15 and is 16 * row_bytes long.
//
// IQ4_XS (the body of the seed's IQ4_XS graft), nb super-blocks per row:
//   header[sb]  128 bytes, sb = 0..nb-1:  d[16] (fp16) | scales_h[16] (u16) | scales_l[16] (u32)
//   qs[j][sb]   256 bytes, for sub-block j = 0..7 (outer), then sb: 4 lines of 64 bytes; in line L, bytes
//               4o..4o+3 are bytes 4L..4L+3 of sub-block j of row o (low nibbles: elements 4L..4L+3, high
//               nibbles: elements 16+4L..16+4L+3)
// One 64-byte load then gives, for 16 rows at once, the lanes of two VNNI weight vectors: the row format
// needs a 16x4 transposition per sub-block at every call.
//
// Q8_0, nb blocks of 32 per row:
//   d[b]        32 bytes, b = 0..nb-1: the 16 rows' fp16 scales of block b
//   qs[b]       512 bytes: 8 lines of 64 bytes; in line g, bytes 4o..4o+3 are elements 4g..4g+3 of row o
//
// MXFP4, nb blocks of 32 per row:
//   e[b]        16 bytes, b = 0..nb-1: the 16 rows' E8M0 exponents of block b
//   qs[b]       256 bytes: 4 lines of 64 bytes; in line L, bytes 4o..4o+3 are row o's qs[4L..4L+3] (low
//               nibbles: elements 4L..4L+3, high nibbles: elements 16+4L..16+4L+3)
// Q4_0 and IQ4_NL as MXFP4 with 32 bytes of fp16 d per block; Q4_1 with 64 (d of the 16 rows, then m); Q5_0
// and Q5_1 as Q4_0 and Q4_1 with a fifth 64-byte line after each block's qs lines, bytes 4o..4o+3 row o's qh.
//
// Q4_K, nb super-blocks of 256 per row; super-block sb of a tile is 16 * 144 bytes from sb * 2304:
//   header      256 bytes: d[16] (fp16) | dmin[16] (fp16) | scales bytes 0-3 [16] | 4-7 [16] | 8-11 [16]
//   qs[k]       512 bytes, k = 0..3: 8 lines of 64 bytes; in line g, bytes 4o..4o+3 are bytes 32k+4g..+3 of
//               row o's qs (low nibbles: elements 4g..4g+3 of sub-block 2k, high: of sub-block 2k+1)
// A super-block is read front to back, and the 6-bit scales of 8 rows unpack in the lanes of one register.
// Q5_K is laid out as Q4_K, with 16 * 176 bytes per super-block and 512 bytes of qh after the header: 8
// lines of 64 bytes, bytes 4o..4o+3 of line g being row o's qh[4g..4g+3]; the qs pieces follow.
//
// Q6_K, nb super-blocks of 256 per row; super-block sb of a tile is 16 * 210 bytes from sb * 3360:
//   header      288 bytes: d[16] (fp16) | scales[s][16] (int8, sub-block s = 0..15 outer, row inner)
//   half[H]     1536 bytes, H = 0, 1 (elements 128H..128H+127): three pieces of 8 lines of 64 bytes, the
//               runs ql[64H..64H+31], ql[64H+32..64H+63] and qh[32H..32H+31]; in line g of a piece, bytes
//               4o..4o+3 are bytes 4g..4g+3 of row o's run
//
// Q3_K, nb super-blocks of 256 per row; super-block sb of a tile is 16 * 110 bytes from sb * 1760:
//   header      224 bytes: d[16] (fp16) | scales bytes 0-3 [16] | 4-7 [16] | 8-11 [16]
//   hmask       512 bytes: 8 lines of 64 bytes; in line g, bytes 4o..4o+3 are row o's hmask[4g..4g+3]
//   qs[H]       512 bytes, H = 0, 1 (elements 128H..128H+127): 8 lines of 64 bytes; in line g, bytes
//               4o..4o+3 are row o's qs[32H+4g..32H+4g+3]
// A line of hmask and one of qs[H] give elements 4g..4g+3 of each 32-element chunk of half H for 16 rows.
//
// Q2_K, nb super-blocks of 256 per row; super-block sb of a tile is 16 * 84 bytes from sb * 1344:
//   header      320 bytes: d[16] (fp16) | dmin[16] (fp16) | scales bytes 0-3 [16] | 4-7 [16] | 8-11 [16] |
//               12-15 [16]
//   qs[H]       512 bytes, H = 0, 1: as Q3_K's qs[H]
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace mtp::kernels {

inline constexpr int64_t kPackRows = 16;

// Whether the active ISA level (isa.h) has a kernel for packed matrices of this type; without one a packed
// matrix still works (unpacked tile by tile) but is slower than the row format.
bool has_packed_kernel(GgmlType type);

// Whether pack_matrix handles w: a row-format IQ4_XS, Q8_0, Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1, MXFP4, Q2_K,
// Q3_K, Q4_K, Q5_K or Q6_K matrix with n_out a multiple of kPackRows.
bool can_pack(const MatrixView& w);

// Writes w packed into dst (w.n_out * w.row_bytes bytes, not overlapping w) and returns the view of dst.
MatrixView pack_matrix(const MatrixView& w, uint8_t* dst);

// The 16 rows from o_begin of a row-format matrix as one packed tile (16 * row_bytes bytes); rows past n_out
// repeat row o_begin. For kernels that run row-format matrices through the packed code.
void pack_tile(const MatrixView& w, int64_t o_begin, uint8_t* dst);

// Rows [o_begin, o_begin + n) of a packed matrix back in the row format, into dst (n * row_bytes bytes).
void unpack_rows(const MatrixView& packed, int64_t o_begin, int64_t n, uint8_t* dst);

}  // namespace mtp::kernels
