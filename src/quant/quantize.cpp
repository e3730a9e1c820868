// Argument checking and dispatch for the row kernels of kernels.h, and ggml-style output validation.
#include "quant/quantize.h"

#include <cmath>
#include <cstddef>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"

namespace mtp {
namespace {

bool is_finite_value(float v) {
  return std::isfinite(v);
}

// First non-finite value of a float array, or -1.
int64_t first_non_finite(const float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!is_finite_value(values[i])) return i;
  }
  return -1;
}

size_t block_alignment(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::Q8_K:
      return 4;
    case GgmlType::MXFP4:
      return 1;  // 17-byte blocks of bytes
    default:
      return 2;  // fp16 fields; every other supported block starts with (or holds) uint16_t
  }
}

Status check_row_args(GgmlType type, int64_t n, const void* data) {
  if (!is_quantize_supported(type)) {
    return unsupported("quantization type ", type_name(type), " (id ", static_cast<int32_t>(type),
                       ") is not supported by the quant library");
  }
  const int64_t block = type_traits(type).block_size;
  if (n < 0 || n % block != 0) {
    return invalid_argument("row of ", n, " elements is not a multiple of the ", type_name(type),
                            " block size ", block);
  }
  if (n > 0 && reinterpret_cast<uintptr_t>(data) % block_alignment(type) != 0) {
    return invalid_argument(type_name(type), " buffer is not aligned to ", block_alignment(type), " bytes");
  }
  return Status::Ok();
}

// F16/BF16 turn a finite value above their range into Inf; ggml would write it, llama-quantize's validation
// would then reject the file. Refuse it here with the offending value.
Status check_half_row(const uint16_t* half, const float* src, int64_t n, bool is_bf16) {
  for (int64_t i = 0; i < n; ++i) {
    const float back = is_bf16 ? bf16_to_fp32(half[i]) : fp16_to_fp32(half[i]);
    if (!std::isfinite(back)) {
      return invalid_argument("value ", src[i], " at column ", i, " overflows ", is_bf16 ? "bf16" : "f16");
    }
  }
  return Status::Ok();
}

}  // namespace

// The type table (types.cpp) is the one place that says which types this library encodes and decodes.
bool is_quantize_supported(GgmlType type) {
  const auto traits = type_traits(static_cast<int32_t>(type));
  return traits && traits->computable;
}

bool uses_imatrix(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n, const float* imatrix) {
  MTP_RETURN_IF_ERROR(check_row_args(type, n, dst));
  if (const int64_t bad = first_non_finite(src, n); bad >= 0) {
    return invalid_argument("cannot quantize to ", type_name(type), ": value ", src[bad], " at column ", bad,
                            " is not finite");
  }
  if (!uses_imatrix(type)) imatrix = nullptr;
  if (imatrix != nullptr) {
    if (const int64_t bad = first_non_finite(imatrix, n); bad >= 0) {
      return invalid_argument("imatrix weight ", imatrix[bad], " at column ", bad, " is not finite");
    }
  }
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case GgmlType::F16:
      convert_row_f32_to_f16(src, static_cast<uint16_t*>(dst), n);
      return check_half_row(static_cast<const uint16_t*>(dst), src, n, /*is_bf16=*/false);
    case GgmlType::BF16:
      convert_row_f32_to_bf16(src, static_cast<uint16_t*>(dst), n);
      return check_half_row(static_cast<const uint16_t*>(dst), src, n, /*is_bf16=*/true);
    case GgmlType::Q8_0:
      quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n);
      break;
    case GgmlType::Q4_0:
      quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n, imatrix);
      break;
    case GgmlType::Q4_1:
      quantize_row_q4_1(src, static_cast<BlockQ4_1*>(dst), n, imatrix);
      break;
    case GgmlType::Q5_0:
      quantize_row_q5_0(src, static_cast<BlockQ5_0*>(dst), n, imatrix);
      break;
    case GgmlType::Q5_1:
      quantize_row_q5_1(src, static_cast<BlockQ5_1*>(dst), n, imatrix);
      break;
    case GgmlType::Q2_K:
      quantize_row_q2_K(src, static_cast<BlockQ2_K*>(dst), n, imatrix);
      break;
    case GgmlType::Q3_K:
      quantize_row_q3_K(src, static_cast<BlockQ3_K*>(dst), n, imatrix);
      break;
    case GgmlType::Q4_K:
      quantize_row_q4_K(src, static_cast<BlockQ4_K*>(dst), n, imatrix);
      break;
    case GgmlType::Q5_K:
      quantize_row_q5_K(src, static_cast<BlockQ5_K*>(dst), n, imatrix);
      break;
    case GgmlType::Q6_K:
      quantize_row_q6_K(src, static_cast<BlockQ6_K*>(dst), n, imatrix);
      break;
    case GgmlType::IQ4_NL:
      quantize_row_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n, imatrix);
      break;
    case GgmlType::MXFP4:
      quantize_row_mxfp4(src, static_cast<BlockMXFP4*>(dst), n);
      break;
    case GgmlType::IQ4_XS:
      quantize_row_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n, imatrix);
      break;
    case GgmlType::Q8_K:
      quantize_row_q8_K(src, static_cast<BlockQ8_K*>(dst), n);
      break;
    default:
      return unsupported("quantization type ", type_name(type));  // unreachable: checked above
  }
  // A finite row can still produce an fp16 scale that overflows (e.g. Q8_0 with |x| > 65504 * 127).
  return validate_row_data(type, dst, row_size(type, n))
      .with_context(str_cat("quantized ", type_name(type), " row is invalid"));
}

Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  MTP_RETURN_IF_ERROR(check_row_args(type, n, src));
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case GgmlType::F16:
      convert_row_f16_to_f32(static_cast<const uint16_t*>(src), dst, n);
      break;
    case GgmlType::BF16:
      convert_row_bf16_to_f32(static_cast<const uint16_t*>(src), dst, n);
      break;
    case GgmlType::Q8_0:
      dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
      break;
    case GgmlType::Q4_0:
      dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n);
      break;
    case GgmlType::Q4_1:
      dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n);
      break;
    case GgmlType::Q5_0:
      dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n);
      break;
    case GgmlType::Q5_1:
      dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n);
      break;
    case GgmlType::Q2_K:
      dequantize_row_q2_K(static_cast<const BlockQ2_K*>(src), dst, n);
      break;
    case GgmlType::Q3_K:
      dequantize_row_q3_K(static_cast<const BlockQ3_K*>(src), dst, n);
      break;
    case GgmlType::Q4_K:
      dequantize_row_q4_K(static_cast<const BlockQ4_K*>(src), dst, n);
      break;
    case GgmlType::Q5_K:
      dequantize_row_q5_K(static_cast<const BlockQ5_K*>(src), dst, n);
      break;
    case GgmlType::Q6_K:
      dequantize_row_q6_K(static_cast<const BlockQ6_K*>(src), dst, n);
      break;
    case GgmlType::IQ4_NL:
      dequantize_row_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, n);
      break;
    case GgmlType::MXFP4:
      dequantize_row_mxfp4(static_cast<const BlockMXFP4*>(src), dst, n);
      break;
    case GgmlType::IQ4_XS:
      dequantize_row_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, n);
      break;
    case GgmlType::Q8_K:
      dequantize_row_q8_K(static_cast<const BlockQ8_K*>(src), dst, n);
      break;
    default:
      return unsupported("dequantization type ", type_name(type));  // unreachable: checked above
  }
  return Status::Ok();
}

