"""One progress line with ETA on stderr: redrawn in place on a terminal, printed every few
seconds otherwise (CI logs stay short)."""
import sys
import threading
import time


def fmt_secs(s):
    if s is None or s != s or s == float("inf"):
        return "--:--"
    s = int(round(max(0.0, s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


class Progress:
    """total: requests to send, or None with `duration` (seconds) for a timed run."""

    def __init__(self, label, total=None, duration=None, stream=None, enabled=True,
                 interval=5.0, width=20):
        self.label = label
        self.total = total
        self.duration = duration
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = interval
        self.width = width
        self.t0 = time.time()
        self.last = 0.0
        self.finished = 0
        self.ok = 0
        self.failed = 0
        self.rejected = 0
        self.tokens = 0
        self.in_flight = 0
        self.lock = threading.Lock()

    def started(self):
        with self.lock:
            self.in_flight += 1

    def update(self, rec):
        with self.lock:
            self.in_flight -= 1
            if rec.get("kind") == "cancelled":
                return
            self.finished += 1
            if rec.get("ok"):
                self.ok += 1
                self.tokens += rec.get("output_tokens") or 0
            elif rec.get("kind") == "rejected":
                self.rejected += 1
            else:
                self.failed += 1
            self._draw(force=self.total is not None and self.finished >= self.total)

    def tick(self):
        with self.lock:
            self._draw()

    def line(self):
        elapsed = time.time() - self.t0
        if self.total:
            frac = min(1.0, self.finished / self.total)
            left = self.total - self.finished
            eta = elapsed / self.finished * left if self.finished else None
            count = f"{self.finished}/{self.total}"
        else:
            frac = min(1.0, elapsed / self.duration) if self.duration else 0.0
            eta = (self.duration - elapsed) if self.duration else None
            if eta is not None and eta <= 0 and self.in_flight:
                eta = None  # sending is over; waiting for the last answers
            count = f"{self.finished} done"
        fill = int(round(frac * self.width))
        extra = ""
        if self.failed:
            extra += f" failed {self.failed}"
        if self.rejected:
            extra += f" rejected {self.rejected}"
        tps = self.tokens / elapsed if elapsed > 0 else 0.0
        return (f"{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {count} "
                f"{100 * frac:3.0f}% elapsed {fmt_secs(elapsed)} ETA {fmt_secs(eta)} | ok "
                f"{self.ok}{extra} | in flight {self.in_flight} | {tps:.1f} tok/s")

    def _draw(self, force=False):
        if not self.enabled:
            return
        now = time.time()
        if self.tty:
            if not force and now - self.last < 0.1:
                return
            self.stream.write("\r\033[K" + self.line())
        elif force or now - self.last >= self.interval:
            self.stream.write(self.line() + "\n")
        else:
            return
        self.last = now
        self.stream.flush()

    def close(self):
        if not self.enabled:
            return
        with self.lock:
            if self.tty:
                self.stream.write("\r\033[K" + self.line() + "\n")
            elif self.total is None or self.finished < self.total:
                self.stream.write(self.line() + "\n")
            self.stream.flush()
