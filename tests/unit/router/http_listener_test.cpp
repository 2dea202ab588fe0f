// The HTTP listener against hostile and unusual clients, over raw sockets: limits enforced while
// reading (chunked bodies included), slow clients that hold no thread, pipelining in order,
// HTTP/1.0 streams, Expect: 100-continue, a busy pool, and a client that leaves mid-request.
#include "router/http_listener.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dq::router {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A blocking client socket with a receive timeout.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~RawClient() { Close(); }
  bool connected() const { return connected_; }
  bool Send(const std::string& s) {
    return send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Everything until the server closes (or the timeout).
  std::string ReadAll() {
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, n);
    }
    return out;
  }
  // Reads until `needle` has appeared `count` times (or the timeout / close).
  std::string ReadUntil(const std::string& needle, int count = 1) {
    std::string out;
    char buf[4096];
    while (Count(out, needle) < count) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, n);
    }
    return out;
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  static int Count(const std::string& s, const std::string& needle) {
    int n = 0;
    for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
    return n;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

class HttpListenerTest : public ::testing::Test {
 protected:
  void Start(HttpListenerOptions o = Defaults()) {
    HttpRoutes r;
    r.check_head = [](const HttpRequest& head) -> std::optional<HttpReply> {
      if (head.path == "/refuse") return HttpReply{401, "text/plain", "no", {}};
      return std::nullopt;
    };
    r.runs_inline = [](const HttpRequest& req) { return req.path == "/health"; };
    r.handle = [this](const HttpRequest& req, HttpResponder& res) { Handle(req, res); };
    r.error_reply = [](int status, const std::string& message) {
      return HttpReply{status, "text/plain", absl::StrCat("error ", status, ": ", message), {}};
    };
    listener_ = std::make_unique<HttpListener>(o, std::move(r));
    port_ = listener_->Bind();
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { listener_->Serve(); });
  }
  static HttpListenerOptions Defaults() {
    HttpListenerOptions o;
    o.port = 0;
    o.max_body_bytes = 1000;
    o.max_header_bytes = 2000;
    o.handler_threads = 2;
    o.max_pending_connections = 20;
    o.head_timeout = 2s;
    return o;
  }
  void TearDown() override {
    release_ = true;
    if (listener_) listener_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  void Handle(const HttpRequest& req, HttpResponder& res) {
    if (req.path == "/health") return res.Reply(HttpReply{200, "text/plain", "ok", {}});
    if (req.path == "/echo") return res.Reply(HttpReply{200, "text/plain", req.body, {}});
    if (req.path == "/stream") {
      if (!res.StartStream("text/event-stream", {})) return;
      for (int i = 0; i < 3; ++i) res.Write(absl::StrCat("data: ", i, "\n\n"));
      return res.EndStream();
    }
    if (req.path == "/wait") {  // until the client leaves (or the test ends)
      ++waiting_;
      const auto start = Clock::now();
      while (!res.ClientGone() && !release_ && Clock::now() - start < 10s) {
        std::this_thread::sleep_for(5ms);
      }
      if (res.ClientGone()) ++saw_gone_;
      --waiting_;
      return res.Reply(HttpReply{200, "text/plain", "late", {}});
    }
    res.Reply(HttpReply{404, "text/plain", "none", {}});
  }
  static std::string Get(const std::string& path, const std::string& extra = "") {
    return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n", extra, "\r\n");
  }
  static std::string Post(const std::string& path, const std::string& body) {
    return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(),
                        "\r\n\r\n", body);
  }

  std::unique_ptr<HttpListener> listener_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> release_{false};
  std::atomic<int> waiting_{0};
  std::atomic<int> saw_gone_{0};
};

TEST_F(HttpListenerTest, PipelinedRequestsAreAnsweredInOrder) {
  Start();
  RawClient c(port_);
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send(Post("/echo", "one") + Post("/echo", "two") + Get("/health") +
                     Post("/echo", "three")));
  const std::string got = c.ReadUntil("HTTP/1.1 200", 4) + c.ReadUntil("three");
  const size_t one = got.find("\r\n\r\none"), two = got.find("\r\n\r\ntwo"),
               ok = got.find("\r\n\r\nok"), three = got.find("\r\n\r\nthree");
  ASSERT_NE(three, std::string::npos) << got;
  EXPECT_TRUE(one < two && two < ok && ok < three) << got;
  EXPECT_EQ(RawClient::Count(got, "HTTP/1.1 200 OK"), 4) << got;
}

TEST_F(HttpListenerTest, AHeadOverTheLimitIsRefusedBeforeItEnds) {
  Start();
  RawClient c(port_);
  // One header line longer than the whole head may be, never terminated.
  ASSERT_TRUE(c.Send("GET /health HTTP/1.1\r\nX-Long: " + std::string(5000, 'a')));
  const std::string got = c.ReadAll();
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 431")) << got.substr(0, 200);
}

TEST_F(HttpListenerTest, AChunkedBodyOverTheLimitIsRefusedWhileItArrives) {
  Start();
  RawClient c(port_);
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  // 3 KB in chunks against a 1000-byte limit, and no final chunk: the server must not wait
  // for the end of the body to refuse it.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.Send("400\r\n" + std::string(1024, 'b') + "\r\n"));
  const std::string got = c.ReadAll();
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 413")) << got.substr(0, 200);
  EXPECT_NE(got.find("Connection: close"), std::string::npos);
}

TEST_F(HttpListenerTest, ADeclaredLengthOverTheLimitIsRefusedAndTheClientReadsIt) {
  Start();
  RawClient c(port_);
  // The body is sent whole before reading: the server must not reset the connection under the
  // reply (it drains what the client sent).
  ASSERT_TRUE(c.Send(Post("/echo", std::string(5000, 'c'))));
  const std::string got = c.ReadAll();
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 413")) << got.substr(0, 200);
}

