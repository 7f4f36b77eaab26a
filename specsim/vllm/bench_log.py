"""``vllm bench serve`` console output (the "Serving Benchmark Result" block and its "Speculative
Decoding" section) into counts and a summary (layer 1, vLLM formats).

The block is printed by ``benchmark()`` in ``vllm/benchmarks/serve.py`` (vLLM 0.32.0): every line
is ``"{:<40} {:<10}"`` (label, value); floats are printed with two decimals (``{:<10.2f}``), the
counts ``Drafts``, ``Draft tokens`` and ``Accepted tokens`` as integers.  The speculative section
(printed when the ``/metrics`` before/after deltas had draft tokens) reads::

    ---------------Speculative Decoding---------------
    Acceptance rate (%):                     62.98
    Acceptance length:                       2.88
    Drafts:                                  357
    Draft tokens:                            1067
    Accepted tokens:                         672
    Per-position acceptance (%):
      Position 0:                            75.91
    ...
    ==================================================

The three counts are exact.  The per-position percentages are rounded to 0.01 %, so
``accepted_per_pos[i]`` is recovered as the integer k with ``|100 k / drafts - printed| <= 0.005``;
that integer is unique while drafts < 10 000 (the interval is ``drafts / 10 000`` wide), and the
recovered counts must sum to ``Accepted tokens`` (``vllm/v1/spec_decode/metrics.py``
``observe_draft``).  When several integers fit (long runs), integers within the rounding ranges
that sum to ``Accepted tokens`` are taken and an ``IngestWarning`` says so (each is then known to
within ``drafts / 10 000``).
"""
from __future__ import annotations

import math
import os
import re
import warnings

from specsim.errors import DataError, SpecsimValueError
from specsim.vllm.bench import BenchResult
from specsim.vllm.counts import IngestWarning, SpecDecodeCounts

__all__ = ["parse_bench_log", "read_bench_log", "read_bench_logs"]

_HEADER = re.compile(r"^=+ Serving Benchmark Result =+\s*$")
_SECTION = re.compile(r"^-+([^-].*?)-+\s*$")
_END = re.compile(r"^={20,}\s*$")
_LINE = re.compile(r"^(\S.*?:|  Position \d+:)\s+(\S+)\s*$")
_LATENCY = re.compile(r"^(Mean|Median|P(\d+(?:\.\d+)?)) (TTFT|TPOT|ITL|E2EL) \(ms\):$")

# console label -> --save-result JSON key (vllm/benchmarks/serve.py 0.32.0, same run)
_LABELS = {
    "Successful requests:": "completed",
    "Failed requests:": "failed",
    "Maximum request concurrency:": "max_concurrency",
    "Request rate configured (RPS):": "request_rate",
    "Benchmark duration (s):": "duration",
    "Total input tokens:": "total_input_tokens",
    "Total generated tokens:": "total_output_tokens",
    "Request throughput (req/s):": "request_throughput",
    "Request goodput (req/s):": "request_goodput",
    "Output token throughput (tok/s):": "output_throughput",
    "Peak output token throughput (tok/s):": "max_output_tokens_per_s",
    "Peak concurrent requests:": "max_concurrent_requests",
    "Total token throughput (tok/s):": "total_token_throughput",
}
_SPEC_LABELS = {
    "Acceptance rate (%):": "spec_decode_acceptance_rate",
    "Acceptance length:": "spec_decode_acceptance_length",
    "Drafts:": "spec_decode_num_drafts",
    "Draft tokens:": "spec_decode_draft_tokens",
    "Accepted tokens:": "spec_decode_accepted_tokens",
}
_HALF = 0.005 + 1e-9  # half of the printed 0.01 step, plus float slack


def _number(text: str, where: str) -> float | int:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        x = float(text)
    except ValueError:
        raise DataError(f"{where}: expected a number, got {text!r}") from None
    return x


