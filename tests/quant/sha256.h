// A small SHA-256 (FIPS 180-4) for comparing quantizer output with the hashes of docs/formats.md 5.3.
// Test utility only: not constant-time, not tuned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mtp::test {

// Lower-case hex digest (64 characters) of `size` bytes.
std::string sha256_hex(const void* data, size_t size);

// Lower-case hex of raw bytes, and the reverse (for the spec's hex vectors).
std::string to_hex(const void* data, size_t size);

}  // namespace mtp::test
