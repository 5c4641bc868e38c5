"""Tests of ragtail_nb, the notebooks' helpers: python3 -m unittest discover -s notebooks

The statistics are checked against distributions with known quantiles (fixed seeds; every
tolerance is derived from the estimator's standard error in a comment) and against golden
values computed by ragtail's Go code (loadgen/stats), so that the notebooks and `ragtail bench`
report the same numbers. make e2e runs this file (cmd/ragtail/notebooks_e2e_test.go).
"""

import json
import math
import struct
import tempfile
import unittest
import zlib
import base64
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sstats

import ragtail_nb as nb

# A histogram written by loadgen/stats (Histogram.MarshalJSON) after recording 0 once, 1 µs
# twice, 999 µs 3 times, 1 ms 4 times, 2.047 ms 5 times, 12.345 ms 6 times, 1 s 7 times and
# 100 s 8 times, with its buckets (From, To in ns, Count), quantiles and mean as Go printed them.
GO_HISTOGRAM = "HISTFAAAADp42pJpmSzMwMAAwiDADKVeMDAwuxnsWMBg/wEiwsSyU46NgeOmANdiDZ75aXy7MwUAAQAA///vfApE"
GO_BUCKETS = [
    (0, 511, 1), (512, 1023, 2), (998912, 999423, 3), (999936, 1000447, 4), (2046976, 2047999, 5),
    (12337152, 12345343, 6), (999817216, 1000341503, 7), (99992207360, 100059316223, 8),
]
GO_QUANTILES_NS = {0.01: 511, 0.5: 12345343, 0.9: 100059316223, 0.99: 100059316223, 1.0: 100059316223}
GO_MEAN_NS = 22424942634  # time.Duration, truncated

# loadgen/stats.QuantileRanks(n, q, 0.95): (n, q) -> (l, u), None where ok is false.
GO_RANKS = {
    (10, 0.5): (2, 9), (100, 0.5): (40, 61), (100, 0.9): (84, 96), (1000, 0.99): (983, 997),
    (366, 0.99): None, (367, 0.99): None, (368, 0.99): (360, 368), (5, 0.5): None, (6, 0.5): (1, 6),
    (20000, 0.999): (19971, 19989),
}


def encode_hdr(values_ns, lowest=1000, highest=3_600_000_000_000, digits=3) -> str:
    """HdrHistogram's V2 compressed encoding of values, written from the forward index
    formulas (value -> counts index: getBucketIndex, getSubBucketIdx, countsIndex), so that
    decoding it exercises the inverse (index -> value) independently."""
    half_mag = max(math.ceil(math.log2(2 * 10 ** digits)), 1) - 1
    unit = max(math.floor(math.log2(lowest)), 0)
    sub_count = 1 << (half_mag + 1)
    half = sub_count // 2
    mask = (sub_count - 1) << unit
    counts = {}
    for v in map(int, values_ns):
        bucket = (v | mask).bit_length() - unit - (half_mag + 1)
        sub = v >> (bucket + unit)
        idx = ((bucket + 1) << half_mag) + sub - half
        counts[idx] = counts.get(idx, 0) + 1
    payload = bytearray()

    def varint(x):
        z = (x << 1) ^ (x >> 63)
        for i in range(9):
            if i == 8:
                payload.append(z & 0xFF)
                return
            b = z & 0x7F
            z >>= 7
            if z:
                payload.append(b | 0x80)
            else:
                payload.append(b)
                return

    i, top = 0, max(counts)
    while i <= top:
        if counts.get(i, 0):
            varint(counts[i])
            i += 1
        else:
            j = i
            while j <= top and not counts.get(j, 0):
                j += 1
            varint(-(j - i)) if j - i > 1 else varint(0)
            i = j
    body = struct.pack(">iiiiqqd", 0x1C849303 | 0x10, len(payload), 0, digits, lowest, highest, 1.0) + bytes(payload)
    comp = zlib.compress(body)
    return base64.b64encode(struct.pack(">ii", 0x1C849304 | 0x10, len(comp)) + comp).decode()


