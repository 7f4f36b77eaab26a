"""REAL vLLM cells on a local Ray cluster (``ray.init()`` on this machine) and on submitit's local
cluster (``--executor slurm --slurm-param cluster=local``) vs the same cells run locally.

* The ``smoke`` matrix (data/matrices/smoke: SmolLM2-135M-Instruct fp32, 4 HumanEval prompts x 64
  tokens, concurrency 4, baseline + n-gram N=3) run with ``executor="local"`` and ``"ray"``: the same
  run ids and files, bit-identical acceptance counters and greedy outputs; the throughput ratio
  Ray / local is reported (printed and in the test's properties), not asserted.
* A running cell interrupted under Ray -- ``ray.cancel(force=False)`` (KeyboardInterrupt in the
  task) and ``ray.cancel(force=True)`` (the worker is killed) -- leaves no vLLM process (psutil), the
  server ends on SIGINT / SIGTERM and not SIGKILL (its guardian's record), the cells are recorded
  failed and the stop time is in the record (not asserted as a timing).

* The same ``smoke`` cells through submitit's local cluster: the same records as local; and Ctrl-C to
  the whole process group (a terminal's) while a cell runs stops its server with SIGINT, records the
  cell failed and leaves no vLLM process.

About 6 minutes on 2 cores (5 min 51 s on 2026-12-05, the submitit tests 2.5 min of it).  Needs ``.venv-vllm`` (``make vllm-env``), ray (extra ``test`` / ``ray``)
and submitit (``test`` / ``slurm``); skipped without them unless ``SPECSIM_REQUIRE_VLLM=1``.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from specsim.catalog import project_data_path, project_dir
from specsim.runs.provenance import VllmInstall

pytestmark = pytest.mark.vllm


def _require(module: str | None = "ray", extra: str = "ray"):
    """The vLLM environment, the model and ``module`` (an optional extra; None: none needed), or skip."""
    install = VllmInstall.default()
    model = project_dir() / "models" / "smollm2-135m-instruct" / "config.json"
    missing = [str(p) for p, ok in ((install.venv, install.exists()), (model, model.exists())) if not ok]
    try:
        if module:
            __import__(module)
    except ModuleNotFoundError:
        missing.append(f"the {module} package (pip install 'specsim[{extra}]')")
    if missing:
        msg = f"needs {', '.join(missing)}"
        if os.environ.get("SPECSIM_REQUIRE_VLLM") == "1":
            pytest.fail(msg + " (SPECSIM_REQUIRE_VLLM=1)")
        pytest.skip(msg)
    return install


@pytest.fixture(scope="module")
def cluster():
    install = _require()
    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    yield install
    ray.shutdown()


#: marks the vLLM processes of this test process (in their environment, through the matrix's env):
#: another test run on the same machine has its own
MARK = f"specsim-test-{os.getpid()}"


def _vllm_procs() -> list[psutil.Process]:
    """Live vLLM server / engine / worker processes started by THIS test process."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "name", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE:  # ended, waiting to be reaped: not running
            continue
        cmd = " ".join(p.info["cmdline"] or [])
        if (".venv-vllm/bin/vllm" in cmd and " serve " in cmd and "_guard.py" not in cmd) or \
                p.info["name"] in ("VLLM::EngineCore", "VLLM::Worker"):
            if _marked(p):
                out.append(p)
    return out


def _marked(p: psutil.Process) -> bool:
    try:
        return p.environ().get("SPECSIM_TEST_MARK") == MARK
    except (psutil.Error, OSError):
        return False


def _marked_smoke(tmp: Path, name: str = "smoke") -> Path:
    """The shipped smoke matrix with the test's mark in its env (same name: same run ids)."""
    d = tmp / f"{name}-matrix"
    shutil.copytree(project_data_path("matrices", "smoke"), d)
    sc = json.loads((d / "specsim.json").read_text())
    sc["env"] = {**sc.get("env", {}), "SPECSIM_TEST_MARK": MARK}
    (d / "specsim.json").write_text(json.dumps(sc))
    return d


def _summary(run: Path) -> dict:
    return json.loads((run / "provenance.json").read_text())


def _smoke_run(install, tmp_path_factory, kind: str, **kw):
    """The marked smoke matrix run with ``executor=kind``: (runs dir, results, wall seconds)."""
    from specsim.runs.runner import run_matrix

    saved = os.environ.pop("OMP_NUM_THREADS", None)  # the driver sets none: vLLM chooses per process
    try:
        matrix = _marked_smoke(tmp_path_factory.mktemp(f"matrix-{kind}"))
        d = tmp_path_factory.mktemp(kind)
        t0 = time.monotonic()
        res = run_matrix(matrix, runs_dir=d, install=install, stamp="R", progress=False, executor=kind, **kw)
        return d, res, time.monotonic() - t0
    finally:
        if saved is not None:
            os.environ["OMP_NUM_THREADS"] = saved


