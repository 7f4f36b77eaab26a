"""Model curves of the reproduction (layer 4, studies): predicted ratio vs N per published
(target, method, dataset) sweep with the fitted parameters, and the recorded reproduction outputs.

Details: ``docs/modules/specsim.studies.curves.md``.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from specsim._checks import int_array, int_field
from specsim.acceptance import Acceptance
from specsim.architecture import load_model
from specsim.catalog import is_source_checkout, project_data_path
from specsim.drafters import get_drafter
from specsim.engine import Scenario, check_osl, evaluate
from specsim.errors import SpecsimValueError
from specsim.hardware import load_hardware
from specsim.published import PUBLISHED_METHODS
from specsim.studies.reproduce import (
    Reproduction,
    StackParams,
    concurrency_sensitivity,
    loto_study,
    mi355x_eagle3_curves,
    mi355x_params,
    reproduce,
    reproduction_study,
    seed_table_check,
)

# ------------------------------------------------------------------------------ model curves


def sweep_acceptance(table: pd.DataFrame, target: str, method: str, dataset: str):
    """Per-position acceptance of the largest-N published row of one sweep.

    Parameters
    ----------
    table : DataFrame
        ``Reproduction.table`` (or :func:`specsim.published.load_sweeps`): needs ``target``,
        ``method``, ``dataset``, ``n`` and ``per_position_acceptance_cumulative`` (``;``-separated
        per-position CUMULATIVE acceptance p_k, as published).
    target, method, dataset : str
        Short target name (``"gemma-4-26B-A4B-it"``), published method label (``"dflash"``,
        ``"mtp_gemma4_assistant"``, ...), dataset (``"GSM8K"``...).

    Returns
    -------
    Acceptance
        Nonparametric (:meth:`specsim.acceptance.Acceptance.from_rates`, ``kind="cumulative"``):
        measured positions 1..N_max of the row; beyond them ``cumulative``/``mal`` use the
        acceptance module's default parametric fit (geometric-decay conditional rate, the same
        family ``Acceptance.fit()`` uses) and flag those positions as extrapolated.

    Raises
    ------
    SpecsimValueError
        No published row for this (target, method, dataset).
    """

    g = table[(table["target"] == target) & (table["method"] == method) & (table["dataset"] == dataset)]
    if g.empty:
        raise SpecsimValueError("target/method/dataset", "no published sweep with these keys",
                                f"{target}/{method}/{dataset}")
    row = g.loc[g["n"].idxmax()]
    return Acceptance.from_rates(str(row["per_position_acceptance_cumulative"]), kind="cumulative",
                                 label=f"{target} {method} {dataset} N={int(row['n'])}, vllm-amd-specdec-post appendix")


def model_curve(params, target: str, method: str, acceptance, *, n_values: Iterable[int] = range(1, 16),
                hardware: str = "MI300X", tp: int = 1, isl: int, osl: int,
                concurrency: int | None = None, drafter=None, mal=None) -> pd.DataFrame:
    """Predicted throughput ratio vs N for one (target, method) with fitted stack parameters.

    The same evaluation as the reproduction (``specsim.studies.reproduce.fit_stack``): the stack
    terms' roofline (``params.latency``) and host / speculative overheads (``params.overhead``), the
    same for every target; the model is :func:`specsim.engine.evaluate` (docs/architecture.md), with
    MAL(N) from ``acceptance``.

    Parameters
    ----------
    params : specsim.studies.reproduce.StackParams
        Fitted stack terms (``Reproduction.params_for(target)``: in the leave-one-target-out
        study, the fold that did not see ``target``).
    target : str
        Short target name in ``specsim/data/models``.
    method : str
        Published method label (:data:`specsim.published.PUBLISHED_METHODS`, e.g.
        ``"mtp_gemma4_assistant"``) or a vLLM method string.
    acceptance : Acceptance
        Per-position acceptance; MAL(N) = 1 + sum_{k<=N} p_k.
    n_values : iterable of int, shape (K,)
        Proposal lengths N (>= 1).
    hardware : str
        Accelerator name (``specsim/data/hardware.csv``).
    tp : int
        Tensor-parallel degree of the target.
    isl, osl : int
        Input / output sequence length (tokens).
    concurrency : int, optional
        Concurrent requests; default the fitted (assumed) ``params.concurrency``.
    drafter : specsim.drafters.Drafter, optional
        Use this draft-cost strategy instead of the seed drafter of (target, method).
    mal : array_like, shape (K,), optional
        MAL per N (tokens / step) overriding ``acceptance.mal(n)`` -- e.g. a row's published MAL,
        which the reproduction uses (it equals 1 + sum of the published p_k up to rounding).

    Returns
    -------
    DataFrame, K rows
        ``n``, ``mal`` (tokens / verification step), ``predicted_throughput_ratio``,
        ``t_draft_s``, ``t_verify_s``, ``t_step_s``, ``t_base_s`` (seconds per step),
        ``acceptance_extrapolated`` (N beyond the measured positions of ``acceptance``).

    Raises
    ------
    SpecsimValueError
        Bad N, unknown target / method / hardware.
    """

    n = int_array("n_values", np.atleast_1d(np.asarray(list(n_values))))
    tp = int_field("tp", tp)
    isl = int_field("isl", isl)
    osl = int_field("osl", osl)
    check_osl(osl)
    p = params
    c = int_field("concurrency", int(p.concurrency if concurrency is None else concurrency))
    spec = load_model(target)
    hw = load_hardware(hardware)
    vm, dm = PUBLISHED_METHODS.get(method, (method, None))
    if drafter is None:
        drafter = get_drafter(vm, draft_model=dm.format(target=target) if dm else None, target=spec)
    r = Scenario(target=spec, drafter=drafter, latency=p.latency(hw), acceptance=acceptance, hardware_name=hw.name,
                 method=drafter.method)
    mal = np.asarray(acceptance.mal(n) if mal is None else np.broadcast_to(np.asarray(mal, dtype=float), n.shape),
                     dtype=float)
    out = evaluate(r, n, c, isl, osl, tp, p.overhead(), mal=mal)
    measured = getattr(acceptance, "n_measured", 0)
    return pd.DataFrame({
        "n": n, "mal": mal, "predicted_throughput_ratio": np.asarray(out["throughput_ratio"], dtype=float),
        "t_draft_s": out["t_draft_s"], "t_verify_s": out["t_verify_s"], "t_step_s": out["t_step_s"],
        "t_base_s": out["t_base_s"], "acceptance_extrapolated": n > measured,
    })


def sweep_curves(rep, n_values: Iterable[int] = range(1, 16), concurrency: int | None = None) -> pd.DataFrame:
    """Model curves over N for every published (target, method, dataset) sweep of a reproduction.

    Each sweep uses the acceptance of its largest-N published row (:func:`sweep_acceptance`),
    its own hardware, TP and (assumed) ISL/OSL, and the terms that predicted the target
    (``rep.params_for``: its leave-one-target-out fold in the headline study).

    Parameters
    ----------
    rep : specsim.studies.reproduce.Reproduction
    n_values : iterable of int
        Proposal lengths (default 1..15).
    concurrency : int, optional
        Default: the fitted concurrency.

    Returns
    -------
    DataFrame
        One row per (sweep, N): ``target, method, vllm_method, drafter_kind, dataset, role``
        (the sweep's role in the split: ``fit``/``held_out``), ``hardware, tp, isl, osl``,
        ``acceptance_n`` (N of the row whose acceptance is used = positions measured), the
        :func:`model_curve` columns, and ``published_throughput_ratio`` /
        ``published_mal`` (NaN where N was not published).
    """

    t = rep.table
    n_values = list(n_values)
    frames = []
    for (tgt, meth, ds), g in t.groupby(["target", "method", "dataset"], sort=False):
        acc = sweep_acceptance(g, tgt, meth, ds)
        first = g.iloc[0]
        curve = model_curve(rep.params_for(tgt), tgt, meth, acc, n_values=n_values, hardware=str(first["hardware"]),
                            tp=int(first["tp"]), isl=int(first["isl"]), osl=int(first["osl"]), concurrency=concurrency)
        vm, dm = PUBLISHED_METHODS.get(meth, (meth, None))
        kind = get_drafter(vm, draft_model=dm.format(target=tgt) if dm else None, target=load_model(tgt)).kind
        roles = set(g["role"])
        pub = g.set_index("n")
        curve.insert(0, "acceptance_n", int(g["n"].max()))
        for col, val in (("osl", int(first["osl"])), ("isl", int(first["isl"])), ("tp", int(first["tp"])),
                         ("hardware", first["hardware"]), ("role", roles.pop() if len(roles) == 1 else "mixed"),
                         ("dataset", ds), ("drafter_kind", kind), ("vllm_method", vm), ("method", meth),
                         ("target", tgt)):
            curve.insert(0, col, val)
        curve["published_throughput_ratio"] = curve["n"].map(pub["throughput_ratio"]).astype(float)
        curve["published_mal"] = curve["n"].map(pub["mean_acceptance_length"]).astype(float)
        frames.append(curve)
    return pd.concat(frames, ignore_index=True)


# ------------------------------------------------------------------------------ loading


@lru_cache(maxsize=1)
def default_reproduction():
    """The main reproduction (leave-one-target-out, :func:`specsim.studies.reproduce.loto_study`),
    computed once per process.

    Shared by the notebook, the tests and the figures so the (several-second) fit runs once.
    Treat the returned object as read-only.
    """

    return loto_study().rep


@lru_cache(maxsize=1)
def fitted_reproduction():
    """The fit on EVERY appendix row (``reproduce("all")``: the shipped MI300X calibration's terms),
    computed once per process: what the qualitative trends are checked on (a fit, not a held-out
    prediction).  Treat as read-only."""

    return reproduce("all")


def load_reproduction(out_dir: str | Path | None = None, *, recompute: bool = False) -> dict:
    """The reproduction and its side tables, read from the main job's output or computed now.

    Parameters
    ----------
    out_dir : path, optional
        Where :func:`specsim.main_job.run_main_job` wrote its tables (default
        ``<repo>/data/reproduction``).  Used when it holds ``summary.json`` and
        ``reproduction_table.csv`` and ``recompute`` is False.
    recompute : bool
        Compute everything now (:func:`default_reproduction`, the concurrency sensitivity, the
        MI355X curves, the stress splits at the fitted concurrency) instead of reading files.

    Returns
    -------
    dict
        ``rep`` (:class:`~specsim.studies.reproduce.Reproduction`), ``seed_table``,
        ``sensitivity`` (fitted parameters held fixed, concurrency scaled), ``refit``
        (refit per assumed concurrency = ``rep.sensitivity``), ``mi355x`` (EAGLE-3 curves),
        ``stress`` (leave-one-target-out and small-N splits), ``source`` (where it came from).
    """
    import json


    if out_dir is not None:
        out = Path(out_dir)
    else:
        out = project_data_path("reproduction") if is_source_checkout() else None
    have = out is not None and (out / "summary.json").is_file() and (out / "reproduction_table.csv").is_file()
    if have and not recompute:
        summary = json.loads((out / "summary.json").read_text())
        params = StackParams(terms=dict(summary["terms"]), concurrency=int(summary["concurrency_assumed"]),
                             term_sources=dict(summary.get("term_sources") or {}))
        folds = {t: StackParams(terms=dict(f["terms"]), concurrency=int(f["concurrency"]))
                 for t, f in (summary.get("folds") or {}).items()}
        read = lambda name: pd.read_csv(out / name) if (out / name).is_file() else None  # noqa: E731
        refit = read("concurrency_refit.csv")
        rep = Reproduction(table=read("reproduction_table.csv"), best_n=read("best_n.csv"), params=params,
                           summary={k: v for k, v in summary.items() if k != "seed_table"},
                           sensitivity=refit if refit is not None else pd.DataFrame(), fold_params=folds)
        sens = read("concurrency_sensitivity.csv")
        mi = read("mi355x_eagle3.csv")
        return {
            "rep": rep,
            "seed_table": pd.DataFrame(summary["seed_table"]) if "seed_table" in summary else seed_table_check(rep),
            "sensitivity": sens if sens is not None else concurrency_sensitivity(rep),
            "refit": rep.sensitivity,
            "mi355x": mi if mi is not None else mi355x_eagle3_curves(mi355x_params(rep.params)[0]),
            "stress": read("stress_splits.csv"),
            "source": f"read from {out} (written by `specsim reproduce`, specsim.main_job.run_main_job)",
        }
    study = reproduction_study()
    rep = study.rep
    return {
        "rep": rep, "seed_table": seed_table_check(rep), "sensitivity": study.sensitivity,
        "refit": rep.sensitivity, "mi355x": study.mi355x, "stress": study.stress,
        "source": "computed now (specsim.studies.reproduce.reproduction_study)",
    }
