"""Tests of specsim.predict: closed forms, invariants, sweep/best_n consistency, errors.

The closed-form checks use tiny stand-in latency / drafter objects (duck-typed to the contracts in
docs/architecture.md) so that every expected number is computed here, independently of the
roofline, the draft-cost models and the acceptance tables.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import specsim
from specsim.acceptance import Acceptance
from specsim.engine import SpecOverhead
from specsim.errors import SpecsimValueError
from specsim.predict import Prediction, best_n, predict, sweep

# --------------------------------------------------------------------------------------------
# stand-ins for the latency / drafter contracts

ISL = 4096


class ConstLatency:
    """Forward time T seconds for any decode call, and ``prefill_s`` seconds per request prefill
    through the latency model's ``prefill_time`` hook (predict uses it instead of its own
    chunked-prefill difference, tested separately below).  ``prefill_s = 0`` isolates the decode
    ratio: predict's ratio [C t_prefill + OSL T_base] / [C t_prefill + OSL / MAL T_spec] then
    reduces to MAL T_base / T_spec.
    """

    calibrated = False

    def __init__(self, t_s: float, prefill_s: float = 0.0):
        self.t_s = t_s
        self.prefill_s = prefill_s
        self.calls = []
        self.prefill_calls = []

    def forward_time(self, model, *, tp=1, precision=None, batch, q, context, kv_precision=None):
        b, qq, c = np.broadcast_arrays(np.asarray(batch, float), np.asarray(q, float), np.asarray(context, float))
        self.calls.append((b.copy(), qq.copy(), c.copy()))
        return np.full(b.shape, self.t_s)

    def prefill_time(self, model, *, tp, precision, concurrency, q_host, isl, context):
        c, i = np.broadcast_arrays(np.asarray(concurrency, float), np.asarray(isl, float))
        self.prefill_calls.append((c.copy(), i.copy()))
        return np.full(c.shape, self.prefill_s)

    def describe(self) -> str:
        return f"constant {self.t_s} s/forward, prefill {self.prefill_s} s"


class FractionDrafter:
    """Draft cost = N * c * T (Leviathan et al. 2023, Sec. 3.4: each draft step costs c times a
    target step).  No ``draft`` network, so predict adds no draft prefill."""

    method = "eagle3"
    kind = "sequential"
    draft = None

    def __init__(self, c: float, latency: ConstLatency):
        self.c = c
        self.latency = latency

    def draft_time(self, latency, target=None, *, n, batch, context, tp=1, precision=None):
        nn, _b, _c = np.broadcast_arrays(np.asarray(n, float), np.asarray(batch, float), np.asarray(context, float))
        return nn * self.c * self.latency.t_s


def _leviathan_ratio(alpha: float, n: int, c: float) -> float:
    """Leviathan et al. (2023), Thm 3.8: expected walltime improvement factor
    (1 - alpha^(N+1)) / ((1 - alpha) (N c + 1)) (alpha < 1)."""
    return (1.0 - alpha ** (n + 1)) / ((1.0 - alpha) * (n * c + 1.0))


def _predict_const(alpha, n, c, *, t_s=0.01, prefill_s=0.0, concurrency=1, osl=1024, **kw):
    lat = ConstLatency(t_s, prefill_s)
    return predict("Qwen3-8B", None, n, hardware="MI300X", concurrency=concurrency, isl=ISL, osl=osl,
                   acceptance=Acceptance.constant(alpha, temperature=0.0), drafter=FractionDrafter(c, lat),
                   latency=lat, overhead=SpecOverhead(), **kw), lat


# --------------------------------------------------------------------------------------------
# closed forms


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.8, 0.95])
@pytest.mark.parametrize("n", [1, 2, 3, 7, 15])
@pytest.mark.parametrize("c", [0.0, 0.05, 0.3, 1.0])
def test_leviathan_closed_form(alpha, n, c):
    p, lat = _predict_const(alpha, n, c, concurrency=4)
    # the isolation really happened: prefill calls exist and were timed at 0
    assert any(np.all(i == ISL) for _, i in lat.prefill_calls)
    assert p.t_prefill_s == 0.0
    assert p.throughput_ratio == pytest.approx(_leviathan_ratio(alpha, n, c), rel=1e-9, abs=0)
    assert p.mal == pytest.approx(sum(alpha**k for k in range(n + 1)), rel=1e-12)
    assert p.t_draft_s == pytest.approx(n * c * 0.01, rel=1e-12)
    assert p.t_step_s == pytest.approx(0.01 * (1 + n * c), rel=1e-12)


@pytest.mark.parametrize("alpha,n,c,conc,osl,prefill_s", [
    (0.8, 3, 0.1, 1, 256, 0.05), (0.6, 7, 0.02, 32, 1024, 0.2), (0.9, 15, 0.05, 128, 64, 0.5),
])
def test_prefill_dilutes_ratio(alpha, n, c, conc, osl, prefill_s):
    """With a prefill of P seconds per request shared by both arms (docs/architecture.md, predict.py),
    which samples the first of OSL output tokens (D = OSL - 1 come from decode steps):
    ratio = (C P + D T) / (C P + D / MAL * T (1 + N c)), between 1 and the decode ratio."""
    t = 0.01
    p, _ = _predict_const(alpha, n, c, t_s=t, prefill_s=prefill_s, concurrency=conc, osl=osl)
    mal = (1 - alpha ** (n + 1)) / (1 - alpha)
    d = osl - 1
    expected = (conc * prefill_s + d * t) / (conc * prefill_s + d / mal * t * (1 + n * c))
    assert p.throughput_ratio == pytest.approx(expected, rel=1e-9)
    decode_only = _leviathan_ratio(alpha, n, c)
    assert min(1.0, decode_only) <= p.throughput_ratio <= max(1.0, decode_only)
    # per-stream TPOT as vllm bench serve times it, after the first token: own decode + the other
    # C-1 requests' prefill stalls, over OSL - 1
    assert p.tpot_s == pytest.approx((d / mal * t * (1 + n * c) + (conc - 1) * prefill_s) / d, rel=1e-12)
    assert p.baseline_tpot_s == pytest.approx((d * t + (conc - 1) * prefill_s) / d, rel=1e-12)
    # output tok/s counts all OSL tokens of each request, the prefill's first one included
    assert p.output_tok_per_s == pytest.approx(conc * osl / (conc * prefill_s + d / mal * t * (1 + n * c)),
                                               rel=1e-12)


def test_chunked_prefill_cost_is_the_difference_of_two_steps():
    """Without a ``prefill_time`` hook, one request's prefill costs (vLLM chunked prefill): at C = 1
    a standalone forward of ISL tokens on an empty cache; at C > 1 the step of the other C - 1
    requests with the ISL prompt tokens spread over them minus the same step without them, both on
    an empty context (decode query length 1; the same target prefill in both arms), capped at the
    standalone prefill.  Checked against direct Roofline calls; never above a standalone prefill,
    also for a long prompt (the prompt does not attend to the other requests' contexts)."""
    from specsim.architecture import load_model
    from specsim.engine import LastPositionLogits
    from specsim.hardware import load_hardware
    from specsim.latency import Efficiency, Roofline

    lat = Roofline(load_hardware("MI300X"), Efficiency(bandwidth=0.6, compute=0.4, fixed_s=3e-3))
    tgt = load_model("Qwen3-8B")
    m = LastPositionLogits(tgt)
    isl, osl, n = 512, 256, 3
    kw = dict(hardware="MI300X", isl=isl, osl=osl, acceptance=0.7, latency=lat, overhead=SpecOverhead(),
              drafter=FractionDrafter(0.0, ConstLatency(0.0)))
    alone = float(lat.forward_time(m, batch=1, q=isl, context=0.0))
    p1 = predict(tgt, None, n, concurrency=1, **kw)
    assert p1.t_prefill_s == pytest.approx(alone, rel=1e-12)
    for c in (2, 16, 64):
        h = c - 1
        want = float(lat.forward_time(m, batch=h, q=1 + isl / h, context=0.0) - lat.forward_time(m, batch=h, q=1, context=0.0))
        p = predict(tgt, None, n, concurrency=c, **kw)
        assert p.t_prefill_s == pytest.approx(want, rel=1e-12)
        assert 0 < p.t_prefill_s < alone  # weights are already read by the running step
        cycle_base = c * want + (osl - 1) * p.t_base_s
        cycle_spec = c * want + (osl - 1) / p.mal * p.t_step_s
        assert p.throughput_ratio == pytest.approx(cycle_base / cycle_spec, rel=1e-9)
    # a long prompt beside ONE running request: never dearer than prefilling it alone
    for tgt_name in ("Qwen3-8B", "Kimi-K2.5"):
        big = dict(kw, isl=16000, osl=256, hardware="MI300X", tp=8 if tgt_name == "Kimi-K2.5" else 1)
        one = predict(tgt_name, None, n, concurrency=1, **big).t_prefill_s
        two = predict(tgt_name, None, n, concurrency=2, **big).t_prefill_s
        assert 0 < two <= one


def test_no_prefill_tok_per_s_is_concurrency_over_tpot_and_bound_holds():
    p, _ = _predict_const(0.7, 4, 0.1, concurrency=17)
    # TPOT is timed over the OSL - 1 tokens after the first (vllm bench serve); tok/s counts all OSL
    # (the prefill's token costs nothing here): tok/s = C / TPOT * OSL / (OSL - 1)
    assert p.osl == 1024
    assert p.output_tok_per_s == pytest.approx(17 / p.tpot_s * 1024 / 1023, rel=1e-12)
    assert p.baseline_output_tok_per_s == pytest.approx(17 / p.baseline_tpot_s * 1024 / 1023, rel=1e-12)
    assert p.throughput_ratio <= p.speedup_bound
    # free drafting (c = 0), no overhead, no prefill: the bound is attained
    p0, _ = _predict_const(0.7, 4, 0.0, concurrency=17)
    assert p0.throughput_ratio == pytest.approx(p0.speedup_bound, rel=1e-12)


def test_overhead_enters_step_time():
    lat = ConstLatency(0.01)
    ov = SpecOverhead(fixed_s=1e-3, per_token_s=2e-6)
    p = predict("Qwen3-8B", None, 3, concurrency=8, isl=ISL, osl=512, acceptance=Acceptance.constant(0.5, temperature=0.0),
                drafter=FractionDrafter(0.1, lat), latency=lat, overhead=ov)
    assert p.t_overhead_s == pytest.approx(1e-3 + 2e-6 * 8 * 4, rel=1e-12)
    mal = 1 + 0.5 + 0.25 + 0.125
    assert p.throughput_ratio == pytest.approx(mal * 0.01 / (0.01 * 1.3 + p.t_overhead_s), rel=1e-9)


# (target, method, concurrency, tp, layers, non-sliding layers): Qwen3-8B 36 full-attention layers;
# gpt-oss-20b 24 layers alternating sliding / full attention (HF config layer_types), MoE, all-reduces at TP 2
ROOFLINE_PATH_CASES = [("Qwen3-8B", "eagle3", 1, 1, 36, 36), ("Qwen3-8B", "eagle3", 8, 1, 36, 36),
                       ("Qwen3-8B", "ngram", 1, 1, 36, 36), ("Qwen3-8B", "ngram", 8, 1, 36, 36),
                       ("Qwen3-8B", "dspark", 8, 1, 36, 36), ("gpt-oss-20b", "eagle3", 8, 2, 24, 12)]


@pytest.mark.parametrize("target, method, c, tp, layers, full_layers", ROOFLINE_PATH_CASES)
def test_roofline_path_terms_recomputed_from_the_roofline_and_the_stack_terms(target, method, c, tp, layers,
                                                                              full_layers):
    """On a Roofline, predict times every forward from physical counts (``engine.step_plan`` /
    ``plan_seconds``): a second implementation beside the callables path the stand-ins above check,
    and the one every catalog prediction uses.  Each term is recomputed here from
    ``Roofline.forward_time`` (its closed forms: tests/test_latency.py), the drafter's own
    ``draft_time`` and the stack terms by hand, with EVERY stack term non-zero (per-layer launch gap,
    host seconds, per-sequence-per-layer spec overhead; the shipped calibrations leave some at 0, so
    the tests on them cannot see those terms dropped or mis-scaled)."""
    from specsim.architecture import load_model
    from specsim.drafters import get_drafter
    from specsim.engine import LastPositionLogits
    from specsim.hardware import load_hardware
    from specsim.latency import Efficiency, Roofline

    lat = Roofline(load_hardware("MI300X"), Efficiency(bandwidth=0.6, compute=0.45, fixed_s=3e-4, per_layer_s=2e-6,
                                                       allreduce_latency_s=1e-5))
    ov = SpecOverhead(fixed_s=1e-3, per_token_s=2e-6, host_step_s=4e-3, host_per_seq_s=5e-5, per_seq_layer_s=3e-7)
    tgt, n, isl, osl, alpha = load_model(target), 3, 512, 256, 0.7
    p = predict(target, method, n, hardware="MI300X", tp=tp, precision="bf16", concurrency=c, isl=isl, osl=osl,
                acceptance=Acceptance.constant(alpha, temperature=0.0), latency=lat, overhead=ov)
    ctx, d, mal = isl + osl / 2, osl - 1, sum(alpha**k for k in range(n + 1))

    def fwd(model, b, q, context):
        return float(lat.forward_time(model, tp=tp, precision="bf16", batch=b, q=q, context=context))

    # the per-layer launch gap is in the forward, once per layer (HF config num_hidden_layers)
    no_gap = Roofline(lat.hardware, Efficiency(bandwidth=0.6, compute=0.45, fixed_s=3e-4, allreduce_latency_s=1e-5))
    assert fwd(tgt, c, 1, ctx) - float(no_gap.forward_time(tgt, tp=tp, precision="bf16", batch=c, q=1,
                                                            context=ctx)) == pytest.approx(layers * 2e-6, rel=1e-9)
    host = 4e-3 + 5e-5 * c
    # spec overhead: fixed + per verified token C (N + 1) + per sequence per non-sliding attention layer
    over = 1e-3 + 2e-6 * c * (n + 1) + 3e-7 * c * full_layers
    assert p.t_host_s == pytest.approx(host, rel=1e-12)
    assert p.t_overhead_s == pytest.approx(over, rel=1e-12)
    assert p.t_base_s == pytest.approx(fwd(tgt, c, 1, ctx) + host, rel=1e-12)
    assert p.t_verify_s == pytest.approx(fwd(tgt, c, n + 1, ctx), rel=1e-12)
    drafter = get_drafter(method, target=target)
    draft = float(drafter.draft_time(lat, tgt, n=n, batch=c, context=ctx, tp=tp, precision="bf16"))
    if method == "ngram":  # a CPU lookup per request
        assert draft == pytest.approx(c * drafter.lookup_s_per_request, rel=1e-12) and draft > 0
    assert p.t_draft_s == pytest.approx(draft, rel=1e-12)
    assert p.t_step_s == pytest.approx(draft + fwd(tgt, c, n + 1, ctx) + host + over, rel=1e-12)

    # one request's prefill (logits at the last prompt position): alone at C = 1, else the difference
    # of the other C - 1 requests' step with and without the prompt spread over them
    def prefill(model):
        m = LastPositionLogits(model)
        alone = fwd(m, 1, isl, 0.0)
        if c == 1:
            return alone
        h = c - 1
        return min(fwd(m, h, 1 + isl / h, 0.0) - fwd(m, h, 1, 0.0), alone)

    pf = prefill(tgt)
    # the draft net's pass over the prompt (none for a lookup)
    pf_spec = pf + (prefill(drafter.draft) if method != "ngram" else 0.0)
    assert p.t_prefill_s == pytest.approx(pf, rel=1e-12)
    assert p.t_prefill_spec_s == pytest.approx(pf_spec, rel=1e-12)
    assert (p.t_prefill_spec_s > p.t_prefill_s) == (method != "ngram")
    t_base, t_step = p.t_base_s, p.t_step_s
    assert p.output_tok_per_s == pytest.approx(c * osl / (c * pf_spec + d / mal * t_step), rel=1e-12)
    assert p.baseline_output_tok_per_s == pytest.approx(c * osl / (c * pf + d * t_base), rel=1e-12)
    assert p.tpot_s == pytest.approx((d / mal * t_step + (c - 1) * pf_spec) / d, rel=1e-12)
    # free drafting, no speculative overhead, the target's prefill only (the host seconds stay: both arms pay them)
    bound = (c * pf + d * t_base) / (c * pf + d / mal * (fwd(tgt, c, n + 1, ctx) + host))
    assert p.speedup_bound == pytest.approx(bound, rel=1e-12)


def test_roofline_path_k0_step_keeps_only_the_fixed_spec_overhead():
    """A dynamic schedule's k = 0 step (recommend's K = 0 bands) on the roofline path: nothing is
    verified, so of the speculative overhead only the fixed term is paid (vLLM runs no rejection
    sampler), and one token is committed per step."""
    from specsim.engine import evaluate
    from specsim.hardware import load_hardware
    from specsim.latency import Efficiency, Roofline
    from specsim.predict import resolve_inputs

    lat = Roofline(load_hardware("MI300X"), Efficiency(bandwidth=0.6, compute=0.45, fixed_s=3e-4))
    ov = SpecOverhead(fixed_s=1e-3, per_token_s=2e-6, host_step_s=4e-3, host_per_seq_s=5e-5, per_seq_layer_s=3e-7)
    r = resolve_inputs("Qwen3-8B", "eagle3", 3, hardware="MI300X", acceptance=0.7, latency=lat)
    out = evaluate(r, np.array([0, 3]), 8, 512, 256, 1, ov)
    assert out["t_overhead_s"].tolist() == pytest.approx([1e-3, 1e-3 + 2e-6 * 8 * 4 + 3e-7 * 8 * 36], rel=1e-12)
    assert out["mal"].tolist() == pytest.approx([1.0, 1 + 0.7 + 0.49 + 0.343], rel=1e-12)


# --------------------------------------------------------------------------------------------
# invariants over random valid inputs (real models, default drafters, datasheet / shipped latency)

# (target, method) pairs for which specsim/data/drafters or the derived fallback gives a drafter
PAIRS = [
    ("Qwen3-8B", "eagle3"), ("Qwen3-8B", "dflash"), ("Qwen3-8B", "dspark"), ("Qwen3-8B", "ngram"),
    ("gemma-4-26B-A4B-it", "eagle3"), ("gemma-4-26B-A4B-it", "mtp"), ("gemma-4-26B-A4B-it", "dflash"),
    ("gemma-4-31B-it", "mtp"), ("gemma-4-31B-it", "dspark"), ("Qwen3.6-35B-A3B", "mtp"),
    ("Qwen3.6-35B-A3B", "dflash"), ("Llama-3.1-8B-Instruct", "eagle3"), ("Llama-3.3-70B-Instruct", "eagle"),
    ("MiniMax-M2.5", "eagle3"), ("Kimi-K2.5", "dflash"), ("DeepSeek-V3", "suffix"), ("vicuna-13b-v1.3", "eagle"),
]
GPUS = ["MI300X", "MI325X", "MI355X", "H100 SXM", "H200 SXM", "B200 SXM"]


@st.composite
def acceptances(draw):
    kind = draw(st.sampled_from(["constant", "conditional", "counts"]))
    if kind == "constant":
        return Acceptance.constant(draw(st.floats(0.0, 1.0)), temperature=0.0)
    if kind == "conditional":
        rates = draw(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=10))
        return Acceptance.from_rates(rates, kind="conditional", temperature=0.0)
    drafts = draw(st.integers(1, 10_000))
    acc, prev = [], drafts
    for _ in range(draw(st.integers(1, 8))):
        prev = draw(st.integers(0, prev))
        acc.append(prev)
    return Acceptance.from_counts(drafts, acc, temperature=0.0)


