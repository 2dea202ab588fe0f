#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace dq {
void LogToStderr() { spdlog::set_default_logger(spdlog::stderr_color_mt("dq")); }

void SetLogLevel(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") return;
  spdlog::set_level(lvl);
}
}  // namespace dq