def _count(text: str, where: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise DataError(f"{where}: expected an integer count, got {text!r}") from None
    if v < 0:
        raise DataError(f"{where}: negative count {v}")
    return v


def _per_position(pcts: list[float], d: int, a: int, src: str) -> tuple[int, ...]:
    """Integers k_i with |100 k_i / d - pcts[i]| <= 0.005 summing to a (see module docstring)."""
    cands = []
    for i, pct in enumerate(pcts):
        lo = max(0, math.ceil((pct - _HALF) * d / 100.0 - 1e-9))
        hi = min(d, math.floor((pct + _HALF) * d / 100.0 + 1e-9))
        if lo > hi:
            raise DataError(f"{src}: Position {i}: {pct:.2f} % of {d} drafts is no whole number of "
                            f"drafts (edited or mis-pasted block?)")
        cands.append((lo, hi))
    per = [min(max(round(p * d / 100.0), lo), hi) for p, (lo, hi) in zip(pcts, cands)]
    if not all(lo == hi for lo, hi in cands):
        # several integers fit a printed percentage: move the nearest ones within their ranges
        # (largest residual first) until they sum to the exact Accepted tokens
        diff = a - sum(per)
        resid = [pct * d / 100.0 - k for pct, k in zip(pcts, per)]
        order = sorted(range(len(per)), key=lambda i: -resid[i] if diff > 0 else resid[i])
        for i in order:
            lo, hi = cands[i]
            while diff > 0 and per[i] < hi:
                per[i] += 1
                diff -= 1
            while diff < 0 and per[i] > lo:
                per[i] -= 1
                diff += 1
        # non-increasing pcts have non-increasing ranges, so sorting keeps each within its range
        per.sort(reverse=True)
        warnings.warn(f"{src}: per-position counts are known only to within rounding "
                      f"({d} drafts, 0.01 % steps; ranges {cands}); integers within them summing "
                      f"to the accepted tokens are used", IngestWarning, stacklevel=4)
    per = tuple(per)
    if sum(per) != a:
        raise DataError(f"{src}: per-position acceptance {pcts} % of {d} drafts gives "
                        f"accepted_per_pos = {list(per)}, summing to {sum(per)} != Accepted tokens "
                        f"{a}")
    return per


def _block(lines: list[str], src: str) -> BenchResult:
    raw: dict = {"_format": "vllm bench serve console"}
    spec: dict = {}
    pcts: list[float] = []
    section = ""
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section = m.group(1).strip()
            continue
        if line.strip() == "Per-position acceptance (%):":
            if section != "Speculative Decoding":
                raise DataError(f"{src}: per-position lines outside the Speculative Decoding section")
            continue
        m = _LINE.match(line)
        if not m:
            continue
        label, value = m.group(1), m.group(2)
        where = f"{src}: {label.strip()}"
        if section == "Speculative Decoding":
            if label.startswith("  Position "):
                i = int(label.split()[1].rstrip(":"))
                if i != len(pcts):
                    raise DataError(f"{src}: Position {i} out of order (expected {len(pcts)})")
                pcts.append(float(_number(value, where)))
            elif label in _SPEC_LABELS:
                spec[_SPEC_LABELS[label]] = value
            continue
        if label in _LABELS:
            raw[_LABELS[label]] = _number(value, where)
            continue
        lm = _LATENCY.match(label)
        if lm:
            stat = lm.group(1).lower() if lm.group(2) is None else f"p{lm.group(2)}"
            raw[f"{stat}_{lm.group(3).lower()}_ms"] = float(_number(value, where))
    if not spec and not pcts:
        return BenchResult(raw, None, src)
    missing = [lab for lab, key in _SPEC_LABELS.items() if key not in spec]
    if missing or not pcts:
        raise DataError(f"{src}: incomplete Speculative Decoding section, missing "
                        f"{missing + ([] if pcts else ['Per-position acceptance (%)'])}")
    d = _count(spec["spec_decode_num_drafts"], f"{src}: Drafts")
    t = _count(spec["spec_decode_draft_tokens"], f"{src}: Draft tokens")
    a = _count(spec["spec_decode_accepted_tokens"], f"{src}: Accepted tokens")
    ar = float(_number(spec["spec_decode_acceptance_rate"], f"{src}: Acceptance rate (%)"))
    al = float(_number(spec["spec_decode_acceptance_length"], f"{src}: Acceptance length"))
    if d == 0:
        raise DataError(f"{src}: Speculative Decoding section with 0 drafts")
    if t and abs(100.0 * a / t - ar) > _HALF:
        raise DataError(f"{src}: Acceptance rate {ar} % != 100 x accepted / draft tokens = "
                        f"100 x {a}/{t} = {100.0 * a / t:.4f} % (beyond the print rounding)")
    if abs(1.0 + a / d - al) > _HALF:
        raise DataError(f"{src}: Acceptance length {al} != 1 + accepted / drafts = 1 + {a}/{d} = "
                        f"{1.0 + a / d:.4f} (beyond the print rounding)")
    per = _per_position(pcts, d, a, src)
    raw.update(spec_decode_num_drafts=d, spec_decode_draft_tokens=t, spec_decode_accepted_tokens=a,
               spec_decode_acceptance_rate=ar, spec_decode_acceptance_length=al,
               spec_decode_per_position_acceptance_rates_pct=pcts)
    return BenchResult(raw, SpecDecodeCounts(d, t, a, per, source=src), src)


def parse_bench_log(text: str, *, source: str = "bench log") -> list[BenchResult]:
    """Every "Serving Benchmark Result" block of ``vllm bench serve`` console output.

    Parameters
    ----------
    text : str
        Console output (stdout of ``vllm bench serve``, or a log holding several runs, e.g. the
        stdout of ``vllm bench sweep``); other lines (progress bars, warnings) are skipped.
    source : str
        Label; each block gets ``"<source>[i]"`` when there are several.

    Returns
    -------
    list of BenchResult
        One per block, in order.  ``raw`` holds the console values under the ``--save-result``
        JSON keys (``completed``, ``duration``, ``output_throughput``, ``mean_ttft_ms``, ...; the
        values are the printed, rounded ones); ``spec`` is None (``status == "not collected"``)
        for a block without the Speculative Decoding section (server without speculative
        decoding, or no draft tokens in the window: ``serve.py`` prints the section only when
        the draft-token delta is > 0).

    Raises
    ------
    DataError
        No block at all (message says what the text is not); a block cut before its closing
        ``=====`` line; an incomplete or inconsistent Speculative Decoding section (acceptance
        rate / length disagreeing with the counts beyond the print rounding, per-position
        percentages that are no whole numbers of drafts or do not sum to the accepted tokens).
    """
    if not isinstance(text, str):
        raise SpecsimValueError("text", "must be a str (the console output)", type(text).__name__)
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if _HEADER.match(ln)]
    if not starts:
        raise DataError(f"{source}: no '==== Serving Benchmark Result ====' block: not the console "
                        f"output of vllm bench serve, or the benchmark did not finish")
    blocks = []
    for k, s in enumerate(starts):
        stop = starts[k + 1] if k + 1 < len(starts) else len(lines)
        end = next((j for j in range(s + 1, stop) if _END.match(lines[j])), None)
        name = source if len(starts) == 1 else f"{source}[{k}]"
        if end is None:
            raise DataError(f"{name}: the Serving Benchmark Result block has no closing '=====' "
                            f"line (output cut short?)")
        blocks.append(_block(lines[s + 1:end], name))
    return blocks


