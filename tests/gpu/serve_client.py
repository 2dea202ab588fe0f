"""HTTP client helpers shared by the GPU serving tests' inline Python (stdlib only).

The scripts run from the repository root and import this with
`sys.path.insert(0, "tests/gpu"); from serve_client import Router`.
"""
import http.client
import json


class Router:
    """The router of a running deployment on 127.0.0.1:port."""

    def __init__(self, port, timeout=300):
        self.port = int(port)
        self.timeout = timeout

    def call(self, method, path, body=None):
        """(status, raw bytes) of one request; body is JSON-encoded when given."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        c.request(method, path, json.dumps(body) if body is not None else None,
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def metric(self, name):
        """Sum of every /metrics sample whose line starts with `name`."""
        total = 0.0
        for line in self.call("GET", "/metrics")[1].decode().splitlines():
            if line.startswith(name) and not line.startswith("#"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def model(self):
        """The id of the first served model."""
        return json.loads(self.call("GET", "/v1/models")[1])["data"][0]["id"]

    def complete(self, prompt, max_tokens):
        """Greedy /v1/completions text, or "HTTP <status>: <body>"."""
        status, raw = self.call("POST", "/v1/completions", {
            "model": self.model(), "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0})
        body = json.loads(raw)
        return body["choices"][0]["text"] if status == 200 else f"HTTP {status}: {body}"
