"""The reproduction of the published tables (specsim.studies.reproduce), its curves (specsim.studies.curves)
and its figures (specsim.plots.reproduction).

What is checked:
* the headline is leave-one-target-out: nothing about a target's published rows (ratio, baseline
  tok/s) reaches the terms or the concurrency that predict it, while the other targets' rows do;
* the secondary dataset split is honest the same way;
* the shipped calibration has exactly the documented physical terms, a schema version and its
  stack -- no per-target values;
* the fit's vectorised evaluation is the same model as ``specsim.engine.evaluate`` (what predict() uses);
* held-out error metrics, the nested interval coverage and the goals are computed as stated;
* the MI355X EAGLE-3 transfer prediction against the published concurrency trend;
* the figure helpers reproduce the reproduction's numbers and label fit / held-out.
"""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

from specsim.engine import STACK_TERMS, Scenario, evaluate
from specsim.plots.reproduction import parity_figure, ratio_vs_n_figure
from specsim.published import load_sweeps
from specsim.studies.curves import default_reproduction, model_curve, sweep_curves
from specsim.studies.reproduce import (
    FIT_TERMS,
    GOALS,
    _SCALE,
    AppendixPlans,
    _best_n_table,
    _error_summary,
    _split_mask,
    fit_stack,
    loto_study,
    mi355x_eagle3_curves,
    reproduce,
    seed_table_check,
)


@pytest.fixture(scope="module")
def rep():
    """The headline reproduction (leave-one-target-out), computed once."""
    return default_reproduction()


@pytest.fixture(scope="module")
def sweeps():
    return load_sweeps().reset_index(drop=True)


@pytest.fixture(scope="module")
def ds_rep():
    """The secondary split: fit on GSM8K of every target, the other datasets held out."""
    return reproduce("dataset", "GSM8K")


def _appendix(sw, target, method, dataset, n):
    g = sw[(sw["target"] == target) & (sw["method"] == method) & (sw["dataset"] == dataset) & (sw["n"] == n)]
    assert len(g) == 1, (target, method, dataset, n)
    return float(g["throughput_ratio"].iloc[0])


# ------------------------------------------------------------------------------ honest split


def _perturb(df: pd.DataFrame, rows: np.ndarray, seed: int = 0, mal: bool = True) -> pd.DataFrame:
    """Scramble what ``rows`` carry: published ratio, baseline tok/s (and MAL when ``mal``)."""
    rng = np.random.default_rng(seed)
    out = df.copy()
    k = int(rows.sum())
    out.loc[rows, "throughput_ratio"] = out.loc[rows, "throughput_ratio"] * rng.uniform(0.5, 2.0, k)
    out.loc[rows, "baseline_output_tok_per_s"] = out.loc[rows, "baseline_output_tok_per_s"] * rng.uniform(0.5, 2.0, k)
    if mal:
        m = out.loc[rows, "mean_acceptance_length"]
        out.loc[rows, "mean_acceptance_length"] = 1.0 + (m - 1.0) * rng.uniform(0.5, 1.0, k)
    return out


def test_split_masks_partition_the_appendix(sweeps):
    m = _split_mask(sweeps, "dataset", "GSM8K")
    assert set(sweeps.loc[m, "dataset"]) == {"GSM8K"}
    assert set(sweeps.loc[~m, "dataset"]) == {"MATH500", "HumanEval", "MBPP"}
    m = _split_mask(sweeps, "target", "Qwen3-8B")
    assert set(sweeps.loc[~m, "target"]) == {"Qwen3-8B"} and "Qwen3-8B" not in set(sweeps.loc[m, "target"])
    assert _split_mask(sweeps, "all").all()


def test_fit_ignores_held_out_rows_and_sees_fit_rows(sweeps):
    """Perturbing every held-out row leaves the fitted terms AND the fit loss (which chooses the
    concurrency) bit-identical; perturbing one fit row changes them (so the check can fail)."""
    mask = _split_mask(sweeps, "dataset", "GSM8K")
    p0, loss0 = fit_stack(sweeps, mask, concurrency=32)
    p1, loss1 = fit_stack(_perturb(sweeps, ~mask), mask, concurrency=32)
    assert p1.terms == p0.terms and loss1 == loss0
    bad = sweeps.copy()
    bad.loc[np.flatnonzero(mask)[3], "throughput_ratio"] *= 1.5
    p2, loss2 = fit_stack(bad, mask, concurrency=32)
    assert p2.terms != p0.terms and loss2 != loss0