class HDRTest(unittest.TestCase):
    def test_go_golden(self):
        h = nb.decode_hdr(GO_HISTOGRAM)
        got = list(zip(h.lo.astype(int), h.hi.astype(int), h.counts))
        self.assertEqual(got, GO_BUCKETS)
        for q, ns in GO_QUANTILES_NS.items():
            self.assertEqual(h.quantile_ms(q), ns / 1e6, f"q={q}")
        # Go truncates the float mean to whole nanoseconds.
        self.assertEqual(int(h.mean_ms() * 1e6), GO_MEAN_NS)

    def test_every_value_in_its_bucket(self):
        # Values over ragtail's whole range (1 µs .. 1 h), log-uniform; HDR at 3 digits keeps
        # every value within a bucket no wider than value / 1000 (2^-10 relative, < 10^-3).
        rng = np.random.default_rng(7)
        values = np.unique((10 ** rng.uniform(3, 12.5, 2000)).astype(np.int64))
        h = nb.decode_hdr(encode_hdr(values))
        self.assertEqual(h.total, len(values))
        for v in values:
            i = int(np.searchsorted(h.hi, v))
            self.assertTrue(h.lo[i] <= v <= h.hi[i], f"{v} not in [{h.lo[i]}, {h.hi[i]}]")
            self.assertLessEqual(h.hi[i] - h.lo[i] + 1, max(v / 1000, 1000), f"bucket of {v} too wide")

    def test_rejects_garbage(self):
        for bad in ("", "not base64!", base64.b64encode(b"\x00" * 12).decode()):
            with self.assertRaises(nb.ResultsError):
                nb.decode_hdr(bad)


class PercentileTest(unittest.TestCase):
    def test_ranks_match_go(self):
        for (n, q), want in GO_RANKS.items():
            self.assertEqual(nb.quantile_ranks(n, q), want, f"n={n} q={q}")

    def test_ranks_are_the_tightest_equal_tailed_interval(self):
        # F = Binomial(n, q) CDF. l is the largest rank with F(l-1) <= 2.5% and u the smallest
        # with F(u-1) >= 97.5%, so the coverage F(u-1) - F(l-1) is at least 95%.
        for n, q in [(50, 0.5), (400, 0.9), (2000, 0.99), (30000, 0.999)]:
            l, u = nb.quantile_ranks(n, q)
            F = lambda k: sstats.binom.cdf(k, n, q)
            self.assertGreaterEqual(F(u - 1) - F(l - 1), 0.95)
            self.assertLessEqual(F(l - 1), 0.025)
            self.assertGreater(F(l), 0.025)
            self.assertGreaterEqual(F(u - 1), 0.975)
            self.assertLess(F(u - 2), 0.975)

    def test_spectrum_of_uniform(self):
        # Uniform(0, 1000): the q-quantile is 1000 q. Each point's interval covers it with 95%;
        # neighbouring points share order statistics, so ask that 80% of them do (expected 95%).
        rng = np.random.default_rng(3)
        x = rng.uniform(0, 1000, 10000)
        sp = nb.spectrum(x)
        self.assertTrue((np.diff(sp["value"]) >= 0).all())
        self.assertAlmostEqual(sp["nines"].max(), 4.0)
        with_ci = sp.dropna()
        self.assertTrue(((with_ci["lo"] <= with_ci["value"]) & (with_ci["value"] <= with_ci["hi"])).all())
        covered = ((with_ci["lo"] <= 1000 * with_ci["q"]) & (1000 * with_ci["q"] <= with_ci["hi"])).mean()
        self.assertGreaterEqual(covered, 0.8)

    def test_nearest_rank(self):
        self.assertEqual([nb.nearest_rank(10, q) for q in (0, 0.1, 0.11, 0.5, 0.99, 1)], [1, 1, 2, 5, 10, 10])


