"""``--speculative-config`` validated as vLLM 0.32 does it (layer 1, vLLM formats), with vLLM's one list
of speculative methods.

Details, derivations and sources: ``docs/modules/specsim.vllm.config.md``.
"""
from __future__ import annotations

import json
import math
import re
import types
from dataclasses import MISSING, dataclass, fields
from typing import Any, Mapping

from specsim.errors import SpecsimValueError

__all__ = [
    "VLLM_VERSION",
    "SPECULATIVE_METHODS",
    "MTP_METHODS",
    "SpeculativeConfig",
    "parse_speculative_config",
]

#: vLLM version whose SpeculativeConfig this module mirrors.
VLLM_VERSION = "0.32.0"

#: ``MTPModelTypes`` (vllm/config/speculative.py l.38-66, 0.32.0). All but "mtp" are deprecated
#: aliases that vLLM rewrites to "mtp" with a warning (l.1141-1146).
MTP_METHODS = (
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp",
    "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp",
    "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp",
    "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp", "inkling_mtp",
    "glm5_next_mtp",
)
#: ``SpeculativeMethod`` (vllm/config/speculative.py l.67-83, 0.32.0).
SPECULATIVE_METHODS = (
    "ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class",
    "eagle", "eagle3", "extract_hidden_states", *MTP_METHODS, "dflash", "ngram_gpu", "dspark",
)
REJECTION_SAMPLE_METHODS = ("standard", "synthetic", "block")  # l.84
DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")  # l.85
#: ``CacheDType`` (vllm/config/cache.py l.39-58, 0.32.0).
KV_CACHE_DTYPES = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
    "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
    "turboquant_3bit_nc", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head",
    "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
)
#: ``MoEBackend`` (vllm/config/kernel.py l.122-146, 0.32.0).
MOE_BACKENDS = (
    "auto", "triton", "batched_triton", "deep_gemm", "deep_gemm_mega_moe", "cutlass",
    "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_moe_ep_cutedsl",
    "flashinfer_b12x", "b12x", "flashinfer_moe_ep_mega_deep_gemm", "marlin", "humming",
    "triton_unfused", "aiter", "aiter_mega_moe", "aiter_triton_mxfp4_bf16", "flydsl", "hpc",
    "emulation", "rdna3",
)
#: ``AttentionBackendEnum`` member names (vllm/v1/attention/backends/registry.py, 0.32.0); a
#: string is upper-cased and looked up, "auto" means None (speculative.py l.1802-1809).
ATTENTION_BACKENDS = (
    "FLASH_ATTN", "FLASH_ATTN_DIFFKV", "TRITON_ATTN", "TRITON_ATTN_DIFFKV", "TRITON_FLASH_ATTN",
    "ROCM_ATTN", "ROCM_SEGMENTED_ATTN", "ROCM_AITER_MLA", "ROCM_AITER_TRITON_MLA", "ROCM_AITER_FA",
    "ROCM_AITER_MLA_SPARSE", "XPU_MLA_SPARSE", "TORCH_SDPA", "FLASHINFER", "TRITON_FLASHINFER",
    "FLASHINFER_MLA", "TOKENSPEED_MLA", "FLASHINFER_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120",
    "FLASHINFER_MLA_SPARSE_SM90", "TRITON_MLA", "CUTLASS_MLA", "FLASHMLA", "FLASHMLA_SPARSE",
    "FLASHMLA_SPARSE_DSV4", "FLASHINFER_MLA_SPARSE_DSV4", "ROCM_FLASHMLA_SPARSE_DSV4",
    "FLASHMLA_SPARSE_DSV41", "FLASHINFER_MLA_SPARSE_DSV41", "FLASHMLA_MEGA_ATTN_DSV41", "B12X",
    "FLASH_ATTN_MLA", "FLASH_ATTN_MLA_SPARSE", "MINIMAX_M3_SPARSE", "CUTLASS_MSA", "TRITON_MSA",
    "NO_ATTENTION", "FLEX_ATTENTION", "HPC_ATTN", "ROCM_AITER_UNIFIED_ATTN", "CPU_ATTN", "CPU_MLA",
    "AMX_MLA", "TURBOQUANT", "ULTRAQUANT", "CUSTOM",
)
#: ``LoadConfig`` fields (vllm/config/load.py l.30-108, 0.32.0); values are not checked here.
LOAD_CONFIG_KEYS = (
    "load_format", "download_dir", "safetensors_load_strategy", "safetensors_prefetch_num_threads",
    "safetensors_prefetch_block_size", "model_loader_extra_config", "device", "ignore_patterns",
    "use_tqdm_on_load", "pt_load_map_location",
)
#: Fields the engine fills in (SkipValidation in vLLM); not accepted in --speculative-config.
INTERNAL_FIELDS = ("target_model_config", "target_parallel_config", "draft_model_config",
                   "draft_parallel_config")
