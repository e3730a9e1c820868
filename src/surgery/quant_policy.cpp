#include "surgery/quant_policy.h"

namespace mtp::surgery {

GgmlType llama_type_fallback(GgmlType wanted, int64_t ne0) {
  const TypeTraits& t = type_traits(wanted);
  if (ne0 % t.block_size == 0) return wanted;
  GgmlType fallback = GgmlType::F16;
  switch (wanted) {
    case GgmlType::IQ4_XS:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
      fallback = GgmlType::IQ4_NL;
      break;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::TQ1_0:
    case GgmlType::TQ2_0:
    case GgmlType::Q2_0:
      fallback = GgmlType::Q4_0;
      break;
    case GgmlType::Q4_K:
      fallback = GgmlType::Q5_0;
      break;
    case GgmlType::Q5_K:
      fallback = GgmlType::Q5_1;
      break;
    case GgmlType::Q6_K:
      fallback = GgmlType::Q8_0;
      break;
    default:
      break;
  }
  if (ne0 % type_traits(fallback).block_size != 0) fallback = GgmlType::F16;
  return fallback;
}

GgmlType computable_fallback(GgmlType wanted, int64_t ne0) {
  GgmlType t = llama_type_fallback(wanted, ne0);
  if (type_traits(t).computable) return t;
  return ne0 % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F16;
}

uint32_t file_type_for(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return 0;
    case GgmlType::F16:
      return 1;
    case GgmlType::Q4_0:
      return 2;
    case GgmlType::Q4_1:
      return 3;
    case GgmlType::Q8_0:
      return 7;
    case GgmlType::Q5_0:
      return 8;
    case GgmlType::Q5_1:
      return 9;
    case GgmlType::Q2_K:
      return 10;
    case GgmlType::Q3_K:
      return 12;
    case GgmlType::Q4_K:
      return 15;
    case GgmlType::Q5_K:
      return 17;
    case GgmlType::Q6_K:
      return 18;
    case GgmlType::IQ4_NL:
      return 25;
    case GgmlType::IQ4_XS:
      return 30;
    case GgmlType::BF16:
      return 32;
    case GgmlType::MXFP4:
      return 38;  // MOSTLY_MXFP4_MOE
    default:
      return 0;
  }
}

}  // namespace mtp::surgery