@st.composite
def scenarios(draw):
    target, method = draw(st.sampled_from(PAIRS))
    sc = dict(target=target, method=method, hardware=draw(st.sampled_from(GPUS)),
              tp=draw(st.sampled_from([1, 2, 8])), concurrency=draw(st.integers(1, 256)),
              isl=draw(st.integers(1, 16384)), osl=draw(st.integers(2, 4096)), acceptance=draw(acceptances()))
    assume(_feasible(sc))
    return sc


def _feasible(sc) -> bool:
    """Deployments vLLM would refuse (weights not fitting at this TP, TP not dividing the heads,
    ISL + OSL beyond the model's context) raise a 'tp' / 'isl + osl' error in predict; the
    invariants are about deployments that run."""
    try:
        predict(sc["target"], sc["method"], 1, hardware=sc["hardware"], tp=sc["tp"], concurrency=1, isl=sc["isl"],
                osl=sc["osl"], acceptance=0.5)
    except SpecsimValueError as e:
        assert e.field in ("tp", "isl + osl"), e
        return False
    return True


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios(), n=st.integers(1, 15))
def test_invariants(sc, n):
    p = predict(sc["target"], sc["method"], n, hardware=sc["hardware"], tp=sc["tp"], concurrency=sc["concurrency"],
                isl=sc["isl"], osl=sc["osl"], acceptance=sc["acceptance"])
    c, osl = sc["concurrency"], sc["osl"]
    # MAL counts the bonus token: 1 <= MAL <= N + 1
    assert 1.0 - 1e-12 <= p.mal <= n + 1 + 1e-12
    assert p.acceptance_rate == pytest.approx((p.mal - 1) / n, abs=1e-12)
    # step time = draft + verification + overhead; all parts non-negative
    for f in ("t_draft_s", "t_verify_s", "t_overhead_s", "t_prefill_s", "t_base_s"):
        assert getattr(p, f) >= 0.0 and math.isfinite(getattr(p, f))
    assert p.t_step_s == pytest.approx(p.t_draft_s + p.t_verify_s + p.t_host_s + p.t_overhead_s, rel=1e-12)
    # the ratio is the ratio of the two arms' throughputs
    assert p.throughput_ratio == pytest.approx(p.output_tok_per_s / p.baseline_output_tok_per_s, rel=1e-12)
    # bound: free drafting and no speculative overhead, with the same prefill dilution, bounds the
    # ratio: (C P + D T_base) / (C P' + D T_step / MAL) <= (C P + D T_base) / (C P + D T_verify / MAL), D = OSL - 1,
    # because P' >= P (the drafter's pass over the prompt) and T_step >= T_verify.  D / MAL is the decode
    # steps per request, at least one (a request needing fewer tokens than a step commits still takes it)
    steps = max((osl - 1) / p.mal, 1.0)
    decode_ratio = (osl - 1) * p.t_base_s / (steps * p.t_step_s)
    assert p.throughput_ratio <= p.speedup_bound * (1 + 1e-12)
    assert decode_ratio <= (osl - 1) * p.t_base_s / (steps * p.t_verify_s) * (1 + 1e-12)
    assert p.throughput_ratio <= max(1.0, decode_ratio) * (1 + 1e-12)
    if sc["method"] in ("ngram", "suffix"):
        assert p.throughput_ratio >= min(1.0, decode_ratio) * (1 - 1e-12)
    # TPOT <-> tok/s: C * OSL / tok/s = (OSL - 1) * TPOT + own prefill (TPOT is timed over the tokens
    # after the prefill's first; baseline exactly the target's prefill; the speculative arm also pays
    # the drafter's pass over the prompt, none for lookup methods)
    d = osl - 1
    assert c * osl / p.baseline_output_tok_per_s == pytest.approx(d * p.baseline_tpot_s + p.t_prefill_s, rel=1e-9)
    own_prefill_spec = c * osl / p.output_tok_per_s - d * p.tpot_s
    # (own_prefill_spec is a difference of two ~OSL x TPOT quantities: its rounding scales with them,
    # a few ulps of D x TPOT)
    if sc["method"] in ("ngram", "suffix"):
        assert own_prefill_spec == pytest.approx(p.t_prefill_s, rel=1e-9, abs=8 * np.finfo(float).eps * d * p.tpot_s)
    else:
        assert own_prefill_spec >= p.t_prefill_s * (1 - 1e-9) - 1e-12 * osl * p.tpot_s


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios())
def test_mal_non_decreasing_in_n_and_sweep_matches_predict(sc):
    df = sweep(sc["target"], sc["method"], num_speculative_tokens=range(1, 16), hardware=sc["hardware"], tp=sc["tp"],
               concurrency=[sc["concurrency"]], isl=sc["isl"], osl=sc["osl"], acceptance=sc["acceptance"])
    mal = df["mal"].to_numpy()
    assert np.all(np.diff(mal) >= -1e-12)
    assert np.all((mal >= 1 - 1e-12) & (mal <= df["num_speculative_tokens"].to_numpy() + 1 + 1e-12))
    n = 1 + (sc["concurrency"] * 7 + sc["osl"]) % 15  # a data-dependent N to compare with predict()
    p = predict(sc["target"], sc["method"], n, hardware=sc["hardware"], tp=sc["tp"], concurrency=sc["concurrency"],
                isl=sc["isl"], osl=sc["osl"], acceptance=sc["acceptance"])
    row = df[df["num_speculative_tokens"] == n].iloc[0]
    for f in ("throughput_ratio", "mal", "t_step_s", "tpot_s", "output_tok_per_s"):
        assert row[f] == pytest.approx(getattr(p, f), rel=1e-12)


