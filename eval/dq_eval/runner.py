"""The task runner: items to requests over a thread pool, retries (in the client), one JSONL line
per finished item (so a rerun skips them), a manifest per run directory."""
import json
import os
import threading
import time

from . import EvalError, deployment
from .client import RETRY_STATUS, HttpError, Malformed, Unreachable, summarize
from .progress import Progress
from .tasks import fingerprint
from .tasks.base import response_text

RESULTS = "results.jsonl"
ERRORS = "errors.jsonl"
MANIFEST = "manifest.json"
# Settings that change what the items are or how they are answered: a directory's results are
# only resumed under the same ones.
PINNED_OPTIONS = ("seed", "length", "tokens_per_word", "api", "max_tokens")


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise EvalError(f"cannot read {path}: {e}") from None


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def load_results(path, warn=print):
    """{key: record} of the finished items in a results file. A last line cut short (the run
    was killed while writing it) is dropped from the file so that appending stays valid."""
    done = {}
    if not os.path.exists(path):
        return done
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        warn(f"warning: {path}: dropping an unfinished last line ({len(data) - cut} bytes)")
        with open(path, "r+b") as f:
            f.truncate(cut)
        data = data[:cut]
    for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            done[rec["key"]] = rec
        except (ValueError, KeyError, TypeError):
            warn(f"warning: {path}:{n}: unreadable result line ignored")
    return done


class ItemFailed(Exception):
    """The endpoint gave no usable answer after every retry: the item is not finished."""