#: Methods that need ``model`` (vLLM raises "num_speculative_tokens was provided but without
#: speculative model", l.1187-1190; custom_class l.1179-1186). mtp/dspark default to the target.
_NEEDS_MODEL = ("eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "dflash", "custom_class")


def _is_custom_proposer_path(model: str | None) -> bool:
    """A dotted import path such as ``pkg.MyProposer`` (rule of speculative.py l.1110-1119)."""
    if model is None or model.startswith(("http://", "https://", "file://")) or "/" in model:
        return False
    parts = model.split(".")
    return len(parts) >= 2 and all(p.isidentifier() for p in parts)


@dataclass(frozen=True)
class SpeculativeConfig:
    """A validated ``--speculative-config`` (vLLM 0.32.0 field names and defaults).

    Build it with :func:`parse_speculative_config`; ``to_json()`` gives a string for
    ``vllm serve --speculative-config`` that parses back to an equal object.

    Notable fields
    --------------
    method : str
        One of :data:`SPECULATIVE_METHODS` (deprecated ``*_mtp`` aliases normalised to "mtp").
    num_speculative_tokens : int
        N >= 1, draft tokens per step (maximum, for ngram/suffix which may propose fewer).
    num_speculative_tokens_per_batch_size : tuple of (int, int, int) or None
        Dynamic speculation: ``(range_start, range_end, k)`` with inclusive batch-size ranges,
        sorted, non-overlapping, first range starting at 1, k >= 0; at run time K =
        min(N, k) (see :meth:`n_for_batch_size`).
    """

    method: str
    num_speculative_tokens: int
    model: str | None = None
    enforce_eager: bool | None = None
    draft_tensor_parallel_size: int | None = None
    quantization: str | None = None
    moe_backend: str | None = None
    attention_backend: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    revision: str | None = None
    code_revision: str | None = None
    index_share_for_mtp_iteration: bool | None = None
    disable_padded_drafter_batch: bool = False
    disable_eagle_block_drop: bool = False
    use_local_argmax_reduction: bool = False
    use_heterogeneous_vocab: bool = False
    prompt_lookup_max: int | None = None
    prompt_lookup_min: int | None = None
    parallel_drafting: bool = False
    num_speculative_tokens_per_batch_size: tuple | None = None
    suffix_decoding_max_tree_depth: int = 24
    suffix_decoding_max_cached_requests: int = 10000
    suffix_decoding_max_spec_factor: float = 1.0
    suffix_decoding_min_token_prob: float = 0.1
    draft_load_config: Mapping | None = None
    rejection_sample_method: str = "standard"
    synthetic_acceptance_rates: tuple | None = None
    synthetic_acceptance_length: float | None = None
    enable_adaptive_verification: bool = False
    draft_sample_method: str = "greedy"
    dspark_draft_topk: int | None = None

    def __hash__(self) -> int:  # draft_load_config is a read-only mapping
        return hash(self.to_json())

    @property
    def is_dynamic(self) -> bool:
        """True when a batch-size schedule (dynamic speculation) is set."""
        return self.num_speculative_tokens_per_batch_size is not None

    def n_for_batch_size(self, batch_size: int) -> int:
        """Draft tokens per step that vLLM uses at a batch size (requests in the step).

        Without a schedule, N. With one: the k of the range containing ``batch_size``; gaps and
        the tail carry the previous range's k forward; clamped to N
        (``vllm/v1/spec_decode/dynamic/utils.py`` ``build_dynamic_sd_schedule_lookup``).
        Note: vLLM drops the schedule when data_parallel_size > 1 (``config/vllm.py`` l.1058-1075).

        Raises
        ------
        SpecsimValueError
            If ``batch_size`` < 1.
        """
        k = self.schedule_k(batch_size)
        return self.num_speculative_tokens if k is None else min(self.num_speculative_tokens, k)

    def schedule_k(self, batch_size: int) -> int | None:
        """The schedule's own k at a batch size, before vLLM clamps it to N (:meth:`n_for_batch_size`): the k of
        the range containing ``batch_size``, gaps and the tail carrying the previous range's k forward; None
        without a schedule.

        Raises
        ------
        SpecsimValueError
            If ``batch_size`` < 1.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise SpecsimValueError("batch_size", "must be an int >= 1", batch_size)
        sched = self.num_speculative_tokens_per_batch_size
        if sched is None:
            return None
        k = sched[0][2]
        for start, _end, kk in sched:
            if start > batch_size:
                break
            k = kk
        return k

    @property
    def builds_draft_model(self) -> bool:
        """True for the methods for which vLLM 0.32 builds a draft ``ModelConfig`` (and so checks
        ``draft_tensor_parallel_size``): all but ngram, ngram_gpu, suffix, custom_class and
        extract_hidden_states (``vllm/config/speculative.py`` l.1192-1270; mtp/dspark use the target
        checkpoint, l.1148-1170)."""
        return self.method not in ("ngram", "ngram_gpu", "suffix", "custom_class", "extract_hidden_states")

    def draft_tp_for(self, tp: int) -> int | None:
        """Draft tensor-parallel degree vLLM 0.32 uses beside a target at ``tp``.

        ``SpeculativeConfig._verify_and_get_draft_tp`` (``vllm/config/speculative.py`` l.1712-1743):
        unset -> the target's tp (1 for an mlp_speculator, which cannot run at tp > 1); set -> it
        must be 1 or the target's tp.  Methods without a draft model ignore the field (None).

        Raises
        ------
        SpecsimValueError
            Field ``draft_tensor_parallel_size`` when it is neither 1 nor ``tp``; field ``tp``
            when ``tp`` is not an int >= 1.
        """
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise SpecsimValueError("tp", "must be an integer >= 1", tp)
        if not self.builds_draft_model:
            return None
        d = self.draft_tensor_parallel_size
        if d is None:
            return 1 if self.method == "mlp_speculator" else tp
        if d not in (1, tp):
            raise SpecsimValueError("draft_tensor_parallel_size",
                                    f"must be 1 or the target's tensor_parallel_size {tp} (vLLM "
                                    "_verify_and_get_draft_tp, vllm/config/speculative.py l.1735-1742)",
                                    d, allowed=sorted({1, tp}))
        return d

    def check_target(self, tp: int, target_max_model_len: int | None = None) -> int | None:
        """The rules vLLM 0.32 checks against the target: the draft TP (:meth:`draft_tp_for`) and
        ``max_model_len`` not larger than the target's (``_maybe_override_draft_max_model_len``,
        ``vllm/config/speculative.py`` l.1633-1675; the target's ``max_model_len`` defaults to its
        ``max_position_embeddings``).  Returns the draft TP (None without a draft model).

        Raises
        ------
        SpecsimValueError
            Field ``draft_tensor_parallel_size`` or ``speculative_config.max_model_len``.
        """
        dtp = self.draft_tp_for(tp)
        if (self.builds_draft_model and target_max_model_len and self.max_model_len is not None
                and self.max_model_len > target_max_model_len):
            raise SpecsimValueError("speculative_config.max_model_len", "cannot be larger than the target's "
                                    f"max_model_len {target_max_model_len} (vLLM _maybe_override_draft_max_model_len)",
                                    self.max_model_len)
        return dtp

    def to_dict(self) -> dict:
        """Non-default fields plus ``method`` and ``num_speculative_tokens``, JSON-ready."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            default = f.default if f.default is not MISSING else MISSING
            if f.name not in ("method", "num_speculative_tokens") and v == default:
                continue
            if f.name == "num_speculative_tokens_per_batch_size" and v is not None:
                v = [list(e) for e in v]
            elif f.name == "synthetic_acceptance_rates" and v is not None:
                v = list(v)
            elif f.name == "draft_load_config" and v is not None:
                v = json.loads(json.dumps(dict(v)))
            out[f.name] = v
        return out

    def to_json(self) -> str:
        """JSON for ``vllm serve --speculative-config``; ``parse_speculative_config`` of it
        returns an equal object."""
        return json.dumps(self.to_dict(), sort_keys=True)


