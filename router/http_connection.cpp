#include "router/http_connection.h"

#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <cassert>
#include <chrono>
#include <exception>
#include <future>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace dq::router::http_detail {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// While a handler runs, the connection reads ahead (a pipelined request, or the end of the
// stream when the client leaves) up to this many buffered bytes.
constexpr size_t kReadAheadBytes = 64 << 10;
// A connection closed with a reply before its request was read whole keeps reading (and
// dropping) this long, so that the client reads the reply instead of a reset.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 1 << 20;

std::string StatusLine(int status) {
  const auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return absl::StrCat("HTTP/1.1 ", status, " ", std::string(reason.data(), reason.size()), "\r\n");
}

std::string HeaderLines(const HttpHeaders& headers) {
  std::string out;
  for (const auto& [name, value] : headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  return out;
}

std::string FormatReply(const HttpReply& r, bool keep_alive) {
  return absl::StrCat(StatusLine(r.status), "Server: dqserve\r\nContent-Type: ", r.content_type,
                      "\r\nContent-Length: ", r.body.size(), "\r\n", HeaderLines(r.headers),
                      keep_alive ? "" : "Connection: close\r\n", "\r\n", r.body);
}

bool IsProtocolError(const beast::error_code& ec) {
  return ec.category() == beast::error_code(http::error::bad_method).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message;
}

// The responder of a route that runs on the I/O thread: it may only reply, and the connection
// writes the reply after the route returns.
class InlineResponder final : public HttpResponder {
 public:
  void Reply(HttpReply reply) override { reply_ = std::move(reply); }
  bool StartStream(const std::string&, const HttpHeaders&) override {
    assert(false && "an inline route cannot stream");
    return false;
  }
  bool Write(std::string_view) override { return false; }
  void EndStream() override {}
  bool ClientGone() const override { return false; }
  std::optional<HttpReply> reply_;
};

// A handler thread's responder: every call is a write on the connection's I/O thread.
class ConnectionResponder final : public HttpResponder {
 public:
  ConnectionResponder(std::shared_ptr<HttpConnection> c, const HttpRoutes& routes, bool http10,
                      bool keep_alive)
      : c_(std::move(c)), routes_(routes), http10_(http10), keep_alive_(keep_alive && !http10) {}
  // A handler that returned without answering gets a 500; an open stream is ended.
  ~ConnectionResponder() override {
    if (state_ == State::kNone) {
      Reply(routes_.error_reply(500, "The server did not answer this request; it was logged."));
      spdlog::error("HTTP handler returned without a reply");
    } else if (state_ == State::kStreaming) {
      EndStream();
    }
  }
  void Reply(HttpReply reply) override {
    if (state_ != State::kNone) return;
    state_ = State::kDone;
    c_->Send(FormatReply(reply, keep_alive_), /*end=*/true, keep_alive_);
  }
  bool StartStream(const std::string& content_type, const HttpHeaders& headers) override {
    if (state_ != State::kNone) return false;
    state_ = State::kStreaming;
    // HTTP/1.0 knows no chunked encoding: the body ends with the connection.
    const std::string framing = http10_ ? "Connection: close\r\n"
                                : keep_alive_
                                    ? "Transfer-Encoding: chunked\r\n"
                                    : "Transfer-Encoding: chunked\r\nConnection: close\r\n";
    ok_ = c_->Send(absl::StrCat(StatusLine(200), "Server: dqserve\r\nContent-Type: ", content_type,
                                "\r\n", HeaderLines(headers), framing, "\r\n"),
                   /*end=*/false, keep_alive_);
    return ok_;
  }
  bool Write(std::string_view data) override {
    if (state_ != State::kStreaming || !ok_ || data.empty()) return ok_;
    std::string bytes = http10_ ? std::string(data)
                                : absl::StrCat(absl::Hex(data.size()), "\r\n",
                                               absl::string_view(data.data(), data.size()), "\r\n");
    ok_ = c_->Send(std::move(bytes), /*end=*/false, keep_alive_);
    return ok_;
  }
  void EndStream() override {
    if (state_ != State::kStreaming) return;
    state_ = State::kDone;
    c_->Send(http10_ ? "" : "0\r\n\r\n", /*end=*/true, keep_alive_);
  }
  bool ClientGone() const override { return !ok_ || c_->client_gone(); }

 private:
  enum class State { kNone, kStreaming, kDone };
  std::shared_ptr<HttpConnection> c_;
  const HttpRoutes& routes_;
  const bool http10_;
  const bool keep_alive_;
  State state_ = State::kNone;
  bool ok_ = true;
};

}  // namespace

