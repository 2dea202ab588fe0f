"""A small OpenAI-compatible server for the dq-eval unit tests (another server than dqserve):
answers chat/completions from a callback, echoes prompts with fabricated log-probabilities, and
can be told to refuse (429), fail (503) or answer garbage."""
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def word_tokens(text):
    """'a bc d' -> ['a', ' bc', ' d'] (a whitespace "tokenizer")."""
    return re.findall(r"\s*\S+|\s+$", text)


class Mock:
    def __init__(self, answer=None, models=True, logprob=None):
        self.answer = answer or (lambda body: "I think. The answer is 42.")
        self.logprob = logprob or (lambda tok, i: -0.1 * len(tok.strip()) - 0.01 * (i % 3))
        self.models = models
        self.requests = []          # (path, body) of every POST
        self.refuse_next = 0        # answer 429 to this many POSTs
        self.down = False           # answer 503 to every POST
        self.garbage = set()        # POST numbers (1-based) that get a non-JSON 200
        self.aborted = set()        # POST numbers answered with finish_reason "abort"
        self.status = {}            # POST number -> HTTP status to answer with
        self.lock = threading.Lock()
        mock = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, status, obj, headers=None):
                data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models" and mock.models:
                    self.reply(200, {"object": "list", "data": [
                        {"id": "mock-model", "max_model_len": 8192,
                         "dq_prefill_scheme": "nvfp4:w4a4",
                         "dq_decode_scheme": "int2-g32:weight_only"}]})
                elif self.path == "/metrics":
                    n = len(mock.requests)
                    text = (f"dq_prompt_tokens_total {100 * n}\n"
                            f"dq_generation_tokens_total {10 * n}\n"
                            f"dq_time_to_first_token_seconds_sum {0.1 * n}\n"
                            f"dq_time_to_first_token_seconds_count {n}\n"
                            f"dq_queue_time_seconds_sum 0\n"
                            f"dq_time_per_output_token_seconds_sum {0.01 * n}\n"
                            f"dq_time_per_output_token_seconds_count {n}\n").encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                else:
                    self.reply(404, {"error": {"message": "not found"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with mock.lock:
                    mock.requests.append((self.path, body))
                    n = len(mock.requests)
                    refuse = mock.refuse_next > 0
                    if refuse:
                        mock.refuse_next -= 1
                if mock.down:
                    return self.reply(503, {"error": {"message": "down"}})
                if refuse:
                    return self.reply(429, {"error": {"message": "busy"}}, {"Retry-After": "0"})
                if n in mock.garbage:
                    return self.reply(200, b"<html>oops</html>")
                if n in mock.status:
                    return self.reply(mock.status[n], {"error": {"message": "aborted"}})
                if n in mock.aborted:
                    return self.reply(200, {"choices": [{"index": 0, "message": {
                        "role": "assistant", "content": "The ans"}, "finish_reason": "abort"}],
                        "usage": {"prompt_tokens": 50, "completion_tokens": 2}})
                if self.path == "/v1/chat/completions":
                    text = mock.answer(body)
                    return self.reply(200, {"choices": [{"index": 0, "message": {
                        "role": "assistant", "content": text}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 50, "completion_tokens": 7}})
                if self.path == "/v1/completions":
                    prompt = body["prompt"]
                    if not body.get("echo"):
                        return self.reply(200, {"choices": [{"index": 0, "text": mock.answer(
                            body)}], "usage": {"prompt_tokens": 50, "completion_tokens": 7}})
                    toks = word_tokens(prompt) + [" end"]
                    offs, pos = [], 0
                    for t in toks:
                        offs.append(pos)
                        pos += len(t)
                    lps = [None] + [mock.logprob(t, i) for i, t in enumerate(toks)][1:]
                    tops = [None] + [{t: lp, " other": lp - 1.0} for t, lp in
                                     zip(toks[1:], lps[1:])]
                    return self.reply(200, {"choices": [{"index": 0, "text": prompt + " end",
                        "logprobs": {"tokens": toks, "token_logprobs": lps,
                                     "text_offset": offs, "top_logprobs": tops}}],
                        "usage": {"prompt_tokens": len(toks) - 1, "completion_tokens": 1}})
                self.reply(404, {"error": {"message": "no such path"}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def posts(self):
        return len(self.requests)

    def close(self):
        self.server.shutdown()
        self.server.server_close()
