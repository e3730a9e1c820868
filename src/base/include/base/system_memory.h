// The machine's memory and this process's share of it, as Linux reports them; 0 where unknown.
#pragma once

#include <cstdint>

namespace mtp {

uint64_t physical_memory_bytes();   // installed memory (sysconf)
uint64_t available_memory_bytes();  // what new allocations can take without swapping (MemAvailable)
uint64_t resident_bytes();          // this process's resident set (/proc/self/statm)

}  // namespace mtp
