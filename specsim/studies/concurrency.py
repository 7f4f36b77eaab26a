"""Concurrency from published data, NVIDIA (layer 4, studies): a B200 stack calibration fitted on the
P-EAGLE blog's gpt-oss-20b concurrency sweeps (MT-Bench + HumanEval), judged on the held-out
SPEED-Bench rows per concurrency; the shape of the gain in concurrency (rise then fall on the MoE
target, with the distinct-expert fractions computed); the EAGLE-3 paper's Llama-3.1-8B batch table
as a shape-only check with the B200 terms transferred to H100; and the scope statement for the rows
specsim cannot model (DSpark on DeepSeek-V4-Pro, the 2024 blog).

Data: ``specsim/data/published/concurrency_sweeps.csv`` (:func:`specsim.published.load_concurrency_sweeps`;
provenance in ``specsim/data/published/README.md``, section "Concurrency sweeps").  The fit reuses
:class:`specsim.studies.reproduce.AppendixPlans` (physical counts built once) and
:func:`specsim.studies.reproduce.fit_stack` with ``concurrency=None`` (each row's published
concurrency); the whole study takes well under a second.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from specsim._io import atomic_write
from specsim.architecture import load_model
from specsim.calibration import SCHEMA_VERSION, write_calibration
from specsim.engine import STACK_TERMS
from specsim.errors import DataError, SpecsimValueError
from specsim.published import load_concurrency_sweeps
from specsim.studies.reproduce import (
    AppendixPlans,
    StackParams,
    default_terms,
    fit_stack,
    transfer_params,
)

__all__ = [
    "ConcurrencyStudy", "concurrency_study", "write_concurrency_outputs", "p_eagle_rows", "fit_b200",
    "expert_fractions", "eagle3_paper_shape", "b200_calibration_record", "out_of_scope_rows",
    "B200_FIT_TERMS", "FIT_DATASETS", "HELD_OUT_DATASET", "B200_STACK",
]

TARGET = "gpt-oss-20b"
HARDWARE = "B200 SXM"
#: draft specs in ``specsim/data/drafters``: the vanilla EAGLE-3 head (sequential, K passes) and the
#: P-EAGLE head (eagle3 + parallel_drafting: ONE pass over all K tokens)
EAGLE3_DRAFT = "gpt-oss-20b-eagle3"
P_EAGLE_DRAFT = "amazon/GPT-OSS-20B-P-EAGLE"
#: num_speculative_tokens per arm.  P-EAGLE: best K = 7 at every concurrency (blog).  EAGLE-3: the
#: blog's bars are the best K in {3, 5, 7} per concurrency, "mostly 3": ASSUMED 3 at every c
ARM_K = {"eagle3": 3, "p_eagle": 7}
ARM_DRAFT = {"eagle3": EAGLE3_DRAFT, "p_eagle": P_EAGLE_DRAFT}
FIT_DATASETS = ("MT-Bench", "HumanEval")
HELD_OUT_DATASET = "SPEED-Bench"
#: ASSUMED prompt length (tokens): not published; MT-Bench / HumanEval first turns are ~100-200
#: tokens with gpt-oss's chat template; the same value for SPEED-Bench's code subset (unknown)
ISL_ASSUMED = 256
#: output length: the blog's ``vllm bench serve`` output length 2048 (a cap; requests may stop at EOS)
OSL = 2048

#: the terms these rows identify, and why (one MoE target, TP 1, two drafters of 1 and 4 layers,
#: c = 1..64): ``host_step_s`` -- the c = 1 baseline step (2.2 ms at 450 tok/s) beyond the roofline;
#: ``host_per_seq_s`` -- the baseline step's growth with c beyond the distinct-expert bytes;
#: ``bandwidth`` -- the baseline's saturating growth while the distinct experts read go from 4 (c = 1)
#: to all 32 (c >= 16), and the verification of 4 / 8 tokens per sequence reading more experts;
#: ``fixed_s`` and ``spec_fixed_s`` -- EAGLE-3 runs 3 draft forwards, P-EAGLE 1 (the two arms at the
#: same c separate the per-forward cost from the per-step one); ``spec_per_token_s`` -- the
#: speculative step's growth with c (N + 1) verified tokens (N = 3 and 7, c up to 64); ``compute`` --
#: P-EAGLE's 8 tokens per sequence at c = 32-64 (up to 512 tokens per forward), weakly: the fit runs
#: it to its bound 1.0 (of the bf16 peak; the MoE runs MXFP4 x MXFP8 on the FP8 units, so > 1/2 of
#: the FP8 peak), the loss profile rising 6 % at 0.55 and 40 % at 0.2
B200_FIT_TERMS = ("bandwidth", "compute", "fixed_s", "host_step_s", "host_per_seq_s", "spec_fixed_s",
                  "spec_per_token_s")
#: why each other term is NOT fitted on these rows (its value: :func:`default_terms`)
B200_NOT_IDENTIFIED = {
    "per_layer_s": "prior 0: with one 24-layer target and drafters of 1 / 4 layers, a launch gap per layer is not "
                   "separable from fixed_s per forward, spec_fixed_s and host_step_s (three unknowns, two "
                   "independent step differences)",
    "allreduce_latency_s": "prior 0, not identified: every row is TP 1 (no all-reduce); a TP > 1 prediction on B200 "
                           "is charged the all-reduce wire time only",
    "moe_pad_tokens": "prior 0: ONE MoE target whose 32 experts are all read from c ~ 16 on, so padding FLOPs per "
                      "expert are a constant there, not separable from compute / fixed_s (fitting it leaves the "
                      "loss unchanged)",
    "dequant_s_per_weight": "not applicable on these rows: every weight has a native unit on B200 (MXFP4 experts on "
                            "the FP4 units, bf16 rest); the prior of specsim.studies.reproduce.default_terms kept "
                            "(charged only to weights without a native unit)",
    "spec_per_seq_layer_s": "prior 0: one target (12 non-sliding layers of 24), so a speculative cost per sequence "
                            "and layer is not separable from spec_per_token_s",
}
#: the software stack of the P-EAGLE runs (vLLM blog 'P-EAGLE', 2026-03-13)
B200_STACK = {
    "vllm": "0.16.0",
    "vllm_detail": "vLLM from v0.16.0 (Unified Parallel Drafting, PR #32887) + the one-line patch PR #36684 to serve "
                   "gpt-oss-20b with EAGLE drafters",
    "platform": "CUDA (version not stated)",
    "hardware": "1x NVIDIA B200",
    "host_cpu": "not stated",
    "env": "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1",
    "server_flags": "--max-num-seqs 1024 --max-model-len 100000 --max-num-batched-tokens 100000 "
                    "--max-cudagraph-capture-size 4096 --no-enable-prefix-caching --no-enable-chunked-prefill "
                    "--kv-cache-dtype fp8 --async-scheduling --stream-interval 20",
    "source": "vLLM blog 'P-EAGLE' (2026-03-13), vllm-project.github.io _posts/2026-03-13-p-eagle.md",
}
#: EAGLE-3 paper SGLang table (Llama-3.1-8B, MT-bench, chain length 3): ASSUMED acceptance (not
#: transcribed): constant conditional rate 0.8 -> MAL 1 + 0.8 + 0.64 + 0.512 = 2.952 at N = 3; the
#: normalised shape ratio(b) / ratio(2) moves < 0.5 % for MAL 2.5-3.5
PAPER_MAL = 1.0 + 0.8 + 0.8 ** 2 + 0.8 ** 3
PAPER_ISL, PAPER_OSL = 256, 1024  # ASSUMED (not published)
PAPER_HARDWARE = "H100 SXM"


# ------------------------------------------------------------------------------------ rows


def _is_p_eagle(df: pd.DataFrame) -> pd.Series:
    return df["source"].str.contains("'P-EAGLE'", regex=False)


def p_eagle_rows(sweeps: pd.DataFrame | None = None) -> pd.DataFrame:
    """The P-EAGLE blog's bar readings as fit rows of :func:`fit_stack` (one per arm, dataset, c).

    Parameters
    ----------
    sweeps : DataFrame, optional
        :func:`specsim.published.load_concurrency_sweeps` (default: the shipped file).

    Returns
    -------
    DataFrame
        42 rows: ``arm`` (``eagle3`` = EAGLE-3 / no-spec at K = 3, ``p_eagle`` = P-EAGLE / no-spec at
        K = 7, ONE draft pass), ``target`` gpt-oss-20b, ``method`` eagle3, ``drafter_spec``,
        ``hardware`` B200 SXM, ``tp`` 1, ``n``, ``isl`` / ``osl`` (tokens), ``concurrency``,
        ``mean_acceptance_length`` (the blog's AL table at that K and dataset; its concurrency is not
        stated: taken as the same at every c, which greedy decoding -- temperature 0 -- makes
        plausible), ``throughput_ratio`` (spec / no-spec, bars read by eye, +-5 %),
        ``baseline_output_tok_per_s`` (the no-spec bar), ``dataset``, ``role`` (fit / held out).

    Raises
    ------
    DataError
        A (arm, dataset, K) without an acceptance-length row, or a P-EAGLE bar without a baseline.
    """
    sw = load_concurrency_sweeps() if sweeps is None else sweeps
    pe = sw[_is_p_eagle(sw)]
    al = pe[pe["concurrency"].isna() & pe["mean_acceptance_length"].notna()]
    mal = {(r.method, r.dataset, int(r.num_speculative_tokens)): float(r.mean_acceptance_length)
           for r in al.itertuples()}
    bars = pe[pe["ratio_kind"].fillna("").str.startswith("output throughput (TPS) spec/no-spec")]
    rows = []
    for r in bars.itertuples():
        arm = {"eagle3": "eagle3", "p_eagle": "p_eagle"}.get(r.method)
        if arm is None:
            raise DataError(f"concurrency_sweeps.csv: P-EAGLE bar with method {r.method!r} (expected eagle3 / p_eagle)")
        k = ARM_K[arm]
        if (arm, r.dataset, k) not in mal:
            raise DataError(f"concurrency_sweeps.csv: no acceptance-length row for {arm} {r.dataset} K={k}")
        if not np.isfinite(r.baseline_tok_per_s):
            raise DataError(f"concurrency_sweeps.csv: P-EAGLE bar {arm} {r.dataset} c={r.concurrency} "
                            "without baseline_tok_per_s")
        rows.append({
            "arm": arm, "target": TARGET, "method": "eagle3", "drafter_spec": ARM_DRAFT[arm], "hardware": HARDWARE,
            "tp": 1, "n": k, "isl": ISL_ASSUMED, "osl": OSL, "concurrency": int(r.concurrency),
            "mean_acceptance_length": mal[(arm, r.dataset, k)], "throughput_ratio": float(r.throughput_ratio),
            "baseline_output_tok_per_s": float(r.baseline_tok_per_s),
            "spec_output_tok_per_s": float(r.spec_tok_per_s), "dataset": r.dataset,
            "role": "held out" if r.dataset == HELD_OUT_DATASET else "fit",
            "corpus_line": int(r.corpus_line),
        })
    return pd.DataFrame(rows)


def p_eagle_captions(sweeps: pd.DataFrame | None = None) -> pd.DataFrame:
    """The blog's exact P-EAGLE / best-EAGLE-3 throughput ratios (Figure 4 captions, 21 rows):
    ``dataset, concurrency, p_over_e_published``."""
    sw = load_concurrency_sweeps() if sweeps is None else sweeps
    cap = sw[_is_p_eagle(sw) & sw["ratio_kind"].fillna("").str.startswith("P-EAGLE / best-EAGLE-3")]
    return pd.DataFrame({"dataset": cap["dataset"].to_numpy(), "concurrency": cap["concurrency"].astype(int).to_numpy(),
                         "p_over_e_published": cap["throughput_ratio"].astype(float).to_numpy()})


# ------------------------------------------------------------------------------------- fit


def fit_b200(rows: pd.DataFrame, plans: AppendixPlans | None = None) -> tuple[StackParams, float]:
    """Fit :data:`B200_FIT_TERMS` on the :data:`FIT_DATASETS` rows of :func:`p_eagle_rows`.

    Starts from :func:`specsim.studies.reproduce.default_terms`; every other term keeps that value
    (:data:`B200_NOT_IDENTIFIED` says why).  The SPEED-Bench rows are never seen by the fit.

    Returns
    -------
    params : StackParams
        ``concurrency`` None (each row's published concurrency); ``term_sources`` per term.
    loss : float
        RMS log residual of the fit rows (ratios + baseline tok/s).
    """
    rows = rows.reset_index(drop=True)
    mask = rows["dataset"].isin(FIT_DATASETS).to_numpy()
    plans = plans or AppendixPlans(rows)
    params, loss = fit_stack(rows, mask, concurrency=None, plans=plans, fit_terms=B200_FIT_TERMS,
                             start=default_terms())
    nfit = int(mask.sum())
    nb = int((~rows[mask].duplicated(["dataset", "concurrency"])).sum())
    why = {k: f"fitted on {nfit} P-EAGLE blog rows ({' + '.join(FIT_DATASETS)}; EAGLE-3 K=3 and P-EAGLE K=7 "
              f"throughput ratios at c = 1..64) + {nb} no-spec baseline tok/s, {HELD_OUT_DATASET} held out"
           for k in B200_FIT_TERMS}
    src = {k: why.get(k) or B200_NOT_IDENTIFIED.get(k) or "prior (specsim.studies.reproduce.default_terms): not "
           "identified by these rows" for k in STACK_TERMS}
    return replace(params, term_sources=src), loss


# ------------------------------------------------------------------------------- analysis


def expert_fractions(model_name: str = TARGET, concurrencies=(1, 2, 4, 8, 16, 32, 64),
                     arms: dict | None = None) -> pd.DataFrame:
    """Distinct routed experts read per MoE layer by the baseline step (c tokens) and by the
    verification step (c (N + 1) tokens), from :meth:`ModelSpec.expected_distinct_experts`
    (uniform top-k routing, E (1 - (1 - k/E)^T)).

    Returns
    -------
    DataFrame
        ``arm, n, concurrency, baseline_tokens, verify_tokens, baseline_distinct_experts,
        verify_distinct_experts, baseline_expert_fraction, verify_expert_fraction,
        verify_over_baseline`` (fractions of the model's ``num_experts``).
    """
    m = load_model(model_name)
    if not m.is_moe:
        raise SpecsimValueError("model_name", "is not an MoE model (no routed experts)", model_name)
    rows = []
    for arm, n in (arms or ARM_K).items():
        for c in concurrencies:
            db = float(m.expected_distinct_experts(c))
            dv = float(m.expected_distinct_experts(c * (n + 1)))
            rows.append({"arm": arm, "n": n, "concurrency": int(c), "baseline_tokens": int(c),
                         "verify_tokens": int(c * (n + 1)), "baseline_distinct_experts": db,
                         "verify_distinct_experts": dv, "baseline_expert_fraction": db / m.num_experts,
                         "verify_expert_fraction": dv / m.num_experts, "verify_over_baseline": dv / db})
    return pd.DataFrame(rows)


def _curve_shape(c: np.ndarray, r: np.ndarray) -> dict:
    i = int(np.argmax(r))
    at = dict(zip(c.tolist(), r.tolist()))
    return {"c_peak": int(c[i]), "ratio_c1": float(at[1]), "ratio_c8": float(at[8]), "ratio_peak": float(r[i]),
            "ratio_c64": float(at[64]), "rise_peak_over_c1": float(r[i] / at[1]),
            "fall_c64_over_peak": float(at[64] / r[i]),
            "rises_to_8_then_falls": bool(at[8] > at[1] and at[64] < r[i])}


def shape_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, dataset): peak concurrency, ratio at c = 1 / 8 / peak / 64, rise and fall, published
    beside predicted (``*_published``, ``*_predicted``)."""
    out = []
    for (arm, ds), g in table.groupby(["arm", "dataset"], sort=False):
        g = g.sort_values("concurrency")
        c = g["concurrency"].to_numpy()
        pub = _curve_shape(c, g["throughput_ratio"].to_numpy(float))
        pred = _curve_shape(c, g["predicted_throughput_ratio"].to_numpy(float))
        row = {"arm": arm, "dataset": ds, "role": g["role"].iloc[0]}
        row.update({f"{k}_published": v for k, v in pub.items()})
        row.update({f"{k}_predicted": v for k, v in pred.items()})
        out.append(row)
    return pd.DataFrame(out)


def _errors_by_concurrency(table: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (role, c), g in table.groupby(["role", "concurrency"], sort=True):
        e3, pe = g[g["arm"] == "eagle3"], g[g["arm"] == "p_eagle"]
        out.append({"role": role, "concurrency": int(c), "rows": len(g),
                    # signed, mean over the role's datasets (one for the held-out role)
                    "eagle3_ratio_rel_error": float(e3["ratio_rel_error"].mean()),
                    "p_eagle_ratio_rel_error": float(pe["ratio_rel_error"].mean()),
                    "ratio_median_abs_rel_error": float(g["ratio_rel_error"].abs().median()),
                    "baseline_median_abs_rel_error": float(g.drop_duplicates("dataset")["baseline_rel_error"]
                                                           .abs().median())})
    return pd.DataFrame(out)


def _caption_check(table: pd.DataFrame, captions: pd.DataFrame) -> pd.DataFrame:
    piv = table.pivot_table(index=["dataset", "concurrency"], columns="arm",
                            values=["predicted_throughput_ratio", "throughput_ratio"])
    pred = (piv[("predicted_throughput_ratio", "p_eagle")] / piv[("predicted_throughput_ratio", "eagle3")])
    bars = piv[("throughput_ratio", "p_eagle")] / piv[("throughput_ratio", "eagle3")]
    out = captions.copy()
    key = list(zip(out["dataset"], out["concurrency"]))
    out["p_over_e_from_bars"] = [float(bars.loc[k]) for k in key]
    out["p_over_e_predicted"] = [float(pred.loc[k]) for k in key]
    out["rel_error"] = out["p_over_e_predicted"] / out["p_over_e_published"] - 1.0
    out["role"] = np.where(out["dataset"] == HELD_OUT_DATASET, "held out", "fit datasets (captions not fitted)")
    return out


def eagle3_k_check(params: StackParams, rows: pd.DataFrame, sweeps: pd.DataFrame | None = None) -> pd.DataFrame:
    """The assumed EAGLE-3 K = 3 against K = 7 (the two K of the blog's AL tables; K = 5 has no
    published AL): the model's predicted ratio of each at every (dataset, c), and the better K.
    The blog says the best K is "mostly 3"."""
    sw = load_concurrency_sweeps() if sweeps is None else sweeps
    al = sw[_is_p_eagle(sw) & sw["concurrency"].isna() & sw["mean_acceptance_length"].notna()]
    m7 = {r.dataset: float(r.mean_acceptance_length) for r in al.itertuples()
          if r.method == "eagle3" and int(r.num_speculative_tokens) == 7}
    e3 = rows[rows["arm"] == "eagle3"].reset_index(drop=True)
    k7 = e3.assign(n=7, mean_acceptance_length=e3["dataset"].map(m7))
    r3 = AppendixPlans(e3).predict(params)["predicted_throughput_ratio"].to_numpy()
    r7 = AppendixPlans(k7).predict(params)["predicted_throughput_ratio"].to_numpy()
    return pd.DataFrame({"dataset": e3["dataset"], "concurrency": e3["concurrency"], "predicted_ratio_k3": r3,
                         "predicted_ratio_k7": r7, "predicted_best_k": np.where(r3 >= r7, 3, 7)})


def eagle3_paper_shape(params: StackParams, sweeps: pd.DataFrame | None = None) -> tuple[pd.DataFrame, str]:
    """SHAPE check (not a fit): the EAGLE-3 paper's SGLang batch table (Llama-3.1-8B, MT-bench, chain
    length 3, b = 2..64; secondary transcription; 1x H100 per the source README) against the model
    with ``params`` TRANSFERRED to H100 (:func:`specsim.studies.reproduce.transfer_params`).

    MAL is not transcribed: :data:`PAPER_MAL` (assumed) at every batch; ISL / OSL assumed
    (:data:`PAPER_ISL`, :data:`PAPER_OSL`); the draft is derived from the target (no spec of the
    paper's head).  Compare ``*_normalised`` (ratio / ratio at b = 2), not absolute ratios: SGLang
    is not vLLM and the acceptance is assumed.  ``predicted_normalised_compute_prior``: the same with
    ``compute`` at the datasheet prior of :func:`default_terms` (the B200 fit identifies it weakly).

    Returns ``(table, transfer_rule)``.
    """
    sw = load_concurrency_sweeps() if sweeps is None else sweeps
    t = sw[sw["source"].str.startswith("arXiv 2503.01840") & (sw["hardware"] == "1x H100")
           & (sw["method"] == "eagle3") & sw["baseline_tok_per_s"].isna()]
    b = t["concurrency"].astype(int).to_numpy()
    rows = pd.DataFrame({"target": "Llama-3.1-8B-Instruct", "method": "eagle3", "hardware": PAPER_HARDWARE, "tp": 1,
                         "n": t["num_speculative_tokens"].astype(int).to_numpy(), "isl": PAPER_ISL, "osl": PAPER_OSL,
                         "mean_acceptance_length": PAPER_MAL, "concurrency": b, "dataset": "MT-bench",
                         "throughput_ratio": t["throughput_ratio"].astype(float).to_numpy()})
    p, rule = transfer_params(params, PAPER_HARDWARE, source="B200 SXM")
    plans = AppendixPlans(rows)
    pred = plans.predict(replace(p, concurrency=None))
    # sensitivity: the compute efficiency is only weakly identified on B200 (fitted to its bound 1.0 of
    # the bf16 peak, with MXFP4 x MXFP8 experts): the same transfer with the datasheet prior instead
    prior = replace(p, concurrency=None, terms={**p.terms, "compute": default_terms()["compute"]})
    pred_prior = plans.predict(prior)
    out = rows[["concurrency", "n", "mean_acceptance_length", "throughput_ratio"]].rename(
        columns={"concurrency": "batch", "throughput_ratio": "published_ratio"})
    out["predicted_ratio"] = pred["predicted_throughput_ratio"].to_numpy()
    ref = out["batch"] == out["batch"].min()
    out["published_normalised"] = out["published_ratio"] / float(out.loc[ref, "published_ratio"].iloc[0])
    out["predicted_normalised"] = out["predicted_ratio"] / float(out.loc[ref, "predicted_ratio"].iloc[0])
    out["predicted_baseline_tok_per_s"] = pred["predicted_baseline_tok_per_s"].to_numpy()
    r0 = pred_prior["predicted_throughput_ratio"].to_numpy()
    out["predicted_normalised_compute_prior"] = r0 / float(r0[ref.to_numpy()][0])
    return out.sort_values("batch").reset_index(drop=True), rule


def out_of_scope_rows(sweeps: pd.DataFrame | None = None) -> list[dict]:
    """The rows of ``concurrency_sweeps.csv`` this study does not predict, with why (a list of dicts:
    ``source, rows, why``)."""
    sw = load_concurrency_sweeps() if sweeps is None else sweeps
    n_ds = int(sw["source"].str.contains("DSpark", regex=False).sum())
    n_blog = int(sw["source"].str.contains("(2024-10-17)", regex=False).sum())
    n_vllm_tab = int((sw["source"].str.startswith("arXiv 2503.01840") & (sw["hardware"] != "1x H100")).sum())
    n_b1 = int((sw["source"].str.startswith("arXiv 2503.01840") & sw["baseline_tok_per_s"].notna()).sum())
    return [
        {"source": "vLLM blog 'DSpark in vLLM' (2026-08-14), DeepSeek-V4-Pro-0813, 8x B300, TP 8 + EP", "rows": n_ds,
         "why": "OUT OF SCOPE: specsim has no DeepSeek-V4 architecture. V4-Pro's attention keeps compressed (CSA / HCA) "
                "KV caches that specsim's config parser ignores: it reads the config as sliding-window attention only "
                "and counts 88.0B active parameters against the published 49B (specsim 586f38f, per the reference "
                "set's models/DeepSeek-V4-Pro.json), so every weight, KV and FLOP count of these rows would be wrong; "
                "the DSpark head's structure is unknown; the 0813 checkpoint's config (DSpark fields, block size 5) "
                "was not found; no MAL is published per arm; the k = 1 / 3 arms draft below the trained block "
                "(cost shape only); and the merged figure and the pre-merge draft of the post disagree at c >= 128 "
                "(CUDA-graph capture size 4096 vs 1024, output length): high-c step cost depends on serving "
                "settings. Adding the architecture is not small (compressed-attention KV model, MLA-like latent "
                "caches, an EP all-to-all term on 8 GPUs): not done here. Published shape, for the record: the "
                "fixed-k arms fall from 2.3-2.5x at c = 1 to 1.2-1.5x at c = 256."},
        {"source": "vLLM blog 'How Speculative Decoding Boosts vLLM Performance' (2024-10-17), Llama3-70B, 4x H100",
         "rows": n_blog,
         "why": "not predicted: latency speedups (not throughput ratios) at 'QPS=1' and an unstated 'high QPS', "
                "vLLM V0, N and TP not stated: direction only (gain at low load, loss at high load)"},
        {"source": "arXiv 2503.01840v3 (EAGLE-3) vLLM batch table, chain length 2", "rows": n_vllm_tab,
         "why": "not used: hardware disputed (text RTX3090, caption A100)"},
        {"source": "arXiv 2503.01840v3 (EAGLE-3) SGLang batch-1 tok/s rows", "rows": n_b1,
         "why": "not used in the shape check: a batch-1 point of another table (2.357x EAGLE-3, 1.542x EAGLE-2); "
                "the shape check uses b = 2..64"},
    ]


# ------------------------------------------------------------------------------ the study


@dataclass(frozen=True)
class ConcurrencyStudy:
    """What :func:`concurrency_study` reports.

    Attributes
    ----------
    params : StackParams
        The B200 stack terms (fitted on MT-Bench + HumanEval).
    fit_loss : float
        RMS log residual of the fit rows.
    table : DataFrame
        Every P-EAGLE bar row, published and predicted (ratio, baseline / spec tok/s, step times in
        seconds, relative errors, ``role``).
    by_concurrency : DataFrame
        Errors per (role, concurrency): EAGLE-3 and P-EAGLE ratio errors (predicted / published - 1,
        signed, mean over the role's datasets), median |error| of the ratio and of the baseline tok/s.
    shape : DataFrame
        :func:`shape_table`.
    experts : DataFrame
        :func:`expert_fractions`.
    captions : DataFrame
        Predicted P-EAGLE / EAGLE-3 vs the exact captions.
    paper_shape : DataFrame
        :func:`eagle3_paper_shape`.
    summary : dict
        The numbers above in JSON form, with assumptions and the scope statement.
    """

    params: StackParams
    fit_loss: float
    table: pd.DataFrame
    by_concurrency: pd.DataFrame
    shape: pd.DataFrame
    experts: pd.DataFrame
    captions: pd.DataFrame
    paper_shape: pd.DataFrame
    summary: dict


ASSUMPTIONS = [
    f"EAGLE-3 arm at K = {ARM_K['eagle3']} at every concurrency (the blog's bars are the best K in {{3, 5, 7}}, "
    "'mostly 3')",
    f"P-EAGLE arm at K = {ARM_K['p_eagle']} (the blog: best K = 7 at every concurrency), ONE draft pass per step "
    "(kind 'parallel', method 'eagle3', specsim/data/drafters/gpt-oss-20b--p-eagle.json; its layer dims are "
    "assumed there)",
    "MAL from the blog's AL tables (K = 3 / 7; their concurrency is NOT stated): the same MAL at every c "
    "(temperature 0: greedy acceptance does not depend on the batch, batch-variant numerics aside)",
    f"ISL {ISL_ASSUMED} tokens (not published) for all three datasets, OSL {OSL} (the blog's output length, a cap)",
    "bars read by eye (+-5 %; the c = 1 SPEED-Bench values are exact labels)",
    "KV cache costed at the target's weight precision (bf16) although the runs used --kv-cache-dtype fp8 "
    "(specsim's step plan takes no KV precision; the KV read is small at these contexts)",
    "routed experts read as uniform independent top-4 of 32 (ModelSpec.expected_distinct_experts)",
]


def _records(df: pd.DataFrame) -> list[dict]:
    def conv(v):
        if isinstance(v, (np.floating,)):
            return float(v)
        if isinstance(v, (np.integer,)):
            return int(v)
        if isinstance(v, np.bool_):
            return bool(v)
        return v
    return [{k: conv(v) for k, v in r.items()} for r in df.to_dict(orient="records")]


def concurrency_study(sweeps: pd.DataFrame | None = None) -> ConcurrencyStudy:
    """Run the study (well under a second: the counts are built once per row set).

    Parameters
    ----------
    sweeps : DataFrame, optional
        The published rows (default :func:`specsim.published.load_concurrency_sweeps`); tests pass a
        perturbed copy.
    """
    sw = load_concurrency_sweeps() if sweeps is None else sweeps
    rows = p_eagle_rows(sw)
    plans = AppendixPlans(rows)
    params, loss = fit_b200(rows, plans)
    pred = plans.predict(params)
    table = pd.concat([rows, pred], axis=1)
    table["ratio_rel_error"] = table["predicted_throughput_ratio"] / table["throughput_ratio"] - 1.0
    table["baseline_rel_error"] = table["predicted_baseline_tok_per_s"] / table["baseline_output_tok_per_s"] - 1.0
    table["step_cost_published"] = table["mean_acceptance_length"] / table["throughput_ratio"]
    table["step_cost_predicted"] = table["mean_acceptance_length"] / table["predicted_throughput_ratio"]
    by_c = _errors_by_concurrency(table)
    shape = shape_table(table)
    experts = expert_fractions()
    captions = _caption_check(table, p_eagle_captions(sw))
    paper, rule = eagle3_paper_shape(params, sw)
    kcheck = eagle3_k_check(params, rows, sw)

    ho, fit = table[table["role"] == "held out"], table[table["role"] == "fit"]

    def err(g, col):
        a = g[col].abs()
        return {"median_abs_rel_error": float(a.median()), "max_abs_rel_error": float(a.max()), "rows": int(len(g))}

    hb = ho.drop_duplicates("concurrency")
    # model-free reference: the held-out dataset's MAL over the fit datasets' mean published step cost
    # (MAL / ratio, in baseline steps) at the same (arm, c) -- what ANY dataset-independent step cost gives
    cost_fit = fit.groupby(["arm", "concurrency"])["step_cost_published"].mean()
    ref = ho["mean_acceptance_length"].to_numpy() / cost_fit.loc[list(zip(ho["arm"], ho["concurrency"]))].to_numpy()
    ref_err = ref / ho["throughput_ratio"].to_numpy() - 1.0
    cost = table.pivot_table(index=["arm", "concurrency"], columns="dataset", values="step_cost_published")
    e3 = shape[shape["arm"] == "eagle3"]
    pap_pub, pap_pred = paper["published_normalised"].to_numpy(), paper["predicted_normalised"].to_numpy()
    summary = {
        "what": "B200 stack calibration fitted on the P-EAGLE blog's gpt-oss-20b concurrency sweeps (1x B200, vLLM "
                f"0.16 + P-EAGLE patch); fit on {' + '.join(FIT_DATASETS)}, {HELD_OUT_DATASET} held out",
        "fit_terms": list(B200_FIT_TERMS),
        "terms": {k: float(params.terms[k]) for k in STACK_TERMS},
        "term_sources": dict(params.term_sources),
        "fit_rows": int(len(fit)), "held_out_rows": int(len(ho)),
        "fit_loss_rms_log": float(loss),
        "fit_ratio": err(fit, "ratio_rel_error"),
        "held_out_ratio": err(ho, "ratio_rel_error"),
        "held_out_ratio_eagle3": err(ho[ho["arm"] == "eagle3"], "ratio_rel_error"),
        "held_out_ratio_p_eagle": err(ho[ho["arm"] == "p_eagle"], "ratio_rel_error"),
        "held_out_baseline_tok_per_s": err(hb, "baseline_rel_error"),
        "held_out_reference_same_step_cost_as_fit_datasets": {
            "what": "NO-COST-MODEL reference: held-out ratio = its MAL / the fit datasets' mean published step cost "
                    "(MAL / ratio) at the same arm and c",
            "median_abs_rel_error": float(np.median(np.abs(ref_err))), "max_abs_rel_error": float(np.max(np.abs(ref_err))),
            "rows": int(len(ref_err))},
        "published_step_cost_baseline_steps": {
            "what": "MAL / published ratio = speculative step time in baseline steps (model-free; MAL from the AL "
                    "tables at unstated concurrency)",
            "rows": _records(cost.reset_index())},
        "held_out_by_concurrency": _records(by_c[by_c["role"] == "held out"]),
        "fit_by_concurrency": _records(by_c[by_c["role"] == "fit"]),
        "shape": _records(shape),
        "eagle3_rises_to_8_then_falls": {
            "published_all_datasets": bool(e3["rises_to_8_then_falls_published"].all()),
            "predicted_all_datasets": bool(e3["rises_to_8_then_falls_predicted"].all())},
        "distinct_expert_fractions": _records(experts),
        "p_over_e_captions": {"median_abs_rel_error": float(captions["rel_error"].abs().median()),
                              "max_abs_rel_error": float(captions["rel_error"].abs().max()),
                              "rows": _records(captions)},
        "eagle3_k3_vs_k7": {
            "what": "the assumed EAGLE-3 K = 3 vs K = 7 (AL tables), predicted; the blog: best K 'mostly 3'",
            "predicted_best_k_3_share": float(np.mean(kcheck["predicted_best_k"] == 3)), "rows": _records(kcheck)},
        "eagle3_paper_shape": {
            "what": "SHAPE only (not fitted): EAGLE-3 paper SGLang table, Llama-3.1-8B, MT-bench, chain 3, H100 "
                    "(secondary transcription; SGLang, not vLLM); B200 terms transferred to H100",
            "transfer_rule": rule, "mal_assumed": PAPER_MAL, "isl_assumed": PAPER_ISL, "osl_assumed": PAPER_OSL,
            "published_fall_b64_over_b2": float(pap_pub[-1]), "predicted_fall_b64_over_b2": float(pap_pred[-1]),
            "predicted_monotone_non_increasing": bool(np.all(np.diff(paper["predicted_ratio"].to_numpy()) <= 1e-9)),
            "rows": _records(paper)},
        "out_of_scope": out_of_scope_rows(sw),
        "assumptions": ASSUMPTIONS,
    }
    return ConcurrencyStudy(params, float(loss), table, by_c, shape, experts, captions, paper, summary)


# ------------------------------------------------------------------------------- outputs


def b200_calibration_record(study: ConcurrencyStudy) -> dict:
    """The shipped B200 calibration (``specsim/data/calibration/B200.json``, schema
    :data:`specsim.calibration.SCHEMA_VERSION`): exactly the :data:`specsim.engine.STACK_TERMS`, where
    each came from, the stack (:data:`B200_STACK`), ``"calibrated": true``; ``rmse_rel`` is the RMS
    log error of the held-out SPEED-Bench ratios.  No per-target values (one target was fitted:
    the terms are the stack's, costed physically)."""
    ho = study.table[study.table["role"] == "held out"]
    rms = float(np.sqrt(np.mean(np.log1p(ho["ratio_rel_error"].to_numpy()) ** 2)))
    return {
        "schema_version": SCHEMA_VERSION,
        "hardware": HARDWARE,
        "stack": dict(B200_STACK),
        "calibrated": True,
        "terms": {k: float(study.params.terms[k]) for k in STACK_TERMS},
        "term_sources": {k: study.params.term_sources.get(k, "") for k in STACK_TERMS},
        "smooth_p": study.params.smooth_p,
        "concurrency_inferred": "none: published per row (c = 1..64)",
        "rmse_rel": rms,
        "rmse_rel_what": f"RMS log error of the throughput ratio of the held-out {HELD_OUT_DATASET} rows "
                         "(EAGLE-3 and P-EAGLE, c = 1..64; a dataset the fit did not see, the same target)",
        "fitted_on": f"vLLM blog 'P-EAGLE' (2026-03-13) gpt-oss-20b on 1x B200: {' + '.join(FIT_DATASETS)} "
                     "EAGLE-3 (K=3) and P-EAGLE (K=7) throughput ratios + no-spec baseline tok/s at c = 1..64; "
                     f"{HELD_OUT_DATASET} held out",
        "source": "specsim.studies.concurrency.write_concurrency_outputs",
    }


def write_concurrency_outputs(study: ConcurrencyStudy, out_dir: str | os.PathLike,
                              calibration_dir: str | os.PathLike) -> list[Path]:
    """Write the study's tables into ``out_dir`` and ``B200.json`` into ``calibration_dir`` (atomic).

    ``out_dir``: ``concurrency_table.csv`` (every P-EAGLE row, fit / held out), ``concurrency_errors.csv``
    (per role and concurrency), ``concurrency_shape.csv``, ``concurrency_experts.csv``,
    ``concurrency_captions.csv``, ``concurrency_eagle3_paper.csv`` and ``concurrency_summary.json``.

    Returns the paths written.
    """
    out_dir, calibration_dir = Path(out_dir), Path(calibration_dir)
    tables = [(study.table, "concurrency_table.csv"), (study.by_concurrency, "concurrency_errors.csv"),
              (study.shape, "concurrency_shape.csv"), (study.experts, "concurrency_experts.csv"),
              (study.captions, "concurrency_captions.csv"), (study.paper_shape, "concurrency_eagle3_paper.csv")]
    written = [atomic_write(out_dir / name, lambda p, df=df: df.to_csv(p, index=False)) for df, name in tables]
    written.append(atomic_write(out_dir / "concurrency_summary.json",
                                lambda p: p.write_text(json.dumps(study.summary, indent=2, default=float) + "\n")))
    written.append(write_calibration(calibration_dir / "B200.json", b200_calibration_record(study)))
    return written
