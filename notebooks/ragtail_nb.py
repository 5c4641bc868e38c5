"""Helpers of ragtail's diagnosis notebooks (diagnosis.ipynb, coupling.ipynb).

They read what ragtail writes and serves, using only numpy, pandas, matplotlib, scipy and
requests (what Debian and the Jupyter scipy-notebook image both ship):

* bench results: the ``ragtail.bench/v1`` summary (``ragtail bench --json``), including its HDR
  histograms, and the per-request ``ragtail.requests/v1`` JSONL (``--save-detailed``);
* lab results: ``ragtail.lab/v1`` (``ragtail lab coupling --json``), whose variants are bench
  summaries;
* live sources: Prometheus' HTTP API, ragtail's admin API (``/debug/traces``,
  ``/debug/profiles``), and optionally Jaeger's query API and Pyroscope's render API.

Every latency is in milliseconds and every time a timezone-aware UTC ``pandas.Timestamp``.
Required inputs (the results) raise ``ResultsError`` with what is wrong; optional sources
answer ``None`` and leave the reason in ``Sources.notes``, so a notebook degrades instead of
failing when Jaeger or Pyroscope is not running.

The statistics follow ragtail's Go implementation (loadgen/stats) so the notebooks and the
``ragtail bench`` report agree: nearest-rank percentiles, distribution-free confidence intervals
from binomial order statistics, the Hill estimator over the top ceil(sqrt(n)) samples, and
maximum-likelihood exponential, lognormal and Pareto fits. test_ragtail_nb.py checks them
against distributions with known quantiles.
"""

from __future__ import annotations

import base64
import json
import math
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import requests
from scipy import stats as sstats

BENCH_SCHEMA = "ragtail.bench/v1"
REQUESTS_SCHEMA = "ragtail.requests/v1"
LAB_SCHEMA = "ragtail.lab/v1"

#: The pipeline's stages, in the order it runs them.
STAGES = ["admission", "embed", "retrieve", "fetch", "generate", "stream"]

#: Fewest samples a tail analysis is made from (loadgen/stats.MinTailSamples).
MIN_TAIL_SAMPLES = 100

#: The standard normal's 0.99 quantile.
Z99 = 2.3263478740408408


class ResultsError(ValueError):
    """A results file is missing, of an unknown schema, or malformed."""


# ---------------------------------------------------------------------------------------------
# Sources


@dataclass
class Sources:
    """Where the notebook reads from, taken from the environment by ``from_env``.

    ``notes`` collects, in order, why an optional source gave nothing; the notebooks print them.
    """

    results: list[Path]
    prometheus: Optional[str] = None
    admin: Optional[str] = None
    admin_token: Optional[str] = None
    jaeger: Optional[str] = None
    pyroscope: Optional[str] = None
    pyroscope_app: str = "ragtail"
    figures: Optional[Path] = None
    timeout_s: float = 10.0
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "Sources":
        """Reads RAGTAIL_RESULTS (one or more files separated by os.pathsep), PROMETHEUS_URL,
        RAGTAIL_ADMIN_URL, RAGTAIL_ADMIN_TOKEN, JAEGER_URL, PYROSCOPE_URL, PYROSCOPE_APP and
        RAGTAIL_FIGURES (a directory to save every figure into as PNG)."""

        def url(name: str) -> Optional[str]:
            v = env.get(name, "").strip()
            return v.rstrip("/") or None

        results = [Path(p) for p in env.get("RAGTAIL_RESULTS", "").split(os.pathsep) if p.strip()]
        figures = env.get("RAGTAIL_FIGURES", "").strip()
        return cls(
            results=results,
            prometheus=url("PROMETHEUS_URL"),
            admin=url("RAGTAIL_ADMIN_URL"),
            admin_token=env.get("RAGTAIL_ADMIN_TOKEN") or None,
            jaeger=url("JAEGER_URL"),
            pyroscope=url("PYROSCOPE_URL"),
            pyroscope_app=env.get("PYROSCOPE_APP", "ragtail") or "ragtail",
            figures=Path(figures) if figures else None,
        )

    def note(self, msg: str) -> None:
        """Records why an optional source gave nothing."""
        self.notes.append(msg)

    def get_json(self, base: Optional[str], path: str, what: str, params: Optional[dict] = None,
                 headers: Optional[dict] = None, not_found_ok: bool = False) -> Optional[Any]:
        """GETs base+path as JSON. An absent base, a connection error or an error status is
        recorded as a note and answers None; so is a 404 when not_found_ok (its error message
        is kept, as ragtail explains why nothing matched)."""
        if not base:
            self.note(f"{what}: not configured")
            return None
        try:
            resp = requests.get(base + path, params=params, headers=headers, timeout=self.timeout_s)
        except requests.RequestException as e:
            self.note(f"{what}: {base} unreachable ({type(e).__name__})")
            return None
        if resp.status_code != 200:
            msg = _error_message(resp)
            if not (resp.status_code == 404 and not_found_ok):
                self.note(f"{what}: HTTP {resp.status_code} from {base}{path}: {msg}")
            return None
        try:
            return resp.json()
        except ValueError:
            self.note(f"{what}: {base}{path} did not answer JSON")
            return None

    def save(self, fig, name: str) -> None:
        """Saves fig as <RAGTAIL_FIGURES>/<name>.png when RAGTAIL_FIGURES is set."""
        if self.figures is None:
            return
        self.figures.mkdir(parents=True, exist_ok=True)
        fig.savefig(self.figures / f"{name}.png", dpi=110, bbox_inches="tight")


def _error_message(resp: requests.Response) -> str:
    try:
        body = resp.json()
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message", err))
        if err:
            return str(err)
    except ValueError:
        pass
    return resp.text[:200]


# ---------------------------------------------------------------------------------------------
# HDR histograms (the "histograms" of a bench summary)


@dataclass(frozen=True)
class Histogram:
    """The non-empty buckets of an HDR histogram of durations: each bucket stands for the values
    lo..hi (ns, inclusive) and holds count of them."""

    lo: np.ndarray
    hi: np.ndarray
    counts: np.ndarray

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def quantile_ms(self, q: float) -> float:
        """The q-quantile by the nearest-rank rule, at the highest value of its bucket (as
        HdrHistogram and ragtail report it, so a latency is never understated)."""
        n = self.total
        if n == 0:
            return math.nan
        k = nearest_rank(n, q)
        i = int(np.searchsorted(np.cumsum(self.counts), k))
        return float(self.hi[min(i, len(self.hi) - 1)]) / 1e6

    def mean_ms(self) -> float:
        """The mean, each bucket taken at its median equivalent value lo + size/2 (rounded
        down), as HdrHistogram computes it."""
        if self.total == 0:
            return math.nan
        mid = self.lo + np.floor((self.hi - self.lo + 1) / 2)
        return float((mid * self.counts).sum() / self.counts.sum()) / 1e6

    def samples_ms(self) -> np.ndarray:
        """Every recorded value at its bucket's midpoint (lo + hi) / 2 (rounded down to the
        nanosecond), ascending: what ragtail's tail analysis of a histogram works on (the
        midpoint is within 10^-3 of every value in the bucket)."""
        mid = np.floor((self.lo + self.hi) / 2) / 1e6
        return np.repeat(mid, self.counts)


def _zigzag_varints(buf: bytes) -> Iterable[int]:
    """Decodes HdrHistogram's ZigZag LEB128 (at most 9 bytes, the 9th holding 8 bits)."""
    i, n = 0, len(buf)
    while i < n:
        value, shift = 0, 0
        for j in range(9):
            if i >= n:
                raise ResultsError("histogram: truncated varint")
            b = buf[i]
            i += 1
            if j == 8:
                value |= b << 56
                break
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        yield (value >> 1) ^ -(value & 1)


