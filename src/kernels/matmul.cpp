// The matmul driver: tiling over output rows and activation rows, threads, and kernel selection.
#include <algorithm>
#include <vector>

#include "base/check.h"
#include "kernels/matmul.h"
#include "kernels/pack.h"
#include "matmul_internal.h"

namespace mtp::kernels {

MatrixView MatrixView::contiguous(GgmlType type, const void* data, int64_t n_in, int64_t n_out) {
  MatrixView v;
  v.type = type;
  v.data = static_cast<const uint8_t*>(data);
  v.n_in = n_in;
  v.n_out = n_out;
  v.row_bytes = row_size(type, n_in);
  return v;
}

MatrixView MatrixView::stacked(GgmlType type, const void* data, int64_t n_in, int64_t n_out, int64_t index) {
  return contiguous(type, data, n_in, n_out).stacked_at(index);
}

MatrixView MatrixView::stacked_at(int64_t index) const {
  MatrixView v = *this;
  v.data += index * n_out * row_bytes;
  return v;
}

bool is_matmul_supported(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

ActFormat act_format(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      return ActFormat::kF32;
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
      return ActFormat::kQ8_0;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
      return ActFormat::kQ8_K;
    default:
      break;
  }
  MTP_CHECK(false, "matmul does not handle weights of type ", type_name(weight_type));
  return ActFormat::kF32;
}

int64_t act_block_size(ActFormat format) {
  switch (format) {
    case ActFormat::kF32:
      return 1;
    case ActFormat::kQ8_0:
      return 32;
    case ActFormat::kQ8_K:
      return 256;
  }
  return 1;
}

namespace detail {
void run_packed_on_row_format(TileFn packed, GgmlType type, const uint8_t* w, int64_t row_bytes, int n_out,
                              const uint8_t* const* x, int64_t nx, const ActLayout& l, float* y,
                              int64_t y_stride) {
  static thread_local std::vector<uint8_t> buf;
  buf.resize(static_cast<size_t>(kPackRows * row_bytes));
  pack_tile(MatrixView::contiguous(type, w, l.n_in, n_out), 0, buf.data());
  packed(buf.data(), row_bytes, n_out, x, nx, l, y, y_stride);
}

const KernelSet& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512_kernels();
    case Isa::kAvx2:
      return avx2_kernels();
    case Isa::kNeon:
      return neon_kernels();
    case Isa::kScalar:
      break;
  }
  return scalar_kernels();
}
}  // namespace detail

bool has_packed_kernel(GgmlType type) {
  return detail::kernels_for(active_isa()).packed[static_cast<int>(type)] != nullptr;
}

