"""Item generation of dq-eval: deterministic from the seed, answers right, length controlled;
task files read with clear errors."""
import json
import os
import re
import tempfile
import unittest
from collections import Counter

import _path  # noqa: F401
from dq_eval import EvalError
from dq_eval.tasks import Options, fingerprint, resolve


def prompt_of(item):
    body = item["requests"][0]["body"]
    return body["messages"][-1]["content"] if "messages" in body else body["prompt"]


class Determinism(unittest.TestCase):
    def test_same_seed_same_items_other_seed_other_items(self):
        for task in resolve(["builtin"]):
            a = task.items(Options(seed=7), 5)
            b = task.items(Options(seed=7), 5)
            c = task.items(Options(seed=8), 5)
            self.assertEqual([fingerprint(x) for x in a], [fingerprint(x) for x in b], task.name)
            self.assertNotEqual([fingerprint(x) for x in a], [fingerprint(x) for x in c],
                                task.name)
            self.assertEqual(len({x["id"] for x in a}), 5, task.name)

    def test_limit_is_a_prefix(self):
        for task in resolve(["arith", "ruler-niah"]):
            a = task.items(Options(), 3)
            b = task.items(Options(), 6)
            self.assertEqual([fingerprint(x) for x in a], [fingerprint(x) for x in b[:3]])

    def test_requests_are_greedy_and_seeded(self):
        item = resolve(["arith"])[0].items(Options(seed=3, model="m"), 1)[0]
        body = item["requests"][0]["body"]
        self.assertEqual(body["temperature"], 0)
        self.assertEqual(body["seed"], 3)
        self.assertEqual(body["model"], "m")
        self.assertEqual(item["requests"][0]["path"], "/v1/chat/completions")
        item = resolve(["arith"])[0].items(Options(api="completions"), 1)[0]
        self.assertEqual(item["requests"][0]["path"], "/v1/completions")
        self.assertIn("Question:", item["requests"][0]["body"]["prompt"])


class Arithmetic(unittest.TestCase):
    def test_answers_are_non_negative_integers_and_numbers_appear(self):
        for name in ("arith", "arith-1step", "units"):
            for it in resolve([name])[0].items(Options(), 200):
                self.assertEqual(it["gold"], int(it["gold"]))
                self.assertGreaterEqual(it["gold"], 0, it["question"])
                self.assertTrue(re.search(r"\d", it["question"]))

    def test_some_templates_by_hand(self):
        items = resolve(["arith"])[0].items(Options(seed=11), 200)
        for it in items:
            q, g = it["question"], it["gold"]
            n = [int(x) for x in re.findall(r"\d+", q)]
            kind = it["meta"]["template"]
            if kind == "train":
                self.assertEqual(g, n[0] * n[1] + n[2] * n[3])
            elif kind == "trays-sell":
                self.assertEqual(g, n[0] * n[1] - n[2])
            elif kind == "rows":
                self.assertEqual(g, (n[0] + n[2]) * n[1])


