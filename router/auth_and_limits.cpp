#include "router/auth_and_limits.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace dq::router {
namespace {

ApiError Unauthorized(std::string message) {
  return ApiError{401, "invalid_request_error", std::move(message), "", "invalid_api_key"};
}

std::string FormatBytes(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) {
    return absl::StrCat(bytes, " bytes (", bytes >> 20, " MiB)");
  }
  return absl::StrCat(bytes, " bytes");
}

// Debian's abseil has its own string_view, so these small helpers stay on std::string_view.
bool IsHttpSpace(char c) { return c == ' ' || c == '\t'; }

std::string_view TrimHttpSpace(std::string_view s) {
  while (!s.empty() && IsHttpSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsHttpSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool StartsWithIgnoringAsciiCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    const char a = (s[i] >= 'A' && s[i] <= 'Z') ? static_cast<char>(s[i] - 'A' + 'a') : s[i];
    if (a != prefix[i]) return false;
  }
  return true;
}

}  // namespace

bool ConstantTimeEquals(std::string_view presented, std::string_view expected) {
  // Walk the expected key whatever was presented; fold every difference, including the
  // length, into one accumulator, and look at it only at the end.
  uint64_t diff = presented.size() ^ expected.size();
  const size_t n = presented.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char p = n == 0 ? 0 : static_cast<unsigned char>(presented[i % n]);
    diff |= p ^ static_cast<unsigned char>(expected[i]);
  }
  // volatile: keep the compiler from turning the loop into an early-exit compare.
  volatile uint64_t result = diff;
  return result == 0;
}

std::optional<ApiError> CheckBearerAuth(std::string_view authorization_header,
                                        std::span<const std::string> api_keys) {
  if (api_keys.empty()) return std::nullopt;
  const std::string_view header = TrimHttpSpace(authorization_header);
  if (header.empty()) {
    return Unauthorized(
        "You didn't provide an API key. Send it in an Authorization header using Bearer auth "
        "(Authorization: Bearer YOUR_KEY).");
  }
  constexpr std::string_view kScheme = "bearer ";
  // kScheme is lower case; "Bearer" alone (no key) fails here too.
  if (header.size() <= kScheme.size() || !StartsWithIgnoringAsciiCase(header, kScheme)) {
    return Unauthorized(
        "The Authorization header must use the Bearer scheme (Authorization: Bearer YOUR_KEY).");
  }
  const std::string_view key = TrimHttpSpace(header.substr(kScheme.size()));
  // Compare against every key, without stopping at a match, so timing does not say which.
  bool match = false;
  for (const std::string& k : api_keys) match |= ConstantTimeEquals(key, k);
  if (match) return std::nullopt;
  return Unauthorized(
      "Incorrect API key provided. Check the key you send in the Authorization header against "
      "the keys this server is configured with.");
}

std::optional<ApiError> CheckBodySize(size_t body_bytes, size_t max_body_bytes) {
  if (body_bytes <= max_body_bytes) return std::nullopt;
  return ApiError{413, "invalid_request_error",
                  absl::StrCat("The request body is ", FormatBytes(body_bytes),
                               "; this server accepts at most ", FormatBytes(max_body_bytes),
                               ". Send a shorter request (or, as the operator, raise the body "
                               "limit)."),
                  "", "request_too_large"};
}

std::string RetryAfterSeconds(std::chrono::milliseconds retry_after) {
  const int64_t ms = retry_after.count();
  const int64_t seconds = ms <= 0 ? 1 : (ms + 999) / 1000;
  return absl::StrCat(seconds);
}

ApiError RateLimited(std::string_view reason, std::chrono::milliseconds retry_after) {
  return ApiError{429, "requests",
                  absl::StrCat("Rate limit reached: ", std::string(reason), ". Retry in ",
                               RetryAfterSeconds(retry_after),
                               " s (see the Retry-After header), or send fewer requests at once."),
                  "", "rate_limit_exceeded"};
}

}  // namespace dq::router
