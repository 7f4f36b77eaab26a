"""``vllm bench sweep serve`` results (``<experiment>/<SERVE--...-BENCH--...>/run=K.json``,
``summary.json``, ``<experiment>/summary.csv``) into counts per run, with the dynamic-speculation
schedule of each run (layer 1, vLLM formats).

Layout (``vllm/benchmarks/sweep/serve.py`` 0.32.0): one directory per (serve, bench) parameter
combination, named ``SERVE--<serve name>-BENCH--<bench params>``; in it ``run=K.json`` (the
``--save-result`` JSON of run K, with the serve and bench overrides merged in by
``_update_run_data``: ``_benchmark_name``, ``speculative_config``, ``max_concurrency``, ...,
``run_number``) and ``summary.json`` (the list of those runs); the experiment directory has
``summary.csv`` (all runs, one row each).  The serve overrides come from ``--serve-params``
(``serve_params.json``: a list of ``{"_benchmark_name": ..., <vllm serve args>}``).

Dynamic schedules.  With ``speculative_config.num_speculative_tokens_per_batch_size`` each round
proposes k(batch size) tokens (``vllm/v1/spec_decode/dynamic/utils.py``
``build_dynamic_sd_schedule_lookup``), while the ``/metrics`` counters the bench result comes from
sum every round into one N-position histogram (``vllm/v1/spec_decode/metrics.py``): rounds of
length k < N count as rejections at positions > k (vLLM tracks ``num_draft_tokens_per_pos``
in ``SpecDecodingStats``, ``metrics.py:31``, but exports no counter of it).  The totals (drafts, draft tokens, accepted
tokens, hence MAL) stay exact; the per-position acceptance does not, unless every round had the
same length.  :meth:`SweepRun.acceptance_counts` therefore gives per-position counts only when
they are uncensored and otherwise refuses, pointing at per-request metrics
(``specsim.vllm.per_request``).
"""
from __future__ import annotations

import ast
import csv
import io
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from specsim.errors import DataError, NotCollectedError
from specsim.vllm.bench import BenchResult, read_bench_result
from specsim.vllm.counts import SpecDecodeCounts
from specsim.vllm.schedule import SCHEDULE_FIELD, expand_schedule, validate_schedule

__all__ = ["SweepRun", "read_bench_sweep", "read_sweep_summary_csv", "read_sweep_summary_runs", "sweep_failures"]

_RUN = re.compile(r"^run=(\d+)\.json$")
#: the count-bearing files of a run recorded by ``specsim run-matrix`` (a directory with provenance.json)
_RUN_MATRIX_FILES = ("bench.json", "metrics_after.prom", "metrics_before.prom", "server.log")


