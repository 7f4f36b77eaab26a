"""Tuning recommendations in vLLM's own formats (layer 3, API): best N per concurrency band with
intervals, a dynamic schedule, the per-position cut-off, the crossover concurrency, a memory check.

Details, derivations and sources: ``docs/modules/specsim.recommend.md``.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from specsim._checks import int_field
from specsim.architecture import ModelSpec, load_model, model_hf_id
from specsim.calibration import stack_mismatch
from specsim.drafters import LOOKUP_METHODS, list_draft_specs
from specsim.engine import check_osl, decode_steps, decode_tokens, default_overhead, evaluate
from specsim.errors import NotCollectedError, SpecsimError, SpecsimValueError
from specsim.hardware import Hardware, load_hardware
from specsim.memory import DEFAULT_GPU_MEMORY_UTILIZATION, memory_budget
from specsim.predict import (
    _check_partial,
    allreduce_prior_warning,
    anchor_factor_warning,
    anchor_point,
    anchor_scope_text,
    anchor_scope_warning,
    anchor_target_time,
    as_baseline,
    check_feasibility,
    check_table_context,
    extrapolation_warning,
    latency_from_path,
    measured_table,
    overhead_dominant_concurrencies,
    overhead_dominant_warning,
    precision_label,
    resolve_inputs,
    scaled_host_overhead,
    short_output_warning,
    table_name,
    table_scale_warning,
    with_expert_parallel,
    with_measured_table,
)
from specsim.published import published_dataset, published_methods, published_n_note, published_profile
from specsim.vllm.config import SPECULATIVE_METHODS, parse_speculative_config
from specsim.vllm.schedule import speculative_config

__all__ = [
    "DEFAULT_CONCURRENCY",
    "CutoffResult",
    "marginal_cutoff",
    "OperatingPoint",
    "Band",
    "MethodRecommendation",
    "Recommendation",
    "recommend",
    "is_placeholder_checkpoint",
]

DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)


# ============================================================================================
# per-position cut-off (marginal rule)


@dataclass(frozen=True)
class CutoffResult:
    """Outcome of the marginal rule (:func:`marginal_cutoff`).

    Attributes
    ----------
    cutoff_n : int
        First N at which extending to N + 1 no longer pays (positions after it cost more than
        they return); ``n_max`` when every extension up to ``n_max`` pays (``reached`` False).
    reached : bool
        Whether the rule stopped inside the range.
    table : pandas.DataFrame
        One row per N = 1..n_max-1: ``num_speculative_tokens, p_next`` (cumulative acceptance of
        position N+1), ``time_per_token_s`` (T(N)/MAL(N)), ``marginal_gain_s``
        (p_next x time_per_token_s), ``marginal_cost_s`` (T(N+1) - T(N)), ``extend`` (bool).
    """

    cutoff_n: int
    reached: bool
    table: pd.DataFrame = field(repr=False, compare=False)


def marginal_cutoff(cumulative: Sequence[float], t_step_s: Sequence[float],
                    decode_tokens: float | None = None) -> CutoffResult:
    """Per-position cut-off: the proposal length after which one more drafted token costs more
    draft + verification time than it returns in expected accepted tokens.

    Derivation.  At a fixed concurrency the decode throughput of one stream is
    MAL(N) / T(N), with MAL(N) = 1 + sum_{k<=N} p_k (p_k cumulative acceptance) and T(N) the
    speculative step time.  Extending N -> N+1 adds p_{N+1} expected tokens and
    dT = T(N+1) - T(N) seconds, so it raises throughput iff

        (MAL(N) + p_{N+1}) / (T(N) + dT) > MAL(N) / T(N)
        <=>  p_{N+1} x T(N) / MAL(N) > dT,

    i.e. the expected tokens gained, valued at the current time per token T(N)/MAL(N), must
    exceed the added step time.  Because the prefill term of :func:`specsim.predict.predict` does
    not depend on N, the full throughput ratio is an increasing function of MAL(N)/T(N) and the
    rule is exactly "ratio(N+1) > ratio(N)": the cut-off equals the best N whenever the ratio
    curve is unimodal in N, and marks the first local maximum otherwise.

    With ``decode_tokens`` D (``OSL - 1``), a request's decode time is ``steps(N) x T(N)`` with
    ``steps = max(D / MAL(N), 1)`` (at least one step: :func:`specsim.engine.decode_steps`), and N is
    extended iff that time falls; the gain is ``(steps(N) - steps(N+1)) x T(N)``, the cost
    ``steps(N+1) x dT``.  While ``MAL(N+1) <= D`` this is the rule above; beyond, one more position
    only adds cost.

    Parameters
    ----------
    cumulative : sequence of float, shape (n_max,)
        p_1..p_{n_max}, cumulative (unconditional) acceptance per position, non-increasing.
    t_step_s : sequence of float, shape (n_max,)
        T(1)..T(n_max), speculative step time in seconds at each N (draft + verification +
        overhead, one concurrency).
    decode_tokens : float, optional
        Tokens a request commits in decode steps, ``OSL - 1``; default: the steady state (no end
        of request), the rule above.

    Returns
    -------
    CutoffResult

    Raises
    ------
    SpecsimValueError
        Shapes differ or are empty; rates outside [0, 1] or increasing; non-positive /
        non-finite times.
    """
    p = np.asarray(cumulative, dtype=float).reshape(-1)
    t = np.asarray(t_step_s, dtype=float).reshape(-1)
    if p.size == 0 or p.shape != t.shape:
        raise SpecsimValueError("cumulative/t_step_s", "must be non-empty and of equal length", (p.size, t.size))
    if not np.all(np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise SpecsimValueError("cumulative", "must lie in [0, 1]", p)
    if np.any(np.diff(p) > 1e-12):
        raise SpecsimValueError("cumulative", "must not increase with position", p)
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise SpecsimValueError("t_step_s", "must be finite and > 0 seconds", t)
    mal = 1.0 + np.cumsum(p)
    n = np.arange(1, p.size)
    if decode_tokens is None:
        tpt = t[:-1] / mal[:-1]
        gain = p[1:] * tpt
        cost = t[1:] - t[:-1]
    else:
        d = float(decode_tokens)
        steps = decode_steps(d, mal)
        tpt = steps[:-1] * t[:-1] / d
        gain = (steps[:-1] - steps[1:]) * t[:-1]
        cost = steps[1:] * (t[1:] - t[:-1])
    extend = gain > cost
    table = pd.DataFrame({"num_speculative_tokens": n, "p_next": p[1:], "time_per_token_s": tpt,
                          "marginal_gain_s": gain, "marginal_cost_s": cost, "extend": extend})
    stop = np.flatnonzero(~extend)
    if stop.size:
        return CutoffResult(cutoff_n=int(n[stop[0]]), reached=True, table=table)
    return CutoffResult(cutoff_n=int(p.size), reached=False, table=table)


# ============================================================================================
# acceptance inputs: published appendix profiles


# ============================================================================================
# results


@dataclass(frozen=True)
class OperatingPoint:
    """Prediction at one concurrency with the recommended N.

    Times in seconds; ``None`` where an interval is unavailable (see the method's
    ``interval_note``).

    Attributes
    ----------
    concurrency : int
    num_speculative_tokens : int
        Recommended k at this batch size (0 = draft nothing; speculation enabled).
    throughput_ratio, ratio_lo, ratio_hi : float
        Speculative / non-speculative output tok/s and its interval.
    tpot_s, tpot_lo_s, tpot_hi_s, baseline_tpot_s : float
    mal, mal_lo, mal_hi : float
        Tokens per verification step at the recommended N (bonus token counted).
    runner_up_n : int or None
        The best other N whose ratio is within ``flat_tolerance`` of the recommended one.
    runner_up_ratio : float or None
    cutoff_n : int
        Marginal-rule cut-off at this concurrency (:func:`marginal_cutoff`).
    cutoff_reached : bool
    best_static_n, best_static_ratio :
        argmax over N >= 1 (what a static config would use here) and its ratio.
    acceptance_extrapolated : bool
        Whether the recommended N relies on positions beyond the measured ones.
    """

    concurrency: int
    num_speculative_tokens: int
    throughput_ratio: float
    ratio_lo: float | None
    ratio_hi: float | None
    tpot_s: float
    tpot_lo_s: float | None
    tpot_hi_s: float | None
    baseline_tpot_s: float
    mal: float
    mal_lo: float | None
    mal_hi: float | None
    runner_up_n: int | None
    runner_up_ratio: float | None
    cutoff_n: int
    cutoff_reached: bool
    best_static_n: int
    best_static_ratio: float
    acceptance_extrapolated: bool


@dataclass(frozen=True)
class Band:
    """A maximal range of batch sizes with the same recommended N.

    Attributes
    ----------
    lo, hi : int
        Inclusive batch-size range (requests per step).
    num_speculative_tokens : int
        k for the range (0 = no drafting).
    runner_up_n : int or None
        Another N within ``flat_tolerance`` of the recommended ratio at EVERY batch size of the
        band (the closest one), else None.
    runner_up_worst_rel : float or None
        min over the band of ratio(runner-up) / ratio(recommended).
    points : tuple of OperatingPoint
        At ``lo`` and at ``hi`` (one point when lo == hi).
    """

    lo: int
    hi: int
    num_speculative_tokens: int
    runner_up_n: int | None
    runner_up_worst_rel: float | None
    points: tuple[OperatingPoint, ...]


@dataclass(frozen=True)
class MethodRecommendation:
    """Recommendation for one speculative method (see :func:`recommend`).

    Attributes
    ----------
    method : str
        vLLM method string.
    draft_model : str or None
        Draft checkpoint for ``"model"`` (None for native MTP / lookup).
    bands : tuple of Band
    points : tuple of OperatingPoint
        At the concurrencies asked.
    schedule : tuple of (int, int, int)
        ``[lo, hi, k]`` per band (vLLM ``num_speculative_tokens_per_batch_size``).
    speculative_config : dict or None
        Ready for ``vllm serve --speculative-config`` (None when speculation never pays).
    static_configs : tuple of (int, int, dict)
        Per band: ``(lo, hi, config)`` with a fixed N, for servers without dynamic speculation
        (or with data parallelism, where vLLM drops the schedule).
    crossover_concurrency : int or None
        Smallest concurrency from which the best ratio stays < 1 up to ``max_concurrency``
        (None: speculation pays over the whole range).
    crossover_range : (int or None, int or None) or None
        The same computed on the lower / upper ratio bounds (earliest, latest).
    crossover_note : str
    memory : MemoryBudget or None
        At the concurrency the bands end at (the cap when capped).
    interval_note : str
    latency_calibrated : bool
        True only for a latency model fitted on this hardware.
    latency_label : str
        ``calibrated``, ``transferred calibration`` (a shipped calibration fitted on another
        accelerator, e.g. MI355X from MI300X) or ``datasheet-only``.
    assumptions : tuple of str
    concurrency_cap : int or None
        Set when the KV cache of ``max_concurrency`` requests does not fit in memory: the largest
        concurrency that fits (:attr:`specsim.memory.MemoryBudget.max_concurrency_fit`); bands,
        points and the crossover then cover 1..``concurrency_cap`` only, and the serve command
        uses it as ``--max-num-seqs``.  None when the whole range fits (or memory is unchecked).
    """

    method: str
    draft_model: str | None
    bands: tuple[Band, ...]
    points: tuple[OperatingPoint, ...]
    schedule: tuple[tuple[int, int, int], ...]
    speculative_config: dict | None
    static_configs: tuple[tuple[int, int, dict], ...]
    crossover_concurrency: int | None
    crossover_range: tuple[int | None, int | None] | None
    crossover_note: str
    memory: Any
    interval_note: str
    latency_calibrated: bool
    assumptions: tuple[str, ...]
    grid: pd.DataFrame = field(repr=False, compare=False, default=None)
    cumulative: tuple[float, ...] = field(repr=False, compare=False, default=())
    extrapolated_from: int = 0
    concurrency_cap: int | None = None
    latency_label: str = ""

    @property
    def speculative_config_json(self) -> str | None:
        """The ``--speculative-config`` string (compact JSON), or None."""
        return None if self.speculative_config is None else json.dumps(self.speculative_config, separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (without the dense grid)."""
        d = {k: v for k, v in asdict(self).items() if k not in ("grid", "memory", "cumulative")}
        d["memory"] = None if self.memory is None else self.memory.to_dict()
        d["speculative_config_json"] = self.speculative_config_json
        return _plain(d)


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