# --------------------------------------------------------------------------------------------
# sweep

SWEEP_COLUMNS = {
    "target", "method", "hardware", "tp", "precision", "acceptance", "num_speculative_tokens", "concurrency", "isl",
    "osl", "throughput_ratio", "mal", "acceptance_rate", "t_base_s", "t_step_s", "t_draft_s", "t_verify_s",
    "t_overhead_s", "t_prefill_s", "output_tok_per_s", "baseline_output_tok_per_s", "tpot_s", "baseline_tpot_s",
    "speedup_bound", "latency_calibrated", "acceptance_extrapolated",
}


@pytest.fixture(scope="module")
def profiles():
    # Source: vllm-amd-specdec-post appendix (gemma-4-26B-A4B-it, dflash, MI300X, GSM8K), cumulative.
    gsm = Acceptance.from_rates([0.863, 0.732, 0.622, 0.525, 0.440, 0.366, 0.304], kind="cumulative",
                                temperature=0.0)
    return {"gsm8k": gsm, "const0.6": Acceptance.constant(0.6, temperature=0.0)}


def test_sweep_tidy_frame(profiles):
    ns, cs, isls, osls, hws = [1, 3, 7, 12], [1, 16, 200], [128, 2048], [64, 1024], ["MI300X", "H200 SXM"]
    df = sweep("gemma-4-26B-A4B-it", "dflash", num_speculative_tokens=ns, hardware=hws, tp=2, concurrency=cs,
               isl=isls, osl=osls, acceptance=profiles)
    assert SWEEP_COLUMNS <= set(df.columns)
    assert len(df) == len(ns) * len(cs) * len(isls) * len(osls) * len(hws) * len(profiles)
    # every grid point exactly once
    keys = ["hardware", "acceptance", "num_speculative_tokens", "concurrency", "isl", "osl"]
    assert not df.duplicated(keys).any()
    assert set(df["acceptance"]) == set(profiles)
    assert set(df["hardware"]) == {"MI300X", "H200 SXM"}
    assert (df["tp"] == 2).all() and (df["target"] == "gemma-4-26B-A4B-it").all() and (df["method"] == "dflash").all()
    # N = 12 lies beyond the 7 measured positions of gsm8k; the constant profile is parametric everywhere
    g = df[df["acceptance"] == "gsm8k"]
    assert g.loc[g["num_speculative_tokens"] == 12, "acceptance_extrapolated"].all()
    assert not g.loc[g["num_speculative_tokens"] == 7, "acceptance_extrapolated"].any()
    rng = np.random.default_rng(0)
    for i in rng.choice(len(df), size=8, replace=False):
        row = df.iloc[i]
        p = predict("gemma-4-26B-A4B-it", "dflash", int(row["num_speculative_tokens"]), hardware=row["hardware"], tp=2,
                    concurrency=int(row["concurrency"]), isl=int(row["isl"]), osl=int(row["osl"]),
                    acceptance=profiles[row["acceptance"]])
        for f in ("throughput_ratio", "mal", "t_base_s", "t_step_s", "t_draft_s", "t_verify_s", "t_prefill_s",
                  "tpot_s", "baseline_tpot_s", "output_tok_per_s", "speedup_bound"):
            assert row[f] == pytest.approx(getattr(p, f), rel=1e-12), f
        assert row["acceptance_extrapolated"] == p.acceptance_extrapolated
        assert row["precision"] == p.precision


def test_sweep_rejects_bad_axis_values():
    acc = Acceptance.constant(0.7, temperature=0.0)
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[0, 1], acceptance=acc)
    assert ei.value.field == "num_speculative_tokens"
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", concurrency=[4, 0], acceptance=acc)
    assert ei.value.field == "concurrency"
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", isl=[1.5], acceptance=acc)
    assert ei.value.field == "isl"


def test_sweep_labels_each_of_several_unlabelled_profiles_by_position():
    """A new-user trial: two unlabelled profiles gave acceptance [None, None], rows not told apart."""
    kw = dict(hardware="MI300X", concurrency=[8])
    df = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], **kw,
               acceptance=[Acceptance.constant(0.7), Acceptance.constant(0.5)])
    assert df["acceptance"].tolist() == ["acceptance[0]", "acceptance[1]"]
    for label, a in (("acceptance[0]", 0.7), ("acceptance[1]", 0.5)):
        assert df.loc[df["acceptance"] == label, "mal"].item() == pytest.approx(1 + a + a**2 + a**3, rel=1e-12)
    # a labelled profile keeps its label; numbers and rate lists are labelled by position too
    mixed = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], **kw,
                  acceptance=[Acceptance.constant(0.7, label="chat"), 0.5, [0.8, 0.6, 0.45]])
    assert mixed["acceptance"].tolist() == ["chat", "acceptance[1]", "acceptance[2]"]
    assert mixed["mal"].tolist() == pytest.approx([1 + 0.7 + 0.49 + 0.343, 1 + 0.5 + 0.25 + 0.125, 2.85], rel=1e-12)
    # one profile keeps what it had: its label, or None
    assert sweep("Qwen3-8B", "eagle3", [3], acceptance=Acceptance.constant(0.7), **kw)["acceptance"].tolist() == [None]
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", [3], **kw,
              acceptance=[Acceptance.constant(0.7, label="x"), Acceptance.constant(0.5, label="x")])
    assert ei.value.field == "acceptance" and "share a label" in str(ei.value) and "['x']" in str(ei.value)


# --------------------------------------------------------------------------------------------
# best_n


def test_best_n_is_argmax_of_predict_with_near_best_flags(profiles):
    kw = dict(hardware="MI300X", tp=2, concurrency=32, isl=1024, osl=1024, acceptance=profiles["gsm8k"])
    best, curve = best_n("gemma-4-26B-A4B-it", "dflash", n_values=range(1, 11), flat_tolerance=0.02, **kw)
    ratios = {n: predict("gemma-4-26B-A4B-it", "dflash", n, **kw).throughput_ratio for n in range(1, 11)}
    top = max(ratios.values())
    assert best == min(n for n, r in ratios.items() if r == top)
    assert list(curve["num_speculative_tokens"]) == list(range(1, 11))
    expected_flags = [ratios[n] >= top * (1 - 0.02) for n in range(1, 11)]
    assert list(curve["near_best"]) == expected_flags
    assert curve.loc[curve["num_speculative_tokens"] == best, "near_best"].item()
    # tolerance 0: only the argmax; tolerance 1: every N with a positive ratio
    _, c0 = best_n("gemma-4-26B-A4B-it", "dflash", n_values=range(1, 11), flat_tolerance=0.0, **kw)
    assert list(c0.loc[c0["near_best"], "num_speculative_tokens"]) == [best]
    _, c1 = best_n("gemma-4-26B-A4B-it", "dflash", n_values=range(1, 11), flat_tolerance=1.0, **kw)
    assert c1["near_best"].all()


def test_best_n_names_itself_for_an_unknown_keyword():
    """A new-user trial: best_n(..., concurency=8) raised "sweep() got an unexpected keyword argument",
    naming a function the user did not call; predict and sweep name themselves (Python's TypeError)."""
    acc = [0.8, 0.6, 0.45]
    with pytest.raises(TypeError) as ei:
        best_n("Qwen3-8B", "eagle3", acceptance=acc, concurency=8)
    assert str(ei.value) == "best_n() got an unexpected keyword argument 'concurency'"
    with pytest.raises(TypeError) as ei:
        predict("Qwen3-8B", "eagle3", 3, acceptance=acc, concurency=8)
    assert str(ei.value) == "predict() got an unexpected keyword argument 'concurency'"
    # every keyword of sweep but N (best_n's n_values) still reaches it
    best, curve = best_n("Qwen3-8B", "eagle3", n_values=[1, 2, 3], acceptance=acc, concurrency=8, hardware="MI300X",
                         isl=512, osl=256, expert_parallel=False)
    assert best in (1, 2, 3) and set(curve["concurrency"]) == {8} and set(curve["isl"]) == {512}


def test_best_n_rejects_grids():
    acc = Acceptance.constant(0.7, temperature=0.0)
    with pytest.raises(SpecsimValueError):
        best_n("Qwen3-8B", "eagle3", concurrency=[1, 8], acceptance=acc)
    with pytest.raises(SpecsimValueError) as ei:
        best_n("Qwen3-8B", "eagle3", num_speculative_tokens=[1, 2], acceptance=acc)
    assert ei.value.field == "num_speculative_tokens"


@pytest.mark.parametrize("acceptance, shown", [
    ({"a": 0.5, "b": 0.9}, "(got ['a', 'b'])"),
    ([Acceptance.constant(0.5), Acceptance.constant(0.9)], "(got '2 profiles')"),
    ([[0.8, 0.6], [0.7, 0.5]], "(got '2 profiles')"),
])
def test_best_n_refuses_several_acceptance_profiles(acceptance, shown):
    """A new-user trial: best_n(acceptance={"a": 0.5, "b": 0.9}) returned one best N of a 30-row curve
    mixing both profiles, though it refuses two hardware names."""
    with pytest.raises(SpecsimValueError) as ei:
        best_n("Qwen3-8B", "eagle3", acceptance=acceptance)
    assert ei.value.field == "acceptance"
    assert "best_n finds the best N of ONE deployment and acceptance profile" in str(ei.value)
    assert "call best_n once per value" in str(ei.value) and shown in str(ei.value)


def test_best_n_names_the_axis_with_several_values():
    acc = Acceptance.constant(0.7, temperature=0.0)
    for kw, field, got in ((dict(hardware=["MI300X", "H100"]), "hardware", "['MI300X', 'H100']"),
                           (dict(concurrency=[1, 8]), "concurrency", "[1, 8]"),
                           (dict(draft=["a", "b"]), "draft", "['a', 'b']")):
        with pytest.raises(SpecsimValueError) as ei:
            best_n("Qwen3-8B", "eagle3", acceptance=acc, **kw)
        assert ei.value.field == field and f"(got {got})" in str(ei.value), str(ei.value)
    # one profile, in each form, is not refused: a dict of one, a list of one
    ref, _ = best_n("Qwen3-8B", "eagle3", hardware="MI300X", concurrency=8, acceptance=0.5)
    assert best_n("Qwen3-8B", "eagle3", hardware="MI300X", concurrency=8, acceptance={"a": 0.5})[0] == ref
    assert best_n("Qwen3-8B", "eagle3", hardware="MI300X", concurrency=8, acceptance=[Acceptance.constant(0.5)])[0] == ref


# --------------------------------------------------------------------------------------------
# errors

ACC = Acceptance.constant(0.7, temperature=0.0)


def _err(**kw) -> SpecsimValueError:
    args = dict(target="Qwen3-8B", method="eagle3", num_speculative_tokens=3, acceptance=ACC)
    args.update(kw)
    with pytest.raises(SpecsimValueError) as ei:
        predict(**args)
    return ei.value


def test_unknown_method_lists_allowed():
    e = _err(method="eagle9")
    assert e.field == "method"
    assert {"eagle3", "dflash", "mtp", "ngram", "dspark", "draft_model"} <= set(e.allowed)
    assert "eagle9" in str(e)


def test_unknown_hardware_lists_allowed():
    e = _err(hardware="TPU-v9")
    assert e.field == "hardware"
    assert {"MI300X", "MI355X"} <= set(e.allowed)


@pytest.mark.parametrize("hw,shown", [(None, "NoneType None"), (300, "int 300")])
def test_hardware_that_is_no_name_says_what_it_got(hw, shown):
    """A new-user trial: hardware=None said 'unknown hardware name' without the value given."""
    e = _err(hardware=hw)
    assert e.field == "hardware" and f"a hardware spec file (.json) or a Hardware, not {shown}" in str(e), str(e)
    assert {"MI300X", "MI355X"} <= set(e.allowed)


@pytest.mark.parametrize("n", [0, -1, 2.5, True])
def test_bad_n(n):
    assert _err(num_speculative_tokens=n).field == "num_speculative_tokens"