def _read(path: str | os.PathLike, source: str | None) -> tuple[list[BenchResult], str]:
    p = os.fspath(path)
    src = source or os.path.basename(p)
    try:
        with open(p, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except IsADirectoryError:
        raise DataError(f"{src}: is a directory, not a console log") from None
    return parse_bench_log(text, source=src), src


def read_bench_logs(path: str | os.PathLike, *, source: str | None = None) -> list[BenchResult]:
    """Every result block of a ``vllm bench serve`` console log file (see :func:`parse_bench_log`)."""
    return _read(path, source)[0]


def read_bench_log(path: str | os.PathLike, *, source: str | None = None,
                   index: int | None = None) -> BenchResult:
    """The result of a ``vllm bench serve`` console log file (see :func:`parse_bench_log`).

    Parameters
    ----------
    path : path-like
    source : str, optional
    index : int, optional
        Which block when the log holds several runs (0-based, negative from the end).  Without
        it a log with several blocks is refused, never silently reduced to one.

    Raises
    ------
    DataError
        As :func:`parse_bench_log`; several blocks and no ``index``.
    SpecsimValueError
        ``index`` out of range.
    """
    blocks, src = _read(path, source)
    if index is None:
        if len(blocks) != 1:
            raise DataError(f"{src}: the log holds {len(blocks)} benchmark results; read them all "
                            f"with read_bench_logs(path) or pick one with index=0..{len(blocks) - 1}")
        return blocks[0]
    if isinstance(index, bool) or not isinstance(index, int) or not -len(blocks) <= index < len(blocks):
        raise SpecsimValueError("index", f"must be an integer in [{-len(blocks)}, {len(blocks) - 1}] "
                                f"(the log holds {len(blocks)} results)", index)
    return blocks[index]