def decode_hdr(text: str) -> Histogram:
    """Decodes HdrHistogram's V2 compressed encoding in base64 (what ragtail writes for each
    histogram, from hdrhistogram-go's Encode) into its non-empty buckets.

    Layout: a big-endian cookie and compressed length, then zlib of a 40-byte header (cookie,
    payload length, normalizing offset, significant digits, lowest and highest trackable value,
    conversion ratio) and the counts as ZigZag LEB128 varints, a negative value being a run of
    that many empty buckets. The bucket of counts index i follows HdrHistogram's geometry:
    sub-buckets of 2^(m+1) values (m = ceil(log2(2*10^digits)) - 1), each bucket twice as
    wide as the one before.
    """
    try:
        raw = base64.b64decode(text, validate=True)
    except (ValueError, TypeError) as e:
        raise ResultsError(f"histogram: not base64: {e}") from e
    if len(raw) < 8:
        raise ResultsError("histogram: encoding too short")
    cookie, length = struct.unpack(">ii", raw[:8])
    if cookie & ~0xF0 != 0x1C849304:
        raise ResultsError(f"histogram: cookie {cookie:#x} is not HdrHistogram V2 compressed")
    try:
        body = zlib.decompress(raw[8:8 + length])
    except zlib.error as e:
        raise ResultsError(f"histogram: {e}") from e
    if len(body) < 40:
        raise ResultsError("histogram: header truncated")
    cookie2, payload_len, _offset, digits, lowest, _highest, _ratio = struct.unpack(">iiiiqqd", body[:40])
    if cookie2 & ~0xF0 != 0x1C849303 or not 0 <= digits <= 5 or payload_len != len(body) - 40:
        raise ResultsError("histogram: malformed header")
    half_magnitude = max(int(math.ceil(math.log2(2 * 10 ** digits))), 1) - 1
    unit = max(int(math.floor(math.log2(max(lowest, 1)))), 0)
    half = 1 << half_magnitude

    idx, cnt = [], []
    i = 0
    for v in _zigzag_varints(body[40:]):
        if v < 0:
            i += -v
        else:
            if v > 0:
                idx.append(i)
                cnt.append(v)
            i += 1
    idx_a = np.asarray(idx, dtype=np.int64)
    bucket = (idx_a >> half_magnitude) - 1
    sub = (idx_a & (half - 1)) + half
    first = bucket < 0
    sub = np.where(first, sub - half, sub)
    bucket = np.where(first, 0, bucket)
    lo = sub << (bucket + unit)
    size = np.left_shift(np.ones_like(bucket), bucket + unit)
    return Histogram(lo=lo.astype(np.float64), hi=(lo + size - 1).astype(np.float64),
                     counts=np.asarray(cnt, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# Percentiles and their intervals


def nearest_rank(n: int, q: float) -> int:
    """The 1-based rank ceil(q*n) of the q-quantile, clamped to [1, n] (loadgen/stats)."""
    if n <= 0:
        return 0
    return min(max(int(math.ceil(q * n - 1e-9)), 1), n)


def quantile_ranks(n: int, q: float, confidence: float = 0.95) -> Optional[tuple[int, int]]:
    """The 1-based ranks (l, u) of the order statistics whose interval [x_(l), x_(u)] holds the
    q-quantile of any continuous distribution with probability >= confidence: with B ~
    Binomial(n, q) the samples at or below the quantile, l is the largest rank with
    P(B <= l-1) <= (1-c)/2 and u the smallest with P(B <= u-1) >= 1-(1-c)/2. None when n is too
    small for an honest interval (e.g. fewer than 367 samples around P99 at 95%)."""
    if n < 2 or not 0 < q < 1:
        return None
    tail = (1 - confidence) / 2
    ks = np.arange(0, n + 1)
    cdf = sstats.binom.cdf(ks, n, q)
    below = np.nonzero(cdf <= tail)[0]
    above = np.nonzero(cdf >= 1 - tail)[0]
    if len(below) == 0 or len(above) == 0:
        return None
    lo, hi = int(below[-1]) + 1, int(above[0]) + 1
    if lo < 1 or hi > n or lo >= hi:
        return None
    return lo, hi


@dataclass(frozen=True)
class Percentile:
    """One percentile (in percent) of a sample, with its 95% interval when n allows one."""

    p: float
    value: float
    lo: float = math.nan
    hi: float = math.nan


def percentiles(samples_ms: Sequence[float], ps: Sequence[float] = (50, 90, 95, 99, 99.9),
                confidence: float = 0.95) -> list[Percentile]:
    """Nearest-rank percentiles of samples with distribution-free intervals."""
    x = np.sort(np.asarray(samples_ms, dtype=float))
    n = len(x)
    out = []
    for p in ps:
        if n == 0:
            out.append(Percentile(p, math.nan))
            continue
        v = x[nearest_rank(n, p / 100) - 1]
        r = quantile_ranks(n, p / 100, confidence)
        out.append(Percentile(p, float(v), *(float(x[r[0] - 1]), float(x[r[1] - 1])) if r else (math.nan, math.nan)))
    return out


def spectrum(samples_ms: Sequence[float], confidence: float = 0.95, points: int = 60) -> pd.DataFrame:
    """The percentile spectrum: percentiles from P50 out to the highest the sample supports
    (1 - 1/n), spaced evenly in "nines" (-log10(1-q)), with their intervals. Columns: q, nines,
    value, lo, hi (NaN where n is too small for an interval)."""
    x = np.sort(np.asarray(samples_ms, dtype=float))
    n = len(x)
    if n < 2:
        return pd.DataFrame(columns=["q", "nines", "value", "lo", "hi"])
    top = -math.log10(1 / n)
    rows = []
    for nines in np.linspace(math.log10(2), top, points):
        q = 1 - 10 ** -nines
        r = quantile_ranks(n, q, confidence)
        rows.append({
            "q": q, "nines": nines, "value": x[nearest_rank(n, q) - 1],
            "lo": x[r[0] - 1] if r else math.nan, "hi": x[r[1] - 1] if r else math.nan,
        })
    return pd.DataFrame(rows)


def nines_ticks(max_nines: float) -> tuple[list[float], list[str]]:
    """Tick positions and labels (P50, P90, P99, ...) for a spectrum's nines axis."""
    ticks, labels = [math.log10(2)], ["P50"]
    k = 1
    while k <= max_nines + 1e-9:
        ticks.append(float(k))
        labels.append("P" + ("9" * k if k <= 2 else "99." + "9" * (k - 2)))
        k += 1
    return ticks, labels


# ---------------------------------------------------------------------------------------------
# The tail


@dataclass(frozen=True)
class TailFit:
    """The tail analysis of a sample (loadgen/stats.Tail): the Hill estimate of the tail index
    over the top k = ceil(sqrt(n)) values above threshold, and the exponential, lognormal and
    Pareto maximum-likelihood fits with the P99 each predicts; best is the model of least AIC."""

    n: int
    empirical_p99: float
    hill_alpha: float
    hill_se: float
    hill_k: int
    hill_threshold: float
    fits: dict[str, dict[str, float]]
    best: str

    def verdict(self) -> str:
        """How heavy the tail is and how far each model's P99 is from the data's, in words."""
        if self.n < MIN_TAIL_SAMPLES:
            return f"too few samples for a tail analysis ({self.n} < {MIN_TAIL_SAMPLES})"
        a, se = self.hill_alpha, self.hill_se
        if math.isnan(a):
            shape = "tail index not estimable"
        elif a < 1:
            shape = f"very heavy tail: Hill α = {a:.2f} ± {se:.2f} (< 1: infinite mean)"
        elif a < 2:
            shape = f"heavy tail: Hill α = {a:.2f} ± {se:.2f} (< 2: infinite variance; mean and std are unstable)"
        elif a < 4:
            shape = f"moderately heavy tail: Hill α = {a:.2f} ± {se:.2f}"
        else:
            shape = f"light tail: Hill α = {a:.1f} ± {se:.1f}"
        parts = [f"{m} {f['p99']:.0f} ms ({100 * (f['p99'] / self.empirical_p99 - 1):+.0f}%)"
                 for m, f in self.fits.items()]
        return (f"{shape}. Empirical P99 {self.empirical_p99:.0f} ms; models predict "
                + ", ".join(parts) + f"; best by AIC: {self.best}.")


def fit_tail(samples_ms: Sequence[float]) -> TailFit:
    """Fits the tail of samples (ms) as loadgen/stats.FitTail does."""
    x = np.sort(np.maximum(np.asarray(samples_ms, dtype=float), 0.001))
    n = len(x)
    nan = math.nan
    if n < MIN_TAIL_SAMPLES:
        return TailFit(n, nan, nan, nan, 0, nan, {}, "")
    p99 = float(x[nearest_rank(n, 0.99) - 1])

    k = int(math.ceil(math.sqrt(n)))
    threshold = float(x[n - k - 1])
    denom = float(np.log(x[n - k:]).sum() - k * math.log(threshold)) if threshold > 0 else 0.0
    alpha_h = k / denom if denom > 0 else nan
    se_h = alpha_h / math.sqrt(k) if denom > 0 else nan

    fits: dict[str, dict[str, float]] = {}
    xm = float(x[0])
    rel = np.log(x / xm)
    mean = float(x.mean())
    if mean > 0:
        rate = 1 / mean
        ll = n * math.log(rate) - n
        fits["exponential"] = {"rate_per_ms": rate, "ll": ll, "aic": 2 - 2 * ll, "p99": math.log(100) / rate}
    sigma = float(rel.std())
    if sigma > 0:
        mu = math.log(xm) + float(rel.mean())
        ll = float(-np.log(x).sum() - n * math.log(sigma) - n / 2 * math.log(2 * math.pi) - n / 2)
        fits["lognormal"] = {"mu": mu, "sigma": sigma, "ll": ll, "aic": 4 - 2 * ll, "p99": math.exp(mu + sigma * Z99)}
    sum_rel = float(rel.sum())
    if sum_rel > 0:
        alpha = n / sum_rel
        ll = float(n * math.log(alpha) + n * alpha * math.log(xm) - (alpha + 1) * np.log(x).sum())
        fits["pareto"] = {"xm_ms": xm, "alpha": alpha, "ll": ll, "aic": 4 - 2 * ll, "p99": xm * 100 ** (1 / alpha)}
    best = min(fits, key=lambda m: fits[m]["aic"]) if fits else ""
    return TailFit(n, p99, alpha_h, se_h, k, threshold, fits, best)


def model_ccdf(fit: TailFit, model: str, x_ms: np.ndarray) -> np.ndarray:
    """P(X > x) under a fitted model, for plotting against the empirical CCDF."""
    f = fit.fits[model]
    if model == "exponential":
        return np.exp(-f["rate_per_ms"] * x_ms)
    if model == "lognormal":
        return sstats.norm.sf((np.log(x_ms) - f["mu"]) / f["sigma"])
    if model == "pareto":
        return np.where(x_ms < f["xm_ms"], 1.0, (x_ms / f["xm_ms"]) ** -f["alpha"])
    raise KeyError(model)


def hill_ccdf(fit: TailFit, x_ms: np.ndarray) -> np.ndarray:
    """The Pareto tail the Hill estimate describes, anchored where it starts:
    P(X > x) = (k/n) (x/threshold)^-alpha for x >= threshold."""
    return np.where(x_ms >= fit.hill_threshold,
                    fit.hill_k / fit.n * (x_ms / fit.hill_threshold) ** -fit.hill_alpha, np.nan)


# ---------------------------------------------------------------------------------------------
# Bench results


@dataclass
class Run:
    """One bench run: its summary (ragtail.bench/v1) and/or its per-request records
    (ragtail.requests/v1), with the run's window on the wall clock."""

    name: str
    start: pd.Timestamp
    duration_s: float
    config: dict
    summary: Optional[dict] = None
    requests: Optional[pd.DataFrame] = None

    @property
    def end(self) -> pd.Timestamp:
        return self.start + pd.Timedelta(seconds=self.duration_s)

    def histogram(self, metric: str) -> Optional[Histogram]:
        """The summary's HDR histogram of metric (ttft, e2el, ...), if it has one."""
        enc = ((self.summary or {}).get("histograms") or {}).get("metrics", {}).get(metric)
        if not enc:
            return None
        return decode_hdr(enc)

    def stage_histogram(self, stage: str) -> Optional[Histogram]:
        enc = ((self.summary or {}).get("histograms") or {}).get("stages", {}).get(stage)
        return decode_hdr(enc) if enc else None

    def latencies(self, metric: str) -> np.ndarray:
        """Every completed request's value of metric in ms: from the per-request records when
        there are any, else from the summary's histogram (values at bucket midpoints)."""
        col = f"{metric}_ms"
        if self.requests is not None and col in self.requests:
            ok = self.requests[self.requests["ok"]]
            return ok[col].dropna().to_numpy(dtype=float)
        h = self.histogram(metric)
        return h.samples_ms() if h is not None else np.array([])

    def completed(self) -> int:
        if self.requests is not None:
            return int(self.requests["ok"].sum())
        return int((self.summary or {}).get("completed", 0))

    def failed(self) -> int:
        if self.requests is not None:
            return int((~self.requests["ok"]).sum())
        return int((self.summary or {}).get("failed", 0))


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError as e:
        raise ResultsError(f"{path}: no such file (set RAGTAIL_RESULTS to a ragtail bench --json "
                           f"or --save-detailed file)") from e
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not JSON ({e}); a --save-detailed file must end in .jsonl") from e


def _check_bench(doc: Any, where: str) -> dict:
    if not isinstance(doc, dict) or doc.get("schema") != BENCH_SCHEMA:
        schema = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ResultsError(f"{where}: schema {schema!r}, want {BENCH_SCHEMA!r}")
    for key in ("start", "duration_s", "completed", "failed"):
        if key not in doc:
            raise ResultsError(f"{where}: no {key!r}")
    return doc


def read_requests(path: Path) -> tuple[dict, pd.DataFrame]:
    """Reads a ragtail.requests/v1 JSONL file: its header line and one row per request, with
    times in seconds from the run's start (intended_s, sent_s, end_s), the latencies in ms,
    and one stage_<name>_ms column per Server-Timing stage."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as e:
        raise ResultsError(f"{path}: no such file") from e
    if not lines:
        raise ResultsError(f"{path}: empty")
    try:
        head = json.loads(lines[0])
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}:1: not JSON: {e}") from e
    if head.get("schema") != REQUESTS_SCHEMA:
        raise ResultsError(f"{path}:1: schema {head.get('schema')!r}, want {REQUESTS_SCHEMA!r}")
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise ResultsError(f"{path}:{lineno}: not JSON: {e}") from e
        row = {
            "i": r.get("i"),
            "intended_s": r.get("intended_ns", 0) / 1e9,
            "sent_s": r.get("sent_ns", 0) / 1e9,
            "end_s": r.get("end_ns", 0) / 1e9,
            "ok": bool(r.get("ok")),
            "status": r.get("status", 0),
            "err_kind": r.get("err_kind", ""),
            "trace_id": r.get("trace_id", ""),
            "ttft_ms": r.get("ttft_ms", math.nan),
            "tpot_ms": r.get("tpot_ms", math.nan),
            "e2el_ms": r.get("e2el_ms", math.nan),
            "service_e2el_ms": r.get("service_e2el_ms", math.nan),
            "send_lag_ms": r.get("send_lag_ms", math.nan),
            "prompt_tokens": r.get("prompt_tokens", 0),
            "output_tokens": r.get("output_tokens", 0),
        }
        for stage, ms in (r.get("server_timing") or {}).items():
            row[f"stage_{stage}_ms"] = ms
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        raise ResultsError(f"{path}: no requests")
    for c in ("ttft_ms", "tpot_ms", "e2el_ms", "service_e2el_ms", "send_lag_ms"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return head, df


def load_run(paths: Sequence[Path], name: str = "") -> Run:
    """Loads a bench run from a summary JSON, a per-request JSONL, or both. Given one of them,
    the other is picked up too when it sits beside it with the other extension (bench.json and
    bench.jsonl)."""
    if not paths:
        raise ResultsError("no results: set RAGTAIL_RESULTS to the file `ragtail bench --json` "
                           "wrote (and/or its --save-detailed JSONL)")
    summary_path = requests_path = None
    for p in map(Path, paths):
        if p.suffix == ".jsonl":
            requests_path = p
        else:
            summary_path = p
    if summary_path is None and requests_path is not None and requests_path.with_suffix(".json").exists():
        summary_path = requests_path.with_suffix(".json")
    if requests_path is None and summary_path is not None and summary_path.with_suffix(".jsonl").exists():
        requests_path = summary_path.with_suffix(".jsonl")

    summary = _check_bench(_read_json(summary_path), str(summary_path)) if summary_path else None
    head, df = read_requests(requests_path) if requests_path else (None, None)
    meta = summary or head
    start = pd.Timestamp(meta["start"]).tz_convert("UTC") if pd.Timestamp(meta["start"]).tzinfo else \
        pd.Timestamp(meta["start"], tz="UTC")
    duration = float(meta.get("duration_s") or 0)
    if df is not None:
        df["intended_at"] = start + pd.to_timedelta(df["intended_s"], unit="s")
        duration = max(duration, float(df["end_s"].max()))
    return Run(name=name or (summary_path or requests_path).stem, start=start, duration_s=duration,
               config=meta.get("config", {}), summary=summary, requests=df)


def bench_from_dict(doc: dict, name: str) -> Run:
    """A Run from a bench summary already parsed (a lab variant)."""
    doc = _check_bench(doc, name)
    start = pd.Timestamp(doc["start"])
    start = start.tz_convert("UTC") if start.tzinfo else start.tz_localize("UTC")
    return Run(name=name, start=start, duration_s=float(doc["duration_s"]), config=doc.get("config", {}),
               summary=doc)


def summary_percentile(summary: dict, metric: str, p: float) -> Percentile:
    """pP_<metric>_ms and its interval from a bench summary (NaN where null)."""
    key = f"p{p:g}_{metric}_ms"
    v = summary.get(key)
    ci = summary.get(key + "_ci") or [math.nan, math.nan]
    return Percentile(p, math.nan if v is None else float(v), float(ci[0]), float(ci[1]))


# ---------------------------------------------------------------------------------------------
# Lab results


def lab_variant_name(v: dict, i: int) -> str:
    """The name of a lab variant: its name/variant/label key, else its coupling, else #i."""
    for key in ("name", "variant", "label", "coupling"):
        if isinstance(v.get(key), str) and v[key]:
            return v[key]
    cfg = v.get("config") or {}
    for key in ("coupling", "name"):
        if isinstance(cfg.get(key), str) and cfg[key]:
            return cfg[key]
    return f"variant {i}"


def _lab_variant_bench(v: dict) -> dict:
    """The bench summary of a lab variant: the variant itself, or its result/bench key."""
    if v.get("schema") == BENCH_SCHEMA or "completed" in v:
        return v if "schema" in v else {"schema": BENCH_SCHEMA, **v}
    for key in ("result", "bench", "summary"):
        if isinstance(v.get(key), dict):
            inner = v[key]
            return inner if "schema" in inner else {"schema": BENCH_SCHEMA, **inner}
    raise ResultsError("lab variant holds no bench result")


def load_lab(path: Path, experiment: str | None = None) -> tuple[dict, list[Run]]:
    """Reads a ragtail.lab/v1 file: the document and one Run per variant, in order.

    The file is one experiment's result (`ragtail lab NAME --json`) or an array of them
    (`ragtail lab all --json`); from an array, the one called `experiment` is taken.
    """
    doc = _read_json(Path(path))
    if isinstance(doc, list):
        doc = _pick_lab(doc, experiment, path)
    elif experiment is not None and isinstance(doc, dict) and doc.get("experiment") not in (None, experiment):
        raise ResultsError(f"{path}: holds experiment {doc.get('experiment')!r}, want {experiment!r}")
    if not isinstance(doc, dict) or doc.get("schema") != LAB_SCHEMA:
        raise ResultsError(f"{path}: schema {doc.get('schema') if isinstance(doc, dict) else None!r}, want {LAB_SCHEMA!r}")
    variants = doc.get("variants") or []
    if not variants:
        raise ResultsError(f"{path}: no variants")
    runs = []
    for i, v in enumerate(variants):
        name = lab_variant_name(v, i)
        runs.append(bench_from_dict(_lab_variant_bench(v), name))
    return doc, runs


def _pick_lab(docs: list, experiment: str | None, path: Path) -> dict:
    """The element of a `lab all` array whose experiment is `experiment` (or its only one)."""
    labs = [d for d in docs if isinstance(d, dict) and d.get("schema") == LAB_SCHEMA]
    if len(labs) != len(docs) or not labs:
        raise ResultsError(f"{path}: an array whose elements are not all {LAB_SCHEMA!r} results")
    if experiment is None:
        if len(labs) == 1:
            return labs[0]
        raise ResultsError(f"{path}: holds {len(labs)} experiments: name the one to read")
    for d in labs:
        if d.get("experiment") == experiment:
            return d
    names = ", ".join(str(d.get("experiment")) for d in labs)
    raise ResultsError(f"{path}: no {experiment!r} experiment among {names}")


def parse_named_paths(spec: str) -> list[tuple[str, Path]]:
    """Parses NAME=PATH,NAME=PATH (e.g. sync=a.json,fanout=b.json,async=c.json)."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, p = part.partition("=")
        if not sep or not name or not p:
            raise ResultsError(f"{part!r}: want NAME=PATH, e.g. sync=results/sync.json")
        out.append((name.strip(), Path(p.strip())))
    return out


# ---------------------------------------------------------------------------------------------
# Prometheus


class Prometheus:
    """A small client of Prometheus' HTTP API over Sources (errors become notes)."""

    def __init__(self, src: Sources):
        self.src = src
        self.url = src.prometheus

    def available(self) -> bool:
        return self.src.get_json(self.url, "/api/v1/status/buildinfo", "Prometheus") is not None

    def scrape_interval_s(self, default: float = 15.0) -> float:
        """The shortest scrape interval of the active targets (the resolution of the data)."""
        body = self.src.get_json(self.url, "/api/v1/targets", "Prometheus targets")
        best = math.inf
        for t in ((body or {}).get("data") or {}).get("activeTargets", []):
            s = t.get("scrapeInterval") or (t.get("discoveredLabels") or {}).get("__scrape_interval__")
            if s:
                best = min(best, pd.Timedelta(s).total_seconds())
        return best if math.isfinite(best) else default

    def _data(self, path: str, params: dict, what: str) -> Optional[Any]:
        body = self.src.get_json(self.url, path, what, params=params)
        if body is None:
            return None
        if body.get("status") != "success":
            self.src.note(f"{what}: {body.get('error', body)}")
            return None
        return body.get("data")

    def range(self, query: str, start: pd.Timestamp, end: pd.Timestamp, step_s: float,
              label: Optional[str] = None) -> pd.DataFrame:
        """A range query as a frame: one column per series (named by label's value, or the
        series' labels), indexed by UTC time. Empty when there is no data."""
        data = self._data("/api/v1/query_range", {
            "query": query, "start": start.timestamp(), "end": end.timestamp(), "step": step_s,
        }, f"Prometheus query {query}")
        cols = {}
        for series in (data or {}).get("result", []):
            labels = series.get("metric", {})
            name = labels.get(label, "") if label else ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            ts = [pd.Timestamp(t, unit="s", tz="UTC") for t, _ in series["values"]]
            cols[name or "value"] = pd.Series([float(v) for _, v in series["values"]], index=ts)
        return pd.DataFrame(cols)

    def series(self, query: str, start: pd.Timestamp, end: pd.Timestamp, step_s: float) -> pd.Series:
        """A range query summed over its series (one series for an aggregated query); empty
        when there is no data."""
        df = self.range(query, start, end, step_s)
        return df.sum(axis=1, min_count=1) if len(df.columns) else pd.Series(dtype=float)

    def instant(self, query: str, at: pd.Timestamp) -> Optional[float]:
        """An instant query's value, summed over the series it returns; None without data."""
        data = self._data("/api/v1/query", {"query": query, "time": at.timestamp()}, f"Prometheus query {query}")
        result = (data or {}).get("result", [])
        vals = [float(r["value"][1]) for r in result if r.get("value")]
        vals = [v for v in vals if not math.isnan(v)]
        return sum(vals) if vals else None

    def exemplars(self, query: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        """Exemplars of the series query selects: time, value, trace_id, and the bucket (le)."""
        data = self._data("/api/v1/query_exemplars", {
            "query": query, "start": start.timestamp(), "end": end.timestamp(),
        }, f"Prometheus exemplars of {query}")
        rows = []
        for s in data or []:
            le = s.get("seriesLabels", {}).get("le")
            for e in s.get("exemplars", []):
                rows.append({"at": pd.Timestamp(float(e["timestamp"]), unit="s", tz="UTC"),
                             "value": float(e["value"]), "le": le,
                             "trace_id": e.get("labels", {}).get("trace_id", "")})
        return pd.DataFrame(rows, columns=["at", "value", "le", "trace_id"])


def rate_window(scrape_s: float) -> str:
    """A rate() window holding about four scrapes: short enough to follow a 10 s stall, long
    enough that every window has samples."""
    return f"{max(int(math.ceil(4 * scrape_s)), 2)}s"


def hq(q: float, metric: str, window: str, by: str = "") -> str:
    """histogram_quantile(q, sum by (le[, by]) (rate(<metric>_bucket[window])))."""
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket[{window}])))"


