// Helpers for the jinja unit tests: render a source with a JSON context.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/jinja/template.h"
#include "common/jinja/value_json.h"
#include "nlohmann/json.hpp"

namespace dq::jinja::testing {

inline absl::StatusOr<std::string> RenderJson(std::string_view src,
                                              std::string_view json_ctx = "{}",
                                              const RenderOptions& opts = {}) {
  absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(src);
  if (!t.ok()) return t.status();
  return t->Render(FromJson(nlohmann::ordered_json::parse(json_ctx)), opts);
}

// The rendered text, or "ERROR: <message>".
inline std::string R(std::string_view src, std::string_view json_ctx = "{}") {
  absl::StatusOr<std::string> r = RenderJson(src, json_ctx);
  return r.ok() ? *r : "ERROR: " + std::string(r.status().message());
}

}  // namespace dq::jinja::testing
