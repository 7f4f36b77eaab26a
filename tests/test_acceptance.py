"""Tests of specsim.acceptance.Acceptance (per-position acceptance as a survival curve)."""
from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from specsim.acceptance import FAMILIES, Acceptance
from specsim.errors import NotCollectedError, SpecsimValueError

# Published fixture.  Source: vllm-amd-specdec-post (vLLM blog "Exploring Speculative Decoding in
# vLLM on AMD GPUs", appendix tables), copied from reference/published/amd_specdec_n_sweeps.csv:
# google/gemma-4-26B-A4B-it, method dflash, MI300X, TP 2, GSM8K.  Per-position values are the
# CUMULATIVE acceptance rates (the CSV notes that MAL = 1 + sum(per-pos) holds).
GEMMA_DFLASH_GSM8K = {
    3: dict(mal=3.36, ar=0.788, cum=[0.896, 0.789, 0.679]),
    7: dict(mal=5.05, ar=0.579, cum=[0.875, 0.758, 0.653, 0.557, 0.476, 0.400, 0.332]),
    11: dict(mal=5.71, ar=0.428,
             cum=[0.867, 0.742, 0.634, 0.537, 0.453, 0.378, 0.314, 0.259, 0.215, 0.174, 0.137]),
    15: dict(mal=5.89, ar=0.326,
             cum=[0.863, 0.732, 0.622, 0.525, 0.440, 0.366, 0.304, 0.249, 0.204, 0.166, 0.132, 0.104,
                  0.080, 0.060, 0.042]),
}


def simulate_counts(rng: np.random.Generator, alphas, num_rounds: int):
    """Simulate verification rounds with conditional acceptance ``alphas`` (length N) and return
    vLLM-style counters (num_drafts, accepted_per_pos)."""
    alphas = np.asarray(alphas, float)
    u = rng.random((num_rounds, len(alphas)))
    accepted_mask = np.cumprod(u < alphas[None, :], axis=1)  # survives position k iff all <= k accepted
    a = accepted_mask.sum(axis=1)  # A per round
    per_pos = np.array([(a >= k).sum() for k in range(1, len(alphas) + 1)])
    return num_rounds, per_pos


def mal_loop(cond, n):
    """Independent MAL: expected committed tokens = sum over A of P(A = j) * (j + 1)."""
    total = 0.0
    surv = 1.0
    for j in range(n + 1):
        # P(A = j) = prod_{i<=j} alpha_i * (1 - alpha_{j+1}), with A = n having no rejection
        p_reach = surv
        p_stop = p_reach * (1.0 - cond[j]) if j < n else p_reach
        total += p_stop * (j + 1)
        if j < n:
            surv *= cond[j]
    return total


# --------------------------------------------------------------------------------------------
# closed forms
# --------------------------------------------------------------------------------------------
def test_mal_closed_form_matches_independent_loop():
    rng = np.random.default_rng(1)
    cond = rng.uniform(0.3, 1.0, size=12)
    acc = Acceptance.from_rates(cond, kind="conditional")
    for n in range(1, 13):
        assert acc.mal(n) == pytest.approx(mal_loop(cond, n), rel=1e-12)
    # beyond the measured positions the table continues with the extrapolated alphas
    ext = acc.conditional(30)
    for n in (13, 20, 30):
        assert acc.mal(n) == pytest.approx(mal_loop(ext, n), rel=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 0.93, 1.0])
def test_constant_alpha_matches_leviathan(alpha):
    acc = Acceptance.constant(alpha)
    for n in (1, 2, 5, 15, 64, 200):
        expected = n + 1.0 if alpha == 1.0 else (1 - alpha ** (n + 1)) / (1 - alpha)
        assert acc.mal(n) == pytest.approx(expected, rel=1e-12)
    assert np.allclose(acc.conditional(7), alpha)
    assert np.allclose(acc.cumulative(7), alpha ** np.arange(1, 8))