@dataclass(frozen=True)
class Recommendation:
    """Everything :func:`recommend` found for one target on one hardware.

    Attributes
    ----------
    target, hardware, precision : str
    tp, isl, osl, max_model_len, max_concurrency : int
    temperature : float or None
    methods : tuple of MethodRecommendation
        Methods that fit in memory at least at concurrency 1 (capped where ``max_concurrency``
        does not fit: ``MethodRecommendation.concurrency_cap``), best first (by mean recommended
        ratio over the points asked).
    excluded : tuple of (str, str)
        ``(method, reason)`` for methods left out: no fit even at concurrency 1, no acceptance,
        or a deployment vLLM would refuse (TP not dividing the heads, weights over HBM, a draft
        trained for another target; the refusals of :func:`specsim.predict.predict`).
    warnings : tuple of str
        Warnings on the whole recommendation: the software-stack mismatch of ``vllm_version`` /
        ``platform`` (:func:`specsim.calibration.stack_mismatch`) and ``expert_parallel`` at
        ``tp=1`` (a no-op; :func:`specsim.predict.with_expert_parallel`), as ``Prediction.warnings``
        carries them, each once; and concurrencies given above ``max_concurrency`` (not
        reported); empty when none.  In :meth:`summary` and :meth:`to_dict`.
    serve_command : str or None
        ``vllm serve ...`` line for the best method.
    """

    target: str
    hf_id: str
    hardware: str
    tp: int
    precision: str
    isl: int
    osl: int
    max_model_len: int
    max_concurrency: int
    temperature: float | None
    methods: tuple[MethodRecommendation, ...]
    excluded: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...] = ()

    @property
    def best(self) -> MethodRecommendation | None:
        """The first (best-ranked) method, or None when all were excluded."""
        return self.methods[0] if self.methods else None

    def method(self, name: str) -> MethodRecommendation:
        """The recommendation of one method.

        Raises
        ------
        SpecsimValueError
            Method not among the recommended ones (the message gives the exclusion reason).
        """
        for m in self.methods:
            if m.method == name:
                return m
        why = dict(self.excluded).get(name)
        raise SpecsimValueError("method", f"not recommended{': ' + why if why else ''}", name,
                                [m.method for m in self.methods])

    def serve_command(self, method: str | None = None) -> str | None:
        """A ``vllm serve`` command line with the recommended config (shell-quoted JSON).

        ``--max-num-seqs`` is ``max_concurrency``, or the method's ``concurrency_cap`` when the
        KV cache of ``max_concurrency`` requests does not fit.
        """
        m = self.best if method is None else self.method(method)
        if m is None or m.speculative_config is None:
            return None
        seqs = m.concurrency_cap if m.concurrency_cap is not None else self.max_concurrency
        return (f"vllm serve {shlex.quote(self.hf_id)} --tensor-parallel-size {self.tp} --max-model-len {self.max_model_len} "
                f"--max-num-seqs {seqs} --speculative-config '{m.speculative_config_json}'")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return _plain({
            "target": self.target, "hf_id": self.hf_id, "hardware": self.hardware, "tp": self.tp,
            "precision": self.precision, "isl": self.isl, "osl": self.osl, "max_model_len": self.max_model_len,
            "max_concurrency": self.max_concurrency, "temperature": self.temperature,
            "methods": [m.to_dict() for m in self.methods],
            "excluded": [{"method": a, "reason": b} for a, b in self.excluded],
            "warnings": list(self.warnings),
            "serve_command": self.serve_command(),
        })

    def to_json(self, **kw) -> str:
        """The recommendation as JSON."""
        return json.dumps(self.to_dict(), **kw)

    def summary(self) -> str:
        """Readable report: per method the bands, cut-off, crossover, memory and the config.

        The bands table has one row per concurrency asked (``MethodRecommendation.points``) and
        one at each band's first and last concurrency (``Band.points``), under the band it falls
        in; a band edge that was not asked is marked ``*`` (a footnote says so).  Every row is a
        point of :meth:`to_dict` (``points`` or a band's ``points``) with the same values.
        """
        out = [f"{self.target} on {self.hardware} TP={self.tp} {self.precision} | ISL/OSL {self.isl}/{self.osl} | "
               f"concurrency 1..{self.max_concurrency} | temperature {self.temperature}"]
        out += [f"WARNING: {w}" for w in self.warnings]
        for m in self.methods:
            out.append("")
            out.append(f"== {m.method}" + (f" ({m.draft_model})" if m.draft_model else "") +
                       f" [latency {m.latency_label or ('calibrated' if m.latency_calibrated else 'datasheet-only')}]")
            out.append(f"  {'band':>9} {'conc':>6} {'N':>3} {'ratio':>7} {'interval':>15} {'TPOT ms':>8} "
                       f"{'interval':>15} {'runner-up':>10} {'cut-off':>7}")
            asked = {p.concurrency for p in m.points}
            for b, rows in _band_rows(m):
                for i, p in enumerate(rows):
                    iv = "" if p.ratio_lo is None else f"[{p.ratio_lo:.2f}, {p.ratio_hi:.2f}]"
                    tv = "" if p.tpot_lo_s is None else f"[{p.tpot_lo_s * 1e3:.2f}, {p.tpot_hi_s * 1e3:.2f}]"
                    ru = "-" if b.runner_up_n is None else str(b.runner_up_n)
                    cut = f"{p.cutoff_n}{'' if p.cutoff_reached else '+'}"
                    rng = f"{b.lo}-{b.hi}" if i == 0 else ""
                    conc = f"{p.concurrency}{' ' if p.concurrency in asked else '*'}"
                    out.append(f"  {rng:>9} {conc:>6} {b.num_speculative_tokens:>3} {p.throughput_ratio:7.3f} "
                               f"{iv:>15} {p.tpot_s * 1e3:8.3f} {tv:>15} {ru:>10} {cut:>7}")
            if any(p.concurrency not in asked for b in m.bands for p in b.points):
                out.append("  * a band's first or last concurrency, shown where its N starts or ends; not among "
                           "the concurrencies asked")
            if m.concurrency_cap is not None:
                out.append(f"  CAPPED: concurrency {self.max_concurrency} does not fit in memory; bands cover "
                           f"1..{m.concurrency_cap}, the largest concurrency that fits (use --max-num-seqs "
                           f"{m.concurrency_cap})")
            out.append(f"  crossover: {m.crossover_note}")
            out.append(f"  intervals: {m.interval_note}")
            if m.memory is not None:
                out.append(f"  memory: {m.memory.headroom_gib:.1f} GiB headroom per GPU "
                           f"({m.memory.concurrency} x {m.memory.max_model_len} tokens)")
            for a in m.assumptions:
                out.append(f"  assumption: {a}")
            if m.speculative_config is not None:
                out.append(f"  --speculative-config '{m.speculative_config_json}'")
            else:
                out.append("  speculation does not pay anywhere in the range: serve without --speculative-config")
        for meth, why in self.excluded:
            out.append(f"\n== {meth}: EXCLUDED -- {why}")
        cmd = self.serve_command()
        if cmd:
            out.append("\n" + cmd)
        return "\n".join(out)