class Ruler(unittest.TestCase):
    def test_niah_needles_present_and_answers_right(self):
        items = resolve(["ruler-niah"])[0].items(Options(length=2048), 8)
        variants = [it["meta"]["variant"] for it in items]
        self.assertEqual(variants[:4], ["single", "multikey", "multivalue", "multiquery"])
        for it in items:
            p = prompt_of(it)
            for v in it["gold"]:
                self.assertIn(f"is: {v}.", p)
            want = {"single": 1, "multikey": 1, "multivalue": 4, "multiquery": 4}
            self.assertEqual(len(it["gold"]), want[it["meta"]["variant"]])
            self.assertEqual(len(re.findall(r"special magic numbers for \S+ is:", p)),
                             {"single": 1, "multikey": 4, "multivalue": 4,
                              "multiquery": 4}[it["meta"]["variant"]])

    def test_length_scales_with_the_target(self):
        task = resolve(["ruler-niah-single"])[0]
        for length in (1024, 4096, 16384):
            words = len(prompt_of(task.items(Options(length=length), 1)[0]).split())
            self.assertAlmostEqual(words * 1.3 / length, 1.0, delta=0.1, msg=str(length))

    def test_variable_tracking_chain(self):
        for it in resolve(["ruler-vt"])[0].items(Options(), 5):
            p = prompt_of(it)
            names, value = it["gold"], it["meta"]["value"]
            self.assertIn(f"VAR {names[0]} = {value}.", p)
            for a, b in zip(names, names[1:]):
                self.assertIn(f"VAR {b} = VAR {a}.", p)
            # The chain is in order in the text.
            pos = [p.index(f"VAR {n} =") for n in names]
            self.assertEqual(pos, sorted(pos))

    def test_common_words_are_the_most_common(self):
        for length in (1024, 8192):
            it = resolve(["ruler-cwe"])[0].items(Options(length=length), 1)[0]
            words = re.findall(r"^\d+\. (\S+)$", prompt_of(it), flags=re.M)
            counts = Counter(words)
            top = {w for w, _ in counts.most_common(10)}
            self.assertEqual(top, set(it["gold"]))
            self.assertGreater(min(counts[w] for w in it["gold"]),
                               max(c for w, c in counts.items() if w not in it["gold"]))

    def test_frequent_words_top3(self):
        for it in resolve(["ruler-fwe"])[0].items(Options(length=2048), 3):
            text = prompt_of(it).split("coded words. ", 1)[1].split("\nQuestion")[0]
            counts = Counter(w for w in text.split() if w != "....")
            self.assertEqual([w for w, _ in counts.most_common(3)], it["gold"])


class TaskFiles(unittest.TestCase):
    def write(self, lines):
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        f.write("\n".join(lines) + "\n")
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_gsm8k_format(self):
        path = self.write([json.dumps({"question": "2+3?", "answer": "2+3=5\n#### 5"}),
                           "", json.dumps({"question": "big?", "answer": "#### 1,200"})])
        items = resolve(["gsm8k"])[0].items(Options(data={"gsm8k": path}), None)
        self.assertEqual([it["gold"] for it in items], [5.0, 1200.0])

    def test_malformed_line_names_file_and_line(self):
        path = self.write([json.dumps({"question": "q", "answer": "#### 1"}), "{not json"])
        with self.assertRaisesRegex(EvalError, r":2: malformed JSON line"):
            resolve(["gsm8k"])[0].items(Options(data={"gsm8k": path}), None)
        path = self.write([json.dumps({"question": "q"})])
        with self.assertRaisesRegex(EvalError, r':1: missing field "answer"'):
            resolve(["gsm8k"])[0].items(Options(data={"gsm8k": path}), None)
        with self.assertRaisesRegex(EvalError, "cannot read"):
            resolve(["gsm8k"])[0].items(Options(data={"gsm8k": "/nonexistent.jsonl"}), None)

    def test_mmlu_pro_format(self):
        row = {"question_id": 7, "question": "Which?", "options": ["a", "b", "c"],
               "answer": "B", "answer_index": 1, "category": "math"}
        path = self.write([json.dumps(row)])
        it = resolve(["mmlu-pro"])[0].items(Options(data={"mmlu-pro": path}), None)[0]
        self.assertEqual((it["id"], it["gold"]), ("mmlu-pro-7", "B"))
        self.assertIn("B. b", prompt_of(it))

    def test_mc_shapes(self):
        path = self.write([
            json.dumps({"question": "2+2?", "choices": ["3", "4"], "answer": 1}),
            json.dumps({"question": {"stem": "Sky?", "choices": [{"label": "A", "text": "blue"},
                                                                 {"label": "B", "text": "red"}]},
                        "answerKey": "A"}),
            json.dumps({"ctx": "He sat", "endings": ["down.", "up."], "label": "0"})])
        items = resolve(["mc"])[0].items(Options(data={"mc": path}), None)
        self.assertEqual([it["gold"] for it in items], [1, 0, 0])
        self.assertEqual(len(items[0]["requests"]), 2)
        self.assertTrue(items[0]["requests"][0]["body"]["echo"])
        bad = self.write([json.dumps({"question": "x", "choices": ["a"], "answer": 3})])
        with self.assertRaisesRegex(EvalError, ":1: not a multiple-choice item"):
            resolve(["mc"])[0].items(Options(data={"mc": bad}), None)

    def test_unknown_task(self):
        with self.assertRaisesRegex(EvalError, 'unknown task "nope"'):
            resolve(["arith", "nope"])


if __name__ == "__main__":
    unittest.main()
