"""GPU memory budget of a deployment as vLLM computes it (layer 2, model): weights, draft, activations,
KV cache per request and the concurrency that fits.

Details, derivations and sources: ``docs/modules/specsim.memory.md``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from specsim._checks import int_field
from specsim.architecture import ModelSpec, load_model
from specsim.drafters import get_drafter
from specsim.errors import SpecsimValueError
from specsim.hardware import Hardware, load_hardware
from specsim.latency import default_kv_precision

__all__ = [
    "GIB",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_NON_TORCH_BYTES",
    "ACTIVATION_WIDTH_FACTOR",
    "MemoryBudget",
    "memory_budget",
    "default_max_num_batched_tokens",
    "default_max_num_seqs",
]

#: Bytes in one GiB.
GIB = float(1 << 30)
#: vLLM 0.32.0 ``CacheConfig.gpu_memory_utilization`` default (``vllm/config/cache.py:102``).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
#: Non-torch memory per GPU (RCCL/NCCL buffers, HIP/CUDA context, graph pools) -- an assumption.
DEFAULT_NON_TORCH_BYTES = 2 * GIB
#: Live bf16 hidden-size vectors per token at the activation peak -- a heuristic (module docstring).
ACTIVATION_WIDTH_FACTOR = 16
_ACT_BYTES = 2.0  # bf16 activations
_LOGIT_BYTES = 4.0  # fp32 logits in the sampler


def default_max_num_batched_tokens(hbm_bytes: float) -> int:
    """vLLM 0.32.0 API-server default of ``max_num_batched_tokens`` for a GPU of this memory.

    ``vllm/engine/arg_utils.py:2923-2951``: >= 160 GiB -> 16384; >= 70 GiB -> 8192; else 2048.
    """
    if hbm_bytes >= 160 * GIB:
        return 16384
    if hbm_bytes >= 70 * GIB:
        return 8192
    return 2048


def default_max_num_seqs(hbm_bytes: float) -> int:
    """vLLM 0.32.0 API-server default of ``max_num_seqs`` (``vllm/engine/arg_utils.py:2923-2951``):
    1024 on GPUs with >= 70 GiB, else 256."""
    return 1024 if hbm_bytes >= 70 * GIB else 256


@dataclass(frozen=True)
class MemoryBudget:
    """Per-GPU memory budget of one (target, drafter, hardware, TP, workload) deployment.

    All ``*_bytes`` are bytes **per GPU**.

    Attributes
    ----------
    target, method, hardware : str
    tp, draft_tp : int
        Target and draft tensor-parallel degrees.
    concurrency, max_model_len : int
        Sequences whose KV cache must be resident at once, and their length in tokens.
    hbm_bytes : float
        Device memory of one GPU.
    gpu_memory_utilization : float
        Fraction vLLM may use.
    usable_bytes : float
        ``gpu_memory_utilization x hbm_bytes``.
    target_weight_bytes, draft_weight_bytes, kv_cache_bytes, draft_kv_cache_bytes,
    activation_bytes, non_torch_bytes : float
        The terms of ``required_bytes`` (module docstring).
    required_bytes, headroom_bytes : float
        Sum of the terms; ``usable_bytes - required_bytes`` (negative when it does not fit).
    fits : bool
        ``headroom_bytes >= 0``.
    max_concurrency_fit : int
        Largest concurrency whose KV cache (target + draft) at ``max_model_len`` fits beside the
        fixed terms (0 when the weights and runtime alone do not fit).
    reason : str
        Why it does not fit (the largest terms), or ``""``.
    assumptions : tuple of str
    """

    target: str
    method: str | None
    hardware: str
    tp: int
    draft_tp: int
    concurrency: int
    max_model_len: int
    hbm_bytes: float
    gpu_memory_utilization: float
    usable_bytes: float
    target_weight_bytes: float
    draft_weight_bytes: float
    kv_cache_bytes: float
    draft_kv_cache_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    required_bytes: float
    headroom_bytes: float
    fits: bool
    max_concurrency_fit: int
    reason: str = ""
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def headroom_gib(self) -> float:
        """Headroom in GiB (negative when the deployment does not fit)."""
        return self.headroom_bytes / GIB

    @property
    def reserve_bytes(self) -> float:
        """HBM vLLM leaves untouched: ``(1 - gpu_memory_utilization) x hbm_bytes``."""
        return (1.0 - self.gpu_memory_utilization) * self.hbm_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python dict (JSON-serialisable), with ``headroom_gib`` added."""
        d = asdict(self)
        d["assumptions"] = list(self.assumptions)
        d["headroom_gib"] = self.headroom_gib
        return d

    def summary(self) -> str:
        """Readable multi-line table in GiB."""
        g = lambda b: f"{b / GIB:8.2f} GiB"  # noqa: E731
        lines = [
            f"memory per GPU: {self.target} + {self.method or 'no drafter'} on {self.hardware} TP={self.tp} "
            f"(draft TP={self.draft_tp}), {self.concurrency} x {self.max_model_len} tokens",
            f"  usable ({self.gpu_memory_utilization:.2f} x {self.hbm_bytes / GIB:.0f} GiB) {g(self.usable_bytes)}",
            f"  target weights                {g(self.target_weight_bytes)}",
            f"  draft weights                 {g(self.draft_weight_bytes)}",
            f"  target KV cache               {g(self.kv_cache_bytes)}",
            f"  draft KV cache                {g(self.draft_kv_cache_bytes)}",
            f"  activations (estimate)        {g(self.activation_bytes)}",
            f"  non-torch (assumed)           {g(self.non_torch_bytes)}",
            f"  headroom                      {g(self.headroom_bytes)}  -> {'fits' if self.fits else 'DOES NOT FIT'}",
        ]
        if self.reason:
            lines.append(f"  reason: {self.reason}")
        return "\n".join(lines)