def _band_rows(m: MethodRecommendation) -> list[tuple[Band, list[OperatingPoint]]]:
    """The rows of :meth:`Recommendation.summary`'s table: per band, its edge points
    (``Band.points``) and the points asked (``MethodRecommendation.points``) that fall inside it,
    by concurrency, each concurrency once (an asked one that is also an edge is the same point)."""
    out = []
    for b in m.bands:
        rows = {p.concurrency: p for p in b.points}
        rows.update({p.concurrency: p for p in m.points if b.lo <= p.concurrency <= b.hi})
        out.append((b, [rows[c] for c in sorted(rows)]))
    return out


# ============================================================================================
# the engine


def _rel_error(latency, explicit: float | None) -> tuple[float | None, str]:
    """Relative 1-sigma step-time error and where it came from."""
    if explicit is not None:
        if not np.isfinite(explicit) or explicit < 0:
            raise SpecsimValueError("step_time_rel_error", "must be a finite number >= 0", explicit)
        return float(explicit), "given"
    v = getattr(latency, "rmse_rel", None)
    if v is not None:
        return float(v), "latency model rmse_rel"
    rec = getattr(latency, "calibration", None)
    if rec is not None and rec.rmse_rel is not None:
        what = "leave-one-target-out error of the stack terms (the same for every target)"
        if not getattr(latency, "calibrated", False):
            what += ", transferred from another accelerator: a lower bound"
        return float(rec.rmse_rel), f"calibration file ({rec.hardware}): {what}"
    return None, ""


def _latency_label(latency) -> str:
    """How the step times were obtained, in words (``MethodRecommendation.latency_label``)."""
    rec = getattr(latency, "calibration", None)
    if hasattr(latency, "table") and hasattr(latency, "fallback"):  # specsim.predict.MeasuredTargetLatency
        return "measured latency table (target decode / verification); prefills and draft passes: stack calibration"
    if getattr(latency, "calibrated", False):
        return ("calibrated" if rec is None
                else "calibrated stack terms (no per-target values; judged leave-one-target-out)")
    return "transferred calibration" if rec is not None else "datasheet-only"


def _unwrap_latency(latency):
    """Accept a ``Calibration`` (``.latency`` + ``.rmse_rel``) where a latency model is expected."""
    if latency is not None and hasattr(latency, "latency") and hasattr(latency, "rmse_rel") \
            and not hasattr(latency, "forward_time"):
        return latency.latency, float(latency.rmse_rel)
    return latency, None


def _draft_checkpoint(drafter) -> str | None:
    """Hugging Face id for the config's ``model`` field (None when the drafter shares the target's
    checkpoint -- native MTP -- or is a lookup)."""
    if getattr(drafter, "kind", "") == "lookup" or getattr(drafter, "shares_target_weights", False):
        return None
    name = getattr(drafter, "name", None)
    try:

        for d in list_draft_specs():
            if name in (d.get("name"), d.get("checkpoint")):
                return d["checkpoint"]
    except SpecsimError:  # pragma: no cover - data error surfaces elsewhere
        pass
    src = str(getattr(drafter, "source", ""))
    return src.split(": ", 1)[1] if ": " in src else name


def is_placeholder_checkpoint(model: str | None) -> bool:
    """True for the stand-in name of a draft derived from the target (no real checkpoint)."""
    return bool(model) and str(model).startswith("(derived ")


def _first_sustained_below(values: np.ndarray, cs: np.ndarray) -> int | None:
    """Smallest c such that values < 1 for every concurrency >= c (None if the last is >= 1)."""
    ok = values >= 1.0
    if ok[-1]:
        return None
    idx = np.flatnonzero(ok)
    return int(cs[0] if idx.size == 0 else cs[idx[-1] + 1])


def _ranges_below(values: np.ndarray, cs: np.ndarray, cross: int | None) -> list[tuple[int, int]]:
    """Runs of consecutive grid concurrencies (lo, hi) BELOW the crossover where values < 1
    (speculation loses at low concurrency, e.g. under a large per-step overhead, which the
    crossover -- a sustained loss up to the largest concurrency -- does not describe)."""
    out: list[tuple[int, int]] = []
    in_run = False
    for c, v in zip(cs.tolist(), values.tolist()):
        if cross is not None and c >= cross:
            break
        if v < 1.0:
            if in_run:
                out[-1] = (out[-1][0], int(c))
            else:
                out.append((int(c), int(c)))
            in_run = True
        else:
            in_run = False
    return out


def _crossover_note(cross: int | None, cross_rng: tuple[int | None, int | None] | None, cmax: int,
                    low: Sequence[tuple[int, int]] = (), low_optimistic: Sequence[tuple[int, int]] | None = None,
                    low_pessimistic: Sequence[tuple[int, int]] | None = None) -> str:
    """The crossover in plain words, with where it lies at the pessimistic (lower ratio bound) and
    optimistic (upper ratio bound) ends of the interval; ``low``: runs of concurrencies below the
    crossover where the best ratio is < 1 as well (:func:`_ranges_below`), ``low_optimistic`` /
    ``low_pessimistic``: the same runs at the two ends of the interval (None without an interval)."""
    if cross is None and not low:
        note = f"speculation pays (best ratio >= 1) at every concurrency 1..{cmax} asked"
    elif cross is None:
        note = f"speculation pays (best ratio >= 1) at the top of the range asked (up to concurrency {cmax})"
    else:
        note = f"no N beats the non-speculative server (ratio < 1) from concurrency {cross} up to {cmax}"
    if cross_rng is not None:
        lo, hi = cross_rng

        def end(v):
            return f"pays at every concurrency 1..{cmax}" if v is None else f"ratio < 1 from concurrency {v}"

        if lo is None and hi is None and not low:
            note += " (also at both ends of the interval)"
        elif not (lo is None and hi is None):
            note += f" (pessimistic end of the interval: {end(lo)}; optimistic end: {end(hi)})"
    if low:
        runs = lambda rr: ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in rr)  # noqa: E731
        ends = ""
        if low_optimistic is not None:
            pess = f"< 1 at {runs(low_pessimistic)}" if low_pessimistic else "none"
            opt = f"< 1 at {runs(low_optimistic)}" if low_optimistic else ">= 1 there"
            ends = f" (pessimistic end of the interval: {pess}; optimistic end: {opt})"
        note += (f"; the predicted best ratio is also < 1 at concurrency {runs(low)}" + ends
                 + ": a low-concurrency loss comes from the per-step speculative overhead of the latency "
                 "calibration (see assumptions); measure it on your stack before switching speculation off")
    return note


