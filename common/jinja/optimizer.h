// jinja2's compile-time constant folding, which is observable: its Optimizer replaces every
// constant sub-expression whose value has a "safe repr" with that value, and a {{ }} of a
// constant is rendered at compile time. Constant evaluation goes through environment.getitem,
// which turns a failing slice into undefined where the runtime's plain Python slice raises; so
// `{% if not 3[1:] %}` renders and `{% for x in 3[1:] %}` fails, in both jinja2 and here.
#pragma once

#include "common/jinja/ast.h"

namespace dq::jinja {

void FoldConstants(StmtList* body);

}  // namespace dq::jinja
