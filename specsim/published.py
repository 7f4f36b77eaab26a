"""The published tables specsim reproduces (layer 2, model): the only reader of
``specsim/data/published/`` (vllm-amd-specdec-post, amd-eagle3-post; sources per row in each file).

Details: ``docs/modules/specsim.published.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from specsim.acceptance import Acceptance
from specsim.catalog import data_path
from specsim.errors import SpecsimValueError

_PUBLISHED_FILE = ("published", "amd_specdec_n_sweeps.csv")


_PUBLISHED_DATASETS = ("GSM8K", "MATH500", "HumanEval", "MBPP")


#: published method label -> vLLM method string
_PUBLISHED_TO_VLLM = {"mtp_gemma4_assistant": "mtp"}


@dataclass(frozen=True)
class AcceptanceProfile:
    """An acceptance profile with its provenance and (optional) range.

    Attributes
    ----------
    acceptance : Acceptance
    range : (Acceptance, Acceptance) or None
        Pointwise lower / upper cumulative curves (e.g. the spread over datasets).
    range_note : str
    label, source : str
    """

    acceptance: Any
    range: tuple[Any, Any] | None
    range_note: str
    label: str
    source: str


def _published_table() -> pd.DataFrame:
    return pd.read_csv(data_path(*_PUBLISHED_FILE))


def _norm_name(x: str) -> str:
    return str(x).strip().split("/")[-1].lower()


def published_methods(target) -> list[str]:
    """vLLM method strings with a published appendix sweep for ``target`` (name or ModelSpec)."""
    name = _norm_name(getattr(target, "name", target))
    d = _published_table()
    labels = d.loc[d["target_model"].map(_norm_name) == name, "method"].unique()
    return sorted({_PUBLISHED_TO_VLLM.get(m, m) for m in labels})


@lru_cache(maxsize=1)
def _published_datasets() -> tuple[str, ...]:
    """The appendix's datasets, sorted (read once: :func:`published_dataset` runs before every profile)."""
    return tuple(sorted(_published_table()["dataset"].unique()))


def published_dataset(dataset: str) -> str:
    """``dataset`` as the published appendix names it (``"GSM8K"``, ``"MATH500"``, ``"HumanEval"``,
    ``"MBPP"``) or ``"mix"``, matched in any case (``"gsm8k"`` is ``"GSM8K"``).

    Raises
    ------
    SpecsimValueError
        A name that is none of these, for any target (``field="dataset"``; lists them).
    """
    names = ["mix", *_published_datasets()]
    by_case = {n.lower(): n for n in names}
    if not isinstance(dataset, str) or dataset.strip().lower() not in by_case:
        raise SpecsimValueError("dataset", "no published acceptance for this dataset, for any target (the "
                                "appendix's datasets, any case, or mix: their equal-weight mixture)", dataset, names)
    return by_case[dataset.strip().lower()]


def published_profile(target, method: str, dataset: str = "mix") -> AcceptanceProfile:
    """Per-position acceptance of the published appendix sweeps (``specsim/data/published/amd_specdec_n_sweeps.csv``,
    source ``vllm-amd-specdec-post``; MI300X, vLLM 0.23.1rc1).

    For each (target, method, dataset) the row with the largest N is used (its
    ``per_position_acceptance_cumulative``, ``;``-separated CUMULATIVE rates: MAL = 1 + sum holds).

    Parameters
    ----------
    target : str or ModelSpec
        ``"gemma-4-26B-A4B-it"`` or ``"google/gemma-4-26B-A4B-it"``.
    method : str
        vLLM method (``"dflash"``, ``"eagle3"``, ``"dspark"``, ``"mtp"``; for Gemma 4 ``"mtp"``
        is the assistant drafter, published as ``mtp_gemma4_assistant``).
    dataset : str
        ``"GSM8K"``, ``"MATH500"``, ``"HumanEval"``, ``"MBPP"`` (any case: :func:`published_dataset`) or
        ``"mix"`` (default): the
        equal-weight mixture of the four, whose survival curve is the mean of theirs
        (a workload drawing each dataset with probability 1/4); its ``range`` is the pointwise
        min / max over the datasets (workload spread, not sampling error).

    Returns
    -------
    AcceptanceProfile
        ``acceptance.temperature`` is None: the post does not state the sampling temperature,
        so predictions record the assumption that it applies at the temperature asked.

    Raises
    ------
    SpecsimValueError
        ``target`` / ``method`` / ``dataset`` without published rows (lists what exists).
    """

    tname, dataset, d = _published_rows(target, method, dataset)
    datasets = sorted(d["dataset"].unique()) if dataset == "mix" else [dataset]
    curves, ns = [], []
    for ds in datasets:
        rows = d[d["dataset"] == ds]
        row = rows.loc[rows["num_speculative_tokens"].idxmax()]
        curves.append(np.array([float(x) for x in str(row["per_position_acceptance_cumulative"]).split(";")]))
        ns.append(int(row["num_speculative_tokens"]))
    m = min(len(c) for c in curves)
    stack = np.vstack([c[:m] for c in curves])
    label = f"{tname} {method} {dataset} (published, N={max(ns)})"
    src = "vllm-amd-specdec-post appendix (specsim/data/published/amd_specdec_n_sweeps.csv), MI300X"
    if dataset != "mix":
        return AcceptanceProfile(Acceptance.from_rates(stack[0], kind="cumulative", label=label), None, "",
                                 label, src)
    acc = Acceptance.from_rates(stack.mean(axis=0), kind="cumulative", label=label)
    lo = Acceptance.from_rates(stack.min(axis=0), kind="cumulative", label=label + " min")
    hi = Acceptance.from_rates(stack.max(axis=0), kind="cumulative", label=label + " max")
    note = f"acceptance range = min/max over datasets {', '.join(datasets)} (workload spread, not sampling error)"
    return AcceptanceProfile(acc, (lo, hi), note, label, src)