class TailTest(unittest.TestCase):
    def test_pareto_of_the_article(self):
        # PITFALLS.md §2: (numpy Pareto a=1.5 + 1) * 10 ms is Pareto(x_m = 10, alpha = 1.5),
        # whose P99 is 10 * 100^(1/1.5) = 215.44 ms.
        rng = np.random.default_rng(42)
        n = 20000
        x = (rng.pareto(1.5, n) + 1) * 10
        t = nb.fit_tail(x)
        self.assertEqual(t.best, "pareto")
        # Pareto MLE: SE(alpha) = alpha / sqrt(n) = 0.0106; allow 3 SE.
        self.assertAlmostEqual(t.fits["pareto"]["alpha"], 1.5, delta=3 * 1.5 / math.sqrt(n))
        # Its P99 = x_m 100^(1/alpha); by the delta method SE = P99 ln(100) / (alpha sqrt(n)) = 4.7 ms.
        self.assertAlmostEqual(t.fits["pareto"]["p99"], 215.44, delta=3 * 215.44 * math.log(100) / (1.5 * math.sqrt(n)))
        # Hill over the top k = ceil(sqrt(n)) = 142: SE = alpha / sqrt(k) = 0.126; allow 3 SE.
        self.assertEqual(t.hill_k, math.ceil(math.sqrt(n)))
        self.assertAlmostEqual(t.hill_alpha, 1.5, delta=3 * 1.5 / math.sqrt(t.hill_k))
        self.assertIn("heavy tail", t.verdict())
        # The empirical P99 is an order statistic whose 99.9% interval holds the true P99.
        xs = np.sort(x)
        l, u = nb.quantile_ranks(n, 0.99, 0.999)
        self.assertTrue(xs[l - 1] <= 215.44 <= xs[u - 1])

    def test_exponential(self):
        # Exponential with mean 50 ms: P99 = 50 ln(100) = 230.26 ms. The rate MLE 1/mean has
        # SE rate/sqrt(n), so the fitted P99 has SE P99/sqrt(n) = 1.63 ms; allow 3 SE.
        rng = np.random.default_rng(5)
        n = 20000
        t = nb.fit_tail(rng.exponential(50, n))
        self.assertEqual(t.best, "exponential")
        self.assertAlmostEqual(t.fits["exponential"]["p99"], 50 * math.log(100), delta=3 * 230.26 / math.sqrt(n))
        # An exponential tail has no finite index: above the threshold u = 50 ln(n/k) = 247 ms the
        # Hill estimate converges to about u/50 + ... ~ 5.8 (SE 0.5); "light" starts at 4.
        self.assertGreater(t.hill_alpha, 4)
        self.assertIn("light tail", t.verdict())

    def test_too_few(self):
        t = nb.fit_tail(np.arange(1, 50))
        self.assertIn("too few samples", t.verdict())


def synthetic_requests(n=1000, slow_stage="generate", slow_before_first_token=True, seed=1):
    """n completed requests whose stages add up to their E2E; the slowest 10% get 500 ms more
    in slow_stage, before or after the first token."""
    rng = np.random.default_rng(seed)
    base = {"admission": 0.01, "embed": 2.0, "retrieve": 30.0, "fetch": 1.0, "generate": 300.0, "stream": 2.0}
    rows = []
    for i in range(n):
        st = {s: v * rng.uniform(0.9, 1.1) for s, v in base.items()}
        slow = i % 10 == 0
        if slow:
            st[slow_stage] += 500
        e2el = sum(st.values())
        ttft = st["admission"] + st["embed"] + st["retrieve"] + st["fetch"] + 100
        if slow and slow_before_first_token:
            ttft += 500 if slow_stage == "generate" else 0
        # TPOT as the client computes it: (E2E - TTFT) / (output tokens - 1).
        tpot = (e2el - ttft) / 63
        row = {"i": i, "intended_s": i / 10, "sent_s": i / 10, "end_s": i / 10 + e2el / 1e3, "ok": True, "status": 200,
               "err_kind": "", "trace_id": f"{i:032x}", "ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": e2el,
               "service_e2el_ms": e2el, "send_lag_ms": 0.5, "prompt_tokens": 100, "output_tokens": 64}
        row.update({f"stage_{s}_ms": v for s, v in st.items()})
        rows.append(row)
    df = pd.DataFrame(rows)
    start = pd.Timestamp("2026-01-01T00:00:00Z")
    df["intended_at"] = start + pd.to_timedelta(df["intended_s"], unit="s")
    return nb.Run(name="synthetic", start=start, duration_s=float(df["end_s"].max()), config={}, requests=df)