Status validate_row_data(GgmlType type, const void* data, int64_t n_bytes) {
  const TypeTraits& traits = type_traits(type);
  if (traits.type_size == 0) return unsupported("type id ", static_cast<int32_t>(type), " has been removed");
  if (n_bytes < 0 || n_bytes % traits.type_size != 0) {
    return invalid_argument(n_bytes, " bytes is not a whole number of ", traits.name, " blocks (",
                            traits.type_size, " bytes each)");
  }
  // ggml checks more types than these; for the rest only the size can be checked here.
  if (!is_quantize_supported(type)) return Status::Ok();
  const auto* bytes = static_cast<const uint8_t*>(data);
  const int64_t n_blocks = n_bytes / traits.type_size;
  // Reads a field at `offset` inside block b without assuming alignment.
  auto half_at = [&](int64_t b, size_t offset) {
    uint16_t h;
    std::memcpy(&h, bytes + b * traits.type_size + static_cast<int64_t>(offset), sizeof(h));
    return h;
  };
  auto bad_half = [](uint16_t h) { return (h & 0x7C00u) == 0x7C00u; };  // Inf or NaN
  auto fail = [&](int64_t b, const char* field) {
    return invalid_argument(traits.name, " block ", b, " has a non-finite ", field);
  };
  for (int64_t b = 0; b < n_blocks; ++b) {
    switch (type) {
      case GgmlType::F32: {
        float v;
        std::memcpy(&v, bytes + 4 * b, sizeof(v));
        if (!std::isfinite(v)) return fail(b, "value");
        break;
      }
      case GgmlType::F16:
        if (bad_half(half_at(b, 0))) return fail(b, "value");
        break;
      case GgmlType::BF16:
        if ((half_at(b, 0) & 0x7F80u) == 0x7F80u) return fail(b, "value");
        break;
      case GgmlType::Q8_0:
      case GgmlType::Q4_0:
      case GgmlType::Q5_0:
      case GgmlType::IQ4_NL:
      case GgmlType::IQ4_XS:
        if (bad_half(half_at(b, 0))) return fail(b, "scale d");
        break;
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
        if (bad_half(half_at(b, 0))) return fail(b, "scale d");
        if (bad_half(half_at(b, 2))) return fail(b, "min m");
        break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        if (bad_half(half_at(b, offsetof(BlockQ4_K, d)))) return fail(b, "scale d");
        if (bad_half(half_at(b, offsetof(BlockQ4_K, dmin)))) return fail(b, "scale dmin");
        break;
      case GgmlType::Q6_K:
        if (bad_half(half_at(b, offsetof(BlockQ6_K, d)))) return fail(b, "scale d");
        break;
      case GgmlType::Q2_K:
        if (bad_half(half_at(b, offsetof(BlockQ2_K, d)))) return fail(b, "scale d");
        if (bad_half(half_at(b, offsetof(BlockQ2_K, dmin)))) return fail(b, "scale dmin");
        break;
      case GgmlType::Q3_K:
        if (bad_half(half_at(b, offsetof(BlockQ3_K, d)))) return fail(b, "scale d");
        break;
      case GgmlType::Q8_K: {
        float d;
        std::memcpy(&d, bytes + b * traits.type_size, sizeof(d));
        if (!std::isfinite(d)) return fail(b, "scale d");
        break;
      }
      default:
        return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace mtp
