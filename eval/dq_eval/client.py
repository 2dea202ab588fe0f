"""A small OpenAI-compatible HTTP client (urllib) with retries on 429 / 5xx / connection errors."""
import http.client
import json
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

# 499: dqserve's answer to a request it aborted (shutdown) before any token.
RETRY_STATUS = {408, 409, 429, 499, 500, 502, 503, 504}


class HttpError(Exception):
    """A non-2xx answer the client does not retry (or retries ran out on)."""

    def __init__(self, status, body, url):
        self.status = status
        self.body = body
        self.url = url
        super().__init__(f"HTTP {status} from {url}: {summarize(body)}")


class Unreachable(Exception):
    """No HTTP answer at all (connection refused, reset, timeout) after every retry."""


class Malformed(Exception):
    """A 2xx answer whose body is not the JSON the caller expected."""


def summarize(body, limit=300):
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


class Client:
    def __init__(self, base_url, api_key=None, timeout=600.0, retries=5, backoff=0.5,
                 max_backoff=30.0, log=None):
        base_url = base_url.rstrip("/")
        if "://" not in base_url:
            base_url = "http://" + base_url
        u = urllib.parse.urlparse(base_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError(f"not an http(s) URL: {base_url}")
        # Accept both http://host:port and http://host:port/v1.
        if u.path.endswith("/v1"):
            base_url = base_url[: -len("/v1")]
        self.base = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.log = log or (lambda msg: None)
        self._jitter = random.Random()

    def _headers(self, body):
        h = {"Accept": "application/json"}
        if body is not None:
            h["Content-Type"] = "application/json"
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def raw(self, method, path, body=None, timeout=None):
        """One request without retries: (status, headers, body bytes). Raises OSError-family
        errors (URLError, timeouts) when there is no answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=self._headers(data))
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            try:
                payload = e.read()
            except Exception:  # noqa: BLE001 - a broken error body is still an error
                payload = b""
            return e.code, dict(e.headers or {}), payload

    def request(self, method, path, body=None, retries=None, timeout=None):
        """Request with retries on 429 / 5xx / no answer, exponential backoff with jitter,
        honouring Retry-After. Returns (status, body bytes) of a 2xx; raises HttpError for a
        non-retryable status (or retries exhausted on one), Unreachable when the server never
        answered."""
        retries = self.retries if retries is None else retries
        url = self.base + path
        attempt = 0
        while True:
            delay = None
            try:
                status, headers, payload = self.raw(method, path, body, timeout)
                if 200 <= status < 300:
                    return status, payload
                if status not in RETRY_STATUS and status < 500:
                    raise HttpError(status, payload, url)
                if attempt >= retries:
                    raise HttpError(status, payload, url)
                ra = {k.lower(): v for k, v in headers.items()}.get("retry-after")
                if ra:
                    try:
                        delay = min(float(ra), self.max_backoff)
                    except ValueError:
                        delay = None
                why = f"HTTP {status}"
            except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError,
                    http.client.HTTPException) as e:
                if attempt >= retries:
                    reason = getattr(e, "reason", None) or e
                    raise Unreachable(f"{url}: {reason}") from None
                why = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            if delay is None:
                delay = min(self.max_backoff, self.backoff * (2 ** attempt))
                delay *= 0.5 + self._jitter.random()  # jitter: 0.5x .. 1.5x
            attempt += 1
            self.log(f"retry {attempt}/{retries} of {method} {path} in {delay:.1f} s ({why})")
            time.sleep(delay)

    def json(self, method, path, body=None, **kw):
        """request() whose 2xx body must be a JSON object; Malformed otherwise."""
        status, payload = self.request(method, path, body, **kw)
        try:
            j = json.loads(payload)
        except ValueError:
            raise Malformed(f"{path} answered {status} with non-JSON: {summarize(payload)}") \
                from None
        if not isinstance(j, dict):
            raise Malformed(f"{path} answered a JSON {type(j).__name__}, not an object")
        return j

    def text(self, path, retries=None):
        status, payload = self.request("GET", path, retries=retries)
        return payload.decode("utf-8", "replace")


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