TEST_F(HttpListenerTest, MalformedRequestsAre400AndTheServerGoesOn) {
  Start();
  {
    RawClient c(port_);
    ASSERT_TRUE(c.Send("NOT A REQUEST\r\n\r\n"));
    EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 400"));
  }
  {
    RawClient c(port_);
    ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nContent-Length: 12x\r\n\r\n"));
    EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 400"));
  }
  RawClient c(port_);
  ASSERT_TRUE(c.Send(Get("/health", "Connection: close\r\n")));
  EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 200"));
}

TEST_F(HttpListenerTest, SlowClientsHoldNoThreadAndAreBoundedAndTimedOut) {
  HttpListenerOptions o = Defaults();
  o.head_timeout = 1500ms;
  Start(o);
  // 19 connections trickle a request's head (under the bound of 20 pending connections): the
  // two handler threads stay free and health answers at once.
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 19; ++i) {
    slow.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(slow.back()->Send("POST /echo HTTP/1.1\r\nHo"));
  }
  std::this_thread::sleep_for(100ms);
  {
    const auto t0 = Clock::now();
    RawClient c(port_);
    ASSERT_TRUE(c.Send(Get("/health", "Connection: close\r\n")));
    EXPECT_TRUE(absl::StartsWith(c.ReadAll(), "HTTP/1.1 200"));
    EXPECT_LT(Clock::now() - t0, 1s);
  }
  // Past the bound, a new connection is answered 503 at once.
  slow.push_back(std::make_unique<RawClient>(port_));
  std::this_thread::sleep_for(100ms);
  RawClient over(port_);
  EXPECT_TRUE(absl::StartsWith(over.ReadAll(), "HTTP/1.1 503"));
  // A head that does not arrive within head_timeout closes its connection (no reply: read
  // returns at the close, long before the client's 5 s timeout).
  const auto t0 = Clock::now();
  const std::string got = slow.front()->ReadAll();
  EXPECT_EQ(got, "");
  EXPECT_LT(Clock::now() - t0, 2500ms);
}

TEST_F(HttpListenerTest, Http10GetsACloseDelimitedStreamAnd11AChunkedOne) {
  Start();
  {
    RawClient c(port_);
    ASSERT_TRUE(c.Send("GET /stream HTTP/1.0\r\n\r\n"));
    const std::string got = c.ReadAll();  // ends because the server closes
    EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
    EXPECT_TRUE(absl::EndsWith(got, "\r\n\r\ndata: 0\n\ndata: 1\n\ndata: 2\n\n")) << got;
  }
  RawClient c(port_);
  ASSERT_TRUE(c.Send(Get("/stream") + Get("/health")));  // keep-alive after a chunked stream
  const std::string got = c.ReadUntil("\r\n\r\nok");
  EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("9\r\ndata: 2\n\n\r\n0\r\n\r\nHTTP/1.1 200"), std::string::npos) << got;
}

TEST_F(HttpListenerTest, ExpectContinueGetsA100ThenTheReply) {
  Start();
  RawClient c(port_);
  ASSERT_TRUE(c.Send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
  EXPECT_EQ(c.ReadUntil("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(c.Send("hello"));
  EXPECT_NE(c.ReadUntil("hello").find("200 OK"), std::string::npos);
}

TEST_F(HttpListenerTest, ARefusedHeadIsAnsweredWithoutReadingTheBody) {
  Start();
  RawClient c(port_);
  ASSERT_TRUE(c.Send("POST /refuse HTTP/1.1\r\nContent-Length: 900\r\n\r\n"));
  const std::string got = c.ReadUntil("no");
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 401")) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos);
}

TEST_F(HttpListenerTest, AHandlerSeesItsClientLeave) {
  Start();
  RawClient c(port_);
  ASSERT_TRUE(c.Send(Post("/wait", "")));
  for (int i = 0; i < 200 && waiting_ == 0; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(waiting_, 1);
  c.Close();
  for (int i = 0; i < 200 && waiting_ == 1; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(waiting_, 0);
  EXPECT_EQ(saw_gone_, 1);
}

TEST_F(HttpListenerTest, ABusyPoolAnswers503AndHealthStillAnswers) {
  HttpListenerOptions o = Defaults();
  o.handler_threads = 1;  // one running, one queued
  Start(o);
  RawClient a(port_), b(port_), busy(port_);
  ASSERT_TRUE(a.Send(Post("/wait", "")));
  for (int i = 0; i < 200 && waiting_ == 0; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(b.Send(Post("/wait", "")));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(busy.Send(Post("/wait", "")));
  const std::string got = busy.ReadAll();
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 503")) << got;
  EXPECT_NE(got.find("Retry-After: 1"), std::string::npos) << got;
  RawClient h(port_);
  ASSERT_TRUE(h.Send(Get("/health", "Connection: close\r\n")));
  EXPECT_TRUE(absl::StartsWith(h.ReadAll(), "HTTP/1.1 200"));
}

TEST_F(HttpListenerTest, StopEndsEveryConnectionAndHandler) {
  Start();
  RawClient a(port_), idle(port_);
  ASSERT_TRUE(a.Send(Post("/wait", "")));
  for (int i = 0; i < 200 && waiting_ == 0; ++i) std::this_thread::sleep_for(5ms);
  const auto t0 = Clock::now();
  listener_->Stop();  // the handler sees its connection closed and returns
  thread_.join();
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_EQ(saw_gone_, 1);
  EXPECT_EQ(idle.ReadAll(), "");
}

}  // namespace
}  // namespace dq::router
