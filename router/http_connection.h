// One client connection of the HTTP listener (http_listener.h), and what the connections share.
// Private to router/. Every member of HttpConnection runs on the I/O thread except the
// responder's calls, which post to it and wait.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "router/http_listener.h"

namespace dq::router::http_detail {

// Handler threads with a bounded queue: a request that finds it full is answered 503.
class HandlerPool {
 public:
  HandlerPool(int threads, size_t max_queued);
  ~HandlerPool();
  bool TryPost(std::function<void()> task);
  // Runs what is queued, then joins the threads.
  void Stop();

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  const size_t max_queued_;
  int idle_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

class HttpConnection;

// What every connection of one listener shares. I/O-thread state except the pool.
struct ListenerCore {
  const HttpListenerOptions options;
  const HttpRoutes routes;
  // Every open connection, for Stop (a connection's last owner may be a handler thread). Declared
  // before ioc: the handlers that ioc destroys last may own connections.
  std::mutex mu;
  std::unordered_map<HttpConnection*, std::weak_ptr<HttpConnection>> connections;
  int pending = 0;  // connections waiting for (the rest of) a request
  bool stopping = false;
  boost::asio::io_context ioc{1};
  HandlerPool pool;

  ListenerCore(HttpListenerOptions o, HttpRoutes r);
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(boost::asio::ip::tcp::socket socket, ListenerCore& core);
  ~HttpConnection();
  void Start();
  // Ends the connection now (shutdown); pending operations complete with errors.
  void Close();

  // The responder's half: `bytes` to the client, blocking the calling handler thread until
  // written; `end` ends the response (then the next request is read, or the connection closes
  // when `keep_alive` is false). False when the client is gone.
  bool Send(std::string bytes, bool end, bool keep_alive);
  bool client_gone() const { return gone_.load(); }

 private:
  // kReading counts in ListenerCore::pending; kLingering: the reply is out, the rest of the
  // client's bytes are dropped until it closes (or kLingerTime).
  enum class Phase { kReading, kHandling, kLingering, kClosed };
  void SetPhase(Phase p);
  void ReadHead();
  void OnHead(boost::beast::error_code ec);
  void ReadBody();
  void OnBody(boost::beast::error_code ec);
  void Dispatch();
  void Watch();
  void OnResponseDone(bool keep_alive);
  // A reply the listener makes itself; the connection closes after it.
  void Refuse(int status, const std::string& message, const std::string& retry_after = "");
  void Linger();
  void Drain(size_t dropped);
  void WriteOnIo(std::shared_ptr<std::string> bytes, bool end, bool keep_alive,
                 std::function<void(bool)> done);
  HttpRequest HeadOf() const;

  ListenerCore& core_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  HttpRequest request_;
  Phase phase_ = Phase::kClosed;
  bool keep_alive_ = false;      // of the request being answered
  bool watching_ = false;        // a read that notices the client leaving is pending
  bool resume_reading_ = false;  // the watch was cancelled to read the next request
  std::atomic<bool> gone_{false};
};

}  // namespace dq::router::http_detail
