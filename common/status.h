// Error handling across room boundaries: absl::Status / absl::StatusOr, plus two macros.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#define DQ_CONCAT_INNER(a, b) a##b
#define DQ_CONCAT(a, b) DQ_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define DQ_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status dq_status_ = (expr);      \
    if (!dq_status_.ok()) return dq_status_; \
  } while (0)

// `lhs = value of expr` (an absl::StatusOr<T>), or return its error.
#define DQ_ASSIGN_OR_RETURN(lhs, expr) \
  DQ_ASSIGN_OR_RETURN_IMPL(DQ_CONCAT(dq_statusor_, __LINE__), lhs, expr)
#define DQ_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
