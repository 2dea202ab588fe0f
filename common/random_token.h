// Unguessable identifiers (lease ids, credentials): bytes from the kernel's CSPRNG, as hex.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace dq {

// 2 * `bytes` lowercase hex digits from getrandom(2). Aborts if the kernel has no entropy source
// (an identifier that could be guessed must never be handed out).
std::string RandomHex(int bytes);
// Fills `out` from getrandom(2); aborts like RandomHex.
void RandomBytes(std::span<uint8_t> out);

}  // namespace dq
