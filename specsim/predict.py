"""``predict``, ``sweep``, ``best_n`` and ``Prediction`` (layer 3, API): user-facing names and numbers
resolved into a :class:`specsim.engine.Scenario`, checked against what vLLM would refuse, and
evaluated by :func:`specsim.engine.evaluate`.  The step model and its sources: ``docs/model.md``
(Leviathan et al. 2023 for the constant-acceptance special case).
"""
from __future__ import annotations

import contextlib
import inspect
import itertools
import json
import math
import os
import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from specsim._checks import REPEAT_RULE, distinct_values, int_field, int_values
from specsim.acceptance import TEMPERATURE_RULE, Acceptance, temperature_ok
from specsim.architecture import (
    FLOAT32_DOWNCAST_NOTES,
    WEIGHT_DTYPE_NOTES,
    ModelSpec,
    load_model_or_config,
)
from specsim.calibration import default_latency, stack_mismatch
from specsim.drafters import LOOKUP_METHODS, draft_specs, get_drafter, unmodelled_config_fields
from specsim.engine import (
    Scenario,
    SpecOverhead,
    _evaluate_shared,
    _uses_plan,
    OSL_MIN,
    acceptance_extrapolated,
    check_osl,
    decode_steps,
    decode_tokens,
    default_overhead,
    evaluate,
    prefill_seconds,
)
from specsim.errors import SpecsimValueError
from specsim.hardware import Hardware, load_hardware
from specsim.latency import microseconds_text, read_latency_table
from specsim.memory import memory_budget
from specsim.vllm.config import parse_speculative_config

__all__ = ["Prediction", "MeasuredBaseline", "predict", "sweep", "best_n", "resolve_inputs", "break_even_mal",
           "health_terms", "anchor_target_time", "resolve_overhead", "scaled_host_overhead", "ANCHOR_SCOPES",
           "allreduce_prior_warning"]


