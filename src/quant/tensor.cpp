// Whole-tensor quantize / dequantize over a ThreadPool. Every quantizer works on one row at a time and no
// state crosses rows, so splitting rows across threads cannot change the bytes.
#include <algorithm>
#include <vector>

#include "quant/quantize.h"

namespace mtp {
namespace {

// Rows per task: about 64K elements, enough to amortise scheduling, small enough to balance 2..64 threads.
int64_t rows_per_task(int64_t n_rows, int64_t n_per_row, int n_threads) {
  constexpr int64_t kTargetElements = 1 << 16;
  int64_t rows = std::max<int64_t>(1, kTargetElements / std::max<int64_t>(1, n_per_row));
  // Keep at least a few tasks per thread when the tensor is small.
  const int64_t balanced = std::max<int64_t>(1, n_rows / (4 * static_cast<int64_t>(n_threads)));
  return std::min(rows, balanced);
}

// Runs row_fn(row) for every row, in parallel when a pool is given, and returns the error of the lowest
// failing row so that the reported error does not depend on scheduling either.
template <typename RowFn>
Status for_each_row(ThreadPool* pool, int64_t n_rows, int64_t n_per_row, const RowFn& row_fn) {
  if (n_rows <= 0) return Status::Ok();
  const int n_threads = pool ? pool->size() : 1;
  const int64_t chunk = rows_per_task(n_rows, n_per_row, n_threads);
  const int64_t n_tasks = (n_rows + chunk - 1) / chunk;
  std::vector<Status> task_status(static_cast<size_t>(n_tasks));
  auto run_task = [&](size_t task, int /*thread*/) {
    const int64_t begin = static_cast<int64_t>(task) * chunk;
    const int64_t end = std::min(n_rows, begin + chunk);
    for (int64_t row = begin; row < end; ++row) {
      Status s = row_fn(row);
      if (!s.ok()) {
        task_status[task] = s.with_context(str_cat("row ", row));
        return;
      }
    }
  };
  if (pool != nullptr && n_tasks > 1) {
    pool->parallel_for(static_cast<size_t>(n_tasks), run_task);
  } else {
    for (int64_t t = 0; t < n_tasks; ++t) run_task(static_cast<size_t>(t), 0);
  }
  for (const Status& s : task_status) MTP_RETURN_IF_ERROR(s);
  return Status::Ok();
}

Status check_tensor_shape(GgmlType type, int64_t n_rows, int64_t n_per_row) {
  if (n_rows < 0 || n_per_row < 0)
    return invalid_argument("negative tensor shape ", n_per_row, " x ", n_rows);
  if (!is_quantize_supported(type))
    return unsupported("quantization type ", type_name(type), " is not supported");
  const int64_t block = type_traits(type).block_size;
  if (n_per_row % block != 0) {
    return invalid_argument("row of ", n_per_row, " elements is not a multiple of the ", type_name(type),
                            " block size ", block);
  }
  return Status::Ok();
}

}  // namespace

Status quantize_tensor(ThreadPool* pool, GgmlType type, const float* src, void* dst, int64_t n_rows,
                       int64_t n_per_row, const float* imatrix) {
  MTP_RETURN_IF_ERROR(check_tensor_shape(type, n_rows, n_per_row));
  const int64_t row_bytes = row_size(type, n_per_row);
  auto* out = static_cast<uint8_t*>(dst);
  return for_each_row(pool, n_rows, n_per_row, [&](int64_t row) {
    return quantize_row(type, src + row * n_per_row, out + row * row_bytes, n_per_row, imatrix);
  });
}

Status dequantize_tensor(ThreadPool* pool, GgmlType type, const void* src, float* dst, int64_t n_rows,
                         int64_t n_per_row) {
  MTP_RETURN_IF_ERROR(check_tensor_shape(type, n_rows, n_per_row));
  const int64_t row_bytes = row_size(type, n_per_row);
  const auto* in = static_cast<const uint8_t*>(src);
  return for_each_row(pool, n_rows, n_per_row, [&](int64_t row) {
    return dequantize_row(type, in + row * row_bytes, dst + row * n_per_row, n_per_row);
  });
}

}  // namespace mtp
