"""The reproduction of the published tables (specsim.studies.reproduce), its curves (specsim.studies.curves)
and its figures (specsim.plots.reproduction).

What is checked:
* the fit / held-out split is honest: nothing about a held-out row (its published ratio, its
  baseline tok/s, its acceptance) reaches the fitted parameters or the choice of concurrency,
  while a fit row does;
* held-out error metrics are computed on held-out rows only; the best-N table is right on a
  constructed table;
* the seed-table check carries the appendix numbers (specsim/data/published/amd_specdec_best.csv: the post's
  summary table disagrees with its own appendix in three rows);
* regression guards on the held-out error (tolerance stated below);
* the MI355X EAGLE-3 transfer prediction against the published concurrency trend;
* the figure helpers reproduce the reproduction's numbers and label fit / held-out.
"""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from specsim.plots.reproduction import parity_figure, ratio_vs_n_figure
from specsim.published import load_sweeps
from specsim.studies.curves import default_reproduction, model_curve, sweep_curves
from specsim.studies.reproduce import (
    StackParams, _best_n_table, _error_summary, _split_mask, fit_stack, mi355x_eagle3_curves,
    reproduce, seed_table_check,
)


@pytest.fixture(scope="module")
def rep():
    """The main reproduction (fit on GSM8K, hold out MATH500/HumanEval/MBPP), computed once."""
    return default_reproduction()


@pytest.fixture(scope="module")
def sweeps():
    return load_sweeps().reset_index(drop=True)


def _appendix(sw, target, method, dataset, n):
    g = sw[(sw["target"] == target) & (sw["method"] == method) & (sw["dataset"] == dataset) & (sw["n"] == n)]
    assert len(g) == 1, (target, method, dataset, n)
    return float(g["throughput_ratio"].iloc[0])


# ------------------------------------------------------------------------------ honest split


def _perturb_held_out(df: pd.DataFrame, mask: np.ndarray, seed: int = 0) -> pd.DataFrame:
    """Scramble everything the held-out rows carry: published ratio, baseline tok/s, MAL."""
    rng = np.random.default_rng(seed)
    out = df.copy()
    held = ~mask
    k = int(held.sum())
    out.loc[held, "throughput_ratio"] = out.loc[held, "throughput_ratio"] * rng.uniform(0.5, 2.0, k)
    out.loc[held, "baseline_output_tok_per_s"] = out.loc[held, "baseline_output_tok_per_s"] * rng.uniform(0.5, 2.0, k)
    mal = out.loc[held, "mean_acceptance_length"]
    out.loc[held, "mean_acceptance_length"] = 1.0 + (mal - 1.0) * rng.uniform(0.5, 1.0, k)
    return out


def test_split_masks_partition_the_appendix(sweeps):
    m = _split_mask(sweeps, "dataset", "GSM8K")
    assert set(sweeps.loc[m, "dataset"]) == {"GSM8K"}
    assert set(sweeps.loc[~m, "dataset"]) == {"MATH500", "HumanEval", "MBPP"}
    m = _split_mask(sweeps, "target", "Qwen3-8B")
    assert set(sweeps.loc[~m, "target"]) == {"Qwen3-8B"} and "Qwen3-8B" not in set(sweeps.loc[m, "target"])


@pytest.mark.parametrize("concurrency", [16, 32])
def test_fit_ignores_held_out_rows_and_sees_fit_rows(sweeps, concurrency):
    """Perturbing every held-out row leaves the fitted params AND the fit loss (which chooses the
    concurrency) bit-identical; perturbing one fit row changes them (so the check can fail)."""
    mask = _split_mask(sweeps, "dataset", "GSM8K")
    p0, loss0 = fit_stack(sweeps, mask, concurrency=concurrency)
    p1, loss1 = fit_stack(_perturb_held_out(sweeps, mask), mask, concurrency=concurrency)
    assert p1 == p0 and p1.per_target == p0.per_target
    assert loss1 == loss0
    fit_idx = np.flatnonzero(mask)[3]
    bad = sweeps.copy()
    bad.loc[fit_idx, "throughput_ratio"] *= 1.5
    p2, loss2 = fit_stack(bad, mask, concurrency=concurrency)
    assert (p2 != p0 or p2.per_target != p0.per_target) and loss2 != loss0