@dataclass(frozen=True)
class Prediction:
    """One predicted operating point.  Times are seconds, throughputs output tokens/s.

    Attributes
    ----------
    throughput_ratio : float
        Speculative output tok/s divided by non-speculative output tok/s, same hardware.
    mal : float
        Mean acceptance length: tokens committed per verification step, bonus token included.
    acceptance_rate : float
        ``(mal - 1) / N`` with N the proposal length modelled (``num_speculative_tokens``):
        accepted draft tokens per PROPOSED position, i.e. the mean of the N CUMULATIVE
        (unconditional) per-position rates -- not the conditional per-position rate (alpha) of
        ``Acceptance.conditional``.  It equals vLLM's ``spec_decode_acceptance_rate`` / 100 (accepted
        / draft tokens, what ``specsim ingest`` and ``SpecDecodeCounts.acceptance_rate`` report) only
        when every step drafts N tokens (``drafted_fraction=1``, no ``mean_proposal_tokens``);
        vLLM's rate in every case is the property ``accepted_per_proposed_token`` (also in
        :meth:`to_dict` / ``--json``), its MAL ``mal_per_drafted_step``.
    t_base_s, t_step_s : float
        Seconds per engine step.  Baseline decode step (target forward + host, ``t_host_s``);
        speculative step ``t_step_s`` = ``t_draft_s + t_verify_s + t_overhead_s + t_host_s``.
    t_draft_s, t_verify_s, t_overhead_s, t_prefill_s : float
        Step-time breakdown, seconds: draft passes, the target's verification forward (q = N + 1),
        the speculative overhead (:class:`~specsim.engine.SpecOverhead`, source in
        ``term_sources``); ``t_prefill_s`` is the target's prefill of one request (ISL tokens),
        paid by both arms (the speculative arm also pays the drafter's pass over the prompt:
        ``t_prefill_spec_s``).
    t_prefill_spec_s : float
        The speculative arm's prefill of one request, seconds: ``t_prefill_s`` plus the drafter's
        pass over the prompt where it has one (none for lookup methods such as ``ngram``); with
        ``D = OSL - 1``, ``output_tok_per_s = C * OSL / (C * t_prefill_spec_s + S * t_step_s)`` with
        ``S = max(D / mal, 1)`` steps (:func:`specsim.engine.decode_steps`).
    output_tok_per_s, baseline_output_tok_per_s : float
        Aggregate output throughput of all ``concurrency`` streams.
    tpot_s, baseline_tpot_s : float
        Time per output token of one stream as ``vllm bench serve`` times it, after the first
        token (which the prefill samples): decode time plus the prefill stalls of the other
        ``concurrency - 1`` requests (in the speculative arm including the drafter's pass over
        each prompt), divided by OSL - 1.
    speedup_bound : float
        The ratio with free drafting and no speculative overhead (an upper bound of
        ``throughput_ratio``): ``(C t_prefill + D T_base) / (C t_prefill + S T_verify)``,
        ``D = OSL - 1``, ``S = max(D / MAL, 1)``,
        i.e. ``MAL * T_base / T_verify`` without prefill.
    latency_calibrated : bool
        Whether the latency model was calibrated on measurements (else datasheet-only).
    acceptance_extrapolated : bool
        Whether some of the N positions lie beyond the measured ones (parametric extrapolation).
    assumptions : tuple of str
        Every assumption the number rests on (acceptance from a scalar, temperature, ...).
    warnings : tuple of str
        What the reader must see (printed as ``WARNING`` lines by :meth:`summary`): temperature > 0
        from acceptance of another or unknown temperature, zero acceptance, a ratio below 1
        (:func:`prediction_warnings`).
    num_speculative_tokens_source : {"argument", "speculative_config", "schedule"}
        Where ``num_speculative_tokens`` (the N modelled) came from: the argument, the config's
        ``num_speculative_tokens``, or its ``num_speculative_tokens_per_batch_size`` entry for a
        batch of ``concurrency`` requests (0 = speculation skipped at this batch size).
    configured_num_speculative_tokens : int or None
        The N given (argument or config); differs from ``num_speculative_tokens`` under a schedule.
    break_even_mal : float
        Health check: the MAL (tokens per step, bonus included) at which ``throughput_ratio`` would
        be exactly 1 at this operating point, with the same step times and prefills
        (:func:`break_even_mal`).  ``throughput_ratio < 1`` exactly when ``mal < break_even_mal``.
        ``inf`` when no MAL breaks even (the speculative arm's extra prefill alone costs more than
        all decode steps of the baseline, or it would need a MAL above ``OSL - 1``, beyond which a
        request takes its one step whatever the MAL; ``null`` in :meth:`to_dict` / JSON).  Without prefill it is
        ``verify_cost_in_baseline_steps``.
    verify_cost_in_baseline_steps : float
        Health check: the WHOLE speculative step (draft + verification + overhead + host, ``t_step_s``) in
        baseline decode steps, ``t_step_s / t_base_s``: what one verify cycle costs.
    verification_cost_in_baseline_steps : float
        The target's verification forward alone (q = N + 1 tokens per sequence, ``t_verify_s``) in
        baseline decode steps, ``t_verify_s / t_base_s``: near 1 while decode is memory-bound.
    target_time_scale : float
        Factor applied to every target forward (``Scenario.target_time_scale``): 1 unless the
        prediction is anchored on a measured baseline (``baseline=``), then the solved k.
    baseline_anchor : dict or None
        With ``baseline=``: the anchoring record -- ``metric`` (``"tpot_s"`` or
        ``"output_tok_per_s"``), ``measured``, ``predicted_unanchored``, ``predicted_anchored``
        (equal to ``measured`` by construction, up to the root finder's tolerance), the measured
        point (``concurrency``, ``isl``, ``osl``), ``target_time_scale``, ``host_time_scale`` (the
        factor on the host-side seconds, 1 unless the measurement is faster than the calibration's
        host terms allow), ``scaled`` (one of :data:`ANCHOR_SCOPES`: what the anchor scaled) and
        ``source``.
    term_sources : dict of str to str
        Where each term of the step model came from (keys ``target_step``, ``verification``,
        ``target_prefill``, ``draft``, ``speculative_overhead``, ``acceptance``): a measurement
        (the anchored baseline, the user's ``latency=`` / ``overhead=``, measured acceptance), the
        stack calibration (``specsim/data/calibration``) or datasheet priors.
    t_host_s : float
        Host seconds per engine step paid by both arms (scheduler, input / output processing), where
        the engine reports it (``evaluate``'s ``t_host_s``; 0 otherwise); included in ``t_base_s``
        and ``t_step_s``.
    overhead_terms : dict of str to float
        The :class:`~specsim.engine.SpecOverhead` used, field by field (seconds; e.g. ``fixed_s``,
        ``per_token_s``); its source is ``term_sources["speculative_overhead"]``.
    drafted_fraction : float
        Share of decode steps that carry a draft, as given to :func:`predict` (1: every step).
    mean_proposal_tokens : float or None
        Tokens proposed per drafted step, as given (None: N).  With either, ``mal`` is per decode
        step over all steps; per drafted step it is ``1 + (mal - 1) / drafted_fraction`` and the
        accepted share of proposed tokens ``(mal - 1) / (drafted_fraction * mean_proposal_tokens)``
        (vLLM's ``spec_decode_acceptance_rate`` / 100), which :meth:`summary` prints.
    """

    target: str
    method: str
    num_speculative_tokens: int
    hardware: str
    tp: int
    precision: str
    concurrency: int
    isl: int
    osl: int
    throughput_ratio: float
    mal: float
    acceptance_rate: float
    t_base_s: float
    t_step_s: float
    t_draft_s: float
    t_verify_s: float
    t_overhead_s: float
    t_prefill_s: float
    output_tok_per_s: float
    baseline_output_tok_per_s: float
    tpot_s: float
    baseline_tpot_s: float
    speedup_bound: float
    latency_calibrated: bool
    latency_description: str
    acceptance_extrapolated: bool
    temperature: float | None
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    num_speculative_tokens_source: str = "argument"
    configured_num_speculative_tokens: int | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    break_even_mal: float = math.nan
    verify_cost_in_baseline_steps: float = math.nan
    verification_cost_in_baseline_steps: float = math.nan
    target_time_scale: float = 1.0
    baseline_anchor: dict[str, Any] | None = None
    term_sources: dict[str, str] = field(default_factory=dict)
    overhead_terms: dict[str, float] = field(default_factory=dict)
    t_host_s: float = 0.0
    drafted_fraction: float = 1.0
    mean_proposal_tokens: float | None = None
    t_prefill_spec_s: float = math.nan

    @property
    def mal_per_drafted_step(self) -> float | None:
        """Tokens committed per DRAFTED step, ``1 + (mal - 1) / drafted_fraction``: vLLM's "Mean
        acceptance length" (``1 + accepted / num_drafts``); equal to ``mal`` when every step drafts.
        None at N = 0 (nothing drafted)."""
        if not (self.mean_proposal_tokens or self.num_speculative_tokens) or self.drafted_fraction <= 0:
            return None
        return 1.0 + (self.mal - 1.0) / self.drafted_fraction

    @property
    def accepted_per_proposed_token(self) -> float | None:
        """Accepted share of the proposed draft tokens, ``(mal - 1) / (drafted_fraction *
        mean_proposal_tokens)`` (``mean_proposal_tokens`` None: N): vLLM's acceptance rate
        (``spec_decode_acceptance_rate`` / 100, accepted / draft tokens); equal to
        ``acceptance_rate`` when every step drafts N tokens.  None at N = 0."""
        k = self.mean_proposal_tokens or self.num_speculative_tokens
        if not k or self.drafted_fraction <= 0:
            return None
        return (self.mal - 1.0) / (self.drafted_fraction * k)

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python dict (JSON-serialisable: a non-finite ``break_even_mal`` becomes None), with
        the two per-drafted-step properties (``mal_per_drafted_step``,
        ``accepted_per_proposed_token``) beside the fields."""
        d = asdict(self)
        d["mal_per_drafted_step"] = self.mal_per_drafted_step
        d["accepted_per_proposed_token"] = self.accepted_per_proposed_token
        d["assumptions"] = list(self.assumptions)
        d["warnings"] = list(self.warnings)
        if not math.isfinite(d["break_even_mal"]):
            d["break_even_mal"] = None
        return d

    def to_json(self, **kw) -> str:
        """The prediction as a JSON string."""
        return json.dumps(self.to_dict(), **kw)

    def summary(self) -> str:
        """A readable multi-line summary (an assumption that is also a warning is printed once, as the WARNING)."""
        lat = "calibrated" if self.latency_calibrated else "uncalibrated"
        lines = [
            f"{self.target} | method={self.method} N={self.num_speculative_tokens} | {self.hardware} TP={self.tp} "
            f"{self.precision} | concurrency={self.concurrency} ISL/OSL={self.isl}/{self.osl}",
            f"  throughput ratio    {self.throughput_ratio:6.3f}x  (bound with free drafting {self.speedup_bound:.3f}x)",
            (f"  MAL                 {self.mal:6.3f} tokens/step ((MAL - 1) / N = {self.acceptance_rate:.3f} accepted per proposed token)"
             if (self.drafted_fraction >= 1.0 and self.mean_proposal_tokens is None)
             or not (self.mean_proposal_tokens or self.num_speculative_tokens) else  # N = 0: no drafts
             f"  MAL                 {self.mal:6.3f} tokens/step over all steps; {self.drafted_fraction:.1%} of steps draft "
             f"{self.mean_proposal_tokens or self.num_speculative_tokens:.2f} tokens: per drafted step "
             f"{self.mal_per_drafted_step:.3f}, accepted per proposed token "
             f"{self.accepted_per_proposed_token:.3f}"),
            f"  output throughput   {self.output_tok_per_s:10.1f} tok/s  (baseline {self.baseline_output_tok_per_s:.1f})",
            f"  TPOT                {self.tpot_s * 1e3:8.3f} ms     (baseline {self.baseline_tpot_s * 1e3:.3f} ms)",
            f"  step time           {self.t_step_s * 1e3:8.3f} ms = draft {self.t_draft_s * 1e3:.3f} + verification "
            f"{self.t_verify_s * 1e3:.3f} + overhead {self.t_overhead_s * 1e3:.3f}"
            + (f" + host {self.t_host_s * 1e3:.3f}" if self.t_host_s else "")
            + f"  (baseline step {self.t_base_s * 1e3:.3f} ms)",
            f"  prefill / request   {self.t_prefill_s * 1e3:8.3f} ms"
            + (f"  (speculative arm, with the drafter's pass over the prompt: {self.t_prefill_spec_s * 1e3:.3f} ms)"
               if self.t_prefill_spec_s > self.t_prefill_s else ""),
            f"  break-even MAL      {_fmt_mal(self.break_even_mal)}  (the ratio is < 1 at a MAL below it; this MAL "
            f"{self.mal:.3f}" + ("; below 1: the speculative step is timed no dearer than the baseline step, so any "
                                 "acceptance pays" if self.break_even_mal < 1.0 else "") + ")",
            f"  step cost           {self.verify_cost_in_baseline_steps:6.3f} baseline steps (verification alone "
            f"{self.verification_cost_in_baseline_steps:.3f})",
            f"  latency model       {lat}: {self.latency_description}",
        ]
        if self.baseline_anchor is not None:
            a = self.baseline_anchor
            lines.append(f"  anchored on         measured baseline {_fmt_metric(a['metric'], a['measured'])} at "
                         f"concurrency {a['concurrency']} ISL/OSL={a['isl']}/{a['osl']} ({a['source']}): "
                         f"{anchor_scope_text(a)} (unanchored "
                         f"{_fmt_metric(a['metric'], a['predicted_unanchored'])})")
        for term, src in self.term_sources.items():
            lines.append(f"  term {term:<20} {src}")
        if self.acceptance_extrapolated:
            lines.append("  acceptance          extrapolated beyond the measured positions (parametric fit)")
        for a in self.assumptions:
            if a not in self.warnings:  # printed once, as the WARNING below (``assumptions`` keeps every one)
                lines.append(f"  assumption          {a}")
        for w in self.warnings:
            lines.append(f"  WARNING             {w}")
        return "\n".join(lines)

    def __str__(self) -> str:  # pragma: no cover - formatting only
        return self.summary()


# --------------------------------------------------------------------------------------------
# input resolution


def _check_draft_matches_target(drafter, target, field: str) -> None:
    """A shipped draft checkpoint trained for another target is refused (its acceptance and even
    its vocabulary belong to that target), and so is a ``draft_model`` whose vocabulary differs
    from the target's by more than padding (vLLM ``v1/sample/rejection_sampler.py`` compares the two
    distributions over one vocabulary)."""

    draft = getattr(drafter, "draft", None)
    if getattr(drafter, "method", None) == "draft_model" and draft is not None:
        vd, vt = getattr(draft, "vocab_size", None), getattr(target, "vocab_size", None)
        if vd and vt and abs(vd - vt) > 0.01 * vt:  # padded vocabularies of one tokenizer differ by < 1 %
            raise SpecsimValueError(field, f"draft vocabulary ({vd} tokens) differs from the target's ({vt}): vLLM's "
                                    "rejection sampler compares draft and target distributions token by token, so "
                                    "a draft model must share the target's tokenizer", getattr(draft, "name", vd))
    name = getattr(drafter, "name", None)
    if not name:
        return
    norm = lambda x: "".join(ch for ch in str(x).split("/")[-1].lower() if ch.isalnum())  # noqa: E731
    for spec in draft_specs():
        if norm(spec["name"]) == norm(name) and spec.get("target") and norm(spec["target"]) != norm(target.name):
            raise SpecsimValueError(field, f"draft {spec['checkpoint']} was trained for {spec['target']}, "
                                    f"not for the target {target.name}", spec["checkpoint"])


def constant_acceptance(rate, *, temperature: float | None) -> Acceptance:
    """:meth:`Acceptance.constant` of a user's ``acceptance=`` number (a constant conditional
    per-position acceptance rate in [0, 1]), its errors naming the field ``acceptance``.

    Raises
    ------
    SpecsimValueError
        ``rate`` outside [0, 1] or NaN (field ``acceptance``; ``Acceptance.constant`` names it ``alpha``).
    """
    try:
        return Acceptance.constant(float(rate), temperature=temperature)
    except SpecsimValueError as e:
        raise SpecsimValueError("acceptance", f"a constant per-position acceptance rate {e.rule}", rate) from e


#: matrix units a weight precision needs to multiply without dequantizing (:func:`weight_only_notes`)
_MATRIX_UNITS = {"fp8": "FP8", "mxfp4": "FP4", "int4": "int4"}


def weight_only_notes(hw: Hardware, target, precision: str | None) -> list[str]:
    """The assumption a prediction carries when weights are stored in a precision ``hw`` has no
    matrix units for (:func:`specsim.latency.native_precision`): they are read at their own width and
    dequantized for the multiply, which runs at another peak (:meth:`Hardware.peak_dtype`), paying
    the calibration's ``dequant_s_per_weight`` per element -- vLLM's Marlin kernels for GPUs that
    lack the format (``vllm/model_executor/kernels/linear/scaled_mm/marlin.py``, FP8 Marlin;
    ``MarlinMxFp4LinearKernel`` for MXFP4).

    Parameters
    ----------
    hw : Hardware
    target : ModelSpec
        Its ``weight_dtype`` / ``expert_weight_dtype`` are used when ``precision`` is None.
    precision : str or None
        The precision predicted at (one of :data:`specsim.hardware.PRECISIONS`).

    Returns
    -------
    list of str
        One assumption per non-native weight precision; empty when every one is native, on a CPU
        host, or where the hardware has no peak for it (refused elsewhere)."""
    from specsim.latency import native_precision

    if getattr(hw, "kind", "gpu") == "cpu":
        return []
    dtypes = [precision] if precision is not None else [
        getattr(target, "weight_dtype", None), getattr(target, "expert_weight_dtype", None)]
    out = []
    for d in dict.fromkeys(x for x in dtypes if x in _MATRIX_UNITS):
        if native_precision(hw, d):
            continue
        try:
            peak = hw.peak_dtype(d)
        except SpecsimValueError:
            continue
        out.append(f"{d} weights on {hw.name}, which has no {_MATRIX_UNITS[d]} matrix units: modelled weight-only "
                   f"({d} weight reads, dequantized for the multiply at the {peak} peak, dequant_s_per_weight per "
                   "weight element; vLLM's Marlin kernels for GPUs that lack the format)")
    return out


def _load_target(target) -> ModelSpec:
    """A catalog name or a config.json path (:func:`specsim.architecture.load_model_or_config`)."""
    return load_model_or_config(target, field="target")


def _fmt_mal(m: float) -> str:
    return f"{m:6.3f}" if math.isfinite(m) else "   inf (no MAL breaks even)"


def _fmt_metric(metric: str, v: float) -> str:
    return f"TPOT {v * 1e3:.3f} ms" if metric == "tpot_s" else f"{v:.1f} output tok/s"


#: MAL - 1 (accepted draft tokens per step) below which acceptance is called near zero in the warnings
NEAR_ZERO_ACCEPTED_PER_STEP = 0.05


def break_even_mal(out: Mapping[str, Any], concurrency, osl) -> np.ndarray:
    """MAL at which the throughput ratio is exactly 1, same step times and prefills (closed form).

    Each batch of C requests costs ``C * t_prefill + (D / MAL) * T_step`` seconds of engine time,
    ``D = OSL - 1`` the tokens committed by decode steps (the prefill samples the first;
    :func:`specsim.engine.output_throughput`:
    ``tok/s = C * OSL / (C * t_prefill + (D / MAL) * T_step)``).  Setting the speculative arm equal
    to the baseline arm (``MAL = 1``, ``T_base``, the target's prefill only) gives

    ``MAL* = D * T_step / (C * OSL / tok_s_base - C * t_prefill_spec)``

    where ``C * OSL / tok_s_base = C * t_prefill + D * T_base`` (the baseline's engine time per
    C requests) and the speculative arm's prefill (the target's plus the drafter's pass over the
    prompt) is read back from the same dict: ``C * t_prefill_spec = C * OSL / tok_s - D * T_step / MAL``.
    The ratio is increasing in MAL up to ``MAL = D`` (a request takes at least one step,
    :func:`specsim.engine.decode_steps`) and constant beyond, so ``ratio < 1`` exactly when
    ``MAL < MAL*``, and no MAL breaks even (``inf``) when ``MAL* > D``.  Without prefill
    ``MAL* = T_step / T_base``.

    Parameters
    ----------
    out : mapping
        :func:`specsim.engine.evaluate` output (``t_step_s``, ``mal``, ``output_tok_per_s``,
        ``baseline_output_tok_per_s``; seconds, tokens/s).
    concurrency, osl : array_like
        C and OSL of the evaluation (broadcast with ``out``).

    Returns
    -------
    ndarray
        Break-even MAL (tokens per step); ``inf`` where the denominator is <= 0 (no MAL breaks
        even: the speculative arm's extra prefill alone exceeds the baseline's decode time).
    """
    c = np.asarray(concurrency, dtype=float)
    o = np.asarray(osl, dtype=float)
    d = decode_tokens(o)
    t_step = np.asarray(out["t_step_s"], dtype=float)
    mal = np.asarray(out["mal"], dtype=float)
    cycle_base = c * o / np.asarray(out["baseline_output_tok_per_s"], dtype=float)
    # = C t_prefill_spec (decode_steps: at least one step per request)
    prefill_spec = c * o / np.asarray(out["output_tok_per_s"], dtype=float) - decode_steps(d, mal) * t_step
    den = cycle_base - prefill_spec
    with np.errstate(divide="ignore", invalid="ignore"):
        star = np.where(den > 0, d * t_step / np.where(den > 0, den, 1.0), np.inf)
    # beyond MAL = D a request takes its one step whatever the MAL: the ratio stops rising there
    return np.where(star <= d, star, np.inf)


def health_terms(out: Mapping[str, Any], concurrency, osl) -> dict[str, np.ndarray]:
    """The health checks of a prediction (``Prediction`` fields, ``sweep`` columns).

    Returns
    -------
    dict of ndarray
        ``break_even_mal`` (:func:`break_even_mal`), ``verify_cost_in_baseline_steps``
        (``t_step_s / t_base_s``: draft + verification + overhead in baseline steps) and
        ``verification_cost_in_baseline_steps`` (``t_verify_s / t_base_s``: the target's
        verification forward alone).
    """
    t_base = np.asarray(out["t_base_s"], dtype=float)
    return {
        "break_even_mal": break_even_mal(out, concurrency, osl),
        "verify_cost_in_baseline_steps": np.asarray(out["t_step_s"], dtype=float) / t_base,
        "verification_cost_in_baseline_steps": np.asarray(out["t_verify_s"], dtype=float) / t_base,
    }


#: below this many speculative decode steps per request, ``(OSL - 1) / MAL``, the last step's partial use
#: (a request needing fewer tokens than the step commits; :func:`specsim.engine.decode_steps`) is a
#: sizeable share of the request's time and the model, which does not count it, overstates the ratio
FEW_DECODE_STEPS = 4.0


def prediction_warnings(r: Scenario, throughput_ratio: float | None = None, *, mal: float | None = None,
                        break_even: float | None = None, osl: int | None = None,
                        n: int | None = None) -> tuple[str, ...]:
    """Warnings a prediction must show, not only record (``Prediction.warnings``).

    - sampling temperature > 0 from acceptance measured at another temperature or at an unknown
      one (acceptance falls with temperature: the numbers may be optimistic);
    - measured acceptance zero at position 1 (every draft rejected), a MAL of 1 (nothing accepted,
      e.g. a schedule's k = 0) or near-zero acceptance (``mal - 1 <``
      :data:`NEAR_ZERO_ACCEPTED_PER_STEP`), naming the break-even MAL;
    - a throughput ratio below 1 (speculation is predicted slower than none: below break-even),
      naming the MAL and the break-even MAL, and, with ``n`` (the N modelled), saying so where the
      break-even MAL exceeds N + 1, the most tokens a step commits (MAL counts the bonus token);
    - with ``osl``: :func:`short_output_warning`.
    """
    out = []
    t, prof_t = r.temperature, getattr(r.acceptance, "temperature", None)
    if t is not None and t > 0:
        if prof_t is None:
            out.append(f"predicting at temperature {t:g} from acceptance of unknown temperature: acceptance "
                       "usually falls as temperature rises, so these numbers may be optimistic; measure at "
                       f"temperature {t:g} (or pass the profile's temperature)")
        elif not np.isclose(prof_t, t):
            out.append(f"predicting at temperature {t:g} from acceptance measured at temperature {prof_t:g}: "
                       "transferred by assumption only")
    try:
        p1 = float(np.asarray(r.acceptance.cumulative(1)).reshape(-1)[0])
    except Exception:  # noqa: BLE001 - a custom acceptance object without cumulative()
        p1 = None
    be = "" if break_even is None else f"; break-even MAL {_fmt_mal(break_even).strip()}"
    if p1 is not None and p1 == 0.0:
        out.append("acceptance is zero: every draft token is rejected (MAL 1.0), so speculation only adds "
                   f"cost{be}")
    elif mal is not None and mal - 1.0 <= 1e-12:
        out.append(f"MAL is {mal:.3f}: no draft token is committed at this operating point, so speculation only "
                   f"adds cost{be}")
    elif mal is not None and mal - 1.0 < NEAR_ZERO_ACCEPTED_PER_STEP:
        out.append(f"acceptance is near zero: MAL {mal:.3f} (fewer than {NEAR_ZERO_ACCEPTED_PER_STEP} accepted "
                   f"tokens per step){be}")
    if throughput_ratio is not None and np.isfinite(throughput_ratio) and throughput_ratio < 1.0:
        why = "" if mal is None or break_even is None else \
            f" (MAL {mal:.3f} < break-even MAL {_fmt_mal(break_even).strip()})"
        unreachable = "" if n is None or break_even is None or not break_even > n + 1 else \
            (f"; no acceptance reaches that break-even at N = {n}: a step commits at most N + 1 = {n + 1} tokens, "
             "so the modelled cost of speculating exceeds anything it can save here")
        out.append(f"below break-even: throughput ratio {throughput_ratio:.3f}x < 1{why}, speculation is predicted "
                   f"slower than no speculation at this operating point{unreachable}")
    if osl is not None and mal is not None:
        w = short_output_warning(osl, mal)
        if w:
            out.append(w)
    return tuple(out)


def short_output_warning(osl, mal, where: str = "") -> str | None:
    """The warning of an operating point with fewer than :data:`FEW_DECODE_STEPS` speculative steps
    per request, ``(OSL - 1) / MAL``, or None.

    The model counts ``max((OSL - 1) / MAL, 1)`` steps (:func:`specsim.engine.decode_steps`), not
    that a request's last step commits only the tokens it still needs (vLLM trims at
    ``max_tokens``): that step costs a whole ``T_step`` for as little as one token, so with few
    steps the ratio is overstated, by up to nearly one step per request.  With one decode token
    (OSL 2) the one step is exact and nothing is said.

    Parameters
    ----------
    osl : int or array_like
        Output tokens per request (one value, or the values of several points).
    mal : float or array_like
        Tokens committed per step at the same points.
    where : str
        What the points are, put in the message (e.g. a sweep's grid).

    Returns
    -------
    str or None
        One message naming the point with the fewest steps (and how many points are below
        :data:`FEW_DECODE_STEPS`); None when none is.
    """
    o, m = (np.ravel(x) for x in np.broadcast_arrays(np.asarray(osl, dtype=float), np.asarray(mal, dtype=float)))
    few = (o - 1 > 1) & (m > 1.0) & ((o - 1) / m < FEW_DECODE_STEPS)
    if not few.any():
        return None
    i = int(np.flatnonzero(few)[np.argmin(((o - 1) / m)[few])])
    return (f"short output{where}: OSL {int(o[i])} leaves {int(o[i]) - 1} decode tokens, {(o[i] - 1) / m[i]:.2f} "
            f"speculative steps at MAL {m[i]:.3f}" + (f" ({int(few.sum())} points below {FEW_DECODE_STEPS:g} steps; "
                                                     "the fewest shown)" if few.sum() > 1 else "")
            + ": the model counts at least one step per request but not that the last step commits only the "
            "tokens the request still needs (vLLM drops the accepted tokens beyond max_tokens), so at so few steps "
            "the ratio is overstated (by up to nearly one step per request)")


def latency_from_path(latency, tp):
    """``latency=`` given as a path (str or ``os.PathLike``): the measured table of the target it
    holds, read by :func:`specsim.latency.read_latency_table` at ``tp`` -- what the CLI's
    ``--latency-table`` does; any other value is returned as it is.

    Parameters
    ----------
    latency : object
        ``predict`` / ``sweep`` / ``recommend``'s ``latency=``.
    tp : int or sequence of int
        The TP degree(s) predicted at; a table is taken as measured at that one degree.

    Returns
    -------
    object
        A :class:`specsim.latency.MeasuredLatency` for a path, else ``latency`` unchanged.

    Raises
    ------
    SpecsimValueError
        ``latency``: the file is no readable CSV of a measured table; ``tp`` not one integer >= 1
        (a table is measured at one TP: give a ``MeasuredLatency`` object to use it otherwise).
    """
    if not isinstance(latency, (str, os.PathLike)):
        return latency
    if isinstance(tp, (list, tuple)):
        if len(tp) != 1:
            raise SpecsimValueError("latency", "a latency table read from a path is taken as measured at the tp "
                                    "given, so it needs ONE tp value: sweep one tp, or pass a table per tp "
                                    "(specsim.latency.read_latency_table(path, tp=...))", list(tp))
        tp = tp[0]
    return read_latency_table(latency, tp=int_field("tp", tp), field="latency")


def resolve_inputs(
    target,
    method: str | None = None,
    num_speculative_tokens: int | None = None,
    *,
    hardware="MI300X",
    precision: str | None = None,
    acceptance=None,
    draft=None,
    drafter=None,
    latency=None,
    speculative_config: str | Mapping | None = None,
    temperature: float | None = 0.0,
    temperature_assumption: str | None = None,
) -> Scenario:
    """Turn user-facing arguments (names, scalars, vLLM JSON) into model objects.

    Returns a :class:`specsim.engine.Scenario`; see :func:`predict` for the parameters and errors.
    """

    assumptions: list[str] = []
    draft_name = None
    cfg = None
    if temperature is not None and not temperature_ok(temperature):
        raise SpecsimValueError("temperature", TEMPERATURE_RULE, temperature)
    if speculative_config is not None:

        cfg = parse_speculative_config(speculative_config)
        if method is not None and method != cfg.method:
            raise SpecsimValueError("method", f"conflicts with speculative_config.method={cfg.method!r}", method)
        method = cfg.method
        if num_speculative_tokens is not None and num_speculative_tokens != cfg.num_speculative_tokens:
            raise SpecsimValueError(
                "num_speculative_tokens",
                f"conflicts with speculative_config.num_speculative_tokens={cfg.num_speculative_tokens}",
                num_speculative_tokens,
            )
        num_speculative_tokens = cfg.num_speculative_tokens
        draft_name = getattr(cfg, "model", None)
    if method is None and drafter is None:
        raise SpecsimValueError("method", "is required (a vLLM speculative method string) unless speculative_config is given")

    tgt = target if isinstance(target, ModelSpec) else _load_target(target)
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    if precision is None:  # the weight precision read from a config (a catalog model states its serving precision)
        notes = [a for a in getattr(tgt, "assumptions", ()) if a.startswith(WEIGHT_DTYPE_NOTES)]
        downcast = any(a.startswith(FLOAT32_DOWNCAST_NOTES) for a in notes)
        if downcast and "bf16" not in hw.peak_flops_per_s and getattr(tgt, "weight_dtype", None) == "bf16":
            # vLLM keeps float32 where the platform has no bf16 (a CPU without it): not a bf16 refusal
            precision = "fp32"
            notes = [a for a in notes if not a.startswith(FLOAT32_DOWNCAST_NOTES)] + [
                f"float32 checkpoint on {hw.name}, which has no bf16 peak: served and modelled in float32 (vLLM "
                "downcasts float32 to the platform's preferred dtype only where it has one, vllm/config/model.py "
                "_resolve_auto_dtype)"]
        assumptions += notes
    elif any(a.startswith("quantization_config") for a in getattr(tgt, "assumptions", ())):
        # a given precision replaces the config's quantization: say so (an fp8 checkpoint stays fp8 in vLLM)
        assumptions.append(f"precision={precision!r} given: it replaces the config's quantization_config ("
                           + "; ".join(a for a in tgt.assumptions if a.startswith("quantization_config"))
                           + "), which vLLM would serve as quantized")
    # precision None = the model's serving mix from specsim/data/models (e.g. int4 routed experts)
    assumptions += weight_only_notes(hw, tgt, precision)

    # draft_tensor_parallel_size (checked against the target tp in check_feasibility) sets the
    # draft's TP: draft passes and draft memory use it
    dtp = cfg.draft_tensor_parallel_size if cfg is not None and cfg.builds_draft_model else None
    if drafter is None and method == "draft_model" and draft is None and draft_name is None:
        # named as the caller typed it (draft= / --draft), not get_drafter's draft_model parameter,
        # whose name is also the method's and read as one
        raise SpecsimValueError("draft", "method 'draft_model' needs the draft checkpoint: pass draft= (a catalog "
                                "model name, a config.json path or a ModelSpec; CLI --draft), or give it as "
                                "the speculative config's model")
    if drafter is None:
        drafter = get_drafter(method, draft_model=draft if draft is not None else draft_name, target=tgt,
                              draft_config={"draft_tensor_parallel_size": dtp} if dtp is not None else None)
        _check_draft_matches_target(drafter, tgt, "speculative_config.model" if draft_name else "draft")
    elif dtp is not None and hasattr(drafter, "with_params"):
        drafter = drafter.with_params(draft_tp=dtp)
    method = getattr(drafter, "method", method)

    if latency is None:

        latency = default_latency(hw, tgt.name, is_moe=bool(getattr(tgt, "is_moe", False)))
    scope = getattr(latency, "scope", None)

    synthetic = cfg is not None and cfg.synthetic_acceptance_rates is not None
    if synthetic and acceptance is not None:
        raise SpecsimValueError("acceptance", "conflicts with speculative_config rejection_sample_method='synthetic': "
                                "vLLM's synthetic rejection sampler fixes the acceptance; give one of the two",
                                type(acceptance).__name__)
    if synthetic:
        # vLLM accepts position i with the configured unconditional rate whatever the draft proposes
        # (vllm/config/speculative.py _resolve_synthetic_acceptance_rates): cumulative rates
        acceptance = Acceptance.from_rates(list(cfg.synthetic_acceptance_rates), kind="cumulative",
                                           temperature=temperature, label="synthetic")  # any temperature
        assumptions.append("acceptance from speculative_config rejection_sample_method='synthetic': unconditional "
                           f"per-position rates {list(cfg.synthetic_acceptance_rates)} (vLLM forces them; the "
                           "drafter's cost is still paid)")
    if acceptance is None:
        raise SpecsimValueError("acceptance", "is required: an Acceptance, a constant rate in [0, 1], or measured counts")
    if not isinstance(acceptance, Acceptance):
        if isinstance(acceptance, (int, float, np.floating)) and not isinstance(acceptance, bool):
            acceptance = constant_acceptance(acceptance, temperature=None)  # records its assumption
        elif isinstance(getattr(acceptance, "acceptance", None), Acceptance):
            acceptance = acceptance.acceptance  # a published AcceptanceProfile (specsim.published): its profile
        else:
            try:
                acceptance = Acceptance.from_rates(acceptance, kind="cumulative")
            except SpecsimValueError as e:  # named as the caller named it, not as from_rates' parameter
                raise SpecsimValueError("acceptance", f"must be an Acceptance, a constant rate in [0, 1] or a "
                                        f"sequence of per-position cumulative rates: {e.rule}",
                                        e.value if isinstance(e.value, (list, tuple, str)) else
                                        type(acceptance).__name__) from None
    # sampling temperature: a profile measured at one temperature is not valid at another
    prof_t = getattr(acceptance, "temperature", None)
    if temperature is not None and prof_t is not None and not np.isclose(prof_t, temperature):
        if not temperature_assumption:
            raise SpecsimValueError(
                "temperature",
                f"the acceptance profile was measured at temperature {prof_t}; predicting at another "
                "temperature needs a profile measured there or an explicit temperature_assumption (CLI: --temperature-assumption TEXT)",
                temperature,
            )
        assumptions.append(f"temperature {temperature} (profile measured at {prof_t}): {temperature_assumption}")
    elif temperature is not None and prof_t is None:
        assumptions.append(f"acceptance profile has no recorded temperature; assumed valid at temperature {temperature}")
    assumptions.extend(getattr(acceptance, "assumptions", ()))
    assumptions.extend(getattr(drafter, "assumptions", ()) or ())  # e.g. a draft derived from the target
    if scope:
        assumptions.append(scope)
    if cfg is not None:
        assumptions.extend(unmodelled_config_fields(cfg))
    if num_speculative_tokens is not None:
        num_speculative_tokens = int_field("num_speculative_tokens", num_speculative_tokens)
    return Scenario(
        target=tgt,
        drafter=drafter,
        latency=latency,
        acceptance=acceptance,
        hardware_name=hw.name,
        precision=precision,
        method=method,
        num_speculative_tokens=num_speculative_tokens,
        assumptions=tuple(dict.fromkeys(assumptions)),
        temperature=temperature,
        speculative_config=cfg,
    )


# --------------------------------------------------------------------------------------------
# measured baseline (anchoring) and where each term comes from

#: relative tolerance (at least one token) within which a measured baseline's mean ISL / OSL must
#: match the ISL / OSL predicted at
BASELINE_LENGTH_TOLERANCE = 0.02

_BASELINE_METRICS = ("tpot_s", "output_tok_per_s")


@dataclass(frozen=True)
class MeasuredBaseline:
    """A measured NON-speculative baseline of the user's deployment, to anchor the target's step time.

    Parameters
    ----------
    tpot_s : float, optional
        Mean time per output token of one stream, seconds (``vllm bench serve``'s ``mean_tpot_ms``
        / 1000: ``(e2e latency - TTFT) / (output tokens - 1)`` per request, averaged).
    output_tok_per_s : float, optional
        Aggregate output tokens/s of all streams (``vllm bench serve``'s ``output_throughput``).
    concurrency : int, optional
        Concurrent requests of the measurement (``max_concurrency``); None = the concurrency
        predicted at.
    isl, osl : int, optional
        Mean input / output tokens per request of the measurement; None = the ISL / OSL predicted at.
    metric : {"tpot_s", "output_tok_per_s"}, optional
        Which measurement to anchor on when both are given (default ``output_tok_per_s``, the
        quantity the throughput ratio is made of).
    source : str
        Where the numbers come from (shown in the prediction).
    failed_requests, completed_requests : int, optional
        Requests of the run that failed / completed (``vllm bench serve``'s ``failed``,
        ``completed``); a run with failures is warned about: its throughput is not that of a
        healthy deployment.

    Raises
    ------
    SpecsimValueError
        Neither measurement given, a non-finite or non-positive value, an unknown ``metric`` or
        one that names a measurement not given.
    """

    tpot_s: float | None = None
    output_tok_per_s: float | None = None
    concurrency: int | None = None
    isl: int | None = None
    osl: int | None = None
    metric: str | None = None
    source: str = "argument"
    failed_requests: int | None = None
    completed_requests: int | None = None

    def __post_init__(self):
        for name in _BASELINE_METRICS:
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float, np.floating))
                                  or not math.isfinite(v) or v <= 0):
                raise SpecsimValueError(f"baseline.{name}", "must be a finite number > 0", v)
        if self.tpot_s is None and self.output_tok_per_s is None:
            raise SpecsimValueError("baseline", "needs a measurement: tpot_s (seconds) or output_tok_per_s", None,
                                    list(_BASELINE_METRICS))
        for name in ("concurrency", "isl", "osl"):
            if getattr(self, name) is not None:
                int_field(f"baseline.{name}", getattr(self, name))
        if self.metric is not None:
            if self.metric not in _BASELINE_METRICS:
                raise SpecsimValueError("baseline.metric", "unknown measurement", self.metric, list(_BASELINE_METRICS))
            if getattr(self, self.metric) is None:
                raise SpecsimValueError("baseline.metric", f"names {self.metric}, which was not given", self.metric)

    @property
    def anchor_metric(self) -> tuple[str, float]:
        """``(metric, value)`` anchored on: ``metric`` if set, else output tok/s when given, else TPOT."""
        m = self.metric or ("output_tok_per_s" if self.output_tok_per_s is not None else "tpot_s")
        return m, float(getattr(self, m))

    @classmethod
    def from_bench(cls, path, *, index: int | None = None, metric: str | None = None,
                   field_prefix: str = "baseline") -> MeasuredBaseline:
        """Read a ``vllm bench serve --save-result`` JSON of the NON-speculative baseline.

        Uses :func:`specsim.vllm.bench.read_bench_result`.  Fields read (``vllm/benchmarks/serve.py``
        0.32.0, ``result_json``): ``output_throughput`` (tok/s), ``mean_tpot_ms``,
        ``max_concurrency`` (the ``--max-concurrency`` of the run), ``request_rate`` (must be
        ``"inf"``: a closed loop at ``max_concurrency``), ``completed``, ``total_input_tokens`` and
        ``total_output_tokens`` (mean ISL / OSL = total / completed, rounded to whole tokens).

        Parameters
        ----------
        path : path-like
        index : int, optional
            Which result of an ``--append-result`` file.
        metric : {"tpot_s", "output_tok_per_s"}, optional
            Anchor on TPOT or on output tok/s (default output tok/s).
        field_prefix : str
            Prefix of the field names in errors (the CLI passes ``--baseline-from``).

        Raises
        ------
        SpecsimValueError
            The run had speculative decoding (``spec_decode_*`` counters present: not a baseline),
            no fixed concurrency (``max_concurrency`` null or a finite ``request_rate``), no completed
            request, a mean output length below 2 tokens (no decode step), or lacks the measurement
            anchored on.
        DataError
            Not a ``vllm bench serve`` result (as the reader).
        """
        from specsim.vllm.bench import read_bench_result

        p = os.fspath(path)
        res = read_bench_result(p, index=index)
        raw = res.raw
        if res.spec is not None:
            raise SpecsimValueError(
                f"{field_prefix}.spec_decode_num_drafts",
                f"{res.source} records speculative-decoding counters ({res.spec.num_drafts} drafts): it is a run "
                "WITH speculative decoding, not the baseline; give the result of the same server and benchmark "
                "without --speculative-config", p)
        mc = raw.get("max_concurrency")
        if mc is None:
            raise SpecsimValueError(
                f"{field_prefix}.max_concurrency", f"is null in {res.source}: the run had no fixed concurrency; "
                "rerun vllm bench serve with --max-concurrency C (or give the measurement and its concurrency "
                "directly)", p)
        conc = int_field(f"{field_prefix}.max_concurrency", mc)
        rate = raw.get("request_rate", "inf")
        if not (rate == "inf" or (isinstance(rate, (int, float)) and math.isinf(rate))):
            raise SpecsimValueError(
                f"{field_prefix}.request_rate", f"is {rate!r} in {res.source}: a rate-limited run does not keep "
                f"{conc} requests in flight, so its throughput is the offered rate, not the deployment's; rerun "
                "with --request-rate inf --max-concurrency C", p, ["inf"])
        done = raw.get("completed")
        if not isinstance(done, (int, float)) or isinstance(done, bool) or done <= 0:
            raise SpecsimValueError(f"{field_prefix}.completed", f"no completed request in {res.source}", done)

        def mean_len(key):
            v = raw.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
                return None
            return max(1, int(round(v / done)))

        tpot = raw.get("mean_tpot_ms")
        tok = raw.get("output_throughput")
        tpot_s = float(tpot) / 1e3 if isinstance(tpot, (int, float)) and not isinstance(tpot, bool) and tpot > 0 else None
        tok_s = float(tok) if isinstance(tok, (int, float)) and not isinstance(tok, bool) and tok > 0 else None
        want = metric or ("output_tok_per_s" if tok_s is not None else "tpot_s")
        if want not in _BASELINE_METRICS:
            raise SpecsimValueError(f"{field_prefix} metric", "unknown measurement", want, list(_BASELINE_METRICS))
        if (tok_s if want == "output_tok_per_s" else tpot_s) is None:
            key = "output_throughput" if want == "output_tok_per_s" else "mean_tpot_ms"
            raise SpecsimValueError(f"{field_prefix}.{key}", f"missing or not a positive number in {res.source}",
                                    raw.get(key))
        osl = mean_len("total_output_tokens")
        if osl is not None and osl < OSL_MIN:
            raise SpecsimValueError(f"{field_prefix}.total_output_tokens", f"gives {raw.get('total_output_tokens')} "
                                    f"output tokens over {done} requests in {res.source}, a mean OSL of {osl}: "
                                    "its requests have no decode step (the prefill samples the first token), so it "
                                    "cannot anchor a decode model; use a run with at least 2 output tokens per "
                                    "request", osl)
        failed = raw.get("failed")
        failed = int(failed) if isinstance(failed, (int, float)) and not isinstance(failed, bool) and failed > 0 \
            else None
        return cls(tpot_s=tpot_s, output_tok_per_s=tok_s, concurrency=conc, isl=mean_len("total_input_tokens"),
                   osl=osl, metric=want, source=f"vllm bench serve result {res.source}", failed_requests=failed,
                   completed_requests=int(done))


def as_baseline(baseline) -> MeasuredBaseline | None:
    """``baseline=`` as given (a :class:`MeasuredBaseline`, a mapping of its fields, or a path to a
    ``vllm bench serve`` result of the baseline) into a :class:`MeasuredBaseline`."""
    if baseline is None or isinstance(baseline, MeasuredBaseline):
        return baseline
    if isinstance(baseline, Mapping):
        unknown = sorted(set(baseline) - {f for f in MeasuredBaseline.__dataclass_fields__})
        if unknown:
            raise SpecsimValueError("baseline", f"unknown keys {unknown}", unknown,
                                    list(MeasuredBaseline.__dataclass_fields__))
        return MeasuredBaseline(**baseline)
    if isinstance(baseline, (str, os.PathLike)):
        if not os.path.isfile(os.fspath(baseline)):
            raise SpecsimValueError("baseline", "is not an existing file (a path to a vllm bench serve result of the "
                                    "non-speculative baseline); a measured number goes in a dict: "
                                    "{'tpot_s': seconds} or {'output_tok_per_s': total tok/s}", os.fspath(baseline))
        return MeasuredBaseline.from_bench(baseline)
    raise SpecsimValueError("baseline", "must be a MeasuredBaseline, a dict of its fields (tpot_s= seconds or "
                            "output_tok_per_s=, concurrency=, isl=, osl=) or a path to a vllm bench serve result "
                            "of the non-speculative baseline (a bare number is ambiguous: TPOT or tok/s?)",
                            type(baseline).__name__)


def _length_matches(measured: int, asked) -> bool:
    asked = np.asarray(asked, dtype=float)
    return bool(np.all(np.abs(asked - measured) <= np.maximum(1.0, BASELINE_LENGTH_TOLERANCE * asked)))


def anchor_point(b: MeasuredBaseline, baseline_concurrency, concurrency, isl, osl) -> tuple[int, int, int]:
    """The measured point ``(C, ISL, OSL)`` at which the anchor is solved, checked against the
    point(s) predicted at (scalars or arrays).

    The concurrency may differ from the one predicted at only when ``baseline_concurrency`` says so
    explicitly; ISL and OSL must match (within :data:`BASELINE_LENGTH_TOLERANCE`, at least one
    token) wherever the measurement records them.

    Raises
    ------
    SpecsimValueError
        ``baseline.concurrency`` differs from the concurrency predicted at without an explicit
        ``baseline_concurrency``, or from ``baseline_concurrency``; a measured ISL / OSL that differs
        from the one predicted at; several concurrencies / ISLs / OSLs predicted with no measured
        value to anchor at.
    """
    cs = np.unique(np.asarray(concurrency)).tolist()
    if baseline_concurrency is not None:
        c_b = int_field("baseline_concurrency", baseline_concurrency)
        if b.concurrency is not None and b.concurrency != c_b:
            raise SpecsimValueError("baseline_concurrency", f"conflicts with the concurrency {b.concurrency} the "
                                    f"baseline was measured at ({b.source})", c_b, [b.concurrency])
    elif b.concurrency is not None:
        if cs != [b.concurrency]:
            raise SpecsimValueError(
                "baseline.concurrency", f"the baseline ({b.source}) was measured at concurrency {b.concurrency}, "
                f"the prediction asks {cs if len(cs) > 1 else cs[0]}: predict at {b.concurrency}, or pass "
                f"baseline_concurrency={b.concurrency} to solve the anchor there and apply it at the asked "
                "concurrency (an extrapolation by the model's concurrency dependence)", b.concurrency, cs)
        c_b = b.concurrency
    elif len(cs) == 1:
        c_b = int(cs[0])
    else:
        raise SpecsimValueError("baseline_concurrency", f"is required with several concurrencies {cs}: the "
                                "concurrency the baseline was measured at", None)
    out = [c_b]
    for name, measured, asked in (("isl", b.isl, isl), ("osl", b.osl, osl)):
        vals = np.unique(np.asarray(asked)).tolist()
        if measured is None:
            if len(vals) != 1:
                raise SpecsimValueError(f"baseline.{name}", f"is required with several values {vals}: the {name.upper()} "
                                        "the baseline was measured at", None)
            out.append(int(vals[0]))
        else:
            if not _length_matches(measured, vals):
                raise SpecsimValueError(
                    f"baseline.{name}", f"the baseline ({b.source}) was measured at a mean {name.upper()} of "
                    f"{measured} tokens, the prediction asks {vals if len(vals) > 1 else vals[0]}: predict at the "
                    f"measured {name.upper()} (within {BASELINE_LENGTH_TOLERANCE:.0%})", measured, vals)
            out.append(int(measured))
    return tuple(out)


def _solve_log_scale(g, guess: float) -> float | None:
    """Root of ``g`` (monotone in ``log k``) within ``|log k| <= log 1e6`` by bracketing outward
    from ``guess`` and :func:`scipy.optimize.brentq`; None when no root is there."""
    from scipy.optimize import brentq

    lim = math.log(1e6)
    guess = min(max(guess, -lim + 0.5), lim - 0.5)
    if g(guess) == 0.0:  # e.g. the measurement IS the unanchored prediction: k = 1 exactly
        return guess
    lo, hi = guess - 0.5, guess + 0.5
    g_lo, g_hi = g(lo), g(hi)
    while g_lo * g_hi > 0 and (lo > -lim or hi < lim):
        lo, hi = max(-lim, lo - 2.0), min(lim, hi + 2.0)
        g_lo, g_hi = g(lo), g(hi)
    if g_lo * g_hi > 0:
        return None
    if g_lo == 0.0:
        return lo
    if g_hi == 0.0:
        return hi
    return brentq(g, lo, hi, xtol=1e-14, rtol=1e-14, maxiter=200)


def scaled_host_overhead(overhead: SpecOverhead, scale: float) -> SpecOverhead:
    """``overhead`` with its host-side seconds (``host_step_s``, ``host_per_seq_s``: paid by both
    arms) multiplied by ``scale``; the speculative terms unchanged.  ``scale`` is a baseline
    anchor's ``host_time_scale`` (:func:`anchor_target_time`)."""
    if scale == 1.0:
        return overhead
    return replace(overhead, host_step_s=overhead.host_step_s * scale, host_per_seq_s=overhead.host_per_seq_s * scale)


#: how far a baseline anchor went (``baseline_anchor["scaled"]``), in the order tried
ANCHOR_SCOPES = ("target forwards", "host terms", "target forwards, host terms dropped")


def anchor_target_time(r: Scenario, b: MeasuredBaseline, *, tp: int, point: tuple[int, int, int],
                       overhead: SpecOverhead) -> tuple[float, dict[str, Any]]:
    """Solve the anchor that makes the predicted baseline at the measured point equal the measurement.

    A measured baseline anchors the absolute step time (DESIGN §10).  One measurement fixes one
    factor, so the factors are tried in this order:

    1. ``"target forwards"``: k > 0 on every target forward (``Scenario.target_time_scale``:
       baseline step, verification, target prefill), host and speculative terms as given;
    2. ``"host terms"``: the target forwards kept as calibrated (k = 1) and the host-side seconds of
       both arms (``host_step_s``, ``host_per_seq_s``; :func:`scaled_host_overhead`) scaled by
       ``host_time_scale`` in [1e-6, 1).  Tried only when the measurement is FASTER than the
       unanchored prediction and (1) has no solution (the host seconds alone exceed the
       measurement, e.g. a host term fitted at one concurrency only) or needs an implausible
       k < ``ANCHOR_PLAUSIBLE[0]`` or one below the datasheet floor (see 3); used when it has a
       solution;
    3. ``"target forwards, host terms dropped"``: faster than the calibrated target forwards
       alone, or (1) would make the target's decode forward faster than the datasheet allows
       (below :data:`TABLE_FLOOR_FRACTION` of :func:`datasheet_floor`) while (2) has no solution:
       host-side seconds x 1e-9 and k solved as in (1).

    Each solve evaluates :func:`specsim.engine.evaluate` and finds the root of
    ``log(predicted / measured)`` in the log of the factor with :func:`scipy.optimize.brentq`
    (TPOT rises and tok/s falls monotonically with either factor), bracketing outward from a start:
    for k the factor that is exact when every baseline term scales (a start that already matches
    is returned as is, so a measurement equal to the unanchored prediction gives k = 1 exactly),
    for the host scale log s = -1.  Draft passes and the speculative terms (``fixed_s``,
    ``per_token_s``, ``per_seq_layer_s``: a baseline does not run them) are never scaled.

    Returns
    -------
    k : float
        The factor on the target's forwards (1 in case 2).
    record : dict
        ``Prediction.baseline_anchor``: metric, measured, predicted_unanchored, predicted_anchored,
        concurrency, isl, osl, target_time_scale, ``host_time_scale`` (1 in case 1; apply it with
        :func:`scaled_host_overhead`), ``scaled`` (one of :data:`ANCHOR_SCOPES`) and source.

    Raises
    ------
    SpecsimValueError
        ``baseline.<metric>``: no factor in [1e-6, 1e6] matches -- the measurement is faster than
        the target's forwards at k = 1e-6 without host time, or slower than k = 1e6 allows; or
        the factor found is beyond :data:`ANCHOR_REFUSED` (a TPOT in milliseconds reads ~1000x), or
        makes the target's decode forward at the baseline point faster than
        :data:`TABLE_FLOOR_FRACTION` of the datasheet floor (:func:`datasheet_floor`: HBM bandwidth
        and peak FLOP/s at 100 %) -- a baseline of another target, TP, precision or hardware.
    """
    k_min = _physical_k_min(r, point, tp=tp)
    k, rec = _solve_anchor(r, b, tp=tp, point=point, overhead=overhead, k_min=k_min)
    _check_anchor_physical(r, b, k, rec, tp=tp, k_min=k_min)
    return k, rec


def _physical_k_min(r: Scenario, point: tuple[int, int, int], *, tp: int) -> tuple[float, float, float]:
    """The smallest factor on the target's forwards a run can have at the baseline ``point``
    (:data:`TABLE_FLOOR_FRACTION` of the datasheet floor over the calibrated decode forward), with
    that forward and the floor (seconds); ``(0, nan, nan)`` where the stack cannot time the point."""
    c_b, i_b, o_b = point
    kw = dict(tp=tp, precision=r.precision, batch=c_b, q=1, context=i_b + o_b / 2.0)
    try:
        t = float(np.asarray(r.latency.forward_time(r.target, **kw)).reshape(-1)[0])
        fl = float(np.asarray(datasheet_floor(load_hardware(r.hardware_name)).forward_time(r.target, **kw))
                   .reshape(-1)[0])
    except SpecsimValueError:  # e.g. a precision without a datasheet peak
        return 0.0, math.nan, math.nan
    return (TABLE_FLOOR_FRACTION * fl / t if t > 0 else 0.0), t, fl


def _solve_anchor(r: Scenario, b: MeasuredBaseline, *, tp: int, point: tuple[int, int, int],
                  overhead: SpecOverhead, k_min: tuple[float, float, float] = (0.0, math.nan, math.nan)
                  ) -> tuple[float, dict[str, Any]]:
    """:func:`anchor_target_time`'s solve, before its checks."""
    metric, measured = b.anchor_metric
    key = "baseline_tpot_s" if metric == "tpot_s" else "baseline_output_tok_per_s"
    c_b, i_b, o_b = point

    def predicted(k: float, host: float = 1.0) -> float:
        out = evaluate(replace(r, target_time_scale=float(k)), 1, c_b, i_b, o_b, tp, scaled_host_overhead(overhead, host))
        return float(np.asarray(out[key]).reshape(-1)[0])

    def start(p: float) -> float:  # exact if every term scales
        return math.log(measured / p) if metric == "tpot_s" else math.log(p / measured)

    other = next((m for m in _BASELINE_METRICS if m != metric and getattr(b, m) is not None), None)

    def record(k: float, host: float, scaled: str) -> dict[str, Any]:
        return {"metric": metric, "measured": measured, "predicted_unanchored": p1,
                "predicted_anchored": predicted(k, host), "concurrency": c_b, "isl": i_b, "osl": o_b,
                "target_time_scale": k, "host_time_scale": host, "scaled": scaled, "source": b.source,
                "also_measured": {other: float(getattr(b, other))} if other else None,
                "failed_requests": b.failed_requests, "completed_requests": b.completed_requests}

    p1 = predicted(1.0)
    log_k = _solve_log_scale(lambda lk: math.log(predicted(math.exp(lk)) / measured), start(p1))
    host_s = float(np.asarray(overhead.host_seconds(c_b)).reshape(-1)[0])
    faster = (measured < p1) if metric == "tpot_s" else (measured > p1)
    if log_k is not None and not (faster and host_s > 0 and math.exp(log_k) < max(ANCHOR_PLAUSIBLE[0], k_min[0])):
        return math.exp(log_k), record(math.exp(log_k), 1.0, ANCHOR_SCOPES[0])
    if faster and host_s > 0:
        def g_host(ls: float) -> float:  # flat above s = 1: the host terms are only ever scaled down
            return math.log(predicted(1.0, math.exp(min(ls, 0.0))) / measured)
        log_s = _solve_log_scale(g_host, -1.0)
        if log_s is not None and log_s < 0.0:
            return 1.0, record(1.0, math.exp(log_s), ANCHOR_SCOPES[1])
        if log_k is not None and math.exp(log_k) >= k_min[0]:
            # the host terms cannot explain it: k on the forwards (warned as implausible)
            return math.exp(log_k), record(math.exp(log_k), 1.0, ANCHOR_SCOPES[0])
        no_host = 1e-9
        log_k3 = _solve_log_scale(lambda lk: math.log(predicted(math.exp(lk), no_host) / measured),
                                  start(predicted(1.0, no_host)))
        if log_k3 is not None:
            return math.exp(log_k3), record(math.exp(log_k3), no_host, ANCHOR_SCOPES[2])
        if log_k is not None:  # below the datasheet floor either way: refused by the caller's check
            return math.exp(log_k), record(math.exp(log_k), 1.0, ANCHOR_SCOPES[0])
    how = ("is faster than the target's forwards allow even at x 1e-6 and without host time" if faster else
           "is slower than the target's forwards allow even at x 1e6")
    field_, value_ = _baseline_field(b, metric, measured)
    raise SpecsimValueError(field_, f"the measured {_fmt_metric(metric, measured)} at concurrency {c_b}, "
                            f"ISL/OSL {i_b}/{o_b} {how} (predicted baseline {_fmt_metric(metric, p1)} unanchored): "
                            "check that it is a baseline of this target, TP, precision and hardware", value_)


def _baseline_field(b: MeasuredBaseline, metric: str, value: float) -> tuple[str, float]:
    """The field (and value, in its units) an anchor refusal names: the command-line flag a baseline
    came from (``--baseline-tpot-ms``: milliseconds), else ``baseline.<metric>``."""
    if b.source == "--baseline-tpot-ms":
        return b.source, value * 1e3
    if b.source == "--baseline-tok-per-s":
        return b.source, value
    return f"baseline.{metric}", value


#: an anchor factor beyond this on the target's forwards is refused: a TPOT given in milliseconds
#: reads ~1000x; the warned range is :data:`ANCHOR_PLAUSIBLE`
ANCHOR_REFUSED = 300.0


def _check_anchor_physical(r: Scenario, b: MeasuredBaseline, k: float, rec: Mapping[str, Any], *, tp: int,
                           k_min: tuple[float, float, float]) -> None:
    """Refuse an anchor factor no run of this target on this hardware can have (see
    :func:`anchor_target_time`, Raises)."""
    metric, measured = b.anchor_metric
    c_b, i_b, o_b = rec["concurrency"], rec["isl"], rec["osl"]
    at = f"{_fmt_metric(metric, measured)} at concurrency {c_b}, ISL/OSL {i_b}/{o_b}"
    field_, value_ = _baseline_field(b, metric, measured)
    if k > ANCHOR_REFUSED:
        raise SpecsimValueError(
            field_, f"the measured {at} makes the target's forwards {k:.3g}x the calibrated ones "
            f"(refused beyond {ANCHOR_REFUSED:g}x): tpot_s is seconds per output token (milliseconds read ~1000x) "
            "and output_tok_per_s the total over all requests", value_)
    if rec["scaled"] == ANCHOR_SCOPES[1]:  # the forwards kept as calibrated
        return
    t, fl = k * k_min[1], k_min[2]
    if k < k_min[0]:
        raise SpecsimValueError(
            field_, f"the measured {at} makes the target's decode forward {t * 1e3:.3g} ms, "
            f"{t / fl:.2g}x the datasheet floor {fl * 1e3:.3g} ms for {getattr(r.target, 'name', 'the target')} at "
            f"TP {tp} on {r.hardware_name} (HBM bandwidth and peak FLOP/s at 100 %): faster than the hardware allows "
            "-- check that it is a baseline of this target, TP, precision and hardware, at this concurrency", value_)


def _describe_overhead(ov: SpecOverhead) -> str:
    terms = [f"{k} {microseconds_text(v, 4)}" for k, v in asdict(ov).items() if v]
    return ", ".join(terms) if terms else "zero"


def resolve_overhead(r: Scenario, overhead: SpecOverhead | None, *, latency_given: bool
                     ) -> tuple[SpecOverhead, str, tuple[str, ...]]:
    """The per-step speculative overhead used, where it comes from, and a warning when it is zero
    because nothing supplies one.

    - ``overhead=`` given: used as given;
    - the latency model carries a shipped calibration (``latency.calibration``): its overhead
      (:func:`specsim.engine.default_overhead`);
    - a caller's ``latency=`` without one (e.g. a measured ``MeasuredLatency`` table of target
      forwards, which holds no rejection sampler / proposer bookkeeping): the overhead of the
      shipped stack calibration of the hardware (never silently zero); where none ships, zero and a
      warning;
    - datasheet priors (no calibration shipped): zero, as the latency scope already states.

    Returns
    -------
    overhead : SpecOverhead
    source : str
        ``Prediction.term_sources["speculative_overhead"]``.
    warnings : tuple of str
    """
    if overhead is not None:
        return overhead, f"overhead= given by the caller: {_describe_overhead(overhead)}", ()
    rec = getattr(r.latency, "calibration", None)
    if rec is not None:
        ov = default_overhead(r.latency)
        return (ov, f"stack calibration {os.path.basename(str(getattr(rec, 'file', '')))}: {_describe_overhead(ov)}",
                _host_on_measured_times(r, ov))
    if not latency_given:
        return SpecOverhead(), f"none: datasheet priors, no calibration shipped for {r.hardware_name} (zero)", (
            f"no stack calibration ships for {r.hardware_name}: datasheet priors, with host time and speculative "
            "overhead taken as ZERO, so the ratio is an upper-end estimate; anchor on a measured baseline and "
            "pass overhead=SpecOverhead(...) measured on your stack",)
    try:
        hw = load_hardware(r.hardware_name)
        stack = default_latency(hw, getattr(r.target, "name", None), is_moe=bool(getattr(r.target, "is_moe", False)))
    except SpecsimValueError:  # a custom hardware name
        stack = None
    srec = getattr(stack, "calibration", None)
    if srec is not None:
        ov = default_overhead(stack)
        return ov, (f"stack calibration {os.path.basename(str(getattr(srec, 'file', '')))} of {r.hardware_name} "
                    f"(the latency= model carries no speculative overhead): {_describe_overhead(ov)}; pass overhead= "
                    "to use your own"), _host_on_measured_times(r, ov)
    return SpecOverhead(), f"none: the latency= model carries none and no calibration ships for {r.hardware_name} " \
        "(zero)", (f"speculative overhead taken as ZERO: the latency= model carries none and no calibration ships for "
                   f"{r.hardware_name}, so the ratio is an upper-end estimate; pass overhead=SpecOverhead(...) "
                   "measured on your stack",)


def _host_on_measured_times(r: Scenario, ov: SpecOverhead) -> tuple[str, ...]:
    """The warning that a stack calibration's host seconds are added to MEASURED target times (a
    ``MeasuredLatency`` table): right for a table of forwards (a verification-cost probe), counted
    twice for a table of whole engine steps (ITL / TPOT)."""
    if not isinstance(r.latency, MeasuredTargetLatency):  # with_measured_table wraps every measured table
        return ()
    host = float(getattr(ov, "host_step_s", 0.0) or 0.0), float(getattr(ov, "host_per_seq_s", 0.0) or 0.0)
    if not any(host):
        return ()
    return (f"the {r.hardware_name} stack calibration's host seconds ({host[0] * 1e3:.3g} ms per step + "
            f"{host[1] * 1e3:.3g} ms per sequence per step, both arms) are added to the measured latency table's "
            "times: right for a table of forwards (e.g. a verify_cost.csv probe); if it timed whole engine steps "
            "(ITL / TPOT), the host time is counted twice -- pass overhead=SpecOverhead(...) without host terms",)


def _latency_source(lat, latency_given: bool, hardware_name: str) -> str:
    if latency_given:
        return f"latency= given by the caller ({_describe(lat)})"
    rec = getattr(lat, "calibration", None)
    if rec is not None:
        srcs = dict(getattr(rec, "term_sources", {}) or {})
        transferred = sorted(k for k, v in srcs.items() if str(v).startswith("transferred"))
        if not getattr(lat, "calibrated", False):
            kind = f"transferred from {getattr(rec, 'transferred_from', None) or 'other hardware'}"
        elif transferred:
            kind = (f"fitted on this hardware in part; transferred: {', '.join(transferred)} -- see the file's "
                    "term_sources")
        else:
            kind = "fitted on this hardware"
        return f"stack calibration {os.path.basename(str(getattr(rec, 'file', '')))} ({kind})"
    return f"datasheet priors (no calibration shipped for {hardware_name})"


def term_sources(r: Scenario, *, latency_given: bool, overhead_source: str, anchor: dict | None) -> dict[str, str]:
    """``Prediction.term_sources``: which terms came from measurement, which from the stack
    calibration, which from datasheet priors."""
    lat = _latency_source(r.latency, latency_given, r.hardware_name)
    if anchor is not None:
        k = anchor["target_time_scale"]
        meas = (f"anchored on the measured baseline ({_fmt_metric(anchor['metric'], anchor['measured'])} at "
                f"concurrency {anchor['concurrency']}, ISL/OSL {anchor['isl']}/{anchor['osl']}; {anchor['source']})")
        target = f"{meas}: {lat} x {k:.4g}"
        if float(anchor.get("host_time_scale", 1.0)) != 1.0:
            target += f"; host-side seconds x {float(anchor['host_time_scale']):.4g} ({anchor['scaled']})"
        verify = f"{lat} at q = N + 1, x {k:.4g} (anchored on the measured baseline)"
        prefill = f"{lat}, x {k:.4g} (anchored on the measured baseline)"
    else:
        target, verify, prefill = lat, f"{lat} at q = N + 1", lat
    acc = r.acceptance
    if int(getattr(acc, "n_measured", 0) or 0) > 0 and getattr(acc, "has_counts", False):
        acc_src = f"measured ({getattr(acc, 'label', None) or 'counts'}, {acc.n_measured} positions)"
    elif int(getattr(acc, "n_measured", 0) or 0) > 0:  # rates typed in or read from a table: no counts behind them
        acc_src = (f"given per-position rates ({getattr(acc, 'label', None) or 'no source named'}, "
                   f"{acc.n_measured} positions; not counts)")
    else:
        notes = tuple(getattr(acc, "assumptions", ()) or ())
        acc_src = "assumed" + (f": {notes[0]}" if notes else " (parametric)")
    kind = getattr(r.drafter, "kind", "")
    draft_lat = lat
    if isinstance(r.latency, MeasuredTargetLatency):  # a measured target table: prefills from the stack
        stack = _latency_source(r.latency.fallback, False, r.hardware_name)
        prefill = f"{stack} (the measured table does not cover prompt prefills)"
    if r.draft_latency is not None:
        draft_lat = _latency_source(r.draft_latency, r.draft_latency is not getattr(r.latency, "fallback", None),
                                    r.hardware_name)
    return {
        "target_step": target,
        "verification": verify,
        "target_prefill": prefill,
        "draft": f"{draft_lat} (method {r.method}{', ' + kind if kind else ''}; not scaled by a baseline anchor)",
        "speculative_overhead": overhead_source,
        "acceptance": acc_src,
    }


# --------------------------------------------------------------------------------------------
# predict, sweep, best_n


def predict(
    target,
    method: str | None = None,
    num_speculative_tokens: int | None = None,
    *,
    hardware="MI300X",
    tp: int = 1,
    precision: str | None = None,
    concurrency: int = 1,
    isl: int = 1024,
    osl: int = 1024,
    acceptance=None,
    draft=None,
    drafter=None,
    latency=None,
    overhead: SpecOverhead | None = None,
    speculative_config: str | Mapping | None = None,
    temperature: float | None = 0.0,
    temperature_assumption: str | None = None,
    drafted_fraction: float = 1.0,
    mean_proposal_tokens: float | None = None,
    baseline=None,
    baseline_concurrency: int | None = None,
    vllm_version: str | None = None,
    platform: str | None = None,
    draft_latency=None,
    expert_parallel: bool = False,
) -> Prediction:
    """Predict one speculative-decoding operating point.

    Parameters
    ----------
    target : str, path or ModelSpec
        Target model: a name in ``specsim/data/models`` (``"Qwen3-8B"``, ``"Qwen/Qwen3-8B"``), an
        existing path to a Hugging Face ``config.json`` or a model directory holding one
        (``ModelSpec.from_hf_config``), or a :class:`~specsim.architecture.ModelSpec`.
    method : str, optional
        vLLM speculative ``method`` string (``"eagle3"``, ``"dflash"``, ``"mtp"``, ...).  Optional
        when ``speculative_config`` gives it.
    num_speculative_tokens : int
        Proposal length N (>= 1).  Optional when ``speculative_config`` gives it.
    hardware : str, path or Hardware
        Accelerator name from ``specsim/data/hardware.csv`` (``"MI300X"``, ``"MI355X"``, ``"H100"``, ...;
        any case), or a hardware spec JSON file for a part the catalog does not ship
        (:func:`specsim.hardware.hardware_from_file`), or a :class:`~specsim.hardware.Hardware`.
    tp : int
        Tensor-parallel degree of the target.
    precision : str, optional
        Target weight precision (``"bf16"``, ``"fp8"``, ``"mxfp4"``, ``"int4"``); default: the
        model's serving precision in ``specsim/data/models``, else bf16.
    concurrency : int
        Number of concurrent requests (decode batch size B).
    isl, osl : int
        Input / output sequence length in tokens.
    acceptance : Acceptance or float or sequence of float
        Measured acceptance (:class:`~specsim.acceptance.Acceptance`), a constant conditional
        rate (flagged as an assumption), or per-position CUMULATIVE rates.
    draft : str or ModelSpec, optional
        Draft checkpoint (name) or architecture; default: the seed drafter for this target/method.
    drafter : object, optional
        A ready draft-cost strategy with ``draft_time(latency, target, *, n, batch, context, tp,
        precision)`` (overrides ``method``/``draft``).
    latency : LatencyModel, str or os.PathLike, optional
        Forward-time model; default: the hardware's calibrated roofline where a calibration is
        shipped in ``specsim/data/calibration``, else datasheet-only.  A path is a CSV of measured
        forward times of the target (columns ``batch, q, context, seconds``), read as the CLI's
        ``--latency-table`` reads it (:func:`specsim.latency.read_latency_table` at ``tp``).
    overhead : SpecOverhead, optional
        Per-step cost of enabling speculation; default: the one shipped with the latency
        calibration; with a ``latency=`` that carries none, the shipped stack calibration's of the
        hardware (never silently zero: :func:`resolve_overhead`); else zero (datasheet priors).
        ``term_sources["speculative_overhead"]`` says which.
    speculative_config : str or dict, optional
        vLLM's ``--speculative-config`` JSON exactly as passed to ``vllm serve``.
    temperature : float or None
        Sampling temperature to predict at (default 0, greedy).  Must match the temperature the
        acceptance was measured at, unless ``temperature_assumption`` explains why it transfers.
    temperature_assumption : str, optional
        An explicit assumption that the acceptance profile transfers to ``temperature``; the
        prediction carries it.
    drafted_fraction : float in (0, 1]
        Fraction of decode steps that carry a draft (1 for learned drafters; for ``ngram`` the
        measured ``num_drafts / decode steps``: steps without a suffix match draft nothing).
    mean_proposal_tokens : float, optional
        Mean proposed tokens per drafted step (vLLM ``num_draft_tokens / num_drafts``; below N
        for ``ngram``).  Default N; at most N (the proposal length used at ``concurrency``) and at
        least the acceptance profile's MAL - 1 at that N (vLLM accepts only proposed tokens).
    baseline : MeasuredBaseline, dict or path, optional
        A measured NON-speculative baseline of this deployment: TPOT (``tpot_s``, seconds) or
        output tok/s (``output_tok_per_s``) at the concurrency and ISL/OSL predicted at, as a
        :class:`MeasuredBaseline`, a dict of its fields, or the path of a ``vllm bench serve
        --save-result`` JSON of the baseline (:meth:`MeasuredBaseline.from_bench`).  It anchors the
        target's step time: k > 0 is solved (:func:`anchor_target_time`, brentq) so that the
        predicted baseline equals the measurement, and every target forward is multiplied by k
        (``Scenario.target_time_scale``); the model's structure still gives how the step changes
        with q = N + 1, draft passes and concurrency.  The baseline is then exact by construction;
        draft passes and speculative overheads are not scaled.  Only when the measurement is faster
        than the calibration's host-side seconds alone allow (e.g. MI300X.json's host term, fitted at
        one concurrency) are the host terms scaled down instead, with a warning
        (:func:`anchor_target_time`, cases 2 and 3).  ``Prediction.target_time_scale``,
        ``baseline_anchor`` and ``term_sources`` record it.
    baseline_concurrency : int, optional
        The concurrency the baseline was measured at, when it differs from ``concurrency``: the
        anchor is solved there and applied at ``concurrency`` (stated in the assumptions).
        Without it a baseline measured at another concurrency is refused.
    expert_parallel : bool, default False
        vLLM ``--enable-expert-parallel`` over the TP group: each MoE layer's post-MLP all-reduce
        becomes a dispatch + combine all-to-all (``specsim.latency.Roofline.with_expert_parallel``).
        At ``tp=1`` a no-op (one GPU holds every expert), said in ``Prediction.warnings``
        (:func:`with_expert_parallel`).
    draft_latency : LatencyModel or path, optional
        Times the draft passes when ``latency`` is a measured table of the target
        (:class:`specsim.latency.MeasuredLatency`): another measured table of the draft (or its CSV
        path), or a roofline; also with a ``latency`` that has ``forward_time`` only.  Refused where
        ``latency`` times the draft passes from their counts (a roofline or calibration): it would
        be ignored.  Default with a measured target table: the hardware's stack calibration (stated
        in ``term_sources`` / assumptions).
    vllm_version, platform : str, optional
        The vLLM release and platform (``"ROCm 7.2"``, ``"CUDA 12.8"``) you will run; a WARNING when
        they differ from the software stack the shipped calibration was fitted on
        (:func:`specsim.calibration.stack_mismatch`; the calibration file records its stack): the
        vLLM release (MAJOR.MINOR), the platform's name and, when both give one, the platform's
        version (MAJOR.MINOR: ``"ROCm 6.4"`` against a calibration on ROCm 7.2 warns).

    Returns
    -------
    Prediction

    Warns
    -----
    UserWarning
        When N reaches beyond the positions the acceptance profile measured
        (``acceptance_extrapolated``): the text of :func:`extrapolation_warning`, also in
        ``Prediction.warnings``, as :func:`sweep` warns.

    Raises
    ------
    SpecsimValueError
        Unknown model / hardware / method / precision, bad N or concurrency (``concurrency``,
        ``isl``, ``osl`` >= 2**63 included: they would overflow numpy's int64), bad speculative
        config fields, temperature mismatch without an assumption; ``drafter.precision`` when the
        hardware has no peak FLOP/s for the precision the DRAFT runs at (bf16 for a drafter with
        its own weights, whatever ``precision`` the target is given); a baseline measured at another
        concurrency (without ``baseline_concurrency``) or ISL / OSL, a baseline file of a
        speculative run, a measurement no k in [1e-6, 1e6] reaches; a measured latency table
        (``latency=``) that does not cover the context ISL + OSL/2 (:func:`check_table_context`:
        the message gives the table's range and what to pass) or the concurrency / q asked; a
        ``latency`` path that is no readable CSV of a measured table (field ``latency``).
    """
    latency = latency_from_path(latency, tp)
    r = resolve_inputs(
        target, method, num_speculative_tokens, hardware=hardware, precision=precision, acceptance=acceptance,
        draft=draft, drafter=drafter, latency=latency, speculative_config=speculative_config,
        temperature=temperature, temperature_assumption=temperature_assumption,
    )
    r = with_measured_table(r, draft_latency, tp=tp)
    tp = int_field("tp", tp)
    r, ep_warn = with_expert_parallel(r, tp=tp) if expert_parallel else (r, ())
    if r.num_speculative_tokens is None:
        raise SpecsimValueError("num_speculative_tokens", "is required (>= 1)")
    concurrency = int_field("concurrency", concurrency)
    isl = int_field("isl", isl)
    osl = int_field("osl", osl)
    check_osl(osl)
    check_table_context(r, isl=isl, osl=osl)
    overhead, ov_src, ov_warn = resolve_overhead(r, overhead, latency_given=latency is not None)
    _check_partial(drafted_fraction, mean_proposal_tokens)
    feas = check_feasibility(r, tp=tp, concurrency=concurrency, isl=isl, osl=osl, hardware=hardware)
    n_used = int(scheduled_n(r, concurrency))
    _check_proposal_within_n(mean_proposal_tokens, [n_used], [concurrency])
    _check_proposal_covers_acceptance(r.acceptance, [n_used], mean_proposal_tokens)
    n_src, n_notes = _n_source(r, concurrency, n_used)
    r, anchor, a_notes, overhead = _anchored(r, baseline, baseline_concurrency, tp=tp, concurrency=concurrency,
                                             isl=isl, osl=osl, overhead=overhead)
    if anchor is not None and anchor["host_time_scale"] != 1.0:
        ov_src += (f"; host_step_s and host_per_seq_s then x {anchor['host_time_scale']:.4g} by the baseline anchor "
                   f"(used: host_step_s {microseconds_text(overhead.host_step_s, 4)}, host_per_seq_s "
                   f"{microseconds_text(overhead.host_per_seq_s, 4)})")
    with _precision_refusal_explained(r):
        out = evaluate(r, n_used, concurrency, isl, osl, tp, overhead, drafted_fraction=drafted_fraction,
                       mean_proposal_tokens=mean_proposal_tokens)
    vals = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out.items()}
    health = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in health_terms(out, concurrency, osl).items()}
    extrap = acceptance_extrapolated(r.acceptance, n_used) if n_used > 0 else False
    pred = Prediction(
        target=r.target.name,
        method=r.method,
        num_speculative_tokens=n_used,
        hardware=r.hardware_name,
        tp=tp,
        precision=precision_label(r.target, r.precision),
        concurrency=concurrency,
        isl=isl,
        osl=osl,
        throughput_ratio=vals["throughput_ratio"],
        mal=vals["mal"],
        acceptance_rate=vals["acceptance_rate"],
        t_base_s=vals["t_base_s"],
        t_step_s=vals["t_step_s"],
        t_draft_s=vals["t_draft_s"],
        t_verify_s=vals["t_verify_s"],
        t_overhead_s=vals["t_overhead_s"],
        t_prefill_s=vals["t_prefill_s"],
        t_prefill_spec_s=vals["t_prefill_spec_s"],
        output_tok_per_s=vals["output_tok_per_s"],
        baseline_output_tok_per_s=vals["baseline_output_tok_per_s"],
        tpot_s=vals["tpot_s"],
        baseline_tpot_s=vals["baseline_tpot_s"],
        speedup_bound=vals["speedup_bound"],
        latency_calibrated=bool(getattr(r.latency, "calibrated", False)),
        latency_description=_describe(r.latency),
        acceptance_extrapolated=extrap,
        temperature=r.temperature,
        warnings=prediction_warnings(r, vals["throughput_ratio"], mal=vals["mal"], break_even=health["break_even_mal"],
                                     osl=osl, n=n_used)
        + feas + ov_warn + _stack_warning(r.latency, vllm_version, platform) + ep_warn
        + (allreduce_prior_warning(r.latency, tp) if anchor is None else ())
        + plausibility_warnings(vals, anchor) + table_scale_warning(r)
        + partial_drafting_warning(r, drafted_fraction, mean_proposal_tokens) + schedule_clamp_warning(r, concurrency)
        + ((extrapolation_warning(r.acceptance, [n_used]),) if extrap else ()),  # KV overflow: shown, not only recorded
        assumptions=r.assumptions + n_notes + _partial_assumptions(drafted_fraction, mean_proposal_tokens) + feas
        + a_notes + ov_warn,
        num_speculative_tokens_source=n_src,
        configured_num_speculative_tokens=r.num_speculative_tokens,
        break_even_mal=health["break_even_mal"],
        verify_cost_in_baseline_steps=health["verify_cost_in_baseline_steps"],
        verification_cost_in_baseline_steps=health["verification_cost_in_baseline_steps"],
        target_time_scale=float(r.target_time_scale),
        baseline_anchor=anchor,
        term_sources=term_sources(r, latency_given=latency is not None, overhead_source=ov_src, anchor=anchor),
        overhead_terms={k: float(v) for k, v in asdict(overhead).items()},
        t_host_s=vals.get("t_host_s", 0.0),
        drafted_fraction=float(drafted_fraction),
        mean_proposal_tokens=None if mean_proposal_tokens is None else float(mean_proposal_tokens),
    )
    if extrap:  # as sweep warns (README: "predict and sweep warn"); also in pred.warnings
        warnings.warn(extrapolation_warning(r.acceptance, [n_used]), UserWarning, stacklevel=2)
    return pred