def _published_rows(target, method: str, dataset: str) -> tuple[str, str, pd.DataFrame]:
    """(target's short name, the dataset's name as the appendix writes it, the appendix's rows of that target
    and method, all datasets for ``"mix"``); refused as :func:`published_profile` says."""
    dataset = published_dataset(dataset)
    tname = _norm_name(getattr(target, "name", target))
    table = _published_table()
    d = table[table["target_model"].map(_norm_name) == tname]
    if d.empty:
        raise SpecsimValueError("target", "no published acceptance for this target", tname,
                                sorted(table["target_model"].unique()))
    label = _method_label(d, method)
    if label is None:
        raise SpecsimValueError("method", f"no published acceptance for {tname} with this method", method,
                                published_methods(tname))
    d = d[d["method"] == label]
    if dataset != "mix" and dataset not in set(d["dataset"]):
        raise SpecsimValueError("dataset", "no published rows for this dataset", dataset,
                                ["mix", *sorted(d["dataset"].unique())])
    return tname, dataset, d if dataset == "mix" else d[d["dataset"] == dataset]


def _method_label(d: pd.DataFrame, method: str) -> str | None:
    """The appendix's method label of vLLM ``method`` among the rows ``d``: the same string, else the label that
    maps to it (:data:`_PUBLISHED_TO_VLLM`); None where no row has either."""
    labels = [m for m in d["method"].unique() if m == method] or \
             [m for m in d["method"].unique() if _PUBLISHED_TO_VLLM.get(m) == method]
    return labels[0] if labels else None


def published_n_note(target, method: str, dataset: str = "mix", profile: AcceptanceProfile | None = None
                     ) -> str | None:
    """What :func:`published_profile`'s one row (the largest N) says at the smaller N the appendix also
    published: the MAL its first N positions give beside the MAL that N's own row measured (for ``"mix"``, each
    the mean over the four datasets).  Published MAL = 1 + the sum of the cumulative per-position rates.

    Parameters
    ----------
    target, method, dataset
        As :func:`published_profile`.
    profile : AcceptanceProfile, optional
        :func:`published_profile` of the same three, where the caller has it (else it is made here).

    Returns
    -------
    str or None
        An assumption line where the appendix has rows at smaller N, else None.

    Raises
    ------
    SpecsimValueError
        As :func:`published_profile`.
    """
    _, _, d = _published_rows(target, method, dataset)
    prof = profile if profile is not None else published_profile(target, method, dataset)
    n_max = int(d["num_speculative_tokens"].max())
    smaller = sorted(int(n) for n in d["num_speculative_tokens"].unique() if n < n_max)
    if not smaller:
        return None
    used = [float(prof.acceptance.mal(n)) for n in smaller]
    own = [float(d[d["num_speculative_tokens"] == n]["mean_acceptance_length"].mean()) for n in smaller]
    pairs = ", ".join(f"N={n}: {u:.2f} (row {o:.2f})" for n, u, o in zip(smaller, used, own))
    return (f"acceptance: the published N={n_max} row's per-position rates at every N; at the N it also published "
            f"its first N positions give MAL {pairs} -- a drafter's acceptance can change with N")


