"""dq-eval against a mock OpenAI-compatible server: a complete run with its report, resuming,
retries, malformed answers, a dead endpoint, fidelity."""
import contextlib
import io
import json
import os
import shutil
import struct
import tempfile
import unittest
import zlib

import _path  # noqa: F401
from dq_eval.cli import main
from dq_eval.plot import render, write_png
from mock_server import Mock


def run(*argv):
    err = io.StringIO()
    out = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(list(argv))
    return rc, err.getvalue(), out.getvalue()


def load(path):
    with open(path) as f:
        return json.load(f)


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def results(d):
    with open(os.path.join(d, "results.jsonl")) as f:
        return [json.loads(x) for x in f if x.strip()]


def arith_oracle(items):
    """An answer callback that is right for the given arith items."""
    gold = {it["question"]: it["gold"] for it in items}

    def answer(body):
        q = body["messages"][-1]["content"].split("Question: ", 1)[-1]
        return f"Step by step. The answer is {gold[q]}." if q in gold else "No idea."
    return answer


def check_png(tc, path):
    with open(path, "rb") as f:
        data = f.read()
    tc.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
    w, h = struct.unpack(">II", data[16:24])
    tc.assertGreater(w, 100)
    tc.assertGreater(h, 100)
    idat = data.index(b"IDAT")
    n = struct.unpack(">I", data[idat - 4:idat])[0]
    tc.assertEqual(len(zlib.decompress(data[idat + 4:idat + 4 + n])), h * (1 + 3 * w))


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="dq-eval-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.out = os.path.join(self.dir, "run")

    def mock(self, **kw):
        m = Mock(**kw)
        self.addCleanup(m.close)
        return m

    def common(self, m, *extra):
        return ("run", "--endpoint", m.url, "--out", self.out, "-q", "--backoff", "0.01",
                "--retries", "2", *extra)


