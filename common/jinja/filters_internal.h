// Shared between filters.cpp and filters_seq.cpp.
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/jinja/interpreter.h"

namespace dq::jinja::internal {

// The sequence filters; nullopt when `name` is not one of them.
std::optional<absl::StatusOr<Value>> SeqFilter(Interpreter& in, std::string_view name,
                                               const Value& v, CallArgs& args);

}  // namespace dq::jinja::internal
