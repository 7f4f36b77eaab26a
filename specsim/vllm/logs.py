"""The periodic ``SpecDecoding metrics:`` log line of vLLM into counts (layer 1, vLLM formats):
every V1 layout from the early 2025 ones to 0.32 (``vllm/v1/spec_decode/metrics.py``
``SpecDecodingLogging.log``), lines quoted with a cut per-position list, and the v0
``Speculative metrics:`` line; see :func:`parse_spec_decode_log`.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from specsim.errors import DataError, NotCollectedError, SpecsimValueError
from specsim.vllm.counts import IngestWarning, SpecDecodeCounts

# --------------------------------------------------------------------------------------------
# log lines: fields after the marker, read key by key; the key sequence names the layout
# --------------------------------------------------------------------------------------------
_NUM = r"(?:\d+\.\d+|nan|inf)"
_RATE = r"(?:\d\.\d{3}|nan)"
_PCT = r"(?:\d+(?:\.\d+)?|nan)"
# key -> (field name, value pattern).  Separators are read leniently: ``394.48tokens/s``
# (no space) and ``0.000,0.000`` occur in pasted lines.
_FIELDS = {
    "Draft acceptance rate": ("ar", r"(?P<v>" + _PCT + r")(?P<pct>%)?"),
    "Mean acceptance length": ("mal", r"(?P<v>" + _NUM + r")"),
    "Accepted throughput": ("acc_tput", r"(?P<v>" + _NUM + r")\s*tokens/s"),
    "Drafted throughput": ("draft_tput", r"(?P<v>" + _NUM + r")\s*tokens/s"),
    "Accepted": ("accepted", r"(?P<v>\d+)\s*tokens"),
    "Drafted": ("drafted", r"(?P<v>\d+)\s*tokens"),
    "Per-position acceptance rate": (
        "rates", r"(?P<v>" + _RATE + r"(?:\s*,\s*" + _RATE + r")*)(?P<elided>\s*,?\s*(?:\.\.\.|\u2026))?"),
    "Avg Draft acceptance rate": ("avg_ar", r"(?P<v>" + _PCT + r")(?P<pct>%)"),
    "System efficiency": ("eff", r"(?P<v>\d\.\d{3}|nan)"),
    "Number of speculative tokens": ("k", r"(?P<v>\d+)"),
    "Number of accepted tokens": ("n_accepted", r"(?P<v>\d+)"),
    "Number of draft tokens": ("n_drafted", r"(?P<v>\d+)"),
    "Number of emitted tokens": ("n_emitted", r"(?P<v>\d+)"),
}
_RE_KEY = re.compile(r"\s*(" + "|".join(re.escape(k) for k in sorted(_FIELDS, key=len, reverse=True))
                     + r"):\s*")
_RE_VALUE = {k: re.compile(v) for k, (_, v) in _FIELDS.items()}
_RE_SEP = re.compile(r"\s*,\s*")
_RE_ENGINE = re.compile(r"Engine (\d+): ")
_RE_AGG = re.compile(r"(\d+) Engines Aggregated: ")
_RE_PID = re.compile(r"\(([^()]*pid=\d+)\)")
_RE_TIME = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d)")
_RE_LOGLINE = re.compile(r"^\s*(?:\([^()]*\)\s*)?(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b")
_RE_SPEC_CONFIGURED = re.compile(r"speculative_config['\"]?\s*[:=]\s*(?!None)[{A-Za-z]")
#: an HTTP access line of a generation request (uvicorn's, printed when the response starts)
_RE_GENERATION_REQUEST = re.compile(
    r'"POST \S*/(?:v1/(?:chat/)?completions|v1/responses|v1/messages|generate)(?:\?\S*)? HTTP/[\d.]+" 2\d\d')
#: the requests running when vLLM's stats logger printed its interval line (vllm/v1/metrics/loggers.py,
#: "Engine 000: Avg prompt throughput: ..., Running: 4 reqs, ..."), printed just before its SpecDecoding line
_RE_RUNNING = re.compile(r"(?:Engine \d+|Engines Aggregated): .*\bRunning: (\d+) reqs")
#: why a log's counts miss the drafts after its last metrics line, and where to count such a run instead
#: (the two warnings of :func:`_parse_lines` about it)
_LOGGED_PER_INTERVAL = ("vLLM logs these counts per interval (every 10 s by default) and logs none when the server "
                        "stops")
_COUNT_RUN_FROM = ("count a run from the /metrics scrape taken after it (with the one taken before it as --before) or "
                   "from its vllm bench serve result")
_MARK_V1, _MARK_OLD = "SpecDecoding metrics:", "Speculative metrics:"
_MARKERS = (_MARK_V1, _MARK_OLD)

FORMAT_V1 = "v1"                     # vLLM >= 0.10.2: MAL first, throughputs, Avg AR last
FORMAT_V1_PR24127 = "v1-pr24127"     # 2025-09 (vLLM PR#24127): AR first, MAL, throughputs, counts, rates
FORMAT_V1_09 = "v1-0.9"              # AR first, MAL includes the bonus token
FORMAT_V1_085 = "v1-0.8"             # AR first, MAL = accepted/drafts (no bonus token)
FORMAT_V1_EARLY = "v1-early"         # 2025-04: AR (%), Accepted, Drafted only (no drafts, no N)
FORMAT_V1_PRE15902 = "v1-pre15902"   # V1 before PR#15902: "Speculative metrics:" AR (fraction), tokens
FORMAT_V0 = "v0"                     # "Speculative metrics:", cumulative

# (marker, key sequence) -> format.  A line whose per-position list was cut with "..." (by the
# source quoting it) may stop there: a prefix of a layout ending in "rates".
_LAYOUTS = {
    (_MARK_V1, ("mal", "acc_tput", "draft_tput", "accepted", "drafted", "rates", "avg_ar")): FORMAT_V1,
    (_MARK_V1, ("ar", "mal", "acc_tput", "draft_tput", "accepted", "drafted", "rates")): FORMAT_V1_PR24127,
    (_MARK_V1, ("ar", "mal", "accepted", "drafted", "rates")): FORMAT_V1_09,
    (_MARK_V1, ("ar", "accepted", "drafted")): FORMAT_V1_EARLY,
    (_MARK_OLD, ("ar", "n_accepted", "n_drafted")): FORMAT_V1_PRE15902,
    (_MARK_OLD, ("ar", "eff", "k", "n_accepted", "n_drafted", "n_emitted")): FORMAT_V0,
}
# how the line must end after its last field (vLLM's format strings): v0 ends with ".", the
# pre-PR#15902 V1 line with ", "; a line cut mid-field then matches no layout.
_ENDINGS = {FORMAT_V0: ".", FORMAT_V1_PRE15902: ","}
_PCT_AR = {FORMAT_V1_PR24127, FORMAT_V1_09, FORMAT_V1_EARLY}
_MAX_COUNT = 2 ** 53  # larger token counts in one line are not a real log (and overflow int64)


def _read_fields(line: str, where: str) -> tuple[str, dict, bool]:
    """Split a spec-decode line into its fields; return (format, {field: match}, elided).

    Raises DataError naming the line when it matches no known layout (cut mid-line, edited)."""
    marker = _MARK_V1 if _MARK_V1 in line else _MARK_OLD
    body = line[line.index(marker) + len(marker):]
    pos, keys, vals, elided, ending = 0, [], {}, False, ""

    def bad(why: str) -> DataError:
        return DataError(f"{where}: spec-decode log line matches no known vLLM layout ({why}; "
                         f"truncated or edited?): {line.strip()[:300]!r}")

    while True:
        km = _RE_KEY.match(body, pos)
        if not km:
            raise bad(f"unexpected text at {body[pos:pos + 30].strip()!r}" if body[pos:].strip()
                      else "line ends after a separator")
        key = km.group(1)
        name = _FIELDS[key][0]
        vm = _RE_VALUE[key].match(body, km.end())
        if not vm:
            raise bad(f"bad value for {key!r}")
        if name in vals:
            raise bad(f"{key!r} twice")
        keys.append(name)
        vals[name] = vm
        pos = vm.end()
        if name == "rates" and vm.group("elided"):
            elided = True
            if body[pos:].strip():
                raise bad("text after '...'")
            break
        sm = _RE_SEP.match(body, pos)
        rest = body[pos:].strip()
        if not rest:
            break
        if rest in (".", ","):
            ending = rest
            break
        if not sm:
            raise bad(f"unexpected text at {body[pos:pos + 30].strip()!r}")
        pos = sm.end()
        if not body[pos:].strip():
            ending = ","
            break
    seq = tuple(keys)
    fmt = _LAYOUTS.get((marker, seq))
    if fmt is None and elided:
        for (mk, lay), f in _LAYOUTS.items():
            if mk == marker and "rates" in lay and lay[: lay.index("rates") + 1] == seq:
                fmt = f
    if fmt is None:
        raise bad(f"fields {list(seq)} after {marker!r}")
    if not elided and ending != _ENDINGS.get(fmt, ""):
        raise bad(f"line ends with {ending or 'no punctuation'!r}, the {fmt} layout ends with "
                  f"{_ENDINGS.get(fmt) or 'its last field'!r}")
    has_pct = vals["ar"].group("pct") is not None if "ar" in vals else None
    if has_pct is not None and has_pct != (fmt in _PCT_AR):
        raise bad("draft acceptance rate " + ("in percent" if has_pct else "without '%'"))
    return fmt, vals, elided


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
        ``"v1"``, ``"v1-pr24127"``, ``"v1-0.9"``, ``"v1-0.8"``, ``"v1-early"``,
        ``"v1-pre15902"`` or ``"v0"`` (see :func:`parse_spec_decode_log`).
    counts : SpecDecodeCounts
        Interval counts for v1 formats; cumulative counts for v0.  ``counts.num_drafts`` is None
        for the early V1 layouts (not printed) and ``counts.num_speculative_tokens`` is None
        when the layout or a cut per-position list does not tell N.
    logged : dict
        The values as printed (MAL, rates, throughputs in tokens/s, ...).
    elided : bool
        The per-position list was cut with ``...`` (by whoever quoted the line): the leading rates
        are in ``logged["per_position_rates"]``, N and per-position counts are unknown
        (``logged["num_speculative_tokens_min"]`` bounds N from below when drafts are known).
    """

    line_no: int
    engine: str | None
    process: str | None
    timestamp: str | None
    format: str
    counts: SpecDecodeCounts
    logged: dict = field(default_factory=dict)
    elided: bool = False


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
    if hi - lo > 5_000_000 or (hi - lo + 1) * n > 10_000_000:
        raise DataError(f"{where}: number of drafts too weakly determined ({lo}..{hi}, N = {n})")
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
    return [float(x) for x in re.split(r"\s*,\s*", s.strip())]


