// Instruction-set levels of the kernels, detected once by CPUID, overridable for tests and benchmarks.
//
// Results are bitwise reproducible within one level (whatever the batch, row split or thread count); two
// levels may differ from each other in the last bits (different summation trees).
#pragma once

namespace mtp::kernels {

enum class Isa : int {
  kScalar = 0,  // portable C++, the reference every SIMD kernel is tested against
  kAvx2 = 1,    // AVX2 + FMA + F16C (Haswell and later)
  kAvx512 = 2,  // AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later)
};

const char* isa_name(Isa isa);

// The best level this CPU (and OS) supports; computed once.
Isa best_isa();
// Whether this CPU can run `isa`.
bool isa_supported(Isa isa);

// The level new work uses (PreparedActivations::prepare and the vector kernels). Starts at best_isa().
Isa active_isa();
// Forces a level (tests, benchmarks). Returns false, changing nothing, when the CPU lacks it. Call it while
// no kernel runs on another thread.
bool set_active_isa(Isa isa);

}  // namespace mtp::kernels
