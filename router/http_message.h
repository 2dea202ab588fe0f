// What the HTTP front end's handlers see of a request and how they answer it, independent of the
// HTTP library underneath (http_listener.h). A handler runs on a handler thread (or, for the
// cheap GET routes, on the I/O thread) and answers exactly once: a whole reply, or a stream.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dq::router {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent, query included
  std::string path;    // target without the query
  int version = 11;    // 10 or 11 (HTTP/1.0, HTTP/1.1)
  HttpHeaders headers;
  std::string body;

  // The first header of that name (case-insensitive), or "".
  std::string header(std::string_view name) const;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // extra ones (Retry-After, ...)
};

// One request's answer channel. Reply or StartStream is called once; after StartStream, Write
// any number of times, then EndStream. Every call blocks until the bytes are handed to the
// socket (so a slow reader slows its own stream) and returns false once the client is gone.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;
  virtual void Reply(HttpReply reply) = 0;
  // An event stream: chunked for HTTP/1.1; for an HTTP/1.0 client (which knows no chunked
  // encoding) the bytes as they come, the end of the body being the connection's close.
  virtual bool StartStream(const std::string& content_type, const HttpHeaders& headers) = 0;
  virtual bool Write(std::string_view data) = 0;
  virtual void EndStream() = 0;
  // True once the client closed its side or the connection failed; a request without a stream
  // polls it to stop work nobody waits for.
  virtual bool ClientGone() const = 0;
};

}  // namespace dq::router