class Runner:
    def __init__(self, client, tasks, opts, out_dir, limit=None, concurrency=4, max_failures=3,
                 progress=True, log=None, meta=None):
        self.client = client
        self.tasks = tasks
        self.opts = opts
        self.out = out_dir
        self.limit = limit
        self.concurrency = max(1, concurrency)
        self.max_failures = max_failures
        self.show_progress = progress
        self.meta = meta or {}
        self._log = log or (lambda m: print(m, file=__import__("sys").stderr, flush=True))
        self.lock = threading.Lock()
        self.progress = None
        self.stop = threading.Event()
        self.failures = []
        self.client_errors_in_a_row = 0
        self.abort_reason = None

    def log(self, msg):
        if self.progress is not None:
            self.progress.message(msg)
        else:
            self._log(msg)

    # ------------------------------------------------------------------ manifest
    def manifest(self, model_entry, health_json):
        path = os.path.join(self.out, MANIFEST)
        old = read_json(path)
        prefill = self.meta.get("prefill_format") or model_entry.get("dq_prefill_scheme") or ""
        decode = self.meta.get("decode_format") or model_entry.get("dq_decode_scheme") or ""
        mem = deployment.weight_memory(health_json)
        if self.meta.get("memory_gib") is not None:
            mem = {"total": int(self.meta["memory_gib"] * 2 ** 30), "source": "--memory-gib"}
        elif mem:
            mem["source"] = "checkpoint files named in /health"
        man = {
            "tool": "dq-eval",
            "endpoint": self.client.base,
            "model": model_entry.get("id"),
            "label": self.meta.get("label") or (old or {}).get("label") or "",
            "prefill_format": prefill,
            "decode_format": decode,
            "bits_per_weight": {
                "prefill": self.meta.get("bpw_prefill") or deployment.bits_per_weight(prefill),
                "decode": self.meta.get("bpw_decode") or deployment.bits_per_weight(decode)},
            "max_model_len": model_entry.get("max_model_len"),
            "models_entry": model_entry,
            "workers": (health_json or {}).get("workers"),
            "weight_memory_bytes": mem,
            "commit": deployment.commit(),
            "options": self.opts.as_dict(),
            "tasks": sorted(set(((old or {}).get("tasks") or []) + [t.name for t in self.tasks])),
            "limit": self.limit,
            "concurrency": self.concurrency,
            "created": (old or {}).get("created") or now(),
            "invocations": (old or {}).get("invocations") or [],
        }
        if old:
            self.check_compatible(old, man)
        return man

    def check_compatible(self, old, new):
        problems = []
        for k in ("model", "prefill_format", "decode_format"):
            if old.get(k) != new.get(k):
                problems.append(f"{k} {old.get(k)!r} -> {new.get(k)!r}")
        oo, no = old.get("options") or {}, new["options"]
        for k in PINNED_OPTIONS:
            if oo.get(k) != no.get(k):
                problems.append(f"{k} {oo.get(k)!r} -> {no.get(k)!r}")
        if problems:
            raise EvalError(f"{self.out} holds results of another configuration ("
                            f"{'; '.join(problems)}); use a new --out, or the same settings to "
                            f"resume")
        if old.get("endpoint") != new["endpoint"]:
            self.log(f"note: resuming results from {old.get('endpoint')} against "
                     f"{new['endpoint']} (same model and formats)")

    # ------------------------------------------------------------------ items
    def run_item(self, task, item):
        responses, t0 = [], time.time()
        prompt_tokens = completion_tokens = 0
        rec = {"key": f"{task.name}/{item['id']}", "task": task.name, "id": item["id"],
               "family": task.family, "fp": item["fp"], "gold": item.get("gold"),
               "meta": item.get("meta") or {}}
        error = None
        history = []  # the conversation so far, for requests that continue it
        for req in item["requests"]:
            if req.get("after_previous"):
                # The previous turn's messages, its answer, then this turn's message.
                req = {"path": req["path"],
                       "body": dict(req["body"], messages=history + req["body"]["messages"])}
            try:
                resp = self.post(req)
                history = req["body"].get("messages", []) + [
                    {"role": "assistant", "content": response_text(resp)}]
            except Malformed as e:
                error = f"malformed response: {e}"
                break
            except HttpError as e:
                if e.status in RETRY_STATUS or e.status >= 500:
                    raise ItemFailed(str(e)) from None
                error = f"HTTP {e.status}: {summarize(e.body)}"
                break
            except Unreachable as e:
                raise ItemFailed(f"no answer: {e}") from None
            responses.append(resp)
            u = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}
            if isinstance(u.get("prompt_tokens"), int):
                prompt_tokens += u["prompt_tokens"]
            if isinstance(u.get("completion_tokens"), int):
                completion_tokens += u["completion_tokens"]
        rec["latency_s"] = round(time.time() - t0, 3)
        rec["prompt_tokens"] = prompt_tokens or None
        rec["completion_tokens"] = completion_tokens if responses else None
        if error is None:
            try:
                scored = task.score(item, responses)
                rec.update(scored)
            except Malformed as e:
                error = f"malformed response: {e}"
            except Exception as e:  # noqa: BLE001 - a scorer bug must not end the run
                error = f"scoring failed: {type(e).__name__}: {e}"
        if error is not None:
            rec.update({"score": 0.0, "pred": None, "error": error})
            if isinstance(rec.get("acc_norm"), float) or task.family == "log-likelihood":
                rec["acc_norm"] = 0.0
        if isinstance(rec.get("output"), str) and len(rec["output"]) > 4000:
            rec["output"] = rec["output"][:4000] + "..."
        rec["finished"] = now()
        return rec

    def post(self, req):
        """One request; an answer cut short by the server (finish_reason "abort": dqserve
        shutting down or losing a worker) is retried like a 503, never scored."""
        attempt = 0
        while True:
            resp = self.client.json("POST", req["path"], req["body"])
            choices = resp.get("choices")
            reason = (choices[0].get("finish_reason") if isinstance(choices, list) and choices
                      and isinstance(choices[0], dict) else None)
            if reason != "abort":
                return resp
            if attempt >= self.client.retries:
                raise ItemFailed("the server aborted the request (finish_reason abort)")
            attempt += 1
            time.sleep(min(self.client.max_backoff, self.client.backoff * 2 ** attempt))

    def worker(self, queue, results_f, errors_f):
        while not self.stop.is_set():
            with self.lock:
                if not queue:
                    return
                task, item = queue.pop(0)
            try:
                rec = self.run_item(task, item)
            except ItemFailed as e:
                with self.lock:
                    self.failures.append((rec_key(task, item), str(e)))
                    errors_f.write(json.dumps({"key": rec_key(task, item), "error": str(e),
                                               "time": now()}) + "\n")
                    errors_f.flush()
                    n = len(self.failures)
                self.progress.update(failed=True)
                self.log(f"item {rec_key(task, item)} failed after retries: {e}")
                if n >= self.max_failures:
                    self.abort_reason = (f"{n} items got no usable answer after retries "
                                         f"(last: {e})")
                    self.stop.set()
                continue
            with self.lock:
                results_f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                results_f.flush()
                os.fsync(results_f.fileno())
                if rec.get("error"):
                    self.client_errors_in_a_row = (self.client_errors_in_a_row + 1
                                                   if rec["error"].startswith("HTTP 4") else 0)
                else:
                    self.client_errors_in_a_row = 0
                refused = self.client_errors_in_a_row
            if rec.get("error"):
                self.log(f"item {rec['key']} scored wrong: {rec['error']}")
            self.progress.update(score=rec.get("score"))
            if refused >= max(5, 2 * self.concurrency):
                self.abort_reason = (f"the endpoint refused {refused} requests in a row "
                                     f"(last: {rec['error']}); check the task settings")
                self.stop.set()

    # ------------------------------------------------------------------ run
    def run(self, model_entry, health_json):
        os.makedirs(self.out, exist_ok=True)
        man = self.manifest(model_entry, health_json)
        if self.opts.context:
            for t in self.tasks:
                if t.family == "prefill-heavy" and self.opts.length > self.opts.context:
                    raise EvalError(f"--length {self.opts.length} is longer than the model's "
                                    f"context ({self.opts.context} tokens)")
        per_task = []
        for t in self.tasks:
            items = t.items(self.opts, self.limit)
            for it in items:
                it["fp"] = fingerprint(it)
            per_task.append((t, items))
        results_path = os.path.join(self.out, RESULTS)
        done = load_results(results_path, warn=self.log)
        total = sum(len(items) for _, items in per_task)
        pending_by_task = []
        n_done = 0
        for t, items in per_task:
            pend = []
            for it in items:
                rec = done.get(rec_key(t, it))
                if rec is None:
                    pend.append((t, it))
                elif rec.get("fp") != it["fp"]:
                    raise EvalError(f"{results_path}: item {rec_key(t, it)} was made with other "
                                    f"settings (its prompt differs); use a new --out")
                else:
                    n_done += 1
            pending_by_task.append(pend)
        # Round robin over tasks, so that a partial run covers every task.
        queue = []
        for i in range(max((len(p) for p in pending_by_task), default=0)):
            for p in pending_by_task:
                if i < len(p):
                    queue.append(p[i])
        if n_done:
            self.log(f"resuming: {n_done} of {total} items already done in {results_path}, "
                     f"{len(queue)} to run")
        inv = {"start": now(), "items_total": total, "done_before": n_done,
               "metrics_start": deployment.metrics(self.client)}
        man["invocations"].append(inv)
        write_json(os.path.join(self.out, MANIFEST), man)

        self.progress = Progress(total, n_done, enabled=self.show_progress)
        t0 = time.time()
        interrupted = False
        with open(results_path, "a", encoding="utf-8") as results_f, \
                open(os.path.join(self.out, ERRORS), "a", encoding="utf-8") as errors_f:
            threads = [threading.Thread(target=self.worker, args=(queue, results_f, errors_f),
                                        daemon=True)
                       for _ in range(min(self.concurrency, max(1, len(queue))))]
            for th in threads:
                th.start()
            try:
                for th in threads:
                    while th.is_alive():
                        th.join(0.2)
            except KeyboardInterrupt:
                interrupted = True
                self.stop.set()
                self.abort_reason = "interrupted"
        self.progress.close()
        self.progress = None
        inv["end"] = now()
        inv["wall_s"] = round(time.time() - t0, 3)
        inv["done_after"] = len(load_results(results_path, warn=lambda m: None))
        inv["failed"] = len(self.failures)
        inv["metrics_end"] = deployment.metrics(self.client) if not interrupted else None
        inv["status"] = ("interrupted" if interrupted else "aborted" if self.abort_reason
                         else "failed" if self.failures else "complete")
        write_json(os.path.join(self.out, MANIFEST), man)
        return inv


def rec_key(task, item):
    return f"{task.name}/{item['id']}"
