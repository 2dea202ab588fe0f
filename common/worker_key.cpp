#include "common/worker_key.h"

#include <cstdlib>

namespace dq {

std::string WorkerKeyFromEnv() {
  const char* key = std::getenv(kWorkerKeyEnv);
  return key != nullptr ? std::string(key) : std::string();
}

bool IsWorkerBearer(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.size() != kPrefix.size() + key.size()) return false;
  unsigned diff = authorization.substr(0, kPrefix.size()) == kPrefix ? 0 : 1;
  // Every byte is looked at whatever the first difference: the time says nothing of the key.
  for (size_t i = 0; i < key.size(); ++i) {
    diff |= static_cast<unsigned char>(authorization[kPrefix.size() + i]) ^
            static_cast<unsigned char>(key[i]);
  }
  return diff == 0;
}

}  // namespace dq