def test_reproduce_held_out_perturbation_changes_only_their_errors(rep, sweeps):
    c = rep.params.concurrency
    mask = _split_mask(sweeps, "dataset", "GSM8K")
    a = reproduce("dataset", "GSM8K", concurrency=c, df=sweeps)
    pert = _perturb_held_out(sweeps, mask, seed=1)
    pert["mean_acceptance_length"] = sweeps["mean_acceptance_length"]  # keep the held-out inputs, scramble targets
    b = reproduce("dataset", "GSM8K", concurrency=c, df=pert)
    assert b.params == a.params
    np.testing.assert_array_equal(b.table["predicted_throughput_ratio"], a.table["predicted_throughput_ratio"])
    fit = a.table["role"] == "fit"
    np.testing.assert_array_equal(b.table.loc[fit, "rel_error"], a.table.loc[fit, "rel_error"])
    assert not np.allclose(b.table.loc[~fit, "rel_error"], a.table.loc[~fit, "rel_error"])
    assert b.summary["fit_median_abs_rel_error"] == a.summary["fit_median_abs_rel_error"]


def test_roles_and_concurrency_choice(rep):
    t = rep.table
    assert set(t.loc[t["role"] == "fit", "dataset"]) == {"GSM8K"}
    assert set(t.loc[t["role"] == "held_out", "dataset"]) == {"MATH500", "HumanEval", "MBPP"}
    # the chosen concurrency is the refit with the lowest FIT loss (not the best held-out error)
    s = rep.sensitivity
    assert rep.params.concurrency == int(s.loc[s["fit_loss_rms_log"].idxmin(), "assumed_concurrency"])
    assert rep.summary["concurrency_assumed"] == rep.params.concurrency


# ------------------------------------------------------------------------------ metrics


def test_held_out_metrics_use_held_out_rows_only(rep):
    t = rep.table
    held = t[t["role"] == "held_out"]
    err = (held["predicted_throughput_ratio"] / held["throughput_ratio"] - 1.0).abs()
    s = rep.summary
    assert s["held_out_rows"] == len(held) == 192
    assert s["held_out_median_abs_rel_error"] == pytest.approx(float(np.median(err)), rel=1e-12)
    assert s["held_out_max_abs_rel_error"] == pytest.approx(float(err.max()), rel=1e-12)


def test_error_summary_on_constructed_table():
    """Fit rows with huge errors must not leak into the held-out numbers."""
    t = pd.DataFrame({
        "role": ["fit", "fit", "held_out", "held_out", "held_out", "held_out"],
        "rel_error": [5.0, -9.0, 0.10, -0.20, 0.05, -0.40],
    })
    best = pd.DataFrame({"role": ["fit", "held_out", "held_out"], "exact": [False, True, False],
                         "within_one_step": [False, True, True]})
    s = _error_summary(t, best)
    assert s["held_out_rows"] == 4
    assert s["held_out_median_abs_rel_error"] == pytest.approx(0.15)   # median of 0.05, 0.10, 0.20, 0.40
    assert s["held_out_max_abs_rel_error"] == pytest.approx(0.40)
    assert s["held_out_best_n_exact"] == "1/2"
    assert s["held_out_best_n_within_one_step"] == "2/2"
    assert s["fit_median_abs_rel_error"] == pytest.approx(7.0)


def test_best_n_table_on_constructed_table():
    rows = []
    # sweep A (grid 3,7,11,15): published best 7, predicted best 11 -> one grid step apart
    for n, pub, pred in [(3, 1.5, 1.4), (7, 2.0, 1.9), (11, 1.8, 2.1), (15, 1.6, 1.7)]:
        rows.append(("T", "dflash", "MATH500", "held_out", n, pub, pred))
    # sweep B (grid 1..5): published best 2, predicted best 5 -> three steps apart
    for n, pub, pred in [(1, 1.2, 1.1), (2, 1.6, 1.3), (3, 1.5, 1.4), (4, 1.4, 1.5), (5, 1.3, 1.6)]:
        rows.append(("T", "eagle3", "GSM8K", "fit", n, pub, pred))
    # sweep C: exact agreement
    for n, pub, pred in [(1, 1.1, 1.0), (2, 1.3, 1.2), (3, 1.2, 1.1)]:
        rows.append(("U", "mtp", "MBPP", "held_out", n, pub, pred))
    t = pd.DataFrame(rows, columns=["target", "method", "dataset", "role", "n", "throughput_ratio",
                                    "predicted_throughput_ratio"]).sample(frac=1.0, random_state=3)  # order-free
    b = _best_n_table(t).set_index(["target", "method", "dataset"])
    a = b.loc[("T", "dflash", "MATH500")]
    assert (a["best_n_published"], a["best_n_predicted"], a["exact"], a["within_one_step"]) == (7, 11, False, True)
    assert a["ratio_at_published_best_predicted"] == pytest.approx(1.9)
    assert a["best_ratio_published"] == pytest.approx(2.0) and a["best_ratio_predicted"] == pytest.approx(2.1)
    bb = b.loc[("T", "eagle3", "GSM8K")]
    assert (bb["best_n_published"], bb["best_n_predicted"], bb["exact"], bb["within_one_step"]) == (2, 5, False, False)
    assert bb["role"] == "fit"
    c = b.loc[("U", "mtp", "MBPP")]
    assert (c["best_n_published"], c["best_n_predicted"], c["exact"], c["within_one_step"]) == (2, 2, True, True)