def _over_all_steps(mal_drafted, f: float) -> np.ndarray:
    """Tokens per decode step over all steps, ``1 + f (MAL - 1)``, of a MAL per drafted step when a share ``f`` of
    steps drafts (``specsim.engine``); ``MAL`` itself (bit for bit) when every step drafts."""
    m = np.asarray(mal_drafted, float)
    return m if f >= 1.0 else 1.0 + f * (m - 1.0)


def _recommend_one(r, *, tp, isl, osl, cs, n_max, overhead, level, flat_tolerance, rel_err, rel_src,
                   acc_range, range_note, report_cs, memory,
                   drafted_fraction: float = 1.0) -> tuple[MethodRecommendation, list[int]]:
    from scipy import stats

    f = float(drafted_fraction)  # share of decode steps that draft (a lookup method's misses draft nothing)
    ns = np.arange(1, n_max + 1)
    ev = evaluate(r, ns[:, None], cs[None, :], isl, osl, tp, overhead, drafted_fraction=f)
    ratio = np.asarray(ev["throughput_ratio"], float)
    t_step = np.asarray(ev["t_step_s"], float)
    tpot = np.asarray(ev["tpot_s"], float)
    mal = np.asarray(ev["mal"], float)[:, 0]
    t_base = np.asarray(ev["t_base_s"], float)[0]
    base_tpot = np.asarray(ev["baseline_tpot_s"], float)[0]
    cycle_base = cs * osl / np.asarray(ev["baseline_output_tok_per_s"], float)[0]
    cycle_spec = cs[None, :] * osl / np.asarray(ev["output_tok_per_s"], float)
    dec = float(decode_tokens(osl))  # tokens from decode steps: the prefill samples the first
    p_spec = (cycle_spec - decode_steps(dec, mal[:, None]) * t_step)[0]  # speculative-arm prefill, N-independent

    # K = 0 with speculation enabled: one draft pass + per-step overhead (module docstring)
    ctx = isl + osl / 2.0
    draft0 = np.asarray(r.drafter.draft_time(r.latency, r.target, n=1, batch=cs, context=ctx, tp=tp,
                                             precision=r.precision,
                                             **({"draft_latency": r.draft_latency} if r.draft_latency is not None
                                                else {})), float)
    t0 = t_base + draft0 + np.asarray(overhead.step_seconds(cs, 0), float)
    ratio0 = cycle_base / (p_spec + dec * t0)
    tpot0 = ((cs - 1) / cs * p_spec + dec * t0) / dec

    # intervals
    notes = []
    mal_lo = mal_hi = None
    try:
        # per drafted step, then over all steps as the engine counts them: 1 + f (MAL - 1)
        mal_lo, mal_hi = (_over_all_steps(x, f) for x in r.acceptance.mal_interval(ns, level))
        notes.append(f"acceptance: MAL {level:.0%} interval from counts (Greenwood / delta method)")
    except NotCollectedError as e:
        if acc_range is not None:
            lo_acc, hi_acc = acc_range
            mal_lo = np.minimum(_over_all_steps(lo_acc.mal(ns), f), mal)
            mal_hi = np.maximum(_over_all_steps(hi_acc.mal(ns), f), mal)
            notes.append(range_note or "acceptance: range given by the caller")
        else:
            notes.append(f"acceptance: no counts behind it ({e})")
    z = float(stats.norm.ppf(0.5 + level / 2.0))
    r_lat = None if rel_err is None else z * rel_err
    if r_lat is not None:
        notes.append(f"latency: speculative step x exp(+- {z:.2f} x {rel_err:.3g}) ({rel_src})")
    else:
        notes.append("latency: no calibration residual for this hardware (datasheet priors, or a latency model "
                     "given without one): not included")
    have_iv = mal_lo is not None or r_lat is not None
    if have_iv:
        ml = mal if mal_lo is None else mal_lo
        mh = mal if mal_hi is None else mal_hi
        # rmse_rel is an RMS error of LOG step time (the fits minimise log residuals): a log-space band
        up = float(np.exp(0.0 if r_lat is None else r_lat))
        dn = 1.0 / up
        ratio_lo = cycle_base / (p_spec + decode_steps(dec, ml[:, None]) * t_step * up)
        ratio_hi = cycle_base / (p_spec + decode_steps(dec, mh[:, None]) * t_step * dn)
        pre = (cs - 1) / cs * p_spec
        tpot_lo = (pre + decode_steps(dec, mh[:, None]) * t_step) * dn / dec
        tpot_hi = (pre + decode_steps(dec, ml[:, None]) * t_step) * up / dec
        ratio0_lo = cycle_base / (p_spec + dec * t0 * up)
        ratio0_hi = cycle_base / (p_spec + dec * t0 * dn)
        tpot0_lo, tpot0_hi = tpot0 * dn, tpot0 * up
        notes.append(f"combined at the corners (coverage >= {level:.2f}^2 when independent)")
    interval_note = "; ".join(notes) if have_iv else "no interval: " + "; ".join(notes)

    # full table including N = 0
    all_ratio = np.vstack([ratio0[None, :], ratio])  # row k = N
    best_idx = np.argmax(ratio, axis=0)
    best_ratio = ratio[best_idx, np.arange(cs.size)]
    sched = np.where(best_ratio >= ratio0, best_idx + 1, 0)

    # N relies on an extrapolated position; a purely parametric profile (constant rate: nothing measured)
    # is an assumption, not an extrapolation, as predict reads it (specsim.engine.acceptance_extrapolated)
    meas = int(getattr(r.acceptance, "n_measured", 0) or 0)
    ext_pos = np.asarray(r.acceptance.is_extrapolated(n_max), bool) if meas > 0 else np.zeros(n_max, bool)
    n_ext = np.cumsum(ext_pos) > 0
    cum = np.asarray(r.acceptance.cumulative(n_max), float)
    cum_steps = f * cum  # per position, over all decode steps: MAL = 1 + f sum p_k (marginal_cutoff's input)

    def point(j: int, k: int) -> OperatingPoint:
        rr = all_ratio[:, j]
        others = [(float(rr[kk]), kk) for kk in range(n_max + 1) if kk != k and rr[kk] >= (1 - flat_tolerance) * rr[k]]
        ru = max(others) if others else None
        cut = marginal_cutoff(cum_steps, t_step[:, j], dec)
        if k == 0:
            vals = (float(ratio0[j]), float(tpot0[j]), 1.0)
            iv = (float(ratio0_lo[j]), float(ratio0_hi[j]), float(tpot0_lo[j]), float(tpot0_hi[j]), 1.0, 1.0) \
                if have_iv else (None,) * 6
        else:
            i = k - 1
            vals = (float(ratio[i, j]), float(tpot[i, j]), float(mal[i]))
            iv = (float(ratio_lo[i, j]), float(ratio_hi[i, j]), float(tpot_lo[i, j]), float(tpot_hi[i, j]),
                  None if mal_lo is None else float(mal_lo[i]), None if mal_hi is None else float(mal_hi[i])) \
                if have_iv else (None,) * 6
        return OperatingPoint(
            concurrency=int(cs[j]), num_speculative_tokens=int(k), throughput_ratio=vals[0], ratio_lo=iv[0],
            ratio_hi=iv[1], tpot_s=vals[1], tpot_lo_s=iv[2], tpot_hi_s=iv[3], baseline_tpot_s=float(base_tpot[j]),
            mal=vals[2], mal_lo=iv[4], mal_hi=iv[5], runner_up_n=None if ru is None else int(ru[1]),
            runner_up_ratio=None if ru is None else float(ru[0]), cutoff_n=cut.cutoff_n,
            cutoff_reached=cut.reached, best_static_n=int(best_idx[j] + 1), best_static_ratio=float(best_ratio[j]),
            acceptance_extrapolated=bool(k > 0 and n_ext[k - 1]),
        )

    bands = []
    start = 0
    for j in range(1, cs.size + 1):
        if j == cs.size or sched[j] != sched[start]:
            k = int(sched[start])
            js = np.arange(start, j)
            rel = all_ratio[:, js] / all_ratio[k, js][None, :]
            worst = rel.min(axis=1)
            worst[k] = -np.inf
            cand = int(np.argmax(worst))
            ok = worst[cand] >= 1 - flat_tolerance
            pts = (point(start, k),) if j - 1 == start else (point(start, k), point(j - 1, k))
            bands.append(Band(lo=int(cs[start]), hi=int(cs[j - 1]), num_speculative_tokens=k,
                              runner_up_n=cand if ok else None,
                              runner_up_worst_rel=float(worst[cand]) if ok else None, points=pts))
            start = j
    idx = {int(c): j for j, c in enumerate(cs)}
    points = tuple(point(idx[c], int(sched[idx[c]])) for c in report_cs)

    # crossover vs the non-speculative server
    cross = _first_sustained_below(best_ratio, cs)
    cross_rng = None
    if have_iv:
        best_lo = ratio_lo.max(axis=0)
        best_hi = ratio_hi.max(axis=0)
        cross_rng = (_first_sustained_below(best_lo, cs), _first_sustained_below(best_hi, cs))
    cnote = _crossover_note(cross, cross_rng, int(cs[-1]), low=_ranges_below(best_ratio, cs, cross),
                            low_optimistic=_ranges_below(ratio_hi.max(axis=0), cs, cross) if have_iv else None,
                            low_pessimistic=_ranges_below(ratio_lo.max(axis=0), cs, cross) if have_iv else None)

    # vLLM configs
    schedule = tuple((b.lo, b.hi, b.num_speculative_tokens) for b in bands)
    model = _draft_checkpoint(r.drafter)
    nmax_sched = max(k for _, _, k in schedule)
    assumptions = list(r.assumptions)
    if f < 1.0:
        assumptions.append(f"only {f:.1%} of decode steps carry a draft (lookup misses, drafted_fraction): MAL, ratios "
                           "and the cut-off count every decode step; a drafted step is taken to propose N tokens (a "
                           "lookup may propose fewer, so its verification cost is an upper bound)")
    if is_placeholder_checkpoint(model):
        assumptions.append(f"no published {r.method} checkpoint for {r.target.name}: the config's model field "
                           f"{model!r} is a PLACEHOLDER (costs from a draft derived from the target); put your "
                           "checkpoint's id there before giving the config to vLLM")
    if nmax_sched == 0:
        cfg = None
    elif len(schedule) == 1:
        cfg = speculative_config(r.method, nmax_sched, model=model)
    else:
        cfg = speculative_config(r.method, nmax_sched, model=model, schedule=[list(e) for e in schedule])
        assumptions.append("dynamic schedule: vLLM switches FULL to PIECEWISE CUDA graphs on the V1 model runner "
                           "(vllm/config/vllm.py:1040-1054; not modelled) and drops the schedule when "
                           "data_parallel_size > 1 (vllm/config/vllm.py:1056-1075): use the per-band static configs there")
        if any(k == 0 for _, _, k in schedule):
            assumptions.append("k = 0 bands still pay one draft pass per step (modelled as the N = 1 pass, an upper "
                               "bound) and the per-step speculative overhead (vllm/v1/spec_decode/llm_base_proposer.py:616-627)")
    assumptions.append(f"the last range's k is carried forward beyond concurrency {int(cs[-1])} up to max_num_seqs "
                       "(vllm/v1/spec_decode/dynamic/utils.py:138-144)")
    if meas and n_max > meas:
        assumptions.append(f"acceptance beyond position {meas} is extrapolated (parametric fit)")
    statics = tuple((b.lo, b.hi, speculative_config(r.method, b.num_speculative_tokens, model=model))
                    for b in bands if b.num_speculative_tokens > 0)

    grid = pd.DataFrame({
        "num_speculative_tokens": np.repeat(np.arange(0, n_max + 1), cs.size),
        "concurrency": np.tile(cs, n_max + 1),
        "throughput_ratio": all_ratio.reshape(-1),
        "tpot_s": np.vstack([tpot0[None, :], tpot]).reshape(-1),
        "t_step_s": np.vstack([t0[None, :], t_step]).reshape(-1),
        "mal": np.repeat(np.concatenate([[1.0], mal]), cs.size),
        "recommended": (np.arange(0, n_max + 1)[:, None] == sched[None, :]).reshape(-1),
    })
    if have_iv:
        grid["ratio_lo"] = np.vstack([ratio0_lo[None, :], ratio_lo]).reshape(-1)
        grid["ratio_hi"] = np.vstack([ratio0_hi[None, :], ratio_hi]).reshape(-1)
    # concurrencies whose RECOMMENDED N rests on a speculative overhead above draft + verification
    # (predict warns per point, sweep per grid: specsim.predict.plausibility_warnings)
    on = sched >= 1
    dominant = []
    if on.any():
        pick = {k: np.asarray(ev[k], float)[np.maximum(sched, 1) - 1, np.arange(cs.size)][on]
                for k in ("t_overhead_s", "t_verify_s", "t_draft_s")}
        dominant = overhead_dominant_concurrencies(pick, cs[on], (int(on.sum()),))
    rec = MethodRecommendation(
        method=r.method, draft_model=model, bands=tuple(bands), points=points, schedule=schedule,
        speculative_config=cfg, static_configs=statics, crossover_concurrency=cross, crossover_range=cross_rng,
        crossover_note=cnote, memory=memory, interval_note=interval_note,
        latency_calibrated=bool(getattr(r.latency, "calibrated", False)),
        latency_label=_latency_label(r.latency),
        assumptions=tuple(dict.fromkeys(assumptions)), grid=grid, cumulative=tuple(float(x) for x in cum),
        extrapolated_from=meas,
    )
    return rec, dominant


