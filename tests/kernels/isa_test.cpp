// Kernel levels by name (MTP_ISA's names, kernels_bench --isa): refusals name what the CPU has and change
// nothing; the levels this host tests and skips are printed, so a CI log says which paths ran.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>

#include "kernel_test_util.h"
#include "kernels/ceiling.h"
#include "matmul_internal.h"

namespace mtp {
namespace {

struct LevelScope {
  kernels::Isa isa = kernels::active_isa();
  bool vnni = kernels::avx_vnni_active();
  ~LevelScope() {
    kernels::set_active_isa(isa);
    kernels::set_avx_vnni(vnni);
  }
};

TEST(Isa, LevelsThisHostTests) {
  std::string ran, skipped;
  auto note = [&](const char* name, bool runs) {
    std::string& list = runs ? ran : skipped;
    list += std::string(list.empty() ? "" : ", ") + name;
  };
  for (const char* name : {"scalar", "avx2", "avxvnni", "avx512", "neon"}) {
    LevelScope scope;
    note(name, kernels::set_level(name).empty());
  }
  // Paths inside the avx512 level, which the kernel tests compare bitwise with the paths without them: VBMI's
  // nibble lookup in the IQ4_XS decode, and AMX-INT8 sums for packed IQ4_XS batches of 9 rows and more.
  const bool avx512 = kernels::isa_supported(kernels::Isa::kAvx512);
  note("avx512-vbmi", avx512 && kernels::detail::vbmi_active());
  note("amx-int8", avx512 && kernels::detail::amx_active());
  std::printf("kernel levels tested on this host: %s; skipped (CPU lacks them, or MTP_AMX=0): %s\n",
              ran.c_str(), skipped.empty() ? "none" : skipped.c_str());
  EXPECT_EQ(ran.rfind("scalar", 0), 0u);
}

TEST(Isa, SetLevelByNameSetsTheLevelAndAvxVnni) {
  LevelScope scope;
  ASSERT_EQ(kernels::set_level("scalar"), "");
  EXPECT_EQ(kernels::active_isa(), kernels::Isa::kScalar);
  EXPECT_STREQ(kernels::kernels_summary(), "scalar");
  if (!kernels::isa_supported(kernels::Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  ASSERT_EQ(kernels::set_level("avx2"), "");
  EXPECT_EQ(kernels::active_isa(), kernels::Isa::kAvx2);
  EXPECT_FALSE(kernels::avx_vnni_active());
  EXPECT_STREQ(kernels::kernels_summary(), "avx2");
  if (kernels::avx_vnni_supported()) {
    ASSERT_EQ(kernels::set_level("avxvnni"), "");
    EXPECT_TRUE(kernels::avx_vnni_active());
    EXPECT_STREQ(kernels::kernels_summary(), "avx2 + avx-vnni");
  }
}

TEST(Isa, ArmAndX86LevelsExcludeEachOther) {
  const bool neon = kernels::isa_supported(kernels::Isa::kNeon);
  EXPECT_FALSE(neon && kernels::isa_supported(kernels::Isa::kAvx2));
  EXPECT_FALSE(neon && kernels::isa_supported(kernels::Isa::kAvx512));
  EXPECT_TRUE(kernels::isa_supported(kernels::Isa::kScalar));
  if (!neon) GTEST_SKIP() << "no Arm dot product";
  LevelScope scope;
  ASSERT_EQ(kernels::set_level("neon"), "");
  EXPECT_EQ(kernels::active_isa(), kernels::Isa::kNeon);
  EXPECT_STREQ(kernels::kernels_summary(), "neon");
  EXPECT_FALSE(kernels::set_active_isa(kernels::Isa::kAvx2));
  EXPECT_EQ(kernels::active_isa(), kernels::Isa::kNeon);
}

TEST(Isa, RefusalsNameTheLevelsAndChangeNothing) {
  LevelScope scope;
  ASSERT_EQ(kernels::set_level("scalar"), "");
  EXPECT_EQ(kernels::set_level("avx9"), "avx9: not one of scalar, avx2, avxvnni, avx512, neon");
  EXPECT_EQ(kernels::set_level(""), ": not one of scalar, avx2, avxvnni, avx512, neon");
  EXPECT_EQ(kernels::active_isa(), kernels::Isa::kScalar);
  // No CPU has both an x86 and the Arm level.
  const char* lacking = kernels::isa_supported(kernels::Isa::kNeon) ? "avx512" : "neon";
  const std::string error = kernels::set_level(lacking);
  EXPECT_EQ(error.rfind(std::string(lacking) + ": this CPU lacks it (it has scalar", 0), 0u) << error;
  EXPECT_EQ(kernels::active_isa(), kernels::Isa::kScalar);
}

// The multiply-add ceiling (kernels/ceiling.h) probes the sequence of the level in use, and none at scalar.
TEST(Isa, MaddCeilingProbesTheActiveLevelsSequence) {
  LevelScope scope;
  const std::pair<const char*, const char*> levels[] = {{"scalar", nullptr},
                                                        {"avx2", "vpmaddubsw + vpmaddwd ymm"},
                                                        {"avxvnni", "vpdpbusd ymm"},
                                                        {"avx512", "vpdpbusd zmm"},
                                                        {"neon", "sdot"}};
  for (const auto& [name, sequence] : levels) {
    if (!kernels::set_level(name).empty()) continue;
    const kernels::MaddCeiling c = kernels::int8_madd_ceiling(0.002);
    if (sequence == nullptr) {
      EXPECT_EQ(c.sequence, nullptr) << name;
      EXPECT_EQ(c.macs_per_second, 0.0) << name;
    } else {
      ASSERT_NE(c.sequence, nullptr) << name;
      EXPECT_STREQ(c.sequence, sequence) << name;
      EXPECT_GT(c.macs_per_second, 0.0) << name;
    }
  }
}

}  // namespace
}  // namespace mtp