# ------------------------------------------------------------------------------ seed table


def test_appendix_numbers_behind_the_seed_table(sweeps):
    """specsim/data/published/amd_specdec_best.csv: the summary table disagrees with the appendix in three rows."""
    # Gemma 4 MTP on gemma-4-26B: summary says MATH500 2.74x at N=5; 2.74x is GSM8K N=5, MATH500 N=5 is 2.83x
    assert _appendix(sweeps, "gemma-4-26B-A4B-it", "mtp_gemma4_assistant", "GSM8K", 5) == 2.74
    assert _appendix(sweeps, "gemma-4-26B-A4B-it", "mtp_gemma4_assistant", "MATH500", 5) == 2.83
    # EAGLE-3 on gemma-4-26B: summary says GSM8K 2.27x at N=5; 2.27x is MATH500 N=4; GSM8K best is 2.16x at N=3-4
    assert _appendix(sweeps, "gemma-4-26B-A4B-it", "eagle3", "MATH500", 4) == 2.27
    assert _appendix(sweeps, "gemma-4-26B-A4B-it", "eagle3", "GSM8K", 3) == 2.16
    assert _appendix(sweeps, "gemma-4-26B-A4B-it", "eagle3", "GSM8K", 4) == 2.16
    g = sweeps[(sweeps["target"] == "gemma-4-26B-A4B-it") & (sweeps["method"] == "eagle3")
               & (sweeps["dataset"] == "GSM8K")]
    assert g["throughput_ratio"].max() == 2.16
    # gemma-4-31B DFlash MATH500 N=7: summary 2.41x, appendix 2.34x
    assert _appendix(sweeps, "gemma-4-31B-it", "dflash", "MATH500", 7) == 2.34


def test_seed_table_check_reports_summary_and_appendix(rep, sweeps):
    s = seed_table_check(rep).set_index(["target", "method", "dataset"])
    assert len(s) == 7
    r = s.loc[("gemma-4-26B-A4B-it", "mtp_gemma4_assistant", "MATH500")]
    assert (r["summary_ratio"], r["appendix_ratio"], r["summary_best_n"], r["appendix_best_n"]) == (2.74, 2.83, 5, 5)
    r = s.loc[("gemma-4-26B-A4B-it", "eagle3", "GSM8K")]
    assert (r["summary_ratio"], r["appendix_ratio"], r["summary_best_n"]) == (2.27, 2.16, 5)
    assert r["appendix_best_n"] in (3, 4)
    r = s.loc[("gemma-4-31B-it", "dflash", "MATH500")]
    assert (r["summary_ratio"], r["appendix_ratio"]) == (2.41, 2.34)
    agree = {("gemma-4-26B-A4B-it", "dflash", "MATH500"): (7, 2.87), ("Qwen3-8B", "dspark", "GSM8K"): (7, 1.63),
             ("Qwen3.6-35B-A3B", "dflash", "MATH500"): (7, 2.06), ("Kimi-K2.5", "dflash", "GSM8K"): (7, 2.37)}
    for key, (n, ratio) in agree.items():
        r = s.loc[key]
        assert (r["summary_best_n"], r["summary_ratio"]) == (n, ratio)
        assert (r["appendix_best_n"], r["appendix_ratio"]) == (n, ratio), key
    # the model columns are the model's best over the published grid (independent recomputation)
    t = rep.table
    for key, r in s.iterrows():
        g = t[(t["target"] == key[0]) & (t["method"] == key[1]) & (t["dataset"] == key[2])]
        assert r["predicted_ratio"] == pytest.approx(g["predicted_throughput_ratio"].max(), rel=1e-12)
        assert r["predicted_best_n"] == int(g.loc[g["predicted_throughput_ratio"].idxmax(), "n"])
        assert r["role"] == ("fit" if key[2] == "GSM8K" else "held_out")