def test_fit_does_not_move_with_rounding(sweeps):
    """The fit is a function of its data, not of the rounding on the way: the published ratios times
    1 + 1e-13 (then 1 - 3e-14) and the baselines times 1 - 1e-13 (then 1 + 3e-14) -- far below what
    the terms are fitted from, as another CPU's kernels round -- move every term by at most 1e-6
    relatively; a term at its zero bound by at most 1e-9 of its fit scale (1e-12 s for seconds per
    forward).  Fitted on the hard max directly, the solver stopped on the rows at the ridge point
    wherever rounding took it, and this test failed (``bandwidth`` moved 2.4e-6); now the largest
    move is ~2e-7, what the solver's tolerance leaves (FIT_CONTINUATION_P says how it is fitted)."""
    mask = np.ones(len(sweeps), bool)
    a, loss_a = fit_stack(sweeps, mask, concurrency=64)
    for eps in (1e-13, -3e-14):
        moved = sweeps.copy()
        moved["throughput_ratio"] *= 1.0 + eps
        moved["baseline_output_tok_per_s"] *= 1.0 - eps
        b, loss_b = fit_stack(moved, mask, concurrency=64)
        for k in FIT_TERMS:
            assert b.terms[k] == pytest.approx(a.terms[k], rel=1e-6, abs=1e-9 * _SCALE[k]), (eps, k)
        assert loss_b == pytest.approx(loss_a, rel=1e-9)


def test_fit_that_runs_out_of_evaluations_warns(sweeps, monkeypatch):
    """A stage stopped by its evaluation budget returns a point its path chose: said, not silent."""
    import specsim.studies.reproduce as reproduce_module
    from specsim.errors import FitNotConvergedWarning

    monkeypatch.setattr(reproduce_module, "FIT_MAX_NFEV", 2)
    with pytest.warns(FitNotConvergedWarning, match="p = 64 roof stopped unconverged after 2 evaluations"):
        fit_stack(sweeps, np.ones(len(sweeps), bool), concurrency=64)


def test_loto_prediction_does_not_move_when_its_own_rows_move(rep, sweeps):
    """Leave-one-target-out: scrambling Qwen3-8B's published ratios and baselines leaves its
    predictions, its fold's terms and its fold's inferred concurrency unchanged; the OTHER targets'
    predictions do move (their folds saw Qwen3-8B's rows)."""
    held = (sweeps["target"] == "Qwen3-8B").to_numpy()
    b = loto_study(df=_perturb(sweeps, held, seed=2, mal=False)).rep
    a = rep
    assert b.fold_params["Qwen3-8B"].terms == a.fold_params["Qwen3-8B"].terms
    assert b.fold_params["Qwen3-8B"].concurrency == a.fold_params["Qwen3-8B"].concurrency
    np.testing.assert_array_equal(b.table.loc[held, "predicted_throughput_ratio"],
                                  a.table.loc[held, "predicted_throughput_ratio"])
    np.testing.assert_array_equal(b.table.loc[held, "predicted_baseline_tok_per_s"],
                                  a.table.loc[held, "predicted_baseline_tok_per_s"])
    assert not np.allclose(b.table.loc[~held, "predicted_throughput_ratio"],
                           a.table.loc[~held, "predicted_throughput_ratio"])


def test_every_fold_is_refitted_including_concurrency_and_dequantization(rep):
    """Each fold has its own terms; the fold without Kimi-K2.5 (the only int4 target) keeps the
    dequantization prior, the others fit it."""
    from specsim.studies.reproduce import DEQUANT_PRIOR_S_PER_WEIGHT

    f = rep.fold_params
    assert set(f) == set(rep.table["target"])
    assert len({json.dumps(p.terms, sort_keys=True) for p in f.values()}) == len(f)
    assert f["Kimi-K2.5"].terms["dequant_s_per_weight"] == DEQUANT_PRIOR_S_PER_WEIGHT
    assert "prior" in f["Kimi-K2.5"].term_sources["dequant_s_per_weight"]
    assert all(f[t].terms["dequant_s_per_weight"] != DEQUANT_PRIOR_S_PER_WEIGHT for t in f if t != "Kimi-K2.5")
    fc = rep.summary["fold_concurrency"]
    assert {t: p.concurrency for t, p in f.items()} == fc
    np.testing.assert_array_equal(rep.table["fold_concurrency"], rep.table["target"].map(fc))
    assert (rep.table["role"] == "held_out").all()


