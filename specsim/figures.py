"""Figures of the reproduction of the published tables, and the model curves behind them.

Everything here is presentation: the numbers come from :mod:`specsim.reproduce` (the fit /
held-out reproduction of the vllm-amd-specdec-post appendix sweeps and the amd-eagle3-post MI355X
cases) and :mod:`specsim.predict` (the step-time model).  Two public helpers compute the model
curves the figures draw (and the trend tests check):

* :func:`model_curve` -- predicted throughput ratio vs ``num_speculative_tokens`` N for one
  (target, method) with the reproduction's FITTED stack parameters and a given acceptance;
* :func:`sweep_curves` -- :func:`model_curve` over N = 1..15 for every published
  (target, method, dataset) sweep, each with the per-position acceptance of its largest-N row
  (measured up to that N, extrapolated beyond by the acceptance module's parametric fit).

Figures are drawn with matplotlib's object API on the Agg canvas (no pyplot, no global backend
change), with matplotlib's default style plus fixed sizes, so the PNG bytes depend only on the
inputs and the matplotlib version.
"""
from __future__ import annotations

import os
import re
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from .errors import SpecsimValueError

__all__ = [
    "DATASET_ORDER", "METHOD_ORDER", "sweep_acceptance", "model_curve", "sweep_curves",
    "ratio_vs_n_figure", "acceptance_figure", "mi355x_figure", "parity_figure", "sensitivity_figure",
    "reproduction_figures", "load_reproduction", "default_reproduction",
]

#: panel order of the appendix datasets (math first, then code)
DATASET_ORDER = ("GSM8K", "MATH500", "HumanEval", "MBPP")
#: legend order of the published method labels (sequential first, then parallel)
METHOD_ORDER = ("mtp", "mtp_gemma4_assistant", "eagle3", "dflash", "dspark")
_METHOD_STYLE = {  # colour, marker
    "mtp": ("#1b9e77", "s"),
    "mtp_gemma4_assistant": ("#7570b3", "D"),
    "eagle3": ("#d95f02", "^"),
    "dflash": ("#1f78b4", "o"),
    "dspark": ("#e7298a", "v"),
}
_ROLE_COLOUR = {"fit": "#7f7f7f", "held_out": "#d62728"}
_RC = {
    "figure.dpi": 100, "savefig.dpi": 110, "font.size": 9, "axes.titlesize": 9.5, "axes.labelsize": 9,
    "legend.fontsize": 8, "xtick.labelsize": 8, "ytick.labelsize": 8, "figure.titlesize": 10.5,
    "axes.grid": True, "grid.alpha": 0.3, "svg.hashsalt": "specsim", "path.simplify": False,
}


# ------------------------------------------------------------------------------ model curves


def _method_label(method: str) -> str:
    from .reproduce import METHOD_LABELS

    return METHOD_LABELS.get(method, method)


