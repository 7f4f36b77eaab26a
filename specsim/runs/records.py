"""Loaders of the recorded real vLLM runs under ``data/runs`` (layer 4, runs): one tidy row per run,
baseline / speculative pairs, probes and health checks, with the consistency checks.

Details, derivations and sources: ``docs/modules/specsim.runs.records.md``.
"""
from __future__ import annotations

import copy
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from specsim.catalog import project_data_path
from specsim.errors import DataError, NotCollectedError
from specsim.vllm.bench import read_bench_result
from specsim.vllm.counts import decode_steps
from specsim.vllm.prometheus import diff_scrapes

__all__ = ["BENCH_FILES", "CONTENDED_FRACTION", "load_run", "load_runs", "pair_runs", "load_probe",
           "load_health_checks"]

#: Files every completed (status ok / invalid) ``bench_serve`` run must have.
BENCH_FILES = ("provenance.json", "bench.json", "metrics_before.prom", "metrics_after.prom")
#: Runs with more than this fraction of the machine's CPU time used by other processes during the
#: measurement (``provenance.cpu_accounting.other_fraction``) are flagged ``contended``.
CONTENDED_FRACTION = 0.10


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path.parent.name}: missing {path.name} ({what}); the run directory "
                        f"{path.parent} is incomplete") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from exc


def _family(prov: Mapping) -> str:
    """Config family of a run: ``baseline``, ``ngram``, ``selfdraft``, ``trunc28`` ... (the spec
    label without its ``-n<N>`` suffix)."""
    if prov.get("method") is None:
        return "baseline"
    lab = str(prov.get("spec_label") or prov.get("label") or prov["method"])
    head, sep, tail = lab.rpartition("-n")
    return head if sep and tail.isdigit() else lab


def _ms_stat(lat: pd.DataFrame, metric: str, stat: str) -> float:
    try:
        return float(lat.loc[metric, stat]) / 1e3
    except KeyError:
        return float("nan")


