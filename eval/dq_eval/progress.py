"""A progress bar with ETA on stderr (redrawn in place on a terminal, a line every few seconds
otherwise, so CI logs stay short)."""
import sys
import threading
import time


def fmt_secs(s):
    if s is None or s != s or s == float("inf"):
        return "--:--"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


class Progress:
    def __init__(self, total, done=0, stream=None, enabled=True, width=24, interval=5.0):
        self.total = total
        self.done = done
        self.start_done = done
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.width = width
        self.interval = interval
        self.t0 = time.time()
        self.last = 0.0
        self.failed = 0
        self.score_sum = 0.0
        self.scored = 0
        self.lock = threading.Lock()

    def line(self):
        frac = self.done / self.total if self.total else 1.0
        fill = int(round(frac * self.width))
        elapsed = time.time() - self.t0
        new = self.done - self.start_done
        left = self.total - self.done
        eta = elapsed / new * left if new > 0 else None
        score = f" score {self.score_sum / self.scored:.3f}" if self.scored else ""
        failed = f" failed {self.failed}" if self.failed else ""
        return (f"[{'#' * fill}{'.' * (self.width - fill)}] {self.done}/{self.total} "
                f"{100 * frac:3.0f}% elapsed {fmt_secs(elapsed)} ETA "
                f"{fmt_secs(eta if left else 0)}{score}{failed}")

    def update(self, score=None, failed=False):
        with self.lock:
            if failed:
                self.failed += 1
            else:
                self.done += 1
                if score is not None:
                    self.score_sum += score
                    self.scored += 1
            self._draw(force=self.done == self.total)

    def message(self, msg):
        """A log line that does not garble the bar."""
        with self.lock:
            if self.tty:
                self.stream.write("\r\033[K")
            self.stream.write(msg + "\n")
            if self.tty:
                self._draw(force=True)

    def _draw(self, force=False):
        if not self.enabled:
            return
        now = time.time()
        if self.tty:
            self.stream.write("\r\033[K" + self.line())
        elif force or now - self.last >= self.interval:
            self.stream.write(self.line() + "\n")
        else:
            return
        self.last = now
        self.stream.flush()

    def close(self):
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