def sweep_acceptance(table: pd.DataFrame, target: str, method: str, dataset: str):
    """Per-position acceptance of the largest-N published row of one sweep.

    Parameters
    ----------
    table : DataFrame
        ``Reproduction.table`` (or :func:`specsim.reproduce.load_sweeps`): needs ``target``,
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
    from .acceptance import Acceptance

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

    The same evaluation as the reproduction (:func:`specsim.reproduce._eval_groups`): the target's
    own fitted parameters (``params.for_target``), the fitted roofline (``params.latency``), the
    fitted speculative overhead (``params.overhead``) and the fitted seconds per draft pass; the
    model is :func:`specsim.predict._evaluate` (docs/architecture.md), with MAL(N) from ``acceptance``.

    Parameters
    ----------
    params : specsim.reproduce.StackParams
        Fitted parameters (``Reproduction.params``).
    target : str
        Short target name in ``data/models``.
    method : str
        Published method label (:data:`specsim.reproduce.PUBLISHED_METHODS`, e.g.
        ``"mtp_gemma4_assistant"``) or a vLLM method string.
    acceptance : Acceptance
        Per-position acceptance; MAL(N) = 1 + sum_{k<=N} p_k.
    n_values : iterable of int, shape (K,)
        Proposal lengths N (>= 1).
    hardware : str
        Accelerator name (``data/hardware.csv``).
    tp : int
        Tensor-parallel degree of the target.
    isl, osl : int
        Input / output sequence length (tokens).
    concurrency : int, optional
        Concurrent requests; default the fitted (assumed) ``params.concurrency``.
    drafter : specsim.drafters.Drafter, optional
        Use this draft-cost strategy instead of the seed drafter of (target, method); its
        ``draft_pass_overhead_s`` is still replaced by the fitted value.
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
    from .architecture import load_model
    from .drafters import get_drafter
    from .hardware import load_hardware
    from .predict import _evaluate, _int_array, _int_field, _Resolved
    from .reproduce import PUBLISHED_METHODS

    n = _int_array("n_values", np.atleast_1d(np.asarray(list(n_values))))
    tp = _int_field("tp", tp)
    isl = _int_field("isl", isl)
    osl = _int_field("osl", osl)
    p = params.for_target(target)
    c = _int_field("concurrency", int(p.concurrency if concurrency is None else concurrency))
    spec = load_model(target)
    hw = load_hardware(hardware)
    vm, dm = PUBLISHED_METHODS.get(method, (method, None))
    if drafter is None:
        drafter = get_drafter(vm, draft_model=dm.format(target=target) if dm else None, target=spec)
    drafter = drafter.with_params(draft_pass_overhead_s=p.draft_pass_overhead_s)
    r = _Resolved(spec, drafter, p.latency(hw), acceptance, hw.name, None, drafter.method, None, (), 0.0)
    mal = np.asarray(acceptance.mal(n) if mal is None else np.broadcast_to(np.asarray(mal, dtype=float), n.shape),
                     dtype=float)
    out = _evaluate(r, n, c, isl, osl, tp, p.overhead(), mal=mal)
    measured = getattr(acceptance, "n_measured", 0)
    return pd.DataFrame({
        "n": n, "mal": mal, "predicted_throughput_ratio": np.asarray(out["throughput_ratio"], dtype=float),
        "t_draft_s": out["t_draft_s"], "t_verify_s": out["t_verify_s"], "t_step_s": out["t_step_s"],
        "t_base_s": out["t_base_s"], "acceptance_extrapolated": n > measured,
    })


def sweep_curves(rep, n_values: Iterable[int] = range(1, 16), concurrency: int | None = None) -> pd.DataFrame:
    """Model curves over N for every published (target, method, dataset) sweep of a reproduction.

    Each sweep uses the acceptance of its largest-N published row (:func:`sweep_acceptance`),
    its own hardware, TP and (assumed) ISL/OSL, and the reproduction's fitted parameters.

    Parameters
    ----------
    rep : specsim.reproduce.Reproduction
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
    from .drafters import get_drafter
    from .architecture import load_model
    from .reproduce import PUBLISHED_METHODS

    t = rep.table
    n_values = list(n_values)
    frames = []
    for (tgt, meth, ds), g in t.groupby(["target", "method", "dataset"], sort=False):
        acc = sweep_acceptance(g, tgt, meth, ds)
        first = g.iloc[0]
        curve = model_curve(rep.params, tgt, meth, acc, n_values=n_values, hardware=str(first["hardware"]),
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
    """The main reproduction (``reproduce("dataset", "GSM8K")``), computed once per process.

    Shared by the notebook, the tests and the figures so the (several-second) fit runs once.
    Treat the returned object as read-only.
    """
    from .reproduce import reproduce

    return reproduce("dataset", "GSM8K")


def load_reproduction(out_dir: str | Path | None = None, *, recompute: bool = False) -> dict:
    """The reproduction and its side tables, read from the main job's output or computed now.

    Parameters
    ----------
    out_dir : path, optional
        Where :func:`specsim.reproduce.run_main_job` wrote its tables (default
        ``<repo>/data/reproduction``).  Used when it holds ``summary.json`` and
        ``reproduction_table.csv`` and ``recompute`` is False.
    recompute : bool
        Compute everything now (:func:`default_reproduction`, the concurrency sensitivity, the
        MI355X curves, the stress splits at the fitted concurrency) instead of reading files.

    Returns
    -------
    dict
        ``rep`` (:class:`~specsim.reproduce.Reproduction`), ``seed_table``,
        ``sensitivity`` (fitted parameters held fixed, concurrency scaled), ``refit``
        (refit per assumed concurrency = ``rep.sensitivity``), ``mi355x`` (EAGLE-3 curves),
        ``stress`` (leave-one-target-out and small-N splits), ``source`` (where it came from).
    """
    import json

    from .catalog import data_path
    from .reproduce import (Reproduction, StackParams, concurrency_sensitivity, mi355x_eagle3_curves,
                            reproduce, seed_table_check)

    out = Path(out_dir) if out_dir is not None else data_path("reproduction")
    have = (out / "summary.json").is_file() and (out / "reproduction_table.csv").is_file()
    if have and not recompute:
        summary = json.loads((out / "summary.json").read_text())
        pf = dict(summary["params"])
        fields = set(StackParams.__dataclass_fields__)
        params = StackParams(**{k: v for k, v in pf.items() if k in fields})
        read = lambda name: pd.read_csv(out / name) if (out / name).is_file() else None  # noqa: E731
        refit = read("concurrency_refit.csv")
        rep = Reproduction(table=read("reproduction_table.csv"), best_n=read("best_n.csv"), params=params,
                           summary={k: v for k, v in summary.items() if k != "seed_table"},
                           sensitivity=refit if refit is not None else pd.DataFrame())
        sens = read("concurrency_sensitivity.csv")
        mi = read("mi355x_eagle3.csv")
        return {
            "rep": rep,
            "seed_table": pd.DataFrame(summary["seed_table"]) if "seed_table" in summary else seed_table_check(rep),
            "sensitivity": sens if sens is not None else concurrency_sensitivity(rep),
            "refit": rep.sensitivity,
            "mi355x": mi if mi is not None else mi355x_eagle3_curves(rep.params),
            "stress": read("stress_splits.csv"),
            "source": f"read from {out} (written by `specsim reproduce`, specsim.reproduce.run_main_job)",
        }
    rep = default_reproduction()
    stress = []
    for split, value in [("target", t) for t in rep.table["target"].unique()] + [("small_n", None)]:
        s = reproduce(split, value, concurrency=rep.params.concurrency).summary
        stress.append({
            "split": f"leave-one-target-out: {value}" if split == "target" else "fit on the two smallest N per sweep",
            **{k: s[k] for k in ("held_out_rows", "held_out_median_abs_rel_error", "held_out_max_abs_rel_error",
                                 "held_out_best_n_exact", "held_out_best_n_within_one_step")}})
    return {
        "rep": rep, "seed_table": seed_table_check(rep), "sensitivity": concurrency_sensitivity(rep),
        "refit": rep.sensitivity, "mi355x": mi355x_eagle3_curves(rep.params), "stress": pd.DataFrame(stress),
        "source": "computed now (specsim.reproduce.reproduce)",
    }


# ------------------------------------------------------------------------------ drawing helpers


def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _style():
    import contextlib

    import matplotlib
    import matplotlib.style

    stack = contextlib.ExitStack()
    stack.enter_context(matplotlib.style.context("default"))
    stack.enter_context(matplotlib.rc_context(_RC))
    return stack


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def _save(fig, path: Path) -> Path:
    """Write a PNG atomically (temp file + rename); metadata without version stamps."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", metadata={"Software": None})
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; figures are shared project files
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def _role_word(role: str) -> str:
    return {"fit": "fit", "held_out": "held out"}.get(role, "fit + held out")


def _fit_description(rep) -> str:
    s = rep.summary
    split = s.get("split", "dataset")
    t = rep.table
    fit_ds = sorted(set(t.loc[t["role"] == "fit", "dataset"]), key=_ds_key)
    held_ds = sorted(set(t.loc[t["role"] == "held_out", "dataset"]), key=_ds_key)
    if split == "dataset":
        return (f"stack latency params + concurrency fitted on the {'/'.join(fit_ds)} rows; "
                f"{'/'.join(held_ds)} held out")
    return f"split '{split}' ({s.get('fit_subset')}): fitted on the 'fit' rows, the rest held out"


def _ds_key(ds: str) -> tuple:
    return (DATASET_ORDER.index(ds) if ds in DATASET_ORDER else len(DATASET_ORDER), ds)


def _methods_sorted(methods: Iterable[str]) -> list[str]:
    return sorted(set(methods), key=lambda m: (METHOD_ORDER.index(m) if m in METHOD_ORDER else 99, m))


def _style_of(method: str) -> tuple[str, str]:
    return _METHOD_STYLE.get(method, ("#333333", "x"))


# ------------------------------------------------------------------------------ figures


def ratio_vs_n_figure(rep, curves: pd.DataFrame, target: str):
    """Throughput ratio vs N for one target: one panel per dataset, one colour per method.

    Published appendix points are filled markers; the model (fitted parameters, the sweep's
    largest-N acceptance) is a line, solid where the acceptance is measured and dashed where it
    is extrapolated; small crosses are the model at each row's OWN measured MAL (the numbers in
    the reproduction table).  Panel titles say whether the dataset was fitted or held out.

    Parameters
    ----------
    rep : Reproduction
    curves : DataFrame
        :func:`sweep_curves` output.
    target : str

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.lines import Line2D

    t = rep.table[rep.table["target"] == target]
    cv = curves[curves["target"] == target]
    if t.empty:
        raise SpecsimValueError("target", "not in the reproduction table", target, sorted(rep.table["target"].unique()))
    datasets = sorted(t["dataset"].unique(), key=_ds_key)
    with _style():
        fig = _new_figure(3.2 * len(datasets) + 0.4, 4.4)
        axes = fig.subplots(1, len(datasets), sharey=True, squeeze=False)[0]
        for ax, ds in zip(axes, datasets):
            td = t[t["dataset"] == ds]
            for meth in _methods_sorted(td["method"]):
                colour, marker = _style_of(meth)
                c = cv[(cv["dataset"] == ds) & (cv["method"] == meth)].sort_values("n")
                nm = int(c["acceptance_n"].iloc[0])
                meas = c[c["n"] <= nm]
                extra = c[c["n"] >= nm]
                ax.plot(meas["n"], meas["predicted_throughput_ratio"], "-", color=colour, lw=1.6,
                        label=_method_label(meth))
                if len(extra) > 1:
                    ax.plot(extra["n"], extra["predicted_throughput_ratio"], "--", color=colour, lw=1.3)
                r = td[td["method"] == meth].sort_values("n")
                ax.plot(r["n"], r["throughput_ratio"], marker, color=colour, ms=5.5, ls="none")
                ax.plot(r["n"], r["predicted_throughput_ratio"], "x", color=colour, ms=4.5, mew=1.0, ls="none")
            ax.axhline(1.0, color="k", lw=0.8, ls=":")
            roles = set(td["role"])
            role = roles.pop() if len(roles) == 1 else "mixed"
            err = td["rel_error"].abs()
            ax.set_title(f"{ds} ({_role_word(role)})\nmedian |error| {err.median():.1%}, max {err.max():.1%}",
                         color=_ROLE_COLOUR.get(role, "k"))
            ax.set_xlabel("N = num_speculative_tokens (tokens)")
            ax.set_xlim(0.5, 15.5)
            ax.set_xticks([1, 3, 5, 7, 9, 11, 13, 15])
        axes[0].set_ylabel("throughput ratio\n(spec / no-spec output tok/s)")
        handles, labels = axes[0].get_legend_handles_labels()
        seen = dict(zip(labels, handles))
        for ax in axes[1:]:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(lab, h)
        style = [
            Line2D([], [], color="k", marker="o", ls="none", ms=5, label="published (appendix)"),
            Line2D([], [], color="k", lw=1.6, label="model, measured acceptance"),
            Line2D([], [], color="k", lw=1.3, ls="--", label="model, acceptance extrapolated (fit)"),
            Line2D([], [], color="k", marker="x", ls="none", ms=5, label="model at the row's own MAL"),
        ]
        fig.legend(list(seen.values()) + style, list(seen.keys()) + [s.get_label() for s in style],
                   loc="outside lower center", ncol=min(8, len(seen) + len(style)), frameon=False)
        hw = ", ".join(sorted(set(t["hardware"].astype(str))))
        tp = ", ".join(str(v) for v in sorted(set(t["tp"].astype(int))))
        fig.suptitle(f"{target} on {hw} (TP={tp}): throughput ratio vs N, published vs predicted\n"
                     f"{_fit_description(rep)};\nconcurrency {rep.params.concurrency} assumed (fitted); "
                     f"measured input of each row: its per-position acceptance")
    return fig