def test_mal_vectorised_shape_and_values():
    acc = Acceptance.from_rates([0.9, 0.8, 0.7], kind="conditional")
    grid = np.array([[1, 2, 3], [10, 64, 100]])
    out = acc.mal(grid)
    assert isinstance(out, np.ndarray) and out.shape == (2, 3)
    for idx, n in np.ndenumerate(grid):
        assert out[idx] == acc.mal(int(n))
    assert isinstance(acc.mal(3), float)
    assert isinstance(acc.mal(np.int64(3)), float)
    # acceptance rate = (MAL - 1) / N = mean of cumulative rates
    assert acc.acceptance_rate(3) == pytest.approx(np.mean([0.9, 0.72, 0.504]))
    np.testing.assert_allclose(np.diff(acc.mal(np.arange(1, 41))), acc.cumulative(40)[1:], rtol=1e-9, atol=1e-14)


def test_published_gemma_dflash_gsm8k_n15():
    row = GEMMA_DFLASH_GSM8K[15]
    acc = Acceptance.from_rates(row["cum"], kind="cumulative", label="gemma-4-26B dflash GSM8K N=15")
    assert acc.n_measured == 15
    assert acc.mal(15) == pytest.approx(1 + sum(row["cum"]), abs=1e-12)
    assert abs(acc.mal(15) - row["mal"]) <= 0.01  # published MAL is rounded to 0.01
    assert abs(acc.acceptance_rate(15) - row["ar"]) <= 0.001  # published AR rounded to 0.001
    # conditional rates derived from the cumulative ones fall with position (stated trend 6)
    cond = acc.conditional(15)
    assert cond[0] > 0.85 and cond[-1] < cond[0]
    # string form as stored in the CSV parses identically
    acc_s = Acceptance.from_rates(";".join(f"{x:.3f}" for x in row["cum"]), kind="cumulative")
    assert acc_s.mal(15) == acc.mal(15)


def test_published_extrapolation_n11_to_n15():
    # Extrapolating the N=11 profile with the default geometric_decay fit predicts the published
    # MAL at N=15.  Observed error +2.3%: the published per-position acceptance at N=15 is slightly
    # lower at every position than at N=11, which no extrapolation from N=11 can know; 3% bound.
    acc = Acceptance.from_rates(GEMMA_DFLASH_GSM8K[11]["cum"], kind="cumulative")
    assert acc.mal(11) == pytest.approx(GEMMA_DFLASH_GSM8K[11]["mal"], abs=0.01)
    assert abs(acc.mal(15) / GEMMA_DFLASH_GSM8K[15]["mal"] - 1) < 0.03
    assert acc.is_extrapolated(15).tolist() == [False] * 11 + [True] * 4


# --------------------------------------------------------------------------------------------
# estimation from counts
# --------------------------------------------------------------------------------------------
def test_single_run_cumulative_equals_counter_ratio():
    acc = Acceptance.from_counts(1000, [900, 700, 400, 100])
    np.testing.assert_allclose(acc.cumulative(4), [0.9, 0.7, 0.4, 0.1], rtol=1e-14)
    np.testing.assert_allclose(acc.conditional(4), [0.9, 7 / 9, 4 / 7, 1 / 4], rtol=1e-14)
    # vLLM's mean acceptance length = 1 + accepted / drafts
    assert acc.mal(4) == pytest.approx(1 + (900 + 700 + 400 + 100) / 1000)


