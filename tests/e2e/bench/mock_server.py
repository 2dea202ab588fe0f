"""A mock OpenAI-compatible streaming server for dq-bench's unit tests (stdlib only). The
prompt (or the last message) picks the behaviour: "mode:429", "mode:500", "mode:error_event",
"mode:cut", "mode:no_usage", "mode:garbage"; anything else streams max_tokens tokens."""
import http.server
import json
import threading
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def log_message(self, *a):
        pass

    def _json(self, status, obj, headers=None):
        raw = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):
        srv = self.server
        if self.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [
                {"id": "mock-model", "object": "model", "max_model_len": 4096,
                 "dq_prefill_scheme": "nvfp4:w4a4", "dq_decode_scheme": "int2:weight_only"}]})
        if self.path == "/health":
            return self._json(200, {"status": "ok"})
        if self.path == "/metrics":
            with srv.lock:
                text = (f"# TYPE dq_generation_tokens_total counter\n"
                        f"dq_generation_tokens_total {srv.generated}\n"
                        f"dq_requests_total{{outcome=\"length\"}} {srv.finished}\n"
                        f"dq_requests_running 0\n")
            raw = text.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return
        self._json(404, {"error": {"message": "no such path"}})

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.bodies.append(body)
        chat = self.path == "/v1/chat/completions"
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        mode = prompt[5:] if prompt.startswith("mode:") else "normal"
        words = len(prompt.split())
        prompt_tokens = words + (srv.chat_overhead if chat else 0)
        n = body["max_tokens"]
        if mode == "429":
            return self._json(429, {"error": {"message": "queue full"}}, {"Retry-After": "0"})
        if mode == "500":
            return self._json(500, {"error": {"message": "boom"}})
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                 "total_tokens": prompt_tokens + n}
        if not body.get("stream"):
            return self._json(200, {"choices": [{"text": "x", "finish_reason": "length"}],
                                    "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def send(obj):
            data = obj if isinstance(obj, str) else json.dumps(obj)
            # \r\n line ends and a comment now and then: the client must cope.
            self.wfile.write(f": keep-alive\r\ndata: {data}\r\n\r\n".encode())
            self.wfile.flush()

        def choice(text, finish=None):
            if chat:
                return {"index": 0, "delta": {"content": text}, "finish_reason": finish}
            return {"index": 0, "text": text, "finish_reason": finish}

        if chat:
            send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                               "finish_reason": None}]})
        time.sleep(srv.ttft)
        for i in range(n):
            if i:
                time.sleep(srv.itl)
            send({"choices": [choice(f" tok{i}")]})
            if mode == "error_event":
                send({"error": {"message": "decode worker died", "type": "server_error"}})
                send("[DONE]")
                return
            if mode == "cut":
                return
            if mode == "garbage":
                send("not json")
                return
        send({"choices": [choice("", "length")]})
        if mode != "no_usage" and body.get("stream_options", {}).get("include_usage"):
            send({"choices": [], "usage": usage})
        # Counted before [DONE], as a real server does: a client that scrapes /metrics right after
        # its last [DONE] must see every request (counting after it raced such a scrape in CI).
        with srv.lock:
            srv.generated += n
            srv.finished += 1
        send("[DONE]")


class MockServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, ttft=0.02, itl=0.005, chat_overhead=7):
        super().__init__(("127.0.0.1", 0), Handler)
        self.ttft = ttft
        self.itl = itl
        self.chat_overhead = chat_overhead
        self.lock = threading.Lock()
        self.bodies = []
        self.generated = 0
        self.finished = 0
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()
