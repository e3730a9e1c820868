#include "kernels/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "matmul_internal.h"

#if MTP_HAVE_X86_SIMD
#include <cpuid.h>
#endif
#if MTP_HAVE_ARM_DOTPROD
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

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
#if MTP_HAVE_ARM_DOTPROD
  if ((getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0) return Isa::kNeon;
#endif
  return Isa::kScalar;
}

bool detect_avx_vnni() {
#if MTP_HAVE_X86_SIMD
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) return false;  // also checks that the OS enables the ymm state
  // CPUID.(EAX=7, ECX=1):EAX bit 4, read directly: clang before 16 has no "avxvnni" for
  // __builtin_cpu_supports, and the fuzz build uses clang.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 4)) != 0;
#else
  return false;
#endif
}

// The starting level and AVX-VNNI setting. MTP_ISA=scalar|avx2|avxvnni|avx512|neon in the environment starts
// the process below the CPU's best (to measure or test the AVX2 kernels on an AVX-512 host, or plain AVX2 on
// an AVX-VNNI one). The tools refuse a value that is not known or that the CPU lacks (isa_env_error); a
// library user that does not ask gets the CPU's best, with the reason printed once on stderr.
struct Start {
  Isa isa;
  bool vnni;
};

// The levels MTP_ISA may name, lowest first.
struct Named {
  const char* name;
  Start start;
};
constexpr Named kNamed[] = {{"scalar", {Isa::kScalar, false}},
                            {"avx2", {Isa::kAvx2, false}},
                            {"avxvnni", {Isa::kAvx2, true}},
                            {"avx512", {Isa::kAvx512, true}},
                            {"neon", {Isa::kNeon, false}}};

bool cpu_has(const Named& n) {
  return isa_supported(n.start.isa) && (n.start.isa != Isa::kAvx2 || !n.start.vnni || avx_vnni_supported());
}

// The start a level's name asks for, or the reason it cannot be had ("NAME: ...", *out untouched).
std::string find_level(const std::string& name, Start* out) {
  std::string names, has;
  for (const Named& n : kNamed) {
    names += std::string(names.empty() ? "" : ", ") + n.name;
    if (cpu_has(n)) has += std::string(has.empty() ? "" : ", ") + n.name;
  }
  for (const Named& n : kNamed) {
    if (name != n.name) continue;
    if (!cpu_has(n)) return name + ": this CPU lacks it (it has " + has + ")";
    *out = {n.start.isa, n.start.vnni && avx_vnni_supported()};
    return {};
  }
  return name + ": not one of " + names;
}

// The start MTP_ISA asks for, or the reason it cannot be had (then *out is the CPU's best).
std::string parse_env(Start* out) {
  *out = {best_isa(), avx_vnni_supported()};
  const char* env = std::getenv("MTP_ISA");
  if (env == nullptr || *env == '\0') return {};
  const std::string error = find_level(env, out);
  return error.empty() ? error : "MTP_ISA=" + error;
}

Start initial() {
  Start s;
  const std::string error = parse_env(&s);
  if (!error.empty()) std::fprintf(stderr, "%s; using %s\n", error.c_str(), isa_name(s.isa));
  return s;
}

const Start& start() {
  static const Start s = initial();
  return s;
}

std::atomic<bool>& vnni() {
  static std::atomic<bool> on{start().vnni};
  return on;
}

std::atomic<int>& active() {
  static std::atomic<int> level{static_cast<int>(start().isa)};
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
    case Isa::kNeon:
      return "neon";
  }
  return "?";
}

Isa best_isa() {
  static const Isa best = detect();
  return best;
}

bool isa_supported(Isa isa) {
  const Isa best = best_isa();
  if (isa == Isa::kScalar || isa == best) return true;
  // The x86 levels are ordered: a CPU with one has those below it. Arm's one level stands alone.
  return isa != Isa::kNeon && best != Isa::kNeon && static_cast<int>(isa) < static_cast<int>(best);
}

Isa active_isa() {
  return static_cast<Isa>(active().load(std::memory_order_relaxed));
}

bool set_active_isa(Isa isa) {
  if (!isa_supported(isa)) return false;
  active().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

bool avx_vnni_supported() {
  static const bool ok = detect_avx_vnni();
  return ok;
}

bool avx_vnni_active() {
  return vnni().load(std::memory_order_relaxed);
}

bool set_avx_vnni(bool on) {
  if (on && !avx_vnni_supported()) return false;
  vnni().store(on, std::memory_order_relaxed);
  return true;
}

std::string set_level(const std::string& name) {
  Start s;
  std::string error = find_level(name, &s);
  if (error.empty()) {
    active().store(static_cast<int>(s.isa), std::memory_order_relaxed);
    vnni().store(s.vnni, std::memory_order_relaxed);
  }
  return error;
}

std::string isa_env_error() {
  Start s;
  return parse_env(&s);
}

const char* kernels_summary() {
  switch (active_isa()) {
    case Isa::kAvx512:
      return detail::amx_active() ? "avx512 + amx" : "avx512";
    case Isa::kAvx2:
      return avx_vnni_active() ? "avx2 + avx-vnni" : "avx2";
    case Isa::kNeon:
      return "neon";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

}  // namespace mtp::kernels