# ------------------------------------------------------------------------------ regression guards


def test_held_out_median_error_regression_guard(rep):
    """Tolerance 0.15 on the held-out median |predicted/published - 1|.

    Why 0.15: the fit itself leaves ~5-8 % RMS on its own GSM8K rows (an analytical roofline
    with five global + two per-target parameters against 64 measured ratios), and the held-out
    datasets differ only in acceptance and (assumed) ISL/OSL, so a working reproduction lands
    near 0.08; 0.15 is about twice that -- a guard against regressions (a broken split, a unit
    error, a drafter cost off by a factor), not a claim of accuracy.  The real numbers are
    reported in data/reproduction/summary.json and the notebook.
    """
    assert rep.summary["held_out_median_abs_rel_error"] < 0.15


def test_held_out_best_n_regression_guard(rep):
    """At least 80 % of the 42 (target, method, dataset) sweeps: predicted best N within one step of
    the published grid (e.g. 7 vs 11 on 3/7/11/15).  Flat optima make the exact argmax fragile
    (several sweeps have near-ties within 1 %), so the guard is on the one-step agreement."""
    b = rep.best_n[rep.best_n["role"] == "held_out"]
    assert len(b) == 42
    assert b["within_one_step"].mean() >= 0.8


# ------------------------------------------------------------------------------ MI355X EAGLE-3


@pytest.fixture(scope="module")
def mi355x(rep):
    return mi355x_eagle3_curves(rep.params, concurrencies=(1, 2, 4, 8, 16, 32, 64, 128))


def test_mi355x_curves_cover_the_published_cases(mi355x):
    from specsim.catalog import data_path

    pub = pd.read_csv(data_path("published", "amd_eagle3_mi355x.csv"))
    keys = set(zip(mi355x["target"], mi355x["draft_model"]))
    want = {(m.split("/")[-1].replace("-MXFP4", ""), d) for m, d in zip(pub["target_model"], pub["draft_model"])}
    assert keys == want
    assert (mi355x["num_speculative_tokens"] == 3).all() and (mi355x["tp"] == 4).all()
    # MAL at N=3 from the published MiniMax-M3 cumulative acceptance 0.75/0.55/0.41: 1 + 1.71
    mm = mi355x[mi355x["target"] == "MiniMax-M2.5"]
    assert np.allclose(mm["mal"], 1 + 0.75 + 0.55 + 0.41)


_MI355X_SHAPE = (
    "MODEL DISCREPANCY: amd-eagle3-post says the EAGLE-3 gain on MI355X is largest at low concurrency "
    "(MiniMax-M2.5: 1.79x at 4 -> 1.38x at 64; Kimi-K2.5 1.90 -> 1.69 / 2.00 -> 1.76). The model "
    "transfers the MI300X appendix fit, made at ONE (assumed) concurrency: there the appendix cannot "
    "split a target's step into fixed cost and expert-read cost (Kimi-K2.5: fixed_s ~0.13 s per "
    "forward), so how the step grows with concurrency is not identified; and the uniform-routing "
    "expert-touch term makes verifying C*(N+1) tokens read several times the experts of C tokens at "
    "low C. Kimi-K2.5 comes out flat / U-shaped (~2.3-2.4x); MiniMax-M2.5 (never fitted: medians of "
    "the fitted MoE targets, incl. the appendix stack's ~19 ms per-step speculative overhead) rises "
    "from 0.8x to 1.2x.")


@pytest.mark.xfail(strict=True, reason=_MI355X_SHAPE)
@pytest.mark.parametrize("target", ["MiniMax-M2.5", "Kimi-K2.5"])
def test_mi355x_gain_largest_at_low_concurrency(mi355x, target):
    """Published: 'largest gain at low concurrency' (MiniMax-M2.5 over concurrency 4..64; the Kimi
    range's concurrencies are not published, the same 4..64 harness is assumed)."""
    g = mi355x[(mi355x["target"] == target) & mi355x["concurrency"].between(4, 64)]
    for _, c in g.groupby("draft_precision"):
        r = c.sort_values("concurrency")["predicted_throughput_ratio"].to_numpy()
        assert np.all(np.diff(r) < 0), r


