"""Scoring, answer extraction and statistics of dq-eval."""
import math
import unittest

import _path  # noqa: F401
from dq_eval import deployment, stats
from dq_eval.client import Malformed
from dq_eval.fidelity import kl_topk
from dq_eval.tasks.decode_tasks import extract_choice, extract_number, normalize_number
from dq_eval.tasks.mc import continuation_logprob
from dq_eval.tasks.ruler import string_match_all


class NumberExtraction(unittest.TestCase):
    def test_answer_is_wins_over_later_numbers(self):
        self.assertEqual(extract_number("3 * 4 = 12. The answer is 12. Check: 5"),
                         (12.0, "answer-is"))

    def test_gsm8k_marker(self):
        self.assertEqual(extract_number("so 1,234 total\n#### 1,234"), (1234.0, "####"))

    def test_last_number_fallback(self):
        self.assertEqual(extract_number("first 3 then 7 apples"), (7.0, "last-number"))

    def test_money_and_trailing_period(self):
        self.assertEqual(extract_number("The answer is $1,050.50."), (1050.5, "answer-is"))
        self.assertEqual(normalize_number("72."), 72.0)

    def test_negative_and_none(self):
        self.assertEqual(extract_number("the answer is -5")[0], -5.0)
        self.assertEqual(extract_number("no digits here"), (None, "none"))
        self.assertEqual(extract_number(""), (None, "none"))


class ChoiceExtraction(unittest.TestCase):
    def test_mmlu_pro_patterns(self):
        self.assertEqual(extract_choice("so the answer is (C).", 4), ("C", "answer-is"))
        self.assertEqual(extract_choice("Answer: B", 4), ("B", "answer:"))
        self.assertEqual(extract_choice("I pick D probably", 4), ("D", "last-letter"))
        self.assertEqual(extract_choice("the answer is (J)", 4)[0], None)  # out of range
        self.assertEqual(extract_choice("nothing", 4), (None, "none"))


class RulerMetric(unittest.TestCase):
    def test_string_match_all(self):
        self.assertEqual(string_match_all("The numbers are 123 and 456", ["123", "456"]), 1.0)
        self.assertEqual(string_match_all("only 123", ["123", "456"]), 0.5)
        self.assertEqual(string_match_all("ABC def", ["abc"]), 1.0)  # case-insensitive
        self.assertEqual(string_match_all("", ["x"]), 0.0)


class Stats(unittest.TestCase):
    def test_wilson_known_values(self):
        lo, hi = stats.wilson(8, 10)
        self.assertAlmostEqual(lo, 0.4902, places=3)
        self.assertAlmostEqual(hi, 0.9433, places=3)
        self.assertEqual(stats.wilson(0, 0), (0.0, 1.0))
        lo, hi = stats.wilson(0, 5)
        self.assertEqual(lo, 0.0)
        self.assertGreater(hi, 0.4)
        lo, hi = stats.wilson(5, 5)
        self.assertEqual(hi, 1.0)

    def test_normal_and_bootstrap(self):
        m, lo, hi = stats.normal_ci([1.0, 2.0, 3.0, 4.0])
        self.assertEqual(m, 2.5)
        self.assertLess(lo, 2.5)
        self.assertGreater(hi, 2.5)
        est, lo, hi = stats.bootstrap_ci([[1.0, 1.0], [2.0], [3.0, 3.0]], seed=1)
        self.assertAlmostEqual(est, 2.0)
        self.assertLessEqual(lo, est)
        self.assertGreaterEqual(hi, est)
        self.assertEqual(stats.bootstrap_ci([[1.0]], seed=1), (1.0, 1.0, 1.0))


class KlTopK(unittest.TestCase):
    def test_identical_is_zero(self):
        d = {"a": math.log(0.5), "b": math.log(0.3), "c": math.log(0.1)}
        self.assertAlmostEqual(kl_topk(d, d), 0.0, places=9)

    def test_matches_exact_when_lists_cover_everything(self):
        p = {"a": 0.7, "b": 0.2, "c": 0.1}
        q = {"a": 0.5, "b": 0.25, "c": 0.25}
        exact = sum(p[t] * math.log(p[t] / q[t]) for t in p)
        got = kl_topk({t: math.log(v) for t, v in p.items()},
                      {t: math.log(v) for t, v in q.items()})
        self.assertAlmostEqual(got, exact, places=9)

    def test_missing_token_bounded_and_positive(self):
        p = {"a": math.log(0.6), "b": math.log(0.3)}
        q = {"c": math.log(0.9), "a": math.log(0.05)}
        kl = kl_topk(p, q)
        self.assertGreater(kl, 1.0)
        self.assertTrue(math.isfinite(kl))


class Continuation(unittest.TestCase):
    def resp(self, toks, lps, prompt_tokens=None):
        offs, pos = [], 0
        for t in toks:
            offs.append(pos)
            pos += len(t)
        r = {"choices": [{"logprobs": {"tokens": toks, "token_logprobs": lps,
                                       "text_offset": offs}}]}
        if prompt_tokens:
            r["usage"] = {"prompt_tokens": prompt_tokens}
        return r

    def test_sums_only_the_continuation(self):
        ctx = "Question: 2+2?\nAnswer:"
        toks = ["Question", ":", " 2", "+", "2", "?\n", "Answer", ":", " 4", " end"]
        lps = [None, -1, -1, -1, -1, -1, -1, -1, -0.25, -9]
        self.assertEqual(continuation_logprob(self.resp(toks, lps, 9), ctx), (-0.25, 1))
        # Without usage, the last entry is taken as the generated token.
        self.assertEqual(continuation_logprob(self.resp(toks, lps), ctx), (-0.25, 1))

    def test_straddling_token_counts_with_the_continuation(self):
        toks = ["ab", "cd", "X"]
        self.assertEqual(continuation_logprob(self.resp(toks, [None, -2, -5], 2), "abc"),
                         (-2.0, 1))

    def test_malformed(self):
        with self.assertRaises(Malformed):
            continuation_logprob({"choices": [{}]}, "x")
        with self.assertRaises(Malformed):
            continuation_logprob({"choices": [{"logprobs": {"text_offset": [0, 1],
                                                             "token_logprobs": [None]}}]}, "x")


class Formats(unittest.TestCase):
    def test_bits_per_weight(self):
        bpw = deployment.bits_per_weight
        self.assertEqual(bpw("bf16:weight_only"), 16.0)
        self.assertEqual(bpw("fp8:w8a8"), 8.0)
        self.assertEqual(bpw("nvfp4:w4a4"), 4.5)
        self.assertEqual(bpw("int4-g64:weight_only"), 4.375)
        self.assertEqual(bpw("int2-g32:weight_only"), 2.75)
        self.assertEqual(bpw("lut2:weight_only"), 2.5)
        self.assertEqual(bpw("q4_1:weight_only"), 5.0)
        self.assertEqual(bpw("gguf:IQ2_XXS"), 2.0625)
        self.assertIsNone(bpw(""))
        self.assertIsNone(bpw("mystery"))

    def test_pretty(self):
        self.assertEqual(deployment.pretty_scheme("nvfp4:w4a4"), "nvfp4 w4a4")
        self.assertEqual(deployment.pretty_scheme("nvfp4:weight_only"), "nvfp4 a16")
        self.assertEqual(deployment.pretty_scheme("bf16:weight_only"), "bf16")
        self.assertEqual(deployment.pretty_scheme(""), "unknown")


if __name__ == "__main__":
    unittest.main()
