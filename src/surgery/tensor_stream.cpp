#include "surgery/tensor_stream.h"

#include <algorithm>
#include <vector>

#include "quant/quantize.h"

namespace mtp::surgery {
namespace {

constexpr uint64_t kCopyChunk = uint64_t{16} << 20;        // bytes per write when copying
constexpr int64_t kConvertChunkFloats = int64_t{4} << 20;  // F32 values per conversion chunk (16 MB)

}  // namespace

Status stream_tensor(GgufWriter& writer, const GgufFile& source, const TensorInfo& t, GgmlType to,
                     ThreadPool& pool, const float* imatrix, Progress* progress) {
  const auto data = source.tensor_data(t);
  if (to == t.type) {
    for (uint64_t off = 0; off < data.size(); off += kCopyChunk) {
      const uint64_t n = std::min<uint64_t>(kCopyChunk, data.size() - off);
      MTP_RETURN_IF_ERROR(writer.write(data.subspan(off, n)));
      // Release as we go: peak RSS stays at about one chunk, however large the tensor.
      source.release_tensor_pages(t, off, n);
      if (progress) progress->advance(n);
    }
    if (data.empty()) MTP_RETURN_IF_ERROR(writer.write_tensor({}));
    return Status::Ok();
  }

  const int64_t n_per_row = t.ne[0];
  const int64_t n_rows = t.n_rows();
  const int64_t rows_per_matrix = t.ne[1];
  const int64_t in_row = row_size(t.type, n_per_row);
  const int64_t out_row = row_size(to, n_per_row);
  // Whole rows per chunk; at least one row, and never straddling two expert matrices when an imatrix is given
  // per matrix (each matrix has its own weights).
  int64_t rows_per_chunk = std::max<int64_t>(1, kConvertChunkFloats / std::max<int64_t>(1, n_per_row));
  if (imatrix != nullptr) rows_per_chunk = std::min(rows_per_chunk, rows_per_matrix);
  std::vector<float> f32(static_cast<size_t>(rows_per_chunk * n_per_row));
  std::vector<uint8_t> out(static_cast<size_t>(rows_per_chunk * out_row));
  if (n_rows == 0) return writer.write_tensor({});

  for (int64_t r0 = 0; r0 < n_rows;) {
    int64_t nr = std::min(rows_per_chunk, n_rows - r0);
    const float* weights = nullptr;
    if (imatrix != nullptr) {
      const int64_t matrix = r0 / rows_per_matrix;
      nr = std::min(nr, (matrix + 1) * rows_per_matrix - r0);
      weights = imatrix + matrix * n_per_row;
    }
    const uint8_t* in = data.data() + r0 * in_row;
    Status s = dequantize_tensor(&pool, t.type, in, f32.data(), nr, n_per_row);
    if (!s.ok()) return s.with_context(str_cat("tensor '", t.name, "' rows ", r0, "..", r0 + nr - 1));
    s = quantize_tensor(&pool, to, f32.data(), out.data(), nr, n_per_row, weights);
    if (!s.ok()) return s.with_context(str_cat("tensor '", t.name, "' rows ", r0, "..", r0 + nr - 1));
    MTP_RETURN_IF_ERROR(writer.write({out.data(), static_cast<size_t>(nr * out_row)}));
    source.release_tensor_pages(t, static_cast<uint64_t>(r0 * in_row), static_cast<uint64_t>(nr * in_row));
    if (progress) progress->advance(static_cast<uint64_t>(nr * in_row));
    r0 += nr;
  }
  return Status::Ok();
}

}  // namespace mtp::surgery
