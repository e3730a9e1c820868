// Weight matrices repacked once at load for the SIMD kernels (design.md section 3: "weights may be repacked
// once at load for SIMD-friendly layouts").
//
// A packed matrix has the row format's bytes per row and total size, so stacked experts and output-row
// ranges keep their byte offsets; inside, rows are interleaved in tiles of kPackRows. matmul and
// matmul_range take packed views (MatrixView::packed) with output ranges on tile boundaries; at ISA levels
// without a packed kernel they unpack each tile and run the row-format kernels, so every level computes the
// same results as over the original matrix.
//
// IQ4_XS, the one packed type so far (the body of the seed's IQ4_XS graft). Tile t holds rows 16t..16t+15;
// with nb super-blocks per row it is nb * 16 * 136 bytes:
//   header[sb]  128 bytes, sb = 0..nb-1:  d[16] (fp16) | scales_h[16] (u16) | scales_l[16] (u32)
//   qs[j][sb]   256 bytes, for sub-block j = 0..7 (outer), then sb: 4 lines of 64 bytes; in line L, bytes
//               4o..4o+3 are bytes 4L..4L+3 of sub-block j of row o (low nibbles: elements 4L..4L+3, high
//               nibbles: elements 16+4L..16+4L+3)
// One 64-byte load then gives, for 16 rows at once, the lanes of two VNNI weight vectors: the row format
// needs a 16x4 transposition per sub-block at every call.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace mtp::kernels {

inline constexpr int64_t kPackRows = 16;

// Whether the active ISA level (isa.h) has a kernel for packed matrices of this type; without one a packed
// matrix still works (unpacked tile by tile) but is slower than the row format.
bool has_packed_kernel(GgmlType type);

// Whether pack_matrix handles w: a row-format IQ4_XS matrix with n_out a multiple of kPackRows.
bool can_pack(const MatrixView& w);

// Writes w packed into dst (w.n_out * w.row_bytes bytes, not overlapping w) and returns the view of dst.
MatrixView pack_matrix(const MatrixView& w, uint8_t* dst);

// Rows [o_begin, o_begin + n) of a packed matrix back in the row format, into dst (n * row_bytes bytes).
void unpack_rows(const MatrixView& packed, int64_t o_begin, int64_t n, uint8_t* dst);

}  // namespace mtp::kernels