class DiagnosisTest(unittest.TestCase):
    def test_attribution_finds_the_slow_stage(self):
        for stage in ("generate", "retrieve", "admission"):
            run = synthetic_requests(slow_stage=stage)
            att = nb.stage_attribution(run.requests, 0.9)
            self.assertEqual(att["excess_ms"].idxmax(), stage)
            # 500 ms of the gap is the injected delay; the rest is uniform noise of the body.
            self.assertAlmostEqual(att.loc[stage, "share_of_gap"], 1.0, delta=0.1)

    def test_engine_queue_before_first_token(self):
        run = synthetic_requests(slow_stage="generate", slow_before_first_token=True)
        ev = nb.Evidence(run=run, attribution=nb.stage_attribution(run.requests, 0.9),
                         prom={"waiting_max": 12.0, "waiting_frac": 0.4, "running_max": 256.0, "kv_max": 0.5,
                               "preemptions": 0.0})
        conclusion, findings = nb.diagnose(ev)
        self.assertIn("**generate**", conclusion)
        self.assertIn("engine's queue (up to 12)", conclusion)
        self.assertIn("100% of the slowest requests' extra time passed before their first token", conclusion)
        topics = {f.topic for f in findings}
        self.assertTrue({"run", "stages", "engine queue", "KV cache", "first token"} <= topics)

    def test_decoding_after_first_token(self):
        run = synthetic_requests(slow_stage="generate", slow_before_first_token=False)
        ev = nb.Evidence(run=run, attribution=nb.stage_attribution(run.requests, 0.9),
                         prom={"waiting_max": 0.0, "waiting_frac": 0.0, "running_max": 40.0})
        conclusion, _ = nb.diagnose(ev)
        self.assertIn("100% of the slowest requests' extra time passed after their first token, decoding at", conclusion)
        self.assertIn("up to 40 sequences", conclusion)
        self.assertNotIn("saturated", conclusion)

    def test_retrieval(self):
        run = synthetic_requests(slow_stage="retrieve")
        conclusion, _ = nb.diagnose(nb.Evidence(run=run, attribution=nb.stage_attribution(run.requests, 0.9)))
        self.assertIn("**retrieve**", conclusion)
        self.assertIn("slowest shard", conclusion)

    def test_no_evidence(self):
        run = synthetic_requests()
        run.requests = None
        run.summary = {"completed": 0, "failed": 0}
        conclusion, findings = nb.diagnose(nb.Evidence(run=run))
        self.assertIn("Not enough evidence", conclusion)
        self.assertEqual([f.topic for f in findings], ["run"])

    def test_drift(self):
        run = synthetic_requests()
        df = run.requests
        df["e2el_ms"] = df["e2el_ms"] + df["intended_s"] * 20  # +2 s over the 100 s run
        d = nb.time_structure(df)
        self.assertGreater(d["rho"], 0.3)
        _, findings = nb.diagnose(nb.Evidence(run=run, drift=d))
        self.assertTrue(any(f.topic == "over time" and "rose" in f.text for f in findings))

    def test_blocking_functions(self):
        fns = pd.DataFrame({"name": [
            "github.com/ragtail/ragtail/rag/httpapi.(*API).chatCompletions",
            "github.com/ragtail/ragtail/rag/pipeline.(*run).generate",
            "github.com/ragtail/ragtail/rag/llmsim.(*Stream).Recv",
            "runtime.gopark"], "total": [1, 1, 1, 1]})
        self.assertEqual(nb.blocking_functions(fns), ["llmsim.(*Stream).Recv", "pipeline.(*run).generate"])


def bench_doc(**over):
    doc = {"schema": nb.BENCH_SCHEMA, "start": "2026-01-01T00:00:00Z", "duration_s": 10.0, "completed": 2,
           "failed": 0, "config": {"shape": "poisson(rate=1)"}, "p50_e2el_ms": 100.0, "p50_e2el_ms_ci": None,
           "stages": {"retrieve": {"mean_ms": 5.0}, "generate": {"mean_ms": 90.0}},
           "histograms": {"metrics": {"e2el": GO_HISTOGRAM}, "stages": {}}}
    doc.update(over)
    return doc


