"""Unit tests of dq-bench serve's pure parts (distributions, prompts, percentiles, summary, SSE
parser, report) and of its client and command line against a mock streaming server."""
import contextlib
import io
import json
import os
import random
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))
sys.path.insert(0, HERE)

from dq_bench import BenchError, cli, report, stats  # noqa: E402
from dq_bench.endpoint import Endpoint, parse_prometheus  # noqa: E402
from dq_bench.runner import arrival_times  # noqa: E402
from dq_bench.sse import SseParser  # noqa: E402
from dq_bench.workload import (LengthDist, PromptSizer, SyntheticWorkload, fit_sizer,  # noqa: E402
                               load_dataset)
from mock_server import MockServer  # noqa: E402


def read_json(path):
    with open(path) as f:
        return json.load(f)


class LengthDistTest(unittest.TestCase):
    def test_fixed(self):
        d = LengthDist("fixed", 512)
        self.assertEqual({d.sample(random.Random(i)) for i in range(20)}, {512})
        self.assertEqual(d.spec_str(), "fixed:512")

    def test_uniform_bounds_inclusive(self):
        d = LengthDist("uniform:3,6", 512)
        rng = random.Random(1)
        seen = {d.sample(rng) for _ in range(400)}
        self.assertEqual(seen, {3, 4, 5, 6})
        self.assertEqual(d.mean(), 4.5)
        self.assertEqual(d.max(), 6)

    def test_normal_mean_and_floor(self):
        rng = random.Random(2)
        xs = [LengthDist("normal:100,10", 1).sample(rng) for _ in range(4000)]
        self.assertAlmostEqual(sum(xs) / len(xs), 100, delta=1.0)
        self.assertTrue(all(isinstance(x, int) for x in xs))
        self.assertGreaterEqual(min(LengthDist("normal:2,50", 1).sample(rng)
                                    for _ in range(500)), 1)

    def test_bad_specs(self):
        for spec in ("uniform:5", "uniform:6,3", "uniform:0,3", "uniform:1.5,3", "normal:0,1",
                     "normal:5,-1", "normal:a,b", "zipf:1", "fixed:3", ""):
            with self.subTest(spec=spec), self.assertRaises(BenchError):
                LengthDist(spec, 10, "--input-len")
        with self.assertRaisesRegex(BenchError, "--output-len distribution \"uniform:5\""):
            LengthDist("uniform:5", 10, "--output-len")


class WorkloadTest(unittest.TestCase):
    def make(self, seed=0, dist="uniform:10,50"):
        return SyntheticWorkload(seed, LengthDist(dist, 1), LengthDist("uniform:1,9", 1),
                                 PromptSizer(1.0))

    def test_reproducible_per_index(self):
        a, b = self.make(), self.make()
        for i in (0, 5, 77):
            ra, rb = a.request(i), b.request(i)
            self.assertEqual((ra.prompt, ra.max_tokens, ra.input_len_target),
                             (rb.prompt, rb.max_tokens, rb.input_len_target))
        self.assertNotEqual(a.request(0).prompt, a.request(1).prompt)
        self.assertNotEqual(self.make(seed=1).request(0).prompt, a.request(0).prompt)

    def test_sized_in_words(self):
        w = SyntheticWorkload(3, LengthDist("fixed", 64), LengthDist("fixed", 8),
                              PromptSizer(2.0, overhead=10))
        r = w.request(0)
        self.assertEqual(len(r.prompt.split()), 27)  # (64 - 10) / 2
        self.assertEqual((r.input_len_target, r.max_tokens), (64, 8))
        self.assertEqual(PromptSizer(1.0, overhead=100).words_for(5), 1)

    def test_fit_sizer(self):
        s = fit_sizer([(24, 24 * 1.25 + 31), (120, 120 * 1.25 + 31)])
        self.assertAlmostEqual(s.tokens_per_word, 1.25)
        self.assertAlmostEqual(s.overhead, 31)
        self.assertEqual(s.words_for(31 + 125), 100)
        self.assertAlmostEqual(fit_sizer([(10, 13)]).tokens_per_word, 1.3)
        with self.assertRaises(BenchError):
            fit_sizer([(24, 50), (120, 40)])

    def test_dataset(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "ds.jsonl")
            with open(p, "w") as f:
                f.write('{"prompt": "a b", "max_tokens": 3}\n\n{"prompt": "c"}\n'
                        '{"prompt": [5, 0, 17], "max_tokens": 2}\n')
            self.assertEqual(load_dataset(p), [("a b", 3), ("c", None), ([5, 0, 17], 2)])
            for text, msg in (('{"prompt": "a"}\n{"prompt": \n', ":2: malformed JSON"),
                              ('{"text": "a"}\n', ":1: want an object"),
                              ('{"prompt": []}\n', ":1: want an object"),
                              ('{"prompt": [1, "x"]}\n', ":1: want an object"),
                              ('{"prompt": [1, -2]}\n', ":1: want an object"),
                              ('{"prompt": "a", "max_tokens": 0}\n', ":1: \"max_tokens\""),
                              ("\n", "no prompts")):
                with open(p, "w") as f:
                    f.write(text)
                with self.subTest(text=text), self.assertRaisesRegex(BenchError, msg):
                    load_dataset(p)
        with self.assertRaisesRegex(BenchError, "No such file"):
            load_dataset("/nonexistent/x.jsonl")


