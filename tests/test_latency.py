"""Tests of specsim.latency: roofline closed forms, TP, monotonicity, calibration, measured tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.architecture import load_model
from specsim.errors import SpecsimValueError
from specsim.hardware import load_hardware
from specsim.latency import (Efficiency, LatencyModel, MeasuredLatency, Roofline, calibrate,
                             default_kv_precision)

# Llama-3.1-8B by hand (HF config: h 4096, 32 layers, 32/8 heads x 128, I 14336, V 128256, untied):
# per layer attention 4096*(4096 + 2*1024) + 4096*4096 = 41,943,040; MLP 3*4096*14336 = 176,160,768;
# norms 2*4096 -> 218,112,000 per layer; x32 = 6,979,584,000 (+ final norm 4096 = 6,979,588,096).
H, LAYERS, V = 4096, 32, 128256
NONEMB = 6_979_588_096
LM_HEAD = V * H
W_BYTES = 2.0 * (NONEMB + LM_HEAD)          # weights read per decode step (embedding gathers T rows)
KV_PER_TOKEN = LAYERS * 2 * 8 * 128 * 2      # bytes, bf16
ATTN_PER_PAIR = LAYERS * 4 * 32 * 128        # FLOPs per (query, key) pair: QK^T and PV


@pytest.fixture(scope="module")
def llama():
    return load_model("Llama-3.1-8B-Instruct")


@pytest.fixture(scope="module")
def mi300x():
    return load_hardware("MI300X")


def test_memory_bound_batch1_closed_form(llama, mi300x):
    eff = Efficiency(bandwidth=0.7, compute=0.55, fixed_s=2e-4)
    rl = Roofline(mi300x, eff)
    bd = rl.breakdown(llama, batch=1, q=1, context=0)
    hand = W_BYTES / (0.7 * 5.3e12)
    assert bd["compute_s"] < bd["memory_s"]
    assert float(bd["weights_s"]) == pytest.approx(hand, rel=1e-12)
    assert float(bd["total_s"]) == pytest.approx(hand + 2e-4, rel=1e-12)
    # with context: + KV bytes of one sequence, still memory-bound
    t = rl.forward_time(llama, batch=4, q=1, context=8192)
    assert float(t) == pytest.approx((W_BYTES + 4 * 8192 * KV_PER_TOKEN) / (0.7 * 5.3e12) + 2e-4, rel=1e-12)


def test_compute_bound_limit_closed_form(llama, mi300x):
    eff = Efficiency(bandwidth=0.7, compute=0.5, fixed_s=1e-4)
    rl = Roofline(mi300x, eff)
    b, q = 256, 16
    bd = rl.breakdown(llama, batch=b, q=q, context=0)
    flops = b * (2.0 * NONEMB * q + ATTN_PER_PAIR * q * (q + 1) / 2 + 2.0 * LM_HEAD * q)
    assert bd["compute_s"] > 10 * bd["memory_s"]
    assert float(bd["total_s"]) == pytest.approx(flops / (0.5 * 1307.4e12) + 1e-4, rel=1e-9)


def test_fp8_halves_weight_bytes_and_uses_fp8_peak(llama, mi300x):
    rl = Roofline(mi300x)
    b16 = rl.breakdown(llama, batch=1, q=1, context=0, precision="bf16")
    b8 = rl.breakdown(llama, batch=1, q=1, context=0, precision="fp8")
    assert float(b8["weights_s"]) == pytest.approx(float(b16["weights_s"]) / 2, rel=1e-12)
    assert float(b8["compute_s"]) == pytest.approx(float(b16["compute_s"]) * 1307.4 / 2614.9, rel=1e-12)
    assert default_kv_precision("fp8") == "bf16" and default_kv_precision("fp32") == "fp32"


def test_tensor_parallel_divides_and_adds_allreduce(llama, mi300x):
    eff = Efficiency(fixed_s=1e-4, allreduce_latency_s=1e-5)
    rl = Roofline(mi300x, eff)
    one = rl.breakdown(llama, tp=1, batch=8, q=1, context=2048)
    for tp in (2, 4, 8):
        bd = rl.breakdown(llama, tp=tp, batch=8, q=1, context=2048)
        assert float(bd["memory_s"]) == pytest.approx(float(one["memory_s"]) / tp, rel=1e-12)
        ring = 2.0 * (tp - 1) / tp * (8 * H * 2) / 448e9 + 1e-5
        assert float(bd["allreduce_s"]) == pytest.approx(2 * LAYERS * ring, rel=1e-12)
        assert float(bd["total_s"]) < float(one["total_s"])
    assert float(one["allreduce_s"]) == 0.0


def test_smooth_max_bounds(llama, mi300x):
    hard = Roofline(mi300x).breakdown(llama, batch=np.arange(1, 400), q=4, context=1024)
    p = 6.0
    smooth = Roofline(mi300x, smooth_p=p).breakdown(llama, batch=np.arange(1, 400), q=4, context=1024)
    roof_h = hard["total_s"] - hard["fixed_s"]
    roof_s = smooth["total_s"] - smooth["fixed_s"]
    assert np.all(roof_s >= roof_h * (1 - 1e-12))
    assert np.all(roof_s <= roof_h * 2 ** (1 / p) * (1 + 1e-12))


def test_broadcasting_grid_matches_pointwise(llama, mi300x):
    rl = Roofline(mi300x)
    b = np.arange(1, 101).reshape(-1, 1, 1)
    q = np.arange(1, 11).reshape(1, -1, 1)
    c = np.linspace(0, 65536, 100).reshape(1, 1, -1)
    grid = rl.forward_time(llama, tp=2, batch=b, q=q, context=c)
    assert grid.shape == (100, 10, 100)
    for i, j, k in [(0, 0, 0), (99, 9, 99), (37, 4, 51)]:
        pt = rl.forward_time(llama, tp=2, batch=int(b[i, 0, 0]), q=int(q[0, j, 0]), context=float(c[0, 0, k]))
        assert float(pt) == pytest.approx(grid[i, j, k], rel=1e-12)


@pytest.mark.parametrize("model_name", ["Llama-3.1-8B-Instruct", "Qwen3.6-35B-A3B", "gemma-4-26B-A4B-it"])
@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 512), q=st.integers(1, 16), c=st.integers(0, 32768),
       db=st.integers(0, 64), dq=st.integers(0, 8), dc=st.integers(0, 8192), tp=st.sampled_from([1, 2, 8]))
def test_monotone_in_batch_q_context(model_name, b, q, c, db, dq, dc, tp):
    m, hw = load_model(model_name), load_hardware("MI300X")
    rl = Roofline(hw)
    t0 = float(rl.forward_time(m, tp=tp, batch=b, q=q, context=c))
    assert float(rl.forward_time(m, tp=tp, batch=b + db, q=q, context=c)) >= t0 * (1 - 1e-12)
    assert float(rl.forward_time(m, tp=tp, batch=b, q=q + dq, context=c)) >= t0 * (1 - 1e-12)
    assert float(rl.forward_time(m, tp=tp, batch=b, q=q, context=c + dc)) >= t0 * (1 - 1e-12)


def _synthetic(model, hw, eff, noise=0.01, seed=0):
    B, Q, C = np.meshgrid([1, 2, 4, 8, 16, 32, 64, 128, 256], [1, 2, 4, 8, 16], [512, 4096], indexing="ij")
    true = Roofline(hw, eff).forward_time(model, batch=B.ravel(), q=Q.ravel(), context=C.ravel())
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"batch": B.ravel(), "q": Q.ravel(), "context": C.ravel(),
                         "seconds": true * (1 + noise * rng.standard_normal(true.shape))})


def test_calibrate_recovers_known_efficiencies(llama, mi300x):
    truth = Efficiency(bandwidth=0.62, compute=0.41, fixed_s=3.5e-4)
    meas = _synthetic(llama, mi300x, truth)
    cal = calibrate(llama, mi300x, meas)
    assert cal.params["bandwidth"] == pytest.approx(0.62, rel=0.02)
    assert cal.params["compute"] == pytest.approx(0.41, rel=0.02)
    assert cal.params["fixed_s"] == pytest.approx(3.5e-4, rel=0.15)
    assert 0.005 < cal.rmse_rel < 0.015          # the 1 % noise, not model error
    assert cal.latency.calibrated and "calibrated" in cal.latency.describe()
    assert list(cal.residuals.columns) == ["batch", "q", "context", "measured", "predicted", "rel_error"]
    assert cal.unidentified == ()
    np.testing.assert_allclose(cal.residuals["rel_error"], cal.residuals["predicted"] / cal.residuals["measured"] - 1)


def test_calibrate_flags_unidentified_compute(llama, mi300x):
    truth = Efficiency(bandwidth=0.8, fixed_s=1e-4)
    ctx = np.array([0, 1024, 4096, 16384, 65536])
    t = Roofline(mi300x, truth).forward_time(llama, batch=1, q=1, context=ctx)
    meas = pd.DataFrame({"batch": 1, "q": 1, "context": ctx, "seconds": t})
    cal = calibrate(llama, mi300x, meas)
    assert cal.params["bandwidth"] == pytest.approx(0.8, rel=1e-4)
    assert "compute" in cal.unidentified


def test_calibrate_rejects_bad_input(llama, mi300x):
    meas = _synthetic(llama, mi300x, Efficiency())
    with pytest.raises(SpecsimValueError, match="params"):
        calibrate(llama, mi300x, meas, params=("bandwidth", "speed"))
    with pytest.raises(SpecsimValueError, match="seconds"):
        calibrate(llama, mi300x, meas.assign(seconds=-1.0))
    with pytest.raises(SpecsimValueError, match="missing columns"):
        calibrate(llama, mi300x, meas.drop(columns="q"))
    with pytest.raises(SpecsimValueError, match="at least 3 rows"):
        calibrate(llama, mi300x, meas.head(2))


def _table(model, hw, batches, qs, ctxs):
    B, Q, C = np.meshgrid(batches, qs, ctxs, indexing="ij")
    t = Roofline(hw).forward_time(model, batch=B.ravel(), q=Q.ravel(), context=C.ravel())
    return pd.DataFrame({"batch": B.ravel(), "q": Q.ravel(), "context": C.ravel(), "seconds": t})


def test_measured_latency_reproduces_points_and_interpolates(llama, mi300x):
    tab = _table(llama, mi300x, [1, 4, 16, 64], [1, 2, 8], [512, 4096])
    ml = MeasuredLatency(tab, model_name=llama.name)
    assert ml.calibrated and isinstance(ml, LatencyModel)
    got = ml.forward_time(llama, batch=tab["batch"], q=tab["q"], context=tab["context"])
    np.testing.assert_allclose(got, tab["seconds"], rtol=1e-12)
    # log-linear in batch: B=2 is halfway between 1 and 4; linear in context
    t = lambda b, q, c: float(tab.query("batch == @b and q == @q and context == @c")["seconds"].iloc[0])
    assert float(ml.forward_time(llama, batch=2, q=1, context=512)) == pytest.approx((t(1, 1, 512) + t(4, 1, 512)) / 2, rel=1e-12)
    assert float(ml.forward_time(llama, batch=4, q=4, context=512)) == pytest.approx((t(4, 2, 512) + t(4, 8, 512)) / 2, rel=1e-12)
    mid = (512 + 4096) / 2
    assert float(ml.forward_time(llama, batch=16, q=8, context=mid)) == pytest.approx((t(16, 8, 512) + t(16, 8, 4096)) / 2, rel=1e-12)


def test_measured_latency_scattered_table_is_exact(llama, mi300x):
    tab = _table(llama, mi300x, [1, 4, 16], [1, 4, 16], [1024]).drop(index=4).reset_index(drop=True)
    ml = MeasuredLatency(tab)
    np.testing.assert_allclose(ml.forward_time(llama, batch=tab["batch"], q=tab["q"], context=1024), tab["seconds"], rtol=1e-9)


def test_measured_latency_refuses_or_flags_extrapolation(llama, mi300x):
    tab = _table(llama, mi300x, [1, 4, 16], [1, 4], [1024, 2048])
    ml = MeasuredLatency(tab)
    with pytest.raises(SpecsimValueError, match="batch"):
        ml.forward_time(llama, batch=32, q=1, context=1024)
    with pytest.raises(SpecsimValueError, match="context"):
        ml.forward_time(llama, batch=4, q=1, context=8192)
    lenient = MeasuredLatency(tab, max_extrapolation=4.0)
    bd = lenient.breakdown(llama, batch=np.array([16, 32]), q=1, context=1024)
    assert bd["clamped"].tolist() == [False, True]
    assert bd["total_s"][1] == bd["total_s"][0]
    with pytest.raises(SpecsimValueError, match="batch"):
        lenient.forward_time(llama, batch=65, q=1, context=1024)
    clamp = MeasuredLatency(tab, outside="clamp")
    assert clamp.breakdown(llama, batch=1000, q=1, context=1024)["clamped"].item()


def test_measured_latency_refuses_other_model_or_tp(llama, mi300x):
    tab = _table(llama, mi300x, [1, 4], [1, 4], [1024])
    ml = MeasuredLatency(tab, model_name=llama.name, tp=1)
    other = load_model("Qwen3-8B")
    with pytest.raises(SpecsimValueError, match="model"):
        ml.forward_time(other, batch=1, q=1, context=1024)
    with pytest.raises(SpecsimValueError, match="tp"):
        ml.forward_time(llama, tp=2, batch=1, q=1, context=1024)


def test_bad_inputs_name_the_field(llama, mi300x):
    rl = Roofline(mi300x)
    with pytest.raises(SpecsimValueError, match="tp"):
        rl.forward_time(llama, tp=0, batch=1, q=1, context=0)
    with pytest.raises(SpecsimValueError, match="precision"):
        rl.forward_time(llama, precision="int8", batch=1, q=1, context=0)
    with pytest.raises(SpecsimValueError, match="batch"):
        rl.forward_time(llama, batch=0, q=1, context=0)
    with pytest.raises(SpecsimValueError, match="context"):
        rl.forward_time(llama, batch=1, q=1, context=-1)
    with pytest.raises(SpecsimValueError, match="bandwidth"):
        Efficiency(bandwidth=1.5)
    with pytest.raises(SpecsimValueError, match="fixed_s"):
        Efficiency(fixed_s=-1e-3)
    with pytest.raises(SpecsimValueError, match="table"):
        MeasuredLatency(pd.DataFrame({"batch": [1], "q": [1]}))


def test_describe_says_calibrated_or_not(mi300x):
    assert "datasheet-only" in Roofline(mi300x).describe()
    assert not Roofline(mi300x).calibrated
    assert "[calibrated]" in Roofline(mi300x, calibrated=True).describe()


def test_describe_prints_a_term_at_its_zero_bound_as_zero(mi300x):
    """The MI300X refit of 2026-12-07 put fixed_s at 2.6e-15 s (its zero bound): the calibration's
    line read "fixed=2.62e-09 us/forward"."""
    d = Roofline(mi300x, Efficiency(fixed_s=2.6e-15, allreduce_latency_s=8.16e-5), calibrated=True).describe()
    assert "fixed=~0 us (2.6e-15 s)/forward" in d and "e-09 us" not in d
    assert "per_layer=0 us" in d and "allreduce_latency=81.6 us" in d


def test_linear_attention_writes_one_state_per_verified_position():
    """Gated DeltaNet (Qwen3.6-35B-A3B): a verification step of q tokens writes q recurrent states per
    sequence (vLLM keeps one slot per draft token to roll back), a decode or prefill step one; a
    model without linear attention writes none."""
    from specsim.architecture import load_model
    from specsim.engine import LastPositionLogits
    from specsim.hardware import load_hardware
    from specsim.latency import Roofline

    rl = Roofline(load_hardware("MI300X"))
    m = load_model("Qwen3.6-35B-A3B")
    st = m.state_bytes_per_seq()
    assert st > 0
    kv = {q: float(rl.counts(m, tp=2, precision="bf16", batch=8, q=q, context=512).kv_bytes) for q in (1, 2, 5)}
    base = 8 * float(m.kv_bytes_per_seq(512, "bf16")) / 2
    for q, v in kv.items():
        assert v == pytest.approx(base + 8 * q * st / 2, rel=1e-12)
    pre = float(rl.counts(LastPositionLogits(m), tp=2, precision="bf16", batch=1, q=512, context=0).kv_bytes)
    assert pre == pytest.approx((float(m.kv_bytes_per_seq(0, "bf16")) + st) / 2, rel=1e-12)
    dense = load_model("Qwen3-8B")
    a = float(rl.counts(dense, tp=1, precision="bf16", batch=8, q=5, context=512).kv_bytes)
    assert a == pytest.approx(8 * float(dense.kv_bytes_per_seq(512, "bf16")), rel=1e-12)


def test_expert_parallel_replaces_the_moe_all_reduce_with_two_all_to_alls():
    """EP over the TP group: per MoE layer the post-MLP all-reduce becomes dispatch + combine (2 calls
    of (tp-1)/tp x T k h x 2 bytes / tp each); dense targets are unaffected."""
    from specsim.architecture import load_model
    from specsim.hardware import load_hardware
    from specsim.latency import Roofline

    hw = load_hardware("MI355X")
    rl = Roofline(hw)
    ep = rl.with_expert_parallel(True)
    m = load_model("MiniMax-M2.5")
    tp, T = 4, 64 * 4
    a = rl.counts(m, tp=tp, precision="fp8", batch=64, q=4, context=1024)
    b = ep.counts(m, tp=tp, precision="fp8", batch=64, q=4, context=1024)
    L, n_moe, k, h = m.num_layers, m.num_moe_layers, m.experts_per_token, m.hidden_size
    assert a.allreduce_calls == 2 * L and b.allreduce_calls == 2 * L + n_moe
    ar = 2 * (tp - 1) / tp * T * h * 2 / hw.link_bandwidth_bytes_per_s
    a2a = (tp - 1) / tp * T * k * h * 2 / tp / hw.link_bandwidth_bytes_per_s
    assert float(b.allreduce_calls * b.allreduce_wire_s) == pytest.approx((2 * L - n_moe) * ar + 2 * n_moe * a2a, rel=1e-12)
    d = load_model("Qwen3-8B")
    x = rl.counts(d, tp=2, precision="bf16", batch=8, q=1, context=128)
    y = ep.counts(d, tp=2, precision="bf16", batch=8, q=1, context=128)
    assert x.allreduce_calls == y.allreduce_calls and float(x.allreduce_wire_s) == float(y.allreduce_wire_s)


def test_shared_counts_reuses_counts_of_fresh_views_and_changes_no_value(mi300x):
    """``shared_counts`` (the validation fit predicts the same runs on every trial of its terms): inside the
    block a view made anew per call (prefill's LastPositionLogits, validation's SampledView) shares one memo
    entry per (view kind, model, inputs, hardware); every value is bit-identical to the unmemoised one, a view
    never gets the bare model's counts (their lm_head FLOPs differ) and another hardware gets its own."""
    from specsim.engine import LastPositionLogits
    from specsim.latency import _SHARED_COUNTS, shared_counts
    from specsim.studies.validation import SampledView

    m = load_model("Qwen3.6-35B-A3B")  # MoE: expert counts and padding FLOPs too
    other_hw = load_hardware("H100")
    kw = dict(tp=2, precision="bf16", batch=np.array([1.0, 8.0, 64.0]), q=np.array([[1.0], [4.0]]), context=2048.0)
    kinds = [lambda: m, lambda: LastPositionLogits(m), lambda: SampledView(m, "last"), lambda: SampledView(m, "all")]
    plain = {(i, hw.name): Roofline(hw).breakdown(make(), **kw) for i, make in enumerate(kinds)
             for hw in (mi300x, other_hw)}
    assert not np.array_equal(plain[(0, "MI300X")]["compute_s"], plain[(1, "MI300X")]["compute_s"])
    assert _SHARED_COUNTS.get() is None
    with shared_counts() as memo:
        for _ in range(3):  # the same inputs again: hits, with fresh views every time
            for i, make in enumerate(kinds):
                for hw in (mi300x, other_hw):
                    got = Roofline(hw).breakdown(make(), **kw)
                    for k, v in plain[(i, hw.name)].items():
                        assert np.array_equal(got[k], v), (i, hw.name, k)
        with shared_counts() as inner:  # nested: the same memo
            assert inner is memo
        # one entry per kind of view (SampledView "all" and the bare model are two keys of equal counts)
        assert len(memo) == len(kinds)
        assert all(len(e["forward counts"]) == 2 for e in memo.values())  # one per hardware
    assert _SHARED_COUNTS.get() is None  # nothing is memoised outside the block
