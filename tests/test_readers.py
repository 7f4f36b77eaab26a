"""Tests of the format readers added for issue 10 item 2: bench console output, --append-result
files, bench sweep results, vLLM per-request speculative metrics, GuideLLM reports, speculators
evaluation output and InferenceX golden-AL files.

Inputs: the real tool outputs in tests/data/samples/ (README.md there says how each was made) and
the project's recorded runs in data/runs/ (read-only).  Expected numbers are taken from the files'
own fields (read here with json / csv / yaml / re, never through the reader under test) or counted
by hand from them.
"""
from __future__ import annotations

import csv
import glob
import json
import os
import re
import shutil
import warnings

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.errors import DataError, NotCollectedError, SpecsimValueError
from specsim.vllm import (
    IngestWarning,
    SpecDecodeCounts,
    acceptance_by_draft_length,
    parse_bench_log,
    parse_request_spec_metrics,
    read_bench_log,
    read_bench_logs,
    read_bench_result,
    read_bench_results,
    read_bench_sweep,
    read_golden_al,
    read_guidellm_report,
    read_response_spec_metrics,
    read_speculators_acceptance,
    read_speculators_eval_log,
    read_sweep_summary_csv,
    read_sweep_summary_runs,
    sum_request_counts,
)

HERE = os.path.dirname(__file__)
S = os.path.join(HERE, "data", "samples")
RUNS = os.path.join(HERE, os.pardir, "data", "runs")


def s(*parts: str) -> str:
    return os.path.join(S, *parts)


def _text(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _json_lines(path: str) -> list[dict]:
    return [json.loads(ln) for ln in _text(path).splitlines() if ln.strip()]


def _console_value(text: str, label: str) -> str:
    m = re.search(rf"^{re.escape(label)}\s+(\S+)\s*$", text, re.MULTILINE)
    assert m, label
    return m.group(1)


def _prom_counters(path: str) -> tuple[int, int, int, tuple]:
    """(drafts, draft tokens, accepted, per-pos) summed from the raw `vllm:spec_decode_*_total` lines."""
    tot = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
    per: dict[int, int] = {}
    for ln in _text(path).splitlines():
        m = re.match(r'^vllm:spec_decode_(num_drafts|num_draft_tokens|num_accepted_tokens|'
                     r'num_accepted_tokens_per_pos)_total\{([^}]*)\} (\S+)$', ln)
        if not m:
            continue
        v = int(float(m.group(3)))
        if m.group(1) == "num_accepted_tokens_per_pos":
            pos = int(re.search(r'position="(\d+)"', m.group(2)).group(1))
            per[pos] = per.get(pos, 0) + v
        else:
            tot[m.group(1)] += v
    return (tot["num_drafts"], tot["num_draft_tokens"], tot["num_accepted_tokens"],
            tuple(per[i] for i in sorted(per)))


def _prom_delta(before: str, after: str) -> tuple:
    b, a = _prom_counters(before), _prom_counters(after)
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], tuple(x - y for x, y in zip(a[3], b[3])))


def _key(c: SpecDecodeCounts) -> tuple:
    return (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens, c.accepted_per_pos)


# ---------------------------------------------------------------------------------------------
# (a) vllm bench serve console output
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("log, prom", [("bench_a.log", ("metrics_a_before.prom", "metrics_a_after_bench.prom")),
                                       ("bench_b.log", ("metrics_b_before.prom", "metrics_b_after.prom"))])
def test_bench_console_sample_counts(log, prom):
    text = _text(s("run", log))
    r = read_bench_log(s("run", log))
    assert r.status == "collected"
    c = r.spec_counts()
    d = int(_console_value(text, "Drafts:"))
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (
        d, int(_console_value(text, "Draft tokens:")), int(_console_value(text, "Accepted tokens:")))
    pcts = [float(x) for x in re.findall(r"^  Position \d+:\s+(\S+)", text, re.MULTILINE)]
    assert c.num_speculative_tokens == len(pcts) == 3
    assert [round(100 * k / d, 2) for k in c.accepted_per_pos] == pcts
    # the same window's /metrics scrapes (the bench's own before/after), raw lines
    assert _key(c) == _prom_delta(s("run", prom[0]), s("run", prom[1]))
    assert r.raw["completed"] == int(_console_value(text, "Successful requests:"))
    assert r.latency_frame().loc["ttft", "mean"] == float(_console_value(text, "Mean TTFT (ms):"))


def test_bench_console_a_equals_its_save_result_json():
    raw = json.loads(_text(s("run", "bench_a.json")))
    c = read_bench_log(s("run", "bench_a.log")).spec_counts()
    d = raw["spec_decode_num_drafts"]
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (
        d, raw["spec_decode_draft_tokens"], raw["spec_decode_accepted_tokens"])
    assert c.accepted_per_pos == tuple(round(r * d) for r in raw["spec_decode_per_position_acceptance_rates"])
    summ = read_bench_log(s("run", "bench_a.log")).summary()
    assert summ["total_output_tokens"] == raw["total_output_tokens"]
    assert summ["duration_s"] == pytest.approx(raw["duration"], abs=0.005)


