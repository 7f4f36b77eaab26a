"""``ModelSpec`` from a Hugging Face ``config.json`` (layer 2, model): parameter and byte counts, FLOPs per
token, dense / MoE, GQA / MLA / sliding-window / linear-attention KV bytes.

Details, derivations and sources: ``docs/modules/specsim.architecture.md``.
"""
from __future__ import annotations

import json
import os
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from specsim.catalog import data_path
from specsim.errors import DataError, SpecsimValueError
from specsim.hardware import PRECISIONS

#: Bytes per stored weight element for each precision string (docs/architecture.md).
BYTES_PER_WEIGHT: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp32": 4.0,
    "mxfp4": 0.5 + 1.0 / 32.0,  # 4-bit element + one 1-byte E8M0 scale per block of 32
    "int4": 0.5 + 2.0 / 32.0,  # w4a16, group size 32, one bf16 scale per group
}
#: Precisions accepted for the KV cache / recurrent state.
KV_PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp32")

_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
_NON_GATED_MLP = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "starcoder2", "gpt_bigcode", "mpt"}
_ENCODER_DECODER = {"t5", "mt5", "umt5", "bart", "mbart", "marian", "pegasus", "whisper", "led", "prophetnet",
                    "bert", "roberta", "deberta", "deberta-v2", "electra", "xlm-roberta", "encoder-decoder"}
_FULL_NAMES = {"full_attention", "attention", "global", "global_attention", "full"}
_SLIDING_NAMES = {"sliding_attention", "sliding", "local", "local_attention", "chunked_attention"}
_LINEAR_NAMES = {"linear_attention", "linear"}


def bytes_per_weight(precision: str) -> float:
    """Bytes per stored weight element for ``precision`` (see :data:`BYTES_PER_WEIGHT`).

    Raises
    ------
    SpecsimValueError
        Unknown precision string.
    """
    if precision not in BYTES_PER_WEIGHT:
        raise SpecsimValueError("precision", "must be a known precision string", precision, PRECISIONS)
    return BYTES_PER_WEIGHT[precision]


def _kv_bytes(precision: str, field_name: str = "kv_precision") -> float:
    if precision not in KV_PRECISIONS:
        raise SpecsimValueError(field_name, "must be a KV-cache precision", precision, KV_PRECISIONS)
    return BYTES_PER_WEIGHT[precision]


def _as_nonneg(x: Any, field_name: str, minimum: float = 0.0) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if not np.all(np.isfinite(arr)):
        raise SpecsimValueError(field_name, "must be finite", x)
    if np.any(arr < minimum):
        raise SpecsimValueError(field_name, f"must be >= {minimum:g}", x)
    return arr


# --------------------------------------------------------------------------------------------
# config parsing helpers
# --------------------------------------------------------------------------------------------
class _Cfg:
    """Typed access to a config dict; every failure names the field."""

    def __init__(self, cfg: Mapping[str, Any]):
        self.cfg = cfg

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int(self, key: str, default: Any = ..., *, minimum: int = 1) -> int:
        v = self.cfg.get(key)
        if v is None:
            if default is ...:
                raise SpecsimValueError(key, "required config field is missing", None)
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            raise SpecsimValueError(key, "must be an integer", v)
        if v < minimum:
            raise SpecsimValueError(key, f"must be >= {minimum}", v)
        return int(v)

    def first_int(self, keys: tuple[str, ...], default: Any = ..., *, minimum: int = 1) -> int:
        for key in keys:
            if self.has(key):
                return self.int(key, minimum=minimum)
        if default is ...:
            raise SpecsimValueError(keys[0], "required config field is missing (also looked for "
                                    + ", ".join(keys[1:]) + ")", None)
        return default

    def bool(self, key: str, default: bool = False) -> bool:
        v = self.cfg.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise SpecsimValueError(key, "must be true or false", v)
        return v


def _model_type(cfg: Mapping[str, Any]) -> str:
    mt = cfg.get("model_type") or ""
    m = re.match(r"[A-Za-z0-9_.\-]+", str(mt).strip())
    return m.group(0).lower() if m else ""


