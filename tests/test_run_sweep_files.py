"""Matrices as ``vllm bench sweep`` parameter files + specsim's sidecar (specsim.runs.sweep_files).

The shipped matrices are checked against the runs they recorded (data/runs: the same run ids,
prompts, concurrencies, temperatures, speculative configs); every refusal names its field; the
command a record gives is the command vLLM's own sweep gives (checked in the vLLM environment).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specsim.catalog import project_data_path, project_dir
from specsim.cli import main as cli_main
from specsim.errors import SpecsimValueError
from specsim.runs.matrix import Matrix, ServerEntry, SpecConfig
from specsim.runs.provenance import VllmInstall
from specsim.runs.sweep_files import (
    BENCH_CLIENT_START_S,
    PERSISTENT_OVERHEAD_S,
    SIDECAR_KEYS,
    apply_record,
    dry_run_json,
    dry_run_text,
    estimate_seconds,
    load_matrix,
    matrix_names,
    matrix_to_sweep_files,
    server_layout,
)
from specsim.runs.vllm_args import (
    BENCH_SERVE_OPTIONAL_VALUE,
    BENCH_SERVE_OPTIONS,
    BENCH_SERVE_SEVERAL_VALUES,
    SERVE_OPTIONAL_VALUE,
    SERVE_OPTIONS,
    SERVE_SEVERAL_VALUES,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ is no package: any import mode
from vllm_env import vllm_python  # noqa: E402

RECORDED_STAMP = "cpu-validation-20261129T104718"


def test_shipped_matrices_are_sweep_files():
    assert matrix_names() == ["cpu-validation", "cpu-validation-fast", "smoke", "verify-cost"]
    m = load_matrix("cpu-validation")
    assert len(m.groups) == 12 and len(m.cells()) == 42 and m.n_runs() == 44
    assert m.groups[0].name == "baseline"  # the greedy judge's reference runs first
    assert [h.name for h in m.health_checks] == ["selfdraft-t0.8-health"]
    # the T=0.8 baseline exists only as the reference of the T=0.8 spec runs: skipped with them
    assert m.health_guards["selfdraft-t0.8-health"] == ("ngram-n3/t0.8-*", "baseline/t0.8-*")
    guarded = sorted(c.run_label for c in m.cells() if c.guarded_by)
    assert guarded == ["baseline-t0.8-c1", "baseline-t0.8-c16", "baseline-t0.8-c4", "ngram-n3-t0.8-c1",
                       "ngram-n3-t0.8-c16", "ngram-n3-t0.8-c4"]
    assert m.bench_client == "persistent"
    judged = {c.run_label for c in m.cells() if c.baseline == "baseline"}
    assert len(judged) == 33 and not any(lab.startswith("baseline") or "t0.8" in lab for lab in judged)
    # every file is vLLM's format: a {name: record} object of vLLM options only
    for f in m.files[1:]:
        d = json.loads((m.root / f).read_text())
        assert isinstance(d, dict) and all(isinstance(v, dict) for v in d.values())
        assert not any(k.startswith("_") for v in d.values() for k in v)


def test_fast_loop_is_the_full_matrix_with_less_traffic():
    """make validate-cpu's matrix: the same servers, judges, guards, prompts file, seeds and timeouts
    as cpu-validation; less traffic only: output length 64 (vs 128), 2 prompts at concurrency 1 and 4 at
    concurrency 4 (vs 4 and 8), a health check on 4 prompts (vs 8).  Same server command and env: vLLM's
    three-process layout (a two-process one measured a different system: data/runs-superseded/README.md)."""
    import dataclasses

    full, fast = load_matrix("cpu-validation"), load_matrix("cpu-validation-fast")
    assert [(g.name, g.speculative_config) for g in fast.groups] == [(g.name, g.speculative_config)
                                                                      for g in full.groups]
    assert fast.health_checks == tuple(dataclasses.replace(h, num_prompts=4) for h in full.health_checks)
    assert fast.probes == full.probes
    assert fast.health_guards == full.health_guards and fast.bench_client == full.bench_client
    # the fast loop starts its servers two at a time (benches still one server at a time)
    assert (full.concurrent_server_starts, fast.concurrent_server_starts) == (1, 2)
    a = {c.run_label: c for c in full.cells()}
    b = {c.run_label: c for c in fast.cells()}
    assert set(a) == set(b)
    for lab, c in b.items():
        f = a[lab]
        assert (c.temperature, c.concurrency, c.seed, c.timeout_s, c.baseline, c.guarded_by) == \
            (f.temperature, f.concurrency, f.seed, f.timeout_s, f.baseline, f.guarded_by), lab
        assert (f.output_len, c.output_len) == (128, 64), lab
        assert (f.num_prompts, c.num_prompts) == {1: (4, 2), 4: (8, 4), 16: (16, 16)}[c.concurrency], lab
    assert full.serve_cmd == fast.serve_cmd and dict(full.env) == dict(fast.env) == {}
    assert server_layout(fast.serve_cmd, fast.env) == "three-process"
    fb = list(full.bench_cmd)
    i = fb.index("--custom-output-len")
    assert fb[i + 1] == "128"
    fb[i + 1] = "64"
    assert tuple(fb) == tuple(fast.bench_cmd)


def test_shipped_cpu_validation_reproduces_the_recorded_cells():
    """The files give exactly the cells the Python matrix recorded on 2026-11-29 (run ids, prompts,
    concurrency, temperature, output length, speculative config)."""
    runs = project_data_path("runs")
    rec = {}
    for p in runs.glob(f"{RECORDED_STAMP}-*"):
        prov = json.loads((p / "provenance.json").read_text())
        if prov.get("kind") == "bench_serve":
            rec[p.name[len(RECORDED_STAMP) + 1:]] = prov
    m = load_matrix("cpu-validation")
    cells = {c.run_label: (g, c) for g in m.groups for c in g.cells}
    assert set(cells) == set(rec) and len(rec) == 42
    for lab, (g, c) in cells.items():
        p = rec[lab]
        assert (c.label, g.name, c.temperature, c.concurrency, c.num_prompts, c.output_len) == \
            (p["label"], p["spec_label"], p["temperature"], p["concurrency"], p["num_prompts"], p["output_len"]), lab
        assert g.spec.method == p["method"] and g.spec.num_speculative_tokens == p["num_speculative_tokens"]
        want = p["speculative_config"]
        if want and "model" in want:  # recorded as an absolute path of the recording checkout
            want = {**want, "model": str(project_dir() / "models" / Path(want["model"]).name)}
        assert (dict(g.speculative_config) if g.speculative_config else None) == want, lab


def _matrix_dir(tmp_path, sidecar=None, serve=None, bench=None) -> Path:
    src = project_data_path("matrices", "smoke")
    d = tmp_path / "m"
    shutil.copytree(src, d)
    for name, obj in (("specsim.json", sidecar), ("serve_params.json", serve), ("bench_params.json", bench)):
        if obj is not None:
            base = json.loads((d / name).read_text())
            base.update(obj) if isinstance(obj, dict) else None
            (d / name).write_text(json.dumps(obj if isinstance(obj, list) else base))
    return d


@pytest.mark.parametrize("where,patch,field,allowed", [
    ("serve", {"ngram-n3": {"max_num_seq": 4}}, "serve_params.json['ngram-n3'].max_num_seq", ["max-num-seqs"]),
    ("serve", {"ngram-n3": {"dtype": "fp33"}}, "serve_params.json['ngram-n3'].dtype", ["float32", "bfloat16"]),
    ("serve", {"ngram-n3": {"_specsim_timeout_s": 5}}, "serve_params.json['ngram-n3']._specsim_timeout_s",
     ["timeout_s", "seed"]),
    ("serve", {"ngram-n3": {"port": 9000}}, "serve_params.json['ngram-n3'].port", None),
    ("serve", {"ngram-n3": {"enforce_eager": "yes"}}, "serve_params.json['ngram-n3'].enforce_eager", [True, False]),
    ("serve", {"ngram-n3": {"speculative_config": {"method": "ngramz", "num_speculative_tokens": 3}}},
     "serve record 'ngram-n3': speculative_config.method", ["ngram", "eagle3", "draft_model"]),
    ("bench", {"c4": {"max_concurrency": "four"}}, "bench_params.json['c4'].max_concurrency", None),
    ("bench", {"c4": {"dataset_name": "customs"}}, "bench_params.json['c4'].dataset_name", ["custom", "random"]),
    ("sidecar", {"timeout": 5}, "timeout", list(SIDECAR_KEYS)),
    ("sidecar", {"platform": "tpu"}, "platform", ["auto", "cpu", "cuda", "rocm"]),
    ("sidecar", {"baseline": "base"}, "baseline", ["baseline", "ngram-n3"]),
    ("sidecar", {"timeout_s": -1}, "timeout_s", None),
    ("sidecar", {"timeout_s": True}, "timeout_s", None),  # JSON true: was taken as a 1 s timeout
    ("sidecar", {"timeout_s": "600"}, "timeout_s", None),
    ("sidecar", {"cells": {"ngram-n3/c4": {"timeout_s": True}}}, "cells['ngram-n3/c4'].timeout_s", None),
    ("sidecar", {"cells": {"ngram-n3/c4": {"timeout": 1}}}, "cells['ngram-n3/c4'].timeout", ["timeout_s", "seed"]),
    ("sidecar", {"cells": {"nothing/*": {"seed": 1}}}, "cells['nothing/*']", None),
    ("sidecar", {"bench_cmd": "vllm bench serve --model models/smollm2-135m-instruct --result-dir x"},
     "bench_cmd.vllm bench serve: --result-dir", None),
    ("sidecar", {"serve_cmd": "vllm serve models/no-such-model --dtype float32"}, "serve_cmd (model)", None),
])
def test_unknown_keys_and_values_are_refused_naming_the_field(tmp_path, where, patch, field, allowed):
    d = _matrix_dir(tmp_path, **{where: patch})
    with pytest.raises(SpecsimValueError) as ei:
        load_matrix(d)
    assert ei.value.field == field, str(ei.value)
    if allowed is not None:
        assert set(allowed) <= set(map(type(allowed[0]), ei.value.allowed or [])), ei.value.allowed


@pytest.mark.parametrize("where,patch,says", [
    ("serve", {"ngram-n3": {"max_concurrency": 4}},
     "not an option of `vllm serve` in vLLM 0.32 (it is an option of `vllm bench serve`: it belongs in the "
     "bench parameter file)"),
    ("bench", {"c4": {"max_num_seqs": 4}},
     "not an option of `vllm bench serve` in vLLM 0.32 (it is an option of `vllm serve`: it belongs in the "
     "serve parameter file)"),
    ("bench", {"c4": {"num_prompts": None}},
     "--num-prompts takes an int value, not null (leave the key out for vLLM's default)"),
])
def test_a_misplaced_option_or_a_null_says_what_to_do(tmp_path, where, patch, says):
    """A bench option in the serve file said only "not an option of `vllm serve`", and a null value
    "takes a int value" without what it got."""
    with pytest.raises(SpecsimValueError) as ei:
        load_matrix(_matrix_dir(tmp_path, **{where: patch}))
    assert says in str(ei.value), str(ei.value)


def test_refused_before_any_server_starts(tmp_path):
    """run_matrix checks the files before it looks for vLLM: a bad file is a SpecsimValueError even
    with no vLLM environment at all."""
    from specsim.runs.runner import run_matrix

    d = _matrix_dir(tmp_path, serve={"ngram-n3": {"max_num_seq": 4}})
    with pytest.raises(SpecsimValueError, match="max_num_seq.*not an option of `vllm serve`"):
        run_matrix(d, install=VllmInstall(tmp_path / "no-venv"), runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_list_form_link_vars_and_dotted_keys(tmp_path):
    d = _matrix_dir(tmp_path)
    (d / "serve_params.json").write_text(json.dumps([
        {"max_num_seqs": 4}, {"max_num_seqs": 8, "speculative_config.method": "ngram",
                              "speculative_config.num_speculative_tokens": 2}]))
    (d / "bench_params.json").write_text(json.dumps([
        {"max_concurrency": 4, "num_prompts": 4}, {"max_concurrency": 8, "num_prompts": 8}]))
    sc = json.loads((d / "specsim.json").read_text())
    sc["sweeps"][0]["link_vars"] = "max_num_seqs=max_concurrency"
    sc["bench_cmd"] += " --temperature 0"  # a cell must give its temperature (not in the records: their names)
    del sc["baseline"]
    (d / "specsim.json").write_text(json.dumps(sc))
    m = load_matrix(d)
    # vLLM names list records by their parameters; link_vars keeps 2 of the 4 combinations
    assert [c.run_label for c in m.cells()] == ["max_num_seqs_4-max_concurrency_4-num_prompts_4",
                                                "max_num_seqs_8-speculative_config.method_ngram-speculative_config."
                                                "num_speculative_tokens_2-max_concurrency_8-num_prompts_8"]
    assert m.groups[1].speculative_config == {"method": "ngram", "num_speculative_tokens": 2}


def test_estimate_uses_recorded_run_times(tmp_path):
    m = load_matrix("cpu-validation")
    est = estimate_seconds(m)
    s, basis = est.cells["baseline-c1"]
    provs = [json.loads((p / "provenance.json").read_text())
             for p in project_data_path("runs").glob("cpu-validation-2026112*-baseline-c1")]
    # the matrix uses the persistent bench client: a recorded run counts as its traffic + 1 s
    rec = [p["summary"]["duration_s"] + PERSISTENT_OVERHEAD_S for p in provs]
    assert basis == "same cell" and len(rec) == 2 and s == pytest.approx(sum(rec) / 2)
    assert s < min(p["bench_seconds"] for p in provs) - 5  # the ~9 s process start is gone
    assert est.server_basis == "recorded, same layout" and 20 < est.server_start_s < 35
    tot = est.total_seconds(m)
    assert 15 * 60 < tot < 30 * 60  # the recorded invocation took 28 min with a process per bench
    text = dry_run_text(m, est)
    assert "12 server(s), 42 bench cell(s), 1 health check(s), 1 probe(s)" in text
    assert all(c.run_label in text for c in m.cells())
    assert "device-hours" in text and "vllm bench sweep serve --serve-cmd" in text
    # where to run it: the commands name models/... and data/... relative to the checkout (a new-user trial
    # pasted one elsewhere)
    assert f"(no judges, probes or provenance; the model and prompts as resolved; run from " \
           f"{project_data_path().parent}, where relative paths in the parameter files resolve):" in text
    # the model and prompts as resolved (--models-dir included): the command runs from anywhere (a second
    # trial: with --models-dir it still printed models/..., which a fresh clone does not have)
    m = load_matrix("smoke", models_dir=tmp_path / "elsewhere", check_paths=False)
    cmd = m.vllm_sweep_commands()[0]
    assert f"vllm serve {tmp_path / 'elsewhere' / 'smollm2-135m-instruct'} --dtype" in cmd
    assert f"--model {tmp_path / 'elsewhere' / 'smollm2-135m-instruct'} --dataset-name" in cmd
    assert f"--dataset-path {project_data_path('prompts', 'humaneval_custom.jsonl')} " in cmd


def test_the_estimate_counts_runs_not_an_invocation_s_manifest_or_summary(tmp_path):
    """The dry run's "from N recorded runs" counted each invocation's manifest and summary records."""
    runs = tmp_path / "runs"
    src = project_data_path("runs")
    names = ["cpu-validation-20261129T104718-baseline-c1", "cpu-validation-20261129T104718-verify-cost",
             "cpu-validation-20261129T104718-manifest", "cpu-validation-20261129T104718-summary"]
    for name in names:
        (runs / name).mkdir(parents=True)
        shutil.copy(src / name / "provenance.json", runs / name)
    kinds = [json.loads((runs / n / "provenance.json").read_text())["kind"] for n in names]
    assert kinds == ["bench_serve", "verify_cost", "manifest", "summary"]
    est = estimate_seconds(load_matrix("cpu-validation"), runs_dir=runs)
    # the two runs here, and (for the parts they have no record like) the checkout's runs, counted alike
    provs = [json.loads((p / "provenance.json").read_text()) for p in src.iterdir()
             if not p.name.startswith(".") and (p / "provenance.json").is_file()]
    checkout_runs = [v for v in provs
                     if v.get("status") in ("ok", "invalid") and v.get("kind") not in ("manifest", "summary")]
    assert est.source == str(runs) and f"from the {len(checkout_runs)} in {src}" in est.source_note
    assert est.n_recorded == 2 + len(checkout_runs) < 2 + len(provs) and est.n_borrowed == len(checkout_runs)
    # the text counts the runs directory's own runs there, and the borrowed ones where they are (a new-user
    # trial read "from 719 recorded runs in DIR" of a directory holding 5)
    text = dry_run_text(load_matrix("cpu-validation"), est)
    assert f"from 2 recorded runs in {runs} (" in text, text
    assert f"with no record like them there from the {len(checkout_runs)} in {src})" in text, text


def test_server_layout_is_two_processes_only_with_uni_and_multiprocessing_off():
    """vllm/platforms/cpu.py replaces uni by mp unless VLLM_ENABLE_V1_MULTIPROCESSING is 0."""
    serve = ["vllm", "serve", "m", "--enforce-eager"]
    off = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert server_layout([*serve, "--distributed-executor-backend", "uni"], off) == "two-process"
    assert server_layout([*serve, "--distributed-executor-backend=uni"], off) == "two-process"
    assert server_layout([*serve, "--distributed-executor-backend", "uni"], {}) == "three-process"
    assert server_layout([*serve, "--distributed-executor-backend", "uni"],
                         {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}) == "three-process"
    assert server_layout([*serve, "--distributed-executor-backend", "mp"], off) == "three-process"
    assert server_layout(serve, off) == "three-process"


SUPERSEDED = project_data_path("runs-superseded")
TWO_PROCESS_STAMP = "20261201T202156"  # the cpu-validation-fast invocation with a two-process server


def _two_process_matrix(tmp_path):
    """cpu-validation-fast as that invocation ran it: ``--distributed-executor-backend uni`` and
    VLLM_ENABLE_V1_MULTIPROCESSING=0 in its env."""
    d = tmp_path / "m"
    shutil.copytree(project_data_path("matrices", "cpu-validation-fast"), d)
    sc = json.loads((d / "specsim.json").read_text())
    sc["serve_cmd"] += " --distributed-executor-backend uni"
    sc["env"] = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    (d / "specsim.json").write_text(json.dumps(sc))
    return load_matrix(d)


def test_vllm_sweep_commands_carry_the_matrix_env(tmp_path):
    m = _two_process_matrix(tmp_path)
    cmds = m.vllm_sweep_commands()
    assert len(cmds) == 2 and all(c.startswith("VLLM_ENABLE_V1_MULTIPROCESSING=0 vllm bench sweep serve --serve-cmd ")
                                  and "--distributed-executor-backend uni" in c for c in cmds)
    assert all(c.startswith("vllm bench sweep serve ") for c in load_matrix("cpu-validation-fast").vllm_sweep_commands())



def test_vllm_sweep_commands_are_those_of_the_matrix_as_loaded(tmp_path):
    """The sweeps' files and ``--link-vars`` come from the sidecar as :func:`load_matrix` read it, not from the
    file as it is when the commands are asked for (they read the sidecar again, after it may have changed)."""
    from specsim.runs.sweep_files import resolve_matrix

    d = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), d)
    serve = json.loads((d / "serve_params.json").read_text())
    (d / "serve_params.json").write_text(json.dumps({k: {**v, "max_num_seqs": 4} for k, v in serve.items()}))
    sc = json.loads((d / "specsim.json").read_text())
    sc["sweeps"][0]["link_vars"] = "max_num_seqs=max_concurrency"
    (d / "specsim.json").write_text(json.dumps(sc))
    m = load_matrix(d)
    (cmd,) = m.vllm_sweep_commands()
    assert cmd.endswith(f"--serve-params {d / 'serve_params.json'} --bench-params {d / 'bench_params.json'} "
                        "--link-vars max_num_seqs=max_concurrency"), cmd
    sc["sweeps"] = [{"serve_params": "other.json", "bench_params": "bench_params.json"}]
    (d / "specsim.json").write_text(json.dumps(sc))
    assert m.vllm_sweep_commands() == [cmd]

def test_estimate_takes_server_starts_and_judges_from_the_matrix_layout(tmp_path):
    """Records of cpu-validation-fast in both layouts (the recorded matrix files' ``env`` says which): a
    two-process matrix is estimated from the two-process records, the shipped one from the others."""
    runs = tmp_path / "runs"
    provs = {True: [], False: []}
    for src in [*SUPERSEDED.glob(f"cpu-validation-fast-{TWO_PROCESS_STAMP}-*"),
                *project_data_path("runs").glob("cpu-validation-fast-*")]:
        if (src / "provenance.json").is_file():
            (runs / src.name).mkdir(parents=True)
            shutil.copy(src / "provenance.json", runs / src.name)
            p = json.loads((src / "provenance.json").read_text())
            env = p["matrix"]["files"]["specsim.json"].get("env") or {}
            provs[env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"].append(p)
    two_m = _two_process_matrix(tmp_path)
    for two, m in ((True, two_m), (False, load_matrix("cpu-validation-fast"))):
        ok = [p for p in provs[two] if p.get("status") in ("ok", "invalid")]
        k = m.concurrent_server_starts  # the shipped matrix starts 2 at a time; records before it, 1
        together = lambda p: (p.get("server_start") or {}).get("started_together", 1)  # noqa: E731
        started = [p for p in ok if p.get("kind") == "bench_serve" and p.get("server_startup_seconds")]
        use = [p for p in started if together(p) == k] or [p for p in started if together(p) == 1]
        # a server's share of its batch's wall time (launch to the last server healthy); runs recorded
        # before batch_seconds: its own start
        starts = [((p.get("server_start") or {}).get("batch_seconds") or p["server_startup_seconds"]) / together(p)
                  for p in use]
        est = estimate_seconds(m, runs_dir=runs)
        assert est.server_basis.startswith("recorded, same layout")
        assert est.server_start_s == pytest.approx(statistics.median(starts) + BENCH_CLIENT_START_S / len(m.groups))
        for kind, name in (("health_check", "selfdraft-t0.8-health"), ("verify_cost", "verify-cost")):
            own = [p["duration_seconds"] for p in ok if p.get("kind") == kind]
            got = est.health_checks[name] if kind == "health_check" else est.probes[name]
            assert own and got == pytest.approx(statistics.median(own)) and est.judge_basis[name] == "same check"
    two_starts = [p["server_startup_seconds"] for p in provs[True] if p.get("server_startup_seconds")]
    three_starts = [p["server_startup_seconds"] for p in provs[False] if p.get("server_startup_seconds")]
    assert statistics.median(two_starts) < statistics.median(three_starts) - 4  # one vLLM import fewer
    # only the other layout recorded: its starts, said so
    for p in runs.glob(f"*-{TWO_PROCESS_STAMP}-*"):
        shutil.rmtree(p)
    assert estimate_seconds(two_m, runs_dir=runs).server_basis.startswith("recorded, other layout")


def test_recorded_server_logs_show_the_layout_the_command_asked_for():
    """Real vLLM logs (data/runs, and the two-process invocation in data/runs-superseded): a two-process
    server (by its recorded command and env) loads the model in its EngineCore process and logs from two
    pids; a three-process one loads it in a separate Worker process."""
    import re

    seen = set()
    for p in sorted([*project_data_path("runs").glob("cpu-validation-fast-*-baseline-c1"),
                     *SUPERSEDED.glob(f"cpu-validation-fast-{TWO_PROCESS_STAMP}-baseline-c1")]):
        prov = json.loads((p / "provenance.json").read_text())
        if prov.get("status") != "ok":
            continue
        layout = server_layout(prov["commands"]["server"], prov["env"])
        log = (p / "server.log").read_text(errors="replace")
        pids = {m.group(1): m.group(2) for m in re.finditer(r"^\((\w+)(?:-\d+)? pid=(\d+)\)", log, re.M)}
        loader = re.search(r"^\((\w+) pid=\d+\) .*Starting to load model", log, re.M).group(1)
        if layout == "two-process":
            assert loader == "EngineCore" and set(pids) == {"APIServer", "EngineCore"}, p.name
        else:
            assert loader == "Worker" and pids["Worker"] not in (pids["EngineCore"], pids["APIServer"]), p.name
        seen.add(layout)
    assert seen == {"two-process", "three-process"}


def test_cli_dry_run_starts_nothing(capsys, tmp_path):
    assert cli_main(["run-matrix", "--matrix", "smoke", "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "baseline-c4" in out and "ngram-n3-c4" in out and "greedy vs baseline" in out
    assert not (tmp_path / "r").exists()
    assert cli_main(["run-matrix", "--matrix", "cpu-validation", "--dry-run", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["servers"]) == 12 and sum(len(s["cells"]) for s in d["servers"]) == 42
    assert d["estimate_seconds"] > 20 * 60


def test_cli_prints_no_token_a_matrix_gives(capsys, tmp_path, monkeypatch):
    """A new-user trial: the dry run (text and --json) printed a serve_cmd's --hf-token, a record's hf_token and
    a sidecar env's HF_TOKEN in clear, and so did a refusal quoting them; dry runs and errors are what users paste
    into issues and CI logs."""
    from specsim.runs.provenance import REDACTED
    from specsim.runs.sweep_files import SIDECAR, resolve_matrix

    monkeypatch.delenv("HF_TOKEN", raising=False)
    secrets = ["hf_in_serve_cmd_12345", "hf_in_the_sidecar_env_6789", "shortk1"]
    mine = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), mine)
    side = json.loads((mine / SIDECAR).read_text())
    side = {**side, "serve_cmd": f"{side['serve_cmd']} --hf-token {secrets[0]}", "env": {"HF_TOKEN": secrets[1]}}
    (mine / SIDECAR).write_text(json.dumps(side))
    for extra in ([], ["--json"]):
        assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r"),
                         *extra]) == 0
        out = capsys.readouterr().out
        # the commands are redacted word by word, then quoted: --hf-token '<redacted>'
        if extra:
            cmd = json.loads(out)["servers"][0]["command"]
            assert cmd[cmd.index("--hf-token") + 1] == REDACTED
            assert f"HF_TOKEN={REDACTED}" in json.loads(out)["vllm_sweep_commands"][0].replace("'", "")
        else:
            assert f"--hf-token '{REDACTED}'" in out and f"HF_TOKEN={REDACTED}" in out.replace("'", "")
        assert not any(x in out for x in secrets), out
    # read once with the matrix, which keeps them out of its repr (a traceback or a log may print it)
    from specsim.runs.sweep_files import load_matrix
    loaded = load_matrix(mine)
    assert set(secrets[:2]) <= loaded.secrets and not any(x in repr(loaded) for x in secrets)
    # a token given both in serve_cmd and in a record (refused, quoting both), a short one in the record
    serve = json.loads((mine / "serve_params.json").read_text())
    serve["ngram-n3"]["hf_token"] = secrets[2]
    (mine / "serve_params.json").write_text(json.dumps(serve))
    assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "specsim: error:" in err and "hf_token" in err and not any(x in err for x in secrets), err
    # given twice in serve_cmd: the refusal quotes both
    side["serve_cmd"] += " --hf-token hf_second_one_98765"
    (mine / SIDECAR).write_text(json.dumps(side))
    assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "given twice" in err and "hf_second_one_98765" not in err and secrets[0] not in err, err


def test_cli_prints_no_bench_header_a_matrix_gives(capsys, tmp_path, monkeypatch):
    """A review: headers short, holding a space or a quote leaked from the dry run's `vllm bench sweep` line (the
    bench command quoted inside it) and a header given as a dict from the refusal quoting it.  The commands are now
    redacted word by word before they are quoted, and the line still parses as the shell reads it."""
    import shlex

    from specsim.runs.provenance import REDACTED
    from specsim.runs.sweep_files import SIDECAR, resolve_matrix

    monkeypatch.delenv("HF_TOKEN", raising=False)
    mine = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), mine)
    side = json.loads((mine / SIDECAR).read_text())
    headers = ["k=a b", "x=$1", "y=2", "Authorization=Bearer sk-it's-long"]
    side["bench_cmd"] = f"{side['bench_cmd']} --header {shlex.join(headers)}"
    (mine / SIDECAR).write_text(json.dumps(side))
    leaks = ("a b", "x=$1", "y=2", "sk-it")
    for extra in ([], ["--json"]):
        assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r"),
                         *extra]) == 0
        out = capsys.readouterr().out
        assert not any(x in out for x in leaks), out
    sweep = json.loads(out)["vllm_sweep_commands"][0]
    words = shlex.split(sweep)
    bench = shlex.split(words[words.index("--bench-cmd") + 1])
    assert bench[bench.index("--header"):] == ["--header"] + [REDACTED] * 4
    # a header given as a dict (refused: --header takes text) is not quoted in the refusal
    bench_params = json.loads((mine / "bench_params.json").read_text())
    bench_params["c4"]["header"] = {"Authorization": "Bearer sk-dictval"}
    (mine / "bench_params.json").write_text(json.dumps(bench_params))
    assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "specsim: error:" in err and "header" in err and "sk-dictval" not in err, err


def test_a_secret_given_as_a_number_is_neither_printed_nor_recorded(capsys, tmp_path, monkeypatch):
    """A review: a record's ``hf_token`` given as a JSON number was printed by the dry run (in the reason the
    cell had no greedy judge) and kept in the recorded matrix files, and a sidecar ``env`` refused for a value
    that is not a string was quoted whole, its string tokens beside the number."""
    from specsim.runs.provenance import REDACTED, redact, secret_values
    from specsim.runs.sweep_files import SIDECAR, load_matrix, resolve_matrix

    monkeypatch.delenv("HF_TOKEN", raising=False)
    mine = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), mine)
    serve = json.loads((mine / "serve_params.json").read_text())
    serve["ngram-n3"]["hf_token"] = 98765432109
    (mine / "serve_params.json").write_text(json.dumps(serve))
    assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "98765432109" not in out and f"--hf-token '{REDACTED}'" in out, out
    # a token authenticates the download only: the cell keeps its greedy judge
    assert "no greedy judge" not in out, out
    # nor does the matrix's repr show it, nor a short one, in a record or a bench record's header (a review: the
    # records inside its servers and cells were shown as they are)
    shown = {**serve, "baseline": {**serve["baseline"], "hf_token": "hf_abc"}}
    (mine / "serve_params.json").write_text(json.dumps(shown))
    bench = json.loads((mine / "bench_params.json").read_text())
    (mine / "bench_params.json").write_text(json.dumps({k: {**v, "header": "X-K=ab"} for k, v in bench.items()}))
    loaded = load_matrix(mine)
    for text in (repr(loaded), repr(loaded.groups[0]), repr(loaded.cells()[0])):
        assert "98765432109" not in text and "hf_abc" not in text and "X-K=ab" not in text, text
    assert REDACTED in repr(loaded.groups[0]) and REDACTED in repr(loaded.cells()[0])
    (mine / "serve_params.json").write_text(json.dumps(serve))
    (mine / "bench_params.json").write_text(json.dumps(bench))
    # recorded: the number in its place, as a string's would be
    files = {"serve_params.json": serve, "specsim.json": {"env": {"HF_TOKEN": 0}}}
    found = secret_values(files, environ={})
    assert found == {"98765432109"}  # a number 0 / 1 under a secret's name is a setting, as "0" / "1" are
    assert redact(files, found) == {"serve_params.json": {**serve, "ngram-n3": {**serve["ngram-n3"],
                                                                               "hf_token": REDACTED}},
                                    "specsim.json": {"env": {"HF_TOKEN": 0}}}
    # an env value that is not a string: refused naming its key and type, no value quoted
    side = json.loads((mine / SIDECAR).read_text())
    side["env"] = {"MY_API_KEY": 12345678, "HF_TOKEN": "hf_abcdefghijkl", "OMP_NUM_THREADS": "2"}
    (mine / SIDECAR).write_text(json.dumps(side))
    assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "env.MY_API_KEY" in err and "a number" in err and "12345678" not in err and "hf_abc" not in err, err
    side["env"] = ["HF_TOKEN=hf_abcdefghijkl"]
    (mine / SIDECAR).write_text(json.dumps(side))
    assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "env" in err and "an array" in err and "hf_abc" not in err, err
    # a record's header as a list or an object, short or a number: refused for what it is, never quoted
    del side["env"]
    (mine / SIDECAR).write_text(json.dumps(side))
    bench = json.loads((mine / "bench_params.json").read_text())
    for header in (["a=1", 123456789], {"Authorization": 123456789}):
        bench[next(iter(bench))]["header"] = header
        (mine / "bench_params.json").write_text(json.dumps(bench))
        assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert "one KEY=VALUE string" in err and "values of one --header in bench_cmd" in err, err
        assert "123456789" not in err and "a=1" not in err, err
    # a review: short values, which no text search can find, were quoted by the refusals of a secret option's value
    del bench[next(iter(bench))]["header"]
    (mine / "bench_params.json").write_text(json.dumps(bench))
    base_bench, base_serve = side["bench_cmd"], side["serve_cmd"]
    for where, given, why in (("bench_cmd", "--header=qz7", "--header takes KEY=VALUE"),
                              ("bench_cmd", "--header a=1 qz7", "--header takes KEY=VALUE"),
                              ("serve_cmd", "--api-key -qz7", "in the option's own word"),
                              ("serve_cmd", "--api-key --qz7.x", "in the option's own word"),
                              ("serve_cmd", "--hf-token -zq7", "in the option's own word"),
                              ("serve_params", "-qz7", "in the option's own word"),
                              ("serve_cmd", "--hf-token -Oqz7", "in the option's own word"),
                              ("serve_cmd", "--hf-token qz7a --hf-token qz7b", "values given are not shown"),
                              ("serve_cmd", "--api-key=qz7sec", "--api-key may not be given"),
                              ("bench_cmd", "--header a=qz7 --header b=qz8", "values given are not shown"),
                              ("bench_cmd", "--header", "without a value"),
                              ("bench_cmd", "--header a=1 b=2", "only the first")):
        side["bench_cmd"] = (base_bench.replace(" --seed 0", f" {given} --seed 0") if where == "bench_cmd"
                             else base_bench)
        side["serve_cmd"] = f"{base_serve} {given}" if where == "serve_cmd" else base_serve
        (mine / SIDECAR).write_text(json.dumps(side))
        serve["ngram-n3"].pop("hf_token", None)  # given in serve_cmd by some: not in a record too
        if where == "serve_params":
            serve["ngram-n3"]["hf_token"] = given
        (mine / "serve_params.json").write_text(json.dumps(serve))
        # a short record header beside bench_cmd's, which the last two refuse
        (mine / "bench_params.json").write_text(json.dumps(
            {k: {**v, "header": "X-K=qz7"} for k, v in bench.items()} if given.startswith("--header a=1") or
            given == "--header" else bench))
        rc = cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")])
        err = capsys.readouterr().err
        assert rc == 2 and why in err and "qz7" not in err and "zq7" not in err and "qz8" not in err, (given, err)
        # so does the library's own error, which no CLI redacts
        with pytest.raises(SpecsimValueError) as ei:
            load_matrix(mine)
        assert not any(w in str(ei.value) for w in ("qz7", "zq7", "qz8")), str(ei.value)
    # a command that does not start as it must is quoted with its secret options' values redacted
    for bad in ("vllm serv m --hf-token qz7c", "vllm serve --hf-token qz7c"):
        side["serve_cmd"] = bad
        (mine / SIDECAR).write_text(json.dumps(side))
        with pytest.raises(SpecsimValueError) as ei:
            load_matrix(mine)
        assert "qz7c" not in str(ei.value) and REDACTED in str(ei.value), str(ei.value)
    (mine / "bench_params.json").write_text(json.dumps(bench))
    # a negative number is a value to vLLM's parser (argparse), not the next option: a token too
    side["bench_cmd"], side["serve_cmd"] = base_bench, base_serve
    (mine / SIDECAR).write_text(json.dumps(side))
    serve["ngram-n3"]["hf_token"] = -98765432
    (mine / "serve_params.json").write_text(json.dumps(serve))
    for extra in ([], ["--json"]):
        assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r"),
                         *extra]) == 0
        out = capsys.readouterr().out
        assert "98765432" not in out, out


def test_a_secret_in_a_parameter_file_of_a_subdirectory_is_not_printed(capsys, tmp_path, monkeypatch):
    """A review: the matrix's secrets were read from the JSON files of its directory only, so a parameter file
    the sidecar names in a subdirectory (``"serve_params": "sub/serve.json"``, which vLLM's sweep and
    specsim read) had its record's ``hf_token`` printed by ``--dry-run --json``."""
    from specsim.runs.provenance import REDACTED
    from specsim.runs.sweep_files import SIDECAR, load_matrix, matrix_secrets, resolve_matrix

    monkeypatch.delenv("HF_TOKEN", raising=False)
    mine = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), mine)
    serve = json.loads((mine / "serve_params.json").read_text())
    serve["ngram-n3"]["hf_token"] = "hf_qz7insub"
    (mine / "sub").mkdir()
    (mine / "sub" / "serve.json").write_text(json.dumps(serve))
    side = json.loads((mine / SIDECAR).read_text())
    for sw in side["sweeps"]:
        sw["serve_params"] = "sub/serve.json"
    (mine / SIDECAR).write_text(json.dumps(side))
    assert "hf_qz7insub" in load_matrix(mine).secrets and "hf_qz7insub" in matrix_secrets(mine)
    for extra in ([], ["--json"]):
        assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r"),
                         *extra]) == 0
        out = capsys.readouterr().out
        assert "hf_qz7insub" not in out and REDACTED in out, out