class FilesTest(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp())

    def write(self, name, text):
        p = self.dir / name
        p.write_text(text)
        return p

    def test_summary_and_records_found_together(self):
        self.write("bench.json", json.dumps(bench_doc()))
        head = {"schema": nb.REQUESTS_SCHEMA, "start": "2026-01-01T00:00:00Z", "duration_s": 10.0, "config": {}}
        recs = [{"i": 0, "intended_ns": 0, "sent_ns": 1000, "end_ns": 100_000_000, "status": 200, "ok": True,
                 "e2el_ms": 100.0, "ttft_ms": 20.0, "server_timing": {"generate": 90.0}},
                {"i": 1, "intended_ns": 10**9, "sent_ns": 10**9, "end_ns": 10**9 + 5, "status": 503, "ok": False,
                 "err_kind": "http_5xx", "e2el_ms": 0.005}]
        self.write("bench.jsonl", "\n".join(json.dumps(x) for x in [head, *recs]) + "\n")
        for given in ("bench.json", "bench.jsonl"):
            run = nb.load_run([self.dir / given])
            self.assertIsNotNone(run.summary, given)
            self.assertEqual(len(run.requests), 2, given)
            self.assertEqual(run.completed(), 1)
            self.assertEqual(run.failed(), 1)
            self.assertEqual(list(run.latencies("e2el")), [100.0])
            self.assertEqual(run.requests.loc[0, "stage_generate_ms"], 90.0)
            self.assertEqual(run.start, pd.Timestamp("2026-01-01T00:00:00Z"))

    def test_summary_alone_uses_histograms(self):
        run = nb.load_run([self.write("only.json", json.dumps(bench_doc()))])
        self.assertIsNone(run.requests)
        self.assertEqual(len(run.latencies("e2el")), 36)

    def test_errors(self):
        with self.assertRaisesRegex(nb.ResultsError, "no such file"):
            nb.load_run([self.dir / "missing.json"])
        with self.assertRaisesRegex(nb.ResultsError, "schema 'other'"):
            nb.load_run([self.write("x.json", json.dumps({"schema": "other"}))])
        with self.assertRaisesRegex(nb.ResultsError, "no results"):
            nb.load_run([])
        with self.assertRaisesRegex(nb.ResultsError, "want NAME=PATH"):
            nb.parse_named_paths("sync=a.json,broken")

    def test_lab(self):
        lab = {"schema": nb.LAB_SCHEMA, "experiment": "coupling",
               "variants": [dict(bench_doc(), name="sync"), {"name": "async", "result": bench_doc()}]}
        doc, runs = nb.load_lab(self.write("lab.json", json.dumps(lab)))
        self.assertEqual([r.name for r in runs], ["sync", "async"])
        cmp = nb.compare(runs, metrics=("e2el",), ps=(50,))
        self.assertEqual(list(cmp["value"]), [100.0, 100.0])

    def test_lab_all(self):
        coupling = {"schema": nb.LAB_SCHEMA, "experiment": "coupling", "variants": [dict(bench_doc(), name="sync")]}
        knee = {"schema": nb.LAB_SCHEMA, "experiment": "knee", "variants": [dict(bench_doc(), name="paged rate=4")]}
        path = self.write("lab-all.json", json.dumps([knee, coupling]))
        doc, runs = nb.load_lab(path, experiment="coupling")
        self.assertEqual((doc["experiment"], [r.name for r in runs]), ("coupling", ["sync"]))
        with self.assertRaisesRegex(nb.ResultsError, "name the one to read"):
            nb.load_lab(path)
        with self.assertRaisesRegex(nb.ResultsError, "no 'priority' experiment among knee, coupling"):
            nb.load_lab(path, experiment="priority")
        with self.assertRaisesRegex(nb.ResultsError, "holds experiment 'knee', want 'coupling'"):
            nb.load_lab(self.write("knee.json", json.dumps(knee)), experiment="coupling")
        with self.assertRaisesRegex(nb.ResultsError, "not all"):
            nb.load_lab(self.write("mixed.json", json.dumps([coupling, {"schema": "other"}])), experiment="coupling")