class StatsTest(unittest.TestCase):
    def test_percentile_matches_numpy_linear(self):
        xs = [4.0, 1.0, 3.0, 2.0]
        self.assertEqual(stats.percentile(xs, 50), 2.5)
        self.assertAlmostEqual(stats.percentile(xs, 90), 3.7)
        self.assertAlmostEqual(stats.percentile(xs, 99), 3.97)
        self.assertEqual(stats.percentile(xs, 0), 1.0)
        self.assertEqual(stats.percentile(xs, 100), 4.0)
        self.assertEqual(stats.percentile([7.0], 99), 7.0)
        self.assertNotEqual(stats.percentile([], 50), stats.percentile([], 50))  # NaN
        with self.assertRaises(ValueError):
            stats.percentile(xs, 101)

    def test_describe_monotone(self):
        rng = random.Random(5)
        d = stats.describe([rng.expovariate(1.0) for _ in range(1000)], 1e3)
        self.assertEqual(d["n"], 1000)
        self.assertLessEqual(d["min"], d["p50"])
        self.assertLessEqual(d["p50"], d["p90"])
        self.assertLessEqual(d["p90"], d["p99"])
        self.assertLessEqual(d["p99"], d["max"])
        self.assertIsNone(stats.describe([])["p99"])

    @staticmethod
    def rec(ok=True, kind=None, start=0.0, ttft=0.1, e2e=1.0, n=10, prompt=20):
        r = {"ok": ok, "kind": kind, "start_s": start, "ttft_s": ttft if ok else None,
             "e2e_s": e2e, "output_tokens": n if ok else None,
             "prompt_tokens": prompt if ok else None, "itl_s": [0.1] * (n - 1) if ok else []}
        r["tpot_s"] = stats.tpot(r) if ok else None
        return r

    def test_summarize(self):
        recs = [self.rec(start=0.0, ttft=0.1, e2e=1.0), self.rec(start=0.5, ttft=0.3, e2e=1.5),
                self.rec(ok=False, kind="rejected", start=0.6, e2e=0.01),
                self.rec(ok=False, kind="http_500", start=0.7, e2e=0.02),
                self.rec(ok=False, kind="cancelled", start=1.0, e2e=5.0)]
        s = stats.summarize(recs, slo_ttft_ms=200)
        self.assertEqual((s["completed"], s["failed"], s["rejected"], s["cancelled"]),
                         (2, 1, 1, 1))
        self.assertEqual(s["errors"], {"http_500": 1, "rejected": 1})
        self.assertAlmostEqual(s["duration_s"], 2.0)  # 0.0 .. 0.5 + 1.5; cancelled left out
        self.assertAlmostEqual(s["request_throughput"], 1.0)
        self.assertAlmostEqual(s["output_throughput"], 10.0)
        self.assertAlmostEqual(s["total_token_throughput"], 30.0)
        self.assertAlmostEqual(s["tpot_ms"]["mean"], 1e3 * ((0.9 / 9) + (1.2 / 9)) / 2)
        self.assertEqual(s["itl_ms"]["n"], 18)
        self.assertAlmostEqual(s["ttft_ms"]["p50"], 200.0)
        self.assertEqual(s["goodput"]["requests"], 1)
        self.assertAlmostEqual(s["goodput"]["requests_per_s"], 0.5)
        self.assertIsNone(stats.summarize(recs)["goodput"])

    def test_tpot(self):
        self.assertAlmostEqual(stats.tpot({"output_tokens": 5, "ttft_s": 1.0, "e2e_s": 3.0}),
                               0.5)
        self.assertIsNone(stats.tpot({"output_tokens": 1, "ttft_s": 1.0, "e2e_s": 3.0}))
        self.assertTrue(stats.meets_slo({"ok": True, "ttft_s": 0.1, "tpot_s": None}, 200, 10))
        self.assertFalse(stats.meets_slo({"ok": True, "ttft_s": 0.1, "tpot_s": 0.02}, 200, 10))

    def test_empty_summary(self):
        s = stats.summarize([])
        self.assertEqual((s["completed"], s["duration_s"], s["request_throughput"]), (0, 0, 0))

    def test_arrivals(self):
        fixed = arrival_times(4.0, "fixed", 0)
        self.assertEqual([next(fixed) for _ in range(3)], [0.0, 0.25, 0.5])
        pois = arrival_times(10.0, "poisson", 1)
        ts = [next(pois) for _ in range(5001)]
        self.assertAlmostEqual(ts[-1] / 5000, 0.1, delta=0.005)
        again = arrival_times(10.0, "poisson", 1)
        self.assertEqual([next(again) for _ in range(5)], ts[:5])


