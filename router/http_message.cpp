#include "router/http_message.h"

#include "absl/strings/match.h"

namespace dq::router {

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (absl::EqualsIgnoreCase(n, absl::string_view(name.data(), name.size()))) return v;
  }
  return "";
}

}  // namespace dq::router
