"""Figures of the reproduction of the published tables (layer 5, plots: drawing only, matplotlib's
object API on the Agg canvas, so the PNG bytes depend only on the inputs and matplotlib's version).

Details: ``docs/modules/specsim.plots.reproduction.md``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from specsim._io import atomic_write
from specsim.errors import SpecsimValueError
from specsim.published import DATASET_ORDER, METHOD_ORDER, method_label

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
    return atomic_write(path, lambda p: fig.savefig(p, format="png", metadata={"Software": None}))


def _role_word(role: str) -> str:
    return {"fit": "fit", "held_out": "held out"}.get(role, "fit + held out")


def _fit_description(rep) -> str:
    s = rep.summary
    split = s.get("split", "dataset")
    t = rep.table
    fit_ds = sorted(set(t.loc[t["role"] == "fit", "dataset"]), key=_ds_key)
    held_ds = sorted(set(t.loc[t["role"] == "held_out", "dataset"]), key=_ds_key)
    if split == "leave-one-target-out":
        return ("leave-one-target-out: every row predicted with stack terms + concurrency fitted on the OTHER "
                "targets only (no per-target values)")
    if split == "dataset":
        return (f"stack terms + concurrency fitted on the {'/'.join(fit_ds)} rows; "
                f"{'/'.join(held_ds)} held out")
    return f"split '{split}' ({s.get('fit_subset')}): fitted on the 'fit' rows, the rest held out"


def _params_for(rep, target):
    """The stack terms that predicted ``target`` (its fold in a leave-one-target-out study)."""
    f = getattr(rep, "params_for", None)
    return f(target) if callable(f) else rep.params


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
                        label=method_label(meth))
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
                     f"{_fit_description(rep)};\nconcurrency {_params_for(rep, target).concurrency} inferred; "
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
                lab = f"{method_label(meth)} (N={int(row['n'])})"
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

    One panel per target (:func:`specsim.studies.reproduce.mi355x_eagle3_curves` output).  The published
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
                     "a transfer prediction: MI300X stack terms (all five appendix targets) carried over -- efficiencies "
                     "on the MI355X datasheet, host seconds x the EPYC 9575F / 9654 clock factor; nothing fitted on MI355X")
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
            f"max {s['held_out_max_abs_rel_error']:.1%}; concurrency inferred per fit ({rep.params.concurrency} on all "
            "targets)", fontsize=9)
    return fig


def _plot_held_out_errors(ax, x, table) -> None:
    """Held-out median and max |relative error| of ``table`` against ``x`` (one panel)."""
    ax.plot(x, table["held_out_median_abs_rel_error"], "-o", color="#d62728", label="held-out median |error|")
    ax.plot(x, table["held_out_max_abs_rel_error"], "--s", color="#d62728", mfc="white", label="held-out max |error|")


def sensitivity_figure(rep, sensitivity: pd.DataFrame):
    """Held-out error vs the assumed concurrency (not published).

    Left: fitted parameters held fixed, concurrency scaled
    (:func:`specsim.studies.reproduce.concurrency_sensitivity`).  Right: refit at each assumed concurrency
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
            if "held_out_median_abs_rel_error" in r.columns:
                _plot_held_out_errors(ax2, r["assumed_concurrency"], r)
            ax2.plot(r["assumed_concurrency"], r["fit_loss_rms_log"], "-^", color="#7f7f7f",
                     label="fit loss (RMS log-ratio, fit rows)")
            ax2.set_title("refitted at each assumed concurrency (the choice: lowest fit loss)", fontsize=9)
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
                         figures_dir: str | Path, curves: pd.DataFrame) -> list[Path]:
    """Write every figure of the reproduction as PNG into ``figures_dir``.

    Parameters
    ----------
    rep : specsim.studies.reproduce.Reproduction
    mi355x_curves : DataFrame
        :func:`specsim.studies.reproduce.mi355x_eagle3_curves` output.
    sensitivity : DataFrame
        :func:`specsim.studies.reproduce.concurrency_sensitivity` output.
    figures_dir : path
        Created if missing; files are replaced atomically.
    curves : DataFrame
        :func:`specsim.studies.curves.sweep_curves` of ``rep`` (the model lines).

    Returns
    -------
    list of Path
        ``reproduction_ratio_vs_n_<target>.png`` and ``acceptance_per_position_<target>.png``
        per target, ``mi355x_eagle3_speedup_vs_concurrency.png``, ``reproduction_parity.png``,
        ``reproduction_concurrency_sensitivity.png``.
    """
    d = Path(figures_dir)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for tgt in rep.table["target"].unique():
        written.append(_save(ratio_vs_n_figure(rep, curves, tgt), d / f"reproduction_ratio_vs_n_{_slug(tgt)}.png"))
        written.append(_save(acceptance_figure(rep, tgt), d / f"acceptance_per_position_{_slug(tgt)}.png"))
    written.append(_save(mi355x_figure(mi355x_curves), d / "mi355x_eagle3_speedup_vs_concurrency.png"))
    written.append(_save(parity_figure(rep), d / "reproduction_parity.png"))
    written.append(_save(sensitivity_figure(rep, sensitivity), d / "reproduction_concurrency_sensitivity.png"))
    return written