class SseTest(unittest.TestCase):
    STREAM = (b": comment\r\ndata: {\"a\": 1}\r\n\r\nevent: ping\ndata: x\ndata: y\n\n"
              b"data:nospace\r\rdata: [DONE]\n\n")
    WANT = [("message", '{"a": 1}'), ("ping", "x\ny"), ("message", "nospace"),
            ("message", "[DONE]")]

    def test_whole(self):
        p = SseParser()
        self.assertEqual(p.feed(self.STREAM), self.WANT)
        self.assertFalse(p.close())

    def test_every_split(self):
        for cut in range(1, len(self.STREAM)):
            p = SseParser()
            got = p.feed(self.STREAM[:cut]) + p.feed(self.STREAM[cut:])
            self.assertEqual(got, self.WANT, f"cut at {cut}")

    def test_byte_at_a_time(self):
        p = SseParser()
        got = []
        for i in range(len(self.STREAM)):
            got += p.feed(self.STREAM[i:i + 1])
        self.assertEqual(got, self.WANT)

    def test_cut_short(self):
        p = SseParser()
        self.assertEqual(p.feed(b"data: {\"a\""), [])
        self.assertTrue(p.close())

    def test_utf8_split(self):
        raw = "data: caf\u00e9 \u4e16\n\n".encode()
        p = SseParser()
        got = p.feed(raw[:9]) + p.feed(raw[9:])
        self.assertEqual(got, [("message", "caf\u00e9 \u4e16")])