HandlerPool::HandlerPool(int threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

HandlerPool::~HandlerPool() { Stop(); }

bool HandlerPool::TryPost(std::function<void()> task) {
  std::lock_guard lock(mu_);
  if (stopping_ || (idle_ <= static_cast<int>(queue_.size()) && queue_.size() >= max_queued_)) {
    return false;
  }
  queue_.push_back(std::move(task));
  cv_.notify_one();
  return true;
}

void HandlerPool::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      ++idle_;
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("HTTP handler failed: {}", e.what());
    }
  }
}

void HandlerPool::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

ListenerCore::ListenerCore(HttpListenerOptions o, HttpRoutes r)
    : options(std::move(o)),
      routes(std::move(r)),
      pool(std::max(1, options.handler_threads), std::max(1, options.handler_threads)) {}

HttpConnection::HttpConnection(tcp::socket socket, ListenerCore& core)
    : core_(core), stream_(std::move(socket)) {}

HttpConnection::~HttpConnection() {
  std::lock_guard lock(core_.mu);
  core_.connections.erase(this);
}

void HttpConnection::Start() {
  {
    std::lock_guard lock(core_.mu);
    core_.connections.emplace(this, weak_from_this());
  }
  beast::error_code ec;
  stream_.socket().set_option(tcp::no_delay(true), ec);  // events go out as they are written
  phase_ = Phase::kHandling;                             // not pending until it reads
  if (core_.pending >= core_.options.max_pending_connections) {
    return Refuse(503,
                  "The server holds too many connections that have not sent a request. "
                  "Retry shortly.");
  }
  ReadHead();
}

void HttpConnection::SetPhase(Phase p) {
  if (phase_ == Phase::kReading) --core_.pending;
  if (p == Phase::kReading) ++core_.pending;
  phase_ = p;
}

void HttpConnection::Close() {
  if (phase_ == Phase::kClosed) return;
  SetPhase(Phase::kClosed);
  gone_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

void HttpConnection::Linger() {
  if (phase_ == Phase::kClosed) return;
  SetPhase(Phase::kLingering);
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(kLingerTime);
  Drain(0);
}

void HttpConnection::Drain(size_t dropped) {
  auto scratch = std::make_shared<std::array<char, 16384>>();
  stream_.async_read_some(net::buffer(*scratch), [self = shared_from_this(), scratch, dropped](
                                                     beast::error_code ec, size_t n) {
    if (ec || dropped + n > kLingerBytes) return self->Close();
    self->Drain(dropped + n);
  });
}

void HttpConnection::ReadHead() {
  if (core_.stopping) return Close();
  SetPhase(Phase::kReading);
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(core_.options.max_header_bytes));
  parser_->body_limit(core_.options.max_body_bytes);
  stream_.expires_after(core_.options.head_timeout);
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHead(ec); });
}

void HttpConnection::OnHead(beast::error_code ec) {
  if (ec == http::error::header_limit) {
    return Refuse(431, absl::StrCat("The request's head is over ", core_.options.max_header_bytes,
                                    " bytes."));
  }
  if (ec == http::error::body_limit) return Refuse(413, "");
  if (ec) {
    if (IsProtocolError(ec)) return Refuse(400, "Malformed HTTP request: " + ec.message() + ".");
    return Close();  // the client left, or its head did not arrive in time
  }
  request_ = HeadOf();
  if (std::optional<HttpReply> refused = core_.routes.check_head(request_)) {
    // The body is not read: the connection cannot be reused.
    return WriteOnIo(std::make_shared<std::string>(FormatReply(*refused, false)), true, false,
                     nullptr);
  }
  if (absl::EqualsIgnoreCase(request_.header("Expect"), "100-continue") && !parser_->is_done()) {
    auto go_on = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
    stream_.expires_after(core_.options.write_timeout);
    return net::async_write(stream_, net::buffer(*go_on),
                            [self = shared_from_this(), go_on](beast::error_code e, size_t) {
                              if (e) return self->Close();
                              self->ReadBody();
                            });
  }
  ReadBody();
}

void HttpConnection::ReadBody() {
  if (parser_->is_done()) return OnBody({});
  stream_.expires_after(core_.options.body_timeout);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
}

void HttpConnection::OnBody(beast::error_code ec) {
  if (ec == http::error::body_limit) return Refuse(413, "");
  if (ec) {
    if (IsProtocolError(ec)) return Refuse(400, "Malformed HTTP request: " + ec.message() + ".");
    return Close();
  }
  request_.body = std::move(parser_->get().body());
  keep_alive_ = request_.version == 11 && parser_->get().keep_alive();
  parser_.reset();
  stream_.expires_never();
  Dispatch();
}

