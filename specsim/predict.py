"""``predict``, ``sweep``, ``best_n`` and ``Prediction`` (layer 3, API): user-facing names and numbers
resolved into a :class:`specsim.engine.Scenario`, checked against what vLLM would refuse, and
evaluated by :func:`specsim.engine.evaluate`.  The step model and its sources: ``docs/model.md``
(Leviathan et al. 2023 for the constant-acceptance special case).
"""
from __future__ import annotations

import itertools
import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from specsim._checks import int_array, int_field
from specsim.acceptance import Acceptance
from specsim.architecture import ModelSpec, load_model
from specsim.calibration import default_latency
from specsim.drafters import draft_specs, get_drafter, unmodelled_config_fields
from specsim.engine import (
    Scenario,
    SpecOverhead,
    acceptance_extrapolated,
    default_overhead,
    evaluate,
)
from specsim.errors import SpecsimValueError
from specsim.hardware import Hardware, load_hardware
from specsim.memory import memory_budget
from specsim.vllm.config import parse_speculative_config

__all__ = ["Prediction", "predict", "sweep", "best_n", "resolve_inputs"]


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

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python dict (JSON-serialisable)."""
        d = asdict(self)
        d["assumptions"] = list(self.assumptions)
        d["warnings"] = list(self.warnings)
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
            f"  MAL                 {self.mal:6.3f} tokens/step ((MAL - 1) / N = {self.acceptance_rate:.3f} accepted per proposed token)",
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


def _load_target(target) -> ModelSpec:
    """A catalog name (``load_model``), or an existing path to a Hugging Face ``config.json`` or to a
    model directory holding one (``ModelSpec.from_hf_config``)."""
    if isinstance(target, (str, os.PathLike)):
        p = os.path.expanduser(os.fspath(target))
        if os.path.isfile(p) or os.path.isfile(os.path.join(p, "config.json")):
            return ModelSpec.from_hf_config(p)
    return load_model(target)


def prediction_warnings(r: Scenario, throughput_ratio: float | None = None) -> tuple[str, ...]:
    """Warnings a prediction must show, not only record (``Prediction.warnings``).

    - sampling temperature > 0 from acceptance measured at another temperature or at an unknown
      one (acceptance falls with temperature: the numbers may be optimistic);
    - measured acceptance zero at position 1 (every draft rejected);
    - a throughput ratio below 1 (speculation is predicted slower than none: below break-even).
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
    if p1 is not None and p1 == 0.0:
        out.append("acceptance is zero: every draft token is rejected (MAL 1.0), so speculation only adds cost")
    if throughput_ratio is not None and np.isfinite(throughput_ratio) and throughput_ratio < 1.0:
        out.append(f"below break-even: throughput ratio {throughput_ratio:.3f}x < 1, speculation is predicted "
                   "slower than no speculation at this operating point")
    return tuple(out)


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
    if temperature is not None and not (np.isfinite(temperature) and temperature >= 0):
        raise SpecsimValueError("temperature", "must be a finite number >= 0 (0 = greedy)", temperature)
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
    # precision None = the model's serving mix from specsim/data/models (e.g. int4 routed experts)

    # draft_tensor_parallel_size (checked against the target tp in check_feasibility) sets the
    # draft's TP: draft passes and draft memory use it
    dtp = cfg.draft_tensor_parallel_size if cfg is not None and cfg.builds_draft_model else None
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
    hardware : str or Hardware
        Accelerator name from ``specsim/data/hardware.csv`` (``"MI300X"``, ``"MI355X"``, ``"H100"``, ...).
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
    latency : LatencyModel, optional
        Forward-time model; default: the hardware's calibrated roofline where a calibration is
        shipped in ``specsim/data/calibration``, else datasheet-only.
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
    if r.num_speculative_tokens is None:
        raise SpecsimValueError("num_speculative_tokens", "is required (>= 1)")
    tp = int_field("tp", tp)
    concurrency = int_field("concurrency", concurrency)
    isl = int_field("isl", isl)
    osl = int_field("osl", osl)
    overhead = overhead if overhead is not None else default_overhead(r.latency)
    _check_partial(drafted_fraction, mean_proposal_tokens)
    feas = check_feasibility(r, tp=tp, concurrency=concurrency, isl=isl, osl=osl, hardware=hardware)
    n_used = int(scheduled_n(r, concurrency))
    n_src, n_notes = _n_source(r, concurrency, n_used)
    out = evaluate(r, n_used, concurrency, isl, osl, tp, overhead, drafted_fraction=drafted_fraction,
                    mean_proposal_tokens=mean_proposal_tokens)
    vals = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out.items()}
    extrap = acceptance_extrapolated(r.acceptance, n_used) if n_used > 0 else False
    return Prediction(
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
        output_tok_per_s=vals["output_tok_per_s"],
        baseline_output_tok_per_s=vals["baseline_output_tok_per_s"],
        tpot_s=vals["tpot_s"],
        baseline_tpot_s=vals["baseline_tpot_s"],
        speedup_bound=vals["speedup_bound"],
        latency_calibrated=bool(getattr(r.latency, "calibrated", False)),
        latency_description=_describe(r.latency),
        acceptance_extrapolated=extrap,
        temperature=r.temperature,
        warnings=prediction_warnings(r, vals["throughput_ratio"]) + feas,  # KV overflow: shown, not only recorded
        assumptions=r.assumptions + n_notes + _partial_assumptions(drafted_fraction, mean_proposal_tokens) + feas,
        num_speculative_tokens_source=n_src,
        configured_num_speculative_tokens=r.num_speculative_tokens,
    )


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