class EndpointTest(unittest.TestCase):
    def body(self, prompt, n=5):
        return {"model": "mock-model", "prompt": prompt, "max_tokens": n, "stream": True,
                "stream_options": {"include_usage": True}}

    def test_streams_and_times(self):
        with MockServer(ttft=0.05, itl=0.01) as srv:
            ep = Endpoint(srv.url + "/v1")
            t0 = time.perf_counter()
            r = ep.stream(3, "/v1/completions", self.body("a b c", 6), t0, chat=False)
        self.assertTrue(r["ok"], r)
        self.assertEqual((r["index"], r["output_tokens"], r["prompt_tokens"], r["chunks"]),
                         (3, 6, 3, 6))
        self.assertTrue(r["usage"])
        self.assertEqual(r["finish_reason"], "length")
        self.assertGreaterEqual(r["ttft_s"], 0.05)
        self.assertEqual(len(r["itl_s"]), 5)
        self.assertTrue(all(x >= 0 for x in r["itl_s"]))
        self.assertGreater(sum(r["itl_s"]), 0.02)  # 5 gaps of 10 ms, less scheduling jitter
        self.assertAlmostEqual(r["tpot_s"], (r["e2e_s"] - r["ttft_s"]) / 5)
        self.assertGreater(r["e2e_s"], r["ttft_s"])

    def test_chat_skips_the_empty_role_chunk(self):
        with MockServer(ttft=0.05) as srv:
            body = self.body("x", 3)
            del body["prompt"]
            body["messages"] = [{"role": "user", "content": "hi there"}]
            r = Endpoint(srv.url).stream(0, "/v1/chat/completions", body, time.perf_counter(),
                                         chat=True)
        self.assertTrue(r["ok"], r)
        self.assertGreaterEqual(r["ttft_s"], 0.05)  # not the role chunk sent at once
        self.assertEqual((r["chunks"], r["prompt_tokens"]), (3, 2 + 7))

    def test_failures(self):
        cases = {"mode:429": "rejected", "mode:500": "http_500",
                 "mode:error_event": "stream_error", "mode:cut": "incomplete",
                 "mode:garbage": "malformed"}
        with MockServer() as srv:
            ep = Endpoint(srv.url)
            for prompt, kind in cases.items():
                r = ep.stream(0, "/v1/completions", self.body(prompt), time.perf_counter(), False)
                with self.subTest(prompt=prompt):
                    self.assertFalse(r["ok"])
                    self.assertEqual(r["kind"], kind, r)
                    self.assertTrue(r["error"])
            r = ep.stream(0, "/v1/completions", self.body("mode:429"), time.perf_counter(), False)
            self.assertEqual((r["http_status"], r["retry_after"]), (429, "0"))
            self.assertIn("queue full", r["error"])
            r = ep.stream(0, "/v1/completions", self.body("mode:error_event"),
                          time.perf_counter(), False)
            self.assertIn("decode worker died", r["error"])
            r = ep.stream(0, "/v1/completions", self.body("mode:no_usage", 4),
                          time.perf_counter(), False)
            self.assertTrue(r["ok"])
            self.assertEqual((r["usage"], r["output_tokens"]), (False, 4))  # counted chunks
        r = Endpoint(srv.url).stream(0, "/v1/completions", self.body("x"), time.perf_counter(),
                                     False)
        self.assertEqual(r["kind"], "connection")

    def test_url_forms(self):
        self.assertEqual(Endpoint("127.0.0.1:8000").base, "http://127.0.0.1:8000")
        self.assertEqual(Endpoint("http://h:1/v1/").base, "http://h:1")
        for bad in ("ftp://h", "http://", "http://h:notaport"):
            with self.subTest(bad=bad), self.assertRaises(BenchError):
                Endpoint(bad)

    def test_prometheus(self):
        m = parse_prometheus('# HELP x\nfoo_total{a="b"} 3\nbar 2.5\n\nbad line x\n')
        self.assertEqual(m, {'foo_total{a="b"}': 3.0, "bar": 2.5})


