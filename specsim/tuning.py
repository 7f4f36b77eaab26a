"""Tuning study over the seed targets, its figures and a computed tuning guide.

Holds :func:`tuning_study` (:func:`specsim.recommend.recommend` for every seed target x published
method x hardware, collected in a :class:`TuningStudy` with its schedule and summary tables), the
figures built from it (:func:`plot_ratio_heatmaps`, :func:`plot_crossover`,
:func:`plot_acceptance_cutoff`, :func:`plot_schedules`; all written by
:func:`make_tuning_figures` as ``tuning_*.png`` plus ``tuning_schedule.csv``) and the Markdown
guide (:func:`tuning_guide`, :func:`tuning_guide_facts`, :func:`best_static_n`) in which every
statement is computed from the study (no prior belief).  Used by
``notebooks/04_tuning_guide.ipynb`` and :func:`specsim.reproduce.run_main_job`; :mod:`specsim.recommend`
re-exports every public name here.

Sources
-------
* Seed targets, their TP and the methods per target: the published N sweeps
  (``data/published/amd_specdec_n_sweeps.csv``), acceptance from their four-dataset mix
  (:func:`specsim.recommend.published_profile`).
* Step times: the shipped latency calibration (``specsim.calibration.default_latency``) unless a
  ``latency_factory`` is given; hardware from :func:`specsim.hardware.load_hardware`.
* Every number in the figures and the guide comes from :func:`specsim.recommend.recommend` (bands,
  schedule, crossover, marginal cut-off, memory caps and exclusions, intervals): see that module's
  docstring for the model and the vLLM rules (schedule: :mod:`specsim.vllm.schedule`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from .recommend import _DEFAULT_CONCURRENCY, MethodRecommendation, recommend

__all__ = [
    "SEED_TARGETS",
    "TUNING_HARDWARE",
    "TuningStudy",
    "tuning_study",
    "plot_ratio_heatmaps",
    "plot_crossover",
    "plot_acceptance_cutoff",
    "plot_schedules",
    "tuning_guide_facts",
    "tuning_guide",
    "best_static_n",
    "make_tuning_figures",
]

#: Seed targets with the TP of their published runs (data/published/amd_specdec_n_sweeps.csv).
SEED_TARGETS = (("gemma-4-26B-A4B-it", 2), ("gemma-4-31B-it", 2), ("Qwen3-8B", 1), ("Qwen3.6-35B-A3B", 2),
                ("Kimi-K2.5", 4))
TUNING_HARDWARE = ("MI300X", "MI355X")


@dataclass(frozen=True)
class TuningStudy:
    """Recommendations for the seed targets x published methods x hardware.

    Attributes
    ----------
    recommendations : dict[(hardware, target), Recommendation]
    isl, osl, max_concurrency : int
    """

    recommendations: dict
    isl: int
    osl: int
    max_concurrency: int

    def items(self):
        """Iterate ``(hardware, target, MethodRecommendation)``."""
        for (hw, tgt), rec in self.recommendations.items():
            for m in rec.methods:
                yield hw, tgt, m

    def schedule_table(self) -> pd.DataFrame:
        """One row per (hardware, target, method, band): the recommended schedule."""
        rows = []
        for hw, tgt, m in self.items():
            for b in m.bands:
                rows.append({"hardware": hw, "target": tgt, "method": m.method, "batch_lo": b.lo, "batch_hi": b.hi,
                             "num_speculative_tokens": b.num_speculative_tokens, "runner_up_n": b.runner_up_n,
                             "ratio_at_lo": b.points[0].throughput_ratio,
                             "ratio_at_hi": b.points[-1].throughput_ratio, "cutoff_n_at_lo": b.points[0].cutoff_n})
        return pd.DataFrame(rows)

    def summary_table(self) -> pd.DataFrame:
        """One row per (hardware, target, method): best N at C=1 and at the top of the range (the
        memory cap when ``concurrency_cap`` is set), crossover, memory headroom; excluded methods
        with the reason."""
        rows = []
        for (hw, tgt), rec in self.recommendations.items():
            for m in rec.methods:
                p1 = m.points[0]
                rows.append({"hardware": hw, "target": tgt, "method": m.method, "best_n_c1": p1.num_speculative_tokens,
                             "ratio_c1": p1.throughput_ratio, "cutoff_n_c1": p1.cutoff_n,
                             "best_n_cmax": m.points[-1].num_speculative_tokens,
                             "ratio_cmax": m.points[-1].throughput_ratio,
                             "crossover_concurrency": m.crossover_concurrency,
                             "concurrency_cap": m.concurrency_cap,
                             "headroom_gib": None if m.memory is None else round(m.memory.headroom_gib, 1)})
            for meth, why in rec.excluded:
                rows.append({"hardware": hw, "target": tgt, "method": meth, "excluded": why})
        return pd.DataFrame(rows)


def tuning_study(targets: Sequence[tuple[str, int]] = SEED_TARGETS, hardware: Sequence[str] = TUNING_HARDWARE, *,
                 isl: int = 1024, osl: int = 1024, max_concurrency: int = 256, latency_factory=None,
                 dataset: str = "mix", temperature: float | None = 0.0) -> TuningStudy:
    """Recommendations for every (hardware, target) with its published methods and acceptance.

    Parameters
    ----------
    targets : sequence of (name, tp)
    hardware : sequence of str
    isl, osl, max_concurrency : int
    latency_factory : callable(Hardware) -> LatencyModel, optional
        Default: the shipped calibration (``specsim.calibration.default_latency``).
    dataset : str
        Published dataset (default the four-dataset mix).
    temperature : float or None

    Returns
    -------
    TuningStudy
    """
    from .hardware import load_hardware

    cs = [c for c in _DEFAULT_CONCURRENCY if c <= max_concurrency]
    recs = {}
    for hw_name in hardware:
        hw = load_hardware(hw_name)
        lat = latency_factory(hw) if latency_factory is not None else None
        for tgt, tp in targets:
            recs[(hw.name, tgt)] = recommend(tgt, None, hardware=hw, tp=tp, isl=isl, osl=osl, concurrency=cs,
                                             max_concurrency=max_concurrency, latency=lat, dataset=dataset,
                                             temperature=temperature)
    return TuningStudy(recs, isl, osl, max_concurrency)


def _methods_by_target(study: TuningStudy, hw: str):
    return [(tgt, rec) for (h, tgt), rec in study.recommendations.items() if h == hw]


def plot_ratio_heatmaps(study: TuningStudy, hardware: str):
    """Heatmap of the predicted throughput ratio over (N, concurrency), one panel per
    (target, method), with the recommended N per concurrency and the ratio = 1 contour.

    Row N = 0 (tick "0*", set apart by a white line) is speculation enabled with k = 0 in the
    dynamic schedule -- a valid schedule entry, not a valid static ``num_speculative_tokens``
    (vLLM requires > 0); a footnote on the figure says so.  Panel titles give TP and, for a
    method capped for memory, the cap.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    rows = [(t, rec) for t, rec in _methods_by_target(study, hardware) if rec.methods]
    ncol = max((len(rec.methods) for _, rec in rows), default=1)
    height = 2.2 * len(rows) + 1.1  # inches; fixed margins for the suptitle and the footnote
    fig, axes = plt.subplots(len(rows), ncol, figsize=(3.0 * ncol + 1.0, height), squeeze=False, sharex=True)
    fig.subplots_adjust(left=0.07, right=0.86, bottom=0.75 / height, top=1 - 0.5 / height, wspace=0.25, hspace=0.35)
    vmax = max((m.grid["throughput_ratio"].max() for _, rec in rows for m in rec.methods), default=2.0)
    norm = TwoSlopeNorm(vmin=0.0, vcenter=1.0, vmax=max(vmax, 1.01))
    im = None
    for i, (tgt, rec) in enumerate(rows):
        for j in range(ncol):
            ax = axes[i, j]
            if j >= len(rec.methods):
                ax.axis("off")
                continue
            m = rec.methods[j]
            g = m.grid.pivot(index="num_speculative_tokens", columns="concurrency", values="throughput_ratio")
            cmax = int(g.columns.max())
            keep = np.unique(np.round(np.logspace(0, np.log2(cmax), 25, base=2)).astype(int))
            g = g.loc[:, keep]  # log-spaced columns: the same picture, 10x fewer cells to draw
            cs = g.columns.to_numpy()
            ns = g.index.to_numpy()
            im = ax.pcolormesh(cs, ns, g.to_numpy(), norm=norm, cmap="RdBu", shading="nearest")
            ax.contour(cs, ns, g.to_numpy(), levels=[1.0], colors="k", linewidths=0.8)
            sched = m.grid[m.grid["recommended"]].sort_values("concurrency")
            ax.step(sched["concurrency"], sched["num_speculative_tokens"], where="mid", color="gold", lw=1.5)
            ax.axhline(0.5, color="w", lw=1.2)  # row 0 is not a static setting: set it apart
            _log2_axis(ax)
            ticks = [int(t) for t in ax.get_yticks() if 1 <= t <= ns.max()]
            ax.set_yticks([0, *ticks], ["0*", *map(str, ticks)])
            ax.set_ylim(ns.min() - 0.5, ns.max() + 0.5)
            ax.set_title(f"{tgt} TP={rec.tp} {m.method}" + (f" (cap {m.concurrency_cap})" if m.concurrency_cap
                                                            else ""), fontsize=8)
            if j == 0:
                ax.set_ylabel("N", fontsize=8)
            if i == len(rows) - 1:
                ax.set_xlabel("concurrency", fontsize=8)
    if im is not None:
        cax = fig.add_axes([0.89, 0.25, 0.015, 0.5])
        fig.colorbar(im, cax=cax, label="throughput ratio")
    fig.suptitle(f"Predicted throughput ratio on {hardware} (gold: recommended N; black: ratio = 1)", fontsize=9)
    fig.text(0.07, 0.12 / height, "* row 0: speculation enabled with k = 0 in the dynamic schedule (the drafter "
             "still runs one pass per step); not a valid static num_speculative_tokens", fontsize=7)
    return fig