def test_dataset_split_roles_and_concurrency_choice(ds_rep):
    t = ds_rep.table
    assert set(t.loc[t["role"] == "fit", "dataset"]) == {"GSM8K"}
    assert set(t.loc[t["role"] == "held_out", "dataset"]) == {"MATH500", "HumanEval", "MBPP"}
    # the chosen concurrency is the refit with the lowest FIT loss (not the best held-out error)
    s = ds_rep.sensitivity
    assert ds_rep.params.concurrency == int(s.loc[s["fit_loss_rms_log"].idxmin(), "assumed_concurrency"])
    assert ds_rep.summary["concurrency_assumed"] == ds_rep.params.concurrency


# ------------------------------------------------------------------------------ one model


def test_fit_evaluation_is_the_engine_model(rep, sweeps):
    """AppendixPlans.predict (the fit's vectorised counts x terms) equals specsim.engine.evaluate with
    the same terms as a Roofline + SpecOverhead, row by row (what predict() evaluates)."""
    from specsim.architecture import load_model
    from specsim.drafters import get_drafter
    from specsim.hardware import load_hardware
    from specsim.published import PUBLISHED_METHODS

    p = rep.params
    pred = AppendixPlans(sweeps).predict(p)
    for (tgt, meth), g in sweeps.groupby(["target", "method"]):
        spec = load_model(tgt)
        vm, dm = PUBLISHED_METHODS[meth]
        d = get_drafter(vm, draft_model=dm.format(target=tgt) if dm else None, target=spec)
        hw = load_hardware("MI300X")
        r = Scenario(target=spec, drafter=d, latency=p.latency(hw), hardware_name=hw.name, method=vm)
        out = evaluate(r, g["n"].to_numpy(), p.concurrency, g["isl"].to_numpy(), g["osl"].to_numpy(),
                       int(g["tp"].iloc[0]), p.overhead(), mal=g["mean_acceptance_length"].to_numpy(float))
        np.testing.assert_allclose(out["throughput_ratio"], pred.loc[g.index, "predicted_throughput_ratio"], rtol=1e-12)
        np.testing.assert_allclose(out["baseline_output_tok_per_s"], pred.loc[g.index, "predicted_baseline_tok_per_s"],
                                   rtol=1e-12)


def test_shipped_calibration_has_exactly_the_documented_terms():
    """specsim/data/calibration/*.json: schema version, stack, ``terms`` == the documented physical
    terms (no per-target, per-family or per-kind key anywhere), a source for every term."""
    from specsim.calibration import SCHEMA_VERSION, TERMS, load_calibration

    for hw in ("MI300X", "MI325X", "MI350X", "MI355X", "H100 SXM", "H200 SXM", "B200 SXM", "A100 80GB SXM"):
        cal = load_calibration(hw)
        assert cal is not None, hw
        assert cal["schema_version"] == SCHEMA_VERSION
        assert set(cal["terms"]) == set(TERMS) == set(STACK_TERMS)
        assert set(cal["term_sources"]) == set(TERMS) and all(cal["term_sources"].values())
        assert {"vllm", "platform"} <= set(cal["stack"])
        keys = [k for k in _all_keys(cal) if k not in TERMS]  # the documented terms themselves (moe_pad_tokens)
        for bad in ("per_target", "per_kind", "Qwen", "Kimi", "gemma", "MiniMax", "Llama", "moe", "dense"):
            assert not any(bad.lower() in k.lower() for k in keys), (hw, bad)
        # MI300X: fitted on the appendix; B200: on the P-EAGLE concurrency sweeps; MI355X: its own
        # (specsim.studies.reproduce.mi355x_params); the others transferred from the fit of their vendor stack
        fitted = hw in ("MI300X", "B200 SXM", "MI355X")
        assert cal["calibrated"] == fitted
        want = {"MI325X": "MI300X", "MI350X": "MI355X", "H100 SXM": "B200 SXM", "H200 SXM": "B200 SXM",
                "A100 80GB SXM": "B200 SXM"}.get(hw)
        assert cal.get("transferred_from") == want