def test_refusals_printed_by_the_cli_keep_their_words_and_hide_an_unsplittable_line(capsys, tmp_path, monkeypatch):
    """A new-user trial: the CLI's redaction took the word after a secret option's name in a refusal's prose
    for its value (``--hf-token <redacted> a single value``, ``--api-key <redacted> set by specsim's runner``),
    and a command with a quote left open was quoted with the secret's tail in clear (``--hf-token "<redacted>
    SECRETXYZ``: the open quote runs on into the next words, which no redaction of a word finds)."""
    from specsim.runs.sweep_files import SIDECAR, resolve_matrix

    monkeypatch.delenv("HF_TOKEN", raising=False)
    mine = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), mine)
    side = json.loads((mine / SIDECAR).read_text())
    serve = json.loads((mine / "serve_params.json").read_text())

    def refused(serve_cmd=None, bench_cmd=None, record=None) -> str:
        (mine / SIDECAR).write_text(json.dumps({**side, "serve_cmd": serve_cmd or side["serve_cmd"],
                                                "bench_cmd": bench_cmd or side["bench_cmd"]}))
        (mine / "serve_params.json").write_text(json.dumps(
            {**serve, "ngram-n3": {**serve["ngram-n3"], **(record or {})}}))
        assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 2
        return capsys.readouterr().err

    s, b = side["serve_cmd"], side["bench_cmd"]
    for err, words in ((refused(record={"hf_token": ["hf_qz7abcdefgh"]}), "--hf-token takes a single value"),
                       (refused(serve_cmd=f"{s} --api-key qz7k"),
                        "--api-key may not be given: the server would then ask"),
                       (refused(serve_cmd=f"{s} --hf-token qz7a --hf-token qz7b"), "--hf-token is given twice"),
                       (refused(serve_cmd=f"{s} --hf-token", record={"hf_token": "hf_qz7abcdefgh"}),
                        "serve_cmd gives --hf-token too, and its value may be left out")):
        assert words in err and "qz7" not in err, err
    # the allowed values of a refusal are redacted too (a review: the CLI passed them through; here a record's
    # name holds its own token, listed where the baseline names no record)
    (mine / SIDECAR).write_text(json.dumps({**side, "baseline": "nosuch"}))
    (mine / "serve_params.json").write_text(json.dumps(
        {"baseline": {}, "QZ7SECRETabcdefgh": {**serve["ngram-n3"], "hf_token": "QZ7SECRETabcdefgh"}}))
    assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "allowed: " in err and "QZ7SECRET" not in err, err
    for err in (refused(serve_cmd=f'{s} --hf-token "hf_abc SECRETXYZ'),
                refused(serve_cmd=f"{s} --hf-token='hf_a SECRETXYZ"),
                refused(serve_cmd=f"{s} --hf-token hf_abc'SECRETXYZ"),
                refused(bench_cmd=f'{b} --header A=abcdefgh"SECRETXYZ')):
        assert "shell can split" in err and "SECRETXYZ" not in err and "hf_a" not in err, err


