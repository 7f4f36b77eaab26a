"""Refusals and estimates of matrix files found by a new-user review (specsim.runs.sweep_files).

Numeric values out of vLLM's (or specsim's) range, a bad seed in the sidecar's ``cells``, a whole
JSON option and one of its fields in the same record, empty parameter files are refused by
``load_matrix`` (before any server starts), naming the field; a serve record that changes what the
target computes gets no greedy-identity judge (and says why); a record's ``false`` replaces the
serve_cmd's flag as vLLM's sweep does; the dry-run estimate converts recorded runs to the matrix's
bench client and counts the judges' GPU time.
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

from specsim.catalog import project_data_path
from specsim.errors import SpecsimValueError
from specsim.runs.serve_bench import BenchPlan, serve_and_bench
from specsim.runs.sweep_files import (
    BENCH_CLIENT_START_S,
    PERSISTENT_OVERHEAD_S,
    PROCESS_OVERHEAD_S,
    apply_record,
    dry_run_json,
    dry_run_text,
    estimate_seconds,
    load_matrix,
    matrix_names,
    recorded_bench_client,
    serve_command,
)
from specsim.runs.vllm_args import SERVE_BOUNDS

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ is no package: any import mode
from vllm_env import vllm_python  # noqa: E402

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def _smoke(tmp_path, *, serve=None, bench=None, sidecar=None, raw=None) -> Path:
    """A copy of the shipped smoke matrix with files replaced (``serve`` / ``bench``: the whole
    parameter file; ``sidecar``: keys updated; ``raw``: {file name: text})."""
    d = tmp_path / "m"
    shutil.copytree(project_data_path("matrices", "smoke"), d)
    if serve is not None:
        (d / "serve_params.json").write_text(json.dumps(serve))
    if bench is not None:
        (d / "bench_params.json").write_text(json.dumps(bench))
    if sidecar is not None:
        sc = json.loads((d / "specsim.json").read_text())
        sc.update(sidecar)
        (d / "specsim.json").write_text(json.dumps(sc))
    for name, text in (raw or {}).items():
        (d / name).write_text(text)
    return d


def _refused(d: Path) -> SpecsimValueError:
    with pytest.raises(SpecsimValueError) as ei:
        load_matrix(d)
    return ei.value


# ---- 1. numeric ranges ------------------------------------------------------------------------

@pytest.mark.parametrize("where,rec,field,allowed", [
    ("bench", {"max_concurrency": -4}, "bench_params.json['c4'].max_concurrency", ">= 1"),
    ("bench", {"max_concurrency": 0}, "bench_params.json['c4'].max_concurrency", ">= 1"),
    ("bench", {"num_prompts": 0}, "bench_params.json['c4'].num_prompts", ">= 1"),
    ("bench", {"temperature": -1}, "bench_params.json['c4'].temperature", ">= 0 and <= 2"),
    ("bench", {"temperature": 2.5}, "bench_params.json['c4'].temperature", ">= 0 and <= 2"),
    ("bench", {"temperature": "nan"}, "bench_params.json['c4'].temperature", ">= 0 and <= 2"),
    ("bench", {"custom_output_len": 0}, "bench_params.json['c4'].custom_output_len", ">= 1"),
    ("bench", {"custom-output-len": -1}, "bench_params.json['c4'].custom-output-len", ">= 1"),
    ("bench", {"seed": -1}, "bench_params.json['c4'].seed", ">= 0 and <= 4294967295"),
    ("bench", {"top_p": 0}, "bench_params.json['c4'].top_p", "> 0 and <= 1"),
    ("bench", {"request_rate": 0}, "bench_params.json['c4'].request_rate", "> 0"),
    ("bench", {"num_prompts": "--4"}, "bench_params.json['c4'].num_prompts", None),
    ("serve", {"tensor_parallel_size": -2}, "serve_params.json['ngram-n3'].tensor_parallel_size", ">= 1"),
    ("serve", {"tensor_parallel_size": 0}, "serve_params.json['ngram-n3'].tensor_parallel_size", ">= 1"),
    ("serve", {"pipeline-parallel-size": 0}, "serve_params.json['ngram-n3'].pipeline-parallel-size", ">= 1"),
    ("serve", {"data_parallel_size": 0}, "serve_params.json['ngram-n3'].data_parallel_size", ">= 1"),
    ("serve", {"max_num_seqs": 0}, "serve_params.json['ngram-n3'].max_num_seqs", ">= 1"),
    ("serve", {"gpu_memory_utilization": 1.5}, "serve_params.json['ngram-n3'].gpu_memory_utilization",
     "> 0 and <= 1"),
    ("serve", {"seed": -3}, "serve_params.json['ngram-n3'].seed", ">= 0 and <= 4294967295"),
    ("serve", {"distributed_timeout_seconds": 0}, "serve_params.json['ngram-n3'].distributed_timeout_seconds",
     "> 0"),
    ("serve", {"max_model_len": -2}, "serve_params.json['ngram-n3'].max_model_len", ">= -1"),
])
def test_numeric_values_out_of_range_are_refused_naming_file_record_key_and_range(tmp_path, where, rec, field,
                                                                                   allowed):
    if where == "bench":
        d = _smoke(tmp_path, bench={"c4": {"max_concurrency": 4, "num_prompts": 4, "temperature": 0, **rec}})
    else:
        d = _smoke(tmp_path, serve={"baseline": {}, "ngram-n3": {"speculative_config": SPEC, **rec}})
    e = _refused(d)
    assert e.field == field, str(e)
    if allowed is not None:
        assert e.allowed == [allowed], str(e)
        assert "out of range" in e.rule and ("vLLM 0.32" in e.rule or "specsim" in e.rule), str(e)


def test_values_at_the_bounds_are_accepted(tmp_path):
    d = _smoke(tmp_path, bench={"c4": {"max_concurrency": 1, "num_prompts": 1, "temperature": 0, "seed": 0,
                                       "request_rate": "inf", "top_p": 1, "top_k": -1}},
               serve={"baseline": {}, "ngram-n3": {"speculative_config": SPEC, "max_model_len": "2k"}})
    m = load_matrix(d)
    c = m.cells()[0]
    assert (c.concurrency, c.num_prompts, c.temperature, c.seed) == (1, 1, 0.0, 0)


@pytest.mark.parametrize("cmd,field", [
    ("vllm serve models/smollm2-135m-instruct --dtype float32 --tensor-parallel-size 0",
     "serve_cmd.vllm serve: --tensor-parallel-size"),
    ("vllm serve models/smollm2-135m-instruct --max-num-seqs -1", "serve_cmd.vllm serve: --max-num-seqs"),
])
def test_base_command_values_out_of_range_are_refused(tmp_path, cmd, field):
    e = _refused(_smoke(tmp_path, sidecar={"serve_cmd": cmd}))
    assert e.field == field and e.allowed == [">= 1"], str(e)


@pytest.mark.parametrize("value,field", [
    ("x", "cells['ngram-n3/c4'].seed"), (-1, "cells['ngram-n3/c4'].seed"), (1.5, "cells['ngram-n3/c4'].seed"),
    (True, "cells['ngram-n3/c4'].seed"),
])
def test_a_bad_seed_in_the_sidecar_cells_is_a_specsim_error(tmp_path, value, field):
    e = _refused(_smoke(tmp_path, sidecar={"cells": {"ngram-n3/c4": {"seed": value}}}))
    assert e.field == field and "integer >= 0" in e.rule, str(e)


def test_a_bad_timeout_in_the_sidecar_cells_names_the_pattern(tmp_path):
    e = _refused(_smoke(tmp_path, sidecar={"cells": {"ngram-n3/*": {"timeout_s": 0}}}))
    assert e.field == "cells['ngram-n3/*'].timeout_s", str(e)


# ---- 2. the greedy-identity judge ---------------------------------------------------------------

@pytest.mark.parametrize("extra,key", [
    # another model is refused outright (tests/test_sweep_file_refusals.py): it is serve_cmd's positional
    ({"dtype": "bfloat16"}, "dtype"),
    ({"tensor_parallel_size": 2}, "tensor_parallel_size"),
    ({"quantization": "fp8"}, "quantization"),
    ({"max_model_len": 1024}, "max_model_len"),
    ({"max_num_seqs": 4}, "max_num_seqs"),
    ({"enforce_eager": False}, "enforce_eager"),
])
def test_a_serve_record_that_changes_the_target_gets_no_greedy_judge_and_says_why(tmp_path, extra, key):
    m = load_matrix(_smoke(tmp_path, serve={"baseline": {}, "ngram-n3": {"speculative_config": SPEC, **extra}}),
                    check_paths=False)
    c = next(c for c in m.cells() if c.serve == "ngram-n3")
    assert c.baseline is None
    assert c.no_judge.startswith(f"no greedy judge: serve record changes the target's {key} ("), c.no_judge
    text = dry_run_text(m, estimate_seconds(m))
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("ngram-n3-c4"))
    assert "greedy vs" not in line and f"no greedy judge: serve record changes the target's {key}" in line
    d = dry_run_json(m, estimate_seconds(m))
    assert d["cells"]["ngram-n3-c4"]["greedy_vs"] is None and d["cells"]["ngram-n3-c4"]["no_greedy_judge"] == c.no_judge


@pytest.mark.parametrize("serve", [
    {"baseline": {}, "ngram-n3": {"speculative_config": SPEC}},
    # logging / metrics options do not change the target's outputs
    {"baseline": {}, "ngram-n3": {"speculative_config": SPEC, "disable_log_stats": True}},
    # the same change in both records: the judge compares like with like
    {"baseline": {"max_num_seqs": 8}, "ngram-n3": {"speculative_config": SPEC, "max_num_seqs": 8}},
    {"baseline": {"enforce_eager": False}, "ngram-n3": {"speculative_config": SPEC, "no_enforce_eager": True}},
    # the value serve_cmd already gives (--max-num-seqs 32)
    {"baseline": {}, "ngram-n3": {"speculative_config": SPEC, "max-num-seqs": 32}},
])
def test_a_record_that_only_adds_speculation_keeps_the_judge(tmp_path, serve):
    m = load_matrix(_smoke(tmp_path, serve=serve), check_paths=False)
    c = next(c for c in m.cells() if c.serve == "ngram-n3")
    assert (c.baseline, c.no_judge) == ("baseline", None)


def test_shipped_matrices_keep_their_judges():
    """Every temperature-0 speculative cell of the shipped matrices keeps its greedy judge."""
    for name in matrix_names():
        m = load_matrix(name)
        for c in m.cells():
            assert c.no_judge is None, (name, c.run_label)
            spec = next(g for g in m.groups if g.name == c.serve).speculative_config
            want = m.baseline if (m.baseline and c.serve != m.baseline and spec and c.temperature == 0) else None
            assert c.baseline == want, (name, c.run_label)


# ---- 3. one option given twice --------------------------------------------------------------------

@pytest.mark.parametrize("rec,key", [
    ({"speculative_config": SPEC, "speculative_config.num_speculative_tokens": 5},
     "speculative_config.num_speculative_tokens"),
    ({"speculative_config.num_speculative_tokens": 5, "speculative_config": SPEC}, "speculative_config"),
    ({"speculative-config.method": "ngram", "speculative_config": SPEC}, "speculative_config"),
])
def test_whole_and_dotted_keys_of_one_option_are_refused_in_either_order(tmp_path, rec, key):
    e = _refused(_smoke(tmp_path, serve={"baseline": {}, "ngram-n3": rec}))
    assert e.field == f"serve_params.json['ngram-n3'].{key}", str(e)
    assert "is given both whole" in e.rule and "by field" in e.rule, str(e)


@pytest.mark.parametrize("rec,key", [
    ({"speculative_config": SPEC, "max_num_seqs": 4, "max-num-seqs": 8}, "max-num-seqs"),
    ({"speculative_config.method": "ngram", "speculative-config.method": "ngram",
      "speculative_config.num_speculative_tokens": 2}, "speculative-config.method"),
])
def test_one_option_or_field_given_twice_is_refused(tmp_path, rec, key):
    e = _refused(_smoke(tmp_path, serve={"baseline": {}, "ngram-n3": rec}))
    assert e.field == f"serve_params.json['ngram-n3'].{key}" and "twice" in e.rule, str(e)


# ---- 4. empty files -----------------------------------------------------------------------------------

@pytest.mark.parametrize("which,content,field", [
    ("serve", {}, "sweeps[0].serve_params"), ("serve", [], "sweeps[0].serve_params"),
    ("bench", {}, "sweeps[0].bench_params"), ("bench", [], "sweeps[0].bench_params"),
])
def test_empty_parameter_files_are_refused(tmp_path, which, content, field):
    e = _refused(_smoke(tmp_path, **{which: content}))
    assert e.field == field and "holds no" in e.rule and "give at least one" in e.rule, str(e)


def test_a_blank_file_and_a_link_vars_leaving_nothing_are_refused(tmp_path):
    e = _refused(_smoke(tmp_path, raw={"serve_params.json": "  \n"}))
    assert e.field == "sweeps[0].serve_params" and "empty" in e.rule, str(e)
    shutil.rmtree(tmp_path / "m")
    e = _refused(_linked_by_max_num_seqs(tmp_path, baseline_seqs=8))
    assert e.field == "sweeps[0].link_vars" and "no (serve, bench) combination" in e.rule, str(e)
    assert "no serve record and bench record agree on the linked values" in e.rule, str(e)
    # keys no record has are named (a new-user trial's "foo=bar" got the message above)
    shutil.rmtree(tmp_path / "m")
    d = _smoke(tmp_path)
    sc = json.loads((d / "specsim.json").read_text())
    sc["sweeps"][0]["link_vars"] = "foo=bar"
    (d / "specsim.json").write_text(json.dumps(sc))
    e = _refused(d)
    assert e.field == "sweeps[0].link_vars" and e.value == "foo=bar", str(e)
    assert "serve key 'foo' is in no serve record; bench key 'bar' is in no bench record" in e.rule, str(e)


def _linked_by_max_num_seqs(tmp_path, baseline_seqs: int) -> Path:
    """The smoke matrix with ``link_vars`` max_num_seqs=max_concurrency (its bench record has
    max_concurrency 4): the baseline at ``baseline_seqs``, ngram-n3 at 8 (never linked)."""
    d = _smoke(tmp_path, serve={"baseline": {"max_num_seqs": baseline_seqs},
                                "ngram-n3": {"max_num_seqs": 8, "speculative_config": SPEC}})
    sc = json.loads((d / "specsim.json").read_text())
    sc["sweeps"][0]["link_vars"] = "max_num_seqs=max_concurrency"
    (d / "specsim.json").write_text(json.dumps(sc))
    return d


def test_a_serve_record_link_vars_leaves_without_cells_is_refused(tmp_path):
    """vLLM's sweep would start that server and bench nothing on it (vllm/benchmarks/sweep/serve.py)."""
    e = _refused(_linked_by_max_num_seqs(tmp_path, baseline_seqs=4))
    assert e.field == "sweeps[].link_vars" and "'ngram-n3'" in e.rule and "'baseline'" not in e.rule, str(e)
    assert "start a server for no cell" in e.rule