def load_run(path: str | os.PathLike) -> dict:
    """Load one recorded ``bench_serve`` run into a flat dict (one row of :func:`load_runs`).

    Parameters
    ----------
    path : path
        ``data/runs/<run-id>``.

    Returns
    -------
    dict
        Keys: ``run_id, matrix, stamp, kind, label, family, method, num_speculative_tokens,
        concurrency, temperature, num_prompts, output_len, status, status_reason, started,
        output_tok_per_s, mean_tpot_s, median_tpot_s, mean_ttft_s, duration_s, completed,
        total_input_tokens, total_output_tokens, input_lens, output_lens, generation_tokens,
        num_drafts, num_draft_tokens, num_accepted_tokens, accepted_per_pos, mal,
        acceptance_rate, mean_draft_length, decode_steps, draft_step_fraction, q_eff, m_eff,
        greedy_identical, identical, compared, baseline_run_id, other_cpu_fraction, steal_cpu_fraction,
        serve_group, started_together, started_with, host, path``.
        Throughputs in output tokens/s, times in seconds.  Spec counters come from the run's own
        ``/metrics`` delta (``specsim.vllm.diff_scrapes``); NaN / None where not collected
        (baselines).

    Raises
    ------
    DataError
        ``provenance.json`` missing or malformed; a completed (``ok`` / ``invalid``) bench run
        without one of :data:`BENCH_FILES` (the message names the file); unparsable outputs.
    """

    p = Path(path)
    if not p.is_dir():
        raise DataError(f"run directory {p} " + ("is a file, not a directory" if p.exists() else "does not exist"))
    prov = _read_json(p / "provenance.json", "run provenance")
    if not isinstance(prov, dict):
        raise DataError(f"{p / 'provenance.json'}: expected a JSON object")
    kind = prov.get("kind")
    status = prov.get("status")
    if status not in ("ok", "invalid", "failed", "skipped"):
        raise DataError(f"{p / 'provenance.json'}: status {status!r} is not ok / invalid / failed / skipped")
    mat = prov.get("matrix") or {}
    row: dict[str, Any] = {
        "run_id": p.name, "matrix": mat.get("name"), "stamp": mat.get("stamp"), "kind": kind,
        "label": prov.get("label"), "family": _family(prov) if kind == "bench_serve" else None,
        "method": prov.get("method"), "num_speculative_tokens": prov.get("num_speculative_tokens"),
        "concurrency": prov.get("concurrency"), "temperature": prov.get("temperature"),
        "num_prompts": prov.get("num_prompts"), "output_len": prov.get("output_len"),
        "status": status,
        "status_reason": prov.get("invalid_reason") or prov.get("skip_reason") or prov.get("error"),
        "started": prov.get("started"), "path": str(p),
    }
    #: the serve config (group) of the cell, and the servers started with its server
    #: (``concurrent_server_starts``; None for runs recorded before ``server_start``: one at a time)
    row["serve_group"] = (prov.get("cell") or {}).get("serve")
    ss = prov.get("server_start") or {}
    row["started_together"] = ss.get("started_together")
    row["started_with"] = ",".join(ss.get("with") or []) if ss else None
    #: the kind of machine that recorded the run: ``host.cpu_model | host.platform`` of its provenance (the
    #: platform string names the kernel build), None when either is missing
    host = prov.get("host") or {}
    row["host"] = (f"{host['cpu_model']} | {host['platform']}"
                   if host.get("cpu_model") and host.get("platform") else None)
    acct = prov.get("cpu_accounting") or {}
    row["other_cpu_fraction"] = acct.get("other_fraction")
    #: hypervisor steal, a part of other_cpu_fraction (recorded since 2026-12-02; NaN before)
    row["steal_cpu_fraction"] = acct.get("steal_fraction")
    chk = ((prov.get("checks") or {}).get("greedy_identical_to_baseline"))
    if chk is None and (p / "checks.json").exists():
        chk = _read_json(p / "checks.json", "greedy check").get("greedy_identical_to_baseline")
    row["greedy_identical"] = None if chk is None else bool(chk.get("all_identical"))
    row["identical"] = None if chk is None else chk.get("identical")
    row["compared"] = None if chk is None else chk.get("compared")
    row["baseline_run_id"] = None if chk is None else chk.get("baseline_run_id")
    nan = float("nan")
    for k in ("output_tok_per_s", "mean_tpot_s", "median_tpot_s", "mean_ttft_s", "duration_s", "mal",
              "acceptance_rate", "mean_draft_length", "decode_steps", "draft_step_fraction", "q_eff", "m_eff"):
        row[k] = nan
    for k in ("completed", "total_input_tokens", "total_output_tokens", "generation_tokens", "num_drafts",
              "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos", "input_lens", "output_lens"):
        row[k] = None
    if kind != "bench_serve" or status in ("failed", "skipped"):  # nothing was measured
        return row
    missing = [f for f in BENCH_FILES if not (p / f).exists()]
    if missing:
        raise DataError(f"run {p.name} (status {status}) is missing {', '.join(missing)} in {p}; a completed "
                        f"bench run must have {', '.join(BENCH_FILES)}")
    br = read_bench_result(p / "bench.json", source=f"{p.name}/bench.json")
    raw = br.raw
    row.update(output_tok_per_s=float(raw["output_throughput"]), duration_s=float(raw["duration"]),
               completed=int(raw["completed"]), total_input_tokens=int(raw["total_input_tokens"]),
               total_output_tokens=int(raw["total_output_tokens"]))
    row["input_lens"] = [int(x) for x in raw.get("input_lens") or []] or None
    row["output_lens"] = [int(x) for x in raw.get("output_lens") or []] or None
    lat = br.latency_frame()
    row.update(mean_tpot_s=_ms_stat(lat, "tpot", "mean"), median_tpot_s=_ms_stat(lat, "tpot", "median"),
               mean_ttft_s=_ms_stat(lat, "ttft", "mean"))
    delta = diff_scrapes((p / "metrics_before.prom").read_text(), (p / "metrics_after.prom").read_text())
    row["generation_tokens"] = delta.generation_tokens
    try:
        c = delta.spec_counts()
    except NotCollectedError:
        c = None
    if c is not None and c.num_drafts > 0:
        row.update(num_drafts=c.num_drafts, num_draft_tokens=c.num_draft_tokens,
                   num_accepted_tokens=c.num_accepted_tokens, accepted_per_pos=list(c.accepted_per_pos),
                   mal=c.mal, acceptance_rate=c.acceptance_rate, mean_draft_length=c.mean_draft_length)
        gen = delta.generation_tokens if delta.generation_tokens is not None else row["total_output_tokens"]
        _derive_steps(row, gen, row["completed"])
    return row