_METHOD_COLORS = {"dflash": "C0", "dspark": "C1", "eagle3": "C2", "mtp": "C3", "eagle": "C4", "ngram": "C5"}


def _grid_axes(study: TuningStudy, height: float = 2.4):
    """Figure with one row per hardware and one column per target."""
    import matplotlib.pyplot as plt

    hws = list(dict.fromkeys(h for h, _ in study.recommendations))
    tgts = list(dict.fromkeys(t for _, t in study.recommendations))
    fig, axes = plt.subplots(len(hws), len(tgts), figsize=(2.9 * len(tgts), height * len(hws) + 0.6), squeeze=False,
                             sharex=True)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.12, top=0.86, wspace=0.3, hspace=0.35)
    return fig, axes, hws, tgts


def _panels(study: TuningStudy, axes, hws, tgts):
    """Yield ``(ax, hw, tgt, rec, ylabel_here, xlabel_here)`` for every panel of a
    :func:`_grid_axes` figure: ``rec`` is the panel's Recommendation (None if absent); the two flags
    say whether the panel is in the first column / the last row (where axis labels go)."""
    for i, hw in enumerate(hws):
        for j, tgt in enumerate(tgts):
            yield axes[i, j], hw, tgt, study.recommendations.get((hw, tgt)), j == 0, i == len(hws) - 1


