"""What to send: length distributions, synthetic prompts (reproducible from a seed, no
tokenizer needed) and JSONL datasets."""
import json
import math
import os
import random

from . import BenchError

# Common short English words: with a byte-level BPE (GPT-2, SmolLM2, Llama 3, Qwen) each is one
# token with its leading space, so words map to tokens nearly 1:1; the endpoint's own count is
# measured once per run (calibration) and every request records the real prompt_tokens anyway.
WORDS = (
    "the of and to in is that it was for on are as with his they at be this from have or by "
    "one had not but what all were when we there can an your which their said if do will each "
    "about how up out them then she many some so these would other into has more her two like "
    "him see time could no make than first been its who now people my made over did down only "
    "way find use may water long little very after words called just where most know get "
    "through back much before go good new write our used me man too any day same right look "
    "think also around another came come work three word must because does part even place "
    "well such here take why things help put years different away again off went old number "
    "great tell men say small every found still between name should home big give air line "
    "set own under read last never us left end along while might next sound below saw "
    "something thought both few those always looked show large often together asked house "
    "world going want school important until form food keep children feet land side without "
    "boy once animals life enough took sometimes four head above kind began almost live page "
    "got earth need far hand high year mother light parts country father let night following "
    "picture being study second eyes soon times story boys since white days ever paper hard "
    "near sentence better best across during today others however sure means knew try told "
    "young miles sun ways thing whole hear example heard several change answer room sea "
    "against top turned learn point city play toward five using himself usually money seen "
    "car morning table river water music color blue green red fish bird tree stone road"
).split()


class LengthDist:
    """A distribution of lengths (tokens): `fixed`, `uniform:LO,HI` (inclusive) or
    `normal:MEAN,STD` (rounded, at least 1). `fixed` uses the mean given beside it."""

    def __init__(self, spec, mean, what="length"):
        self.spec = spec
        self.what = what
        kind, _, params = spec.partition(":")
        self.kind = kind
        try:
            nums = [float(x) for x in params.split(",")] if params else []
        except ValueError:
            raise BenchError(f"{what} distribution \"{spec}\": parameters must be numbers") \
                from None
        if kind == "fixed":
            if nums:
                raise BenchError(f"{what} distribution \"{spec}\": fixed takes no parameters "
                                 f"(the length is given by the length option)")
            if mean is None or mean < 1:
                raise BenchError(f"{what} must be at least 1 token")
            self.params = (int(mean),)
        elif kind == "uniform":
            if len(nums) != 2 or nums[0] < 1 or nums[1] < nums[0] or \
                    any(x != int(x) for x in nums):
                raise BenchError(f"{what} distribution \"{spec}\": want uniform:LO,HI with "
                                 f"integers 1 <= LO <= HI")
            self.params = (int(nums[0]), int(nums[1]))
        elif kind == "normal":
            if len(nums) != 2 or nums[0] < 1 or nums[1] < 0:
                raise BenchError(f"{what} distribution \"{spec}\": want normal:MEAN,STD with "
                                 f"MEAN >= 1 and STD >= 0")
            self.params = (nums[0], nums[1])
        else:
            raise BenchError(f"{what} distribution \"{spec}\": want fixed, uniform:LO,HI or "
                             f"normal:MEAN,STD")

    def sample(self, rng):
        if self.kind == "fixed":
            return self.params[0]
        if self.kind == "uniform":
            return rng.randint(*self.params)
        return max(1, int(round(rng.gauss(*self.params))))

    def spec_str(self):
        if self.kind == "fixed":
            return f"fixed:{self.params[0]}"
        return f"{self.kind}:{','.join(f'{p:g}' for p in self.params)}"

    def mean(self):
        if self.kind == "fixed":
            return float(self.params[0])
        if self.kind == "uniform":
            return (self.params[0] + self.params[1]) / 2
        return self.params[0]

    def max(self):
        if self.kind == "fixed":
            return self.params[0]
        if self.kind == "uniform":
            return self.params[1]
        return max(1, int(math.ceil(self.params[0] + 4 * self.params[1])))


def words_text(rng, n_words):
    """n_words random words from WORDS, as one line of text."""
    return " ".join(rng.choice(WORDS) for _ in range(max(1, n_words)))


