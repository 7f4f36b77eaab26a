"""Draft-cost strategies keyed by vLLM's speculative ``method`` (layer 2, model): sequential, parallel,
parallel + Markov head and lookup drafters, and the shipped draft specs.

Details, derivations and sources: ``docs/modules/specsim.drafters.md``.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from specsim._checks import int_array
from specsim.architecture import load_model_or_config
from specsim.catalog import data_path
from specsim.errors import DataError, SpecsimValueError
from specsim.vllm.config import MTP_METHODS, SPECULATIVE_METHODS

# vLLM's method list has one home, specsim.vllm.config (vllm/config/speculative.py, 0.32.0)
VLLM_MTP_TYPES = MTP_METHODS
VLLM_METHODS = SPECULATIVE_METHODS
_KIND = {"mtp": "sequential", "eagle": "sequential", "eagle3": "sequential", "draft_model": "sequential",
         "dflash": "parallel", "dspark": "parallel_markov", "ngram": "lookup", "ngram_gpu": "lookup",
         "suffix": "lookup"}
MODELED_METHODS = tuple(m for m in VLLM_METHODS if m in _KIND or m in VLLM_MTP_TYPES)
KINDS = ("sequential", "parallel", "parallel_markov", "lookup")
#: precision strings that are a model dtype (not a quantization): a separate draft checkpoint runs at
#: the target's dtype (vllm/config/speculative.py builds the draft ModelConfig with
#: ``dtype=self.target_model_config.dtype``); behind a quantized target (fp8, mxfp4, int4) it runs bf16
DTYPE_PRECISIONS = ("bf16", "fp16", "fp32")
#: methods whose proposer can come back empty (a prompt / suffix lookup that finds no match): only for
#: these do some decode steps carry no draft (vllm/v1/spec_decode/ngram_proposer.py, suffix_decoding.py)
LOOKUP_METHODS = tuple(m for m, k in _KIND.items() if k == "lookup")
#: methods whose heads may be trained for vLLM's ``parallel_drafting`` (Unified Parallel Drafting, vLLM
#: >= 0.16, PR #32887; P-EAGLE = eagle3 + parallel_drafting): ONE draft forward drafts all N tokens, so a
#: spec of such a head declares ``"parallel_drafting": true`` and kind ``"parallel"``
PARALLEL_DRAFTING_METHODS = ("eagle", "eagle3")


def spec_kinds(method: str, parallel_drafting: bool = False) -> tuple[str, ...]:
    """The drafter kinds a draft spec of vLLM ``method`` may declare: the method's own kind, and
    ``"parallel"`` for a :data:`PARALLEL_DRAFTING_METHODS` head with ``parallel_drafting``."""
    own = (_KIND.get("mtp" if method in VLLM_MTP_TYPES else method, "sequential"),)
    return own + (("parallel",) if parallel_drafting and method in PARALLEL_DRAFTING_METHODS else ())
# Bytes per weight by precision string (docs/architecture.md): mxfp4 = 0.5 + 1/32 E8M0 scale,
# int4 w4a16 group 32 with a bf16 scale = 0.5 + 2/32.
BYTES_PER_PARAM = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0, "mxfp4": 0.53125, "int4": 0.5625}
DEFAULT_LOOKUP_S_PER_REQUEST = 5e-6  # assumed: numba KMP over a few-k-token history, one thread
MARKOV_OVERHEAD_FRACTION = 0.05      # assumed: ~4 small in-graph kernels vs one forward's fixed cost


def _bpp(precision: str, field_name: str = "precision") -> float:
    if precision not in BYTES_PER_PARAM:
        raise SpecsimValueError(field_name, "unknown precision string", precision, BYTES_PER_PARAM)
    return BYTES_PER_PARAM[precision]


@dataclass(frozen=True)
class AttentionGroup:
    """``count`` draft layers with one attention geometry (KV read capped at ``window`` tokens)."""

    count: int
    num_heads: int
    kv_heads: int
    head_dim: int
    window: int | None = None
    kv_tensors: int = 2  # 1 when K == V is stored once (Gemma 4 global layers, attention_k_eq_v)
    #: MLA: elements per token of the compressed latent cache (kv_lora_rank + qk_rope_head_dim), read
    #: once per context token and attended over with absorbed weights; replaces kv_heads x head_dim
    latent_dim: int | None = None

    @property
    def kv_elems_per_token(self) -> int:
        """KV-cache elements per token of ONE layer of this group."""
        return int(self.latent_dim) if self.latent_dim else self.kv_heads * self.head_dim * self.kv_tensors

    @property
    def attn_dim(self) -> int:
        """Per-head width of the QK / PV products (the latent width for absorbed MLA)."""
        return int(self.latent_dim) if self.latent_dim else self.head_dim


@dataclass(frozen=True)
class DraftNet:
    """Architecture of a draft network, duck-typed like ``ModelSpec`` for the latency models.

    Parameter counts are computed from dimensions: attention q/k/v from ``attn_input_dim`` (2h for
    EAGLE-3, whose attention reads [embedding; hidden]), q doubled with ``q_gate`` (Qwen3.5/3.6
    gated attention), no k/v weights when ``kv_proj`` is False (Gemma 4 assistant); SwiGLU/GeGLU
    MLP 3*h*I; MoE experts 3*h*I_moe each, touched experts E*(1-(1-k/E)^T) (docs/architecture.md, latency.py);
    ``fc_params`` covers fc / eh_proj / pre- and post-projections; the lm_head has
    ``lm_vocab`` x ``lm_dim`` weights applied at the sampled positions (``lm_positions``:
    "last" = 1 per sequence, "all" = q, "all_but_first" = q-1).  Norms are ignored.
    """

    name: str
    num_layers: int
    hidden_size: int
    attention: tuple[AttentionGroup, ...]
    attn_input_dim: int
    intermediate_size: int = 0
    kv_proj: bool = True
    q_gate: bool = False
    moe_num_experts: int = 0
    moe_experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    fc_params: int = 0
    lm_vocab: int = 0
    lm_dim: int = 0
    lm_shared_with_target: bool = False
    lm_positions: str = "last"
    stored_extra_params: int = 0

    def _attn_params(self) -> float:
        tot = 0.0
        for g in self.attention:
            q = self.attn_input_dim * g.num_heads * g.head_dim * (2 if self.q_gate else 1)
            kv = self.attn_input_dim * g.kv_heads * g.head_dim * g.kv_tensors if self.kv_proj else 0
            tot += g.count * (q + kv + g.num_heads * g.head_dim * self.hidden_size)
        return tot

    @property
    def expert_params(self) -> float:
        return 3.0 * self.hidden_size * self.moe_intermediate_size

    @property
    def dense_params(self) -> float:
        """Params every token touches except routed experts and the lm_head."""
        per_layer = 3.0 * self.hidden_size * (self.intermediate_size + self.shared_expert_intermediate_size)
        per_layer += self.hidden_size * self.moe_num_experts  # router
        return self._attn_params() + self.num_layers * per_layer + self.fc_params

    @property
    def lm_head_params(self) -> float:
        return float(self.lm_vocab) * float(self.lm_dim)

    def total_params(self) -> float:
        """Every weight the draft forward may read (incl. all experts and a shared lm_head)."""
        return self.dense_params + self.num_layers * self.moe_num_experts * self.expert_params + self.lm_head_params

    def weight_bytes(self, precision: str = "bf16") -> float:
        """Bytes of all weights a draft forward may read (see ``total_params``)."""
        return self.total_params() * _bpp(precision)

    def step_weight_bytes(self, tokens: Any, precision: str = "bf16") -> np.ndarray:
        """Weight bytes read by one forward over ``tokens`` = B*q tokens (ndarray)."""
        t = np.asarray(tokens, dtype=float)
        base = self.dense_params + self.lm_head_params
        if self.moe_num_experts:
            e, k = float(self.moe_num_experts), float(self.moe_experts_per_token)
            touched = e * (1.0 - (1.0 - k / e) ** t)
            base = base + self.num_layers * touched * self.expert_params
        return np.broadcast_to(base, t.shape) * _bpp(precision)

    def kv_bytes_per_seq(self, context: Any, kv_precision: str = "bf16") -> np.ndarray:
        """KV bytes READ per sequence per forward at ``context`` tokens (window-capped).

        For a drafter that shares the target's KV cache this is what its attention reads, not
        what it stores (see ``Drafter.draft_kv_bytes_per_seq`` for storage).
        """
        c = np.asarray(context, dtype=float)
        out = np.zeros_like(c)
        for g in self.attention:
            span = c if g.window is None else np.minimum(c, g.window)
            out = out + g.count * g.kv_elems_per_token * span
        return out * _bpp(kv_precision, "kv_precision")

    def _sampled(self, q: np.ndarray) -> np.ndarray:
        if self.lm_positions == "last":
            return np.ones_like(q)
        return q if self.lm_positions == "all" else np.maximum(q - 1.0, 1.0)

    def step_flops(self, batch: Any, q: Any, context: Any) -> np.ndarray:
        """FLOPs of one forward: 2*params*tokens + attention 4*heads*hd*span per query + lm_head."""
        b, qq, c = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (batch, q, context)))
        tokens = b * qq
        active = self.dense_params + self.num_layers * self.moe_experts_per_token * self.expert_params
        attn = np.zeros_like(c)
        for g in self.attention:
            span = c + qq if g.window is None else np.minimum(c + qq, g.window)
            attn = attn + g.count * 4.0 * g.num_heads * g.attn_dim * span
        return 2.0 * active * tokens + attn * tokens + 2.0 * self.lm_head_params * b * self._sampled(qq)

    def stored_kv_bytes_per_token(self, kv_precision: str = "bf16") -> float:
        """KV bytes stored per token when the drafter keeps its own cache (no window cap)."""
        return float(self.kv_bytes_per_seq(1.0, kv_precision))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], name: str) -> "DraftNet":
        """Build from the ``architecture`` block of a ``specsim/data/drafters/*.json`` file."""
        d = dict(d)
        try:
            h = int(d["hidden_size"])
            groups = d.get("attention") or [{"count": d["num_layers"], "num_heads": d["num_heads"],
                                             "kv_heads": d["kv_heads"], "head_dim": d["head_dim"]}]
            lm = d.get("lm_head") or {}
            net = cls(name=name, num_layers=int(d["num_layers"]), hidden_size=h,
                      attention=tuple(AttentionGroup(**g) for g in groups),
                      attn_input_dim=int(d.get("attn_input_dim", h)),
                      intermediate_size=int(d.get("intermediate_size", 0)), kv_proj=bool(d.get("kv_proj", True)),
                      q_gate=bool(d.get("q_gate", False)),
                      moe_num_experts=int(d.get("moe_num_experts", 0)),
                      moe_experts_per_token=int(d.get("moe_experts_per_token", 0)),
                      moe_intermediate_size=int(d.get("moe_intermediate_size", 0)),
                      shared_expert_intermediate_size=int(d.get("shared_expert_intermediate_size", 0)),
                      fc_params=int(d.get("fc_params", 0)), lm_vocab=int(lm.get("vocab", 0)),
                      lm_dim=int(lm.get("dim", h)), lm_shared_with_target=bool(lm.get("shared_with_target", False)),
                      lm_positions=str(d.get("lm_positions", "last")),
                      stored_extra_params=int(d.get("stored_extra_params", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"draft architecture {name!r}: bad or missing field ({exc})") from exc
        if sum(g.count for g in net.attention) != net.num_layers:
            raise DataError(f"draft architecture {name!r}: attention group counts != num_layers")
        if net.lm_positions not in ("last", "all", "all_but_first"):
            raise DataError(f"draft architecture {name!r}: lm_positions must be last/all/all_but_first")
        return net


def _norm(name: str) -> str:
    return str(name).strip().split("/")[-1].lower()


@dataclass(frozen=True)
class DraftPass:
    """One kind of draft forward in a step (:meth:`Drafter.draft_plan`).

    Attributes
    ----------
    net : DraftNet or ModelSpec
    q, context : ndarray
        Query tokens per sequence and KV context of the pass.
    tp : int
    precision : str
    multiplier : ndarray
        How many such passes the step runs (e.g. N - 1 one-token passes).
    fixed_override : float or None
        Seconds replacing the latency model's fixed per-forward cost (``draft_pass_overhead_s``).
    fixed_scale : float
        Factor on the latency model's fixed cost (the Markov head: ``MARKOV_OVERHEAD_FRACTION``).
    """

    net: Any
    q: Any
    context: Any
    tp: int
    precision: str
    multiplier: Any
    fixed_override: float | None = None
    fixed_scale: float = 1.0


@dataclass(frozen=True)
class Drafter:
    """Draft-cost strategy for one vLLM ``method`` (see the module docstring).

    Attributes
    ----------
    method : str
        The vLLM method string as given (e.g. ``"eagle3"``, ``"qwen3_5_mtp"``).
    kind : {"sequential", "parallel", "parallel_markov", "lookup"}
    draft : DraftNet or ModelSpec or None
        The draft network (``None`` for lookup methods).
    shares_target_weights, shares_target_kv : bool
        Native MTP shares the target's embedding / lm_head; the Gemma 4 assistant reads the
        target's KV cache and stores none.
    name, source, assumptions
        Provenance of the draft spec (``specsim/data/drafters/*.json``).
    precision : str or None
        Draft checkpoint's weight precision (None: bf16, or for native MTP the target's).  A
        quantized one (fp8, mxfp4, int4) runs as stored; a dtype (bf16 / fp16 / fp32) is cast to
        the target's dtype (bf16 behind a quantized target): vLLM builds the draft's ModelConfig
        with ``dtype=self.target_model_config.dtype`` (``vllm/config/speculative.py``); see
        :meth:`draft_precision`.
    draft_tp : int or None
        Draft TP degree (vLLM ``draft_tensor_parallel_size``); None = the target's TP.
    draft_pass_overhead_s : float or None
        Seconds per draft forward replacing the latency model's fixed per-forward cost; None =
        the shipped calibration's ``draft_pass_overhead_s`` for a calibrated roofline
        (``latency.calibration.draft_pass_overhead_s``), else the latency model's own
        ``fixed_s + per_layer_s * draft_layers``.
    markov_step_overhead_s : float or None
        Seconds per DSpark Markov-head step on top of its roofline time; None = 5 % of ``fixed_s``.
    markov_rank, markov_vocab : int
        DSpark Markov head: ``W2`` is ``markov_rank x markov_vocab``; ``W1`` (gathered) is
        ``target vocab x markov_rank`` (memory only).
    query_tokens : {"n+1", "n"}
        Query positions per request of a parallel pass.
    block_size : int or None; pad_to_block_size : bool
        Trained block size; pad the parallel pass to it (z-lab reference) instead of N+1 (vLLM).
    lookup_s_per_request : float
        Lookup methods: CPU seconds per request per step (default 5e-6, assumed; calibratable).
    native_depth : int or None
        Number of native MTP modules (passes beyond it re-run them).
    """

    method: str
    kind: str
    draft: Any = None
    shares_target_weights: bool = False
    shares_target_kv: bool = False
    name: str | None = None
    source: str = ""
    assumptions: tuple[str, ...] = ()
    precision: str | None = None
    draft_tp: int | None = None
    draft_pass_overhead_s: float | None = None
    markov_step_overhead_s: float | None = None
    markov_rank: int = 0
    markov_vocab: int = 0
    target_vocab: int = 0
    query_tokens: str = "n+1"
    block_size: int | None = None
    pad_to_block_size: bool = False
    lookup_s_per_request: float = DEFAULT_LOOKUP_S_PER_REQUEST
    native_depth: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecsimValueError("kind", "unknown drafter kind", self.kind, KINDS)
        if self.kind != "lookup" and self.draft is None:
            raise SpecsimValueError("draft", f"a {self.kind} drafter needs a draft architecture", None)
        if self.query_tokens not in ("n+1", "n"):
            raise SpecsimValueError("query_tokens", "must be 'n+1' or 'n'", self.query_tokens, ["n+1", "n"])
        for f in ("draft_pass_overhead_s", "markov_step_overhead_s", "lookup_s_per_request"):
            v = getattr(self, f)
            if v is not None and not (np.isfinite(v) and v >= 0):
                raise SpecsimValueError(f, "must be finite and >= 0 seconds", v)
        if self.precision is not None:
            _bpp(self.precision)
        if self.draft_tp is not None and (not isinstance(self.draft_tp, (int, np.integer)) or self.draft_tp < 1):
            raise SpecsimValueError("draft_tp", "must be an integer >= 1", self.draft_tp)
        if self.pad_to_block_size and not self.block_size:
            raise SpecsimValueError("pad_to_block_size", "needs block_size", self.block_size)

    def with_params(self, **changes: Any) -> "Drafter":
        """Copy with some fields changed (e.g. a calibrated ``draft_pass_overhead_s``)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise SpecsimValueError("Drafter field", "unknown field", unknown, sorted(names))
        return dataclasses.replace(self, **changes)

    def draft_precision(self, target_precision: str | None) -> str:
        """The precision the draft's layers run at.

        A quantized draft checkpoint (:attr:`precision` fp8, mxfp4, int4) runs as stored.  A draft
        stored in a dtype (:attr:`precision` in :data:`DTYPE_PRECISIONS`, or unset) runs at the
        target's dtype (vLLM casts it: ``dtype=self.target_model_config.dtype``,
        ``vllm/config/speculative.py``): the target's ``precision`` when that is a dtype, bf16 behind
        a quantized target (its activation dtype) or the serving mix (``target_precision`` None).
        Native MTP without a set precision shares the target's.

        Parameters
        ----------
        target_precision : str or None
            The target's precision string (``bf16``, ``fp16``, ``fp32``, ``fp8``, ``mxfp4``,
            ``int4``) or None.

        Returns
        -------
        str
            A precision string.
        """
        if self.precision is not None and self.precision not in DTYPE_PRECISIONS:
            return self.precision  # a quantized draft checkpoint
        if self.precision is None and self.shares_target_weights and target_precision is not None:
            return target_precision
        if target_precision in DTYPE_PRECISIONS:
            return target_precision
        return "bf16"

    def _pass(self, lat: Any, net: Any, *, batch, q, context, tp: int, precision: str, overhead: float | None):
        bd = lat.breakdown(net, tp=tp, precision=precision, batch=batch, q=q, context=context)
        if overhead is None:
            return bd["total_s"], bd
        if "fixed_s" not in bd:
            raise SpecsimValueError("draft_pass_overhead_s", "needs a roofline latency model (with a fixed_s term)",
                                    type(lat).__name__)
        return bd["total_s"] - bd["fixed_s"] + overhead, bd

    def draft_time(self, latency: Any, target: Any = None, *, n: Any, batch: Any, context: Any, tp: int = 1,
                   precision: str = "bf16", draft_latency: Any = None) -> np.ndarray:
        """Seconds of drafting per verification step.

        Parameters
        ----------
        latency : LatencyModel
            The target's latency model; draft passes use it unless ``draft_latency`` is given.
            A ``MeasuredLatency`` can only time the model it measured, so it needs ``draft_latency``.
        target : ModelSpec, optional
            The target (unused by the cost; kept for the contract and future checks).
        n : int or int array (>= 0)
            Draft tokens this step (num_speculative_tokens, or a dynamic schedule's k; k = 0 is
            the proposer's KV-sync pass only: one draft forward over the new token, or the lookup).
        batch : array_like (>= 1)
            Sequences per step (concurrency).
        context : array_like (>= 0)
            KV context in tokens.
        tp : int
            Target TP degree (the draft uses ``draft_tp`` or this).
        precision : str
            Target weight precision (see ``precision`` attribute for the draft's).

        Returns
        -------
        ndarray, broadcast shape of ``n``, ``batch``, ``context`` -- seconds.

        Raises
        ------
        SpecsimValueError
            Non-integer or negative ``n``; a latency model that cannot time the draft.
        """
        nn = int_array("num_speculative_tokens", n, minimum=0).astype(float)
        nn, b, c = np.broadcast_arrays(nn, np.asarray(batch, dtype=float), np.asarray(context, dtype=float))
        if self.kind == "lookup":
            if np.any(b < 1):
                raise SpecsimValueError("batch", "must be >= 1", batch)
            return b * self.lookup_s_per_request
        lat = draft_latency if draft_latency is not None else latency
        if draft_latency is None and not hasattr(latency, "pass_overhead_s"):
            raise SpecsimValueError("draft_latency", "the target's latency model cannot time draft passes "
                                    "(measured table?); pass draft_latency=Roofline(...) or a table of the draft",
                                    type(latency).__name__)
        total = np.zeros(nn.shape)
        for pas in self.draft_plan(nn, b, c, tp=tp, precision=precision):
            bd = lat.breakdown(pas.net, tp=pas.tp, precision=pas.precision, batch=b, q=pas.q, context=pas.context)
            if pas.fixed_override is not None or pas.fixed_scale != 1.0:
                if "fixed_s" not in bd:
                    raise SpecsimValueError("draft_pass_overhead_s / markov_step_overhead_s",
                                            "must be given with a measured latency table (no fixed_s term)",
                                            type(lat).__name__)
                fixed = pas.fixed_override if pas.fixed_override is not None else pas.fixed_scale * bd["fixed_s"]
                t = bd["total_s"] - bd["fixed_s"] + fixed
            else:
                t = bd["total_s"]
            total = total + pas.multiplier * t
        return total

    def draft_plan(self, n: Any, batch: Any, context: Any, *, tp: int = 1,
                   precision: str | None = "bf16") -> list["DraftPass"]:
        """The draft forwards of one step, as data: which net, how many query tokens, how often.

        Parameters
        ----------
        n, batch, context : array_like
            Draft tokens this step (>= 0), sequences, KV context (broadcast together).
        tp, precision
            The TARGET's TP degree and weight precision (the draft uses ``draft_tp`` / its own).

        Returns
        -------
        list of DraftPass
            Empty for lookup methods (their CPU time is ``batch * lookup_s_per_request``).
            sequential [eagle, eagle3, mtp, draft_model]: the first pass over the N + 1 new tokens,
            then ``max(N - 1, 0)`` one-token passes (vLLM ``llm_base_proposer.py``; k = 0 is the
            KV-sync pass only, l.617-626).  parallel [dflash]: one pass over the block (N + 1, or
            N, or padded to the trained block).  parallel_markov [dspark]: that pass plus N
            Markov-head steps (no layers; their fixed cost is ``MARKOV_OVERHEAD_FRACTION`` of a
            forward's unless ``markov_step_overhead_s`` is given).
        """
        nn = np.asarray(n, dtype=float)
        nn, b, c = np.broadcast_arrays(nn, np.asarray(batch, dtype=float), np.asarray(context, dtype=float))
        if self.kind == "lookup":
            return []
        prec, dtp = self.draft_precision(precision), self.draft_tp or tp
        ov = self.draft_pass_overhead_s
        if self.kind == "sequential":
            return [DraftPass(self.draft, nn + 1.0, c, dtp, prec, np.ones_like(nn), ov),
                    DraftPass(self.draft, np.ones_like(nn), c, dtp, prec, np.maximum(nn - 1.0, 0.0), ov)]
        zero = nn == 0
        q = nn + 1.0 if self.query_tokens == "n+1" else nn.copy()
        if self.pad_to_block_size:
            q = np.maximum(q, float(self.block_size))
        q = np.where(zero, 1.0, q)  # k = 0: the one sync pass over the new token, no drafting block
        out = [DraftPass(self.draft, q, c, dtp, prec, np.ones_like(nn), ov)]
        if self.kind == "parallel":
            return out
        head = DraftNet(name=f"{self.name}-markov-head", num_layers=0, hidden_size=self.markov_rank, attention=(),
                        attn_input_dim=self.markov_rank, lm_vocab=self.markov_vocab, lm_dim=self.markov_rank)
        over = self.markov_step_overhead_s
        out.append(DraftPass(head, np.ones_like(nn), np.zeros_like(c), dtp, prec, nn, over,
                             1.0 if over is not None else MARKOV_OVERHEAD_FRACTION))
        return out

    def draft_weight_bytes(self, precision: str | None = None) -> float:
        """Extra GPU memory of the draft weights, bytes (0 for lookup methods).

        Weights shared with the target (native MTP's embedding and lm_head, a shared lm_head of
        DFlash) count 0; native MTP's own module(s) DO count (DeepSeek-V3's MTP module is ~14B
        params, "almost no extra memory" only holds for small MTP layers).  ``precision`` defaults
        to the draft's own (bf16 for separate checkpoints).
        """
        if self.kind == "lookup":
            return 0.0
        prec = precision or self.precision or "bf16"
        if not isinstance(self.draft, DraftNet):
            return float(self.draft.weight_bytes(prec))
        d = self.draft
        params = d.total_params() - (d.lm_head_params if d.lm_shared_with_target else 0.0) + d.stored_extra_params
        if self.native_depth and self.native_depth > 1:
            params += (self.native_depth - 1) * (d.total_params() - d.lm_head_params)
        params += self.markov_rank * (self.markov_vocab + self.target_vocab)
        return float(params * _bpp(prec))

    def draft_kv_bytes_per_seq(self, context: Any, kv_precision: str = "bf16") -> np.ndarray:
        """KV-cache bytes the drafter STORES per sequence of ``context`` tokens (0 if shared/lookup)."""
        c = np.asarray(context, dtype=float)
        if self.kind == "lookup" or self.shares_target_kv:
            return np.zeros_like(c)
        return np.asarray(self.draft.kv_bytes_per_seq(c, kv_precision), dtype=float)

    def describe(self) -> str:
        s = f"{self.method} [{self.kind}] draft={self.name or getattr(self.draft, 'name', None)}"
        if self.draft_pass_overhead_s is not None:
            s += f", draft_pass_overhead={self.draft_pass_overhead_s * 1e6:.3g} us"
        return s + (f"; assumptions: {'; '.join(self.assumptions)}" if self.assumptions else "")


# ------------------------------------------------------------------ what of a --speculative-config is modelled

#: ``--speculative-config`` fields the cost model uses: the drafter (method, model), N and its
#: dynamic schedule, the draft TP (draft time and memory) and synthetic acceptance (the acceptance
#: input).  ``parallel_drafting`` is modelled for the parallel drafters (dflash, dspark) and for an
#: eagle / eagle3 ``model`` whose spec is a parallel-drafting head (P-EAGLE), and
#: ``rejection_sample_method`` for "standard" / "synthetic".  Every other non-default field is
#: reported by :func:`unmodelled_config_fields`.
MODELLED_CONFIG_FIELDS = ("method", "model", "num_speculative_tokens", "draft_tensor_parallel_size",
                          "num_speculative_tokens_per_batch_size", "synthetic_acceptance_rates",
                          "synthetic_acceptance_length")


def unmodelled_config_fields(cfg: Any) -> tuple[str, ...]:
    """``"not modelled: <field>=<value>"`` for each non-default field of a parsed
    :class:`specsim.vllm.config.SpeculativeConfig` that the cost model ignores (e.g.
    ``attention_backend``, ``moe_backend``, ``quantization``, ``draft_load_config``, the n-gram
    lookup window, ``rejection_sample_method="block"``); vLLM's normalised defaults (e.g. the n-gram
    window 5..5) count as set."""
    canon = "mtp" if cfg.method in VLLM_MTP_TYPES else cfg.method
    out = []
    for k, v in cfg.to_dict().items():
        if k in MODELLED_CONFIG_FIELDS:
            continue
        if k == "parallel_drafting" and _KIND.get(canon) in ("parallel", "parallel_markov"):
            continue
        if k == "parallel_drafting" and v is True and canon in PARALLEL_DRAFTING_METHODS and cfg.model:
            spec = _find_spec(str(cfg.model))  # a parallel-drafting head (P-EAGLE): costed as one pass
            if spec is not None and spec["kind"] == "parallel":
                continue
        if k == "rejection_sample_method" and v in ("standard", "synthetic"):
            continue
        out.append(f"not modelled: {k}={v if isinstance(v, str) else json.dumps(v, sort_keys=True)}")
    return tuple(out)


# ------------------------------------------------------------------ draft specs (specsim/data/drafters)

_SPEC_FIELDS = ("name", "checkpoint", "method", "target", "kind", "architecture", "sources")
_DRAFTER_KNOBS = ("precision", "draft_tp", "draft_pass_overhead_s", "markov_step_overhead_s", "query_tokens",
                  "block_size", "pad_to_block_size", "lookup_s_per_request")


def draft_specs() -> tuple[dict, ...]:
    """The shipped draft specs (parsed ``specsim/data/drafters/*.json``), cached and READ-ONLY:
    callers that modify one use :func:`list_draft_specs` (copies).

    Raises
    ------
    DataError
        A malformed spec file.
    """
    return _parse_specs(str(data_path("drafters")))


@lru_cache(maxsize=4)
def _parse_specs(directory: str) -> tuple[dict, ...]:
    out = []
    for p in sorted(Path(directory).glob("*.json")):
        try:
            d = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise DataError(f"{p}: not valid JSON ({exc})") from exc
        missing = [f for f in _SPEC_FIELDS if f not in d]
        if missing:
            raise DataError(f"{p}: missing fields {missing}")
        if d["method"] not in MODELED_METHODS or d["kind"] not in spec_kinds(d["method"],
                                                                            d.get("parallel_drafting") is True):
            raise DataError(f"{p}: method {d['method']!r} / kind {d['kind']!r} inconsistent (allowed: "
                            f"{spec_kinds(d['method'], d.get('parallel_drafting') is True)}; a parallel-drafting "
                            f"eagle / eagle3 head declares \"parallel_drafting\": true)")
        d["_file"] = p.name
        out.append(d)
    return tuple(out)


def list_draft_specs() -> list[dict]:
    """All shipped draft specs (parsed ``specsim/data/drafters/*.json``; copies)."""
    return [json.loads(json.dumps(d)) for d in draft_specs()]


def default_draft(target_name: str, method: str) -> dict:
    """The draft spec used for a seed target and method (a copy of its JSON, with sources).

    ``method`` may be any vLLM MTP alias (``qwen3_5_mtp`` ...), mapped to ``mtp``; for Gemma 4 the
    ``mtp`` spec is the assistant checkpoint.

    Raises
    ------
    SpecsimValueError
        No seed drafter for this (target, method); the message lists the pairs that exist.
    """
    canon = "mtp" if method in VLLM_MTP_TYPES else method
    specs = list_draft_specs()
    hits = [d for d in specs if _norm(d["target"]) == _norm(target_name) and d["method"] == canon]
    if not hits:
        raise SpecsimValueError("target/method", "no seed draft spec for this pair", (target_name, method),
                                sorted({f"{d['target']}:{d['method']}" for d in specs}))
    hits.sort(key=lambda d: not d.get("default", False))
    return hits[0]


def derive_draft_spec(target: Any, method: str) -> dict:
    """A generic draft spec built from the target's dimensions, for targets without a seed spec.

    ``eagle3``: 1 decoder layer at the target's hidden size / heads, attention input 2h,
    fc 3h->h, own 32000-row draft lm_head (speculators defaults).  ``eagle``: 1 layer, fc 2h->h,
    the target's full-vocab lm_head (EAGLE-1 reuses the target head).  ``dflash``: 5 layers,
    fc 5h->h, target lm_head, block 16.  Dense MLP width: the target's ``intermediate_size``
    (dense targets) or 3h (MoE targets); MLA targets get 128-dim MHA heads.  ``mtp``: the target's
    own native MTP module(s) (``num_nextn_predict_layers`` / ``mtp_num_hidden_layers`` > 0), see
    :func:`_derive_native_mtp_spec`.  Every such choice is recorded as an assumption.

    Raises
    ------
    SpecsimValueError
        ``method`` other than eagle / eagle3 / dflash / mtp, a target without dimensions, or
        ``mtp`` for a target without native MTP layers.
    """
    if method == "mtp":
        return _derive_native_mtp_spec(target)
    if method not in ("eagle", "eagle3", "dflash"):
        raise SpecsimValueError("method", "no generic draft derivation for this method (needs a draft spec)",
                                method, ["eagle", "eagle3", "dflash", "mtp"])
    try:
        h, heads, kv, vocab = (int(target.hidden_size), int(target.num_attention_heads), int(target.num_kv_heads),
                               int(target.vocab_size))
    except AttributeError as exc:
        raise SpecsimValueError("target", "needs a ModelSpec to derive a draft from", type(target).__name__) from exc
    mla = getattr(target, "attention_kind", "gqa") == "mla"
    hd = 128 if mla else int(target.head_dim)
    moe = int(getattr(target, "num_moe_layers", 0)) > 0
    inter = 3 * h if moe else int((getattr(target, "config", {}) or {}).get("intermediate_size") or 3 * h)
    layers = 5 if method == "dflash" else 1
    lm = {"vocab": 32000, "dim": h, "shared_with_target": False} if method == "eagle3" else \
        {"vocab": vocab, "dim": h, "shared_with_target": True}
    fc = {"eagle3": 3, "eagle": 2, "dflash": 5}[method] * h * h
    assum = [f"assumed: no seed {method} spec for {target.name}; draft derived from the target's dimensions "
             f"({layers} layer(s), h {h}, {heads}/{kv if not mla else heads} heads x {hd}, MLP {inter}"
             f"{', MoE target -> 3h' if moe else ''}, fc {fc // (h * h)}h->h, lm_head {lm['vocab']} rows)"]
    spec = {"name": f"{target.name}-{method}-derived", "checkpoint": f"(derived {method} for {target.name})",
            "method": method, "target": target.name, "kind": _KIND[method], "precision": "bf16",
            "architecture": {"num_layers": layers, "hidden_size": h,
                             "attention": [{"count": layers, "num_heads": heads, "kv_heads": heads if mla else kv,
                                            "head_dim": hd}],
                             "attn_input_dim": 2 * h if method == "eagle3" else h, "intermediate_size": inter,
                             "fc_params": fc, "lm_head": lm},
            "sources": {"structure": "see derive_draft_spec docstring"}, "assumptions": assum}
    if method == "dflash":
        spec.update(block_size=16, query_tokens="n+1")
    return spec


def spec_from_draft_checkpoint(checkpoint: str, target: Any, method: str) -> dict:
    """Draft spec of an EAGLE / EAGLE-3 / DFlash checkpoint that is not in the catalog.

    ``checkpoint`` is a path to its ``config.json`` (or to the directory holding it): the spec takes
    the draft's own ``num_hidden_layers``, ``hidden_size``, ``intermediate_size``, attention heads and
    ``draft_vocab_size`` (speculators / vLLM EAGLE-3 configs; ``vocab_size`` otherwise) over the
    dimensions :func:`derive_draft_spec` derives from the target.  Any other string (e.g. a hub id
    that cannot be fetched here) gets the derived spec, named after the checkpoint, and says so in
    its assumptions.

    Raises
    ------
    SpecsimValueError
        As :func:`derive_draft_spec`; a config path that is not valid JSON.
    """
    spec = derive_draft_spec(target, method)
    spec["name"], spec["checkpoint"] = checkpoint, checkpoint
    path = Path(checkpoint)
    looks_like_path = checkpoint.endswith(".json") or checkpoint.startswith((".", "/", "~")) or path.exists()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        if looks_like_path:
            raise SpecsimValueError("speculative_config.model", "no such draft config.json (give the file or the "
                                    "directory holding it, or a checkpoint name)", checkpoint)
        spec["assumptions"] = [f"assumed: draft checkpoint {checkpoint} is not in specsim's catalog and its "
                               f"config is not available here: its structure is DERIVED from the target "
                               f"({spec['assumptions'][0].split('; ', 1)[-1]})"]
        return spec
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecsimValueError("speculative_config.model", f"{path} is not a readable config.json ({exc})",
                                checkpoint) from exc
    if not isinstance(cfg, dict):
        raise SpecsimValueError("speculative_config.model", f"{path} must hold a JSON object (a Hugging Face config)",
                                type(cfg).__name__)
    nested = cfg.get("transformer_layer_config")
    cfg = {**cfg, **(nested if isinstance(nested, dict) else {})}  # speculators nests the decoder's config
    arch = spec["architecture"]
    taken: list[str] = []

    def field(key: str, default: int, *alts: str) -> int:
        for k in (key, *alts):
            v = cfg.get(k)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 1:
                    raise SpecsimValueError(f"{path.name}: {k}", "must be a positive integer", v)
                return int(v)
        taken.append(key)
        return int(default)

    h = field("hidden_size", arch["hidden_size"])
    layers = field("num_hidden_layers", arch["num_layers"])
    heads = field("num_attention_heads", arch["attention"][0]["num_heads"])
    kv = field("num_key_value_heads", arch["attention"][0]["kv_heads"])
    hd = field("head_dim", h // heads)
    inter = field("intermediate_size", arch["intermediate_size"])
    vocab = field("draft_vocab_size", arch["lm_head"]["vocab"], "vocab_size")
    fc_in = {"eagle3": 3, "eagle": 2, "dflash": 5}[method]
    arch.update(num_layers=layers, hidden_size=h, intermediate_size=inter,
                attention=[{"count": layers, "num_heads": heads, "kv_heads": kv, "head_dim": hd}],
                attn_input_dim=2 * h if method == "eagle3" else h, fc_params=fc_in * h * h)
    arch["lm_head"] = {**arch["lm_head"], "vocab": vocab, "dim": h}
    notes = [f"draft structure read from {path} ({layers} layer(s), h {h}, {heads}/{kv} heads x {hd}, "
             f"MLP {inter}, lm_head {vocab} rows); fc {fc_in}h->h assumed for {method}"]
    if taken:
        notes.append(f"assumed: {path.name} lacks {', '.join(taken)}: taken from the structure derived from the target")
    names = " ".join(str(a) for a in (cfg.get("architectures") or []))
    markers = {"eagle3": ("eagle",), "eagle": ("eagle",), "dflash": ("dflash",)}[method]
    if names and not any(m in names.lower() for m in (*markers, "speculator", "draft")):
        notes.append(f"caution: {path.name} declares architectures {names!r}, which does not look like a {method} draft head; "
                     "its layer count and sizes are used as given")
    spec["assumptions"] = notes
    spec["sources"] = {"structure": str(path)}
    return spec


def _derive_native_mtp_spec(target: Any) -> dict:
    """Native MTP module of a target whose config declares one (DeepSeek-V3 style, vLLM
    ``model_executor/models/deepseek_mtp.py``): per native depth one decoder layer at the target's
    dimensions (its attention kind, its MoE block with the same experts / top-k / shared experts, or
    its dense MLP), ``eh_proj`` Linear(2h -> h) over [norm(embedding); norm(hidden)], embedding and
    lm_head shared with the target.  vLLM re-runs the module when N exceeds the native depth."""
    depth = int(getattr(target, "num_mtp_layers", 0) or 0)
    if depth < 1:
        raise SpecsimValueError("method", f"{getattr(target, 'name', 'target')} declares no native MTP layers "
                                "(num_nextn_predict_layers / mtp_num_hidden_layers = 0); vLLM 'mtp' needs them",
                                "mtp", ["eagle", "eagle3", "dflash", "draft_model", "ngram"])
    cfg = getattr(target, "config", {}) or {}
    h, heads, kv = int(target.hidden_size), int(target.num_attention_heads), int(target.num_kv_heads)
    mla = getattr(target, "attention_kind", "gqa") == "mla"
    attn = {"count": 1, "num_heads": heads, "kv_heads": kv, "head_dim": int(target.head_dim)}
    if mla:  # the MTP layer is an MLA layer like the target's: latent cache, absorbed attention
        latent = int(cfg.get("kv_lora_rank", 512)) + int(cfg.get("qk_rope_head_dim", 64))
        attn = {"count": 1, "num_heads": heads, "kv_heads": 1, "head_dim": 128, "latent_dim": latent}
    arch = {"num_layers": 1, "hidden_size": h,
            "attention": [attn],
            "attn_input_dim": h, "fc_params": 2 * h * h,
            "lm_head": {"vocab": int(target.vocab_size), "dim": h, "shared_with_target": True},
            "lm_positions": "last"}
    assum = [f"assumed: no seed mtp spec for {target.name}; its native MTP module derived from the target "
             f"({depth} native layer(s) at the target's dimensions, eh_proj 2h->h, shared embedding / lm_head"
             f"{', MLA: latent KV cache, q/o weights as 128-dim heads' if mla else ''})"]
    if getattr(target, "is_moe", False):
        moe_i = int(cfg.get("moe_intermediate_size") or target.expert_params // (3 * h))
        shared = int(cfg.get("shared_expert_intermediate_size") or 0) or int(target.num_shared_experts) * moe_i
        arch.update(intermediate_size=0, moe_num_experts=int(target.num_experts),
                    moe_experts_per_token=int(target.experts_per_token), moe_intermediate_size=moe_i,
                    shared_expert_intermediate_size=shared)
    else:
        arch["intermediate_size"] = int(cfg.get("intermediate_size") or 4 * h)
    return {"name": f"{target.name}-mtp-derived", "checkpoint": f"{getattr(target, 'hf_id', None) or target.name} "
            "(native MTP layer)", "method": "mtp", "target": target.name, "kind": "sequential",
            "shares_target_weights": True, "shares_target_kv": False, "precision": None, "native_depth": depth,
            "architecture": arch, "sources": {"structure": "see _derive_native_mtp_spec docstring"},
            "assumptions": assum}


def _find_spec(name: str) -> dict | None:
    key = _norm(name)
    for d in list_draft_specs():
        if key in (_norm(d["name"]), _norm(d["checkpoint"])):
            return d
    return None


def drafter_from_spec(spec: Mapping[str, Any], *, method: str | None = None,
                      draft_config: Mapping[str, Any] | None = None) -> Drafter:
    """Build a ``Drafter`` from a draft spec dict (``specsim/data/drafters`` schema), with overrides.

    ``draft_config`` keys: any ``architecture`` field (e.g. ``num_layers``), the drafter knobs
    (precision, draft_tp, draft_pass_overhead_s, markov_step_overhead_s, query_tokens, block_size,
    pad_to_block_size, lookup_s_per_request) or vLLM's ``draft_tensor_parallel_size``.
    """
    spec = json.loads(json.dumps(dict(spec)))
    arch = dict(spec["architecture"])
    knobs: dict[str, Any] = {k: spec[k] for k in _DRAFTER_KNOBS if k in spec}
    assumptions = list(spec.get("assumptions", []))
    for k, v in dict(draft_config or {}).items():
        if k == "draft_tensor_parallel_size":
            k = "draft_tp"
        if k in _DRAFTER_KNOBS:
            knobs[k] = v
        elif k in arch or k in ("attn_input_dim", "intermediate_size", "fc_params", "lm_positions"):
            arch[k] = v
            if k == "num_layers" and "attention" in arch and len(arch["attention"]) == 1:
                arch["attention"][0]["count"] = v
        else:
            raise SpecsimValueError(f"draft_config.{k}", "unknown key", v,
                                    sorted(set(_DRAFTER_KNOBS) | set(arch) | {"draft_tensor_parallel_size"}))
        assumptions.append(f"draft_config override {k}={v!r}")
    kind = spec["kind"]
    if kind in ("parallel", "parallel_markov"):
        q = knobs.get("query_tokens", "n+1")
        arch.setdefault("lm_positions", "all_but_first" if q == "n+1" else "all")
    try:
        net = DraftNet.from_dict(arch, spec["name"])
    except DataError as exc:
        if not draft_config:
            raise
        raise SpecsimValueError("draft_config", f"makes an inconsistent draft architecture ({exc})",
                                dict(draft_config)) from exc
    try:
        return Drafter(method=method or spec["method"], kind=kind, draft=net,
                       shares_target_weights=bool(spec.get("shares_target_weights", False)),
                       shares_target_kv=bool(spec.get("shares_target_kv", False)), name=spec["name"],
                       source=f"{spec.get('_file', 'spec')}: {spec['checkpoint']}", assumptions=tuple(assumptions),
                       markov_rank=int(spec.get("markov_rank", 0)), markov_vocab=int(spec.get("markov_vocab", 0)),
                       target_vocab=int(spec.get("target_vocab", 0)) if spec.get("markov_rank") else 0,
                       native_depth=spec.get("native_depth"), **knobs)
    except TypeError as exc:
        raise SpecsimValueError("draft_config", f"bad value ({exc})", draft_config) from exc


def _drafter_knobs(draft_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``draft_config`` as :class:`Drafter` keyword arguments: vLLM's ``draft_tensor_parallel_size``
    becomes ``draft_tp``; a key that is not one of :data:`_DRAFTER_KNOBS` raises
    ``SpecsimValueError`` naming it (it used to reach ``Drafter`` as a TypeError)."""
    out = {}
    for k, v in dict(draft_config or {}).items():
        key = "draft_tp" if k == "draft_tensor_parallel_size" else k
        if key not in _DRAFTER_KNOBS:
            raise SpecsimValueError(f"draft_config.{k}", "unknown key for this draft", v,
                                    sorted(set(_DRAFTER_KNOBS) | {"draft_tensor_parallel_size"}))
        out[key] = v
    return out


def get_drafter(method: str, *, draft_model: Any = None, target: Any = None,
                draft_config: Mapping[str, Any] | None = None) -> Drafter:
    """Draft-cost strategy for a vLLM speculative ``method``.

    Parameters
    ----------
    method : str
        vLLM ``speculative_config.method`` (any of ``VLLM_METHODS``; ``*_mtp`` aliases map to ``mtp``).
    draft_model : str or ModelSpec or DraftNet or dict, optional
        The draft: a checkpoint / spec name from ``specsim/data/drafters`` (e.g.
        ``"google/gemma-4-31B-it-assistant"``), a spec dict, a ``DraftNet``, or -- for
        ``draft_model`` -- a ``ModelSpec``, a model name or a config.json path
        (``specsim.architecture.load_model_or_config``).
        Default: ``default_draft(target.name, method)``.
    target : ModelSpec or str, optional
        The target; needed to pick the default draft.
    draft_config : dict, optional
        Overrides (see ``drafter_from_spec``).

    Raises
    ------
    SpecsimValueError
        Unknown method (lists vLLM's methods), a vLLM method specsim does not model (lists the
        modeled ones), a missing or mismatched draft.
    """
    if not isinstance(method, str) or method not in VLLM_METHODS:
        raise SpecsimValueError("method", "unknown vLLM speculative method", method, VLLM_METHODS)
    if method not in MODELED_METHODS:
        raise SpecsimValueError("method", "valid vLLM method but specsim has no cost model for it", method,
                                MODELED_METHODS)
    canon = "mtp" if method in VLLM_MTP_TYPES else method
    kind = _KIND[canon]
    if kind == "lookup":
        knobs = {k: v for k, v in dict(draft_config or {}).items()}
        bad = sorted(set(knobs) - {"lookup_s_per_request"})
        if bad:
            raise SpecsimValueError("draft_config", "lookup methods accept only lookup_s_per_request", bad,
                                    ["lookup_s_per_request"])
        return Drafter(method=method, kind="lookup", name=method, source="vLLM v1/spec_decode/ngram_proposer.py "
                       "(numba KMP, CPU); default lookup_s_per_request assumed", **knobs)
    if isinstance(draft_model, DraftNet):
        return Drafter(method=method, kind=kind, draft=draft_model, name=draft_model.name,
                       **_drafter_knobs(draft_config))
    if canon == "draft_model":
        if draft_model is None:
            raise SpecsimValueError("draft_model", "method 'draft_model' needs a draft model (ModelSpec or name)")
        spec = draft_model if hasattr(draft_model, "step_weight_bytes") else load_model_or_config(draft_model, field="draft")
        return Drafter(method=method, kind="sequential", draft=spec, name=getattr(spec, "name", str(draft_model)),
                       source="separate draft checkpoint (own weights and KV cache)", **_drafter_knobs(draft_config))
    if draft_model is None:
        if target is None:
            raise SpecsimValueError("target", f"needed to choose the default {method} draft (or pass draft_model)")
        try:
            spec = default_draft(getattr(target, "name", target), canon)
        except SpecsimValueError:
            if canon not in ("eagle", "eagle3", "dflash", "mtp") or isinstance(target, str):
                raise
            spec = derive_draft_spec(target, canon)
    elif isinstance(draft_model, Mapping):
        spec = draft_model
    else:
        name = draft_model if isinstance(draft_model, str) else getattr(draft_model, "name", None)
        spec = _find_spec(name) if name else None
        if spec is None and name and canon in ("eagle", "eagle3", "dflash") and target is not None \
                and not isinstance(target, str):
            spec = spec_from_draft_checkpoint(str(name), target, canon)
        if spec is None:
            raise SpecsimValueError("draft_model", "no draft spec with this name or checkpoint in specsim/data/drafters",
                                    name, [d["checkpoint"] for d in list_draft_specs()])
    if spec["method"] != canon:
        raise SpecsimValueError("draft_model", f"is a {spec['method']!r} drafter, not usable with method {method!r}",
                                spec.get("name"), [spec["method"]])
    return drafter_from_spec(spec, method=method, draft_config=draft_config)
