// Little-endian integer appends for the GGUF layer's byte encoders (metadata values and the file header):
// GGUF stores every integer little-endian, whatever the host.
#pragma once

#include <cstdint>
#include <vector>

namespace mtp::gguf_bytes {

inline void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

inline void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace mtp::gguf_bytes
