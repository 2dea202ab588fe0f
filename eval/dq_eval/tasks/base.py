"""What every task is: items (generated from a seed or read from a file), the requests each item
sends, and how the answers are scored."""
import hashlib
import json

from .. import EvalError
from ..client import Malformed

DECODE = "decode-heavy"
PREFILL = "prefill-heavy"
LOGLIK = "log-likelihood"


class Options:
    """Settings shared by every task of one run (all recorded in the manifest)."""

    def __init__(self, seed=1234, length=1024, tokens_per_word=1.3, api="chat", max_tokens=None,
                 data=None, model=None, context=None):
        self.seed = seed
        self.length = length                  # prefill-heavy prompt length target, tokens
        self.tokens_per_word = tokens_per_word  # tokenizer-free length control
        self.api = api                        # "chat" or "completions" for generation tasks
        self.max_tokens = max_tokens          # overrides each task's own budget when set
        self.data = data or {}                # task name -> JSONL path
        self.model = model                    # the served model name, put in every request
        self.context = context                # the model's context length when known

    def as_dict(self):
        return {"seed": self.seed, "length": self.length, "tokens_per_word": self.tokens_per_word,
                "api": self.api, "max_tokens": self.max_tokens, "data": dict(self.data)}


class Task:
    name = ""
    family = DECODE
    description = ""
    needs_data = False      # True: items come from a JSONL file given with --data NAME=PATH
    default_max_tokens = 128

    def items(self, opts, limit):
        """The first `limit` items (all when None), deterministic for opts.seed."""
        raise NotImplementedError

    def score(self, item, responses):
        """responses: one parsed JSON object per request of the item. Returns a dict with at
        least "score" (0..1) and "pred"; raises Malformed when a response is not usable."""
        raise NotImplementedError

    # Helpers for generation tasks.
    def max_tokens(self, opts):
        return opts.max_tokens or self.default_max_tokens

    def generation_request(self, opts, messages, max_tokens=None, stop=None):
        """One greedy generation request for chat messages (or, with --api completions, the
        messages flattened into a plain prompt for a base model)."""
        body = {"temperature": 0, "top_p": 1, "seed": opts.seed,
                "max_tokens": max_tokens or self.max_tokens(opts)}
        if opts.model:
            body["model"] = opts.model
        if stop:
            body["stop"] = stop
        if opts.api == "completions":
            body["prompt"] = flatten_messages(messages)
            return {"path": "/v1/completions", "body": body}
        body["messages"] = messages
        return {"path": "/v1/chat/completions", "body": body}


def flatten_messages(messages):
    parts = []
    for m in messages:
        if m["role"] == "system":
            parts.append(m["content"] + "\n\n")
        elif m["role"] == "user":
            parts.append(m["content"] + "\n")
        else:
            parts.append(m["content"] + "\n\n")
    return "".join(parts)


def response_text(resp):
    """The generated text of a chat or text completion; Malformed when the shape is wrong."""
    try:
        choice = resp["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise Malformed("no choices[0] in the response") from None
    if not isinstance(choice, dict):
        raise Malformed("choices[0] is not an object")
    if "message" in choice:
        msg = choice["message"]
        text = msg.get("content") if isinstance(msg, dict) else None
        if text is None and isinstance(msg, dict):
            text = msg.get("reasoning_content")
    else:
        text = choice.get("text")
    if not isinstance(text, str):
        raise Malformed("choices[0] has no text / message.content string")
    return text


def usage(resp):
    u = resp.get("usage") if isinstance(resp, dict) else None
    if not isinstance(u, dict):
        return None, None
    pt, ct = u.get("prompt_tokens"), u.get("completion_tokens")
    return (pt if isinstance(pt, int) else None), (ct if isinstance(ct, int) else None)


def fingerprint(item):
    """A hash of what an item sends and expects: a resumed run must be asking the same thing."""
    h = hashlib.sha1(json.dumps([item["requests"], item.get("gold")], sort_keys=True,
                                default=str).encode())
    return h.hexdigest()[:16]


def read_jsonl(path, task_name):
    """Every non-blank line of `path` as a JSON object; EvalError naming file:line otherwise."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise EvalError(f"task {task_name}: cannot read {path}: {e.strerror}") from None
    rows = []
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise EvalError(f"task {task_name}: {path}:{n}: malformed JSON line ({e})") \
                    from None
            if not isinstance(row, dict):
                raise EvalError(f"task {task_name}: {path}:{n}: expected a JSON object, got "
                                f"{type(row).__name__}")
            rows.append((n, row))
    if not rows:
        raise EvalError(f"task {task_name}: {path} holds no items")
    return rows


def require(row, fields, path, n, task_name):
    for f in fields:
        if f not in row:
            raise EvalError(f"task {task_name}: {path}:{n}: missing field \"{f}\"")