def test_missing_n_and_method():
    assert _err(num_speculative_tokens=None).field == "num_speculative_tokens"
    assert _err(method=None).field == "method"
    assert _err(acceptance=None).field == "acceptance"


@pytest.mark.parametrize("field,value", [("concurrency", 0), ("concurrency", -3), ("isl", 0), ("osl", 0), ("tp", 0)])
def test_bad_integer_fields(field, value):
    assert _err(**{field: value}).field == field


@pytest.mark.parametrize("cfg,field", [
    ('{"method": "eagle3", "model": "RedHatAI/Qwen3-8B-speculator.eagle3", "num_speculative_tokens": 3, "foo": 1}',
     "foo"),
    ('{"method": "eagle9", "num_speculative_tokens": 3}', "method"),
    ('{"method": "eagle3", "model": "x", "num_speculative_tokens": 3', "speculative_config"),
    ('{"method": "eagle3", "model": "RedHatAI/Qwen3-8B-speculator.eagle3", "num_speculative_tokens": 0}',
     "num_speculative_tokens"),
])
def test_bad_speculative_config(cfg, field):
    e = _err(method=None, num_speculative_tokens=None, speculative_config=cfg)
    assert e.field == field or e.field.endswith("." + field), e


def test_speculative_config_conflicts_with_arguments():
    cfg = '{"method": "eagle3", "model": "RedHatAI/Qwen3-8B-speculator.eagle3", "num_speculative_tokens": 3}'
    assert _err(method="dflash", num_speculative_tokens=None, speculative_config=cfg).field == "method"
    assert _err(method=None, num_speculative_tokens=5, speculative_config=cfg).field == "num_speculative_tokens"


def test_temperature_mismatch():
    acc = Acceptance.constant(0.7, temperature=0.0)
    e = _err(acceptance=acc, temperature=1.0)
    assert e.field == "temperature"
    note = "acceptance measured at T=0 assumed to hold at T=1 (upper bound)"
    p = predict("Qwen3-8B", "eagle3", 3, acceptance=acc, temperature=1.0, temperature_assumption=note)
    assert p.temperature == 1.0
    assert any(note in a for a in p.assumptions)
    # the assumption does not change the number, only records it
    p0 = predict("Qwen3-8B", "eagle3", 3, acceptance=acc, temperature=0.0)
    assert p.throughput_ratio == p0.throughput_ratio
    assert not any(note in a for a in p0.assumptions)


# --------------------------------------------------------------------------------------------
# vLLM --speculative-config, exactly as passed to `vllm serve`


def test_speculative_config_json_as_passed_to_vllm_serve():
    cfg = '{"method": "eagle3", "model": "RedHatAI/gemma-4-26B-A4B-it-speculator.eagle3", "num_speculative_tokens": 3}'
    acc = Acceptance.constant(0.75, temperature=0.0)
    p = predict("gemma-4-26B-A4B-it", speculative_config=cfg, acceptance=acc, concurrency=8, hardware="MI300X")
    assert isinstance(p, Prediction)
    assert (p.method, p.num_speculative_tokens) == ("eagle3", 3)
    # same as giving the fields separately (the checkpoint is the seed eagle3 drafter of this target)
    q = predict("gemma-4-26B-A4B-it", "eagle3", 3, draft="RedHatAI/gemma-4-26B-A4B-it-speculator.eagle3",
                acceptance=acc, concurrency=8, hardware="MI300X")
    assert p.throughput_ratio == q.throughput_ratio and p.t_draft_s == q.t_draft_s
    # a dict with the same content is accepted too
    r = predict("gemma-4-26B-A4B-it", speculative_config=json.loads(cfg), acceptance=acc, concurrency=8)
    assert r.throughput_ratio == p.throughput_ratio


def test_scalar_acceptance_equals_constant_and_is_flagged():
    p = predict("Qwen3-8B", "eagle3", 4, acceptance=0.7, concurrency=4)
    q = predict("Qwen3-8B", "eagle3", 4, acceptance=Acceptance.constant(0.7), concurrency=4)
    assert p.throughput_ratio == q.throughput_ratio
    assert p.mal == pytest.approx(sum(0.7**k for k in range(5)), rel=1e-12)
    assert any("constant" in a for a in p.assumptions)


def test_prediction_json_round_trip_and_summary():
    p = predict("Qwen3-8B", "eagle3", 3, acceptance=ACC, concurrency=4)
    d = json.loads(p.to_json())
    assert d["throughput_ratio"] == p.throughput_ratio and d["num_speculative_tokens"] == 3
    assert isinstance(d["assumptions"], list)
    s = p.summary()
    assert "throughput ratio" in s and "MAL" in s and f"{p.throughput_ratio:.3f}" in s
    assert specsim.predict is predict


def test_summary_prints_a_warning_once_though_it_is_an_assumption_too():
    """A new-user trial: on an uncalibrated part (B300) the summary printed the zero-overhead note twice, as an
    assumption and as a WARNING; ``assumptions`` still holds every one (the JSON keeps both lists)."""
    p = predict("Qwen3-8B", "eagle3", 3, hardware="B300", acceptance=ACC, concurrency=4)
    both = [w for w in p.warnings if w in p.assumptions]
    assert both and any("no stack calibration ships for B300 SXM" in w for w in both)
    s = p.summary()
    for w in both:
        assert s.count(w) == 1 and f"  WARNING             {w}" in s
    for a in p.assumptions:
        assert a in s


# --------------------------------------------------------------------------------------------
# partial drafts (ngram: steps without a suffix match draft nothing; drafts may be shorter than N)


class LinearLatency(ConstLatency):
    """Forward time a + b q for decode calls, no prefill cost (``prefill_time`` hook = 0)."""

    def __init__(self, a: float, b: float):
        super().__init__(a + b, 0.0)
        self.a, self.b = a, b

    def forward_time(self, model, *, tp=1, precision=None, batch, q, context, kv_precision=None):
        return self.a + self.b * np.asarray(q, float)


@pytest.mark.parametrize("f,mean_prop,n,alpha", [(1.0, None, 3, 0.7), (0.5, None, 3, 0.7), (0.4, 2.6, 3, 0.8),
                                                 (0.9, 4.9, 5, 0.6)])
def test_partial_drafts_closed_form(f, mean_prop, n, alpha):
    """Per step the target verifies 1 + f n_prop tokens and commits 1 + f (MAL - 1) (vLLM counts
    acceptance per DRAFTED step), independent computation with a linear latency a + b q."""
    a, b = 0.010, 0.002
    lat = LinearLatency(a, b)
    p = predict("Qwen3-8B", None, n, hardware="MI300X", concurrency=2, isl=ISL, osl=512,
                acceptance=Acceptance.constant(alpha, temperature=0.0), drafter=FractionDrafter(0.0, lat),
                latency=lat, overhead=SpecOverhead(), drafted_fraction=f, mean_proposal_tokens=mean_prop)
    n_prop = n if mean_prop is None else min(n, mean_prop)
    mal_drafted = sum(alpha ** k for k in range(n + 1))
    mal = 1 + f * (mal_drafted - 1)
    expected = mal * (a + b) / (a + b * (1 + f * n_prop))
    assert p.mal == pytest.approx(mal, rel=1e-12)
    assert p.throughput_ratio == pytest.approx(expected, rel=1e-12)
    if f < 1 or mean_prop is not None:
        assert any("draft" in s for s in p.assumptions)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rates=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), f=st.floats(0.05, 1.0),
       share=st.floats(0.0, 1.0))
def test_partial_drafts_never_accept_more_than_proposed(rates, f, share):
    """Per drafted step vLLM accepts at most the proposed tokens: accepted_per_proposed_token <= 1 and
    mal_per_drafted_step <= 1 + mean_proposal_tokens, or mean_proposal_tokens is refused (by name)."""
    cum = np.minimum.accumulate(np.asarray(rates))
    acc = Acceptance.from_rates(cum.tolist(), "cumulative")
    n = len(cum)
    mean_prop = 1.0 + share * (n - 1)  # in [1, N]
    try:
        p = predict("Qwen3-8B", "ngram", n, hardware="MI300X", concurrency=4, acceptance=acc, drafted_fraction=f,
                    mean_proposal_tokens=mean_prop)
    except SpecsimValueError as e:
        assert e.field == "mean_proposal_tokens" and float(cum.sum()) > mean_prop
        return
    assert float(cum.sum()) <= mean_prop * (1 + 1e-9)
    assert p.accepted_per_proposed_token <= 1.0 + 1e-9
    assert p.mal_per_drafted_step <= 1.0 + mean_prop + 1e-9


@pytest.mark.parametrize("kw,field", [({"drafted_fraction": 0.0}, "drafted_fraction"),
                                      ({"drafted_fraction": 1.5}, "drafted_fraction"),
                                      ({"mean_proposal_tokens": 0.5}, "mean_proposal_tokens")])
def test_partial_draft_errors(kw, field):
    with pytest.raises(SpecsimValueError, match=field):
        predict("Qwen3-8B", "ngram", 3, hardware="MI300X", acceptance=0.7, **kw)


SMOL_CPU = dict(hardware="cpu-2core-avx2", precision="fp32", acceptance=0.8)


def test_sweep_refuses_a_mean_proposal_above_an_n_swept_as_predict_does():
    """A new-user trial: sweep -n 3 --mean-proposal-tokens 5 gave predict's numbers at 3 tokens per drafted step
    (the engine clamps to N) where predict refuses 5 > N; -n 1,3 --mean-proposal-tokens 2 ignored it at N = 1."""
    for ns, mpt, n_min in (([3], 5.0, 3), ([1, 3], 2.0, 1)):
        with pytest.raises(SpecsimValueError) as e:
            predict("SmolLM2-135M-Instruct", "ngram", n_min, concurrency=4, mean_proposal_tokens=mpt, **SMOL_CPU)
        assert e.value.field == "mean_proposal_tokens" and f"must be <= N = {n_min}, the proposal length" in str(e.value)
        with pytest.raises(SpecsimValueError) as e:
            sweep("SmolLM2-135M-Instruct", "ngram", ns, concurrency=[4], mean_proposal_tokens=mpt, **SMOL_CPU)
        assert e.value.field == "mean_proposal_tokens" and e.value.value == mpt
        assert (f"must be <= N = {n_min}, the smallest proposal length swept (num_speculative_tokens "
                f"{', '.join(map(str, ns))}; " in str(e.value)), str(e.value)
    # a schedule: the k at each concurrency swept (k = 0 drafts nothing and is not checked)
    cfg = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
           "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 64, 1], [65, 512, 0]]}
    with pytest.raises(SpecsimValueError, match=r"must be <= N = 1, the proposal length used at concurrency 8 "):
        sweep("SmolLM2-135M-Instruct", speculative_config=cfg, concurrency=[4, 8], mean_proposal_tokens=2.0,
              **SMOL_CPU)
    ok = sweep("SmolLM2-135M-Instruct", speculative_config=cfg, concurrency=[4, 128], mean_proposal_tokens=2.0,
               **SMOL_CPU)
    assert ok["num_speculative_tokens"].tolist() == [3, 0]


def test_sweep_rows_carry_the_partial_drafting_inputs_as_predict_json_does():
    """A new-user trial: sweep --json rows had no mean_proposal_tokens (jq read null) while the flag changed
    their numbers; predict --json reports 2.0.  Each row now carries drafted_fraction and mean_proposal_tokens,
    the values Prediction.to_dict() has (mean_proposal_tokens NaN, JSON null, when not given)."""
    kw = dict(drafted_fraction=0.5, mean_proposal_tokens=2.0, **SMOL_CPU)
    df = sweep("SmolLM2-135M-Instruct", "ngram", [2, 3], concurrency=[4, 8], **kw)
    assert df["drafted_fraction"].tolist() == [0.5] * 4 and df["mean_proposal_tokens"].tolist() == [2.0] * 4
    row = df.iloc[3]
    d = predict("SmolLM2-135M-Instruct", "ngram", 3, concurrency=8, **kw).to_dict()
    assert (d["drafted_fraction"], d["mean_proposal_tokens"]) == (0.5, 2.0)
    assert row["throughput_ratio"] == pytest.approx(d["throughput_ratio"], rel=1e-12)
    rows = json.loads(df.to_json(orient="records"))
    assert rows[0]["mean_proposal_tokens"] == 2.0 and rows[0]["drafted_fraction"] == 0.5
    plain = sweep("SmolLM2-135M-Instruct", "ngram", [3], concurrency=[4], **SMOL_CPU)
    assert plain["drafted_fraction"].tolist() == [1.0] and plain["mean_proposal_tokens"].isna().all()
    assert predict("SmolLM2-135M-Instruct", "ngram", 3, concurrency=4, **SMOL_CPU).to_dict()["mean_proposal_tokens"] \
        is None


