// The multiply-add ceiling of a kernel level on one core, for benchmarks to say what fraction of it a prompt
// pass reaches: the instruction sequence the level's quantized sums are built from, run back to back on 12
// independent accumulators with no memory traffic.
#pragma once

namespace mtp::kernels {

struct MaddCeiling {
  const char* sequence = nullptr;  // e.g. "vpdpbusd zmm"; nullptr where the level has none (scalar)
  double macs_per_second = 0;      // int8 x int8 products added per second on the calling thread
};

// At the active level (isa.h): avx512 vpdpbusd on zmm; avx2 with AVX-VNNI vpdpbusd on ymm; plain avx2
// vpmaddubsw then vpmaddwd by ones and vpaddd (the sum an AVX2 int8 dot is made of); neon sdot. Best rate of
// ten slices of seconds / 10 each (a slice the OS interrupted counts less). AMX is not measured: where it is
// on, the figure is the vector ceiling, and a pass that uses AMX can exceed it.
MaddCeiling int8_madd_ceiling(double seconds);

}  // namespace mtp::kernels
