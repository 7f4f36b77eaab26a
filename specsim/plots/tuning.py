"""Figures of the tuning study (layer 5, plots: drawing only): ratio heatmaps, crossover,
acceptance cut-off and schedules, written by :func:`make_tuning_figures` as ``tuning_*.png`` plus
``tuning_schedule.csv``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from specsim._io import atomic_write


def plot_ratio_heatmaps(study, hardware: str):
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

    rows = [(t, rec) for t, rec in study.by_target(hardware) if rec.methods]
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


def _grid_axes(study, height: float = 2.4):
    """Figure with one row per hardware and one column per target."""
    import matplotlib.pyplot as plt

    hws = list(dict.fromkeys(h for h, _ in study.recommendations))
    tgts = list(dict.fromkeys(t for _, t in study.recommendations))
    fig, axes = plt.subplots(len(hws), len(tgts), figsize=(2.9 * len(tgts), height * len(hws) + 0.6), squeeze=False,
                             sharex=True)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.12, top=0.86, wspace=0.3, hspace=0.35)
    return fig, axes, hws, tgts


def _panels(study, axes, hws, tgts):
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


def plot_crossover(study):
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


def plot_acceptance_cutoff(study, hardware: str = "MI300X", concurrency: int = 1):
    """Per-position cumulative acceptance (published mix) per target and method, with the
    marginal-rule cut-off at ``concurrency`` marked.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    rows = study.by_target(hardware)
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


def plot_schedules(study):
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


def make_tuning_figures(figures_dir, study) -> list[Path]:
    """Regenerate the tuning figures (``tuning_*.png``) into ``figures_dir``.

    Parameters
    ----------
    figures_dir : path
        Created if missing.
    study : specsim.studies.tuning.TuningStudy
        What :func:`specsim.studies.tuning.tuning_study` returned.

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
    st = study
    paths = []
    hws = list(dict.fromkeys(h for h, _ in st.recommendations))
    figs = [(f"tuning_ratio_heatmap_{hw}.png", plot_ratio_heatmaps(st, hw)) for hw in hws]
    figs += [("tuning_crossover.png", plot_crossover(st)),
             ("tuning_acceptance_cutoff.png", plot_acceptance_cutoff(st, hws[0])),
             ("tuning_schedule.png", plot_schedules(st))]
    for name, fig in figs:
        paths.append(atomic_write(out_dir / name, lambda tmp: fig.savefig(tmp, dpi=110)))
        plt.close(fig)
    paths.append(atomic_write(out_dir / "tuning_schedule.csv", lambda tmp: st.schedule_table().to_csv(tmp, index=False)))
    return paths