def test_km_pooling_two_runs_hand_computed():
    # run A: N=2, 10 rounds, 8 accept >=1, 5 accept 2 (censored at 2)
    # run B: N=4, 20 rounds, counters 18, 12, 6, 3
    # position 1: at-risk 10 + 20 = 30, events 8 + 18 = 26
    # position 2: at-risk 8 + 18 = 26, events 5 + 12 = 17
    # position 3: run A censored; at-risk 12, events 6
    # position 4: at-risk 6, events 3
    acc = Acceptance.from_runs([(10, [8, 5]), (20, [18, 12, 6, 3])])
    np.testing.assert_allclose(acc.at_risk, [30, 26, 12, 6])
    np.testing.assert_allclose(acc.accepted, [26, 17, 6, 3])
    cond = np.array([26 / 30, 17 / 26, 6 / 12, 3 / 6])
    np.testing.assert_allclose(acc.conditional(4), cond, rtol=1e-14)
    np.testing.assert_allclose(acc.cumulative(4), np.cumprod(cond), rtol=1e-14)
    assert acc.mal(4) == pytest.approx(1 + np.cumprod(cond).sum())
    assert acc.n_measured == 4
    assert any("pooled" in a and "[2, 4]" in a for a in acc.assumptions)
    # up to the shortest N, KM equals pooled counter ratios (the product telescopes) ...
    assert acc.cumulative(2)[1] == pytest.approx((5 + 12) / (10 + 20), rel=1e-14)
    # ... beyond it, run A's rounds still inform p_3 through positions 1-2: 17/30 * 1/2, not 6/20
    assert acc.cumulative(3)[2] == pytest.approx(17 / 60, rel=1e-14)


def test_unreached_positions_are_not_measured():
    acc = Acceptance.from_counts(50, [20, 0, 0])
    assert acc.n_measured == 2
    assert acc.cumulative(5).tolist()[1:] == [0.0, 0.0, 0.0, 0.0]
    assert acc.mal(3) == pytest.approx(1.4)
    assert acc.is_extrapolated(3).tolist() == [False, False, True]
    lo, hi = acc.cumulative_interval(3)
    assert lo[1] == 0.0 and 0.0 < hi[1] < 0.2  # Clopper-Pearson upper bound for 0 of 20, times hi_1


def test_from_rates_with_num_drafts_equals_counts():
    nd, acc_pp = 500, [450, 380, 300, 210]
    a = Acceptance.from_counts(nd, acc_pp)
    b = Acceptance.from_rates(np.array(acc_pp) / nd, kind="cumulative", num_drafts=nd)
    np.testing.assert_allclose(b.cumulative(10), a.cumulative(10), rtol=1e-12)
    np.testing.assert_allclose(b.cumulative_interval(4)[0], a.cumulative_interval(4)[0], rtol=1e-10)
    assert b.mal_interval(4) == pytest.approx(a.mal_interval(4), rel=1e-10)
    assert any("reconstructed" in s for s in b.assumptions)


def test_conditional_and_cumulative_rates_agree():
    cond = [0.95, 0.9, 0.8, 0.6]
    a = Acceptance.from_rates(cond, kind="conditional")
    b = Acceptance.from_rates(np.cumprod(cond), kind="cumulative")
    np.testing.assert_allclose(a.conditional(4), b.conditional(4), rtol=1e-12)
    np.testing.assert_allclose(a.mal(np.arange(1, 30)), b.mal(np.arange(1, 30)), rtol=1e-9)


# --------------------------------------------------------------------------------------------
# parametric fits
# --------------------------------------------------------------------------------------------
def test_mle_constant_recovers_alpha_from_simulated_rounds():
    rng = np.random.default_rng(20261129)
    alpha = 0.7
    nd, per_pos = simulate_counts(rng, [alpha] * 6, 20000)
    acc = Acceptance.from_counts(nd, per_pos)
    fit = acc.fit("constant")
    assert fit.family == "constant" and fit.fit_result.method == "mle"
    assert abs(fit.params["alpha"] - alpha) < 0.01
    # the constant-alpha MLE is the pooled events / at-risk (independent closed form)
    assert fit.params["alpha"] == pytest.approx(acc.accepted.sum() / acc.at_risk.sum(), rel=1e-6)
    # AIC bookkeeping: 2p - 2 loglik
    r = fit.fit_result
    assert r.aic == pytest.approx(2 * 1 - 2 * r.log_likelihood)
    e, n = acc.accepted, acc.at_risk
    a = r.params["alpha"]
    assert r.log_likelihood == pytest.approx(np.sum(e * np.log(a) + (n - e) * np.log(1 - a)), rel=1e-9)