def _log2_axis(ax) -> None:
    """Log2 concurrency axis with major ticks only (minor log ticks are slow to lay out)."""
    from matplotlib.ticker import MaxNLocator, NullLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_locator(MaxNLocator(5, integer=True))
    ax.tick_params(labelsize=7)


def _short_reason(why: str) -> str:
    """A few words for a figure: why a method was excluded."""
    if "does not fit in memory" in why:
        return "does not fit in memory at concurrency 1"
    if "weights need" in why:
        return "weights do not fit at this TP"
    if "attention heads" in why:
        return "TP does not divide the heads"
    if "trained for" in why:
        return "draft trained for another target"
    if "no acceptance" in why:
        return "no acceptance profile"
    return why.split(":")[0][:40]


def _finish_panel(ax, rec, hw: str, tgt: str, *, ylabel: str | None, xlabel: str | None) -> None:
    """Common decoration of one (hardware, target) panel: log2 x axis, title with TP, legend,
    notes on excluded / capped methods, outer axis labels."""
    _log2_axis(ax)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{hw} {tgt}" + ("" if rec is None else f" TP={rec.tp}"), fontsize=8)
    if rec is not None and rec.methods:
        ax.legend(fontsize=6, loc="upper right")
    notes = _figure_notes(rec)
    if notes:
        ax.text(0.02, 0.02, "\n".join(notes), ha="left", va="bottom", transform=ax.transAxes, fontsize=5.5,
                bbox=dict(facecolor="white", alpha=0.8, lw=0))
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=8)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=8)


