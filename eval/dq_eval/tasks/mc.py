"""Multiple choice by log-likelihood (as lm-evaluation-harness does it through an OpenAI-style
endpoint): for each choice, POST /v1/completions {"prompt": context + continuation,
"max_tokens": 1, "echo": true, "logprobs": 1, "temperature": 0} and sum the prompt
log-probabilities of the continuation's tokens (found with text_offset). acc = the choice with
the highest sum; acc_norm = highest sum per character of the continuation. These requests only
prefill: they measure the prefill format.
- mc-arith: built in (sums and products with 4 numeric choices);
- mc: a JSONL file (--data mc=PATH) in one of three public shapes: {"question", "choices",
  "answer": index}, ARC ({"question": {"stem", "choices": [{"label", "text"}]}, "answerKey"}),
  HellaSwag ({"ctx", "endings", "label"})."""
import random

from .. import EvalError
from ..client import Malformed
from .base import LOGLIK, Task, read_jsonl


def continuation_logprob(resp, context):
    """(sum of the continuation's token logprobs, number of its tokens) from an echo response."""
    try:
        lp = resp["choices"][0]["logprobs"]
        offsets, logprobs = lp["text_offset"], lp["token_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise Malformed("echo response without choices[0].logprobs.text_offset/token_logprobs") \
            from None
    if not isinstance(offsets, list) or not isinstance(logprobs, list) or \
            len(offsets) != len(logprobs):
        raise Malformed("logprobs.text_offset and token_logprobs differ in length")
    tokens = lp.get("tokens") if isinstance(lp.get("tokens"), list) else None
    pt = (resp.get("usage") or {}).get("prompt_tokens")
    n_prompt = pt if isinstance(pt, int) and 0 < pt <= len(offsets) else len(offsets) - 1
    cut = len(context)
    total, count = 0.0, 0
    for i in range(n_prompt):
        if i + 1 < len(offsets):
            end = offsets[i + 1]
        elif tokens is not None and i < len(tokens) and isinstance(tokens[i], str):
            end = offsets[i] + len(tokens[i])
        else:
            end = None
        if not isinstance(end, int):
            raise Malformed(f"logprobs.text_offset[{i + 1}] is not an integer")
        # A token belongs to the continuation when it ends past the context (one that straddles
        # the boundary counts with the continuation).
        if end <= cut:
            continue
        v = logprobs[i]
        if v is None:  # the first prompt token has no logprob
            continue
        if not isinstance(v, (int, float)):
            raise Malformed(f"token_logprobs[{i}] is not a number")
        total += float(v)
        count += 1
    if count == 0:
        raise Malformed("no continuation tokens found in the echoed prompt")
    return total, count


class LoglikTask(Task):
    family = LOGLIK

    def mc_item(self, opts, item_id, context, choices, gold, meta=None):
        reqs = []
        for c in choices:
            body = {"prompt": context + c, "max_tokens": 1, "temperature": 0, "echo": True,
                    "logprobs": 1, "seed": opts.seed}
            if opts.model:
                body["model"] = opts.model
            reqs.append({"path": "/v1/completions", "body": body})
        return {"id": item_id, "gold": gold, "context": context, "choices": choices,
                "meta": meta or {}, "requests": reqs}

    def score(self, item, responses):
        sums, norms = [], []
        for choice, resp in zip(item["choices"], responses):
            s, _ = continuation_logprob(resp, item["context"])
            sums.append(s)
            norms.append(s / max(1, len(choice.encode("utf-8"))))
        pred = max(range(len(sums)), key=lambda i: sums[i])
        pred_norm = max(range(len(norms)), key=lambda i: norms[i])
        return {"score": 1.0 if pred == item["gold"] else 0.0,
                "acc_norm": 1.0 if pred_norm == item["gold"] else 0.0,
                "pred": pred, "logprobs": [round(s, 4) for s in sums]}


class McArith(LoglikTask):
    name = "mc-arith"
    description = "built-in multiple choice by log-likelihood: 'What is a + b?' / 'a times b'"

    def items(self, opts, limit):
        rng = random.Random(opts.seed * 1000003 + 303)
        n = 200 if limit is None else limit
        out = []
        for i in range(n):
            a, b = rng.randint(2, 49), rng.randint(2, 49)
            if rng.random() < 0.5:
                q, ans = f"What is {a} plus {b}?", a + b
            else:
                a, b = a % 12 + 2, b % 12 + 2
                q, ans = f"What is {a} times {b}?", a * b
            wrong = set()
            while len(wrong) < 3:
                w = ans + rng.choice([-10, -2, -1, 1, 2, 10, 3, -3])
                if w > 0 and w != ans:
                    wrong.add(w)
            choices = [ans] + sorted(wrong)
            rng.shuffle(choices)
            out.append(self.mc_item(opts, f"{self.name}-{i}", f"Question: {q}\nAnswer:",
                                    [f" {c}" for c in choices], choices.index(ans)))
        return out


class McFile(LoglikTask):
    name = "mc"
    description = ("multiple choice by log-likelihood from JSONL (--data mc=PATH): "
                   "{question, choices, answer} / ARC / HellaSwag shapes")
    needs_data = True

    def items(self, opts, limit):
        path = opts.data[self.name]
        out = []
        for n, row in read_jsonl(path, self.name):
            context, choices, gold = self.parse(row, path, n)
            out.append(self.mc_item(opts, f"{self.name}-{row.get('id', n)}", context, choices,
                                    gold))
            if limit is not None and len(out) >= limit:
                break
        return out

    def parse(self, row, path, n):
        where = f"task {self.name}: {path}:{n}"
        try:
            if isinstance(row.get("question"), dict):  # ARC
                q = row["question"]
                labels = [c["label"] for c in q["choices"]]
                texts = [c["text"] for c in q["choices"]]
                gold = labels.index(row["answerKey"])
                return f"Question: {q['stem']}\nAnswer:", [f" {t}" for t in texts], gold
            if "ctx" in row and "endings" in row:  # HellaSwag
                return row["ctx"], [f" {e}" for e in row["endings"]], int(row["label"])
            choices = row["choices"]
            gold = row["answer"]
            if isinstance(gold, str) and len(gold) == 1 and gold.isalpha():
                gold = ord(gold.upper()) - ord("A")
            gold = int(gold)
            if not 0 <= gold < len(choices):
                raise ValueError("answer out of range")
            return f"Question: {row['question']}\nAnswer:", [f" {c}" for c in choices], gold
        except (KeyError, ValueError, TypeError) as e:
            raise EvalError(f"{where}: not a multiple-choice item ({type(e).__name__}: {e}); "
                            f"want {{question, choices, answer}}, ARC or HellaSwag") from None
