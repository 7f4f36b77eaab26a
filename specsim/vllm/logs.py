"""The periodic ``SpecDecoding metrics:`` log line of vLLM into counts (layer 1, vLLM formats):
the three v1 layouts and the v0 ``Speculative metrics:`` line (``vllm/v1/spec_decode/metrics.py``
``SpecDecodingLogging.log``).
"""
from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from specsim.errors import DataError, NotCollectedError
from specsim.vllm.counts import IngestWarning, SpecDecodeCounts

# --------------------------------------------------------------------------------------------
# log lines
# --------------------------------------------------------------------------------------------
_NUM = r"(?:\d+\.\d+|nan|inf)"
_RATES = r"(?P<rates>(?:\d\.\d{3}|nan)(?:, (?:\d\.\d{3}|nan))*)"
# vLLM >= 0.10 (checked 0.10.2, 0.32.0): vllm/v1/spec_decode/metrics.py SpecDecodingLogging.log
_RE_V1 = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>" + _NUM + r"), "
    r"Accepted throughput: (?P<acc_tput>" + _NUM + r") tokens/s, "
    r"Drafted throughput: (?P<draft_tput>" + _NUM + r") tokens/s, "
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: " + _RATES + r", "
    r"Avg Draft acceptance rate: (?P<ar>\d+\.\d|nan)%\s*$")
# vLLM 0.8.5 (MAL = accepted/drafts, no bonus) and 0.9.x (checked 0.9.2; MAL = 1 + accepted/drafts)
_RE_V1_OLD = re.compile(
    r"SpecDecoding metrics: Draft acceptance rate: (?P<ar>\d+\.\d|nan)%, "
    r"Mean acceptance length: (?P<mal>" + _NUM + r"), "
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: " + _RATES + r"\s*$")
# vLLM v0 (checked 0.8.5 vllm/engine/metrics.py; counts cumulative since start,
# vllm/model_executor/layers/spec_decode_base_sampler.py)
_RE_V0 = re.compile(
    r"Speculative metrics: Draft acceptance rate: (?P<ar>\d\.\d{3}|nan), "
    r"System efficiency: (?P<eff>\d\.\d{3}|nan), Number of speculative tokens: (?P<k>\d+), "
    r"Number of accepted tokens: (?P<accepted>\d+), Number of draft tokens: (?P<drafted>\d+), "
    r"Number of emitted tokens: (?P<emitted>\d+)\.\s*$")
_RE_ENGINE = re.compile(r"Engine (\d+): ")
_RE_AGG = re.compile(r"(\d+) Engines Aggregated: ")
_RE_PID = re.compile(r"\(([^()]*pid=\d+)\)")
_RE_TIME = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d)")
_MARKERS = ("SpecDecoding metrics:", "Speculative metrics:")

FORMAT_V1 = "v1"                     # vLLM >= 0.10: MAL first, throughputs, Avg AR last
FORMAT_V1_09 = "v1-0.9"              # AR first, MAL includes the bonus token
FORMAT_V1_085 = "v1-0.8"             # AR first, MAL = accepted/drafts (no bonus token)
FORMAT_V0 = "v0"                     # "Speculative metrics:", cumulative


@dataclass(frozen=True)
class LogRecord:
    """One parsed spec-decode log line.

    Attributes
    ----------
    line_no : int
        1-based line number in the input.
    engine : str or None
        ``"000"``.. from the preceding ``Engine NNN:`` line of the same process, ``"aggregated"``
        after an ``N Engines Aggregated:`` line, None if neither precedes it.
    process : str or None
        The ``(... pid=N)`` prefix, if present.
    timestamp : str or None
        ``MM-DD hh:mm:ss`` from the log prefix.
    format : str
        ``"v1"``, ``"v1-0.9"``, ``"v1-0.8"`` or ``"v0"``.
    counts : SpecDecodeCounts
        Interval counts for v1 formats; cumulative counts for v0.
    logged : dict
        The values as printed (MAL, rates, throughputs in tokens/s, ...).
    """

    line_no: int
    engine: str | None
    process: str | None
    timestamp: str | None
    format: str
    counts: SpecDecodeCounts
    logged: dict = field(default_factory=dict)


