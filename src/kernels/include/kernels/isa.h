// Instruction-set levels of the kernels, detected once by CPUID, overridable for tests and benchmarks.
//
// Results are bitwise reproducible within one level (whatever the batch, row split or thread count); two
// levels may differ from each other in the last bits (different summation trees).
#pragma once

#include <string>

namespace mtp::kernels {

enum class Isa : int {
  kScalar = 0,  // portable C++, the reference every SIMD kernel is tested against
  kAvx2 = 1,    // AVX2 + FMA + F16C (Haswell and later)
  kAvx512 = 2,  // AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later)
  kNeon = 3,    // AArch64 NEON with the dot-product extension (ARMv8.2-A and later)
};

const char* isa_name(Isa isa);

// The best level this CPU (and OS) supports; computed once.
Isa best_isa();
// Whether this CPU can run `isa`: scalar everywhere; on x86-64 the x86 levels up to the best; on Arm neon.
bool isa_supported(Isa isa);

// The level new work uses (PreparedActivations::prepare and the vector kernels). Starts at best_isa(), or
// at the level MTP_ISA names where the CPU has it: scalar, avx2 (plain AVX2: AVX-VNNI off), avxvnni (AVX2
// with AVX-VNNI), avx512, neon.
Isa active_isa();
// Forces a level (tests, benchmarks). Returns false, changing nothing, when the CPU lacks it. Call it while
// no kernel runs on another thread.
bool set_active_isa(Isa isa);

// AVX-VNNI (vpdpbusd on 256-bit registers: Intel client parts from Alder Lake on, AMD Zen 5) within the AVX2
// level: where it is on, the AVX2 IQ4_XS packed kernel sums with it. Same bits either way. On by default
// where the CPU has it; set_avx_vnni returns false, changing nothing, where it does not.
bool avx_vnni_supported();
bool avx_vnni_active();
bool set_avx_vnni(bool on);

// Sets the level and AVX-VNNI by a name MTP_ISA takes (benchmarks' --isa). Returns empty, or the one-line
// reason ("NAME: ...") and changes nothing. Call it while no kernel runs on another thread.
std::string set_level(const std::string& name);

// Empty where MTP_ISA is unset or names a level this CPU has; else the one-line reason, naming the levels the
// CPU has. The tools check it before any kernel runs and exit with it.
std::string isa_env_error();

// What new work runs on, for logs: "avx512 + amx", "avx512", "avx2 + avx-vnni", "avx2", "neon" or "scalar".
const char* kernels_summary();

}  // namespace mtp::kernels
