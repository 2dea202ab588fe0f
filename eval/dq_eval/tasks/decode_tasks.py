"""Decode-heavy tasks: chain-of-thought generation with answer extraction.
- arith, units: built in, generated from the seed with known answers (no download);
- gsm8k: GSM8K's JSONL ({"question", "answer": "... #### 72"});
- mmlu-pro: MMLU-Pro's JSONL ({"question", "options": [...], "answer": "C", "answer_index": 2,
  "category", ...}), CoT prompt and answer extraction as in the MMLU-Pro repository."""
import random
import re

from .. import EvalError
from .base import DECODE, Task, read_jsonl, require, response_text

# ---------------------------------------------------------------- numeric answer extraction
_NUM = r"-?\$?\d[\d,]*(?:\.\d+)?"


def normalize_number(s):
    """'$1,234.50' -> 1234.5; None when `s` is not a number."""
    if s is None:
        return None
    s = s.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        v = float(s)
    except ValueError:
        return None
    return v


def extract_number(text):
    """The model's final numeric answer: the last 'answer is N' (our prompt's format), else the
    last '#### N' (GSM8K's), else the last number in the text (lm-eval's flexible-extract).
    Returns (value or None, method)."""
    for method, pat in (("answer-is", r"answer is[:\s]*\**\s*(" + _NUM + ")"),
                        ("####", r"####\s*(" + _NUM + ")")):
        m = re.findall(pat, text, flags=re.IGNORECASE)
        if m:
            v = normalize_number(m[-1])
            if v is not None:
                return v, method
    m = re.findall(_NUM, text)
    for cand in reversed(m):
        v = normalize_number(cand)
        if v is not None:
            return v, "last-number"
    return None, "none"


def numbers_equal(a, b):
    return a is not None and b is not None and abs(a - b) < 1e-6 * max(1.0, abs(b))


COT_INSTRUCTION = ("Solve the problem step by step. Finish with a line of the form "
                   "\"The answer is N.\" where N is a number.")


class NumericCoT(Task):
    """A question with a numeric answer, one worked example, greedy CoT, answer extraction."""
    family = DECODE
    default_max_tokens = 128
    EXAMPLE_Q = ("A farmer has 3 pens with 12 sheep in each pen. He sells 7 sheep. How many "
                 "sheep does he have left?")
    EXAMPLE_A = "There are 3 * 12 = 36 sheep. After selling 7: 36 - 7 = 29. The answer is 29."

    def messages(self, question):
        return [
            {"role": "user", "content": f"{COT_INSTRUCTION}\n\nQuestion: {self.EXAMPLE_Q}"},
            {"role": "assistant", "content": self.EXAMPLE_A},
            {"role": "user", "content": f"{COT_INSTRUCTION}\n\nQuestion: {question}"},
        ]

    def make_item(self, opts, item_id, question, gold, meta=None):
        return {"id": item_id, "question": question, "gold": gold, "meta": meta or {},
                "requests": [self.generation_request(opts, self.messages(question))]}

    def score(self, item, responses):
        text = response_text(responses[0])
        value, method = extract_number(text)
        ok = numbers_equal(value, float(item["gold"]))
        return {"score": 1.0 if ok else 0.0, "pred": value, "extract": method, "output": text}


# ------------------------------------------------------------------ built-in arithmetic items
NAMES = ["Ana", "Ben", "Carla", "Dev", "Elif", "Femi", "Goran", "Hana", "Ivo", "Jun", "Kemal",
         "Lena", "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara"]