# ------------------------------------------------------------------------------ figure helpers


def test_model_curve_reproduces_the_table(rep):
    """curves.model_curve (the curves drawn) at each row's N with the row's OWN acceptance equals the
    reproduction's prediction for that row (two code paths: _eval_groups vs model_curve)."""
    from specsim.acceptance import Acceptance

    t = rep.table
    for _, row in t.groupby(["target", "method", "dataset"]).head(1).iterrows():
        g = t[(t["target"] == row["target"]) & (t["method"] == row["method"]) & (t["dataset"] == row["dataset"])]
        for _, r in g.iterrows():
            acc = Acceptance.from_rates(r["per_position_acceptance_cumulative"], kind="cumulative")
            kw = dict(n_values=[int(r["n"])], tp=int(r["tp"]), hardware=r["hardware"], isl=int(r["isl"]),
                      osl=int(r["osl"]))
            c = model_curve(rep.params, r["target"], r["method"], acc, mal=r["mean_acceptance_length"], **kw)
            assert c["predicted_throughput_ratio"].iloc[0] == pytest.approx(r["predicted_throughput_ratio"], rel=1e-9)
            # without the override the curve uses 1 + sum(p_k): the published MAL up to rounding
            c2 = model_curve(rep.params, r["target"], r["method"], acc, **kw)
            assert c2["mal"].iloc[0] == pytest.approx(r["mean_acceptance_length"], abs=0.0105)
            assert c2["predicted_throughput_ratio"].iloc[0] == pytest.approx(r["predicted_throughput_ratio"], rel=0.01)


def test_sweep_curves_extrapolation_flags_and_published_points(rep):
    cv = sweep_curves(rep)
    assert len(cv) == 56 * 15
    for (tgt, meth, ds), g in cv.groupby(["target", "method", "dataset"]):
        nmax = int(g["acceptance_n"].iloc[0])
        np.testing.assert_array_equal(g["acceptance_extrapolated"].to_numpy(), g["n"].to_numpy() > nmax)
        pub = rep.table[(rep.table["target"] == tgt) & (rep.table["method"] == meth) & (rep.table["dataset"] == ds)]
        assert nmax == pub["n"].max()
        got = g.dropna(subset=["published_throughput_ratio"]).set_index("n")["published_throughput_ratio"]
        assert got.to_dict() == pub.set_index("n")["throughput_ratio"].to_dict()
        # at the row whose acceptance the curve uses, the curve is that row's prediction
        last = pub.loc[pub["n"].idxmax()]
        # (up to the published MAL's rounding: the curve uses 1 + sum of the published p_k)
        assert g.loc[g["n"] == nmax, "predicted_throughput_ratio"].iloc[0] == pytest.approx(
            last["predicted_throughput_ratio"], rel=0.01)


def test_ratio_figure_labels_fit_and_held_out_and_dashes_extrapolation(rep):
    cv = sweep_curves(rep)
    fig = ratio_vs_n_figure(rep, cv, "gemma-4-26B-A4B-it")
    axes = fig.axes
    titles = [ax.get_title() for ax in axes]
    assert titles[0].startswith("GSM8K (fit)")
    assert all("(held out)" in t for t in titles[1:]) and len(titles) == 4
    assert "fitted on the GSM8K rows" in fig._suptitle.get_text()
    for ax in axes:
        dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        # Gemma 4 MTP and EAGLE-3 are measured to N=5: their curves continue dashed to 15;
        # DFlash is measured to N=15: no dashed part
        assert len(dashed) == 2
        assert all(float(np.min(ln.get_xdata())) == 5 and float(np.max(ln.get_xdata())) == 15 for ln in dashed)
        assert "num_speculative_tokens" in ax.get_xlabel()


def test_figures_are_deterministic_pngs(rep):
    def png(fig):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
        return buf.getvalue()

    a, b = png(parity_figure(rep)), png(parity_figure(rep))
    assert a[:8] == b"\x89PNG\r\n\x1a\n" and a == b
    fig = parity_figure(rep)
    ax = fig.axes[0]
    assert "held out" in ax.get_title() and "fit" in ax.get_title()
    assert "predicted" in ax.get_ylabel() and "published" in ax.get_xlabel()