@pytest.fixture(scope="module")
def local_smoke(tmp_path_factory):
    return _smoke_run(_require(module=None), tmp_path_factory, "local")


@pytest.fixture(scope="module")
def local_and_ray(cluster, local_smoke, tmp_path_factory):
    return {"local": local_smoke, "ray": _smoke_run(cluster, tmp_path_factory, "ray")}


def test_ray_and_local_record_the_same_runs(local_and_ray, record_property):
    (ld, lres, lt), (rd, rres, rt) = local_and_ray["local"], local_and_ray["ray"]
    assert [(r.run_id, r.status) for r in lres] == [(r.run_id, r.status) for r in rres]
    assert [r.status for r in lres] == ["ok", "ok"]  # baseline, ngram
    assert (ld / "smoke-R-manifest" / "runs.csv").exists() and (rd / "smoke-R-manifest" / "runs.csv").exists()
    files = lambda d: {p.name: sorted(f.name for f in p.iterdir()) for p in d.iterdir() if not p.name.startswith(".")}
    assert files(ld) == files(rd)
    report = {}
    for name in ("smoke-R-baseline-c4", "smoke-R-ngram-n3-c4"):
        a, b = _summary(ld / name), _summary(rd / name)
        assert a["executor"]["kind"] == "local" and b["executor"]["kind"] == "ray"
        assert b["executor"]["resources"] == {"num_cpus": os.cpu_count()}
        # the Ray worker's OMP_NUM_THREADS=1 does not reach vLLM: both run as from a plain shell
        assert "OMP_NUM_THREADS" not in a["env"] and "OMP_NUM_THREADS" not in b["env"]
        assert set(b["env_removed"]) == {"OMP_NUM_THREADS"}  # the Ray worker's own value
        log = (rd / name / "server.log").read_text()
        assert "Reducing Torch threads from" in log and "OMP_NUM_THREADS=1 is set" not in log
        assert (ld / name / "outputs.jsonl").read_text() == (rd / name / "outputs.jsonl").read_text()
        sa, sb = a["summary"], b["summary"]
        assert sa["total_output_tokens"] == sb["total_output_tokens"] == sa["generation_tokens_delta"]
        if "spec" in sa:
            keys = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos")
            assert {k: sa["spec"][k] for k in keys} == {k: sb["spec"][k] for k in keys}
            assert sa["spec"]["num_drafts"] > 0
            assert a["checks"]["greedy_identical_to_baseline"]["all_identical"] is True
            assert b["checks"]["greedy_identical_to_baseline"]["all_identical"] is True
        ta, tb = sa["output_throughput_tokens_per_s"], sb["output_throughput_tokens_per_s"]
        report[name] = {"local_tok_s": round(ta, 2), "ray_tok_s": round(tb, 2), "ray_over_local": round(tb / ta, 3),
                        "local_other_cpu": (a.get("cpu_accounting") or {}).get("other_fraction"),
                        "ray_other_cpu": (b.get("cpu_accounting") or {}).get("other_fraction")}
        # the server's end is recorded: a clean SIGINT stop, no SIGKILL
        assert b["server_end"]["stop_signals_sent"] == ["SIGINT"] and b["server_end"]["stop_seconds"] is not None
    report["wall_s"] = {"local": round(lt, 1), "ray": round(rt, 1)}
    record_property("ray_vs_local_throughput", json.dumps(report))
    print("\nRay vs local (throughput differences, not asserted):", json.dumps(report, indent=1))
    assert not _vllm_procs()


def _interrupt_matrix(tmp: Path) -> Path:
    """The smoke baseline with a bench long enough to interrupt (16 prompts x 128 tokens)."""
    d = tmp / "interrupt"
    shutil.copytree(project_data_path("matrices", "smoke"), d)
    (d / "serve_params.json").write_text(json.dumps({"baseline": {}}))
    (d / "bench_params.json").write_text(json.dumps({"c1": {"max_concurrency": 1, "num_prompts": 16,
                                                            "temperature": 0, "custom_output_len": 128}}))
    sc = json.loads((d / "specsim.json").read_text())
    sc["name"] = "interrupt"
    sc["env"] = {"SPECSIM_GUARD_STATUS_COPY": str(tmp / "guard"), "SPECSIM_TEST_MARK": MARK}
    (d / "specsim.json").write_text(json.dumps(sc))
    (tmp / "guard").mkdir()
    return d


