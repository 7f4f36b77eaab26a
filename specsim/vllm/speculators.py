"""vllm-project/speculators evaluation output (``scripts/evaluate``: ``acceptance.csv`` and the
"Speculative Decoding Acceptance Report" of its log) into counts per subset (layer 1, vLLM formats).

The script benchmarks a vLLM server (through GuideLLM) per dataset subset and reports the server's
``vllm:spec_decode_*`` counter deltas of each subset: ``acceptance.csv`` has one row per subset
with ``subset, num_drafts, num_draft_tokens, num_accepted_tokens, acceptance_length,
acceptance_at_pos_0 .. acceptance_at_pos_{N-1}`` (counts written as floats such as ``106.0``;
``acceptance_length`` = 1 + accepted / drafts; ``acceptance_at_pos_i`` = accepted_per_pos[i] /
drafts, the unconditional per-position rate as vLLM's counters define it,
``vllm/v1/spec_decode/metrics.py``).  The log prints the same numbers rounded to 4 decimals.

The CSV names no model.  The log holds GuideLLM's console output of each subset's run, whose
``<Backend> backend validated with model <model>`` line names the model the server was sent
requests as (the served target), see :func:`speculators_eval_log_models`.
"""
from __future__ import annotations

import csv
import math
import os
import re

from specsim.errors import DataError
from specsim.vllm.counts import SpecDecodeCounts, as_count

__all__ = ["read_speculators_acceptance", "read_speculators_eval_log", "speculators_eval_log_models"]

_POS = re.compile(r"^acceptance_at_pos_(\d+)$")


def _per_pos_from_rates(rates: list[float], d: int, tol: float, where: str) -> tuple[int, ...]:
    per = []
    for i, r in enumerate(rates):
        x = r * d
        k = round(x)
        if not math.isfinite(x) or abs(x - k) > tol * max(1.0, d):
            raise DataError(f"{where}: acceptance at position {i} = {r} x {d} drafts = {x} is not "
                            f"a whole number of drafts")
        per.append(int(k))
    return tuple(per)


