// The HTTP/1.1 server under the router's API (Boost.Beast from Debian's libboost1.74-dev, chosen
// over cpp-httplib 0.11 because its parser enforces header and body limits while it reads,
// chunked bodies included, and because its socket stays ours: reads have deadlines, pipelined
// requests are read one after another, and a request without a stream can watch for its client
// going away).
//
// One I/O thread reads every connection asynchronously, so a client that trickles its request
// holds a socket and a buffer, never a thread. A whole request goes to a bounded pool of handler
// threads (a stream holds one for its life); the routes that answer at once (`runs_inline`) run
// on the I/O thread so that health probes never wait behind busy handlers. Requests of one
// connection are answered in order.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "router/http_message.h"

namespace dq::router {

struct HttpListenerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  size_t max_body_bytes = 1 << 20;
  size_t max_header_bytes = 64 << 10;  // request line and every header field together
  int handler_threads = 64;
  // Connections that have not sent a whole request yet (idle keep-alive ones included); a new
  // connection beyond this is answered 503 and closed, so trickling clients cannot starve the
  // rest of sockets and memory.
  int max_pending_connections = 256;
  // From the moment the server waits for a request (accept, or the end of the previous
  // response) until its head is complete; an idle keep-alive connection is closed after it.
  std::chrono::milliseconds head_timeout{30000};
  std::chrono::milliseconds body_timeout{60000};  // a head's body, once the head is read
  // One write to the client: one that does not read for this long is gone.
  std::chrono::milliseconds write_timeout{30000};
};

struct HttpRoutes {
  // Checks a request's head before its body is read (key, path, declared length); an error reply
  // is sent without reading the body, and the connection is closed.
  std::function<std::optional<HttpReply>(const HttpRequest& head)> check_head;
  // Requests that answer at once without blocking (health, metrics): run on the I/O thread.
  std::function<bool(const HttpRequest&)> runs_inline;
  std::function<void(const HttpRequest&, HttpResponder&)> handle;
  // The body of a reply the listener makes itself (malformed request, limits, busy).
  std::function<HttpReply(int status, const std::string& message)> error_reply;
};

class HttpListener {
 public:
  HttpListener(HttpListenerOptions options, HttpRoutes routes);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Binds and listens (exclusively: no SO_REUSEPORT); the port (useful with port 0) or -1.
  int Bind();
  // Serves on the calling thread until Stop(); false when serving could not start.
  bool Serve();
  // Closes the listening socket and every connection, waits for running handlers (their writes
  // fail at once), then ends Serve(). Callable from any thread, more than once.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dq::router
