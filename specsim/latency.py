"""Forward-time models (layer 2, model): the roofline per GPU after the TP split, a measured-table
model with the same interface, and ``calibrate()`` (scipy least squares).

Details, derivations and sources: ``docs/modules/specsim.latency.md``.
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np
import pandas as pd

from specsim._checks import int_field
from specsim.errors import SpecsimValueError

PRECISIONS = ("bf16", "fp16", "fp8", "mxfp4", "int4", "fp32")
_ACT_BYTES = {"fp32": 4.0}  # activation bytes per element; every other precision runs bf16/fp16 activations


#: the memo of :func:`shared_counts` in force (None outside one)
_SHARED_COUNTS: ContextVar[dict | None] = ContextVar("specsim_shared_counts", default=None)


@contextmanager
def shared_counts() -> Iterator[dict]:
    """Within the block, a :class:`Roofline` computes the counts of a forward once per model object
    and input values (weight and KV bytes, FLOPs, experts touched; per hardware object and expert-
    parallel switch the dequantization and all-reduce counts too) and reuses them: for a fit that
    calls ``predict()`` on the same runs for every trial of its terms.

    The same arithmetic on the same inputs, so the results are bit-identical to those without the
    block.  Entries hold the model and hardware objects (so their ``id`` is not reused while the
    block lasts); neither may be mutated inside the block (``ModelSpec`` and ``Hardware`` are
    frozen).  Nested blocks share the outer memo; it is dropped when the outermost block ends.
    Inputs of more than 4096 values are not memoised.

    Yields
    ------
    dict
        The memo (for inspection; its keys are internal).
    """
    memo = _SHARED_COUNTS.get()
    if memo is not None:
        yield memo
        return
    memo = {}
    token = _SHARED_COUNTS.set(memo)
    try:
        yield memo
    finally:
        _SHARED_COUNTS.reset(token)


def counts_identity(model: Any) -> Any:
    """What a model's counts are memoised under in :func:`shared_counts`: ``id(model)``, or the
    ``counts_identity`` a view class defines (e.g. ``("last-position logits", <identity of the wrapped
    model>)``), so that a view made anew for every call shares the counts of the same view of the same
    model.  A view defining it must keep its wrapped model alive (the memo holds the view).

    Parameters
    ----------
    model : ModelSpec-like
        A model or a view of one.

    Returns
    -------
    int or tuple
        A hashable identity, valid while ``model`` (and what it wraps) is alive.
    """
    if getattr(type(model), "counts_identity", None) is None:
        return id(model)
    return model.counts_identity


def _check_precision(name: str, value: str) -> str:
    if value not in PRECISIONS:
        raise SpecsimValueError(name, "unknown precision string", value, PRECISIONS)
    return value


def default_kv_precision(precision: str) -> str:
    """KV-cache dtype used when none is given.

    vLLM's ``kv_cache_dtype="auto"`` stores the KV cache in the model's activation dtype, which is
    bf16 for weight-quantized checkpoints (fp8, mxfp4, int4) and the weight dtype otherwise.
    """
    _check_precision("precision", precision)
    return precision if precision in ("bf16", "fp16", "fp32") else "bf16"


def _grid(batch: Any, q: Any, context: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Broadcast and validate batch (>=1), q (>=1), context (>=0)."""
    try:
        b, qq, c = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(q, dtype=float),
                                       np.asarray(context, dtype=float))
    except ValueError as exc:
        raise SpecsimValueError("batch/q/context", "shapes must broadcast together",
                                (np.shape(batch), np.shape(q), np.shape(context))) from exc
    for name, arr, lo in (("batch", b, 1.0), ("q", qq, 1.0), ("context", c, 0.0)):
        if not np.all(np.isfinite(arr)) or np.any(arr < lo):
            raise SpecsimValueError(name, f"must be finite and >= {lo:g}", arr[(~np.isfinite(arr)) | (arr < lo)][:3])
    return b, qq, c