namespace {

static_assert(kPackRows == detail::kTileOut, "a packed tile is one call of the tile kernels");

// Batches of at most this many activation rows are split for streaming weights (see matmul_batch).
constexpr int64_t kDecodeSizedRows = 8;

// Weight rows kept hot (in L2) while every group of activation rows passes over them.
constexpr int64_t kWeightTileBytes = 256 * 1024;

// While weight rows stream from memory the first time (first group of activation rows), each row is
// requested about this many bytes ahead of its use: one core's hardware prefetcher alone leaves DRAM
// bandwidth unused (measured: about 20% faster decode on the 2048x512 Q8_0 expert).
constexpr int64_t kPrefetchBytes = 4096;

inline void prefetch_row(const uint8_t* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
}

// The activation rows of a call, as pointers.
const uint8_t* const* row_pointers(const PreparedActivations& x, const int32_t* rows, int64_t n_rows) {
  static thread_local std::vector<const uint8_t*> xs;
  xs.resize(static_cast<size_t>(n_rows));
  for (int64_t i = 0; i < n_rows; ++i) {
    const int64_t r = rows != nullptr ? rows[i] : i;
    MTP_CHECK(r >= 0 && r < x.n_rows());
    xs[static_cast<size_t>(i)] = x.row(r);
  }
  return xs.data();
}

// matmul_range over a packed matrix: the level's packed kernel tile by tile, or else each tile unpacked
// into the row format and run through the ordinary path (the same results either way).
void packed_range(const MatrixView& w, const PreparedActivations& x, const int32_t* rows, int64_t n_rows,
                  int64_t o_begin, int64_t o_end, float* y, int64_t y_stride) {
  MTP_CHECK(o_begin % kPackRows == 0 && (o_end % kPackRows == 0 || o_end == w.n_out), "matmul_range: rows [",
            o_begin, ", ", o_end, ") of a packed matrix are not on tile boundaries");
  const detail::ActLayout& layout = x.layout();
  const detail::TileFn fn = detail::kernels_for(layout.isa).packed[static_cast<int>(w.type)];
  const int64_t tile_bytes = kPackRows * w.row_bytes;
  if (fn != nullptr) {
    const uint8_t* const* xs = row_pointers(x, rows, n_rows);
    // No software prefetch: a tile is read front to back, which the hardware prefetcher follows; requesting
    // the next tile ahead measured 15-20% slower decode (kernels_bench --packed, engine_bench).
    for (int64_t ob = o_begin; ob < o_end; ob += kPackRows) {
      const int n = static_cast<int>(std::min<int64_t>(kPackRows, o_end - ob));
      fn(w.data + ob * w.row_bytes, w.row_bytes, n, xs, n_rows, layout, y + ob, y_stride);
    }
    return;
  }
  static thread_local std::vector<uint8_t> tile;
  tile.resize(static_cast<size_t>(tile_bytes));
  for (int64_t ob = o_begin; ob < o_end; ob += kPackRows) {
    const int64_t n = std::min<int64_t>(kPackRows, o_end - ob);
    unpack_rows(w, ob, n, tile.data());
    matmul_range(MatrixView::contiguous(w.type, tile.data(), w.n_in, n), x, rows, n_rows, 0, n, y + ob,
                 y_stride);
  }
}

}  // namespace

void matmul_range(const MatrixView& w, const PreparedActivations& x, const int32_t* rows, int64_t n_rows,
                  int64_t o_begin, int64_t o_end, float* y, int64_t y_stride) {
  MTP_CHECK(w.n_in == x.n_in() && act_format(w.type) == x.format(), "matmul: ", type_name(w.type), " [",
            w.n_in, "] with activations of width ", x.n_in());
  MTP_CHECK(o_begin >= 0 && o_begin <= o_end && o_end <= w.n_out);
  MTP_CHECK(n_rows >= 0 && (rows != nullptr || n_rows <= x.n_rows()));
  if (n_rows == 0 || o_begin == o_end) return;
  if (w.packed) return packed_range(w, x, rows, n_rows, o_begin, o_end, y, y_stride);
  const detail::ActLayout& layout = x.layout();
  const detail::KernelSet& ks = detail::kernels_for(layout.isa);
  const detail::TileFn tile_fn = ks.tile[static_cast<int>(w.type)];
  if (tile_fn != nullptr && n_rows >= ks.tile_min_rows[static_cast<int>(w.type)]) {
    // Tiles of kTileOut weight rows, each decoded once and run over all activation rows.
    const uint8_t* const* xs = row_pointers(x, rows, n_rows);
    for (int64_t ob = o_begin; ob < o_end; ob += detail::kTileOut) {
      const int n = static_cast<int>(std::min<int64_t>(detail::kTileOut, o_end - ob));
      // The next tile's weight rows are requested while this one is decoded (weights streamed from DRAM).
      const int64_t next_end = std::min<int64_t>(o_end, ob + 2 * detail::kTileOut);
      for (int64_t o = ob + detail::kTileOut; o < next_end; ++o)
        prefetch_row(w.data + o * w.row_bytes, w.row_bytes);
      tile_fn(w.data + ob * w.row_bytes, w.row_bytes, n, xs, n_rows, layout, y + ob, y_stride);
    }
    return;
  }
  const detail::RowDotFn fn = ks.dot[static_cast<int>(w.type)];
  MTP_CHECK(fn != nullptr, "no ", isa_name(layout.isa), " kernel for ", type_name(w.type));
  const int tile = ks.tile_rows;
  const int64_t o_tile =
      n_rows <= tile ? o_end - o_begin : std::max<int64_t>(1, kWeightTileBytes / w.row_bytes);
  const int64_t pf_rows = (kPrefetchBytes + w.row_bytes - 1) / w.row_bytes;
  const uint8_t* xr[detail::kMaxTileRows];
  float out[detail::kMaxTileRows];
  for (int64_t ob = o_begin; ob < o_end; ob += o_tile) {
    const int64_t oe = std::min(o_end, ob + o_tile);
    for (int64_t g = 0; g < n_rows; g += tile) {
      const int nr = static_cast<int>(std::min<int64_t>(tile, n_rows - g));
      for (int i = 0; i < nr; ++i) {
        const int64_t r = rows != nullptr ? rows[g + i] : g + i;
        MTP_CHECK(r >= 0 && r < x.n_rows());
        xr[i] = x.row(r);
      }
      float* yg = y + g * y_stride;
      for (int64_t o = ob; o < oe; ++o) {
        if (g == 0 && o + pf_rows < o_end) prefetch_row(w.data + (o + pf_rows) * w.row_bytes, w.row_bytes);
        fn(w.data + o * w.row_bytes, xr, nr, layout, out);
        for (int i = 0; i < nr; ++i) yg[i * y_stride + o] = out[i];
      }
    }
  }
}