def _anchored(r: Scenario, baseline, baseline_concurrency, *, tp, concurrency, isl, osl, overhead
              ) -> tuple[Scenario, dict | None, tuple[str, ...], SpecOverhead]:
    """``r`` with ``target_time_scale`` solved on ``baseline`` (unchanged without one), the anchor
    record, the assumptions it adds and the overhead with the anchor's host scale applied."""
    b = as_baseline(baseline)
    if b is None:
        if baseline_concurrency is not None:
            raise SpecsimValueError("baseline_concurrency", "applies only with baseline=", baseline_concurrency)
        return r, None, (), overhead
    point = anchor_point(b, baseline_concurrency, concurrency, isl, osl)
    k, rec = anchor_target_time(r, b, tp=tp, point=point, overhead=overhead)
    notes = (f"target step time anchored on the measured baseline ({_fmt_metric(rec['metric'], rec['measured'])} "
             f"at concurrency {point[0]}, ISL/OSL {point[1]}/{point[2]}; {b.source}): {anchor_scope_text(rec)}, so the "
             "predicted baseline equals the measurement; draft passes and speculative overhead are not scaled",)
    cs = np.unique(np.asarray(concurrency)).tolist()
    if cs != [point[0]]:
        what = "step time" if rec["scaled"] == ANCHOR_SCOPES[0] else "step time (host_per_seq_s included)"
        notes += (f"anchor solved at concurrency {point[0]} and applied at {cs if len(cs) > 1 else cs[0]}: assumes "
                  f"the model's concurrency dependence of the target's {what}",)
    return replace(r, target_time_scale=k), rec, notes, scaled_host_overhead(overhead, rec["host_time_scale"])


