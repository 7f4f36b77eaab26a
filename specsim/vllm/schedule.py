"""Dynamic speculation schedules, vLLM 0.32's ``num_speculative_tokens_per_batch_size`` (layer 1, vLLM
formats): validation and expansion to N per batch size.

Details, derivations and sources: ``docs/modules/specsim.vllm.schedule.md``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from specsim.errors import SpecsimValueError
from specsim.vllm.config import VLLM_VERSION, parse_speculative_config

__all__ = [
    "SCHEDULE_FIELD",
    "VLLM_VERSION",
    "validate_schedule",
    "expand_schedule",
    "speculative_config",
]

#: The dynamic-speculation field of vLLM's SpeculativeConfig (vllm/config/speculative.py:491).
SCHEDULE_FIELD = "num_speculative_tokens_per_batch_size"


def _int_like(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def validate_schedule(schedule: Any, num_speculative_tokens: int) -> list[tuple[int, int, int]]:
    """Validate a dynamic-speculation schedule as vLLM 0.32.0 reads it, plus two stricter rules.

    Parameters
    ----------
    schedule : list of (int, int, int)
        ``[(range_start, range_end, k), ...]``: inclusive batch-size ranges (requests per step)
        and the number of speculative tokens k to use there (0 = no drafting).
    num_speculative_tokens : int
        The config's ``num_speculative_tokens`` (the maximum N; vLLM requires > 0).

    Returns
    -------
    list of (int, int, int)
        The schedule as tuples of Python ints.

    Raises
    ------
    SpecsimValueError
        Field ``num_speculative_tokens_per_batch_size`` (or ``...[i]`` for one entry) naming the
        rule: not a non-empty list; an entry not three integers; a range not positive or with
        start > end; k < 0; k > ``num_speculative_tokens`` (vLLM would clamp silently); entries not
        in ascending order or overlapping (vLLM sorts silently, then rejects overlaps); first range
        not starting at 1 (``vllm/v1/spec_decode/dynamic/utils.py:7-72``).  Field
        ``num_speculative_tokens`` when it is not an integer >= 1 (utils.py:88-89).
    """
    if not _int_like(num_speculative_tokens) or num_speculative_tokens < 1:
        raise SpecsimValueError("num_speculative_tokens", "must be an integer >= 1 when a schedule is given "
                                "(vllm/v1/spec_decode/dynamic/utils.py:88)", num_speculative_tokens)
    if not isinstance(schedule, (list, tuple)) or len(schedule) == 0:
        raise SpecsimValueError(SCHEDULE_FIELD, "must be a non-empty list of [range_start, range_end, "
                                "num_speculative_tokens] entries", schedule)
    out: list[tuple[int, int, int]] = []
    prev_end = 0
    for i, e in enumerate(schedule):
        name = f"{SCHEDULE_FIELD}[{i}]"
        if not isinstance(e, (list, tuple)) or len(e) != 3 or not all(_int_like(x) for x in e):
            raise SpecsimValueError(name, "must be three integers [range_start, range_end, num_speculative_tokens]", e)
        lo, hi, k = (int(x) for x in e)
        if lo < 1 or hi < 1:
            raise SpecsimValueError(name, "batch-size range must be positive", e)
        if lo > hi:
            raise SpecsimValueError(name, "range_start must be <= range_end", e)
        if k < 0:
            raise SpecsimValueError(name, "num_speculative_tokens must be >= 0", e)
        if k > num_speculative_tokens:
            raise SpecsimValueError(name, f"num_speculative_tokens must be <= the config's num_speculative_tokens "
                                    f"({num_speculative_tokens}); vLLM would clamp it silently", e)
        if i == 0 and lo != 1:
            raise SpecsimValueError(name, "the first batch-size range must start at 1 (every batch size needs a k)", e)
        if lo <= prev_end:
            raise SpecsimValueError(name, f"ranges must be in ascending order and non-overlapping (previous range "
                                    f"ends at {prev_end})", e)
        prev_end = hi
        out.append((lo, hi, k))
    return out


def expand_schedule(schedule: Any, max_batch_size: int, num_speculative_tokens: int) -> np.ndarray:
    """Dense batch size -> k lookup, exactly as vLLM builds it.

    Mirrors ``build_dynamic_sd_schedule_lookup`` (``vllm/v1/spec_decode/dynamic/utils.py:77``):
    gaps between ranges and the tail after the last one carry the previous k forward; every k is
    clamped to ``num_speculative_tokens``.

    Parameters
    ----------
    schedule : list of (int, int, int)
        Validated with :func:`validate_schedule` first.
    max_batch_size : int
        vLLM ``max_num_seqs`` (>= 1).
    num_speculative_tokens : int

    Returns
    -------
    ndarray of int, shape (max_batch_size + 1,)
        Index b holds k for batch size b; index 0 is unused (0).

    Raises
    ------
    SpecsimValueError
        As :func:`validate_schedule`; ``max_batch_size`` < 1.
    """
    sched = validate_schedule(schedule, num_speculative_tokens)
    if not _int_like(max_batch_size) or max_batch_size < 1:
        raise SpecsimValueError("max_batch_size", "must be an integer >= 1", max_batch_size)
    dense = np.zeros(max_batch_size + 1, dtype=int)
    nxt, last = 1, None
    for lo, hi, k in sched:
        if lo > nxt and last is not None:
            dense[nxt:min(lo, max_batch_size + 1)] = min(num_speculative_tokens, last)
        dense[max(lo, nxt):min(hi, max_batch_size) + 1] = min(num_speculative_tokens, k)
        nxt = max(nxt, hi + 1)
        last = k
        if nxt > max_batch_size:
            break
    if nxt <= max_batch_size:
        dense[nxt:] = min(num_speculative_tokens, last)
    return dense


def speculative_config(method: str, num_speculative_tokens: int, *, model: str | None = None,
                       schedule: Sequence[Sequence[int]] | None = None,
                       extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ``--speculative-config`` dict for vLLM 0.32.0, validated by specsim's vLLM-faithful parser.

    Parameters
    ----------
    method : str
        vLLM method string.
    num_speculative_tokens : int
        N (with a schedule: the maximum k of the schedule).
    model : str, optional
        Draft checkpoint (Hugging Face id); omitted for native MTP / n-gram.
    schedule : list of (int, int, int), optional
        Dynamic schedule (validated with :func:`validate_schedule`).
    extra : mapping, optional
        Further speculative-config keys (e.g. ``draft_tensor_parallel_size``).

    Returns
    -------
    dict
        JSON-ready; ``json.dumps`` of it is what ``vllm serve --speculative-config`` takes.

    Raises
    ------
    SpecsimValueError
        Bad schedule (:func:`validate_schedule`) or any field
        :func:`specsim.vllm.config.parse_speculative_config` rejects.
    """
    cfg: dict[str, Any] = {"method": method}
    if model is not None:
        cfg["model"] = model
    cfg["num_speculative_tokens"] = num_speculative_tokens
    if schedule is not None:
        cfg[SCHEDULE_FIELD] = [list(e) for e in validate_schedule(list(schedule), num_speculative_tokens)]
    cfg.update(dict(extra or {}))
    parse_speculative_config(cfg)  # raises SpecsimValueError naming the field
    return cfg