# ------------------------------------------------------------------------------ unfitted targets


def test_unfitted_target_gets_medians_of_its_kind():
    """StackParams.for_target: a fitted target gets its own values; an unfitted one the medians
    over the fitted targets of the same kind (MoE / dense, from specsim/data/models), else over all."""
    pt = {
        "gemma-4-26B-A4B-it": {"compute": 0.10, "fixed_s": 1e-3},   # MoE
        "Qwen3.6-35B-A3B": {"compute": 0.04, "fixed_s": 3e-3},      # MoE
        "Kimi-K2.5": {"compute": 0.06, "fixed_s": 9e-3},            # MoE
        "Qwen3-8B": {"compute": 0.30, "fixed_s": 2e-3},             # dense
        "gemma-4-31B-it": {"compute": 0.20, "fixed_s": 4e-3},       # dense
    }
    p = StackParams(per_target=pt)
    assert p.for_target("Kimi-K2.5").compute == 0.06
    moe = p.for_target("MiniMax-M2.5")  # not fitted, MoE in specsim/data/models
    assert (moe.compute, moe.fixed_s) == (0.06, 3e-3)
    dense = p.for_target("Llama-3.1-8B-Instruct")
    assert dense.compute == pytest.approx(0.25) and dense.fixed_s == pytest.approx(3e-3)
    unknown = p.for_target("no-such-model")  # kind unknown: all five
    assert (unknown.compute, unknown.fixed_s) == (0.10, 3e-3)
    assert p.for_target("no-such-model", is_moe=True).compute == 0.06


def test_shipped_calibration_applies_kind_medians_in_predict():
    """specsim/data/calibration/MI300X.json carries per-target values and per-kind medians; predict() on an
    unfitted MoE target uses the MoE medians (compute efficiency, fixed cost, speculative overhead),
    on a fitted target its own values."""
    from specsim.calibration import default_latency, load_calibration
    from specsim.engine import default_overhead
    from specsim.hardware import load_hardware

    cal = load_calibration("MI300X")
    assert set(cal["per_kind"]) == {"moe", "dense"}
    hw = load_hardware("MI300X")
    moe = cal["per_kind"]["moe"]
    lat = default_latency(hw, "MiniMax-M2.5", is_moe=True)
    assert lat.efficiency.compute == moe["compute"] and lat.efficiency.fixed_s == moe["fixed_s"]
    assert default_overhead(lat).fixed_s == moe["spec_fixed_s"]
    own = cal["per_target"]["Qwen3-8B"]
    lat8 = default_latency(hw, "Qwen3-8B", is_moe=False)
    assert lat8.efficiency.compute == own["compute"] and default_overhead(lat8).fixed_s == own["spec_fixed_s"]
    # predict() passes the kind: the MoE medians move an unfitted MoE target's step time
    from specsim import predict

    a = predict("MiniMax-M2.5", "eagle3", 3, hardware="MI300X", tp=4, acceptance=0.7, concurrency=8)
    b = predict("MiniMax-M2.5", "eagle3", 3, hardware="MI300X", tp=4, acceptance=0.7, concurrency=8,
                latency=default_latency(hw, "MiniMax-M2.5", is_moe=True))
    assert a.throughput_ratio == pytest.approx(b.throughput_ratio, rel=1e-12)


def test_parameter_table_shows_only_what_is_used(rep):
    """The notebook's parameter table: per-target parameters appear per fitted target and as the
    per-kind medians (the values specsim/data/calibration ships), never as unused global defaults."""
    from specsim.calibration import load_calibration
    from specsim.studies.reproduce import PER_TARGET_PARAMS, parameter_table

    t = parameter_table(rep.params)
    assert t.loc["global", list(PER_TARGET_PARAMS)].isna().all()
    assert t.loc["global", "bandwidth"] == rep.params.bandwidth
    assert set(t.index) == {"global", "median: moe", "median: dense", *rep.params.per_target}
    cal = load_calibration("MI300X")
    for kind in ("moe", "dense"):
        for k, v in cal["per_kind"][kind].items():
            assert t.loc[f"median: {kind}", k] == pytest.approx(v, rel=1e-9)