def anchor_scope_text(rec: Mapping[str, Any]) -> str:
    """What a baseline anchor scaled (``rec`` = ``Prediction.baseline_anchor``), in words."""
    k, s = float(rec["target_time_scale"]), float(rec.get("host_time_scale", 1.0))
    scaled = rec.get("scaled", ANCHOR_SCOPES[0])
    if scaled == ANCHOR_SCOPES[1]:
        return f"the host-side seconds (host_step_s, host_per_seq_s) x {s:.4g}, the target forwards as calibrated"
    if scaled == ANCHOR_SCOPES[2]:
        return f"every target forward x {k:.4g}, the host-side seconds dropped (x {s:.3g})"
    return f"every target forward (baseline step, verification, target prefill) x {k:.4g}"


def scheduled_n(r: Scenario, concurrency):
    """N modelled at each concurrency: the config's dynamic schedule entry when it has one, else N.

    vLLM 0.32 looks the schedule up by the step's batch size, the number of requests scheduled in
    the step (``v1/core/sched/scheduler.py`` l.1486-1490, ``dynamic_sd_lookup[len(num_scheduled_tokens)]``);
    at a steady concurrency C every running request is in each step, so the batch size is C.  The
    dense lookup (gaps and the tail carry the previous k forward; k clamped to N) is
    ``SpeculativeConfig.n_for_batch_size`` (``v1/spec_decode/dynamic/utils.py``).  k = 0 skips
    speculation for that step (no draft tokens, no rejection sampling); ``specsim.engine.evaluate``
    then commits one token per step and still charges the proposer's pass and the fixed overhead.

    Returns
    -------
    int or ndarray of int, the shape of ``concurrency``.
    """
    cfg = r.speculative_config
    if cfg is None or not cfg.is_dynamic:
        return np.broadcast_to(r.num_speculative_tokens, np.shape(concurrency)).copy() \
            if np.ndim(concurrency) else r.num_speculative_tokens
    if np.ndim(concurrency):
        c = np.asarray(concurrency)
        return np.array([cfg.n_for_batch_size(int(x)) for x in c.reshape(-1)], dtype=np.int64).reshape(c.shape)
    return cfg.n_for_batch_size(int(concurrency))


def _n_source(r: Scenario, concurrency: int, n_used: int) -> tuple[str, tuple[str, ...]]:
    cfg = r.speculative_config
    if cfg is None:
        return "argument", ()
    if not cfg.is_dynamic:
        return "speculative_config", ()
    notes = (f"N={n_used} from num_speculative_tokens_per_batch_size at batch size {concurrency} (= concurrency; "
             f"configured num_speculative_tokens {cfg.num_speculative_tokens})",)
    if n_used == 0:
        notes += (f"k=0 at batch size {concurrency}: speculation skipped (no draft tokens, no rejection sampling, "
                  "1 token per step); still paid: the drafter's KV-sync pass over the new token (lookup: the scan), "
                  "its prefill pass and the fixed speculative overhead",)
    return "schedule", notes