# --------------------------------------------------------------------------------------------
# sweep() runs predict()'s feasibility checks


def test_sweep_refuses_what_predict_refuses():
    with pytest.raises(SpecsimValueError, match="tp"):
        sweep("Qwen3-8B", "eagle3", [1, 3], tp=[1, 3], acceptance=0.7)  # 32 heads: TP 3 impossible
    with pytest.raises(SpecsimValueError, match="isl"):
        sweep("Qwen3-8B", "eagle3", [3], isl=[1024, 60000], osl=1024, acceptance=0.7)
    with pytest.raises(SpecsimValueError, match="raise tp"):
        sweep("Kimi-K2.5", "eagle3", [3], hardware="MI300X", tp=1, acceptance=0.7)


def test_sweep_flags_kv_cache_overflow_where_predict_warns():
    cs = [1, 64, 512, 4096]
    df = sweep("Qwen3-8B", "eagle3", [1, 7], hardware="MI300X", concurrency=cs, isl=8192, osl=4096, acceptance=0.7)
    assert df["kv_cache_fits"].any() and not df["kv_cache_fits"].all()
    for _, row in df.iterrows():
        p = predict("Qwen3-8B", "eagle3", int(row["num_speculative_tokens"]), hardware="MI300X",
                    concurrency=int(row["concurrency"]), isl=8192, osl=4096, acceptance=0.7)
        warned = any("KV cache" in a for a in p.assumptions)
        assert warned == (not row["kv_cache_fits"]), (row["concurrency"], row["num_speculative_tokens"])
        assert p.throughput_ratio == pytest.approx(row["throughput_ratio"], rel=1e-12)


def test_sweep_warns_once_where_the_kv_cache_does_not_fit_in_predicts_words():
    """A new-user trial: sweep --concurrency 100000,1000000000 gave only a kv_cache_fits False column, where
    predict warns "KV cache ... does not fit ... (fits up to concurrency 537)".  The sweep now has ONE warning
    naming, per combination, hardware and ISL + OSL, the concurrencies that do not fit and predict's limit."""
    cs = [64, 512, 4096]
    kw = dict(acceptance=0.7, osl=1024)
    df = sweep("Qwen3-8B", "eagle3", [3], hardware=["MI300X", "H100"], concurrency=cs, isl=[1024, 8192], **kw)
    (msg,) = [w for w in df.attrs["warnings"] if "KV cache" in w]
    assert msg.endswith(": vLLM would queue or preempt, so these concurrencies are not reached (kv_cache_fits False)")
    groups = 0
    for (hw, isl), g in df.groupby(["hardware", "isl"], sort=False):
        over = g.loc[~g["kv_cache_fits"], "concurrency"].tolist()
        limits = set()
        for c in over:  # predict's own warning at each such point gives the limit
            (w,) = [w for w in predict("Qwen3-8B", "eagle3", 3, hardware=hw, concurrency=int(c), isl=int(isl),
                                       **kw).warnings if w.startswith("KV cache")]
            limits.add(re.search(r"\(fits up to concurrency (\d+)\)", w).group(1))
        if over:
            (limit,) = limits
            groups += 1
            assert (f"Qwen3-8B (bf16), eagle3: KV cache for concurrency {', '.join(map(str, over))} x {isl + 1024} "
                    f"tokens does not fit on {hw} at TP=1 (fits up to concurrency {limit})") in msg, (hw, isl, msg)
    assert groups == 4 and msg.count("KV cache for concurrency") == 4
    fits = sweep("Qwen3-8B", "eagle3", [3], hardware=["MI300X", "H100"], concurrency=[1, 64], isl=1024, **kw)
    assert fits["kv_cache_fits"].all() and not any("KV cache" in w for w in fits.attrs["warnings"])


def test_predict_refuses_a_context_beyond_the_model():
    """Qwen3-8B's config allows 40960 positions (max_position_embeddings); vLLM refuses more."""
    from specsim.architecture import load_model

    assert load_model("Qwen3-8B").max_position_embeddings == 40960
    predict("Qwen3-8B", "eagle3", 3, isl=32768, osl=8192, acceptance=0.7)  # exactly 40960: allowed
    with pytest.raises(SpecsimValueError, match="max_position_embeddings"):
        predict("Qwen3-8B", "eagle3", 3, isl=32768, osl=8193, acceptance=0.7)


def test_predict_refuses_when_one_request_kv_does_not_fit():
    """gemma-4-31B-it allows 262144 positions, but at TP 1 on an 80 GB H100 the KV cache of ONE
    request of 251k tokens does not fit next to its weights: refused, not a 0 tok/s prediction."""
    with pytest.raises(SpecsimValueError, match="ONE request"):
        predict("gemma-4-31B-it", "dflash", 7, hardware="H100 SXM", tp=1, isl=250000, osl=1000, acceptance=0.7)


def test_draft_model_with_another_tokenizer_is_refused():
    with pytest.raises(SpecsimValueError, match="tokenizer"):
        predict("Llama-3.3-70B-Instruct", "draft_model", 5, draft="SmolLM2-135M-Instruct", tp=4, acceptance=0.7)
    # same tokenizer family (Llama 3.1 8B drafting for Llama 3.3 70B): accepted
    p = predict("Llama-3.3-70B-Instruct", "draft_model", 5, draft="Llama-3.1-8B-Instruct", tp=4, acceptance=0.7)
    assert p.throughput_ratio > 0


def test_native_mtp_is_derived_from_a_target_that_declares_it():
    """DeepSeek-V3 declares one native MTP layer (num_nextn_predict_layers = 1) and has no seed spec:
    the MTP module is derived from the target (one MoE decoder layer at its dimensions, shared
    lm_head), the derivation is stated in the assumptions, and a target without MTP layers is
    refused with the methods it can use."""
    from specsim.architecture import load_model
    from specsim.drafters import get_drafter

    tgt = load_model("DeepSeek-V3")
    d = get_drafter("deepseek_mtp", target=tgt)
    assert d.kind == "sequential" and d.shares_target_weights
    assert d.draft.hidden_size == tgt.hidden_size
    # MLA like the target's layers: (kv_lora_rank 512 + qk_rope 64) x 2 bytes per token = one target layer
    assert d.draft.stored_kv_bytes_per_token("bf16") == (512 + 64) * 2
    assert d.draft.stored_kv_bytes_per_token("bf16") == pytest.approx(tgt.kv_bytes_per_token("bf16") / 61)
    p = predict("DeepSeek-V3", "deepseek_mtp", 3, hardware="MI300X", tp=8, acceptance=0.8, concurrency=16)
    assert any("native MTP module derived" in a for a in p.assumptions)
    # draft time grows with N (one module pass per drafted token)
    t = [predict("DeepSeek-V3", "mtp", n, hardware="MI300X", tp=8, acceptance=0.8, concurrency=16).t_draft_s
         for n in (1, 2, 4)]
    assert t[0] < t[1] < t[2]
    with pytest.raises(SpecsimValueError, match="no native MTP"):
        predict("Llama-3.1-8B-Instruct", "mtp", 3, acceptance=0.8)


def test_declared_stack_other_than_the_calibrations_warns():
    """Issue 9: the calibration records its stack; a prediction for another declared vLLM release or
    platform says so (a WARNING), the same release does not."""
    from specsim.predict import predict

    kw = dict(hardware="MI300X", acceptance=0.7)
    assert not any("software stack" in w for w in predict("Qwen3-8B", "eagle3", 3, **kw).warnings)
    assert not any("software stack" in w for w in predict("Qwen3-8B", "eagle3", 3, vllm_version="0.23.0", **kw).warnings)
    w = [w for w in predict("Qwen3-8B", "eagle3", 3, vllm_version="0.32.1", **kw).warnings if "software stack" in w]
    assert len(w) == 1 and "0.32.1" in w[0]
    w = [w for w in predict("Qwen3-8B", "eagle3", 3, platform="CUDA 12.8", **kw).warnings if "software stack" in w]
    assert len(w) == 1 and "CUDA" in w[0]
    # the release is compared as numbers (0.3 is not 0.32), and what is not a version is refused
    w = [w for w in predict("Qwen3-8B", "eagle3", 3, vllm_version="v0.3", **kw).warnings if "software stack" in w]
    assert len(w) == 1
    for bad in ("garbage", "latest", "32"):
        with pytest.raises(SpecsimValueError, match="vllm_version: must be a vLLM version"):
            predict("Qwen3-8B", "eagle3", 3, vllm_version=bad, **kw)
    with pytest.raises(SpecsimValueError, match="platform: must name a vLLM platform.*rocm"):
        predict("Qwen3-8B", "eagle3", 3, platform="Gaudi 3", **kw)


def test_expert_parallel_is_refused_for_a_dense_target():
    from specsim.predict import predict

    with pytest.raises(SpecsimValueError, match="expert_parallel: applies to MoE targets only.*Qwen3-8B"):
        predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", acceptance=0.7, tp=2, expert_parallel=True)
    moe = predict("Qwen3.6-35B-A3B", "mtp", 3, hardware="MI300X", acceptance=0.7, tp=2, expert_parallel=True)
    assert any("expert parallel" in a for a in moe.assumptions)
    assert not any("tp=1" in w for w in moe.warnings)
    one = predict("Qwen3.6-35B-A3B", "mtp", 3, hardware="MI300X", acceptance=0.7, tp=1, expert_parallel=True)
    plain = predict("Qwen3.6-35B-A3B", "mtp", 3, hardware="MI300X", acceptance=0.7, tp=1)
    assert one.throughput_ratio == pytest.approx(plain.throughput_ratio, rel=1e-12)  # a no-op at TP 1 ...
    assert any(w.startswith("expert_parallel with tp=1") for w in one.warnings)  # ... and said so


def test_a_measured_latency_table_replaces_the_target_roofline_and_drops_no_term(tmp_path):
    """Issue 9 item 4(b): predict(latency=MeasuredLatency(table)) of the target: decode and
    verification from the table, prefills and draft passes from the stack calibration (stated),
    the stack's overheads kept.  A table sampled from the shipped roofline reproduces its prediction;
    a table twice as slow gives twice the verification time."""
    from specsim.architecture import load_model
    from specsim.calibration import default_latency
    from specsim.cli import main
    from specsim.hardware import load_hardware
    from specsim.latency import MeasuredLatency
    from specsim.predict import predict

    rl = default_latency(load_hardware("MI300X"))
    m = load_model("Qwen3-8B")
    rows = [(b, q, c, float(rl.forward_time(m, tp=1, precision=None, batch=b, q=q, context=c)))
            for b in (1, 4, 16, 64) for q in (1, 2, 4, 8) for c in (256, 1024, 4096)]
    t = pd.DataFrame(rows, columns=["batch", "q", "context", "seconds"])
    kw = dict(hardware="MI300X", concurrency=16, acceptance=0.7, isl=1024, osl=1024)
    a = predict("Qwen3-8B", "eagle3", 3, **kw)
    b = predict("Qwen3-8B", "eagle3", 3, latency=MeasuredLatency(t), **kw)
    assert b.throughput_ratio == pytest.approx(a.throughput_ratio, rel=1e-9)
    assert b.t_overhead_s == pytest.approx(a.t_overhead_s) and b.t_host_s == pytest.approx(a.t_host_s) and b.t_host_s > 0
    assert "stack calibration" in b.term_sources["target_prefill"] and "stack calibration" in b.term_sources["draft"]
    assert "measured" in b.term_sources["target_step"].lower() or "latency=" in b.term_sources["target_step"]
    assert any("measured latency table" in x for x in b.assumptions)
    # the stack's host seconds are added on top of the table: said, since a table of whole steps double-counts
    assert any("counted twice" in w for w in b.warnings) and not any("counted twice" in w for w in a.warnings)
    slow = predict("Qwen3-8B", "eagle3", 3, latency=MeasuredLatency(t.assign(seconds=2 * t["seconds"])), **kw)
    assert slow.t_verify_s == pytest.approx(2 * b.t_verify_s) and slow.t_draft_s == pytest.approx(b.t_draft_s)
    with pytest.raises(SpecsimValueError):  # concurrency 256 is outside the measured table: refused
        predict("Qwen3-8B", "eagle3", 3, latency=MeasuredLatency(t), **{**kw, "concurrency": 256})
    p = tmp_path / "table.csv"
    t.to_csv(p, index=False)
    assert main(["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--hardware", "MI300X",
                 "--concurrency", "16", "--acceptance", "0.7", "--latency-table", str(p), "--json"]) == 0