def acceptance_figure(rep, target: str):
    """Published per-position acceptance of one target (cumulative AND conditional).

    Top row: cumulative p_k = P(at least k draft tokens accepted) as published; bottom row:
    conditional alpha_k = p_k / p_(k-1) (derived).  One panel per dataset, the largest-N
    published row of each method.  These are measured MODEL INPUTS, not predictions.

    Returns
    -------
    matplotlib.figure.Figure
    """
    t = rep.table[rep.table["target"] == target]
    if t.empty:
        raise SpecsimValueError("target", "not in the reproduction table", target, sorted(rep.table["target"].unique()))
    datasets = sorted(t["dataset"].unique(), key=_ds_key)
    with _style():
        fig = _new_figure(3.0 * len(datasets) + 0.4, 5.6)
        axes = fig.subplots(2, len(datasets), sharey="row", sharex=True, squeeze=False)
        for j, ds in enumerate(datasets):
            td = t[t["dataset"] == ds]
            for meth in _methods_sorted(td["method"]):
                colour, marker = _style_of(meth)
                row = td[td["method"] == meth].sort_values("n").iloc[-1]
                cum = np.array([float(x) for x in str(row["per_position_acceptance_cumulative"]).split(";")])
                prev = np.concatenate([[1.0], cum[:-1]])
                with np.errstate(divide="ignore", invalid="ignore"):
                    cond = np.where(prev > 0, cum / prev, np.nan)
                k = np.arange(1, len(cum) + 1)
                lab = f"{_method_label(meth)} (N={int(row['n'])})"
                axes[0, j].plot(k, cum, "-", marker=marker, color=colour, ms=4, lw=1.3, label=lab)
                axes[1, j].plot(k, cond, "-", marker=marker, color=colour, ms=4, lw=1.3, label=lab)
            axes[0, j].set_title(f"{ds} ({_role_word(td['role'].iloc[0]) if td['role'].nunique() == 1 else 'mixed'})")
            axes[1, j].set_xlabel("draft position k")
            axes[0, j].legend(loc="lower left", frameon=False)
            axes[0, j].set_ylim(0, 1.02)
            axes[1, j].set_ylim(0, 1.02)
            axes[1, j].set_xticks([1, 3, 5, 7, 9, 11, 13, 15])
        axes[0, 0].set_ylabel("cumulative AR p_k\n(fraction of steps accepting >= k)")
        axes[1, 0].set_ylabel("conditional AR alpha_k = p_k / p_(k-1)")
        fig.suptitle(f"{target}: per-position acceptance as published (vllm-amd-specdec-post appendix, MI300X), "
                     f"largest-N row per method and dataset\nmeasured model inputs (not fitted, not predicted); "
                     f"conditional rates derived from the cumulative ones")
    return fig