#: SpecsimValueError fields with which specsim.predict refuses a deployment vLLM would refuse
#: (specsim.predict.check_feasibility, resolve_inputs): recommend excludes the method with the reason.
_REFUSED_FIELDS = ("tp", "isl + osl", "draft", "speculative_config.model")


def _table_span(lo: float, hi: float) -> str:
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def _check_table_range(r, cs, n_max: int, *, concurrency_given: bool, max_concurrency_given: bool,
                       capped: bool) -> None:
    """Refuse, before any evaluation, the concurrencies (batches) and proposal lengths (q = N + 1)
    of a recommendation that a measured latency table of the target does not cover, saying the
    table's range and which ``--concurrency`` / ``--max-concurrency`` / ``--max-n`` values lie inside.
    Latency models that are not measured tables are not checked."""
    table = measured_table(r.latency)
    if table is None:
        return
    name = table_name(table)
    cmax = int(cs[-1])
    bad = np.asarray(table.refused("batch", cs), dtype=bool)
    if bad.any():
        lo, hi = table.axis_range("batch")
        a_lo, a_hi = table.axis_range("batch", accepted=True)
        why = (f"{name} covers batches of {_table_span(lo, hi)} sequences per step, but recommend evaluates every "
               f"concurrency (= batch) 1..{cmax}: its bands span 1 to the largest concurrency asked ("
               + (f"capped at {cmax} by the memory check" if capped else
                  f"--max-concurrency / max_concurrency= {cmax}" if max_concurrency_given else
                  f"the largest --concurrency / concurrency= value, {cmax}" if concurrency_given else
                  f"the default --concurrency {','.join(map(str, DEFAULT_CONCURRENCY))}") + ")")
        if bad[0]:  # batch 1 itself is outside: no concurrency range helps
            raise SpecsimValueError(
                "batch", f"{why}; the bands start at concurrency 1, so the table must cover batch 1: record a "
                f"latency table from batch 1 up to {cmax} (or use specsim predict / sweep at concurrencies inside "
                f"{_table_span(a_lo, a_hi)})", int(cs[np.flatnonzero(bad)[0]]))
        top = int(np.floor(a_hi + 1e-9))
        inside = [c for c in DEFAULT_CONCURRENCY if c <= top]
        if inside[-1] != top:
            inside.append(top)
        raise SpecsimValueError(
            "batch", f"{why}: pass --concurrency (concurrency=) values inside {_table_span(a_lo, a_hi)}, e.g. "
            f"--concurrency {','.join(map(str, inside))}" + (f" with --max-concurrency {top} or less"
                                                             if max_concurrency_given else "")
            + f", or record a latency table covering batches 1-{cmax}", int(cs[np.flatnonzero(bad)[0]]))
    qs = np.arange(1, n_max + 2)
    bad = np.asarray(table.refused("q", qs), dtype=bool)
    if bad.any():
        lo, hi = table.axis_range("q")
        a_lo, a_hi = table.axis_range("q", accepted=True)
        why = (f"{name} covers q of {_table_span(lo, hi)} query tokens per sequence, but recommend considers N "
               f"1..{n_max} (a verification step of N draft tokens has q = N + 1, up to {n_max + 1}; the "
               "non-speculative step q = 1)")
        if bad[0] or a_hi < 2:
            raise SpecsimValueError(
                "q", f"{why}; the table must cover q = 1 and 2 at least: record a latency table from q = 1 up to "
                f"{n_max + 1}", int(qs[np.flatnonzero(bad)[0]]))
        top = int(np.floor(a_hi + 1e-9)) - 1
        raise SpecsimValueError(
            "q", f"{why}: pass --max-n (max_num_speculative_tokens=) {top} or less, or record a latency table "
            f"covering q up to {n_max + 1}", int(qs[np.flatnonzero(bad)[0]]))