def precision_label(target, precision: str | None) -> str:
    """Readable precision: the string given, or the model's serving mix when None."""
    if precision is not None:
        return precision
    w = getattr(target, "weight_dtype", "bf16")
    e = getattr(target, "expert_weight_dtype", w)
    return w if e in (None, w) else f"{w} (routed experts {e})"


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
        return (f"KV cache for concurrency {concurrency} x {isl + osl} tokens does not fit on {mb.hardware} at "
                f"TP={tp} (fits up to concurrency {mb.max_concurrency_fit}): vLLM would queue or preempt, "
                "so this concurrency is not reached",)
    return ()


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


def _kv_cache_fits(r: Scenario, tp: int, N, C, I, O) -> np.ndarray:
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
        mb = _check_deployment(replace(r, num_speculative_tokens=n_), tp=tp, isl=len_, osl=0)
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
) -> pd.DataFrame:
    """Evaluate the model over a full grid and return a tidy DataFrame (one row per point).

    Any of ``target``, ``method``, ``hardware``, ``tp``, ``precision``, ``acceptance`` and
    ``draft`` may be a list (categorical axes, looped over); ``drafted_fraction`` and
    ``mean_proposal_tokens`` are as in :func:`predict`; ``num_speculative_tokens``,
    ``concurrency``, ``isl`` and ``osl`` may be iterables (numeric axes, evaluated as one
    vectorised numpy broadcast per categorical combination; ``num_speculative_tokens`` defaults to
    1..15).  ``acceptance`` may be a dict ``{label: Acceptance}`` to sweep several profiles.
    ``speculative_config`` (as in :func:`predict`) fixes method and N; with a
    ``num_speculative_tokens_per_batch_size`` schedule each concurrency row models the schedule's
    k at that batch size (:func:`scheduled_n`; column ``num_speculative_tokens_source`` =
    "schedule", ``configured_num_speculative_tokens`` = the config's N).

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
    if num_speculative_tokens is None:
        num_speculative_tokens = range(1, 16) if speculative_config is None else \
            [parse_speculative_config(speculative_config).num_speculative_tokens]
    ns = int_array("num_speculative_tokens", np.atleast_1d(np.asarray(list(num_speculative_tokens) if not np.isscalar(num_speculative_tokens) else [num_speculative_tokens])))
    cs = int_array("concurrency", np.atleast_1d(np.asarray(list(concurrency) if not np.isscalar(concurrency) else [concurrency])))
    isls = int_array("isl", np.atleast_1d(np.asarray(list(isl) if not np.isscalar(isl) else [isl])))
    osls = int_array("osl", np.atleast_1d(np.asarray(list(osl) if not np.isscalar(osl) else [osl])))
    for name, arr in (("num_speculative_tokens", ns), ("concurrency", cs), ("isl", isls), ("osl", osls)):
        if arr.size == 0:
            raise SpecsimValueError(name, "must not be empty: give at least one value (integers >= 1)", [])
    if speculative_config is not None and len(ns) != 1:
        raise SpecsimValueError("num_speculative_tokens", "speculative_config fixes N (its num_speculative_tokens); "
                                "sweep N without a speculative_config", list(ns))
    N, C, I, O = (a.reshape(-1) for a in np.meshgrid(ns, cs, isls, osls, indexing="ij"))
    frames = []
    for tgt, meth, hw, tp_, prec, (acc_label, acc), drf in itertools.product(
        as_list(target), as_list(method), as_list(hardware), as_list(tp), as_list(precision), acc_items, as_list(draft)
    ):
        r = resolve_inputs(
            tgt, meth, None if speculative_config is None or len(ns) != 1 else int(ns[0]), hardware=hw,
            precision=prec, acceptance=acc, draft=drf, drafter=drafter, latency=latency,
            temperature=temperature, temperature_assumption=temperature_assumption,
            speculative_config=speculative_config,
        )
        tp_i = int_field("tp", tp_)
        _check_partial(drafted_fraction, mean_proposal_tokens)
        kv_fits = _kv_cache_fits(r, tp_i, N, C, I, O)
        ov = overhead if overhead is not None else default_overhead(r.latency)
        n_used = scheduled_n(r, C) if r.speculative_config is not None else N
        out = evaluate(r, n_used, C, I, O, tp_i, ov, drafted_fraction=drafted_fraction,
                        mean_proposal_tokens=mean_proposal_tokens)
        df = pd.DataFrame({k: np.asarray(v) for k, v in out.items()})
        extrap = {int(k): acceptance_extrapolated(r.acceptance, int(k)) if k > 0 else False
                  for k in np.unique(n_used)}
        df["acceptance_extrapolated"] = [extrap[int(k)] for k in n_used]
        if r.speculative_config is not None:
            df["num_speculative_tokens_source"] = "schedule" if r.speculative_config.is_dynamic else "speculative_config"
            df["configured_num_speculative_tokens"] = N
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