def schedule_clamp_warning(r: Scenario, concurrency: int) -> tuple[str, ...]:
    """A WARNING where the config's ``num_speculative_tokens_per_batch_size`` asks for more draft tokens at
    this batch size than its ``num_speculative_tokens``: vLLM 0.32 clamps k to N without a word
    (``v1/spec_decode/dynamic/utils.py`` ``build_dynamic_sd_schedule_lookup``), as modelled; empty otherwise."""
    cfg = r.speculative_config
    k = None if cfg is None else cfg.schedule_k(int(concurrency))
    if k is None or k <= cfg.num_speculative_tokens:
        return ()
    return (f"the schedule asks for k={k} at batch size {concurrency}, above num_speculative_tokens "
            f"{cfg.num_speculative_tokens}: vLLM 0.32 drafts {cfg.num_speculative_tokens} there without saying so "
            "(v1/spec_decode/dynamic/utils.py build_dynamic_sd_schedule_lookup), as modelled; raise "
            "num_speculative_tokens to draft more",)


def precision_label(target, precision: str | None) -> str:
    """Readable precision: the string given, or the model's serving mix when None."""
    if precision is not None:
        return precision
    w = getattr(target, "weight_dtype", "bf16")
    e = getattr(target, "expert_weight_dtype", w)
    return w if e in (None, w) else f"{w} (routed experts {e})"


class MeasuredTargetLatency:
    """A user's measured latency table of the TARGET (``MeasuredLatency``: batch, q, context, seconds)
    as the latency of a prediction: decode and verification steps interpolate the table; a prompt's
    prefill (q = ISL, usually far outside the table) and anything else the table cannot time come
    from ``fallback`` (the hardware's stack calibration), through the engine's ``prefill_time`` hook.

    Parameters
    ----------
    table : MeasuredLatency
    fallback : LatencyModel
        Roofline (stack calibration) for prefills.
    """

    calibrated = True

    def __init__(self, table, fallback):
        self.table = table
        self.fallback = fallback
        self.calibration = getattr(fallback, "calibration", None)
        self.scope = ("target decode / verification steps from the measured latency table; prefills from the "
                      "stack calibration")

    def forward_time(self, model, **kw):
        """The measured table's seconds (it refuses points outside its range)."""
        return self.table.forward_time(model, **kw)

    def breakdown(self, model, **kw):
        return self.table.breakdown(model, **kw)

    def prefill_time(self, model, *, tp, precision, concurrency, q_host, isl, context):
        """One request's prefill from the stack calibration (``specsim.engine.prefill_seconds``)."""
        return prefill_seconds(self.fallback, model, tp, precision, concurrency, q_host, isl, context)

    def describe(self) -> str:
        return f"MeasuredTargetLatency: {self.table.describe()}; prefills: {_describe(self.fallback)}"


def with_measured_table(r: Scenario, draft_latency=None, *, tp: int = 1) -> Scenario:
    """When ``r.latency`` is a measured table (no roofline counts): time prefills and -- unless
    ``draft_latency`` is given -- draft passes with the hardware's stack calibration, so no term is
    silently dropped (issue 9, item 4).  Other latency models are returned unchanged.

    ``draft_latency`` (a latency model, or the path of a measured table's CSV, read by
    :func:`specsim.latency.read_latency_table` at ``tp``) times the draft passes where ``r.latency``
    cannot (a measured target table, a model with ``forward_time`` only: the engine's callables path,
    :func:`specsim.engine.evaluate`); where the draft passes are timed from their counts by
    ``r.latency`` (a roofline or calibration) it would be ignored, so it is refused
    (``SpecsimValueError`` naming ``draft_latency``), as is a value without ``forward_time``.

    The table's seconds are checked at ``tp`` against the hardware first (:func:`table_scale_check`:
    a table in milliseconds or one faster than the datasheet raises ``SpecsimValueError``; one far
    from the stack's estimate leaves a warning among the assumptions, see :func:`table_scale_warning`).
    """
    lat = r.latency
    measured = hasattr(lat, "table") and not hasattr(lat, "counts") and not hasattr(lat, "pass_overhead_s")
    if draft_latency is not None:
        if not measured and _uses_plan(r):  # the draft passes are timed from their counts by the target's model
            raise SpecsimValueError(
                "draft_latency", "applies only where the target's latency model cannot time the draft passes (a "
                "measured latency table of the target, latency= a MeasuredLatency or its CSV path, or a model "
                "with forward_time only): with a roofline or calibration as latency, the draft passes are timed "
                "from their physical counts by that same model, and a separate draft_latency would be ignored; "
                f"got latency {type(lat).__name__}", type(draft_latency).__name__)
        if isinstance(draft_latency, (str, os.PathLike)):  # a measured table of the DRAFT's forwards
            draft_latency = read_latency_table(draft_latency, tp=int(tp), field="draft_latency")
        elif not callable(getattr(draft_latency, "forward_time", None)):
            raise SpecsimValueError("draft_latency", "must be a latency model with forward_time (a MeasuredLatency "
                                    "of the draft, a Roofline) or the path of a measured table's CSV",
                                    type(draft_latency).__name__)
    if not measured and draft_latency is None:
        return r
    fallback = default_latency(load_hardware(r.hardware_name))
    if measured and not isinstance(lat, MeasuredTargetLatency):
        lat = MeasuredTargetLatency(lat, fallback)
    dl = draft_latency if draft_latency is not None else (fallback if measured else None)
    notes = ()
    if measured:
        tbl = getattr(measured_table(lat), "table", None)
        if isinstance(tbl, pd.DataFrame):  # a MeasuredLatency (a duck-typed table object is not checked)
            notes = table_scale_check(tbl, fallback, r.target, int(tp), r.precision)
        notes += ("target decode / verification steps from the measured latency table (latency=); prefills"
                 + ("" if draft_latency is not None else " and draft passes") + " from the stack calibration "
                 + (getattr(getattr(fallback, "calibration", None), "file", "") or "datasheet priors").split("/")[-1],)
    return replace(r, latency=lat, draft_latency=dl, assumptions=r.assumptions + notes)


#: a measured latency table whose median row is more than this many times the stack calibration's
#: estimate is refused: a table in milliseconds reads ~1000x (measured probes on this project's CPU
#: host read 0.6-3.5x, ``data/runs/*-verify-cost/verify_cost.csv``)
TABLE_SCALE_REFUSED = 300.0
#: ... and beyond this factor (either way) warned about (a SmolLM2-135M CPU probe taken for Qwen3-8B
#: on H100 reads a median 15.6x)
TABLE_SCALE_WARNED = 10.0
#: how the warning of :func:`table_scale_check` starts (kept among a scenario's assumptions by
#: :func:`with_measured_table`, shown as a warning by :func:`table_scale_warning`)
TABLE_SCALE_NOTE = "the measured latency table's forwards take a median"
#: a row faster than this fraction of the datasheet floor (HBM bandwidth and peak FLOP/s at 100 %,
#: no fixed cost) is refused: no run beats the hardware's datasheet; the margin covers the
#: roofline's byte and FLOP counts being estimates
TABLE_FLOOR_FRACTION = 0.5


def table_scale_warning(r: Scenario) -> tuple[str, ...]:
    """The warning :func:`table_scale_check` left among ``r.assumptions`` (empty when none): shown by
    :func:`predict`, :func:`sweep` and ``specsim.recommend.recommend`` as a warning."""
    return tuple(a for a in r.assumptions if a.startswith(TABLE_SCALE_NOTE))


def datasheet_floor(hardware):
    """The roofline of ``hardware`` at 100 % of its datasheet HBM bandwidth and peak FLOP/s, with no
    fixed, per-layer or all-reduce latency: a lower bound on any measured forward
    (:class:`specsim.latency.Roofline` with ``Efficiency(bandwidth=1, compute=1, fixed_s=0,
    per_layer_s=0, allreduce_latency_s=0)``).

    Parameters
    ----------
    hardware : Hardware

    Returns
    -------
    specsim.latency.Roofline
        ``forward_time`` gives the floor in seconds per forward.
    """
    from specsim.latency import Efficiency, Roofline

    return Roofline(hardware, Efficiency(bandwidth=1.0, compute=1.0, fixed_s=0.0, per_layer_s=0.0,
                                         allreduce_latency_s=0.0), source="datasheet floor (100 % of peaks)")


def table_scale_check(table: pd.DataFrame, stack, target, tp: int, precision) -> tuple[str, ...]:
    """Check a measured latency table's seconds against the hardware, before they become a prediction.

    Parameters
    ----------
    table : pandas.DataFrame
        ``MeasuredLatency.table``: columns batch, q, context (tokens), seconds (one target forward).
    stack : specsim.latency.Roofline
        The hardware's stack calibration (:func:`specsim.calibration.default_latency`).
    target : ModelSpec
    tp : int
    precision : str or None

    Returns
    -------
    tuple of str
        A warning when the median ratio of the table's seconds to the stack's estimate of the same
        forwards lies beyond :data:`TABLE_SCALE_WARNED` either way; empty otherwise (and where the
        stack cannot time the target, e.g. a precision without a datasheet peak).

    Raises
    ------
    SpecsimValueError
        ``latency``: the median ratio exceeds :data:`TABLE_SCALE_REFUSED` (seconds given in
        milliseconds?), or a row is faster than :data:`TABLE_FLOOR_FRACTION` of the datasheet floor
        (:func:`datasheet_floor`): a table of another model, TP, precision or hardware.
    """
    floor = datasheet_floor(stack.hardware)
    rows = []
    try:
        for b, q, c, s in table[["batch", "q", "context", "seconds"]].itertuples(index=False):
            kw = dict(tp=tp, precision=precision, batch=int(b), q=int(q), context=float(c))
            rows.append((int(b), int(q), float(c), float(s), float(stack.forward_time(target, **kw)),
                         float(floor.forward_time(target, **kw))))
    except SpecsimValueError:
        return ()
    where = f"{getattr(target, 'name', 'the target')} at TP {tp} on {stack.hardware.name}"
    ratio = float(np.median([s / st for *_, s, st, _ in rows]))
    if ratio > TABLE_SCALE_REFUSED:
        raise SpecsimValueError(
            "latency", f"the measured latency table's forwards take a median {ratio:.3g}x the stack calibration's "
            f"estimate for {where} (refused beyond {TABLE_SCALE_REFUSED:g}x): its `seconds` column must be seconds "
            "per target forward (milliseconds read ~1000x)", ratio)
    fast = [row for row in rows if row[3] < TABLE_FLOOR_FRACTION * row[5]]
    if fast:
        b, q, c, s, _, fl = min(fast, key=lambda row: row[3] / row[5])
        raise SpecsimValueError(
            "latency", f"the measured latency table's row batch {b}, q {q}, context {c:g} takes {s:.3g} s, "
            f"{s / fl:.2g}x the datasheet floor {fl:.3g} s for {where} (HBM bandwidth and peak FLOP/s at 100 %, "
            "no fixed cost): faster than the hardware allows -- a table of another model, TP, precision or "
            "hardware, or in other units than seconds", s)
    if not (1.0 / TABLE_SCALE_WARNED <= ratio <= TABLE_SCALE_WARNED):
        return (f"{TABLE_SCALE_NOTE} {ratio:.3g}x the stack calibration's "
                f"estimate for {where}: check that it is a table of this target, TP and precision in seconds",)
    return ()


def measured_table(latency):
    """The measured table (:class:`specsim.latency.MeasuredLatency`, or any object with its
    ``axis_range`` / ``refused``) a latency model times the target's decode / verification steps
    with: ``latency`` itself, or the table a :class:`MeasuredTargetLatency` wraps; None otherwise."""
    for t in (latency, getattr(latency, "table", None)):
        if callable(getattr(t, "refused", None)) and callable(getattr(t, "axis_range", None)):
            return t
    return None


def table_name(table) -> str:
    """How a message names a measured latency table: ``"the measured latency table (<source>)"``."""
    src = getattr(table, "source", None)
    return f"the measured latency table ({src})" if src else "the measured latency table"


def _fits_context(table, isl: int, osl: int) -> bool:
    return isl >= 1 and osl >= 1 and not bool(table.refused("context", isl + osl / 2.0))


def _context_suggestion(table, isl: int, osl: int) -> str:
    """An ``--isl / --osl`` pair whose decode context ISL + OSL/2 the table covers (the OSL kept if
    possible, else the ISL, else both chosen), as text; empty when none is found."""
    lo, hi = table.axis_range("context", accepted=True)
    want = min(max(isl + osl / 2.0, lo), hi)
    for i, o in ((int(np.ceil(want - osl / 2.0)), osl), (int(np.floor(want - osl / 2.0)), osl),
                 (isl, int(round(2 * (want - isl)))), (int(round(want / 2)), int(round(want)))):
        if _fits_context(table, i, o):
            return f" (e.g. --isl {i} --osl {o}: {i} + {o}/2 = {i + o / 2:g})"
    return ""


def check_table_context(r: Scenario, *, isl, osl) -> None:
    """Refuse, before any evaluation, an ISL / OSL whose decode context a measured latency table of
    the target does not cover, saying the table's range, the context asked and what to do.

    Every decode / verification step of a request is timed at its mean context, ISL + OSL/2
    (``specsim.engine.evaluate``); a measured table (e.g. a verification-cost probe, recorded at
    one context) answers only inside its context range (:meth:`specsim.latency.MeasuredLatency.refused`).
    Latency models that are not measured tables are not checked.

    Parameters
    ----------
    r : Scenario
    isl, osl : int or array_like of int
        Input / output tokens per request (arrays broadcast: a sweep's grid).

    Raises
    ------
    SpecsimValueError
        ``context``: ISL + OSL/2 outside the table's context range (the first such ISL / OSL pair).
    """
    table = measured_table(r.latency)
    if table is None:
        return
    i_arr, o_arr = np.broadcast_arrays(np.asarray(isl), np.asarray(osl))
    ctx = i_arr + o_arr / 2.0
    bad = np.asarray(table.refused("context", ctx), dtype=bool)
    if not bad.any():
        return
    k = int(np.flatnonzero(bad.reshape(-1))[0])
    i, o = int(i_arr.reshape(-1)[k]), int(o_arr.reshape(-1)[k])
    lo, hi = table.axis_range("context")
    a_lo, a_hi = table.axis_range("context", accepted=True)
    covers = f"context {lo:g} tokens" if lo == hi else f"contexts {lo:g}-{hi:g} tokens"
    if (a_lo, a_hi) != (lo, hi):
        covers += f" (accepted {a_lo:g}-{a_hi:g} with its max_extrapolation)"
    inside = f"= {a_lo:g} tokens" if a_lo == a_hi else f"inside {a_lo:g}-{a_hi:g} tokens"
    raise SpecsimValueError(
        "context", f"{table_name(table)} covers {covers}, but ISL {i} + OSL {o}/2 = {i + o / 2:g} tokens is asked "
        "(specsim times every decode / verification step at a request's mean context, ISL + OSL/2): pass --isl / "
        f"--osl (isl= / osl=) with ISL + OSL/2 {inside}{_context_suggestion(table, i, o)}, or "
        f"record a latency table covering context {i + o / 2:g} (e.g. the verification-cost probe run at this "
        "ISL / OSL)", i + o / 2)


#: an anchor factor outside [1/3, 3] on the target's forwards suggests a baseline of another
#: target / TP / precision / hardware (or a stack far from the calibration's)
ANCHOR_PLAUSIBLE = (1.0 / 3.0, 3.0)


def anchor_scope_warning(anchor: Mapping[str, Any]) -> tuple[str, ...]:
    """The warning a baseline anchor that had to scale the host-side terms carries (empty for an
    anchor on the target's forwards alone); ``anchor`` = ``Prediction.baseline_anchor``."""
    if anchor.get("scaled", ANCHOR_SCOPES[0]) == ANCHOR_SCOPES[0]:
        return ()
    return (f"the measured baseline ({_fmt_metric(anchor['metric'], anchor['measured'])} at concurrency "
            f"{anchor['concurrency']}; unanchored {_fmt_metric(anchor['metric'], anchor['predicted_unanchored'])}) "
            "is faster than the host-side seconds used allow (host_step_s + host_per_seq_s x C, from the stack "
            f"calibration or overhead=): anchored by scaling {anchor_scope_text(anchor)}. Those host terms do not "
            "describe your stack; measure them (e.g. baselines at two concurrencies) and pass "
            "overhead=SpecOverhead(host_step_s=..., host_per_seq_s=...) for a firmer prediction",)


#: a baseline giving both TPOT and output tok/s: ``output_tok_per_s x tpot_s / concurrency`` (each
#: stream makes at most ~1 / TPOT tokens per second; prefill and queueing lower it) outside this
#: range is warned about as inconsistent.  Above 1 only by the spread of TPOT across requests
#: (a mean of rates vs. a mean of times), below only when prefill takes most of a request's time
BASELINE_CONSISTENT = (0.25, 2.0)


def _baseline_consistency(anchor: Mapping[str, Any]) -> tuple[str, ...]:
    """The warnings of a baseline whose TPOT and output tok/s do not describe one run (see
    :data:`BASELINE_CONSISTENT`), or whose run had failed requests; empty otherwise."""
    failed = anchor.get("failed_requests")
    out: tuple[str, ...] = ()
    if failed:
        done = anchor.get("completed_requests")
        out = (f"the baseline run ({anchor.get('source')}) had {failed} failed request(s)"
               + (f" beside {done} completed" if done else "") + ": its throughput is not that of a healthy "
               "deployment (errors, timeouts or preemption); anchor on a run without failures",)
    return out + _tpot_tok_consistency(anchor)


def _tpot_tok_consistency(anchor: Mapping[str, Any]) -> tuple[str, ...]:
    also = anchor.get("also_measured") or {}
    vals = {anchor["metric"]: float(anchor["measured"]), **{k: float(v) for k, v in also.items()}}
    if set(vals) != set(_BASELINE_METRICS):
        return ()
    c = int(anchor.get("concurrency", 1) or 1)
    x = vals["output_tok_per_s"] * vals["tpot_s"] / c
    if BASELINE_CONSISTENT[0] <= x <= BASELINE_CONSISTENT[1]:
        return ()
    return (f"the baseline's output throughput {vals['output_tok_per_s']:.4g} tok/s and TPOT "
            f"{vals['tpot_s'] * 1e3:.4g} ms at concurrency {c} are {x:.2g}x the throughput that TPOT allows "
            f"(concurrency / TPOT = {c / vals['tpot_s']:.4g} tok/s; consistent {BASELINE_CONSISTENT[0]:g}-"
            f"{BASELINE_CONSISTENT[1]:g}x): are both from one run, in seconds and total tok/s? anchored on "
            f"{anchor['metric']}",)


def anchor_factor_warning(anchor: Mapping[str, Any]) -> tuple[str, ...]:
    """The warning of a baseline anchor whose factor on the target's forwards lies outside
    :data:`ANCHOR_PLAUSIBLE` (empty otherwise); ``anchor`` = ``Prediction.baseline_anchor``.  Shared by
    :func:`predict`, :func:`sweep` and ``specsim.recommend.recommend`` (the last two dropped it)."""
    k = float(anchor["target_time_scale"])
    if ANCHOR_PLAUSIBLE[0] <= k <= ANCHOR_PLAUSIBLE[1]:
        return _baseline_consistency(anchor)
    c = int(anchor.get("concurrency", 1) or 1)
    per_user = (f"; read as one request's rate (x concurrency {c}) it would scale them by about {k / c:.2g}: "
                "output_tok_per_s is the total over all requests (vLLM's output throughput)"
                if anchor.get("metric") == "output_tok_per_s" and c > 1
                and ANCHOR_PLAUSIBLE[0] <= k / c <= ANCHOR_PLAUSIBLE[1] else "")
    return _baseline_consistency(anchor) + (f"the measured baseline scales the target's forwards by {k:.3g} (plausible "
            f"{ANCHOR_PLAUSIBLE[0]:.2g}-{ANCHOR_PLAUSIBLE[1]:.2g}): check that it is a run of this target, TP, "
            f"precision and hardware{per_user}; the speculative overheads are not scaled by the anchor",)


#: a verification forward timed this much faster (relatively) than the q = 1 forward is warned about:
#: above the run-to-run noise of the CPU validation (3.7 % median) -- the recorded CPU probes' q > 1
#: rows lie up to 19 % below their q = 1 row at batch 1, where the forward is flat in q
VERIFY_FASTER_TOLERANCE = 0.05


def plausibility_warnings(vals: Mapping[str, float], anchor: dict | None) -> tuple[str, ...]:
    """Warnings on numbers a reader should not take at face value: an anchor factor far from 1, a
    speculative overhead larger than draft + verification together (per-sequence stack terms fitted
    at one load, extrapolated), and a verification forward (q = N + 1) timed faster than the decode
    forward (q = 1) it replaces by more than :data:`VERIFY_FASTER_TOLERANCE` -- no kernel does more
    work in less time; a measured latency table's noise does (it can put the break-even MAL below 1)."""
    out = []
    fwd1 = vals.get("t_base_s", 0.0) - vals.get("t_host_s", 0.0)
    tv = vals.get("t_verify_s", 0.0)
    if 0.0 < tv < fwd1 * (1.0 - VERIFY_FASTER_TOLERANCE):
        out.append(f"the target's verification forward (q = N + 1: {tv * 1e3:.4g} ms) is timed faster than its decode "
                   f"forward (q = 1: {fwd1 * 1e3:.4g} ms): more tokens cannot take less time, so the latency model "
                   "(a measured table's noise between its q rows?) credits speculation with a saving no step has; "
                   "repeat the measurement or smooth the table")
    if anchor is not None:
        out.extend(anchor_factor_warning(anchor))
        out.extend(anchor_scope_warning(anchor))
    ov, work = vals.get("t_overhead_s", 0.0), vals.get("t_verify_s", 0.0) + vals.get("t_draft_s", 0.0)
    if ov > work > 0:
        out.append(f"the speculative overhead ({ov * 1e3:.3g} ms per step) exceeds draft + verification "
                   f"({work * 1e3:.3g} ms): {_OVERHEAD_DOMINANT_WHY}; measure a run at this concurrency")
    return tuple(out)


_OVERHEAD_DOMINANT_WHY = ("the calibration's per-sequence speculative terms dominate here; they were fitted on the "
                          "calibration's own targets at one load, so for another target, or another concurrency, "
                          "they are an extrapolation")