# ---- 5. a record's flag against the serve_cmd's ---------------------------------------------------

def test_a_record_false_replaces_the_serve_cmd_flag_as_vllm_sweep_does(tmp_path):
    m = load_matrix(_smoke(tmp_path, serve={"baseline": {"enforce_eager": False},
                                            "ngram-n3": {"speculative_config": SPEC, "enforce_eager": False}}))
    g = m.groups[0]
    cmd = serve_command(m, g)
    assert "--no-enforce-eager" in cmd and "--enforce-eager" not in cmd
    assert cmd.index("--no-enforce-eager") == list(m.serve_cmd).index("--enforce-eager")  # in place
    text = dry_run_text(m, estimate_seconds(m))
    line = next(ln for ln in text.splitlines() if ln.startswith("  baseline: "))
    assert "--no-enforce-eager" in line and "--enforce-eager " not in line
    servers = dry_run_json(m, estimate_seconds(m))["servers"]
    assert servers[0]["command"] == cmd
    # the JSON gives the whole command, the speculative config included (the text shows it apart)
    spec = servers[1]["command"]
    assert spec[:-2] == serve_command(m, m.groups[1]) and spec[-2] == "--speculative-config"
    assert json.loads(spec[-1]) == SPEC


_CASES = [
    (["vllm", "serve", "m", "--enforce-eager", "--max-num-seqs", "32"], {"enforce_eager": False}),
    (["vllm", "serve", "m", "--no-enforce-eager"], {"enforce_eager": True}),
    (["vllm", "serve", "m", "--max-num-seqs", "32"], {"max-num-seqs": 4, "max_model_len": 1024}),
    (["vllm", "serve", "m", "--max_num_seqs", "32"], {"max-num-seqs": 4}),
    (["vllm", "serve", "m"], {"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}),
    (["vllm", "serve", "m"], {"speculative_config.method": "ngram", "compilation_config.cudagraph": True}),
    (["vllm", "serve", "m", "--speculative-config", "{}"], {"speculative_config": {"method": "ngram"}}),
]


def test_apply_record_replaces_or_appends():
    assert apply_record(*_CASES[0]) == ["vllm", "serve", "m", "--no-enforce-eager", "--max-num-seqs", "32"]
    assert apply_record(*_CASES[1]) == ["vllm", "serve", "m", "--no-enforce-eager", "--enforce-eager"]
    assert apply_record(*_CASES[3]) == ["vllm", "serve", "m", "--max-num-seqs", "4"]
    assert apply_record(*_CASES[5])[-1] == "--compilation-config.cudagraph=true"


# ---- 6. estimates ---------------------------------------------------------------------------------

def _copy_runs(dst: Path, pattern: str, edit=None) -> list[dict]:
    out = []
    for src in sorted(project_data_path("runs").glob(pattern)):
        p = json.loads((src / "provenance.json").read_text())
        if edit:
            p = edit(p)
        (dst / src.name).mkdir(parents=True)
        (dst / src.name / "provenance.json").write_text(json.dumps(p))
        out.append(p)
    return out


def test_a_process_client_matrix_is_estimated_with_the_process_start(tmp_path):
    """smoke (bench_client process) from the fast loop's persistent-client records: each recorded run
    counts as its traffic + the process overhead, not as its persistent-client seconds."""
    m = load_matrix("smoke")
    assert m.bench_client == "process"
    recs = _copy_runs(tmp_path / "runs", "cpu-validation-fast-*-baseline-c4")
    assert recs and all(recorded_bench_client(p) == "persistent" for p in recs)
    est = estimate_seconds(m, tmp_path / "runs")
    s, basis = est.cells["baseline-c4"]
    assert basis == "same cell"
    assert s == pytest.approx(statistics.median(p["summary"]["duration_s"] + PROCESS_OVERHEAD_S for p in recs))
    assert s > statistics.median(p["bench_seconds"] for p in recs) + 7  # the ~9 s start is counted
    # the same record made by the process client keeps its own seconds
    shutil.rmtree(tmp_path / "runs")
    recs = _copy_runs(tmp_path / "runs", "cpu-validation-fast-*-baseline-c4",
                      lambda p: {**p, "bench_client": {"kind": "process"}})
    est = estimate_seconds(m, tmp_path / "runs")
    assert est.cells["baseline-c4"][0] == pytest.approx(statistics.median(p["bench_seconds"] for p in recs))


def test_shipped_smoke_estimate_is_no_longer_the_persistent_one():
    m = load_matrix("smoke")
    est = estimate_seconds(m)
    for lab in ("baseline-c4", "ngram-n3-c4"):
        assert est.cells[lab][0] > PROCESS_OVERHEAD_S, est.cells[lab]
    assert est.total_seconds(m) > 75  # was 1.1 min (68 s); the reviewer's run took 1 min 44 s


def test_a_run_without_bench_client_counts_as_the_process_client():
    assert recorded_bench_client({"kind": "bench_serve"}) == "process"
    assert recorded_bench_client({"bench_client": {"kind": "persistent", "started_seconds": 9.0}}) == "persistent"
    assert recorded_bench_client({"bench_client": {"kind": "process"}}) == "process"
    assert recorded_bench_client({"bench_client": "process"}) == "process"
    assert PERSISTENT_OVERHEAD_S < PROCESS_OVERHEAD_S and BENCH_CLIENT_START_S == 9.2


def test_gpu_hours_include_health_checks_and_probes():
    m = load_matrix("cpu-validation-fast")
    est = estimate_seconds(m)
    servers = sum((est.server_start_s + sum(est.cells[c.run_label][0] for c in g.cells)) * g.gpus for g in m.groups)
    judges = sum(est.health_checks.values()) + sum(est.probes.values())
    assert judges > 60
    want = (servers + judges) / 3600
    d = dry_run_json(m, est)
    assert d["device_hours"]["gpu"] == pytest.approx(want)
    assert d["device_hours"]["cpu_host"] == pytest.approx(est.total_seconds(m) / 3600)
    assert f"{want:.3f} GPU-hours" in dry_run_text(m, est)


def test_dry_run_json_keeps_the_cli_keys_and_adds_each_cell_settings():
    m = load_matrix("cpu-validation")
    est = estimate_seconds(m)
    d = dry_run_json(m, est)
    # what the CLI printed before (specsim/cli _cmd_run_matrix), unchanged
    old = {"matrix": m.name, "servers": [{"name": g.name, "gpus": g.gpus, "speculative_config": g.speculative_config,
                                          "cells": [c.run_label for c in g.cells]} for g in m.groups],
           "health_checks": [h.name for h in m.health_checks], "probes": [p.name for p in m.probes],
           "estimate_seconds": est.total_seconds(m),
           "cells": {k: {"seconds": s, "basis": b} for k, (s, b) in est.cells.items()},
           "judges": {k: {"seconds": s, "basis": est.judge_basis.get(k)}
                      for k, s in {**est.health_checks, **est.probes}.items()},
           "vllm_sweep_commands": m.vllm_sweep_commands()}
    for k, v in old.items():
        if k == "servers":
            assert [{kk: s[kk] for kk in v[0]} for s in d[k]] == v
        elif k == "cells":
            assert {lab: {"seconds": c["seconds"], "basis": c["basis"]} for lab, c in d[k].items()} == v
        else:
            assert d[k] == v, k
    c = d["cells"]["ngram-n3-t0.8-c4"]
    assert (c["seed"], c["timeout_s"], c["temperature"], c["concurrency"], c["num_prompts"], c["output_len"]) == \
        (0, 1800.0, 0.8, 4, 8, 128)
    assert c["guarded_by"] == ["selfdraft-t0.8-health"] and c["greedy_vs"] is None
    assert d["cells"]["ngram-n3-c4"]["greedy_vs"] == "baseline"
    assert set(d["device_hours"]) == {"cpu_host", "gpu"} and d["bench_client"] == "persistent"
    json.dumps(d)  # plain JSON


def test_general_output_len_sets_the_cell_output_length(tmp_path):
    m = load_matrix(_smoke(tmp_path, bench={"c4": {"max_concurrency": 4, "num_prompts": 4, "temperature": 0, "output_len": 16}}))
    assert {c.output_len for c in m.cells()} == {16}


# ---- the process client records itself (serve_bench) -------------------------------------------------

_SERVER = textwrap.dedent('''
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
        def do_GET(self):
            self.send_response(200 if self.path in ("/health", "/metrics") else 404)
            self.end_headers()
            if self.path == "/metrics":
                self.wfile.write(b"# TYPE vllm:generation_tokens counter\\nvllm:generation_tokens_total 1.0\\n")
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
''')
_BENCH = ("import json, os, sys; json.dump({'num_prompts': 1, 'completed': 1, 'failed': 0, 'generated_texts': ['x'],"
          " 'input_lens': [5], 'output_lens': [3], 'errors': ['']}, open(os.path.join(sys.argv[1], 'bench.json'), 'w'))")


def test_a_process_client_run_records_its_bench_client(tmp_path):
    (tmp_path / "srv.py").write_text(_SERVER)
    res = serve_and_bench([sys.executable, str(tmp_path / "srv.py"), "{port}"],
                          [BenchPlan("p-c1", [sys.executable, "-c", _BENCH, "{result_dir}"])],
                          runs_dir=tmp_path / "runs", stop_timeout_s=2.0, base_provenance={"kind": "bench_serve"})
    assert [r.status for r in res] == ["ok"], res
    prov = json.loads((tmp_path / "runs" / "p-c1" / "provenance.json").read_text())
    assert prov["bench_client"] == {"kind": "process"} and recorded_bench_client(prov) == "process"


# ---- against vLLM's own code (in the vLLM environment) -------------------------------------------

_APPLY = textwrap.dedent('''
    import json, sys
    from vllm.benchmarks.sweep.param_sweep import ParameterSweepItem
    print(json.dumps([ParameterSweepItem(rec).apply_to_cmd(cmd) for cmd, rec in json.loads(sys.argv[1])]))
''')


@pytest.mark.vllm
def test_apply_record_is_vllm_sweep_apply_to_cmd():
    py = vllm_python()
    r = subprocess.run([str(py), "-c", _APPLY, json.dumps(_CASES)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    assert [apply_record(cmd, rec) for cmd, rec in _CASES] == theirs


#: the pydantic bounds of the config field behind each ``vllm serve`` option (one argument group per
#: config class in vLLM's parser)
_BOUNDS_GEN = textwrap.dedent('''
    import json, sys
    import annotated_types as at
    import vllm.config as C
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    out = {}
    for g in make_arg_parser(FlexibleArgumentParser())._action_groups:
        fields = getattr(getattr(C, g.title, None), "__pydantic_fields__", None)
        if not fields:
            continue
        for a in g._group_actions:
            f = fields.get(a.dest)
            if f is None:
                continue
            b = {k: getattr(m, k) for m in f.metadata for k in ("ge", "gt", "le", "lt")
                 if isinstance(m, getattr(at, k.capitalize()))}
            if b:
                for o in a.option_strings:
                    if o.startswith("--"):
                        out[o[2:]] = [b, g.title]
    json.dump(out, sys.stdout)
''')


@pytest.mark.vllm
def test_serve_bounds_are_vllm_own():
    py = vllm_python()
    r = subprocess.run([str(py), "-c", _BOUNDS_GEN], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert {k: (b, c) for k, (b, c) in d.items()} == SERVE_BOUNDS
    assert SERVE_BOUNDS["tensor-parallel-size"] == ({"ge": 1}, "ParallelConfig")


def test_health_check_min_ratio_must_be_a_fraction(tmp_path):
    """min_ratio is observed / expected position-1 acceptance: outside (0, 1] a check could never
    fail (0) or never pass (> 1)."""
    sc = json.loads((project_data_path("matrices", "cpu-validation-fast") / "specsim.json").read_text())
    h = sc["health_checks"]["selfdraft-t0.8-health"]
    d = tmp_path / "m"
    shutil.copytree(project_data_path("matrices", "cpu-validation-fast"), d)
    for bad in (0, -0.5, 1.5):
        (d / "specsim.json").write_text(json.dumps({**sc, "health_checks": {"hc": {**h, "min_ratio": bad}}}))
        e = _refused(d)
        assert e.field == "health_checks['hc'].min_ratio" or e.field.endswith("min_ratio")
        assert "(0, 1]" in str(e)
    (d / "specsim.json").write_text(json.dumps({**sc, "health_checks": {"hc": {**h, "min_ratio": 1}}}))
    assert load_matrix(d).health_checks[0].min_ratio == 1.0


def test_data_parallel_replicas_count_as_gpus(tmp_path):
    """vLLM's --data-parallel-size runs that many engine replicas of tp x pp GPUs each."""
    d = _smoke(tmp_path, serve={"baseline": {}, "ngram-n3": {
        "tensor_parallel_size": 2, "data_parallel_size": 2,
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
                               "prompt_lookup_min": 2}}})
    gpus = {g.name: g.gpus for g in load_matrix(d).groups}
    assert gpus == {"baseline": 1, "ngram-n3": 4}