def _all_keys(d) -> list[str]:
    if isinstance(d, dict):
        return [str(k) for k in d] + [k for v in d.values() for k in _all_keys(v)]
    if isinstance(d, list):
        return [k for v in d for k in _all_keys(v)]
    return []


def test_a_calibration_with_another_key_or_schema_is_refused(tmp_path, monkeypatch):
    from specsim import calibration as C
    from specsim.errors import DataError
    from specsim.hardware import load_hardware

    cal = C.load_calibration("MI300X")
    cal.pop("_path")
    for mutate in (lambda d: d["terms"].update({"Qwen3-8B_fixed_s": 0.01}),
                   lambda d: d.update(schema_version=1)):
        d = json.loads(json.dumps(cal))
        mutate(d)
        (tmp_path / "MI300X.json").write_text(json.dumps(d))
        monkeypatch.setenv("SPECSIM_DATA", str(tmp_path.parent))
        monkeypatch.setattr(C, "data_path", lambda *a: tmp_path)
        C._calibration_files.cache_clear()
        C._read_calibration.cache_clear()
        with pytest.raises(DataError):
            C.default_latency(load_hardware("MI300X"))
    C._calibration_files.cache_clear()
    C._read_calibration.cache_clear()


def test_stack_mismatch_warns_for_another_vllm_release():
    from specsim.calibration import default_latency, stack_mismatch
    from specsim.hardware import load_hardware

    rec = default_latency(load_hardware("MI300X")).calibration
    assert stack_mismatch(rec, vllm_version="0.23.0") is None
    assert stack_mismatch(rec) is None
    w = stack_mismatch(rec, vllm_version="0.32.0")
    assert w and "0.32.0" in w and "0.23" in w
    assert stack_mismatch(rec, platform="CUDA 12.8") and stack_mismatch(rec, platform="ROCm 7.2") is None


# ------------------------------------------------------------------------------ metrics


def test_held_out_metrics_and_goals_are_computed_as_stated(rep):
    t = rep.table
    err = (t["predicted_throughput_ratio"] / t["throughput_ratio"] - 1.0).abs()
    s = rep.summary
    assert s["held_out_rows"] == len(t) == 256
    assert s["measured"]["ratio_median_abs_rel_error"] == pytest.approx(float(np.median(err)), rel=1e-12)
    assert s["measured"]["ratio_max_abs_rel_error"] == pytest.approx(float(err.max()), rel=1e-12)
    base = t.drop_duplicates(["target", "dataset"])
    berr = (base["predicted_baseline_tok_per_s"] / base["baseline_output_tok_per_s"] - 1).abs()
    assert s["measured"]["baseline_median_abs_rel_error"] == pytest.approx(float(berr.median()), rel=1e-12)
    block = (t["target"] == "Qwen3-8B") & (t["dataset"] == "MATH500")
    assert s["measured"]["qwen3_8b_math500_block_max_abs_rel_error"] == pytest.approx(float(err[block].max()))
    assert s["measured"]["ratio_max_abs_rel_error_without_qwen3_8b_math500"] == pytest.approx(float(err[~block].max()))
    m = s["measured"]
    assert s["goal_met"]["ratio_median_abs_rel_error"] == (m["ratio_median_abs_rel_error"] <= 0.05)
    assert s["goal_met"]["ratio_max_abs_rel_error"] == (m["ratio_max_abs_rel_error"] <= 0.15)
    assert s["goal_met"]["baseline_median_abs_rel_error"] == (m["baseline_median_abs_rel_error"] <= 0.10)
    assert s["goal_met"]["best_n_within_one_step_fraction"] == (m["best_n_within_one_step_fraction"] >= 0.90)
    assert s["goal_met"]["interval_90_coverage"] == (0.85 <= m["interval_90_coverage"] <= 0.95)
    assert GOALS["ratio_median_abs_rel_error"] == 0.05  # the goal, not loosened


def test_nested_interval_width_comes_from_the_other_targets(rep):
    t = rep.table
    logerr = np.abs(np.log(t["predicted_throughput_ratio"] / t["throughput_ratio"]))
    for tgt in t["target"].unique():
        held = (t["target"] == tgt).to_numpy()
        q = np.quantile(logerr[~held], 0.9)
        np.testing.assert_allclose(t.loc[held, "interval_90_hi"], t.loc[held, "predicted_throughput_ratio"] * np.exp(q))
    cov = ((t["throughput_ratio"] >= t["interval_90_lo"]) & (t["throughput_ratio"] <= t["interval_90_hi"])).mean()
    assert rep.summary["measured"]["interval_90_coverage"] == pytest.approx(cov)