def _check_method_keys(name: str, given, methods: Sequence[str], *, default: bool) -> None:
    """Refuse a dict ``acceptance`` / ``acceptance_range`` with keys that name none of the methods
    being recommended: :func:`recommend` looks each method up by its vLLM method string, so such a key's
    profile would be dropped without a word (and the method given the published profile instead).

    Parameters
    ----------
    name : str
        The argument, for the error (``"acceptance"`` or ``"acceptance_range"``).
    given : object
        The argument's value; only a mapping is checked.
    methods : sequence of str
        The methods being recommended (the allowed keys).
    default : bool
        Whether ``methods`` is the default list (``method=None``: the methods with a published
        acceptance for the target), said in the message.

    Raises
    ------
    SpecsimValueError
        Field ``name``: the unused key(s), allowed: ``methods``.
    """
    if not isinstance(given, Mapping):
        return
    unused = [k for k in given if k not in methods]
    if not unused:
        return
    which = ("the methods with a published acceptance for the target (method=None)" if default
             else "the methods being recommended")
    raise SpecsimValueError(
        name, f"is keyed by vLLM method, and the key(s) {', '.join(map(repr, unused))} match none of {which}, so "
        "their profile(s) would be ignored: key each profile by one of them, or add its method to method=",
        unused[0] if len(unused) == 1 else unused, list(methods))


def _served_model(tgt: ModelSpec) -> str:
    """What ``vllm serve`` is given for the target: the catalog's Hugging Face id; for a target read from
    a ``config.json``, its model directory (absolute); for any other config file, a placeholder naming
    it (vLLM serves a model directory or hub id, not a lone config file -- the bare stem would be taken
    for a hub id)."""
    from pathlib import Path

    src = Path(tgt.source) if tgt.source else None
    if src is not None and src.is_file() and src.suffix == ".json":
        return str(src.resolve().parent) if src.name == "config.json" else f"<model directory of {src}>"
    return model_hf_id(tgt.name)


#: the vLLM methods whose drafts are n-gram lookups with a prompt_lookup_min / _max window
_NGRAM_METHODS = ("ngram", "ngram_gpu")


def _ngram_lookup_fields(ngram_lookup, methods: Sequence[str]) -> dict[str, int]:
    """``{"prompt_lookup_min": a, "prompt_lookup_max": b}`` of :func:`recommend`'s ``ngram_lookup``
    (empty when None), checked as vLLM 0.32 checks the window (``vllm/config/speculative.py``: integers >= 1,
    min <= max).

    Raises
    ------
    SpecsimValueError
        Not a pair of integers >= 1 with min <= max; no n-gram method among ``methods``.
    """
    if ngram_lookup is None:
        return {}
    if (isinstance(ngram_lookup, (str, bytes)) or not hasattr(ngram_lookup, "__len__") or len(ngram_lookup) != 2):
        raise SpecsimValueError("ngram_lookup", "must be (prompt_lookup_min, prompt_lookup_max), two integers",
                                ngram_lookup)
    lo = int_field("ngram_lookup[0] (prompt_lookup_min)", ngram_lookup[0], minimum=1)
    hi = int_field("ngram_lookup[1] (prompt_lookup_max)", ngram_lookup[1], minimum=1)
    if lo > hi:
        raise SpecsimValueError("ngram_lookup", "prompt_lookup_min must be <= prompt_lookup_max (vLLM 0.32 refuses "
                                "it: vllm/config/speculative.py)", tuple(ngram_lookup))
    if not any(m in _NGRAM_METHODS for m in methods):
        raise SpecsimValueError("ngram_lookup", f"applies to the n-gram methods only; recommended: {', '.join(methods)}",
                                tuple(ngram_lookup), _NGRAM_METHODS)
    return {"prompt_lookup_min": lo, "prompt_lookup_max": hi}


