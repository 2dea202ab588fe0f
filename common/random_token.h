// Unguessable identifiers (lease ids, credentials): bytes from the kernel's CSPRNG, as hex.
#pragma once

#include <string>

namespace dq {

// 2 * `bytes` lowercase hex digits from getrandom(2). Aborts if the kernel has no entropy source
// (an identifier that could be guessed must never be handed out).
std::string RandomHex(int bytes);

}  // namespace dq