def mi355x_figure(curves: pd.DataFrame):
    """Predicted EAGLE-3 speedup vs concurrency on MI355X against the published ranges.

    One panel per target (:func:`specsim.reproduce.mi355x_eagle3_curves` output).  The published
    range is shaded over the published concurrency range (MiniMax-M2.5: 4..64, with the two
    published end points); for Kimi-K2.5 the concurrencies of the range are not published, so
    the band spans the whole axis and the plot says so.

    Returns
    -------
    matplotlib.figure.Figure
    """
    targets = list(dict.fromkeys(curves["target"]))
    colours = {"bf16": "#d95f02", "fp8": "#1b9e77"}
    with _style():
        fig = _new_figure(5.0 * len(targets) + 0.4, 4.4)
        axes = fig.subplots(1, len(targets), squeeze=False)[0]
        for ax, tgt in zip(axes, targets):
            ct = curves[curves["target"] == tgt]
            cmin_all, cmax_all = ct["concurrency"].min(), ct["concurrency"].max()
            notes = []
            for dprec, g in ct.groupby("draft_precision", sort=False):
                g = g.sort_values("concurrency")
                col = colours.get(dprec, "#333333")
                first = g.iloc[0]
                lo, hi = float(first["published_min"]), float(first["published_max"])
                cmin = pd.to_numeric(first["published_concurrency_min"])
                cmax = pd.to_numeric(first["published_concurrency_max"])
                label_draft = f"{first['draft_model']} ({dprec} draft)"
                if pd.notna(cmin) and pd.notna(cmax):
                    ax.fill_between([cmin, cmax], lo, hi, color=col, alpha=0.15, lw=0,
                                    label=f"published range, concurrency {int(cmin)}-{int(cmax)}")
                    ax.plot([cmin, cmax], [hi, lo], "o", color=col, ms=6, mfc="white", mew=1.5,
                            label=f"published: {hi:.2f}x at C={int(cmin)}, {lo:.2f}x at C={int(cmax)}")
                else:
                    ax.axhspan(lo, hi, color=col, alpha=0.15, lw=0,
                               label=f"published range {lo:.2f}-{hi:.2f}x (concurrencies not published)")
                    notes.append("the range's concurrencies are NOT published:\nband spans the whole axis")
                ax.plot(g["concurrency"], g["predicted_throughput_ratio"], "-o", color=col, ms=4, lw=1.6,
                        label=f"predicted, {label_draft}")
            _log2_concurrency_axis(ax, sorted(ct["concurrency"].unique()))
            ax.set_xlim(cmin_all / 1.3, cmax_all * 1.3)
            ax.set_xlabel("concurrency (concurrent requests)")
            ax.set_ylabel("speedup (EAGLE-3 / no-spec output tok/s)")
            first = ct.iloc[0]
            title = f"{tgt} ({first['precision']}, TP={int(first['tp'])}, N={int(first['num_speculative_tokens'])})"
            if notes:
                title += "\n" + notes[0]
            ax.set_title(title)
            acc = "acceptance: " + "; ".join(dict.fromkeys(ct["acceptance_source"].astype(str)))
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, fontsize=7, ncol=1,
                      title=_wrap(acc, 70), title_fontsize=7)
        fig.suptitle("EAGLE-3 on MI355X, 1K/1K random prompts (amd-eagle3-post): predicted speedup vs concurrency\n"
                     "a transfer prediction: latency efficiencies fitted on MI300X GSM8K rows applied to the MI355X "
                     "datasheet; nothing fitted on MI355X")
    return fig