@pytest.mark.parametrize("where", ["bench_cmd", "record"])
def test_a_header_that_is_not_key_value_is_refused_before_any_server_starts(capsys, tmp_path, where):
    """A new-user trial: ``--header`` values without ``=`` passed every check; vLLM 0.32's benchmark refuses them
    ("Invalid header format. Please use KEY=VALUE format.", vllm/benchmarks/serve.py) only when it starts, after
    its server has started."""
    from specsim.runs.sweep_files import SIDECAR, resolve_matrix

    mine = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), mine)
    if where == "bench_cmd":  # the second of two values
        side = json.loads((mine / SIDECAR).read_text())
        side["bench_cmd"] = f"{side['bench_cmd']} --header a=1 no-equals-sign"
        (mine / SIDECAR).write_text(json.dumps(side))
    else:
        bench_params = json.loads((mine / "bench_params.json").read_text())
        bench_params["c4"]["header"] = "no-equals-sign"
        (mine / "bench_params.json").write_text(json.dumps(bench_params))
    assert cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--header takes KEY=VALUE" in err, err


@pytest.mark.parametrize("record,bench_extra,refused", [
    ({"backend": "openai-chat"}, "", "cell baseline/c4: --endpoint: --backend openai-chat (its record's) posts to an "
     "endpoint ending in 'chat/completions'; the endpoint is vLLM's default, which vLLM 0.32's benchmark refuses"),
    ({"endpoint": "/v1/responses"}, "", "cell baseline/c4: --endpoint: --backend vllm (bench_cmd's) posts to an "
     "endpoint ending in 'completions'; the endpoint is its record's"),
    ({}, " --backend openai-responses", "--backend openai-responses (bench_cmd's) posts to an endpoint ending in "
     "'responses'; the endpoint is vLLM's default"),
    ({"backend": "openai-embeddings"}, "", "cell baseline/c4: --backend: benchmarks a pooling model"),
    ({"backend": "openai-chat", "endpoint": "/v1/chat/completions"}, "", None),
    ({}, " --backend openai-chat --endpoint /v1/chat/completions", None),
    # the chat API over the custom dataset without --skip-chat-template: every prompt templated twice (a real-run
    # trial); the shipped matrices skip it
    ({"backend": "openai-chat", "endpoint": "/v1/chat/completions"}, "-no-skip",
     "cell baseline/c4: --skip-chat-template: --backend openai-chat sends each prompt as a chat message"),
    ({"backend": "openai-chat", "endpoint": "/v1/chat/completions", "skip_chat_template": True}, "-no-skip", None),
    ({"endpoint": "/v1/completions"}, "-no-skip", None),  # completions: the client's template is the only one
    # the audio backend over a text dataset: its first request fails, after the server started (the last notes)
    ({"backend": "openai-audio", "endpoint": "/v1/audio/transcriptions"}, "",
     "cell baseline/c4: --dataset-name: --backend openai-audio posts each request's audio for transcription, and the "
     "custom dataset gives none"),
    ({"backend": "openai-audio", "endpoint": "/v1/audio/transcriptions", "dataset_name": "random"}, "",
     "and the random dataset gives none"),
    ({"backend": "openai-audio", "endpoint": "/v1/audio/transcriptions", "dataset_name": "custom_audio"}, "", None),
])
def test_a_backend_its_endpoint_does_not_fit_is_refused_before_any_server_starts(capsys, tmp_path, record,
                                                                                 bench_extra, refused):
    """A new-user trial listed it among the things not checked: vLLM 0.32's benchmark checks that the endpoint
    fits the backend (``_validate_api_url``) only when the bench starts, after its server has started; a pooling
    backend measures no generation at all.  A later --backend replaces bench_cmd's (argparse keeps the last)."""
    from specsim.runs.sweep_files import SIDECAR, resolve_matrix

    mine = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), mine)
    if bench_extra == "-no-skip":
        side = json.loads((mine / SIDECAR).read_text())
        side["bench_cmd"] = side["bench_cmd"].replace(" --skip-chat-template", "")
        (mine / SIDECAR).write_text(json.dumps(side))
    elif bench_extra:
        side = json.loads((mine / SIDECAR).read_text())
        side["bench_cmd"] = side["bench_cmd"].replace(" --backend vllm", "") + bench_extra
        (mine / SIDECAR).write_text(json.dumps(side))
    bench_params = json.loads((mine / "bench_params.json").read_text())
    bench_params["c4"].update(record)
    (mine / "bench_params.json").write_text(json.dumps(bench_params))
    rc = cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    if refused is None:
        assert rc == 0, err
    else:
        assert rc == 2 and refused in err, err