@dataclass(frozen=True)
class SweepRun:
    """One measured run of a ``vllm bench sweep serve`` combination.

    Attributes
    ----------
    combination : str
        The combination directory name (``SERVE--...-BENCH--...``).
    run_number : int
    result : BenchResult
        The run's bench result (its ``spec`` counts are the aggregate counter deltas).
    speculative_config : dict or None
        The run's ``speculative_config`` (from the run JSON, else from ``serve_params.json``
        matched by ``_benchmark_name``); None when neither names one.
    max_concurrency : int or None
        The bench's ``max_concurrency`` (None = unlimited).
    source : str
    """

    combination: str
    run_number: int
    result: BenchResult
    speculative_config: Mapping | None
    max_concurrency: int | None
    source: str = ""

    @property
    def schedule(self) -> list | None:
        """The validated ``num_speculative_tokens_per_batch_size`` schedule, or None (static N)."""
        cfg = self.speculative_config or {}
        if cfg.get(SCHEDULE_FIELD) is None:
            return None
        return validate_schedule(cfg[SCHEDULE_FIELD], cfg.get("num_speculative_tokens"))

    @property
    def scheduled(self) -> bool:
        """True when the run used a dynamic speculation schedule."""
        return self.schedule is not None

    @property
    def draft_lengths(self) -> tuple | None:
        """Draft lengths k > 0 the schedule allows for batch sizes 1..max_concurrency (all of the
        schedule's k when the concurrency is unlimited); None for a static N."""
        sched = self.schedule
        if sched is None:
            return None
        n = int(self.speculative_config["num_speculative_tokens"])
        if self.max_concurrency is None:
            ks = {min(k, n) for _, _, k in sched}
        else:
            dense = expand_schedule(sched, self.max_concurrency, n)
            ks = {int(k) for k in dense[1:]}
        return tuple(sorted(k for k in ks if k > 0))

    def spec_counts(self) -> SpecDecodeCounts:
        """The aggregate counter deltas of the run (totals and MAL exact; per-position counts
        censored under a schedule, see :meth:`acceptance_counts`).

        Raises
        ------
        NotCollectedError
            The run has no ``spec_decode_*`` fields.
        """
        return self.result.spec_counts()

    def acceptance_counts(self) -> SpecDecodeCounts:
        """Counts whose per-position acceptance is uncensored, for an acceptance model.

        Static N: :meth:`spec_counts`.  Under a schedule: the counts when every round proposed N
        tokens (draft tokens == N x drafts); the counts cut to k positions when the schedule
        allows a single length k at this concurrency (and nothing was accepted beyond k).

        Raises
        ------
        NotCollectedError
            No spec fields; or rounds of several lengths were pooled by the aggregate counters,
            so the per-position acceptance is censored: per-request metrics are needed
            (``vllm serve --per-request-spec-decode-metrics detailed``, then
            ``specsim.vllm.per_request.acceptance_by_draft_length``).
        """
        c = self.spec_counts()
        if not self.scheduled:
            return c
        n, d, t = c.num_speculative_tokens, c.num_drafts, c.num_draft_tokens
        if t == n * d:
            return c
        lengths = self.draft_lengths or ()
        if len(lengths) == 1:
            k = lengths[0]
            if t <= k * d and all(x == 0 for x in c.accepted_per_pos[k:]):
                return SpecDecodeCounts(d, t, c.num_accepted_tokens, c.accepted_per_pos[:k],
                                        source=f"{c.source} (schedule: k = {k})")
        conc = "unlimited concurrency" if self.max_concurrency is None else \
            f"max_concurrency {self.max_concurrency}"
        raise NotCollectedError(
            f"{self.source}: dynamic schedule {self.schedule} with {conc} allows draft lengths "
            f"{list(lengths)} (this run: {t} draft tokens in {d} drafts, mean "
            f"{t / d if d else math.nan:.2f}); the aggregate counters pool rounds of different "
            f"lengths, so per-position acceptance is censored and not recoverable from them. "
            f"Per-request metrics are needed: vllm serve --per-request-spec-decode-metrics "
            f"detailed, then specsim.vllm.per_request.acceptance_by_draft_length. Totals and MAL "
            f"are exact: spec_counts()")