class SourcesTest(unittest.TestCase):
    def test_from_env(self):
        src = nb.Sources.from_env({"RAGTAIL_RESULTS": "a.json:b.jsonl", "PROMETHEUS_URL": "http://p:9090/",
                                   "JAEGER_URL": " "})
        self.assertEqual(src.results, [Path("a.json"), Path("b.jsonl")])
        self.assertEqual(src.prometheus, "http://p:9090")
        self.assertIsNone(src.jaeger)

    def test_absent_source_is_a_note(self):
        src = nb.Sources(results=[])
        self.assertIsNone(src.get_json(None, "/x", "Jaeger"))
        self.assertIsNone(src.get_json("http://127.0.0.1:9", "/x", "nothing listens"))
        self.assertEqual(len(src.notes), 2)

    def test_jaeger_trace(self):
        # Jaeger's JSON: µs times; a retrieval span with two shard children of the same stage.
        spans = [
            {"spanID": "a", "operationName": "POST /v1/chat/completions", "startTime": 1_000_000, "duration": 900_000,
             "references": [], "tags": []},
            {"spanID": "r", "operationName": "retrieval", "startTime": 1_010_000, "duration": 50_000,
             "references": [{"refType": "CHILD_OF", "spanID": "a"}], "tags": [{"key": "rag.stage", "value": "retrieve"}]},
            {"spanID": "q1", "operationName": "Query", "startTime": 1_010_000, "duration": 40_000,
             "references": [{"refType": "CHILD_OF", "spanID": "r"}], "tags": [{"key": "rag.stage", "value": "retrieve"}]},
            {"spanID": "g", "operationName": "chat m", "startTime": 1_060_000, "duration": 800_000,
             "references": [{"refType": "CHILD_OF", "spanID": "a"}], "tags": [{"key": "rag.stage", "value": "generate"}]},
            {"spanID": "s", "operationName": "rag.stream", "startTime": 1_100_000, "duration": 760_000,
             "references": [{"refType": "CHILD_OF", "spanID": "a"}],
             "tags": [{"key": "rag.stage", "value": "stream"}, {"key": "rag.stream.write_ms", "value": 3.5}]},
        ]
        src = nb.Sources(results=[], jaeger="http://jaeger")
        src.get_json = lambda *a, **k: {"data": [{"spans": spans}]}
        t = nb.trace_from_jaeger(src, "ab" * 16)
        self.assertEqual(t["stages"], {"retrieve": 50.0, "generate": 800.0, "stream": 3.5})
        self.assertEqual(t["duration_ms"], 900.0)
        self.assertEqual(t["waterfall"][1]["start_offset_ms"], 10.0)

    def test_request_breakdown(self):
        # A trace of 1 s: retrieve 300 ms (CPU-heavy), generate 650 ms (waiting on the engine).
        tid = "ab" * 16
        trace = {"trace_id": tid, "start_unix_nano": 10**18, "duration_ms": 1000.0,
                 "stages": {"retrieve": 300.0, "generate": 650.0, "stream": 1.0}}
        body = {"type": "cpu", "unit": "count", "samples": 25,
                "functions": [{"name": "github.com/ragtail/ragtail/rag/retrieve.dot", "self": 20, "total": 25,
                               "self_pct": 80.0, "total_pct": 100.0}],
                "stages": [{"stage": "retrieve", "seconds": 0.25, "share": 1.0}],
                "wall": {"type": "wall", "unit": "nanoseconds", "samples": 2_000_000_000,
                         "functions": [{"name": "github.com/ragtail/ragtail/rag/llmsim.(*Stream).Recv",
                                        "self": 640_000_000, "total": 640_000_000, "self_pct": 32.0, "total_pct": 32.0}],
                         "stages": [{"stage": "", "seconds": 1.0, "share": 0.5},
                                    {"stage": "generate", "seconds": 0.64, "share": 0.32},
                                    {"stage": "retrieve", "seconds": 0.32, "share": 0.16}]}}
        src = nb.Sources(results=[], admin="http://admin")
        asked = {}

        def get_json(base, path, what, params=None, **kw):
            asked.update(params)
            return json.loads(json.dumps(body))
        src.get_json = get_json
        views = nb.profile_views(src, trace)
        self.assertEqual(asked["trace_id"], tid)
        self.assertEqual((asked["from"], asked["until"]), (10**18, 10**18 + 1_000_000_000))
        self.assertEqual(views["cpu"]["samples"], 25)
        self.assertEqual(list(views["wall"]["stages"]["stage"]), ["", "generate", "retrieve"])
        req = pd.DataFrame({"trace_id": [tid, "cd" * 16], "e2el_ms": [1012.0, 50.0], "ttft_ms": [400.0, 20.0]})
        b = nb.request_breakdown([trace], [views], req).set_index("stage")
        self.assertEqual(list(b.index), ["retrieve", "generate", "stream", ""])
        self.assertEqual(b.loc["generate", "e2el_ms"], 1012.0)
        self.assertEqual(b.loc["generate", "server_ms"], 650.0)
        self.assertAlmostEqual(b.loc["generate", "wall_ms"], 640.0)
        self.assertAlmostEqual(b.loc["retrieve", "cpu_ms"], 250.0)
        self.assertEqual(b.loc["stream", "wall_ms"], 0.0)
        self.assertTrue(math.isnan(b.loc["", "server_ms"]))
        # No records, no views: the server's stages alone.
        b = nb.request_breakdown([trace], [None])
        self.assertTrue(b["e2el_ms"].isna().all())
        self.assertEqual(b["wall_ms"].sum(), 0.0)

    def test_pyroscope_flamebearer(self):
        # Two levels: root (total 10, self 0), then f (total 6, self 6) and g (total 4, self 1).
        body = {"flamebearer": {"names": ["total", "f", "g"], "levels": [[0, 10, 0, 0], [0, 6, 6, 1, 0, 4, 1, 2]],
                                "numTicks": 10}}
        src = nb.Sources(results=[], pyroscope="http://pyro")
        src.get_json = lambda *a, **k: body
        top = nb.pyroscope_top(src, pd.Timestamp("2026-01-01", tz="UTC"), pd.Timestamp("2026-01-01 00:01", tz="UTC"))
        self.assertEqual(list(top["name"]), ["f", "g", "total"])
        self.assertEqual(list(top["self_pct"]), [60.0, 10.0, 0.0])


