#include "router/http_listener.h"

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <mutex>
#include <utility>
#include <vector>

#include "router/http_connection.h"
#include "spdlog/spdlog.h"

namespace dq::router {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using http_detail::HttpConnection;
using http_detail::ListenerCore;

struct HttpListener::Impl {
  ListenerCore core;
  tcp::acceptor acceptor{core.ioc};
  net::steady_timer retry{core.ioc};
  net::executor_work_guard<net::io_context::executor_type> work{core.ioc.get_executor()};
  std::once_flag stopped;

  Impl(HttpListenerOptions o, HttpRoutes r) : core(std::move(o), std::move(r)) {}

  void Accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (core.stopping || ec == net::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors, most likely: wait for connections to close instead of spinning.
        spdlog::warn("HTTP accept failed: {}; retrying in 100 ms", ec.message());
        retry.expires_after(std::chrono::milliseconds(100));
        retry.async_wait([this](boost::system::error_code) {
          if (!core.stopping) Accept();
        });
        return;
      }
      std::make_shared<HttpConnection>(std::move(socket), core)->Start();
      Accept();
    });
  }

  void CloseAll() {
    core.stopping = true;
    boost::system::error_code ec;
    acceptor.close(ec);
    retry.cancel();
    std::vector<std::shared_ptr<HttpConnection>> open;
    {
      std::lock_guard lock(core.mu);
      for (auto& [ptr, weak] : core.connections) {
        if (auto c = weak.lock()) open.push_back(std::move(c));
      }
    }
    for (auto& c : open) c->Close();
  }
};

HttpListener::HttpListener(HttpListenerOptions options, HttpRoutes routes)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(routes))) {}

HttpListener::~HttpListener() { Stop(); }

int HttpListener::Bind() {
  const HttpListenerOptions& o = impl_->core.options;
  boost::system::error_code ec;
  tcp::resolver resolver(impl_->core.ioc);
  auto found = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
  if (ec || found.empty()) {
    spdlog::error("HTTP: cannot resolve {}: {}", o.host, ec.message());
    return -1;
  }
  const tcp::endpoint endpoint = found.begin()->endpoint();
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  // SO_REUSEADDR only (restarts within TIME_WAIT); never SO_REUSEPORT, with which a second
  // router on the same port would start and silently share it.
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    a.close(ec);
    return -1;
  }
  return a.local_endpoint().port();
}

bool HttpListener::Serve() {
  if (!impl_->acceptor.is_open()) return false;
  impl_->Accept();
  impl_->core.ioc.run();
  return true;
}

void HttpListener::Stop() {
  std::call_once(impl_->stopped, [this] {
    Impl& impl = *impl_;
    net::post(impl.core.ioc, [&impl] { impl.CloseAll(); });
    // Handlers end once their writes fail (the connections are closed), which needs the I/O
    // thread still running; only then does Serve() return.
    impl.core.pool.Stop();
    impl.work.reset();
    impl.core.ioc.stop();
  });
}

}  // namespace dq::router
