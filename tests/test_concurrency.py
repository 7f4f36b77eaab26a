"""The NVIDIA concurrency study (specsim.studies.concurrency): the B200 fit on the P-EAGLE sweeps with
SPEED-Bench held out, the shipped B200 calibration, the shape claims against the published rows,
the P-EAGLE drafter (eagle3 + parallel_drafting: ONE draft pass) and the out-of-scope statement.

Published values quoted below are rows of specsim/data/published/concurrency_sweeps.csv (vLLM blog
'P-EAGLE' 2026-03-13, Figure 4 bars and captions; EAGLE-3 paper SGLang batch table).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import specsim
from specsim import Acceptance
from specsim.architecture import load_model
from specsim.calibration import SCHEMA_VERSION, default_latency
from specsim.catalog import data_path
from specsim.drafters import _parse_specs, get_drafter, list_draft_specs
from specsim.engine import STACK_TERMS
from specsim.errors import DataError
from specsim.hardware import load_hardware
from specsim.published import load_concurrency_sweeps
from specsim.studies import concurrency as cs


@pytest.fixture(scope="module")
def study():
    return cs.concurrency_study()


def _shape(study, arm, dataset):
    s = study.shape
    return s[(s["arm"] == arm) & (s["dataset"] == dataset)].iloc[0]


# ---------------------------------------------------------------------------------- rows


def test_fit_rows_are_the_p_eagle_bars_with_the_al_tables():
    rows = cs.p_eagle_rows()
    assert len(rows) == 42 and set(rows["arm"]) == {"eagle3", "p_eagle"}
    assert sorted(rows["concurrency"].unique()) == [1, 2, 4, 8, 16, 32, 64]
    assert set(rows.loc[rows["arm"] == "eagle3", "n"]) == {3} and set(rows.loc[rows["arm"] == "p_eagle", "n"]) == {7}
    r = rows[(rows["arm"] == "eagle3") & (rows["dataset"] == "MT-Bench") & (rows["concurrency"] == 8)].iloc[0]
    # bar 2550 -> 4200 tok/s, stated ratio 1.65; AL table EAGLE-3 K=3 MT-Bench 2.70
    assert (r["throughput_ratio"], r["baseline_output_tok_per_s"], r["mean_acceptance_length"]) == (1.65, 2550.0, 2.70)
    p = rows[(rows["arm"] == "p_eagle") & (rows["dataset"] == "SPEED-Bench") & (rows["concurrency"] == 1)].iloc[0]
    assert (p["throughput_ratio"], p["mean_acceptance_length"], p["role"]) == (1.88, 3.38, "held out")
    assert set(rows.loc[rows["role"] == "fit", "dataset"]) == {"MT-Bench", "HumanEval"}


# --------------------------------------------------------------------------- held-out split


def _perturbed(dataset, factor):
    sw = load_concurrency_sweeps().copy()
    sel = (sw["dataset"] == dataset) & sw["source"].str.contains("'P-EAGLE'", regex=False)
    for col in ("throughput_ratio", "baseline_tok_per_s", "spec_tok_per_s", "mean_acceptance_length"):
        sw.loc[sel, col] = sw.loc[sel, col] * factor
    return sw


def test_perturbing_speed_bench_does_not_move_the_fit(study):
    moved = cs.concurrency_study(_perturbed("SPEED-Bench", 1.5))
    for k in STACK_TERMS:
        assert moved.params.terms[k] == pytest.approx(study.params.terms[k], rel=1e-9, abs=1e-18), k
    assert moved.fit_loss == pytest.approx(study.fit_loss, rel=1e-9)
    # the held-out errors DO change (the perturbed values are what they are judged against)
    assert moved.summary["held_out_ratio"]["median_abs_rel_error"] != pytest.approx(
        study.summary["held_out_ratio"]["median_abs_rel_error"], rel=1e-3)


def test_perturbing_a_fit_dataset_moves_the_fit(study):
    moved = cs.concurrency_study(_perturbed("HumanEval", 1.2))
    assert any(abs(moved.params.terms[k] / study.params.terms[k] - 1) > 1e-3 for k in cs.B200_FIT_TERMS)


def test_held_out_errors_as_reported(study):
    s = study.summary
    assert s["fit_rows"] == 28 and s["held_out_rows"] == 14
    # measured: fit ratio median 4.2 %, held-out SPEED-Bench ratio median 16.8 % (max 23.5 %),
    # held-out baseline tok/s median 8.6 %; the no-cost-model reference (same step cost as the
    # fit datasets) misses SPEED-Bench by 15.8 %: the miss is in the published MAL vs bars
    assert s["fit_ratio"]["median_abs_rel_error"] < 0.06
    assert s["held_out_ratio"]["median_abs_rel_error"] < 0.20
    assert s["held_out_ratio"]["max_abs_rel_error"] < 0.27
    assert s["held_out_baseline_tok_per_s"]["median_abs_rel_error"] < 0.10
    ref = s["held_out_reference_same_step_cost_as_fit_datasets"]["median_abs_rel_error"]
    assert abs(s["held_out_ratio"]["median_abs_rel_error"] - ref) < 0.03
    by_c = {r["concurrency"]: r for r in s["held_out_by_concurrency"]}
    assert sorted(by_c) == [1, 2, 4, 8, 16, 32, 64]
    assert all(r["rows"] == 2 for r in by_c.values())


def test_p_over_e_captions_held_out(study):
    cap = study.captions
    ho = cap[cap["role"] == "held out"]
    assert len(ho) == 7 and len(cap) == 21
    # exact captions SPEED-Bench 1.69 (c=1) ... 1.25 (c=64): predicted within 10 %, median 5.2 %
    assert ho["rel_error"].abs().max() < 0.10
    assert ho["rel_error"].abs().median() < 0.07


# ----------------------------------------------------------------------------- shape claims


@pytest.mark.parametrize("dataset", ["MT-Bench", "HumanEval", "SPEED-Bench"])
def test_eagle3_gain_rises_to_8_then_falls(study, dataset):
    s = _shape(study, "eagle3", dataset)
    # published: MT 1.38 -> 1.65 (c=8) -> 1.46; HumanEval 1.23 -> 1.71 -> 1.47; SPEED 1.11 -> 1.67 -> 1.50
    assert s["c_peak_published"] == 8 and s["rises_to_8_then_falls_published"]
    # predicted: rises from c=1 to c=8 (by > 3 %), peaks at c = 16 (one grid step from the published 8),
    # and falls to c = 64
    assert s["ratio_c8_predicted"] > 1.03 * s["ratio_c1_predicted"]
    assert s["c_peak_predicted"] in (8, 16)
    assert s["rises_to_8_then_falls_predicted"]
    # the fall from the peak to c = 64: published 0.86-0.90, predicted within 0.05 of it
    assert s["fall_c64_over_peak_predicted"] == pytest.approx(s["fall_c64_over_peak_published"], abs=0.05)
    # the rise is UNDER-predicted: +12.6 % vs published +20 % to +50 %
    assert 0.05 < s["rise_peak_over_c1_predicted"] - 1 < s["rise_peak_over_c1_published"] - 1


@pytest.mark.parametrize("dataset", ["MT-Bench", "HumanEval", "SPEED-Bench"])
def test_p_eagle_falls_at_high_load(study, dataset):
    s = _shape(study, "p_eagle", dataset)
    # published c64 / peak: 0.70 (MT), 0.76 (HumanEval), 0.76 (SPEED); predicted 0.74
    assert s["fall_c64_over_peak_predicted"] == pytest.approx(s["fall_c64_over_peak_published"], abs=0.06)
    assert s["fall_c64_over_peak_predicted"] < 0.8


def test_distinct_expert_fractions_computed(study):
    m = load_model("gpt-oss-20b")
    e = study.experts
    e3 = e[e["arm"] == "eagle3"].set_index("concurrency")
    # E (1 - (1 - k/E)^T), E = 32, k = 4: c = 1 baseline reads 4 experts, verification of 4 tokens 13.24
    assert e3.loc[1, "baseline_distinct_experts"] == pytest.approx(4.0)
    assert e3.loc[1, "verify_distinct_experts"] == pytest.approx(32 * (1 - (28 / 32) ** 4))
    assert e3.loc[1, "verify_distinct_experts"] == pytest.approx(float(m.expected_distinct_experts(4)))
    ratio = e3["verify_over_baseline"].to_numpy()
    assert ratio[0] == pytest.approx(3.311, abs=1e-3) and np.all(np.diff(ratio) < 0)
    assert ratio[-1] == pytest.approx(1.0, abs=1e-3)
    # the predicted gain rises between successive concurrencies only where verification reads a larger
    # fraction of the experts than the baseline step does
    t = study.table
    for (arm, ds), g in t.groupby(["arm", "dataset"]):
        g = g.sort_values("concurrency")
        r, c = g["predicted_throughput_ratio"].to_numpy(), g["concurrency"].to_numpy()
        ex = e[e["arm"] == arm].set_index("concurrency")
        for i in np.nonzero(np.diff(r) > 0)[0]:
            assert ex.loc[c[i], "verify_expert_fraction"] > ex.loc[c[i], "baseline_expert_fraction"] + 0.01


def test_eagle3_paper_shape_with_terms_transferred_to_h100(study):
    p = study.paper_shape
    assert p["batch"].tolist() == [2, 4, 8, 16, 24, 32, 48, 56, 64]
    assert p["published_ratio"].iloc[0] == 1.81 and p["published_ratio"].iloc[-1] == 1.38
    r = p["predicted_ratio"].to_numpy()
    assert np.all(np.diff(r) <= 1e-9)  # falls monotonically with batch (dense target)
    pub_fall = 1 - p["published_normalised"].iloc[-1]   # 0.238
    pred_fall = 1 - p["predicted_normalised"].iloc[-1]  # 0.134 measured: about half the published fall
    assert 0.4 * pub_fall < pred_fall < 1.1 * pub_fall
    # with compute at the datasheet prior (weakly identified on B200) the fall is steeper, not shallower
    assert p["predicted_normalised_compute_prior"].iloc[-1] < p["predicted_normalised"].iloc[-1]


def test_dspark_rows_are_out_of_scope_with_reason(study):
    oos = study.summary["out_of_scope"]
    ds = [o for o in oos if "DSpark" in o["source"]]
    assert len(ds) == 1 and ds[0]["rows"] == 37
    assert "88.0B" in ds[0]["why"] and "49B" in ds[0]["why"] and "OUT OF SCOPE" in ds[0]["why"]
    assert sum(o["rows"] for o in oos) == 37 + 4 + 8 + 2


# --------------------------------------------------------------------------- calibration file


def test_shipped_b200_calibration_has_exactly_the_terms_and_is_this_fit(study):
    path = data_path("calibration", "B200.json")
    cal = json.loads(path.read_text())
    assert set(cal["terms"]) == set(STACK_TERMS) and set(cal["term_sources"]) == set(STACK_TERMS)
    assert cal["schema_version"] == SCHEMA_VERSION and cal["calibrated"] is True
    assert cal["hardware"] == "B200 SXM" and cal["stack"]["vllm"].startswith("0.16")
    assert "transferred_from" not in cal
    for k in cs.B200_FIT_TERMS:
        assert cal["term_sources"][k].startswith("fitted on 28 P-EAGLE blog rows"), k
        assert cal["terms"][k] == pytest.approx(study.params.terms[k], rel=1e-6), k
    for k in set(STACK_TERMS) - set(cs.B200_FIT_TERMS):
        assert not cal["term_sources"][k].startswith("fitted"), k
    lat = default_latency(load_hardware("B200"))
    assert lat.calibrated and lat.calibration.transferred_from is None


def test_write_outputs(study, tmp_path):
    written = cs.write_concurrency_outputs(study, tmp_path / "out", tmp_path / "cal")
    names = {p.name for p in written}
    assert {"concurrency_table.csv", "concurrency_errors.csv", "concurrency_summary.json", "B200.json"} <= names
    rec = json.loads((tmp_path / "cal" / "B200.json").read_text())
    assert rec == json.loads(json.dumps(cs.b200_calibration_record(study)))
    summ = json.loads((tmp_path / "out" / "concurrency_summary.json").read_text())
    assert summ["eagle3_rises_to_8_then_falls"] == {"published_all_datasets": True, "predicted_all_datasets": True}


# ------------------------------------------------------------------------------ the drafter


def test_p_eagle_drafter_is_one_pass_parallel_eagle3():
    t = load_model("gpt-oss-20b")
    pe = get_drafter("eagle3", draft_model="amazon/GPT-OSS-20B-P-EAGLE", target=t)
    assert (pe.kind, pe.method, pe.name) == ("parallel", "eagle3", "gpt-oss-20b-p-eagle")
    plan = pe.draft_plan(7, 8, 1000)
    assert len(plan) == 1 and float(plan[0].q) == 8.0 and float(plan[0].multiplier) == 1.0
    # the default eagle3 head of the target stays the vanilla sequential one (1 + (N - 1) passes)
    e3 = get_drafter("eagle3", target=t)
    assert (e3.kind, e3.name) == ("sequential", "gpt-oss-20b-eagle3")
    assert [float(p.multiplier) for p in e3.draft_plan(3, 8, 1000)] == [1.0, 2.0]
    specs = {d["name"]: d for d in list_draft_specs()}
    assert specs["gpt-oss-20b-p-eagle"]["parallel_drafting"] is True


def test_parallel_kind_without_parallel_drafting_is_refused(tmp_path):
    spec = json.loads(data_path("drafters", "gpt-oss-20b--p-eagle.json").read_text())
    spec.pop("parallel_drafting")
    (tmp_path / "x.json").write_text(json.dumps(spec))
    with pytest.raises(DataError, match="parallel_drafting"):
        _parse_specs(str(tmp_path))


def test_predict_gpt_oss_eagle3_on_b200():
    acc = Acceptance.from_rates([0.75, 0.55, 0.41])
    p = specsim.predict("gpt-oss-20b", "eagle3", 3, hardware="B200", concurrency=8, isl=256, osl=2048,
                        acceptance=acc)
    assert 1.2 < p.throughput_ratio < 2.5
    # P-EAGLE at N = 7: one draft pass, so its draft time is below EAGLE-3's three passes at N = 3
    acc7 = Acceptance.from_rates([0.8, 0.65, 0.5, 0.4, 0.3, 0.2, 0.15])
    q = specsim.predict("gpt-oss-20b", "eagle3", 7, hardware="B200", concurrency=8, isl=256, osl=2048,
                        acceptance=acc7, draft="amazon/GPT-OSS-20B-P-EAGLE")
    assert q.t_draft_s < p.t_draft_s and q.throughput_ratio > p.throughput_ratio


def test_parallel_drafting_is_modelled_only_for_a_parallel_drafting_head():
    from specsim.drafters import unmodelled_config_fields
    from specsim.vllm.config import parse_speculative_config

    pe = parse_speculative_config({"method": "eagle3", "model": "amazon/GPT-OSS-20B-P-EAGLE",
                                   "num_speculative_tokens": 7, "parallel_drafting": True})
    assert not any("parallel_drafting" in f for f in unmodelled_config_fields(pe))
    e3 = parse_speculative_config({"method": "eagle3", "model": "RedHatAI/gpt-oss-20b-speculator.eagle3",
                                   "num_speculative_tokens": 3, "parallel_drafting": True})
    assert "not modelled: parallel_drafting=true" in unmodelled_config_fields(e3)


def test_eagle3_k3_assumption_is_the_models_better_k(study):
    # the blog: EAGLE-3's best K in {3, 5, 7} is "mostly 3"; with the AL tables' K = 3 / 7 MALs the
    # fitted model prefers K = 3 at every dataset and concurrency (K = 7 is 10-22 % lower)
    k = study.summary["eagle3_k3_vs_k7"]
    assert k["predicted_best_k_3_share"] == 1.0 and len(k["rows"]) == 21
    assert all(r["predicted_ratio_k7"] < 0.92 * r["predicted_ratio_k3"] for r in k["rows"])