if __name__ == "__main__":
    unittest.main()


class TestGetTraceOrder(unittest.TestCase):
    """With JAEGER_URL set, traces come from Jaeger first, the ring second; without, the ring."""

    JAEGER = {"data": [{"spans": [
        {"spanID": "a", "operationName": "chat m", "startTime": 1_000_000, "duration": 5000, "references": [], "tags": []},
        {"spanID": "b", "operationName": "rag.fetch", "startTime": 1_001_000, "duration": 1000,
         "references": [{"refType": "CHILD_OF", "spanID": "a"}], "tags": [{"key": "rag.stage", "value": "fetch"}]},
    ]}]}

    def sources(self, jaeger_has: bool, admin_has: bool, jaeger: bool = True):
        src = nb.Sources(results=[], admin="http://admin", jaeger="http://jaeger" if jaeger else None)
        calls = []

        def get_json(base, path, what, params=None, headers=None, not_found_ok=False):
            calls.append(base)
            if base == "http://jaeger":
                return self.JAEGER if jaeger_has else None
            return {"trace_id": "t", "waterfall": []} if admin_has else None
        src.get_json = get_json
        return src, calls

    def test_order(self):
        cases = [
            ("jaeger first", True, True, True, "Jaeger", ["http://jaeger"]),
            ("falls back to the ring", False, True, True, "ragtail /debug/traces", ["http://jaeger", "http://admin"]),
            ("no JAEGER_URL: the ring", True, True, False, "ragtail /debug/traces", ["http://admin"]),
        ]
        for name, jaeger_has, admin_has, jaeger, want_source, want_calls in cases:
            with self.subTest(name):
                src, calls = self.sources(jaeger_has, admin_has, jaeger)
                t = nb.get_trace(src, "t")
                self.assertEqual(t["source"], want_source)
                self.assertEqual(calls, want_calls)
        src, _ = self.sources(True, False)
        t = nb.get_trace(src, "t")
        self.assertAlmostEqual(t["duration_ms"], 5.0)
        self.assertAlmostEqual(t["stages"]["fetch"], 1.0)