def _arith_problem(rng):
    """One multi-step word problem with an integer answer: (question, answer, template id)."""
    name = rng.choice(NAMES)
    t = rng.randrange(8)
    if t == 0:
        a, b = rng.randint(2, 9), rng.randint(3, 12)
        c = rng.randint(1, a * b // 2)
        q = (f"{name} bakes {a} trays of muffins with {b} muffins on each tray and sells {c} "
             f"muffins. How many muffins are left?")
        return q, a * b - c, "trays-sell"
    if t == 1:
        b, c, d = rng.randint(2, 6), rng.randint(3, 15), rng.randint(1, 9)
        a = b * c + d + rng.randint(5, 60)
        q = (f"{name} has {a} dollars, buys {b} books at {c} dollars each and a pen for {d} "
             f"dollars. How many dollars does {name} have left?")
        return q, a - b * c - d, "shopping"
    if t == 2:
        a, b, c, d = (rng.randint(20, 90), rng.randint(2, 5), rng.randint(20, 90),
                      rng.randint(1, 4))
        q = (f"A train travels at {a} km per hour for {b} hours and then at {c} km per hour "
             f"for {d} hours. How many km does it travel in total?")
        return q, a * b + c * d, "train"
    if t == 3:
        c = rng.randint(2, 8)
        per = rng.randint(2, 9)
        b = rng.randint(2, 6)
        total = c * per * b
        a = total // b
        q = (f"There are {b} boxes with {a} apples in each box. The apples are shared equally "
             f"among {c} children. How many apples does each child get?")
        return q, total // c, "share"
    if t == 4:
        a, b, c = rng.randint(5, 40), rng.randint(2, 6), rng.randint(4, 20)
        if (a + b * c) % 2:
            a += 1
        q = (f"A shop has {a} shirts. It receives {b} boxes of {c} shirts each, then sells "
             f"half of all its shirts. How many shirts does it have now?")
        return q, (a + b * c) // 2, "half"
    if t == 5:
        a, b, c = rng.randint(10, 50), rng.randint(2, 9), rng.randint(2, 9)
        q = (f"{name} reads {a} pages on Monday, {b} times as many pages on Tuesday and {c} "
             f"fewer pages on Wednesday than on Monday. How many pages does {name} read in "
             f"the three days?")
        return q, a + a * b + (a - c), "pages"
    if t == 6:
        a, b, c = rng.randint(3, 12), rng.randint(2, 9), rng.randint(2, 5)
        q = (f"A garden has {a} rows of {b} tulips. {name} plants {c} more rows of the same "
             f"size. How many tulips are there now?")
        return q, (a + c) * b, "rows"
    b, c = rng.randint(10, 40), rng.randint(2, 5)
    a = 3 * b + rng.randint(10, 120)
    q = (f"A tank holds {a} liters of water. Each day {b} liters are used and {c} liters are "
         f"added. How many liters are in the tank after 3 days?")
    return q, a - 3 * b + 3 * c, "tank"


def _one_step_problem(rng):
    """A one-operation word problem with small numbers (a floor that tiny models can reach)."""
    name = rng.choice(NAMES)
    thing = rng.choice(["apples", "books", "marbles", "stickers", "coins", "pencils"])
    t = rng.randrange(3)
    if t == 0:
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        return (f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have "
                f"now?", a + b, "add")
    if t == 1:
        b = rng.randint(1, 15)
        a = b + rng.randint(1, 20)
        return (f"{name} has {a} {thing} and gives away {b}. How many {thing} does {name} have "
                f"left?", a - b, "sub")
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return (f"{name} has {a} bags with {b} {thing} in each bag. How many {thing} does {name} "
            f"have?", a * b, "mul")


def _unit_problem(rng):
    t = rng.randrange(8)
    if t == 0:
        h, m = rng.randint(1, 9), rng.randint(1, 59)
        return f"How many minutes are there in {h} hours and {m} minutes?", h * 60 + m, "h-min"
    if t == 1:
        km = rng.randint(2, 40)
        m = rng.randint(1, 999)
        return (f"How many meters are there in {km} kilometers and {m} meters?", km * 1000 + m,
                "km-m")
    if t == 2:
        ft = rng.randint(2, 30)
        return f"How many inches are there in {ft} feet?", ft * 12, "ft-in"
    if t == 3:
        kg, g = rng.randint(1, 20), rng.randint(1, 999)
        return (f"How many grams are there in {kg} kilograms and {g} grams?", kg * 1000 + g,
                "kg-g")
    if t == 4:
        d = rng.randint(2, 9)
        return f"How many hours are there in {d} days?", d * 24, "d-h"
    if t == 5:
        w = rng.randint(2, 15)
        return f"How many days are there in {w} weeks?", w * 7, "w-d"
    if t == 6:
        mins = rng.randint(2, 45)
        return f"How many seconds are there in {mins} minutes?", mins * 60, "min-s"
    cm = rng.randint(2, 40) * 100
    return f"How many meters are {cm} centimeters?", cm // 100, "cm-m"


class Arith(NumericCoT):
    name = "arith"
    description = ("built-in multi-step arithmetic word problems (GSM8K-style, generated from "
                   "the seed, known answers)")
    generator = staticmethod(_arith_problem)
    salt = 101

    def items(self, opts, limit):
        rng = random.Random(opts.seed * 1000003 + self.salt)
        n = 200 if limit is None else limit
        out = []
        for i in range(n):
            q, a, kind = self.generator(rng)
            out.append(self.make_item(opts, f"{self.name}-{i}", q, a, {"template": kind}))
        return out


class ArithOneStep(Arith):
    name = "arith-1step"
    description = ("built-in one-operation word problems with small numbers (generated, known "
                   "answers): a decode-heavy floor for very small models")
    generator = staticmethod(_one_step_problem)
    salt = 404
    default_max_tokens = 64


class Units(Arith):
    name = "units"
    description = "built-in unit conversions (generated from the seed, known answers)"
    generator = staticmethod(_unit_problem)
    salt = 202


class Gsm8k(NumericCoT):
    name = "gsm8k"
    description = "GSM8K-format JSONL (--data gsm8k=PATH): {question, answer: '... #### N'}"
    needs_data = True
    default_max_tokens = 256

    def items(self, opts, limit):
        path = opts.data[self.name]
        out = []
        for n, row in read_jsonl(path, self.name):
            require(row, ("question", "answer"), path, n, self.name)
            ans = str(row["answer"])
            gold = normalize_number(ans.split("####")[-1]) if "####" in ans \
                else normalize_number(ans)
            if gold is None:
                raise EvalError(f"task {self.name}: {path}:{n}: answer has no '#### N' number")
            out.append(self.make_item(opts, f"{self.name}-{n}", row["question"], gold))
            if limit is not None and len(out) >= limit:
                break
        return out


LETTERS = "ABCDEFGHIJKLMNOP"


def extract_choice(text, n_options):
    """MMLU-Pro's extraction: 'answer is (X)', then 'Answer: X', then the last standalone
    letter. Returns (letter or None, method)."""
    valid = LETTERS[:n_options]
    m = re.findall(r"answer is \(?([A-P])\)?", text)
    if m and m[-1] in valid:
        return m[-1], "answer-is"
    m = re.findall(r"[aA]nswer:\s*\(?([A-P])\)?", text)
    if m and m[-1] in valid:
        return m[-1], "answer:"
    m = re.findall(r"\b([A-P])\b", text)
    for c in reversed(m):
        if c in valid:
            return c, "last-letter"
    return None, "none"


class MmluPro(Task):
    name = "mmlu-pro"
    family = DECODE
    description = ("MMLU-Pro-format JSONL (--data mmlu-pro=PATH): {question, options, answer, "
                   "category}; CoT, 'the answer is (X)'")
    needs_data = True
    default_max_tokens = 256

    def items(self, opts, limit):
        path = opts.data[self.name]
        out = []
        for n, row in read_jsonl(path, self.name):
            require(row, ("question", "options"), path, n, self.name)
            opts_list = row["options"]
            if not isinstance(opts_list, list) or not 2 <= len(opts_list) <= len(LETTERS):
                raise EvalError(f"task {self.name}: {path}:{n}: options must be a list of 2.."
                                f"{len(LETTERS)} strings")
            if "answer" in row and str(row["answer"]) in LETTERS[:len(opts_list)]:
                gold = str(row["answer"])
            elif isinstance(row.get("answer_index"), int) and \
                    0 <= row["answer_index"] < len(opts_list):
                gold = LETTERS[row["answer_index"]]
            else:
                raise EvalError(f"task {self.name}: {path}:{n}: needs answer (a letter) or "
                                f"answer_index")
            subject = row.get("category", "general knowledge")
            body = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(opts_list))
            prompt = (f"The following is a multiple choice question about {subject}. Think step "
                      f"by step and then finish your answer with \"the answer is (X)\" where X "
                      f"is the correct letter choice.\n\nQuestion: {row['question']}\nOptions:\n"
                      f"{body}\nAnswer: Let's think step by step.")
            item_id = f"{self.name}-{row.get('question_id', n)}"
            out.append({"id": item_id, "gold": gold, "meta": {"category": subject,
                                                               "n_options": len(opts_list)},
                        "requests": [self.generation_request(
                            opts, [{"role": "user", "content": prompt}])]})
            if limit is not None and len(out) >= limit:
                break
        return out

    def score(self, item, responses):
        text = response_text(responses[0])
        letter, method = extract_choice(text, item["meta"]["n_options"])
        return {"score": 1.0 if letter == item["gold"] else 0.0, "pred": letter,
                "extract": method, "output": text}