def test_a_latency_table_path_is_read_as_the_cli_reads_it(tmp_path):
    """A new-user trial: predict(..., latency="table.csv") raised AttributeError: 'str' object has no
    attribute 'forward_time'.  A path (str or PathLike) is now read as --latency-table reads it, in
    predict, sweep and best_n alike, and a path that is no table is a SpecsimValueError naming latency."""
    from pathlib import Path

    from specsim.architecture import load_model
    from specsim.calibration import default_latency
    from specsim.hardware import load_hardware
    from specsim.latency import MeasuredLatency

    rl = default_latency(load_hardware("MI300X"))
    m = load_model("Qwen3-8B")
    rows = [(b, q, c, 1.3 * float(rl.forward_time(m, tp=1, precision=None, batch=b, q=q, context=c)))
            for b in (1, 4, 16, 64) for q in (1, 2, 4, 8) for c in (256, 1024, 4096)]
    f = tmp_path / "table.csv"
    pd.DataFrame(rows, columns=["batch", "q", "context", "seconds"]).to_csv(f, index=False)
    obj = MeasuredLatency(pd.read_csv(f), tp=1, source=str(f))
    kw = dict(hardware="MI300X", concurrency=8, acceptance=[0.8, 0.6, 0.45])
    ref = predict("Qwen3-8B", "eagle3", 3, latency=obj, **kw)
    assert ref.throughput_ratio != pytest.approx(predict("Qwen3-8B", "eagle3", 3, **kw).throughput_ratio, rel=1e-3)
    for path in (str(f), Path(f)):
        p = predict("Qwen3-8B", "eagle3", 3, latency=path, **kw)
        assert p.throughput_ratio == ref.throughput_ratio and p.t_verify_s == ref.t_verify_s
        assert p.latency_description == ref.latency_description and str(f) in p.latency_description
    df = sweep("Qwen3-8B", "eagle3", [1, 3], latency=str(f), **kw)
    assert df["throughput_ratio"].tolist() == sweep("Qwen3-8B", "eagle3", [1, 3], latency=obj, **kw)[
        "throughput_ratio"].tolist()
    assert df.loc[df["num_speculative_tokens"] == 3, "throughput_ratio"].item() == ref.throughput_ratio
    best, curve = best_n("Qwen3-8B", "eagle3", n_values=range(1, 8), latency=f, **kw)
    best_o, curve_o = best_n("Qwen3-8B", "eagle3", n_values=range(1, 8), latency=obj, **kw)
    assert best == best_o and curve["throughput_ratio"].tolist() == curve_o["throughput_ratio"].tolist()
    with pytest.raises(SpecsimValueError) as ei:
        predict("Qwen3-8B", "eagle3", 3, latency=str(tmp_path / "none.csv"), **kw)
    assert ei.value.field == "latency" and "cannot read a CSV table" in str(ei.value)
    cols = tmp_path / "cols.csv"
    cols.write_text("batch,context,seconds\n1,256,0.01\n")
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", [3], latency=cols, **kw)
    assert ei.value.field == "latency" and "missing columns ['q']" in str(ei.value)
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", [3], tp=[1, 2], latency=f, **kw)
    assert ei.value.field == "latency" and "needs ONE tp value" in str(ei.value) and "(got [1, 2])" in str(ei.value)


def test_draft_latency_is_used_or_refused_never_ignored(tmp_path):
    """A new-user trial: predict(draft_latency=...) with the default (calibrated roofline) latency left
    t_draft_s unchanged, while term_sources["draft"] said "latency= given by the caller"; a path
    (draft_latency="x.csv") was taken the same way.  It applies with a measured target table only: there
    it times the draft passes (an object or a CSV path alike), elsewhere it is refused by name."""
    from specsim.architecture import load_model
    from specsim.calibration import default_latency
    from specsim.hardware import load_hardware
    from specsim.latency import MeasuredLatency

    rl = default_latency(load_hardware("MI300X"))
    m = load_model("Qwen3-8B")
    rows = [(b, q, c, float(rl.forward_time(m, tp=1, precision=None, batch=b, q=q, context=c)))
            for b in (1, 4, 16, 64) for q in (1, 2, 4, 8) for c in (256, 1024, 4096)]
    target = MeasuredLatency(pd.DataFrame(rows, columns=["batch", "q", "context", "seconds"]), tp=1)
    draft_rows = pd.DataFrame([(b, q, c, 0.5e-3 * q) for b, q, c, _ in rows], columns=["batch", "q", "context", "seconds"])
    f = tmp_path / "draft.csv"
    draft_rows.to_csv(f, index=False)
    kw = dict(hardware="MI300X", concurrency=8, acceptance=[0.8, 0.6, 0.45], isl=1024, osl=1024)
    for bad in (rl, str(f)):
        with pytest.raises(SpecsimValueError) as ei:
            predict("Qwen3-8B", "eagle3", 3, draft_latency=bad, **kw)
        assert ei.value.field == "draft_latency" and "applies only where the target's latency model cannot" in str(
            ei.value)
    with pytest.raises(SpecsimValueError, match="draft_latency"):
        sweep("Qwen3-8B", "eagle3", [3], draft_latency=rl, **kw)
    with pytest.raises(SpecsimValueError) as ei:
        predict("Qwen3-8B", "eagle3", 3, latency=target, draft_latency=0.001, **kw)
    assert ei.value.field == "draft_latency" and "forward_time" in str(ei.value)
    stack = predict("Qwen3-8B", "eagle3", 3, latency=target, **kw)
    obj = predict("Qwen3-8B", "eagle3", 3, latency=target, draft_latency=MeasuredLatency(draft_rows, tp=1), **kw)
    path = predict("Qwen3-8B", "eagle3", 3, latency=target, draft_latency=f, **kw)
    assert path.t_draft_s == obj.t_draft_s and path.throughput_ratio == obj.throughput_ratio
    assert obj.t_draft_s != pytest.approx(stack.t_draft_s, rel=1e-3)  # the draft table is what timed them

    # a latency model with forward_time only (no counts) cannot time the draft passes: it needs draft_latency,
    # which must then be taken, not refused (the review: both ways were refused, with contradicting errors)
    class ForwardOnly:
        def forward_time(self, *a, **k):
            return rl.forward_time(*a, **k)

    with pytest.raises(SpecsimValueError, match="draft_latency"):
        predict("Qwen3-8B", "eagle3", 3, latency=ForwardOnly(), **kw)
    fo = predict("Qwen3-8B", "eagle3", 3, latency=ForwardOnly(), draft_latency=MeasuredLatency(draft_rows, tp=1), **kw)
    assert fo.t_draft_s == pytest.approx(obj.t_draft_s, rel=1e-12)


def test_recommend_reads_a_latency_table_path_as_predict_does(tmp_path):
    """recommend(latency="table.csv") raised AttributeError: 'str' object has no attribute ... (the trial
    found it after predict / sweep / best_n had learnt to read a path)."""
    from specsim.architecture import load_model
    from specsim.calibration import default_latency
    from specsim.hardware import load_hardware
    from specsim.latency import MeasuredLatency
    from specsim.recommend import recommend

    rl = default_latency(load_hardware("MI300X"))
    m = load_model("Qwen3-8B")
    rows = [(b, q, c, 1.3 * float(rl.forward_time(m, tp=1, precision=None, batch=b, q=q, context=c)))
            for b in (1, 2, 4, 8) for q in (1, 2, 4, 8, 16) for c in (256, 1024, 4096)]
    f = tmp_path / "table.csv"
    pd.DataFrame(rows, columns=["batch", "q", "context", "seconds"]).to_csv(f, index=False)
    kw = dict(hardware="MI300X", acceptance=Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative"),
              concurrency=[1, 4, 8], max_concurrency=8, isl=1024, osl=1024)
    by_path = recommend("Qwen3-8B", ["eagle3"], latency=str(f), **kw).to_dict()
    by_obj = recommend("Qwen3-8B", ["eagle3"], latency=MeasuredLatency(pd.read_csv(f), tp=1, source=str(f)),
                       **kw).to_dict()
    assert by_path["methods"][0]["points"] == by_obj["methods"][0]["points"]


def test_implausible_anchor_and_dominant_overhead_warn():
    """A baseline that scales the target's forwards far from 1 (a run of another model?) and a
    speculative overhead larger than draft + verification (fitted per-sequence terms extrapolated)
    are WARNINGs, not silent numbers."""
    from specsim.predict import predict

    p = predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", concurrency=8, acceptance=0.8,
                baseline={"output_tok_per_s": 60.0, "concurrency": 8, "isl": 1024, "osl": 1024})
    assert p.target_time_scale > 3 and any("scales the target's forwards" in w for w in p.warnings)
    q = predict("Qwen3-8B", "eagle3", 1, hardware="MI300X", concurrency=256, acceptance=0.8)
    assert q.t_overhead_s > q.t_verify_s + q.t_draft_s
    assert any("speculative overhead" in w and "extrapolation" in w for w in q.warnings)
    ok = predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", concurrency=1, acceptance=0.8)
    assert not any("speculative overhead" in w for w in ok.warnings)


def test_a_baseline_in_milliseconds_or_faster_than_the_hardware_is_refused():
    """A new-user trial: baseline tpot_s=12 (12 ms meant) anchored the forwards at x 2040 and the
    ratio rose 2.38 -> 2.88 with only the usual warning; a throughput faster than the datasheet was
    anchored too.  Now both are refused naming the baseline's field (predict, sweep and recommend
    share the anchor), and a per-request tok/s is named as the likely slip in the warning."""
    from specsim.predict import ANCHOR_REFUSED, sweep
    from specsim.recommend import recommend

    kw = dict(hardware="H100", concurrency=8, acceptance=[0.8, 0.6, 0.45])
    ok = predict("Qwen3-8B", "eagle3", 3, baseline={"tpot_s": 0.012}, **kw)
    assert ok.target_time_scale < 3
    for call in (lambda b: predict("Qwen3-8B", "eagle3", 3, baseline=b, **kw),
                 lambda b: sweep("Qwen3-8B", "eagle3", [3], baseline=b, **kw),
                 lambda b: recommend("Qwen3-8B", "eagle3", hardware="H100", acceptance=[0.8, 0.6, 0.45],
                                     max_num_speculative_tokens=3, concurrency=[1, 8], baseline=b,
                                     baseline_concurrency=8)):
        with pytest.raises(SpecsimValueError, match="milliseconds") as e:
            call({"tpot_s": 12.0})
        assert e.value.field == "baseline.tpot_s" and f"{ANCHOR_REFUSED:g}x" in str(e.value)
        with pytest.raises(SpecsimValueError, match="datasheet floor") as e:
            call({"output_tok_per_s": 60000.0})
        assert e.value.field == "baseline.output_tok_per_s"
    # a baseline faster than the calibration's host seconds allow: the forwards were scaled to 0.027x
    # (below the datasheet floor); now the host terms are dropped and the forwards stay plausible
    mm = dict(hardware="MI300X", tp=2, concurrency=4, isl=64, osl=16, acceptance=0.5)
    p0 = predict("MiniMax-M2.5", "eagle3", 1, **mm)
    fast = predict("MiniMax-M2.5", "eagle3", 1, baseline={"tpot_s": 0.5 * p0.baseline_tpot_s}, **mm)
    assert fast.baseline_anchor["scaled"] == "target forwards, host terms dropped"
    assert 1 / 3 <= fast.target_time_scale <= 3 and fast.baseline_tpot_s == pytest.approx(0.5 * p0.baseline_tpot_s)
    # ... and where (1) gives a plausible-looking k that is below the datasheet floor while the host
    # terms can explain the measurement, those are scaled instead of refusing (found by hypothesis)
    h = dict(hardware="H100 SXM", concurrency=1, isl=64, osl=16, acceptance=0.5)
    q0 = predict("Qwen3-8B", "eagle3", 1, **h)
    q = predict("Qwen3-8B", "eagle3", 1, baseline={"tpot_s": 0.5 * q0.baseline_tpot_s}, **h)
    assert q.baseline_anchor["scaled"] != "target forwards" and q.baseline_tpot_s == pytest.approx(
        0.5 * q0.baseline_tpot_s)
    per_user = predict("Qwen3-8B", "eagle3", 3, baseline={"output_tok_per_s": ok.baseline_output_tok_per_s / 8}, **kw)
    assert any("one request's rate" in w for w in per_user.warnings), per_user.warnings
    assert not any("one request's rate" in w for w in ok.warnings)


