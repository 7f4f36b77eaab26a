"""Validation against the recorded real vLLM CPU runs (layer 4, studies): the probe-calibrated CPU
latency, the run scenario model, fitted overheads and held-out errors.

Details, derivations and sources: ``docs/modules/specsim.studies.validation.md``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from specsim._io import atomic_write
from specsim.acceptance import Acceptance
from specsim.architecture import ModelSpec, load_model
from specsim.catalog import is_source_checkout, project_data_path, project_dir
from specsim.drafters import get_drafter
from specsim.engine import SpecOverhead, evaluate, prefill_seconds
from specsim.errors import DataError, SpecsimValueError, _one_swap
from specsim.hardware import load_hardware
from specsim.latency import Efficiency, Roofline, counts_identity, shared_counts
from specsim.predict import predict, resolve_inputs
from specsim.runs import matrix as _m
from specsim.runs.records import load_health_checks, load_probe, load_runs, pair_runs
from specsim.vllm.counts import SpecDecodeCounts

__all__ = [
    "SampledView", "CpuLatency", "fit_cpu_latency", "Workload", "schedule", "RunScenario",
    "run_scenario", "predict_run", "predict_contract", "SpecFit", "fit_spec_overheads",
    "CpuServingLatency", "predict_with_library", "LibraryFit", "fit_library_overheads",
    "ValidationResult", "validate", "write_outputs", "HEADLINE_MATRIX", "FAST_MATRIX", "stamp_hosts",
    "stamp_sessions", "throughput_noise", "noise_by_pair", "pairing_shift", "interleaved_noise",
    "LoopComparison", "compare_loops", "write_loop_comparison", "load_preregistered", "PREREGISTERED_FILE",
    "InvocationsValidation", "validate_invocations",
]

#: Target of the CPU validation (``specsim/data/models``) and the hardware row it ran on.
CPU_TARGET = "SmolLM2-135M-Instruct"
CPU_HARDWARE = "cpu-2core-avx2"
CPU_PRECISION = "fp32"


# ============================================================================================
# latency: the probe-calibrated CPU model
# ============================================================================================

class SampledView:
    """A ``ModelSpec`` whose forward samples ``sampled`` positions per sequence through the lm_head.

    ``ModelSpec.step_flops`` counts the lm_head at every query position by default (right for a
    verification step); a decode step, a prefill, a draft pass and the probe's ``max_tokens=1``
    calls compute logits at ONE position per sequence (vLLM ``logits_indices``).  Everything else is
    delegated to the wrapped spec.

    Parameters
    ----------
    model : ModelSpec
    sampled : "last" or "all"
        ``"last"``: 1 position per sequence; ``"all"``: q positions (``ModelSpec`` default).
    """

    def __init__(self, model: Any, sampled: str = "last"):
        if sampled not in ("last", "all"):
            raise SpecsimValueError("sampled", "must be 'last' or 'all'", sampled, ["last", "all"])
        self._model = model
        self.sampled = sampled

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    @property
    def counts_identity(self) -> tuple:
        """Counts depend on the wrapped model and ``sampled`` only (``specsim.latency.shared_counts``)."""
        return ("sampled view", self.sampled, counts_identity(self._model))

    def step_flops(self, batch: Any, q: Any, context: Any) -> np.ndarray:
        """FLOPs of one forward (see ``ModelSpec.step_flops``) with 1 or q sampled positions."""
        s = 1.0 if self.sampled == "last" else None
        return self._model.step_flops(batch, q, context, sampled=s)


@dataclass(frozen=True)
class CpuLatency:
    """Probe-calibrated forward-step time of the CPU target (and of depth-scaled drafts).

    A serving step (decode, verification, draft pass) costs the roofline
    ``t(B, q, L) = ((mem)^p + (comp)^p)^(1/p) + fixed_s`` of :class:`specsim.latency.Roofline` on
    the ``cpu-2core-avx2`` row (memory = weights + KV over the host's measured bandwidth, compute =
    FLOPs over eta_f x the fp32 peak), with eta_f, ``fixed_s`` and p fitted to the probe.

    The probe's timed unit is not a serving step: each of its ``LLM.generate`` calls ADMITS B new
    requests (512 cached + q new tokens, ``max_tokens=1``), which vLLM runs through the
    prefill-with-cached-prefix path.  Two admission terms are therefore fitted with the roofline and
    charged ONLY to the probe (:meth:`probe_time`): ``admit_per_seq_s`` per admitted request
    (request setup, prefix-cache lookup, output / detokeniser) and ``admit_multi_s`` when B > 1
    (several prefills with cached context in one step; the probe shows a ~jump between B=1 and B=4
    that its B=4 -> 16 growth does not continue).  In serving, a request pays ``admit_per_seq_s``
    once, with its prefill; decode steps pay neither.

    Implements the ``LatencyModel`` protocol (``forward_time``, ``breakdown``, ``calibrated``,
    ``describe``, ``pass_overhead_s``) so ``specsim.drafters.Drafter.draft_time`` can time draft
    passes with it.
    """

    roofline: Any
    admit_per_seq_s: float = 0.0
    admit_multi_s: float = 0.0
    rmse_rel: float = float("nan")
    probe_run_id: str | None = None
    residuals: pd.DataFrame | None = field(default=None, compare=False, repr=False)
    calibrated: bool = True

    @property
    def hardware(self):
        return self.roofline.hardware

    @property
    def efficiency(self):
        return self.roofline.efficiency

    def pass_overhead_s(self, num_layers: int) -> float:
        return self.roofline.pass_overhead_s(num_layers)

    def breakdown(self, model: Any, *, tp: int = 1, precision: str | None = CPU_PRECISION, batch: Any, q: Any,
                  context: Any, kv_precision: str | None = None) -> dict[str, np.ndarray]:
        """Roofline terms of one serving step (``specsim.latency.Roofline.breakdown``), seconds."""
        return dict(self.roofline.breakdown(model, tp=tp, precision=precision, batch=batch, q=q, context=context,
                                            kv_precision=kv_precision))

    def forward_time(self, model: Any, *, tp: int = 1, precision: str | None = CPU_PRECISION, batch: Any, q: Any,
                     context: Any, kv_precision: str | None = None) -> np.ndarray:
        """Seconds of one serving forward step (ndarray, broadcast shape of batch / q / context)."""
        return self.breakdown(model, tp=tp, precision=precision, batch=batch, q=q, context=context,
                              kv_precision=kv_precision)["total_s"]

    def probe_time(self, model: Any, *, batch: Any, q: Any, context: Any) -> np.ndarray:
        """Seconds of one probe call: a step plus the admission of ``batch`` new requests."""
        b = np.asarray(batch, dtype=float)
        return (self.forward_time(model, batch=batch, q=q, context=context) + self.admit_per_seq_s * b
                + np.where(b > 1.0, self.admit_multi_s, 0.0))

    def describe(self) -> str:
        return (f"CpuLatency [calibrated on probe {self.probe_run_id}, rmse_rel={self.rmse_rel:.1%}]: "
                f"{self.roofline.describe()}; probe-only admission terms: {self.admit_per_seq_s * 1e3:.3g} ms/request"
                f" (also charged once per served request), {self.admit_multi_s * 1e3:.3g} ms when B > 1")

    def params(self) -> dict[str, float]:
        e = self.roofline.efficiency
        return {"bandwidth": e.bandwidth, "compute": e.compute, "fixed_s": e.fixed_s,
                "smooth_p": self.roofline.smooth_p, "admit_per_seq_s": self.admit_per_seq_s,
                "admit_multi_s": self.admit_multi_s}


def fit_cpu_latency(probe: pd.DataFrame, *, target: Any = None, hardware: Any = None, admission: bool = True,
                    fit_p: bool = True, smooth_p: float | None = None, bandwidth: float = 1.0,
                    probe_run_id: str | None = None) -> CpuLatency:
    """Fit the CPU latency model to the verification-cost probe (and nothing else).

    Least squares on relative error (``scipy.optimize.least_squares``, bounded) of
    :meth:`CpuLatency.probe_time` against the probe's seconds: the roofline p-norm
    ``((W+KV)/BW)^p + (FLOPs/(eta_f F))^p)^(1/p) + fixed_s`` (p fitted in [1, 16]: 1 = memory and
    compute add, large = hard max) plus the admission terms, with the target's FLOPs counted at one
    sampled position per sequence (:class:`SampledView`; the probe uses ``max_tokens=1``).

    ``bandwidth`` (eta_bw) is NOT fitted: at the probe's single context the weight-streaming time
    ``W / (eta_bw BW)`` is the same for every point, i.e. collinear with ``fixed_s`` (and the KV
    term ``B kv / (eta_bw BW)`` with ``admit_per_seq_s * B``), so the probe cannot identify it.  It
    is taken as 1.0 of the hardware row's bandwidth, which is itself MEASURED on this host (numpy
    copy, STREAM-Copy byte counting; ``specsim/data/hardware.csv``), not a datasheet peak.  It matters for
    what the probe never saw: draft passes (weights of another model), contexts other than 512.

    Why a roofline and not ``MeasuredLatency``: the probe has one context (512 tokens) and
    q <= 16, while the runs need prefills of up to ~2000 tokens, other contexts and draft models
    (the target itself, and a 28-layer truncation the probe never timed); a roofline scales with
    FLOPs / bytes / layers, a measured table cannot extrapolate (and refuses to).  Also, a measured
    table would carry the probe's admission cost into every serving step.

    Parameters
    ----------
    probe : DataFrame
        ``batch, q, context, seconds`` (:func:`load_probe`).
    target : ModelSpec, optional
        Default ``load_model("SmolLM2-135M-Instruct")``.
    hardware : Hardware, optional
        Default ``load_hardware("cpu-2core-avx2")``.
    admission : bool
        Fit the two admission terms (else 0).
    fit_p : bool
        Fit the roofline exponent p; else use ``smooth_p`` (None = hard max).
    bandwidth : float
        Fixed eta_bw in (0, 1].

    Returns
    -------
    CpuLatency
        With ``residuals`` (``batch, q, context, measured, predicted, rel_error``) and ``rmse_rel``.

    Raises
    ------
    SpecsimValueError
        Probe with missing columns, non-positive times, or not more rows than parameters.
    """
    from scipy.optimize import least_squares


    need = ["batch", "q", "context", "seconds"]
    if not isinstance(probe, pd.DataFrame) or [c for c in need if c not in probe.columns]:
        raise SpecsimValueError("probe", "must be a DataFrame with columns batch, q, context, seconds",
                                None if not isinstance(probe, pd.DataFrame) else list(probe.columns), need)
    m = probe[need].astype(float).reset_index(drop=True)
    y = m["seconds"].to_numpy()
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise SpecsimValueError("probe.seconds", "must be finite and > 0", y[~(y > 0)][:3].tolist())
    multi = admission and bool((m["batch"] == 1).any() and (m["batch"] > 1).any())
    free = [True, True, admission, multi, fit_p]
    npar = sum(free)
    if len(m) <= npar:
        raise SpecsimValueError("probe", f"needs more than {npar} rows to fit {npar} parameters", len(m))
    target = target if target is not None else load_model(CPU_TARGET)
    hardware = hardware if hardware is not None else load_hardware(CPU_HARDWARE)
    view = SampledView(target, "last")
    b, q, c = (m[k].to_numpy() for k in ("batch", "q", "context"))
    tmax = float(y.max())

    def latency_of(x) -> CpuLatency:
        eff = Efficiency(bandwidth=bandwidth, compute=float(x[0]), fixed_s=float(x[1]) * tmax)
        p = float(x[4]) if fit_p else smooth_p
        rl = Roofline(hardware, eff, calibrated=True, smooth_p=p,
                      source=f"verification-cost probe {probe_run_id or '(unnamed)'} only; eta_bw fixed at "
                             f"{bandwidth:g} of the host's measured copy bandwidth")
        return CpuLatency(rl, admit_per_seq_s=float(x[2]) * tmax if admission else 0.0,
                          admit_multi_s=float(x[3]) * tmax if multi else 0.0, probe_run_id=probe_run_id)

    def resid(x):
        return latency_of(x).probe_time(view, batch=b, q=q, context=c) / y - 1.0

    x0 = np.array([0.5, 0.1, 0.02, 0.05, 2.0])
    lo = np.array([1e-3, 0.0, 0.0, 0.0, 1.0])
    hi = np.array([1.0, 1.0, 1.0, 1.0, 16.0])
    for i, f in enumerate(free):
        if not f:  # pin unused parameters inside a vanishing interval
            lo[i], hi[i] = x0[i] - 1e-12, x0[i] + 1e-12
    sol = least_squares(resid, x0, bounds=(lo, hi), method="trf", x_scale="jac")
    lat = latency_of(sol.x)
    pred = lat.probe_time(view, batch=b, q=q, context=c)
    res = m.rename(columns={"seconds": "measured"}).assign(predicted=pred, rel_error=pred / y - 1.0)
    rmse = float(np.sqrt(np.mean(res["rel_error"] ** 2)))
    return CpuLatency(lat.roofline, lat.admit_per_seq_s, lat.admit_multi_s, rmse, probe_run_id, res)


# ============================================================================================
# the scenario: continuous-batching replay of one run's workload
# ============================================================================================

@dataclass(frozen=True)
class Workload:
    """Requests of one bench run: input and output lengths (tokens), client concurrency C."""

    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    concurrency: int

    def __post_init__(self):
        if len(self.input_lens) != len(self.output_lens) or not self.input_lens:
            raise SpecsimValueError("input_lens/output_lens", "must be non-empty and of equal length",
                                    (len(self.input_lens), len(self.output_lens)))
        if any(int(x) < 1 for x in self.input_lens) or any(int(x) < 1 for x in self.output_lens):
            raise SpecsimValueError("input_lens/output_lens", "every length must be >= 1 token")
        if isinstance(self.concurrency, bool) or int(self.concurrency) < 1:
            raise SpecsimValueError("concurrency", "must be an integer >= 1", self.concurrency)


@dataclass(frozen=True)
class Schedule:
    """Continuous-batching schedule of a workload (independent of step times).

    ``decode_batch[s]`` sequences decode in step ``s`` at mean context ``decode_context[s]``
    tokens; ``prefill_lens`` lists every request's prompt length (each prefilled once).
    """

    decode_batch: np.ndarray
    decode_context: np.ndarray
    prefill_lens: np.ndarray
    output_tokens: int


def schedule(workload: Workload, tokens_per_step: float = 1.0) -> Schedule:
    """Replay a workload through continuous batching with at most C requests in flight.

    Each engine step: requests are admitted (FIFO) while fewer than C are in flight and are
    prefilled in that step (their first output token comes from the prefill); every in-flight
    request already prefilled decodes, committing ``tokens_per_step`` tokens (1 without
    speculation; the expected ``m_eff`` with it -- a fluid approximation: a request with r tokens
    left needs ceil(r / m) steps).  A finished request frees its slot for the next step.  This is
    what ``vllm bench serve --max-concurrency C`` drives against vLLM's scheduler (chunked prefill
    mixes prefills into decode steps, ``vllm/v1/core/sched/scheduler.py``).

    Parameters
    ----------
    workload : Workload
    tokens_per_step : float
        Output tokens per request per decode step (>= 1).

    Returns
    -------
    Schedule

    Raises
    ------
    SpecsimValueError
        ``tokens_per_step`` < 1 or not finite.
    """
    if not (np.isfinite(tokens_per_step) and tokens_per_step >= 1.0):
        raise SpecsimValueError("tokens_per_step", "must be finite and >= 1 token", tokens_per_step)
    isl = [int(x) for x in workload.input_lens]
    osl = [int(x) for x in workload.output_lens]
    C = int(workload.concurrency)
    pending = list(range(len(isl)))
    rem: dict[int, float] = {}
    ctx: dict[int, float] = {}
    batches, contexts = [], []
    while pending or rem:
        admitted = []
        while pending and len(rem) + len(admitted) < C:
            admitted.append(pending.pop(0))
        if rem:
            dec = list(rem)
            batches.append(len(dec))
            contexts.append(float(np.mean([ctx[i] for i in dec])))
            for i in dec:
                rem[i] -= tokens_per_step
                ctx[i] += tokens_per_step
                if rem[i] <= 1e-9:
                    del rem[i]
        for i in admitted:
            if osl[i] > 1:
                rem[i] = float(osl[i] - 1)
                ctx[i] = float(isl[i] + 1)
    return Schedule(np.asarray(batches, dtype=float), np.asarray(contexts, dtype=float),
                    np.asarray(isl, dtype=float), int(sum(osl)))


@dataclass(frozen=True)
class RunScenario:
    """Everything the throughput-ratio prediction of one spec run rests on (no measured times).

    Attributes
    ----------
    method, family : str
    n : int
        num_speculative_tokens.
    q_eff, m_eff : float
        Query tokens verified and tokens committed per decode request-step (module docstring).
    draft_step_fraction : float
        Share of decode request-steps that carried a draft (num_drafts / S).
    draft : ModelSpec or None
        Draft model (``draft_model`` method), None for ngram.
    spec_workload, base_workload : Workload
    """

    method: str
    family: str
    n: int
    q_eff: float
    m_eff: float
    draft_step_fraction: float
    draft: Any
    spec_workload: Workload
    base_workload: Workload


def _draft_spec(family: str, target: Any, models_dir: Path | None) -> Any:
    """The draft ModelSpec of a draft_model family: the target itself for ``selfdraft``; else the
    converted checkpoint's ``config.json`` under ``models/`` (from ``specsim.runs.matrix``)."""

    if family == "selfdraft":
        return target

    name = _m.TRUNC_DRAFT if family.startswith("trunc") else family
    root = models_dir or (project_dir() / "models" if is_source_checkout() else None)
    cfg = Path(root) / name / "config.json" if root is not None else Path(name) / "config.json"
    if cfg.exists():
        return ModelSpec.from_hf_config(str(cfg), name=name)
    # no local checkpoint (fresh clone): the truncation keeps the first K layers of the target
    k = int("".join(ch for ch in family if ch.isdigit()) or _m.TRUNC_LAYERS)
    conf = dict(getattr(target, "config", {}) or {})
    if not conf:
        raise DataError(f"draft {name}: no {cfg} and the target carries no HF config to truncate")
    conf["num_hidden_layers"] = k
    return ModelSpec.from_hf_config(conf, name=name)


