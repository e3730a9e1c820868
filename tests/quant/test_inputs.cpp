#include "test_inputs.h"

#include <gtest/gtest.h>

namespace mtp::test {

std::vector<uint8_t> quantize_bytes(GgmlType type, const std::vector<float>& src, int64_t n_rows,
                                    const float* imatrix, ThreadPool* pool) {
  const int64_t n_per_row = static_cast<int64_t>(src.size()) / n_rows;
  std::vector<uint8_t> out(static_cast<size_t>(row_size(type, n_per_row) * n_rows));
  const Status s = quantize_tensor(pool, type, src.data(), out.data(), n_rows, n_per_row, imatrix);
  EXPECT_TRUE(s.ok()) << type_name(type) << ": " << s.message();
  return out;
}

std::vector<float> dequantize_floats(GgmlType type, const std::vector<uint8_t>& bytes, int64_t n_rows,
                                     int64_t n_per_row) {
  std::vector<float> out(static_cast<size_t>(n_rows * n_per_row));
  const Status s = dequantize_tensor(nullptr, type, bytes.data(), out.data(), n_rows, n_per_row);
  EXPECT_TRUE(s.ok()) << type_name(type) << ": " << s.message();
  return out;
}

}  // namespace mtp::test