def test_a_record_header_that_would_drop_one_of_bench_cmd_s_headers_is_refused(capsys, tmp_path):
    """A new-user trial: with ``--header A=1 B=2`` in bench_cmd and a record's ``header``, vLLM's sweep writes the
    record's value over ``A=1`` only: A was silently dropped (and the dry run, redacting the values, could not
    show it).  One header in bench_cmd and one in the record is what vLLM's sweep reads as intended."""
    from specsim.runs.sweep_files import SIDECAR, bench_command, load_matrix, resolve_matrix

    mine = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), mine)
    side = json.loads((mine / SIDECAR).read_text())
    base = side["bench_cmd"]
    bench_params = json.loads((mine / "bench_params.json").read_text())
    bench_params["c4"]["header"] = "X-Rec=r"
    (mine / "bench_params.json").write_text(json.dumps(bench_params))
    for headers, ok in (("--header A=1 B=2", False), ("--header A=1", True), ("--header=A=1", True)):
        side["bench_cmd"] = f"{base} {headers}"
        (mine / SIDECAR).write_text(json.dumps(side))
        rc = cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")])
        err = capsys.readouterr().err
        assert rc == (0 if ok else 2), (headers, err)
        if ok:  # the record's header replaces bench_cmd's one, as vLLM's sweep does: written over it, or
            m = load_matrix(str(mine))  # appended after --header=A=1 (argparse keeps the last --header)
            cmd = bench_command(m, m.cells()[0])
            last = max(i for i, w in enumerate(cmd) if w.startswith("--header"))
            assert cmd[last:last + 2] == ["--header", "X-Rec=r"], cmd
        else:
            assert "would replace only the first of bench_cmd's 2 --header values" in err and "A=1" not in err, err
    # a bare --header (nargs="*": no headers, as vLLM 0.32 reads it) is no error of itself, but a record's header
    # would be written over the word after it, the next option (a review: it was refused as "--header --seed")
    for rec in (None, "X-Rec=r"):
        if rec is None:
            del bench_params["c4"]["header"]
        else:
            bench_params["c4"]["header"] = rec
        (mine / "bench_params.json").write_text(json.dumps(bench_params))
        assert base.endswith(" --seed 0")
        for cmd in (base.replace(" --seed 0", " --header --seed 0"), f"{base} --header"):
            side["bench_cmd"] = cmd
            (mine / SIDECAR).write_text(json.dumps(side))
            rc = cli_main(["run-matrix", "--matrix", str(mine), "--dry-run", "--runs-dir", str(tmp_path / "r")])
            err = capsys.readouterr().err
            assert rc == (0 if rec is None else 2), (cmd, err)
            if rec is not None:
                assert "gives --header without a value" in err, err