def run_scenario(row: Mapping, *, target: Any = None, models_dir: Path | None = None) -> RunScenario:
    """Build the :class:`RunScenario` of one paired spec run (a row of :func:`pair_runs`).

    Raises
    ------
    DataError
        Missing request lengths or spec counters.
    """

    target = target if target is not None else load_model(CPU_TARGET)
    for k in ("input_lens", "output_lens", "baseline_input_lens", "baseline_output_lens"):
        if not row.get(k):
            raise DataError(f"run {row.get('run_id')}: no per-request {k} (bench.json --save-detailed)")
    if not (isinstance(row.get("q_eff"), float) and np.isfinite(row["q_eff"])):
        raise DataError(f"run {row.get('run_id')}: no spec-decode counters")
    C = int(row["concurrency"])
    draft = _draft_spec(row["family"], target, models_dir) if row["method"] == "draft_model" else None
    return RunScenario(method=row["method"], family=row["family"], n=int(row["num_speculative_tokens"]),
                       q_eff=float(row["q_eff"]), m_eff=float(row["m_eff"]),
                       draft_step_fraction=float(row["draft_step_fraction"]), draft=draft,
                       spec_workload=Workload(tuple(row["input_lens"]), tuple(row["output_lens"]), C),
                       base_workload=Workload(tuple(row["baseline_input_lens"]), tuple(row["baseline_output_lens"]), C))


def _prefill_s(lat: CpuLatency, model: Any, isl: np.ndarray, fixed: float | None = None) -> np.ndarray:
    """Prefill seconds per prompt: one forward over ISL tokens, 0 cached, 1 sampled position, plus
    the request's admission (``admit_per_seq_s``); ``fixed`` replaces the roofline's fixed term
    and drops the admission (a draft model's prefill runs inside the proposer)."""
    bd = lat.breakdown(SampledView(model, "last"), precision=CPU_PRECISION, batch=1, q=isl, context=0.0)
    t = bd["total_s"]
    return t + lat.admit_per_seq_s if fixed is None else t - bd["fixed_s"] + fixed


@dataclass(frozen=True)
class _Terms:
    """Predicted duration of one arm = const + draft_passes*dpo + steps*spec_fixed + verified*per_tok."""

    const: float
    draft_passes: float
    steps: float
    verified_tokens: float
    output_tokens: int

    def duration(self, dpo: float, spec_fixed: float, per_token: float) -> float:
        return self.const + self.draft_passes * dpo + self.steps * spec_fixed + self.verified_tokens * per_token


def _base_terms(lat: CpuLatency, target: Any, wl: Workload) -> _Terms:
    sch = schedule(wl, 1.0)
    dec = lat.forward_time(SampledView(target, "last"), precision=CPU_PRECISION, batch=sch.decode_batch, q=1.0,
                           context=sch.decode_context)
    const = float(np.sum(dec) + np.sum(_prefill_s(lat, target, sch.prefill_lens)))
    return _Terms(const, 0.0, float(len(sch.decode_batch)), 0.0, sch.output_tokens)


def _scaled_compute(lat: CpuLatency, factor: float) -> CpuLatency:
    """The same latency with the compute term multiplied by ``factor`` (eta_f divided by it)."""
    if factor == 1.0:
        return lat
    rl = lat.roofline
    eff = rl.efficiency.replace(compute=rl.efficiency.compute / factor)
    return CpuLatency(rl.with_efficiency(eff), lat.admit_per_seq_s, lat.admit_multi_s, lat.rmse_rel,
                      lat.probe_run_id, lat.residuals)


def _spec_terms(lat: CpuLatency, target: Any, sc: RunScenario, lookup_s_per_request: float,
                lookup_compute_factor: float = 1.0) -> _Terms:
    """Spec arm: verification (q_eff positions sampled) + draft passes (roofline without the fixed
    term; the fitted draft_pass_overhead_s is added per pass via ``draft_passes``) + prefills.
    Lookup methods (ngram) run their forwards with the compute term x ``lookup_compute_factor``."""
    if sc.method in ("ngram", "ngram_gpu", "suffix"):
        lat = _scaled_compute(lat, lookup_compute_factor)
    sch = schedule(sc.spec_workload, sc.m_eff)
    b, L = sch.decode_batch, sch.decode_context
    verify = lat.forward_time(SampledView(target, "all"), precision=CPU_PRECISION, batch=b, q=sc.q_eff, context=L)
    const = float(np.sum(verify) + np.sum(_prefill_s(lat, target, sch.prefill_lens)))
    passes = 0.0
    if sc.method == "draft_model":
        dv = SampledView(sc.draft, "last")
        # first pass over the step's N+1 target positions per request, then N-1 single-token passes
        # (vLLM 0.32 llm_base_proposer.propose; padded drafter batch)
        first = lat.breakdown(dv, precision=CPU_PRECISION, batch=b, q=sc.n + 1.0, context=L)
        rest = lat.breakdown(dv, precision=CPU_PRECISION, batch=b, q=1.0, context=L)
        const += float(np.sum(first["total_s"] - first["fixed_s"]) + (sc.n - 1) * np.sum(rest["total_s"] - rest["fixed_s"]))
        passes += sc.n * len(b)
        # the draft model prefills every prompt too (one more pass per admitted prompt)
        const += float(np.sum(_prefill_s(lat, sc.draft, sch.prefill_lens, fixed=0.0)))
        passes += len(sch.prefill_lens)
    elif sc.method in ("ngram", "ngram_gpu", "suffix"):
        const += float(np.sum(b)) * lookup_s_per_request
    else:
        raise SpecsimValueError("method", "the CPU validation models ngram and draft_model runs", sc.method,
                                ["ngram", "draft_model"])
    verified = float(np.sum(b * sc.q_eff))
    return _Terms(const, passes, float(len(b)), verified, sch.output_tokens)


@dataclass(frozen=True)
class SpecFit:
    """Speculative overheads and where they came from.

    Attributes
    ----------
    draft_pass_overhead_s : float
        Seconds of fixed cost per draft forward (replaces the roofline's ``fixed_s`` for draft passes).
    spec_fixed_s, spec_per_token_s : float
        ``specsim.engine.SpecOverhead`` fields: seconds per speculative step, and per verified
        token in the batch.
    lookup_s_per_request : float
        ngram lookup seconds per request per step (NOT fitted: the drafters default, assumed).
    lookup_compute_factor : float
        Multiplier of the roofline compute term in every forward of an ngram-served run (prefill
        included), fitted on ``lookup_fitted_on`` (:func:`fit_lookup_factor`); 1 = not fitted.
    fitted_on, held_out : tuple of str
        Run ids (``fitted_on`` = every run any parameter was fitted on).
    rmse_rel : float
        Relative RMS error of the ratio on the fit set.
    """

    draft_pass_overhead_s: float = 0.0
    spec_fixed_s: float = 0.0
    spec_per_token_s: float = 0.0
    lookup_s_per_request: float = 5e-6
    fitted_on: tuple[str, ...] = ()
    held_out: tuple[str, ...] = ()
    rmse_rel: float = float("nan")
    params_fitted: tuple[str, ...] = ()
    lookup_compute_factor: float = 1.0
    lookup_fitted_on: tuple[str, ...] = ()
    lookup_rmse_rel: float = float("nan")

    def to_dict(self) -> dict:
        return {"draft_pass_overhead_s": self.draft_pass_overhead_s, "spec_fixed_s": self.spec_fixed_s,
                "spec_per_token_s": self.spec_per_token_s, "lookup_s_per_request": self.lookup_s_per_request,
                "lookup_compute_factor": self.lookup_compute_factor,
                "params_fitted": list(self.params_fitted), "fitted_on": list(self.fitted_on),
                "lookup_fitted_on": list(self.lookup_fitted_on), "held_out": list(self.held_out),
                "rmse_rel": self.rmse_rel, "lookup_rmse_rel": self.lookup_rmse_rel}


def predict_run(row: Mapping, lat: CpuLatency, fit: SpecFit, *, target: Any = None,
                models_dir: Path | None = None, scenario: RunScenario | None = None) -> dict:
    """Predicted throughput ratio of one paired spec run (the improved scenario model).

    Uses only: the run's workload (request lengths, C), its spec-decode counters (``q_eff``,
    ``m_eff``), the baseline's workload, the probe-calibrated latency and the overhead fit.

    Returns
    -------
    dict
        ``predicted_ratio``, ``predicted_spec_tok_per_s``, ``predicted_base_tok_per_s``,
        ``predicted_spec_s``, ``predicted_base_s`` (durations, seconds), ``predicted_prefill_share``
        (prefill seconds / baseline duration).
    """

    target = target if target is not None else load_model(CPU_TARGET)
    sc = scenario or run_scenario(row, target=target, models_dir=models_dir)
    bt = _base_terms(lat, target, sc.base_workload)
    st = _spec_terms(lat, target, sc, fit.lookup_s_per_request, fit.lookup_compute_factor)
    ds = st.duration(fit.draft_pass_overhead_s, fit.spec_fixed_s, fit.spec_per_token_s)
    db = bt.duration(0.0, 0.0, 0.0)
    pre = float(np.sum(_prefill_s(lat, target, np.asarray(sc.base_workload.input_lens, dtype=float))))
    tps, tpb = st.output_tokens / ds, bt.output_tokens / db
    return {"predicted_ratio": tps / tpb, "predicted_spec_tok_per_s": tps, "predicted_base_tok_per_s": tpb,
            "predicted_spec_s": ds, "predicted_base_s": db, "predicted_prefill_share": pre / db}