def _config_with(cfg: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` (a recommended ``--speculative-config`` dict) with ``fields`` added, checked again by
    :func:`specsim.vllm.config.parse_speculative_config`.

    Parameters
    ----------
    cfg : mapping
        A speculative config (``method``, ``num_speculative_tokens``, ...).
    fields : mapping
        Further keys (e.g. ``prompt_lookup_min`` / ``prompt_lookup_max``).

    Returns
    -------
    dict
        A new dict; ``cfg`` is not changed.

    Raises
    ------
    SpecsimValueError
        A field vLLM 0.32 would refuse, named.
    """
    out = {**cfg, **fields}
    parse_speculative_config(out)
    return out


def recommend(
    target,
    method: str | Sequence[str] | None = None,
    *,
    hardware="MI300X",
    tp: int = 1,
    precision: str | None = None,
    isl: int = 1024,
    osl: int = 1024,
    concurrency: Iterable[int] = DEFAULT_CONCURRENCY,
    max_concurrency: int | None = None,
    max_num_speculative_tokens: int | None = None,
    acceptance=None,
    acceptance_range: tuple[Any, Any] | None = None,
    dataset: str = "mix",
    draft=None,
    drafter=None,
    latency=None,
    overhead=None,
    step_time_rel_error: float | None = None,
    level: float = 0.95,
    flat_tolerance: float = 0.02,
    temperature: float | None = 0.0,
    temperature_assumption: str | None = None,
    check_memory: bool = True,
    max_model_len: int | None = None,
    gpu_memory_utilization: float | None = None,
    baseline=None,
    baseline_concurrency: int | None = None,
    vllm_version: str | None = None,
    platform: str | None = None,
    draft_latency=None,
    expert_parallel: bool = False,
    ngram_lookup: tuple[int, int] | None = None,
    drafted_fraction: float = 1.0,
) -> Recommendation:
    """Recommended vLLM speculative configuration per concurrency band (module docstring).

    Parameters
    ----------
    target : str or ModelSpec
        Target model (``specsim/data/models`` name or HF id).
    method : str or list of str, optional
        vLLM method(s); default every method with a published acceptance for the target.
    hardware : str or Hardware
    tp : int
        Target tensor-parallel degree.
    precision : str, optional
        Target weight precision, as :func:`specsim.predict.predict`.
    isl, osl : int
        Input / output tokens per request.
    concurrency : iterable of int
        Concurrencies to report ``points`` at; bands cover every integer 1..``max_concurrency``.
    max_concurrency : int, optional
        Upper end of the range asked (default ``max(concurrency)``); also the ``--max-num-seqs``
        of the serve command and the concurrency the memory check uses.  Values of
        ``concurrency`` above it are not reported: silently for the default list, with a warning
        in ``Recommendation.warnings`` for a list given (``specsim recommend`` refuses
        ``--max-concurrency`` below a ``--concurrency`` value instead).
    max_num_speculative_tokens : int, optional
        Largest N considered; default the positions measured in the acceptance profile
        (15 for a parametric profile), so recommendations stay inside the data.
    acceptance : Acceptance or dict of {method: Acceptance}, optional
        Measured acceptance; default :func:`published_profile` of (target, method, ``dataset``).
        One ``Acceptance`` applies to every method; a dict gives one per vLLM method string, and a
        method it leaves out gets the published profile.  Every key must name one of the methods
        recommended (``method``, or by default the methods with a published acceptance).
    acceptance_range : (Acceptance, Acceptance) or dict of {method: pair}, optional
        Lower / upper acceptance used for the interval when the profile has no counts; a dict is
        keyed by method as ``acceptance`` is.
    dataset : str
        Published dataset for the default acceptance (``"mix"`` = equal mixture of the four; any case,
        :func:`specsim.published.published_dataset`).  A name no target has is refused; one with no rows
        for a (target, method) excludes that method.
    draft, drafter :
        Draft checkpoint / ready drafter, as :func:`specsim.predict.predict` (one method only).
    latency : LatencyModel, Calibration or path, optional
        Default: the hardware's shipped calibration (``specsim.calibration.default_latency``).
        A ``Calibration`` (``specsim.latency.calibrate``) also supplies ``rmse_rel``.  A measured
        table of the target's forwards (:class:`specsim.latency.MeasuredLatency`) times decode and
        verification steps, with prefills and draft passes from the stack calibration, as
        :func:`specsim.predict.predict` (:func:`specsim.predict.with_measured_table`); it must
        cover the context ``isl + osl / 2``, concurrencies 1..``max_concurrency`` and
        q = 1..N + 1 (refused before any evaluation otherwise, naming the table's range and what
        to pass instead).
    draft_latency : LatencyModel or path, optional
        Times the draft passes when ``latency`` is a measured table, as :func:`specsim.predict.predict`
        (refused where ``latency`` times the draft passes from their counts: it would be ignored).
    expert_parallel : bool, default False
        vLLM ``--enable-expert-parallel`` over the TP group, as :func:`specsim.predict.predict`
        (:func:`specsim.predict.with_expert_parallel`; at ``tp=1`` a no-op, said in
        ``Recommendation.warnings``).
    ngram_lookup : (int, int), optional
        ``(prompt_lookup_min, prompt_lookup_max)``, the n-gram lookup window the acceptance of ``ngram`` /
        ``ngram_gpu`` was measured with: written into their recommended configs (static ones included).
        Without it those configs give no window and vLLM 0.32 uses 5 / 5 (``vllm/config/speculative.py``
        ``__post_init__``), which a warning says; the window changes what is accepted, not the step cost.
    drafted_fraction : float in (0, 1], default 1
        Share of decode steps that carry a draft, for the lookup methods (:data:`specsim.drafters.LOOKUP_METHODS`:
        ``ngram``, ``ngram_gpu``, ``suffix``), whose steps with no match draft nothing (vLLM counts only drafted
        steps): measured as in :func:`specsim.predict.predict` (``specsim ingest`` / ``--acceptance-from`` give
        it).  Steps then commit ``1 + f (MAL - 1)`` tokens and verify ``1 + f N``; a drafted step is taken to
        propose N tokens (an upper bound on its verification cost).  Other methods draft every step and are
        not affected.
    vllm_version, platform : str, optional
        The vLLM release (``"0.32.0"``) and platform (``"ROCm 7.2"``) you will run: a warning in
        ``Recommendation.warnings`` when they differ from the stack the calibration was fitted on
        (:func:`specsim.calibration.stack_mismatch`).
    overhead : SpecOverhead, optional
        Default: the calibration's (zero when uncalibrated).
    step_time_rel_error : float, optional
        1-sigma error of the LOG step time (relative error for small values); default the
        calibration's ``rmse_rel`` (the leave-one-target-out RMS log error of its stack terms, the same for every target).
    level : float
        Interval level in (0, 1).
    flat_tolerance : float
        Runner-up tolerance: other N within this fraction of the recommended ratio.
    temperature, temperature_assumption :
        Sampling temperature to recommend for; a profile measured at another temperature is an
        error unless ``temperature_assumption`` says why it transfers (the result carries it).
    check_memory : bool
        Memory check (:func:`specsim.memory.memory_budget`): a method whose KV cache for
        ``max_concurrency`` requests does not fit is capped at the largest concurrency that fits
        (``concurrency_cap``, an assumption line, the summary); one that does not fit even at
        concurrency 1 is excluded with the reason.
    max_model_len : int, optional
        Tokens per sequence for the KV cache (default ``isl + osl``).
    gpu_memory_utilization : float, optional
        vLLM's fraction (default 0.92, vLLM 0.32.0).
    baseline : MeasuredBaseline, dict or path, optional
        A measured non-speculative baseline (as :func:`specsim.predict.predict`): the target's
        forwards are scaled by the k that makes the predicted baseline equal it at the measured
        concurrency and ISL/OSL (:func:`specsim.predict.anchor_target_time`), for every method and
        concurrency of the recommendation (an assumption line says so).
    baseline_concurrency : int, optional
        The concurrency the baseline was measured at; required unless the baseline records it
        (a ``vllm bench serve`` file's ``max_concurrency``).

    Returns
    -------
    Recommendation

    Raises
    ------
    SpecsimValueError
        Bad concurrency / N / level / tolerance; a concurrency or ``max_concurrency`` >= 2**63;
        unknown target, hardware; ``method`` (or ``method[i]`` of a list) not a vLLM
        speculative method string (:data:`specsim.vllm.config.SPECULATIVE_METHODS`, listed) or an
        empty list; an ``acceptance`` / ``acceptance_range`` dict with a key that is none of the
        methods recommended (its profile would go unused; the methods listed); no acceptance
        for a method named explicitly; temperature mismatch without an assumption;
        ``expert_parallel`` with a dense target or a measured latency table; ``vllm_version`` not a
        version or ``platform`` not naming a vLLM platform; a measured latency table that does not
        cover the context ``isl + osl / 2``, the concurrencies 1..max or q = 1..N + 1; ``ngram_lookup``
        that is not two integers >= 1 with min <= max, or given with no n-gram method recommended;
        ``drafted_fraction`` not a number in (0, 1], or below 1 with no lookup method recommended.
    """

    tgt = target if isinstance(target, ModelSpec) else load_model(target)
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    tp = int_field("tp", tp)
    isl = int_field("isl", isl)
    osl = int_field("osl", osl)
    check_osl(osl)
    try:
        report_cs = sorted({int(c) for c in concurrency})
    except (TypeError, ValueError):
        raise SpecsimValueError("concurrency", "must be an iterable of integers >= 1", concurrency) from None
    if not report_cs or report_cs[0] < 1:
        raise SpecsimValueError("concurrency", "must be a non-empty set of integers >= 1", concurrency)
    for c in report_cs:
        int_field("concurrency", c)
    default_cs = tuple(report_cs) == DEFAULT_CONCURRENCY
    cmax = int_field("max_concurrency", max_concurrency if max_concurrency is not None else report_cs[-1])
    above = [c for c in report_cs if c > cmax]
    report_cs = [c for c in report_cs if c <= cmax]
    if not (isinstance(level, (float, int)) and 0 < level < 1):
        raise SpecsimValueError("level", "must lie in (0, 1)", level)
    if not (isinstance(flat_tolerance, (float, int)) and 0 <= flat_tolerance < 1):
        raise SpecsimValueError("flat_tolerance", "must lie in [0, 1)", flat_tolerance)
    if max_model_len is None:
        max_model_len = isl + osl
    max_model_len = int_field("max_model_len", max_model_len)
    if max_model_len < isl + osl:
        raise SpecsimValueError("max_model_len", f"must be >= isl + osl = {isl + osl}", max_model_len)
    if gpu_memory_utilization is None:
        gpu_memory_utilization = DEFAULT_GPU_MEMORY_UTILIZATION
    # a name no target has is the caller's typo, refused (it excluded every method, exit 0); one this target has
    # no rows for excludes the method, as before
    dataset = published_dataset(dataset)

    if method is None:
        if drafter is not None:
            methods = [getattr(drafter, "method", None)]
        else:
            methods = published_methods(tgt)
            if not methods:
                raise SpecsimValueError("method", f"not given, and specsim ships no published acceptance for "
                                        f"{tgt.name}: name the method(s) (method= / --method) and give their "
                                        "acceptance (acceptance= / --acceptance, --acceptance-from)")
    else:
        methods = [method] if isinstance(method, str) else list(method)
        if not methods:
            raise SpecsimValueError("method", "must not be empty: give a vLLM method, a list of them, or None "
                                    "(every method with a published acceptance)", method, SPECULATIVE_METHODS)
        for i, m in enumerate(methods):
            if not isinstance(m, str) or m not in SPECULATIVE_METHODS:
                raise SpecsimValueError("method" if isinstance(method, str) else f"method[{i}]",
                                        "unknown vLLM speculative method", m, SPECULATIVE_METHODS)
    if len(methods) > 1 and (draft is not None or drafter is not None):
        raise SpecsimValueError("draft", "a draft / drafter applies to one method; pass one method", methods)
    lookup_fields = _ngram_lookup_fields(ngram_lookup, methods)
    _check_partial(drafted_fraction, None)
    if drafted_fraction < 1.0 and not any(m in LOOKUP_METHODS for m in methods):
        raise SpecsimValueError("drafted_fraction", "applies to the lookup methods only, which skip the steps whose "
                                f"lookup finds nothing; recommended: {', '.join(map(str, methods))}",
                                drafted_fraction, LOOKUP_METHODS)
    _check_method_keys("acceptance", acceptance, methods, default=method is None and drafter is None)
    _check_method_keys("acceptance_range", acceptance_range, methods, default=method is None and drafter is None)

    anchor_b = as_baseline(baseline)
    if anchor_b is None and baseline_concurrency is not None:
        raise SpecsimValueError("baseline_concurrency", "applies only with baseline=", baseline_concurrency)
    if anchor_b is not None:
        c_b = baseline_concurrency if baseline_concurrency is not None else anchor_b.concurrency
        if c_b is None:
            raise SpecsimValueError("baseline_concurrency", "is required: recommend spans concurrencies 1..max, so "
                                    "the concurrency the baseline was measured at must be given", None)
        anchor_pt = anchor_point(anchor_b, baseline_concurrency, c_b, isl, osl)
    stack_mismatch(None, vllm_version=vllm_version, platform=platform)  # refuses a bad version / platform now
    stack_warnings: dict[str, None] = {}
    if above and not default_cs:  # the default list is cut at max_concurrency silently; a list given is not
        stack_warnings[f"concurrency {above} above max_concurrency {cmax} (CLI: --max-concurrency) not reported: "
                       f"the recommendation covers concurrencies 1..{cmax}; raise max_concurrency to include "
                       "them"] = None
    latency, cal_rel = _unwrap_latency(latency_from_path(latency, tp))  # a CSV path: as predict reads it
    if step_time_rel_error is None:
        step_time_rel_error = cal_rel
    cs = np.arange(1, cmax + 1)

    recs, excluded = [], []
    prec = precision_label(tgt, precision)
    for meth in methods:
        # acceptance
        acc = acceptance.get(meth) if isinstance(acceptance, Mapping) else acceptance
        rng = acceptance_range.get(meth) if isinstance(acceptance_range, Mapping) else acceptance_range
        rnote = "acceptance: range given by the caller" if rng is not None else ""
        if acc is None:
            try:
                prof = published_profile(tgt, meth, dataset)
            except SpecsimValueError as e:
                if method is not None and isinstance(method, str):
                    raise SpecsimValueError("acceptance", f"none given and none published for {meth}: {e}", None) from e
                excluded.append((meth, f"no acceptance profile ({e})"))
                continue
            acc, rng, rnote = prof.acceptance, prof.range, prof.range_note
            n_note = published_n_note(tgt, meth, dataset, prof)  # one row's rates at every N: what they give at others
        else:
            n_note = None
        try:
            r = resolve_inputs(tgt, meth, None, hardware=hw, precision=precision, acceptance=acc, draft=draft,
                               drafter=drafter, latency=latency, temperature=temperature,
                               temperature_assumption=temperature_assumption)
        except SpecsimValueError as e:
            if e.field not in _REFUSED_FIELDS or (meth == "draft_model" and draft is None and drafter is None):
                raise  # a draft_model method without its draft is the caller's omission, not a vLLM refusal
            excluded.append((meth, f"refused (as vLLM would refuse it): {e}"))
            continue
        r = with_measured_table(r, draft_latency, tp=tp)  # as specsim.predict.predict
        stack_warnings.update(dict.fromkeys(table_scale_warning(r)))
        check_table_context(r, isl=isl, osl=osl)
        if expert_parallel:
            r, ep_warn = with_expert_parallel(r, tp=tp)
            stack_warnings.update(dict.fromkeys(ep_warn))
        if vllm_version or platform:
            w = stack_mismatch(getattr(r.latency, "calibration", None), vllm_version=vllm_version, platform=platform)
            if w:
                stack_warnings[w] = None
        try:  # the refusals of specsim.predict.predict (TP vs heads, weights vs HBM, context length)
            check_feasibility(r, tp=tp, concurrency=1, isl=isl, osl=osl, hardware=hw)
        except SpecsimValueError as e:
            if e.field not in _REFUSED_FIELDS:
                raise
            excluded.append((r.method, f"refused (as vLLM would refuse it): {e}"))
            continue
        ov = overhead if overhead is not None else default_overhead(r.latency)
        if anchor_b is None:
            stack_warnings.update(dict.fromkeys(allreduce_prior_warning(r.latency, tp)))
        anchor_note = None
        if anchor_b is not None:
            k, anchor_rec = anchor_target_time(r, anchor_b, tp=tp, point=anchor_pt, overhead=ov)
            r = replace(r, target_time_scale=k)
            ov = scaled_host_overhead(ov, anchor_rec["host_time_scale"])
            stack_warnings.update(dict.fromkeys(anchor_factor_warning(anchor_rec) + anchor_scope_warning(anchor_rec)))
            anchor_note = (f"target step time anchored on the measured baseline ({anchor_b.source}, "
                           f"{anchor_b.anchor_metric[0]} = {anchor_b.anchor_metric[1]:.6g} at concurrency "
                           f"{anchor_pt[0]}, ISL/OSL {anchor_pt[1]}/{anchor_pt[2]}): {anchor_scope_text(anchor_rec)} "
                           "at every concurrency; draft passes and speculative overhead not scaled; the step-time "
                           "interval keeps the calibration's width")
        rel, rel_src = _rel_error(r.latency, step_time_rel_error)
        meas = int(getattr(r.acceptance, "n_measured", 0) or 0)
        n_max = max_num_speculative_tokens if max_num_speculative_tokens is not None else (meas or 15)
        n_max = int_field("max_num_speculative_tokens", n_max)
        mem, cap, cap_note = None, None, None
        if check_memory:
            def budget(c):
                return memory_budget(tgt, drafter=r.drafter, hardware=hw, tp=tp, precision=precision,
                                     concurrency=c, max_model_len=max_model_len, num_speculative_tokens=n_max,
                                     gpu_memory_utilization=gpu_memory_utilization)

            mem = budget(cmax)
            if not mem.fits:
                full = mem
                c_fit = min(mem.max_concurrency_fit, cmax - 1)
                while c_fit >= 1:  # re-check at the cap (activation terms may depend on concurrency)
                    mem = budget(c_fit)
                    if mem.fits:
                        break
                    c_fit = min(mem.max_concurrency_fit, c_fit - 1)
                if c_fit < 1:
                    excluded.append((r.method, f"does not fit in memory even at concurrency 1: {full.reason}"))
                    continue
                cap = int(c_fit)
                cap_note = (f"memory: the KV cache of {cmax} concurrent requests x {max_model_len} tokens does not "
                            f"fit ({full.reason}); the recommendation is capped at concurrency {cap}, the largest "
                            f"that fits: bands cover 1..{cap} and --max-num-seqs must be <= {cap}")
        prec = precision_label(tgt, r.precision)
        m_cs = cs if cap is None else cs[:cap]
        m_report = report_cs if cap is None else sorted({min(c, cap) for c in report_cs})
        _check_table_range(r, m_cs, n_max, concurrency_given=not default_cs,
                           max_concurrency_given=max_concurrency is not None, capped=cap is not None)
        m, dominant = _recommend_one(r, tp=tp, isl=isl, osl=osl, cs=m_cs, n_max=n_max, overhead=ov,
                                     level=float(level), flat_tolerance=float(flat_tolerance), rel_err=rel,
                                     rel_src=rel_src, acc_range=rng, range_note=rnote, report_cs=m_report,
                                     memory=mem,
                                     drafted_fraction=drafted_fraction if r.method in LOOKUP_METHODS else 1.0)
        if dominant:
            stack_warnings.setdefault(overhead_dominant_warning(
                dominant, f"{tgt.name}, {r.method} on {hw.name} at its recommended N"))
        ext_n = sorted({b.num_speculative_tokens for b in m.bands if m.extrapolated_from
                        and b.num_speculative_tokens > m.extrapolated_from})
        if ext_n:  # the recommended N itself rests on the parametric fit (predict / sweep / best_n warn so too)
            stack_warnings.setdefault(extrapolation_warning(r.acceptance, ext_n, f"{r.method}, recommended N"))
        on_pts = [p for p in m.points if p.num_speculative_tokens > 0]
        short = short_output_warning(osl, [p.mal for p in on_pts], f" ({r.method}, recommended N)") if on_pts else None
        if short is not None:  # predict warns per point, sweep per grid
            stack_warnings.setdefault(short)
        if r.method in _NGRAM_METHODS and lookup_fields:
            m = replace(m, speculative_config=None if m.speculative_config is None else
                        _config_with(m.speculative_config, lookup_fields),
                        static_configs=tuple((lo, hi, _config_with(c, lookup_fields))
                                             for lo, hi, c in m.static_configs))
        elif r.method in _NGRAM_METHODS and m.speculative_config is not None:
            # vLLM 0.32 sets prompt_lookup_min = max = 5 when neither is given (vllm/config/speculative.py,
            # __post_init__), and an n-gram's acceptance depends on its window
            stack_warnings.setdefault(
                f"{r.method}: the recommended speculative config gives no prompt_lookup_min / prompt_lookup_max, so "
                "vLLM 0.32 uses 5 / 5 (vllm/config/speculative.py); the acceptance behind it holds for the window it "
                "was measured with: give that window (ngram_lookup= / --ngram-lookup MIN,MAX)")
        if cap is not None:
            m = replace(m, concurrency_cap=cap, assumptions=(cap_note, *m.assumptions))
        if anchor_note is not None:
            m = replace(m, assumptions=(anchor_note, *m.assumptions))
        if n_note is not None:
            m = replace(m, assumptions=(*m.assumptions, n_note))
        recs.append(m)
    recs.sort(key=lambda m: -float(np.mean([p.throughput_ratio for p in m.points])) if m.points else 0.0)
    return Recommendation(
        target=tgt.name, hf_id=_served_model(tgt), hardware=hw.name, tp=tp, precision=prec, isl=isl, osl=osl,
        max_model_len=max_model_len, max_concurrency=cmax, temperature=temperature, methods=tuple(recs),
        excluded=tuple(excluded), warnings=tuple(stack_warnings),
    )