def _derive_steps(row: dict, generated: int, requests: int) -> None:
    """Decode request-steps and per-step means from the counters (module docstring, "Derived
    per-step quantities").

    ``S = max(num_drafts, generated - requests - accepted)``: the final step of a request can
    accept drafts past ``max_tokens`` that are then cut (counted as accepted, not generated),
    which can make the difference fall below ``num_drafts``; it is then clamped to it.
    """
    d, t, a = row["num_drafts"], row["num_draft_tokens"], row["num_accepted_tokens"]
    s = decode_steps(d, a, generated, requests)
    row["decode_steps"] = s
    row["draft_step_fraction"] = d / s
    row["q_eff"] = 1.0 + t / s
    row["m_eff"] = 1.0 + a / s


def _files_key(p: Path) -> tuple:
    """(name, size, mtime_ns) of every file of a run directory: a recorded run never changes, and a
    changed file (a test editing a copy) changes the key."""
    return tuple(sorted((f.name, st.st_size, st.st_mtime_ns) for f in p.iterdir() if f.is_file()
                        for st in (f.stat(),)))


@lru_cache(maxsize=1024)
def _load_run_cached(path: str, key: tuple) -> dict:
    return load_run(path)


def _load_run_once(p: Path) -> dict:
    """:func:`load_run`, parsed once per directory content (Prometheus scrapes are the slow part;
    several validations of one matrix read the same runs)."""
    return copy.deepcopy(_load_run_cached(str(p), _files_key(p)))


def _matrix_of(prov: dict, key: str = "name") -> str | None:
    """The matrix name (``key="stamp"``: invocation stamp) a run's provenance records
    (``provenance["matrix"][key]``), or None."""
    mat = prov.get("matrix") if isinstance(prov, dict) else None
    return mat.get(key) if isinstance(mat, dict) else None


def _selected(prov: dict, matrix: str | None, stamp: str | None) -> bool:
    return (matrix is None or _matrix_of(prov) == matrix) and (stamp is None or _matrix_of(prov, "stamp") == stamp)