@pytest.mark.parametrize("force", [False, True])
def test_interrupted_cell_under_ray_leaves_no_server(cluster, tmp_path, monkeypatch, force):
    import ray

    from specsim.runs import executors
    from specsim.runs.runner import run_matrix

    refs = []
    orig = executors.RayExecutor.submit

    def submit(self, job, tag):
        ref = orig(self, job, tag)
        refs.append(ref)
        return ref

    monkeypatch.setattr(executors.RayExecutor, "submit", submit)
    m = _interrupt_matrix(tmp_path)
    runs = tmp_path / "runs"
    box = {}
    jobs_before = set(Path(tempfile.gettempdir()).glob("specsim-job-*"))
    th = threading.Thread(target=lambda: box.update(res=run_matrix(
        m, runs_dir=runs, install=cluster, stamp="I", progress=False, executor="ray")))
    th.start()
    # wait until the cell is running: the server is up and its bench client started
    end = time.monotonic() + 300
    while time.monotonic() < end:
        if any("bench" in " ".join(p.info["cmdline"] or []) and "interrupt-I-baseline-c1" in " ".join(p.info["cmdline"] or [])
               and _marked(p) for p in psutil.process_iter(["cmdline"])):
            break
        time.sleep(0.5)
    else:
        pytest.fail("the cell never started")
    time.sleep(2.0)
    t_cancel = time.monotonic()
    ray.cancel(refs[-1], force=force)
    th.join(timeout=240)
    assert not th.is_alive()
    # nor its staging directory: a killed worker cannot remove it; the driver does, on closing
    assert not set(Path(tempfile.gettempdir()).glob("specsim-job-*")) - jobs_before
    # no vLLM process is left (the guardian stops the group even when the worker was killed)
    end = time.monotonic() + 90
    while _vllm_procs() and time.monotonic() < end:
        time.sleep(0.5)
    assert not _vllm_procs(), [p.info for p in _vllm_procs()]
    # the server ended on SIGINT (or SIGTERM), not SIGKILL: its guardian's record.  The guardian writes it
    # after reaping the server, which a busy 2-core host may schedule a moment after the server is gone
    end = time.monotonic() + 30
    while True:
        st = [json.loads(f.read_text()) for f in (tmp_path / "guard").glob("guard-*.json")]
        srv = [s for s in st if s["cmd"][1:2] == ["serve"]]
        if srv or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert len(srv) == 1, st
    s = srv[0]
    assert s["end_signal"] != "SIGKILL" and s["returncode"] != -9 and "SIGKILL" not in s["signals_sent"], s
    stop_sigs = set(s["signals_received"]) | set(s["signals_sent"])
    assert stop_sigs & {"SIGINT", "SIGTERM"}, s
    assert s["orphaned"] is force  # force: the worker died, the guardian stopped the server itself
    if force:  # and removed the rendezvous file its log names, which the dead worker could not (it stayed)
        assert len(s["removed_files"]) == 1 and "/vllm_dist_" in s["removed_files"][0], s
        assert not Path(s["removed_files"][0]).exists()
    assert s["stop_seconds"] is not None
    # the cell is recorded as failed, by the driver, with the executor and when it was stopped
    rec = json.loads((runs / "interrupt-I-baseline-c1" / "provenance.json").read_text())
    assert rec["status"] == "failed" and rec["executor"]["kind"] == "ray"
    assert rec["ended"].endswith("Z")
    if not force:  # the task stopped its server and returned the interrupted run with the stop
        assert rec["error"] == "interrupted (KeyboardInterrupt)"
        assert rec["server_end"]["stop_signals_sent"][0] == "SIGINT" and rec["server_end"]["stopped_at"].endswith("Z")
        assert rec["server_end"]["stop_seconds"] is not None and (runs / "interrupt-I-baseline-c1" / "server.log").exists()
    else:  # the worker died with the task: the driver records the loss; the guardian's record has the stop
        assert "Worker" in rec["error"] or "worker" in rec["error"] or "cancel" in rec["error"].lower(), rec["error"]
    print(f"\ncancel(force={force}): stopped {time.monotonic() - t_cancel:.1f} s after the cancel; guardian: {s}")


# ---- submitit's local cluster (``--executor slurm --slurm-param cluster=local``) --------------------