# ---------------------------------------------------------------------------------------------
# Traces and profiles


def admin_headers(src: Sources) -> dict:
    return {"Authorization": f"Bearer {src.admin_token}"} if src.admin_token else {}


def trace_from_admin(src: Sources, trace_id: str) -> Optional[dict]:
    """A trace from ragtail's in-process ring (GET /debug/traces?trace_id=...), as it serves
    it: trace_id, start, duration_ms, stages (ms per stage), waterfall (spans with stage, name,
    start_offset_ms, duration_ms, attributes, events)."""
    t = src.get_json(src.admin, "/debug/traces", f"trace {trace_id} from ragtail",
                     params={"trace_id": trace_id}, headers=admin_headers(src), not_found_ok=True)
    if t is not None:
        t["source"] = "ragtail /debug/traces"
    return t


def trace_from_jaeger(src: Sources, trace_id: str) -> Optional[dict]:
    """A trace from Jaeger's query API (GET /api/traces/{id}) in the shape of
    trace_from_admin."""
    body = src.get_json(src.jaeger, f"/api/traces/{trace_id}", f"trace {trace_id} from Jaeger", not_found_ok=True)
    data = (body or {}).get("data") or []
    if not data or not data[0].get("spans"):
        return None
    spans = data[0]["spans"]
    t0 = min(s["startTime"] for s in spans)
    root = min(spans, key=lambda s: (s["startTime"], -s["duration"]))
    waterfall, stages = [], {}
    ids = {s["spanID"]: s for s in spans}
    for s in sorted(spans, key=lambda s: s["startTime"]):
        tags = {t["key"]: t.get("value") for t in s.get("tags", [])}
        parent = next((r["spanID"] for r in s.get("references", []) if r.get("refType") == "CHILD_OF"), "")
        stage = tags.get("rag.stage", "") or ""
        view = {"stage": stage, "name": s["operationName"], "span_id": s["spanID"], "parent_span_id": parent,
                "start_offset_ms": (s["startTime"] - t0) / 1e3, "duration_ms": s["duration"] / 1e3,
                "attributes": tags}
        waterfall.append(view)
        parent_stage = ({t["key"]: t.get("value") for t in ids[parent].get("tags", [])}.get("rag.stage", "")
                        if parent in ids else "")
        if stage in STAGES and parent_stage != stage:
            d = view["duration_ms"]
            if stage == "stream" and isinstance(tags.get("rag.stream.write_ms"), (int, float)):
                d = float(tags["rag.stream.write_ms"])
            stages[stage] = stages.get(stage, 0.0) + d
    start = pd.Timestamp(t0 * 1000, unit="ns", tz="UTC")
    return {"trace_id": trace_id, "root": root["operationName"], "start": start.isoformat(),
            "start_unix_nano": t0 * 1000, "duration_ms": root["duration"] / 1e3, "stages": stages,
            "waterfall": waterfall, "source": "Jaeger"}