def _log2_concurrency_axis(ax, ticks) -> None:
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log", base=2)
    ax.set_xticks([float(t) for t in ticks])
    ax.set_xticklabels([str(int(t)) for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.fill(p, width) for p in text.split("\n"))


def parity_figure(rep):
    """Published vs predicted throughput ratio for every appendix row (fit vs held-out colours).

    Lines: y = x and +-10 %.  The title states the split and the held-out errors.

    Returns
    -------
    matplotlib.figure.Figure
    """
    t = rep.table
    s = rep.summary
    with _style():
        fig = _new_figure(5.6, 5.6)
        ax = fig.subplots()
        lo = float(min(t["throughput_ratio"].min(), t["predicted_throughput_ratio"].min())) * 0.92
        hi = float(max(t["throughput_ratio"].max(), t["predicted_throughput_ratio"].max())) * 1.05
        x = np.array([lo, hi])
        ax.plot(x, x, "k-", lw=1, label="y = x")
        ax.plot(x, 1.1 * x, "k--", lw=0.8, label="+-10 %")
        ax.plot(x, 0.9 * x, "k--", lw=0.8)
        for role in ("fit", "held_out"):
            g = t[t["role"] == role]
            if g.empty:
                continue
            ds = "/".join(sorted(g["dataset"].unique(), key=_ds_key))
            ax.plot(g["throughput_ratio"], g["predicted_throughput_ratio"], "o", ms=4.5, alpha=0.75,
                    color=_ROLE_COLOUR[role], mec="none",
                    label=f"{_role_word(role)}: {ds} ({len(g)} rows)")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
        ax.set_xlabel("published throughput ratio (appendix, MI300X)")
        ax.set_ylabel("predicted throughput ratio")
        ax.legend(loc="upper left", frameon=False)
        ax.set_title(
            f"Published vs predicted throughput ratio, {len(t)} appendix rows\n"
            f"{_wrap(_fit_description(rep), 62)}\n"
            f"held-out |error|: median {s['held_out_median_abs_rel_error']:.1%}, "
            f"max {s['held_out_max_abs_rel_error']:.1%}; concurrency {rep.params.concurrency} assumed", fontsize=9)
    return fig


def _plot_held_out_errors(ax, x, table) -> None:
    """Held-out median and max |relative error| of ``table`` against ``x`` (one panel)."""
    ax.plot(x, table["held_out_median_abs_rel_error"], "-o", color="#d62728", label="held-out median |error|")
    ax.plot(x, table["held_out_max_abs_rel_error"], "--s", color="#d62728", mfc="white", label="held-out max |error|")


def sensitivity_figure(rep, sensitivity: pd.DataFrame):
    """Held-out error vs the assumed concurrency (not published).

    Left: fitted parameters held fixed, concurrency scaled
    (:func:`specsim.reproduce.concurrency_sensitivity`).  Right: refit at each assumed concurrency
    (``rep.sensitivity``): fit loss (RMS log-ratio on the fit rows) and held-out errors.

    Returns
    -------
    matplotlib.figure.Figure
    """
    refit = rep.sensitivity
    panels = 2 if refit is not None and len(refit) else 1
    c0 = rep.params.concurrency
    with _style():
        fig = _new_figure(5.2 * panels, 4.0)
        axes = fig.subplots(1, panels, squeeze=False)[0]
        ax = axes[0]
        s = sensitivity.sort_values("concurrency")
        _plot_held_out_errors(ax, s["concurrency"], s)
        ax.set_title("fitted parameters held fixed, concurrency varied")
        ax.set_ylabel("|predicted / published - 1| (fraction)")
        if panels == 2:
            ax2 = axes[1]
            r = refit.sort_values("assumed_concurrency")
            _plot_held_out_errors(ax2, r["assumed_concurrency"], r)
            ax2.plot(r["assumed_concurrency"], r["fit_loss_rms_log"], "-^", color="#7f7f7f",
                     label="fit loss (RMS log-ratio, fit rows)")
            ax2.set_title("refitted at each assumed concurrency (the choice: lowest fit loss)")
        ticks = [sorted(s["concurrency"].unique())]
        if panels == 2:
            ticks.append(sorted(refit["assumed_concurrency"].unique()))
        for a, tk in zip(axes, ticks):
            a.set_yscale("log")
            _log2_concurrency_axis(a, tk)
            a.axvline(c0, color="k", lw=0.8, ls=":", label=f"chosen concurrency: {c0}")
            a.set_xlabel("assumed concurrency (concurrent requests)")
            a.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, ncol=2)
        fig.suptitle("Sensitivity of the reproduction to the assumed benchmark concurrency (not published)\n"
                     f"{_fit_description(rep)}")
    return fig