_DEFAULTS = {f.name: f.default for f in fields(SpeculativeConfig) if f.default is not MISSING}
_KNOWN = tuple(f.name for f in fields(SpeculativeConfig))


def _lax_int(v: Any) -> int | None:
    """The integer pydantic's lax mode (vLLM 0.32's ``SpeculativeConfig``) makes of a non-integer ``v``, or None
    where it refuses it: ``True`` / ``False`` (1 / 0), a float with no fraction (``2.0``), a string of an
    optionally signed decimal integer in ASCII digits, single ``_`` between digits allowed, optionally
    followed by ``.`` and zeros, with surrounding blanks (Unicode White_Space: :data:`_LAX_BLANK`; ``" 2"``, ``"+2"``, ``"1_0"``, ``"2.00"``);
    checked against the installed vLLM on 2026-12-06 (``"2.5"``, ``2.5``, ``"0x2"``, ``"2."``, ``"1e1"`` and
    non-ASCII digits such as ``"\u0663"`` refused there)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    if isinstance(v, str) and (m := _LAX_INT_TEXT.fullmatch(v)):
        return int(m.group(1))
    return None


#: the blanks pydantic-core strips around an integer's text (Rust's ``str::trim``: Unicode White_Space;
#: Python's ``\s`` also takes U+001C-U+001F, which pydantic refuses, and ``re.ASCII``'s misses U+00A0 and others)
_LAX_BLANK = r"[\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*"
#: a string pydantic's lax mode reads as an integer (``int`` field; pydantic-core's str -> int)
_LAX_INT_TEXT = re.compile(_LAX_BLANK + r"([+-]?[0-9]+(?:_[0-9]+)*)(?:\.0+)?" + _LAX_BLANK)


def _int(cfg: dict, key: str, *, minimum: int | None = None, optional: bool = True) -> int | None:
    v = cfg.get(key, _DEFAULTS.get(key))
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        rule = "must be an integer" + (f" >= {minimum}" if minimum is not None else "")
        lax = _lax_int(v)
        if lax is not None:  # what vLLM would run: said, not guessed at
            rule += (f" written as a JSON number: vLLM 0.32's pydantic config reads {v!r} as {lax} (lax mode), "
                     f"specsim asks for the number itself so that the run is labelled and judged by it; give {lax}")
        raise SpecsimValueError(key, rule, v)
    if minimum is not None and v < minimum:
        raise SpecsimValueError(key, f"must be >= {minimum}", v)
    return v


def _bool(cfg: dict, key: str, *, optional: bool = False) -> bool | None:
    v = cfg.get(key, _DEFAULTS.get(key))
    if v is None and optional:
        return None
    if not isinstance(v, bool):
        raise SpecsimValueError(key, "must be true or false", v, allowed=(True, False))
    return v


def _float(cfg: dict, key: str, lo: float, hi: float | None = None) -> float | None:
    v = cfg.get(key, _DEFAULTS.get(key))
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecsimValueError(key, "must be a finite number", v)
    if v < lo or (hi is not None and v > hi):
        raise SpecsimValueError(key, f"must lie in [{lo}, {hi}]" if hi is not None else f"must be >= {lo}", v)
    return float(v)


def _str(cfg: dict, key: str) -> str | None:
    v = cfg.get(key, _DEFAULTS.get(key))
    if v is not None and (not isinstance(v, str) or not v):
        raise SpecsimValueError(key, "must be a non-empty string", v)
    return v


def _choice(cfg: dict, key: str, allowed: tuple) -> str | None:
    v = cfg.get(key, _DEFAULTS.get(key))
    if v is not None and v not in allowed:
        raise SpecsimValueError(key, "unknown value", v, allowed=allowed)
    return v


def _schedule(value: Any) -> tuple | None:
    """Rules of vllm/v1/spec_decode/dynamic/utils.py validate_and_normalize_dynamic_sd_schedule."""
    key = "num_speculative_tokens_per_batch_size"
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise SpecsimValueError(key, "must be a non-empty list of [range_start, range_end, "
                                     "num_speculative_tokens] entries", value)
    entries = []
    for i, e in enumerate(value):
        if not isinstance(e, (list, tuple)) or len(e) != 3:
            raise SpecsimValueError(f"{key}[{i}]", "must be a 3-item list [range_start, range_end, "
                                                   "num_speculative_tokens]", e)
        if any(isinstance(x, bool) or not isinstance(x, int) for x in e):
            raise SpecsimValueError(f"{key}[{i}]", "entries must be integers", e)
        start, end, k = e
        if start <= 0 or end <= 0:
            raise SpecsimValueError(f"{key}[{i}]", "batch-size range must be positive", e)
        if start > end:
            raise SpecsimValueError(f"{key}[{i}]", "range_start must be <= range_end", e)
        if k < 0:
            raise SpecsimValueError(f"{key}[{i}]", "num_speculative_tokens must be >= 0", e)
        entries.append((start, end, k))
    entries.sort(key=lambda t: t[0])
    prev_end = 0
    for e in entries:
        if e[0] <= prev_end:
            raise SpecsimValueError(key, "batch-size ranges must not overlap", value)
        prev_end = e[1]
    if entries[0][0] != 1:
        raise SpecsimValueError(key, "the first batch-size range must start at 1", value)
    return tuple(entries)


def _synthetic_rates(cfg: dict, n: int) -> tuple | None:
    """speculative.py l.1832-1848 and _resolve_synthetic_acceptance_rates (l.561-596)."""
    rates, length = cfg.get("synthetic_acceptance_rates"), cfg.get("synthetic_acceptance_length")
    if cfg.get("rejection_sample_method", "standard") != "synthetic":
        if rates is not None or length is not None:
            key = "synthetic_acceptance_rates" if rates is not None else "synthetic_acceptance_length"
            raise SpecsimValueError(key, "only valid with rejection_sample_method='synthetic'",
                                    rates if rates is not None else length)
        return None
    if (rates is None) == (length is None):
        raise SpecsimValueError("synthetic_acceptance_rates",
                                "rejection_sample_method='synthetic' needs exactly one of "
                                "synthetic_acceptance_rates or synthetic_acceptance_length")
    if rates is not None:
        if not isinstance(rates, (list, tuple)) or len(rates) != n:
            raise SpecsimValueError("synthetic_acceptance_rates",
                                    f"must be a list of length num_speculative_tokens = {n}", rates)
        for i, r in enumerate(rates):
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r <= 1.0:
                raise SpecsimValueError(f"synthetic_acceptance_rates[{i}]", "must lie in [0, 1]", r)
        if any(rates[i] > rates[i - 1] for i in range(1, n)):
            raise SpecsimValueError("synthetic_acceptance_rates",
                                    "must be non-increasing (unconditional per-position rates)", rates)
        return tuple(float(r) for r in rates)
    if isinstance(length, bool) or not isinstance(length, (int, float)) or not 1.0 <= length <= n + 1:
        raise SpecsimValueError("synthetic_acceptance_length", f"must lie in [1, {n + 1}]", length)
    # vLLM's minimum-variance schedule: floor(L-1) positions at 1, the fraction next, then 0
    accepted = float(length) - 1.0
    full = int(accepted)
    return tuple(([1.0] * full + [accepted - full] + [0.0] * (n - full - 1))[:n])


def parse_speculative_config(config: str | Mapping[str, Any]) -> SpeculativeConfig:
    """Validate a speculative config exactly as passed to ``vllm serve --speculative-config``.

    Parameters
    ----------
    config : str or mapping
        The JSON string, or the dict (``LLM(speculative_config=...)``). ``-`` in keys is read as
        ``_`` (vllm/engine/arg_utils.py l.2086).

    Returns
    -------
    SpeculativeConfig
        Frozen; vLLM's own normalisations applied (method inferred from ``model`` when absent:
        dotted import path -> custom_class, "ngram"/"[ngram]" -> ngram, else draft_model;
        ``*_mtp`` aliases -> "mtp"; ngram lookup window defaults min = max = 5 or one from the
        other; suffix N defaults to ``suffix_decoding_max_tree_depth``; dflash/dspark force
        ``parallel_drafting``; ``synthetic_acceptance_length`` resolved to rates).

    Raises
    ------
    SpecsimValueError
        Naming the field and the rule (and the allowed values for a choice): not a JSON object,
        unknown key, engine-internal key, ``tensor_parallel_size`` (vLLM asks for
        ``draft_tensor_parallel_size``), unknown method/backend/dtype, ``num_speculative_tokens``
        missing or < 1, method needing ``model`` without one, wrong types, out-of-range values,
        cross-field rules of vLLM 0.32.0 listed in the module docstring's sources.
    """
    if isinstance(config, str):
        try:
            cfg = json.loads(config)
        except json.JSONDecodeError as exc:
            raise SpecsimValueError("speculative_config", f"not valid JSON ({exc})", config) from None
    else:
        cfg = config
    if not isinstance(cfg, Mapping):
        raise SpecsimValueError("speculative_config", "must be a JSON object", cfg)
    cfg = {str(k).replace("-", "_"): v for k, v in cfg.items()}

    for key in cfg:
        if key in INTERNAL_FIELDS:
            raise SpecsimValueError(key, "is set by the engine, not by --speculative-config")
        if key == "tensor_parallel_size":
            raise SpecsimValueError(key, "is not a valid speculative_config key; pass "
                                         "draft_tensor_parallel_size instead", cfg[key])
        if key not in _KNOWN:
            raise SpecsimValueError(key, f"unknown speculative_config key (vLLM {VLLM_VERSION})",
                                    allowed=_KNOWN)

    model = _str(cfg, "model")
    method = cfg.get("method")
    if method is None:
        if _is_custom_proposer_path(model):
            method = "custom_class"
        elif model in ("ngram", "[ngram]"):
            method = "ngram"
        else:
            method = "draft_model"
    elif method not in SPECULATIVE_METHODS:
        raise SpecsimValueError("method", "unknown speculative method", method, allowed=SPECULATIVE_METHODS)
    if method in MTP_METHODS:
        method = "mtp"
    if model is None and method in _NEEDS_MODEL:
        raise SpecsimValueError("model", f"method {method!r} needs a draft/head model")

    out: dict[str, Any] = {"method": method, "model": model}
    # num_speculative_tokens (Field(gt=0), _verify_args l.1817-1830; suffix default l.1601-1608)
    n = cfg.get("num_speculative_tokens")
    if n is None and method == "suffix":
        n = _int(cfg, "suffix_decoding_max_tree_depth", minimum=1, optional=False)
    if n is None:
        raise SpecsimValueError("num_speculative_tokens", "is required (vLLM can also take it from "
                                "a draft checkpoint's n_predict, which specsim cannot see)")
    out["num_speculative_tokens"] = _int({"num_speculative_tokens": n}, "num_speculative_tokens",
                                         minimum=1, optional=False)
    n = out["num_speculative_tokens"]

    out["enforce_eager"] = _bool(cfg, "enforce_eager", optional=True)
    out["index_share_for_mtp_iteration"] = _bool(cfg, "index_share_for_mtp_iteration", optional=True)
    for key in ("disable_padded_drafter_batch", "disable_eagle_block_drop", "use_local_argmax_reduction",
                "use_heterogeneous_vocab", "parallel_drafting", "enable_adaptive_verification"):
        out[key] = _bool(cfg, key)
    for key in ("draft_tensor_parallel_size", "max_model_len", "prompt_lookup_max",
                "prompt_lookup_min", "dspark_draft_topk"):
        out[key] = _int(cfg, key, minimum=1)
    for key in ("quantization", "revision", "code_revision"):
        out[key] = _str(cfg, key)
    out["moe_backend"] = _choice(cfg, "moe_backend", MOE_BACKENDS)
    out["kv_cache_dtype"] = _choice(cfg, "kv_cache_dtype", KV_CACHE_DTYPES)
    ab = cfg.get("attention_backend")
    if ab is not None:
        if not isinstance(ab, str) or (ab.lower() != "auto" and ab.upper() not in ATTENTION_BACKENDS):
            raise SpecsimValueError("attention_backend", "unknown attention backend", ab,
                                    allowed=("auto", *ATTENTION_BACKENDS))
        ab = None if ab.lower() == "auto" else ab.upper()
    out["attention_backend"] = ab
    out["rejection_sample_method"] = _choice(cfg, "rejection_sample_method", REJECTION_SAMPLE_METHODS)
    out["draft_sample_method"] = _choice(cfg, "draft_sample_method", DRAFT_SAMPLE_METHODS)
    out["suffix_decoding_max_tree_depth"] = _int(cfg, "suffix_decoding_max_tree_depth", minimum=1, optional=False)
    out["suffix_decoding_max_cached_requests"] = _int(cfg, "suffix_decoding_max_cached_requests",
                                                      minimum=0, optional=False)
    out["suffix_decoding_max_spec_factor"] = _float(cfg, "suffix_decoding_max_spec_factor", 0.0)
    out["suffix_decoding_min_token_prob"] = _float(cfg, "suffix_decoding_min_token_prob", 0.0, 1.0)
    out["num_speculative_tokens_per_batch_size"] = _schedule(cfg.get("num_speculative_tokens_per_batch_size"))
    out["synthetic_acceptance_rates"] = _synthetic_rates(cfg, n)
    out["synthetic_acceptance_length"] = None

    dlc = cfg.get("draft_load_config")
    if dlc is not None:
        if not isinstance(dlc, Mapping):
            raise SpecsimValueError("draft_load_config", "must be an object of LoadConfig fields", dlc)
        for k in dlc:
            if k not in LOAD_CONFIG_KEYS:
                raise SpecsimValueError(f"draft_load_config.{k}", "unknown LoadConfig key",
                                        allowed=LOAD_CONFIG_KEYS)
        dlc = types.MappingProxyType(json.loads(json.dumps(dict(dlc))))
    out["draft_load_config"] = dlc

    # ngram lookup window (l.1195-1222)
    if method in ("ngram", "ngram_gpu"):
        lo, hi = out["prompt_lookup_min"], out["prompt_lookup_max"]
        if lo is None and hi is None:
            lo = hi = 5
        elif lo is None:
            lo = hi
        elif hi is None:
            hi = lo
        if lo > hi:
            raise SpecsimValueError("prompt_lookup_min", f"must be <= prompt_lookup_max = {hi}", lo)
        out["prompt_lookup_min"], out["prompt_lookup_max"] = lo, hi
    if method in ("dflash", "dspark"):  # l.1468-1469
        out["parallel_drafting"] = True
    # cross-field rules
    if out["index_share_for_mtp_iteration"] is not None and method != "mtp":  # l.1574-1578
        raise SpecsimValueError("index_share_for_mtp_iteration", "only supported with method='mtp'",
                                out["index_share_for_mtp_iteration"])
    if method != "dspark" and out["enable_adaptive_verification"] and out["use_local_argmax_reduction"]:
        raise SpecsimValueError("enable_adaptive_verification",  # l.1583-1592
                                "cannot be combined with use_local_argmax_reduction", True)
    if out["use_heterogeneous_vocab"] and method != "draft_model":  # l.1862-1866
        raise SpecsimValueError("use_heterogeneous_vocab", "only works with method='draft_model'",
                                method, allowed=("draft_model",))
    if out["use_heterogeneous_vocab"] and out["draft_sample_method"] != "greedy":  # l.1868-1873
        raise SpecsimValueError("draft_sample_method", "must be 'greedy' with use_heterogeneous_vocab",
                                out["draft_sample_method"], allowed=("greedy",))
    if (out["dspark_draft_topk"] is not None and method != "dspark"  # l.1509-1510, draft-model branch only
            and method not in ("ngram", "ngram_gpu", "suffix", "custom_class", "extract_hidden_states")):
        raise SpecsimValueError("dspark_draft_topk", "only supported by method='dspark'",
                                out["dspark_draft_topk"])
    return SpeculativeConfig(**out)