#: published method label -> (vLLM method string, draft checkpoint template or None = seed default)
PUBLISHED_METHODS = {
    "mtp_gemma4_assistant": ("mtp", "google/{target}-assistant"),
    "mtp": ("mtp", None),
    "eagle3": ("eagle3", None),
    "dflash": ("dflash", None),
    "dspark": ("dspark", None),
}


METHOD_LABELS = {
    "mtp_gemma4_assistant": "Gemma 4 MTP", "mtp": "native MTP", "eagle3": "EAGLE-3", "dflash": "DFlash", "dspark": "DSpark",
}


def short_name(hf_id: str) -> str:
    return hf_id.split("/")[-1]


@lru_cache(maxsize=1)
def load_workloads() -> pd.DataFrame:
    """Per-dataset ISL / OSL (tokens) with their status (published / assumed)."""
    return pd.read_csv(data_path("published", "dataset_workloads.csv")).set_index("dataset")


def load_sweeps() -> pd.DataFrame:
    """The appendix N sweeps (``specsim/data/published/amd_specdec_n_sweeps.csv``) with parsed columns.

    Adds ``target`` (short model name), ``vllm_method``, ``draft_model``, ``cumulative`` (tuple of
    per-position cumulative acceptance), ``n`` (int), ``mal_from_positions`` (1 + sum),
    ``isl``, ``osl`` (assumed workload).
    """
    df = pd.read_csv(data_path("published", "amd_specdec_n_sweeps.csv"))
    wl = load_workloads()
    df["target"] = df["target_model"].map(short_name)
    df["n"] = df["num_speculative_tokens"].astype(int)
    df["cumulative"] = df["per_position_acceptance_cumulative"].map(lambda s: tuple(float(x) for x in str(s).split(";")))
    df["mal_from_positions"] = df["cumulative"].map(lambda c: 1.0 + sum(c))
    df["vllm_method"] = df["method"].map(lambda m: PUBLISHED_METHODS[m][0])
    df["draft_model"] = [
        (PUBLISHED_METHODS[m][1] or "").format(target=t) or None for m, t in zip(df["method"], df["target"])
    ]
    df["isl"] = df["dataset"].map(wl["isl_tokens"]).astype(int)
    df["osl"] = df["dataset"].map(wl["osl_tokens"]).astype(int)
    return df


DATASET_ORDER = ("GSM8K", "MATH500", "HumanEval", "MBPP")


#: legend order of the published method labels (sequential first, then parallel)
METHOD_ORDER = ("mtp", "mtp_gemma4_assistant", "eagle3", "dflash", "dspark")


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def load_best_table() -> pd.DataFrame:
    """The post's best-speedup summary table (``published/amd_specdec_best.csv``, vllm-amd-specdec-post)."""
    return pd.read_csv(data_path("published", "amd_specdec_best.csv"))


def load_mi355x_eagle3() -> pd.DataFrame:
    """The amd-eagle3-post MI355X EAGLE-3 speedup ranges (``published/amd_eagle3_mi355x.csv``)."""
    return pd.read_csv(data_path("published", "amd_eagle3_mi355x.csv"))


def load_minimax_m3_acceptance() -> pd.DataFrame:
    """MiniMax-M3 EAGLE-3 acceptance published in amd-eagle3-post (``published/minimax_m3_eagle3_acceptance.csv``)."""
    return pd.read_csv(data_path("published", "minimax_m3_eagle3_acceptance.csv"))


def load_concurrency_sweeps() -> pd.DataFrame:
    """Published concurrency sweeps on NVIDIA GPUs (``published/concurrency_sweeps.csv``, 135 rows).

    P-EAGLE / EAGLE-3 on gpt-oss-20b (1x B200), the EAGLE-3 paper batch tables (Llama-3.1-8B,
    secondary), DSpark on DeepSeek-V4-Pro (8x B300) and a 2024 vLLM blog; every value as published
    (see ``specsim/data/published/README.md``, section "Concurrency sweeps").  ``concurrency`` is
    text (``"QPS=1"`` in the 2024 blog, empty for the P-EAGLE acceptance tables) and
    ``throughput_ratio`` is NOT always spec / no-spec: read ``ratio_kind``.
    """
    return pd.read_csv(data_path("published", "concurrency_sweeps.csv"))