def test_bench_console_project_runs_match_their_bench_json():
    logs = sorted(glob.glob(os.path.join(RUNS, "*", "bench.log")))
    if not logs:
        pytest.skip("no data/runs in this checkout")
    checked = 0
    for log in logs:
        js = os.path.join(os.path.dirname(log), "bench.json")
        if not os.path.exists(js):
            continue
        raw = json.loads(_text(js))
        r = read_bench_log(log)
        if "spec_decode_num_drafts" not in raw:
            assert r.status == "not collected"
            with pytest.raises(NotCollectedError):
                r.spec_counts()
        else:
            d = raw["spec_decode_num_drafts"]
            want = (d, raw["spec_decode_draft_tokens"], raw["spec_decode_accepted_tokens"],
                    tuple(round(x * d) for x in raw["spec_decode_per_position_acceptance_rates"]))
            assert _key(r.spec_counts()) == want, log
        checked += 1
    assert checked >= 10


def test_bench_console_sweep_log_holds_two_blocks():
    path = s("sweep", "sweep.log")
    with pytest.raises(DataError, match="holds 2 benchmark results"):
        read_bench_log(path)
    blocks = read_bench_logs(path)
    runs = sorted(glob.glob(s("sweep", "results", "*", "*", "run=0.json")))
    want = []
    for f in runs:
        raw = json.loads(_text(f))
        want.append((raw["max_concurrency"], raw["spec_decode_num_drafts"], raw["spec_decode_draft_tokens"]))
    got = sorted((b.raw["max_concurrency"], b.spec.num_drafts, b.spec.num_draft_tokens) for b in blocks)
    assert got == sorted(want)
    assert read_bench_log(path, index=-1).source.endswith("[1]")
    with pytest.raises(SpecsimValueError, match="index"):
        read_bench_log(path, index=2)