def _flatten(cfg: Mapping[str, Any]) -> dict:
    if not isinstance(cfg, Mapping):
        raise SpecsimValueError("config", "must be a mapping (a parsed config.json)", type(cfg).__name__)
    if cfg.get("is_encoder_decoder") is True:
        raise SpecsimValueError("is_encoder_decoder", "only decoder-only models are supported", True)
    out = dict(cfg)
    tc = cfg.get("text_config")
    if tc is not None:
        if not isinstance(tc, Mapping):
            raise SpecsimValueError("text_config", "must be a mapping", type(tc).__name__)
        if tc.get("is_encoder_decoder") is True:
            raise SpecsimValueError("text_config.is_encoder_decoder", "only decoder-only models are supported", True)
        out.pop("text_config")
        out.update(tc)
        if tc.get("tie_word_embeddings") is None and cfg.get("tie_word_embeddings") is not None:
            out["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    mt = _model_type(out)
    if mt in _ENCODER_DECODER or any(k in out for k in ("encoder_layers", "num_decoder_layers", "decoder_layers")):
        raise SpecsimValueError("model_type", "only decoder-only models are supported (encoder-decoder or "
                                "encoder-only config)", out.get("model_type"))
    return out


def _layer_types(c: _Cfg, n_layers: int, mt: str) -> list[str]:
    """Per-layer kind: 'full', 'sliding' or 'linear'."""
    cfg = c.cfg
    lt = cfg.get("layer_types")
    if lt is not None:
        if not isinstance(lt, (list, tuple)) or len(lt) != n_layers:
            raise SpecsimValueError("layer_types", f"must be a list of num_hidden_layers = {n_layers} entries",
                                    lt if not isinstance(lt, (list, tuple)) else f"{len(lt)} entries")
        kinds = []
        for i, t in enumerate(lt):
            t = str(t).lower()
            if t in _FULL_NAMES:
                kinds.append("full")
            elif t in _SLIDING_NAMES:
                kinds.append("sliding")
            elif t in _LINEAR_NAMES:
                kinds.append("linear")
            else:
                raise SpecsimValueError(f"layer_types[{i}]", "unsupported layer type", t,
                                        sorted(_FULL_NAMES | _SLIDING_NAMES | _LINEAR_NAMES))
        return kinds
    atl = cfg.get("attn_type_list")
    if atl is not None:
        if not isinstance(atl, (list, tuple)) or len(atl) != n_layers or any(a not in (0, 1) for a in atl):
            raise SpecsimValueError("attn_type_list", f"must be a list of {n_layers} entries, each 0 (linear) "
                                    "or 1 (softmax attention)", atl)
        return ["full" if a == 1 else "linear" for a in atl]
    if c.has("full_attention_interval") and c.has("linear_num_value_heads"):
        iv = c.int("full_attention_interval")
        return ["full" if (i + 1) % iv == 0 else "linear" for i in range(n_layers)]
    window = cfg.get("sliding_window")
    if window is not None and cfg.get("use_sliding_window", True) is not False:
        if mt.startswith("gemma2"):
            return ["sliding" if i % 2 == 0 else "full" for i in range(n_layers)]
        if mt.startswith("gemma3"):
            pat = c.int("sliding_window_pattern", 6)
            return ["full" if (i + 1) % pat == 0 else "sliding" for i in range(n_layers)]
        if c.has("max_window_layers") and cfg.get("use_sliding_window") is True:
            mw = c.int("max_window_layers", minimum=0)
            return ["sliding" if i >= mw else "full" for i in range(n_layers)]
        return ["sliding"] * n_layers
    return ["full"] * n_layers


def _moe_flags(c: _Cfg, n_layers: int, n_experts: int) -> list[bool]:
    cfg = c.cfg
    if n_experts <= 1:
        return [False] * n_layers
    freq = cfg.get("moe_layer_freq", 1)
    if isinstance(freq, (list, tuple)):
        if len(freq) != n_layers:
            raise SpecsimValueError("moe_layer_freq", f"as a list must have {n_layers} entries", f"{len(freq)} entries")
        return [bool(x) for x in freq]
    freq = c.int("moe_layer_freq", 1)
    first_dense = c.first_int(("first_k_dense_replace", "first_k_dense_layers", "first_k_dense"), 0, minimum=0)
    step = c.first_int(("decoder_sparse_step", "interleave_moe_layer_step"), 1)
    mlp_only = cfg.get("mlp_only_layers") or []
    return [
        i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in mlp_only
        for i in range(n_layers)
    ]


#: ``quantization_config.quant_method`` values :func:`_weight_dtypes` models (others are refused).
SUPPORTED_QUANT_METHODS: tuple[str, ...] = ("fp8", "mxfp4", "awq (bits 4)", "gptq (bits 4)",
                                            "compressed-tensors (weights float 8-bit or int 4-bit)",
                                            "modelopt (quant_algo FP8*)")


def _quant_refused(method: Any, why: str) -> SpecsimValueError:
    return SpecsimValueError("quantization_config.quant_method", f"{why}; specsim has no bytes per weight for it, and "
                             "the config is read before any precision= applies (to model the checkpoint anyway, give a "
                             "copy of config.json without quantization_config and pass precision=)", method,
                             SUPPORTED_QUANT_METHODS)


def _compressed_tensors_weights(qc: Mapping[str, Any]) -> str:
    """The weight precision of a compressed-tensors checkpoint: every ``config_groups`` entry's
    ``weights`` must agree on float 8-bit (-> "fp8") or int 4-bit (-> "int4", w4a16)."""
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise _quant_refused("compressed-tensors", "config_groups is missing, so the weight bits are unknown")
    kinds = set()
    for name, g in groups.items():
        w = g.get("weights") if isinstance(g, Mapping) else None
        if not isinstance(w, Mapping):
            raise _quant_refused("compressed-tensors", f"config_groups.{name}.weights is missing")
        kinds.add((str(w.get("type", "")).lower(), w.get("num_bits")))
    if kinds == {("float", 8)}:
        return "fp8"
    if kinds == {("int", 4)}:
        return "int4"
    desc = ", ".join(f"{t or '?'} {b}-bit" for t, b in sorted(kinds, key=str))
    raise _quant_refused("compressed-tensors", f"weights {desc} are not modelled (only float 8-bit or int 4-bit, "
                         "one kind for every config group)")


#: how the assumptions :func:`_weight_dtypes` records begin: ``load_model`` drops them where the catalog
#: states a serving precision, ``specsim.predict`` shows them where the config's precision is used
WEIGHT_DTYPE_NOTES = ("weight dtype", "torch_dtype", "dtype ", "quantization_config")
#: how the note of a float32 checkpoint modelled in bf16 (vLLM's --dtype auto) begins
FLOAT32_DOWNCAST_NOTES = ("torch_dtype float32", "dtype float32")


def _weight_dtypes(cfg: Mapping[str, Any], assumptions: list[str]) -> tuple[str, str, str]:
    """(weights, routed experts, embedding/lm_head) precision from torch_dtype + quantization_config.

    Raises
    ------
    SpecsimValueError
        ``torch_dtype`` (or ``dtype``) not one of the torch dtype names listed; a
        ``quantization_config`` that is not an object, or whose ``quant_method`` (with its bits) has
        no modelled precision: field ``quantization_config.quant_method``, the supported ones listed
        (:data:`SUPPORTED_QUANT_METHODS`).
    """
    dt_key = "torch_dtype" if cfg.get("torch_dtype") else "dtype"
    dt_raw = cfg.get(dt_key)
    if dt_raw is None:
        base = "bf16"
        assumptions.append("weight dtype not in config: bf16 assumed")
    else:
        base = _TORCH_DTYPES.get(str(dt_raw).lower().replace("torch.", ""), None)
        if base is None:
            raise SpecsimValueError(dt_key, "unknown weight dtype", dt_raw, sorted(_TORCH_DTYPES))
        if base == "fp32":  # what vLLM serves, not what the checkpoint stores
            base = "bf16"
            assumptions.append(f"{dt_key} float32: vLLM's --dtype auto serves a float32 checkpoint in the "
                               "platform's preferred dtype, bf16 on GPUs (vllm/config/model.py _resolve_auto_dtype), "
                               "so bf16 is modelled; precision='fp32' models --dtype float32")
    qc = cfg.get("quantization_config")
    if qc is None:
        return base, base, base
    if not isinstance(qc, Mapping):
        raise SpecsimValueError("quantization_config", "must be an object with a quant_method", type(qc).__name__)
    raw_method = qc.get("quant_method")
    method = str(raw_method or "").lower().replace("_", "-")
    bits = qc.get("bits") or qc.get("num_bits")
    if method == "fp8":
        assumptions.append("quantization_config fp8: linear layers and experts fp8, embedding/lm_head stay "
                           f"{base} (usual block-FP8 checkpoints)")
        return "fp8", "fp8", base
    if method == "mxfp4":
        assumptions.append("quantization_config mxfp4: routed experts mxfp4, other weights " + base)
        return base, "mxfp4", base
    if method in ("awq", "gptq"):
        if bits == 4:
            return "int4", "int4", base
        raise _quant_refused(raw_method, f"{method} with bits={bits!r} is not modelled (only bits 4)")
    if method.startswith("modelopt"):  # NVIDIA ModelOpt: {"quant_method": "modelopt", "quant_algo": ...} or
        # {"quantization": {"quant_algo": ...}} (vLLM 0.32 model_executor/layers/quantization/modelopt.py
        # ``_extract_modelopt_quant_algo``); FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO ... store fp8 weights
        inner = qc.get("quantization") if isinstance(qc.get("quantization"), Mapping) else qc
        algo = str(inner.get("quant_algo") or "").upper()
        if algo.startswith("FP8"):
            assumptions.append(f"quantization_config modelopt {algo}: linear layers and experts fp8, "
                               f"embedding/lm_head stay {base}")
            return "fp8", "fp8", base
        raise _quant_refused(raw_method, f"modelopt quant_algo {algo or None!r} is not modelled (only FP8*; "
                             "NVFP4's 16-element blocks with fp8 scales have no precision of their own here)")
    if method == "compressed-tensors":
        w = _compressed_tensors_weights(qc)
        assumptions.append(f"quantization_config compressed-tensors: linear layers and experts {w} (config_groups "
                           f"weights), embedding/lm_head stay {base}")
        return w, w, base
    if not method:
        raise SpecsimValueError("quantization_config.quant_method", "is missing, so the weight precision is "
                                "unknown", None, SUPPORTED_QUANT_METHODS)
    raise _quant_refused(raw_method, "quantization method not modelled")


# --------------------------------------------------------------------------------------------
# ModelSpec
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """Size and cost accounting of one decoder-only transformer.

    All parameter counts are integers (number of weight elements).  ``total_params`` =
    ``embedding_params`` + (``lm_head_params`` unless tied) + ``attention_params`` +
    ``dense_mlp_params`` + ``num_moe_layers·num_experts·expert_params`` + ``other_params``.

    Attributes
    ----------
    name : str
    hidden_size, num_layers, vocab_size : int
    num_attention_heads, num_kv_heads, head_dim : int
        Of the (sliding / standard) attention layers; Gemma 4 global layers have their own
        ``global_head_dim`` / ``num_global_kv_heads``.  For MLA ``head_dim`` is
        qk_nope + qk_rope and the KV cache holds the latent (see :meth:`kv_bytes_per_token`).
    tie_word_embeddings : bool
    embedding_params : int
        V·h (input embedding).
    lm_head_params : int
        V·h, the output projection used for every sampled position.  When
        ``tie_word_embeddings`` it is the same tensor as the embedding and counted once in
        ``total_params``.
    attention_params : int
        Attention / linear-attention projections, all layers.
    dense_mlp_params : int
        Dense-layer MLPs + shared experts (+ Gemma 4's parallel dense MLP), all layers.
    num_moe_layers, num_experts, experts_per_token, num_shared_experts : int
    expert_params : int
        ONE routed expert of ONE MoE layer (3·h·moe_intermediate_size).
    other_params : int
        Norms, routers (+ expert-score bias), Qwen shared-expert gates.
    total_params, active_params : int
        Checkpoint total (MTP / vision towers excluded) and parameters touched per token
        (embedding counted once, k routed experts per MoE layer).
    weight_dtype, expert_weight_dtype, lm_head_dtype : str
        Default (serving) precision of non-expert weights, routed experts, embedding + lm_head;
        used when a method gets ``precision=None``.
    layer_types : tuple[str, ...]
        ``"full"``, ``"sliding"`` or ``"linear"`` per layer.
    sliding_window : int or None
        Window of sliding layers, tokens.
    kv_elems_per_token_full, kv_elems_per_token_sliding : int
        KV-cache elements one token adds, summed over full (resp. sliding) layers.
    state_elems_per_seq : int
        Constant recurrent-state elements per sequence (linear-attention layers).
    attn_flops_per_pair_full, attn_flops_per_pair_sliding : int
        Attention FLOPs per (query token, attended token) pair, summed over full / sliding layers.
    linear_attn_flops_per_token : int
        Recurrent-state FLOPs per token of linear-attention layers (all such layers).
    num_mtp_layers : int
        Native multi-token-prediction layers shipped with the checkpoint (not in ``total_params``).
    assumptions : tuple[str, ...]
        Modelling assumptions made while parsing.
    source : str
        Provenance of the config.
    config : dict
        The flattened config this spec was parsed from (not compared).
    published : dict
        Published parameter counts with sources, where known (not compared).
    """

    name: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool
    embedding_params: int
    lm_head_params: int
    attention_params: int
    dense_mlp_params: int
    num_moe_layers: int
    num_experts: int
    experts_per_token: int
    num_shared_experts: int
    expert_params: int
    other_params: int
    total_params: int
    active_params: int
    weight_dtype: str = "bf16"
    expert_weight_dtype: str = "bf16"
    lm_head_dtype: str = "bf16"
    attention_kind: str = "gqa"
    layer_types: tuple = ()
    sliding_window: int | None = None
    kv_elems_per_token_full: int = 0
    kv_elems_per_token_sliding: int = 0
    state_elems_per_seq: int = 0
    state_dtype: str = "bf16"
    attn_flops_per_pair_full: int = 0
    attn_flops_per_pair_sliding: int = 0
    linear_attn_flops_per_token: int = 0
    num_mtp_layers: int = 0
    assumptions: tuple = ()
    source: str = ""
    config: dict = field(default_factory=dict, compare=False, hash=False, repr=False)
    published: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_hf_config(cls, path_or_dict: str | Path | Mapping[str, Any], name: str | None = None, *,
                       kv_k_eq_v_store_once: bool = False) -> "ModelSpec":
        """Build a spec from a Hugging Face ``config.json`` (path, directory or dict).

        Parameters
        ----------
        path_or_dict : str, Path or mapping
            A ``config.json`` path, a model directory containing one, or the parsed dict.  A nested
            ``text_config`` (multimodal wrappers) is merged over the top level.
        name : str, optional
            Defaults to ``_name_or_path``, else the directory name of a ``config.json`` or the stem of
            any other file name, else ``model_type``.
        kv_k_eq_v_store_once : bool
            For layers with ``attention_k_eq_v`` (Gemma 4 global layers): store the shared K=V
            tensor once in the KV cache.  Default False: K and V are both stored, as an engine
            with a uniform [K, V] cache layout (vLLM's attention backends) does.

        Returns
        -------
        ModelSpec

        Raises
        ------
        SpecsimValueError
            Encoder-decoder / encoder-only config, a missing or non-integer required field
            (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``vocab_size``,
            ``intermediate_size`` where dense MLPs exist, expert sizes and top-k for MoE...),
            inconsistent ``layer_types``, an unknown ``torch_dtype`` / ``dtype`` (the allowed torch
            dtype names listed), or a ``quantization_config`` whose ``quant_method`` (with its bits)
            has no modelled precision (field ``quantization_config.quant_method``, the supported
            ones listed: fp8, mxfp4, awq / gptq 4-bit, compressed-tensors float 8-bit or int 4-bit
            weights, modelopt FP8).  The error names the field.
        DataError
            The file cannot be read or is not JSON.
        """
        source = ""
        if isinstance(path_or_dict, (str, Path)):
            p = Path(path_or_dict)
            if p.is_dir():
                p = p / "config.json"
            try:
                cfg = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise DataError(f"cannot read Hugging Face config {p}: {exc}") from exc
            source = str(p)
            if name is None:  # a model directory's config.json: the directory; any other file: its stem
                name = cfg.get("_name_or_path") or (p.resolve().parent.name if p.name == "config.json" else p.stem)
        else:
            cfg = path_or_dict
        flat = _flatten(cfg)
        if name is None:
            name = str(flat.get("_name_or_path") or _model_type(flat) or "model")
        kwargs = _parse(flat, kv_k_eq_v_store_once)
        return cls(name=str(name), source=source, config=dict(flat), **kwargs)

    @classmethod
    def from_dims(cls, *, hidden_size: int, num_hidden_layers: int, num_attention_heads: int,
                  num_key_value_heads: int | None = None, intermediate_size: int, vocab_size: int,
                  head_dim: int | None = None, tie_word_embeddings: bool = False, name: str = "custom",
                  **extra: Any) -> "ModelSpec":
        """A Llama-style spec from a few dimensions (draft heads, what-if studies).

        Parameters are the Hugging Face config field names; ``extra`` adds any other config
        field (e.g. ``torch_dtype``).  Equivalent to :meth:`from_hf_config` on that dict.
        """
        cfg = dict(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                   num_attention_heads=num_attention_heads,
                   num_key_value_heads=num_key_value_heads or num_attention_heads,
                   intermediate_size=intermediate_size, vocab_size=vocab_size,
                   tie_word_embeddings=tie_word_embeddings, model_type="llama", **extra)
        if head_dim is not None:
            cfg["head_dim"] = head_dim
        return cls.from_hf_config(cfg, name=name)

    def scaled(self, name: str | None = None, **overrides: Any) -> "ModelSpec":
        """A copy re-derived from this spec's config with some fields overridden.

        ``spec.scaled(num_hidden_layers=1)`` gives a one-layer model of the same family (e.g.
        the size of an MTP / EAGLE layer).  When ``num_hidden_layers`` changes and
        ``layer_types`` / ``attn_type_list`` / list-valued ``moe_layer_freq`` are not
        overridden, they are truncated or extended by repeating their period.
        Serving precisions are kept.

        Raises
        ------
        SpecsimValueError
            As :meth:`from_hf_config`.
        """
        cfg = dict(self.config)
        cfg.update(overrides)
        n = cfg.get("num_hidden_layers")
        for key in ("layer_types", "attn_type_list", "moe_layer_freq"):
            seq = cfg.get(key)
            if key not in overrides and isinstance(seq, (list, tuple)) and isinstance(n, int) and n != len(seq):
                cfg[key] = [seq[i % len(seq)] for i in range(n)]
        spec = ModelSpec.from_hf_config(cfg, name=name or f"{self.name}-scaled")
        return replace(spec, weight_dtype=self.weight_dtype, expert_weight_dtype=self.expert_weight_dtype,
                       lm_head_dtype=self.lm_head_dtype, source=self.source)

    # ---------------------------------------------------------------- derived counts
    @property
    def max_position_embeddings(self) -> int | None:
        """Longest sequence (ISL + OSL, tokens) the model's config allows: Hugging Face
        ``max_position_embeddings`` (of ``text_config`` for multimodal configs); None if absent.
        vLLM refuses a ``max_model_len`` above it (``vllm/config/model.py``)."""
        for c in (self.config, self.config.get("text_config") or {}):
            v = c.get("max_position_embeddings") if isinstance(c, dict) else None
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return None

    @property
    def is_moe(self) -> bool:
        """True when the model has routed experts."""
        return self.num_moe_layers > 0

    @property
    def routed_expert_params(self) -> int:
        """All routed-expert parameters (num_moe_layers · num_experts · expert_params)."""
        return self.num_moe_layers * self.num_experts * self.expert_params

    @property
    def non_expert_layer_params(self) -> int:
        """Transformer-layer parameters outside routed experts (attention + dense MLP + other)."""
        return self.attention_params + self.dense_mlp_params + self.other_params

    @property
    def active_params_nonembedding(self) -> int:
        """Per-token active parameters of the transformer layers (no embedding, no lm_head):
        the ``2·N·tokens`` matmul FLOPs term of :meth:`step_flops`."""
        return self.non_expert_layer_params + self.num_moe_layers * self.experts_per_token * self.expert_params

    @property
    def active_params_excl_embedding(self) -> int:
        """Active parameters without the input-embedding lookup (lm_head kept).  This is the
        convention of most published "active" counts (e.g. DeepSeek-V3 "37B activated")."""
        return self.active_params_nonembedding + self.lm_head_params

    def expected_distinct_experts(self, tokens: Any) -> np.ndarray:
        """Expected number of distinct routed experts one MoE layer reads for ``tokens`` tokens.

        E·(1 − (1 − k/E)^T): uniform, independent top-k routing (each token selects a uniformly
        random k-subset; it misses a given expert with probability 1 − k/E).  Broadcasts.

        Parameters
        ----------
        tokens : array_like, shape (...)
            Tokens in the forward step (B·q), >= 0.

        Returns
        -------
        ndarray, shape (...)
            0 for dense models.
        """
        t = _as_nonneg(tokens, "tokens")
        if not self.is_moe:
            return np.zeros_like(t)
        E, k = self.num_experts, self.experts_per_token
        return E * -np.expm1(t * math.log1p(-k / E)) if k < E else np.where(t > 0, float(E), 0.0)

    # ---------------------------------------------------------------- bytes
    def _dtypes(self, precision: str | None, expert_precision: str | None) -> tuple[float, float, float]:
        if precision is None:
            w, e, h = self.weight_dtype, self.expert_weight_dtype, self.lm_head_dtype
        else:
            w = e = h = precision
        if expert_precision is not None:
            e = expert_precision
        return bytes_per_weight(w), bytes_per_weight(e), bytes_per_weight(h)

    def weight_bytes(self, precision: str | None = None, *, expert_precision: str | None = None) -> float:
        """Total checkpoint weight bytes.

        Parameters
        ----------
        precision : str, optional
            Uniform precision of all weights; ``None`` uses the serving precisions
            (``weight_dtype``, ``expert_weight_dtype``, ``lm_head_dtype``).
        expert_precision : str, optional
            Override for routed experts only (e.g. MXFP4 experts with bf16 attention).

        Returns
        -------
        float
            Bytes.  Tied embeddings counted once.

        Raises
        ------
        SpecsimValueError
            Unknown precision.
        """
        bw, be, bh = self._dtypes(precision, expert_precision)
        head = self.embedding_params + (0 if self.tie_word_embeddings else self.lm_head_params)
        return float(self.non_expert_layer_params * bw + self.routed_expert_params * be + head * bh)

    def step_weight_bytes(self, tokens: Any, precision: str | None = None, *,
                          expert_precision: str | None = None) -> np.ndarray:
        """Weight bytes read by one forward step over ``tokens`` = B·q tokens.

        non-expert layer weights + lm_head (V·h) + num_moe_layers · E·(1 − (1 − k/E)^T) · expert
        bytes (see :meth:`expected_distinct_experts`).  The embedding lookup reads only T rows
        and is ignored.

        Parameters
        ----------
        tokens : array_like, shape (...)
            Tokens processed in the step, >= 1.
        precision, expert_precision : str, optional
            As :meth:`weight_bytes`.

        Returns
        -------
        ndarray, shape (...)
            Bytes; non-decreasing in ``tokens`` and never above :meth:`weight_bytes`.

        Raises
        ------
        SpecsimValueError
            ``tokens`` < 1 or not finite; unknown precision.
        """
        t = _as_nonneg(tokens, "tokens", minimum=1.0)
        bw, be, bh = self._dtypes(precision, expert_precision)
        fixed = self.non_expert_layer_params * bw + self.lm_head_params * bh
        experts = self.num_moe_layers * self.expected_distinct_experts(t) * self.expert_params * be
        return fixed + experts

    def kv_bytes_per_token(self, kv_precision: str = "bf16", layers: str = "all") -> float:
        """KV-cache bytes one token adds, before any window cap.

        Parameters
        ----------
        kv_precision : {"bf16", "fp16", "fp8", "fp32"}
        layers : {"all", "full", "sliding"}
            Which attention layers to count.  ``"full"`` is the per-token growth at contexts
            beyond the sliding window.

        Returns
        -------
        float
            Bytes per token: Σ_layers 2·n_kv·head_dim·bytes (GQA/MHA) or
            (kv_lora_rank + qk_rope_head_dim)·bytes (MLA latent, as FlashMLA-style kernels
            cache it); linear-attention layers add nothing per token.

        Raises
        ------
        SpecsimValueError
            Unknown precision or ``layers`` value.
        """
        b = _kv_bytes(kv_precision)
        if layers == "all":
            return float((self.kv_elems_per_token_full + self.kv_elems_per_token_sliding) * b)
        if layers == "full":
            return float(self.kv_elems_per_token_full * b)
        if layers == "sliding":
            return float(self.kv_elems_per_token_sliding * b)
        raise SpecsimValueError("layers", "must be one of the layer groups", layers, ["all", "full", "sliding"])

    def state_bytes_per_seq(self, state_precision: str | None = None) -> float:
        """Constant recurrent-state bytes of one sequence (linear-attention layers; 0 otherwise).

        ``state_precision`` defaults to ``state_dtype`` (config ``mamba_ssm_dtype`` if given,
        else bf16 — vLLM's ``mamba_ssm_cache_dtype="auto"`` follows the model dtype).
        """
        return float(self.state_elems_per_seq * _kv_bytes(state_precision or self.state_dtype, "state_precision"))

    def kv_bytes_per_seq(self, context: Any, kv_precision: str = "bf16", *,
                         state_precision: str | None = None) -> np.ndarray:
        """KV-cache bytes held by one sequence of ``context`` tokens.

        full-layer bytes/token · L + sliding-layer bytes/token · min(L, window) + constant
        linear-attention state.  Block-allocation rounding is not modelled.

        Parameters
        ----------
        context : array_like, shape (...)
            Tokens in the sequence, >= 0.
        kv_precision : {"bf16", "fp16", "fp8", "fp32"}
        state_precision : str, optional
            See :meth:`state_bytes_per_seq`.

        Returns
        -------
        ndarray, shape (...)
            Bytes.

        Raises
        ------
        SpecsimValueError
            Negative / non-finite context; unknown precision.
        """
        L = _as_nonneg(context, "context")
        b = _kv_bytes(kv_precision)
        win = np.minimum(L, self.sliding_window) if self.sliding_window else L
        out = self.kv_elems_per_token_full * b * L + self.kv_elems_per_token_sliding * b * win
        return out + self.state_bytes_per_seq(state_precision)

    # ---------------------------------------------------------------- FLOPs
    def step_flops(self, batch: Any, q: Any, context: Any, *, sampled: Any = None) -> np.ndarray:
        """FLOPs of one forward step over ``batch`` sequences × ``q`` query tokens at context L.

        B·[ 2·N_active·q + a_full·P(q, L) + a_slide·P_w(q, L) + c_lin·q + 2·V·h·s ] with
        N_active = :attr:`active_params_nonembedding`, P(q, L) = Σ_{i=1..q}(L + i) attended
        pairs (causal, the query block appended after L cached tokens), P_w the same with each
        term capped at the window, a = 4·n_heads·head_dim per layer (QKᵀ and PV; MLA in its
        absorbed decode form: 2·n_heads·(kv_lora + rope) + 2·n_heads·kv_lora), c_lin the
        linear-attention state update, and s = ``sampled`` positions through the lm_head.

        Parameters
        ----------
        batch : array_like, shape (...)
            Sequences in the step (>= 1).
        q : array_like, shape (...)
            Query tokens per sequence (1 for decode, N+1 for verification, ISL for prefill).
        context : array_like, shape (...)
            Tokens already cached per sequence, >= 0.
        sampled : array_like, optional
            Positions per sequence that go through the lm_head; default ``q`` (every position
            is sampled in verification); use 1 for prefill.

        Returns
        -------
        ndarray, broadcast shape
            FLOPs.

        Raises
        ------
        SpecsimValueError
            batch or q < 1, negative context.
        """
        B = _as_nonneg(batch, "batch", 1.0)
        Q = _as_nonneg(q, "q", 1.0)
        L = _as_nonneg(context, "context")
        S = Q if sampled is None else _as_nonneg(sampled, "sampled")
        pairs_full = Q * L + Q * (Q + 1) / 2.0
        per_seq = 2.0 * self.active_params_nonembedding * Q + self.attn_flops_per_pair_full * pairs_full
        if self.attn_flops_per_pair_sliding:
            W = float(self.sliding_window or np.inf)
            m = np.clip(W - L, 0.0, Q)  # queries whose causal span L+i fits in the window
            pairs_win = m * L + m * (m + 1) / 2.0 + (Q - m) * W
            per_seq = per_seq + self.attn_flops_per_pair_sliding * pairs_win
        per_seq = per_seq + self.linear_attn_flops_per_token * Q + 2.0 * self.lm_head_params * S
        return B * per_seq

    def flops_per_token(self, context: Any) -> np.ndarray:
        """Decode FLOPs per generated token at context L (``step_flops(1, 1, L)``)."""
        return self.step_flops(1, 1, context)

    def summary(self) -> dict:
        """Key numbers as a flat dict (parameters, bf16 bytes, KV bytes/token)."""
        return {
            "name": self.name, "total_params": self.total_params, "active_params": self.active_params,
            "active_params_excl_embedding": self.active_params_excl_embedding,
            "weight_bytes_serving": self.weight_bytes(), "kv_bytes_per_token_bf16": self.kv_bytes_per_token(),
            "num_moe_layers": self.num_moe_layers, "num_experts": self.num_experts,
            "experts_per_token": self.experts_per_token, "attention_kind": self.attention_kind,
            "sliding_window": self.sliding_window,
            "layers": {k: self.layer_types.count(k) for k in ("full", "sliding", "linear")},
        }


def _parse(cfg: dict, k_eq_v_store_once: bool) -> dict:
    c = _Cfg(cfg)
    mt = _model_type(cfg)
    assumptions: list[str] = []
    h = c.int("hidden_size")
    L = c.int("num_hidden_layers")
    nq = c.int("num_attention_heads")
    V = c.int("vocab_size")
    nkv = c.int("num_key_value_heads", nq)
    if nq % nkv:
        raise SpecsimValueError("num_key_value_heads", f"must divide num_attention_heads = {nq}", nkv)
    if c.has("head_dim"):
        hd = c.int("head_dim")
    else:
        if h % nq:
            raise SpecsimValueError("head_dim", "missing and hidden_size is not divisible by num_attention_heads",
                                    None)
        hd = h // nq
    tied = c.bool("tie_word_embeddings", False)
    kinds = _layer_types(c, L, mt)
    window = None
    if "sliding" in kinds:
        window = c.first_int(("sliding_window", "attention_chunk_size"))

    # ---- attention per layer kind
    is_mla = c.has("kv_lora_rank")
    gate = 2 if c.bool("attn_output_gate", False) else 1
    bias = c.bool("attention_bias", False) or mt in ("qwen2", "qwen2_moe")
    qk_norm = c.bool("use_qk_norm", False) or mt.startswith(("qwen3", "gemma3", "gemma4", "olmo2"))

    def std_attn(n_kv: int, d: int, k_eq_v: bool) -> tuple[int, int, int]:
        """(params, kv elements/token, attention FLOPs per pair) of a GQA/MHA layer."""
        p = h * nq * d * gate + h * n_kv * d * (1 if k_eq_v else 2) + nq * d * h
        if bias:
            p += nq * d + n_kv * d * (1 if k_eq_v else 2)
        kv = n_kv * d * (1 if (k_eq_v and k_eq_v_store_once) else 2)
        return p, kv, 4 * nq * d

    attention_params = 0
    other = 0
    kv_full = kv_slide = 0
    fl_full = fl_slide = 0
    state = lin_flops = 0
    if is_mla:
        kv_lora = c.int("kv_lora_rank")
        rope = c.int("qk_rope_head_dim")
        nope = c.int("qk_nope_head_dim")
        v_hd = c.int("v_head_dim")
        q_lora = c.int("q_lora_rank") if c.has("q_lora_rank") else None
        q = h * q_lora + q_lora * nq * (nope + rope) if q_lora else h * nq * (nope + rope)
        p_mla = q + h * (kv_lora + rope) + kv_lora * nq * (nope + v_hd) + nq * v_hd * h
        n_mla_norm = (q_lora or 0) + kv_lora
        hd = nope + rope
    kv_eq = c.bool("attention_k_eq_v", False)
    g_hd = c.int("global_head_dim", hd)
    g_kv = c.int("num_global_key_value_heads", nkv)
    kv_shared = c.int("num_kv_shared_layers", 0, minimum=0)
    for i, kind in enumerate(kinds):
        stores_kv = i < L - kv_shared
        if kind == "linear":
            if c.has("linear_num_value_heads"):  # Gated DeltaNet (Qwen3-Next / Qwen3.5 / 3.6)
                nk_l = c.int("linear_num_key_heads")
                nv_l = c.int("linear_num_value_heads")
                dk = c.int("linear_key_head_dim")
                dv = c.int("linear_value_head_dim")
                kern = c.int("linear_conv_kernel_dim", 4)
                conv_dim = 2 * nk_l * dk + nv_l * dv
                attention_params += (h * (2 * nk_l * dk + 2 * nv_l * dv) + h * 2 * nv_l + conv_dim * kern
                                     + 2 * nv_l + nv_l * dv * h)
                other += dv  # gated RMSNorm
                state += conv_dim * (kern - 1) + nv_l * dk * dv
                lin_flops += 6 * nv_l * dk * dv
            else:  # MiniMax-01 lightning (linear) attention: q,k,v,o + output gate, state hd x hd per head
                attention_params += 4 * h * nq * hd + h * nq * hd
                other += nq * hd
                state += nq * hd * hd
                lin_flops += 4 * nq * hd * hd
                note = ("lightning (linear) attention layers: params q,k,v,o + output gate, "
                        "state n_heads*head_dim^2 (approximation)")
                if note not in assumptions:
                    assumptions.append(note)
            continue
        if is_mla:
            attention_params += p_mla
            other += n_mla_norm
            kv, fl = (kv_lora + rope), 2 * nq * (kv_lora + rope) + 2 * nq * kv_lora
        elif kind == "full" and (c.has("global_head_dim") or c.has("num_global_key_value_heads") or kv_eq):
            p, kv, fl = std_attn(g_kv, g_hd, kv_eq)
            attention_params += p
        else:
            p, kv, fl = std_attn(nkv, hd, False)
            attention_params += p
        if qk_norm:
            other += 2 * (g_hd if (kind == "full" and c.has("global_head_dim")) else hd)
        kv = kv if stores_kv else 0
        if kind == "full":
            kv_full += kv
            fl_full += fl
        else:
            kv_slide += kv
            fl_slide += fl
    if kv_eq and not k_eq_v_store_once:
        assumptions.append("attention_k_eq_v layers store both K and V in the KV cache (uniform [K,V] layout)")
    if kv_shared:
        assumptions.append(f"last {kv_shared} layers reuse earlier layers' KV cache (num_kv_shared_layers)")

    # ---- MLP / MoE
    E = c.first_int(("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts"), 0, minimum=0)
    if cfg.get("enable_moe_block") is False:
        E = 0
    flags = _moe_flags(c, L, E)
    n_moe = sum(flags)
    gated = mt not in _NON_GATED_MLP
    mlp_mult = 3 if gated else 2
    parallel_dense = bool(cfg.get("enable_moe_block")) and n_moe > 0  # Gemma 4: dense MLP + experts summed
    k = expert = shared_count = 0
    dense_mlp = 0
    if n_moe:
        k = c.first_int(("num_experts_per_tok", "top_k_experts", "num_experts_per_token", "moe_topk", "moe_k"))
        if k > E:
            raise SpecsimValueError("num_experts_per_tok", f"must be <= number of experts {E}", k)
        moe_i = c.int("moe_intermediate_size") if c.has("moe_intermediate_size") else c.int("intermediate_size")
        expert = mlp_mult * h * moe_i
        shared = 0
        if c.int("n_shared_experts", 0, minimum=0):
            shared_count = c.int("n_shared_experts", minimum=0)
            shared = mlp_mult * h * moe_i * shared_count
        elif c.int("shared_expert_intermediate_size", 0, minimum=0):
            shared_count = 1
            shared = mlp_mult * h * c.int("shared_expert_intermediate_size") + h  # + sigmoid gate h->1
        elif c.int("shared_intermediate_size", 0, minimum=0):
            shared_count = 1
            shared = mlp_mult * h * c.int("shared_intermediate_size")
        router = h * E + (E if (cfg.get("topk_method") == "noaux_tc" or cfg.get("use_routing_bias")) else 0)
        dense_mlp += n_moe * shared
        other += n_moe * router
        if parallel_dense:
            shared_count = max(shared_count, 1)
    n_dense_layers = L - n_moe + (n_moe if parallel_dense else 0)
    if n_dense_layers:
        dense_mlp += n_dense_layers * mlp_mult * h * c.int("intermediate_size")
    norms_per_layer = 4 if mt.startswith(("gemma2", "gemma3", "gemma4")) else 2
    other += L * norms_per_layer * h + h

    emb = V * h
    head = V * h
    total = emb + (0 if tied else head) + attention_params + dense_mlp + n_moe * E * expert + other
    active = emb + (0 if tied else head) + attention_params + dense_mlp + n_moe * k * expert + other
    if is_mla:
        kind_name = "mla"
    elif nkv == nq:
        kind_name = "mha"
    elif nkv == 1:
        kind_name = "mqa"
    else:
        kind_name = "gqa"
    w_dt, e_dt, h_dt = _weight_dtypes(cfg, assumptions)
    ssm = cfg.get("mamba_ssm_dtype")
    state_dtype = _TORCH_DTYPES.get(str(ssm).lower().replace("torch.", ""), "bf16") if ssm else "bf16"
    n_mtp = c.first_int(("num_nextn_predict_layers", "mtp_num_hidden_layers"), 0, minimum=0)
    if not n_mtp and c.has("num_mtp_modules") and cfg.get("use_mtp", True):
        n_mtp = c.int("num_mtp_modules", minimum=0) * c.int("mtp_transformer_layers", 1)
    return dict(
        hidden_size=h, num_layers=L, vocab_size=V, num_attention_heads=nq,
        num_kv_heads=nkv, head_dim=hd, tie_word_embeddings=tied,
        embedding_params=emb, lm_head_params=head, attention_params=attention_params,
        dense_mlp_params=dense_mlp, num_moe_layers=n_moe, num_experts=E if n_moe else 0,
        experts_per_token=k, num_shared_experts=shared_count, expert_params=expert,
        other_params=other, total_params=total, active_params=active,
        weight_dtype=w_dt, expert_weight_dtype=e_dt, lm_head_dtype=h_dt, attention_kind=kind_name,
        layer_types=tuple(kinds), sliding_window=window,
        kv_elems_per_token_full=kv_full, kv_elems_per_token_sliding=kv_slide,
        state_elems_per_seq=state, state_dtype=state_dtype,
        attn_flops_per_pair_full=fl_full, attn_flops_per_pair_sliding=fl_slide,
        linear_attn_flops_per_token=lin_flops, num_mtp_layers=n_mtp, assumptions=tuple(assumptions),
    )


# --------------------------------------------------------------------------------------------
# catalog
# --------------------------------------------------------------------------------------------
def _model_files() -> dict[str, Path]:
    d = data_path("models")
    if not d.is_dir():
        raise DataError(f"model directory not found: {d}")
    return {p.stem: p for p in sorted(d.glob("*.json"))}


def list_models() -> list[str]:
    """Names of the model files in ``specsim/data/models`` (without ``.json``)."""
    return list(_model_files())


def load_model(name: str) -> ModelSpec:
    """Load ``specsim/data/models/<name>.json`` (HF config + provenance + serving precision).

    Parameters
    ----------
    name : str
        Short name (``"Qwen3-8B"``) or Hugging Face id (``"Qwen/Qwen3-8B"``), case-insensitive.

    Returns
    -------
    ModelSpec
        With ``weight_dtype`` / ``expert_weight_dtype`` / ``lm_head_dtype`` from the file's
        ``serving_precision`` and ``published`` counts attached.

    Raises
    ------
    SpecsimValueError
        Unknown name (lists the available ones), or a config the parser rejects (e.g.
        MiniMax-M3, whose ``hidden_size`` is not public).
    DataError
        Malformed model file.
    """
    files = _model_files()
    key = str(name).strip().split("/")[-1].lower()
    match = {stem.lower(): p for stem, p in files.items()}.get(key)
    if match is None:
        for p in files.values():  # HF id recorded inside the file
            try:
                hf = json.loads(p.read_text()).get("hf_id", "")
            except json.JSONDecodeError:
                continue
            if str(hf).lower() == str(name).strip().lower():
                match = p
                break
    if match is None:
        raise SpecsimValueError("model", "unknown model name", name, list(files))
    try:
        doc = json.loads(match.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read model file {match}: {exc}") from exc
    if not isinstance(doc.get("config"), dict):
        raise DataError(f"{match}: no 'config' object")
    try:
        spec = ModelSpec.from_hf_config(doc["config"], name=match.stem)
    except SpecsimValueError as exc:
        raise SpecsimValueError(
            "model", f"{match.stem}: its recorded config is incomplete ({exc}); only its published facts are "
            f"known (specsim/data/models/{match.name}), so it cannot be modelled", name) from exc
    sp = doc.get("serving_precision") or {}
    if not sp:
        return replace(spec, source=str(doc.get("source", "")), published=dict(doc.get("published") or {}))
    w = sp.get("weights", spec.weight_dtype)
    e = sp.get("routed_experts", w)
    hd = sp.get("embedding_lm_head", w)
    for fld, val in (("serving_precision.weights", w), ("serving_precision.routed_experts", e),
                     ("serving_precision.embedding_lm_head", hd)):
        if val not in BYTES_PER_WEIGHT:
            raise DataError(f"{match}: {fld} = {val!r} is not one of {list(BYTES_PER_WEIGHT)}")
    kept = tuple(a for a in spec.assumptions
                 if not a.startswith(WEIGHT_DTYPE_NOTES))
    note = (f"serving precision weights={w}, routed_experts={e}, embedding_lm_head={hd} "
            f"({sp.get('source', 'no source given')})")
    return replace(spec, weight_dtype=w, expert_weight_dtype=e, lm_head_dtype=hd, assumptions=kept + (note,),
                   source=str(doc.get("source", "")), published=dict(doc.get("published") or {}))


def load_model_or_config(value, *, field: str = "model") -> ModelSpec:
    """A shipped model name (:func:`load_model`), or an existing path to a Hugging Face
    ``config.json`` or to a model directory holding one (:meth:`ModelSpec.from_hf_config`; ``~``
    expanded): how targets and ``draft_model`` drafts are given.

    Raises
    ------
    SpecsimValueError
        ``field`` (as the caller names the input): neither a shipped name nor such a path (lists
        the shipped names); a config the parser rejects keeps its own field.
    """
    if isinstance(value, (str, os.PathLike)):
        p = os.path.expanduser(os.fspath(value))
        if os.path.isfile(p) or os.path.isfile(os.path.join(p, "config.json")):
            return ModelSpec.from_hf_config(p)
    try:
        return load_model(value)
    except SpecsimValueError as e:  # named as the caller spelled it (load_model's own field is "model")
        if e.field != "model":
            raise
        raise SpecsimValueError(field, "neither a shipped model name nor a path to a Hugging Face config.json "
                                "or a model directory holding one", e.value, e.allowed) from e


def model_hf_id(name: str) -> str:
    """Hugging Face id recorded in the catalog file of model ``name`` (``specsim/data/models``), else ``name``."""
    p = _model_files().get(str(name))
    if p is not None:
        try:
            return json.loads(p.read_text()).get("hf_id") or str(name)
        except json.JSONDecodeError:  # pragma: no cover - load_model reports malformed files
            return str(name)
    return str(name)