def test_anchored_mode_zero_baseline_error_at_the_anchor(rep, sweeps):
    """One published baseline per held-out target (GSM8K) anchors its target time: at the anchor
    rows the anchored baseline equals the published one; the anchored ratio is reported per row."""
    from specsim.studies.reproduce import _anchor_scales, _plans_for_published

    pl = _plans_for_published()
    for tgt in ("Qwen3-8B", "Kimi-K2.5"):
        held = (sweeps["target"] == tgt).to_numpy()
        p = rep.fold_params[tgt]
        k = _anchor_scales(pl, p, sweeps, held, (sweeps["dataset"] == "GSM8K").to_numpy())
        out = pl.predict(p, target_scale=np.where(held, k, 1.0))
        at = held & (sweeps["dataset"] == "GSM8K").to_numpy()
        np.testing.assert_allclose(out.loc[at, "predicted_baseline_tok_per_s"],
                                   sweeps.loc[at, "baseline_output_tok_per_s"], rtol=1e-9)
        np.testing.assert_allclose(rep.table.loc[held, "predicted_throughput_ratio_anchored"],
                                   out.loc[held, "predicted_throughput_ratio"], rtol=1e-12)
    a = rep.summary["anchored"]
    assert a["ratio_median_abs_rel_error"] == pytest.approx(float(rep.table["rel_error_anchored"].abs().median()))


def test_error_summary_on_constructed_table():
    """Fit rows with huge errors must not leak into the held-out numbers."""
    t = pd.DataFrame({
        "target": ["A", "A", "A", "A", "B", "B"], "dataset": ["x", "y", "x", "y", "x", "x"],
        "role": ["fit", "fit", "held_out", "held_out", "held_out", "held_out"],
        "rel_error": [5.0, -9.0, 0.10, -0.20, 0.05, -0.40],
        "baseline_rel_error": [3.0, 3.0, 0.1, 0.3, -0.2, -0.2],
    })
    best = pd.DataFrame({"role": ["fit", "held_out", "held_out"], "exact": [False, True, False],
                         "within_one_step": [False, True, True]})
    s = _error_summary(t, best)
    assert s["held_out_rows"] == 4
    assert s["held_out_median_abs_rel_error"] == pytest.approx(0.15)   # median of 0.05, 0.10, 0.20, 0.40
    assert s["held_out_max_abs_rel_error"] == pytest.approx(0.40)
    assert s["held_out_baseline_median_abs_rel_error"] == pytest.approx(0.2)  # once per (target, dataset): .1 .3 .2
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


# ------------------------------------------------------------------------------ seed table


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
        assert r["role"] == "held_out"   # leave-one-target-out: every row


# ------------------------------------------------------------------------------ regression guards


def test_loto_regression_guard(rep):
    """Guards, NOT the goals (the goals and the measured values are in summary.json and the README):
    leave-one-target-out median |ratio error| < 0.25 and best N within one grid step in >= 80 % of
    the 56 sweeps.  Why 0.25: the measured median is 0.21 (0.214 before the 2026-12-07 refit); a broken
    split, a unit error or a drafter cost off by a factor moves it far above that."""
    assert rep.summary["measured"]["ratio_median_abs_rel_error"] < 0.25
    b = rep.best_n
    assert len(b) == 56
    assert b["within_one_step"].mean() >= 0.8


# ------------------------------------------------------------------------------ MI355X EAGLE-3


@pytest.fixture(scope="module")
def mi355x(rep):
    from specsim.studies.reproduce import mi355x_params

    return mi355x_eagle3_curves(mi355x_params(rep.params)[0], concurrencies=(1, 2, 4, 8, 16, 32, 64, 128))


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


@pytest.mark.parametrize("target", ["MiniMax-M2.5", "Kimi-K2.5"])
def test_mi355x_gain_largest_at_low_concurrency(mi355x, target):
    """Published: 'largest gain at low concurrency' (MiniMax-M2.5 over concurrency 4..64; the Kimi
    range's concurrencies are not published, the same 4..64 harness is assumed): the predicted gain
    at 4 is the largest over 4..64 and the one at 64 is below it."""
    g = mi355x[(mi355x["target"] == target) & mi355x["concurrency"].between(4, 64)]
    for _, c in g.groupby("draft_precision"):
        r = c.sort_values("concurrency")["predicted_throughput_ratio"].to_numpy()
        assert r[0] == r.max() and r[-1] < r[0], r