class RunAndReport(Base):
    def test_complete_run_report_and_resume(self):
        from dq_eval.tasks import Options, resolve
        m = self.mock()
        m.answer = arith_oracle(resolve(["arith"])[0].items(Options(seed=5, model="mock-model"),
                                                            6))
        rc, err, _ = run(*self.common(m, "--tasks", "arith,ruler-niah,mc-arith", "--limit", "6",
                                      "--seed", "5"))
        self.assertEqual(rc, 0, err)
        recs = results(self.out)
        self.assertEqual(len(recs), 18)
        by = {}
        for r in recs:
            by.setdefault(r["task"], []).append(r["score"])
        self.assertEqual(by["arith"], [1.0] * 6)          # the oracle is always right
        self.assertEqual(set(by["ruler-niah"]), {0.0})     # "42" is never a needle
        self.assertEqual(m.posts(), 6 + 6 + 6 * 4)         # mc: one request per choice
        man = load(os.path.join(self.out, "manifest.json"))
        self.assertEqual(man["prefill_format"], "nvfp4:w4a4")
        self.assertEqual(man["decode_format"], "int2-g32:weight_only")
        self.assertEqual(man["model"], "mock-model")
        self.assertEqual(man["bits_per_weight"], {"prefill": 4.5, "decode": 2.75})
        self.assertEqual(man["options"]["seed"], 5)
        self.assertIn("commit", man)
        rep = load(os.path.join(self.out, "report.json"))["deployments"][0]
        self.assertEqual(rep["families"]["decode-heavy"]["n"], 6)
        self.assertEqual(rep["families"]["decode-heavy"]["score"], 1.0)
        self.assertEqual(rep["families"]["prefill-heavy"]["n"], 6)
        self.assertEqual(rep["speed"]["source"], "server /metrics")
        self.assertGreater(rep["speed"]["decode_tok_s"], 0)
        md = read(os.path.join(self.out, "report.md"))
        self.assertIn("| nvfp4 w4a4 | int2-g32 |", md)
        self.assertIn("100.0 [61.0, 100.0] (n=6)", md)
        check_png(self, os.path.join(self.out, "score_vs_bpw.png"))
        # A rerun finds everything done and sends nothing.
        before = m.posts()
        rc, err, _ = run(*self.common(m, "--tasks", "arith,ruler-niah,mc-arith", "--limit", "6",
                                      "--seed", "5"))
        self.assertEqual(rc, 0, err)
        self.assertIn("resuming: 18 of 18", err)
        self.assertEqual(m.posts(), before)
        # A larger limit runs only the new items.
        rc, err, _ = run(*self.common(m, "--tasks", "arith", "--limit", "8", "--seed", "5"))
        self.assertEqual(rc, 0, err)
        self.assertEqual(m.posts(), before + 2)
        # Other settings in the same directory are refused.
        rc, err, _ = run(*self.common(m, "--tasks", "arith", "--limit", "8", "--seed", "6"))
        self.assertEqual(rc, 1)
        self.assertIn("error: ", err)
        self.assertIn("seed 5 -> 6", err)

    def test_multiturn_conversations_carry_the_models_own_answers(self):
        import re as _re

        def answer(body):
            msgs = body["messages"]
            last = msgs[-1]["content"]
            if last.startswith("What is the") and "?" in last:
                # Recall from the first turn only if the whole conversation came along.
                m = _re.search(r"By the way, (.+?) is (\S+?)\. Please", msgs[0]["content"])
                subject = last[len("What is "):last.index("?")]
                ok = m and m.group(1) == subject and len(msgs) >= 5 and \
                    msgs[1] == {"role": "assistant", "content": "OK."}
                return f"It is {m.group(2)}." if ok else "I forgot."
            return "OK." if "Reply with just OK" in last else "Some answer."
        m = self.mock(answer=answer)
        rc, err, _ = run(*self.common(m, "--tasks", "multiturn,multiturn-3", "--limit", "3"))
        self.assertEqual(rc, 0, err)
        recs = results(self.out)
        self.assertEqual(len(recs), 6)
        self.assertEqual([r["score"] for r in recs], [1.0] * 6)
        self.assertEqual(m.posts(), 3 * 3 + 3 * 4)
        # Each later turn repeats the conversation: user, assistant, user, ...
        turns = [len(b["messages"]) for _, b in m.requests if "messages" in b]
        self.assertEqual(sorted(set(turns)), [1, 3, 5, 7])
        rep = load(os.path.join(self.out, "report.json"))["deployments"][0]
        self.assertEqual(rep["families"]["multi-turn"]["n"], 6)
        self.out = os.path.join(self.dir, "completions")
        rc, err, _ = run(*self.common(m, "--tasks", "multiturn", "--limit", "1", "--api",
                                      "completions"))
        self.assertNotEqual(rc, 0)
        self.assertIn("is a chat conversation; run it with --api chat", err)

    def test_retries_on_429_and_malformed_answers_scored_wrong(self):
        m = self.mock()
        m.refuse_next = 2
        m.garbage = {4}
        rc, err, _ = run(*self.common(m, "--tasks", "arith", "--limit", "4",
                                      "--concurrency", "1"))
        self.assertEqual(rc, 0, err)
        recs = results(self.out)
        self.assertEqual(len(recs), 4)
        bad = [r for r in recs if r.get("error")]
        self.assertEqual(len(bad), 1)
        self.assertIn("malformed response", bad[0]["error"])
        self.assertEqual(bad[0]["score"], 0.0)
        self.assertIn("scored wrong: malformed response", err)
        self.assertEqual(m.posts(), 2 + 4)

    def test_aborted_answers_are_retried_not_scored(self):
        m = self.mock()
        m.aborted = {1, 3}
        m.status = {2: 499}
        rc, err, _ = run(*self.common(m, "--tasks", "arith", "--limit", "2",
                                      "--concurrency", "1"))
        self.assertEqual(rc, 0, err)
        recs = results(self.out)
        self.assertEqual([r.get("error") for r in recs], [None, None])
        self.assertEqual([r["output"] for r in recs], ["I think. The answer is 42."] * 2)
        self.assertEqual(m.posts(), 5)
        # An answer that stays aborted is a failure: not saved, the rerun does it.
        m.aborted = set(range(6, 100))
        rc, err, _ = run(*self.common(m, "--tasks", "arith", "--limit", "3", "--max-failures",
                                      "1"))
        self.assertEqual(rc, 1)
        self.assertIn("aborted the request", err)
        self.assertEqual(len(results(self.out)), 2)

    def test_dead_endpoint_mid_run_then_resume(self):
        m = self.mock()
        answer = m.answer
        count = {"n": 0}

        def dying(body):
            count["n"] += 1
            if count["n"] >= 3:
                m.down = True
            return answer(body)
        m.answer = dying
        rc, err, _ = run(*self.common(m, "--tasks", "units", "--limit", "6",
                                      "--concurrency", "1", "--max-failures", "2"))
        self.assertEqual(rc, 1)
        self.assertEqual(err.count("error:"), 1, err)
        self.assertIn("rerun the same command to resume", err)
        self.assertEqual(len(results(self.out)), 3)
        man = load(os.path.join(self.out, "manifest.json"))
        self.assertEqual(man["invocations"][-1]["status"], "aborted")
        # Back up: the rerun does the 3 missing items only.
        m.down = False
        m.answer = answer
        first = m.posts()
        rc, err, _ = run(*self.common(m, "--tasks", "units", "--limit", "6"))
        self.assertEqual(rc, 0, err)
        self.assertIn("resuming: 3 of 6", err)
        self.assertEqual(m.posts() - first, 3)
        keys = [r["key"] for r in results(self.out)]
        self.assertEqual(len(keys), len(set(keys)))
        self.assertEqual(len(keys), 6)

    def test_truncated_last_line_is_dropped(self):
        m = self.mock()
        rc, err, _ = run(*self.common(m, "--tasks", "arith", "--limit", "3"))
        self.assertEqual(rc, 0, err)
        path = os.path.join(self.out, "results.jsonl")
        data = read(path, "rb")
        with open(path, "wb") as f:
            f.write(data[:-20])  # the last record cut short, as by a kill
        rc, err, _ = run(*self.common(m, "--tasks", "arith", "--limit", "3"))
        self.assertEqual(rc, 0, err)
        self.assertIn("dropping an unfinished last line", err)
        self.assertEqual(len(results(self.out)), 3)

    def test_server_without_models_needs_model_flag(self):
        m = self.mock(models=False)
        rc, err, _ = run(*self.common(m, "--tasks", "arith", "--limit", "1"))
        self.assertEqual(rc, 1)
        self.assertIn("give --model", err)
        rc, err, _ = run(*self.common(m, "--tasks", "arith", "--limit", "1", "--model", "x",
                                      "--prefill-format", "bf16", "--decode-format", "bf16"))
        self.assertEqual(rc, 0, err)
        man = load(os.path.join(self.out, "manifest.json"))
        self.assertEqual(man["bits_per_weight"], {"prefill": 16.0, "decode": 16.0})

    def test_bad_inputs(self):
        m = self.mock()
        rc, err, _ = run(*self.common(m, "--tasks", "arith,bogus"))
        self.assertEqual((rc, err.count("error:")), (1, 1))
        self.assertIn('unknown task "bogus"', err)
        rc, err, _ = run(*self.common(m, "--tasks", "gsm8k"))
        self.assertEqual(rc, 1)
        self.assertIn("--data gsm8k=PATH", err)
        bad = os.path.join(self.dir, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"question": "q", "answer": "#### 1"}\n{"question": oops}\n')
        rc, err, _ = run(*self.common(m, "--tasks", "gsm8k", "--data", f"gsm8k={bad}"))
        self.assertEqual(rc, 1)
        self.assertIn("bad.jsonl:2: malformed JSON line", err)
        self.assertEqual(m.posts(), 0)
        rc, err, _ = run("run", "--endpoint", "http://127.0.0.1:9", "--tasks", "arith",
                         "--out", self.out, "-q")
        self.assertEqual((rc, err.count("error:")), (1, 1))
        self.assertIn("cannot reach the endpoint", err)
        rc, err, _ = run(*self.common(m, "--tasks", "ruler-niah", "--length", "16384"))
        self.assertEqual(rc, 1)
        self.assertIn("longer than the model's context", err)


