// Request admission before any parsing: API keys, body size, and rate-limit replies.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "router/api_error.h"

namespace dq::router {

// Equality whose running time depends only on expected.size(), never on where the strings
// differ or on presented.size(), so response timing does not leak a key byte by byte.
bool ConstantTimeEquals(std::string_view presented, std::string_view expected);

// Checks an "Authorization: Bearer <key>" header value (the scheme is case-insensitive, as
// RFC 7235 says) against `api_keys`. No keys configured: authentication is off and every
// request passes. Otherwise a missing header, another scheme or a wrong key is a 401 with
// type "invalid_request_error" and code "invalid_api_key"; the message never repeats the key.
std::optional<ApiError> CheckBearerAuth(std::string_view authorization_header,
                                        std::span<const std::string> api_keys);

// 413 when the body (or its announced Content-Length) is larger than `max_body_bytes`.
std::optional<ApiError> CheckBodySize(size_t body_bytes, size_t max_body_bytes);

// The Retry-After header value for a 429: whole seconds, rounded up, at least 1 (HTTP has no
// finer unit and 0 invites an immediate retry storm).
std::string RetryAfterSeconds(std::chrono::milliseconds retry_after);

// A 429 in OpenAI's shape (type "requests", code "rate_limit_exceeded"). `reason` says which
// limit was hit; the message adds when to retry. Send RetryAfterSeconds(retry_after) with it.
ApiError RateLimited(std::string_view reason, std::chrono::milliseconds retry_after);

}  // namespace dq::router
