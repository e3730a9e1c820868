#include "kernels/isa.h"

#include <atomic>

#include "matmul_internal.h"

namespace mtp::kernels {
namespace {

Isa detect() {
#if MTP_HAVE_X86_SIMD
  __builtin_cpu_init();
  // libgcc's checks include the OS (XCR0) enabling the ymm/zmm state.
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni");
  if (avx512) return Isa::kAvx512;
  if (avx2) return Isa::kAvx2;  // F16C comes with every AVX2 CPU
#endif
  return Isa::kScalar;
}

std::atomic<int>& active() {
  static std::atomic<int> level{static_cast<int>(best_isa())};
  return level;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

Isa best_isa() {
  static const Isa best = detect();
  return best;
}

bool isa_supported(Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(best_isa());
}

Isa active_isa() {
  return static_cast<Isa>(active().load(std::memory_order_relaxed));
}

bool set_active_isa(Isa isa) {
  if (!isa_supported(isa)) return false;
  active().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

}  // namespace mtp::kernels