def test_mle_geometric_decay_recovers_parameters():
    rng = np.random.default_rng(7)
    a_true, r_true = 0.92, 0.93
    alphas = a_true * r_true ** np.arange(10)
    # two runs at different N, pooled
    run1 = simulate_counts(rng, alphas[:4], 20000)
    run2 = simulate_counts(rng, alphas, 20000)
    acc = Acceptance.from_runs([run1, run2])
    fit = acc.fit("geometric_decay")
    assert abs(fit.params["a"] - a_true) < 0.01
    assert abs(fit.params["r"] - r_true) < 0.01
    assert fit.is_extrapolated(12).tolist() == [False] * 10 + [True] * 2
    assert fit.status(11).tolist() == ["fitted"] * 10 + ["extrapolated"]


def test_mle_logistic_satisfies_score_equations():
    rng = np.random.default_rng(3)
    alphas = 1 / (1 + np.exp(-(2.0 - 0.25 * np.arange(8))))
    acc = Acceptance.from_counts(*simulate_counts(rng, alphas, 5000))
    fit = acc.fit("logistic")
    k = np.arange(8)
    al = fit.conditional(8)
    e, n = acc.accepted, acc.at_risk
    # binomial-GLM MLE: sum (e - n alpha) x = 0 for x in {1, k-1}
    score = np.array([np.sum(e - n * al), np.sum((e - n * al) * k)])
    assert np.all(np.abs(score) < 1e-3 * n.sum())
    assert abs(fit.params["b0"] - 2.0) < 0.2 and abs(fit.params["b1"] + 0.25) < 0.05


def test_best_fit_by_aic():
    rng = np.random.default_rng(11)
    acc = Acceptance.from_counts(*simulate_counts(rng, 0.95 * 0.8 ** np.arange(10), 5000))
    table = acc.compare_fits()
    assert set(table["family"]) == set(FAMILIES)
    best = acc.fit("best")
    assert best.fit_result.aic == pytest.approx(table["aic"].min())
    assert best.family != "constant"  # strongly decaying acceptance
    assert table.set_index("family").loc["constant", "aic"] > table["aic"].min() + 100


def test_least_squares_fallback_without_counts():
    cond = 0.9 * 0.95 ** np.arange(8)
    acc = Acceptance.from_rates(cond, kind="conditional")
    fit = acc.fit("geometric_decay")
    assert fit.fit_result.method == "logit_least_squares"
    assert fit.params["a"] == pytest.approx(0.9, abs=1e-6)
    assert fit.params["r"] == pytest.approx(0.95, abs=1e-6)
    assert any("least squares" in s and "weighted equally" in s for s in fit.assumptions)
    with pytest.raises(NotCollectedError):
        fit.cumulative_interval(3)


def test_extrapolation_uses_default_fit_and_is_flagged():
    acc = Acceptance.from_rates(0.9 * 0.95 ** np.arange(5), kind="conditional")
    cond = acc.conditional(10)
    np.testing.assert_allclose(cond[5:], 0.9 * 0.95 ** np.arange(5, 10), rtol=1e-5)
    frame = acc.to_frame(8)
    assert list(frame.columns[:6]) == ["position", "conditional", "cumulative", "cumulative_lo",
                                       "cumulative_hi", "status"]
    assert frame["status"].tolist() == ["measured"] * 5 + ["extrapolated"] * 3
    assert frame["cumulative_lo"].isna().all()  # no counts -> no interval, never a made-up one
    one = Acceptance.from_counts(100, [80])  # one position: constant extrapolation
    assert one.conditional(3) == pytest.approx([0.8, 0.8, 0.8], abs=1e-6)


def test_from_mal_round_trip_and_assumption():
    for alpha in (0.2, 0.55, 0.8, 0.97):
        for n in (1, 3, 7, 15):
            mal = Acceptance.constant(alpha).mal(n)
            back = Acceptance.from_mal(mal, n)
            assert back.params["alpha"] == pytest.approx(alpha, abs=1e-9)
            assert back.mal(n) == pytest.approx(mal, rel=1e-12)
            assert any("implied" in s and "Leviathan" in s for s in back.assumptions)
    assert Acceptance.from_mal(1.0, 4).params["alpha"] == 0.0
    assert Acceptance.from_mal(5.0, 4).params["alpha"] == 1.0
    assert Acceptance.from_mal(3.0, 4).status(6).tolist() == ["fitted"] * 4 + ["extrapolated"] * 2


