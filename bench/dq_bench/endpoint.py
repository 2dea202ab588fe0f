"""The endpoint: plain JSON requests (models, health, metrics, calibration) and one timed
streaming request (TTFT, inter-token gaps, usage, how it failed)."""
import http.client
import json
import socket
import threading
import time
import urllib.parse

from . import BenchError
from .sse import SseParser
from .stats import tpot


def summarize(body, limit=300):
    """The message of an OpenAI-style error body, else the body on one line, cut."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        j = json.loads(body)
        if isinstance(j, dict) and isinstance(j.get("error"), dict):
            return str(j["error"].get("message", body))[:limit]
    except ValueError:
        pass
    body = " ".join(str(body).split())
    return body[:limit] + ("..." if len(body) > limit else "")


def parse_prometheus(text):
    """Prometheus text format -> {"name{labels}": value} (comments skipped)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            pass
    return out


class Endpoint:
    def __init__(self, url, api_key=None, timeout=600.0):
        url = url.strip()
        if "://" not in url:
            url = "http://" + url
        url = url.rstrip("/")
        u = urllib.parse.urlparse(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise BenchError(f"--endpoint: not an http(s) URL: {url}")
        try:
            self.port = u.port or (443 if u.scheme == "https" else 80)
        except ValueError:
            raise BenchError(f"--endpoint: bad port in {url}") from None
        self.host = u.hostname
        self.https = u.scheme == "https"
        prefix = u.path
        if prefix.endswith("/v1"):  # both http://host:port and http://host:port/v1
            prefix = prefix[:-3]
        self.prefix = prefix
        self.base = f"{u.scheme}://{u.netloc}{prefix}"
        self.api_key = api_key
        self.timeout = timeout
        # Connections of requests in flight, so Ctrl-C can cut them (the server then cancels).
        self._active = set()
        self._lock = threading.Lock()
        self.cancelled = threading.Event()

    def _conn(self, timeout):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def headers(self, json_body=True):
        h = {"Accept": "application/json"}
        if json_body:
            h["Content-Type"] = "application/json"
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def call(self, method, path, body=None, timeout=None):
        """One request: (status, headers lower-cased, body bytes). Raises OSError /
        http.client.HTTPException when there is no answer."""
        conn = self._conn(timeout or self.timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, self.prefix + path, body=data,
                         headers=self.headers(data is not None))
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def get_json(self, path, timeout=None):
        status, _, raw = self.call("GET", path, timeout=timeout)
        if status != 200:
            raise BenchError(f"GET {self.base}{path} answered HTTP {status}: {summarize(raw)}")
        try:
            return json.loads(raw)
        except ValueError:
            raise BenchError(f"GET {self.base}{path} answered non-JSON: {summarize(raw)}") \
                from None

    def metrics(self, timeout=10.0):
        """/metrics parsed, or None when the endpoint has none."""
        try:
            status, _, raw = self.call("GET", "/metrics", timeout=timeout)
        except (OSError, http.client.HTTPException):
            return None
        if status != 200:
            return None
        return parse_prometheus(raw.decode("utf-8", "replace"))

    def cancel_all(self):
        """Cut every request in flight (Ctrl-C): their threads see the connection close and
        record the request as cancelled."""
        self.cancelled.set()
        with self._lock:
            conns = list(self._active)
        for c in conns:
            try:
                if c.sock is not None:
                    c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stream(self, index, path, body, t0, chat):
        """Sends one streaming request and times it. t0: the run's perf_counter origin.
        Returns the request's record (see docs/benchmarking.md for the fields)."""
        rec = {"index": index, "timestamp": None, "start_s": None, "ok": False, "kind": None,
               "error": None, "http_status": None, "ttft_s": None, "e2e_s": None,
               "tpot_s": None, "itl_s": [], "prompt_tokens": None, "output_tokens": None, "usage": False, "chunks": 0,
               "finish_reason": None, "output_chars": 0}
        conn = self._conn(self.timeout)
        # The body is encoded before the clock starts: TTFT is the server's (connect, send,
        # prefill, first chunk), not the client's JSON encoding (~1 ms per 8K prompt ids).
        payload = json.dumps(body).encode()
        start = time.perf_counter()
        rec["start_s"] = start - t0
        rec["timestamp"] = time.time()
        last = None
        done = False
        try:
            # Connected before it is registered: cancel_all() then either sees a socket to cut
            # or this thread sees the cancellation, never neither.
            conn.connect()
            with self._lock:
                if self.cancelled.is_set():
                    rec["kind"] = "cancelled"
                    return rec
                self._active.add(conn)
            conn.request("POST", self.prefix + path, body=payload, headers=self.headers())
            r = conn.getresponse()
            rec["http_status"] = r.status
            if r.status != 200:
                raw = r.read()
                rec["e2e_s"] = time.perf_counter() - start
                rec["error"] = f"HTTP {r.status}: {summarize(raw)}"
                if r.status == 429:
                    rec["kind"] = "rejected"
                    rec["retry_after"] = r.getheader("Retry-After")
                else:
                    rec["kind"] = f"http_{r.status}"
                return rec
            parser = SseParser()
            while not done:
                chunk = r.read1(65536)
                now = time.perf_counter()
                if not chunk:
                    break
                for _, data in parser.feed(chunk):
                    if data.strip() == "[DONE]":
                        done = True
                        break
                    try:
                        j = json.loads(data)
                    except ValueError:
                        rec["kind"], rec["error"] = "malformed", f"non-JSON event: {data[:200]}"
                        return rec
                    if not isinstance(j, dict):
                        rec["kind"], rec["error"] = "malformed", f"event is not an object: " \
                                                                 f"{data[:200]}"
                        return rec
                    if j.get("error") is not None:
                        rec["kind"] = "stream_error"
                        err = j["error"]
                        rec["error"] = str(err.get("message", err) if isinstance(err, dict)
                                           else err)[:300]
                        return rec
                    text = _event_text(j, chat)
                    if text:
                        rec["chunks"] += 1
                        rec["output_chars"] += len(text)
                        if last is None:
                            rec["ttft_s"] = now - start
                        else:
                            rec["itl_s"].append(now - last)
                        last = now
                    for c in j.get("choices") or ():
                        if isinstance(c, dict) and c.get("finish_reason"):
                            rec["finish_reason"] = c["finish_reason"]
                    u = j.get("usage")
                    if isinstance(u, dict):
                        rec["usage"] = True
                        rec["prompt_tokens"] = u.get("prompt_tokens")
                        rec["output_tokens"] = u.get("completion_tokens")
            rec["e2e_s"] = time.perf_counter() - start
            if self.cancelled.is_set() and not done:
                rec["kind"] = "cancelled"
                return rec
            if not done:
                rec["kind"], rec["error"] = "incomplete", "stream ended without data: [DONE]"
                return rec
            if rec["finish_reason"] == "abort":  # dqserve stopping: an answer cut short
                rec["kind"], rec["error"] = "aborted", "finish_reason abort (server stopping)"
                return rec
            if rec["ttft_s"] is None:
                rec["kind"], rec["error"] = "empty", "no content in the stream"
                return rec
            if rec["output_tokens"] is None:  # no usage chunk: one token per content chunk
                rec["output_tokens"] = rec["chunks"]
            rec["ok"] = True
            rec["tpot_s"] = tpot(rec)
            return rec
        except (socket.timeout, TimeoutError) as e:
            rec["kind"], rec["error"] = "timeout", f"no data for {self.timeout:g} s ({e})"
        except (OSError, http.client.HTTPException) as e:
            if self.cancelled.is_set():
                rec["kind"] = "cancelled"
            else:
                rec["kind"], rec["error"] = "connection", f"{type(e).__name__}: {e}"
        finally:
            with self._lock:
                self._active.discard(conn)
            conn.close()
            if rec["e2e_s"] is None:
                rec["e2e_s"] = time.perf_counter() - start
        return rec


def _event_text(j, chat):
    out = []
    for c in j.get("choices") or ():
        if not isinstance(c, dict):
            continue
        if chat:
            d = c.get("delta") or {}
            t = d.get("content") or d.get("reasoning_content") or ""
        else:
            t = c.get("text") or ""
        if isinstance(t, str):
            out.append(t)
    return "".join(out)

