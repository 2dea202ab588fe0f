"""Incremental Server-Sent Events parser (the subset OpenAI-compatible servers use): bytes in,
complete events out, whatever way the bytes were cut by the network."""


class SseParser:
    """feed(bytes) -> list of (event_type, data) for every event completed by these bytes.
    Lines end in \\n, \\r\\n or \\r; an empty line ends an event; several `data:` lines of one
    event are joined with \\n; `:` lines are comments; `id:` and `retry:` are ignored."""

    def __init__(self):
        self._buf = b""
        self._data = []
        self._event = ""
        self._cr_pending = False  # the last byte fed was \r: a following \n belongs to it

    def feed(self, chunk):
        if self._cr_pending and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._cr_pending = chunk.endswith(b"\r")
        self._buf += chunk
        out = []
        while True:
            cut = _line_end(self._buf)
            if cut is None:
                break
            end, nxt = cut
            line = self._buf[:end].decode("utf-8", "replace")
            self._buf = self._buf[nxt:]
            ev = self._line(line)
            if ev is not None:
                out.append(ev)
        return out

    def close(self):
        """End of stream: an event not terminated by an empty line is dropped (as the spec
        says); returns whether unparsed bytes were left over (a stream cut short)."""
        left = bool(self._buf.strip()) or bool(self._data)
        self._buf, self._data, self._event = b"", [], ""
        return left

    def _line(self, line):
        if line == "":
            if not self._data:
                self._event = ""
                return None
            ev = (self._event or "message", "\n".join(self._data))
            self._data, self._event = [], ""
            return ev
        if line.startswith(":"):
            return None
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        return None


def _line_end(buf):
    """(end of line, start of next line) of the first complete line in buf, or None. A lone \\r
    at the very end may be the first half of \\r\\n: it still ends the line (feed() drops a
    leading \\n of the next chunk)."""
    n = buf.find(b"\n")
    r = buf.find(b"\r")
    if r != -1 and (n == -1 or r < n):
        if r + 1 < len(buf) and buf[r + 1:r + 2] == b"\n":
            return r, r + 2
        return r, r + 1
    if n != -1:
        return n, n + 1
    return None
