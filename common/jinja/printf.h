// Python's printf-style string formatting (`"%s: %d" % (a, b)` and jinja2's format filter).
#pragma once

#include "absl/status/statusor.h"
#include "common/jinja/value.h"

namespace dq::jinja {

// fmt % args: a tuple supplies positional arguments, any other value is the single argument
// (and, unless it is a string, also the mapping for %(name)s).
absl::StatusOr<Str> PercentFormat(const Str& fmt, const Value& args);

}  // namespace dq::jinja