def read_speculators_acceptance(path: str | os.PathLike, *, source: str | None = None) -> dict[str, SpecDecodeCounts]:
    """Read ``acceptance.csv`` of speculators' ``scripts/evaluate``.

    Parameters
    ----------
    path : path-like
    source : str, optional

    Returns
    -------
    dict str -> SpecDecodeCounts
        Subset name -> its counts (N = number of ``acceptance_at_pos_*`` columns), file order.

    Raises
    ------
    DataError
        Missing columns, positions not 0..N-1, counts that are not non-negative integers, a
        per-position rate that is no whole number of drafts, ``acceptance_length`` != 1 +
        accepted / drafts, duplicate subsets, or counts violating the counts record's identities.
    """
    p = os.fspath(path)
    src = source or os.path.basename(p)
    try:
        with open(p, encoding="utf-8-sig", newline="") as fh:  # a BOM (spreadsheet export) dropped
            table = list(csv.reader(fh))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{src}: not a readable CSV: {exc}") from exc
    table = [r for r in table if r]
    if len(table) < 2:
        raise DataError(f"{src}: no rows (empty acceptance.csv)")
    cols = table[0]
    if len(set(cols)) != len(cols):
        raise DataError(f"{src}: duplicate column names in the header {cols}")
    for li, r in enumerate(table[1:], start=2):
        if len(r) != len(cols):
            raise DataError(f"{src} line {li}: {len(r)} fields, the header has {len(cols)} "
                            f"(truncated or edited file?)")
    rows = [dict(zip(cols, r)) for r in table[1:]]
    need = ["subset", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "acceptance_length"]
    missing = [c for c in need if c not in cols]
    pos = sorted(int(m.group(1)) for c in cols if (m := _POS.match(c)))
    if missing or not pos:
        raise DataError(f"{src}: missing columns {missing + ([] if pos else ['acceptance_at_pos_0'])} "
                        f"(not a speculators acceptance.csv?)")
    if pos != list(range(len(pos))):
        raise DataError(f"{src}: acceptance_at_pos_* columns {pos} are not 0..N-1")
    out: dict[str, SpecDecodeCounts] = {}
    for li, row in enumerate(rows, start=2):
        name = row["subset"]
        where = f"{src} line {li} ({name})"
        if name in out:
            raise DataError(f"{where}: subset {name!r} appears twice")
        try:
            d, t, a = (as_count(float(row[c]), f"{where}: {c}")
                       for c in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"))
            al = float(row["acceptance_length"])
            rates = [float(row[f"acceptance_at_pos_{i}"]) for i in pos]
        except (TypeError, ValueError) as exc:
            raise DataError(f"{where}: not a number ({exc})") from None
        if d == 0:
            raise DataError(f"{where}: 0 drafts (no speculative decoding in this subset?)")
        if abs(al - (1 + a / d)) > 1e-9 * max(1.0, al):
            raise DataError(f"{where}: acceptance_length {al} != 1 + {a}/{d} = {1 + a / d}")
        per = _per_pos_from_rates(rates, d, 1e-6, where)
        out[name] = SpecDecodeCounts(d, t, a, per, source=f"{src}:{name}")
    return out


_REPORT = "=== Speculative Decoding Acceptance Report ==="
_START = re.compile(r"\[INFO\] \[(.+?)\] Starting")
_KV = re.compile(r"^\s*(Num drafts|Num draft tokens|Num accepted tokens|Acceptance length)\s+(\S+)\s*$")
_POSLINE = re.compile(r"^\s*Position (\d+)\s+(\S+)\s*$")


def read_speculators_eval_log(path: str | os.PathLike, *, source: str | None = None) -> dict[str, SpecDecodeCounts]:
    """Read the "Speculative Decoding Acceptance Report" blocks of a speculators evaluation log.

    Each block follows ``[INFO] [<subset>] Starting``; the counts are printed exactly, the
    acceptance length and per-position rates to 4 decimals, so ``accepted_per_pos`` is recovered
    as the integers within rounding (unique while drafts < 10 000) and must sum to the accepted
    tokens.

    Returns
    -------
    dict str -> SpecDecodeCounts
        Subset -> counts (``"subset{i}"`` when no subset line precedes a block).

    Raises
    ------
    DataError
        No report block; a block without its counts; rounding-inconsistent values.
    """
    p = os.fspath(path)
    src = source or os.path.basename(p)
    with open(p, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    out: dict[str, SpecDecodeCounts] = {}
    subset = None
    i = 0
    while i < len(lines):
        m = _START.search(lines[i])
        if m:
            subset = m.group(1)
        if lines[i].strip() != _REPORT:
            i += 1
            continue
        name = subset or f"subset{len(out)}"
        where = f"{src}:{name}"
        kv, rates = {}, []
        i += 1
        while i < len(lines) and not lines[i].startswith("[") and lines[i].strip() != _REPORT:
            if (mk := _KV.match(lines[i])):
                kv[mk.group(1)] = mk.group(2)
            elif (mp := _POSLINE.match(lines[i])):
                if int(mp.group(1)) != len(rates):
                    raise DataError(f"{where}: Position {mp.group(1)} out of order")
                rates.append(float(mp.group(2)))
            i += 1
        if len(kv) != 4 or not rates:
            raise DataError(f"{where}: incomplete acceptance report (found {sorted(kv)}, "
                            f"{len(rates)} positions)")
        try:
            d, t, a = (int(kv[k]) for k in ("Num drafts", "Num draft tokens", "Num accepted tokens"))
        except ValueError:
            raise DataError(f"{where}: counts are not integers: {kv}") from None
        if d == 0:
            raise DataError(f"{where}: 0 drafts")
        half = 0.00005 + 1e-12
        if abs(float(kv["Acceptance length"]) - (1 + a / d)) > half:
            raise DataError(f"{where}: Acceptance length {kv['Acceptance length']} != 1 + {a}/{d}")
        per = []
        for j, r in enumerate(rates):
            lo, hi = math.ceil((r - half) * d - 1e-9), math.floor((r + half) * d + 1e-9)
            if lo > hi:
                raise DataError(f"{where}: Position {j} rate {r} is no whole number of {d} drafts")
            per.append(min(max(round(r * d), lo), hi))
        if sum(per) != a:
            raise DataError(f"{where}: per-position counts {per} sum to {sum(per)} != accepted {a}")
        out[name] = SpecDecodeCounts(d, t, a, tuple(per), source=where)
    if not out:
        raise DataError(f"{src}: no '{_REPORT}' block (not a speculators evaluation log, or the "
                        f"run did not finish)")
    return out


_VALIDATED = re.compile(r"backend validated with model(?:\s(.*))?$")


def speculators_eval_log_models(path: str | os.PathLike) -> tuple[str, ...]:
    """The served model(s) a speculators evaluation log names, in order of first appearance.

    speculators' ``scripts/evaluate`` runs GuideLLM per subset and its log holds GuideLLM's console
    output (``tests/data/samples/spec_eval/eval.log``, GuideLLM 0.8.1).  GuideLLM prints
    ``"{Backend} backend validated with model {model}"`` once per run
    (``guidellm/benchmark/entrypoints.py`` ``resolve_backend``), ``model`` being its ``--model``
    or else the server's first ``/v1/models`` entry (``guidellm/backends/openai/http.py``
    ``default_model``): the name the vLLM server serves, i.e. the verifier / target model (or its
    ``--served-model-name``).  The console (rich) wraps long lines, so the name may continue on the
    next unindented line(s) without spaces; the details that follow are indented by two spaces
    (``guidellm/utils/console.py`` ``print_update_details``).  No speculator / draft model is
    named in the log.

    Parameters
    ----------
    path : path-like
        The speculators evaluation log (read as UTF-8, undecodable bytes replaced).

    Returns
    -------
    tuple of str
        Empty when no such line names a model (GuideLLM resolved none, or not such a log).

    Raises
    ------
    OSError
        The file cannot be opened.
    """
    with open(os.fspath(path), encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    names = []
    for i, line in enumerate(lines):
        m = _VALIDATED.search(line)
        if not m:
            continue
        name = (m.group(1) or "").strip()
        for cont in lines[i + 1:]:
            if not cont.strip() or cont[:1].isspace() or any(ch.isspace() for ch in cont.strip()):
                break
            name += cont.strip()
        if name:
            names.append(name)
    return tuple(dict.fromkeys(names))