@settings(max_examples=50, deadline=None)
@given(mal_frac=st.floats(0.0, 1.0), n=st.integers(1, 40))
def test_from_mal_round_trip_property(mal_frac, n):
    mal = 1.0 + mal_frac * n
    assert Acceptance.from_mal(mal, n).mal(n) == pytest.approx(mal, rel=1e-9, abs=1e-9)


# --------------------------------------------------------------------------------------------
# intervals
# --------------------------------------------------------------------------------------------
def test_clopper_pearson_edge_closed_forms():
    acc = Acceptance.from_counts(10, [10, 0])
    lo, hi = acc.conditional_interval(2, level=0.95)
    assert lo[0] == pytest.approx(0.025 ** (1 / 10))  # all 10 accepted
    assert hi[0] == 1.0
    assert lo[1] == 0.0
    assert hi[1] == pytest.approx(1 - 0.025 ** (1 / 10))  # 0 of 10 accepted
    clo, chi = acc.cumulative_interval(1)
    assert clo[0] == pytest.approx(0.025 ** (1 / 10)) and chi[0] == 1.0


def test_greenwood_hand_computed():
    nd, pp = 200, [150, 90, 30]
    acc = Acceptance.from_counts(nd, pp)
    n = np.array([200, 150, 90.0])
    e = np.array([150, 90, 30.0])
    var = np.cumsum((n - e) / (n * e))
    p = e / nd
    z = stats.norm.ppf(0.95)
    lo, hi = acc.cumulative_interval(3, level=0.90)
    np.testing.assert_allclose(lo, p * np.exp(-z * np.sqrt(var)), rtol=1e-12)
    np.testing.assert_allclose(hi, np.minimum(1, p * np.exp(z * np.sqrt(var))), rtol=1e-12)


def test_intervals_contain_estimate_and_shrink_with_data():
    rng = np.random.default_rng(5)
    alphas = 0.9 * 0.95 ** np.arange(6)
    small = Acceptance.from_counts(*simulate_counts(rng, alphas, 400))
    large = Acceptance.from_counts(*simulate_counts(rng, alphas, 40000))
    for acc in (small, large):
        for n in (6, 12):
            lo, hi = acc.cumulative_interval(n)
            p = acc.cumulative(n)
            assert np.all(lo <= p) and np.all(p <= hi)
            clo, chi = acc.conditional_interval(n)
            c = acc.conditional(n)
            assert np.all(clo <= c + 1e-12) and np.all(c <= chi + 1e-12)
            mlo, mhi = acc.mal_interval(n)
            assert mlo <= acc.mal(n) <= mhi
    for n in (6, 12):
        ws = np.subtract(*small.cumulative_interval(n)[::-1])
        wl = np.subtract(*large.cumulative_interval(n)[::-1])
        assert np.all(wl < ws)
        assert np.subtract(*large.mal_interval(n)[::-1]) < np.subtract(*small.mal_interval(n)[::-1])
    wcs = np.subtract(*small.conditional_interval(6)[::-1])
    wcl = np.subtract(*large.conditional_interval(6)[::-1])
    assert np.all(wcl < wcs)
    # vectorised MAL interval agrees with scalar calls
    lo_v, hi_v = large.mal_interval(np.array([2, 6, 12]))
    assert lo_v[1] == pytest.approx(large.mal_interval(6)[0]) and hi_v[2] == pytest.approx(large.mal_interval(12)[1])


