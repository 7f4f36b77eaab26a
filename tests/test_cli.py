"""Tests of the ``specsim`` command line (specsim.cli): predict, sweep, error exits."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from specsim.acceptance import Acceptance
from specsim.cli import main
from specsim.predict import predict

ROOT = Path(__file__).resolve().parents[1]
BASE = ["--target", "Qwen3-8B", "--method", "eagle3", "--hardware", "MI300X", "--isl", "512", "--osl", "256"]


def run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_module_entry_point_prints_readable_summary():
    """``python -m specsim predict ...`` in a fresh interpreter (the console-script path)."""
    cmd = [sys.executable, "-m", "specsim", "predict", *BASE, "-n", "3", "--concurrency", "8",
           "--acceptance", "0.7", "--profile-temperature", "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    p = predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", concurrency=8, isl=512, osl=256,
                acceptance=Acceptance.constant(0.7, temperature=0.0))
    out = res.stdout
    assert "Qwen3-8B" in out and "eagle3" in out and "N=3" in out
    assert f"throughput ratio    {p.throughput_ratio:6.3f}x" in out
    assert f"{p.mal:6.3f} tokens/step" in out
    assert "draft" in out and "verification" in out and "overhead" in out


def test_predict_json(capsys):
    rc, out, _ = run(["predict", *BASE, "-n", "4", "--concurrency", "16", "--cumulative", "0.8,0.6,0.45,0.3",
                      "--profile-temperature", "0", "--json"], capsys)
    assert rc == 0
    d = json.loads(out)
    p = predict("Qwen3-8B", "eagle3", 4, hardware="MI300X", concurrency=16, isl=512, osl=256,
                acceptance=Acceptance.from_rates([0.8, 0.6, 0.45, 0.3], kind="cumulative", temperature=0.0))
    assert d["throughput_ratio"] == pytest.approx(p.throughput_ratio, rel=1e-12)
    assert d["mal"] == pytest.approx(1 + 0.8 + 0.6 + 0.45 + 0.3, rel=1e-12)
    for k in ("t_draft_s", "t_verify_s", "t_overhead_s", "t_step_s", "t_base_s", "t_prefill_s"):
        assert k in d
    assert d["t_step_s"] == pytest.approx(d["t_draft_s"] + d["t_verify_s"] + d["t_overhead_s"], rel=1e-12)
    assert d["num_speculative_tokens"] == 4 and d["concurrency"] == 16


def test_predict_speculative_config_and_mal_at_n(capsys):
    cfg = '{"method": "eagle3", "model": "RedHatAI/gemma-4-26B-A4B-it-speculator.eagle3", "num_speculative_tokens": 3}'
    rc, out, _ = run(["predict", "--target", "gemma-4-26B-A4B-it", "--speculative-config", cfg, "--mal", "2.8@3",
                      "--profile-temperature", "0", "--json"], capsys)
    assert rc == 0
    d = json.loads(out)
    assert d["method"] == "eagle3" and d["num_speculative_tokens"] == 3
    assert d["mal"] == pytest.approx(2.8, rel=1e-9)  # MAL measured at the predicted N is reproduced


@pytest.mark.parametrize("extra,field", [
    (["-n", "3", "--concurrency", "0", "--acceptance", "0.7"], "concurrency"),
    (["-n", "0", "--acceptance", "0.7"], "num_speculative_tokens"),
    (["-n", "3", "--acceptance", "1.5"], "alpha"),
    (["-n", "3", "--acceptance", "0.7", "--hardware", "TPU-v9"], "hardware"),
    (["-n", "3", "--acceptance", "0.7", "--profile-temperature", "0", "--temperature", "0.8"], "temperature"),
])
def test_predict_errors_exit_2_naming_the_field(capsys, extra, field):
    rc, out, err = run(["predict", *BASE, *extra], capsys)
    assert rc == 2
    assert out == ""
    assert err.startswith("specsim: error: " + field + ":"), err


def test_unknown_method_error_lists_allowed(capsys):
    argv = ["predict", "--target", "Qwen3-8B", "--method", "eagle9", "-n", "3", "--acceptance", "0.7"]
    rc, _, err = run(argv, capsys)
    assert rc == 2 and "method:" in err and "eagle3" in err and "dflash" in err


def test_bad_speculative_config_key_exit_2(capsys):
    cfg = '{"method": "eagle3", "model": "RedHatAI/Qwen3-8B-speculator.eagle3", "num_speculative_tokens": 3, "foo": 1}'
    rc, _, err = run(["predict", "--target", "Qwen3-8B", "--speculative-config", cfg, "--acceptance", "0.7"], capsys)
    assert rc == 2 and "foo" in err and "num_speculative_tokens" in err


def test_argparse_type_error_exits_2(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["predict", *BASE, "-n", "three", "--acceptance", "0.7"])
    assert ei.value.code == 2
    assert "num-speculative-tokens" in capsys.readouterr().err


def test_missing_acceptance_exits_2_naming_the_options(capsys):
    rc, _, err = run(["predict", *BASE, "-n", "3"], capsys)
    assert rc == 2
    assert "acceptance" in err and "--acceptance" in err and "--mal" in err


def test_mal_without_n_exits_2(capsys):
    rc, _, err = run(["predict", *BASE, "-n", "3", "--mal", "3.2"], capsys)
    assert rc == 2 and "--mal" in err and "MAL@N" in err


def test_sweep_out_csv(tmp_path, capsys):
    out = tmp_path / "sweep.csv"
    rc, stdout, _ = run(["sweep", *BASE, "--n", "1,2,5", "--concurrency", "1,32", "--hardware", "MI300X,H100",
                         "--acceptance", "0.75", "--profile-temperature", "0", "--out", str(out)], capsys)
    assert rc == 0
    df = pd.read_csv(out)
    assert len(df) == 3 * 2 * 2
    assert f"wrote {len(df)} rows" in stdout
    assert {"target", "method", "hardware", "num_speculative_tokens", "concurrency", "isl", "osl", "mal",
            "throughput_ratio", "t_step_s", "tpot_s"} <= set(df.columns)
    row = df[(df.hardware == "MI300X") & (df.num_speculative_tokens == 5) & (df.concurrency == 32)].iloc[0]
    p = predict("Qwen3-8B", "eagle3", 5, hardware="MI300X", concurrency=32, isl=512, osl=256,
                acceptance=Acceptance.constant(0.75, temperature=0.0))
    assert row["throughput_ratio"] == pytest.approx(p.throughput_ratio, rel=1e-9)


def test_sweep_table_to_stdout(capsys):
    rc, stdout, _ = run(["sweep", *BASE, "--n", "1,3", "--concurrency", "4", "--acceptance", "0.6",
                         "--profile-temperature", "0"], capsys)
    assert rc == 0
    lines = stdout.strip().splitlines()
    assert "throughput_ratio" in lines[0] and "mal" in lines[0]
    assert len(lines) == 1 + 2


# --------------------------------------------------------------------------------------------
# ingest (real vLLM samples recorded on this machine, tests/data/vllm_samples/README.md)

SAMPLES = __import__("pathlib").Path(__file__).parent / "data" / "vllm_samples"


def test_ingest_metrics_diff_gives_published_counts(capsys):
    """NOTES.md: the ngram N=3 bench at concurrency 4 measured MAL 2.87, per-position .736 .612 .521."""
    rc, out, _ = run(["ingest", str(SAMPLES / "metrics_ngram.txt"), "--before", str(SAMPLES / "metrics_ngram_before.txt"),
                      "--json"], capsys)
    assert rc == 0
    d = json.loads(out.splitlines()[0])
    assert d["kind"] == "metrics" and d["num_drafts"] == 330 and d["num_accepted_tokens"] == 617
    assert d["mal"] == pytest.approx(2.87, abs=0.005)


def test_ingest_bench_json_and_not_collected(capsys):
    rc, out, _ = run(["ingest", str(SAMPLES / "bench_ngram.json"), str(SAMPLES / "metrics_base.txt")], capsys)
    assert rc == 1  # the baseline scrape has no spec counters: reported, not zero
    assert "bench_ngram.json (bench): MAL 2.870" in out
    assert "not collected" in out


def test_ingest_missing_file_exit_2(capsys):
    rc, _, err = run(["ingest", "/nonexistent/metrics.txt"], capsys)
    assert rc == 2 and "paths" in err


def test_sweep_bad_list_exit_2(capsys):
    rc, _, err = run(["sweep", *BASE, "--n", "1-7", "--acceptance", "0.7"], capsys)
    assert rc == 2 and "--n" in err


# --------------------------------------------------------------------------------------------
# deployments vLLM itself would refuse


@pytest.mark.parametrize("argv,field", [
    (["predict", "--target", "Kimi-K2.5", "--method", "eagle3", "-n", "3", "--tp", "1", "--acceptance", "0.8"], "tp:"),
    (["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--tp", "3", "--acceptance", "0.8"], "tp:"),
    (["predict", "--target", "Qwen3-8B", "-n", "7", "--acceptance", "0.8", "--speculative-config",
      '{"method": "dflash", "model": "z-lab/gemma-4-26B-A4B-it-DFlash", "num_speculative_tokens": 7}'],
     "speculative_config.model"),
    (["predict", *BASE, "-n", "3", "--acceptance", "0.8", "--temperature", "-1"], "temperature"),
])
def test_infeasible_deployments_exit_2(argv, field, capsys):
    rc, _, err = run(argv, capsys)
    assert rc == 2 and field in err, err