def predict_contract(row: Mapping, lat: CpuLatency, *, target: Any = None, models_dir: Path | None = None,
                     partial_drafts: bool = True) -> float:
    """The ratio the library's core model gives for this run (``specsim.engine.evaluate``).

    Same probe-calibrated latency, the run's MAL (``1 + accepted / drafts``), ISL/OSL = the run's
    mean request lengths, concurrency C, no speculative overhead, the drafter of
    ``specsim.drafters`` at fp32.  With ``partial_drafts`` (default) ngram runs use the core
    model's partial-draft terms (fraction of steps drafted = drafts / decode steps, mean proposal
    = draft tokens / drafts); with ``partial_drafts=False`` it is the "before" (q = N + 1 every
    step).  The scenario model :func:`predict_run` adds the CPU-specific corrections on top.
    """

    target = target if target is not None else load_model(CPU_TARGET)
    counts = SpecDecodeCounts(int(row["num_drafts"]), int(row["num_draft_tokens"]), int(row["num_accepted_tokens"]),
                              tuple(int(v) for v in row["accepted_per_pos"]), source=row["run_id"])
    acc = Acceptance.from_counts(counts, temperature=float(row.get("temperature") or 0.0))
    if row["method"] == "draft_model":
        drafter = get_drafter("draft_model", draft_model=_draft_spec(row["family"], target, models_dir)
                              ).with_params(precision=CPU_PRECISION, draft_pass_overhead_s=None)
    else:
        drafter = get_drafter(row["method"])
    r = resolve_inputs(target, row["method"], int(row["num_speculative_tokens"]), hardware=CPU_HARDWARE,
                       precision=CPU_PRECISION, acceptance=acc, drafter=drafter, latency=lat,
                       temperature=float(row.get("temperature") or 0.0))
    isl = int(round(np.mean(row["input_lens"])))
    osl = max(1, int(round(np.mean(row["output_lens"]))))
    n = int(row["num_speculative_tokens"])
    partial = {}
    if partial_drafts and row["method"] == "ngram":
        # the core model's partial-draft terms (predict(drafted_fraction=..., mean_proposal_tokens=...))
        partial = {"drafted_fraction": float(min(1.0, row["draft_step_fraction"])),
                   "mean_proposal_tokens": float(row["num_draft_tokens"]) / float(row["num_drafts"])}
    out = evaluate(r, n, int(row["concurrency"]), isl, osl, 1, SpecOverhead(), mal=float(row["mal"]), **partial)
    return float(np.asarray(out["throughput_ratio"]).reshape(-1)[0])


def fit_spec_overheads(pairs: pd.DataFrame, lat: CpuLatency, *, fit_families: Sequence[str] = ("selfdraft",),
                       params: Sequence[str] = ("draft_pass_overhead_s", "spec_fixed_s", "spec_per_token_s"),
                       target: Any = None, models_dir: Path | None = None,
                       lookup_s_per_request: float = 5e-6, exclude_contended: bool = True) -> SpecFit:
    """Fit speculative overheads on the FIT SET only: the usable spec runs of ``fit_families``
    whose measurement (spec run and its baseline) was not contended by other processes.

    Minimises the relative error of the predicted throughput ratio (:func:`predict_run`) on the
    fit set with ``scipy.optimize.least_squares`` (parameters >= 0).  The predicted duration is
    linear in the overheads (the schedule does not depend on step times), so each run is
    replayed once.  Runs outside the fit set never enter the objective.

    Parameters
    ----------
    pairs : DataFrame
        :func:`pair_runs` output.
    lat : CpuLatency
        Probe-calibrated latency.
    fit_families : sequence of str
        Families forming the fit set (default the self-draft runs).
    params : sequence of str
        Subset of ``draft_pass_overhead_s``, ``spec_fixed_s``, ``spec_per_token_s``; the others stay 0.
    exclude_contended : bool
        Leave runs whose spec or baseline measurement was ``contended`` (other processes used
        > :data:`CONTENDED_FRACTION` of the CPU) out of the fit set; they are judged like any
        held-out run.

    Returns
    -------
    SpecFit
        (all zeros, ``params_fitted=()``, when the fit set is empty.)

    Raises
    ------
    SpecsimValueError
        Unknown parameter names.
    """
    from scipy.optimize import least_squares


    allowed = ("draft_pass_overhead_s", "spec_fixed_s", "spec_per_token_s")
    bad = [p for p in params if p not in allowed]
    if bad or len(set(params)) != len(params):
        raise SpecsimValueError("params", "must be distinct overhead names", list(params), allowed)
    target = target if target is not None else load_model(CPU_TARGET)
    usable = pairs[pairs["usable"].astype(bool)] if len(pairs) else pairs
    fit_rows = usable[usable["family"].isin(list(fit_families))] if len(usable) else usable
    if exclude_contended and len(fit_rows):
        fit_rows = fit_rows[~(_flag(fit_rows["contended"]) | _flag(fit_rows["baseline_contended"]))]
    held = tuple(r for r in usable["run_id"] if r not in set(fit_rows["run_id"])) if len(usable) else ()
    if fit_rows is None or len(fit_rows) == 0 or not params:
        return SpecFit(lookup_s_per_request=lookup_s_per_request, held_out=held)
    terms = []
    for row in fit_rows.to_dict("records"):
        sc = run_scenario(row, target=target, models_dir=models_dir)
        bt = _base_terms(lat, target, sc.base_workload)
        st = _spec_terms(lat, target, sc, lookup_s_per_request)
        terms.append((st, bt.output_tokens / bt.duration(0, 0, 0), float(row["measured_ratio"])))
    idx = {p: i for i, p in enumerate(params)}
    scale = 1e-2

    def full(x):
        v = [0.0, 0.0, 0.0]
        for p, i in idx.items():
            v[allowed.index(p)] = float(x[i]) * scale
        return v

    def resid(x):
        dpo, sf, pt = full(x)
        return np.array([(st.output_tokens / st.duration(dpo, sf, pt)) / tb / meas - 1.0 for st, tb, meas in terms])

    sol = least_squares(resid, np.full(len(params), 0.5), bounds=(0.0, np.inf), method="trf")
    dpo, sf, pt = full(sol.x)
    rmse = float(np.sqrt(np.mean(resid(sol.x) ** 2)))
    return SpecFit(dpo, sf, pt, lookup_s_per_request, tuple(fit_rows["run_id"]), held, rmse, tuple(params))


def fit_lookup_factor(pairs: pd.DataFrame, lat: CpuLatency, fit: SpecFit, *, n_values: Sequence[int] = (1,),
                      target: Any = None, models_dir: Path | None = None,
                      exclude_contended: bool = True) -> SpecFit:
    """Fit ``lookup_compute_factor`` on the ngram runs with N in ``n_values`` only (default N=1).

    Why: ngram-served runs at concurrency >= 4 are slower per forward than the same token counts
    in the baseline and in the self-draft runs -- their prefill too (TTFT of the same 15 prompts
    ~4.2 s vs ~2.5 s at C=16, with no draft model to prefill) -- so the cost is not a per-step
    overhead the self-draft fit can see but a slowdown of the forward while the ngram proposer is
    active.  One multiplier of the compute term is fitted (``scipy.optimize.least_squares`` on the
    relative ratio error, factor in [1, 5]) on the ``n_values`` runs, with the self-draft overheads
    of ``fit`` fixed, and judged on the other N.

    Returns
    -------
    SpecFit
        ``fit`` with ``lookup_compute_factor``, ``lookup_fitted_on``, ``lookup_rmse_rel`` set,
        the runs added to ``fitted_on`` and removed from ``held_out``; ``fit`` unchanged when no
        usable run qualifies.
    """
    import dataclasses

    from scipy.optimize import least_squares


    target = target if target is not None else load_model(CPU_TARGET)
    usable = pairs[pairs["usable"].astype(bool)] if len(pairs) else pairs
    if not len(usable):
        return fit
    rows = usable[(usable["method"] == "ngram") & usable["num_speculative_tokens"].isin(list(n_values))]
    if exclude_contended and len(rows):
        rows = rows[~(_flag(rows["contended"]) | _flag(rows["baseline_contended"]))]
    rows = rows[~rows["run_id"].isin(fit.fitted_on)]
    if not len(rows):
        return fit
    cases = []
    for row in rows.to_dict("records"):
        sc = run_scenario(row, target=target, models_dir=models_dir)
        bt = _base_terms(lat, target, sc.base_workload)
        cases.append((sc, bt.output_tokens / bt.duration(0, 0, 0), float(row["measured_ratio"])))

    def resid(x):
        out = []
        for sc, tb, meas in cases:
            st = _spec_terms(lat, target, sc, fit.lookup_s_per_request, float(x[0]))
            ds = st.duration(fit.draft_pass_overhead_s, fit.spec_fixed_s, fit.spec_per_token_s)
            out.append(st.output_tokens / ds / tb / meas - 1.0)
        return np.array(out)

    sol = least_squares(resid, np.array([1.2]), bounds=([1.0], [5.0]), method="trf")
    ids = tuple(rows["run_id"])
    return dataclasses.replace(fit, lookup_compute_factor=float(sol.x[0]), lookup_fitted_on=ids,
                               lookup_rmse_rel=float(np.sqrt(np.mean(resid(sol.x) ** 2))),
                               fitted_on=tuple(fit.fitted_on) + ids,
                               held_out=tuple(r for r in fit.held_out if r not in set(ids)))


# ============================================================================================
# the library's own model: specsim.predict.predict() judged on the runs
# ============================================================================================


class CpuServingLatency:
    """:class:`CpuLatency` as a SERVING latency for ``specsim.predict.predict``: every forward is the
    probe-calibrated roofline, and each request's prefill of the TARGET also pays the per-request
    admission ``admit_per_seq_s`` that the probe measured (request setup, prefix-cache lookup,
    output processing) -- through the engine's ``prefill_time`` hook
    (``specsim.engine.prefill_seconds``), so the chunked-prefill interplay stays the engine's.
    The draft's pass over the prompt runs inside the proposer and pays no admission.

    Parameters
    ----------
    lat : CpuLatency
    target_name : str
        ``ModelSpec.name`` of the served target.
    """

    calibrated = True

    def __init__(self, lat: CpuLatency, target_name: str):
        self.lat = lat
        self.target_name = target_name
        self.efficiency = lat.efficiency
        self.hardware = lat.hardware
        self.calibration = None
        self.scope = ("CPU stack: latency calibrated on the verification-cost probe only; speculative overheads "
                      "fitted on the self-draft fit runs; n-gram lookup seconds on one n-gram run")

    def pass_overhead_s(self, num_layers: int) -> float:
        return self.lat.pass_overhead_s(num_layers)

    def breakdown(self, model: Any, **kw) -> dict[str, np.ndarray]:
        """As :meth:`CpuLatency.breakdown`."""
        return self.lat.breakdown(model, **kw)

    def forward_time(self, model: Any, **kw) -> np.ndarray:
        """As :meth:`CpuLatency.forward_time`."""
        return self.lat.forward_time(model, **kw)

    def prefill_time(self, model: Any, *, tp, precision, concurrency, q_host, isl, context) -> np.ndarray:
        """Seconds one request's prefill adds (the engine's chunked-prefill rule) + its admission."""
        t = prefill_seconds(self.lat, model, tp, precision, concurrency, q_host, isl, context)
        return t + (self.lat.admit_per_seq_s if getattr(model, "name", None) == self.target_name else 0.0)

    def describe(self) -> str:
        return "CpuServingLatency: " + self.lat.describe()


@dataclass(frozen=True)
class LibraryFit:
    """The CPU stack's speculative terms for ``predict()`` and what they were fitted on.

    Attributes
    ----------
    draft_pass_overhead_s : float
        Seconds of fixed cost per draft forward (``Drafter.draft_pass_overhead_s``).
    spec_fixed_s, spec_per_token_s : float
        ``SpecOverhead`` fields (per speculative step; per verified token in the batch).
    lookup_s_per_request : float
        n-gram proposer seconds per request per step on this host (``Drafter.lookup_s_per_request``).
    fitted_on, lookup_fitted_on, held_out : tuple of str
    rmse_rel, lookup_rmse_rel : float
        Relative RMS ratio error on the fit runs.
    """

    draft_pass_overhead_s: float = 0.0
    spec_fixed_s: float = 0.0
    spec_per_token_s: float = 0.0
    lookup_s_per_request: float = 5e-6
    fitted_on: tuple[str, ...] = ()
    lookup_fitted_on: tuple[str, ...] = ()
    held_out: tuple[str, ...] = ()
    rmse_rel: float = float("nan")
    lookup_rmse_rel: float = float("nan")

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def _library_case(row: Mapping, lat: CpuLatency, target: Any, models_dir: Path | None):
    """The resolved inputs of one run for ``predict()``: ONLY what a user has before judging the run
    (its counters, its request lengths, concurrency, temperature) -- never its timings."""
    counts = SpecDecodeCounts(int(row["num_drafts"]), int(row["num_draft_tokens"]), int(row["num_accepted_tokens"]),
                              tuple(int(v) for v in row["accepted_per_pos"]), source=row["run_id"])
    temp = float(row.get("temperature") or 0.0)
    acc = Acceptance.from_counts(counts, temperature=temp)
    if row["method"] == "draft_model":
        drafter = get_drafter("draft_model", draft_model=_draft_spec(row["family"], target, models_dir)
                              ).with_params(precision=CPU_PRECISION)
    else:
        drafter = get_drafter(row["method"])
    kw = dict(hardware=CPU_HARDWARE, tp=1, precision=CPU_PRECISION, concurrency=int(row["concurrency"]),
              isl=int(round(np.mean(row["input_lens"]))), osl=max(1, int(round(np.mean(row["output_lens"])))),
              acceptance=acc, latency=CpuServingLatency(lat, target.name), temperature=temp)
    if drafter.kind == "lookup":
        # vLLM's counters: num_drafts drafted steps of decode_steps, num_draft_tokens proposed
        kw.update(drafted_fraction=float(min(1.0, row["draft_step_fraction"])),
                  mean_proposal_tokens=float(row["num_draft_tokens"]) / float(row["num_drafts"]))
    return drafter, kw


