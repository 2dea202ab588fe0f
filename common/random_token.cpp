#include "common/random_token.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace dq {

void RandomBytes(std::span<uint8_t> out) {
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = getrandom(out.data() + got, out.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::perror("getrandom");
      std::abort();
    }
    got += static_cast<size_t>(n);
  }
}

std::string RandomHex(int bytes) {
  std::vector<uint8_t> raw(static_cast<size_t>(bytes));
  RandomBytes(raw);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (uint8_t b : raw) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace dq