def test_dry_run_estimates_from_the_runs_dir_it_is_given(capsys, tmp_path):
    """--runs-dir is where the estimate's records come from: one holding a copy of the fast loop's health
    check gives that check's own recorded duration; an empty one has none, so the checkout's data/runs
    (it gave the stated defaults, 30 s a cell: 29.5 min for the 13-min fast loop), and says so."""
    assert cli_main(["run-matrix", "--matrix", "cpu-validation-fast", "--dry-run", "--json",
                     "--runs-dir", str(tmp_path / "empty")]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["estimate_from"]["runs_dir"] == str(project_data_path("runs"))
    assert d["estimate_from"]["note"] == f"none in {tmp_path / 'empty'}, which does not exist yet"
    assert "no record" not in {c["basis"] for c in d["cells"].values()}
    assert d["judges"]["selfdraft-t0.8-health"]["basis"] == "same check"
    src = sorted(project_data_path("runs").glob("cpu-validation-fast-*-selfdraft-t0.8-health"))[0]
    (tmp_path / "one" / src.name).mkdir(parents=True)
    shutil.copy(src / "provenance.json", tmp_path / "one" / src.name / "provenance.json")
    recorded = json.loads((src / "provenance.json").read_text())["duration_seconds"]
    assert cli_main(["run-matrix", "--matrix", "cpu-validation-fast", "--dry-run", "--json",
                     "--runs-dir", str(tmp_path / "one")]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["judges"]["selfdraft-t0.8-health"] == {"seconds": recorded, "basis": "same check"}
    # what it has no record like comes from the checkout's runs (it was the 30 s default: 29.5 min in all)
    ck = estimate_seconds(load_matrix("cpu-validation-fast"))
    assert d["judges"]["verify-cost"] == {"seconds": ck.probes["verify-cost"],
                                          "basis": f"same check in {project_data_path('runs')}"}
    assert d["cells"]["baseline-c1"] == {**d["cells"]["baseline-c1"], "seconds": ck.cells["baseline-c1"][0],
                                         "basis": f"same cell in {project_data_path('runs')}"}
    assert d["server_start_seconds"] == pytest.approx(ck.server_start_s)
    assert d["estimate_from"] == {"runs_dir": str(tmp_path / "one"), "recorded_runs": 1 + ck.n_recorded,
                                  "note": f"{len(d['cells']) + 2} part(s) with no record like them there from "
                                          f"the {ck.n_recorded} in {project_data_path('runs')}"}
    assert d["estimate_seconds"] == pytest.approx(ck.total_seconds(load_matrix("cpu-validation-fast"))
                                                  - ck.health_checks["selfdraft-t0.8-health"] + recorded)


def test_judge_estimates_prefer_the_matrix_own_records():
    """The full matrix's health check (8 prompts) is estimated from its own records, not the fast one's."""
    m = load_matrix("cpu-validation")
    est = estimate_seconds(m)
    own = [json.loads((p / "provenance.json").read_text())["duration_seconds"]
           for p in project_data_path("runs").glob("cpu-validation-2026*-selfdraft-t0.8-health")]
    assert own and est.judge_basis["selfdraft-t0.8-health"] == "same check"
    assert est.health_checks["selfdraft-t0.8-health"] == pytest.approx(statistics.median(own))
    assert "on a GPU host, the whole machine on a CPU host" in dry_run_text(m, est)


def test_cli_unknown_matrix_names_the_shipped_ones(capsys):
    assert cli_main(["run-matrix", "--matrix", "cpu-validatoin", "--dry-run"]) != 0
    err = capsys.readouterr().err
    assert "matrix" in err and "cpu-validation, cpu-validation-fast, smoke, verify-cost" in err


def test_python_matrix_written_as_sweep_files(tmp_path):
    """The GPU runbook's Python matrices become the same kind of files (hub ids stay hub ids)."""
    from specsim.runs.runbook import gpu_matrix

    m = gpu_matrix("Qwen3-8B", "MI300X", n_values=(1, 3), concurrencies=(1, 4), methods=("eagle3",))
    d = matrix_to_sweep_files(m, tmp_path / "gpu", env={"VLLM_ROCM_USE_AITER_FP4_ASM_GEMM": "1"})
    sm = load_matrix(d)
    assert sm.model == "Qwen/Qwen3-8B" and sm.model_path is None
    assert [g.name for g in sm.groups] == ["baseline", "eagle3-n1", "eagle3-n3"]
    assert sm.groups[1].speculative_config["model"] == "RedHatAI/Qwen3-8B-speculator.eagle3"
    assert [c.num_prompts for c in sm.groups[0].cells] == [10, 40]
    assert sm.env == {"VLLM_ROCM_USE_AITER_FP4_ASM_GEMM": "1"}
    small = Matrix(name="x", description="", entries=(ServerEntry(SpecConfig("baseline"), concurrencies=(4,)),))
    assert [c.run_label for c in load_matrix(matrix_to_sweep_files(small, tmp_path / "x"),
                                             check_paths=False).cells()] == ["baseline-c4"]


# ---- against vLLM's own code (in the vLLM environment) ----------------------------------------

_VLLM_APPLY = textwrap.dedent('''
    import json, sys
    from vllm.benchmarks.sweep.param_sweep import ParameterSweep
    base, path = json.loads(sys.argv[1]), sys.argv[2]
    print(json.dumps({item.name: item.apply_to_cmd(base) for item in ParameterSweep.read_json(path)}))
''')


@pytest.mark.vllm
def test_records_give_the_commands_vllm_sweep_gives():
    """Our reading of a record (replace-or-append, booleans, JSON objects), the one the runner builds
    its commands with, is vLLM 0.32's: ``ParameterSweepItem.apply_to_cmd`` on the shipped files gives
    the same argument lists."""
    from specsim.runs.sweep_files import read_param_file

    py = vllm_python()
    m = load_matrix("cpu-validation")
    base = list(m.serve_cmd) + ["--no-enforce-eager"]
    for f in m.files[1:]:
        r = subprocess.run([str(py), "-c", _VLLM_APPLY, json.dumps(base), str(m.root / f)], capture_output=True,
                           text=True, timeout=300, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
        assert r.returncode == 0, r.stderr[-2000:]
        theirs = json.loads(r.stdout.strip().splitlines()[-1])
        ours = {name: apply_record(base, rec) for name, rec in read_param_file(m.root / f, f)}
        assert set(ours) == set(theirs) and len(ours) >= 2
        for name in ours:  # JSON objects: same object (key order aside)
            a, b = ours[name], theirs[name]
            assert len(a) == len(b), (name, a, b)
            for x, y in zip(a, b):
                assert (json.loads(x) == json.loads(y)) if x.startswith("{") else x == y, (name, a, b)


#: walks vLLM's own parsers (``vllm serve``: make_arg_parser; ``vllm bench serve``: add_cli_args)
_GEN = '''
import argparse, json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.benchmarks.serve import add_cli_args
def kind_of(t):
    if t is None:
        return "str"
    q = getattr(t, "__qualname__", "")
    if "optional_type" in q and t.__closure__:
        inner = [c.cell_contents for c in t.__closure__ if callable(c.cell_contents)]
        return kind_of(inner[0]) if inner else "str"
    if "human_readable_int" in q:
        return "size"
    if t is int:
        return "int"
    if t is float:
        return "float"
    if "parse_dataclass" in q or q == "loads" or "union_dict_and_str" in q:
        return "json"
    return "str"
def table(p):
    out = {}
    for a in p._actions:
        longs = [o for o in a.option_strings if o.startswith("--")]
        if not longs or a.dest == "help":
            continue
        if isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)) or a.nargs == 0:
            kind = "flag"
        else:
            kind = kind_of(a.type)
        ent = {"kind": kind}
        if a.choices is not None:
            try: ent["choices"] = sorted(map(str, a.choices))
            except TypeError: pass
        if a.nargs not in (None, 0):
            ent["nargs"] = str(a.nargs)
        if a.nargs == "?":
            ent["const"] = repr(a.const)
        for o in longs:
            out[o[2:]] = ent
    return out
sp = make_arg_parser(FlexibleArgumentParser())
bp = FlexibleArgumentParser(); add_cli_args(bp)
json.dump({"serve": table(sp), "bench_serve": table(bp)}, sys.stdout, indent=0, sort_keys=True)
'''


@pytest.mark.vllm
def test_option_tables_match_the_installed_vllm():
    """specsim.runs.vllm_args is what vLLM 0.32's own parsers hold (regenerated here)."""
    py = vllm_python()
    r = subprocess.run([str(py), "-c", _GEN], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)

    def flat(tab):
        return {k: ((v["kind"], tuple(v["choices"])) if "choices" in v else v["kind"]) for k, v in tab.items()}

    assert flat(d["serve"]) == SERVE_OPTIONS and flat(d["bench_serve"]) == BENCH_SERVE_OPTIONS
    # the options whose value may be left out (nargs "?": alone they are True)
    for tab, want in ((d["serve"], SERVE_OPTIONAL_VALUE), (d["bench_serve"], BENCH_SERVE_OPTIONAL_VALUE)):
        optional = {k: v for k, v in tab.items() if v.get("nargs") == "?"}
        assert set(optional) == want and all(v["const"] == "True" for v in optional.values()), optional
    # the options that take several words (nargs "+" / "*"), and no others take more than one
    for tab, want in ((d["serve"], SERVE_SEVERAL_VALUES), (d["bench_serve"], BENCH_SERVE_SEVERAL_VALUES)):
        assert {k: v["nargs"] for k, v in tab.items() if v.get("nargs") not in (None, "0", "?")} == want
    assert len(SERVE_OPTIONS) > 300 and SERVE_OPTIONS["speculative-config"] == "json"
    assert sys.version_info >= (3, 11)


_GEN_SHORT = '''
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.benchmarks.serve import add_cli_args
def shorts(p):
    return {o[1:]: [x for x in a.option_strings if x.startswith("--")][0][2:] for a in p._actions if a.dest != "help"
            for o in a.option_strings if not o.startswith("--") and any(x.startswith("--") for x in a.option_strings)}
sp = make_arg_parser(FlexibleArgumentParser())
bp = FlexibleArgumentParser(); add_cli_args(bp)
json.dump({"serve": shorts(sp), "bench_serve": shorts(bp)}, sys.stdout, sort_keys=True)
'''


@pytest.mark.vllm
def test_short_option_tables_match_the_installed_vllm():
    """specsim.runs.vllm_args's short options (-tp, -pp, -dp, -q ...) are vLLM 0.32's own aliases (regenerated)."""
    from specsim.runs.vllm_args import BENCH_SERVE_SHORT_OPTIONS, SERVE_SHORT_OPTIONS

    r = subprocess.run([str(vllm_python()), "-c", _GEN_SHORT], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["serve"] == SERVE_SHORT_OPTIONS and d["bench_serve"] == BENCH_SERVE_SHORT_OPTIONS
    assert SERVE_SHORT_OPTIONS["tp"] == "tensor-parallel-size" and len(SERVE_SHORT_OPTIONS) > 20


def test_estimate_shares_the_start_of_servers_started_together(tmp_path):
    """A server started with another (``server_start.started_together`` = 2) costs half its recorded
    start; a matrix that starts servers two at a time is estimated from such records when there are
    any, else from servers started alone (and says so)."""
    runs = tmp_path / "runs"
    m1 = load_matrix("smoke")
    d = tmp_path / "m2"
    shutil.copytree(m1.root, d)
    sc = json.loads((d / "specsim.json").read_text())
    (d / "specsim.json").write_text(json.dumps({**sc, "concurrent_server_starts": 2}))
    m2 = load_matrix(d)
    assert m2.concurrent_server_starts == 2 and m1.concurrent_server_starts == 1
    cmd = apply_record(m1.serve_cmd, m1.groups[0].params)

    def rec(rid, startup, together=None):
        p = {"run_id": rid, "kind": "bench_serve", "status": "ok", "bench_seconds": 5.0,
             "server_startup_seconds": startup, "commands": {"server": cmd}, "env": {}}
        if together is not None:
            p["server_start"] = {"started_together": together, "with": []}
        (runs / rid).mkdir(parents=True)
        (runs / rid / "provenance.json").write_text(json.dumps(p))

    for i, s in enumerate((30.0, 32.0, 34.0)):  # alone (two of them recorded before the key existed)
        rec(f"a{i}", s, None if i < 2 else 1)
    bc = BENCH_CLIENT_START_S / len(m1.groups) if m1.bench_client == "persistent" else 0.0
    e1, e2 = estimate_seconds(m1, runs_dir=runs), estimate_seconds(m2, runs_dir=runs)
    assert e1.server_start_s == pytest.approx(32.0 + bc) and e1.server_basis == "recorded, same layout"
    assert e2.server_start_s == pytest.approx(32.0 + bc)
    assert e2.server_basis == "recorded, same layout, started one at a time (started together they take less)"
    for i, s in enumerate((50.0, 56.0)):  # two servers started together: 50 s and 56 s each
        rec(f"b{i}", s, 2)
    e1, e2 = estimate_seconds(m1, runs_dir=runs), estimate_seconds(m2, runs_dir=runs)
    assert e2.server_start_s == pytest.approx(statistics.median([25.0, 28.0]) + bc)
    assert e2.server_basis == "recorded, same layout, started 2 at a time"
    assert e1.server_start_s == pytest.approx(32.0 + bc)  # one at a time: only the servers started alone
    assert "servers started 2 at a time (local executor)" in dry_run_text(m2, e2)
    rec("c0", 50.0, 2)  # a batch of two that took 60 s from launch to both healthy: 30 s each
    p = json.loads((runs / "c0" / "provenance.json").read_text())
    p["server_start"]["batch_seconds"] = 60.0
    (runs / "c0" / "provenance.json").write_text(json.dumps(p))
    assert estimate_seconds(m2, runs_dir=runs).server_start_s == pytest.approx(28.0 + bc)  # median(25, 28, 30)
    assert dry_run_json(m2, e2)["concurrent_server_starts"] == 2


def test_estimate_for_ray_or_slurm_starts_each_server_alone_with_its_own_client(tmp_path):
    """Only the local executor pairs server starts and shares one bench client; a Ray task or Slurm job
    holds one server, so its estimate takes servers started alone and a client start per server, and
    the dry run says the estimate is machine time, not a cluster's wall time."""
    runs = tmp_path / "runs"
    m1 = load_matrix("smoke")
    d = tmp_path / "m2"
    shutil.copytree(m1.root, d)
    sc = json.loads((d / "specsim.json").read_text())
    (d / "specsim.json").write_text(json.dumps({**sc, "concurrent_server_starts": 2, "bench_client": "persistent"}))
    m2 = load_matrix(d)
    cmd = apply_record(m1.serve_cmd, m1.groups[0].params)
    for rid, startup, together in (("a0", 30.0, 1), ("a1", 34.0, 1), ("b0", 50.0, 2), ("b1", 56.0, 2)):
        (runs / rid).mkdir(parents=True)
        (runs / rid / "provenance.json").write_text(json.dumps(
            {"run_id": rid, "kind": "bench_serve", "status": "ok", "bench_seconds": 5.0,
             "server_startup_seconds": startup, "commands": {"server": cmd}, "env": {},
             "server_start": {"started_together": together, "with": []}}))
    local = estimate_seconds(m2, runs_dir=runs)
    assert local.server_start_s == pytest.approx(26.5 + BENCH_CLIENT_START_S / len(m2.groups))
    for ex in ("ray", "slurm"):
        e = estimate_seconds(m2, runs_dir=runs, executor=ex)
        assert e.server_start_s == pytest.approx(32.0 + BENCH_CLIENT_START_S)  # median(30, 34) + its client
        assert e.server_basis.endswith(f"{ex} executor: each server in its own task, started alone, "
                                       "with its own bench client")
        assert e.cells == local.cells
        text = dry_run_text(m2, e, executor=ex)
        assert f"applies to the local executor only: the {ex} executor" in text
        assert f"of machine time with the {ex} executor" in text and "wall on one host" not in text
        assert dry_run_json(m2, e, ex)["executor"] == ex
    with pytest.raises(SpecsimValueError, match="executor"):
        estimate_seconds(m2, runs_dir=runs, executor="k8s")


def test_a_similar_cell_is_scaled_from_the_recorded_traffic_not_from_a_fixed_client_overhead(tmp_path):
    """A "similar" cell's estimate scaled ``bench_seconds - PROCESS_OVERHEAD_S`` (8.9 s, the 2026-11-29
    host's client start) by prompts x output length.  On a host whose bench process starts faster (5-7 s
    here on 2026-12-06) the traffic read as ~0: a 999-prompt cell recorded at 2 prompts (2.9 s of traffic)
    was estimated at 69 s, not ~20 min, and its timeout_s was not warned about.  The traffic is the
    recorded ``summary.duration_s``.  The record is a real one, its client start made 5 s."""
    from specsim.runs.sweep_files import PROCESS_OVERHEAD_S, resolve_matrix

    src = project_data_path("runs") / "cpu-validation-20261129T104718-ngram-n3-c4"
    if not src.is_dir():
        pytest.skip("the recorded cpu-validation runs are not in this checkout")
    runs = tmp_path / "runs"
    shutil.copytree(src, runs / src.name)
    prov = json.loads((runs / src.name / "provenance.json").read_text())
    traffic = prov["summary"]["duration_s"]
    assert (prov["num_prompts"], prov["output_len"], prov["concurrency"]) == (8, 128, 4)
    prov["bench_seconds"] = traffic + 5.0  # a faster client start than PROCESS_OVERHEAD_S
    (runs / src.name / "provenance.json").write_text(json.dumps(prov))
    mdir = tmp_path / "m"
    shutil.copytree(resolve_matrix("smoke"), mdir)
    bench = json.loads((mdir / "bench_params.json").read_text())
    bench["c4"]["num_prompts"] = 80  # 80 x 64 tokens: 5 x the recorded 8 x 128
    (mdir / "bench_params.json").write_text(json.dumps(bench))
    est = estimate_seconds(load_matrix(str(mdir)), runs_dir=runs)
    secs, basis = est.cells["ngram-n3-c4"]
    assert basis == "similar"
    assert secs == pytest.approx(PROCESS_OVERHEAD_S + 5 * traffic, rel=1e-9)


def test_matrix_name_is_the_sidecars_name_whatever_the_directory_is_called(tmp_path):
    """``specsim validate --matrix DIR`` finds the runs by the name the sidecar gives (run ids
    ``<name>-<stamp>-*``); a sidecar without one is refused, naming the field."""
    from specsim.runs.sweep_files import SIDECAR, matrix_name, resolve_matrix

    mine = tmp_path / "renamed"
    shutil.copytree(resolve_matrix("smoke"), mine)
    assert matrix_name("smoke") == matrix_name(mine) == matrix_name(mine / SIDECAR) == "smoke"
    side = json.loads((mine / SIDECAR).read_text())
    (mine / SIDECAR).write_text(json.dumps({**side, "name": "other"}))
    assert matrix_name(mine) == "other"
    (mine / SIDECAR).write_text(json.dumps({k: v for k, v in side.items() if k != "name"}))
    with pytest.raises(SpecsimValueError) as ei:
        matrix_name(mine)
    assert ei.value.field == "matrix" and "gives no name" in ei.value.rule, str(ei.value)