def test_cli_latency_table_errors_name_the_flag(tmp_path, capsys):
    from specsim.cli import main

    bad = tmp_path / "bad.csv"
    bad.write_text("batch,q,context,seconds\n8,4,1024,abc\n")
    few = tmp_path / "few.csv"
    few.write_text("batch,q,context,seconds\n1,1,256,0.01\n4,2,256,0.02\n8,1,1024,0.03\n")
    cols = tmp_path / "cols.csv"
    cols.write_text("batch,context,seconds\n1,256,0.01\n")
    for f in (bad, few, cols):
        rc = main(["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--hardware", "MI300X",
                   "--acceptance", "0.8", "--concurrency", "4", "--latency-table", str(f)])
        err = capsys.readouterr().err
        assert rc == 2 and "--latency-table" in err and "Traceback" not in err, (f.name, err)


def test_acceptance_source_says_counts_or_given_rates():
    """Rates typed in (no counts behind them) are not labelled measured in term_sources."""
    from specsim.acceptance import Acceptance
    from specsim.predict import predict

    kw = dict(hardware="MI300X")
    given = predict("Qwen3-8B", "eagle3", 3, acceptance=Acceptance.from_rates([0.8, 0.6, 0.45]), **kw)
    assert given.term_sources["acceptance"].startswith("given per-position rates")
    assert "3 positions" in given.term_sources["acceptance"]
    counted = predict("Qwen3-8B", "eagle3", 3, acceptance=Acceptance.from_counts(100, [80, 60, 45]), **kw)
    assert counted.term_sources["acceptance"].startswith("measured (")
    assert predict("Qwen3-8B", "eagle3", 3, acceptance=0.7, **kw).term_sources["acceptance"].startswith("assumed")


# --------------------------------------------------------------------------------------------
# TP > 1 where the calibration never saw an all-reduce


@pytest.mark.parametrize("hw, prior_us", [("B200", 0.0), ("H200", 0.0), ("MI355X", 8.0), ("MI350X", None)])
def test_tp_above_one_on_an_unfitted_allreduce_latency_warns(hw, prior_us):
    from specsim.calibration import load_calibration
    from specsim.hardware import load_hardware

    kw = dict(hardware=hw, acceptance=0.7, concurrency=8)
    cal = load_calibration(load_hardware(hw).name)
    origin = load_calibration(cal["transferred_from"]) if cal.get("transferred_from") else cal
    assert origin["term_sources"]["allreduce_latency_s"].startswith("prior")  # the premise, from the shipped file
    if prior_us is not None:
        assert cal["terms"]["allreduce_latency_s"] * 1e6 == pytest.approx(prior_us)
    p8 = predict("Llama-3.3-70B-Instruct", "eagle3", 3, tp=8, **kw)
    w = [x for x in p8.warnings if "all-reduce latency per call" in x]
    assert len(w) == 1 and "TP=8" in w[0] and "never fitted on a TP > 1 run" in w[0]
    assert ("wire time only" in w[0]) == (cal["terms"]["allreduce_latency_s"] == 0.0)
    assert not any("all-reduce latency" in x for x in predict("Qwen3-8B", "eagle3", 3, tp=1, **kw).warnings)
    df = sweep("Llama-3.3-70B-Instruct", "eagle3", num_speculative_tokens=[3], tp=[4, 8], **kw)
    assert sum("all-reduce latency per call" in x for x in df.attrs["warnings"]) == 2  # one per TP


def test_tp_above_one_on_a_fitted_allreduce_latency_does_not_warn():
    from specsim.calibration import load_calibration

    assert load_calibration("MI300X")["term_sources"]["allreduce_latency_s"].startswith("fitted")
    for hw in ("MI300X", "MI325X"):  # fitted, and transferred from the fitted one
        p = predict("Llama-3.3-70B-Instruct", "eagle3", 3, hardware=hw, tp=8, acceptance=0.7, concurrency=8)
        assert not any("all-reduce latency" in x for x in p.warnings), hw


def test_tp_above_one_with_a_measured_table_does_not_warn_about_the_allreduce_prior():
    # the measured table's steps already include the all-reduce
    import pandas as pd

    from specsim.architecture import load_model
    from specsim.hardware import load_hardware
    from specsim.latency import MeasuredLatency, Roofline

    tgt = load_model("Llama-3.3-70B-Instruct")
    B, Q, C = np.meshgrid([1, 8, 32], [1, 4], [1024, 2048], indexing="ij")
    t = Roofline(load_hardware("B200")).forward_time(tgt, tp=8, batch=B.ravel(), q=Q.ravel(), context=C.ravel())
    tab = pd.DataFrame({"batch": B.ravel(), "q": Q.ravel(), "context": C.ravel(), "seconds": t})
    p = predict("Llama-3.3-70B-Instruct", "eagle3", 3, hardware="B200", tp=8, acceptance=0.7, concurrency=8,
                latency=MeasuredLatency(tab, model_name=tgt.name, tp=8))
    assert not any("all-reduce latency" in w for w in p.warnings)


def test_a_latency_table_in_other_units_or_of_another_model_is_refused_not_predicted(tmp_path, capsys):
    """A measured latency table in milliseconds (seconds x 1000) was taken as seconds, and one of a
    smaller model than the target (faster than the hardware's datasheet allows) as this target's:
    both gave a number.  Now both are refused naming ``latency``, a table far from the stack's
    estimate is warned about (predict, sweep and recommend alike), and a real probe table of this
    project's CPU host passes silently."""
    from pathlib import Path

    from specsim.architecture import load_model
    from specsim.calibration import default_latency
    from specsim.cli import main
    from specsim.hardware import load_hardware
    from specsim.latency import MeasuredLatency
    from specsim.predict import TABLE_SCALE_NOTE, predict, sweep
    from specsim.recommend import recommend

    rl = default_latency(load_hardware("MI300X"))

    def sampled(name):
        m = load_model(name)
        return pd.DataFrame([(b, q, c, float(rl.forward_time(m, tp=1, precision=None, batch=b, q=q, context=c)))
                             for b in (1, 4, 16) for q in (1, 2, 4) for c in (512, 2048)],
                            columns=["batch", "q", "context", "seconds"])

    t = sampled("Qwen3-8B")
    kw = dict(hardware="MI300X", concurrency=4, acceptance=0.7, isl=1024, osl=512)
    ok = predict("Qwen3-8B", "eagle3", 3, latency=MeasuredLatency(t), **kw)
    assert not any(TABLE_SCALE_NOTE in w for w in ok.warnings)
    with pytest.raises(SpecsimValueError, match="milliseconds") as e:
        predict("Qwen3-8B", "eagle3", 3, latency=MeasuredLatency(t.assign(seconds=1e3 * t["seconds"])), **kw)
    assert e.value.field == "latency"
    small = sampled("Llama-3.1-8B-Instruct")  # a 70B target's table taken from the 8B model
    with pytest.raises(SpecsimValueError, match="datasheet floor") as e:
        predict("Llama-3.3-70B-Instruct", "eagle3", 3, latency=MeasuredLatency(small), **kw)
    assert e.value.field == "latency"
    slow = MeasuredLatency(t.assign(seconds=50 * t["seconds"]))
    p = predict("Qwen3-8B", "eagle3", 3, latency=slow, **kw)
    assert any(w.startswith(TABLE_SCALE_NOTE) and "50" in w for w in p.warnings), p.warnings
    df = sweep("Qwen3-8B", "eagle3", [1, 3], hardware="MI300X", concurrency=[4], acceptance=0.7, isl=1024, osl=512,
               latency=slow)
    assert any(w.startswith(TABLE_SCALE_NOTE) for w in df.attrs["warnings"]), df.attrs["warnings"]
    rec = recommend("Qwen3-8B", "eagle3", hardware="MI300X", acceptance=0.7, isl=1024, osl=512,
                    latency=slow, concurrency=[1, 4, 16], max_num_speculative_tokens=3)
    assert any(w.startswith(TABLE_SCALE_NOTE) for w in rec.warnings), rec.warnings
    # the CLI: exit 2 naming the field, no traceback
    f = tmp_path / "ms.csv"
    t.assign(seconds=1e3 * t["seconds"]).to_csv(f, index=False)
    rc = main(["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--hardware", "MI300X",
               "--acceptance", "0.7", "--concurrency", "4", "--isl", "1024", "--osl", "512", "--latency-table", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "latency" in err and "milliseconds" in err and "Traceback" not in err, err
    # a real verification-cost probe (SmolLM2 on the 2-core CPU host, fp32) is in range: no warning
    root = Path(__file__).resolve().parents[1]
    probe = pd.read_csv(root / "data/runs/cpu-validation-fast-20261201T153000-verify-cost/verify_cost.csv")
    cpu = predict("SmolLM2-135M-Instruct", "ngram", 3, hardware="cpu-2core-avx2", precision="fp32", concurrency=4,
                  acceptance=0.5, isl=384, osl=256, latency=MeasuredLatency(probe))
    assert not any(TABLE_SCALE_NOTE in w for w in cpu.warnings)


def test_fp8_on_a_gpu_without_fp8_units_is_weight_only_and_said():
    """A new-user trial: precision fp8 on A100 was refused ("no peak FLOP/s") although vLLM serves FP8
    checkpoints there weight-only (FP8 Marlin, "for GPUs that lack FP8 hardware support"), while mxfp4
    on H100 was accepted with no word on how it is modelled.  Now both predict, at the bf16 peak
    (weight-only, as vLLM's kernels run them) with 1-byte / 0.53-byte weight reads, and say so; native
    precisions carry no such note."""
    kw = dict(concurrency=8, acceptance=0.7)
    fp8 = predict("Qwen3-8B", "eagle3", 3, hardware="A100", precision="fp8", **kw)
    bf16 = predict("Qwen3-8B", "eagle3", 3, hardware="A100", precision="bf16", **kw)
    # half the weight bytes of a memory-bound decode: a faster baseline step than bf16
    assert fp8.t_base_s < bf16.t_base_s
    note = [a for a in fp8.assumptions if "no FP8 matrix units" in a]
    assert note and "bf16 peak" in note[0] and "weight-only" in note[0]
    assert not any("matrix units" in a for a in bf16.assumptions)
    mx = predict("Qwen3-8B", "eagle3", 3, hardware="H100", precision="mxfp4", **kw)
    # vLLM runs MXFP4 without FP4 units as W4A16 (Marlin / OAI Triton on Hopper): the bf16 peak, not fp8
    assert any("no FP4 matrix units" in a and "bf16 peak" in a for a in mx.assumptions)
    from specsim.hardware import load_hardware
    assert load_hardware("H100").peak_dtype("mxfp4") == load_hardware("MI300X").peak_dtype("mxfp4") == "bf16"
    assert load_hardware("MI355X").peak_dtype("mxfp4") == "fp4"
    assert not any("matrix units" in a for a in predict("Qwen3-8B", "eagle3", 3, hardware="H100", precision="fp8",
                                                         **kw).assumptions)
    # a config's routed experts in mxfp4 (precision None) are named too
    oss = predict("gpt-oss-20b", "eagle3", 3, hardware="A100", **kw)
    assert any(a.startswith("mxfp4 weights on A100") for a in oss.assumptions)


@pytest.mark.parametrize("call", ["predict", "sweep"])
def test_a_default_precision_the_hardware_lacks_says_it_was_the_default(call):
    """A new-user trial: ``predict --target SmolLM2-135M-Instruct --hardware cpu`` without ``--precision`` was
    refused as "hardware 'cpu-2core-avx2' has no peak FLOP/s for this precision (got 'bf16')": bf16 was never
    given; it is the target's serving precision, the default.  A precision given keeps the plain refusal."""
    fn = predict if call == "predict" else specsim.sweep
    args = ("SmolLM2-135M-Instruct", "ngram", 3 if call == "predict" else [3])
    with pytest.raises(SpecsimValueError) as ei:
        fn(*args, hardware="cpu", acceptance=0.7)
    e = ei.value
    assert (e.field, e.value, e.allowed) == ("precision", "bf16", ["fp32"])
    assert e.rule.startswith("not given, so the target's serving precision (bf16, its checkpoint's dtype) is used, "
                             "and hardware 'cpu-2core-avx2' has no peak FLOP/s for this precision"), e.rule
    with pytest.raises(SpecsimValueError) as ei:
        fn(*args, hardware="cpu", acceptance=0.7, precision="bf16")
    assert ei.value.rule == "hardware 'cpu-2core-avx2' has no peak FLOP/s for this precision"
    fn(*args, hardware="cpu", acceptance=0.7, precision="fp32")  # what the message asks for predicts


def test_calibration_scope_and_overhead_terms_print_no_none_and_no_femtoseconds():
    """A new-user trial: a transferred calibration's scope read "at an inferred concurrency None",
    and MI300X's fitted fixed_s (2.1e-15 s, a bound of the fit) printed as "fixed_s 2.077e-09 us"."""
    from specsim.calibration import default_latency
    from specsim.hardware import load_hardware

    for hw in ("H100", "A100", "B200", "MI300X"):
        scope = default_latency(load_hardware(hw)).calibration.scope
        assert "None" not in scope, (hw, scope)
    assert "at an inferred concurrency 64," in default_latency(load_hardware("MI300X")).calibration.scope
    p = predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", concurrency=8, acceptance=0.7)
    src = p.term_sources["speculative_overhead"]
    # the shipped fit puts it at ~1e-15 s (a bound of the fit; its exact value moves with every refit)
    assert re.search(r"fixed_s ~0 us \(\d\.\de-\d\d s\)", src) and "e-09 us" not in p.summary(), src


def test_sweep_warns_where_the_speculative_overhead_dominates_as_predict_does():
    """A new-user trial: predict at concurrency 64 warned that the speculative overhead exceeds draft
    + verification (an extrapolation of per-sequence terms), the sweep over the same points had
    ``attrs["warnings"] == ()``.  The sweep now names the concurrencies, exactly those where predict
    warns."""
    from specsim.predict import sweep

    cs = [1, 8, 64, 256]
    df = sweep("Qwen3.6-35B-A3B", "mtp", [1, 3], concurrency=cs, acceptance=0.75)
    warned = [c for c in cs if any("speculative overhead" in w for n in (1, 3) for w in
                                   predict("Qwen3.6-35B-A3B", "mtp", n, concurrency=c, acceptance=0.75).warnings)]
    assert warned and warned != cs
    msgs = [w for w in df.attrs["warnings"] if w.startswith("the speculative overhead exceeds")]
    assert len(msgs) == 1 and f"at concurrency {', '.join(map(str, warned))}:" in msgs[0], (warned, msgs)
    quiet = sweep("Qwen3.6-35B-A3B", "mtp", [1, 3], concurrency=[c for c in cs if c not in warned], acceptance=0.75)
    assert not any("speculative overhead" in w for w in quiet.attrs["warnings"])


def test_sweep_warns_of_a_draft_derived_from_the_target_once_as_predict_assumes_it(tmp_path):
    """A new-user trial: sweep --draft nonexistent-draft exited 0 with nothing said, where predict lists "assumed:
    draft checkpoint nonexistent-draft is not in specsim's catalog ... DERIVED from the target".  The sweep's
    warnings now carry predict's assumptions of a draft derived from the target (once, however many
    combinations use it) -- not the catalog's own documented assumptions of a seed draft."""
    kw = dict(concurrency=[4], acceptance=0.7)
    p = predict("Qwen3-8B", "eagle3", 3, draft="nonexistent-draft", concurrency=4, acceptance=0.7)
    (derived,) = [a for a in p.assumptions if a.startswith("assumed: draft checkpoint nonexistent-draft is not in "
                                                            "specsim's catalog")]
    assert "its structure is DERIVED from the target" in derived
    df = sweep("Qwen3-8B", "eagle3", [1, 3], hardware=["MI300X", "H100"], draft="nonexistent-draft", **kw)
    assert [w for w in df.attrs["warnings"] if "nonexistent-draft" in w] == [derived]
    # a target without a seed draft for the method: the default draft is derived, said as predict says it
    (seedless,) = [a for a in predict("SmolLM2-135M-Instruct", "eagle3", 3, concurrency=4, acceptance=0.7).assumptions
                   if "derived from the target" in a]
    assert seedless.startswith("assumed: no seed eagle3 spec for SmolLM2-135M-Instruct; draft derived from the target")
    assert seedless in sweep("SmolLM2-135M-Instruct", "eagle3", [3], **kw).attrs["warnings"]
    # a draft config.json lacking fields (taken from the derived structure) and of another architecture
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4096, "num_hidden_layers": 1,
                                                      "architectures": ["LlamaForCausalLM"]}))
    got = sweep("Qwen3-8B", "eagle3", [3], draft=str(tmp_path), **kw).attrs["warnings"]
    assert [w for w in got if "config.json" in w] == [
        "assumed: config.json lacks num_attention_heads, num_key_value_heads, head_dim, intermediate_size, "
        "draft_vocab_size: taken from the structure derived from the target",
        "caution: config.json declares architectures 'LlamaForCausalLM', which does not look like a eagle3 draft "
        "head; its layer count and sizes are used as given"]
    # the seed draft of the catalog: its documented assumptions stay predict's assumptions only
    seed = predict("Qwen3-8B", "eagle3", 3, concurrency=4, acceptance=0.7).assumptions
    assert any(a.startswith("assumed: draft") for a in seed)
    assert not set(seed) & set(sweep("Qwen3-8B", "eagle3", [3], **kw).attrs["warnings"])