class PromptSizer:
    """Tokens -> words: prompt_tokens ~= overhead + tokens_per_word * words (fitted on the
    endpoint by calibrate(), or the ratio given on the command line with no overhead)."""

    def __init__(self, tokens_per_word=1.0, overhead=0.0, source="--tokens-per-word"):
        self.tokens_per_word = tokens_per_word
        self.overhead = overhead
        self.source = source

    def words_for(self, tokens):
        return max(1, int(round((tokens - self.overhead) / self.tokens_per_word)))

    def as_dict(self):
        return {"tokens_per_word": round(self.tokens_per_word, 4),
                "overhead_tokens": round(self.overhead, 2), "source": self.source}


def fit_sizer(points):
    """points: [(words, prompt_tokens), ...] from the endpoint -> PromptSizer (least squares
    line; a single point gives a ratio through the origin)."""
    if len(points) == 1 or len({w for w, _ in points}) == 1:
        w, t = points[0]
        return PromptSizer(t / w, 0.0, "calibrated")
    n = len(points)
    mw = sum(w for w, _ in points) / n
    mt = sum(t for _, t in points) / n
    sxx = sum((w - mw) ** 2 for w, _ in points)
    slope = sum((w - mw) * (t - mt) for w, t in points) / sxx
    if slope <= 0:
        raise BenchError(f"calibration of the prompt length failed (prompt_tokens {points} does "
                         f"not grow with the words sent); use --no-calibrate")
    return PromptSizer(slope, max(0.0, mt - slope * mw), "calibrated")


class Request:
    __slots__ = ("index", "prompt", "max_tokens", "input_len_target")

    def __init__(self, index, prompt, max_tokens, input_len_target):
        self.index = index
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.input_len_target = input_len_target


class SyntheticWorkload:
    """Request i is a function of (seed, i) alone: the same seed gives the same prompts and
    lengths whatever the concurrency, rate or order of completion."""

    def __init__(self, seed, input_dist, output_dist, sizer):
        self.seed = seed
        self.input_dist = input_dist
        self.output_dist = output_dist
        self.sizer = sizer

    def request(self, i):
        rng = random.Random(f"dq-bench:{self.seed}:{i}")
        n_in = self.input_dist.sample(rng)
        n_out = self.output_dist.sample(rng)
        return Request(i, words_text(rng, self.sizer.words_for(n_in)), n_out, n_in)

    def describe(self):
        return {"kind": "synthetic", "seed": self.seed, "input_len": self.input_dist.spec_str(),
                "output_len": self.output_dist.spec_str(), "sizer": self.sizer.as_dict()}


class DatasetWorkload:
    """JSONL lines {"prompt": "...", "max_tokens": N}; max_tokens falls back to the output
    length distribution. Request i is line i mod the number of lines."""

    def __init__(self, path, output_dist, seed):
        self.path = path
        self.output_dist = output_dist
        self.seed = seed
        self.items = load_dataset(path)

    def request(self, i):
        prompt, max_tokens = self.items[i % len(self.items)]
        if max_tokens is None:
            max_tokens = self.output_dist.sample(random.Random(f"dq-bench:{self.seed}:{i}"))
        return Request(i, prompt, max_tokens, None)

    def describe(self):
        return {"kind": "dataset", "path": os.path.abspath(self.path),
                "lines": len(self.items), "output_len": self.output_dist.spec_str()}


def load_dataset(path):
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise BenchError(f"--dataset {path}: {e.strerror}") from None
    items = []
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                j = json.loads(line)
            except ValueError:
                raise BenchError(f"{path}:{n}: malformed JSON line") from None
            prompt = j.get("prompt") if isinstance(j, dict) else None
            # Text, or token ids (the completions API's list form: no tokenization on the
            # server, so TTFT compares with an in-process prefill).
            ids = isinstance(prompt, list) and all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)
            if not prompt or not (isinstance(prompt, str) or ids):
                raise BenchError(f"{path}:{n}: want an object with a non-empty \"prompt\" "
                                 f"(a string, or a list of token ids)")
            mt = j.get("max_tokens")
            if mt is not None and (not isinstance(mt, int) or isinstance(mt, bool) or mt < 1):
                raise BenchError(f"{path}:{n}: \"max_tokens\" must be a positive integer")
            items.append((j["prompt"], mt))
    if not items:
        raise BenchError(f"--dataset {path}: no prompts in the file")
    return items