def test_interval_coverage_by_simulation():
    # 95% intervals of p_4 and MAL(4) should cover the truth about 95% of the time.
    rng = np.random.default_rng(42)
    alphas = np.array([0.9, 0.85, 0.8, 0.75])
    p4 = np.prod(alphas)
    mal4 = 1 + np.cumprod(alphas).sum()
    reps = 400
    cov_p = cov_m = 0
    for _ in range(reps):
        acc = Acceptance.from_counts(*simulate_counts(rng, alphas, 300))
        lo, hi = acc.cumulative_interval(4)
        cov_p += lo[3] <= p4 <= hi[3]
        mlo, mhi = acc.mal_interval(4)
        cov_m += mlo <= mal4 <= mhi
    # binomial s.d. of the coverage estimate at 0.95 over 400 reps is 0.011
    assert 0.92 <= cov_p / reps <= 0.98
    assert 0.92 <= cov_m / reps <= 0.98


def test_fitted_parametric_has_delta_method_intervals():
    rng = np.random.default_rng(9)
    acc = Acceptance.from_counts(*simulate_counts(rng, [0.8] * 5, 3000))
    fit = acc.fit("constant")
    lo, hi = fit.cumulative_interval(10)
    p = fit.cumulative(10)
    assert np.all(lo < p) and np.all(p < hi)
    mlo, mhi = fit.mal_interval(10)
    assert mlo < fit.mal(10) < mhi
    with pytest.raises(NotCollectedError):
        Acceptance.constant(0.8).mal_interval(3)
    with pytest.raises(NotCollectedError):
        Acceptance.from_rates([0.9, 0.8], kind="conditional").conditional_interval(2)


# --------------------------------------------------------------------------------------------
# property tests
# --------------------------------------------------------------------------------------------
def check_invariants(acc: Acceptance, nmax: int = 40):
    ns = np.arange(1, nmax + 1)
    mal = acc.mal(ns)
    assert np.all(mal >= 1 - 1e-12) and np.all(mal <= ns + 1 + 1e-12)
    assert np.all(np.diff(mal) >= -1e-12)
    cum = acc.cumulative(nmax)
    assert np.all(np.diff(cum) <= 1e-12)
    cond = acc.conditional(nmax)
    assert np.all((cond >= 0) & (cond <= 1))
    np.testing.assert_allclose(np.diff(np.concatenate([[1.0], mal])), cum, atol=1e-12)


rate_vectors = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rates=rate_vectors, kind=st.sampled_from(["conditional", "cumulative"]))
def test_invariants_random_rates(rates, kind):
    if kind == "cumulative":
        rates = sorted(rates, reverse=True)
    acc = Acceptance.from_rates(rates, kind=kind)
    check_invariants(acc)


@st.composite
def count_runs(draw):
    runs = []
    for _ in range(draw(st.integers(1, 3))):
        nd = draw(st.integers(1, 2000))
        n = draw(st.integers(1, 12))
        acc, prev = [], nd
        for _ in range(n):
            prev = draw(st.integers(0, prev))
            acc.append(prev)
        runs.append((nd, acc))
    return runs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=count_runs())
def test_invariants_random_counts(runs):
    acc = Acceptance.from_runs(runs)
    check_invariants(acc)
    n = 20
    lo, hi = acc.cumulative_interval(n)
    p = acc.cumulative(n)
    assert np.all(lo <= p + 1e-12) and np.all(p <= hi + 1e-12)
    assert np.all((lo >= 0) & (hi <= 1))
    for m in (1, acc.n_measured, n):
        mlo, mhi = acc.mal_interval(m)
        assert 1 - 1e-12 <= mlo <= acc.mal(m) + 1e-9
        assert acc.mal(m) - 1e-9 <= mhi <= m + 1 + 1e-12


# --------------------------------------------------------------------------------------------
# metadata, immutability, serialisation
# --------------------------------------------------------------------------------------------
def test_temperature_label_and_immutability():
    acc = Acceptance.from_counts(100, [90, 70], temperature=0.0, label="run-1")
    assert acc.temperature == 0.0 and acc.label == "run-1"
    hot = acc.with_temperature(0.7, "reused greedy profile at T=0.7")
    assert hot.temperature == 0.7 and hot.assumptions[-1] == "reused greedy profile at T=0.7"
    assert acc.temperature == 0.0 and acc.assumptions == ()
    assert Acceptance.constant(0.5).temperature is None
    with pytest.raises(AttributeError):
        acc.temperature = 1.0
    with pytest.raises(TypeError):
        Acceptance()
    arr = acc.cumulative(2)
    arr[0] = 0.0
    assert acc.cumulative(2)[0] == pytest.approx(0.9)
    r = repr(acc)
    assert "run-1" in r and "MAL" in r and "measured positions 1..2" in r