def test_slurm_local_cluster_records_what_local_records(local_smoke, tmp_path_factory, record_property):
    """Real cells through submitit's local cluster (one job at a time on this host): the same run
    ids and files as local, bit-identical acceptance counters and greedy outputs; throughput
    reported, not asserted."""
    install = _require(module="submitit", extra="slurm")
    ld, lres, lt = local_smoke
    sd, sres, st = _smoke_run(install, tmp_path_factory, "slurm",
                              slurm={"cluster": "local", "folder": tmp_path_factory.mktemp("submitit")})
    assert [(r.run_id, r.status) for r in lres] == [(r.run_id, r.status) for r in sres]
    assert [r.status for r in sres] == ["ok", "ok"]
    files = lambda d: {p.name: sorted(f.name for f in p.iterdir()) for p in d.iterdir() if not p.name.startswith(".")}
    assert files(ld) == files(sd)
    report = {}
    for name in ("smoke-R-baseline-c4", "smoke-R-ngram-n3-c4"):
        a, b = _summary(ld / name), _summary(sd / name)
        assert b["executor"]["kind"] == "slurm" and b["executor"]["resources"]["cpus_per_task"] == os.cpu_count()
        assert (ld / name / "outputs.jsonl").read_text() == (sd / name / "outputs.jsonl").read_text()
        sa, sb = a["summary"], b["summary"]
        assert sa["total_output_tokens"] == sb["total_output_tokens"]
        if "spec" in sa:
            keys = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos")
            assert {k: sa["spec"][k] for k in keys} == {k: sb["spec"][k] for k in keys}
            assert b["checks"]["greedy_identical_to_baseline"]["all_identical"] is True
        assert b["server_end"]["stop_signals_sent"] == ["SIGINT"]
        ta, tb = sa["output_throughput_tokens_per_s"], sb["output_throughput_tokens_per_s"]
        report[name] = {"local_tok_s": round(ta, 2), "slurm_local_tok_s": round(tb, 2),
                        "slurm_over_local": round(tb / ta, 3)}
    report["wall_s"] = {"local": round(lt, 1), "slurm_local": round(st, 1)}
    record_property("slurm_local_vs_local_throughput", json.dumps(report))
    print("\nsubmitit local cluster vs local (throughput differences, not asserted):", json.dumps(report, indent=1))
    assert not _vllm_procs()


def test_terminal_ctrl_c_under_the_slurm_local_cluster_stops_the_server_with_sigint(tmp_path):
    """``specsim run-matrix --executor slurm --slurm-param cluster=local`` interrupted as a terminal
    does (SIGINT to its whole process group) while a real cell benches: submitit's controller no
    longer SIGKILLs the job; the server ends on SIGINT, the cell is recorded failed with its stop, and
    no vLLM process is left."""
    _require(module="submitit", extra="slurm")
    m = _interrupt_matrix(tmp_path)
    runs = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    proc = subprocess.Popen([sys.executable, "-m", "specsim", "run-matrix", "--matrix", str(m), "--runs-dir", str(runs),
                             "--executor", "slurm", "--slurm-param", "cluster=local", "--stamp", "S"],
                            env=env, cwd=project_dir(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        end = time.monotonic() + 300
        while time.monotonic() < end:
            if any("bench" in " ".join(p.info["cmdline"] or []) and "interrupt-S-baseline-c1" in
                   " ".join(p.info["cmdline"] or []) and _marked(p) for p in psutil.process_iter(["cmdline"])):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        else:
            pytest.fail("the cell never started")
        time.sleep(2.0)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err, err
    end = time.monotonic() + 90
    while _vllm_procs() and time.monotonic() < end:
        time.sleep(0.5)
    assert not _vllm_procs(), [p.info for p in _vllm_procs()]
    srv = [json.loads(f.read_text()) for f in (tmp_path / "guard").glob("guard-*.json")]
    srv = [x for x in srv if x["cmd"][1:2] == ["serve"]]
    assert len(srv) == 1 and srv[0]["end_signal"] != "SIGKILL" and "SIGKILL" not in srv[0]["signals_sent"], srv
    assert not srv[0]["orphaned"], srv[0]  # the job stopped its server; it was not killed under it
    rec = json.loads((runs / "interrupt-S-baseline-c1" / "provenance.json").read_text())
    assert rec["status"] == "failed" and rec["executor"]["kind"] == "slurm" and rec["error"].startswith("interrupted")
    assert rec["server_end"]["stop_signals_sent"][0] == "SIGINT" and rec["server_end"]["stop_seconds"] is not None