def _count_bounds(r: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest / largest integer a_i with ``"%.3f" % (a_i / D) == "%.3f" % r_i`` (broadcast).

    Interior bounds follow from |a/D - r| <= 0.0005; where a bound lands exactly on a rounding
    half-way point (a/D = r +- 0.0005) the printed digit depends on the binary value of a/D, so
    those few candidates are checked with the same formatting vLLM's logger uses.
    """
    eps = 1e-9
    h = 0.0005
    D = np.broadcast_to(D, np.broadcast_shapes(D.shape, r.shape))
    rr = np.broadcast_to(r, D.shape)
    a_lo = np.clip(np.ceil((rr - h) * D - eps), 0, None)
    a_hi = np.minimum(np.floor((rr + h) * D + eps), D)
    for bound, step in ((a_lo, 1), (a_hi, -1)):
        edge = np.abs(bound - (rr - step * h) * D) < 1e-6
        for idx in zip(*np.nonzero(edge)):
            if f"{bound[idx] / D[idx]:.3f}" != f"{rr[idx]:.3f}":
                bound[idx] += step
    return a_lo, a_hi


def _reconstruct_drafts(*, accepted: int, drafted: int, n: int, mal_minus_1: float, mal_half: float,
                        rates: list[float], full_drafts: bool, where: str) -> tuple[int, int, int, tuple]:
    """Integer drafts D and accepted_per_pos consistent with rounded log values.

    The v1 log line prints accepted and drafted tokens exactly but not the number of drafts; it
    prints MAL (%.2f) and per-position rates a_i/D (%.3f). Every D with ceil(T/N) <= D <= T
    (1..N tokens per draft) whose MAL and all rates round to the printed values, with integer
    a_i summing to `accepted`, is feasible. Returns (estimate, lo, hi, accepted_per_pos).
    """
    eps = 1e-9
    lo = max(1, -(-drafted // n))
    hi = drafted
    if full_drafts:
        if drafted % n:
            raise DataError(f"{where}: assume_full_drafts but Drafted = {drafted} is not a multiple "
                            f"of N = {n}")
        lo = hi = drafted // n
    if accepted > 0:  # 1 + a/D within +-mal_half of the printed MAL
        top = mal_minus_1 + mal_half + eps
        bot = mal_minus_1 - mal_half - eps
        lo = max(lo, math.ceil(accepted / top - eps)) if top > 0 else hi + 1
        if bot > 0:
            hi = min(hi, math.floor(accepted / bot + eps))
    if lo > hi:
        raise DataError(f"{where}: no number of drafts is consistent with MAL "
                        f"{1 + mal_minus_1:.2f}, Accepted {accepted}, Drafted {drafted}, N {n}")
    if hi - lo > 5_000_000:
        raise DataError(f"{where}: number of drafts too weakly determined ({lo}..{hi})")
    D = np.arange(lo, hi + 1, dtype=np.int64)[:, None]
    r = np.asarray(rates, dtype=float)[None, :]
    a_lo, a_hi = _count_bounds(r, D)
    ok = np.all(a_lo <= a_hi, axis=1) & (a_lo.sum(1) <= accepted) & (a_hi.sum(1) >= accepted)
    feas = D[ok, 0]
    if feas.size == 0:
        raise DataError(f"{where}: no number of drafts in [{lo}, {hi}] reproduces the printed "
                        f"per-position rates {rates} with Accepted = {accepted}")
    if accepted > 0:
        target = accepted / mal_minus_1 if mal_minus_1 > 0 else float(feas[-1])
    else:
        target = drafted / n  # accepted = 0 says nothing about D: assume full-length drafts
    est = int(feas[np.argmin(np.abs(feas - target))])
    # accepted_per_pos for the estimate: round, then fix the sum within the rounding bounds
    lo_i, hi_i = (b[0].astype(np.int64) for b in _count_bounds(r, np.array([[est]], dtype=np.int64)))
    a = np.clip(np.rint(r[0] * est).astype(np.int64), lo_i, hi_i)
    resid = r[0] * est - a
    while a.sum() != accepted:
        if a.sum() < accepted:
            cand = np.where(a < hi_i, resid, -np.inf)
            j = int(np.argmax(cand))
            a[j] += 1
        else:
            cand = np.where(a > lo_i, -resid, -np.inf)
            j = int(np.argmax(cand))
            a[j] -= 1
        resid = r[0] * est - a
    a = np.sort(a)[::-1]  # bounds are non-increasing in i, so sorting stays within them
    return est, int(feas.min()), int(feas.max()), tuple(int(x) for x in a)


def _parse_rates(s: str) -> list[float]:
    return [float(x) for x in s.split(", ")]


def _parse_v1_line(m: re.Match, fmt: str, where: str, full_drafts: bool) -> tuple[str, SpecDecodeCounts, dict]:
    accepted, drafted = int(m["accepted"]), int(m["drafted"])
    rates = _parse_rates(m["rates"])
    n = len(rates)
    mal = float(m["mal"])
    ar = float(m["ar"])
    logged = {"mal": mal, "per_position_rates": tuple(rates), "avg_draft_acceptance_rate_pct": ar}
    if m.groupdict().get("acc_tput") is not None:
        logged.update(accepted_throughput_tokens_per_s=float(m["acc_tput"]),
                      drafted_throughput_tokens_per_s=float(m["draft_tput"]))
    if drafted == 0:
        if accepted:
            raise DataError(f"{where}: Accepted {accepted} tokens but Drafted 0")
        counts = SpecDecodeCounts(0, 0, 0, (0,) * n, source=where)
        return fmt, counts, logged
    if any(math.isnan(x) for x in rates) or math.isnan(mal):
        raise DataError(f"{where}: NaN rates with Drafted = {drafted} > 0")
    if not math.isnan(ar) and abs(ar - 100.0 * accepted / drafted) > 0.05 + 1e-6:
        raise DataError(f"{where}: printed draft acceptance rate {ar}% != 100 x Accepted/Drafted = "
                        f"{100.0 * accepted / drafted:.3f}%")
    if any(rates[i + 1] > rates[i] for i in range(n - 1)):
        raise DataError(f"{where}: per-position acceptance rates increase: {rates}")
    if fmt == FORMAT_V1:
        mal_minus_1 = mal - 1.0
    else:  # same layout in 0.8.5 (no bonus) and 0.9.x (bonus): tell them apart by sum of rates
        tol = 0.005 + n * 0.0005 + 1e-9
        s = sum(rates)
        no_bonus, bonus = abs(mal - s) <= tol, abs(mal - 1.0 - s) <= tol
        if bonus == no_bonus:
            raise DataError(f"{where}: MAL {mal} matches neither sum of per-position rates {s:.3f} "
                            f"(vLLM 0.8.x) nor 1 + that sum (vLLM 0.9.x)")
        fmt = FORMAT_V1_09 if bonus else FORMAT_V1_085
        mal_minus_1 = mal - 1.0 if bonus else mal
    est, lo, hi, per = _reconstruct_drafts(accepted=accepted, drafted=drafted, n=n,
                                           mal_minus_1=mal_minus_1, mal_half=0.005, rates=rates,
                                           full_drafts=full_drafts, where=where)
    counts = SpecDecodeCounts(est, drafted, accepted, per, source=where, num_drafts_range=(lo, hi))
    return fmt, counts, logged


def _parse_v0_line(m: re.Match, where: str) -> tuple[str, SpecDecodeCounts, dict]:
    k, accepted_any, drafted, emitted = (int(m[x]) for x in ("k", "accepted", "drafted", "emitted"))
    logged = {"draft_acceptance_rate": float(m["ar"]), "system_efficiency": float(m["eff"]),
              "num_accepted_tokens_any_position": accepted_any, "num_emitted_tokens": emitted}
    if k < 1:
        raise DataError(f"{where}: Number of speculative tokens must be >= 1, got {k}")
    if drafted % k:
        raise DataError(f"{where}: v0 draft tokens {drafted} not a multiple of k = {k} "
                        f"(v0 always drafts k tokens per sequence)")
    drafts = drafted // k
    prefix_accepted = emitted - drafts  # v0: emitted = accepted prefix + 1 per sequence
    if not 0 <= prefix_accepted <= accepted_any:
        raise DataError(f"{where}: emitted tokens {emitted} inconsistent with {drafts} drafts and "
                        f"{accepted_any} accepted tokens (need drafts <= emitted <= drafts + accepted)")
    if drafted and not math.isnan(float(m["ar"])) and abs(float(m["ar"]) - accepted_any / drafted) > 0.0005 + 1e-9:
        raise DataError(f"{where}: draft acceptance rate {m['ar']} != accepted/draft tokens "
                        f"{accepted_any / drafted:.4f}")
    if drafts and not math.isnan(float(m["eff"])) and abs(float(m["eff"]) - emitted / (drafts * (k + 1))) > 0.0005 + 1e-9:
        raise DataError(f"{where}: system efficiency {m['eff']} != emitted/(drafts (k+1)) "
                        f"{emitted / (drafts * (k + 1)):.4f}")
    counts = SpecDecodeCounts(drafts, drafted, prefix_accepted, (), source=where, num_speculative_tokens=k)
    return FORMAT_V0, counts, logged


@dataclass(frozen=True)
class SpecDecodeLog:
    """Spec-decode log lines of one log, see :func:`parse_spec_decode_log`.

    Attributes
    ----------
    records : tuple of LogRecord
    source : str
    """

    records: tuple
    source: str = ""

    def to_frame(self) -> pd.DataFrame:
        """One row per log line: ``line_no, process, engine, timestamp, format, num_drafts,
        num_drafts_lo, num_drafts_hi, num_draft_tokens, num_accepted_tokens, accepted_per_pos,
        logged_mal, mal`` (MAL recomputed from the counts; NaN for intervals without drafts)."""
        rows = []
        for r in self.records:
            c = r.counts
            lo, hi = c.num_drafts_range or (c.num_drafts, c.num_drafts)
            rows.append({"line_no": r.line_no, "process": r.process, "engine": r.engine,
                         "timestamp": r.timestamp, "format": r.format, "num_drafts": c.num_drafts,
                         "num_drafts_lo": lo, "num_drafts_hi": hi,
                         "num_draft_tokens": c.num_draft_tokens,
                         "num_accepted_tokens": c.num_accepted_tokens,
                         "accepted_per_pos": c.accepted_per_pos, "logged_mal": r.logged.get("mal"),
                         "mal": c.mal if c.num_drafts else float("nan")})
        return pd.DataFrame(rows)

    def _streams(self) -> dict:
        out: dict = {}
        for r in self.records:
            out.setdefault((r.process, r.engine), []).append(r)
        return out

    def by_engine(self) -> dict[str | None, SpecDecodeCounts]:
        """Counts per engine (summed over v1 intervals; last cumulative line for v0)."""
        out: dict = {}
        for (proc, eng), recs in self._streams().items():
            c = self._stream_total(recs)
            out[eng] = out[eng] + c if eng in out else c
        return out

    def _stream_total(self, recs: list) -> SpecDecodeCounts:
        if recs[0].format == FORMAT_V0:
            for a, b in zip(recs, recs[1:]):
                ca, cb = a.counts, b.counts
                if (cb.num_drafts < ca.num_drafts or cb.num_draft_tokens < ca.num_draft_tokens
                        or cb.num_accepted_tokens < ca.num_accepted_tokens):
                    raise DataError(f"{self.source}: v0 cumulative counters decreased from line "
                                    f"{a.line_no} to line {b.line_no} (engine restarted?)")
            return recs[-1].counts
        return sum(r.counts for r in recs)

    def total(self) -> SpecDecodeCounts:
        """All lines pooled by counts (accepted, drafted and drafts summed over intervals and
        engines; never an average of MALs).

        Raises
        ------
        NotCollectedError
            If the log has no spec-decode lines.
        DataError
            If N differs between lines or v0 and v1 lines are mixed.
        """
        if not self.records:
            raise NotCollectedError(f"{self.source}: no 'SpecDecoding metrics' lines in the log "
                                    f"(speculative decoding off, or log level above INFO)")
        fmts = {r.format == FORMAT_V0 for r in self.records}
        if len(fmts) > 1:
            raise DataError(f"{self.source}: log mixes v0 (cumulative) and v1 (interval) lines")
        tot = sum(self.by_engine().values())
        return SpecDecodeCounts(tot.num_drafts, tot.num_draft_tokens, tot.num_accepted_tokens,
                                tot.accepted_per_pos, source=self.source,
                                num_speculative_tokens=tot.num_speculative_tokens,
                                num_drafts_range=tot.num_drafts_range)


def parse_spec_decode_log(text: str | Iterable[str], *, source: str = "log",
                          assume_full_drafts: bool = False, strict: bool = True) -> SpecDecodeLog:
    """Parse vLLM spec-decode log lines (any surrounding log text is ignored).

    Layouts (field order and semantics read from the vLLM wheels named):

    * ``"v1"`` (0.10.2 .. 0.32.0): ``SpecDecoding metrics: Mean acceptance length: %.2f,
      Accepted throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s, Accepted: %d tokens,
      Drafted: %d tokens, Per-position acceptance rate: %.3f, ..., Avg Draft acceptance rate: %.1f%%``
    * ``"v1-0.9"`` (0.9.2) and ``"v1-0.8"`` (0.8.5): ``SpecDecoding metrics: Draft acceptance rate:
      %.1f%%, Mean acceptance length: %.2f, Accepted: %d tokens, Drafted: %d tokens,
      Per-position acceptance rate: ...``; 0.8.5 printed MAL = accepted/drafts (no bonus token),
      0.9 printed 1 + accepted/drafts; told apart by comparing MAL with the sum of the rates.
    * ``"v0"``: ``Speculative metrics: Draft acceptance rate: %.3f, System efficiency: %.3f,
      Number of speculative tokens: k, Number of accepted tokens: a, Number of draft tokens: t,
      Number of emitted tokens: e.`` -- cumulative since start; v0 always drafts k tokens, so
      drafts = t / k, and prefix-accepted tokens = e - drafts (v0's "accepted" counts accepted
      tokens at any position); no per-position counts.

    v1 lines hold interval counts and do not print the number of drafts D. It is reconstructed
    as the integer D (with ceil(Drafted/N) <= D <= Drafted) for which 1 + Accepted/D rounds to
    the printed MAL and integer a_i / D round to every printed per-position rate with
    sum(a_i) = Accepted (naive D = Accepted/(MAL-1) is off by up to ~0.5 % x D/(MAL-1) from the
    %.2f rounding). If several D fit, the one nearest Accepted/(MAL-1) is used (Drafted/N when
    Accepted = 0), the range is kept in ``counts.num_drafts_range`` and an IngestWarning is issued.
    N = 1 (or ``assume_full_drafts``, for drafters that always propose N tokens: draft_model,
    EAGLE, MTP) makes D exact.

    Engines: each engine's ``SpecDecoding`` line follows its ``Engine NNN:`` throughput line
    (``vllm/v1/metrics/loggers.py``, ``LoggingStatLogger.log``); lines are attributed to the
    last such line of the same process.

    Parameters
    ----------
    text : str or iterable of str
        Log text or lines.
    source : str
    assume_full_drafts : bool
        Every draft has exactly N tokens (D = Drafted / N).
    strict : bool
        True: a line with the marker that matches no layout (truncated, edited) raises
        DataError. False: it is skipped with an IngestWarning.

    Returns
    -------
    SpecDecodeLog

    Raises
    ------
    DataError
        Malformed/truncated lines (strict), numbers inconsistent with each other.
    """
    lines = text.splitlines() if isinstance(text, str) else list(text)
    records = []
    engine_of: dict = {}
    ambiguous = []
    for i, line in enumerate(lines, start=1):
        pid_m = _RE_PID.search(line)
        proc = pid_m.group(1) if pid_m else None
        em = _RE_ENGINE.search(line)
        if em and not any(mk in line for mk in _MARKERS):
            engine_of[proc] = em.group(1)
            continue
        am = _RE_AGG.search(line)
        if am:
            engine_of[proc] = "aggregated"
            continue
        if not any(mk in line for mk in _MARKERS):
            continue
        where = f"{source}:{i}"
        try:
            m = _RE_V1.search(line)
            if m:
                fmt, counts, logged = _parse_v1_line(m, FORMAT_V1, where, assume_full_drafts)
            elif (m := _RE_V1_OLD.search(line)):
                fmt, counts, logged = _parse_v1_line(m, FORMAT_V1_09, where, assume_full_drafts)
            elif (m := _RE_V0.search(line)):
                fmt, counts, logged = _parse_v0_line(m, where)
            else:
                raise DataError(f"{where}: spec-decode log line matches no known vLLM layout "
                                f"(truncated or edited?): {line.strip()[:300]!r}")
        except DataError as exc:
            if strict:
                raise
            warnings.warn(f"skipped: {exc}", IngestWarning, stacklevel=2)
            continue
        if not counts.exact:
            ambiguous.append((i, counts.num_drafts, counts.num_drafts_range))
        tm = _RE_TIME.search(line)
        records.append(LogRecord(i, engine_of.get(proc), proc, tm.group(1) if tm else None, fmt,
                                 counts, logged))
    if ambiguous:
        warnings.warn(
            f"{source}: number of drafts only known to within rounding on {len(ambiguous)} line(s) "
            f"(line, estimate, range): {ambiguous[:5]}{' ...' if len(ambiguous) > 5 else ''}",
            IngestWarning, stacklevel=2)
    return SpecDecodeLog(tuple(records), source)


def read_spec_decode_log(path: str | os.PathLike, **kwargs) -> SpecDecodeLog:
    """Read a vLLM log file; see :func:`parse_spec_decode_log` (same keyword arguments)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        kwargs.setdefault("source", os.path.basename(os.fspath(path)))
        return parse_spec_decode_log(fh.read(), **kwargs)