def _grid_natural(batch: Any, q: Any, context: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
    """:func:`_grid`'s checks without materialising the broadcast: the three float arrays in their
    own shapes and the broadcast shape (every value of a broadcast is a value of its operand, so
    checking the operands is the same check; on a failure :func:`_grid` raises its own message)."""
    b, qq, c = (np.asarray(batch, dtype=float), np.asarray(q, dtype=float), np.asarray(context, dtype=float))
    try:
        shape = np.broadcast_shapes(b.shape, qq.shape, c.shape)
    except ValueError:
        _grid(batch, q, context)  # raises
        raise
    if 0 in shape:
        return b, qq, c, shape
    for arr, lo in ((b, 1.0), (qq, 1.0), (c, 0.0)):
        # min >= lo fails for NaN and -inf, max < inf for +inf: finite and >= lo
        if not (arr.min() >= lo and arr.max() < np.inf):
            _grid(batch, q, context)  # raises the broadcast message
    return b, qq, c, shape


@runtime_checkable
class LatencyModel(Protocol):
    """What every latency model offers (docs/architecture.md, "latency.py")."""

    calibrated: bool

    def forward_time(self, model: Any, *, tp: int = 1, precision: str = "bf16", batch: Any, q: Any,
                     context: Any, kv_precision: str | None = None) -> np.ndarray: ...

    def breakdown(self, model: Any, *, tp: int = 1, precision: str = "bf16", batch: Any, q: Any,
                  context: Any, kv_precision: str | None = None) -> dict[str, np.ndarray]: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Efficiency:
    """Achieved fractions of datasheet peaks plus fixed costs, per (hardware, engine).

    Parameters
    ----------
    bandwidth : float, default 0.7
        eta_bw, achieved / datasheet HBM bandwidth, in (0, 1].  0.7 is the usual attainable
        fraction of HBM peak for large streaming GEMV reads (STREAM-like copies on H100/MI300X reach
        roughly 70-90 % of peak); it is an uncalibrated prior, replaced by ``calibrate()``.
    compute : float, default 0.55
        eta_f, achieved / dense datasheet FLOP/s, in (0, 1].  ~0.5-0.6 is typical model-FLOPs
        utilisation of inference GEMMs at moderate shapes; uncalibrated prior.
    fixed_s : float, default 2e-4
        Seconds per forward step independent of size: graph replay / kernel-launch gaps and input
        preparation.  Assumed order of magnitude for CUDA/HIP-graph decode in vLLM; calibrate it.
    per_layer_s : float, default 0.0
        Extra seconds per decoder layer per forward (per-kernel launch gaps that scale with depth).
        0 by default (contract); a calibration may move fixed cost here.
    allreduce_latency_s : float, default 8e-6
        Latency of ONE all-reduce call (seconds), added to its bandwidth term.  Assumed order of a
        one-shot custom all-reduce of a small message over NVLink / xGMI; calibrate for TP > 1.
    moe_pad_tokens : float, default 0
        Grouped-GEMM efficiency of routed experts as a function of tokens per expert: every
        distinct expert a step reads costs the FLOPs of ``moe_pad_tokens`` extra tokens (the
        M-tile each expert's GEMM is padded to; fused-MoE kernels tile the token dimension,
        vLLM ``model_executor/layers/fused_moe``).  With t tokens per expert the achieved
        fraction of ``compute`` is ``t / (t + moe_pad_tokens)``.  0 = no padding.
    dequant_s_per_weight : float, default 0
        Seconds per weight element read in a precision the hardware has no matrix unit for
        (int4 everywhere in the catalog; mxfp4 without FP4 units; fp8 without FP8 units): the
        kernel dequantizes it to bf16 before the multiply (w4a16-style), once per step.
    """

    bandwidth: float = 0.7
    compute: float = 0.55
    fixed_s: float = 2.0e-4
    per_layer_s: float = 0.0
    allreduce_latency_s: float = 8.0e-6
    moe_pad_tokens: float = 0.0
    dequant_s_per_weight: float = 0.0

    def __post_init__(self) -> None:
        for name in ("bandwidth", "compute"):
            v = getattr(self, name)
            if not (np.isfinite(v) and 0.0 < v <= 1.0):
                raise SpecsimValueError(f"Efficiency.{name}", "must lie in (0, 1]", v)
        for name in ("fixed_s", "per_layer_s", "allreduce_latency_s", "moe_pad_tokens", "dequant_s_per_weight"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0.0):
                raise SpecsimValueError(f"Efficiency.{name}", "must be finite and >= 0", v)

    def replace(self, **changes: float) -> "Efficiency":
        """A copy with some fields changed (validated)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise SpecsimValueError("Efficiency field", "unknown field", sorted(unknown),
                                    [f.name for f in dataclasses.fields(self)])
        return dataclasses.replace(self, **changes)


def native_precision(hardware: Any, dtype: str) -> bool:
    """Whether ``hardware`` multiplies weights stored in ``dtype`` without dequantizing them.

    int4: never in the catalog (MI300X/MI355X have int8 but no int4 matrix math; NVIDIA
    Hopper/Blackwell none either), so w4a16 kernels dequantize to bf16.  mxfp4: only with FP4
    matrix units (``peak_flops_per_s["fp4"]``: MI355X, B200).  fp8: with FP8 units.
    bf16 / fp16 / fp32: always.
    """
    peaks = getattr(hardware, "peak_flops_per_s", {}) or {}
    if dtype == "int4":
        return False
    if dtype == "mxfp4":
        return "fp4" in peaks
    if dtype == "fp8":
        return "fp8" in peaks
    return True


@dataclass(frozen=True)
class ForwardCounts:
    """Physical counts of one forward (per GPU after the TP split), independent of any efficiency.

    Every attribute is an ndarray of the broadcast (batch, q, context) shape, or a float.
    ``weight_bytes``, ``kv_bytes`` bytes read; ``flops`` FLOPs; ``moe_pad_flops`` FLOPs of ONE
    padding token per distinct routed expert read (``2 x expert params x distinct experts`` over
    the MoE layers, multiplied by ``Efficiency.moe_pad_tokens``); ``dequant_weights`` weight
    elements dequantized (stored in a non-native precision, :func:`native_precision`);
    ``layers`` decoder layers; ``allreduce_calls`` and ``allreduce_wire_s`` all-reduce calls and
    their bandwidth seconds (ring, ``2 (tp-1)/tp x bytes / link``); ``bandwidth_bytes_per_s`` and
    ``peak_flops_per_s`` the datasheet peaks used.
    """

    weight_bytes: Any
    kv_bytes: Any
    flops: Any
    moe_pad_flops: Any
    dequant_weights: Any
    layers: Any
    allreduce_calls: Any
    allreduce_wire_s: Any
    bandwidth_bytes_per_s: Any
    peak_flops_per_s: Any

    FIELDS = ("weight_bytes", "kv_bytes", "flops", "moe_pad_flops", "dequant_weights", "layers",
              "allreduce_calls", "allreduce_wire_s", "bandwidth_bytes_per_s", "peak_flops_per_s")

    def broadcast_arrays_to(self, shape) -> "ForwardCounts":
        """The array fields as (read-only) views of ``shape``; scalar fields stay as they are."""
        return ForwardCounts(**{k: v if type(v) is float else np.broadcast_to(v, shape)
                                for k in self.FIELDS for v in (getattr(self, k),)})

    def broadcast(self, shape) -> "ForwardCounts":
        """Every field as a float array of ``shape``."""
        return ForwardCounts(**{k: np.broadcast_to(np.asarray(getattr(self, k), dtype=float), shape)
                                for k in self.FIELDS})

    @staticmethod
    def zeros(shape) -> "ForwardCounts":
        """No forward at all (an unused slot: every count 0, peaks 1 to keep divisions finite)."""
        z = np.zeros(shape)
        return ForwardCounts(z, z, z, z, z, z, z, z, np.ones(shape), np.ones(shape))

    @staticmethod
    def concat(parts: Sequence["ForwardCounts"]) -> "ForwardCounts":
        """Concatenate 1-d counts (already broadcast) along their only axis."""
        return ForwardCounts(**{k: np.concatenate([np.atleast_1d(getattr(p, k)) for p in parts])
                                for k in ForwardCounts.FIELDS})


def microseconds_text(seconds: float, digits: int = 3) -> str:
    """``seconds`` as microseconds for a summary line: ``"81.6 us"`` (``digits`` significant digits).

    A nonzero value below a nanosecond -- a fitted term at its zero bound, whose exact value moves
    with every refit -- reads ``"~0 us (2.6e-15 s)"``, not ``"2.62e-09 us"``.
    """
    if seconds and abs(seconds) < 1e-9:
        return f"~0 us ({seconds:.1e} s)"
    return f"{seconds * 1e6:.{digits}g} us"


def pnorm_roof(memory_s, compute_s, p: float):
    """The smooth roofline ``(memory^p + compute^p)^(1/p)`` (seconds, broadcast shape), computed
    scaled by the larger term so it cannot overflow; over-estimates the hard max by at most
    ``2^(1/p)`` at the ridge point."""
    hi = np.maximum(np.maximum(memory_s, compute_s), 1e-300)
    return hi * ((memory_s / hi) ** p + (compute_s / hi) ** p) ** (1.0 / p)


def forward_seconds(fc: ForwardCounts, terms: Any, smooth_p: float | None = None) -> dict[str, np.ndarray]:
    """Seconds of one forward from its physical counts and the stack terms.

    ``memory = (weight_bytes + kv_bytes) / (bandwidth x BW)``;
    ``compute = (flops + moe_pad_tokens x moe_pad_flops) / (compute x F)``; roofline
    ``max(memory, compute)`` (or the p-norm with ``smooth_p``); plus ``fixed_s + per_layer_s x
    layers`` (graph replay / kernel-launch gaps per forward and per layer), ``allreduce_calls x
    (allreduce_wire_s + allreduce_latency_s)`` and ``dequant_s_per_weight x dequant_weights``.

    Parameters
    ----------
    fc : ForwardCounts
    terms : Efficiency or mapping
        ``bandwidth, compute, fixed_s, per_layer_s, allreduce_latency_s, moe_pad_tokens,
        dequant_s_per_weight``; values may be arrays that broadcast against the counts (a batch
        of parameter vectors for a vectorised Jacobian).
    smooth_p : float, optional

    Returns
    -------
    dict of ndarray: ``weights_s, kv_s, memory_s, compute_s, allreduce_s, fixed_s, dequant_s, total_s``.
    """
    g = terms.__getitem__ if isinstance(terms, dict) else (lambda k: getattr(terms, k))
    bw = g("bandwidth") * fc.bandwidth_bytes_per_s
    weights_s = fc.weight_bytes / bw
    kv_s = fc.kv_bytes / bw
    memory_s = weights_s + kv_s
    compute_s = (fc.flops + g("moe_pad_tokens") * fc.moe_pad_flops) / (g("compute") * fc.peak_flops_per_s)
    if smooth_p is None:
        roof = np.maximum(memory_s, compute_s)
    elif smooth_p == 1.0:
        roof = memory_s + compute_s
    else:
        roof = pnorm_roof(memory_s, compute_s, smooth_p)
    fixed_s = g("fixed_s") + g("per_layer_s") * fc.layers
    allreduce_s = fc.allreduce_calls * (fc.allreduce_wire_s + g("allreduce_latency_s"))
    dequant_s = g("dequant_s_per_weight") * fc.dequant_weights
    total = roof + fixed_s + allreduce_s + dequant_s
    return {"weights_s": weights_s, "kv_s": kv_s, "memory_s": memory_s, "compute_s": compute_s,
            "allreduce_s": allreduce_s, "fixed_s": fixed_s + 0.0 * total, "dequant_s": dequant_s, "total_s": total}


def _part_dtypes(model: Any, precision: str | None) -> tuple[str, str, str]:
    """(non-expert, routed-expert, lm_head) weight dtypes of a forward at ``precision``."""
    if precision is not None:
        return precision, precision, precision
    return (getattr(model, "weight_dtype", None) or "bf16", getattr(model, "expert_weight_dtype", None) or "bf16",
            getattr(model, "lm_head_dtype", None) or "bf16")


def _moe_shape(model: Any) -> tuple[float, float, float, float]:
    """(MoE layers, experts E, experts per token k, params of one expert) of a target or draft net."""
    if hasattr(model, "num_moe_layers"):
        return (float(model.num_moe_layers), float(model.num_experts), float(model.experts_per_token),
                float(model.expert_params))
    e = float(getattr(model, "moe_num_experts", 0) or 0)
    if e <= 0:
        return 0.0, 0.0, 0.0, 0.0
    return float(model.num_layers), e, float(model.moe_experts_per_token), float(model.expert_params)


class Roofline:
    """Roofline forward-time model (see the module docstring for the formula).

    Parameters
    ----------
    hardware : Hardware
        ``specsim.hardware.Hardware`` (uses ``mem_bandwidth_bytes_per_s``, ``peak_flops(precision)``,
        ``link_bandwidth_bytes_per_s``, ``name``).
    efficiency : Efficiency, optional
        Defaults to ``Efficiency()`` (datasheet priors).
    calibrated : bool, default False
        Whether ``efficiency`` came from measurements (set by ``calibrate()``).
    smooth_p : float, optional
        If given, the hard ``max(mem, comp)`` becomes the p-norm ``(mem^p + comp^p)^(1/p)``
        (over-estimates by at most 2^(1/p) at the ridge point; smoother for fits).  Default: hard max.
    source : str, optional
        Free text recorded in ``describe()`` (e.g. which measurements calibrated it).
    calibration : specsim.calibration.CalibrationRecord, optional
        The shipped calibration these efficiencies came from (set by
        ``specsim.calibration.default_latency``): the draft-pass and speculative overheads and the
        step-time error that go with them.  None for datasheet priors or a user's own efficiencies.
    scope : str, optional
        One sentence on whose values these are, carried into every prediction's assumptions.

    Notes
    -----
    Tensor parallelism: weight bytes, KV bytes and FLOPs divide by ``tp`` (Megatron-style column/row
    split, vocab-parallel lm_head); each decoder layer adds 2 all-reduces (after attention and
    after the MLP, Shoeybi et al. 2019, Megatron-LM) of ``T*h`` activations (2 bytes, 4 for fp32),
    ring cost ``2 (tp-1)/tp * bytes / link_bw + allreduce_latency_s`` (Patarasuk & Yuan 2009).
    Expert parallelism over the same GPUs is treated to first order the same way (expert weights
    split over the group, dispatch/combine traffic ~ the all-reduce volume).  KV heads replicated
    when ``tp > num_kv_heads`` are not modeled (KV is simply divided by ``tp``).
    """

    def __init__(self, hardware: Any, efficiency: Efficiency | None = None, calibrated: bool = False, *,
                 smooth_p: float | None = None, source: str | None = None, calibration: Any = None,
                 scope: str | None = None, expert_parallel: bool = False):
        for attr in ("mem_bandwidth_bytes_per_s", "peak_flops", "link_bandwidth_bytes_per_s"):
            if not hasattr(hardware, attr):
                raise SpecsimValueError("hardware", f"must provide `{attr}` (specsim.hardware.Hardware)",
                                        type(hardware).__name__)
        if efficiency is None:
            efficiency = Efficiency()
        if not isinstance(efficiency, Efficiency):
            raise SpecsimValueError("efficiency", "must be an Efficiency", type(efficiency).__name__)
        if smooth_p is not None and not (np.isfinite(smooth_p) and smooth_p >= 1.0):
            raise SpecsimValueError("smooth_p", "must be >= 1 (or None for a hard max)", smooth_p)
        self.hardware = hardware
        self.efficiency = efficiency
        self.calibrated = bool(calibrated)
        self.smooth_p = smooth_p
        self.source = source
        self.calibration = calibration
        self.scope = scope
        self.expert_parallel = bool(expert_parallel)

    def with_expert_parallel(self, on: bool = True) -> "Roofline":
        """The same roofline (calibration and scope kept) with expert parallelism over the TP group on
        or off (vLLM ``--enable-expert-parallel``)."""
        r = Roofline(self.hardware, self.efficiency, self.calibrated, smooth_p=self.smooth_p, source=self.source,
                     calibration=self.calibration, scope=self.scope, expert_parallel=on)
        return r

    def with_efficiency(self, efficiency: Efficiency, *, calibrated: bool | None = None,
                        source: str | None = None) -> "Roofline":
        """Same hardware, other efficiencies (no longer the shipped calibration: ``calibration`` and
        ``scope`` are not carried over)."""
        return Roofline(self.hardware, efficiency, self.calibrated if calibrated is None else calibrated,
                        smooth_p=self.smooth_p, source=source if source is not None else self.source)

    def pass_overhead_s(self, num_layers: int) -> float:
        """Fixed seconds charged to one forward of ``num_layers`` layers: ``fixed_s + per_layer_s*layers``."""
        return self.efficiency.fixed_s + self.efficiency.per_layer_s * float(num_layers)

    def breakdown(self, model: Any, *, tp: int = 1, precision: str = "bf16", batch: Any, q: Any,
                  context: Any, kv_precision: str | None = None) -> dict[str, np.ndarray]:
        """Per-term seconds of one forward step.

        Parameters
        ----------
        model : ModelSpec-like
            See the module docstring for the methods used.
        tp : int, default 1
            Tensor-parallel degree.
        precision : str, default "bf16"
            Weight precision (one of ``PRECISIONS``); picks bytes/weight and the peak FLOP/s dtype.
        batch, q, context : array_like
            Sequences in the step (>= 1), query tokens per sequence (>= 1; q = N+1 in verification),
            KV context length in tokens (>= 0).  Broadcast together.
        kv_precision : str, optional
            KV-cache dtype; default ``default_kv_precision(precision)``.

        Returns
        -------
        dict of ndarray (broadcast shape)
            ``weights_s, kv_s, memory_s (= weights_s + kv_s), compute_s, allreduce_s, fixed_s,
            total_s`` in seconds.

        Raises
        ------
        SpecsimValueError
            Bad tp / precision / shapes / negative or non-finite sizes.
        """
        fc, _ = self._counts(model, tp=tp, precision=precision, batch=batch, q=q, context=context,
                             kv_precision=kv_precision)
        return forward_seconds(fc, self.efficiency, self.smooth_p)

    def counts(self, model: Any, *, tp: int = 1, precision: str | None = "bf16", batch: Any, q: Any,
               context: Any, kv_precision: str | None = None) -> ForwardCounts:
        """The physical counts of one forward (:class:`ForwardCounts`, broadcast shape), which
        :func:`forward_seconds` turns into seconds with this roofline's efficiencies.  Same
        parameters as :meth:`breakdown`."""
        fc, shape = self._counts(model, tp=tp, precision=precision, batch=batch, q=q, context=context,
                                 kv_precision=kv_precision, natural=True)
        return fc.broadcast_arrays_to(shape)

    def natural_counts(self, model: Any, *, tp: int = 1, precision: str | None = "bf16", batch: Any, q: Any,
                       context: Any, kv_precision: str | None = None, memo: dict | None = None) -> ForwardCounts:
        """:meth:`counts` with every field in its own broadcast shape (e.g. the weight bytes vary
        with ``batch * q`` only, the KV bytes with ``batch`` and ``context``) instead of the full
        broadcast of (batch, q, context): the same values, computed on the smallest arrays
        (:func:`specsim.engine.step_plan` over a grid).

        ``memo`` (a dict the caller keeps for one computation, e.g. one ``sweep`` call) reuses the
        hardware-independent counts (bytes, FLOPs, experts touched) of the same model object and
        the same small input values across calls, e.g. for several hardware."""
        return self._counts(model, tp=tp, precision=precision, batch=batch, q=q, context=context,
                            kv_precision=kv_precision, natural=True, memo=memo)[0]

    def _counts(self, model: Any, *, tp, precision, batch, q, context, kv_precision, natural: bool = False,
                memo: dict | None = None):
        tp = int_field("tp", tp)
        # precision=None: the model's own serving mix (e.g. int4 routed experts + bf16 rest) for the
        # bytes, and its main weight dtype for the peak FLOP/s and the default KV dtype.
        byte_precision = precision
        if precision is None:
            precision = getattr(model, "weight_dtype", None) or "bf16"
        _check_precision("precision", precision)
        kvp = default_kv_precision(precision) if kv_precision is None else _check_precision("kv_precision", kv_precision)
        key = phys = None
        if memo is None:
            memo = _SHARED_COUNTS.get()
        if memo is not None:
            arrs = tuple(np.asarray(x, dtype=float) for x in (batch, q, context))
            if all(a.size <= 4096 for a in arrs):
                key = ((counts_identity(model), bool(natural), tp, byte_precision, precision, kvp)
                       + tuple((a.shape, a.tobytes()) for a in arrs))
                phys = memo.get(key)
        if phys is None:
            if natural:
                b, qq, c, shape = _grid_natural(batch, q, context)
            else:
                b, qq, c = _grid(batch, q, context)
                shape = b.shape
            tokens = b * qq
            w_bytes = np.asarray(model.step_weight_bytes(tokens, byte_precision if byte_precision is not None else precision)
                                 if byte_precision is not None or not hasattr(model, "expert_weight_dtype")
                                 else model.step_weight_bytes(tokens, None), dtype=float) / tp
            kv_bytes = b * np.asarray(model.kv_bytes_per_seq(c, kvp), dtype=float) / tp
            state = float(model.state_bytes_per_seq()) if hasattr(model, "state_bytes_per_seq") else 0.0
            if state > 0.0:
                # linear attention (Gated DeltaNet, Mamba): the step WRITES the recurrent state back --
                # once per sequence in decode and prefill, once per query position in verification, so
                # it can roll back to the accepted one (vLLM 0.32 model_executor/layers/mamba/abstract.py:
                # num_speculative_blocks = num_speculative_tokens state slots per request)
                writes = np.ones_like(qq) if getattr(model, "is_prefill_view", False) else qq
                kv_bytes = kv_bytes + b * writes * state / tp
            flops = np.asarray(model.step_flops(b, qq, c), dtype=float) / tp
            # routed experts: distinct experts read (uniform top-k routing) and their padding FLOPs
            n_moe, n_exp, k_exp, p_exp = _moe_shape(model)
            if n_moe > 0:
                distinct = (n_exp * -np.expm1(tokens * np.log1p(-k_exp / n_exp)) if k_exp < n_exp
                            else np.full_like(tokens, n_exp))
                expert_elems = n_moe * distinct * p_exp
            else:
                expert_elems = np.zeros_like(tokens)
            pad_flops = 2.0 * expert_elems / tp
            phys = {"model": model, "b": b, "shape": shape, "tokens": tokens, "w_bytes": w_bytes,
                    "kv_bytes": kv_bytes, "flops": flops, "expert_elems": expert_elems, "pad_flops": pad_flops}
            if key is not None:
                memo[key] = phys
        hw = self.hardware
        if key is not None:  # the whole result, per hardware object (kept alive here) and EP switch
            done = phys.setdefault("forward counts", {})
            fkey = (id(hw), self.expert_parallel)
            if fkey not in done:
                done[fkey] = (hw,) + self._hardware_counts(model, phys, tp, byte_precision, precision, natural)
            return done[fkey][1:]
        return self._hardware_counts(model, phys, tp, byte_precision, precision, natural)

    def _hardware_counts(self, model, phys, tp, byte_precision, precision, natural):
        """:meth:`_counts` from the hardware-independent counts ``phys`` on: ``(ForwardCounts, shape)``."""
        b, shape, tokens, expert_elems = phys["b"], phys["shape"], phys["tokens"], phys["expert_elems"]
        n_moe, _, k_exp, _ = _moe_shape(model)
        w_bytes, kv_bytes, flops, pad_flops = phys["w_bytes"], phys["kv_bytes"], phys["flops"], phys["pad_flops"]
        hw = self.hardware
        d_main, d_exp, d_head = _part_dtypes(model, byte_precision)
        head = float(getattr(model, "lm_head_params", 0.0))
        native = (native_precision(hw, d_main), native_precision(hw, d_exp), native_precision(hw, d_head))
        if natural and all(native):
            # every weight native: 0 x finite element counts + 0, i.e. exactly 0.0 everywhere
            deq = np.zeros(np.shape(expert_elems))
        else:
            if "dense_elems" not in phys:
                phys["dense_elems"] = ((np.asarray(model.step_weight_bytes(tokens, "bf16"), dtype=float) / 2.0)
                                       - expert_elems - head)
            dense_elems = phys["dense_elems"]
            deq = ((0.0 if native[0] else 1.0) * dense_elems
                   + (0.0 if native[1] else 1.0) * expert_elems
                   + (0.0 if native[2] else head))
            deq = np.asarray(deq, dtype=float) / tp
        if tp > 1:
            if hw.link_bandwidth_bytes_per_s is None:
                raise SpecsimValueError("tp", f"hardware {hw.name!r} has no link bandwidth "
                                        "(link_bandwidth_bytes_per_s is None), so it cannot run tensor parallel: "
                                        "use tp=1 or give the hardware its link bandwidth", tp, (1,))
            calls = 2.0 * float(model.num_layers)
            msg = tokens * float(model.hidden_size) * _ACT_BYTES.get(precision, 2.0)
            wire = 2.0 * (tp - 1) / tp * msg / float(hw.link_bandwidth_bytes_per_s)
            if self.expert_parallel and n_moe > 0:
                # expert parallel over the TP group (vLLM --enable-expert-parallel): each MoE layer's
                # post-MLP all-reduce becomes a dispatch + combine all-to-all of the routed tokens
                # (every token's hidden vector to its k experts' ranks and back): (tp - 1) / tp of
                # T k h activations per GPU per call, each call paying the collective latency
                a2a = (tp - 1) / tp * tokens * k_exp * float(model.hidden_size) * _ACT_BYTES.get(precision, 2.0) / tp
                calls = calls - n_moe + 2.0 * n_moe
                wire = (wire * (2.0 * float(model.num_layers) - n_moe)
                        + 2.0 * n_moe * a2a / float(hw.link_bandwidth_bytes_per_s)) / calls
        else:
            calls, wire = 0.0, np.zeros_like(tokens)
        if natural:
            fc = ForwardCounts(weight_bytes=w_bytes, kv_bytes=kv_bytes, flops=flops, moe_pad_flops=pad_flops,
                               dequant_weights=deq, layers=float(model.num_layers), allreduce_calls=calls,
                               allreduce_wire_s=wire, bandwidth_bytes_per_s=float(hw.mem_bandwidth_bytes_per_s),
                               peak_flops_per_s=float(hw.peak_flops(precision)))
            return fc, shape
        fc = ForwardCounts(weight_bytes=np.broadcast_to(w_bytes, b.shape), kv_bytes=np.broadcast_to(kv_bytes, b.shape),
                           flops=np.broadcast_to(flops, b.shape), moe_pad_flops=np.broadcast_to(pad_flops, b.shape),
                           dequant_weights=np.broadcast_to(deq, b.shape), layers=float(model.num_layers),
                           allreduce_calls=calls, allreduce_wire_s=np.broadcast_to(wire, b.shape),
                           bandwidth_bytes_per_s=float(hw.mem_bandwidth_bytes_per_s),
                           peak_flops_per_s=float(hw.peak_flops(precision)))
        return fc, b.shape

    def forward_time(self, model: Any, *, tp: int = 1, precision: str | None = "bf16", batch: Any, q: Any,
                     context: Any, kv_precision: str | None = None) -> np.ndarray:
        """Seconds of one forward step, ndarray of the broadcast shape (see ``breakdown``).

        ``precision=None`` uses the model's serving precision mix (``ModelSpec.weight_dtype`` /
        ``expert_weight_dtype`` / ``lm_head_dtype`` from ``specsim/data/models``).
        """
        return self.breakdown(model, tp=tp, precision=precision, batch=batch, q=q, context=context,
                              kv_precision=kv_precision)["total_s"]

    def describe(self) -> str:
        """One line: the hardware, whether calibrated, the efficiencies and the per-forward seconds
        (:func:`microseconds_text`), and the source."""
        e = self.efficiency
        kind = ("calibrated" if self.calibrated else
                "transferred calibration (fitted on other hardware)" if self.calibration is not None
                else "datasheet-only (uncalibrated priors)")
        s = (f"Roofline on {getattr(self.hardware, 'name', '?')} [{kind}]: eta_bw={e.bandwidth:.3g}, "
             f"eta_f={e.compute:.3g}, fixed={microseconds_text(e.fixed_s)}/forward, "
             f"per_layer={microseconds_text(e.per_layer_s)}, "
             f"allreduce_latency={microseconds_text(e.allreduce_latency_s)}")
        if self.smooth_p is not None:
            s += f", smooth max p={self.smooth_p:g}"
        return s + (f"; source: {self.source}" if self.source else "")

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"<{self.describe()}>"


#: the axes of a measured latency table and their units (messages)
_AXES = ("batch", "q", "context")
_AXIS_UNITS = {"batch": "sequences per step", "q": "query tokens per sequence", "context": "tokens"}


def _axis_index(axis: str) -> int:
    """Index of a measured table's axis in ``_AXES`` (SpecsimValueError naming the allowed ones)."""
    if axis not in _AXES:
        raise SpecsimValueError("axis", "unknown axis of a measured latency table", axis, _AXES)
    return _AXES.index(axis)