def load_runs(runs_dir: str | os.PathLike | None = None, *, strict: bool = True,
              matrix: str | None = None, stamp: str | None = None) -> pd.DataFrame:
    """All recorded ``bench_serve`` runs, one row each (see :func:`load_run`), with usability.

    Temporary directories (``.tmp-*``, runs in progress) are skipped; run kinds other than
    ``bench_serve`` (probes, health checks, manifests) are left to :func:`load_probe` /
    :func:`load_health_checks`.

    Parameters
    ----------
    runs_dir : path, optional
        Default ``<data>/runs``.
    strict : bool, default True
        Re-raise a malformed run directory's DataError (False: keep it as an excluded row whose
        ``exclusion_reason`` quotes the error).
    matrix : str, optional
        Only the runs recorded by this matrix (``provenance["matrix"]["name"]``, e.g.
        ``"cpu-validation"``); default every run.
    stamp : str, optional
        Only the runs of this invocation (``provenance["matrix"]["stamp"]``, e.g. ``"20261129T104718"``).

    Returns
    -------
    pandas.DataFrame
        :func:`load_run` columns plus ``usable`` (bool) and ``exclusion_reason`` (str, "" when
        usable; failed runs, invalid runs, spec runs without counters and attempts a later attempt
        of the same run superseded (``<id>-retry<k>``, the highest k counts) are excluded and say why)
        and ``contended`` (other processes used > :data:`CONTENDED_FRACTION` of the CPU).

    Raises
    ------
    DataError
        ``runs_dir`` missing; with ``strict``, a malformed run directory.
    """

    d = Path(runs_dir) if runs_dir is not None else project_data_path("runs")
    if not d.is_dir():
        raise DataError(f"runs directory {d} " + ("is a file, not a directory" if d.exists() else "does not exist"))
    rows = []
    for p in sorted(d.iterdir()):
        if not p.is_dir() or p.name.startswith("."):
            continue
        try:
            prov = _read_json(p / "provenance.json", "run provenance")
            prov_kind = prov.get("kind")
        except (DataError, AttributeError) as exc:
            if strict:
                raise DataError(f"{p}: {exc}") from exc
            rows.append({"run_id": p.name, "kind": None, "status": "failed", "path": str(p), "usable": False,
                         "exclusion_reason": f"unreadable run directory: {exc}"})
            continue
        if prov_kind != "bench_serve" or not _selected(prov, matrix, stamp):
            continue
        try:
            rows.append(_load_run_once(p))
        except DataError as exc:
            if strict:
                raise
            rows.append({"run_id": p.name, "kind": "bench_serve", "status": "failed", "path": str(p),
                         "usable": False, "exclusion_reason": f"malformed run: {exc}"})
    cols = ["run_id", "matrix", "stamp", "kind", "label", "family", "method", "num_speculative_tokens",
            "concurrency", "temperature", "status"]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=cols + ["usable", "exclusion_reason", "contended"])
    if "exclusion_reason" not in df:
        df["exclusion_reason"] = None
    df["exclusion_reason"] = _superseded(df["run_id"], df["exclusion_reason"])
    reasons = []

    def text(x, default: str) -> str:  # a missing reason is None, or NaN once in a DataFrame (not "nan")
        return x if isinstance(x, str) and x.strip() else default

    for r in df.itertuples(index=False):
        if isinstance(r.exclusion_reason, str) and r.exclusion_reason:
            reasons.append(r.exclusion_reason)
        elif r.status == "failed":
            reasons.append(f"failed: {text(r.status_reason, 'no error text').splitlines()[0][:200]}")
        elif r.status == "invalid":
            reasons.append(f"invalid: {text(r.status_reason, 'no reason recorded')[:300]}")
        elif r.status == "skipped":
            reasons.append(f"skipped: {text(r.status_reason, 'no reason recorded')[:300]}")
        elif isinstance(r.method, str) and not (pd.notna(r.num_drafts) and float(r.num_drafts) > 0):
            reasons.append("spec run without spec-decode counters (num_drafts = 0 or not collected)")
        else:
            reasons.append("")
    df["exclusion_reason"] = reasons
    df["usable"] = df["exclusion_reason"] == ""
    oc = pd.to_numeric(df.get("other_cpu_fraction"), errors="coerce")
    df["contended"] = oc > CONTENDED_FRACTION
    return df.reset_index(drop=True)


_ATTEMPT = re.compile(r"(.+)-retry([1-9][0-9]*)")


def attempt_of(run_id: str) -> tuple[str, int]:
    """``(run id, attempt number)`` of a recorded run directory's name: ``<id>-retry<k>`` is attempt
    ``k`` of ``<id>`` (``specsim run-matrix --resume``), any other name attempt 0 of itself.

    Parameters
    ----------
    run_id : str
        A run directory's name, e.g. ``"cpu-validation-fast-S-ngram-n3-c4-retry2"``.

    Returns
    -------
    tuple of (str, int)
        E.g. ``("cpu-validation-fast-S-ngram-n3-c4", 2)``.  Raises nothing.
    """
    mt = _ATTEMPT.fullmatch(run_id)
    return (mt.group(1), int(mt.group(2))) if mt else (run_id, 0)