def _kv_shards(model: Any, tp: int) -> int:
    """Ranks over which one sequence's KV cache is divided (module docstring)."""
    if getattr(model, "attention_kind", "gqa") == "mla":
        return 1
    heads = getattr(model, "num_kv_heads", None)
    if heads is None:
        groups = getattr(model, "attention", None)
        heads = min((g.kv_heads for g in groups), default=tp) if groups else tp
    return max(1, min(tp, int(heads)))


def memory_budget(
    target,
    method: str | None = None,
    *,
    draft=None,
    drafter=None,
    hardware="MI300X",
    tp: int = 1,
    draft_tp: int | None = None,
    precision: str | None = None,
    draft_precision: str = "bf16",
    kv_precision: str | None = None,
    concurrency: int = 1,
    max_model_len: int = 2048,
    num_speculative_tokens: int = 0,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    non_torch_bytes: float = DEFAULT_NON_TORCH_BYTES,
) -> MemoryBudget:
    """Per-GPU memory budget: target weights + draft checkpoint + KV cache + runtime reserve.

    Parameters
    ----------
    target : str or ModelSpec
        Target model (name in ``specsim/data/models`` or a spec).
    method : str, optional
        vLLM speculative method (``"dflash"``, ``"eagle3"``, ``"mtp"``, ``"ngram"`` ...);
        ``None`` budgets the target alone (no speculation).
    draft : str or ModelSpec, optional
        Draft checkpoint; default the seed drafter of ``(target, method)``.
    drafter : Drafter, optional
        A ready drafter (overrides ``method`` / ``draft``).
    hardware : str or Hardware
        Accelerator; ``hbm_bytes`` is its memory per GPU.
    tp : int
        Target tensor-parallel degree.
    draft_tp : int, optional
        ``draft_tensor_parallel_size``; default the drafter's ``draft_tp`` (set from a
        speculative config), else vLLM's default ``tp``; vLLM allows only 1 or ``tp``.  The draft
        weights and the draft KV cache are divided over ``draft_tp`` ranks.
    precision : str, optional
        Uniform target weight precision; default ``None`` = the model's serving precisions
        (``ModelSpec.weight_dtype`` / ``expert_weight_dtype`` / ``lm_head_dtype``, e.g. an FP8
        checkpoint whose embedding and lm_head stay bf16).
    draft_precision : str
        Draft checkpoint precision (default bf16, the precision drafters are published in).
    kv_precision : str, optional
        KV-cache dtype; default as vLLM's ``kv_cache_dtype="auto"`` (the activation dtype: bf16
        for quantized targets).
    concurrency : int
        Sequences resident at once (``max_num_seqs`` you serve at).
    max_model_len : int
        Tokens per sequence the cache must hold (vLLM ``--max-model-len``).
    num_speculative_tokens : int
        N, checked (an integer >= 0) but not used: vLLM's profiling run drafts one dummy token per
        request whatever N is, so N does not change the activation peak here.
    gpu_memory_utilization : float
        In (0, 1]; vLLM default 0.92 (``vllm/config/cache.py:102``).
    max_num_batched_tokens, max_num_seqs : int, optional
        Sizes of vLLM's profiling run; default vLLM 0.32.0's API-server defaults for this GPU's
        memory (:func:`default_max_num_batched_tokens`, :func:`default_max_num_seqs`).
    non_torch_bytes : float
        Non-torch memory per GPU, bytes (assumed 2 GiB).

    Returns
    -------
    MemoryBudget

    Raises
    ------
    SpecsimValueError
        Non-integer / non-positive ``tp``, ``concurrency``, ``max_model_len``; ``draft_tp`` not
        1 or ``tp`` (vLLM ``_verify_and_get_draft_tp``); ``gpu_memory_utilization`` outside
        (0, 1]; negative ``non_torch_bytes``; unknown model, hardware, method, precision.
    """

    tp = int_field("tp", tp)
    concurrency = int_field("concurrency", concurrency)
    max_model_len = int_field("max_model_len", max_model_len)
    int_field("num_speculative_tokens", num_speculative_tokens, minimum=0)  # checked only (see above)
    if draft_tp is None:  # the drafter's own (speculative_config draft_tensor_parallel_size), else vLLM's default tp
        draft_tp = getattr(drafter, "draft_tp", None) or tp
    elif getattr(drafter, "draft_tp", None) not in (None, draft_tp):
        raise SpecsimValueError("draft_tp", f"conflicts with the drafter's draft_tp={drafter.draft_tp}", draft_tp)
    draft_tp = int_field("draft_tp", draft_tp)
    if draft_tp not in (1, tp):
        raise SpecsimValueError("draft_tp", "vLLM allows draft_tensor_parallel_size = 1 or the target tp "
                                "(vllm/config/speculative.py:1730)", draft_tp, [1, tp])
    u = gpu_memory_utilization
    if isinstance(u, bool) or not isinstance(u, (int, float, np.floating)) or not (0.0 < float(u) <= 1.0):
        raise SpecsimValueError("gpu_memory_utilization", "must lie in (0, 1]", gpu_memory_utilization)
    u = float(u)
    if not np.isfinite(non_torch_bytes) or non_torch_bytes < 0:
        raise SpecsimValueError("non_torch_bytes", "must be a finite number >= 0 bytes", non_torch_bytes)

    tgt = target if isinstance(target, ModelSpec) else load_model(target)
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    if kv_precision is None:
        kv_precision = default_kv_precision(precision or getattr(tgt, "weight_dtype", "bf16"))
    if max_num_batched_tokens is None:
        max_num_batched_tokens = default_max_num_batched_tokens(hw.hbm_bytes)
    max_num_batched_tokens = int_field("max_num_batched_tokens", max_num_batched_tokens)
    if max_num_seqs is None:
        max_num_seqs = default_max_num_seqs(hw.hbm_bytes)
    max_num_seqs = int_field("max_num_seqs", max_num_seqs)

    assumptions = [
        f"gpu_memory_utilization {u:g} (vLLM 0.32.0 default 0.92): {(1 - u) * hw.hbm_bytes / GIB:.1f} GiB "
        "per GPU left as reserve",
        f"activation peak estimated as max_num_batched_tokens ({max_num_batched_tokens}) x hidden x 2 B x "
        f"{ACTIVATION_WIDTH_FACTOR} + sampler logits min(max_num_seqs, max_num_batched_tokens) x vocab x 4 B "
        "(x2 with speculation) (heuristic)",
        f"non-torch memory {non_torch_bytes / GIB:.2f} GiB per GPU (assumed)",
    ]

    target_w = float(tgt.weight_bytes(precision)) / tp
    kv_shards = _kv_shards(tgt, tp)
    kv = concurrency * float(np.asarray(tgt.kv_bytes_per_seq(max_model_len, kv_precision))) / kv_shards
    if kv_shards < tp:
        assumptions.append(
            f"target KV cache divided over {kv_shards} of {tp} ranks "
            f"({'MLA latent replicated on every rank' if getattr(tgt, 'attention_kind', '') == 'mla' else 'fewer KV heads than ranks: heads replicated'})")

    draft_w = draft_kv = 0.0
    d = None
    if method is not None or drafter is not None:
        if drafter is None:

            drafter = get_drafter(method, draft_model=draft, target=tgt)
        d = drafter
        method = getattr(d, "method", method)
        draft_w = float(d.draft_weight_bytes(draft_precision)) / draft_tp
        if getattr(d, "shares_target_kv", False):
            draft_kv = 0.0
            assumptions.append(f"{method}: drafter attends over the target's KV cache (no draft KV cache)")
        else:
            dspec = getattr(d, "draft", None)
            shards = _kv_shards(dspec, draft_tp) if dspec is not None else draft_tp
            draft_kv = concurrency * float(np.asarray(d.draft_kv_bytes_per_seq(max_model_len))) / shards
        if getattr(d, "shares_target_weights", False):
            assumptions.append(f"{method}: shares the target's weights; only the drafter's own module is extra")

    h = int(getattr(tgt, "hidden_size"))
    vocab = int(getattr(tgt, "vocab_size"))
    act = max_num_batched_tokens * h * _ACT_BYTES * ACTIVATION_WIDTH_FACTOR
    spec = method is not None or drafter is not None
    act += min(max_num_seqs, max_num_batched_tokens) * (2 if spec else 1) * vocab * _LOGIT_BYTES

    usable = u * hw.hbm_bytes
    terms = {
        "target weights": target_w,
        "draft weights": draft_w,
        "target KV cache": kv,
        "draft KV cache": draft_kv,
        "activations": act,
        "non-torch": float(non_torch_bytes),
    }
    required = float(sum(terms.values()))
    headroom = usable - required
    fits = bool(headroom >= 0)
    per_seq = (kv + draft_kv) / concurrency
    fixed = required - kv - draft_kv
    max_fit = int(max(0.0, usable - fixed) // per_seq) if per_seq > 0 else (concurrency if fits else 0)
    reason = ""
    if not fits:
        big = sorted(terms.items(), key=lambda kv_: -kv_[1])[:3]
        reason = (f"needs {required / GIB:.1f} GiB per GPU but only {usable / GIB:.1f} GiB is usable "
                  f"({u:g} x {hw.hbm_bytes / GIB:.0f} GiB); largest terms: "
                  + ", ".join(f"{k} {v / GIB:.1f} GiB" for k, v in big)
                  + (f"; fits up to concurrency {max_fit} at max_model_len {max_model_len}" if max_fit > 0
                     else "; weights and runtime alone exceed the usable memory at this TP"))
    return MemoryBudget(
        target=tgt.name,
        method=method,
        hardware=hw.name,
        tp=tp,
        draft_tp=draft_tp,
        concurrency=concurrency,
        max_model_len=max_model_len,
        hbm_bytes=float(hw.hbm_bytes),
        gpu_memory_utilization=u,
        usable_bytes=usable,
        target_weight_bytes=target_w,
        draft_weight_bytes=draft_w,
        kv_cache_bytes=kv,
        draft_kv_cache_bytes=draft_kv,
        activation_bytes=act,
        non_torch_bytes=float(non_torch_bytes),
        required_bytes=required,
        headroom_bytes=headroom,
        fits=fits,
        max_concurrency_fit=max_fit,
        reason=reason,
        assumptions=tuple(assumptions),
    )
