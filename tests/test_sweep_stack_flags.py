"""``sweep`` and ``recommend`` take predict's deployment-stack options: ``expert_parallel``,
a measured latency table (``latency=MeasuredLatency`` / ``--latency-table``), ``vllm_version`` and
``platform`` -- with predict's values, refusals and warnings."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from specsim.errors import SpecsimValueError

MOE = dict(target="Qwen3.6-35B-A3B", method="mtp", hardware="MI300X", tp=2, acceptance=0.7)
MOE_ARGS = ["--target", "Qwen3.6-35B-A3B", "--method", "mtp", "--hardware", "MI300X", "--tp", "2",
            "--acceptance", "0.7"]
DENSE_ARGS = ["--target", "Qwen3-8B", "--method", "eagle3", "--hardware", "MI300X", "--acceptance", "0.7"]


def _table(model: str = "Qwen3-8B"):
    """A measured latency table of ``model`` on MI300X (TP 1), sampled from the shipped roofline."""
    from specsim.architecture import load_model
    from specsim.calibration import default_latency
    from specsim.hardware import load_hardware

    rl = default_latency(load_hardware("MI300X"))
    m = load_model(model)
    rows = [(b, q, c, float(rl.forward_time(m, tp=1, precision=None, batch=b, q=q, context=c)))
            for b in (1, 4, 16, 64) for q in (1, 2, 4, 8) for c in (256, 1024, 4096)]
    return pd.DataFrame(rows, columns=["batch", "q", "context", "seconds"])


# ---- expert_parallel ----------------------------------------------------------------------------

def test_sweep_expert_parallel_rows_equal_predict():
    from specsim.predict import overhead_dominant_warning, predict, sweep

    kw = dict(MOE)
    tgt, meth = kw.pop("target"), kw.pop("method")
    df = sweep(tgt, meth, num_speculative_tokens=[1, 3, 5], concurrency=[1, 16, 64], expert_parallel=True, **kw)
    plain = sweep(tgt, meth, num_speculative_tokens=[1, 3, 5], concurrency=[1, 16, 64], **kw)
    # no expert-parallel warning at TP 2; the one warning is predict's overhead warning, at the
    # concurrencies where predict gives it
    over = [c for c in (1, 16, 64) if any("speculative overhead" in w for w in
                                          predict(tgt, meth, 1, concurrency=c, expert_parallel=True, **kw).warnings)]
    slow = sum(any(w.startswith("below break-even") for w in predict(
        tgt, meth, n, concurrency=c, expert_parallel=True, **kw).warnings) for n in (1, 3, 5) for c in (1, 16, 64))
    assert len(df) == 9 and [w for w in df.attrs["warnings"] if not w.startswith("below break-even")] == (
        [overhead_dominant_warning(over, f"{tgt}, {meth} on {kw['hardware']}")] if over else [])
    below = [w for w in df.attrs["warnings"] if w.startswith("below break-even")]
    assert (below == []) if slow == 0 else (len(below) == 1 and f"in {slow} of 9 rows" in below[0])
    for row in df.itertuples():
        p = predict(tgt, meth, int(row.num_speculative_tokens), concurrency=int(row.concurrency),
                    expert_parallel=True, **kw)
        assert row.throughput_ratio == pytest.approx(p.throughput_ratio, rel=1e-9)
        assert row.t_verify_s == pytest.approx(p.t_verify_s, rel=1e-9)
        assert row.t_base_s == pytest.approx(p.t_base_s, rel=1e-9)
        assert row.tpot_s == pytest.approx(p.tpot_s, rel=1e-9)
    # the all-to-all is not the all-reduce: the option changes the step times at TP 2
    assert (df["t_base_s"] - plain["t_base_s"]).abs().max() > 0


def test_sweep_expert_parallel_over_categorical_axes_equals_predict():
    """Several acceptances and hardware in one call (each combination's latency made expert-parallel
    once and shared): every row still equals predict."""
    from specsim.predict import predict, sweep

    df = sweep("Qwen3.6-35B-A3B", "mtp", num_speculative_tokens=[2, 4], hardware=["MI300X", "MI355X"], tp=2,
               concurrency=[4, 32], acceptance={"lo": 0.6, "hi": 0.8}, expert_parallel=True)
    assert len(df) == 16
    acc = {"lo": 0.6, "hi": 0.8}
    for row in df.itertuples():
        p = predict("Qwen3.6-35B-A3B", "mtp", int(row.num_speculative_tokens), hardware=row.hardware, tp=2,
                    concurrency=int(row.concurrency), acceptance=acc[row.acceptance], expert_parallel=True)
        assert row.throughput_ratio == pytest.approx(p.throughput_ratio, rel=1e-9)


def test_expert_parallel_refused_for_a_dense_target_in_sweep_and_recommend():
    from specsim.predict import predict, sweep
    from specsim.recommend import recommend

    kw = dict(hardware="MI300X", acceptance=0.7, tp=2, expert_parallel=True)
    msg = "expert_parallel: applies to MoE targets only.*Qwen3-8B"
    with pytest.raises(SpecsimValueError, match=msg) as e_predict:
        predict("Qwen3-8B", "eagle3", 3, **kw)
    with pytest.raises(SpecsimValueError, match=msg) as e_sweep:
        sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[1, 3], **kw)
    with pytest.raises(SpecsimValueError, match=msg) as e_rec:
        recommend("Qwen3-8B", "eagle3", concurrency=[1, 4], **kw)
    assert e_predict.value.field == e_sweep.value.field == e_rec.value.field == "expert_parallel"
    assert str(e_sweep.value) == str(e_predict.value) == str(e_rec.value)
    # an MoE target among several: the dense one is still refused
    with pytest.raises(SpecsimValueError, match=msg):
        sweep(["Qwen3.6-35B-A3B", "Qwen3-8B"], "ngram", num_speculative_tokens=[1], **kw)


def test_expert_parallel_refused_with_a_measured_table():
    from specsim.latency import MeasuredLatency
    from specsim.predict import sweep

    with pytest.raises(SpecsimValueError, match="expert_parallel: needs a roofline latency model"):
        sweep("Qwen3.6-35B-A3B", "mtp", num_speculative_tokens=[1], hardware="MI300X", acceptance=0.7,
              latency=MeasuredLatency(_table("Qwen3.6-35B-A3B")), concurrency=[4], expert_parallel=True)


def test_cli_sweep_expert_parallel_equals_predict(capsys):
    from specsim.cli import main
    from specsim.predict import predict

    assert main(["sweep", *MOE_ARGS, "-n", "1,3", "--concurrency", "1,16", "--expert-parallel", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 4
    kw = dict(MOE)
    tgt, meth = kw.pop("target"), kw.pop("method")
    for row in rows:
        p = predict(tgt, meth, row["num_speculative_tokens"], concurrency=row["concurrency"], expert_parallel=True,
                    **kw)
        assert row["throughput_ratio"] == pytest.approx(p.throughput_ratio, rel=1e-9)
    rc = main(["sweep", *DENSE_ARGS, "--tp", "2", "-n", "1", "--concurrency", "1", "--expert-parallel"])
    err = capsys.readouterr().err
    assert rc == 2 and "expert_parallel" in err and "MoE targets only" in err and "Traceback" not in err


# ---- vllm_version / platform ----------------------------------------------------------------------

def test_sweep_stack_warning_is_predicts():
    from specsim.predict import overhead_dominant_warning, predict, sweep

    kw = dict(hardware="MI300X", acceptance=0.7)
    p = predict("Qwen3-8B", "eagle3", 3, vllm_version="0.33.0", platform="CUDA 12.8", **kw)
    want = [w for w in p.warnings if "software stack" in w]
    assert len(want) == 1 and "0.33.0" in want[0] and "CUDA" in want[0]
    df = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[1, 3], concurrency=[1, 8], vllm_version="0.33.0",
               platform="CUDA 12.8", **kw)
    # once for the sweep, not per row (beside predict's overhead warning of concurrency 8)
    assert any("speculative overhead" in w for w in predict("Qwen3-8B", "eagle3", 1, concurrency=8, **kw).warnings)
    over = overhead_dominant_warning([8], "Qwen3-8B, eagle3 on MI300X")
    assert df.attrs["warnings"] == (*want, over)
    # the declared stack changes no number
    plain = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[1, 3], concurrency=[1, 8], **kw)
    pd.testing.assert_frame_equal(df, plain)
    assert plain.attrs["warnings"] == (over,)
    # the calibration's own release: no warning
    assert sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], vllm_version="0.23.0", **kw).attrs["warnings"] == ()
    # one warning per calibration
    two = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], hardware=["MI300X", "MI355X"], acceptance=0.7,
                vllm_version="0.33.0")
    stack = [w for w in two.attrs["warnings"] if "software stack" in w]
    assert len(stack) == 2 and any("MI300X" in w for w in stack) and any("MI355X" in w for w in stack)


def test_sweep_and_recommend_refuse_a_bad_version_or_platform():
    from specsim.predict import sweep
    from specsim.recommend import recommend

    kw = dict(hardware="MI300X", acceptance=0.7)
    for bad in ("garbage", "latest", "32"):
        with pytest.raises(SpecsimValueError, match="vllm_version: must be a vLLM version"):
            sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], vllm_version=bad, **kw)
        with pytest.raises(SpecsimValueError, match="vllm_version: must be a vLLM version"):
            recommend("Qwen3-8B", "eagle3", concurrency=[1], vllm_version=bad, **kw)
    with pytest.raises(SpecsimValueError, match="platform: must name a vLLM platform"):
        sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], platform="Gaudi 3", **kw)
    with pytest.raises(SpecsimValueError, match="platform: must name a vLLM platform"):
        recommend("Qwen3-8B", "eagle3", concurrency=[1], platform="Gaudi 3", **kw)


def test_cli_sweep_prints_the_stack_warning_on_stderr(capsys):
    from specsim.cli import main
    from specsim.predict import predict

    want = [w for w in predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", acceptance=0.7,
                               vllm_version="0.33.0").warnings if "software stack" in w]
    assert main(["sweep", *DENSE_ARGS, "-n", "1,3", "--concurrency", "1,4", "--vllm-version", "0.33.0"]) == 0
    cap = capsys.readouterr()
    assert f"specsim: WARNING: {want[0]}" in cap.err
    assert "software stack" not in cap.out and "throughput_ratio" in cap.out
    assert main(["sweep", *DENSE_ARGS, "-n", "1", "--concurrency", "1", "--platform", "CUDA 12.8", "--json"]) == 0
    cap = capsys.readouterr()
    assert "platform CUDA 12.8" in cap.err and len(json.loads(cap.out)) == 1
    assert main(["sweep", *DENSE_ARGS, "-n", "1", "--concurrency", "1"]) == 0
    assert "WARNING" not in capsys.readouterr().err


def test_cli_sweep_bad_version_exits_nonzero_naming_the_field(capsys):
    from specsim.cli import main

    rc = main(["sweep", *DENSE_ARGS, "-n", "1", "--concurrency", "1", "--vllm-version", "garbage"])
    err = capsys.readouterr().err
    assert rc == 2 and "--vllm-version" in err and "garbage" in err and "Traceback" not in err
    rc = main(["sweep", *DENSE_ARGS, "-n", "1", "--concurrency", "1", "--platform", "Gaudi 3"])
    err = capsys.readouterr().err
    assert rc == 2 and "platform" in err and "Traceback" not in err


# ---- measured latency table -------------------------------------------------------------------------

def test_sweep_with_a_measured_table_equals_predict():
    from specsim.latency import MeasuredLatency
    from specsim.predict import predict, sweep

    t = _table()
    kw = dict(hardware="MI300X", acceptance=0.7, isl=1024, osl=1024)
    lat = MeasuredLatency(t)
    df = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[1, 3], concurrency=[4, 16], latency=lat, **kw)
    roof = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[1, 3], concurrency=[4, 16], **kw)
    assert len(df) == 4 and df["latency_calibrated"].all()
    for row in df.itertuples():
        p = predict("Qwen3-8B", "eagle3", int(row.num_speculative_tokens), concurrency=int(row.concurrency),
                    latency=lat, **kw)
        for col in ("throughput_ratio", "t_verify_s", "t_draft_s", "t_prefill_s", "t_overhead_s", "tpot_s"):
            assert getattr(row, col) == pytest.approx(getattr(p, col), rel=1e-9), col
    # sampled from the shipped roofline at the table's nodes: the roofline's numbers (q = N + 1 = 2, 4)
    assert df["throughput_ratio"].to_numpy() == pytest.approx(roof["throughput_ratio"].to_numpy(), rel=1e-9)
    # a table twice as slow: the verification (target) doubles, the draft passes (stack calibration) do not
    slow = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[1, 3], concurrency=[4, 16],
                 latency=MeasuredLatency(t.assign(seconds=2 * t["seconds"])), **kw)
    assert slow["t_verify_s"].to_numpy() == pytest.approx(2 * df["t_verify_s"].to_numpy(), rel=1e-9)
    assert slow["t_draft_s"].to_numpy() == pytest.approx(df["t_draft_s"].to_numpy(), rel=1e-12)
    with pytest.raises(SpecsimValueError):  # concurrency 256 lies outside the measured table: refused
        sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], concurrency=[256], latency=lat, **kw)


def test_cli_sweep_latency_table_equals_predict_with_the_table(tmp_path, capsys):
    from specsim.cli import main
    from specsim.latency import MeasuredLatency
    from specsim.predict import predict

    t = _table().assign(seconds=lambda d: 1.3 * d["seconds"])  # not the roofline: the table is what is used
    f = tmp_path / "verify_cost.csv"
    t.to_csv(f, index=False)
    assert main(["sweep", *DENSE_ARGS, "-n", "1,3", "--concurrency", "4,16", "--latency-table", str(f),
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 4
    lat = MeasuredLatency(pd.read_csv(f), tp=1, source=str(f))
    for row in rows:
        p = predict("Qwen3-8B", "eagle3", row["num_speculative_tokens"], hardware="MI300X", acceptance=0.7,
                    concurrency=row["concurrency"], latency=lat)
        assert row["throughput_ratio"] == pytest.approx(p.throughput_ratio, rel=1e-9)
        assert row["t_verify_s"] == pytest.approx(p.t_verify_s, rel=1e-9)
    bad = tmp_path / "bad.csv"
    bad.write_text("batch,q,context,seconds\n8,4,1024,abc\n")
    rc = main(["sweep", *DENSE_ARGS, "-n", "1", "--concurrency", "4", "--latency-table", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and "--latency-table" in err and "Traceback" not in err


# ---- recommend ----------------------------------------------------------------------------------------

def test_recommend_takes_the_four_options():
    from specsim.latency import MeasuredLatency
    from specsim.predict import predict
    from specsim.recommend import recommend

    kw = dict(MOE)
    tgt, meth = kw.pop("target"), kw.pop("method")
    rec = recommend(tgt, meth, concurrency=[1, 4], max_num_speculative_tokens=4, expert_parallel=True,
                    vllm_version="0.33.0", **kw)
    plain = recommend(tgt, meth, concurrency=[1, 4], max_num_speculative_tokens=4, **kw)
    m = rec.method("mtp")
    assert any("expert parallel" in a for a in m.assumptions)
    assert not any("expert parallel" in a for a in plain.method("mtp").assumptions)
    g = m.grid.set_index(["num_speculative_tokens", "concurrency"])
    for n, c in ((1, 1), (3, 4), (4, 4)):
        p = predict(tgt, meth, n, concurrency=c, expert_parallel=True, **kw)
        q = predict(tgt, meth, n, concurrency=c, **kw)
        assert g.loc[(n, c), "throughput_ratio"] == pytest.approx(p.throughput_ratio, rel=1e-9)
        assert plain.method("mtp").grid.set_index(["num_speculative_tokens", "concurrency"]).loc[
            (n, c), "throughput_ratio"] == pytest.approx(q.throughput_ratio, rel=1e-9)
    want = [w for w in predict(tgt, meth, 3, vllm_version="0.33.0", **kw).warnings if "software stack" in w]
    assert rec.warnings == tuple(want) and plain.warnings == ()
    assert rec.to_dict()["warnings"] == want and f"WARNING: {want[0]}" in rec.summary()
    # a measured table of the target: recommend's grid equals predict with the same table
    lat = MeasuredLatency(_table())
    rt = recommend("Qwen3-8B", "eagle3", hardware="MI300X", acceptance=0.7, concurrency=[4, 16],
                   max_num_speculative_tokens=3, latency=lat)
    mt = rt.method("eagle3")
    assert "measured latency table" in mt.latency_label
    gt = mt.grid.set_index(["num_speculative_tokens", "concurrency"])
    for n, c in ((1, 4), (3, 16)):
        p = predict("Qwen3-8B", "eagle3", n, hardware="MI300X", acceptance=0.7, concurrency=c, latency=lat)
        assert gt.loc[(n, c), "throughput_ratio"] == pytest.approx(p.throughput_ratio, rel=1e-9)


def test_cli_recommend_with_the_flags(tmp_path, capsys):
    from specsim.cli import main
    from specsim.predict import predict

    args = ["recommend", *MOE_ARGS, "--concurrency", "1,4", "--max-n", "3", "--expert-parallel",
            "--vllm-version", "0.33.0", "--platform", "ROCm 7.2"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["warnings"]) == 1 and "0.33.0" in out["warnings"][0]
    mtp = next(m for m in out["methods"] if m["method"] == "mtp")
    assert any("expert parallel" in a for a in mtp["assumptions"])
    pts = [x for x in mtp["points"] if x["num_speculative_tokens"] > 0]
    assert pts
    for x in pts:
        p = predict("Qwen3.6-35B-A3B", "mtp", x["num_speculative_tokens"], hardware="MI300X", tp=2, acceptance=0.7,
                    concurrency=x["concurrency"], expert_parallel=True)
        assert x["throughput_ratio"] == pytest.approx(p.throughput_ratio, rel=1e-9)
    assert main(args) == 0
    assert "WARNING: " in capsys.readouterr().out
    rc = main([*args, "--config-only"])
    cap = capsys.readouterr()
    assert "specsim: WARNING:" in cap.err and "0.33.0" in cap.err
    if rc == 0:
        assert json.loads(cap.out)["method"] == "mtp"
    # refusals name the field
    rc = main(["recommend", *DENSE_ARGS, "--concurrency", "1", "--expert-parallel"])
    err = capsys.readouterr().err
    assert rc == 2 and "expert_parallel" in err and "Traceback" not in err
    rc = main(["recommend", *DENSE_ARGS, "--concurrency", "1", "--vllm-version", "garbage"])
    err = capsys.readouterr().err
    assert rc == 2 and "--vllm-version" in err
    # --latency-table
    f = tmp_path / "t.csv"
    _table().to_csv(f, index=False)
    assert main(["recommend", *DENSE_ARGS, "--concurrency", "4,16", "--max-n", "3", "--latency-table", str(f),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "measured latency table" in out["methods"][0]["latency_label"]


def test_recommend_warns_of_overhead_dominance_where_predict_does_at_the_recommended_n():
    """predict warns per point and sweep per grid when the speculative overhead exceeds draft +
    verification; recommend gave no such warning (a note of an earlier session).  It now names the
    concurrencies whose RECOMMENDED N predict would warn about, and only those."""
    from specsim.predict import overhead_dominant_warning, predict
    from specsim.recommend import recommend

    kw = dict(hardware="MI300X", acceptance=0.7)
    cs = [1, 4, 8, 32]
    rec = recommend("Qwen3-8B", "eagle3", concurrency=cs, max_concurrency=32, max_num_speculative_tokens=5,
                    check_memory=False, **kw)
    m = rec.methods[0]
    sched = {c: k for lo, hi, k in m.schedule for c in range(lo, hi + 1)}
    want = [c for c in range(1, 33) if sched[c] >= 1 and any(
        "speculative overhead" in w for w in predict("Qwen3-8B", "eagle3", sched[c], concurrency=c, **kw).warnings)]
    assert want, "the case must exercise the warning (Qwen3-8B EAGLE-3 on MI300X warns from concurrency 8)"
    assert overhead_dominant_warning(want, "Qwen3-8B, eagle3 on MI300X at its recommended N") in rec.warnings
    # a case with no such point gives none
    quiet = recommend("Qwen3-8B", "eagle3", concurrency=[1], max_concurrency=1, max_num_speculative_tokens=5,
                      check_memory=False, **kw)
    assert not any("speculative overhead" in w for w in quiet.warnings)


def test_sweep_names_its_rows_below_break_even_as_predict_warns_per_point():
    """predict warns "below break-even" per point; a sweep gave no word (its ratio column showed
    it).  The one sweep warning counts exactly the rows predict would warn about."""
    from specsim.predict import predict, sweep

    kw = dict(hardware="MI300X", acceptance=0.3)
    df = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[1, 3, 7], concurrency=[1, 64, 256], **kw)
    slow = [(n, c) for n in (1, 3, 7) for c in (1, 64, 256) if any(
        w.startswith("below break-even") for w in predict("Qwen3-8B", "eagle3", n, concurrency=c, **kw).warnings)]
    assert 0 < len(slow) < 9
    w = [x for x in df.attrs["warnings"] if x.startswith("below break-even")]
    assert len(w) == 1 and f"in {len(slow)} of 9 rows" in w[0]
    assert "N " + ", ".join(map(str, sorted({n for n, _ in slow}))) + ";" in w[0]
    assert "concurrency " + ", ".join(map(str, sorted({c for _, c in slow}))) + ")" in w[0]
    fast = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[1, 3], concurrency=[1], hardware="MI300X", acceptance=0.8)
    assert not any(x.startswith("below break-even") for x in fast.attrs["warnings"])