def test_to_dict_json_round_trip():
    rng = np.random.default_rng(2)
    acc = Acceptance.from_runs([simulate_counts(rng, [0.9, 0.8, 0.7], 500),
                                simulate_counts(rng, [0.9, 0.8, 0.7, 0.6, 0.5], 800)],
                               temperature=0.0, label="pooled")
    for obj in (acc, acc.fit("logistic"), Acceptance.from_mal(3.2, 5), Acceptance.from_rates([0.9, 0.5], kind="conditional")):
        d = json.loads(json.dumps(obj.to_dict()))
        back = Acceptance.from_dict(d)
        ns = np.arange(1, 30)
        np.testing.assert_allclose(back.mal(ns), obj.mal(ns), rtol=1e-9)
        assert back.temperature == obj.temperature and back.assumptions == obj.assumptions
        assert back.is_extrapolated(10).tolist() == obj.is_extrapolated(10).tolist()
        if obj.has_counts:
            np.testing.assert_allclose(back.mal_interval(ns)[1], obj.mal_interval(ns)[1], rtol=1e-6)
        clone = pickle.loads(pickle.dumps(obj))
        np.testing.assert_allclose(clone.cumulative(20), obj.cumulative(20), rtol=1e-9)
        assert copy.deepcopy(obj).label == obj.label


# --------------------------------------------------------------------------------------------
# errors: every one names the field and the rule
# --------------------------------------------------------------------------------------------
def raises_field(field, fn, *args, rule=None, **kwargs):
    with pytest.raises(SpecsimValueError) as ei:
        fn(*args, **kwargs)
    assert ei.value.field == field
    assert field in str(ei.value)
    if rule is not None:
        assert rule in str(ei.value)
    return ei.value


def test_errors_rates():
    raises_field("rates[1]", Acceptance.from_rates, [0.9, 1.2], rule="[0, 1]")
    raises_field("rates[0]", Acceptance.from_rates, [-0.1], rule="[0, 1]")
    raises_field("rates[2]", Acceptance.from_rates, [0.9, 0.8, float("nan")], rule="NaN")
    raises_field("rates[2]", Acceptance.from_rates, [0.9, 0.7, 0.75], kind="cumulative", rule="increase")
    raises_field("rates", Acceptance.from_rates, [])
    raises_field("kind", Acceptance.from_rates, [0.9], kind="survival", rule="unknown")
    raises_field("alpha", Acceptance.constant, 1.5, rule="[0, 1]")
    raises_field("alpha", Acceptance.constant, float("nan"), rule="NaN")


def test_errors_counts():
    raises_field("accepted_per_pos[2]", Acceptance.from_counts, 100, [90, 50, 60], rule="must not exceed position k")
    raises_field("accepted_per_pos[0]", Acceptance.from_counts, 100, [120, 50], rule="exceed num_drafts")
    raises_field("accepted_per_pos[1]", Acceptance.from_counts, 100, [50, -1], rule="negative")
    raises_field("accepted_per_pos[1]", Acceptance.from_counts, 100, [50, float("nan")], rule="NaN")
    raises_field("accepted_per_pos[0]", Acceptance.from_counts, 100, [50.5], rule="whole")
    raises_field("num_drafts", Acceptance.from_counts, -5, [0], rule="negative")
    raises_field("num_drafts", Acceptance.from_counts, 0, [0], rule="no drafts: acceptance not collected")
    raises_field("num_drafts", Acceptance.from_rates, [0.5], num_drafts=0, rule="no drafts")
    raises_field("runs[1].num_drafts", Acceptance.from_runs, [(10, [5]), (0, [0])], rule="no drafts")
    raises_field("runs[0].accepted_per_pos[1]", Acceptance.from_runs, [(10, [5, 6])], rule="position k")
    raises_field("runs", Acceptance.from_runs, [])