def predict_with_library(row: Mapping, lat: CpuLatency, fit: LibraryFit, *, target: Any = None,
                         models_dir: Path | None = None, case=None) -> dict:
    """``specsim.predict.predict`` for one recorded run: the library's model, judged on real vLLM.

    Inputs: the run's acceptance counters (per-position accepted counts, drafted steps, proposed
    tokens), its mean ISL / OSL and concurrency, the probe-calibrated CPU latency and the CPU
    stack's speculative terms (:class:`LibraryFit`); never the run's own timings.

    Returns
    -------
    dict
        ``predicted_ratio``, ``predicted_spec_tok_per_s``, ``predicted_base_tok_per_s``,
        ``predicted_tpot_s``, ``predicted_base_tpot_s``.
    """
    target = target if target is not None else load_model(CPU_TARGET)
    drafter, kw = case or _library_case(row, lat, target, models_dir)
    if drafter.kind == "lookup":
        drafter = drafter.with_params(lookup_s_per_request=fit.lookup_s_per_request)
    else:
        drafter = drafter.with_params(draft_pass_overhead_s=fit.draft_pass_overhead_s)
    p = predict(target, row["method"], int(row["num_speculative_tokens"]), drafter=drafter,
                overhead=SpecOverhead(fixed_s=fit.spec_fixed_s, per_token_s=fit.spec_per_token_s), **kw)
    return {"predicted_ratio": p.throughput_ratio, "predicted_spec_tok_per_s": p.output_tok_per_s,
            "predicted_base_tok_per_s": p.baseline_output_tok_per_s, "predicted_tpot_s": p.tpot_s,
            "predicted_base_tpot_s": p.baseline_tpot_s}


@shared_counts()  # every trial of the terms predicts the same runs: their counts once
def fit_library_overheads(pairs: pd.DataFrame, lat: CpuLatency, *, fit_families: Sequence[str] = ("selfdraft",),
                          lookup_fit_n: Sequence[int] = (1,), target: Any = None, models_dir: Path | None = None,
                          exclude_contended: bool = True) -> LibraryFit:
    """Fit the CPU stack's speculative terms for ``predict()`` on the same fit set as
    :func:`fit_spec_overheads` (+ :func:`fit_lookup_factor`'s n-gram run): ``draft_pass_overhead_s``,
    ``spec_fixed_s``, ``spec_per_token_s`` on the uncontended runs of ``fit_families``, then
    ``lookup_s_per_request`` (a physical term: the n-gram proposer's CPU seconds per request per step,
    in place of the scenario model's compute factor) on the uncontended n-gram runs with N in
    ``lookup_fit_n``.  ``scipy.optimize.least_squares`` on the relative ratio error, terms >= 0.

    Returns
    -------
    LibraryFit
    """
    from scipy.optimize import least_squares

    target = target if target is not None else load_model(CPU_TARGET)
    usable = pairs[pairs["usable"].astype(bool)] if len(pairs) else pairs
    if not len(usable):
        return LibraryFit()

    def clean(rows):
        return rows[~(_flag(rows["contended"]) | _flag(rows["baseline_contended"]))] if exclude_contended else rows

    fit_rows = clean(usable[usable["family"].isin(list(fit_families))])
    look_rows = clean(usable[(usable["method"] == "ngram") & usable["num_speculative_tokens"].isin(list(lookup_fit_n))])
    cases = {r["run_id"]: (r, _library_case(r, lat, target, models_dir)) for r in
             pd.concat([fit_rows, look_rows]).to_dict("records")}

    def errs(ids, f):
        return np.array([predict_with_library(cases[i][0], lat, f, target=target, case=cases[i][1])["predicted_ratio"]
                         / float(cases[i][0]["measured_ratio"]) - 1.0 for i in ids])

    f = LibraryFit()
    ids = list(fit_rows["run_id"])
    rmse = float("nan")
    if ids:
        scale = np.array([1e-2, 1e-2, 1e-3])

        def r1(x):
            return errs(ids, LibraryFit(*(x * scale)))
        sol = least_squares(r1, np.full(3, 0.5), bounds=(0.0, np.inf), method="trf")
        f = LibraryFit(*(sol.x * scale))
        rmse = float(np.sqrt(np.mean(sol.fun ** 2)))
    lids = list(look_rows["run_id"])
    lrmse = float("nan")
    if lids:
        def r2(x):
            return errs(lids, LibraryFit(f.draft_pass_overhead_s, f.spec_fixed_s, f.spec_per_token_s, float(x[0]) * 1e-3))
        sol = least_squares(r2, np.array([0.5]), bounds=(0.0, np.inf), method="trf")
        f = LibraryFit(f.draft_pass_overhead_s, f.spec_fixed_s, f.spec_per_token_s, float(sol.x[0]) * 1e-3)
        lrmse = float(np.sqrt(np.mean(sol.fun ** 2)))
    fitted = tuple(ids) + tuple(lids)
    held = tuple(r for r in usable["run_id"] if r not in set(fitted))
    return LibraryFit(f.draft_pass_overhead_s, f.spec_fixed_s, f.spec_per_token_s, f.lookup_s_per_request,
                      tuple(ids), tuple(lids), held, rmse, lrmse)


# ============================================================================================
# the whole validation
# ============================================================================================

@dataclass
class ValidationResult:
    """Output of :func:`validate`.

    Attributes
    ----------
    runs : DataFrame
        Every recorded bench run (:func:`load_runs`).
    errors : DataFrame
        One row per spec run: measured ratio; ``predicted_ratio`` / ``error`` (= predicted /
        measured - 1) of the library's model (``specsim.predict.predict``, the headline) with its
        absolute output tok/s and TPOT errors; ``scenario_*`` (the continuous-batching replay) and
        ``contract_*`` (the core model without fitted overheads) as comparisons; ``role``
        ("fitted" / "held-out" / "excluded"), counters and the per-run scenario quantities.
    latency : CpuLatency
    fit : SpecFit
        The scenario model's overheads (a comparison).
    summary : dict
        Headline numbers (median / max |error| on held-out runs, best-N agreement, token identity,
        health checks, what was fitted on what).
    health : DataFrame
    best_n : DataFrame
    library_fit : LibraryFit
        The CPU stack's speculative terms of the headline model (``predict()``).
    """

    runs: pd.DataFrame
    errors: pd.DataFrame
    latency: CpuLatency
    fit: SpecFit
    summary: dict
    health: pd.DataFrame
    best_n: pd.DataFrame
    library_fit: LibraryFit = field(default_factory=LibraryFit)


def _best_n(errors: pd.DataFrame) -> pd.DataFrame:
    """Best N per (family, concurrency) on held-out runs: measured argmax vs predicted argmax.

    Replicates of one (family, N, concurrency) -- the same configuration recorded in several
    matrix runs -- are averaged first (measured and predicted ratios alike)."""
    rows = []
    ho = errors[errors["role"] == "held-out"]
    for (fam, c), g0 in ho.groupby(["family", "concurrency"]):
        g = g0.groupby("num_speculative_tokens")[["measured_ratio", "predicted_ratio", "scenario_ratio",
                                                  "contract_ratio"]].mean()
        if len(g) < 2:
            continue
        mb, pb, sb, cb = (int(g[k].idxmax()) for k in ("measured_ratio", "predicted_ratio", "scenario_ratio",
                                                       "contract_ratio"))
        rows.append({"family": fam, "concurrency": int(c), "n_values": ",".join(str(int(n)) for n in g.index),
                     "replicates": int(len(g0)), "measured_best_n": mb, "predicted_best_n": pb, "contract_best_n": cb,
                     "scenario_best_n": sb, "agree": mb == pb, "scenario_agree": mb == sb, "contract_agree": mb == cb,
                     "measured_best_ratio": float(g["measured_ratio"].max()),
                     "measured_ratio_at_predicted_best": float(g.loc[pb, "measured_ratio"]),
                     # measured ratio lost by running the predicted best N instead of the measured best
                     "regret": float(g.loc[pb, "measured_ratio"] / g["measured_ratio"].max() - 1)})
    return pd.DataFrame(rows, columns=["family", "concurrency", "n_values", "replicates", "measured_best_n",
                                       "predicted_best_n", "contract_best_n", "scenario_best_n", "agree",
                                       "scenario_agree", "contract_agree",
                                       "measured_best_ratio", "measured_ratio_at_predicted_best", "regret"])


def _replicate_spread(errors: pd.DataFrame) -> dict:
    """Measurement noise floor: for configurations recorded more than once (several matrix stamps),
    the relative spread max/min - 1 of their measured ratios between each pair of recordings (so it
    does not grow with the number of recordings); median / max over every (configuration, pair)."""
    u = errors[errors["usable"].astype(bool)]
    spreads, n = [], 0
    for _, g in u.groupby(["family", "num_speculative_tokens", "concurrency"]):
        v = g["measured_ratio"].to_numpy(float)
        if len(v) >= 2:
            n += 1
            spreads += [float(max(a, b) / min(a, b) - 1) for i, a in enumerate(v) for b in v[i + 1:]]
    return {"configurations_repeated": n, "pairs": len(spreads),
            "median_spread": float(np.median(spreads)) if spreads else None,
            "max_spread": float(np.max(spreads)) if spreads else None,
            "definition": "max/min - 1 of the measured ratio between two recordings of one (family, N, "
                          "concurrency), over every configuration and pair"}


#: the matrix whose recorded runs are the headline CPU validation (data/matrices/cpu-validation)
HEADLINE_MATRIX = "cpu-validation"
#: the faster loop ``make validate-cpu`` runs (data/matrices/cpu-validation-fast)
FAST_MATRIX = "cpu-validation-fast"


def _no_runs_hint(matrix: str) -> str:
    """What to do when ``matrix`` has no runs in the directory: record them (a shipped matrix), or
    which matrices there are (a name that is not one)."""
    from specsim.runs.sweep_files import matrix_names

    shipped = matrix_names()
    if matrix in shipped:
        return (f" (none of {matrix!r}: record its runs with `specsim run-matrix --matrix {matrix}` into this "
                "directory first, or point --runs-dir at where they are)")
    return f" ({matrix!r} is not one of them, nor a shipped matrix: {', '.join(shipped) or 'none shipped'})"


