"""One benchmark run: a closed loop of N concurrent users (`--concurrency`) or an open loop of
arrivals at a rate (`--rate`, Poisson or fixed gaps), for K requests or S seconds."""
import random
import threading
import time

from .progress import Progress


class _Signals:
    """Set by the SIGINT / SIGTERM handler while a run is active (cli.py), polled by the run
    loop: no KeyboardInterrupt lands inside a lock or half-way through bookkeeping. Plain
    attributes, not threading.Event: a handler must not take a lock its thread may hold."""
    run_active = False
    interrupted = False


SIGNALS = _Signals()


class Interrupted(Exception):
    """Ctrl-C during a run; .records holds what finished (and the cancelled requests)."""

    def __init__(self, records):
        super().__init__("interrupted")
        self.records = records


MAX_RETRY_WAIT_S = 10.0


def retry_after(rec):
    try:
        return max(0.0, float(rec.get("retry_after") or 1.0))
    except ValueError:
        return 1.0


def round_times(rec):
    """Times to the microsecond: finer digits are noise and only make the JSON longer."""
    for k, v in rec.items():
        if isinstance(v, float) and k.endswith("_s"):
            rec[k] = round(v, 6)
    if rec.get("itl_s"):
        rec["itl_s"] = [round(x, 6) for x in rec["itl_s"]]
    return rec


def request_body(req, model, chat, args):
    body = {"model": model, "max_tokens": req.max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": args.temperature,
            "seed": args.seed * 1_000_003 + req.index}
    if chat:
        body["messages"] = [{"role": "user", "content": req.prompt}]
    else:
        body["prompt"] = req.prompt
    if args.ignore_eos:
        body["ignore_eos"] = True  # vLLM's extension, which dqserve has: exactly max_tokens
    return body


def arrival_times(rate, arrivals, seed):
    """Seconds after the start at which request 0, 1, ... is sent (an endless generator)."""
    rng = random.Random(f"dq-bench-arrivals:{seed}")
    t = 0.0
    while True:
        yield t
        t += rng.expovariate(rate) if arrivals == "poisson" else 1.0 / rate


class Run:
    """mode: {"concurrency": N} or {"rate": R, "arrivals": "poisson"|"fixed",
    "max_concurrency": M or None}; stop after num_requests or duration seconds of sending."""

    def __init__(self, endpoint, workload, model, chat, args, mode, num_requests=None,
                 duration=None, label="", progress=True):
        self.endpoint = endpoint
        self.workload = workload
        self.model = model
        self.chat = chat
        self.args = args
        self.mode = mode
        self.num_requests = num_requests
        self.duration = duration
        self.path = "/v1/chat/completions" if chat else "/v1/completions"
        self.records = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.progress = Progress(label, total=num_requests, duration=duration,
                                 enabled=progress)
        self._ready = {}
        self.t0 = None
        self.started_at = None
        self.finished_at = None

    def _one(self, i):
        req = self._ready.pop(i, None) or self.workload.request(i)
        self.progress.started()
        rec = self.endpoint.stream(i, self.path,
                                   request_body(req, self.model, self.chat, self.args), self.t0,
                                   self.chat)
        rec = round_times(rec)
        rec["input_len_target"] = req.input_len_target
        rec["max_tokens"] = req.max_tokens
        with self.lock:
            self.records.append(rec)
        self.progress.update(rec)
        return rec

    def _sending(self, i):
        if self.stop.is_set() or SIGNALS.interrupted:
            return False
        if self.num_requests is not None and i >= self.num_requests:
            return False
        if self.duration is not None and time.perf_counter() - self.t0 >= self.duration:
            return False
        return True

    def run(self):
        """Returns the records (sorted by request index); raises Interrupted on Ctrl-C."""
        # Prompts made before the clock starts: making a long one takes milliseconds of the GIL
        # that would otherwise delay other requests' timestamps (a timed run makes them lazily).
        self._ready = {i: self.workload.request(i) for i in range(self.num_requests or 0)}
        self.t0 = time.perf_counter()
        self.started_at = time.time()
        threads = []
        if "concurrency" in self.mode:
            self._closed_loop(threads)
        else:
            self._open_loop(threads)
        while not SIGNALS.interrupted and any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.1)
                self.progress.tick()
                if SIGNALS.interrupted:
                    break
        if SIGNALS.interrupted:
            self.stop.set()
            self.endpoint.cancel_all()
            for t in threads:
                t.join(5.0)
            self.finished_at = time.time()
            self.progress.close()
            raise Interrupted(self._sorted())
        self.finished_at = time.time()
        self.progress.close()
        return self._sorted()

    def _sorted(self):
        with self.lock:
            return sorted(self.records, key=lambda r: r["index"])

    def _closed_loop(self, threads):
        counter = iter(range(1 << 62))
        counter_lock = threading.Lock()

        def user():
            while True:
                with counter_lock:
                    i = next(counter)
                    if not self._sending(i):
                        return
                rec = self._one(i)
                if rec["kind"] == "rejected" and self.args.retry_wait:
                    # A user told to come back later does; without this a closed loop above the
                    # server's capacity spins through its requests as a burst of 429s.
                    self.stop.wait(min(retry_after(rec), MAX_RETRY_WAIT_S))

        for _ in range(self.mode["concurrency"]):
            t = threading.Thread(target=user, daemon=True)
            t.start()
            threads.append(t)

    def _open_loop(self, threads):
        slots = threading.BoundedSemaphore(self.mode["max_concurrency"]) \
            if self.mode.get("max_concurrency") else None

        def send(i):
            try:
                self._one(i)
            finally:
                if slots is not None:
                    slots.release()

        for i, at in enumerate(arrival_times(self.mode["rate"], self.mode["arrivals"],
                                             self.args.seed)):
            if self.duration is not None and at >= self.duration:
                break
            while not SIGNALS.interrupted:  # slices: the progress moves, Ctrl-C is prompt
                wait = self.t0 + at - time.perf_counter()
                if wait <= 0:
                    break
                time.sleep(min(wait, 0.2))
                self.progress.tick()
            if slots is not None:
                while not SIGNALS.interrupted and not slots.acquire(timeout=0.2):
                    self.progress.tick()
                if SIGNALS.interrupted:
                    break
            if not self._sending(i):
                if slots is not None:
                    slots.release()
                break
            t = threading.Thread(target=send, args=(i,), daemon=True)
            t.start()
            threads.append(t)
            threads[:] = [x for x in threads if x.is_alive() or x is t]