def _int(v: Any, what: str) -> int:
    """A non-negative whole number (run numbers, concurrencies), else DataError."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = math.nan
    if isinstance(v, bool) or not math.isfinite(f) or f != int(f) or f < 0:
        raise DataError(f"{what}: expected a whole number, got {v!r}")
    return int(f)


def _load_json(path: Path, src: str) -> Any:
    try:
        with open(path, encoding="utf-8-sig") as fh:  # a leading byte-order mark dropped
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{src}: not valid JSON (truncated file?): {exc}") from exc


def _serve_params(root: Path, given: str | os.PathLike | None) -> list | None:
    if given is not None:
        p = Path(given)
    else:
        cands = [d / "serve_params.json" for d in (root, *list(root.parents)[:2])]
        p = next((c for c in cands if c.is_file()), None)
        if p is None:
            return None
    raw = _load_json(p, p.name)
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
        raise DataError(f"{p.name}: expected a list of serve-parameter objects")
    return raw


def read_bench_sweep(path: str | os.PathLike, *, serve_params: str | os.PathLike | None = None) -> list[SweepRun]:
    """Read every measured run under a ``vllm bench sweep serve`` output directory.

    Parameters
    ----------
    path : path-like
        The sweep output directory, one experiment directory in it, or one combination directory.
    serve_params : path-like, optional
        The ``--serve-params`` file; by default ``serve_params.json`` in ``path`` or up to two
        directories above it, if there.  Used for a run whose JSON carries no
        ``speculative_config`` (matched by ``_benchmark_name``) and to check the runs' configs.

    Returns
    -------
    list of SweepRun
        Sorted by combination directory, then run number (``warmup.json`` and
        ``*.failure.json`` are not measured runs and are skipped; :func:`sweep_failures` names the
        failed ones).

    Raises
    ------
    DataError
        No ``run=K.json`` under ``path``; a run that fails :func:`specsim.vllm.bench.read_bench_result`;
        a ``summary.json`` that disagrees with its ``run=K.json`` files (number of runs or spec
        counters); a run's ``speculative_config`` different from its ``serve_params.json`` entry.
    SpecsimValueError
        An invalid schedule in a config (as :func:`specsim.vllm.schedule.validate_schedule`).
    """
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"{root}: not a directory (expected a vllm bench sweep output directory)")
    sp = _serve_params(root, serve_params)
    by_name = {e.get("_benchmark_name"): e for e in sp or [] if "_benchmark_name" in e}
    files = sorted((f for f in root.rglob("run=*.json") if _RUN.match(f.name)),
                   key=lambda f: (str(f.parent), int(_RUN.match(f.name).group(1))))
    if not files:
        have = [f for f in _RUN_MATRIX_FILES if (root / f).is_file()]
        if have and (root / "provenance.json").is_file():
            raise DataError(f"{root}: a run recorded by specsim run-matrix: read its bench.json, or "
                            f"metrics_after.prom with --before metrics_before.prom, not the directory (it has "
                            f"{', '.join(have)}; its server.log counts only the intervals vLLM logged)")
        failed = sweep_failures(root)
        why = f": {len(failed)} failed ({'; '.join(failed)})" if failed else " (or no run finished)"
        raise DataError(f"{root}: no run=K.json files (not a vllm bench sweep output directory{why})")
    out: list[SweepRun] = []
    for f in files:
        comb = f.parent.name
        src = f"{comb}/{f.name}"
        raw = _load_json(f, src)
        if not isinstance(raw, dict):
            raise DataError(f"{src}: expected a JSON object")
        res = read_bench_result(raw, source=src)
        cfg = raw.get("speculative_config")
        if isinstance(cfg, str):
            try:
                cfg = json.loads(cfg)
            except json.JSONDecodeError as exc:
                raise DataError(f"{src}: speculative_config is not JSON: {exc}") from exc
        entry = by_name.get(raw.get("_benchmark_name"))
        if entry is not None and "speculative_config" in entry:
            if cfg is None:
                cfg = entry["speculative_config"]
            elif cfg != entry["speculative_config"]:
                raise DataError(f"{src}: speculative_config {cfg} differs from serve_params.json's "
                                f"{entry['speculative_config']} for {raw.get('_benchmark_name')!r}")
        if cfg is not None and not isinstance(cfg, dict):
            raise DataError(f"{src}: speculative_config is not an object: {cfg!r}")
        mc = raw.get("max_concurrency")
        run = SweepRun(comb, int(_RUN.match(f.name).group(1)), res, cfg,
                       None if mc is None else _int(mc, f"{src}: max_concurrency"), src)
        _ = run.schedule  # validate the schedule now (SpecsimValueError names the entry)
        out.append(run)
    _check_summaries(out, root)
    return out


def sweep_failures(path: str | os.PathLike) -> list[str]:
    """The runs and servers a ``vllm bench sweep serve`` directory records as failed.

    With ``--continue-on-error`` vLLM writes ``run=K.failure.json`` beside a combination's runs for a
    bench that raised (``warmup.failure.json`` for its warm-up) and ``SERVE-<name>-failure.json`` in
    the experiment directory for a server that did not start; the failed runs have no
    ``run=K.json`` and are not in ``summary.csv`` (``vllm/benchmarks/sweep/serve.py`` 0.32.0,
    ``run_comb`` and ``run_combs``).

    Parameters
    ----------
    path : path-like
        The sweep output directory, an experiment directory or a combination directory (searched
        through), or an experiment's ``summary.csv`` (its experiment directory and combination
        directories are searched).

    Returns
    -------
    list of str
        One line per failure file, sorted: ``<directory>/<file>: <error_type>: <error>`` (the error's
        first line; a file that is not such JSON is named as unreadable).  Empty where nothing failed.
    """
    root = Path(path)
    if root.is_dir():
        found = root.rglob("*failure.json")
    else:
        exp = root.parent
        # a combination directory is SERVE--<name>-BENCH--<name>, or BENCH--<name> alone without
        # --serve-params (vllm/benchmarks/sweep/serve.py _get_comb_base_path)
        found = [*exp.glob("*failure.json"), *exp.glob("*/*failure.json")]
    out = []
    for f in sorted(found):
        where = f"{f.parent.name}/{f.name}"
        try:
            doc = json.loads(f.read_text(encoding="utf-8-sig"))
            lines = str(doc.get("error") or "").strip().splitlines()
            err = f"{doc['error_type']}: {lines[0]}" if lines else str(doc["error_type"])
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            err = "unreadable failure record"
        out.append(f"{where}: {err}")
    return out


def _check_summaries(runs: list[SweepRun], root: Path) -> None:
    dirs: dict[str, list[SweepRun]] = {}
    for r in runs:
        dirs.setdefault(r.combination, []).append(r)
    for comb_dir in {f.parent for f in root.rglob("summary.json")}:
        mine = dirs.get(comb_dir.name)
        if mine is None:
            continue
        summ = _load_json(comb_dir / "summary.json", f"{comb_dir.name}/summary.json")
        if not isinstance(summ, list):
            raise DataError(f"{comb_dir.name}/summary.json: expected a list of runs")
        if len(summ) != len(mine):
            raise DataError(f"{comb_dir.name}/summary.json lists {len(summ)} runs but there are "
                            f"{len(mine)} run=K.json files")
        for s, r in zip(sorted(summ, key=lambda x: x.get("run_number", 0)), mine):
            sb = read_bench_result(s, source=f"{comb_dir.name}/summary.json")
            if (sb.spec is None) != (r.result.spec is None) or (
                    sb.spec is not None and (sb.spec.num_drafts, sb.spec.num_draft_tokens,
                                             sb.spec.num_accepted_tokens, sb.spec.accepted_per_pos)
                    != (r.result.spec.num_drafts, r.result.spec.num_draft_tokens,
                        r.result.spec.num_accepted_tokens, r.result.spec.accepted_per_pos)):
                raise DataError(f"{comb_dir.name}/summary.json disagrees with {r.source} on the "
                                f"spec-decode counters")


def _csv_records(path: str | os.PathLike) -> tuple[list[dict], str]:
    p = os.fspath(path)
    src = os.path.basename(p)
    try:
        with open(p, newline="", encoding="utf-8") as fh:
            text = fh.read()
        df = pd.read_csv(io.StringIO(text), index_col=0)
        widths = [len(r) for r in csv.reader(io.StringIO(text)) if r]
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, csv.Error) as exc:
        raise DataError(f"{src}: not a readable CSV: {exc}") from exc
    # pandas fills a row's missing trailing cells with NaN: a file cut inside its last row would read
    # as a run without the cells cut off (its speculative_config, say), not as the truncated file it is
    short = [i for i, w in enumerate(widths[1:]) if w < widths[0]]
    if short:
        raise DataError(f"{src} row {short[0]}: {widths[1 + short[0]]} of the header's {widths[0]} cells "
                        "(a file cut off inside a row, or a malformed row)")
    out = []
    for i, (_, row) in enumerate(df.iterrows()):
        rec = {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
        key = "spec_decode_per_position_acceptance_rates"
        if key in rec:
            try:
                rec[key] = json.loads(rec[key])
            except (TypeError, json.JSONDecodeError) as exc:
                raise DataError(f"{src} row {i}: {key} is not a JSON list: {rec[key]!r}") from exc
        out.append(rec)
    return out, src


def read_sweep_summary_runs(path: str | os.PathLike) -> list[SweepRun]:
    """Read an experiment's ``summary.csv`` into sweep runs, with each row's schedule.

    The ``speculative_config`` cell is the Python repr pandas wrote of the serve override (read
    with ``ast.literal_eval``, literals only); ``combination`` is the row's ``_benchmark_name``.

    Raises
    ------
    DataError
        As :func:`read_sweep_summary_csv`; a ``speculative_config`` cell that is not a literal dict.
    SpecsimValueError
        An invalid schedule.
    """
    recs, src = _csv_records(path)
    out = []
    for i, rec in enumerate(recs):
        where = f"{src}[{i}]"
        cfg = rec.get("speculative_config")
        if isinstance(cfg, str):
            try:
                cfg = ast.literal_eval(cfg)
            except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
                raise DataError(f"{where}: speculative_config {cfg!r} is not a literal: {exc}") from None
        if cfg is not None and not isinstance(cfg, dict):
            raise DataError(f"{where}: speculative_config is not an object: {cfg!r}")
        res = read_bench_result({k: v for k, v in rec.items() if k != "speculative_config"}, source=where)
        mc = rec.get("max_concurrency")
        run = SweepRun(str(rec.get("_benchmark_name", "")), _int(rec.get("run_number", 0), f"{where}: run_number"),
                       res, cfg, None if mc is None else _int(mc, f"{where}: max_concurrency"), where)
        _ = run.schedule  # validate now
        out.append(run)
    return out


def read_sweep_summary_csv(path: str | os.PathLike) -> list[BenchResult]:
    """Read an experiment's ``summary.csv`` (one row per run) into bench results (without the
    schedule; :func:`read_sweep_summary_runs` gives each row's schedule too).

    The list-valued ``spec_decode_per_position_acceptance_rates`` cell is JSON text; empty cells
    (a run without speculative decoding) are dropped, so such a row is "not collected".

    Raises
    ------
    DataError
        Unreadable CSV, a per-position cell that is not a JSON list, or a row failing
        :func:`specsim.vllm.bench.read_bench_result`.
    """
    recs, src = _csv_records(path)
    return [read_bench_result(rec, source=f"{src}[{i}]") for i, rec in enumerate(recs)]