void HttpConnection::Dispatch() {
  SetPhase(Phase::kHandling);
  if (core_.routes.runs_inline(request_)) {
    InlineResponder r;
    core_.routes.handle(request_, r);
    HttpReply reply = r.reply_ ? std::move(*r.reply_)
                               : core_.routes.error_reply(500, "The route did not answer.");
    return WriteOnIo(std::make_shared<std::string>(FormatReply(reply, keep_alive_)), true,
                     keep_alive_, nullptr);
  }
  auto request = std::make_shared<HttpRequest>(std::move(request_));
  const bool keep_alive = keep_alive_;
  const bool posted = core_.pool.TryPost([self = shared_from_this(), request, keep_alive] {
    ConnectionResponder responder(self, self->core_.routes, request->version == 10, keep_alive);
    self->core_.routes.handle(*request, responder);
  });
  if (!posted) {
    return Refuse(503, "Every HTTP handler thread is busy; retry shortly.", /*retry_after=*/"1");
  }
  Watch();
}

void HttpConnection::Watch() {
  if (phase_ != Phase::kHandling || buffer_.size() >= kReadAheadBytes) return;
  watching_ = true;
  stream_.socket().async_read_some(buffer_.prepare(4096),
                                   [self = shared_from_this()](beast::error_code ec, size_t n) {
                                     self->watching_ = false;
                                     if (!ec) self->buffer_.commit(n);
                                     if (self->resume_reading_) {
                                       self->resume_reading_ = false;
                                       if (ec && ec != net::error::operation_aborted)
                                         return self->Close();
                                       return self->ReadHead();
                                     }
                                     if (ec) {
                                       // The client closed its side (or the connection broke):
                                       // nobody reads the answer.
                                       if (ec != net::error::operation_aborted) self->gone_ = true;
                                       return;
                                     }
                                     self->Watch();
                                   });
}

void HttpConnection::OnResponseDone(bool keep_alive) {
  if (!keep_alive || gone_ || core_.stopping) return Linger();
  if (watching_) {
    resume_reading_ = true;  // the watch's handler reads on
    beast::error_code ec;
    stream_.socket().cancel(ec);
    return;
  }
  ReadHead();
}

void HttpConnection::Refuse(int status, const std::string& message,
                            const std::string& retry_after) {
  HttpReply reply = core_.routes.error_reply(status, message);
  if (!retry_after.empty()) reply.headers.emplace_back("Retry-After", retry_after);
  SetPhase(Phase::kHandling);
  WriteOnIo(std::make_shared<std::string>(FormatReply(reply, false)), true, false, nullptr);
}

void HttpConnection::WriteOnIo(std::shared_ptr<std::string> bytes, bool end, bool keep_alive,
                               std::function<void(bool)> done) {
  if (phase_ == Phase::kClosed || phase_ == Phase::kLingering) {
    if (done) done(false);
    return;
  }
  if (bytes->empty()) {  // the end of an HTTP/1.0 stream: nothing to write
    if (end) OnResponseDone(keep_alive);
    if (done) done(true);
    return;
  }
  stream_.expires_after(core_.options.write_timeout);
  net::async_write(stream_, net::buffer(*bytes),
                   [self = shared_from_this(), bytes, end, keep_alive, done = std::move(done)](
                       beast::error_code ec, size_t) {
                     if (ec) {
                       self->Close();
                     } else if (end) {
                       self->OnResponseDone(keep_alive);
                     }
                     if (done) done(!ec);
                   });
}

bool HttpConnection::Send(std::string bytes, bool end, bool keep_alive) {
  auto written = std::make_shared<std::promise<bool>>();
  std::future<bool> result = written->get_future();
  auto data = std::make_shared<std::string>(std::move(bytes));
  net::post(core_.ioc, [self = shared_from_this(), data, end, keep_alive, written] {
    self->WriteOnIo(data, end, keep_alive, [written](bool ok) { written->set_value(ok); });
  });
  // The I/O thread answers within the write timeout, unless the listener stopped under us.
  if (result.wait_for(core_.options.write_timeout + std::chrono::seconds(5)) !=
      std::future_status::ready) {
    return false;
  }
  try {
    return result.get();
  } catch (const std::future_error&) {  // the posted write was dropped (the listener stopped)
    return false;
  }
}

HttpRequest HttpConnection::HeadOf() const {
  const auto& m = parser_->get();
  HttpRequest r;
  r.method = std::string(m.method_string());
  r.target = std::string(m.target());
  r.path = r.target.substr(0, r.target.find('?'));
  r.version = m.version() == 10 ? 10 : 11;
  for (const auto& field : m) {
    r.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  return r;
}

}  // namespace dq::router::http_detail
