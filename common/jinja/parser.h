// Parses tokens into statements with jinja2's grammar and operator precedence.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "common/jinja/ast.h"
#include "common/jinja/lexer.h"

namespace dq::jinja {

absl::StatusOr<StmtList> ParseTemplate(std::string_view source, const LexOptions& opts);

}  // namespace dq::jinja