def _count(vm: re.Match, what: str, where: str) -> int:
    v = int(vm.group("v"))
    if v > _MAX_COUNT:
        raise DataError(f"{where}: {what} = {v} is implausibly large for one log line")
    return v


def _check_ar(ar: float, accepted: int, drafted: int, where: str, pct: bool) -> None:
    """The printed token acceptance rate (``%.1f%%`` or ``%.3f``) must round from accepted/drafted."""
    if drafted and not math.isnan(ar):
        exact = accepted / drafted * (100.0 if pct else 1.0)
        tol = (0.05 if pct else 0.0005) + 1e-6
        if abs(ar - exact) > tol:
            unit = "%" if pct else ""
            raise DataError(f"{where}: printed draft acceptance rate {ar}{unit} != "
                            f"{'100 x ' if pct else ''}Accepted/Drafted = {exact:.3f}{unit}")


def _reconstruct_elided(*, accepted: int, drafted: int, mal_minus_1: float, rates: list[float],
                        where: str) -> tuple[int, int, int, int]:
    """Drafts D from a line whose per-position list was cut (N unknown): every D in
    [1, Drafted] whose MAL rounds to the printed one and for which integer a_i / D round to the
    printed leading rates with sum(a_i) <= Accepted (later positions take the rest, each at most
    a_k of the last printed one).  Returns (estimate, lo, hi, lower bound of N at the estimate)."""
    eps = 1e-9
    lo, hi = 1, drafted
    top, bot = mal_minus_1 + 0.005 + eps, mal_minus_1 - 0.005 - eps
    lo = max(lo, math.ceil(accepted / top - eps)) if top > 0 else hi + 1
    if bot > 0:
        hi = min(hi, math.floor(accepted / bot + eps))
    if lo > hi:
        raise DataError(f"{where}: no number of drafts is consistent with MAL {1 + mal_minus_1:.2f}, "
                        f"Accepted {accepted}, Drafted {drafted}")
    if hi - lo > 5_000_000 or (hi - lo + 1) * len(rates) > 10_000_000:
        raise DataError(f"{where}: number of drafts too weakly determined ({lo}..{hi})")
    D = np.arange(lo, hi + 1, dtype=np.int64)[:, None]
    r = np.asarray(rates, dtype=float)[None, :]
    a_lo, a_hi = _count_bounds(r, D)
    # the rest of Accepted goes to later positions, each at most the last printed count: with that count 0
    # the printed ones must hold all of Accepted (some a_i in [a_lo, a_hi] summing to it)
    rest_ok = (a_hi.sum(1) >= accepted) | (a_hi[:, -1] > 0)
    ok = np.all(a_lo <= a_hi, axis=1) & (a_lo.sum(1) <= accepted) & rest_ok
    feas = D[ok, 0]
    if feas.size == 0:
        raise DataError(f"{where}: no number of drafts in [{lo}, {hi}] reproduces the printed "
                        f"leading per-position rates {rates} with Accepted = {accepted}")
    target = accepted / mal_minus_1 if mal_minus_1 > 0 else float(feas[-1])
    est = int(feas[np.argmin(np.abs(feas - target))])
    # N >= printed positions + what the rest of Accepted needs (each later position holds at
    # most the last printed count), and N >= Drafted / D; the bound is the least over feasible D
    hi_ok, d_ok = a_hi[ok], feas.astype(np.int64)
    rem = np.maximum(accepted - hi_ok.sum(1), 0)
    last = np.maximum(hi_ok[:, -1], 1)
    extra = np.where(rem > 0, -(-rem.astype(np.int64) // last.astype(np.int64)), 0)
    n_min = np.maximum(len(rates) + extra, -(-drafted // d_ok))
    return est, int(feas.min()), int(feas.max()), int(n_min.min())


def _parse_v1_line(fmt: str, v: dict, elided: bool, where: str,
                   full_drafts: bool) -> tuple[str, SpecDecodeCounts, dict]:
    accepted = _count(v["accepted"], "Accepted", where)
    drafted = _count(v["drafted"], "Drafted", where)
    if accepted > drafted:
        raise DataError(f"{where}: Accepted {accepted} tokens > Drafted {drafted} tokens")
    logged: dict = {}
    if "ar" in v:
        logged["draft_acceptance_rate_pct"] = float(v["ar"]["v"])
        _check_ar(float(v["ar"]["v"]), accepted, drafted, where, pct=True)
    if "avg_ar" in v:
        logged["avg_draft_acceptance_rate_pct"] = float(v["avg_ar"]["v"])
        _check_ar(float(v["avg_ar"]["v"]), accepted, drafted, where, pct=True)
    if "acc_tput" in v:
        logged.update(accepted_throughput_tokens_per_s=float(v["acc_tput"]["v"]),
                      drafted_throughput_tokens_per_s=float(v["draft_tput"]["v"]))
    if fmt == FORMAT_V1_EARLY:  # no MAL, no rates: drafts and N are not in the line
        counts = SpecDecodeCounts(None, drafted, accepted, (), source=where,
                                  not_collected=("num_speculative_tokens",))
        return fmt, counts, logged
    rates = _parse_rates(v["rates"]["v"])
    n = len(rates)
    mal = float(v["mal"]["v"])
    logged.update(mal=mal, per_position_rates=tuple(rates))
    if elided:
        logged["per_position_elided"] = True
    if drafted == 0:
        if elided:
            counts = SpecDecodeCounts(0, 0, 0, (), source=where, not_collected=("num_speculative_tokens",))
        else:
            counts = SpecDecodeCounts(0, 0, 0, (0,) * n, source=where)
        return fmt, counts, logged
    if any(math.isnan(x) for x in rates) or math.isnan(mal) or math.isinf(mal):
        raise DataError(f"{where}: NaN rates with Drafted = {drafted} > 0")
    if any(x > 1.0 for x in rates):
        raise DataError(f"{where}: per-position acceptance rate above 1: {rates}")
    if any(rates[i + 1] > rates[i] for i in range(n - 1)):
        raise DataError(f"{where}: per-position acceptance rates increase: {rates}")
    if fmt == FORMAT_V1_09 and elided:
        # 0.8.5 (no bonus) or 0.9 (bonus)? Only a cut list's sum exceeding MAL - 1 settles it.
        if sum(rates) > mal - 1.0 + 0.005 + n * 0.0005:
            fmt, mal_minus_1 = FORMAT_V1_085, mal
        else:
            logged["num_drafts_unknown"] = "vLLM 0.8.5 or 0.9 layout with a cut list: MAL may or may not count the bonus token"
            counts = SpecDecodeCounts(None, drafted, accepted, (), source=where,
                                      not_collected=("num_speculative_tokens",))
            return fmt, counts, logged
    elif fmt in (FORMAT_V1, FORMAT_V1_PR24127):
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
    if elided:
        if accepted == 0:  # MAL 1.00 says nothing about D, and N is unknown
            counts = SpecDecodeCounts(None, drafted, 0, (), source=where,
                                      not_collected=("num_speculative_tokens",))
            return fmt, counts, logged
        est, lo, hi, n_min = _reconstruct_elided(accepted=accepted, drafted=drafted,
                                                 mal_minus_1=mal_minus_1, rates=rates, where=where)
        logged["num_speculative_tokens_min"] = n_min
        counts = SpecDecodeCounts(est, drafted, accepted, (), source=where, num_drafts_range=(lo, hi),
                                  not_collected=("num_speculative_tokens",))
        return fmt, counts, logged
    est, lo, hi, per = _reconstruct_drafts(accepted=accepted, drafted=drafted, n=n,
                                           mal_minus_1=mal_minus_1, mal_half=0.005, rates=rates,
                                           full_drafts=full_drafts, where=where)
    counts = SpecDecodeCounts(est, drafted, accepted, per, source=where, num_drafts_range=(lo, hi))
    return fmt, counts, logged


def _parse_pre15902_line(v: dict, where: str) -> tuple[str, SpecDecodeCounts, dict]:
    accepted = _count(v["n_accepted"], "Number of accepted tokens", where)
    drafted = _count(v["n_drafted"], "Number of draft tokens", where)
    if accepted > drafted:
        raise DataError(f"{where}: accepted tokens {accepted} > draft tokens {drafted}")
    ar = float(v["ar"]["v"])
    _check_ar(ar, accepted, drafted, where, pct=False)
    counts = SpecDecodeCounts(None, drafted, accepted, (), source=where,
                              not_collected=("num_speculative_tokens",))
    return FORMAT_V1_PRE15902, counts, {"draft_acceptance_rate": ar}


def _parse_v0_line(v: dict, where: str) -> tuple[str, SpecDecodeCounts, dict]:
    k = _count(v["k"], "Number of speculative tokens", where)
    accepted_any = _count(v["n_accepted"], "Number of accepted tokens", where)
    drafted = _count(v["n_drafted"], "Number of draft tokens", where)
    emitted = _count(v["n_emitted"], "Number of emitted tokens", where)
    ar, eff = float(v["ar"]["v"]), float(v["eff"]["v"])
    logged = {"draft_acceptance_rate": ar, "system_efficiency": eff,
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
    if accepted_any > drafted:
        raise DataError(f"{where}: accepted tokens {accepted_any} > draft tokens {drafted}")
    if drafted and not math.isnan(ar) and abs(ar - accepted_any / drafted) > 0.0005 + 1e-9:
        raise DataError(f"{where}: draft acceptance rate {ar} != accepted/draft tokens "
                        f"{accepted_any / drafted:.4f}")
    if drafts and not math.isnan(eff) and abs(eff - emitted / (drafts * (k + 1))) > 0.0005 + 1e-9:
        raise DataError(f"{where}: system efficiency {eff} != emitted/(drafts (k+1)) "
                        f"{emitted / (drafts * (k + 1)):.4f}")
    counts = SpecDecodeCounts(drafts, drafted, prefix_accepted, (), source=where, num_speculative_tokens=k)
    return FORMAT_V0, counts, logged


def _parse_line(line: str, where: str, full_drafts: bool) -> tuple[str, SpecDecodeCounts, dict, bool]:
    fmt, v, elided = _read_fields(line, where)
    if fmt == FORMAT_V0:
        return (*_parse_v0_line(v, where), False)
    if fmt == FORMAT_V1_PRE15902:
        return (*_parse_pre15902_line(v, where), False)
    return (*_parse_v1_line(fmt, v, elided, where, full_drafts), elided)


@dataclass(frozen=True)
class SpecDecodeLog:
    """Spec-decode log lines of one log, see :func:`parse_spec_decode_log`.

    Attributes
    ----------
    records : tuple of LogRecord
    source : str
    skipped : tuple of (int, str)
        Lenient mode (``strict=False``): the spec-decode lines skipped as malformed, as
        (1-based line number, reason).  Empty in strict mode (a bad line raises).
    note : str
        Why there are no records when there are none (speculative decoding configured but stats
        logging off, ...); used in the NotCollectedError of :meth:`total`.
    """

    records: tuple
    source: str = ""
    skipped: tuple = ()
    note: str = ""

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
            If the log has no spec-decode lines (a vLLM log of a run without speculative decoding,
            or with stats logging off).
        DataError
            If N differs between lines, v0 and v1 lines are mixed, or (lenient mode) every
            spec-decode line was skipped as malformed.
        """
        if not self.records and self.skipped:
            raise DataError(f"{self.source}: every spec-decode line was malformed and skipped: lines "
                            f"{[i for i, _ in self.skipped][:20]} (first: {self.skipped[0][1]})")
        if not self.records:
            raise NotCollectedError(f"{self.source}: {self.note or _NOTE_OFF}")
        fmts = {r.format == FORMAT_V0 for r in self.records}
        if len(fmts) > 1:
            raise DataError(f"{self.source}: log mixes v0 (cumulative) and v1 (interval) lines")
        tot = sum(self.by_engine().values())
        return dataclasses.replace(tot, source=self.source)


_NOTE_OFF = ("a vLLM log without 'SpecDecoding metrics' lines: this run had speculative decoding off "
             "(or stats logging disabled, or log level above INFO)")


def _first_line(lines: list[str]) -> str:
    for ln in lines:
        if ln.strip():
            return repr(ln.strip()[:80])
    return "''"


def _not_a_log(lines: list[str], source: str) -> DataError:
    head = next((ln.strip() for ln in lines if ln.strip()), "")
    hint = ""
    if head[:1] in "{[":
        hint = "; it looks like JSON (a bench result or LLM.get_metrics() dump?)"
    elif head.startswith(("# HELP", "# TYPE", "vllm:")):
        hint = "; it looks like Prometheus /metrics text"
    return DataError(f"{source}: not a vLLM log, no line has a log-level prefix or a spec-decode "
                     f"marker (first line {_first_line(lines)}){hint}")


def parse_spec_decode_log(text: str | Iterable[str], *, source: str = "log",
                          assume_full_drafts: bool = False, strict: bool = True) -> SpecDecodeLog:
    """Parse vLLM spec-decode log lines (any surrounding log text is ignored).

    Layouts (field order and semantics from the vLLM wheels named, or from the upstream format
    string of the time where marked; each field is ``Key: value`` and fields are read key by
    key, so ``394.48tokens/s`` and ``0.000,0.000`` without spaces are read too):

    * ``"v1"`` (0.10.2 .. 0.32.0, also vllm-ascend 2026): ``SpecDecoding metrics: Mean acceptance
      length: %.2f, Accepted throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s,
      Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %.3f, ...,
      Avg Draft acceptance rate: %.1f%%``
    * ``"v1-pr24127"`` (2025-09, vLLM PR#24127 added the throughputs; quoted line):
      ``Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f, Accepted throughput: ...,
      Drafted throughput: ..., Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance
      rate: ...``; MAL counts the bonus token (as from 0.9 on).
    * ``"v1-0.9"`` (0.9.2) and ``"v1-0.8"`` (0.8.5): ``SpecDecoding metrics: Draft acceptance rate:
      %.1f%%, Mean acceptance length: %.2f, Accepted: %d tokens, Drafted: %d tokens,
      Per-position acceptance rate: ...``; 0.8.5 printed MAL = accepted/drafts (no bonus token),
      0.9 printed 1 + accepted/drafts; told apart by comparing MAL with the sum of the rates.
    * ``"v1-early"`` (2025-03/04, upstream format string): ``SpecDecoding metrics: Draft acceptance
      rate: %.1f%%, Accepted: %d tokens, Drafted: %d tokens`` -- no drafts, no N: the counts have
      ``num_drafts = None`` (MAL unknown, never zero) and only the token acceptance rate.
    * ``"v1-pre15902"`` (V1 before PR#15902, quoted line): ``Speculative metrics: Draft acceptance
      rate: %.3f, Number of accepted tokens: %d, Number of draft tokens: %d, `` -- likewise
      without drafts.  Read as interval counts like every V1 line (an assumption: the V1
      logger of the time reset its counts after each log; not checkable from a wheel here).
    * ``"v0"``: ``Speculative metrics: Draft acceptance rate: %.3f, System efficiency: %.3f,
      Number of speculative tokens: k, Number of accepted tokens: a, Number of draft tokens: t,
      Number of emitted tokens: e.`` -- cumulative since start; v0 always drafts k tokens, so
      drafts = t / k, and prefix-accepted tokens = e - drafts (v0's "accepted" counts accepted
      tokens at any position); no per-position counts.  Reading v0 lines issues one
      IngestWarning saying so, with the last line's numbers.

    A per-position list cut with ``...`` (lines quoted in issues) is read as far as it goes and
    flagged (``LogRecord.elided``, an IngestWarning): N and the per-position counts are then
    unknown (``counts.num_speculative_tokens`` None), drafts are reconstructed from MAL and the
    leading rates.  A line cut without ``...`` (a truncated file) matches no layout.

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
        True: a line with the marker that matches no layout (truncated, edited) or whose numbers
        disagree raises DataError naming the line. False: it is skipped; the result's ``skipped``
        lists (line number, reason) and one IngestWarning names the line numbers.

    Warns
    -----
    IngestWarning
        Lines skipped (lenient mode), drafts known only within rounding, per-position lists cut
        with ``...``, and v0 lines (their counts are rebuilt, not logged: drafts = t / k,
        accepted prefix = e - drafts; no per-position acceptance).

    Returns
    -------
    SpecDecodeLog
        A file truncated at a line boundary is a valid shorter log.  No records: ``total()``
        raises NotCollectedError (speculative decoding off / stats logging disabled).

    Raises
    ------
    DataError
        Empty input ("empty"); text that is not a vLLM log ("not a vLLM log (first line ...)");
        malformed/truncated lines (strict), numbers inconsistent with each other.
    """
    if isinstance(text, (bytes, bytearray)):
        raise SpecsimValueError("text", "must be the log text (str) or its lines, not bytes; "
                                "decode it or use read_spec_decode_log(path)")
    lines = text.splitlines() if isinstance(text, str) else [str(x) for x in text]
    return _parse_lines(lines, source=source, assume_full_drafts=assume_full_drafts, strict=strict,
                        last_line_cut=False)


def _running_at_last_interval(records, running) -> list[tuple[int, int, str | None]]:
    """``(line, requests running, engine)`` of each engine whose last spec-decode metrics line was logged with
    an interval line showing requests running (``Running: K reqs``, K > 0): the interval line of the same engine
    just before it (with data parallelism each engine logs its own pair; a record of no known engine takes the
    interval line just before it, whichever engine's)."""
    last: dict = {}
    for r in records:
        last[r.engine] = r.line_no
    out = []
    for engine, line_no in last.items():
        ks = [(k, e) for i, k, e in running if i < line_no and (engine is None or e == engine)]
        if ks and ks[-1][0] > 0:
            out.append((line_no, ks[-1][0], ks[-1][1]))
    return sorted(out)


def _parse_lines(lines: list[str], *, source: str, assume_full_drafts: bool, strict: bool,
                 last_line_cut: bool) -> SpecDecodeLog:
    if not any(ln.strip() for ln in lines):
        raise DataError(f"{source}: empty ({'no lines' if not lines else 'only blank lines'}): "
                        f"not a vLLM log")
    records, skipped, ambiguous, elided = [], [], [], []
    requests: list[int] = []  # line numbers of generation requests (HTTP access lines)
    # (line number, requests running, engine: "000".. or "aggregated") of the stats logger's interval lines
    running: list[tuple[int, int, str | None]] = []
    engine_of: dict = {}
    log_like = False
    configured = None
    for i, line in enumerate(lines, start=1):
        has_marker = any(mk in line for mk in _MARKERS)
        if not log_like and (has_marker or _RE_LOGLINE.match(line)):
            log_like = True
        if configured is None and _RE_SPEC_CONFIGURED.search(line):
            configured = i
        if _RE_GENERATION_REQUEST.search(line):
            requests.append(i)
        em = _RE_ENGINE.search(line)
        if (rm := _RE_RUNNING.search(line)) and not has_marker:
            running.append((i, int(rm.group(1)), em.group(1) if em else "aggregated"))
        pid_m = _RE_PID.search(line)
        proc = pid_m.group(1) if pid_m else None
        if em and not has_marker:
            engine_of[proc] = em.group(1)
            continue
        if _RE_AGG.search(line) and not has_marker:
            engine_of[proc] = "aggregated"
            continue
        if not has_marker:
            continue
        where = f"{source}:{i}"
        try:
            if last_line_cut and i == len(lines):
                raise DataError(f"{where}: the last line has no line end (file cut mid-line?): "
                                f"{line.strip()[:300]!r}")
            fmt, counts, logged, cut = _parse_line(line, where, assume_full_drafts)
        except DataError as exc:
            if strict:
                raise
            skipped.append((i, str(exc)))
            continue
        if not counts.exact:
            ambiguous.append((i, counts.num_drafts, counts.num_drafts_range))
        if cut:
            elided.append(i)
        tm = _RE_TIME.search(line)
        records.append(LogRecord(i, engine_of.get(proc), proc, tm.group(1) if tm else None, fmt,
                                 counts, logged, cut))
    if not log_like:
        raise _not_a_log(lines, source)
    if skipped:
        nums = [i for i, _ in skipped]
        warnings.warn(f"{source}: skipped {len(skipped)} malformed spec-decode line(s): lines "
                      f"{nums[:20]}{' ...' if len(nums) > 20 else ''} (first: {skipped[0][1]})",
                      IngestWarning, stacklevel=3)
    if ambiguous:
        warnings.warn(
            f"{source}: number of drafts only known to within rounding on {len(ambiguous)} line(s) "
            f"(line, estimate, range): {ambiguous[:5]}{' ...' if len(ambiguous) > 5 else ''}",
            IngestWarning, stacklevel=3)
    if elided:
        warnings.warn(f"{source}: per-position list cut with '...' on line(s) {elided[:20]}: read as "
                      f"far as printed; N and per-position counts unknown", IngestWarning, stacklevel=3)
    if records and (late := [i for i in requests if i > records[-1].line_no]):
        warnings.warn(
            f"{source}: {len(late)} generation request(s) answered after the last spec-decode metrics line (line "
            f"{records[-1].line_no}; requests on lines {late[:5]}{' ...' if len(late) > 5 else ''}): "
            f"{_LOGGED_PER_INTERVAL}, so the drafts of those requests are not in these counts; {_COUNT_RUN_FROM}",
            IngestWarning, stacklevel=3)
    elif records and (busy := _running_at_last_interval(records, running)):
        # no request line after it (a streamed response's access line is printed when it starts), but the
        # interval line logged with an engine's last metrics line had requests running: their later drafts
        # are in no logged interval
        several = len({r.engine for r in records}) > 1  # data parallelism: name each engine
        at = "; ".join(f"line {n}, {f'engine {e}' if several else 'its'} interval's 'Running: {k} reqs'"
                       for n, k, e in busy)
        warnings.warn(
            f"{source}: {sum(k for _, k, _ in busy)} request(s) were running at the last spec-decode metrics "
            f"line{'s' if len(busy) > 1 else ''} ({at}): {_LOGGED_PER_INTERVAL}, so what those requests drafted "
            f"after it is not in these counts; {_COUNT_RUN_FROM}", IngestWarning, stacklevel=3)
    v0 = [r for r in records if r.format == FORMAT_V0]
    if v0:
        last = v0[-1]
        c, lg = last.counts, last.logged
        warnings.warn(
            f"{source}: vLLM V0 'Speculative metrics:' line(s) (cumulative since start; the last "
            f"line of each engine is its total): counts rebuilt from the logged totals, as V0 "
            f"drafts k tokens per sequence and emits the accepted prefix + 1 per sequence: "
            f"drafts = Number of draft tokens / Number of speculative tokens, accepted = Number "
            f"of emitted tokens - drafts (V0's Number of accepted tokens counts accepted tokens at "
            f"any position, not the prefix); line {last.line_no}: {c.num_draft_tokens} / "
            f"{c.num_speculative_tokens} = {c.num_drafts} drafts, {lg['num_emitted_tokens']} - "
            f"{c.num_drafts} = {c.num_accepted_tokens} accepted (logged accepted "
            f"{lg['num_accepted_tokens_any_position']}); per-position acceptance is not in V0 "
            f"lines: not available", IngestWarning, stacklevel=3)
    note = ""
    if not records and configured is not None:
        note = (f"speculative decoding is configured (line {configured}) but the log has no "
                f"'SpecDecoding metrics' lines: stats logging was off (vllm.LLM and "
                f"--disable-log-stats disable it) or the log level is above INFO")
    return SpecDecodeLog(tuple(records), source, tuple(skipped), note)


def read_spec_decode_log(path: str | os.PathLike, **kwargs) -> SpecDecodeLog:
    """Read a vLLM log file; see :func:`parse_spec_decode_log` (same keyword arguments).

    A spec-decode line at the very end without a line end (the file was cut mid-line) is
    treated as malformed (vLLM's logger ends every line): strict raises, lenient skips it.
    Bytes that are not UTF-8 are replaced (U+FFFD); a file holding no text says so.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    source = kwargs.pop("source", os.path.basename(os.fspath(path)))
    if data and (data.count(0) > len(data) // 100 or b"\x00" in data[:1024]):
        raise DataError(f"{source}: not a vLLM log: binary data (NUL bytes; first bytes {data[:16]!r})")
    text = data.decode("utf-8", errors="replace")
    if text and text.count("\ufffd") > max(8, len(text) // 20):
        raise DataError(f"{source}: not a vLLM log: not UTF-8 text (first bytes {data[:16]!r})")
    lines = text.splitlines()
    cut = bool(text) and not text.endswith(("\n", "\r"))
    return _parse_lines(lines, source=source, assume_full_drafts=kwargs.pop("assume_full_drafts", False),
                        strict=kwargs.pop("strict", True), last_line_cut=cut, **kwargs)