def test_a_baseline_whose_tpot_and_throughput_disagree_is_warned_about():
    """A new-user trial: baseline tpot_s=0.012 with output_tok_per_s=75 at concurrency 8 (75 tok/s
    allows a TPOT up to ~107 ms) anchored on the tok/s without comparing the two.  Every recorded
    vllm bench serve result of this project lies within BASELINE_CONSISTENT (checked here on the
    recorded runs), so only a pair from different runs or units is warned about."""
    import glob
    from pathlib import Path

    from specsim.predict import BASELINE_CONSISTENT

    kw = dict(hardware="H100", concurrency=8, acceptance=0.7)
    bad = predict("Qwen3-8B", "eagle3", 3, baseline={"tpot_s": 0.012, "output_tok_per_s": 75.0}, **kw)
    assert any("are 0.11x the throughput that TPOT allows" in w for w in bad.warnings), bad.warnings
    good = predict("Qwen3-8B", "eagle3", 3, baseline={"tpot_s": 0.012, "output_tok_per_s": 600.0}, **kw)
    assert not any("the throughput that TPOT allows" in w for w in good.warnings)
    root = Path(__file__).resolve().parents[1]
    seen = 0
    for f in sorted(glob.glob(str(root / "data/runs/*/bench.json")))[:200]:
        d = json.loads(Path(f).read_text())
        if d.get("mean_tpot_ms") and d.get("output_throughput"):
            x = d["output_throughput"] * d["mean_tpot_ms"] / 1e3 / (d.get("max_concurrency") or 1)
            assert BASELINE_CONSISTENT[0] <= x <= BASELINE_CONSISTENT[1], (f, x)
            seen += 1
    assert seen >= 50


@pytest.mark.parametrize("method", ["dflash", "ngram"])
def test_prediction_fields_reproduce_its_throughput_tpot_and_break_even(method):
    """docs/model.md's formulas, recomputed from the Prediction's own fields (a docs-vs-code trial: the
    speculative arm's prefill, with the drafter's pass over the prompt, was not in the output, so
    output_tok_per_s could not be recomputed from it; the docs had it shared by both arms)."""
    acc = Acceptance.from_rates([0.875, 0.758, 0.653, 0.557, 0.476, 0.400, 0.332], "cumulative")
    p = predict("gemma-4-26B-A4B-it", method, 7, hardware="MI300X", tp=2, concurrency=32, acceptance=acc)
    c, osl, d = p.concurrency, p.osl, p.osl - 1
    assert p.output_tok_per_s == pytest.approx(c * osl / (c * p.t_prefill_spec_s + d / p.mal * p.t_step_s), rel=1e-12)
    assert p.baseline_output_tok_per_s == pytest.approx(c * osl / (c * p.t_prefill_s + d * p.t_base_s), rel=1e-12)
    assert p.tpot_s == pytest.approx((d / p.mal * p.t_step_s + (c - 1) * p.t_prefill_spec_s) / d, rel=1e-12)
    # docs/contracts.md: MAL* = D T_spec / (C OSL / tok_s_base - C t_prefill_spec)
    assert p.break_even_mal == pytest.approx(
        d * p.t_step_s / (c * osl / p.baseline_output_tok_per_s - c * p.t_prefill_spec_s), rel=1e-9)
    if method == "ngram":  # a lookup drafter has no pass over the prompt
        assert p.t_prefill_spec_s == p.t_prefill_s
    else:
        assert p.t_prefill_spec_s > p.t_prefill_s * 1.05
    assert p.to_dict()["t_prefill_spec_s"] == p.t_prefill_spec_s


@pytest.mark.parametrize("osl", [2, 3, 4])
def test_a_request_takes_at_least_one_speculative_step(osl):
    """A new-user trial: at OSL 2 (one decode token) predict gave 1.386x and a TPOT of 4.955 ms against a
    speculative step of 24.075 ms, counting (OSL - 1) / MAL = 0.21 steps; a request takes at least one
    whole step (vLLM verifies the full proposal and trims at max_tokens)."""
    p = predict("Qwen3-8B", "eagle3", 15, hardware="MI300X", concurrency=1, acceptance=0.8, osl=osl)
    d, c = osl - 1, p.concurrency
    steps = max(d / p.mal, 1.0)  # independent computation
    assert p.tpot_s == pytest.approx((steps * p.t_step_s + (c - 1) * p.t_prefill_spec_s) / d, rel=1e-12)
    assert p.tpot_s >= p.t_step_s / d * (1 - 1e-12)
    assert p.output_tok_per_s == pytest.approx(c * osl / (c * p.t_prefill_spec_s + steps * p.t_step_s), rel=1e-12)
    if osl == 2:  # one step each way: the slower speculative step loses
        assert p.throughput_ratio < 1 and p.break_even_mal == math.inf
        assert p.tpot_s == pytest.approx(p.t_step_s, rel=1e-12)
    short = [w for w in p.warnings if w.startswith("short output")]
    if osl == 2:  # one decode token: the one step is exact, nothing to say
        assert not short
    else:
        assert len(short) == 1 and short[0].startswith(f"short output: OSL {osl} leaves {d} decode tokens, "
                                                       f"{d / p.mal:.2f} speculative steps"), p.warnings
        assert "by up to nearly one step per request" in short[0]
    long = predict("Qwen3-8B", "eagle3", 15, hardware="MI300X", concurrency=1, acceptance=0.8, osl=1024)
    assert not any(w.startswith("short output") for w in long.warnings)
    # sweep and recommend say it too, once (the review: only predict did)
    df = sweep("Qwen3-8B", "eagle3", [2, 15], hardware="MI300X", concurrency=[1], acceptance=0.8, osl=[osl, 1024])
    few = df[(df["osl"] - 1) / df["mal"] < 4]
    said = [w for w in df.attrs["warnings"] if w.startswith("short output in this sweep")]
    assert len(said) == (0 if osl == 2 else 1), df.attrs["warnings"]
    if osl > 2:
        assert f"({len(few)} points below 4 steps" in said[0] or len(few) == 1
    from specsim.recommend import recommend
    rec = recommend("Qwen3-8B", ["eagle3"], hardware="MI300X", acceptance=Acceptance.constant(0.8, temperature=0.0),
                    concurrency=[1], max_concurrency=1, osl=osl)
    assert sum(w.startswith("short output (eagle3, recommended N)") for w in rec.warnings) == (0 if osl == 2 else 1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(osl=st.integers(2, 40), a=st.floats(0.05, 0.99), n=st.integers(1, 15), c=st.sampled_from([1, 8, 64]))
def test_break_even_matches_the_ratio_also_for_short_outputs(osl, a, n, c):
    """ratio < 1 exactly when MAL < break_even_mal, also where a request has fewer tokens than one step
    commits (the ratio stops rising at MAL = OSL - 1, and no MAL breaks even beyond it)."""
    p = predict("Qwen3-8B", "eagle3", n, hardware="MI300X", concurrency=c, acceptance=a, osl=osl, isl=256)
    assert (p.throughput_ratio < 1.0) == (p.mal < p.break_even_mal) or abs(p.throughput_ratio - 1.0) < 1e-9
    assert p.break_even_mal == math.inf or p.break_even_mal <= osl - 1 + 1e-9