def _block(d, t, a, per, ar=None, al=None):
    """A Speculative Decoding block printed with vLLM's own format strings (serve.py)."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
             "{:<40} {:<10}".format("Successful requests:", 4)]
    lines.append("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"))
    lines.append("{:<40} {:<10.2f}".format("Acceptance rate (%):", 100 * a / t if ar is None else ar))
    lines.append("{:<40} {:<10.2f}".format("Acceptance length:", 1 + a / d if al is None else al))
    lines.append("{:<40} {:<10}".format("Drafts:", d))
    lines.append("{:<40} {:<10}".format("Draft tokens:", t))
    lines.append("{:<40} {:<10}".format("Accepted tokens:", a))
    lines.append("Per-position acceptance (%):")
    for i, k in enumerate(per):
        lines.append("{:<40} {:<10.2f}".format(f"  Position {i}:", 100 * k / d))
    lines.append("=" * 50)
    return "\n".join(lines) + "\n"


@st.composite
def _counts(draw):
    n = draw(st.integers(1, 8))
    d = draw(st.integers(1, 9999))
    per = sorted(draw(st.lists(st.integers(0, d), min_size=n, max_size=n)), reverse=True)
    a = sum(per)
    t = draw(st.integers(max(d, a, 1), n * d))
    return d, t, a, tuple(per)


@settings(max_examples=200, deadline=None)
@given(_counts())
def test_bench_console_roundtrip_property(c):
    d, t, a, per = c
    (r,) = parse_bench_log("noise\n" + _block(d, t, a, per) + "trailer\n", source="x")
    assert _key(r.spec_counts()) == (d, t, a, per)


@settings(max_examples=100, deadline=None)
@given(st.integers(10_001, 2_000_000), st.data())
def test_bench_console_long_runs_within_rounding(d, data):
    """Beyond 10 000 drafts several integers fit a printed 0.01 %: the counts found lie within the
    rounding, sum to the exact accepted tokens, and a warning says so."""
    n = data.draw(st.integers(1, 6))
    per = tuple(sorted(data.draw(st.lists(st.integers(0, d), min_size=n, max_size=n)), reverse=True))
    a = sum(per)
    t = data.draw(st.integers(max(d, a), n * d))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        (r,) = parse_bench_log(_block(d, t, a, per))
    c = r.spec_counts()
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (d, t, a)
    assert sum(c.accepted_per_pos) == a
    for k, k0 in zip(c.accepted_per_pos, per):  # within the printed rounding (ties either way)
        assert abs(100 * k / d - float(f"{100 * k0 / d:.2f}")) <= 0.005 + 1e-9
    assert all(issubclass(x.category, IngestWarning) for x in w)
    # by hand: 12345 of 20000 drafts prints 61.73 %, which 12345 and 12346 both print
    assert {round(100 * k / 20000, 2) for k in (12345, 12346)} == {61.73}
    with pytest.warns(IngestWarning, match="within rounding"):
        (r,) = parse_bench_log(_block(20000, 20000, 12345, (12345,)))
    assert r.spec.accepted_per_pos == (12345,)


def test_bench_console_bad_blocks():
    good = _block(357, 1067, 672, (271, 216, 185))
    assert parse_bench_log(good)[0].spec.accepted_per_pos == (271, 216, 185)
    with pytest.raises(DataError, match="no '==== Serving Benchmark Result"):
        parse_bench_log("INFO: nothing here\n")
    with pytest.raises(DataError, match="no closing"):
        parse_bench_log(good.rsplit("=" * 50, 1)[0])
    with pytest.raises(DataError, match="Acceptance length"):
        parse_bench_log(_block(357, 1067, 672, (271, 216, 185), al=2.95))
    with pytest.raises(DataError, match="Acceptance rate"):
        parse_bench_log(_block(357, 1067, 672, (271, 216, 185), ar=0.63))
    with pytest.raises(DataError, match="summing to"):
        parse_bench_log(good.replace("51.82", "50.70"))  # 181/357, a whole number, wrong sum
    with pytest.raises(DataError, match="no whole number"):
        parse_bench_log(good.replace("51.82", "51.85"))
    with pytest.raises(DataError, match="incomplete"):
        parse_bench_log(re.sub(r"Draft tokens:.*\n", "", good))
    base = parse_bench_log(good.split("-" * 15 + "Speculative")[0] + "=" * 50 + "\n")[0]
    assert base.status == "not collected"
    with pytest.raises(NotCollectedError):
        base.spec_counts()


# ---------------------------------------------------------------------------------------------
# (b) --append-result files
# ---------------------------------------------------------------------------------------------
def test_append_result_file_reads_every_result():
    path = s("run", "bench_appended.json")
    raws = _json_lines(path)
    assert len(raws) == 2
    rs = read_bench_results(path)
    assert len(rs) == 2
    for r, raw in zip(rs, raws):
        d = raw["spec_decode_num_drafts"]
        assert _key(r.spec_counts()) == (d, raw["spec_decode_draft_tokens"], raw["spec_decode_accepted_tokens"],
                                         tuple(round(x * d) for x in raw["spec_decode_per_position_acceptance_rates"]))
        assert r.raw["num_prompts"] == raw["num_prompts"]
    # the two appended runs are bench_a and bench_b (same counts as their console blocks)
    assert _key(rs[0].spec) == _key(read_bench_log(s("run", "bench_a.log")).spec)
    assert _key(rs[1].spec) == _key(read_bench_log(s("run", "bench_b.log")).spec)


def test_append_result_file_is_not_silently_reduced():
    path = s("run", "bench_appended.json")
    with pytest.raises(DataError, match="holds 2 results.*--append-result"):
        read_bench_result(path)
    assert read_bench_result(path, index=1).spec.num_drafts == _json_lines(path)[1]["spec_decode_num_drafts"]
    assert read_bench_result(path, index=-2).spec.num_drafts == _json_lines(path)[0]["spec_decode_num_drafts"]
    for bad in (2, -3, True, 1.0):
        with pytest.raises(SpecsimValueError, match="index"):
            read_bench_result(path, index=bad)
    # a single-result file still reads without index, and with index 0
    one = s("run", "bench_a.json")
    assert read_bench_result(one).spec == read_bench_result(one, index=0).spec
    assert len(read_bench_results(one)) == 1


def test_append_result_truncated_second_result(tmp_path):
    text = _text(s("run", "bench_appended.json"))
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) - 200], encoding="utf-8")
    with pytest.raises(DataError, match="result 2 .*truncated"):
        read_bench_results(cut)
    with pytest.raises(DataError, match="empty"):
        (tmp_path / "e.json").write_text("\n", encoding="utf-8")
        read_bench_results(tmp_path / "e.json")


# ---------------------------------------------------------------------------------------------
# (d) vLLM per-request speculative metrics
# ---------------------------------------------------------------------------------------------
def test_response_detailed_counts_equal_prometheus_delta_around_the_request():
    raw = json.loads(_text(s("run", "response_detailed.json")))
    sd = raw["metrics"]["speculative_decoding"]
    r = read_response_spec_metrics(s("run", "response_detailed.json"))
    h = sd["acceptance_histogram"]
    n = sd["num_spec_tokens"]
    c = r.counts
    assert c.num_drafts == sd["num_spec_steps"] == sum(h)
    assert c.num_draft_tokens == sd["num_draft_tokens"] == sum(sd["per_step_drafted"])
    assert c.num_accepted_tokens == sd["num_accepted_draft_tokens"] == sum(sd["per_step_accepted"])
    # accepted_per_pos by hand from per_step_accepted: steps that accepted >= i+1
    assert c.accepted_per_pos == tuple(sum(1 for x in sd["per_step_accepted"] if x > i) for i in range(n))
    assert c.mal == pytest.approx(sd["mean_acceptance_length"], rel=1e-12)
    # the single request was sent between metrics_a_after_bench.prom and metrics_a_after_req.prom
    assert _key(c) == _prom_delta(s("run", "metrics_a_after_bench.prom"), s("run", "metrics_a_after_req.prom"))
    assert r.request_id == raw["id"] and r.detailed


def test_per_draft_length_on_the_sample_and_by_hand():
    r = read_response_spec_metrics(s("run", "response_detailed.json"))
    dl = acceptance_by_draft_length(r)
    sd = json.loads(_text(s("run", "response_detailed.json")))["metrics"]["speculative_decoding"]
    assert dl.rounds == {3: len(sd["per_step_drafted"])}  # every step proposed 3 (per_step_drafted)
    assert _key(dl.counts(3)) == _key(r.counts)
    # mixed lengths by hand: rounds (drafted, accepted) = (3,3) (3,0) (2,2) (2,1) (1,1) (1,0)
    m = parse_request_spec_metrics({
        "mean_acceptance_length": 1 + 7 / 6, "draft_acceptance_rate": 7 / 12,
        "acceptance_histogram": [2, 2, 1, 1], "num_spec_steps": 6, "num_accepted_draft_tokens": 7,
        "num_draft_tokens": 12, "num_spec_tokens": 3,
        "per_step_accepted": [3, 0, 2, 1, 1, 0], "per_step_drafted": [3, 3, 2, 2, 1, 1]})
    dl = acceptance_by_draft_length([m])
    assert dl.rounds == {1: 2, 2: 2, 3: 2}
    assert dl.accepted == {1: (1,), 2: (2, 1), 3: (1, 1, 1)}
    # censored at each round's own length: position 1 at risk in all 6, position 2 in rounds of
    # length >= 2 that accepted position 1 (2,2) (2,1) (3,3) = 3, position 3 in (3,3) = 1
    assert list(dl.at_risk) == [6, 3, 1]
    assert list(dl.survived) == [4, 2, 1]
    np.testing.assert_allclose(dl.conditional_rates, [4 / 6, 2 / 3, 1.0])
    # the aggregate counters would say p3 = 1/6 (rounds of length < 3 counted as rejections)
    assert m.counts.accepted_per_pos == (4, 2, 1)
    assert set(dl.to_frame()["draft_length"]) == {1, 2, 3}


def test_per_request_summary_level_refuses_per_draft_length():
    sd = dict(json.loads(_text(s("run", "response_detailed.json")))["metrics"]["speculative_decoding"])
    del sd["per_step_accepted"], sd["per_step_drafted"]
    m = parse_request_spec_metrics(sd, source="summary")
    assert m.counts.num_drafts == sd["num_spec_steps"] and not m.detailed
    with pytest.raises(NotCollectedError, match="detailed"):
        acceptance_by_draft_length(m)


def test_per_request_inconsistent_payloads():
    good = dict(json.loads(_text(s("run", "response_detailed.json")))["metrics"]["speculative_decoding"])
    cases = [({"num_spec_steps": 7}, "num_spec_steps"), ({"acceptance_histogram": [2, 3, 1]}, "entries"),
             ({"num_accepted_draft_tokens": 6}, "num_accepted_draft_tokens"),
             ({"draft_acceptance_rate": 100 * 5 / 18}, "percent"),
             ({"mean_acceptance_length": 2.0}, "mean_acceptance_length"),
             ({"per_step_drafted": [3, 3, 3, 3, 3, 2]}, "sum\\(per_step_drafted\\)"),
             ({"per_step_accepted": [1, 1, 0, 2, 0]}, "steps"),
             ({"per_step_accepted": [1, 1, 1, 1, 0, 1]}, "histogram of per_step_accepted")]
    for patch, msg in cases:
        with pytest.raises(DataError, match=msg):
            parse_request_spec_metrics({**good, **patch})
    bad = dict(good)
    del bad["num_draft_tokens"]
    with pytest.raises(DataError, match="lacks"):
        parse_request_spec_metrics(bad)
    with pytest.raises(NotCollectedError, match="per-request-spec-decode-metrics"):
        read_response_spec_metrics({"id": "x", "metrics": {"speculative_decoding": None}})


@st.composite
def _steps(draw):
    n = draw(st.integers(1, 6))
    k = draw(st.lists(st.integers(1, n), min_size=1, max_size=60))
    a = [draw(st.integers(0, x)) for x in k]
    return n, k, a


@settings(max_examples=150, deadline=None)
@given(_steps())
def test_per_request_property_histogram_counters_and_censoring(case):
    n, drafted, accepted = case
    h = [sum(1 for x in accepted if x == j) for j in range(n + 1)]
    m = parse_request_spec_metrics({
        "mean_acceptance_length": 1 + sum(accepted) / len(accepted),
        "draft_acceptance_rate": sum(accepted) / sum(drafted), "acceptance_histogram": h,
        "num_spec_steps": len(accepted), "num_accepted_draft_tokens": sum(accepted),
        "num_draft_tokens": sum(drafted), "num_spec_tokens": n,
        "per_step_accepted": accepted, "per_step_drafted": drafted})
    c = m.counts
    # what vLLM's Prometheus observe_draft would count for these rounds
    assert c.accepted_per_pos == tuple(sum(1 for x in accepted if x > i) for i in range(n))
    dl = acceptance_by_draft_length(m)
    assert int(dl.survived.sum()) == sum(accepted)
    assert list(dl.survived) == list(c.accepted_per_pos)
    assert dl.at_risk[0] == len(drafted)
    assert all(dl.at_risk[i] >= dl.survived[i] for i in range(n))
    assert sum(dl.rounds.values()) == len(drafted)


# ---------------------------------------------------------------------------------------------
# (e) GuideLLM report
# ---------------------------------------------------------------------------------------------
def test_guidellm_report_per_request_and_total_counts():
    raw = json.loads(_text(s("gl", "report.json")))
    (b,) = read_guidellm_report(s("gl", "report.json"))
    reqs = raw["benchmarks"][0]["requests"]["successful"]
    sds = [r["response_metrics"]["speculative_decoding"] for r in reqs]
    assert b.status == "collected" and b.complete
    assert b.strategy == raw["benchmarks"][0]["config"]["strategy"]["type_"]
    got = b.requests["successful"]
    assert [g.request_id for g in got] == [r["info"]["request_id"] for r in reqs]
    for g, sd in zip(got, sds):
        assert (g.num_drafts, g.num_draft_tokens, g.num_accepted_tokens) == (
            sd["num_spec_steps"], sd["num_draft_tokens"], sd["num_accepted_draft_tokens"])
    c = b.spec_counts()
    n = sds[0]["num_spec_tokens"]
    want_per = tuple(sum(sum(1 for x in sd["per_step_accepted"] if x > i) for sd in sds) for i in range(n))
    assert _key(c) == (sum(sd["num_spec_steps"] for sd in sds), sum(sd["num_draft_tokens"] for sd in sds),
                       sum(sd["num_accepted_draft_tokens"] for sd in sds), want_per)
    # summed per-request histograms equal the server's counter deltas over the benchmark, exactly
    assert _key(c) == _prom_delta(s("gl", "metrics_before.prom"), s("gl", "metrics_after.prom"))
    assert _key(sum_request_counts(got)) == _key(c)
    assert b.by_draft_length().at_risk[0] == c.num_drafts


def test_guidellm_without_spec_metrics_and_sampled(tmp_path):
    raw = json.loads(_text(s("gl", "report.json")))
    for r in raw["benchmarks"][0]["requests"]["successful"]:
        r["response_metrics"] = None
    p = tmp_path / "r.json"
    p.write_text(json.dumps(raw), encoding="utf-8")
    (b,) = read_guidellm_report(p)
    assert b.status == "not collected"
    with pytest.raises(NotCollectedError, match="unknown, not zero"):
        b.spec_counts()
    raw = json.loads(_text(s("gl", "report.json")))
    raw["benchmarks"][0]["requests"]["successful"] = raw["benchmarks"][0]["requests"]["successful"][:3]
    p.write_text(json.dumps(raw), encoding="utf-8")
    (b,) = read_guidellm_report(p)
    assert not b.complete
    with pytest.warns(IngestWarning, match="lists 3 of 8 requests"):
        assert b.spec_counts().num_drafts == sum(
            r["response_metrics"]["speculative_decoding"]["num_spec_steps"]
            for r in raw["benchmarks"][0]["requests"]["successful"])
    p.write_text('{"metadata": {}}', encoding="utf-8")
    with pytest.raises(DataError, match="benchmarks"):
        read_guidellm_report(p)


def test_guidellm_warning_names_why_the_counts_are_partial(tmp_path):
    """Every request listed (8 of 8, request_totals.successful = 8) but two without speculative
    metrics: the warning said "lists 8 of 8 requests ... (GuideLLM request sampling?)"; it names
    the two requests and their status, and names sampling only where a status is sampled."""
    raw = json.loads(_text(s("gl", "report.json")))
    succ = raw["benchmarks"][0]["requests"]["successful"]
    assert len(succ) == raw["benchmarks"][0]["metrics"]["request_totals"]["successful"] == 8
    for r in succ[5:]:
        r["response_metrics"] = None
    p = tmp_path / "r.json"
    p.write_text(json.dumps(raw), encoding="utf-8")
    (b,) = read_guidellm_report(p)
    assert not b.complete
    with pytest.warns(IngestWarning) as rec:
        c = b.spec_counts()
    assert c.num_drafts == sum(r["response_metrics"]["speculative_decoding"]["num_spec_steps"]
                               for r in succ[:5] if r["response_metrics"])
    (msg,) = [str(w.message) for w in rec]
    assert msg == ("r.json[0]: the counts cover the 5 requests carrying speculative metrics only: "
                   "successful: 3 of 8 listed requests carry no response_metrics.speculative_decoding")
    assert "sampling" not in msg and "8 of 8" not in msg
    # sampled (5 of 8 listed) and one of the listed without metrics: both causes, each once
    raw["benchmarks"][0]["requests"]["successful"] = succ[3:]
    p.write_text(json.dumps(raw), encoding="utf-8")
    (b,) = read_guidellm_report(p)
    with pytest.warns(IngestWarning) as rec:
        b.spec_counts()
    (msg,) = [str(w.message) for w in rec]
    assert msg == ("r.json[0]: the counts cover the 2 requests carrying speculative metrics only: "
                   "successful: the report lists 5 of 8 requests (request_totals; GuideLLM request "
                   "sampling); successful: 3 of 5 listed requests carry no "
                   "response_metrics.speculative_decoding")
    assert b.gaps(("errored", "incomplete")) == []


# ---------------------------------------------------------------------------------------------
# (f) speculators scripts/evaluate
# ---------------------------------------------------------------------------------------------
def test_speculators_acceptance_csv_and_log():
    with open(s("spec_eval", "acceptance.csv"), encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    got = read_speculators_acceptance(s("spec_eval", "acceptance.csv"))
    assert list(got) == [r["subset"] for r in rows]
    for row in rows:
        c = got[row["subset"]]
        d = int(float(row["num_drafts"]))
        npos = sum(1 for k in row if k.startswith("acceptance_at_pos_"))
        assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (
            d, int(float(row["num_draft_tokens"])), int(float(row["num_accepted_tokens"])))
        assert c.accepted_per_pos == tuple(round(float(row[f"acceptance_at_pos_{i}"]) * d) for i in range(npos))
        assert c.mal == pytest.approx(float(row["acceptance_length"]), rel=1e-12)
    log = read_speculators_eval_log(s("spec_eval", "eval.log"))
    assert {k: _key(v) for k, v in log.items()} == {k: _key(v) for k, v in got.items()}
    text = _text(s("spec_eval", "eval.log"))
    assert log["HumanEval"].num_drafts == int(re.search(r"Num drafts\s+(\d+)", text).group(1))


def test_speculators_bad_csv(tmp_path):
    text = _text(s("spec_eval", "acceptance.csv"))
    p = tmp_path / "a.csv"
    p.write_text(text.replace(",2.7452830188679247,", ",2.8,"), encoding="utf-8")
    with pytest.raises(DataError, match="acceptance_length"):
        read_speculators_acceptance(p)
    p.write_text(text.replace("0.6415094339622641", "0.6400000000000000"), encoding="utf-8")
    with pytest.raises(DataError, match="whole number"):
        read_speculators_acceptance(p)
    p.write_text("subset,num_drafts\nX,1\n", encoding="utf-8")
    with pytest.raises(DataError, match="missing columns"):
        read_speculators_acceptance(p)
    p.write_text("nothing\n", encoding="utf-8")
    with pytest.raises(DataError, match="no '=== Speculative"):
        read_speculators_eval_log(p)


def test_speculators_eval_log_names_the_served_model(tmp_path):
    """The evaluation log holds GuideLLM's console output: "OpenAIHTTPBackend backend validated with
    model" then, wrapped by the console, "models/smollm2-135m-instruct" (eval.log lines 3-4); the
    model check of --acceptance-from read no model from it.  A name on the same line, a name folded
    over two lines, one per subset (repeated) and a run that resolved no model are read as such."""
    from specsim.vllm.speculators import speculators_eval_log_models

    text = _text(s("spec_eval", "eval.log"))
    assert "backend validated with model \nmodels/smollm2-135m-instruct\n  {'kind'" in text
    assert speculators_eval_log_models(s("spec_eval", "eval.log")) == ("models/smollm2-135m-instruct",)
    p = tmp_path / "eval.log"
    p.write_text("\u2714 OpenAIHTTPBackend backend validated with model Qwen/Qwen3-8B\n  {'kind': 'openai_http'}\n"
                 "\u2714 OpenAIHTTPBackend backend validated with model \nRedHatAI/Llama-3.1-8B-Instr\nuct\n"
                 "\u2714 Tokenizer resolved, using model 'x' as\ntokenizer\n"
                 "\u2714 OpenAIHTTPBackend backend validated with model Qwen/Qwen3-8B\n"
                 "\u2714 OpenAIHTTPBackend backend validated with model \n  {'kind': 'openai_http', 'model': ''}\n",
                 encoding="utf-8")
    assert speculators_eval_log_models(p) == ("Qwen/Qwen3-8B", "RedHatAI/Llama-3.1-8B-Instruct")
    p.write_text("no such line\n", encoding="utf-8")
    assert speculators_eval_log_models(p) == ()


# ---------------------------------------------------------------------------------------------
# (g) InferenceX golden AL
# ---------------------------------------------------------------------------------------------
def test_inferencex_golden_al_table_and_its_irregularities():
    with open(s("ix", "minimaxm3_eagle3.yaml"), encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    g = read_golden_al(s("ix", "minimaxm3_eagle3.yaml"))
    assert g.draft_model == raw["_metadata"]["draft-model"]
    want_rows, want_irr = [], set()
    for model, modes in raw.items():
        if model == "_metadata":
            continue
        for mode, curve in modes.items():
            prev_al, prev_inc = 1.0, None
            for n in sorted(curve):
                inc = curve[n] - prev_al
                want_rows.append((model, mode, n, curve[n]))
                if inc < -1e-9:
                    want_irr.add((model, mode, n, "AL decreases"))
                elif prev_inc is not None and inc > prev_inc + 1e-9:
                    want_irr.add((model, mode, n, "step grows"))
                prev_al, prev_inc = curve[n], inc
    assert list(g.table[["model", "mode", "num_speculative_tokens", "acceptance_length"]]
                .itertuples(index=False, name=None)) == want_rows
    irr = g.irregularities()
    assert set(irr[["model", "mode", "num_speculative_tokens", "kind"]].itertuples(index=False, name=None)) == want_irr
    # README: "its AL increments are not monotone in N"; thinking_off even falls from N=5 to N=6
    assert not g.monotone
    assert ("minimax-m3", "thinking_off", 6, "AL decreases") in want_irr
    assert raw["minimax-m3"]["thinking_off"][6] < raw["minimax-m3"]["thinking_off"][5]
    on = g.curve("minimax-m3", "thinking_on")
    assert list(on.index) == sorted(raw["minimax-m3"]["thinking_on"])
    with pytest.raises(DataError, match="present"):
        g.curve("minimax-m3", "nope")


def test_inferencex_bad_files(tmp_path):
    p = tmp_path / "x.yaml"
    for text, msg in [("m:\n  on:\n    1: 3.5\n", r"outside \[1, N \+ 1\]"), ("m:\n  on:\n    0: 1.0\n", ">= 1"),
                      ("m:\n  on:\n    1: 1.5\n    3: 2.0\n", "not 1..2"), ("_metadata: {}\n", "no model curves"),
                      ("[1, 2]\n", "mapping"), ("m: {on: {1: x}}\n", "finite number")]:
        p.write_text(text, encoding="utf-8")
        with pytest.raises(DataError, match=msg):
            read_golden_al(p)


# ---------------------------------------------------------------------------------------------
# (c) vllm bench sweep
# ---------------------------------------------------------------------------------------------
def test_bench_sweep_runs_counts_and_schedule():
    runs = read_bench_sweep(s("sweep"))
    files = sorted(glob.glob(s("sweep", "results", "*", "*", "run=*.json")))
    assert len(runs) == len(files) == 2
    serve = json.loads(_text(s("sweep", "serve_params.json")))
    sched = serve[0]["speculative_config"]["num_speculative_tokens_per_batch_size"]
    for r, f in zip(runs, files):
        raw = json.loads(_text(f))
        d = raw["spec_decode_num_drafts"]
        assert _key(r.spec_counts()) == (d, raw["spec_decode_draft_tokens"], raw["spec_decode_accepted_tokens"],
                                         tuple(round(x * d) for x in raw["spec_decode_per_position_acceptance_rates"]))
        assert r.scheduled and r.schedule == [tuple(e) for e in sched]
        assert r.max_concurrency == raw["max_concurrency"]
    by_c = {r.max_concurrency: r for r in runs}
    # schedule [[1,2,3],[3,4,2]]: concurrency 1 -> k = 3 only; concurrency 4 -> k in {3, 2}
    assert by_c[1].draft_lengths == (3,) and by_c[4].draft_lengths == (2, 3)
    c1 = by_c[1].acceptance_counts()  # every round proposed 3: draft tokens == 3 x drafts
    assert c1.num_draft_tokens == 3 * c1.num_drafts
    with pytest.raises(NotCollectedError, match="per-request-spec-decode-metrics detailed"):
        by_c[4].acceptance_counts()
    assert by_c[4].spec_counts().mal == pytest.approx(
        json.loads(_text(files[1]))["spec_decode_acceptance_length"], rel=1e-12)


def test_bench_sweep_summary_csv_and_consistency(tmp_path):
    csv_path = s("sweep", "results", "exp2", "summary.csv")
    with open(csv_path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    got = read_sweep_summary_csv(csv_path)
    assert [b.spec.num_drafts for b in got] == [int(r["spec_decode_num_drafts"]) for r in rows]
    assert [b.spec.accepted_per_pos for b in got] == [
        tuple(round(x * int(r["spec_decode_num_drafts"])) for x in json.loads(r["spec_decode_per_position_acceptance_rates"]))
        for r in rows]
    runs = read_sweep_summary_runs(csv_path)
    assert [r.max_concurrency for r in runs] == [int(r["max_concurrency"]) for r in rows]
    assert all(r.scheduled for r in runs)
    by_c = {r.max_concurrency: r for r in runs}
    assert by_c[1].acceptance_counts().num_drafts == by_c[1].spec_counts().num_drafts
    with pytest.raises(NotCollectedError, match="per-request"):
        by_c[4].acceptance_counts()
    # a summary.json that disagrees with its run file is refused
    dst = tmp_path / "sweep"
    shutil.copytree(s("sweep"), dst)
    summ = next(dst.rglob("summary.json"))
    data = json.loads(summ.read_text(encoding="utf-8"))
    data.append(data[0])
    summ.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DataError, match="lists 2 runs"):
        read_bench_sweep(dst)
    # a run whose config differs from serve_params.json is refused
    shutil.rmtree(dst)
    shutil.copytree(s("sweep"), dst)
    sp = json.loads((dst / "serve_params.json").read_text(encoding="utf-8"))
    sp[0]["speculative_config"]["num_speculative_tokens_per_batch_size"] = [[1, 4, 3]]
    (dst / "serve_params.json").write_text(json.dumps(sp), encoding="utf-8")
    with pytest.raises(DataError, match="differs from serve_params.json"):
        read_bench_sweep(dst)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no run=K.json"):
        read_bench_sweep(tmp_path / "empty")
    with pytest.raises(DataError, match="not a directory"):
        read_bench_sweep(tmp_path / "missing")


# ---------------------------------------------------------------------------------------------
# garbage into every new reader
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reader", [read_bench_results, read_bench_log, read_guidellm_report,
                                    read_response_spec_metrics, read_speculators_acceptance,
                                    read_speculators_eval_log, read_golden_al])
@pytest.mark.parametrize("content", [b"", bytes(range(256)) * 4, b"\xef\xbb\xbf{\"a\": [1, 2", b"\x00\x01garbage\n"])
def test_garbage_is_a_data_error(tmp_path, reader, content):
    p = tmp_path / "junk"
    p.write_bytes(content)
    with pytest.raises((DataError, NotCollectedError)):
        reader(p)


# ---- compressed and byte-order-marked files (a new-user trial) ----

def test_a_gzip_file_is_named_as_gzip_with_what_to_do(tmp_path):
    """`ingest x.json.gz` said "binary data (NUL bytes)": it now says gzip (magic 1f 8b) and to gunzip it."""
    import gzip

    from specsim.vllm.detect import read_counts

    f = tmp_path / "bench_a.json.gz"
    f.write_bytes(gzip.compress(open(os.path.join(S, "run", "bench_a.json"), "rb").read()))
    with pytest.raises(DataError, match=r"gzip-compressed \(it starts with the gzip magic bytes 1f 8b\).*gunzip "
                                        r"bench_a\.json\.gz") as e:
        read_counts(f)
    assert "NUL" not in str(e.value)


@pytest.mark.parametrize("rel", ["run/bench_a.json", "run/bench_appended.json", "gl/report.json",
                                 "run/response_detailed.json", "offline/offline_result.json", "spec_eval/acceptance.csv"])
def test_a_file_with_a_utf8_byte_order_mark_reads_as_without_it(tmp_path, rel):
    """A JSON file starting with a UTF-8 BOM (an editor's or a Windows tool's save) was "not valid JSON
    (truncated file?)": it now reads to the same counts, drafted share and recorded model as the file without."""
    import dataclasses

    from specsim.vllm.detect import measured_models, read_counts, read_drafting, run_temperature

    src = os.path.join(S, rel)
    f = tmp_path / os.path.basename(rel)
    f.write_bytes(b"\xef\xbb\xbf" + open(src, "rb").read())
    kind, counts = read_counts(src)
    kb, cb = read_counts(f)
    assert kb == kind and dataclasses.replace(cb, source=counts.source) == counts  # only the label differs
    d, dbom = read_drafting(src, kind, counts), read_drafting(f, kind, counts)
    assert (d is None) == (dbom is None) and (d is None or d["decode_steps"] == dbom["decode_steps"])
    assert measured_models(f, kind) == measured_models(src, kind)
    assert run_temperature(f, kind) == run_temperature(src, kind)


def test_a_sweep_and_a_summary_list_with_byte_order_marks_read_as_without(tmp_path):
    from specsim.vllm.detect import read_counts, read_drafting

    shutil.copytree(os.path.join(S, "sweep"), tmp_path / "sweep")
    for f in (tmp_path / "sweep").rglob("*.json"):
        f.write_bytes(b"\xef\xbb\xbf" + f.read_bytes())
    kind, c = read_counts(tmp_path / "sweep" / "results" / "exp2")
    assert kind == "sweep" and (c.num_drafts, c.num_accepted_tokens) == (38, 86)  # run=0.json of max_concurrency=1
    assert read_drafting(tmp_path / "sweep" / "results" / "exp2", kind, c)["decode_steps"] == 256 - 4 - 86
    # a vllm bench sweep summary.json-style list of results, BOM first
    lst = tmp_path / "summary.json"
    lst.write_bytes(b"\xef\xbb\xbf[" + open(os.path.join(S, "run", "bench_a.json"), "rb").read() + b"]")
    kind, c = read_counts(lst)
    assert kind == "bench" and (c.num_drafts, c.num_accepted_tokens) == (357, 672)
    assert read_drafting(lst, kind, c)["decode_steps"] == 1580 - 16 - 672

