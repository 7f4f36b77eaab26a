"""Tuning study over the seed targets and the computed tuning guide (layer 4, studies).

:func:`tuning_study` runs :func:`specsim.recommend.recommend` for every seed target x published
method x hardware and collects a :class:`TuningStudy`; :func:`tuning_guide` writes the Markdown
guide in which every statement is computed from the study.  Figures: :mod:`specsim.plots.tuning`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from specsim.hardware import load_hardware
from specsim.recommend import DEFAULT_CONCURRENCY, MethodRecommendation, recommend

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

    def by_target(self, hardware: str) -> list:
        """``[(target, Recommendation), ...]`` of one hardware, in study order."""
        return [(tgt, rec) for (h, tgt), rec in self.recommendations.items() if h == hardware]

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

    cs = [c for c in DEFAULT_CONCURRENCY if c <= max_concurrency]
    recs = {}
    for hw_name in hardware:
        hw = load_hardware(hw_name)
        lat = latency_factory(hw) if latency_factory is not None else None
        for tgt, tp in targets:
            recs[(hw.name, tgt)] = recommend(tgt, None, hardware=hw, tp=tp, isl=isl, osl=osl, concurrency=cs,
                                             max_concurrency=max_concurrency, latency=lat, dataset=dataset,
                                             temperature=temperature)
    return TuningStudy(recs, isl, osl, max_concurrency)


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


def _best_at(methods, conc, end: int, cmax: int) -> str:
    """The guide's "best method" at one end of the range: among the methods whose point ``end`` (0: first,
    -1: last) lies at concurrency ``conc`` (None: the highest such point any method reaches -- a method capped
    for memory ends below ``cmax`` and is compared only with methods ending where it does), the one with the
    highest ratio; "none" when its ratio is below 1 or its N is 0 (speculation should be off there), with the
    best ratio a proposal (N >= 1) reaches there.  The
    last end is named the memory cap only where those methods end at their ``concurrency_cap``."""
    conc = max(m.points[end].concurrency for m in methods) if conc is None else conc
    here = [m for m in methods if m.points[end].concurrency == conc]
    best = max(here, key=lambda m: m.points[end].throughput_ratio)
    p = best.points[end]
    # the memory cap only where the methods ending here end at their own cap (a study whose concurrencies stop
    # below max_concurrency ends there uncapped); then every method is capped, none reaching higher
    capped = end == -1 and all(m.concurrency_cap == conc for m in here)
    at = f"at {conc}" + (f" (the memory cap: no method fits {cmax})" if capped else "")
    if p.num_speculative_tokens == 0 or p.throughput_ratio < 1.0:
        # what drafting would give: the best N >= 1 of any method here (the recommended point may be k = 0,
        # speculation enabled drafting nothing, whose ratio is not a proposal's)
        alt = max(here, key=lambda m: m.points[end].best_static_ratio)
        q = alt.points[end]
        return (f"none {at} (turn speculation off: the best proposal, {alt.method} N = {q.best_static_n}, "
                f"reaches {q.best_static_ratio:.3f}x)")
    return f"{best.method} {at}"


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
        for tgt, rec in study.by_target(hw):
            if rec.methods:
                first = _best_at(rec.methods, min(m.points[0].concurrency for m in rec.methods), 0, cmax)
                wins.append(f"{tgt}: {first}, {_best_at(rec.methods, None, -1, cmax)}")
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