def overhead_dominant_concurrencies(out: Mapping[str, Any], concurrency, shape) -> list[int]:
    """The concurrencies at which a sweep's speculative overhead exceeds draft + verification, as
    :func:`plausibility_warnings` warns for one prediction.

    Parameters
    ----------
    out : mapping
        :func:`specsim.engine.evaluate` output: ``t_overhead_s``, ``t_verify_s``, ``t_draft_s``
        (seconds per step), each broadcastable to ``shape``.
    concurrency : array_like of int
        The concurrency axis, broadcastable to ``shape``.
    shape : tuple of int
        The sweep's numeric grid (N, concurrency, ISL, OSL).

    Returns
    -------
    list of int
        Sorted concurrencies with at least one such point; empty when none.
    """
    ov = np.broadcast_to(np.asarray(out["t_overhead_s"], dtype=float), shape)
    work = np.broadcast_to(np.asarray(out["t_verify_s"], dtype=float) + np.asarray(out["t_draft_s"], dtype=float),
                           shape)
    hit = (ov > work) & (work > 0)
    if not hit.any():
        return []
    return sorted({int(c) for c in np.broadcast_to(np.asarray(concurrency), shape)[hit].tolist()})


def below_break_even_warning(df: pd.DataFrame) -> str | None:
    """The sweep form of :func:`health_warnings`' "below break-even" warning: how many rows of a
    sweep predict speculation slower than none (``throughput_ratio`` < 1, i.e. ``mal`` below
    ``break_even_mal``), and where.

    Parameters
    ----------
    df : pandas.DataFrame
        A :func:`sweep` frame (``throughput_ratio``, ``num_speculative_tokens``, ``concurrency``,
        ``target``, ``method``, ``hardware``).

    Returns
    -------
    str or None
        The warning; None when no row is below 1.
    """
    low = df[np.isfinite(df["throughput_ratio"]) & (df["throughput_ratio"] < 1.0)]
    if low.empty:
        return None

    def values(col) -> str:
        v = sorted({x.item() if hasattr(x, "item") else x for x in low[col]}, key=str)
        return ", ".join(map(str, v)) if len(v) <= 8 else f"{len(v)} values"

    def ints(col) -> str:
        v = sorted({int(x) for x in low[col]})
        return ", ".join(map(str, v)) if len(v) <= 8 else f"{v[0]}..{v[-1]} ({len(v)} values)"

    return (f"below break-even: the throughput ratio is < 1 in {len(low)} of {len(df)} rows ({values('target')}, "
            f"{values('method')} on {values('hardware')}; N {ints('num_speculative_tokens')}; concurrency "
            f"{ints('concurrency')}): speculation is predicted slower than no speculation there (mal below "
            f"break_even_mal)")


def overhead_dominant_warning(concurrencies: list[int], what: str) -> str:
    """The sweep / recommend form of :func:`plausibility_warnings`' overhead warning: the rows of
    ``what`` at ``concurrencies``."""
    shown = ", ".join(map(str, concurrencies)) if len(concurrencies) <= 8 else \
        f"{concurrencies[0]}..{concurrencies[-1]} ({len(concurrencies)} values)"
    return (f"the speculative overhead exceeds draft + verification for {what} at concurrency {shown}: "
            f"{_OVERHEAD_DOMINANT_WHY}; measure a run at these concurrencies")


def allreduce_prior_warning(latency, tp: int) -> tuple[str, ...]:
    """The warning of a TP > 1 prediction whose all-reduce latency was never fitted.

    The shipped calibration's ``allreduce_latency_s`` (seconds per all-reduce call, charged
    ``2 x layers`` times per forward at TP > 1, :mod:`specsim.latency`) is a prior wherever the fit
    saw no TP > 1 run: its ``term_sources`` entry starts with "prior" -- on the hardware itself, or
    on the hardware a transferred calibration came from (``transferred_from``).  Empty for TP = 1,
    for a latency model without a shipped calibration, and for a fitted term.
    """
    rec = getattr(latency, "calibration", None)
    if tp <= 1 or rec is None or measured_table(latency) is not None:  # a measured table includes the all-reduce
        return ()
    src = str((getattr(rec, "term_sources", {}) or {}).get("allreduce_latency_s", ""))
    origin = getattr(rec, "transferred_from", None)
    if origin and not src.startswith("prior"):
        from specsim.calibration import load_calibration

        cal = load_calibration(origin)
        src = str(((cal or {}).get("term_sources") or {}).get("allreduce_latency_s", src))
    if not src.startswith("prior"):
        return ()
    v = float((getattr(rec, "terms", {}) or {}).get("allreduce_latency_s", 0.0))
    where = os.path.basename(str(getattr(rec, "file", ""))) + (f", transferred from {origin}" if origin else "")
    return (f"TP={tp}: the all-reduce latency per call ({v * 1e6:.3g} us, {where}) is a prior, never fitted on a "
            f"TP > 1 run, so the TP={tp} step time charges the all-reduce "
            + ("wire time only" if v == 0.0 else "wire time plus that prior")
            + f"; anchor on a measured TP={tp} baseline (baseline=) for a firmer number",)


def _stack_warning(latency, vllm_version: str | None, platform: str | None) -> tuple[str, ...]:
    """The calibration-stack mismatch warning (empty when nothing is declared or it matches)."""
    w = stack_mismatch(getattr(latency, "calibration", None), vllm_version=vllm_version, platform=platform)
    return (w,) if w else ()


def check_feasibility(r: Scenario, *, tp: int, concurrency: int, isl: int, osl: int, hardware) -> tuple[str, ...]:
    """Refuse deployments vLLM itself would refuse; return warnings for degraded ones.

    Raises
    ------
    SpecsimValueError
        ``tp`` does not divide the target's attention heads (vLLM requires
        ``num_attention_heads % tensor_parallel_size == 0``, ``model_executor/models/*``);
        ``isl + osl`` exceeds the target's ``max_position_embeddings``; ``num_speculative_tokens``
        beyond ``isl + osl`` or ``max_position_embeddings``; a speculative config's
        ``draft_tensor_parallel_size`` neither 1 nor ``tp`` or its ``max_model_len`` beyond the
        target's ``max_position_embeddings`` (vLLM ``vllm/config/speculative.py``); the target (+ draft)
        weights do not fit in the GPUs' memory at this TP, or the KV cache of one request does
        not fit beside them (``specsim.memory.memory_budget``).

    Returns
    -------
    tuple of str
        Warnings carried in ``Prediction.assumptions``: KV cache of ``concurrency`` x (ISL + OSL)
        tokens beyond the memory left (vLLM would queue / preempt requests, so the concurrency
        is not reached).
    """
    mb = _check_deployment(r, tp=tp, isl=isl, osl=osl, concurrency=concurrency)
    if mb is not None and not mb.fits:
        return (kv_overflow_text([concurrency], isl + osl, mb.hardware, tp, mb.max_concurrency_fit)
                + ": vLLM would queue or preempt, so this concurrency is not reached",)
    return ()


def kv_overflow_text(concurrencies, tokens: int, hardware: str, tp: int, max_fit: int) -> str:
    """The words of :func:`check_feasibility`'s KV-cache warning for some concurrencies of one
    deployment and sequence length: ``"KV cache for concurrency C x T tokens does not fit on HW at
    TP=tp (fits up to concurrency F)"`` (more than six concurrencies shown as ``first..last (k
    values)``); :func:`predict` and :func:`sweep` (:func:`kv_overflow_warning`) complete it."""
    cs = sorted(int(c) for c in concurrencies)
    shown = ", ".join(map(str, cs)) if len(cs) <= 6 else f"{cs[0]}..{cs[-1]} ({len(cs)} values)"
    return (f"KV cache for concurrency {shown} x {int(tokens)} tokens does not fit on {hardware} at TP={tp} "
            f"(fits up to concurrency {int(max_fit)})")


def kv_overflow_warning(groups: Mapping) -> str | None:
    """The one warning of a :func:`sweep` whose grid has points where the KV cache does not fit
    (``kv_cache_fits`` False), in :func:`check_feasibility`'s words (:func:`kv_overflow_text`): per
    combination (``label``), hardware, TP, ISL + OSL, N and largest concurrency that fits, the
    concurrencies beyond it; at most six such groups are written out, the rest counted.

    Parameters
    ----------
    groups : mapping
        ``(label, hardware, tp, tokens, max_fit, ns)`` -> concurrencies; ``ns`` the N of the group
        as a string (``""`` when the group holds every N swept).

    Returns
    -------
    str or None
        None when ``groups`` is empty.
    """
    if not groups:
        return None
    parts = [f"{label}: " + kv_overflow_text(cs, tokens, hw, tp, fit) + (f" at N = {ns}" if ns else "")
             for (label, hw, tp, tokens, fit, ns), cs in groups.items()]
    more = f"; and {len(parts) - 6} more (the kv_cache_fits column)" if len(parts) > 6 else ""
    return ("; ".join(parts[:6]) + more + ": vLLM would queue or preempt, so these concurrencies are not reached "
            "(kv_cache_fits False)")


def _check_deployment(r: Scenario, *, tp: int, isl: int, osl: int, concurrency: int = 1):
    """The refusals of :func:`check_feasibility`; returns the memory budget (None off-GPU or for
    custom models / drafters without sizes)."""
    tgt = r.target
    heads = getattr(tgt, "num_attention_heads", None)
    if heads and isinstance(tp, int) and heads % tp != 0:
        raise SpecsimValueError("tp", f"must divide the target's {heads} attention heads (vLLM requirement)", tp)
    max_pos = getattr(tgt, "max_position_embeddings", None)
    if max_pos and isl + osl > max_pos:
        raise SpecsimValueError("isl + osl", f"exceeds the target's max_position_embeddings {max_pos}", isl + osl)
    n_spec = r.num_speculative_tokens
    if max_pos and n_spec is not None and n_spec > max_pos:
        # N draft tokens per step need N positions: more than the model has is no deployment
        raise SpecsimValueError("num_speculative_tokens", f"exceeds the context: N draft tokens per step need N "
                                f"positions, the target's max_position_embeddings is {max_pos}", n_spec,
                                [f"1..{max_pos}"])
    cfg = r.speculative_config
    if cfg is not None:  # draft TP 1 or tp; max_model_len <= the target's (vLLM config rules)
        cfg.check_target(tp, max_pos)
    if getattr(r.latency, "hardware", None) is None or getattr(r.latency.hardware, "kind", "gpu") != "gpu":
        return None
    try:

        mb = memory_budget(tgt, drafter=r.drafter, hardware=r.latency.hardware, tp=tp, precision=r.precision,
                           concurrency=concurrency, max_model_len=isl + osl, num_speculative_tokens=r.num_speculative_tokens or 0)
    except (SpecsimValueError, TypeError, AttributeError):  # a custom drafter / model without sizes
        return None
    weights = mb.target_weight_bytes + mb.draft_weight_bytes
    if weights > mb.usable_bytes:
        raise SpecsimValueError(
            "tp", f"target + draft weights need {weights / 2**30:.1f} GiB per GPU but {mb.hardware} offers "
            f"{mb.usable_bytes / 2**30:.1f} GiB usable at TP={tp}: raise tp", tp)
    if mb.max_concurrency_fit < 1:
        raise SpecsimValueError(
            "isl + osl", f"the KV cache of ONE request of {isl + osl} tokens does not fit beside the weights on "
            f"{mb.hardware} at TP={tp} (vLLM refuses such a max_model_len): shorten the sequence or raise tp",
            isl + osl)
    return mb


@contextlib.contextmanager
def _precision_refusal_explained(r: Scenario):
    """Re-raise a hardware's "no peak FLOP/s for this precision" refusal that concerns the DRAFT's
    precision (``Drafter.draft_precision``: a quantized draft checkpoint as stored, bf16 for a draft
    behind a quantized target) under the field ``drafter.precision``, instead of blaming the
    ``precision`` the user asked for the target (which that hardware supports).  One that concerns the target's
    precision when none was given says that it is the target's serving precision, the default."""
    try:
        yield
    except SpecsimValueError as exc:
        if exc.field == "precision" and r.precision is None and exc.value == getattr(r.target, "weight_dtype", None):
            raise SpecsimValueError(
                "precision", f"not given, so the target's serving precision ({exc.value}, its checkpoint's dtype) is "
                f"used, and {exc.rule}: give precision= / --precision", exc.value, exc.allowed) from exc
        dp = getattr(r.drafter, "draft_precision", None)
        dprec = dp(r.precision) if callable(dp) else None
        if exc.field != "precision" or r.precision is None or dprec is None or exc.value != dprec \
                or dprec == r.precision:
            raise
        name = getattr(r.drafter, "name", None) or getattr(r.drafter, "method", "draft")
        raise SpecsimValueError(
            "drafter.precision", f"the draft ({name}) runs its layers at {dprec} (a quantized draft checkpoint "
            f"runs as stored; one stored in a dtype runs at the target's dtype, bf16 behind a quantized target; "
            f"the target's precision={r.precision!r} does not make it {r.precision}), "
            f"and {exc.rule}: give a drafter with a supported precision (drafter=get_drafter(...)"
            ".with_params(precision=...)) or other hardware", dprec, exc.allowed) from exc


def _check_partial(drafted_fraction, mean_proposal_tokens) -> None:
    for name, v in (("drafted_fraction", drafted_fraction), ("mean_proposal_tokens", mean_proposal_tokens)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating))):
            raise SpecsimValueError(name, "must be a number", v)
    if not (np.isfinite(drafted_fraction) and 0.0 < drafted_fraction <= 1.0):
        raise SpecsimValueError("drafted_fraction", "must lie in (0, 1]", drafted_fraction)
    if mean_proposal_tokens is not None and not (np.isfinite(mean_proposal_tokens) and mean_proposal_tokens >= 1.0):
        raise SpecsimValueError("mean_proposal_tokens", "must be >= 1 token per drafted step", mean_proposal_tokens)


def _check_proposal_within_n(mean_proposal_tokens, ns, concurrencies=None) -> None:
    """Refuse ``mean_proposal_tokens`` above a proposal length N it would be used at.

    vLLM's ``num_draft_tokens / num_drafts`` never exceeds N, and the engine clamps the proposal to N
    (``specsim.engine.evaluate``), so a larger value would silently predict N tokens per drafted step.

    Parameters
    ----------
    mean_proposal_tokens : float or None
        The value given (None: N, nothing to check).
    ns : sequence of int
        The N it is used at: one per concurrency of ``concurrencies`` (:func:`predict`, a
        :func:`sweep` with a speculative-config schedule), or -- ``concurrencies`` None -- the N a
        :func:`sweep` grid spans.  N = 0 (a schedule's step without speculation) proposes nothing and
        is skipped.
    concurrencies : sequence of int, optional
        The concurrency each N of ``ns`` is used at.

    Raises
    ------
    SpecsimValueError
        ``mean_proposal_tokens``, naming the N it exceeds: the proposal length used at a concurrency,
        or the smallest N swept (and the N swept).
    """
    if mean_proposal_tokens is None:
        return
    ns = [int(n) for n in np.asarray(ns).reshape(-1).tolist()]
    if concurrencies is not None:
        for n, c in zip(ns, np.asarray(concurrencies).reshape(-1).tolist()):
            if n > 0 and mean_proposal_tokens > n * (1 + 1e-9):
                raise SpecsimValueError("mean_proposal_tokens", f"must be <= N = {n}, the proposal length used at "
                                        f"concurrency {c} (vLLM's num_draft_tokens / num_drafts never exceeds it)",
                                        mean_proposal_tokens)
        return
    positive = sorted({n for n in ns if n > 0})
    if positive and mean_proposal_tokens > positive[0] * (1 + 1e-9):
        raise SpecsimValueError(
            "mean_proposal_tokens", f"must be <= N = {positive[0]}, the smallest proposal length swept "
            f"(num_speculative_tokens {', '.join(map(str, positive))}; vLLM's num_draft_tokens / num_drafts never "
            f"exceeds N): sweep only N >= {int(np.ceil(mean_proposal_tokens - 1e-9))}, or sweep each N with its own "
            "mean_proposal_tokens", mean_proposal_tokens)


def _check_proposal_covers_acceptance(acceptance, ns, mean_proposal_tokens) -> None:
    """Refuse ``mean_proposal_tokens`` below the tokens the acceptance profile accepts per drafted step.

    vLLM counts a drafted step's accepted tokens among its proposed ones (``num_accepted_tokens <=
    num_draft_tokens``, ``vllm/v1/spec_decode/metrics.py``), so ``MAL per drafted step - 1 <=
    mean_proposal_tokens``; a smaller value would predict more than every proposed token accepted
    (``accepted_per_proposed_token`` above 1).

    Raises
    ------
    SpecsimValueError
        Naming ``mean_proposal_tokens``, the first N where the profile's MAL needs more, and that MAL.
    """
    if mean_proposal_tokens is None or acceptance is None:
        return
    for n in sorted({int(n) for n in np.ravel(ns) if int(n) > 0}):
        need = float(acceptance.mal(n)) - 1.0
        if need > float(mean_proposal_tokens) * (1 + 1e-9):
            raise SpecsimValueError(
                "mean_proposal_tokens", f"is below the {need:.4g} tokens the acceptance profile accepts per drafted "
                f"step at N = {n} (MAL {need + 1:.4g}): vLLM counts accepted tokens among the proposed ones "
                "(num_accepted_tokens <= num_draft_tokens), so it must be at least MAL - 1; give the "
                "num_draft_tokens / num_drafts and the acceptance of the same run", mean_proposal_tokens)


def partial_drafting_warning(r: Scenario, drafted_fraction, mean_proposal_tokens) -> tuple[str, ...]:
    """The warning of partial drafting (``drafted_fraction`` < 1 or ``mean_proposal_tokens``) given for
    a method that drafts N tokens on every decode step: only lookup methods
    (:data:`specsim.drafters.LOOKUP_METHODS`: vLLM's n-gram / suffix proposers) skip the steps whose
    lookup finds nothing or propose fewer tokens; empty otherwise."""
    if drafted_fraction >= 1.0 and mean_proposal_tokens is None:
        return ()
    if getattr(r.drafter, "kind", "") == "lookup":
        return ()
    given = [f"drafted_fraction={drafted_fraction:g}"] if drafted_fraction < 1.0 else []
    if mean_proposal_tokens is not None:
        given.append(f"mean_proposal_tokens={mean_proposal_tokens:g}")
    what = " and ".join(given)
    return (f"{what} given for {r.method}, which drafts N tokens on every decode step: only lookup methods "
            f"({', '.join(LOOKUP_METHODS)}) skip steps or propose fewer tokens, so this models a run of {r.method} "
            "that vLLM does not make",)


def _partial_assumptions(drafted_fraction, mean_proposal_tokens) -> tuple[str, ...]:
    out = ()
    if drafted_fraction < 1.0:
        out += (f"only {drafted_fraction:.0%} of steps carry a draft (lookup misses)",)
    if mean_proposal_tokens is not None:
        out += (f"mean proposal {mean_proposal_tokens:.2f} tokens per drafted step (partial drafts)",)
    return out


def _describe(latency) -> str:
    d = getattr(latency, "describe", None)
    return d() if callable(d) else type(latency).__name__


#: the WARNING of ``expert_parallel`` at tp=1 (:func:`with_expert_parallel`)
EXPERT_PARALLEL_TP1_WARNING = ("expert_parallel with tp=1: one GPU holds every expert, so expert parallelism "
                               "changes nothing (it shards experts over the TP group)")


def with_expert_parallel(r: Scenario, memo: dict | None = None, *, tp: int) -> tuple[Scenario, tuple[str, ...]]:
    """``r`` served with vLLM ``--enable-expert-parallel`` over the TP group: each MoE layer's
    post-MLP all-reduce becomes a dispatch + combine all-to-all (``Roofline.with_expert_parallel``),
    stated in the assumptions.  The one check and change of ``expert_parallel=`` in
    :func:`predict`, :func:`sweep` and :func:`specsim.recommend.recommend`, and the one place of
    its warning: at ``tp=1`` expert parallelism is a no-op (one GPU holds every expert).

    Parameters
    ----------
    r : Scenario
    memo : dict, optional
        A cache for one sweep call: the expert-parallel roofline of a latency model is built once
        (by identity; the objects are kept alive there), so that the sweep's caches keyed on the
        latency object keep hitting across categorical combinations.
    tp : int
        Tensor-parallel degree of the target (the group the experts are sharded over).

    Returns
    -------
    (Scenario, tuple of str)
        The expert-parallel scenario and the warnings a prediction must show
        (:data:`EXPERT_PARALLEL_TP1_WARNING` at ``tp=1``, else none).

    Raises
    ------
    SpecsimValueError
        ``expert_parallel``: a dense target (vLLM's expert parallelism shards routed experts), or
        a latency model without ``with_expert_parallel`` (a measured table already contains its
        collectives); ``tp`` not an integer >= 1.
    """
    tp = int_field("tp", tp)
    if not getattr(r.target, "is_moe", False):
        raise SpecsimValueError("expert_parallel", "applies to MoE targets only (vLLM --enable-expert-parallel "
                                "shards routed experts); this target is dense", getattr(r.target, "name", None))
    if not hasattr(r.latency, "with_expert_parallel"):
        raise SpecsimValueError("expert_parallel", "needs a roofline latency model (a measured table already "
                                "contains its collectives)", type(r.latency).__name__)
    hit = None if memo is None else memo.get(id(r.latency))
    if hit is None:
        hit = (r.latency, r.latency.with_expert_parallel(True))
        if memo is not None:
            memo[id(r.latency)] = hit
    r = replace(r, latency=hit[1], assumptions=r.assumptions + ("expert parallel over the TP group: MoE "
                                                                "all-to-all dispatch + combine instead of the "
                                                                "post-MLP all-reduce",))
    return r, ((EXPERT_PARALLEL_TP1_WARNING,) if tp == 1 else ())


def draft_assumption_warnings(drafter) -> tuple[str, ...]:
    """The assumptions of a drafter that :func:`sweep` shows in ``df.attrs["warnings"]`` (a
    :class:`Prediction` has all of them in ``assumptions``): those saying its structure is (partly)
    DERIVED from the target's dimensions rather than read from ``specsim/data/drafters`` or a
    ``config.json`` (a draft checkpoint not in the catalog and not available here, a target without a
    seed draft for its method, a draft config lacking fields:
    :func:`specsim.drafters.derive_draft_spec`, :func:`specsim.drafters.spec_from_draft_checkpoint`),
    and the cautions about a draft config (an architecture that does not look like a draft head).
    The catalog's own documented assumptions are not repeated."""
    return tuple(a for a in (getattr(drafter, "assumptions", ()) or ())
                 if isinstance(a, str) and ("derived from the target" in a.lower() or a.startswith("caution:")))