def _near_stamps(stamp: str, recorded: Sequence[str]) -> list[str]:
    """The recorded stamps a mistyped ``stamp`` may have meant: one edit away (a character changed,
    dropped or added, two neighbours swapped, case ignored), at most three.  Stamps are UTC times that
    share most of their digits, so a looser likeness (``difflib``) matched any stamp of the same
    decade: ``20991231T000000`` got "did you mean '20261201T153000'?"."""
    v = stamp.casefold()
    return [r for r in recorded if r != stamp and _one_edit(v, r.casefold())][:3]


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by at most one edit (substitution, insertion, deletion or a swap
    of two neighbouring characters)."""
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if len(a) == len(b):  # one character changed, or two neighbours swapped (the rule of specsim's errors)
        return a[i + 1:] == b[i + 1:] or _one_swap(a, b)
    return a[i + 1:] == b[i:] if len(a) > len(b) else a[i:] == b[i + 1:]


@shared_counts()  # every trial of the terms predicts the same runs: their counts once
def validate(runs_dir: str | os.PathLike | None = None, *, matrix: str | None = HEADLINE_MATRIX,
             stamp: str | None = None, fit_families: Sequence[str] = ("selfdraft",),
             overhead_params: Sequence[str] = ("draft_pass_overhead_s", "spec_fixed_s", "spec_per_token_s"),
             lookup_fit_n: Sequence[int] = (1,), models_dir: str | os.PathLike | None = None,
             strict: bool = True) -> ValidationResult:
    """Load the recorded runs, calibrate (probe -> latency; fit set -> overheads), predict, judge.

    Parameters
    ----------
    runs_dir : path, optional
        Default ``<data>/runs``.
    matrix : str or None, default ``"cpu-validation"``
        Judge only the runs this matrix recorded, calibrated on the latest probe recorded with them
        (``"cpu-validation-fast"``: the ``make validate-cpu`` loop); None: every run in ``runs_dir``
        and its latest probe.  A matrix recorded by several invocations, each with its own probe, is
        better judged invocation by invocation (:func:`validate_invocations`, what ``specsim validate``
        without ``--stamp`` does): one probe for all of them mixes the machine's hours.
    stamp : str, optional
        Judge only one invocation of the matrix (its runs, probe and health checks), e.g. what one
        ``make validate-cpu`` gives.
    fit_families : sequence of str
        Run families whose runs fit the speculative overheads (default: the self-draft runs);
        every other usable spec run is held out and judged.
    overhead_params : sequence of str
        Overheads fitted on the fit set (see :func:`fit_spec_overheads`); default all three (the
        least-squares fit on the self-draft runs is free to set any of them to 0).
    lookup_fit_n : sequence of int
        ngram N values whose (uncontended) runs fit ``lookup_compute_factor``
        (:func:`fit_lookup_factor`); empty = not fitted (factor 1).  Every prediction is also given
        with factor 1 (``predicted_ratio_no_lookup_factor``) for comparison.
    models_dir : path, optional
        Local checkpoints (for the truncated draft's config.json); default ``<repo>/models``.
    strict : bool
        See :func:`load_runs`.

    Returns
    -------
    ValidationResult

    Raises
    ------
    SpecsimValueError
        ``stamp`` that no invocation can be recorded under (empty, a path; the rule of
        ``run-matrix --stamp``).
    DataError
        No probe recorded, malformed run directories (strict).
    """
    import dataclasses


    from specsim.runs.runner import check_stamp  # the rule run-matrix --stamp records under

    check_stamp(stamp)  # "" would judge nothing (or, in the CLI, every invocation pooled): refused
    target = load_model(CPU_TARGET)
    md = Path(models_dir) if models_dir is not None else None
    runs = load_runs(runs_dir, strict=strict, matrix=matrix, stamp=stamp)
    if (matrix is not None or stamp is not None) and runs.empty:
        allr = load_runs(runs_dir, strict=False)
        rec = {str(n): sorted(map(str, g["stamp"].dropna().unique())) for n, g in allr.groupby("matrix")} \
            if len(allr) else {}
        listed = "; ".join(f"{n} (stamps {', '.join(st)})" for n, st in sorted(rec.items()))
        near = _near_stamps(str(stamp), rec.get(matrix, []) if matrix is not None else
                            sorted({x for st in rec.values() for x in st})) if stamp else []
        raise DataError(f"no runs of matrix {matrix!r}" + (f" with stamp {stamp!r}" if stamp else "")
                        + (f" (did you mean {' or '.join(map(repr, near))}?)" if near else "")
                        + f" under {runs_dir or project_data_path('runs')}; recorded matrices: {listed or 'none'}"
                        + ("" if matrix is None or matrix in rec else _no_runs_hint(matrix)))
    probe_id, probe = load_probe(runs_dir, matrix=matrix, stamp=stamp)
    lat = fit_cpu_latency(probe, target=target, probe_run_id=probe_id)
    pairs = pair_runs(runs)
    fit = fit_spec_overheads(pairs, lat, fit_families=fit_families, params=overhead_params, target=target,
                             models_dir=md)
    if lookup_fit_n:
        fit = fit_lookup_factor(pairs, lat, fit, n_values=lookup_fit_n, target=target, models_dir=md)
    fit_v1 = dataclasses.replace(fit, lookup_compute_factor=1.0)
    lib = fit_library_overheads(pairs, lat, fit_families=fit_families, lookup_fit_n=lookup_fit_n, target=target,
                                models_dir=md)
    fitted = set(lib.fitted_on) | set(lib.lookup_fitted_on)
    recs = []
    for row in pairs.to_dict("records"):
        rec = {k: row.get(k) for k in (
            "run_id", "matrix", "family", "method", "num_speculative_tokens", "concurrency", "temperature",
            "status", "usable", "exclusion_reason", "baseline_run_id", "pairing", "output_tok_per_s",
            "baseline_tok_per_s", "measured_ratio", "measured_tpot_ratio", "mean_tpot_s", "baseline_tpot_s",
            "mean_ttft_s", "baseline_ttft_s", "duration_s", "baseline_duration_s", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "mal", "acceptance_rate",
            "mean_draft_length", "decode_steps", "draft_step_fraction", "q_eff", "m_eff", "greedy_identical",
            "identical", "compared", "contended", "baseline_contended", "other_cpu_fraction")}
        rec["accepted_per_pos"] = ";".join(map(str, row["accepted_per_pos"])) if row.get("accepted_per_pos") else ""
        rec["role"] = "fitted" if row["run_id"] in fitted else ("held-out" if row["usable"] else "excluded")
        for k in ("predicted_ratio", "error", "predicted_spec_tok_per_s", "predicted_base_tok_per_s",
                  "predicted_tpot_s", "predicted_base_tpot_s", "spec_tok_per_s_error", "base_tok_per_s_error",
                  "tpot_error", "base_tpot_error", "scenario_ratio", "scenario_error", "contract_ratio",
                  "contract_error", "scenario_prefill_share", "scenario_ratio_no_lookup_factor",
                  "scenario_error_no_lookup_factor", "spec_duration_error", "base_duration_error"):
            rec[k] = np.nan
        if row["usable"]:
            # the library's model: specsim.predict.predict with the run's counters (the headline)
            rec.update(predict_with_library(row, lat, lib, target=target, models_dir=md))
            rec["error"] = rec["predicted_ratio"] / rec["measured_ratio"] - 1.0
            rec["spec_tok_per_s_error"] = rec["predicted_spec_tok_per_s"] / rec["output_tok_per_s"] - 1.0
            rec["base_tok_per_s_error"] = rec["predicted_base_tok_per_s"] / rec["baseline_tok_per_s"] - 1.0
            rec["tpot_error"] = rec["predicted_tpot_s"] / rec["mean_tpot_s"] - 1.0
            rec["base_tpot_error"] = rec["predicted_base_tpot_s"] / rec["baseline_tpot_s"] - 1.0
            # comparisons: the continuous-batching scenario replay, and the core model without overheads
            sc = run_scenario(row, target=target, models_dir=md)
            p = predict_run(row, lat, fit, target=target, scenario=sc)
            rec["scenario_ratio"] = p["predicted_ratio"]
            rec["scenario_error"] = p["predicted_ratio"] / rec["measured_ratio"] - 1.0
            rec["scenario_prefill_share"] = p["predicted_prefill_share"]
            rec["scenario_ratio_no_lookup_factor"] = predict_run(row, lat, fit_v1, target=target,
                                                                 scenario=sc)["predicted_ratio"]
            rec["scenario_error_no_lookup_factor"] = rec["scenario_ratio_no_lookup_factor"] / rec["measured_ratio"] - 1.0
            rec["contract_ratio"] = predict_contract(row, lat, target=target, models_dir=md)
            # where the scenario model's miss sits: each arm's predicted vs measured duration (diagnostic only)
            rec["spec_duration_error"] = p["predicted_spec_s"] / rec["duration_s"] - 1.0
            rec["base_duration_error"] = p["predicted_base_s"] / rec["baseline_duration_s"] - 1.0
            rec["contract_error"] = rec["contract_ratio"] / rec["measured_ratio"] - 1.0
        recs.append(rec)
    errors = pd.DataFrame(recs)
    if errors.empty:
        errors = pd.DataFrame(columns=["run_id", "role", "family", "num_speculative_tokens", "concurrency",
                                       "measured_ratio", "predicted_ratio", "contract_ratio", "error", "contract_error"])
    best = _best_n(errors)
    health = load_health_checks(runs_dir, matrix=matrix, stamp=stamp)
    summary = _summarise(runs, errors, best, lat, fit, health, probe_id, lib)
    summary["matrix"] = matrix
    if stamp is not None:
        summary["stamp"] = stamp
    return ValidationResult(runs, errors, lat, fit, summary, health, best, lib)


def stamp_hosts(runs: pd.DataFrame) -> dict:
    """The kind of machine each invocation (stamp) ran on.

    Parameters
    ----------
    runs : DataFrame
        :func:`specsim.runs.records.load_runs` rows (``stamp``, ``host``: ``host.cpu_model | host.platform``
        of the run's provenance, None where not recorded).

    Returns
    -------
    dict
        stamp -> host string, or None when the stamp's runs record no host or more than one.
    """
    if not len(runs) or "host" not in runs.columns:
        return {st: None for st in (runs["stamp"].unique() if len(runs) else [])}
    out = {}
    for st, g in runs.groupby("stamp"):
        hosts = set(g["host"].dropna())
        out[st] = hosts.pop() if len(hosts) == 1 else None
    return out


def _same_host(hosts: Mapping, a: str, b: str) -> bool:
    return hosts.get(a) is not None and hosts.get(a) == hosts.get(b)


def stamp_sessions(runs: pd.DataFrame) -> dict:
    """Group a matrix's invocations (stamps) into sessions: one kind of machine (:func:`stamp_hosts`) and
    one UTC day (the stamp's ``YYYYMMDD``), as the full loop's reference pair of invocations was
    measured.  A stamp without a recorded host is a session of its own.

    Parameters
    ----------
    runs : DataFrame
        :func:`specsim.runs.records.load_runs` rows (``stamp`` as ``YYYYMMDDTHHMMSS``, ``host``).

    Returns
    -------
    dict
        Session name (``"<YYYY-MM-DD> <host>"``) -> sorted list of its stamps, in time order of the
        sessions' first stamps.
    """
    out: dict[str, list[str]] = {}
    for st, host in sorted(stamp_hosts(runs).items()):
        day = f"{st[:4]}-{st[4:6]}-{st[6:8]}"
        out.setdefault(f"{day} {host}" if host is not None else f"{day} {st} (host not recorded)", []).append(st)
    return out


def throughput_noise(runs: pd.DataFrame, *, same_host: bool = False) -> dict:
    """Run-to-run throughput noise: for each cell (serve config ``label`` x concurrency x temperature,
    baseline included) recorded usable in two or more matrix stamps, the spread max/min - 1 of its
    output tok/s between each PAIR of stamps (so the figure does not grow with the number of
    invocations); the median and max are over every (cell, pair).

    Parameters
    ----------
    runs : DataFrame
        :func:`specsim.runs.records.load_runs` rows (``label``, ``concurrency``, ``temperature``,
        ``stamp``, ``usable``, ``output_tok_per_s`` in tokens/s; ``host`` with ``same_host``).
    same_host : bool, default False
        Only pairs of stamps recorded on the same kind of machine (:func:`stamp_hosts`: the same
        ``host.cpu_model`` and ``host.platform``, which names the kernel build); stamps without a
        recorded host pair with none.  The figure like for like with a reference measured on one host.

    Returns
    -------
    dict
        ``labels_repeated``, ``pairs`` (cell x stamp pairs counted), ``median_spread`` / ``max_spread``
        (fractions; None when nothing is repeated) and the ``definition``.
    """
    spreads = []
    cells = 0
    hosts = stamp_hosts(runs) if same_host and len(runs) else {}
    if len(runs):
        u = runs[runs["usable"].astype(bool)]
        for _, g in u.groupby(["label", "concurrency", "temperature"]):
            by = g.groupby("stamp")["output_tok_per_s"].mean()
            pairs = [(by.iloc[i], by.iloc[j]) for i in range(len(by)) for j in range(i + 1, len(by))
                     if not same_host or _same_host(hosts, by.index[i], by.index[j])]
            if pairs:
                cells += 1
                spreads += [float(max(a, b) / min(a, b) - 1) for a, b in pairs]
    definition = ("max/min - 1 of output tok/s between two stamps that recorded one cell "
                  "(serve config, concurrency, temperature), over every cell and pair of stamps")
    if same_host:
        definition += " recorded on the same kind of machine (host.cpu_model and host.platform)"
    return {"labels_repeated": cells, "pairs": len(spreads),
            "median_spread": float(np.median(spreads)) if spreads else None,
            "max_spread": float(np.max(spreads)) if spreads else None,
            "definition": definition}


def noise_by_pair(runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`throughput_noise` per pair of stamps, split into the host's shift and the cells' scatter.

    For stamps a < b and the cells (serve config ``label`` x concurrency x temperature) usable in both,
    ``r = tok/s in b / tok/s in a``; ``median_spread`` is the median of ``max/min - 1`` (the figure
    :func:`throughput_noise` pools), ``host_shift`` the median of ``r - 1`` (the whole machine faster
    or slower in b: every cell moves together), ``scatter`` the median of ``|r / (1 + host_shift) - 1|``
    (what is left once that common shift is divided out).  Reported to explain the noise; not a criterion.

    Parameters
    ----------
    runs : DataFrame
        :func:`specsim.runs.records.load_runs` rows (``label``, ``concurrency``, ``temperature``,
        ``stamp`` as ``YYYYMMDDTHHMMSS``, ``usable``, ``output_tok_per_s`` in tokens/s).

    Returns
    -------
    DataFrame
        One row per pair: ``stamp_a``, ``stamp_b``, ``minutes_apart`` (between the stamps' starts),
        ``cells``, ``median_spread``, ``host_shift``, ``scatter`` (fractions), ``same_host`` (both
        stamps recorded on the same kind of machine, :func:`stamp_hosts`).
    """
    cols = ["stamp_a", "stamp_b", "minutes_apart", "cells", "median_spread", "host_shift", "scatter", "same_host"]
    if not len(runs):
        return pd.DataFrame(columns=cols)
    hosts = stamp_hosts(runs)
    u = runs[runs["usable"].astype(bool)]
    wide = u.groupby(["label", "concurrency", "temperature", "stamp"])["output_tok_per_s"].mean().unstack("stamp")
    out = []
    for i, a in enumerate(wide.columns):
        for b in wide.columns[i + 1:]:
            both = wide[[a, b]].dropna()
            if not len(both):
                continue
            r = (both[b] / both[a]).to_numpy(float)
            shift = float(np.median(r) - 1)
            apart = (pd.to_datetime(b, format="%Y%m%dT%H%M%S") - pd.to_datetime(a, format="%Y%m%dT%H%M%S"))
            out.append({"stamp_a": a, "stamp_b": b, "minutes_apart": float(apart.total_seconds() / 60),
                        "cells": int(len(both)), "median_spread": float(np.median(np.maximum(r, 1 / r) - 1)),
                        "host_shift": shift, "scatter": float(np.median(np.abs(r / (1 + shift) - 1))),
                        "same_host": _same_host(hosts, a, b)})
    return pd.DataFrame(out, columns=cols)


def pairing_shift(runs: pd.DataFrame) -> pd.DataFrame:
    """Does a server's place in a pair of servers started together (``concurrent_server_starts``) move
    its throughput?  Per invocation (stamp), the cells of the servers that benched first in their pair
    against those that benched second, each relative to the invocations whose servers started one at a
    time.

    In an invocation with paired starts, a serve config (``serve_group``) is *second* when a server it
    was started with (``started_with``) began benching before it (that server had benched and stopped),
    else *first*; an invocation with one-at-a-time starts takes the places the paired invocations give
    (a serve config whose place differs between them is left out), so its rows are the null: what the
    same split gives with no pairing.  For every usable cell (``serve_group`` x concurrency x
    temperature), ``r = tok/s / reference``, the reference being the median tok/s of that cell over the
    one-at-a-time invocations (for one of them: over the others).  ``second_over_first`` is the median
    ``r`` of the second-place cells over that of the first-place ones: 1 when the place does not matter,
    below 1 when the second server of a pair is slower.  Reported to explain the noise; not a criterion.

    Parameters
    ----------
    runs : DataFrame
        :func:`specsim.runs.records.load_runs` rows of one matrix (``stamp``, ``serve_group``,
        ``concurrency``, ``temperature``, ``started`` (UTC ISO), ``started_together``, ``started_with``,
        ``usable``, ``output_tok_per_s`` in tokens/s, ``steal_cpu_fraction``).

    Returns
    -------
    DataFrame
        One row per invocation with a reference: ``stamp``, ``paired`` (bool), ``cells_first``,
        ``cells_second``, ``throughput_ratio_first``, ``throughput_ratio_second`` (median r),
        ``second_over_first``, ``steal_first``, ``steal_second`` (median hypervisor steal fraction of
        the machine's CPUs during those benches; NaN where not recorded), ``reference_stamps``.
        Empty when no invocation started its servers in pairs.
    """
    cols = ["stamp", "paired", "cells_first", "cells_second", "throughput_ratio_first", "throughput_ratio_second",
            "second_over_first", "steal_first", "steal_second", "reference_stamps"]
    need = {"serve_group", "started_together", "started_with", "started"}
    if not len(runs) or not need <= set(runs.columns):
        return pd.DataFrame(columns=cols)
    u = runs[runs["usable"].astype(bool) & runs["serve_group"].notna()].copy()
    u["together"] = pd.to_numeric(u["started_together"], errors="coerce").fillna(1).astype(int)
    u["steal"] = pd.to_numeric(u["steal_cpu_fraction"], errors="coerce")
    by_stamp = u.groupby("stamp")["together"].max()
    paired, alone = sorted(by_stamp.index[by_stamp > 1]), sorted(by_stamp.index[by_stamp == 1])
    if not paired:
        return pd.DataFrame(columns=cols)
    places: dict[str, dict[str, str]] = {}
    for st in paired:
        d = u[u["stamp"] == st]
        first_bench = d.groupby("serve_group")["started"].min()
        with_ = d.groupby("serve_group")["started_with"].first()
        together = d.groupby("serve_group")["together"].max()
        places[st] = {g: ("second" if any(o in first_bench and first_bench[o] < t
                                          for o in str(with_[g] or "").split(",") if o) else "first")
                      for g, t in first_bench.items() if together[g] > 1}
    common: dict[str, str] = {}
    for g in {g for pl in places.values() for g in pl}:
        seen = {pl[g] for pl in places.values() if g in pl}
        if len(seen) == 1:
            common[g] = seen.pop()
    key = ["serve_group", "concurrency", "temperature"]
    thr = u.groupby([*key, "stamp"])["output_tok_per_s"].mean().unstack("stamp")
    steal = u.groupby([*key, "stamp"])["steal"].mean().unstack("stamp")
    out = []
    for st in sorted(paired + alone):
        refs = [a for a in alone if a != st]
        if not refs:
            continue
        ref = thr[refs].median(axis=1)
        pl = places.get(st, common)
        r = (thr[st] / ref).dropna()
        pos = pd.Series([pl.get(k[0]) for k in r.index], index=r.index)
        row = {"stamp": st, "paired": st in places, "reference_stamps": len(refs)}
        for where in ("first", "second"):
            sel = r[pos == where]
            row[f"cells_{where}"] = int(len(sel))
            row[f"throughput_ratio_{where}"] = float(sel.median()) if len(sel) else float("nan")
            stl = steal[st].reindex(sel.index).dropna()
            row[f"steal_{where}"] = float(stl.median()) if len(stl) else float("nan")
        row["second_over_first"] = row["throughput_ratio_second"] / row["throughput_ratio_first"]
        out.append(row)
    return pd.DataFrame(out, columns=cols)


@dataclass
class LoopComparison:
    """Output of :func:`compare_loops`: does the faster validation loop keep the full loop's power?

    Attributes
    ----------
    loops : DataFrame
        One row per loop (matrix): held-out runs, median / max |ratio error|, best-N agreement,
        ratio and throughput run-to-run noise, stamps, cells, recorded bench seconds.
    best_n : DataFrame
        Per (family, concurrency): measured and predicted best N in each loop.
    configs : DataFrame
        Per (family, N, concurrency): mean measured ratio and mean |error| in each loop.
    stamps : DataFrame
        Each single invocation (stamp) that recorded its own probe and baselines, validated alone:
        what one ``make validate-cpu`` run would report.
    summary : dict
        The criteria (stated before the fast loop was run: see ``criteria``) and whether each is met.
    """

    loops: pd.DataFrame
    best_n: pd.DataFrame
    configs: pd.DataFrame
    stamps: pd.DataFrame
    summary: dict


@dataclass
class InvocationsValidation:
    """Output of :func:`validate_invocations`: one matrix judged invocation by invocation.

    Attributes
    ----------
    matrix : str
    whole : ValidationResult
        The matrix validated as one (every run, on its latest probe).
    per_stamp : dict
        Stamp -> that invocation validated alone on its own probe (:func:`validate` with
        ``stamp=``), or None where it has no probe / baselines of its own (a partial repeat).
    errors, best_n : DataFrame
        The pooled judgement: every invocation's own errors when each has its own probe, else
        ``whole``'s.
    pooling : str
        Which of the two, in words.
    """

    matrix: str
    whole: ValidationResult
    per_stamp: dict
    errors: pd.DataFrame
    best_n: pd.DataFrame
    pooling: str

    @property
    def pooled(self) -> bool:
        """True when every invocation was judged on its own probe and the invocations pooled."""
        return self.pooling.startswith("invocations pooled")

    def held_out_summary(self) -> dict:
        """``held_out`` runs, ``median_abs_error`` / ``max_abs_error`` (fractions) of the held-out
        runs, ``best_n_agree`` of ``best_n_groups``, and the ``pooling``."""
        ho = self.errors[self.errors["role"] == "held-out"]
        return {"held_out": int(len(ho)),
                "median_abs_error": float(ho["error"].abs().median()) if len(ho) else None,
                "max_abs_error": float(ho["error"].abs().max()) if len(ho) else None,
                "best_n_agree": int(self.best_n["agree"].sum()), "best_n_groups": int(len(self.best_n)),
                "pooling": self.pooling}


def validate_invocations(runs_dir: str | os.PathLike | None = None, *, matrix: str = HEADLINE_MATRIX,
                         whole: ValidationResult | None = None) -> InvocationsValidation:
    """Judge each invocation (stamp) of ``matrix`` on its own probe and pool them, as
    :func:`compare_loops` does; where an invocation has no probe of its own (a partial repeat) the
    matrix is judged as one on its latest probe, and ``pooling`` names those invocations and why
    (also one with a probe but no held-out run of its own: its baselines missing or failed).  A machine faster or slower in one hour then moves
    that invocation's arms and probe alike.

    Parameters
    ----------
    runs_dir : path, optional
        Default ``<data>/runs``.
    matrix : str
        Matrix name (default the headline ``cpu-validation``).
    whole : ValidationResult, optional
        :func:`validate` of the whole matrix on ``runs_dir``, if already computed.

    Returns
    -------
    InvocationsValidation

    Raises
    ------
    DataError
        No runs of ``matrix`` (the message lists the recorded matrices and stamps), or no probe.
    """
    r = whole if whole is not None else validate(runs_dir, matrix=matrix)
    per_stamp, why = {}, {}
    for st in sorted(r.runs["stamp"].dropna().unique()):
        try:
            v = validate(runs_dir, matrix=matrix, stamp=st)
        except DataError as exc:  # a partial repeat: no probe of its own, ...
            msg = str(exc).split(";")[0]
            per_stamp[st], why[st] = None, ("no verification-cost probe of its own" if "probe" in msg else msg)
            continue
        if v.summary["held_out"]["n"] == 0:  # ... or no run it can judge alone (no ok baseline of its own)
            per_stamp[st], why[st] = None, "no held-out run of its own (no ok baseline to pair with)"
            continue
        per_stamp[st] = v
    if per_stamp and all(v is not None for v in per_stamp.values()):
        errors = pd.concat([v.errors for v in per_stamp.values()], ignore_index=True)
        best, pooling = _best_n(errors), "invocations pooled, each on its own probe and fit"
    else:
        errors, best = r.errors, r.best_n
        pooling = (f"one validation of the matrix on probe {r.summary['latency_fitted_on'].split()[2]}"
                   + (" (not judgeable alone: " + "; ".join(f"{st}: {w}" for st, w in why.items()) + ")"
                      if why else ""))
    return InvocationsValidation(matrix, r, per_stamp, errors, best, pooling)


def interleaved_noise(runs_dir: str | os.PathLike, *, full: str = HEADLINE_MATRIX,
                      fast: str = FAST_MATRIX) -> dict:
    """Both loops' run-to-run throughput noise measured in the same hour: invocations of the same cells
    of ``full`` and ``fast`` (``run-matrix --only``), alternated in time, recorded under ``runs_dir``
    (the checkout's ``data/runs-interleaved``: its README says how they were made).  A diagnostic of
    :func:`compare_loops`' noise criterion (which compares noise measured on different days), not a
    criterion itself.

    Parameters
    ----------
    runs_dir : path
        Recorded runs (:func:`specsim.runs.records.load_runs`) of both matrices.
    full, fast : str
        Matrix names.

    Returns
    -------
    dict
        ``definition`` and, per matrix, ``stamps``, ``cells`` (distinct serve config x concurrency x
        temperature), ``throughput_noise_median`` (:func:`throughput_noise`, a fraction) and ``pairs``
        (:func:`noise_by_pair` rows).

    Raises
    ------
    DataError
        Either matrix has fewer than two invocations there.
    """
    runs = load_runs(runs_dir)
    out: dict = {"definition": "the same cells of both matrices, invocations alternated in time (full, fast, full, "
                               "fast); per matrix throughput_noise's median spread and noise_by_pair's split"}
    for name in (full, fast):
        r = runs[runs["matrix"] == name] if len(runs) else runs
        if not len(r) or r["stamp"].nunique() < 2:
            raise DataError(f"{runs_dir}: fewer than two invocations of {name!r}; the interleaved noise needs two "
                            "of each matrix")
        out[name] = {"stamps": sorted(r["stamp"].unique()),
                     "cells": int(r.groupby(["label", "concurrency", "temperature"]).ngroups),
                     "throughput_noise_median": throughput_noise(r)["median_spread"],
                     "pairs": noise_by_pair(r).to_dict("records")}
    return out


#: beside the runs directory: sets of invocations named before they ran (:func:`load_preregistered`)
PREREGISTERED_FILE = "preregistered.json"


def load_preregistered(path: str | os.PathLike) -> list[dict]:
    """Read the sets of recorded invocations that were named before any of them ran.

    Each set was named, with what would be reported about it, before its runs were started, so that
    judging it is a test and not a fit to what was seen.

    Parameters
    ----------
    path : path
        JSON ``{"sets": [{"name": str, "matrix": str, "registered": str, "stamps": [str, ...]}, ...]}``;
        ``registered`` says when and where the set was named (e.g. the commit that named it); ``stamps``
        are the invocations' ``YYYYMMDDTHHMMSS`` stamps, at least one, none twice.  A missing file gives
        no sets.

    Returns
    -------
    list of dict
        The sets, in file order.

    Raises
    ------
    DataError
        The file is not that JSON: not parseable, no list ``sets``, a set that is not an object, lacks
        a key, has a key of the wrong type, no stamps or a stamp twice.  The message names the file,
        the set and the field.
    """
    p = Path(path)
    if not p.exists():
        return []
    try:
        doc = json.loads(p.read_text())
    except ValueError as exc:
        raise DataError(f"{p}: not valid JSON ({exc})") from exc
    sets = doc.get("sets") if isinstance(doc, dict) else None
    if not isinstance(sets, list):
        raise DataError(f"{p}: expected {{'sets': [...]}} with a list of sets, got {type(sets).__name__} for 'sets'")
    for i, s_ in enumerate(sets):
        where = f"{p}: set {i}"
        if not isinstance(s_, dict):
            raise DataError(f"{where}: expected an object with name, matrix, registered, stamps; got {s_!r}")
        where += f" ({s_.get('name')!r})"
        lacking = [k for k in ("name", "matrix", "registered", "stamps") if k not in s_]
        if lacking:
            raise DataError(f"{where}: lacks {lacking}")
        for k in ("name", "matrix", "registered"):
            if not isinstance(s_[k], str) or not s_[k]:
                raise DataError(f"{where}: {k} must be a non-empty string, got {s_[k]!r}")
        st = s_["stamps"]
        if not isinstance(st, list) or not st or not all(isinstance(x, str) for x in st):
            raise DataError(f"{where}: stamps must be a non-empty list of stamp strings, got {st!r}")
        twice = sorted({x for x in st if st.count(x) > 1})
        if twice:
            raise DataError(f"{where}: stamps named twice: {twice}")
    return list(sets)


def _same_power_met(full_row: Mapping, median_abs_error: float | None, best_n_agree: int,
                    noise_median: float | None) -> dict:
    """The three same-power criteria of :func:`compare_loops` for one judged set of fast-loop runs
    against the full loop's row (``median_abs_error``, ``best_n_agree``, ``throughput_noise_median``,
    the last the tolerance): bools, ``noise_not_larger`` None where the set measured no noise."""
    tol = full_row["throughput_noise_median"]
    return {"median_error_within_noise": bool(tol is not None and median_abs_error is not None
                                              and abs(median_abs_error - full_row["median_abs_error"]) <= tol),
            "best_n_agreement_kept": bool(best_n_agree >= full_row["best_n_agree"]),
            "noise_not_larger": None if noise_median is None else bool(tol is not None and noise_median <= tol)}


#: the columns of a best-N group that loops.json reports
_BEST_N_REPORTED = ["family", "concurrency", "n_values", "measured_best_n", "predicted_best_n", "agree", "regret"]


def compare_loops(runs_dir: str | os.PathLike | None = None, *, full: str = HEADLINE_MATRIX,
                  fast: str = FAST_MATRIX, results: Mapping[str, ValidationResult] | None = None,
                  interleaved_dir: str | os.PathLike | None = None,
                  stamp_sets: Sequence[Mapping] | None = None,
                  same_session_dirs: Sequence[str | os.PathLike] | None = None) -> LoopComparison:
    """Judge the fast CPU validation loop against the full one, each validated on its own runs.

    Each matrix's runs are validated separately, never on the other's: when every invocation (stamp)
    of a matrix recorded its own probe, each invocation is validated alone (its own probe, fit set and
    held-out runs, :func:`validate` with ``stamp=``) and the invocations are pooled; otherwise (a
    partial repeat without a probe) the matrix is validated as one (:func:`validate` with ``matrix=``).
    A machine that is faster or slower on one day thus shifts both arms and the probe alike.  The
    criteria ("the same power", issue 11):

    * held-out median |ratio error| of the fast loop within the full loop's run-to-run throughput
      noise (median spread, :func:`throughput_noise`) of the full loop's value;
    * at least as many best-N groups agree as in the full loop;
    * the fast loop's own run-to-run noise (from its repeated stamps) no larger than the full loop's
      noise -- a larger one would be less power even with equal errors.

    Reported beside the criteria, not criteria: ``noise_same_host`` (each loop's noise over the pairs
    of stamps recorded on the same kind of machine, :func:`throughput_noise` with ``same_host``: the
    full loop's pair ran on one host, the fast loop's pairs span several), ``by_session`` (the three
    criteria applied to each session of the fast loop alone, :func:`stamp_sessions`), ``noise_by_pair``,
    ``pairing_shift``, ``interleaved_noise``, ``common_configurations`` and ``both_loops_same_session``.

    Parameters
    ----------
    runs_dir : path, optional
        Default ``<data>/runs``.
    full, fast : str
        Matrix names (default ``cpu-validation`` and ``cpu-validation-fast``).
    results : mapping of matrix name to ValidationResult, optional
        Validations already computed on ``runs_dir`` (e.g. the headline one), reused instead of
        recomputed.
    interleaved_dir : path, optional
        Runs of both loops alternated in time (:func:`interleaved_noise`; default the ``runs-interleaved``
        directory beside ``runs_dir`` when it exists): reported in ``summary["interleaved_noise"]``.
        Without it, later repeats of that protocol in ``runs-interleaved-<date>`` directories beside
        ``runs_dir`` (one session each, so no pair spans two hosts) are reported too, in
        ``summary["interleaved_noise_later"]`` (directory name -> :func:`interleaved_noise`).
    stamp_sets : sequence of dict, optional
        Sets of the fast loop's invocations named before they ran (:func:`load_preregistered`; default
        ``preregistered.json`` beside ``runs_dir`` when it exists), each judged alone by the three
        criteria, as ``by_session`` judges a session: ``summary["preregistered"]``.
    same_session_dirs : sequence of path, optional
        Directories each holding complete invocations of BOTH loops from one session (one host, one
        day, alternated in time), each compared on its own with this function (both loops' figures from
        that directory only): ``summary["both_loops_same_session"]`` (directory name -> criteria,
        ``same_power``, every invocation alone with its best-N groups, each loop's pooled best-N groups
        and each loop's ``noise``, :func:`interleaved_noise`).  Default: the ``runs-both-loops-*``
        directories beside ``runs_dir``; ``()`` for none; one path is taken as a list of one.

    Returns
    -------
    LoopComparison

    Raises
    ------
    DataError
        Either matrix has no recorded runs or no probe, or a pre-registered stamp has no recorded
        invocation with its own probe, or a same-session directory lacks two invocations of either
        loop or their probes.
    SpecsimValueError
        A pre-registered set names another matrix than ``fast``.
    """
    base = Path(runs_dir) if runs_dir is not None else project_data_path("runs")
    sets = list(stamp_sets) if stamp_sets is not None else load_preregistered(base.parent / PREREGISTERED_FILE)
    for s_ in sets:
        if s_.get("matrix") != fast:
            raise SpecsimValueError("stamp_sets.matrix", f"only the fast loop's ({fast}) invocations are judged "
                                    f"in sets (set {s_.get('name')!r})", s_.get("matrix"), [fast])
        unknown = [st for st in s_["stamps"] if not any(base.glob(f"{fast}-{st}-*"))]
        if unknown:
            raise DataError(f"set {s_['name']!r}: no recorded {fast} invocation with stamps {unknown} in {base}")
    done = dict(results or {})
    inv = {name: validate_invocations(runs_dir, matrix=name, whole=done.get(name)) for name in (full, fast)}
    res = {name: v.whole for name, v in inv.items()}
    # every invocation alone, on its own probe and fit (what one make validate-cpu reports)
    single, single_best = [], []
    for name, v in inv.items():
        for st, one in v.per_stamp.items():
            if one is None:
                continue
            single_best += [{"matrix": name, "stamp": st, **g} for g in one.best_n[_BEST_N_REPORTED].to_dict("records")]
            ho = one.errors[one.errors["role"] == "held-out"]
            single.append({"matrix": name, "stamp": st, "held_out": int(len(ho)),
                           "median_abs_error": float(ho["error"].abs().median()) if len(ho) else None,
                           "max_abs_error": float(ho["error"].abs().max()) if len(ho) else None,
                           "best_n_agree": int(one.best_n["agree"].sum()), "best_n_groups": int(len(one.best_n)),
                           "probe": one.summary["latency_fitted_on"].split()[2],
                           "probe_rmse_rel": one.latency.rmse_rel})
    stamps = pd.DataFrame(single, columns=["matrix", "stamp", "held_out", "median_abs_error", "max_abs_error",
                                           "best_n_agree", "best_n_groups", "probe", "probe_rmse_rel"])
    rows, bn, cf, pooled_errors = [], [], [], {}
    for name, r in res.items():
        errors, best, pooling = inv[name].errors, inv[name].best_n, inv[name].pooling
        pooled_errors[name] = errors
        ho = errors[errors["role"] == "held-out"]
        tn = throughput_noise(r.runs)
        tn_host = throughput_noise(r.runs, same_host=True)
        ok = r.runs[r.runs["status"] == "ok"] if len(r.runs) else r.runs
        rows.append({"matrix": name, "pooling": pooling, "stamps": int(r.runs["stamp"].nunique()),
                     "bench_runs_ok": int(len(ok)), "held_out": int(len(ho)),
                     "median_abs_error": float(ho["error"].abs().median()),
                     "max_abs_error": float(ho["error"].abs().max()),
                     "best_n_agree": int(best["agree"].sum()), "best_n_groups": int(len(best)),
                     "ratio_noise_median": _replicate_spread(errors)["median_spread"],
                     "throughput_noise_median": tn["median_spread"], "throughput_noise_max": tn["max_spread"],
                     "labels_repeated": tn["labels_repeated"],
                     "throughput_noise_same_host_median": tn_host["median_spread"],
                     "same_host_cell_pairs": tn_host["pairs"],
                     "bench_duration_s_per_stamp": float(ok["duration_s"].sum() / max(ok["stamp"].nunique(), 1))})
        b = best.assign(matrix=name)
        bn.append(b[["matrix", "family", "concurrency", "n_values", "measured_best_n", "predicted_best_n", "agree",
                     "regret"]])
        u = errors[errors["usable"].astype(bool)]
        g = u.groupby(["family", "num_speculative_tokens", "concurrency"]).agg(
            measured_ratio=("measured_ratio", "mean"), abs_error=("error", lambda e: float(e.abs().mean())),
            recordings=("run_id", "count"), role=("role", lambda x: ",".join(sorted(set(x)))))
        cf.append(g.add_prefix(f"{name}:"))
    loops = pd.DataFrame(rows)
    configs = pd.concat(cf, axis=1).reset_index()
    fl, fs = loops.iloc[0], loops.iloc[1]
    noise = fl["throughput_noise_median"]
    met = _same_power_met(fl, fs["median_abs_error"], fs["best_n_agree"], fs["throughput_noise_median"])
    crit = {
        "median_error_within_noise": {
            "full": fl["median_abs_error"], "fast": fs["median_abs_error"], "tolerance": noise,
            "met": met["median_error_within_noise"]},
        "best_n_agreement_kept": {"full": f"{fl['best_n_agree']} of {fl['best_n_groups']}",
                                  "fast": f"{fs['best_n_agree']} of {fs['best_n_groups']}",
                                  "met": met["best_n_agreement_kept"]},
        "noise_not_larger": {"full": noise, "fast": fs["throughput_noise_median"],
                             "met": bool(met["noise_not_larger"])},
    }
    # how well two loops' held-out medians can be told apart at all: a bootstrap over held-out runs
    # (each loop resampled on its own; runs of one loop share a fit, so this is an approximation)
    key = ["family", "num_speculative_tokens", "concurrency"]
    held = {name: e[e["role"] == "held-out"] for name, e in pooled_errors.items()}
    e_full, e_fast = (np.abs(held[n]["error"].to_numpy(float)) for n in (full, fast))
    boot = stats.bootstrap((e_fast, e_full), lambda a, b, axis=-1: np.median(a, axis=axis) - np.median(b, axis=axis),
                           vectorized=True, paired=False, confidence_level=0.90, n_resamples=4000,
                           method="percentile", random_state=np.random.default_rng(0))
    crit["median_error_within_noise"]["difference_ci90"] = [float(boot.confidence_interval.low),
                                                           float(boot.confidence_interval.high)]
    # the held-out configurations differ (contended runs are held out, uncontended n-gram N = 1 runs fit):
    # the same comparison on the (family, N, concurrency) held out in both loops -- reported, not a criterion
    common = held[full][key].merge(held[fast][key]).drop_duplicates()
    c_full, c_fast = (np.abs(held[n].merge(common)["error"].to_numpy(float)) for n in (full, fast))
    summary = {"full": full, "fast": fast, "criteria": crit,
               "same_power": all(c["met"] for c in crit.values()),
               "difference_ci90_definition": "percentile bootstrap (4000 resamples, seed 0) of median |error| "
                                             "fast - full over each loop's held-out runs",
               "common_configurations": {
                   "configurations": int(len(common)), "full_runs": int(len(c_full)), "fast_runs": int(len(c_fast)),
                   "full_median_abs_error": float(np.median(c_full)) if len(c_full) else None,
                   "fast_median_abs_error": float(np.median(c_fast)) if len(c_fast) else None,
                   "definition": "held-out runs of the (family, N, concurrency) held out in both loops"},
               "note": "each loop validated on its own runs; an invocation with its own probe is judged on it; the "
                       "fast loop's cells are shorter (fewer output tokens and prompts), so per-configuration "
                       "ratios differ by regime as well as by noise"}
    summary["single_invocations"] = stamps.to_dict("records")
    summary["single_invocations_best_n"] = single_best  # each invocation's groups, on its own probe
    # noise_not_larger compares the fast loop's pairs of every host with the full loop's pairs, which
    # all ran on one host: the like-for-like figure (pairs on the same kind of machine only) beside it
    summary["noise_same_host"] = {
        "definition": "throughput_noise over the pairs of stamps recorded on the same kind of machine "
                      "(host.cpu_model and host.platform, which names the kernel build); reported beside "
                      "noise_not_larger, not a criterion",
        **{name: {"median_spread": row["throughput_noise_same_host_median"],
                  "cell_pairs": int(row["same_host_cell_pairs"]),
                  "all_hosts_median_spread": row["throughput_noise_median"]}
           for name, row in loops.set_index("matrix").iterrows()}}
    # the criteria applied to each session of the fast loop alone (one host, one day: the conditions of
    # the full loop's reference pair) -- reported, not a criterion: the criteria above pool every session
    per_stamp_fast = inv[fast].per_stamp

    def judged(sts: Sequence[str]) -> dict:
        """The three criteria for the fast loop's invocations ``sts`` alone, each on its own probe."""
        err = pd.concat([per_stamp_fast[st].errors for st in sts], ignore_index=True)
        ho = err[err["role"] == "held-out"]
        best_s = _best_n(err)
        tn_s = throughput_noise(res[fast].runs[res[fast].runs["stamp"].isin(sts)])["median_spread"]
        med = float(ho["error"].abs().median()) if len(ho) else None
        agree = int(best_s["agree"].sum())
        met_s = _same_power_met(fl, med, agree, tn_s)
        return {"stamps": list(sts), "held_out": int(len(ho)), "median_abs_error": med, "best_n_agree": agree,
                "best_n_groups": int(len(best_s)), "throughput_noise_median": tn_s, **met_s,
                "all_met": all(met_s.values()),
                # which groups agree, and the measured speedup lost where they do not (regret)
                "best_n": best_s[_BEST_N_REPORTED].to_dict("records")}

    by_session = [{"session": sess, **judged(sts)} for sess, sts in stamp_sessions(res[fast].runs).items()
                  if all(per_stamp_fast.get(st) is not None for st in sts)]
    summary["by_session"] = {
        "definition": "the three criteria applied to the invocations of one session of the fast loop alone (one "
                      "kind of machine, one UTC day: the conditions of the full loop's reference pair), each "
                      "invocation on its own probe and pooled, against the full loop; noise needs two or more "
                      "invocations (None: not measured, all_met false); a session with an invocation "
                      "without its own probe is left out; best_n: the groups, with the measured speedup lost "
                      "where the predicted best N is run instead of the measured one (regret). Reported, not a "
                      "criterion",
        fast: by_session}
    summary["noise_by_pair"] = {
        "definition": "per pair of stamps of one loop: median_spread (max/min - 1, what noise_not_larger pools), "
                      "host_shift (median tok/s ratio - 1: the machine faster or slower as a whole) and scatter "
                      "(median |ratio / (1 + host_shift) - 1|); reported to explain the noise, not a criterion",
        **{name: noise_by_pair(res[name].runs).to_dict("records") for name in (full, fast)}}
    summary["pairing_shift"] = {
        "definition": "per invocation of the fast loop: median tok/s of the cells of the servers that benched "
                      "second in their pair of servers started together, over that of the first, each relative "
                      "to the one-at-a-time invocations (pairing_shift); invocations started one at a time "
                      "give the null. Reported to explain the noise, not a criterion",
        fast: pairing_shift(res[fast].runs).to_dict("records")}
    # sets of invocations named BEFORE they ran (preregistered.json beside the runs): judged alone
    if sets:
        judged_sets = []
        for s_ in sets:
            missing = [st for st in s_["stamps"] if per_stamp_fast.get(st) is None]
            if missing:
                raise DataError(f"pre-registered set {s_['name']!r}: no recorded {fast} invocation with its own "
                                f"probe for stamps {missing} in {base}")
            judged_sets.append({k: v for k, v in s_.items() if k not in ("stamps", "matrix")} | judged(s_["stamps"]))
        summary["preregistered"] = {
            "definition": "sets of the fast loop's invocations named (with what would be reported) before any of "
                          "them ran, judged alone by the three criteria as by_session judges a session; "
                          "registered: when and where the set was named. Reported, not a criterion",
            fast: judged_sets}
    il = Path(interleaved_dir) if interleaved_dir is not None else base.parent / "runs-interleaved"
    if interleaved_dir is not None or il.is_dir():
        summary["interleaved_noise"] = interleaved_noise(il, full=full, fast=fast)
    # later repeats of the same protocol, one directory per session (runs-interleaved-<YYYY-MM-DD>)
    if interleaved_dir is None:
        later = sorted(d for d in base.parent.glob("runs-interleaved-*") if d.is_dir())
        if later:
            summary["interleaved_noise_later"] = {d.name: interleaved_noise(d, full=full, fast=fast) for d in later}
    # both loops run in one session (runs-both-loops-<date>): the criteria with the full loop's reference
    # measured beside the fast loop, and whether the full loop reproduces its own best-N count
    if isinstance(same_session_dirs, (str, os.PathLike)):
        same_session_dirs = [same_session_dirs]
    both = ([Path(d) for d in same_session_dirs] if same_session_dirs is not None
            else sorted(d for d in base.parent.glob("runs-both-loops-*") if d.is_dir()))
    if both:
        summary["both_loops_same_session"] = {
            "definition": "both loops' complete invocations from one session (one host, one day, alternated in "
                          "time), compared by the same three criteria with the full loop's figures taken from "
                          "that session only; single_invocations: each invocation alone on its own probe; "
                          "best_n: each loop's pooled groups with the regret. Reported, not a criterion",
            **{d.name: _same_session(d, full, fast) for d in both}}
    return LoopComparison(loops, pd.concat(bn, ignore_index=True), configs, stamps,
                          json.loads(json.dumps(summary, default=_jsonable)))


def _same_session(runs_dir: Path, full: str, fast: str) -> dict:
    """:func:`compare_loops` on one directory of both loops' invocations from one session (no sets, no
    other directories): its criteria, verdict, single invocations and each loop's best-N groups."""
    one = compare_loops(runs_dir, full=full, fast=fast, stamp_sets=(), same_session_dirs=(),
                        interleaved_dir=runs_dir)
    best = one.best_n.drop(columns="matrix")
    return {"criteria": one.summary["criteria"], "same_power": one.summary["same_power"],
            "single_invocations": one.summary["single_invocations"],
            "single_invocations_best_n": one.summary["single_invocations_best_n"],
            "best_n": {name: best[one.best_n["matrix"] == name].to_dict("records") for name in (full, fast)},
            "noise": one.summary["interleaved_noise"]}


def write_loop_comparison(cmp: LoopComparison, out_dir: str | os.PathLike | None = None) -> list[Path]:
    """Write ``loops.csv``, ``loops_best_n.csv``, ``loops_configs.csv``, ``loops_stamps.csv`` and ``loops.json`` into
    ``out_dir`` (default ``<data>/validation``), each atomically."""
    d = Path(out_dir) if out_dir is not None else project_data_path("validation")
    return [
        atomic_write(d / "loops.csv", lambda p: cmp.loops.to_csv(p, index=False, float_format="%.6g")),
        atomic_write(d / "loops_best_n.csv", lambda p: cmp.best_n.to_csv(p, index=False, float_format="%.6g")),
        atomic_write(d / "loops_configs.csv", lambda p: cmp.configs.to_csv(p, index=False, float_format="%.6g")),
        atomic_write(d / "loops_stamps.csv", lambda p: cmp.stamps.to_csv(p, index=False, float_format="%.6g")),
        atomic_write(d / "loops.json", lambda p: p.write_text(json.dumps(cmp.summary, indent=2) + "\n")),
    ]


def _flag(s: pd.Series) -> pd.Series:
    """Boolean flag column with missing values as False."""
    return s.map(lambda v: bool(v) if isinstance(v, (bool, np.bool_)) else False)


def _stats(e: pd.Series) -> dict:
    a = e.abs().dropna()
    return {"n": int(len(a)), "median_abs_error": float(a.median()) if len(a) else None,
            "max_abs_error": float(a.max()) if len(a) else None,
            "mean_error": float(e.dropna().mean()) if len(a) else None}


def _summarise(runs, errors, best, lat, fit, health, probe_id, lib=None) -> dict:
    ho = errors[errors["role"] == "held-out"]
    ft = errors[errors["role"] == "fitted"]
    spec = errors
    greedy = spec[(spec["temperature"].fillna(0).astype(float) == 0) & spec["greedy_identical"].notna()]
    excl = runs[~runs["usable"]] if len(runs) else runs
    summ = {
        "what_is_measured": "output tok/s, TPOT, TTFT (vllm bench serve), spec-decode counters of each run's own "
                            "/metrics delta, greedy token identity vs the baseline, verification-cost probe",
        "latency_model": lat.describe(),
        "latency_params": lat.params(),
        "latency_fitted_on": f"verification-cost probe {probe_id} only ({0 if lat.residuals is None else len(lat.residuals)} points)",
        "latency_rmse_rel": lat.rmse_rel,
        "model": "specsim.predict.predict (the library's model) with the run's acceptance counters, mean ISL/OSL, "
                 "concurrency; CPU stack: probe-calibrated latency + the speculative terms below",
        "library_terms": lib.to_dict() if lib is not None else None,
        "overheads": fit.to_dict(),
        "held_out": _stats(ho["error"]) if len(ho) else _stats(pd.Series(dtype=float)),
        "held_out_spec_tok_per_s": _stats(ho["spec_tok_per_s_error"]) if len(ho) else _stats(pd.Series(dtype=float)),
        "held_out_base_tok_per_s": _stats(ho["base_tok_per_s_error"]) if len(ho) else _stats(pd.Series(dtype=float)),
        "held_out_tpot": _stats(ho["tpot_error"]) if len(ho) else _stats(pd.Series(dtype=float)),
        "held_out_base_tpot": _stats(ho["base_tpot_error"]) if len(ho) else _stats(pd.Series(dtype=float)),
        "held_out_scenario_model": _stats(ho["scenario_error"]) if len(ho) else _stats(pd.Series(dtype=float)),
        "goal": {"held_out_median_abs_error": 0.10, "best_n_agree_groups": "5 of 6",
                 "met_median": bool(len(ho) and ho["error"].abs().median() <= 0.10),
                 "met_best_n": bool(len(best) and int(best["agree"].sum()) >= 5)},
        "held_out_contract_model": _stats(ho["contract_error"]) if len(ho) else _stats(pd.Series(dtype=float)),
        "held_out_scenario_without_lookup_factor": _stats(ho["scenario_error_no_lookup_factor"]) if len(ho)
        else _stats(pd.Series(dtype=float)),
        "held_out_uncontended": _stats(ho.loc[~(_flag(ho["contended"]) | _flag(ho["baseline_contended"])), "error"])
        if len(ho) else _stats(pd.Series(dtype=float)),
        "held_out_uncontended_contract_model": _stats(
            ho.loc[~(_flag(ho["contended"]) | _flag(ho["baseline_contended"])), "contract_error"])
        if len(ho) else _stats(pd.Series(dtype=float)),
        "held_out_by_family": {f: _stats(g["error"]) for f, g in ho.groupby("family")} if len(ho) else {},
        "fit_set": _stats(ft["error"]) if len(ft) else _stats(pd.Series(dtype=float)),
        "best_n_agreement": {"agree": int(best["agree"].sum()) if len(best) else 0, "groups": int(len(best)),
                             "scenario_agree": int(best["scenario_agree"].sum()) if len(best) else 0,
                             "contract_agree": int(best["contract_agree"].sum()) if len(best) else 0,
                             "max_regret": float(best["regret"].min()) if len(best) else None},
        "measurement_noise": _replicate_spread(errors),
        "token_identity": {"runs_checked": int(len(greedy)),
                           "all_identical_runs": int(greedy["greedy_identical"].astype(bool).sum()) if len(greedy) else 0,
                           "requests_identical": int(pd.to_numeric(greedy["identical"]).sum()) if len(greedy) else 0,
                           "requests_compared": int(pd.to_numeric(greedy["compared"]).sum()) if len(greedy) else 0,
                           "basis": "generated text of vllm bench serve (detokenised), request by request"},
        "runs": {"bench_runs": int(len(runs)), "usable": int(runs["usable"].sum()) if len(runs) else 0,
                 "excluded": [{"run_id": r.run_id, "reason": r.exclusion_reason} for r in excl.itertuples()]},
        "health_checks": health.to_dict("records"),
    }
    return json.loads(json.dumps(summ, default=_jsonable))


def _jsonable(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return None if not np.isfinite(o) else float(o)
    if isinstance(o, (np.bool_,)):
        return bool(o)
    if isinstance(o, Path):
        return str(o)
    return str(o)


# ============================================================================================
# outputs (atomic)
# ============================================================================================


def write_outputs(result: ValidationResult, out_dir: str | os.PathLike | None = None) -> list[Path]:
    """Write ``errors.csv``, ``runs.csv``, ``best_n.csv``, ``latency_fit.csv`` and ``summary.json``
    into ``out_dir`` (default ``<data>/validation``), each atomically (temp file + rename)."""

    d = Path(out_dir) if out_dir is not None else project_data_path("validation")
    runs = result.runs.drop(columns=[c for c in ("input_lens", "output_lens", "path") if c in result.runs.columns])
    if "accepted_per_pos" in runs:
        runs = runs.assign(accepted_per_pos=[";".join(map(str, v)) if isinstance(v, list) else "" for v in runs["accepted_per_pos"]])
    out = [
        atomic_write(d / "errors.csv", lambda p: result.errors.to_csv(p, index=False, float_format="%.6g")),
        atomic_write(d / "runs.csv", lambda p: runs.to_csv(p, index=False, float_format="%.6g")),
        atomic_write(d / "best_n.csv", lambda p: result.best_n.to_csv(p, index=False, float_format="%.6g")),
        atomic_write(d / "summary.json", lambda p: p.write_text(json.dumps(result.summary, indent=2) + "\n")),
    ]
    if result.latency.residuals is not None:
        out.append(atomic_write(d / "latency_fit.csv",
                                 lambda p: result.latency.residuals.to_csv(p, index=False, float_format="%.6g")))
    return out
