#include "router/auth_and_limits.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dq::router {
namespace {

using std::chrono::milliseconds;

const std::vector<std::string> kKeys = {"sk-first-key", "sk-second"};

TEST(AuthTest, NoKeysConfiguredMeansAuthIsOff) {
  EXPECT_FALSE(CheckBearerAuth("", {}).has_value());
  EXPECT_FALSE(CheckBearerAuth("Bearer anything", {}).has_value());
}

TEST(AuthTest, AcceptsAnyConfiguredKey) {
  EXPECT_FALSE(CheckBearerAuth("Bearer sk-first-key", kKeys).has_value());
  EXPECT_FALSE(CheckBearerAuth("Bearer sk-second", kKeys).has_value());
  EXPECT_FALSE(CheckBearerAuth("bearer sk-second", kKeys).has_value());  // scheme: any case
  EXPECT_FALSE(CheckBearerAuth("  BEARER   sk-second  ", kKeys).has_value());
}

TEST(AuthTest, RejectsMissingMalformedAndWrongKeys) {
  struct Case {
    std::string header;
    std::string message_part;
  };
  const Case cases[] = {
      {"", "You didn't provide an API key"},
      {"   ", "You didn't provide an API key"},
      {"sk-first-key", "must use the Bearer scheme"},
      {"Basic c2stZmlyc3Qta2V5", "must use the Bearer scheme"},
      {"Bearer", "must use the Bearer scheme"},
      {"Bearer ", "must use the Bearer scheme"},
      {"Bearer sk-first-ke", "Incorrect API key provided"},    // a prefix
      {"Bearer sk-first-keyy", "Incorrect API key provided"},  // longer
      {"Bearer SK-FIRST-KEY", "Incorrect API key provided"},   // keys are case-sensitive
      {"Bearer sk-first-key sk-second", "Incorrect API key provided"},
  };
  for (const Case& c : cases) {
    std::optional<ApiError> e = CheckBearerAuth(c.header, kKeys);
    ASSERT_TRUE(e.has_value()) << "accepted '" << c.header << "'";
    EXPECT_EQ(e->http_status, 401) << c.header;
    EXPECT_EQ(e->type, "invalid_request_error") << c.header;
    EXPECT_EQ(e->code, "invalid_api_key") << c.header;
    EXPECT_NE(e->message.find(c.message_part), std::string::npos) << e->message;
    EXPECT_EQ(e->message.find("sk-"), std::string::npos) << "the message repeats a key";
  }
  EXPECT_EQ(CheckBearerAuth("Bearer nope", kKeys)->ToJson(),
            R"({"error":{"message":"Incorrect API key provided. Check the key you send in the )"
            R"(Authorization header against the keys this server is configured with.",)"
            R"("type":"invalid_request_error","param":null,"code":"invalid_api_key"}})");
}

TEST(AuthTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", ""));
  EXPECT_FALSE(ConstantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secre", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secretsecret", "secret"));  // repeats wrap, lengths differ
  EXPECT_FALSE(ConstantTimeEquals("s", "ssssss"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("sec\0et", 6), "secret"));
}

TEST(LimitsTest, BodySize) {
  EXPECT_FALSE(CheckBodySize(0, 1024).has_value());
  EXPECT_FALSE(CheckBodySize(1024, 1024).has_value());
  std::optional<ApiError> e = CheckBodySize(9437184, 8388608);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->http_status, 413);
  EXPECT_EQ(e->code, "request_too_large");
  EXPECT_EQ(e->message,
            "The request body is 9437184 bytes (9 MiB); this server accepts at most 8388608 bytes "
            "(8 MiB). Send a shorter request (or, as the operator, raise the body limit).");
  EXPECT_NE(CheckBodySize(1025, 1024)->message.find("1025 bytes;"), std::string::npos);
}

TEST(LimitsTest, RetryAfterRoundsUpToWholeSeconds) {
  EXPECT_EQ(RetryAfterSeconds(milliseconds(-5)), "1");
  EXPECT_EQ(RetryAfterSeconds(milliseconds(0)), "1");
  EXPECT_EQ(RetryAfterSeconds(milliseconds(1)), "1");
  EXPECT_EQ(RetryAfterSeconds(milliseconds(1000)), "1");
  EXPECT_EQ(RetryAfterSeconds(milliseconds(1001)), "2");
  EXPECT_EQ(RetryAfterSeconds(milliseconds(2500)), "3");
  EXPECT_EQ(RetryAfterSeconds(std::chrono::minutes(2)), "120");
}

TEST(LimitsTest, RateLimitedHasOpenAisShape) {
  ApiError e = RateLimited("8 requests already queued", milliseconds(1500));
  EXPECT_EQ(e.http_status, 429);
  EXPECT_EQ(e.ToJson(),
            R"({"error":{"message":"Rate limit reached: 8 requests already queued. Retry in 2 s )"
            R"((see the Retry-After header), or send fewer requests at once.",)"
            R"("type":"requests","param":null,"code":"rate_limit_exceeded"}})");
}

TEST(ApiErrorTest, FromStatusMapsCodes) {
  struct Case {
    absl::Status status;
    int http;
    std::string type;
  };
  const Case cases[] = {
      {absl::InvalidArgumentError("bad"), 400, "invalid_request_error"},
      {absl::NotFoundError("no"), 404, "invalid_request_error"},
      {absl::ResourceExhaustedError("full"), 429, "requests"},
      {absl::UnavailableError("down"), 503, "server_error"},
      {absl::DeadlineExceededError("slow"), 504, "server_error"},
      {absl::CancelledError("gone"), 499, "invalid_request_error"},
      {absl::InternalError("bug"), 500, "server_error"},
  };
  for (const Case& c : cases) {
    ApiError e = FromStatus(c.status);
    EXPECT_EQ(e.http_status, c.http) << c.status;
    EXPECT_EQ(e.type, c.type) << c.status;
    EXPECT_EQ(e.message, c.status.message()) << c.status;
  }
}

}  // namespace
}  // namespace dq::router