def test_mi355x_held_out_minimax_falls_at_every_step(mi355x):
    """MiniMax-M2.5 (held out: no MI355X term was fitted on it) falls at every step 4 -> 64."""
    g = mi355x[(mi355x["target"] == "MiniMax-M2.5") & mi355x["concurrency"].between(4, 64)]
    r = g.sort_values("concurrency")["predicted_throughput_ratio"].to_numpy()
    assert np.all(np.diff(r) < 0), r
    assert set(g["role"]) == {"held out (not used by any MI355X fit)"}


@pytest.mark.xfail(strict=True, reason=(
    "MODEL DISCREPANCY (issue 9, README): Kimi-K2.5 (384 experts, top-8) on MI355X dips at concurrency 16 "
    "(~1.68x) and recovers to ~1.72x at 64: verifying 4 tokens per sequence reads 74 % of the experts at "
    "c = 16 where the baseline step reads 29 %; at c = 64 both read nearly all -- the distinct-expert effect. "
    "The published range says only 'largest gain at low concurrency'; whether the real curve is monotone in "
    "between is not published."))
def test_mi355x_kimi_falls_at_every_step(mi355x):
    g = mi355x[(mi355x["target"] == "Kimi-K2.5") & mi355x["concurrency"].between(4, 64)]
    for _, c in g.groupby("draft_precision"):
        r = c.sort_values("concurrency")["predicted_throughput_ratio"].to_numpy()
        assert np.all(np.diff(r) < 0), r


@pytest.mark.parametrize("target", ["MiniMax-M2.5", "Kimi-K2.5"])
def test_mi355x_curves_inside_the_published_ranges(mi355x, target):
    """Over concurrency 4..64 the predicted ratio lies inside the published [min, max] (5 % slack for
    the published rounding and the 5-10 seeds per cell).  Kimi-K2.5 is a FIT (two MI355X speculative
    terms fitted on its range ends); MiniMax-M2.5 is held out."""
    g = mi355x[(mi355x["target"] == target) & mi355x["concurrency"].between(4, 64)]
    assert (g["predicted_throughput_ratio"] >= 0.95 * g["published_min"]).all(), g
    assert (g["predicted_throughput_ratio"] <= 1.05 * g["published_max"]).all(), g


def test_mi355x_calibration_is_its_own_and_states_what_was_transferred():
    """MI355X: dimensionless and host-side terms from the MI300X fit (host x the EPYC factor), GPU-side
    seconds at priors (never MI300X absolute GPU seconds), two speculative terms fitted on Kimi-K2.5."""
    from specsim.calibration import load_calibration
    from specsim.studies.reproduce import GPU_PRIORS, MI355X_FIT_TERMS

    cal = load_calibration("MI355X")
    mi3 = load_calibration("MI300X")
    for k, v in GPU_PRIORS.items():
        assert cal["terms"][k] == v and "prior" in cal["term_sources"][k]
    for k in ("bandwidth", "compute", "moe_pad_tokens"):
        assert cal["terms"][k] == mi3["terms"][k]
    assert cal["terms"]["host_step_s"] == pytest.approx(mi3["terms"]["host_step_s"] * 3.7 / 5.0)
    for k in MI355X_FIT_TERMS:
        assert "Kimi-K2.5" in cal["term_sources"][k] and "MiniMax-M2.5 held out" in cal["term_sources"][k]
    assert cal["calibrated"] is True and "transferred_from" not in cal


# ------------------------------------------------------------------------------ figure helpers