def _sweep_latency(r: Scenario, draft_latency, expert_parallel: bool, memo: dict, *, tp: int
                   ) -> tuple[Scenario, tuple[str, ...]]:
    """What :func:`predict` does to ``r.latency`` -- :func:`with_measured_table` (``draft_latency``),
    then :func:`with_expert_parallel` (at ``tp``; its warnings are returned) -- once per (latency
    model, hardware, draft latency) of a sweep call: the wrapped latency objects are reused (kept
    alive in ``memo``), so each categorical combination costs a dict look-up and the caches keyed on
    the latency object keep hitting."""
    key = (id(r.latency), r.hardware_name, id(draft_latency), int(tp))
    hit = memo.get(key)
    if hit is None:
        m = with_measured_table(r, draft_latency, tp=tp)
        hit = memo[key] = ((r.latency, draft_latency), m.latency, m.draft_latency,
                           m.assumptions[len(r.assumptions):])
    if hit[1] is not r.latency or hit[2] is not r.draft_latency or hit[3]:
        r = replace(r, latency=hit[1], draft_latency=hit[2], assumptions=r.assumptions + hit[3])
    return with_expert_parallel(r, memo.setdefault("expert parallel", {}), tp=tp) if expert_parallel else (r, ())


_GRID_SCALARS = ("num_speculative_tokens", "concurrency", "isl", "osl")
_GRID_CATEGORICAL = ("target", "method", "hardware", "tp", "precision", "acceptance", "draft")