def _superseded(run_ids: pd.Series, reasons: pd.Series) -> list:
    """``reasons`` with every attempt of a run that a later attempt replaced (``<id>``, ``<id>-retry1``,
    ...: :func:`attempt_of`) excluded as superseded, so each run counts once, by its latest attempt
    (the highest retry number)."""
    keyed = [attempt_of(str(r)) for r in run_ids]
    latest: dict[str, tuple[int, str]] = {}
    for (base, k), rid in zip(keyed, run_ids):
        if base not in latest or k > latest[base][0]:
            latest[base] = (k, str(rid))
    return [f"superseded by a later attempt of this run ({latest[base][1]}, --resume)"
            if latest[base][1] != str(rid) else why for (base, _), rid, why in zip(keyed, run_ids, reasons)]


def pair_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Pair each spec run with its baseline (same matrix, temperature, concurrency, prompts, OSL).

    The baseline named in the run's own greedy check (``checks.json`` ``baseline_run_id``) wins;
    otherwise a usable baseline of the same matrix stamp; otherwise the usable baseline of the same
    matrix recorded closest in time.

    Returns
    -------
    pandas.DataFrame
        One row per spec run (usable or not), the spec columns plus ``baseline_run_id``,
        ``pairing`` (how the baseline was chosen), ``baseline_tok_per_s``, ``baseline_tpot_s``,
        ``measured_ratio`` (spec output tok/s / baseline output tok/s), ``measured_tpot_ratio``
        (baseline mean TPOT / spec mean TPOT), and ``usable`` / ``exclusion_reason`` updated when no
        usable baseline exists.
    """
    if runs.empty:
        return runs.assign(baseline_run_id=None, pairing=None, measured_ratio=np.nan)
    base = runs[(runs["family"] == "baseline") & runs["usable"]]
    spec = runs[runs["method"].map(lambda m: isinstance(m, str))].copy()
    by_id = {r.run_id: r for r in base.itertuples(index=False)}
    out = []
    for r in spec.itertuples(index=False):
        d = r._asdict()
        b, how = None, None
        if r.baseline_run_id and r.baseline_run_id in by_id:
            b, how = by_id[r.baseline_run_id], "greedy-check baseline"
        else:
            cand = base[(base["matrix"] == r.matrix) & (base["concurrency"] == r.concurrency)
                        & np.isclose(base["temperature"].astype(float), float(r.temperature or 0.0))
                        & (base["num_prompts"] == r.num_prompts) & (base["output_len"] == r.output_len)]
            same = cand[cand["stamp"] == r.stamp]
            if len(same):
                b, how = next(same.itertuples(index=False)), "same matrix stamp"
            elif len(cand):
                t0 = pd.to_datetime(r.started, utc=True, errors="coerce")
                dt = (pd.to_datetime(cand["started"], utc=True, errors="coerce") - t0).abs()
                b, how = next(cand.loc[[dt.idxmin()]].itertuples(index=False)), "closest baseline in time"
        d["pairing"] = how
        d["baseline_run_id"] = b.run_id if b is not None else r.baseline_run_id
        d["baseline_tok_per_s"] = b.output_tok_per_s if b is not None else np.nan
        d["baseline_tpot_s"] = b.mean_tpot_s if b is not None else np.nan
        d["baseline_duration_s"] = b.duration_s if b is not None else np.nan
        d["baseline_ttft_s"] = b.mean_ttft_s if b is not None else np.nan
        d["baseline_input_lens"] = b.input_lens if b is not None else None
        d["baseline_output_lens"] = b.output_lens if b is not None else None
        d["baseline_contended"] = bool(b.contended) if b is not None else None
        d["measured_ratio"] = r.output_tok_per_s / b.output_tok_per_s if b is not None else np.nan
        d["measured_tpot_ratio"] = b.mean_tpot_s / r.mean_tpot_s if b is not None else np.nan
        if b is None and d["usable"]:
            d["usable"], d["exclusion_reason"] = False, "no usable baseline at this concurrency / temperature"
        out.append(d)
    return pd.DataFrame(out).reset_index(drop=True)


def load_probe(runs_dir: str | os.PathLike | None = None, *, matrix: str | None = None,
               stamp: str | None = None) -> tuple[str, pd.DataFrame]:
    """The verification-cost probe: the latest ``verify_cost`` run with status ok (of ``matrix`` /
    ``stamp`` when given: each matrix's runs are calibrated on the probe recorded with them).

    Returns
    -------
    (run_id, DataFrame)
        Columns ``batch, q, context, seconds`` (median over repetitions, seconds per engine step).

    Raises
    ------
    DataError
        No usable probe recorded, or its ``verify_cost.csv`` is missing / malformed.
    """

    d = Path(runs_dir) if runs_dir is not None else project_data_path("runs")
    found = []
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        if p.name.startswith(".") or not (p / "provenance.json").exists():
            continue
        prov = _read_json(p / "provenance.json", "run provenance")
        if prov.get("kind") == "verify_cost" and prov.get("status") == "ok" and _selected(prov, matrix, stamp):
            found.append((str(prov.get("started") or ""), p))
    if not found:
        if matrix is None:
            how = ("record one (`specsim run-matrix --matrix verify-cost`, or a matrix with a probe, e.g. "
                   "`make validate-cpu`)")
        else:  # a probe of another matrix (verify-cost's, say) is not used: the runs are judged on their own
            how = (f"a matrix's runs are judged on a probe recorded by that matrix ({matrix!r}"
                   + (f", invocation {stamp!r}: without --stamp its latest probe" if stamp is not None else "")
                   + "), never on another matrix's (verify-cost's included): run one whose sidecar has `probes` "
                   "(the cpu-validation matrices; `make validate-cpu`)")
        raise DataError(f"no verification-cost probe with status ok under {d}"
                        + (f" recorded by matrix {matrix!r}" if matrix is not None else "")
                        + (f" with stamp {stamp!r}" if stamp is not None else "")
                        + f"; the CPU latency model is calibrated on it only: {how}")
    p = max(found)[1]
    f = p / "verify_cost.csv"
    if not f.exists():
        raise DataError(f"run {p.name} is missing verify_cost.csv in {p}")
    df = pd.read_csv(f)
    need = ["batch", "q", "context", "seconds"]
    if [c for c in need if c not in df.columns] or df.empty:
        raise DataError(f"{f}: expected columns {need} and at least one row")
    return p.name, df[need].astype(float)


def load_health_checks(runs_dir: str | os.PathLike | None = None, *, matrix: str | None = None,
                       stamp: str | None = None) -> pd.DataFrame:
    """Temperature health checks (offline self-draft at T > 0): verdict per run (of ``matrix`` when given),
    the latest attempt of each check only (``<id>-retry<k>`` of ``--resume``: earlier attempts are
    superseded, as in :func:`load_runs`).

    Returns
    -------
    pandas.DataFrame
        ``run_id, status, temperature, observed_pos1, expected_pos1, ratio, passed, reason``.
    """

    d = Path(runs_dir) if runs_dir is not None else project_data_path("runs")
    rows = []
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        if p.name.startswith(".") or not (p / "provenance.json").exists():
            continue
        prov = _read_json(p / "provenance.json", "run provenance")
        if prov.get("kind") != "health_check" or not _selected(prov, matrix, stamp):
            continue
        h = prov.get("health") or {}
        rows.append({"run_id": p.name, "status": prov.get("status"), "temperature": prov.get("temperature"),
                     "observed_pos1": h.get("observed_pos1"), "expected_pos1": h.get("expected_pos1"),
                     "ratio": h.get("ratio"), "passed": h.get("passed"),
                     "reason": h.get("reason") or prov.get("error")})
    df = pd.DataFrame(rows, columns=["run_id", "status", "temperature", "observed_pos1", "expected_pos1",
                                     "ratio", "passed", "reason"])
    latest = [not why for why in _superseded(df["run_id"], [""] * len(df))]
    return df[latest].reset_index(drop=True)
