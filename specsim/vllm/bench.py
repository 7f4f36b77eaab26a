"""``vllm bench serve --save-result`` JSON (and ``--append-result`` files holding several results)
into counts and a summary (layer 1, vLLM formats; ``vllm/benchmarks/serve.py``: before/after
deltas of ``/metrics``).
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from typing import Mapping

import pandas as pd

from specsim.errors import DataError, NotCollectedError, SpecsimValueError
from specsim.vllm.counts import SpecDecodeCounts, as_count

# --------------------------------------------------------------------------------------------
# vllm bench serve --save-result JSON
# --------------------------------------------------------------------------------------------
_SPEC_BENCH_KEYS = ("spec_decode_acceptance_rate", "spec_decode_acceptance_length",
                    "spec_decode_num_drafts", "spec_decode_draft_tokens",
                    "spec_decode_accepted_tokens", "spec_decode_per_position_acceptance_rates")
_BENCH_SUMMARY_KEYS = (
    ("num_prompts", "num_prompts"), ("completed", "completed"), ("failed", "failed"),
    ("max_concurrency", "max_concurrency"), ("request_rate", "request_rate"),
    ("duration", "duration_s"), ("total_input_tokens", "total_input_tokens"),
    ("total_output_tokens", "total_output_tokens"),
    ("request_throughput", "request_throughput_req_per_s"),
    ("output_throughput", "output_throughput_tokens_per_s"),
    ("total_token_throughput", "total_token_throughput_tokens_per_s"),
    ("max_output_tokens_per_s", "max_output_tokens_per_s"),
    ("max_concurrent_requests", "max_concurrent_requests"))
_LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass(frozen=True)
class BenchResult:
    """A ``vllm bench serve --save-result`` result.

    Attributes
    ----------
    raw : dict
        The JSON as read.
    spec : SpecDecodeCounts or None
        Spec-decode deltas of the benchmark window (``vllm/benchmarks/serve.py``, computed from
        /metrics before and after); None when the server had no speculative decoding.
    source : str
    """

    raw: Mapping
    spec: SpecDecodeCounts | None
    source: str = ""

    @property
    def status(self) -> str:
        """``"collected"`` or ``"not collected"`` (spec-decode fields absent)."""
        return "collected" if self.spec is not None else "not collected"

    def spec_counts(self) -> SpecDecodeCounts:
        """Raises NotCollectedError when the result has no ``spec_decode_*`` fields."""
        if self.spec is None:
            raise NotCollectedError(f"{self.source}: no spec_decode_* fields (server without "
                                    f"speculative decoding); acceptance is unknown, not zero")
        return self.spec

    def summary(self) -> pd.Series:
        """Run info and throughput: ``num_prompts, completed, failed, max_concurrency,
        request_rate, duration_s, total_input_tokens, total_output_tokens,
        request_throughput_req_per_s, output_throughput_tokens_per_s,
        total_token_throughput_tokens_per_s, ...`` (keys present in the JSON only)."""
        return pd.Series({new: self.raw[old] for old, new in _BENCH_SUMMARY_KEYS if old in self.raw},
                         name=self.source, dtype=object)

    def latency_frame(self) -> pd.DataFrame:
        """TTFT / TPOT / ITL / E2EL statistics in milliseconds: index ``metric``, columns
        ``mean, median, std`` and the ``pNN`` percentiles present (``--metric-percentiles``).
        ITL is per streamed chunk: with speculative decoding one chunk can hold several tokens."""
        rows = {}
        for metric in _LATENCY_METRICS:
            pat = re.compile(rf"^(mean|median|std|p\d+(?:\.\d+)?)_{metric}_ms$")
            vals = {m.group(1): float(v) for k, v in self.raw.items() if (m := pat.match(k))}
            if vals:
                rows[metric] = vals
        df = pd.DataFrame.from_dict(rows, orient="index")
        df.index.name = "metric"
        return df


def _load_results(path: str, src: str) -> list:
    """Every JSON object of a ``--save-result`` file (one) or an ``--append-result`` file (several,
    one per line: ``vllm/benchmarks/serve.py`` writes ``"\\n"`` then ``json.dump`` for each run)."""
    try:
        with open(path, encoding="utf-8-sig") as fh:  # a leading byte-order mark is not JSON: dropped
            text = fh.read()
    except UnicodeDecodeError as exc:
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                raise DataError(f"{src}: gzip-compressed (it starts with the gzip magic bytes 1f 8b): decompress "
                                f"it first (gunzip {os.path.basename(path)}) and give the JSON it holds") from exc
        raise DataError(f"{src}: not a text file ({exc})") from exc
    dec = json.JSONDecoder()
    out, i, n = [], 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            which = f"result {len(out) + 1}" if out else "the file"
            raise DataError(f"{src}: not valid JSON in {which} (truncated file?): {exc}") from exc
        if not isinstance(obj, dict):
            raise DataError(f"{src}: expected a JSON object for result {len(out) + 1}, "
                            f"got {type(obj).__name__}")
        out.append(obj)
    if not out:
        raise DataError(f"{src}: not valid JSON (empty file)")
    return out


def read_bench_results(path: str | os.PathLike, *, source: str | None = None) -> list[BenchResult]:
    """Read every result of a ``vllm bench serve --save-result`` / ``--append-result`` file.

    ``--append-result`` opens the file in append mode and writes a newline and one ``json.dump``
    per run (``vllm/benchmarks/serve.py`` 0.32.0, the "Save to file" block), so the file is a
    sequence of JSON objects; a plain ``--save-result`` file is the one-element case.

    Parameters
    ----------
    path : path-like
    source : str, optional
        Label; each result gets ``"<source>[i]"`` (0-based) when the file holds several.

    Returns
    -------
    list of BenchResult
        In file order (oldest run first).

    Raises
    ------
    DataError
        A result that is not valid JSON / not an object, or whose spec fields are incomplete or
        disagree (as :func:`read_bench_result`).
    """
    p = os.fspath(path)
    src = source or os.path.basename(p)
    raws = _load_results(p, src)
    if len(raws) == 1:
        return [_bench_from_raw(raws[0], src)]
    return [_bench_from_raw(r, f"{src}[{i}]") for i, r in enumerate(raws)]


def read_bench_result(data: str | os.PathLike | Mapping, *, source: str | None = None,
                      index: int | None = None) -> BenchResult:
    """Read a ``vllm bench serve --save-result`` JSON file (or its loaded dict).

    The spec-decode fields (``vllm/benchmarks/serve.py`` 0.32.0) are
    ``spec_decode_num_drafts``, ``spec_decode_draft_tokens``, ``spec_decode_accepted_tokens``,
    ``spec_decode_acceptance_length`` (= 1 + accepted/drafts), ``spec_decode_acceptance_rate``
    (percent, = 100 accepted/draft tokens) and ``spec_decode_per_position_acceptance_rates``
    (= accepted_per_pos / drafts, full float precision, so accepted_per_pos is recovered exactly).

    Parameters
    ----------
    data : path-like or mapping
    source : str, optional
    index : int, optional
        Which result of an ``--append-result`` file (several results, see
        :func:`read_bench_results`); 0-based, negative counts from the end.  Without it, a file
        holding more than one result is refused rather than silently reduced to one.

    Raises
    ------
    DataError
        Not JSON / not an object, incomplete spec fields, fields that disagree with each other, or
        a file with several results and no ``index``.
    SpecsimValueError
        ``index`` out of range for the file.
    """
    if isinstance(data, Mapping):
        return _bench_from_raw(dict(data), source or "bench")
    path = os.fspath(data)
    src = source or os.path.basename(path)
    raws = _load_results(path, src)
    if index is None:
        if len(raws) != 1:
            raise DataError(
                f"{src}: the file holds {len(raws)} results (written with --append-result); read "
                f"them all with read_bench_results(path) or pick one with index=0..{len(raws) - 1}")
        return _bench_from_raw(raws[0], src)
    if isinstance(index, bool) or not isinstance(index, int) or not -len(raws) <= index < len(raws):
        raise SpecsimValueError("index", f"must be an integer in [{-len(raws)}, {len(raws) - 1}] "
                                f"(the file holds {len(raws)} results)", index)
    i = index % len(raws)
    return _bench_from_raw(raws[i], src if len(raws) == 1 else f"{src}[{i}]")


def _float(v, what: str) -> float:
    if isinstance(v, bool):
        raise DataError(f"{what}: expected a number, got {v!r}")
    try:
        return float(v)
    except (TypeError, ValueError):
        raise DataError(f"{what}: expected a number, got {v!r}") from None


def _bench_from_raw(raw: dict, src: str) -> BenchResult:
    """One result object into a BenchResult (the checks of :func:`read_bench_result`)."""
    present = [k for k in _SPEC_BENCH_KEYS if k in raw]
    if not present:
        return BenchResult(raw, None, src)
    if len(present) != len(_SPEC_BENCH_KEYS):
        missing = [k for k in _SPEC_BENCH_KEYS if k not in raw]
        raise DataError(f"{src}: incomplete spec-decode fields, missing {missing}")
    d = as_count(raw["spec_decode_num_drafts"], f"{src}: spec_decode_num_drafts")
    t = as_count(raw["spec_decode_draft_tokens"], f"{src}: spec_decode_draft_tokens")
    a = as_count(raw["spec_decode_accepted_tokens"], f"{src}: spec_decode_accepted_tokens")
    rates = raw["spec_decode_per_position_acceptance_rates"]
    if not isinstance(rates, list) or not rates:
        raise DataError(f"{src}: spec_decode_per_position_acceptance_rates must be a non-empty "
                        f"list, got {rates!r}")
    if d == 0:
        raise DataError(f"{src}: spec-decode fields present with 0 drafts")
    per = []
    for i, r in enumerate(rates):
        x = _float(r, f"{src}: spec_decode_per_position_acceptance_rates[{i}]") * d
        if not math.isfinite(x) or abs(x - round(x)) > 1e-6 * max(1.0, d):
            raise DataError(f"{src}: per-position rate [{i}] = {r} x {d} drafts = {x} is not a count")
        per.append(int(round(x)))
    mal = _float(raw["spec_decode_acceptance_length"], f"{src}: spec_decode_acceptance_length")
    if abs(mal - (1 + a / d)) > 1e-9 * max(1.0, mal):
        raise DataError(f"{src}: spec_decode_acceptance_length {mal} != 1 + accepted/drafts "
                        f"= 1 + {a}/{d} = {1 + a / d}")
    ar = _float(raw["spec_decode_acceptance_rate"], f"{src}: spec_decode_acceptance_rate")
    if t and abs(ar - 100.0 * a / t) > 1e-9 * max(1.0, ar):
        hint = " (looks like a fraction, expected percent)" if abs(ar - a / t) < 1e-9 else ""
        raise DataError(f"{src}: spec_decode_acceptance_rate {ar} != 100 x accepted/draft tokens "
                        f"= {100.0 * a / t}{hint}")
    spec = SpecDecodeCounts(d, t, a, tuple(per), source=src)
    return BenchResult(raw, spec, src)