class MeasuredLatency:
    """Forward time interpolated from a measured table (same interface as ``Roofline``).

    Parameters
    ----------
    table : pandas.DataFrame
        Columns ``batch`` (>= 1), ``q`` (>= 1), ``context`` (>= 0 tokens), ``seconds`` (> 0): one
        forward step of the measured model.  Repeated points are averaged.
    model_name, tp, precision : optional
        What the table measured.  When given, calls for another model (``model.name``), TP degree
        or precision raise ``SpecsimValueError`` instead of returning a number for the wrong thing.
    max_extrapolation : float, default 1.0
        Allowed factor beyond the table's range on every axis: a point with
        ``lo / f <= x <= hi * f`` is accepted; parts outside ``[lo, hi]`` are evaluated at the
        nearest table edge (clamped, reported by ``breakdown()["clamped"]``).  The default 1.0
        allows no extrapolation at all.
    outside : {"error", "clamp"}, default "error"
        What to do beyond ``max_extrapolation``: raise ``SpecsimValueError`` (default) or clamp
        to the table's edge and flag the point.
    source : str, optional
        Where the measurements come from (shown by ``describe()``).

    Notes
    -----
    Interpolation is piecewise linear in (log batch, log q, context) over the axes that vary in
    the table: a full grid uses ``scipy.interpolate.RegularGridInterpolator``, scattered points
    ``LinearNDInterpolator`` (Delaunay), one varying axis ``numpy.interp``.  Both reproduce the
    table's own points exactly.  A scattered table queried inside its box but outside the convex
    hull of its points is treated as outside (error, or nearest point with the clamp flag).
    """

    calibrated = True

    def __init__(self, table: pd.DataFrame, *, model_name: str | None = None, tp: int | None = None,
                 precision: str | None = None, max_extrapolation: float = 1.0, outside: str = "error",
                 source: str | None = None):
        from scipy.interpolate import (
            LinearNDInterpolator,
            NearestNDInterpolator,
            RegularGridInterpolator,
        )

        if not isinstance(table, pd.DataFrame):
            raise SpecsimValueError("table", "must be a pandas DataFrame", type(table).__name__)
        missing = [c for c in ("batch", "q", "context", "seconds") if c not in table.columns]
        if missing:
            raise SpecsimValueError("table", f"missing columns {missing}", list(table.columns),
                                    ["batch", "q", "context", "seconds"])
        if len(table) == 0:
            raise SpecsimValueError("table", "must have at least one row", 0)
        if outside not in ("error", "clamp"):
            raise SpecsimValueError("outside", "unknown policy", outside, ["error", "clamp"])
        if not (np.isfinite(max_extrapolation) and max_extrapolation >= 1.0):
            raise SpecsimValueError("max_extrapolation", "must be a finite factor >= 1", max_extrapolation)
        try:
            t = table[["batch", "q", "context", "seconds"]].astype(float)
        except (TypeError, ValueError) as exc:
            raise SpecsimValueError("table", f"batch, q, context, seconds must be numbers ({exc})") from None
        _grid(t["batch"].to_numpy(), t["q"].to_numpy(), t["context"].to_numpy())
        if not np.all(np.isfinite(t["seconds"])) or np.any(t["seconds"] <= 0):
            bad = t["seconds"][~(np.isfinite(t["seconds"]) & (t["seconds"] > 0))]
            raise SpecsimValueError("table.seconds", f"must be finite and > 0 ({len(bad)} row(s) are not)",
                                    bad.tolist()[:3])
        t = t.groupby(["batch", "q", "context"], as_index=False)["seconds"].mean()
        self.table = t
        self.model_name, self.tp, self.precision = model_name, tp, precision
        self.max_extrapolation, self.outside, self.source = float(max_extrapolation), outside, source
        coords = np.column_stack([np.log(t["batch"]), np.log(t["q"]), t["context"]])
        self._lo, self._hi = coords.min(axis=0), coords.max(axis=0)
        self._active = [i for i in range(3) if self._hi[i] > self._lo[i]]
        y = t["seconds"].to_numpy()
        act = coords[:, self._active]
        self._mode, self._interp, self._nearest = "constant", None, None
        if len(self._active) == 1:
            order = np.argsort(act[:, 0])
            self._mode, self._interp = "interp1d", (act[order, 0], y[order])
        elif len(self._active) >= 2:
            axes = [np.unique(act[:, j]) for j in range(act.shape[1])]
            if int(np.prod([len(a) for a in axes])) == len(y):
                values = np.full([len(a) for a in axes], np.nan)
                idx = tuple(np.searchsorted(a, act[:, j]) for j, a in enumerate(axes))
                values[idx] = y
                self._mode, self._interp = "grid", RegularGridInterpolator(axes, values, method="linear")
            else:
                try:
                    self._mode, self._interp = "scattered", LinearNDInterpolator(act, y)
                except Exception as exc:  # scipy's QhullError: too few / degenerate points
                    raise SpecsimValueError("table", "too few or degenerate points for an interpolation over "
                                            f"{len(self._active)} varying axes (measure a grid: every batch at every q "
                                            f"and context) [{type(exc).__name__}]", len(y)) from None
                self._nearest = NearestNDInterpolator(act, y)
        self._const = float(y.mean())

    def _check_call(self, model: Any, tp: int, precision: str) -> None:
        name = getattr(model, "name", None)
        if self.model_name is not None and name != self.model_name:
            raise SpecsimValueError("model", f"this table measured {self.model_name!r}", name, [self.model_name])
        if self.tp is not None and tp != self.tp:
            raise SpecsimValueError("tp", "differs from the measured table's TP", tp, [self.tp])
        if self.precision is not None and precision != self.precision:
            raise SpecsimValueError("precision", "differs from the measured table's precision", precision, [self.precision])

    def breakdown(self, model: Any, *, tp: int = 1, precision: str = "bf16", batch: Any, q: Any,
                  context: Any, kv_precision: str | None = None) -> dict[str, np.ndarray]:
        """Interpolated seconds: ``{"total_s": ndarray, "clamped": bool ndarray}``.

        Raises
        ------
        SpecsimValueError
            Wrong model / tp / precision for this table, bad shapes, or (``outside="error"``) a
            point beyond ``max_extrapolation`` of the table's range; the message names the axis.
        """
        self._check_call(model, int_field("tp", tp), precision)
        b, qq, c = _grid(batch, q, context)
        pts = np.stack([np.log(b), np.log(qq), c], axis=-1)
        lo_ok, hi_ok, tol = self._accepted_bounds()
        beyond = (pts < lo_ok - tol) | (pts > hi_ok + tol)
        if self.outside == "error" and np.any(beyond):
            ax = int(np.argmax(beyond.reshape(-1, 3).any(axis=0)))
            name = _AXES[ax]
            lo, hi = self.axis_range(name)
            bad = (b, qq, c)[ax][beyond[..., ax]]
            raise SpecsimValueError(name, f"outside the measured table range [{lo:g}, {hi:g}] {_AXIS_UNITS[name]} "
                                    f"by more than the allowed factor {self.max_extrapolation:g} (MeasuredLatency "
                                    "refuses to extrapolate)", np.unique(bad)[:3].tolist())
        clamped = np.any((pts < self._lo - tol) | (pts > self._hi + tol), axis=-1)
        pts = np.clip(pts, self._lo, self._hi)
        flat = pts.reshape(-1, 3)[:, self._active]
        if self._mode == "constant":
            out = np.full(flat.shape[0], self._const)
        elif self._mode == "interp1d":
            out = np.interp(flat[:, 0], *self._interp)
        else:
            out = np.asarray(self._interp(flat), dtype=float)
            if self._mode == "scattered":
                hull = ~np.isfinite(out)
                if np.any(hull):
                    if self.outside == "error":
                        raise SpecsimValueError("batch/q/context", "outside the convex hull of the scattered "
                                                "measured points (MeasuredLatency refuses to extrapolate)",
                                                np.exp(flat[hull][:1]).tolist() if flat.shape[1] else None)
                    out[hull] = self._nearest(flat[hull])
                    clamped.reshape(-1)[hull] = True
        total = out.reshape(b.shape)
        return {"total_s": total, "clamped": clamped}

    def _accepted_bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lower / upper bounds a point may reach on (log batch, log q, context), and the tolerance."""
        f = self.max_extrapolation
        lo_ok = np.array([self._lo[0] - np.log(f), self._lo[1] - np.log(f), self._lo[2] / f])
        hi_ok = np.array([self._hi[0] + np.log(f), self._hi[1] + np.log(f), self._hi[2] * f])
        tol = 1e-9 * np.maximum(1.0, np.abs(np.concatenate([self._lo, self._hi]))).reshape(2, 3).max(axis=0)
        return lo_ok, hi_ok, tol

    def axis_range(self, axis: str, *, accepted: bool = False) -> tuple[float, float]:
        """The table's range on one axis.

        Parameters
        ----------
        axis : {"batch", "q", "context"}
            Sequences per step, query tokens per sequence, or context tokens.
        accepted : bool, default False
            False: the smallest and largest value measured.  True: the range a call accepts
            (widened by ``max_extrapolation``; with ``outside="clamp"`` points beyond it are still
            answered, at the table's edge).

        Returns
        -------
        (float, float)

        Raises
        ------
        SpecsimValueError
            ``axis`` is not one of the three.
        """
        ax = _axis_index(axis)
        if accepted:
            lo_ok, hi_ok, _ = self._accepted_bounds()
            lo, hi = float(lo_ok[ax]), float(hi_ok[ax])
        else:
            lo, hi = float(self._lo[ax]), float(self._hi[ax])
        return (float(np.exp(lo)), float(np.exp(hi))) if ax < 2 else (lo, hi)

    def refused(self, axis: str, values: Any) -> np.ndarray:
        """Which of ``values`` on ``axis`` a call would refuse (the check of :meth:`breakdown`).

        Parameters
        ----------
        axis : {"batch", "q", "context"}
        values : array_like
            Values of that axis (batch and q >= 1, context >= 0).

        Returns
        -------
        ndarray of bool
            The shape of ``values``; all False with ``outside="clamp"`` (nothing is refused).

        Raises
        ------
        SpecsimValueError
            ``axis`` is not one of the three.
        """
        ax = _axis_index(axis)
        v = np.asarray(values, dtype=float)
        if self.outside != "error":
            return np.zeros(v.shape, dtype=bool)
        x = np.log(np.maximum(v, np.finfo(float).tiny)) if ax < 2 else v
        lo_ok, hi_ok, tol = self._accepted_bounds()
        return (x < lo_ok[ax] - tol[ax]) | (x > hi_ok[ax] + tol[ax])

    def forward_time(self, model: Any, *, tp: int = 1, precision: str = "bf16", batch: Any, q: Any,
                     context: Any, kv_precision: str | None = None) -> np.ndarray:
        """Interpolated seconds of one forward step (ndarray of the broadcast shape)."""
        return self.breakdown(model, tp=tp, precision=precision, batch=batch, q=q, context=context,
                              kv_precision=kv_precision)["total_s"]

    def describe(self) -> str:
        what = self.model_name or "unnamed model"
        return (f"MeasuredLatency [calibrated: measured table, {len(self.table)} points, {self._mode}] for {what}"
                f" (tp={self.tp}, precision={self.precision}); batch {np.exp(self._lo[0]):g}-{np.exp(self._hi[0]):g},"
                f" q {np.exp(self._lo[1]):g}-{np.exp(self._hi[1]):g}, context {self._lo[2]:g}-{self._hi[2]:g};"
                f" extrapolation factor {self.max_extrapolation:g}, outside={self.outside}"
                + (f"; source: {self.source}" if self.source else ""))


def read_latency_table(path, *, tp: int | None = None, field: str = "latency") -> MeasuredLatency:
    """A CSV of measured forward times of the TARGET as a :class:`MeasuredLatency`: what the CLI's
    ``--latency-table FILE.csv`` reads, and what ``predict`` / ``sweep`` / ``best_n`` read from a
    path given as ``latency=``.

    Parameters
    ----------
    path : str or os.PathLike
        CSV with columns ``batch``, ``q``, ``context``, ``seconds`` (one target forward each, e.g. a
        ``specsim run-matrix`` run's ``verify_cost.csv`` probe).
    tp : int, optional
        The TP degree the table was measured at (the TP predicted at): a call at another TP is
        refused (:class:`MeasuredLatency`).
    field : str, default "latency"
        The name errors give the table (``"--latency-table"`` for the CLI).

    Returns
    -------
    MeasuredLatency
        With ``source`` the path.

    Raises
    ------
    SpecsimValueError
        ``field``: the file cannot be read as CSV (missing, unreadable, not a table), or its table
        is not one :class:`MeasuredLatency` accepts (the message says why).
    """
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise SpecsimValueError(field, f"cannot read a CSV table ({exc})", str(path)) from None
    try:
        return MeasuredLatency(table, tp=tp, source=str(path))
    except SpecsimValueError as exc:
        raise SpecsimValueError(field, str(exc), str(path)) from None


_FIT_PARAMS = ("bandwidth", "compute", "fixed_s", "per_layer_s", "allreduce_latency_s")


@dataclass(frozen=True)
class Calibration:
    """Result of ``calibrate()``.

    Attributes
    ----------
    latency : Roofline
        The calibrated roofline (``calibrated=True``).
    params : dict[str, float]
        Fitted values of the requested parameters.
    residuals : pandas.DataFrame
        Columns ``batch, q, context, measured, predicted, rel_error`` (= predicted/measured - 1).
    rmse_rel : float
        Root-mean-square relative error over the measurements.
    unidentified : tuple[str, ...]
        Fitted parameters the data did not constrain (zero sensitivity at the optimum, e.g.
        ``compute`` when every point is memory-bound); their value is the starting value.
    """

    latency: Roofline
    params: dict[str, float]
    residuals: pd.DataFrame
    rmse_rel: float
    unidentified: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        p = ", ".join(f"{k}={v:.4g}" for k, v in self.params.items())
        s = f"calibrated {p}; rmse_rel={self.rmse_rel:.3%} over {len(self.residuals)} points"
        return s + (f"; not identified by the data: {', '.join(self.unidentified)}" if self.unidentified else "")


def calibrate(model: Any, hardware: Any, measurements: pd.DataFrame, *, tp: int = 1, precision: str = "bf16",
              params: Sequence[str] = ("bandwidth", "compute", "fixed_s"),
              bounds: dict[str, tuple[float, float]] | None = None, start: Efficiency | None = None,
              kv_precision: str | None = None, smooth_p: float | None = None,
              source: str | None = None) -> Calibration:
    """Fit roofline efficiencies to measured forward times by least squares on relative error.

    Minimises ``sum_i (predicted_i / measured_i - 1)^2`` with ``scipy.optimize.least_squares``
    (trust-region reflective, bounded).  Parameters not in ``params`` keep their ``start`` value.

    Parameters
    ----------
    model : ModelSpec-like
        The measured model.
    hardware : Hardware
        Datasheet record of the measured device.
    measurements : pandas.DataFrame
        Columns ``batch, q, context, seconds`` (one forward step each; > 0 seconds).
    tp, precision, kv_precision, smooth_p
        As in ``Roofline.breakdown`` / ``Roofline``.
    params : sequence of str
        Which ``Efficiency`` fields to fit (subset of bandwidth, compute, fixed_s, per_layer_s,
        allreduce_latency_s).
    bounds : dict, optional
        ``{name: (lo, hi)}`` overrides.  Defaults: efficiencies (1e-3, 1); times (0, 10 x the
        largest measured seconds).
    start : Efficiency, optional
        Starting point and values of the parameters not fitted; default ``Efficiency()``.
    source : str, optional
        Recorded in the calibrated roofline's ``describe()``.

    Returns
    -------
    Calibration

    Raises
    ------
    SpecsimValueError
        Unknown parameter names, missing columns, non-positive times, fewer measurements than
        parameters, or bounds that do not contain a valid interval.
    """
    from scipy.optimize import least_squares

    params = tuple(params)
    bad = [p for p in params if p not in _FIT_PARAMS]
    if bad or not params or len(set(params)) != len(params):
        raise SpecsimValueError("params", "must be distinct Efficiency fields", list(params), _FIT_PARAMS)
    if not isinstance(measurements, pd.DataFrame):
        raise SpecsimValueError("measurements", "must be a pandas DataFrame", type(measurements).__name__)
    missing = [c for c in ("batch", "q", "context", "seconds") if c not in measurements.columns]
    if missing:
        raise SpecsimValueError("measurements", "missing columns", missing, ["batch", "q", "context", "seconds"])
    m = measurements[["batch", "q", "context", "seconds"]].astype(float).reset_index(drop=True)
    if len(m) < len(params):
        raise SpecsimValueError("measurements", f"need at least {len(params)} rows to fit {len(params)} parameters", len(m))
    y = m["seconds"].to_numpy()
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise SpecsimValueError("measurements.seconds", "must be finite and > 0", y[~(y > 0)][:3].tolist())
    b, qq, c = _grid(m["batch"].to_numpy(), m["q"].to_numpy(), m["context"].to_numpy())
    start = start or Efficiency()
    tmax = float(y.max())
    default_bounds = {"bandwidth": (1e-3, 1.0), "compute": (1e-3, 1.0), "fixed_s": (0.0, 10 * tmax),
                      "per_layer_s": (0.0, 10 * tmax), "allreduce_latency_s": (0.0, 10 * tmax)}
    bounds = {**default_bounds, **(bounds or {})}
    lo = np.array([bounds[p][0] for p in params], dtype=float)
    hi = np.array([bounds[p][1] for p in params], dtype=float)
    if np.any(~(lo < hi)) or np.any(lo < 0) or any(hi[i] > 1 for i, p in enumerate(params) if p in ("bandwidth", "compute")):
        raise SpecsimValueError("bounds", "each must be lo < hi, lo >= 0, efficiencies <= 1",
                                {p: bounds[p] for p in params})
    # Fit in scaled units so that efficiencies (~0.5) and seconds (~1e-4) are comparable.
    scale = np.array([1.0 if p in ("bandwidth", "compute") else tmax for p in params])
    x0 = np.clip(np.array([getattr(start, p) for p in params]), lo + 1e-6 * (hi - lo), hi - 1e-6 * (hi - lo)) / scale
    base = Roofline(hardware, start, smooth_p=smooth_p)

    def eff_of(x: np.ndarray) -> Efficiency:
        return start.replace(**{p: float(v) for p, v in zip(params, x * scale)})

    def resid(x: np.ndarray) -> np.ndarray:
        rl = base.with_efficiency(eff_of(x))
        pred = rl.forward_time(model, tp=tp, precision=precision, batch=b, q=qq, context=c, kv_precision=kv_precision)
        return pred / y - 1.0

    sol = least_squares(resid, x0, bounds=(lo / scale, hi / scale), method="trf", x_scale="jac")
    eff = eff_of(sol.x)
    colnorm = np.linalg.norm(sol.jac, axis=0)
    unidentified = tuple(p for p, n in zip(params, colnorm) if not n > 1e-8)
    latency = Roofline(hardware, eff, calibrated=True, smooth_p=smooth_p,
                       source=source or f"calibrate() on {len(m)} measurements of {getattr(model, 'name', 'model')}")
    pred = latency.forward_time(model, tp=tp, precision=precision, batch=b, q=qq, context=c, kv_precision=kv_precision)
    res = pd.DataFrame({"batch": m["batch"], "q": m["q"], "context": m["context"], "measured": y,
                        "predicted": pred, "rel_error": pred / y - 1.0})
    return Calibration(latency=latency, params={p: float(getattr(eff, p)) for p in params}, residuals=res,
                       rmse_rel=float(np.sqrt(np.mean(res["rel_error"] ** 2))), unidentified=unidentified)
