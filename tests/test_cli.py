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
    assert d["t_step_s"] == pytest.approx(d["t_draft_s"] + d["t_verify_s"] + d["t_host_s"] + d["t_overhead_s"], rel=1e-12)
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
    # named as the flag the user typed (the library names them concurrency, num_speculative_tokens, ...)
    (["-n", "3", "--concurrency", "0", "--acceptance", "0.7"], "--concurrency"),
    (["-n", "0", "--acceptance", "0.7"], "-n/--num-speculative-tokens"),
    # named as the user spelled them (they read "alpha" / "model", the library's internal names)
    (["-n", "3", "--acceptance", "1.5"], "--acceptance"),
    (["-n", "3", "--acceptance", "nan"], "--acceptance"),
    (["-n", "3", "--acceptance", "0.7", "--target", "Qwen3-8"], "--target"),
    (["-n", "3", "--conditional", "0.8,1.1"], r"--conditional[1]"),  # was rates[1]
    (["--acceptance", "0.7"], "-n/--num-speculative-tokens"),  # was num_speculative_tokens
    (["-n", "3", "--cumulative", "0.8,0.9"], r"--cumulative[1]"),
    (["-n", "3", "--acceptance", "0.7", "--hardware", "TPU-v9"], "--hardware"),
    (["-n", "3", "--acceptance", "0.7", "--profile-temperature", "0", "--temperature", "0.8"], "--temperature"),
    (["-n", "3", "--acceptance", "0.7", "--temperature", "2.5"], "--temperature"),  # vLLM refuses T > 2
    (["-n", "3", "--acceptance", "0.7", "--osl", "1"], "--osl"),  # no decode step at OSL 1
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
    rc, out, err = run(["ingest", str(SAMPLES / "bench_ngram.json"), str(SAMPLES / "metrics_base.txt")], capsys)
    assert rc == 1  # the baseline scrape has no spec counters: reported, not zero
    assert "bench_ngram.json (bench): MAL 2.870" in out
    assert err.startswith(f"specsim: {SAMPLES / 'metrics_base.txt'}: speculative-decoding metrics not collected: ")


def test_ingest_reads_every_file_and_exits_with_the_worst_status(tmp_path, capsys):
    """A new-user trial: a malformed file aborted the batch (exit 2, the good file after it never read) while
    a file without spec-decode counts was reported and the rest read; that report, exit 1, lacked the
    ``specsim:`` prefix, and ``ingest --help`` documented no exit status."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"a":')
    good = ROOT / "examples" / "bench_ngram_smollm2.json"
    off = SAMPLES / "metrics_base.txt"  # a valid scrape of a server without speculative decoding
    missing = tmp_path / "missing.json"
    rc, out, err = run(["ingest", str(bad), str(good), str(off), str(missing)], capsys)
    assert rc == 2
    assert out.startswith(f"== {good} (bench): MAL 2.882, drafts 357, draft tokens 1067, accepted 672\n")
    lines = err.splitlines()
    assert lines[0].startswith(f"specsim: error: {bad}: not valid JSON (truncated or edited file?): ")
    assert lines[-2].startswith(f"specsim: {off}: speculative-decoding metrics not collected: ")
    assert lines[-1] == f"specsim: error: paths: no such file (got '{missing}')"
    assert all(ln.startswith("specsim: ") for ln in lines), err
    # the worst status: 1 when the worst is a file without counts, 0 only when every file is read
    assert run(["ingest", str(off), str(good)], capsys)[0] == 1
    assert run(["ingest", str(good), str(good)], capsys)[0] == 0
    rc, out, err = run(["ingest", "--kind", "sweep", str(good), str(good), "--json"], capsys)
    assert rc == 2 and err.count("specsim: error: --kind: ") == 2  # and one JSON object per file on stdout:
    assert [json.loads(x)["status"] for x in out.splitlines()] == ["error", "error"]
    rc, out, err = run(["ingest", str(off), str(bad), str(good), "--json"], capsys)
    assert rc == 2 and [json.loads(x).get("status") for x in out.splitlines()] == ["not collected", "error", None]
    assert err.startswith(f"specsim: error: {bad}: not valid JSON")
    from specsim.cli import build_parser

    ingest = next(a for a in build_parser()._actions if a.dest == "command").choices["ingest"]
    assert ingest.epilog.startswith("every file is read, each one that fails reported on stderr with its reason; "
                                    "exit status, the worst of the files: 0 every file read")
    assert "; 1 some file valid but without them" in ingest.epilog and "; 2 some file missing" in ingest.epilog


def test_ingest_v0_log_warns_that_its_counts_are_rebuilt(capsys):
    """``specsim ingest`` on a V0 log printed rebuilt counts (accepted 420; the line logs 470) silently."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")  # shown as the CLI shows them, whatever pytest's -W says
        rc, out, err = run(["ingest", str(SAMPLES / "specdecoding_v0_synthetic.log")], capsys)
        assert rc == 0 and "(log): MAL 2.680, drafts 250, draft tokens 1000, accepted 420" in out
        assert err.startswith("specsim: warning: specdecoding_v0_synthetic.log: vLLM V0 'Speculative "
                              "metrics:' line(s)")
        assert "670 - 250 = 420 accepted (logged accepted 470)" in err
        rc, _, err = run(["ingest", str(SAMPLES / "specdecoding_v1_0.9.2_synthetic.log")], capsys)
        assert rc == 0 and err == ""


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


# --------------------------------------------------------------------------------------------
# the hand-off: --acceptance-from any file ingest reads; --target as a path; --json everywhere
SAMPLE_FILES = ROOT / "tests" / "data" / "samples"
BENCH_A = {"num_drafts": 357, "accepted_per_pos": [271, 216, 185]}  # tests/data/samples/run/bench_a.json


def _readme_command(marker: str) -> list[str]:
    """The README quickstart's shell command that contains ``marker``, as argv (continuations joined)."""
    import shlex

    text = (ROOT / "README.md").read_text()
    joined = text.replace("\\\n", " ")
    lines = [ln.strip() for ln in joined.splitlines() if ln.strip().startswith(".venv/bin/specsim") and marker in ln]
    assert lines, f"README has no specsim command with {marker!r}"
    argv = shlex.split(lines[0], comments=True)
    assert argv[0] == ".venv/bin/specsim"
    return argv[1:]


def test_readme_hand_off_command_runs(capsys, monkeypatch):
    """Exactly the README's `predict --acceptance-from examples/bench_ngram_smollm2.json ...` (no vLLM)."""
    monkeypatch.chdir(ROOT)
    argv = _readme_command("predict --acceptance-from")
    assert "examples/bench_ngram_smollm2.json" in argv
    assert (ROOT / "examples" / "bench_ngram_smollm2.json").read_bytes() == (SAMPLE_FILES / "run" / "bench_a.json").read_bytes()
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    acc = Acceptance.from_counts(BENCH_A["num_drafts"], BENCH_A["accepted_per_pos"], temperature=0.0)
    # the n-gram run drafted on 357 of its 1580 - 16 - 672 = 892 decode request-steps (its lookups missed on
    # the others, which no counter shows), proposing 1067 / 357 tokens each: both taken from the file
    steps = 1580 - 16 - 672
    p = predict("SmolLM2-135M-Instruct", "ngram", 3, hardware="cpu-2core-avx2", precision="fp32", concurrency=4,
                isl=256, osl=64, acceptance=acc, drafted_fraction=357 / steps, mean_proposal_tokens=1067 / 357)
    assert f"throughput ratio    {p.throughput_ratio:6.3f}x" in out
    assert f"{1 + 672 / steps:6.3f} tokens/step" in out  # 1.753 tokens per decode step (2.882 per drafted one)
    assert f"40.0% of its {steps} decode request-steps carried a draft" in err
    rc, out, _ = run([*argv, "--json"], capsys)
    d = json.loads(out)
    assert d["mal"] == pytest.approx(1 + 672 / steps, rel=1e-12)
    # the 2-core CPU ships no stack calibration: the zero-overhead upper end is said, nothing else is wrong
    assert len(d["warnings"]) == 1 and d["warnings"][0].startswith("no stack calibration ships for cpu-2core-avx2")


