// Logging: spdlog, to stderr. Servers and tools share one format.
#pragma once

#include <spdlog/spdlog.h>

namespace dq {
// Sets the level from a name ("trace".."off"); unknown names leave it unchanged.
void SetLogLevel(const std::string& level);
}  // namespace dq