def _figure_notes(rec) -> list[str]:
    """Panel notes: excluded methods (with a short reason) and memory caps."""
    if rec is None:
        return []
    notes = [f"{meth} excluded: {_short_reason(why)}" for meth, why in rec.excluded]
    notes += [f"{m.method} capped at {m.concurrency_cap} (memory)" for m in rec.methods
              if m.concurrency_cap is not None]
    return notes


def plot_crossover(study: TuningStudy):
    """Best predicted ratio over N vs concurrency, per method, one panel per (hardware, target, TP),
    with the crossover concurrency marked (dot: from here the ratio stays < 1) and the ratio = 1
    line.  Methods capped for memory end at their cap (bar); methods excluded (memory, or a
    deployment vLLM would refuse) have no curve and are named, with the reason, on the panel.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig, axes, hws, tgts = _grid_axes(study)
    for ax, hw, tgt, rec, first_col, last_row in _panels(study, axes, hws, tgts):
        for m in (rec.methods if rec else ()):
            g = m.grid[m.grid["num_speculative_tokens"] > 0]
            best = g.groupby("concurrency")["throughput_ratio"].max()
            col = _METHOD_COLORS.get(m.method)
            ax.plot(best.index, best.to_numpy(), lw=1.2, color=col, label=m.method)
            if m.crossover_concurrency is not None:
                ax.plot([m.crossover_concurrency], [best.loc[m.crossover_concurrency]], "o", color=col)
            if m.concurrency_cap is not None:
                ax.plot([m.concurrency_cap], [best.iloc[-1]], "|", ms=9, mew=1.5, color=col)
        ax.axhline(1.0, color="k", lw=0.8)
        _finish_panel(ax, rec, hw, tgt, ylabel="best ratio over N" if first_col else None,
                      xlabel="concurrency" if last_row else None)
    fig.suptitle("Crossover: best predicted throughput ratio vs concurrency (dot: ratio < 1 from here on; "
                 "bar: memory cap)", fontsize=9)
    return fig


def plot_acceptance_cutoff(study: TuningStudy, hardware: str = "MI300X", concurrency: int = 1):
    """Per-position cumulative acceptance (published mix) per target and method, with the
    marginal-rule cut-off at ``concurrency`` marked.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    rows = _methods_by_target(study, hardware)
    fig, axes = plt.subplots(1, len(rows), figsize=(3.0 * len(rows), 3.0), squeeze=False)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.16, top=0.84, wspace=0.25)
    for ax, (tgt, rec) in zip(axes[0], rows):
        for m in rec.methods:
            p = np.asarray(m.cumulative)
            k = np.arange(1, p.size + 1)
            (line,) = ax.plot(k, p, "o-", ms=3, lw=1, label=m.method, color=_METHOD_COLORS.get(m.method))
            pt = next(pp for pp in m.points if pp.concurrency == concurrency)
            ax.axvline(pt.cutoff_n + 0.5, color=line.get_color(), ls="--", lw=0.9)
        ax.set_title(tgt, fontsize=8)
        ax.set_xlabel("position k")
        ax.set_ylim(0, 1.02)
        if rec.methods:
            ax.legend(fontsize=6)
        else:
            ax.text(0.5, 0.5, "every method excluded\n(memory)", ha="center", va="center", transform=ax.transAxes,
                    fontsize=7)
    axes[0, 0].set_ylabel("cumulative acceptance p_k")
    fig.suptitle(f"Per-position acceptance (published mix); dashed: marginal cut-off at concurrency {concurrency} "
                 f"on {hardware}", fontsize=9)
    return fig