def get_trace(src: Sources, trace_id: str) -> Optional[dict]:
    """The trace from Jaeger when JAEGER_URL is set (it keeps every exported trace, with the
    load generator's client span as its root when bench exported one), else from ragtail's ring;
    each falls back to the other."""
    if src.jaeger:
        return trace_from_jaeger(src, trace_id) or trace_from_admin(src, trace_id)
    return trace_from_admin(src, trace_id)


def trace_window(trace: dict) -> tuple[int, int]:
    """The trace's [start, end] in Unix nanoseconds."""
    start = int(trace["start_unix_nano"])
    return start, start + int(trace["duration_ms"] * 1e6)


def profile_top(src: Sources, what: str, **params) -> Optional[dict]:
    """GET /debug/profiles with params (from, until, trace_id, stage, type, top): the samples
    and top functions, or None (with the reason as a note) when nothing matches."""
    body = src.get_json(src.admin, "/debug/profiles", what, params=params, headers=admin_headers(src),
                        not_found_ok=True)
    if body is None:
        return None
    body["functions"] = pd.DataFrame(body.get("functions") or [],
                                     columns=["name", "self", "total", "self_pct", "total_pct"])
    return body


def _profile_summary(body: dict) -> dict:
    """One view of a /debug/profiles JSON answer, its functions and stages as DataFrames."""
    out = dict(body)
    out["functions"] = pd.DataFrame(body.get("functions") or [],
                                    columns=["name", "self", "total", "self_pct", "total_pct"])
    out["stages"] = pd.DataFrame(body.get("stages") or [], columns=["stage", "seconds", "share"])
    out.setdefault("samples", 0)
    return out