class Fidelity(Base):
    def test_identical_endpoints_agree_and_different_ones_do_not(self):
        a, b = self.mock(), self.mock()
        text = os.path.join(self.dir, "text.txt")
        with open(text, "w") as f:
            f.write(" ".join(f"word{i % 37}" for i in range(600)))
        rc, err, out = run("fidelity", "--endpoint", a.url, "--reference", b.url, "--text", text,
                           "--window-words", "100", "--out", self.out)
        self.assertEqual(rc, 0, err)
        j = load(os.path.join(self.out, "fidelity.json"))["summary"]
        self.assertEqual(j["windows"], 6)
        self.assertAlmostEqual(j["kl"], 0.0, places=9)
        self.assertEqual(j["top1"], 1.0)
        self.assertAlmostEqual(j["ppl"], j["ref_ppl"])
        c = self.mock(logprob=lambda tok, i: -2.0)
        out2 = os.path.join(self.dir, "fid2")
        rc, err, out = run("fidelity", "--endpoint", c.url, "--reference", b.url, "--text", text,
                           "--window-words", "100", "--out", out2)
        self.assertEqual(rc, 0, err)
        j = load(os.path.join(out2, "fidelity.json"))["summary"]
        self.assertGreater(j["kl"], 0.01)
        self.assertAlmostEqual(j["ppl"], 2.718281828 ** 2, places=3)
        self.assertLessEqual(j["kl_ci95"][0], j["kl"])


class Plot(unittest.TestCase):
    def test_builtin_png(self):
        path = tempfile.mktemp(suffix=".png")
        self.addCleanup(lambda: os.path.exists(path) and os.unlink(path))
        write_png(path, *render({"a": [(2.5, 0.3, 0.1, 0.5, "x"), (16, 0.9, 0.8, 1.0, "y")],
                                 "b": [(4.5, 0.6, 0.5, 0.7, "z")]}))
        check_png(self, path)
        write_png(path, *render({"a": [], "b": []}))  # nothing to plot still makes a picture
        check_png(self, path)


if __name__ == "__main__":
    unittest.main()