def sweep(
    target,
    method=None,
    num_speculative_tokens: Iterable[int] | None = None,
    *,
    hardware="MI300X",
    tp=1,
    precision=None,
    concurrency: Iterable[int] = (1,),
    isl: Iterable[int] | int = 1024,
    osl: Iterable[int] | int = 1024,
    acceptance=None,
    draft=None,
    drafter=None,
    latency=None,
    overhead: SpecOverhead | None = None,
    temperature: float | None = 0.0,
    temperature_assumption: str | None = None,
    drafted_fraction: float = 1.0,
    mean_proposal_tokens: float | None = None,
    speculative_config: str | Mapping | None = None,
    baseline=None,
    baseline_concurrency: int | None = None,
    vllm_version: str | None = None,
    platform: str | None = None,
    draft_latency=None,
    expert_parallel: bool = False,
) -> pd.DataFrame:
    """Evaluate the model over a full grid and return a tidy DataFrame (one row per point).

    Any of ``target``, ``method``, ``hardware``, ``tp``, ``precision``, ``acceptance`` and
    ``draft`` may be a list (categorical axes, looped over); ``drafted_fraction`` and
    ``mean_proposal_tokens`` are as in :func:`predict` (one value for the whole grid:
    ``mean_proposal_tokens`` at most the smallest N swept, or with a schedule the k of every
    concurrency, as :func:`predict` refuses it per point); ``num_speculative_tokens``,
    ``concurrency``, ``isl`` and ``osl`` may be iterables (numeric axes, evaluated as one
    vectorised numpy broadcast per categorical combination; ``num_speculative_tokens`` defaults to
    1..15) of integers, each checked as :func:`predict` checks one value: Python or numpy integers
    (integer arrays included), a bool or a float (``2.0`` too) refused.  ``acceptance`` may be a dict ``{label: Acceptance}`` (or ``{label: rate}``) or a list of
    :class:`~specsim.acceptance.Acceptance` to sweep several profiles; a list of plain numbers is ONE
    profile of per-position CUMULATIVE rates, as :func:`predict` and ``recommend`` read it.
    ``speculative_config`` (as in :func:`predict`) fixes method and N; with a
    ``num_speculative_tokens_per_batch_size`` schedule each concurrency row models the schedule's
    k at that batch size (:func:`scheduled_n`; column ``num_speculative_tokens_source`` =
    "schedule", ``configured_num_speculative_tokens`` = the config's N).  ``baseline`` and
    ``baseline_concurrency`` anchor the target's step time as in :func:`predict` (one deployment:
    a single target, hardware, TP and precision; with several concurrencies the measured one must be
    known -- ``baseline_concurrency`` or the baseline's own ``concurrency`` -- and a baseline that
    records its concurrency accepts other concurrencies only with ``baseline_concurrency``); the
    factor is solved once per categorical combination.

    Parameters
    ----------
    latency : LatencyModel, str or os.PathLike, optional
        As :func:`predict`: a roofline, or a measured table of the target's forwards
        (:class:`specsim.latency.MeasuredLatency`; batch, q, context -> seconds), which times the
        decode and verification steps of every grid point (a point outside the table is refused)
        while prefills and -- without ``draft_latency`` -- draft passes come from each hardware's
        stack calibration (:func:`with_measured_table`), exactly as :func:`predict` does.  A path
        is read once, as :func:`predict` reads it (:func:`latency_from_path`, at the one ``tp``
        swept: a path with several ``tp`` values is refused).
    draft_latency : LatencyModel, optional
        Times the draft passes when ``latency`` is a measured table of the target, as in
        :func:`predict`.
    expert_parallel : bool, default False
        vLLM ``--enable-expert-parallel`` over the TP group, as in :func:`predict`: each MoE
        layer's post-MLP all-reduce becomes a dispatch + combine all-to-all
        (:func:`with_expert_parallel`; once per latency model, not per grid point).  Every target
        swept must be MoE.  At ``tp=1`` it is a no-op: :func:`predict`'s warning
        (:data:`EXPERT_PARALLEL_TP1_WARNING`) is in ``df.attrs["warnings"]``, once.
    vllm_version, platform : str, optional
        The vLLM release (``"0.32.0"``) and platform (``"ROCm 7.2"``, ``"CUDA 12.8"``) you will run.
        When they differ from the software stack a swept hardware's shipped calibration was fitted
        on, the warning :func:`predict` puts in ``Prediction.warnings``
        (:func:`specsim.calibration.stack_mismatch`) is in ``df.attrs["warnings"]`` -- one per
        distinct message (i.e. per calibration), not per row; ``specsim sweep`` prints it on
        stderr.

    Returns
    -------
    pandas.DataFrame
        Columns: the grid axes (``target, method, hardware, tp, precision, acceptance,
        num_speculative_tokens, concurrency, isl, osl``; ``draft``, the drafter's name, when
        several drafts are swept; ``acceptance`` is the profile's label --
        the key of an ``acceptance`` dict, else ``Acceptance.label``; when several profiles are
        swept, an unlabelled one (a number, a list of rates, an ``Acceptance`` without a label) is
        labelled by its position in the list, ``"acceptance[0]"``, ``"acceptance[1]"``, ...; None
        only for a single unlabelled profile) and the outputs of :class:`Prediction` (``throughput_ratio, mal,
        acceptance_rate, t_base_s, t_step_s, t_draft_s, t_verify_s, t_overhead_s, t_host_s,
        t_prefill_s, output_tok_per_s, baseline_output_tok_per_s, tpot_s, baseline_tpot_s,
        speedup_bound, latency_calibrated, acceptance_extrapolated``, same units and meanings;
        ``acceptance_rate`` is ``(mal - 1) / N``, the mean CUMULATIVE per-position rate, see
        :class:`Prediction`), ``mal_per_drafted_step`` and ``accepted_per_proposed_token`` (vLLM's
        own MAL and acceptance rate, per DRAFTED step: the :class:`Prediction` properties; equal to
        ``mal`` / ``acceptance_rate`` when every step drafts N tokens; NaN at N = 0),
        ``drafted_fraction`` and ``mean_proposal_tokens`` (the partial-drafting inputs the row was
        predicted with, as :class:`Prediction` records them: ``mean_proposal_tokens`` NaN -- null in
        JSON, empty in CSV -- when not given, i.e. every drafted step proposes N),
        ``t_prefill_spec_s`` (seconds: the speculative arm's prefill of one
        request, ``t_prefill_s`` plus the drafter's pass over the prompt where it has one;
        ``specsim.engine.evaluate``), the
        health checks ``break_even_mal, verify_cost_in_baseline_steps,
        verification_cost_in_baseline_steps`` (:func:`health_terms`), ``target_time_scale`` (1
        unless anchored on a baseline), ``host_time_scale`` (the anchor's factor on the host-side
        seconds: 1 unless the baseline is faster than the calibration's host terms allow, then
        warned) and ``kv_cache_fits``: False where the KV cache of
        concurrency x (ISL + OSL) tokens does not fit next to the weights (vLLM would queue or
        preempt; :func:`predict` warns there, and so does ``df.attrs["warnings"]``, once:
        :func:`kv_overflow_warning`).  ``df.attrs["warnings"]``: tuple of str, the
        warnings that hold for the whole sweep (the software-stack mismatch above, ``expert_parallel``
        at ``tp=1``, swept N beyond the positions a measured acceptance profile covers, rows below
        break-even or where the speculative overhead dominates, the concurrencies whose KV cache does
        not fit -- per combination, hardware, TP and ISL + OSL, with the largest concurrency that fits,
        in :func:`predict`'s words, a draft whose structure is derived from the target -- a checkpoint
        not in the catalog, a target without a seed draft -- as :func:`draft_assumption_warnings`
        selects it from the assumptions :func:`predict` lists; one per distinct message; empty when
        none).  ``df.attrs["acceptance_extrapolated_n"]``: tuple of the swept N whose rows have
        ``acceptance_extrapolated`` True (their acceptance comes from the profile's parametric fit).

    Warns
    -----
    UserWarning
        When some swept N lie beyond the measured acceptance positions (the message is also in
        ``df.attrs["warnings"]``; :func:`extrapolation_warning`).

    Raises
    ------
    SpecsimValueError
        As :func:`predict`, for any grid value (TP not dividing the attention heads, ISL + OSL
        beyond the context length, weights that do not fit at this TP, a grid point outside a
        measured latency table -- an ISL / OSL whose context ISL + OSL/2 it does not cover is
        refused before any evaluation, :func:`check_table_context`); ``expert_parallel`` with a
        dense target or a latency model without an expert-parallel variant (a measured table);
        an axis value that is not an integer (a bool or a float, ``2.0`` included, as :func:`predict`
        refuses it) or is >= 2**63 (named by its axis, e.g. ``concurrency``); a ``latency`` path that is no
        readable CSV of a measured table, or given with several ``tp`` values; a value repeated on a
        grid axis (named by its axis: ``concurrency=[4, 4]``, ``hardware=["H100", "H100 SXM"]`` --
        one accelerator --, a ``precision`` None beside the model's serving precision), whose rows would
        be duplicates; several acceptance
        profiles sharing a label (``acceptance``: their rows could not be told apart);
        ``mean_proposal_tokens`` above the smallest N swept (or a schedule's k at a concurrency swept),
        which vLLM's ``num_draft_tokens / num_drafts`` never exceeds;
        ``vllm_version`` not a version (``MAJOR.MINOR[...]``) or ``platform`` not naming a vLLM
        platform (or giving a version that is not ``MAJOR.MINOR[...]``).
    """
    def as_list(v):
        if isinstance(v, (list, tuple)):
            return list(v)
        return [v]

    if isinstance(acceptance, Mapping):
        acc_items = list(acceptance.items())
    elif _is_rate_list(acceptance):  # ONE profile of per-position cumulative rates, as predict() reads it
        acc_items = [(None, acceptance)]
    else:
        acc_items = [(None, a) for a in as_list(acceptance)]
    acc_items = _labelled_profiles(acc_items)
    if num_speculative_tokens is None:
        num_speculative_tokens = range(1, 16) if speculative_config is None else \
            [parse_speculative_config(speculative_config).num_speculative_tokens]
    # each value under predict's rules (int_field): integers, bool and floats (2.0 too) refused; lists, not
    # arrays, of Python values: np.asarray([1, 2**63]) is a float array, and int_values refuses >= 2**63 by name
    def axis(name, v):
        return int_values(name, v if isinstance(v, np.ndarray) or np.isscalar(v) else list(v))

    ns = axis("num_speculative_tokens", num_speculative_tokens)
    cs = axis("concurrency", concurrency)
    isls = axis("isl", isl)
    osls = axis("osl", osl)
    for name, arr in (("num_speculative_tokens", ns), ("concurrency", cs), ("isl", isls), ("osl", osls)):
        if arr.size == 0:
            raise SpecsimValueError(name, "must not be empty: give at least one value (integers >= 1)", [])
        distinct_values(name, arr)
    check_osl(osls)
    for name, v in (("target", target), ("method", method), ("hardware", hardware), ("tp", tp),
                    ("precision", precision), ("draft", draft)):
        if not as_list(v):
            raise SpecsimValueError(name, "must not be empty: give one value, or a list of at least one", v)
    if not acc_items:
        raise SpecsimValueError("acceptance", "must not be empty: give an Acceptance, a list of them, a "
                                "{label: Acceptance} dict with at least one entry, or None (the shipped profile)",
                                acceptance)
    if speculative_config is not None and len(ns) != 1:
        raise SpecsimValueError("num_speculative_tokens", "speculative_config fixes N (its num_speculative_tokens); "
                                "sweep N without a speculative_config", ns.tolist())
    # the numeric axes as orthogonal arrays: evaluate keeps every term in the shape of what it
    # depends on, and only the output columns are materialised (rows in meshgrid "ij" order)
    shape = (len(ns), len(cs), len(isls), len(osls))
    N, C, I, O = (ns.reshape(-1, 1, 1, 1), cs.reshape(1, -1, 1, 1), isls.reshape(1, 1, -1, 1),
                  osls.reshape(1, 1, 1, -1))
    b = as_baseline(baseline)
    if b is None and baseline_concurrency is not None:
        raise SpecsimValueError("baseline_concurrency", "applies only with baseline=", baseline_concurrency)
    if b is not None:
        for name, v in (("target", target), ("hardware", hardware), ("tp", tp), ("precision", precision)):
            if len(as_list(v)) != 1:
                raise SpecsimValueError(name, "a measured baseline anchors ONE deployment (target, hardware, tp, "
                                        "precision): sweep one value, or one sweep per deployment", as_list(v))
        point = anchor_point(b, baseline_concurrency, cs, isls, osls)
    stack_mismatch(None, vllm_version=vllm_version, platform=platform)  # refuses a bad version / platform now
    latency = latency_from_path(latency, tp)  # read once, not per combination
    _check_partial(drafted_fraction, mean_proposal_tokens)  # once, not per combination
    stack_warnings: dict[str, None] = {}
    shared_latencies: dict = {}
    combos, fresh = [], []
    loaded = _SweepObjects(drafter=drafter, latency=latency)
    shared_plans: dict = {}
    shared_fits: dict = {}
    shared_overheads: dict = {}
    shared_extrapolated: dict = {}
    kv_overflow: dict = {}
    draft_items = _labelled_drafts(as_list(draft))
    seen_combos: dict = {}
    for at, (tgt, meth, hw, tp_, prec, (acc_label, acc), (drf_label, drf)) in zip(
        itertools.product(*(range(len(as_list(v))) for v in (target, method, hardware, tp, precision)),
                          range(len(acc_items)), range(len(draft_items))),
        itertools.product(as_list(target), as_list(method), as_list(hardware), as_list(tp), as_list(precision),
                          acc_items, draft_items),
    ):
        r = loaded.resolve(
            tgt, meth, None if speculative_config is None or len(ns) != 1 else int(ns[0]), hardware=hw,
            precision=prec, acceptance=acc, draft=drf,
            temperature=temperature, temperature_assumption=temperature_assumption,
            speculative_config=speculative_config,
        )
        tp_i = int_field("tp", tp_)
        _check_distinct_combination(seen_combos, at, (tgt, meth, hw, tp_, prec), r, tp_i, acc_label, drf_label)
        r, ep_warn = _sweep_latency(r, draft_latency, expert_parallel, shared_latencies, tp=tp_i)
        check_table_context(r, isl=I, osl=O)
        if vllm_version or platform:
            stack_warnings.update(dict.fromkeys(_stack_warning(r.latency, vllm_version, platform)))
        stack_warnings.update(dict.fromkeys(ep_warn + table_scale_warning(r) + draft_assumption_warnings(r.drafter)))
        if b is None:
            stack_warnings.update(dict.fromkeys(allreduce_prior_warning(r.latency, tp_i)))
        stack_warnings.update(dict.fromkeys(partial_drafting_warning(r, drafted_fraction, mean_proposal_tokens)))
        kv_fits, max_fit = _kv_cache_fits_axes(r, tp_i, ns, cs, isls, osls, shared_fits)
        if not kv_fits.all():  # predict's KV-cache warning, once for the sweep (kv_overflow_warning)
            label = f"{r.target.name} ({precision_label(r.target, r.precision)}), {r.method}" + \
                ("" if drf_label is None else f", draft {drf_label}")
            _kv_overflow_groups(kv_overflow, label, r, tp_i, ns, cs, isls, osls, max_fit)
        okey = (id(r.latency), id(r.target), r.hardware_name)
        if okey not in shared_overheads:  # depends on the latency model, target and hardware only
            shared_overheads[okey] = ((r.latency, r.target),
                                      resolve_overhead(r, overhead, latency_given=latency is not None)[0])
        ov = shared_overheads[okey][1]
        n_used = scheduled_n(r, cs).reshape(C.shape) if r.speculative_config is not None else N
        _check_proposal_within_n(mean_proposal_tokens, n_used, cs if r.speculative_config is not None else None)
        _check_proposal_covers_acceptance(r.acceptance, n_used, mean_proposal_tokens)
        if b is not None:
            k, anchor_rec = anchor_target_time(r, b, tp=tp_i, point=point, overhead=ov)
            r = replace(r, target_time_scale=k)
            ov = scaled_host_overhead(ov, anchor_rec["host_time_scale"])
            stack_warnings.update(dict.fromkeys(anchor_factor_warning(anchor_rec) + anchor_scope_warning(anchor_rec)))
        with _precision_refusal_explained(r):
            out = _evaluate_shared(r, n_used, C, I, O, tp_i, ov, shared_plans, drafted_fraction=drafted_fraction,
                                   mean_proposal_tokens=mean_proposal_tokens)
        cols: dict[str, Any] = {
            "target": r.target.name, "method": r.method, "hardware": r.hardware_name, "tp": tp_i,
            "precision": precision_label(r.target, r.precision),
            "acceptance": acc_label if acc_label is not None else getattr(r.acceptance, "label", None),
        }
        if drf_label is not None:  # the drafts swept, told apart (one draft: the method names it)
            cols["draft"] = drf_label
        cols.update(out)
        health = health_terms(out, C, O)
        cols.update(health)
        # results computed here (not arrays a user's latency model or drafter may hold)
        fresh.append(set(health) | {"kv_cache_fits"} | (set(out) if _uses_plan(r) else set()))
        cols["target_time_scale"] = float(r.target_time_scale)
        cols["host_time_scale"] = float(anchor_rec["host_time_scale"]) if b is not None else 1.0
        n_nat = np.asarray(n_used)
        uniq, inv = np.unique(n_nat, return_inverse=True)
        ext = np.array([_extrapolated(shared_extrapolated, r.acceptance, int(k)) if k > 0 else False
                        for k in uniq.tolist()], dtype=bool)
        cols["acceptance_extrapolated"] = ext[inv.reshape(-1)].reshape(n_nat.shape)
        if ext.any():
            stack_warnings.setdefault(extrapolation_warning(r.acceptance, uniq[ext].tolist(), cols["acceptance"]))
        dominant = overhead_dominant_concurrencies(out, C, shape)
        if dominant:
            stack_warnings.setdefault(
                overhead_dominant_warning(dominant, f"{r.target.name}, {r.method} on {r.hardware_name}"))
        if r.speculative_config is not None:
            cols["num_speculative_tokens_source"] = ("schedule" if r.speculative_config.is_dynamic
                                                     else "speculative_config")
            cols["configured_num_speculative_tokens"] = N
        cols["latency_calibrated"] = bool(getattr(r.latency, "calibrated", False))
        cols["kv_cache_fits"] = kv_fits
        combos.append(cols)
    df = _sweep_frame(combos, shape, fresh)
    # vLLM's own figures per DRAFTED step (Prediction.mal_per_drafted_step / accepted_per_proposed_token)
    mal_minus_1 = df["mal"].to_numpy(float) - 1.0
    proposed = (np.full(len(df), float(mean_proposal_tokens)) if mean_proposal_tokens is not None
                else df["num_speculative_tokens"].to_numpy(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        df["mal_per_drafted_step"] = np.where(proposed > 0, 1.0 + mal_minus_1 / drafted_fraction, np.nan)
        df["accepted_per_proposed_token"] = np.where(proposed > 0, mal_minus_1 / (drafted_fraction * proposed),
                                                     np.nan)
    # the partial-drafting inputs of every row, as Prediction.to_dict() has them (NaN: mean_proposal_tokens not given)
    df["drafted_fraction"] = float(drafted_fraction)
    df["mean_proposal_tokens"] = np.nan if mean_proposal_tokens is None else float(mean_proposal_tokens)
    below = below_break_even_warning(df)
    if below is not None:
        stack_warnings.setdefault(below)
    kv_warning = kv_overflow_warning(kv_overflow)
    if kv_warning is not None:
        stack_warnings.setdefault(kv_warning)
    short = short_output_warning(df["osl"].to_numpy(float), df["mal"].to_numpy(float), " in this sweep") \
        if len(df) else None
    if short is not None:  # predict warns per point (prediction_warnings)
        stack_warnings.setdefault(short)
    df.attrs["warnings"] = tuple(stack_warnings)
    ext_n = sorted({int(n) for n in df.loc[df["acceptance_extrapolated"], "num_speculative_tokens"]}) \
        if "acceptance_extrapolated" in df else []
    df.attrs["acceptance_extrapolated_n"] = tuple(ext_n)
    for w in df.attrs["warnings"]:
        if w.startswith(_EXTRAPOLATION_PREFIX):
            warnings.warn(w, UserWarning, stacklevel=2)
    return df


def _check_distinct_combination(seen: dict, at: tuple, given: tuple, r: Scenario, tp: int, acc_label,
                                drf_label) -> None:
    """Refuse a :func:`sweep` combination whose rows would repeat an earlier one's: two values of a
    categorical axis (``target``, ``method``, ``hardware``, ``tp``, ``precision``) that are the same
    value, as given (``hardware=["MI300X", "MI300X"]``) or once resolved (``"H100"`` and ``"H100
    SXM"``, a precision None and the model's serving precision) -- the labels of the rows.

    ``seen``: the combinations so far (row labels -> position ``at`` on the axes and the ``given``
    values); ``at``: the position of this one (``target, method, hardware, tp, precision``, then the
    acceptance profile and the draft).

    Raises
    ------
    SpecsimValueError
        The first axis whose two values differ in position, with both values and what they resolve to.
    """
    labels = (r.target.name, r.method, r.hardware_name, tp, precision_label(r.target, r.precision))
    key = labels + (acc_label if acc_label is not None else getattr(r.acceptance, "label", None), drf_label)
    if key not in seen:
        seen[key] = (at, given)
        return
    (at0, given0) = seen[key]
    for i, axis in enumerate(("target", "method", "hardware", "tp", "precision")):
        if at0[i] != at[i]:
            a, b = given0[i], given[i]
            same = f"{a!r} twice" if a == b else f"{a!r} and {b!r}, the same {axis} ({labels[i]})"
            where = f" for target {labels[0]}" if axis == "precision" else ""
            raise SpecsimValueError(axis, f"lists {same}{where}: {REPEAT_RULE}", a if a == b else [a, b])


def _labelled_drafts(drafts: list) -> list:
    """The ``(label, draft)`` pairs of a sweep's ``draft`` values: label None for one draft; with
    several, each is labelled as given (a name or path as written, a model spec by its ``name``) for
    the ``draft`` column.

    Raises
    ------
    SpecsimValueError
        ``draft``: two drafts with the same label (two checkpoint directories of one name, two specs
        of one name): their rows could not be told apart.
    """
    if len(drafts) < 2:
        return [(None, d) for d in drafts]
    labels = [os.fspath(d) if isinstance(d, (str, os.PathLike)) else (getattr(d, "name", None) or repr(d))
              for d in drafts]
    dup = sorted({lab for lab in labels if labels.count(lab) > 1})
    if dup:
        raise SpecsimValueError("draft", f"{len(drafts)} drafts are swept but some share a label (a path as given, "
                                "else the model's name), so their rows in the draft column could not be told apart: "
                                "give paths that differ or models of different names", dup)
    return list(zip(labels, drafts))


def _labelled_profiles(items: list) -> list:
    """The ``(label, profile)`` pairs of a sweep's ``acceptance``, each told apart by its label.

    One profile keeps its label (a dict key, else ``Acceptance.label``; None when it has none).
    With several, an unlabelled one -- a number, a list of rates, an ``Acceptance`` without a label
    -- is labelled by its position in the argument, ``"acceptance[i]"`` (a field name as specsim's
    errors spell it): without it their rows all read None in the ``acceptance`` column and could not
    be told apart (a new-user trial: ``[Acceptance.constant(0.7), Acceptance.constant(0.5)]`` gave
    ``[None, None]``).

    Raises
    ------
    SpecsimValueError
        ``acceptance``: two profiles with the same label (their rows would mix).
    """
    if len(items) < 2:
        return items
    out = []
    for i, (label, acc) in enumerate(items):
        if label is None:
            label = getattr(acc, "label", None) if isinstance(acc, Acceptance) else None
        out.append((f"acceptance[{i}]" if label is None else label, acc))
    labels = [label for label, _ in out]
    dup = list(dict.fromkeys(lab for lab in labels if labels.count(lab) > 1))
    if dup:
        raise SpecsimValueError("acceptance", f"{len(out)} profiles are swept but some share a label, so their rows "
                                "could not be told apart: give each a distinct label (the dict form {label: "
                                "Acceptance}, or Acceptance label=)", dup)
    return out


#: start of the warning :func:`sweep` / :func:`best_n` give for N beyond the measured acceptance
_EXTRAPOLATION_PREFIX = "acceptance extrapolated"


def _is_rate_list(v) -> bool:
    """Whether ``v`` is a non-empty list / tuple of plain numbers (per-position rates), not a list of
    profiles."""
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(
        isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in v)


def extrapolation_warning(acceptance, ns, label=None) -> str:
    """The warning of a sweep whose N values ``ns`` reach beyond the positions ``acceptance`` measured
    (:func:`specsim.engine.acceptance_extrapolated`): their acceptance, hence their ratio, comes from the
    profile's parametric fit, not from measurements."""
    m = int(getattr(acceptance, "n_measured", 0) or 0)
    ns = [int(n) for n in ns]
    shown = ", ".join(map(str, ns)) if len(ns) <= 6 else f"{ns[0]}..{ns[-1]} ({len(ns)} values)"
    prof = f" (profile {label})" if label else ""
    return (f"{_EXTRAPOLATION_PREFIX} beyond the {m} measured position(s){prof} for N = {shown}: the predictions "
            "there (acceptance_extrapolated=True) rest on the profile's parametric fit, not on measurements; measure "
            "acceptance at these N (or sweep N <= " + str(m) + ") before relying on them")


def _extrapolated(shared: dict, acceptance, n: int) -> bool:
    """:func:`specsim.engine.acceptance_extrapolated`, once per (profile object, N) in a sweep call."""
    key = (id(acceptance), n)
    if key not in shared:
        shared[key] = (acceptance, acceptance_extrapolated(acceptance, n))
    return shared[key][1]


class _SweepObjects:
    """:func:`resolve_inputs` for the categorical combinations of one :func:`sweep` call, reusing
    what it loaded: a target's :class:`ModelSpec` (by name), the drafter of a (target, method,
    draft) and the default latency model of a (hardware, target).  Each is first built by a plain
    ``resolve_inputs`` call (so its checks and errors are the ones a single call raises) and then
    passed to the next calls as an object: ``resolve_inputs`` takes it as given, which is what it
    would have built again (a drafter passed in skips the draft-vs-target check, already passed
    for that pair)."""

    def __init__(self, *, drafter, latency):
        self.drafter, self.latency = drafter, latency
        self.targets: dict = {}
        self.drafters: dict = {}
        self.latencies: dict = {}

    def resolve(self, tgt, meth, n, *, hardware, draft, speculative_config, **kw) -> Scenario:
        key_t = tgt if isinstance(tgt, str) else None
        key_d = (key_t, meth, draft) if key_t is not None and isinstance(meth, str) and speculative_config is None \
            and (draft is None or isinstance(draft, str)) else None
        key_l = (key_t, hardware) if key_t is not None and isinstance(hardware, str) else None
        drafter = self.drafter if self.drafter is not None else self.drafters.get(key_d)
        latency = self.latency if self.latency is not None else self.latencies.get(key_l)
        r = resolve_inputs(self.targets.get(key_t, tgt), meth, n, hardware=hardware, draft=draft,
                           drafter=drafter, latency=latency, speculative_config=speculative_config, **kw)
        if key_t is not None:
            self.targets.setdefault(key_t, r.target)
        if key_d is not None and self.drafter is None:
            self.drafters.setdefault(key_d, r.drafter)
        if key_l is not None and self.latency is None:
            self.latencies.setdefault(key_l, r.latency)
        return r


def _kv_cache_fits_axes(r: Scenario, tp: int, ns, cs, isls, osls, shared: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per grid point: does the KV cache of C x (ISL + OSL) tokens fit (see :func:`check_feasibility`)?
    Bool array (N, C, ISL, OSL) on the orthogonal sweep axes, and the largest concurrency that fits,
    shape (N, 1, ISL, OSL) (inf where no memory budget applies: off-GPU, a model without sizes);
    raises what :func:`check_feasibility` raises, for any grid value (:func:`_max_fit_axes`).
    Within one sweep call the budgets of a (target, drafter, hardware, precision, config, TP) are
    computed once (``shared``, objects compared by identity and kept alive there); they do not
    depend on the acceptance."""
    pinned = (r.target, r.drafter, r.latency, r.speculative_config)
    key = tuple(id(o) for o in pinned) + (r.precision, tp)
    hit = shared.get(key)
    if hit is None:
        hit = shared[key] = (pinned, _max_fit_axes(r, tp, ns, isls, osls))
    return cs.reshape(1, -1, 1, 1) <= hit[1], hit[1]


def _kv_overflow_groups(groups: dict, label: str, r: Scenario, tp: int, ns, cs, isls, osls, max_fit) -> None:
    """Add to ``groups`` (:func:`kv_overflow_warning`'s argument) the concurrencies of one sweep
    combination whose KV cache does not fit: per distinct (ISL + OSL, largest concurrency that fits),
    those of ``cs`` beyond it, with the N they hold at (``""`` when every N of ``ns``)."""
    hw = getattr(getattr(r.latency, "hardware", None), "name", None) or r.hardware_name
    fit = np.broadcast_to(max_fit, (len(ns), 1, len(isls), len(osls)))[:, 0]  # (N, ISL, OSL)
    tokens = isls.reshape(-1, 1) + osls.reshape(1, -1)
    per: dict = {}
    for i, k, l in zip(*np.nonzero(np.isfinite(fit) & (fit < cs.max()))):
        per.setdefault((int(tokens[k, l]), int(fit[i, k, l])), set()).add(int(ns[i]))
    all_n = {int(n) for n in ns}
    for (tok, f), n_set in sorted(per.items()):
        key = (label, hw, tp, tok, f, "" if n_set == all_n else ", ".join(map(str, sorted(n_set))))
        groups.setdefault(key, set()).update(int(c) for c in cs[cs > f])


def _max_fit_axes(r: Scenario, tp: int, ns, isls, osls) -> np.ndarray:
    """Largest concurrency whose KV cache fits, shape (N, 1, ISL, OSL): :func:`_check_deployment`
    per distinct (N, ISL + OSL) pair, N-major over the sorted pairs (the order the errors come in).

    The budget records N only (``specsim.memory.memory_budget``: vLLM's profiling run drafts one
    dummy token whatever N is), so it is computed at the smallest and the largest N; when the two
    agree they stand for every N in between (only the N-beyond-the-context refusal depends on N,
    and it is raised where the loop would raise it), otherwise every N is computed."""
    lens = isls.reshape(-1, 1) + osls.reshape(1, -1)
    len_u = np.unique(lens.astype(np.int64))
    n_u = np.unique(ns.astype(np.int64))

    def fits_at(n_) -> np.ndarray:
        out = np.full(len(len_u), np.inf)
        for j, len_ in enumerate(len_u.tolist()):
            mb = _check_deployment(replace(r, num_speculative_tokens=int(n_)), tp=tp, isl=len_, osl=0)
            if mb is not None:
                out[j] = mb.max_concurrency_fit
        return out

    rows = [fits_at(n_u[0])]
    if len(n_u) > 1:
        max_pos = getattr(r.target, "max_position_embeddings", None)
        over = [int(n_) for n_ in n_u[1:] if max_pos and n_ > max_pos]
        if over:  # raises the refusal the N-major loop raises first
            _check_deployment(replace(r, num_speculative_tokens=over[0]), tp=tp, isl=int(len_u[0]), osl=0)
        last = fits_at(n_u[-1])
        if np.array_equal(rows[0], last):
            rows = rows * len(n_u)
        else:
            rows += [fits_at(n_) for n_ in n_u[1:-1]] + [last]
    table = np.stack(rows)  # (distinct N, distinct ISL + OSL)
    fit = table[np.searchsorted(n_u, ns)][:, np.searchsorted(len_u, lens.reshape(-1))]
    return fit.reshape(len(ns), 1, len(isls), len(osls))


def _sweep_frame(combos: list[dict], shape: tuple, fresh: list[set]) -> pd.DataFrame:
    """One DataFrame of the combinations' columns (each value broadcast to ``shape``, rows in C
    order), written once into its final arrays: the float columns into one block, the others
    inserted.  Falls back to one frame per combination and ``pd.concat`` when the combinations'
    columns do not share names and kinds.  ``fresh``: per combination, the columns whose arrays
    were computed by the sweep itself (a one-combination frame may keep those as they are)."""
    per = int(np.prod(shape))
    names = list(combos[0])
    kinds = _column_kinds(combos[0], names)
    if kinds is None or any(list(c) != names or _column_kinds(c, names) != kinds for c in combos[1:]):
        return _sweep_frame_concat(combos, shape)
    if len(combos) == 1 and per >= _OWN_COLUMNS_MIN_ROWS:
        return _sweep_frame_one(combos[0], shape, names, kinds, fresh[0])
    total = per * len(combos)
    fnames = [k for k in names if kinds[k] == "f"]
    block = np.empty((len(fnames), total))
    for j, cols in enumerate(combos):
        sl = slice(j * per, (j + 1) * per)
        for i, k in enumerate(fnames):
            np.copyto(block[i, sl].reshape(shape), cols[k])
    df = pd.DataFrame(block.T, columns=fnames, copy=False)
    for loc, k in enumerate(names):
        kind = kinds[k]
        if kind == "f":
            continue
        vals = [cols[k] for cols in combos]
        if kind == "scalar":
            first = vals[0]
            if all(type(v) is type(first) and v == first for v in vals):
                df.insert(loc, k, first)  # one scalar: pandas infers the dtype it does per combination
            else:
                df.insert(loc, k, np.repeat(np.array(vals, dtype=object if isinstance(first, str) else None), per))
        else:
            arr = np.empty(total, dtype=kind)
            for j, v in enumerate(vals):
                np.copyto(arr[j * per:(j + 1) * per].reshape(shape), v)
            df.insert(loc, k, pd.Series(arr, index=df.index, copy=False))  # a Series: inserted without a copy
    return df


#: rows from which a one-combination sweep keeps each column in its own array (no block copy)
_OWN_COLUMNS_MIN_ROWS = 65536


def _sweep_frame_one(cols: dict, shape: tuple, names, kinds, fresh: set) -> pd.DataFrame:
    """The frame of ONE combination on a big grid: a result array that already holds the whole
    grid (computed by the sweep, ``fresh``: a new contiguous array of ``shape`` that nothing else
    refers to) becomes its column as it is; the others are broadcast into new arrays; the scalar
    columns are inserted."""
    arrays = {}
    for k in names:
        if kinds[k] == "scalar":
            continue
        v = cols[k]
        if (k in fresh and isinstance(v, np.ndarray) and v.shape == shape and v.base is None
                and v.flags.c_contiguous and v.flags.writeable):
            arrays[k] = v.reshape(-1)
        else:
            arr = np.empty(shape, dtype=np.float64 if kinds[k] == "f" else kinds[k])
            np.copyto(arr, v)
            arrays[k] = arr.reshape(-1)
    df = pd.DataFrame(arrays, copy=False)
    for loc, k in enumerate(names):
        if kinds[k] == "scalar":
            df.insert(loc, k, cols[k])
    return df


def _column_kinds(cols: dict, names) -> dict | None:
    """Per column: "f" (float64, array or float), "scalar" (str / None / int / bool, one value per
    combination) or the numpy dtype of an integer / bool array; None when a column is none of these."""
    out = {}
    for k in names:
        v = cols[k]
        if isinstance(v, np.ndarray):
            if v.dtype == np.float64:
                out[k] = "f"
            elif v.dtype.kind in "iub":
                out[k] = v.dtype.str
            else:
                return None
        elif isinstance(v, (float, np.floating)):
            out[k] = "f"
        elif v is None or type(v) in (str, int, bool):
            out[k] = "scalar"
        else:
            return None
    return out


def _sweep_frame_concat(combos: list[dict], shape: tuple) -> pd.DataFrame:
    """The general (slower) frame: one DataFrame per combination, concatenated."""
    frames = []
    for cols in combos:
        df = pd.DataFrame({k: np.broadcast_to(v, shape).reshape(-1) for k, v in cols.items()
                           if isinstance(v, np.ndarray)})
        for loc, (k, v) in enumerate(cols.items()):
            if not isinstance(v, np.ndarray):
                df.insert(loc, k, v)
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


#: the keywords :func:`best_n` passes on to :func:`sweep` (``num_speculative_tokens`` is its ``n_values``)
_BEST_N_SWEEP_KEYWORDS = frozenset(inspect.signature(sweep).parameters) - {"target", "method", "num_speculative_tokens"}

#: best_n's refusal of several values on an axis other than N
_BEST_N_ONE_VALUE = ("best_n finds the best N of ONE deployment and acceptance profile, but several values were given, "
                     "whose rows would mix into one curve and one argmax: give one value, and call best_n once per "
                     "value (or sweep() them and pick N per group)")


def _check_one_deployment(target, method, kwargs: Mapping) -> None:
    """Refuse, before sweeping, a :func:`best_n` call with several values on a categorical axis
    (``target``, ``method``, ``hardware``, ``tp``, ``precision``, ``draft``) or several acceptance
    profiles (a dict of more than one, or a list of profiles; a list of plain numbers is ONE profile
    of cumulative rates, as :func:`sweep` reads it).  Several values on a numeric axis are refused
    after the sweep, by the column that varies."""
    axes = {"target": target, "method": method, **{k: kwargs[k] for k in ("hardware", "tp", "precision", "draft")
                                                    if k in kwargs}}
    for name, v in axes.items():
        if isinstance(v, (list, tuple)) and len(v) > 1:
            raise SpecsimValueError(name, _BEST_N_ONE_VALUE, list(v))
    acc = kwargs.get("acceptance")
    if isinstance(acc, Mapping) and len(acc) > 1:
        raise SpecsimValueError("acceptance", _BEST_N_ONE_VALUE + ", e.g. {label: best_n(..., acceptance=a) for "
                                "label, a in profiles.items()}", list(acc))
    if isinstance(acc, (list, tuple)) and len(acc) > 1 and not _is_rate_list(acc):
        raise SpecsimValueError("acceptance", _BEST_N_ONE_VALUE + " (a list of plain numbers is ONE profile of "
                                "per-position cumulative rates)", f"{len(acc)} profiles")


def best_n(
    target,
    method=None,
    *,
    n_values: Iterable[int] = range(1, 16),
    flat_tolerance: float = 0.02,
    **kwargs,
) -> tuple[int, pd.DataFrame]:
    """Proposal length N that maximises the predicted throughput ratio.

    Parameters
    ----------
    target, method, **kwargs
        As :func:`sweep` (one value per categorical axis; ``concurrency`` a single int).
    n_values : iterable of int
        Candidate proposal lengths: integers >= 1, as :func:`sweep` takes ``num_speculative_tokens``
        (a bool or a float is refused; repeats are dropped).
    flat_tolerance : float
        Relative tolerance defining the near-optimal set: the returned curve's ``near_best``
        column flags every N within this fraction of the best ratio (flat optima are common);
        must lie in [0, 1].

    Returns
    -------
    best : int
        The argmax N (smallest N on ties).
    curve : pandas.DataFrame
        The whole curve (``sweep`` columns + ``near_best``), so callers report the curve, not
        only the argmax.  ``curve.attrs``: the sweep's (``warnings``,
        ``acceptance_extrapolated_n``) plus ``best_n_extrapolated`` (bool: the best N lies
        beyond the measured acceptance positions; its warning is then appended to
        ``warnings``).

    Warns
    -----
    UserWarning
        The sweep's extrapolation warning (:func:`sweep`) and, when the best N itself has
        ``acceptance_extrapolated``, one naming it.

    Raises
    ------
    TypeError
        A keyword that neither best_n nor :func:`sweep` takes (``best_n() got an unexpected keyword
        argument ...``, as Python says for :func:`predict` and :func:`sweep`).
    SpecsimValueError
        ``flat_tolerance`` outside [0, 1], ``n_values`` None, ``num_speculative_tokens`` given (use ``n_values``), more
        than one value on an axis other than N (named by the axis: ``hardware``, ``concurrency``, ...,
        and ``acceptance`` for several profiles -- a dict of more than one, or a list of profiles;
        a list of plain numbers is ONE profile of cumulative rates), and everything :func:`sweep`
        refuses.
    """
    if "num_speculative_tokens" in kwargs:
        raise SpecsimValueError("num_speculative_tokens", "use n_values= for best_n")
    for k in kwargs:  # named as best_n, as Python names predict / sweep for theirs (it named sweep, not called)
        if k not in _BEST_N_SWEEP_KEYWORDS:
            raise TypeError(f"best_n() got an unexpected keyword argument {k!r}")
    _check_one_deployment(target, method, kwargs)
    if n_values is None:  # list(None) raised Python's TypeError
        raise SpecsimValueError("n_values", "must be integers >= 1 (leave it out for the default 1..15)", None)
    # sweep's rules for N (int_values): int(k) ran N 2 for 2.5 and N 1 for True
    ns = np.unique(int_values("n_values", n_values if isinstance(n_values, np.ndarray) or np.isscalar(n_values)
                              else list(n_values))).tolist()
    if not ns:
        raise SpecsimValueError("n_values", "must not be empty: give at least one N (integers >= 1)", [])
    if isinstance(flat_tolerance, bool) or not (isinstance(flat_tolerance, (float, int)) and 0 <= flat_tolerance <= 1):
        raise SpecsimValueError("flat_tolerance", "must lie in [0, 1] (1: every N with a positive ratio)", flat_tolerance)
    mpt = kwargs.get("mean_proposal_tokens")
    if (isinstance(mpt, (int, float)) and not isinstance(mpt, bool) and kwargs.get("speculative_config") is None
            and mpt > min(ns) * (1 + 1e-9)):  # anything else: sweep's own checks (_check_partial) name it
        # sweep would refuse it in its own words (num_speculative_tokens, which best_n refuses): name n_values
        raise SpecsimValueError("mean_proposal_tokens", f"must be <= every N of n_values, the smallest being "
                                f"{min(ns)} (n_values {ns}): give n_values >= {math.ceil(mpt)} "
                                "or a mean_proposal_tokens measured at the N compared", mpt)
    # sweep's warnings re-issued from here, so that they name the caller's line (they named this one)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        curve = sweep(target, method, num_speculative_tokens=ns, **kwargs)
    for w in caught:
        warnings.warn(w.message, w.category, stacklevel=2)
    for col in ("target", "method", "hardware", "tp", "precision", "acceptance", "concurrency", "isl", "osl"):
        vals = list(dict.fromkeys(curve[col].tolist()))
        if len(vals) > 1:
            raise SpecsimValueError(col, _BEST_N_ONE_VALUE, vals)
    best_ratio = curve["throughput_ratio"].max()
    i_best = curve["throughput_ratio"].idxmax()
    best = int(curve.loc[i_best, "num_speculative_tokens"])
    attrs = dict(curve.attrs)
    curve = curve.assign(near_best=curve["throughput_ratio"] >= best_ratio * (1 - flat_tolerance))
    if bool(curve.loc[i_best, "acceptance_extrapolated"]):
        w = (f"best N = {best} lies beyond the measured acceptance positions: its acceptance is extrapolated "
             "(acceptance_extrapolated=True), so the choice rests on the profile's parametric fit; measure "
             f"acceptance at N = {best} before deploying it")
        attrs["warnings"] = tuple(attrs.get("warnings", ())) + (w,)
        warnings.warn(w, UserWarning, stacklevel=2)
    attrs["best_n_extrapolated"] = bool(curve.loc[i_best, "acceptance_extrapolated"])
    curve.attrs = attrs
    return best, curve