def plot_schedules(study: TuningStudy):
    """The recommended dynamic schedule (k vs batch size) per method, one panel per
    (hardware, target).

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig, axes, hws, tgts = _grid_axes(study)
    for ax, hw, tgt, rec, first_col, last_row in _panels(study, axes, hws, tgts):
        for m in (rec.methods if rec else ()):
            x = [b.lo for b in m.bands] + [m.bands[-1].hi]
            y = [b.num_speculative_tokens for b in m.bands] + [m.bands[-1].num_speculative_tokens]
            ax.step(x, y, where="post", lw=1.4, color=_METHOD_COLORS.get(m.method), label=m.method)
        _finish_panel(ax, rec, hw, tgt, ylabel="k" if first_col else None, xlabel="batch size" if last_row else None)
    fig.suptitle("Recommended num_speculative_tokens_per_batch_size (k per batch size)", fontsize=9)
    return fig


def tuning_guide_facts(study: TuningStudy) -> list[str]:
    """Sentences computed from the study (no prior belief): best N at low / high concurrency,
    crossover, cut-off vs best N, excluded methods."""
    facts = []
    for (hw, tgt), rec in study.recommendations.items():
        for m in rec.methods:
            p1, pm = m.points[0], m.points[-1]
            facts.append(
                f"{hw} {tgt} {m.method}: N={p1.num_speculative_tokens} at concurrency {p1.concurrency} "
                f"({p1.throughput_ratio:.2f}x, cut-off {p1.cutoff_n}), N={pm.num_speculative_tokens} at "
                f"{pm.concurrency} ({pm.throughput_ratio:.2f}x); {len(m.bands)} band(s); {m.crossover_note}.")
        for meth, why in rec.excluded:
            facts.append(f"{hw} {tgt} {meth}: excluded -- {why}.")
    return facts


def best_static_n(m: MethodRecommendation) -> tuple[int, float]:
    """The single N >= 1 that stays closest to the schedule over the whole range.

    Returns
    -------
    (n, worst_rel) : (int, float)
        argmax over N of min over concurrency of ratio(N, C) / ratio(schedule(C), C), and that
        minimum (1.0 = a static config loses nothing anywhere).
    """
    g = m.grid
    piv = g.pivot(index="num_speculative_tokens", columns="concurrency", values="throughput_ratio")
    rec = g[g["recommended"]].set_index("concurrency")["throughput_ratio"].reindex(piv.columns).to_numpy()
    rel = piv.loc[piv.index > 0].to_numpy() / rec[None, :]
    worst = rel.min(axis=1)
    i = int(np.argmax(worst))
    return int(piv.index[piv.index > 0][i]), float(worst[i])


_PARALLEL = ("dflash", "dspark")


def tuning_guide(study: TuningStudy) -> str:
    """A short tuning guide in Markdown, every statement computed from ``study`` (no prior belief).

    Covers: best N at low and high concurrency by drafter family, whether it falls or rises with
    concurrency, the crossover, the marginal cut-off vs the best N, flat optima (runner-ups),
    whether a static N is enough, the winning method per target, memory exclusions.
    """
    items = list(study.items())
    if not items:
        return "No method fits in memory for any target: nothing to recommend."
    cmax = study.max_concurrency
    out = []
    for fam, name in ((_PARALLEL, "Parallel drafters (dflash, dspark)"), (None, "Sequential drafters (eagle3, mtp)")):
        sel = [(hw, t, m) for hw, t, m in items if (m.method in _PARALLEL) == (fam is not None)]
        if not sel:
            continue
        n1 = [m.points[0].num_speculative_tokens for *_, m in sel]
        nm = [m.points[-1].num_speculative_tokens for *_, m in sel]
        falls = [f"{t} {m.method} ({hw})" for (hw, t, m), a, b in zip(sel, n1, nm) if b < a]
        rises = [f"{t} {m.method} ({hw})" for (hw, t, m), a, b in zip(sel, n1, nm) if b > a]
        out.append(f"- **{name}**: best N at concurrency 1 is {min(n1)}-{max(n1)} (median {np.median(n1):g}); at "
                   f"concurrency {cmax} it is {min(nm)}-{max(nm)} (median {np.median(nm):g}). It falls with concurrency "
                   f"in {len(falls)} of {len(sel)} cases and rises in {len(rises)}"
                   + (f" ({', '.join(rises)})" if rises else "") + ".")
    cross = [(hw, t, m) for hw, t, m in items if m.crossover_concurrency is not None]
    if cross:
        out.append("- **Crossover** (no N beats the non-speculative server from here on): " + "; ".join(
            f"{t} {m.method} on {hw} at concurrency {m.crossover_concurrency}" for hw, t, m in cross) + ".")
    else:
        out.append(f"- **Crossover**: none within concurrency 1..{cmax} -- every method keeps a ratio above 1 up to "
                   f"{cmax} concurrent requests in these predictions"
                   + (" (methods capped for memory: up to their cap, below)" if any(
                       m.concurrency_cap is not None for *_, m in items) else "") + ".")
    if not all(m.latency_calibrated for *_, m in items):
        out.append("  Some predictions use a datasheet-only latency model: the crossover moves with the per-step "
                   "speculative overhead, which is then not calibrated -- measure it before relying on the high "
                   "concurrency end.")
    agree = sum(m.points[0].cutoff_n == m.points[0].best_static_n for *_, m in items)
    out.append(f"- **Per-position cut-off**: the marginal rule (extend N only while p_(N+1) x T(N)/MAL(N) > the added "
               f"step time) lands on the best N at concurrency 1 in {agree} of {len(items)} cases: the cut-off read off "
               "the per-position acceptance and the step times gives the N a full sweep would.")
    bands = [b for *_, m in items for b in m.bands]
    flat = sum(b.runner_up_n is not None for b in bands)
    out.append(f"- **Flat optima**: {flat} of {len(bands)} bands have a runner-up N within 2 % over the whole band; "
               "there the smaller of the two is within 2 % with fewer drafted tokens per step.")
    static = [(hw, t, m.method, *best_static_n(m)) for hw, t, m in items]
    enough = [x for x in static if x[4] >= 0.98]
    worst = min(static, key=lambda x: x[4])
    out.append(f"- **Static vs dynamic**: a single static N stays within 2 % of the schedule over 1..{cmax} in "
               f"{len(enough)} of {len(static)} cases; the largest loss of the best static N is "
               f"{(1 - worst[4]) * 100:.0f} % ({worst[1]} {worst[2]} on {worst[0]}, N={worst[3]}). Use the schedule "
               "where the loss matters and data parallelism is off (vLLM drops the schedule with DP > 1).")
    for hw in dict.fromkeys(h for h, _ in study.recommendations):
        wins = []
        for tgt, rec in _methods_by_target(study, hw):
            if rec.methods:
                lo = max(rec.methods, key=lambda m: m.points[0].throughput_ratio)
                hi = max(rec.methods, key=lambda m: m.points[-1].throughput_ratio)
                wins.append(f"{tgt}: {lo.method} at 1, {hi.method} at {cmax}")
        out.append(f"- **Best method on {hw}**: " + "; ".join(wins) + ".")
    capped = [(hw, t, m) for hw, t, m in items if m.concurrency_cap is not None]
    if capped:
        out.append(f"- **Memory caps** (the KV cache of {cmax} x {study.isl + study.osl} tokens does not fit; the "
                   "recommendation, including the 'high concurrency' figures above, stops at the largest concurrency "
                   "that fits): " + "; ".join(f"{t} {m.method} on {hw} at {m.concurrency_cap}" for hw, t, m in capped)
                   + ".")
    excl = [(hw, t, meth, why) for (hw, t), rec in study.recommendations.items() for meth, why in rec.excluded]
    if excl:
        out.append("- **Excluded**: "
                   + "; ".join(f"{t} {meth} on {hw} ({why.split('; ')[-1]})" for hw, t, meth, why in excl) + ".")
    return "\n".join(out)


def make_tuning_figures(figures_dir, *, study: TuningStudy | None = None, latency_factory=None) -> list[Path]:
    """Regenerate the tuning figures (``tuning_*.png``) into ``figures_dir``.

    Parameters
    ----------
    figures_dir : path
        Created if missing.
    study : TuningStudy, optional
        Default :func:`tuning_study` with the shipped calibration.
    latency_factory : callable, optional
        Passed to :func:`tuning_study`.

    Returns
    -------
    list of Path
        The files written: ``tuning_ratio_heatmap_<hw>.png`` per hardware, ``tuning_crossover.png``,
        ``tuning_acceptance_cutoff.png``, ``tuning_schedule.png`` and ``tuning_schedule.csv``.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    out_dir = Path(figures_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    st = study if study is not None else tuning_study(latency_factory=latency_factory)
    paths = []
    hws = list(dict.fromkeys(h for h, _ in st.recommendations))
    figs = [(f"tuning_ratio_heatmap_{hw}.png", plot_ratio_heatmaps(st, hw)) for hw in hws]
    figs += [("tuning_crossover.png", plot_crossover(st)),
             ("tuning_acceptance_cutoff.png", plot_acceptance_cutoff(st, hws[0])),
             ("tuning_schedule.png", plot_schedules(st))]
    for name, fig in figs:
        p = out_dir / name
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    p = out_dir / "tuning_schedule.csv"
    st.schedule_table().to_csv(p, index=False)
    paths.append(p)
    return paths