class ReportTest(unittest.TestCase):
    def test_dumps_roundtrip_and_one_line_records(self):
        doc = {"a": [1, 2], "runs": [{"requests": [{"x": 1, "itl_s": [0.1, 0.2]}, {"x": 2}],
                                      "summary": {"p": None}}], "e": {}, "l": []}
        text = report.dumps(doc)
        self.assertEqual(json.loads(text), doc)
        self.assertIn('\n    {"x":1,"itl_s":[0.1,0.2]},\n', text)

    def test_metrics_delta(self):
        before = {"dq_generation_tokens_total": 10, 'dq_requests_total{outcome="length"}': 1,
                  "dq_time_to_first_token_seconds_sum": 1.0,
                  "dq_time_to_first_token_seconds_count": 2,
                  'dq_time_to_first_token_seconds_bucket{le="0.1"}': 1,
                  "dq_requests_running": 4, "other_total": 1}
        after = {"dq_generation_tokens_total": 42, 'dq_requests_total{outcome="length"}': 3,
                 "dq_time_to_first_token_seconds_sum": 2.0,
                 "dq_time_to_first_token_seconds_count": 6,
                 'dq_time_to_first_token_seconds_bucket{le="0.1"}': 3,
                 "dq_requests_running": 0, "other_total": 5}
        d = report.metrics_delta(before, after)
        self.assertEqual(d["counters"], {"dq_generation_tokens_total": 32,
                                         'dq_requests_total{outcome="length"}': 2,
                                         "dq_time_to_first_token_seconds_sum": 1.0,
                                         "dq_time_to_first_token_seconds_count": 4})
        self.assertAlmostEqual(d["server"]["ttft_ms_mean"], 250.0)
        self.assertEqual(d["server"]["requests_by_outcome"], {"length": 2})
        self.assertIsNone(report.metrics_delta(None, after))