def test_model_curve_reproduces_the_table(rep):
    """curves.model_curve (the curves drawn) at each row's N with the row's OWN acceptance equals the
    reproduction's prediction for that row (two code paths: the fit's plans vs model_curve)."""
    from specsim.acceptance import Acceptance

    t = rep.table
    for _, row in t.groupby(["target", "method", "dataset"]).head(1).iterrows():
        g = t[(t["target"] == row["target"]) & (t["method"] == row["method"]) & (t["dataset"] == row["dataset"])]
        p = rep.params_for(row["target"])
        for _, r in g.iterrows():
            acc = Acceptance.from_rates(r["per_position_acceptance_cumulative"], kind="cumulative")
            kw = dict(n_values=[int(r["n"])], tp=int(r["tp"]), hardware=r["hardware"], isl=int(r["isl"]),
                      osl=int(r["osl"]))
            c = model_curve(p, r["target"], r["method"], acc, mal=r["mean_acceptance_length"], **kw)
            assert c["predicted_throughput_ratio"].iloc[0] == pytest.approx(r["predicted_throughput_ratio"], rel=1e-9)
            # without the override the curve uses 1 + sum(p_k): the published MAL up to rounding
            c2 = model_curve(p, r["target"], r["method"], acc, **kw)
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


def test_ratio_figure_labels_held_out_and_dashes_extrapolation(rep, ds_rep):
    cv = sweep_curves(rep)
    fig = ratio_vs_n_figure(rep, cv, "gemma-4-26B-A4B-it")
    titles = [ax.get_title() for ax in fig.axes]
    assert all("(held out)" in t for t in titles) and len(titles) == 4
    assert "leave-one-target-out" in fig._suptitle.get_text()
    for ax in fig.axes:
        dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        # Gemma 4 MTP and EAGLE-3 are measured to N=5: their curves continue dashed to 15;
        # DFlash is measured to N=15: no dashed part
        assert len(dashed) == 2
        assert all(float(np.min(ln.get_xdata())) == 5 and float(np.max(ln.get_xdata())) == 15 for ln in dashed)
        assert "num_speculative_tokens" in ax.get_xlabel()
    fig = ratio_vs_n_figure(ds_rep, sweep_curves(ds_rep), "gemma-4-26B-A4B-it")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].startswith("GSM8K (fit)") and all("(held out)" in t for t in titles[1:])
    assert "fitted on the GSM8K rows" in fig._suptitle.get_text()


def test_parameter_table_lists_every_term_with_its_source(rep):
    """The table lists exactly the fit's terms; the shipped calibration (written by `make reproduce`)
    is that fit as made on the host that wrote it.  Across hosts the fit is not bit-identical (OpenBLAS
    and numpy pick their kernels by CPU): on 2026-12-02 a fresh fit on another host differed from the
    shipped MI300X.json by at most 1.3e-6 relatively in every term above 1e-12 s, and by 3.6e-4
    relatively (3e-13 s absolutely) in the two terms fitted to their zero bound (fixed_s,
    spec_fixed_s); on 2026-12-07, on an fc-v1300 host, by 4.2e-5 (compute), before the fit went through
    smooth roofs to the hard max (test_fit_does_not_move_with_rounding).  The absolute tolerance is
    1e-9 of each term's fit scale (1e-12 s for seconds per forward), so a term at its zero bound passes
    and ``dequant_s_per_weight`` (~6e-13 s per weight) is still compared relatively."""
    from specsim.calibration import load_calibration
    from specsim.studies.reproduce import PRIOR_TERMS, calibration_record, parameter_table

    t = parameter_table(rep.params)
    assert list(t.index) == list(STACK_TERMS)
    mine = calibration_record(rep.params)["terms"]
    cal = load_calibration("MI300X")
    for k in STACK_TERMS:
        assert t.loc[k, "value"] == pytest.approx(mine[k], rel=1e-12)
        assert t.loc[k, "value"] == pytest.approx(cal["terms"][k], rel=1e-5, abs=1e-9 * _SCALE[k])
        assert t.loc[k, "source"]
    for k in FIT_TERMS:
        assert "fitted" in t.loc[k, "source"] or "prior" in t.loc[k, "source"]
    for k in PRIOR_TERMS:
        assert "prior" in t.loc[k, "source"]


def test_figures_are_deterministic_pngs(rep, ds_rep):
    def png(fig):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
        return buf.getvalue()

    a, b = png(parity_figure(rep)), png(parity_figure(rep))
    assert a[:8] == b"\x89PNG\r\n\x1a\n" and a == b
    assert "leave-one-target-out" in parity_figure(rep).axes[0].get_title()
    fig = parity_figure(ds_rep)
    ax = fig.axes[0]
    assert "held out" in ax.get_title() and "fit" in ax.get_title()
    assert "predicted" in ax.get_ylabel() and "published" in ax.get_xlabel()