def reproduction_figures(rep, mi355x_curves: pd.DataFrame, sensitivity: pd.DataFrame,
                         figures_dir: str | Path) -> list[Path]:
    """Write every figure of the reproduction as PNG into ``figures_dir``.

    Parameters
    ----------
    rep : specsim.reproduce.Reproduction
    mi355x_curves : DataFrame
        :func:`specsim.reproduce.mi355x_eagle3_curves` output.
    sensitivity : DataFrame
        :func:`specsim.reproduce.concurrency_sensitivity` output.
    figures_dir : path
        Created if missing; files are replaced atomically.

    Returns
    -------
    list of Path
        ``reproduction_ratio_vs_n_<target>.png`` and ``acceptance_per_position_<target>.png``
        per target, ``mi355x_eagle3_speedup_vs_concurrency.png``, ``reproduction_parity.png``,
        ``reproduction_concurrency_sensitivity.png``.
    """
    d = Path(figures_dir)
    d.mkdir(parents=True, exist_ok=True)
    curves = sweep_curves(rep)
    written = []
    for tgt in rep.table["target"].unique():
        written.append(_save(ratio_vs_n_figure(rep, curves, tgt), d / f"reproduction_ratio_vs_n_{_slug(tgt)}.png"))
        written.append(_save(acceptance_figure(rep, tgt), d / f"acceptance_per_position_{_slug(tgt)}.png"))
    written.append(_save(mi355x_figure(mi355x_curves), d / "mi355x_eagle3_speedup_vs_concurrency.png"))
    written.append(_save(parity_figure(rep), d / "reproduction_parity.png"))
    written.append(_save(sensitivity_figure(rep, sensitivity), d / "reproduction_concurrency_sensitivity.png"))
    return written
