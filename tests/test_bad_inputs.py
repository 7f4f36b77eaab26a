"""Rows of tests/data/samples/BAD-INPUTS.md that were not "clear", one test per row fixed: each now
gives a specsim error naming the field (exit code 2 in the CLI, no traceback) or, where the input is
valid but the number misleads, a WARNING in the summary and ``warnings`` in ``--json``."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.acceptance import Acceptance
from specsim.cli import main
from specsim.errors import DataError, SpecsimValueError
from specsim.predict import best_n, predict, sweep
from specsim.vllm.detect import read_counts

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"
BASE = ["predict", "--target", "Qwen3-8B", "--method", "eagle3", "--hardware", "MI300X"]


def run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def assert_exit_2_naming(argv, field, capsys):
    rc, out, err = run(argv, capsys)
    assert rc == 2, (out, err)
    assert err.startswith("specsim: error: ") and "Traceback" not in err
    assert field in err, err
    return err


# --- #4: -n 1000000, far beyond the context -------------------------------------------------
def test_row_4_n_beyond_the_context_refused(capsys):
    err = assert_exit_2_naming([*BASE, "-n", "1000000", "--acceptance", "0.8"], "-n/--num-speculative-tokens", capsys)
    assert "max_position_embeddings is 40960" in err and "1000000" in err and "allowed: 1..40960" in err


# --- #26-28: --cumulative that is not a list of numbers -------------------------------------------
@pytest.mark.parametrize("value, field", [("a,b", "--cumulative[0]"), ("", "--cumulative"),
                                          ("0.8,0.6,", "--cumulative[2]")])
def test_rows_26_28_cumulative_not_numbers(value, field, capsys):
    err = assert_exit_2_naming([*BASE, "-n", "3", "--cumulative", value], field, capsys)
    assert "comma-separated numbers in [0, 1]" in err


def test_rows_26_28_conditional_likewise(capsys):
    assert_exit_2_naming([*BASE, "-n", "3", "--conditional", "0.9,x"], "--conditional[1]", capsys)


# --- #81-82: ingest an empty file, random bytes ------------------------------------------------
def test_row_81_ingest_empty_file(tmp_path, capsys):
    f = tmp_path / "empty.log"
    f.write_bytes(b"")
    err = assert_exit_2_naming(["ingest", str(f)], "empty file", capsys)
    assert "not collected" not in err and "speculative decoding off" not in err
    assert "metrics (Prometheus" in err  # lists the formats read


def test_row_82_ingest_random_bytes(tmp_path, capsys):
    f = tmp_path / "x.prom"
    f.write_bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8).tobytes())
    err = assert_exit_2_naming(["ingest", str(f)], "binary data", capsys)
    assert "not collected" not in err and "no 'SpecDecoding metrics' lines" not in err


def test_ingest_text_of_no_known_format(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("hello world\nsecond line\n")
    err = assert_exit_2_naming(["ingest", str(f)], "not a format specsim reads", capsys)
    assert "first line 'hello world'" in err


# --- #93: a truncated bench JSON is truncated JSON, not "no log lines" ----------------------------
def test_row_93_truncated_bench_json(tmp_path, capsys):
    text = (SAMPLES / "run" / "bench_a.json").read_text()
    f = tmp_path / "bench.json"
    f.write_text(text[: len(text) // 2])
    err = assert_exit_2_naming(["ingest", str(f)], "not valid JSON (truncated", capsys)
    assert "not collected" not in err and "no 'SpecDecoding metrics' lines" not in err
    with pytest.raises(DataError, match="not valid JSON"):
        read_counts(f)


# --- #102: --before with a file that is not a Prometheus scrape ----------------------------------
def test_row_102_before_with_a_log_is_an_error(capsys):
    err = assert_exit_2_naming(["ingest", str(SAMPLES / "run" / "server_a.log"), "--before",
                                str(SAMPLES / "run" / "metrics_a_before.prom")], "before", capsys)
    assert "'log'" in err and "Prometheus" in err
    with pytest.raises(SpecsimValueError) as ei:
        read_counts(SAMPLES / "run" / "bench_a.json", before=SAMPLES / "run" / "metrics_a_before.prom")
    assert ei.value.field == "before"


def test_before_that_is_not_a_scrape_is_an_error():
    with pytest.raises(SpecsimValueError) as ei:
        read_counts(SAMPLES / "run" / "metrics_a_after.prom", before=SAMPLES / "run" / "server_a.log")
    assert ei.value.field == "before" and "'log'" in str(ei.value)


# --- #117: from_rates without kind reads vLLM's cumulative rates -----------------------------------
def test_row_117_from_rates_default_cumulative():
    rates = [0.739, 0.478, 0.261, 0.174, 0.130, 0.087, 0.043]  # README.md's 2026 log line, MAL 2.91
    assert Acceptance.from_rates(rates).mal(7) == pytest.approx(2.912)


# --- #122: zero acceptance predicts 0.342x with no flag ---------------------------------------------
def test_row_122_zero_acceptance_warns(capsys):
    p = predict("Qwen3-8B", "eagle3", 3, acceptance=Acceptance.from_counts(1000, [0, 0, 0], temperature=0.0))
    assert p.mal == pytest.approx(1.0) and p.throughput_ratio < 1
    assert any(w.startswith("acceptance is zero") for w in p.warnings)
    assert any(w.startswith("below break-even") and f"{p.throughput_ratio:.3f}x" in w for w in p.warnings)
    assert p.to_dict()["warnings"] == list(p.warnings)
    assert "WARNING             acceptance is zero" in p.summary()
    rc, out, _ = run([*BASE, "-n", "3", "--acceptance", "0", "--json"], capsys)
    assert rc == 0 and any("acceptance is zero" in w for w in json.loads(out)["warnings"])


# --- #123-124: sweep over an empty list ----------------------------------------------------------
@pytest.mark.parametrize("field, kw", [("num_speculative_tokens", {"num_speculative_tokens": []}),
                                       ("concurrency", {"concurrency": []})])
def test_rows_123_124_sweep_empty_axis(field, kw):
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", acceptance=0.7, **kw)
    assert ei.value.field == field and "must not be empty" in str(ei.value)


def test_rows_123_124_sweep_empty_axis_cli(capsys):
    argv = ["sweep", "--target", "Qwen3-8B", "--method", "eagle3", "--acceptance", "0.7", "-n", ","]
    err = assert_exit_2_naming(argv, "--n[0]", capsys)  # empty elements are refused by the list parser now
    assert "is empty" in err


# --- #140: temperature > 0 without a profile temperature: a WARNING, not only an assumption ------------
def test_row_140_temperature_without_profile_temperature_warns(capsys):
    rc, out, _ = run([*BASE, "-n", "3", "--acceptance", "0.8", "--temperature", "0.7"], capsys)
    assert rc == 0
    assert "WARNING             predicting at temperature 0.7 from acceptance of unknown temperature" in out
    rc, out, _ = run([*BASE, "-n", "3", "--acceptance", "0.8", "--temperature", "0.7", "--json"], capsys)
    d = json.loads(out)
    assert rc == 0 and any("unknown temperature" in w for w in d["warnings"])
    # measured at another temperature, transferred by an explicit assumption: still a warning
    p = predict("Qwen3-8B", "eagle3", 3, acceptance=Acceptance.constant(0.8, temperature=0.0), temperature=0.7,
                temperature_assumption="same prompts")
    assert any("measured at temperature 0" in w for w in p.warnings)
    # greedy from a greedy profile: no warning
    p0 = predict("Qwen3-8B", "eagle3", 3, acceptance=Acceptance.constant(0.8, temperature=0.0))
    assert p0.warnings == ()


def test_row_140_sweep_warns_on_stderr(capsys):
    argv = ["sweep", "--target", "Qwen3-8B", "--method", "eagle3", "--acceptance", "0.8", "-n", "2",
            "--concurrency", "1", "--temperature", "0.7"]
    rc, out, err = run(argv, capsys)
    assert rc == 0 and "num_speculative_tokens" in out
    assert "specsim: WARNING: predicting at temperature 0.7 from acceptance of unknown temperature" in err


# --- #103: a plain install (no prometheus_client) reading a .prom: the extra is named, no traceback -----
def test_row_103_missing_prometheus_client_names_the_extra(monkeypatch, capsys):
    import sys

    for mod in [m for m in sys.modules if m == "prometheus_client" or m.startswith("prometheus_client.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setitem(sys.modules, "prometheus_client.parser", None)
    err = assert_exit_2_naming(["ingest", str(SAMPLES / "run" / "metrics_a_after.prom")], "specsim[vllm]", capsys)
    assert "prometheus" in err


# --- #104: the real vllm bench serve console output is read, not "speculative decoding off" ------------
def test_row_104_bench_console_log_is_read(capsys):
    rc, out, err = run(["ingest", str(SAMPLES / "run" / "bench_a.log"), "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    bench = json.loads((SAMPLES / "run" / "bench_a.json").read_text())  # the same run's --save-result JSON
    assert d["kind"] == "bench-log" and d["num_drafts"] == bench["spec_decode_num_drafts"] == 357
    assert d["num_accepted_tokens"] == bench["spec_decode_accepted_tokens"]


# --- #76: "num_speculative_tokens": 100000 in the speculative config (was 0.007x, rc 0) ----------------
def test_row_76_config_n_beyond_the_context_refused(capsys):
    cfg = '{"method": "eagle3", "model": "RedHatAI/Qwen3-8B-speculator.eagle3", "num_speculative_tokens": 100000}'
    err = assert_exit_2_naming(["predict", "--target", "Qwen3-8B", "--speculative-config", cfg, "--acceptance", "0.8"],
                               "num_speculative_tokens", capsys)
    assert "max_position_embeddings is 40960" in err


def test_concurrency_whose_kv_cache_does_not_fit_warns_in_the_output(capsys):
    """BAD-INPUTS #8: --concurrency 10000000 still gives a number (vLLM queues, it does not refuse), but
    the KV-cache overflow is a WARNING line and in --json ``warnings``, not only an assumption."""
    from specsim.cli import main

    args = ["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--acceptance", "0.7",
            "--hardware", "MI300X", "--concurrency", "10000000"]
    assert main(args) == 0
    assert "WARNING" in capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("does not fit" in w for w in out["warnings"])


def test_target_path_that_does_not_exist_is_named_as_such(capsys):
    from specsim.cli import main

    assert main(["predict", "--target", "/nonexistent/dir/config.json", "--method", "eagle3", "-n", "3",
                 "--acceptance", "0.7"]) == 2
    err = capsys.readouterr().err
    assert "--target" in err and "no such file" in err


def test_synthetic_acceptance_needs_no_acceptance_flag(capsys):
    """rejection_sample_method "synthetic" (as InferenceX runs): the config's rates ARE the acceptance;
    MAL = 1 + 0.8 + 0.6 + 0.4 = 2.8."""
    from specsim.cli import main

    cfg = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
                      "synthetic_acceptance_rates": [0.8, 0.6, 0.4]})
    assert main(["predict", "--target", "Qwen3-8B", "--speculative-config", cfg, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mal"] == pytest.approx(2.8)


# --- a new user's break test (2026-12-03): bad inputs that raised bare Python errors or were accepted ---
@pytest.mark.parametrize("axis", ["acceptance", "target", "method", "hardware", "precision"])
def test_sweep_refuses_an_empty_categorical_axis_naming_it(axis):
    kw = {"target": "Qwen3-8B", "method": "eagle3", axis: {} if axis == "acceptance" else []}
    with pytest.raises(SpecsimValueError) as e:
        sweep(num_speculative_tokens=[3], **kw)
    assert e.value.field == axis and "must not be empty" in str(e.value)


@pytest.mark.parametrize("bad", ["hot", True, [0.5]])
def test_predict_refuses_a_temperature_that_is_not_a_number(bad):
    with pytest.raises(SpecsimValueError) as e:
        predict("Qwen3-8B", "eagle3", 3, acceptance=0.7, temperature=bad)
    assert e.value.field == "temperature"


@pytest.mark.parametrize("bad", [-1, -0.01, 1.5, float("nan"), "0.02", True])
def test_best_n_refuses_a_flat_tolerance_outside_0_1(bad):
    with pytest.raises(SpecsimValueError) as e:
        best_n("Qwen3-8B", "eagle3", n_values=[1, 2, 3], acceptance=0.7, flat_tolerance=bad)
    assert e.value.field == "flat_tolerance" and "[0, 1]" in str(e.value)


def _gpu(**over):
    from specsim.hardware import Hardware

    kw = dict(name="X", vendor="test", hbm_bytes=80e9, mem_bandwidth_bytes_per_s=3.35e12,
              peak_flops_per_s={"bf16": 989e12}, link_bandwidth_bytes_per_s=450e9, source="test")
    kw.update(over)
    return Hardware(**kw)


@pytest.mark.parametrize("over, field", [
    ({"mem_bandwidth_bytes_per_s": -1}, "mem_bandwidth_bytes_per_s"),
    ({"mem_bandwidth_bytes_per_s": 0}, "mem_bandwidth_bytes_per_s"),
    ({"mem_bandwidth_bytes_per_s": float("nan")}, "mem_bandwidth_bytes_per_s"),
    ({"link_bandwidth_bytes_per_s": 0}, "link_bandwidth_bytes_per_s"),
    ({"hbm_bytes": -5}, "hbm_bytes"),
    ({"peak_flops_per_s": {"bf16": -1}}, "peak_flops_per_s['bf16']"),
    ({"peak_flops_per_s": {"bf8": 1e15}}, "peak_flops_per_s"),
    ({"peak_flops_per_s": {}}, "peak_flops_per_s"),
    ({"kind": "tpu"}, "kind"),
    ({"name": ""}, "name"),
])
def test_a_gpu_given_by_its_specs_is_checked_like_a_datasheet_row(over, field):
    with pytest.raises(SpecsimValueError) as e:
        _gpu(**over)
    assert e.value.field == field


def test_every_shipped_hardware_row_passes_the_checks():
    import pandas as pd

    from specsim.catalog import data_path
    from specsim.hardware import load_hardware

    names = pd.read_csv(data_path("hardware.csv"))["name"]
    assert len(names) > 3 and all(load_hardware(n).mem_bandwidth_bytes_per_s > 0 for n in names)


def test_tensor_parallel_on_hardware_without_a_link_is_refused_naming_tp():
    hw = _gpu(link_bandwidth_bytes_per_s=None)
    assert predict("Llama-3.1-8B-Instruct", "eagle3", 3, hardware=hw, tp=1, acceptance=0.7).throughput_ratio > 0
    with pytest.raises(SpecsimValueError) as e:
        predict("Llama-3.1-8B-Instruct", "eagle3", 3, hardware=hw, tp=2, acceptance=0.7)
    assert e.value.field == "tp" and "link bandwidth" in str(e.value)


def test_predict_refuses_a_mean_proposal_above_n():
    ok = predict("Qwen3-8B", "ngram", 3, acceptance=0.6, mean_proposal_tokens=3.0)
    assert ok.throughput_ratio > 0
    with pytest.raises(SpecsimValueError) as e:
        predict("Qwen3-8B", "ngram", 3, acceptance=0.6, mean_proposal_tokens=10.0)
    assert e.value.field == "mean_proposal_tokens" and "<= N = 3" in str(e.value)


def test_a_mean_proposal_below_what_the_acceptance_accepts_is_refused():
    """A new-user trial: mean_proposal_tokens=1 with a profile accepting 1.85 tokens per drafted step at N = 3
    predicted accepted_per_proposed_token 1.85 (more tokens accepted than proposed) without a word."""
    acc = Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative")  # MAL 2.85 at N = 3: 1.85 accepted per drafted step
    edge = predict("Qwen3-8B", "ngram", 3, acceptance=acc, mean_proposal_tokens=1.85)
    assert edge.accepted_per_proposed_token == pytest.approx(1.0)
    for bad in (1.0, 1.84):
        with pytest.raises(SpecsimValueError) as e:
            predict("Qwen3-8B", "ngram", 3, acceptance=acc, mean_proposal_tokens=bad)
        assert e.value.field == "mean_proposal_tokens" and "1.85 tokens" in str(e.value) and "N = 3" in str(e.value)
    # sweep: every N of the grid (N = 2 accepts 1.4; N = 3 needs 1.85; N = 1 proposes at most 1 token, so 1.5 is
    # refused there as predict refuses it)
    df = sweep("Qwen3-8B", "ngram", [2], acceptance=acc, mean_proposal_tokens=1.5)
    assert (df["accepted_per_proposed_token"] <= 1.0).all()
    with pytest.raises(SpecsimValueError, match=r"mean_proposal_tokens: is below the 1\.85 tokens .* at N = 3"):
        sweep("Qwen3-8B", "ngram", [2, 3], acceptance=acc, mean_proposal_tokens=1.5)
    with pytest.raises(SpecsimValueError, match=r"mean_proposal_tokens: must be <= N = 1, the smallest proposal"):
        sweep("Qwen3-8B", "ngram", [1, 2], acceptance=acc, mean_proposal_tokens=1.5)


# --- best_n / sweep choosing N beyond the measured acceptance positions -------------------------------
MEASURED3 = Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative")


def test_sweep_warns_when_swept_n_beyond_measured_positions():
    with pytest.warns(UserWarning, match="acceptance extrapolated beyond the 3 measured position"):
        df = sweep("Qwen3-8B", "eagle3", [2, 3, 5, 8], hardware="MI300X", acceptance=MEASURED3)
    assert df.attrs["acceptance_extrapolated_n"] == (5, 8)
    assert any(w.startswith("acceptance extrapolated") and "N = 5, 8" in w for w in df.attrs["warnings"])


def test_sweep_within_measured_positions_has_no_extrapolation_warning(recwarn):
    df = sweep("Qwen3-8B", "eagle3", [1, 2, 3], hardware="MI300X", acceptance=MEASURED3)
    assert df.attrs["acceptance_extrapolated_n"] == () and df.attrs["warnings"] == ()
    assert not [w for w in recwarn if "extrapolated" in str(w.message)]


def test_best_n_warns_when_the_best_n_is_extrapolated():
    with pytest.warns(UserWarning) as rec:
        best, curve = best_n("Qwen3-8B", "eagle3", hardware="MI300X", acceptance=MEASURED3)
    assert best > 3 and bool(curve.loc[curve["num_speculative_tokens"] == best, "acceptance_extrapolated"].iloc[0])
    assert curve.attrs["best_n_extrapolated"] is True
    msg = f"best N = {best} lies beyond the measured acceptance positions"
    assert any(msg in str(w.message) for w in rec) and any(msg in w for w in curve.attrs["warnings"])
    # every warning names this line, the caller's (sweep's own named specsim/predict.py: a new-user trial)
    assert len(rec) >= 2 and {w.filename for w in rec} == {__file__}, [(w.filename, w.lineno) for w in rec]


def test_best_n_within_measured_positions_not_flagged():
    best, curve = best_n("Qwen3-8B", "eagle3", n_values=[1, 2, 3], hardware="MI300X", acceptance=MEASURED3)
    assert best <= 3 and curve.attrs["best_n_extrapolated"] is False


def test_a_list_of_rates_is_one_profile_in_predict_sweep_and_best_n_and_extrapolation_is_warned():
    """A new-user trial: ``acceptance=[0.8, 0.6, 0.45]`` was one profile of cumulative rates in
    predict (MAL 2.85) but three constant-rate profiles in sweep (three rows, all labelled None) and
    best_n (best N 6, from the constant 0.8, no extrapolation warning).  Now sweep and best_n read it
    as predict does, and predict also warns when N goes beyond the measured positions (sweep and
    best_n did; predict only set acceptance_extrapolated)."""
    rates = [0.8, 0.6, 0.45]
    kw = dict(hardware="MI300X", concurrency=8)
    p = predict("Qwen3-8B", "eagle3", 3, acceptance=rates, **kw)
    df = sweep("Qwen3-8B", "eagle3", [3], acceptance=rates, **kw)
    assert len(df) == 1 and df["mal"].iloc[0] == pytest.approx(p.mal) == pytest.approx(1 + sum(rates))
    assert df["throughput_ratio"].iloc[0] == pytest.approx(p.throughput_ratio, rel=1e-12)
    with pytest.warns(UserWarning, match="beyond the measured acceptance positions"):
        best, curve = best_n("Qwen3-8B", "eagle3", acceptance=rates, **kw)
    with pytest.warns(UserWarning):
        ref, ref_curve = best_n("Qwen3-8B", "eagle3", acceptance=MEASURED3, **kw)
    assert best == ref and len(curve) == len(ref_curve) == 15
    # several profiles are still a list of Acceptance or a dict
    two = sweep("Qwen3-8B", "eagle3", [3], acceptance=[MEASURED3, Acceptance.from_rates([0.7, 0.5, 0.3])], **kw)
    assert len(two) == 2
    assert not p.acceptance_extrapolated and not any("extrapolated" in w for w in p.warnings)
    # a Python warning too, naming the caller's line, as sweep's (README: "predict and sweep warn"; a
    # new-user trial: predict put it in .warnings only)
    said = r"acceptance extrapolated beyond the 3 measured position\(s\) for N = 5"
    with pytest.warns(UserWarning, match=said) as rec:
        far = predict("Qwen3-8B", "eagle3", 5, acceptance=rates, **kw)
    assert [w.filename for w in rec if "extrapolated" in str(w.message)] == [__file__]
    assert far.acceptance_extrapolated and any(w.startswith("acceptance extrapolated beyond the 3 measured")
                                               and "N = 5" in w for w in far.warnings), far.warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # within the measured positions: no warning
        predict("Qwen3-8B", "eagle3", 3, acceptance=rates, **kw)


def test_cli_predict_prints_the_extrapolation_warning_once(capsys):
    rc, out, err = run(["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "5",
                        "--cumulative", "0.8,0.6,0.45"], capsys)
    said = (out + err).count("acceptance extrapolated beyond the 3 measured position(s)")
    assert rc == 0 and said == 1 and "UserWarning" not in err, (out, err)


def test_cli_sweep_prints_the_extrapolation_warning_once(capsys):
    rc, out, err = run(["sweep", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "2,5",
                        "--cumulative", "0.8,0.6,0.45"], capsys)
    assert rc == 0 and err.count("acceptance extrapolated beyond the 3 measured position(s)") == 1
    # and the table marks the rows it concerns (a new-user trial: only the warning above it said which)
    head, *rows = out.strip().splitlines()
    assert head.split()[-1] == "acceptance_extrapolated"
    assert {r.split()[1]: r.split()[-1] for r in rows} == {"2": "False", "5": "True"}
    rc, out, _ = run(["sweep", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "2,3",
                      "--cumulative", "0.8,0.6,0.45"], capsys)
    assert rc == 0 and "acceptance_extrapolated" not in out and "kv_cache_fits" not in out  # nothing to flag


# --- concurrency >= 2**63 (numpy int64 overflow) ---------------------------------------------------
@pytest.mark.parametrize("c", [2**63, 2**64, 10**30])
def test_predict_concurrency_beyond_int64_refused(c):
    """Before: predict returned a number (2**63 wrapped around); sweep blamed 'batch' or said 'must be integers'."""
    with pytest.raises(SpecsimValueError) as ei:
        predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", acceptance=0.7, concurrency=c)
    assert ei.value.field == "concurrency" and "2**63 - 1" in str(ei.value)


@pytest.mark.parametrize("c", [2**63, 2**64])
def test_sweep_concurrency_beyond_int64_refused(c):
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", [3], hardware="MI300X", acceptance=0.7, concurrency=[1, c])
    assert ei.value.field == "concurrency" and "2**63 - 1" in str(ei.value)


def test_cli_concurrency_beyond_int64_refused(capsys):
    assert_exit_2_naming([*BASE, "-n", "3", "--acceptance", "0.7", "--concurrency", str(2**63)], "concurrency: ", capsys)


# --- fp32 target on hardware whose only matrix dtype is fp32 -------------------------------------------
def test_a_separate_draft_runs_at_the_targets_dtype_and_a_set_bf16_draft_is_blamed_by_name():
    """vLLM builds a separate draft's ModelConfig with the target's dtype (vllm/config/speculative.py:
    ``dtype=self.target_model_config.dtype``).  specsim ran every separate draft at bf16, so an fp32
    target on a CPU without bf16 was refused (EAGLE-3 and draft_model alike); the draft now runs
    fp32 there (its checkpoint's bf16 cast), bf16 still behind a quantized target, and a quantized draft
    the hardware cannot run is blamed by name."""
    from specsim.drafters import get_drafter

    p = predict("Qwen3-8B", "eagle3", 3, hardware="cpu-2core-avx2", acceptance=0.7, precision="fp32")
    fp32 = get_drafter("eagle3", target="Qwen3-8B").with_params(precision="fp32")
    q = predict("Qwen3-8B", "eagle3", 3, hardware="cpu-2core-avx2", acceptance=0.7, precision="fp32", drafter=fp32)
    assert p.t_draft_s == q.t_draft_s > 0
    own = predict("SmolLM2-135M-Instruct", "draft_model", 3, draft="SmolLM2-135M-Instruct",
                  hardware="cpu-2core-avx2", acceptance=0.7, precision="fp32")
    assert own.t_draft_s > 0
    assert get_drafter("eagle3", target="Qwen3-8B").draft_precision("fp8") == "bf16"
    assert get_drafter("eagle3", target="Qwen3-8B").draft_precision("fp16") == "fp16"
    # a draft stored in fp32 is cast too: to the quantized target's bf16 activations (a review)
    stored32 = get_drafter("eagle3", target="Qwen3-8B").with_params(precision="fp32")
    assert [stored32.draft_precision(t) for t in ("fp8", "mxfp4", None, "fp16")] == ["bf16", "bf16", "bf16", "fp16"]
    assert get_drafter("eagle3", target="Qwen3-8B").precision == "bf16"  # the checkpoint's stored dtype
    # a quantized draft checkpoint runs as stored: on a CPU without fp8 it is blamed by name
    fp8 = get_drafter("eagle3", target="Qwen3-8B").with_params(precision="fp8")
    assert fp8.draft_precision("fp32") == "fp8"
    with pytest.raises(SpecsimValueError) as ei:
        predict("Qwen3-8B", "eagle3", 3, hardware="cpu-2core-avx2", acceptance=0.7, precision="fp32", drafter=fp8)
    e = ei.value
    assert e.field == "drafter.precision" and e.value == "fp8" and "precision='fp32'" in str(e)
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", [3], hardware="cpu-2core-avx2", acceptance=0.7, precision="fp32", drafter=fp8)
    assert ei.value.field == "drafter.precision"
    with pytest.raises(SpecsimValueError) as ei:  # a bf16 target there is still the target's precision
        predict("Qwen3-8B", "eagle3", 3, hardware="cpu-2core-avx2", acceptance=0.7)
    assert ei.value.field == "precision"


# --- specsim sweep -n / --concurrency with an empty element; numpy reprs in messages -------------------
@pytest.mark.parametrize("flag, value, field", [("-n", "3,,4", "--n[1]"), ("-n", "3,4,", "--n[2]"),
                                                ("--concurrency", "1,,8", "--concurrency[1]")])
def test_cli_sweep_empty_list_element_refused(flag, value, field, capsys):
    argv = ["sweep", "--target", "Qwen3-8B", "--method", "eagle3", "--acceptance", "0.7", flag, value]
    if flag != "-n":
        argv += ["-n", "3"]
    err = assert_exit_2_naming(argv, field, capsys)
    assert "is empty" in err


def test_messages_show_plain_numbers_not_numpy_reprs(capsys):
    err = assert_exit_2_naming(["sweep", "--target", "Qwen3-8B", "-n", "2,3", "--acceptance", "0.7",
                                "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3, '
                                '"model": "x"}'], "num_speculative_tokens", capsys)
    assert "np.int64" not in err and "[2, 3]" in err
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", [3], acceptance=0.7, isl=[np.float64(0.5)])
    assert "np.float64" not in str(ei.value) and "array(" not in str(ei.value) and "[0.5]" in str(ei.value)


def test_small_error_messages_name_the_value_and_the_fix():
    """A new-user trial: a NaN in a latency table read "must be finite and > 0 (got [])" (the NaN
    left out), ``baseline="600"`` raised a bare FileNotFoundError, and conditional rates passed as
    cumulative gave no hint of ``kind="conditional"``."""
    from specsim.latency import MeasuredLatency

    with pytest.raises(SpecsimValueError) as e:
        MeasuredLatency(pd.DataFrame(dict(batch=[1, 2], q=[1, 1], context=[5, 5], seconds=[np.nan, 0.1])))
    assert e.value.field == "table.seconds" and np.isnan(e.value.value[0]) and "1 row(s)" in str(e.value)
    with pytest.raises(SpecsimValueError) as e:
        predict("Qwen3-8B", "eagle3", 3, hardware="H100", acceptance=0.7, baseline="600")
    assert e.value.field == "baseline" and "tpot_s" in str(e.value) and "output_tok_per_s" in str(e.value)
    with pytest.raises(SpecsimValueError) as e:
        Acceptance.from_rates([0.8, 0.9, 0.7])
    assert e.value.field == "rates[1]" and "kind='conditional'" in str(e.value)
    assert Acceptance.from_rates([0.8, 0.9, 0.7], kind="conditional").mal(3) == pytest.approx(
        1 + 0.8 + 0.72 + 0.504)


def test_partial_drafting_for_a_method_that_always_drafts_is_warned_about():
    """A new-user trial: ``--drafted-fraction 0.4`` with eagle3 changed the ratio silently, though the
    help says it is for n-gram / suffix lookups (eagle3 drafts N tokens on every step)."""
    kw = dict(acceptance=0.7, concurrency=4)
    e = predict("Qwen3-8B", "eagle3", 3, drafted_fraction=0.4, **kw)
    assert any(w.startswith("drafted_fraction=0.4 given for eagle3") for w in e.warnings), e.warnings
    df = sweep("Qwen3-8B", "eagle3", [3], mean_proposal_tokens=2.0, concurrency=[4], acceptance=0.7)
    assert any(w.startswith("mean_proposal_tokens=2 given for eagle3") for w in df.attrs["warnings"])
    for ok in (predict("Qwen3-8B", "ngram", 3, drafted_fraction=0.4, **kw), predict("Qwen3-8B", "eagle3", 3, **kw)):
        assert not any("given for" in w for w in ok.warnings)


# --- sweep / best_n axis values under predict's integer rules ----------------------------------------
@pytest.mark.parametrize("kw, field, element", [
    (dict(num_speculative_tokens=[True, 2.0]), "num_speculative_tokens", "element 0 is True"),
    (dict(num_speculative_tokens=[1, 2.0]), "num_speculative_tokens", "element 1 is 2.0"),
    (dict(concurrency=np.array([1.0, 2.0])), "concurrency", "element 0 is 1.0"),
    (dict(concurrency=32.0), "concurrency", "element 0 is 32.0"),
    (dict(isl=[np.float64(1024.0)]), "isl", "element 0 is 1024.0"),
    (dict(osl=np.array([True, False])), "osl", "element 0 is True"),
])
def test_sweep_refuses_bool_and_float_axis_values_as_predict_does(kw, field, element):
    """A new-user trial: predict refuses N 7.0, True and concurrency 32.0, but sweep ran N [True, 2.0] as
    [1, 2] and concurrency np.array([1.0, 2.0]) as [1, 2] without a word."""
    kw = {"num_speculative_tokens": [3], **kw}
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Qwen3-8B", "eagle3", hardware="MI300X", acceptance=0.7, **kw)
    assert ei.value.field == field
    assert f"must be integers >= 1 (a bool, or a float even when integral such as 2.0, is refused): {element}" in str(
        ei.value)
    assert "np.float64" not in str(ei.value)


def test_best_n_refuses_bool_and_float_n_values_and_axis_values():
    """best_n ran int(k) over n_values: N 2 for 2.5, N 1 for True."""
    for kw, field, element in ((dict(n_values=[1, 2.5]), "n_values", "element 1 is 2.5"),
                               (dict(n_values=[True, 2]), "n_values", "element 0 is True"),
                               (dict(concurrency=8.0), "concurrency", "element 0 is 8.0")):
        with pytest.raises(SpecsimValueError) as ei:
            best_n("Qwen3-8B", "eagle3", hardware="MI300X", acceptance=0.7, **kw)
        assert ei.value.field == field and element in str(ei.value), str(ei.value)
    with pytest.raises(SpecsimValueError) as ei:
        best_n("Qwen3-8B", "eagle3", hardware="MI300X", acceptance=0.7, n_values=[])
    assert ei.value.field == "n_values" and "must not be empty" in str(ei.value)


def test_sweep_and_best_n_take_numpy_integers_as_python_ints():
    kw = dict(hardware="MI300X", acceptance=0.7)
    ref = sweep("Qwen3-8B", "eagle3", [1, 3], concurrency=[1, 8], isl=1024, osl=[512], **kw)
    for ns, cs, isl, osl in ((np.array([1, 3], dtype=np.int32), np.array([1, 8], dtype=np.uint16), np.int64(1024),
                              np.array([512])),
                             (range(1, 4, 2), (np.int64(1), 8), [1024], 512)):
        df = sweep("Qwen3-8B", "eagle3", ns, concurrency=cs, isl=isl, osl=osl, **kw)
        pd.testing.assert_frame_equal(df, ref)
    assert ref["num_speculative_tokens"].tolist() == [1, 1, 3, 3] and ref["concurrency"].tolist() == [1, 8, 1, 8]
    assert ref["num_speculative_tokens"].dtype == np.int64
    best, curve = best_n("Qwen3-8B", "eagle3", n_values=[3, 1, 2, 2], concurrency=8, **kw)
    best_np, curve_np = best_n("Qwen3-8B", "eagle3", n_values=np.arange(1, 4), concurrency=np.int64(8), **kw)
    assert best == best_np and curve["num_speculative_tokens"].tolist() == [1, 2, 3]
    pd.testing.assert_frame_equal(curve, curve_np)


def test_sweep_tells_the_drafts_swept_apart():
    """A new-user trial: sweep(draft=[a, b]) gave rows without a draft column, so the two drafters' rows
    could not be told apart (best_n refuses several drafts)."""
    import dataclasses

    from specsim.architecture import load_model

    big = load_model("Llama-3.1-8B-Instruct")
    small = dataclasses.replace(big, name="Llama-3.1-8B-Instruct-half", num_layers=big.num_layers // 2,
                                total_params=big.total_params // 2, active_params=big.active_params // 2,
                                attention_params=big.attention_params // 2, dense_mlp_params=big.dense_mlp_params // 2)
    kw = dict(hardware="MI300X", tp=2, acceptance=0.7, concurrency=[1, 8])
    df = sweep("Llama-3.3-70B-Instruct", "draft_model", [3], draft=[big, small], **kw)
    assert df["draft"].tolist() == ["Llama-3.1-8B-Instruct"] * 2 + ["Llama-3.1-8B-Instruct-half"] * 2
    t = df.set_index(["draft", "concurrency"])["t_draft_s"]
    assert t[("Llama-3.1-8B-Instruct-half", 1)] < t[("Llama-3.1-8B-Instruct", 1)]
    # two drafts of one label (two checkpoint directories both named draft, two specs of one name): refused
    with pytest.raises(SpecsimValueError) as ei:
        sweep("Llama-3.3-70B-Instruct", "draft_model", [3], draft=[big, dataclasses.replace(small, name=big.name)], **kw)
    assert ei.value.field == "draft" and "share a label" in str(ei.value) and "Llama-3.1-8B-Instruct" in str(ei.value)
    named = sweep("Llama-3.3-70B-Instruct", "draft_model", [3], draft=["Llama-3.1-8B-Instruct", small], **kw)
    assert named["draft"].tolist() == ["Llama-3.1-8B-Instruct"] * 2 + ["Llama-3.1-8B-Instruct-half"] * 2
    one = sweep("Llama-3.3-70B-Instruct", "draft_model", [3], draft=big, **kw)
    assert "draft" not in one.columns
    assert one["throughput_ratio"].tolist() == df.loc[df["draft"] == "Llama-3.1-8B-Instruct", "throughput_ratio"].tolist()


# --- a repeated value on a sweep grid axis: duplicate rows (new-user trial: -n 3,3 --concurrency 4,4) -------------
_REPEAT = "every value of a grid axis gives its own rows, so a repeat would give duplicate rows; give each value once"


@pytest.mark.parametrize("kw, field, said, value", [
    ({"num_speculative_tokens": [3, 3]}, "num_speculative_tokens", "lists 3 twice", 3),
    ({"num_speculative_tokens": np.array([1, 5, 1, 5, 5])}, "num_speculative_tokens", "lists 1 twice, 5 3 times",
     [1, 5]),
    ({"concurrency": [4, 8, 4]}, "concurrency", "lists 4 twice", 4),
    ({"isl": [1024, 1024]}, "isl", "lists 1024 twice", 1024),
    ({"osl": (256, 256)}, "osl", "lists 256 twice", 256),
    ({"hardware": ["MI300X", "MI300X"]}, "hardware", "lists 'MI300X' twice", "MI300X"),
    ({"hardware": ["H100", "MI300X", "H100 SXM"]}, "hardware", "lists 'H100' and 'H100 SXM', the same hardware "
     "(H100 SXM)", ["H100", "H100 SXM"]),
    ({"target": ["Qwen3-8B", "Qwen/Qwen3-8B"]}, "target", "lists 'Qwen3-8B' and 'Qwen/Qwen3-8B', the same target "
     "(Qwen3-8B)", ["Qwen3-8B", "Qwen/Qwen3-8B"]),
    ({"method": ["eagle3", "eagle3"]}, "method", "lists 'eagle3' twice", "eagle3"),
    ({"tp": [1, 1]}, "tp", "lists 1 twice", 1),
    ({"precision": [None, "bf16"]}, "precision", "lists None and 'bf16', the same precision (bf16) for target "
     "Qwen3-8B", [None, "bf16"]),
])
def test_sweep_refuses_a_repeated_grid_value_naming_the_axis_and_the_value(kw, field, said, value):
    """A new-user trial: -n 3,3 --concurrency 4,4 gave each row twice without a word.  Every grid axis now refuses
    a value it lists twice, also one that resolves to a value already listed (an alias, the default precision)."""
    args = {"target": "Qwen3-8B", "method": "eagle3", "num_speculative_tokens": [3], "concurrency": [4], **kw}
    with pytest.raises(SpecsimValueError) as e:
        sweep(acceptance=0.7, **args)
    assert e.value.field == field and e.value.value == value
    assert str(e.value).startswith(f"{field}: {said}: {_REPEAT} (got ")


def test_sweep_of_distinct_grid_values_gives_each_row_once():
    ok = sweep("Qwen3-8B", ["eagle3", "dflash"], [1, 3], hardware=["MI300X", "H100"], precision=[None, "fp8"],
               concurrency=[4, 8], acceptance=0.7)
    assert len(ok) == 2 * 2 * 2 * 2 * 2 and not ok.duplicated(["method", "hardware", "precision",
                                                               "num_speculative_tokens", "concurrency"]).any()


@pytest.mark.parametrize("flags, field, said", [
    (["-n", "3,3", "--concurrency", "4"], "--n", "lists 3 twice"),
    (["-n", "3", "--concurrency", "4,4"], "--concurrency", "lists 4 twice"),
    (["-n", "3", "--concurrency", "4", "--hardware", "MI300X,H100,MI300X"], "--hardware", "lists 'MI300X' twice"),
    (["-n", "3", "--concurrency", "4", "--hardware", "H100,H100 SXM"], "--hardware",
     "lists 'H100' and 'H100 SXM', the same hardware (H100 SXM)"),
])
def test_cli_sweep_refuses_a_repeated_grid_value_naming_the_flag(flags, field, said, capsys):
    argv = ["sweep", "--target", "Qwen3-8B", "--method", "eagle3", "--acceptance", "0.7", *flags]
    err = assert_exit_2_naming(argv, field, capsys)
    assert err.startswith(f"specsim: error: {field}: {said}: {_REPEAT} (got "), err


def test_best_n_names_n_values_for_a_mean_proposal_above_its_smallest_n():
    """The review: best_n(mean_proposal_tokens=2) over its default n_values was refused in sweep's words
    ("the smallest proposal length swept (num_speculative_tokens 1, 2, ...)"), naming the one keyword best_n
    itself refuses; it names n_values now."""
    acc = Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative")
    with pytest.raises(SpecsimValueError) as ei:
        best_n("Qwen3-8B", "ngram", acceptance=acc, mean_proposal_tokens=2)
    assert ei.value.field == "mean_proposal_tokens" and ei.value.value == 2
    assert "must be <= every N of n_values, the smallest being 1" in str(ei.value)
    assert "give n_values >= 2" in str(ei.value) and "num_speculative_tokens" not in str(ei.value)
    n, curve = best_n("Qwen3-8B", "ngram", n_values=range(2, 4), acceptance=acc, mean_proposal_tokens=2)
    assert curve["num_speculative_tokens"].tolist() == [2, 3] and n in (2, 3)


@pytest.mark.parametrize("kw,field", [({"mean_proposal_tokens": "2"}, "mean_proposal_tokens"),
                                      ({"drafted_fraction": "0.5"}, "drafted_fraction"),
                                      ({"mean_proposal_tokens": True}, "mean_proposal_tokens")])
def test_partial_drafting_inputs_that_are_not_numbers_are_refused_by_name(kw, field):
    """The review: a string mean_proposal_tokens raised numpy's TypeError ("ufunc 'isfinite' not supported")
    from predict, sweep and best_n."""
    acc = Acceptance.from_rates([0.8, 0.6, 0.45], "cumulative")
    for call in (lambda: predict("Qwen3-8B", "ngram", 3, acceptance=acc, **kw),
                 lambda: sweep("Qwen3-8B", "ngram", [3], acceptance=acc, **kw),
                 lambda: best_n("Qwen3-8B", "ngram", n_values=[3], acceptance=acc, **kw)):
        with pytest.raises(SpecsimValueError) as ei:
            call()
        assert ei.value.field == field and "must be a number" in str(ei.value)


def test_a_break_even_above_n_plus_one_is_said_to_be_out_of_reach():
    """A new-user trial: at concurrency 512 on MI300X, N = 1 was 'below break-even (MAL 1.800 < break-even MAL
    7.716)' as if better acceptance could reach it; a step commits at most N + 1 tokens (MAL counts the bonus
    token), so none can, and the warning now says so, only where it is so."""
    far = predict("Llama-3.1-8B-Instruct", "eagle3", 1, hardware="MI300X", concurrency=512, acceptance=0.8)
    assert far.throughput_ratio < 1 and far.break_even_mal > 1 + 1
    [w] = [w for w in far.warnings if w.startswith("below break-even")]
    assert w.endswith("no acceptance reaches that break-even at N = 1: a step commits at most N + 1 = 2 tokens, so "
                      "the modelled cost of speculating exceeds anything it can save here"), w
    near = predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", concurrency=64, acceptance=0.7)
    assert near.throughput_ratio < 1 and near.mal < near.break_even_mal <= 3 + 1
    [w] = [w for w in near.warnings if w.startswith("below break-even")]
    assert "no acceptance reaches" not in w, w


def test_a_schedule_k_above_num_speculative_tokens_is_warned_of():
    """A new-user trial: a num_speculative_tokens_per_batch_size entry k = 5 with num_speculative_tokens 3 was
    modelled as N = 3 (vLLM 0.32 clamps it silently), and only an assumption named the N used."""
    cfg = {"method": "eagle3", "model": "RedHatAI/Qwen3-8B-speculator.eagle3", "num_speculative_tokens": 3,
           "num_speculative_tokens_per_batch_size": [[1, 8, 5], [9, 64, 2]]}
    p = predict("Qwen3-8B", speculative_config=cfg, acceptance=0.7, concurrency=4)
    assert p.num_speculative_tokens == 3 and p.configured_num_speculative_tokens == 3
    said = [w for w in p.warnings if w.startswith("the schedule asks for k=5 at batch size 4, above "
                                                  "num_speculative_tokens 3: vLLM 0.32 drafts 3 there")]
    assert len(said) == 1, p.warnings
    q = predict("Qwen3-8B", speculative_config=cfg, acceptance=0.7, concurrency=16)  # k = 2 <= 3
    assert q.num_speculative_tokens == 2 and not any("the schedule asks" in w for w in q.warnings)