def profile_views(src: Sources, trace: dict, top: int = 12) -> Optional[dict]:
    """Both profile views of one trace over its own time range, from GET /debug/profiles?trace_id=…
    (which answers the CPU view at the top level and the wall-clock view under "wall"): {"cpu":
    summary, "wall": summary}, each with "functions" and "stages" DataFrames and, when empty,
    "empty" (why). None, with the reason as a note, when neither view has samples."""
    tid = trace["trace_id"]
    start, end = trace_window(trace)
    body = src.get_json(src.admin, "/debug/profiles", f"profile views of {tid[:16]}", headers=admin_headers(src),
                        params={"trace_id": tid, "from": start, "until": end, "top": top}, not_found_ok=True)
    if body is None:
        return None
    wall = body.pop("wall", None) or {"type": "wall", "samples": 0,
                                      "empty": "this ragtail answers no wall-clock view (before --profile-wall-rate)"}
    return {"cpu": _profile_summary(body), "wall": _profile_summary(wall)}


def request_breakdown(traces: Sequence[dict], views: Sequence[Optional[dict]],
                      requests: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """One row per (slow trace, stage) joining what the client measured (e2el_ms, ttft_ms from
    the bench's per-request records, when there are any), what the server's trace says
    (server_ms: the stage's Server-Timing; trace_ms: the whole trace), and what each profile view
    saw of the request in that stage: wall_ms (the time the stage had a goroutine, running or
    parked) and cpu_ms (the CPU time it computed, 10 ms per sample at 100 Hz). Stage "" holds
    the request's goroutines outside any stage (the connection's reader)."""
    rows = []
    for tr, v in zip(traces, views):
        tid = tr["trace_id"]
        client = {"e2el_ms": math.nan, "ttft_ms": math.nan}
        if requests is not None and len(requests) and "trace_id" in requests:
            hit = requests[requests["trace_id"] == tid]
            if len(hit):
                client = {"e2el_ms": float(hit["e2el_ms"].iloc[0]), "ttft_ms": float(hit["ttft_ms"].iloc[0])}
        stage_s = {}
        for view in ("wall", "cpu"):
            st = (v or {}).get(view, {}).get("stages")
            stage_s[view] = dict(zip(st["stage"], st["seconds"])) if st is not None and len(st) else {}
        server = tr.get("stages") or {}
        names = [s for s in STAGES if s in server or s in stage_s["wall"] or s in stage_s["cpu"]]
        names += sorted(s for s in set(stage_s["wall"]) | set(stage_s["cpu"]) if s not in names)
        for stage in names:
            rows.append({
                "trace": tid[:16], "stage": stage, **client, "trace_ms": float(tr.get("duration_ms", math.nan)),
                "server_ms": float(server.get(stage, math.nan)) if stage else math.nan,
                "wall_ms": stage_s["wall"].get(stage, 0.0) * 1e3, "cpu_ms": stage_s["cpu"].get(stage, 0.0) * 1e3,
            })
    return pd.DataFrame(rows, columns=["trace", "stage", "e2el_ms", "ttft_ms", "trace_ms", "server_ms", "wall_ms",
                                       "cpu_ms"])


def plot_request_profile(axes, breakdown: pd.DataFrame, trace_id: str, views: Optional[dict], n: int = 8) -> None:
    """One slow request on three axes: its stages as the trace, the wall-clock view and the CPU
    view timed them; its top functions by CPU (what it computed); its top wait sites by
    wall-clock time (where it waited)."""
    ax_st, ax_cpu, ax_wall = axes
    b = breakdown[(breakdown["trace"] == trace_id[:16]) & (breakdown["stage"] != "")]
    y = np.arange(len(b))
    for k, (col, label, color) in enumerate((("server_ms", "trace (Server-Timing)", "C0"),
                                             ("wall_ms", "wall-clock view", "C2"), ("cpu_ms", "CPU view", "C3"))):
        ax_st.barh(y + (k - 1) * 0.27, b[col].fillna(0), height=0.27, label=label, color=color)
    ax_st.set_yticks(y, b["stage"])
    ax_st.invert_yaxis()
    ax_st.set_xlabel("ms")
    e2el = b["e2el_ms"].iloc[0] if len(b) else math.nan
    client = f"client {e2el:.0f} ms, " if not math.isnan(e2el) else ""
    ax_st.set_title(f"{trace_id[:16]}…: {client}trace {b['trace_ms'].iloc[0]:.0f} ms" if len(b) else trace_id[:16])
    ax_st.legend(fontsize=7)
    for ax, view, title, color in ((ax_cpu, "cpu", "CPU: what it computed", "C3"),
                                   (ax_wall, "wall", "wall clock: where it waited", "C2")):
        v = (views or {}).get(view) or {}
        fns = v.get("functions")
        if fns is None or not len(fns):
            ax.text(0.5, 0.5, "no samples" + (f":\n{v['empty'][:60]}" if v.get("empty") else ""),
                    ha="center", va="center", fontsize=8, transform=ax.transAxes)
            ax.set_axis_off()
            ax.set_title(title)
            continue
        fns = fns[fns["self"] > 0].head(n)
        ax.barh(fns["name"].str.rsplit("/", n=1).str[-1].str[:48], fns["self_pct"], color=color)
        ax.invert_yaxis()
        ax.set_xlabel("% self")
        n_s = v.get("samples", 0)
        amount = (f"{n_s / 1e9:.1f} goroutine-s" if v.get("unit") == "nanoseconds"
                  else f"{n_s} samples, {n_s * 10} ms")
        ax.set_title(f"{title} ({amount})", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)


def pyroscope_top(src: Sources, start: pd.Timestamp, end: pd.Timestamp, n: int = 10) -> Optional[pd.DataFrame]:
    """The top functions by self CPU time in Pyroscope for the app over [start, end], from its
    render API (times in Unix milliseconds, as Grafana sends them; flamebearer format: per
    level, groups of four numbers x-offset delta, total, self, name index)."""
    query = f'process_cpu:cpu:nanoseconds:cpu:nanoseconds{{service_name="{src.pyroscope_app}"}}'
    body = src.get_json(src.pyroscope, "/pyroscope/render", "Pyroscope", params={
        "query": query, "from": int(start.timestamp() * 1000), "until": int(math.ceil(end.timestamp() * 1000)),
        "format": "json"})
    fb = (body or {}).get("flamebearer") or {}
    names, levels = fb.get("names") or [], fb.get("levels") or []
    if not names or not levels:
        if body is not None:
            src.note("Pyroscope: no profile for the window")
        return None
    self_by_name: dict[str, float] = {}
    for level in levels:
        for j in range(0, len(level) - 3, 4):
            name = names[level[j + 3]]
            self_by_name[name] = self_by_name.get(name, 0) + level[j + 2]
    total = float(fb.get("numTicks") or sum(self_by_name.values()) or 1)
    df = pd.DataFrame({"name": list(self_by_name), "self": list(self_by_name.values())})
    df["self_pct"] = 100 * df["self"] / total
    return df.sort_values("self", ascending=False).head(n).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# Plots


STAGE_COLORS = {
    "admission": "#8c564b", "embed": "#9467bd", "retrieve": "#1f77b4", "fetch": "#17becf",
    "generate": "#d62728", "stream": "#ff7f0e", "": "#7f7f7f",
}


def plot_waterfall(ax, trace: dict, max_spans: int = 40) -> None:
    """Draws a trace's spans as horizontal bars by start offset, coloured by stage, with the
    first-token event of the chat span marked."""
    spans = trace["waterfall"][:max_spans]
    for i, s in enumerate(spans):
        color = STAGE_COLORS.get(s.get("stage", ""), STAGE_COLORS[""])
        ax.barh(i, s["duration_ms"], left=s["start_offset_ms"], color=color, height=0.7)
        for e in s.get("events") or []:
            if e.get("name") == "rag.first_token":
                ax.plot([e["offset_ms"]], [i], marker="|", color="black", markersize=12)
    ax.set_yticks(range(len(spans)))
    ax.set_yticklabels([f"{s.get('stage') or '-'}: {s['name'][:38]}" for s in spans], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the request's start")
    ax.set_title(f"trace {trace['trace_id'][:16]}… {trace['duration_ms']:.0f} ms ({trace.get('source', '')})",
                 fontsize=9)


def shade_run(ax, run: Run) -> None:
    """Shades the run's window on a time axis."""
    ax.axvspan(run.start, run.end, color="0.92", zorder=0, label="bench run")


# ---------------------------------------------------------------------------------------------
# Diagnosis


@dataclass
class Finding:
    """One line of the diagnosis: a topic, what the data says, and how much it weighs in the
    conclusion (0: context only)."""

    topic: str
    text: str
    weight: float = 0.0


def stage_attribution(df: pd.DataFrame, tail_q: float) -> Optional[pd.DataFrame]:
    """How each stage's time differs between the tail and the body of the e2el distribution:
    for completed requests with Server-Timing, the mean ms per stage among requests at or
    above the tail_q quantile of e2el ("tail") and among those between the 25th and 75th
    percentiles ("body"), their difference ("excess") and the share of the total excess each
    stage explains. None without per-stage timings."""
    cols = [c for c in df.columns if c.startswith("stage_") and c.endswith("_ms")]
    ok = df[df["ok"]].dropna(subset=["e2el_ms"])
    if not cols or len(ok) < 20:
        return None
    e = ok["e2el_ms"]
    tail = ok[e >= e.quantile(tail_q)]
    body = ok[(e >= e.quantile(0.25)) & (e <= e.quantile(0.75))]
    out = pd.DataFrame({
        "body_ms": body[cols].mean(), "tail_ms": tail[cols].mean(),
    })
    out.index = [c[len("stage_"):-len("_ms")] for c in cols]
    out["excess_ms"] = out["tail_ms"] - out["body_ms"]
    gap = float(tail["e2el_ms"].mean() - body["e2el_ms"].mean())
    out["share_of_gap"] = out["excess_ms"] / gap if gap > 0 else math.nan
    order = [s for s in STAGES if s in out.index] + sorted(s for s in out.index if s not in STAGES)
    out = out.loc[order]
    out.attrs.update(tail_n=len(tail), body_n=len(body), gap_ms=gap, tail_q=tail_q,
                     tail_e2el_ms=float(tail["e2el_ms"].mean()), body_e2el_ms=float(body["e2el_ms"].mean()))
    return out


def time_structure(df: pd.DataFrame) -> Optional[dict]:
    """Whether latency drifted during the run: Spearman's rank correlation of e2el with the
    intended send time (with its p-value), and mean e2el of the first and last thirds."""
    ok = df[df["ok"]].dropna(subset=["e2el_ms"]).sort_values("intended_s")
    if len(ok) < 30:
        return None
    rho, p = sstats.spearmanr(ok["intended_s"], ok["e2el_ms"])
    third = len(ok) // 3
    return {"rho": float(rho), "p": float(p),
            "first_ms": float(ok["e2el_ms"].iloc[:third].mean()),
            "last_ms": float(ok["e2el_ms"].iloc[-third:].mean())}


def fmt_ms(ms: float) -> str:
    """Milliseconds with three significant digits or more (as ragtail prints them)."""
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "n/a"
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def fmt_pct(x: Optional[float]) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:.0f}%"


@dataclass
class Evidence:
    """What the diagnosis is computed from. Every field but run may be missing (None or
    empty): a finding is made only from the evidence present.

    prom holds Prometheus' view of the run's window: waiting_max, waiting_frac (share of
    samples with requests waiting in the engine), running_max, kv_max (0..1), preemptions,
    admission_wait_p99_s, rejected, inflight_max, hit_ratio. traces are the slowest requests'
    traces (trace_from_admin's shape); profiles one dict per trace with cpu_window (profile_top
    over the trace's window), cpu_trace (samples labelled with the trace) and goroutines (the
    goroutine profile of the trace), each possibly None, and window_s.
    """

    run: Run
    tails: dict = field(default_factory=dict)
    attribution: Optional[pd.DataFrame] = None
    drift: Optional[dict] = None
    prom: dict = field(default_factory=dict)
    traces: list = field(default_factory=list)
    profiles: list = field(default_factory=list)


#: Packages a request blocks in, innermost first: where a parked goroutine is really waiting.
BLOCKING_PACKAGES = ["rag/llmsim", "rag/llm", "rag/retrieve", "rag/docstore", "rag/embed", "rag/admission",
                     "rag/pipeline"]


def blocking_functions(functions: pd.DataFrame) -> list[str]:
    """The ragtail functions on a goroutine profile's stacks, backends before the pipeline (the
    handler and router frames above them say nothing about what the request waits for), each
    as package.Function."""
    out = []
    for pkg in BLOCKING_PACKAGES:
        rows = functions[functions["name"].str.contains(f"ragtail/ragtail/{pkg}.", regex=False)]
        for name in rows.sort_values("total", ascending=False)["name"]:
            short = name.rsplit("/", 1)[-1]
            if short not in out:
                out.append(short)
    return out


#: What each stage's time is made of, for the conclusion.
STAGE_MEANING = {
    "admission": "waiting for a worker of the admission pool",
    "embed": "embedding the question",
    "retrieve": "searching the index shards",
    "fetch": "fetching chunk payloads from the doc store",
    "generate": "the LLM (queueing in the engine, prefill and decode)",
    "stream": "writing tokens to the client",
}


def _headline(run: Run) -> str:
    s = run.summary
    parts = [f"{run.completed()} requests completed and {run.failed()} failed over {run.duration_s:.1f} s"]
    for metric, label in (("e2el", "E2E"), ("ttft", "TTFT")):
        if s is not None:
            p50, p99 = summary_percentile(s, metric, 50), summary_percentile(s, metric, 99)
        else:
            ps = percentiles(run.latencies(metric), (50, 99))
            p50, p99 = ps
        ci = "" if math.isnan(p99.lo) else f" (95% CI {fmt_ms(p99.lo)}–{fmt_ms(p99.hi)})"
        if math.isnan(p99.lo):
            ci = " (too few samples for an interval)"
        parts.append(f"{label} P50 {fmt_ms(p50.value)}, P99 {fmt_ms(p99.value)}{ci}")
    return "; ".join(parts) + "."


def diagnose(ev: Evidence) -> tuple[str, list[Finding]]:
    """Computes the diagnosis: the findings the evidence supports, each with a weight, and a
    conclusion naming where the tail comes from. Nothing is asserted without a number behind it."""
    run = ev.run
    f: list[Finding] = [Finding("run", _headline(run))]
    df = run.requests

    # Failures and the generator's own lateness change how far the latencies can be trusted.
    n_all = run.completed() + run.failed()
    if run.failed():
        kinds = (run.summary or {}).get("errors") or (
            df[~df["ok"]]["err_kind"].value_counts().to_dict() if df is not None else {})
        share = run.failed() / max(n_all, 1)
        f.append(Finding("failures", f"{run.failed()} requests ({100 * share:.1f}%) failed: "
                         + ", ".join(f"{k} {v}" for k, v in kinds.items()) + ". Failed requests are "
                         "left out of the latency percentiles.", weight=1.0 if share > 0.01 else 0.0))
    lag = run.latencies("send_lag")
    if len(lag):
        lag99 = float(np.sort(lag)[nearest_rank(len(lag), 0.99) - 1])
        if lag99 > 10:
            f.append(Finding("generator", f"The load generator sent 1% of requests more than {fmt_ms(lag99)} late "
                             "(send_lag P99). Latencies include it, as they start at the intended send time; "
                             "much more than that would mean the generator's machine could not keep the "
                             "arrivals asked for.", weight=0.5 if lag99 > 100 else 0.0))

    # The shape of the tail.
    t = ev.tails.get("e2el")
    if t is not None and t.n >= MIN_TAIL_SAMPLES:
        exp = t.fits.get("exponential")
        txt = t.verdict()
        if exp:
            txt += (f" An exponential model with the same mean would put P99 at {fmt_ms(exp['p99'])}, "
                    f"{100 * (exp['p99'] / t.empirical_p99 - 1):+.0f}% off.")
        f.append(Finding("tail shape", txt))

    # Which stage makes the tail.
    dominant = None
    att = ev.attribution
    if att is not None and att.attrs.get("gap_ms", 0) > 0:
        ranked = att.sort_values("excess_ms", ascending=False)
        dominant = ranked.index[0]
        top = ranked.iloc[0]
        others = ", ".join(f"{s} {fmt_ms(r.excess_ms)}" for s, r in ranked.iloc[1:3].iterrows() if r.excess_ms > 0)
        f.append(Finding("stages", (
            f"The slowest {100 * (1 - att.attrs['tail_q']):.0f}% of requests (n={att.attrs['tail_n']}, mean "
            f"{fmt_ms(att.attrs['tail_e2el_ms'])}) took {fmt_ms(att.attrs['gap_ms'])} longer than the middle half "
            f"(n={att.attrs['body_n']}, mean {fmt_ms(att.attrs['body_e2el_ms'])}). By Server-Timing, "
            f"{dominant} accounts for {fmt_ms(top.excess_ms)} of that gap ({fmt_pct(top.share_of_gap)}); "
            + (f"next: {others}." if others else "no other stage grew.")), weight=2.0))
    elif ev.traces or not (run.summary or {}).get("stages"):
        totals: dict[str, float] = {}
        for tr in ev.traces:
            for s, ms in (tr.get("stages") or {}).items():
                totals[s] = totals.get(s, 0.0) + ms
        if totals:
            dominant = max(totals, key=totals.get)
            whole = sum(totals.values())
            f.append(Finding("stages", f"In the {len(ev.traces)} slowest traces, {dominant} took "
                             f"{fmt_pct(totals[dominant] / whole)} of the stage time (no per-request "
                             "Server-Timing in the results: run the bench with --save-detailed for the "
                             "whole distribution).", weight=2.0))
    else:
        # Only the summary: each stage's own P50 and P99. The stage whose P99 stands furthest
        # above its P50 is the likeliest source of the tail (the stages' tails need not coincide
        # in the same requests, so this is weaker evidence than per-request timings).
        spread = {st: (v.get("p99_ms") or 0) - (v.get("p50_ms") or 0) for st, v in run.summary["stages"].items()}
        dominant = max(spread, key=spread.get)
        f.append(Finding("stages", f"From the summary's per-stage percentiles, {dominant} has the widest spread "
                         f"(P99 − P50 = {fmt_ms(spread[dominant])}): the likeliest source of the tail. Per-request "
                         "timings (--save-detailed) would show whether the same requests are slow in it.",
                         weight=1.5))

    # Before or after the first token: how the tail's extra time splits between waiting for the
    # first token (queueing, retrieval, prefill) and the rest (decoding, streaming).
    pre_share = None  # share of the tail-body gap that accrues before the first token
    tpot_tail = tpot_body = out_tail = out_body = math.nan
    if df is not None and att is not None:
        ok = df[df["ok"]].dropna(subset=["e2el_ms", "ttft_ms"])
        e = ok["e2el_ms"]
        tail = ok[e >= e.quantile(att.attrs["tail_q"])]
        body = ok[(e >= e.quantile(0.25)) & (e <= e.quantile(0.75))]
        gap = float(tail["e2el_ms"].mean() - body["e2el_ms"].mean()) if len(tail) and len(body) else 0.0
        if gap > 0:
            ttft_tail, ttft_body = float(tail["ttft_ms"].mean()), float(body["ttft_ms"].mean())
            pre = ttft_tail - ttft_body
            pre_share = pre / gap
            tpot_tail, tpot_body = float(tail["tpot_ms"].mean()), float(body["tpot_ms"].mean())
            out_tail, out_body = float(tail["output_tokens"].mean()), float(body["output_tokens"].mean())
            txt = (f"Of the {fmt_ms(gap)} by which those slowest requests trail the middle half, {fmt_ms(pre)} "
                   f"({fmt_pct(pre_share)}) accrue before the first token (mean TTFT {fmt_ms(ttft_tail)} against "
                   f"{fmt_ms(ttft_body)}) and {fmt_ms(gap - pre)} after it")
            if not math.isnan(tpot_tail) and not math.isnan(tpot_body):
                txt += (f" (decoding at {fmt_ms(tpot_tail)} per token against {fmt_ms(tpot_body)}, "
                        f"{out_tail:.0f} tokens against {out_body:.0f})")
            f.append(Finding("first token", txt + ".", weight=1.0))

    # The engine and the service's queues, from Prometheus.
    p = ev.prom or {}
    engine_saturated = False
    if p.get("waiting_max") is not None:
        wf, wmax = p.get("waiting_frac") or 0.0, p["waiting_max"]
        engine_saturated = wf >= 0.1 and wmax >= 1
        if wmax >= 1:
            txt = (f"The engine's waiting queue (vllm:num_requests_waiting) was non-empty in {fmt_pct(wf)} of "
                   f"the run's samples, up to {wmax:.0f} requests: requests waited for a batch slot before "
                   f"prefill" + (" — the engine was saturated." if engine_saturated else ", briefly."))
        else:
            txt = ("The engine's waiting queue stayed empty: every request got a batch slot at once, so "
                   "generation time is the engine's step time under the batch it ran in"
                   + (f" (up to {p['running_max']:.0f} running)." if p.get("running_max") is not None else "."))
        f.append(Finding("engine queue", txt, weight=1.5 if engine_saturated else 0.5))
    if p.get("kv_max") is not None:
        kv = p["kv_max"]
        pre = p.get("preemptions") or 0
        txt = f"KV-cache usage peaked at {fmt_pct(kv)}"
        if pre > 0:
            txt += f" and the engine preempted {pre:.0f} requests (recomputed later): memory limited the batch."
        elif kv >= 0.9:
            txt += ": close to full, the next burst will preempt."
        else:
            txt += ": memory was not the limit."
        f.append(Finding("KV cache", txt, weight=1.5 if pre > 0 or kv >= 0.9 else 0.0))
    if p.get("admission_wait_p99_s") is not None or p.get("rejected"):
        w = (p.get("admission_wait_p99_s") or 0.0) * 1e3
        rej = p.get("rejected") or 0
        busy = w > 1 or rej > 0
        txt = (f"The admission pool queued requests (wait P99 up to {fmt_ms(w)}, {rej:.0f} rejected): the worker "
               "pool was full." if busy else
               f"The admission pool never made requests wait (wait P99 at most {fmt_ms(w)}, none rejected).")
        f.append(Finding("admission", txt, weight=1.0 if busy else 0.0))
    if p.get("hit_ratio") is not None:
        f.append(Finding("doc-store cache", f"The doc-store cache answered {fmt_pct(p['hit_ratio'])} of the lookups "
                         "that reached it."))

    # Whether the tail is a trend or noise: where the slow requests sit in the run.
    d = ev.drift
    trend = 0
    if d is not None:
        trend = (1 if d["rho"] > 0.3 and d["last_ms"] > 1.2 * d["first_ms"] else
                 -1 if d["rho"] < -0.3 and d["first_ms"] > 1.2 * d["last_ms"] else 0) if d["p"] < 0.01 else 0
        stats_txt = (f"Spearman ρ = {d['rho']:.2f} between send time and E2E, p = {d['p']:.2g}; mean "
                     f"{fmt_ms(d['first_ms'])} in the first third of the run, {fmt_ms(d['last_ms'])} in the last")
        if trend > 0:
            txt = f"Latency rose through the run ({stats_txt}): the slow requests are the late ones"
            txt += (", as a queue built up faster than it drained." if engine_saturated else ".")
        elif trend < 0:
            txt = (f"Latency fell through the run ({stats_txt}): the slow requests are the early ones, which met "
                   "the fullest batch or queue.")
        else:
            txt = (f"No trend over the run ({stats_txt}): the slow requests are spread through it rather than "
                   "clustered in one episode.")
        f.append(Finding("over time", txt, weight=1.0 if trend else 0.0))

    # The slowest traces and what the process did meanwhile.
    for tr, prof in zip(ev.traces, ev.profiles):
        stages = tr.get("stages") or {}
        if not stages:
            continue
        top_stage = max(stages, key=stages.get)
        txt = (f"Trace {tr['trace_id'][:16]}… ({fmt_ms(tr['duration_ms'])}) spent {fmt_ms(stages[top_stage])} in "
               f"{top_stage}")
        cpu_w, cpu_t, gor = prof.get("cpu_window"), prof.get("cpu_trace"), prof.get("goroutines")
        if cpu_w is not None and prof.get("window_s"):
            # pyroscope-go samples CPU at 100 Hz: samples / (100 × seconds) is cores busy.
            cores = cpu_w["samples"] / (100 * max(prof["window_s"], 1e-9))
            own = cpu_t["samples"] if cpu_t is not None else 0
            txt += (f"; over the profile windows around it the process kept {cores:.2f} cores busy, "
                    f"{own} CPU samples ({own * 10} ms) of them on this request")
            if len(cpu_w["functions"]):
                fn = cpu_w["functions"].iloc[0]
                txt += f" (hottest: {fn['name'].rsplit('/', 1)[-1]}, {fn['self_pct']:.0f}% self)"
        if gor is not None and len(gor["functions"]):
            names = blocking_functions(gor["functions"])
            if names:
                txt += f"; its goroutines were parked in {', '.join(names[:3])}"
        f.append(Finding("slowest trace", txt + "."))

    # The conclusion: the dominant stage, qualified by the evidence of what made it slow.
    if dominant is None:
        conclusion = ("Not enough evidence to attribute the tail to a stage: run the bench with --save-detailed "
                      "(per-request Server-Timing) and keep RAGTAIL_ADMIN_URL reachable for traces.")
        return conclusion, f
    why = []
    if dominant == "generate":
        if pre_share is not None and pre_share >= 0.5:
            why.append(f"{fmt_pct(pre_share)} of the slowest requests' extra time passed before their first token")
            if engine_saturated:
                why.append(f"requests waited in the engine's queue (up to {p['waiting_max']:.0f}) for a batch slot "
                           "before prefill")
            else:
                why.append("prefill of the long RAG prompts, not queueing, set it (the engine's queue stayed "
                           "empty)" if p.get("waiting_max") is not None else "queueing or prefill set it")
        elif pre_share is not None:
            txt = f"{fmt_pct(1 - pre_share)} of the slowest requests' extra time passed after their first token"
            if tpot_tail > 1.1 * tpot_body:
                txt += f", decoding at {fmt_ms(tpot_tail)} per token against {fmt_ms(tpot_body)} in the middle half"
                if p.get("running_max") is not None:
                    txt += (f": each decode step slowed with the batch, up to {p['running_max']:.0f} sequences, "
                            "and with the prefills of new arrivals it carried")
            elif out_tail > 1.2 * out_body:
                txt += (f": they generated more tokens ({out_tail:.0f} against {out_body:.0f} in the middle half) "
                        "at the same pace")
            why.append(txt)
            if engine_saturated:
                why.append(f"the engine was saturated as well (its queue held up to {p['waiting_max']:.0f} requests)")
        elif engine_saturated:
            why.append(f"requests queued in the engine (up to {p['waiting_max']:.0f} waiting)")
        if p.get("preemptions"):
            why.append(f"the KV cache ran out and {p['preemptions']:.0f} requests were preempted")
        if not why:
            why.append("generation itself is the slow part; per-request records and Prometheus would tell "
                       "queueing from decoding")
    elif dominant in ("retrieve", "fetch"):
        why.append("the slowest shard or doc-store lookup sets the pace (sync coupling adds the shards up; "
                   "fanout waits for the slowest; async bounds it with a deadline)")
    elif dominant == "admission":
        why.append("the worker pool was full and requests waited for a worker")
    elif dominant == "stream":
        why.append("writing to the client was slow (a slow reader or the network)")
    if trend > 0:
        why.append("and the tail grew over the run")
    elif trend < 0:
        why.append("and the tail sits early in the run")
    conclusion = (f"P99 was high because of **{dominant}**, {STAGE_MEANING.get(dominant, dominant)}: "
                  + "; ".join(why) + ".")
    return conclusion, f


def render_diagnosis(conclusion: str, findings: Sequence[Finding]) -> str:
    """The diagnosis as Markdown: the conclusion, then the findings by weight."""
    lines = ["## Diagnosis", "", conclusion, ""]
    # The run's headline first, then the evidence, the weightiest first.
    for x in sorted(findings, key=lambda x: (x.topic != "run", -x.weight)):
        lines.append(f"- **{x.topic}**: {x.text}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Comparing runs (coupling modes)


def compare(runs: Sequence[Run], metrics: Sequence[str] = ("ttft", "e2el"),
            ps: Sequence[float] = (50, 90, 95, 99)) -> pd.DataFrame:
    """Percentiles with their 95% intervals per run and metric: from each run's summary (as
    `ragtail bench` computed them). Columns: run, metric, p, value, lo, hi, n."""
    rows = []
    for r in runs:
        for m in metrics:
            n = (r.histogram(m).total if r.histogram(m) is not None else len(r.latencies(m)))
            for p in ps:
                if r.summary is not None:
                    x = summary_percentile(r.summary, m, p)
                else:
                    x = percentiles(r.latencies(m), (p,))[0]
                rows.append({"run": r.name, "metric": m, "p": p, "value": x.value, "lo": x.lo, "hi": x.hi, "n": n})
    return pd.DataFrame(rows)


def stage_means(runs: Sequence[Run]) -> pd.DataFrame:
    """Mean ms per server stage (Server-Timing) per run, runs as rows, stages in pipeline order."""
    rows = {}
    for r in runs:
        st = (r.summary or {}).get("stages") or {}
        rows[r.name] = {s: v.get("mean_ms", math.nan) for s, v in st.items()}
    df = pd.DataFrame.from_dict(rows, orient="index")
    order = [s for s in STAGES if s in df.columns] + sorted(c for c in df.columns if c not in STAGES)
    return df[order] if len(df.columns) else df


def intervals_overlap(a: Percentile, b: Percentile) -> Optional[bool]:
    """Whether two percentiles' intervals overlap; None when either has none."""
    if any(math.isnan(v) for v in (a.lo, a.hi, b.lo, b.hi)):
        return None
    return not (a.hi < b.lo or b.hi < a.lo)