class CliTest(unittest.TestCase):
    def run_cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cli.main(["serve", *argv])
            except SystemExit as e:  # argparse
                rc = e.code
        return rc, out.getvalue(), err.getvalue()

    def test_run_writes_json_and_markdown(self):
        with MockServer(ttft=0.01, itl=0.002) as srv, tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            rc, out, err = self.run_cli("--endpoint", srv.url, "--concurrency", "3",
                                        "--num-requests", "7", "--input-len", "40",
                                        "--output-len", "5", "--out", path, "--slo-ttft-ms",
                                        "1000", "--seed", "9")
            self.assertEqual(rc, 0, err)
            doc = read_json(path)
            self.assertTrue(os.path.exists(os.path.join(d, "r.md")))
            # Calibration: the mock counts one token per word, no overhead for completions.
            self.assertEqual(doc["workload"]["sizer"]["tokens_per_word"], 1.0)
            bodies = srv.bodies
        self.assertIn("TTFT", out)
        self.assertIn("7 / 0 / 0", out)
        run = doc["runs"][0]
        self.assertEqual(run["mode"], {"concurrency": 3})
        s = run["summary"]
        self.assertEqual((s["completed"], s["output_tokens"]), (7, 35))
        self.assertEqual(s["goodput"]["requests"], 7)
        self.assertEqual([r["index"] for r in run["requests"]], list(range(7)))
        self.assertTrue(all(r["prompt_tokens"] == 40 for r in run["requests"]))
        self.assertEqual(run["metrics"]["counters"]["dq_generation_tokens_total"], 35)
        self.assertEqual(doc["meta"]["decode_scheme"], "int2:weight_only")
        self.assertEqual(doc["models"]["data"][0]["id"], "mock-model")
        self.assertEqual(doc["machine"]["nproc"], os.cpu_count())
        self.assertIn("--concurrency", doc["command"])
        streamed = [b for b in bodies if b.get("stream")]
        self.assertEqual(len(streamed), 7)
        self.assertTrue(all(b["ignore_eos"] and b["stream_options"]["include_usage"] and
                            b["max_tokens"] == 5 for b in streamed))
        self.assertEqual(len({b["prompt"] for b in streamed}), 7)

    def test_same_seed_same_prompts(self):
        prompts = []
        for _ in range(2):
            with MockServer(ttft=0, itl=0) as srv:
                rc, _, err = self.run_cli("--endpoint", srv.url, "--concurrency", "2",
                                          "--num-requests", "4", "--input-len-dist",
                                          "uniform:5,30", "--output-len", "2", "-q")
                self.assertEqual(rc, 0, err)
                prompts.append(sorted(b["prompt"] for b in srv.bodies if b.get("stream")))
        self.assertEqual(prompts[0], prompts[1])

    def test_sweep_chat_dataset(self):
        with MockServer(ttft=0, itl=0) as srv, tempfile.TemporaryDirectory() as d:
            ds = os.path.join(d, "ds.jsonl")
            with open(ds, "w") as f:
                f.write('{"prompt": "one two", "max_tokens": 3}\n{"prompt": "three"}\n')
            path = os.path.join(d, "sweep.json")
            rc, out, err = self.run_cli("--endpoint", srv.url, "--sweep-concurrency", "1,2,4",
                                        "--num-requests", "4", "--chat", "--dataset", ds,
                                        "--output-len", "2", "--out", path, "-q")
            self.assertEqual(rc, 0, err)
            doc = read_json(path)
            with open(os.path.join(d, "sweep.md")) as f:
                md = f.read()
        self.assertEqual([r["mode"]["concurrency"] for r in doc["runs"]], [1, 2, 4])
        for r in doc["runs"]:
            self.assertEqual([q["output_tokens"] for q in r["requests"]], [3, 2, 3, 2])
            self.assertEqual([q["prompt_tokens"] for q in r["requests"]], [9, 8, 9, 8])
        self.assertIn("| concurrency 4 |", md)
        self.assertIn("| concurrency 4 |", out)  # the sweep table is printed too

    def test_rate_fixed(self):
        with MockServer(ttft=0, itl=0) as srv:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "r.json")
                rc, _, err = self.run_cli("--endpoint", srv.url, "--rate", "10", "--arrivals",
                                          "fixed", "--num-requests", "5", "--output-len", "2",
                                          "--input-len", "4", "--out", path, "-q")
                self.assertEqual(rc, 0, err)
                starts = [r["start_s"] for r in read_json(path)["runs"][0]["requests"]]
        for i, s in enumerate(starts):
            self.assertAlmostEqual(s, i * 0.1, delta=0.05)

    def test_all_failed_is_an_error(self):
        with MockServer() as srv, tempfile.TemporaryDirectory() as d:
            ds = os.path.join(d, "ds.jsonl")
            with open(ds, "w") as f:
                f.write('{"prompt": "mode:500"}\n')
            rc, _, err = self.run_cli("--endpoint", srv.url, "--concurrency", "1",
                                      "--num-requests", "2", "--dataset", ds, "-q")
        self.assertEqual(rc, 1)
        self.assertRegex(err, r"error: no request succeeded .*http_500 2.*boom")

    def test_bad_input(self):
        with MockServer() as srv:
            cases = [
                (["--endpoint", srv.url, "--concurrency", "0"], "positive integer"),
                (["--endpoint", srv.url], "one of the arguments"),
                (["--endpoint", srv.url, "--concurrency", "1", "--rate", "2"], "not allowed"),
                (["--endpoint", srv.url, "--concurrency", "1", "--arrivals", "fixed"],
                 "--arrivals goes with --rate"),
                (["--endpoint", srv.url, "--sweep-concurrency", "1,x"], "comma-separated"),
                (["--endpoint", srv.url, "--concurrency", "1", "--model", "nope"],
                 "not served here; served: mock-model"),
                (["--endpoint", srv.url, "--concurrency", "1", "--input-len-dist", "zipf"],
                 "want fixed, uniform"),
                (["--endpoint", srv.url, "--concurrency", "1", "--num-requests", "2",
                  "--duration", "3"], "not allowed"),
                (["--endpoint", srv.url + "/nothing", "--concurrency", "1"], "HTTP 404"),
            ]
            for argv, msg in cases:
                rc, _, err = self.run_cli(*argv)
                with self.subTest(argv=argv):
                    self.assertEqual(rc, 1, err)
                    self.assertEqual(err.count("error:"), 1, err)
                    self.assertIn(msg, err)
        rc, _, err = self.run_cli("--endpoint", srv.url, "--concurrency", "1")
        self.assertEqual(rc, 1)
        self.assertIn("cannot reach the endpoint", err)


if __name__ == "__main__":
    unittest.main()