def test_readme_ingest_json_command(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    rc, out, _ = run(_readme_command("ingest examples/"), capsys)
    assert rc == 0
    d = json.loads(out)
    assert d["kind"] == "bench" and d["accepted_per_pos"] == [271, 216, 185] and d["num_drafts"] == 357
    assert d["cumulative_rates"] == pytest.approx([271 / 357, 216 / 357, 185 / 357], rel=1e-12)
    assert d["conditional_rates"] == pytest.approx([271 / 357, 216 / 271, 185 / 216], rel=1e-12)


@pytest.mark.parametrize("files, drafts, per_pos", [
    (["run/bench_a.json"], 357, [271, 216, 185]),
    (["run/metrics_b_after.prom", "run/metrics_b_before.prom"], 426 - 363, [322 - 275, 254 - 217, 220 - 185]),
    (["run/server_c.log"], 212, [136, 126, 108]),
    (["offline/offline_result.json"], 75, [55, 48, 42]),
])
def test_acceptance_from_each_format(files, drafts, per_pos, capsys):
    argv = ["predict", *BASE, "-n", "3", "--acceptance-from", str(SAMPLE_FILES / files[0]), "--json"]
    if len(files) > 1:
        argv += ["--before", str(SAMPLE_FILES / files[1])]
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["mal"] == pytest.approx(1 + sum(per_pos) / drafts, rel=1e-12)
    p = predict("Qwen3-8B", "eagle3", 3, hardware="MI300X", isl=512, osl=256,
                acceptance=Acceptance.from_counts(drafts, per_pos))
    assert d["throughput_ratio"] == pytest.approx(p.throughput_ratio, rel=1e-12)


def test_acceptance_from_with_temperature_mismatch_refused(capsys):
    argv = ["predict", *BASE, "-n", "3", "--acceptance-from", str(SAMPLE_FILES / "run/bench_a.json"),
            "--profile-temperature", "0", "--temperature", "0.8"]
    rc, _, err = run(argv, capsys)
    assert rc == 2 and "temperature" in err


def test_before_without_acceptance_from_exit_2(capsys):
    rc, _, err = run(["predict", *BASE, "-n", "3", "--acceptance", "0.7", "--before", "x.prom"], capsys)
    assert rc == 2 and "--before" in err


def test_sweep_and_recommend_take_acceptance_from(capsys):
    f = str(SAMPLE_FILES / "run/bench_a.json")
    rc, out, err = run(["sweep", *BASE, "-n", "1,3", "--concurrency", "1,4", "--acceptance-from", f, "--json"], capsys)
    assert rc == 0, err
    rows = json.loads(out)
    assert len(rows) == 4 and {r["num_speculative_tokens"] for r in rows} == {1, 3}
    n3 = [r for r in rows if r["num_speculative_tokens"] == 3]
    assert all(r["mal"] == pytest.approx(1 + 672 / 357, rel=1e-12) for r in n3)
    n1 = [r for r in rows if r["num_speculative_tokens"] == 1]
    assert all(r["mal"] == pytest.approx(1 + 271 / 357, rel=1e-12) for r in n1)
    rc, out, err = run(["recommend", "--target", "SmolLM2-135M-Instruct", "--method", "ngram", "--hardware",
                        "cpu-2core-avx2", "--precision", "fp32", "--isl", "256", "--osl", "64", "--concurrency",
                        "1,4", "--acceptance-from", f, "--profile-temperature", "0", "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["target"] == "SmolLM2-135M-Instruct" and d["methods"][0]["method"] == "ngram"


def _write_hf_config(tmp_path) -> Path:
    doc = json.loads((ROOT / "specsim" / "data" / "models" / "SmolLM2-135M-Instruct.json").read_text())
    d = tmp_path / "my-smollm2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(doc["config"]))
    return d


def test_target_as_hf_config_path_or_directory(tmp_path, capsys):
    from specsim.architecture import ModelSpec

    d = _write_hf_config(tmp_path)
    spec = ModelSpec.from_hf_config(d / "config.json")
    p = predict(spec, "ngram", 3, hardware="cpu-2core-avx2", precision="fp32", isl=256, osl=64, acceptance=0.7)
    for target in (str(d), str(d / "config.json")):
        rc, out, err = run(["predict", "--target", target, "--method", "ngram", "-n", "3", "--hardware",
                            "cpu-2core-avx2", "--precision", "fp32", "--isl", "256", "--osl", "64",
                            "--acceptance", "0.7", "--json"], capsys)
        assert rc == 0, err
        got = json.loads(out)
        assert got["target"] == spec.name and got["throughput_ratio"] == pytest.approx(p.throughput_ratio, rel=1e-12)
        # the Python API takes the path too
        assert predict(target, "ngram", 3, hardware="cpu-2core-avx2", precision="fp32", isl=256, osl=64,
                       acceptance=0.7).throughput_ratio == pytest.approx(p.throughput_ratio, rel=1e-12)
    rc, _, err = run(["predict", "--target", str(tmp_path), "--method", "ngram", "-n", "3", "--acceptance", "0.7"],
                     capsys)
    assert rc == 2 and "--target" in err and "config.json" in err


def test_ingest_json_not_collected_and_log_rates(capsys):
    rc, out, _ = run(["ingest", str(SAMPLES / "metrics_base.txt"), "--json"], capsys)
    assert rc == 1 and json.loads(out)["status"] == "not collected" and json.loads(out)["kind"] == "metrics"
    rc, out, _ = run(["ingest", str(SAMPLE_FILES / "run/server_c.log"), "--json"], capsys)
    d = json.loads(out)
    assert rc == 0 and d["kind"] == "log" and d["accepted_per_pos"] == [136, 126, 108]
    assert d["conditional_rates"] == pytest.approx([136 / 212, 126 / 136, 108 / 126], rel=1e-12)


# --------------------------------------------------------------------------------------------
# one detector over every reader (specsim.vllm.detect.read_counts), as ingest uses it
@pytest.mark.parametrize("rel, kind, drafts, per_pos", [
    ("run/bench_a.json", "bench", 357, (271, 216, 185)),
    ("run/bench_a.log", "bench-log", 357, (271, 216, 185)),  # console output of the run of bench_a.json
    ("run/metrics_a_after.prom", "metrics", 357, (271, 216, 185)),  # the server's first bench run
    ("run/server_c.log", "log", 212, (136, 126, 108)),
    ("offline/offline_result.json", "offline", 75, (55, 48, 42)),
    ("gl/report.json", "guidellm", 106, (68, 63, 54)),  # = metrics_after.prom - metrics_before.prom (fresh server)
    ("gl/metrics_after.prom", "metrics", 106, (68, 63, 54)),
    ("spec_eval/acceptance.csv", "speculators-csv", 106, (68, 63, 54)),
    ("spec_eval/eval.log", "speculators-log", 106, (68, 63, 54)),
    # two --append-result runs: the second is metrics_b_after - metrics_b_before = 63 drafts
    ("run/bench_appended.json", "bench", 357 + 63, (271 + 47, 216 + 37, 185 + 35)),
    # the max_concurrency=4 row ran under a dynamic schedule (censored per-position counts): skipped
    ("sweep/results/exp2/summary.csv", "sweep", 38, (33, 28, 25)),
])
def test_read_counts_detects_every_format(rel, kind, drafts, per_pos):
    from specsim.vllm import read_counts

    got_kind, c = read_counts(SAMPLE_FILES / rel)
    assert got_kind == kind
    assert c.num_drafts == drafts and tuple(c.accepted_per_pos) == per_pos


def test_read_counts_response_and_sweep_dir():
    from specsim.vllm import read_counts

    kind, c = read_counts(SAMPLE_FILES / "run/response_detailed.json")
    raw = json.loads((SAMPLE_FILES / "run/response_detailed.json").read_text())["metrics"]["speculative_decoding"]
    assert kind == "response" and c.num_drafts == raw["num_spec_steps"] == 6
    assert c.accepted_per_pos == (4, 1, 0) and c.num_accepted_tokens == raw["num_accepted_draft_tokens"] == 5  # histogram [2, 3, 1, 0]
    kind, c = read_counts(SAMPLE_FILES / "sweep")
    run0 = json.loads(next((SAMPLE_FILES / "sweep").rglob("*max_concurrency=1/run=0.json")).read_text())
    assert kind == "sweep" and c.num_drafts == run0["spec_decode_num_drafts"]
    assert "1 of 2 sweep runs without usable spec-decode counts skipped" in c.source  # the scheduled run is censored


def test_read_counts_refuses_what_holds_no_counts():
    from specsim.errors import DataError
    from specsim.vllm import read_counts

    with pytest.raises(DataError, match="InferenceX golden acceptance-length"):
        read_counts(SAMPLE_FILES / "ix/minimaxm3_eagle3.yaml")
    with pytest.raises(DataError, match="JSON, but not a format specsim reads"):
        read_counts(SAMPLE_FILES / "run/req.json")


_BENCH_DESC = "vllm bench serve --save-result JSON (--append-result: the results pooled)"


@pytest.mark.parametrize("kind", ["sweep", "response", "speculators-csv", "metrics", "log", "offline", "guidellm",
                                  "speculators-log", "bench-log"])
def test_ingest_a_kind_the_file_is_not_is_a_format_error(kind, capsys):
    """A new-user trial: ``ingest --kind sweep`` of a speculative bench JSON said "none of its 0 sweep run has
    speculative-decoding counts (speculative decoding off)" (exit 1), ``--kind response`` "no
    metrics.speculative_decoding", ``--kind speculators-csv`` "no rows (empty acceptance.csv)"."""
    from specsim.errors import SpecsimValueError
    from specsim.vllm import KINDS, read_counts

    bench = ROOT / "examples" / "bench_ngram_smollm2.json"
    rc, out, err = run(["ingest", "--kind", kind, str(bench)], capsys)
    assert rc == 2 and out == ""
    assert err == (f"specsim: error: --kind: {bench} does not read as {kind!r} ({KINDS[kind]}): it looks like "
                   f"'bench' ({_BENCH_DESC}), as auto-detection reads it (got {kind!r}); allowed: bench, auto\n")
    assert "speculative decoding off" not in err
    with pytest.raises(SpecsimValueError) as ei:
        read_counts(bench, kind)
    assert ei.value.field == "kind" and ei.value.value == kind and ei.value.allowed == ["bench", "auto"]
    assert read_counts(bench, "bench")[1].num_drafts == read_counts(bench)[1].num_drafts > 0  # the kind it is


def test_ingest_a_kind_of_a_file_of_no_known_format_names_both_readings(tmp_path, capsys):
    from specsim.errors import NotCollectedError
    from specsim.vllm import read_counts

    f = tmp_path / "x.json"
    f.write_text("{}")
    rc, _, err = run(["ingest", "--kind", "response", str(f)], capsys)
    assert rc == 2 and err.startswith(f"specsim: error: --kind: {f} does not read as 'response' (one OpenAI response "
                                      "of vllm serve --per-request-spec-decode-metrics), nor does auto-detection "
                                      "read it as another format (JSON, but not a format specsim reads (top-level "
                                      "keys [])) (got 'response')")
    t = tmp_path / "x.txt"
    t.write_text("hello world\n")
    rc, _, err = run(["ingest", "--kind", "speculators-csv", str(t)], capsys)
    assert rc == 2 and err.startswith(f"specsim: error: --kind: {t} does not read as 'speculators-csv' "), err
    assert ": no rows (empty acceptance.csv); nor does auto-detection read it as another format (not a format " \
           "specsim reads (first line 'hello world')) (got 'speculators-csv')" in err
    # the kind the file is, without spec-decode counts: not collected (exit 1), as with --kind auto
    with pytest.raises(NotCollectedError, match="speculative decoding off"):
        read_counts(SAMPLES / "metrics_base.txt", "metrics")
    assert run(["ingest", "--kind", "metrics", str(SAMPLES / "metrics_base.txt")], capsys)[0] == 1


def test_acceptance_from_takes_the_runs_recorded_temperature(capsys):
    """bench_a.log's Namespace line says temperature=0.0 (greedy): the profile carries it, so a
    prediction at 0 has no temperature assumption and one at 0.5 is refused without an assumption."""
    from specsim.vllm.detect import run_temperature

    log = SAMPLE_FILES / "run/bench_a.log"
    assert "temperature=0.0," in log.read_text()
    assert run_temperature(log, "bench-log") == 0.0
    assert run_temperature(SAMPLE_FILES / "gl/report.json", "guidellm") == 0.0  # request body {"temperature": 0}
    assert run_temperature(SAMPLE_FILES / "run/bench_a.json", "bench") is None  # not saved in the JSON
    base = ["predict", *BASE, "-n", "3", "--acceptance-from", str(log)]
    rc, out, err = run([*base, "--json"], capsys)
    assert rc == 0, err
    assert not any("no recorded temperature" in a for a in json.loads(out)["assumptions"])
    rc, _, err = run([*base, "--temperature", "0.5"], capsys)
    assert rc == 2 and "measured at temperature 0.0" in err
    rc, _, err = run([*base, "--profile-temperature", "0.7"], capsys)
    assert rc == 2 and "--profile-temperature" in err and "conflicts" in err


def test_sweep_takes_n_from_the_speculative_config_schedule(capsys):
    """`specsim sweep --speculative-config` with a dynamic schedule: N per concurrency is the schedule's
    (vLLM 0.32 num_speculative_tokens_per_batch_size: batch 1-4 -> 2, 5-512 -> 0)."""
    cfg = json.dumps({"method": "eagle3", "model": "RedHatAI/Qwen3-8B-speculator.eagle3", "num_speculative_tokens": 2,
                      "num_speculative_tokens_per_batch_size": [[1, 4, 2], [5, 512, 0]]})
    assert main(["sweep", "--target", "Qwen3-8B", "--speculative-config", cfg, "--acceptance", "0.7",
                 "--concurrency", "2,8", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["concurrency"], r["num_speculative_tokens"]) for r in rows] == [(2, 2), (8, 0)]
    assert {r["num_speculative_tokens_source"] for r in rows} == {"schedule"}
    # the table view says where N comes from, also when -n names the configured N (a new-user trial:
    # -n was taken silently while the rows showed the schedule's k)
    assert main(["sweep", "--target", "Qwen3-8B", "--speculative-config", cfg, "--acceptance", "0.7",
                 "--concurrency", "2,8", "-n", "2"]) == 0
    err = capsys.readouterr().err
    assert "N per row is the --speculative-config schedule's k" in err and "which -n 2 names" in err


def test_readme_anchored_cpu_pair_says_it_is_an_upper_end(capsys, monkeypatch):
    """The README's --baseline-from / --acceptance-from pair (measured together): the prediction with
    zero overhead on uncalibrated hardware is an upper end and the output says so."""
    monkeypatch.chdir(ROOT)
    argv = _readme_command("predict --baseline-from")
    assert "tests/data/vllm_samples/bench_ngram.json" in argv
    rc, out, err = run([*argv, "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    base = json.loads((ROOT / "tests/data/vllm_samples/bench_base.json").read_text())
    spec = json.loads((ROOT / "tests/data/vllm_samples/bench_ngram.json").read_text())
    measured = spec["output_throughput"] / base["output_throughput"]
    # 1.431x with the share of steps the n-gram run drafted on (35 %, from the file); 1.476x when every step
    # is taken to draft N tokens, as before the file's drafting was read
    assert measured == pytest.approx(0.895, abs=1e-3) and d["throughput_ratio"] == pytest.approx(1.431, abs=2e-3)
    rc, out, err = run([*argv, "--json", "--drafted-fraction", "1", "--mean-proposal-tokens", "3"], capsys)
    assert rc == 0 and json.loads(out)["throughput_ratio"] == pytest.approx(1.476, abs=2e-3)
    assert any(w.startswith("no stack calibration ships for cpu-2core-avx2") and "upper-end" in w for w in d["warnings"])


# ---- partial drafting from a vllm bench serve JSON (a new-user trial: n-gram speedups overstated ~1.7x) ----
NGRAM_BENCH = Path(__file__).parent / "data" / "vllm_samples" / "bench_ngram.json"


def test_the_drafted_share_of_steps_is_read_from_a_bench_json_by_its_closed_form():
    """vLLM counts a draft only on a step that proposed one: of an n-gram run's decode steps, those whose
    lookup missed are in no counter.  Each decode step emits 1 token + the drafts it accepts and each
    request's first token is its prefill's, so steps = output tokens - requests - accepted tokens."""
    from specsim.vllm.detect import read_counts, read_drafting

    raw = json.loads(NGRAM_BENCH.read_text())
    steps = raw["total_output_tokens"] - raw["completed"] - raw["spec_decode_accepted_tokens"]
    kind, counts = read_counts(NGRAM_BENCH)
    d = read_drafting(NGRAM_BENCH, kind, counts)
    assert d["decode_steps"] == steps == 938
    assert d["drafted_fraction"] == pytest.approx(raw["spec_decode_num_drafts"] / steps)  # 330 / 938
    assert d["mean_proposal_tokens"] == pytest.approx(raw["spec_decode_draft_tokens"] / raw["spec_decode_num_drafts"])
    # the same run's /metrics scrapes (generation_tokens and request_success, differenced) and a bench
    # console log give the same; a format without both totals gives None, never a guess
    vs = Path(__file__).parent / "data" / "vllm_samples"
    mk, mc = read_counts(vs / "metrics_ngram.txt", before=vs / "metrics_ngram_before.txt")
    dm = read_drafting(vs / "metrics_ngram.txt", mk, mc, before=vs / "metrics_ngram_before.txt")
    assert mk == "metrics" and dm["decode_steps"] == 938 and dm["drafted_fraction"] == pytest.approx(d["drafted_fraction"])
    run_dir = Path(__file__).parent / "data" / "samples" / "run"
    lk, lc = read_counts(run_dir / "bench_a.log")
    jk, jc = read_counts(run_dir / "bench_a.json")
    assert lk == "bench-log" and read_drafting(run_dir / "bench_a.log", lk, lc)["decode_steps"] == \
        read_drafting(run_dir / "bench_a.json", jk, jc)["decode_steps"] == 1580 - 16 - 672
    sk, sc = read_counts(run_dir / "server_a.log")
    assert sk == "log" and read_drafting(run_dir / "server_a.log", sk, sc) is None


def test_predict_and_sweep_take_the_drafted_share_from_an_acceptance_file(capsys):
    from specsim.vllm.detect import read_counts, read_drafting

    kind, counts = read_counts(NGRAM_BENCH)
    d = read_drafting(NGRAM_BENCH, kind, counts)
    argv = ["predict", "--target", "Llama-3.1-8B-Instruct", "--method", "ngram", "-n", "3", "--hardware", "H100 SXM",
            "--concurrency", "1", "--acceptance-from", str(NGRAM_BENCH), "--json"]
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    acc = Acceptance.from_counts(counts, temperature=0.0)
    kw = dict(hardware="H100 SXM", concurrency=1, acceptance=acc)
    part = predict("Llama-3.1-8B-Instruct", "ngram", 3, drafted_fraction=d["drafted_fraction"],
                   mean_proposal_tokens=d["mean_proposal_tokens"], **kw)
    full = predict("Llama-3.1-8B-Instruct", "ngram", 3, **kw)
    got = json.loads(out)["throughput_ratio"]
    assert got == pytest.approx(part.throughput_ratio, rel=1e-12) and got < 0.7 * full.throughput_ratio
    assert "35.2% of its 938 decode request-steps carried a draft, 2.99 tokens proposed per drafted step (at N = 3); " \
           "predicted with drafted_fraction=0.352, mean_proposal_tokens=2.988" in err
    # an explicit --drafted-fraction wins over the file
    rc, out, err = run([*argv, "--drafted-fraction", "1"], capsys)
    assert rc == 0 and "predicted with mean_proposal_tokens=2.988" in err
    assert json.loads(out)["throughput_ratio"] == pytest.approx(
        predict("Llama-3.1-8B-Instruct", "ngram", 3, mean_proposal_tokens=d["mean_proposal_tokens"], **kw).throughput_ratio)
    # a sweep over other N takes the drafted share only (N = 2 cannot propose 2.99 tokens)
    rc, out, err = run(["sweep", "--target", "Llama-3.1-8B-Instruct", "--method", "ngram", "-n", "2,3", "--hardware",
                        "H100 SXM", "--concurrency", "1", "--acceptance-from", str(NGRAM_BENCH), "--json"], capsys)
    assert rc == 0, err
    assert "predicted with drafted_fraction=0.352 (mean_proposal_tokens only at the file's N = 3" in err
    rows = {r["num_speculative_tokens"]: r["throughput_ratio"] for r in json.loads(out)}
    assert rows[3] == pytest.approx(predict("Llama-3.1-8B-Instruct", "ngram", 3, drafted_fraction=d["drafted_fraction"],
                                            **kw).throughput_ratio, rel=1e-9)


def test_recommend_takes_the_drafted_share_of_an_acceptance_from_file(capsys):
    """recommend assumed every step drafts and only warned; it now models the measured share of drafting steps
    as predict does (each drafted step proposing N tokens), and --drafted-fraction overrides it."""
    from specsim.recommend import recommend
    from specsim.vllm.detect import read_counts, read_drafting

    argv = ["recommend", "--target", "Llama-3.1-8B-Instruct", "--method", "ngram", "--hardware", "H100 SXM",
            "--concurrency", "1,16", "--acceptance-from", str(NGRAM_BENCH), "--json"]
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    kind, counts = read_counts(NGRAM_BENCH)
    f = read_drafting(NGRAM_BENCH, kind, counts)["drafted_fraction"]
    assert f == pytest.approx(0.352, abs=5e-4)
    assert "35.2% of its" in err and "ngram recommended with drafted_fraction=0.352" in err
    pts = json.loads(out)["methods"][0]["points"]
    for p in pts:
        if p["num_speculative_tokens"]:
            want = predict("Llama-3.1-8B-Instruct", "ngram", p["num_speculative_tokens"], hardware="H100 SXM",
                           concurrency=p["concurrency"], acceptance=Acceptance.from_counts(counts), drafted_fraction=f,
                           isl=1024, osl=1024, temperature=None)
            assert p["throughput_ratio"] == pytest.approx(want.throughput_ratio, rel=1e-9)
            assert p["mal"] == pytest.approx(1 + f * (want.mal_per_drafted_step - 1), rel=1e-9)
    lib = recommend("Llama-3.1-8B-Instruct", "ngram", hardware="H100 SXM", concurrency=[1, 16],
                    acceptance=Acceptance.from_counts(counts), drafted_fraction=f, temperature=None)
    assert [p["throughput_ratio"] for p in pts] == pytest.approx([p.throughput_ratio for p in lib.methods[0].points])
    rc, out1, err = run(argv + ["--drafted-fraction", "1"], capsys)  # the flag wins over the file
    assert rc == 0 and "drafted_fraction=0.352" not in err
    assert json.loads(out1)["methods"][0]["points"][0]["throughput_ratio"] > pts[0]["throughput_ratio"]


def test_recommend_warns_of_a_partly_drafting_run_for_methods_that_draft_every_step(capsys):
    """The warning predict gives (one helper now, cli._args.file_drafting): an n-gram run's share says nothing
    of eagle3, which drafts on every step; the recommendation is not changed by it."""
    argv = ["recommend", "--target", "Llama-3.1-8B-Instruct", "--method", "eagle3", "--hardware", "H100 SXM",
            "--concurrency", "1", "--acceptance-from", str(NGRAM_BENCH), "--json"]
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    assert "only 35.2% of its decode steps carried a draft, as a lookup method's run does (ngram, ngram_gpu, " \
           "suffix); the methods recommended draft on every step" in err
    assert "drafted_fraction=" not in err
    assert not any("of decode steps carry a draft" in a for a in json.loads(out)["methods"][0]["assumptions"])


def test_the_drafted_share_applies_to_lookup_methods_only(capsys):
    """EAGLE-3 drafts on every step: an n-gram run's missed lookups say nothing of it; the file's drafted
    share is then not applied, and the mismatch is warned about."""
    argv = ["predict", "--target", "Llama-3.1-8B-Instruct", "--method", "eagle3", "-n", "3", "--hardware", "H100 SXM",
            "--concurrency", "1", "--acceptance-from", str(NGRAM_BENCH), "--json"]
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    assert "only 35.2% of its decode steps carried a draft, as a lookup method's run does (ngram, ngram_gpu, suffix); eagle3 " \
           "drafts on every step" in err
    from specsim.vllm.detect import read_counts

    acc = Acceptance.from_counts(read_counts(NGRAM_BENCH)[1], temperature=0.0)
    assert json.loads(out)["throughput_ratio"] == pytest.approx(predict(
        "Llama-3.1-8B-Instruct", "eagle3", 3, hardware="H100 SXM", concurrency=1, acceptance=acc).throughput_ratio)


def test_partial_drafting_is_said_for_every_format_and_way_of_giving_n(capsys):
    """A second trial: the same n-gram run predicted 1.476x from its /metrics scrapes and 1.475x from a server
    log without a word, against 1.431x from its bench JSON; N given by --speculative-config dropped the file's
    proposal length; the summary's "accepted per proposed token" read 0.219 where vLLM reported 0.626."""
    vs = Path(__file__).parent / "data" / "vllm_samples"
    base = ["predict", "--target", "SmolLM2-135M-Instruct", "--hardware", "cpu-2core-avx2", "--precision", "fp32",
            "--profile-temperature", "0", "--concurrency", "4", "--isl", "107", "--osl", "98", "--method", "ngram"]
    ratios = {}
    for name, extra in (("json", ["--acceptance-from", str(vs / "bench_ngram.json"), "-n", "3"]),
                        ("prom", ["--acceptance-from", str(vs / "metrics_ngram.txt"), "--before",
                                  str(vs / "metrics_ngram_before.txt"), "-n", "3"]),
                        ("spec-config", ["--acceptance-from", str(vs / "bench_ngram.json"), "--speculative-config",
                                         '{"method": "ngram", "num_speculative_tokens": 3}'])):
        rc, out, err = run([*base, *extra, "--json"], capsys)
        assert rc == 0, err
        d = json.loads(out)
        ratios[name] = d["throughput_ratio"]
        assert d["drafted_fraction"] == pytest.approx(330 / 938) and d["mean_proposal_tokens"] == pytest.approx(986 / 330)
    assert ratios["json"] == pytest.approx(ratios["prom"], rel=1e-12) == pytest.approx(ratios["spec-config"], rel=1e-12)
    # a format without the totals: every step is taken to draft, and said
    rc, out, err = run([*base, "-n", "3", "--acceptance-from",
                        str(Path(__file__).parent / "data" / "samples" / "run" / "server_a.log")], capsys)
    assert rc == 0 and "does not record the run's output tokens and finished requests" in err
    # the summary gives vLLM's per-drafted-step figures (spec_decode_acceptance_length 2.870, rate 62.6 %)
    rc, out, err = run([*base, "-n", "3", "--acceptance-from", str(vs / "bench_ngram.json")], capsys)
    raw = json.loads((vs / "bench_ngram.json").read_text())
    assert (f"35.2% of steps draft 2.99 tokens: per drafted step {raw['spec_decode_acceptance_length']:.3f}, accepted "
            f"per proposed token {raw['spec_decode_acceptance_rate'] / 100:.3f}") in out
    # a value given is named as given
    rc, out, err = run([*base, "-n", "3", "--acceptance-from", str(vs / "bench_ngram.json"), "--drafted-fraction",
                        "0.5"], capsys)
    assert "predicted with mean_proposal_tokens=2.988, --drafted-fraction 0.5 given" in err


REAL = Path(__file__).parent / "data" / "samples"  # the project's copies of the real sample outputs


@pytest.mark.parametrize("rel, steps, drafts, draft_tokens", [
    # run=0.json of max_concurrency=1 (the =4 run is skipped: its schedule censors per-position counts):
    # total_output_tokens 256, completed 4, spec_decode_accepted_tokens 86, num_drafts 38, draft_tokens 114
    ("sweep/results/exp2", 256 - 4 - 86, 38, 114),
    ("sweep/results/exp2/summary.csv", 256 - 4 - 86, 38, 114),
    # 8 successful requests x output_tokens 64; their speculative_decoding payloads sum to 185 accepted
    # (26+23+16+15+32+24+27+22), 106 spec steps (12+16+8+14+15+12+15+14), 318 draft tokens
    ("gl/report.json", 8 * 64 - 8 - 185, 106, 318),
    # vllm:generation_tokens 366, vllm:request_success 1 (stop) + 5 (length), accepted 145, drafts 75, draft tokens 221
    ("offline/offline_result.json", 366 - 6 - 145, 75, 221),
    # usage.completion_tokens 64 of one request; num_accepted_draft_tokens 5, num_spec_steps 6, num_draft_tokens 18
    ("run/response_detailed.json", 64 - 1 - 5, 6, 18),
])
def test_the_drafted_share_is_read_from_every_format_that_records_the_totals(rel, steps, drafts, draft_tokens):
    """A new-user trial: a GuideLLM report, sweep results, an LLM.get_metrics() dump and a response were said
    not to record the run's output tokens and requests (each does), so an n-gram run's lookup misses were
    taken to draft (sweep: 1.53x instead of ~1.31x)."""
    from specsim.vllm.detect import read_counts, read_drafting

    kind, counts = read_counts(REAL / rel)
    d = read_drafting(REAL / rel, kind, counts)
    assert d is not None, kind
    assert d["decode_steps"] == steps and d["drafted_fraction"] == pytest.approx(drafts / steps)
    assert d["mean_proposal_tokens"] == pytest.approx(draft_tokens / drafts)


def test_predict_takes_the_drafted_share_of_a_sweep_and_a_guidellm_report(capsys):
    base = ["predict", "--target", "SmolLM2-135M-Instruct", "--method", "ngram", "-n", "3", "--hardware",
            "cpu-2core-avx2", "--precision", "fp32", "--json"]
    for rel, frac in (("sweep/results/exp2", 38 / 166), ("gl/report.json", 106 / 319)):
        rc, out, err = run([*base, "--acceptance-from", str(REAL / rel)], capsys)
        assert rc == 0, err
        assert "does not record" not in err and f"{frac:.1%} of its" in err
        assert json.loads(out)["drafted_fraction"] == pytest.approx(frac)
        rc, out2, _ = run([*base, "--acceptance-from", str(REAL / rel), "--drafted-fraction", f"{frac!r}",
                           "--mean-proposal-tokens", "3"], capsys)
        assert json.loads(out)["throughput_ratio"] == pytest.approx(json.loads(out2)["throughput_ratio"], rel=1e-12)


def test_a_baseline_run_of_another_model_is_warned_about_in_predict_sweep_and_recommend(tmp_path, capsys):
    """A new-user trial: a bench JSON with model_id Qwen/Qwen3-8B anchored a SmolLM2 prediction silently (the
    baseline sets every target forward's time), while --acceptance-from of another model was warned about."""
    raw = json.loads((SAMPLES / "bench_base.json").read_text())
    assert raw["model_id"] == "models/smollm2-135m-instruct"
    other = tmp_path / "qwen_base.json"
    other.write_text(json.dumps({**raw, "model_id": "Qwen/Qwen3-8B"}))
    common = ["--target", "SmolLM2-135M-Instruct", "--hardware", "cpu-2core-avx2", "--precision", "fp32",
              "--acceptance", "0.6"]
    said = f"--baseline-from {other} is a run of Qwen/Qwen3-8B (its model_id), not of the target SmolLM2-135M-Instruct"
    for cmd in (["predict", "--method", "ngram", "-n", "3", "--json"], ["sweep", "--method", "ngram", "-n", "3"],
                ["recommend", "--method", "ngram", "--config-only"]):
        rc, out, err = run([*cmd, *common, "--baseline-from", str(other)], capsys)
        assert rc in (0, 1), err
        text = out + err
        assert said in text, cmd[0]
        if cmd[0] == "predict":
            assert any(w.startswith(said) for w in json.loads(out)["warnings"])
        # the target's own baseline run: no such warning
        rc, out, err = run([*cmd, *common, "--baseline-from", str(SAMPLES / "bench_base.json")], capsys)
        assert rc in (0, 1) and "is a run of" not in out + err, cmd[0]


def test_recommend_serves_a_config_file_target_by_its_directory(tmp_path, capsys, monkeypatch):
    """`vllm serve f32` (the file's stem, taken for a hub id) was printed for `--target f32.json`."""
    d = _write_hf_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lone.json").write_text((d / "config.json").read_text())
    argv = ["recommend", "--method", "ngram", "--acceptance", "0.6", "--hardware", "H100 SXM", "--concurrency", "8"]
    rc, out, _ = run([*argv, "--target", d.name], capsys)
    assert rc == 0 and f"vllm serve {d.resolve()} --tensor-parallel-size" in out
    rc, out, _ = run([*argv, "--target", "lone.json"], capsys)
    assert rc == 0 and "vllm serve '<model directory of lone.json>' --tensor-parallel-size" in out


def test_the_partial_drafting_summary_line_at_n_0_does_not_divide_by_zero():
    """A schedule can give N = 0 at some concurrency: the per-drafted-step line would divide by N."""
    import dataclasses

    p = predict("Qwen3-8B", "ngram", 3, hardware="MI300X", acceptance=0.7, drafted_fraction=0.5)
    assert "per drafted step" in p.summary()
    q = dataclasses.replace(p, num_speculative_tokens=0)
    assert "(MAL - 1) / N" in q.summary() and "per drafted step" not in q.summary()


def test_an_acceptance_file_is_read_once_per_command(capsys, monkeypatch):
    """predict reads --acceptance-from for the acceptance and again for the drafted share: once, so its
    warnings are given once (a two-model scrape warned twice)."""
    import specsim.cli._args as A

    calls = []
    real = A.read_counts
    monkeypatch.setattr(A, "read_counts", lambda *a, **k: calls.append(a) or real(*a, **k))
    argv = ["predict", "--target", "Llama-3.1-8B-Instruct", "--method", "ngram", "-n", "3", "--hardware", "H100 SXM",
            "--acceptance-from", str(NGRAM_BENCH)]
    assert run(argv, capsys)[0] == 0 and len(calls) == 1
    assert run(argv, capsys)[0] == 0 and len(calls) == 2  # a new command reads again


def test_acceptance_from_a_run_of_another_model_is_warned_about_everywhere(capsys):
    """A new-user trial: ``predict --target Qwen3-8B --acceptance-from`` a SmolLM2 self-draft run
    (100 % acceptance) gave 3.03x with no warning, though its bench JSON records model_id.  Now
    predict (also in --json), sweep and recommend warn; the run's own target does not."""
    import json
    from pathlib import Path

    from specsim.cli import main

    run = Path(__file__).resolve().parents[1] / "data" / "runs" / "cpu-validation-20261129T104718-selfdraft-n3-c4"
    acc = ["--acceptance-from", str(run / "bench.json"), "--profile-temperature", "0"]
    assert main(["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--concurrency", "8",
                 *acc, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("is a run of" in w and "smollm2-135m-instruct" in w and "Qwen3-8B" in w for w in out["warnings"])
    scrape = ["--acceptance-from", str(run / "metrics_after.prom"), "--before", str(run / "metrics_before.prom"),
              "--profile-temperature", "0"]
    assert main(["sweep", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--concurrency", "8", *scrape]) == 0
    assert "is a run of" in capsys.readouterr().err
    assert main(["recommend", "--target", "Qwen3-8B", "--method", "eagle3", *acc, "--max-n", "3"]) == 0
    assert "is a run of" in capsys.readouterr().out
    # the run's own target: no such warning
    ngram = run.parent / "cpu-validation-20261129T104718-ngram-n3-c4" / "bench.json"
    assert main(["predict", "--target", "SmolLM2-135M-Instruct", "--method", "ngram", "-n", "3", "--hardware",
                 "cpu-2core-avx2", "--precision", "fp32", "--concurrency", "4", "--isl", "109", "--osl", "115",
                 "--acceptance-from", str(ngram), "--profile-temperature", "0", "--json"]) == 0
    assert not any("is a run of" in w for w in json.loads(capsys.readouterr().out)["warnings"])


@pytest.mark.parametrize("rel", [
    "gl/report.json",  # benchmarks[0].config.backend.model
    "offline/offline_result.json",  # model_name label of the vllm:spec_decode_* counters
    "sweep/results/exp2",  # model_id of run=0.json (max_concurrency=1: the run pooled)
    "sweep/results/exp2/summary.csv",  # its model_id column
    "run/bench_a.log",  # Namespace(... model='models/smollm2-135m-instruct' ...)
    "run/response_detailed.json",  # "model"
    "spec_eval/eval.log",  # GuideLLM's "OpenAIHTTPBackend backend validated with model" line (wrapped)
])
def test_every_format_that_names_its_model_is_read_for_the_model_check(rel):
    """A new-user trial: --acceptance-from's model check covered bench JSON and /metrics only, though these
    formats name the model served too (each names models/smollm2-135m-instruct, read by hand from the file)."""
    from specsim.vllm.detect import measured_models, read_counts

    kind, _ = read_counts(REAL / rel)
    assert measured_models(REAL / rel, kind) == ("models/smollm2-135m-instruct",)


def test_acceptance_from_another_model_is_warned_about_for_every_format_that_names_it(tmp_path, capsys):
    """The same outputs with the model renamed to Qwen/Qwen3-8B (every other byte kept) warn for a SmolLM2
    target; a server log, which names no model, does not."""
    import shutil

    shutil.copytree(REAL, tmp_path / "s")
    for f in (tmp_path / "s").rglob("*"):
        if f.is_file() and f.suffix in (".json", ".csv", ".log"):
            f.write_text(f.read_text().replace("models/smollm2-135m-instruct", "Qwen/Qwen3-8B"))
    base = ["predict", "--target", "SmolLM2-135M-Instruct", "--method", "ngram", "-n", "3", "--hardware",
            "cpu-2core-avx2", "--precision", "fp32", "--profile-temperature", "0", "--json"]
    for rel in ("gl/report.json", "offline/offline_result.json", "sweep/results/exp2", "run/bench_a.log",
                "run/response_detailed.json", "spec_eval/eval.log"):
        path = tmp_path / "s" / rel
        rc, out, err = run([*base, "--acceptance-from", str(path)], capsys)
        assert rc == 0, err
        assert any(w.startswith(f"{path} is a run of Qwen/Qwen3-8B, not of the target SmolLM2-135M-Instruct")
                   for w in json.loads(out)["warnings"]), rel
    for rel in ("run/server_a.log", "spec_eval/acceptance.csv"):  # neither names a model
        rc, out, err = run([*base, "--acceptance-from", str(tmp_path / "s" / rel)], capsys)
        assert rc == 0 and not any("is a run of" in w for w in json.loads(out)["warnings"]), rel


def test_a_recorded_latency_table_of_another_model_is_warned_about(capsys):
    """A new-user trial: ``--latency-table`` a recorded SmolLM2-135M CPU probe for Qwen3-8B on H100
    gave 2.22x with no warning (a median 15.6x the stack's estimate, under the 30x warning then;
    its provenance.json names the model).  Now both the scale and the recorded model are warned
    about, in predict (also --json), sweep and recommend; the probe's own target gets neither."""
    import json
    from pathlib import Path

    from specsim.cli import main

    probe = (Path(__file__).resolve().parents[1] / "data" / "runs" / "cpu-validation-20261129T104718-verify-cost"
             / "verify_cost.csv")
    args = ["--target", "Qwen3-8B", "--method", "eagle3", "--hardware", "H100", "--acceptance", "0.7",
            "--concurrency", "4", "--isl", "412", "--osl", "200", "--latency-table", str(probe)]
    assert main(["predict", *args, "-n", "3", "--json"]) == 0
    w = json.loads(capsys.readouterr().out)["warnings"]
    assert any("was measured on smollm2-135m-instruct" in x and "not on the target Qwen3-8B" in x for x in w), w
    assert any("take a median 15.6x the stack calibration's estimate" in x for x in w), w
    assert main(["sweep", *args, "-n", "3"]) == 0
    assert "was measured on smollm2-135m-instruct" in capsys.readouterr().err
    assert main(["recommend", *args[:6], *args[8:], "--max-n", "3"]) == 0
    assert "was measured on smollm2-135m-instruct" in capsys.readouterr().out
    own = ["--target", "SmolLM2-135M-Instruct", "--method", "ngram", "-n", "3", "--hardware", "cpu-2core-avx2",
           "--precision", "fp32", "--acceptance", "0.5", "--concurrency", "4", "--isl", "384", "--osl", "256",
           "--latency-table", str(probe), "--json"]
    assert main(["predict", *own]) == 0
    w = json.loads(capsys.readouterr().out)["warnings"]
    assert not any("was measured on" in x or "take a median" in x for x in w), w


def test_recommend_fills_isl_osl_from_the_baseline_run_as_predict_and_sweep_do(capsys):
    """A new-user trial: ``recommend --baseline-from`` without --isl/--osl exited 2 ("--isl: differs
    ... (got 1024)"): its parser defaulted them to 1024 where predict and sweep (and the help) take
    the baseline run's.  Now left out, they are the run's mean ISL / OSL; given, they are checked."""
    import json
    from pathlib import Path

    from specsim.cli import main

    r = Path(__file__).resolve().parents[1] / "data" / "runs"
    base = r / "cpu-validation-20261129T104718-baseline-c4" / "bench.json"
    args = ["recommend", "--target", "SmolLM2-135M-Instruct", "--method", "ngram", "--hardware", "cpu-2core-avx2",
            "--precision", "fp32", "--acceptance", "0.5", "--profile-temperature", "0", "--baseline-from", str(base),
            "--max-n", "3", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    b = json.loads(base.read_text())
    n = b["num_prompts"] if "num_prompts" in b else b["completed"]
    assert (out["isl"], out["osl"]) == (round(b["total_input_tokens"] / n), round(b["total_output_tokens"] / n))
    assert main([*args, "--isl", "1024"]) == 2 and "--isl: differs" in capsys.readouterr().err
    assert main(args[:-5] + ["--json"]) == 0 and json.loads(capsys.readouterr().out)["isl"] == 1024  # no baseline


def test_cli_errors_name_the_flag_typed_and_what_the_file_is(tmp_path, capsys):
    """A new-user trial's list: errors named library fields or printed raw OS errors.  Each now names
    the flag (value in its own units) or says what the file is, exit 2, no traceback."""
    from pathlib import Path

    from specsim.cli import main

    run = Path(__file__).resolve().parents[1] / "data" / "runs" / "cpu-validation-20261129T104718-ngram-n3-c4"
    base = ["--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--concurrency", "4"]
    cases = [
        (["predict", *base, "--acceptance", "0.7", "--baseline-tpot-ms", "0.0346"],
         "--baseline-tpot-ms: the measured TPOT 0.035 ms", "(got 0.0346)"),
        (["predict", *base, "--mal", "2.5@0"], "--mal (N of MAL@N): must be >= 1", "2.5@0"),
        (["predict", *base, "--acceptance", "0.7", "--baseline-from", str(tmp_path)],
         "--baseline-from: is a directory", "bench.json"),
        (["sweep", *base, "--acceptance", "0.7", "--out", str(tmp_path)], "--out: cannot write the CSV there", ""),
        (["predict", *base, "--acceptance", "0.7", "--baseline-tpot-ms", "5", "--baseline-tok-per-s", "100"],
         "allowed: --baseline-tpot-ms, --baseline-tok-per-s, --baseline-from", ""),
        (["ingest", str(run / "summary.json")], "is specsim's summary of a recorded run", "metrics_after.prom"),
    ]
    for argv, want, also in cases:
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and want in err and also in err and "Traceback" not in err, (argv, err)


@pytest.mark.parametrize("flag,typed,meant", [
    ("--method", "EAGLE3", "eagle3"), ("--method", "eagel3", "eagle3"), ("--precision", "BF16", "bf16"),
    ("--hardware", "MI300", "MI300X"),
])
def test_a_mistyped_name_gets_the_closest_allowed_one(capsys, flag, typed, meant):
    """vLLM's method strings and specsim's precision names are lower case; the error names the one
    meant before the long allowed list (a new-user trial typed EAGLE3 and BF16)."""
    argv = ["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--acceptance", "0.7", flag, typed]
    rc, out, err = run(argv, capsys)
    assert rc == 2 and out == ""
    assert err.startswith(f"specsim: error: {flag}: ") and f"(got '{typed}'); did you mean '{meant}'?; allowed: " in err
    # nothing close: no suggestion
    rc, _, err = run([*argv[:-1], "zzzzzz"], capsys)
    assert rc == 2 and "did you mean" not in err


@pytest.mark.parametrize("argv", [
    # one letter or digit off is often another real thing: no suggestion (a review)
    ["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--acceptance", "0.7", "--hardware", "MI250X"],
    ["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--acceptance", "0.7", "--precision", "mxfp8"],
    ["recommend", "--target", "Qwen3-8B", "--method", "eagle"],  # vLLM's eagle is not eagle3
])
def test_a_real_name_one_letter_off_gets_no_suggestion(capsys, argv):
    rc, _, err = run(argv, capsys)
    assert rc == 2 and "did you mean" not in err, err


def test_a_flag_left_at_its_default_keeps_the_library_name(capsys):
    """A review: Kimi-K2.5 without --tp was refused as "--tp: ... (got 1)", as if the user had typed it."""
    rc, _, err = run(["predict", "--target", "Kimi-K2.5", "--method", "eagle3", "-n", "3", "--acceptance", "0.7"],
                     capsys)
    assert rc == 2 and err.startswith("specsim: error: tp: "), err
    rc, _, err = run(["predict", "--target", "Kimi-K2.5", "--method", "eagle3", "-n", "3", "--acceptance", "0.7",
                      "--tp", "1"], capsys)
    assert rc == 2 and err.startswith("specsim: error: --tp: "), err


def test_json_carries_vllms_acceptance_rate_and_mal_beside_the_all_step_ones(capsys):
    """A new-user trial: with the drafted share of a real n-gram run applied, --json gave ``mal``
    1.753 and ``acceptance_rate`` 0.251 (over ALL decode steps) and no figure comparable with what
    vLLM reports for the same run.  The file's own numbers (vllm bench serve, n-gram N = 3):
    accepted / draft tokens 672 / 1067 and 1 + accepted / drafts = 1 + 672 / 357."""
    raw = json.loads((REAL / "run" / "bench_a.json").read_text())
    rc, out, _ = run(["predict", "--acceptance-from", str(REAL / "run" / "bench_a.json"), "--target",
                      "SmolLM2-135M-Instruct", "--method", "ngram", "-n", "3", "--hardware", "cpu-2core-avx2",
                      "--precision", "fp32", "--concurrency", "4", "--isl", "256", "--osl", "64",
                      "--profile-temperature", "0", "--json"], capsys)
    assert rc == 0
    d = json.loads(out)
    assert d["accepted_per_proposed_token"] == pytest.approx(672 / 1067, rel=1e-9)
    assert d["accepted_per_proposed_token"] == pytest.approx(raw["spec_decode_acceptance_rate"] / 100, rel=1e-9)
    assert d["mal_per_drafted_step"] == pytest.approx(1 + 672 / 357, rel=1e-9)
    assert d["mal_per_drafted_step"] == pytest.approx(raw["spec_decode_acceptance_length"], rel=1e-9)
    assert d["acceptance_rate"] == pytest.approx((d["mal"] - 1) / 3, rel=1e-12) and d["acceptance_rate"] < 0.3
    # every step drafting N: the two views coincide
    rc, out, _ = run(["predict", "--target", "Qwen3-8B", "--method", "eagle3", "-n", "3", "--acceptance", "0.7",
                      "--json"], capsys)
    d = json.loads(out)
    assert d["mal_per_drafted_step"] == pytest.approx(d["mal"]) and \
        d["accepted_per_proposed_token"] == pytest.approx(d["acceptance_rate"])


def test_a_baseline_run_without_decode_steps_is_refused_naming_the_file(capsys, tmp_path):
    """A review: a baseline whose mean output length rounds to 1 was refused as "osl: must be ..." (or,
    with --osl 64, told to give --osl 1, which is refused): no flag or file named the cause."""
    raw = json.loads((REAL / "run" / "bench_a.json").read_text())
    base = {k: v for k, v in raw.items() if not k.startswith("spec_decode")}
    base["total_output_tokens"] = base["completed"]  # one output token per request
    f = tmp_path / "one_token.json"
    f.write_text(json.dumps(base))
    for extra in ([], ["--osl", "64"]):
        rc, _, err = run(["predict", "--target", "SmolLM2-135M-Instruct", "--method", "ngram", "-n", "3",
                          "--hardware", "cpu-2core-avx2", "--precision", "fp32", "--acceptance", "0.7",
                          "--baseline-from", str(f), *extra], capsys)
        assert rc == 2 and err.startswith("specsim: error: --baseline-from.total_output_tokens: "), err
        assert "mean OSL of 1" in err and "--osl 1" not in err


def test_baseline_from_an_appended_file_says_what_to_do_on_the_command_line(capsys):
    """A new-user trial: --baseline-from a --append-result file (two runs) answered with the library's
    hint (read_bench_results / index=), which the command line has no flag for."""
    f = REAL / "run" / "bench_appended.json"
    rc, _, err = run(["predict", "--target", "SmolLM2-135M-Instruct", "--method", "ngram", "-n", "3", "--hardware",
                      "cpu-2core-avx2", "--precision", "fp32", "--acceptance", "0.7", "--baseline-from", str(f)], capsys)
    assert rc == 2 and err.startswith("specsim: error: --baseline-from: holds 2 results"), err
    assert "index=" not in err and "sed -n Np" in err


def test_a_latency_table_whose_q_rows_fall_below_q1_is_warned_and_break_even_below_1_explained(capsys):
    """The ingest trial: a recorded CPU probe printed "break-even MAL 0.988" with no word.  The recorded
    probe 20261202T052250 times q = 4 at 32.38 ms and q = 1 at 39.93 ms (batch 1, its file): read
    literally, verifying 4 tokens is 19 % cheaper than decoding 1, which the prediction credits to
    speculation."""
    import pandas as pd

    d = Path(__file__).resolve().parents[1] / "data" / "runs" / "cpu-validation-fast-20261202T052250-verify-cost"
    t = pd.read_csv(d / "verify_cost.csv")
    q1, q4 = (float(t[(t.batch == 1) & (t.q == q)].seconds.iloc[0]) for q in (1, 4))
    assert q4 < q1 * 0.95
    argv = ["predict", "--target", "SmolLM2-135M-Instruct", "--method", "ngram", "-n", "3", "--hardware",
            "cpu-2core-avx2", "--precision", "fp32", "--acceptance", "0.7", "--latency-table",
            str(d / "verify_cost.csv"), "--isl", "480", "--osl", "64"]
    rc, out, _ = run([*argv, "--concurrency", "1"], capsys)
    assert rc == 0
    assert f"(q = N + 1: {q4 * 1e3:.4g} ms) is timed faster than its decode forward (q = 1: {q1 * 1e3:.4g} ms)" in out
    assert "below 1: the speculative step is timed no dearer than the baseline step" in out
    rc, out, _ = run([*argv, "--concurrency", "16"], capsys)  # q rows ascend at batch 16: no such warning
    assert rc == 0 and "timed faster than its decode forward" not in out and "below 1:" not in out


def test_a_baseline_run_with_failed_requests_is_warned_about(capsys, tmp_path):
    """The ingest trial: a baseline run with 8 of 16 requests failed anchored the prediction with no word."""
    raw = json.loads((REAL / "run" / "bench_a.json").read_text())
    base = {k: v for k, v in raw.items() if not k.startswith("spec_decode")}
    assert base["failed"] == 0
    ok, bad = tmp_path / "ok.json", tmp_path / "failed.json"
    ok.write_text(json.dumps(base))
    bad.write_text(json.dumps({**base, "failed": 8, "completed": 8}))
    argv = ["--target", "SmolLM2-135M-Instruct", "--method", "ngram", "--hardware", "cpu-2core-avx2", "--precision",
            "fp32", "--acceptance", "0.7"]
    rc, out, _ = run(["predict", *argv, "-n", "3", "--baseline-from", str(bad)], capsys)
    assert rc == 0 and "had 8 failed request(s) beside 8 completed" in out
    rc, out, _ = run(["predict", *argv, "-n", "3", "--baseline-from", str(ok)], capsys)
    assert rc == 0 and "failed request" not in out
    rc, _, err = run(["sweep", *argv, "-n", "1,3", "--baseline-from", str(bad)], capsys)
    assert rc == 0 and "had 8 failed request(s)" in err


def test_sweep_rows_carry_vllms_per_drafted_step_figures_as_predict_does():
    """predict gained vLLM's per-drafted-step MAL and acceptance rate; sweep's rows had only the all-step ones."""
    from specsim.predict import predict, sweep

    kw = dict(hardware="cpu-2core-avx2", precision="fp32", acceptance=0.7, drafted_fraction=0.4,
              mean_proposal_tokens=2.5, concurrency=[4])
    df = sweep("SmolLM2-135M-Instruct", "ngram", num_speculative_tokens=[3, 5], **kw)
    for row in df.itertuples():
        p = predict("SmolLM2-135M-Instruct", "ngram", int(row.num_speculative_tokens), **{**kw, "concurrency": 4})
        assert row.mal_per_drafted_step == pytest.approx(p.mal_per_drafted_step, rel=1e-12)
        assert row.accepted_per_proposed_token == pytest.approx(p.accepted_per_proposed_token, rel=1e-12)
    full = sweep("Qwen3-8B", "eagle3", num_speculative_tokens=[3], acceptance=0.7)
    assert full["mal_per_drafted_step"].iloc[0] == pytest.approx(full["mal"].iloc[0])
    assert full["accepted_per_proposed_token"].iloc[0] == pytest.approx(full["acceptance_rate"].iloc[0])


def test_a_gzipped_baseline_file_is_named_as_gzip(capsys, tmp_path):
    """The ingest fix named gzip for ingest / --acceptance-from; --baseline-from still said "not a text file"."""
    import gzip

    raw = json.loads((REAL / "run" / "bench_a.json").read_text())
    f = tmp_path / "base.json.gz"
    f.write_bytes(gzip.compress(json.dumps({k: v for k, v in raw.items() if not k.startswith("spec_decode")}).encode()))
    rc, _, err = run(["predict", "--target", "SmolLM2-135M-Instruct", "--method", "ngram", "-n", "3", "--hardware",
                      "cpu-2core-avx2", "--precision", "fp32", "--acceptance", "0.7", "--baseline-from", str(f)], capsys)
    assert rc == 2 and "gzip-compressed" in err and "gunzip base.json.gz" in err, err


SMOL = ["--target", "SmolLM2-135M-Instruct", "--method", "ngram", "--hardware", "cpu-2core-avx2", "--precision", "fp32",
        "--concurrency", "4", "--acceptance", "0.8"]


def test_sweep_refuses_mean_proposal_tokens_above_n_and_its_json_rows_carry_it(capsys):
    """A new-user trial: sweep -n 3 --mean-proposal-tokens 5 exited 0 with the numbers of no flag (clamped to N)
    where predict refuses it, and sweep --json rows read "mean_proposal_tokens" null (jq) though 2 changed them."""
    rc, _, err = run(["predict", *SMOL, "-n", "3", "--mean-proposal-tokens", "5"], capsys)
    assert rc == 2 and "--mean-proposal-tokens: must be <= N = 3, the proposal length used at concurrency 4" in err
    rc, out, err = run(["sweep", *SMOL, "-n", "3", "--mean-proposal-tokens", "5"], capsys)
    assert rc == 2 and out == "" and err.startswith(
        "specsim: error: --mean-proposal-tokens: must be <= N = 3, the smallest proposal length swept"), err
    rc, _, err = run(["sweep", *SMOL, "-n", "1,3", "--mean-proposal-tokens", "2"], capsys)
    assert rc == 2 and "--mean-proposal-tokens: must be <= N = 1, the smallest proposal length swept " \
                       "(num_speculative_tokens 1, 3;" in err and "sweep only N >= 2" in err, err
    rc, out, _ = run(["sweep", *SMOL, "-n", "3", "--mean-proposal-tokens", "2", "--json"], capsys)
    (row,) = json.loads(out)
    rc_p, out_p, _ = run(["predict", *SMOL, "-n", "3", "--mean-proposal-tokens", "2", "--json"], capsys)
    pred = json.loads(out_p)
    assert rc == rc_p == 0 and row["mean_proposal_tokens"] == pred["mean_proposal_tokens"] == 2.0
    assert row["drafted_fraction"] == pred["drafted_fraction"] == 1.0
    assert row["throughput_ratio"] == pytest.approx(pred["throughput_ratio"], rel=1e-12)


def test_sweep_warns_on_stderr_where_the_kv_cache_does_not_fit_as_predict_does(capsys):
    """A new-user trial: sweep --concurrency 100000,1000000000 printed a kv_cache_fits False column and no warning,
    while predict at 100000 warned that the KV cache does not fit (fits up to concurrency 537)."""
    argv = ["--target", "Qwen3-8B", "--method", "eagle3", "--acceptance", "0.8", "-n", "3"]
    rc, out, _ = run(["predict", *argv, "--concurrency", "100000"], capsys)
    assert rc == 0 and ("KV cache for concurrency 100000 x 2048 tokens does not fit on MI300X at TP=1 (fits up to "
                        "concurrency 537): vLLM would queue or preempt") in out
    rc, out, err = run(["sweep", *argv, "--concurrency", "100000,1000000000"], capsys)
    assert rc == 0 and "kv_cache_fits" in out.splitlines()[0]
    assert ("specsim: WARNING: Qwen3-8B (bf16), eagle3: KV cache for concurrency 100000, 1000000000 x 2048 tokens does "
            "not fit on MI300X at TP=1 (fits up to concurrency 537): vLLM would queue or preempt, so these "
            "concurrencies are not reached (kv_cache_fits False)\n") in err, err
    assert err.count("KV cache") == 1


def test_sweep_says_on_stderr_that_a_draft_is_derived_from_the_target_as_predict_does(capsys):
    """A new-user trial: sweep --draft nonexistent-draft exited 0 with nothing said, where predict lists the
    assumption that the draft's structure is DERIVED from the target."""
    argv = ["--target", "Qwen3-8B", "--method", "eagle3", "--acceptance", "0.8", "--draft", "nonexistent-draft"]
    note = "assumed: draft checkpoint nonexistent-draft is not in specsim's catalog and its config is not available " \
           "here: its structure is DERIVED from the target"
    rc, out, _ = run(["predict", *argv, "-n", "3"], capsys)
    assert rc == 0 and note in out
    rc, _, err = run(["sweep", *argv, "-n", "1,3", "--concurrency", "4", "--hardware", "MI300X,H100"], capsys)
    assert rc == 0 and f"specsim: WARNING: {note}" in err and err.count("nonexistent-draft") == 1, err


def test_sweep_out_with_json_prints_the_json_on_stdout_and_the_note_on_stderr(tmp_path, capsys):
    """A new-user trial: sweep --out FILE --json wrote the CSV and printed "wrote N rows" on stdout, ignoring --json
    (`| jq` broke).  As reproduce --out DIR --json, both are honoured: the CSV is written, stdout is the JSON."""
    out = tmp_path / "sweep.csv"
    argv = ["sweep", *BASE, "--n", "1,3", "--concurrency", "4,8", "--acceptance", "0.7", "--profile-temperature", "0"]
    rc, stdout, err = run([*argv, "--out", str(out), "--json"], capsys)
    assert rc == 0 and f"wrote 4 rows to {out}\n" in err
    rows = json.loads(stdout)  # nothing but the JSON on stdout
    rc, alone, _ = run([*argv, "--json"], capsys)
    assert rc == 0 and json.loads(alone) == rows
    df = pd.read_csv(out)
    assert [(r["num_speculative_tokens"], r["concurrency"]) for r in rows] == [(1, 4), (1, 8), (3, 4), (3, 8)]
    assert df["throughput_ratio"].tolist() == pytest.approx([r["throughput_ratio"] for r in rows], rel=1e-12)
    rc, stdout, err = run([*argv, "--out", str(out)], capsys)  # without --json: the note on stdout, as before
    assert rc == 0 and stdout == f"wrote 4 rows to {out}\n" and "wrote" not in err
    helps = {a.dest: a.help for a in _sweep_parser()._actions}
    assert "with --json that note goes to stderr and stdout has the JSON" in helps["out"]
    assert "with --out the CSV is written as well" in helps["json"]


def _sweep_parser():
    import argparse

    from specsim.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices["sweep"]


def test_sweep_hardware_help_says_it_takes_a_comma_separated_grid_of_names_or_aliases(capsys):
    """A new-user trial: sweep --help said --hardware is "a name ... or a JSON spec file", but --hardware MI300X,H100
    sweeps both and H100 is read as "H100 SXM".  The help now says both, and what it says holds."""
    from specsim.hardware import load_hardware

    text = " ".join(_sweep_parser().format_help().split())
    assert ("--hardware HARDWARE accelerators, comma-separated to sweep several (e.g. MI300X,H100: one set of rows "
            "each, a hardware named twice refused); each a name or alias in specsim/data/hardware.csv, "
            "case-insensitive (H100 = H100 SXM, B200 = B200 SXM, mi300x = MI300X), or a JSON spec file of its "
            "columns") in text
    assert [load_hardware(a).name for a in ("H100", "B200", "mi300x")] == ["H100 SXM", "B200 SXM", "MI300X"]
    rc, out, _ = run(["sweep", "--target", "Qwen3-8B", "--method", "eagle3", "--acceptance", "0.7", "-n", "3",
                      "--hardware", "MI300X,H100", "--concurrency", "4", "--json"], capsys)
    assert rc == 0 and [r["hardware"] for r in json.loads(out)] == ["MI300X", "H100 SXM"]


def test_the_drafted_share_warning_names_no_method_as_none(capsys):
    """The review: with a --speculative-config that gives no method (vLLM infers it from the model), the warning
    said 'None drafts on every step'."""
    cfg = json.dumps({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3})
    _, _, err = run(["predict", "--target", "Llama-3.1-8B-Instruct", "--hardware", "H100 SXM", "--concurrency", "1",
                     "--speculative-config", cfg, "--acceptance-from", str(NGRAM_BENCH), "--json"], capsys)
    assert "None drafts" not in err and "the method predicted drafts on every step" in err, err