void matmul(const MatrixView& w, const PreparedActivations& x, float* y, int64_t y_stride, ThreadPool* pool) {
  const MatmulJob job{w, y, y_stride};
  matmul_batch({&job, 1}, x, pool);
}

void matmul_batch(std::span<const MatmulJob> jobs, const PreparedActivations& x, ThreadPool* pool) {
  // Where the call's work keeps one thread busy only, it runs on this one.
  int64_t bytes = 0;
  for (const MatmulJob& j : jobs) bytes += j.w.n_out * j.w.row_bytes;
  const int n_threads = pool != nullptr ? pool->threads_for(product_work(bytes, x.n_rows())) : 1;
  if (n_threads <= 1) {
    for (const MatmulJob& j : jobs) matmul_range(j.w, x, nullptr, x.n_rows(), 0, j.w.n_out, j.y, j.y_stride);
    return;
  }
  // Chunks of output rows, at least 4 rows each, whole tiles where the kernel works in tiles (the split does
  // not change any result). Prompt-sized batches, compute-bound, take about 8 chunks per thread and matrix,
  // which keeps the threads even. Decode-sized ones stream each weight once from DRAM and take about 2 per
  // thread over the whole call, at most a matrix: fewer, longer pieces keep the prefetch streams running
  // (e.g. the shared expert's 512-row gate and up were 32-row pieces of 35 KB). Measured in one process,
  // alternating the two rules (t=2, 35B-A3B widths, IQ4_XS): one row 1-2% and two rows 1.5-2.5% faster.
  const bool decode_sized = x.n_rows() <= kDecodeSizedRows;
  int64_t total_out = 0;
  for (const MatmulJob& j : jobs) total_out += j.w.n_out;
  struct Item {
    int32_t job;
    int64_t begin, end;
  };
  static thread_local std::vector<Item> items;
  items.clear();
  const detail::KernelSet& ks = detail::kernels_for(x.isa());
  for (size_t ji = 0; ji < jobs.size(); ++ji) {
    const MatrixView& w = jobs[ji].w;
    const int t = static_cast<int>(w.type);
    int64_t chunk = decode_sized ? std::min(w.n_out, (total_out + 2 * n_threads - 1) / (2 * n_threads))
                                 : (w.n_out + 8 * n_threads - 1) / (8 * n_threads);
    chunk = std::max<int64_t>(4, chunk);
    if (w.packed || (ks.tile[t] != nullptr && x.n_rows() >= ks.tile_min_rows[t]))
      chunk = (chunk + detail::kTileOut - 1) / detail::kTileOut * detail::kTileOut;
    for (int64_t ob = 0; ob < w.n_out; ob += chunk)
      items.push_back({static_cast<int32_t>(ji), ob, std::min(w.n_out, ob + chunk)});
  }
  const std::vector<Item>& list = items;  // the workers read the caller's list
  pool->parallel_for(list.size(), [&](size_t i, int) {
    const Item& it = list[i];
    const MatmulJob& j = jobs[static_cast<size_t>(it.job)];
    matmul_range(j.w, x, nullptr, x.n_rows(), it.begin, it.end, j.y, j.y_stride);
  });
}

}  // namespace mtp::kernels
