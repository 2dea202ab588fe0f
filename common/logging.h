// Logging: spdlog, to stderr. Servers and tools share one format.
#pragma once

#include <spdlog/spdlog.h>

namespace dq {
// Sends spdlog's default logger to stderr (spdlog's own default is stdout, where a tool's output
// goes: dq-tool --json, generated text). Every main calls it first.
void LogToStderr();
// Sets the level from a name ("trace".."off"); unknown names leave it unchanged.
void SetLogLevel(const std::string& level);
}  // namespace dq