@pytest.mark.parametrize("method", ["mal", "conditional", "cumulative", "is_extrapolated"])
def test_errors_n(method):
    acc = Acceptance.from_rates([0.9, 0.8], kind="conditional")
    fn = getattr(acc, method)
    raises_field("n", fn, 0, rule=">= 1")
    raises_field("n", fn, -3, rule=">= 1")
    raises_field("n", fn, 2.5, rule="integer")
    raises_field("n", fn, True)
    raises_field("n", fn, "3")


def test_errors_misc():
    acc = Acceptance.from_counts(100, [90, 80])
    raises_field("n", acc.mal, np.array([1, 0, 3]), rule=">= 1")
    raises_field("family", acc.fit, "weibull", rule="unknown")
    raises_field("family", Acceptance.from_counts(100, [90]).fit, "logistic", rule="at least 2")
    raises_field("level", acc.cumulative_interval, 3, level=1.5)
    raises_field("temperature", Acceptance.constant, 0.5, temperature=-1.0)
    raises_field("assumption", acc.with_temperature, 0.5, "")
    raises_field("mal", Acceptance.from_mal, 6.0, 4, rule="[1, n + 1]")
    raises_field("mal", Acceptance.from_mal, 0.5, 4)
    raises_field("n", Acceptance.from_mal, 2.0, 0)
    raises_field("kind", Acceptance.from_dict, {"kind": "other"})
    with pytest.raises(NotCollectedError):
        Acceptance.constant(0.5).fit("logistic")


def test_from_rates_default_is_vllm_cumulative():
    """vLLM's per-position rates are cumulative and ``from_rates`` reads them so by default
    (BAD-INPUTS #117): the 2026 log line of README.md (vllm-ascend#13640) prints 'Mean acceptance
    length: 2.91' with 'Per-position acceptance rate: 0.739, 0.478, 0.261, 0.174, 0.130, 0.087,
    0.043', and MAL = 1 + sum of the cumulative rates = 2.912."""
    rates = [0.739, 0.478, 0.261, 0.174, 0.130, 0.087, 0.043]
    acc = Acceptance.from_rates(rates)
    assert acc.mal(7) == pytest.approx(1 + sum(rates)) and acc.mal(7) == pytest.approx(2.912)
    np.testing.assert_allclose(acc.cumulative(7), rates)
    assert acc.mal(7) == pytest.approx(Acceptance.from_rates(rates, kind="cumulative").mal(7))
    # read as conditional they give the old, silently wrong 2.203
    assert Acceptance.from_rates(rates, kind="conditional").mal(7) == pytest.approx(1 + np.cumprod(rates).sum())
    assert Acceptance.from_rates(rates, kind="conditional").mal(7) == pytest.approx(2.203, abs=1e-3)
    # cumulative rates must not increase: a conditional list passed without kind is refused, not misread
    raises_field("rates[1]", Acceptance.from_rates, [0.5, 0.9], rule="must not increase")


def test_the_from_rates_docstring_example_holds():
    """Its conditional reading said 2.203; the rates [0.8, 0.6, 0.45, 0.3] read as conditional give 2.5608."""
    import re

    doc = " ".join(Acceptance.from_rates.__doc__.split())
    cum, cond = (float(x) for x in re.search(r"= ([\d.]+); read as conditional they would give .*= ([\d.]+)\.",
                                              doc).groups())
    rates = [0.8, 0.6, 0.45, 0.3]
    assert Acceptance.from_rates(rates, "cumulative").mal(4) == pytest.approx(cum, abs=1e-12)
    assert Acceptance.from_rates(rates, "conditional").mal(4) == pytest.approx(cond, abs=1e-12)
    assert cond == pytest.approx(1 + 0.8 + 0.8 * 0.6 + 0.8 * 0.6 * 0.45 + 0.8 * 0.6 * 0.45 * 0.3, abs=1e-12)
