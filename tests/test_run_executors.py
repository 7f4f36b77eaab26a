"""The matrix runner with its executors (local, Ray), with a stand-in ``vllm`` (specsim.runs.runner,
executors).

A fake vLLM environment (``bin/vllm`` answering ``serve`` and ``bench serve``, ``bin/python``
answering the offline worker) exercises what the runner does around vLLM: the judges (health
checks skipping what they guard, greedy identity), resume, atomic import from the driver, lost
Ray tasks, OpenMP settings in Ray workers.  It does not imitate vLLM's numbers; the real runs are
in ``tests/test_ray_vllm.py``.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from specsim.catalog import project_data_path
from specsim.errors import SpecsimValueError
from specsim.runs.provenance import VllmInstall
from specsim.runs.runner import run_matrix

REAL_PY = sys.executable

FAKE_VLLM = textwrap.dedent('''
    import http.server, json, os, sys, time
    args = sys.argv[1:]
    log = os.environ["FAKE_LOG"]
    def opt(name, default=None):
        return args[args.index(name) + 1] if name in args else default
    def kill_my_worker():  # the Ray worker or submitit job running this job dies (SIGKILL)
        import psutil
        driver = int(os.environ["FAKE_DRIVER_PID"])  # only a worker of this test's own Ray cluster
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or [""]
            if (cmd[0].startswith("ray::_ray_job") or "submitit.core._submit" in cmd) and \
                    driver in [a.pid for a in p.parents()]:
                p.kill()
    if args[0] == "serve":
        # its arguments and the environment's tokens, unmasked (vLLM 0.32 shows hf_token as '***' in its
        # non-default args; a traceback or another version may print them as given)
        print("fake vllm serve: non-default args:", args[1:],
              {k: v for k, v in os.environ.items() if k.endswith("TOKEN")}, flush=True)
        port = int(opt("--port"))
        spec = opt("--speculative-config")
        with open(log, "a") as f:
            f.write(json.dumps({"event": "serve", "pid": os.getpid(), "spec": spec, "t": time.time(),
                                "omp": os.environ.get("OMP_NUM_THREADS")}) + "\\n")
        if "kill-my-worker" in args:
            kill_my_worker()
        slow = spec and str(json.loads(spec).get("num_speculative_tokens")) == os.environ.get("FAKE_SLOW_N")
        try:  # a slow start (FAKE_SERVE_DELAY seconds before it listens; 30 s for N = FAKE_SLOW_N)
            time.sleep(30.0 if slow else float(os.environ.get("FAKE_SERVE_DELAY", "0")))
        except KeyboardInterrupt:
            print("fake vllm serve: SIGINT while starting", flush=True)
            time.sleep(float(os.environ.get("FAKE_STOP_DELAY", "0")))  # a slow shutdown
            sys.exit(0)
        if os.environ.get("FAKE_SERVE_EXIT"):  # a server that fails before it listens
            print("fake vllm serve: fatal: cannot load model", flush=True)
            sys.exit(3)
        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass
            def do_GET(self):
                body = b"" if self.path == "/health" else b"vllm:generation_tokens_total 1.0\\n"
                self.send_response(200); self.end_headers(); self.wfile.write(body)
            def do_POST(self):
                self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
        try:
            srv = http.server.HTTPServer(("127.0.0.1", port), H)
            if spec and str(json.loads(spec).get("num_speculative_tokens")) == os.environ.get("FAKE_DIE_N"):
                import threading  # this server dies 0.5 s after it listens
                threading.Thread(target=lambda: (time.sleep(0.5), os._exit(3)), daemon=True).start()
            with open(log, "a") as f:
                f.write(json.dumps({"event": "listen", "pid": os.getpid(), "spec": spec, "t": time.time()}) + "\\n")
            srv.serve_forever()
        except KeyboardInterrupt:
            print("fake vllm serve: SIGINT, shutting down", flush=True)
    elif args[:2] == ["bench", "serve"]:
        c = int(opt("--max-concurrency")); n = int(opt("--num-prompts"))
        nth = 1 + sum('"event": "bench"' in x for x in open(log)) if os.path.exists(log) else 1
        with open(log, "a") as f:
            f.write(json.dumps({"event": "bench", "concurrency": c, "seed": opt("--seed"), "t": time.time()}) + "\\n")
        if os.environ.get("FAKE_BENCH_FAIL") == str(c):
            print("Error: connection refused", flush=True)
            sys.exit(2)
        if os.environ.get("FAKE_KILL_WORKER_AT_C") == str(c):
            kill_my_worker()
            time.sleep(30)
        time.sleep(float(os.environ.get("FAKE_BENCH_SLEEP", "0")))
        burn = float(os.environ.get("FAKE_BENCH_BURN", "0"))  # CPU seconds this bench uses
        t = time.process_time()
        while time.process_time() - t < burn:
            pass
        if os.environ.get("FAKE_BENCH_SLEEP_NTH") == str(nth):  # only the nth bench of the log is slow
            time.sleep(30)
        # a bench at seed FAKE_GREEDY_DIFF_SEED writes outputs that differ from the baseline's
        texts = [f"out{i}" + ("x" if opt("--seed") == os.environ.get("FAKE_GREEDY_DIFF_SEED") else "")
                 for i in range(n)]
        json.dump({"num_prompts": n, "completed": n, "failed": 0, "generated_texts": texts,
                   "input_lens": [5] * n, "output_lens": [3] * n, "errors": [""] * n},
                  open(os.path.join(opt("--result-dir"), opt("--result-filename")), "w"))
    else:
        sys.exit(f"fake vllm: unknown command {args}")
''')

FAKE_PYTHON = textwrap.dedent('''\
    #!/bin/sh
    case "$1" in
      *_offline_worker.py) exec "{real}" "{worker}" "$@" ;;
      *) exec "{real}" "$@" ;;
    esac
''')

FAKE_WORKER = textwrap.dedent('''
    import json, os, sys
    job = json.load(open(sys.argv[2]))
    if os.environ.get("FAKE_HEALTH") == "crash":  # the health check's worker dies: no verdict
        sys.exit("fake worker: crashed")
    ok = os.environ.get("FAKE_HEALTH", "pass") == "pass"
    res = {"metrics": [{"name": "vllm:spec_decode_num_drafts", "value": 100},
                       {"name": "vllm:spec_decode_num_accepted_tokens_per_pos",
                        "values": [58 if ok else 4, 30, 10]}],
           "reference": {"expected_pos1_acceptance": 0.58}}
    json.dump(res, open(sys.argv[3], "w"))
''')


@pytest.fixture
def fake_env(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "fake_vllm.py").write_text(FAKE_VLLM)
    (tmp_path / "fake_worker.py").write_text(FAKE_WORKER)
    vllm = venv / "bin" / "vllm"
    vllm.write_text(f"#!/bin/sh\nexec '{REAL_PY}' '{tmp_path / 'fake_vllm.py'}' \"$@\"\n")
    py = venv / "bin" / "python"
    py.write_text(FAKE_PYTHON.format(real=REAL_PY, worker=tmp_path / "fake_worker.py"))
    for f in (vllm, py):
        f.chmod(0o755)
    log = tmp_path / "events.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("SPECSIM_GUARD_GRACE_S", "3")
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    return {"install": VllmInstall(venv), "log": log, "tmp": tmp_path}


def _matrix(tmp: Path, *, extra_serve: dict | None = None, env: dict | None = None,
            sidecar: dict | None = None) -> Path:
    d = tmp / "matrix"
    d.mkdir(exist_ok=True)
    serve = {"baseline": {}, "ngram-n2": {"speculative_config": {"method": "ngram", "num_speculative_tokens": 2}},
             "ngram-n3": {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}}
    serve.update(extra_serve or {})
    bench = {"c1": {"max_concurrency": 1, "num_prompts": 2, "temperature": 0},
             "t0.8-c2": {"max_concurrency": 2, "num_prompts": 2, "temperature": 0.8}}
    (d / "serve_params.json").write_text(json.dumps(serve))
    (d / "bench_params.json").write_text(json.dumps(bench))
    prompts = project_data_path("prompts", "humaneval_custom.jsonl")
    (d / "specsim.json").write_text(json.dumps({
        "name": "fake", "description": "stand-in vllm",
        "serve_cmd": "vllm serve org/hub-model --dtype float32 --max-num-seqs 4",
        # --disable-shuffle: the prompts do not depend on the seed, so the seed-7 cells keep their greedy judge
        "bench_cmd": f"vllm bench serve --backend vllm --model org/hub-model --dataset-name custom "
                     f"--dataset-path {prompts} --disable-shuffle --custom-output-len 8 --seed 0",
        "sweeps": [{"serve_params": "serve_params.json", "bench_params": "bench_params.json"}],
        "baseline": "baseline",
        "health_checks": {"t-health": {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3},
                                       "temperature": 0.8, "guards": ["ngram-*/t0.8-*"]}},
        "cells": {"ngram-n3/*": {"seed": 7, "timeout_s": 60}},
        "timeout_s": 120, "seed": 0, "platform": "auto",
        # the sidecar's env reaches every vLLM process, also in a Ray worker started elsewhere
        "env": {"FAKE_LOG": str(tmp / "events.jsonl"), "FAKE_DRIVER_PID": str(os.getpid()), **(env or {})},
        **(sidecar or {})}))
    return d


def _events(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def _prov(p: Path) -> dict:
    return json.loads((p / "provenance.json").read_text())


def _no_fake_processes():
    """Live stand-in servers / benches of THIS test process (another test run may share the machine)."""
    me = str(os.getpid())
    left = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE or not any("fake_vllm.py" in c for c in (p.info["cmdline"] or [])):
            continue
        try:
            if p.environ().get("FAKE_DRIVER_PID") == me:
                left.append(p.info)
        except (psutil.Error, OSError):
            continue
    return left


def test_local_judges_skip_and_compare(fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_HEALTH", "fail")
    runs = fake_env["tmp"] / "runs"
    res = run_matrix(_matrix(fake_env["tmp"]), runs_dir=runs, install=fake_env["install"], stamp="S1",
                     progress=False)
    st = {r.run_id.removeprefix("fake-S1-"): r.status for r in res}
    assert st == {"t-health": "ok", "baseline-c1": "ok", "baseline-t0.8-c2": "ok", "ngram-n2-c1": "ok",
                  "ngram-n2-t0.8-c2": "skipped", "ngram-n3-c1": "ok", "ngram-n3-t0.8-c2": "skipped"}
    skipped = _prov(runs / "fake-S1-ngram-n3-t0.8-c2")
    assert "health check fake-S1-t-health failed" in skipped["skip_reason"]
    assert skipped["status"] == "skipped" and not (runs / "fake-S1-ngram-n3-t0.8-c2" / "bench.json").exists()
    ev = _events(fake_env["log"])
    assert [e["event"] for e in ev].count("serve") == 3 and [e["event"] for e in ev].count("bench") == 4
    assert [e["seed"] for e in ev if e["event"] == "bench"] == ["0", "0", "0", "7"]  # cells' own seeds
    p = _prov(runs / "fake-S1-ngram-n3-c1")
    chk = p["checks"]["greedy_identical_to_baseline"]
    assert chk["baseline_run_id"] == "fake-S1-baseline-c1" and chk["all_identical"] is True
    assert p["seed"] == 7 and p["timeout_s"] == 60 and p["executor"]["kind"] == "local"
    assert p["platform"]["platform"] == "cpu" and "OMP_NUM_THREADS" not in p["env"]
    assert p["server_end"]["stop_signals_sent"] == ["SIGINT"] and p["server_end"]["stop_signal"] is None
    assert p["server_end"]["stop_seconds"] is not None and p["server_end"]["stopped_at"].endswith("Z")
    assert p["cell"] == {"serve": "ngram-n3", "bench": "c1", "bench_params": {"max_concurrency": 1, "num_prompts": 2,
                         "temperature": 0}, "serve_params": {"speculative_config": {"method": "ngram",
                                                                                      "num_speculative_tokens": 3}}}
    assert not [x for x in runs.iterdir() if x.name.startswith(".")]  # no staging or temp left
    assert (runs / "fake-S1-manifest" / "runs.csv").exists()
    man = _prov(runs / "fake-S1-manifest")  # the invocation's time, not only the manifest's writing
    assert man["matrix_finished"] is True and man["matrix_started"] <= man["started"]
    assert man["matrix_seconds"] > man["duration_seconds"]
    assert not _no_fake_processes()


def test_a_cell_failing_with_an_unexpected_error_keeps_its_files_and_the_server_goes_on(fake_env, monkeypatch):
    """A new-user trial (a core-only install: prometheus_client missing when the bench was summarised):
    any error but RunError ended the job, its staging directory was deleted and each cell was recorded
    again bare: no server.log, bench.json or traceback, and the server's later cells never ran."""
    from specsim.runs import serve_bench

    real = serve_bench.summarise_run

    def summarise(run_dir, *a, **kw):
        if "ngram-n2-c1" in Path(run_dir).name:
            raise KeyError("a bug in summarising")
        return real(run_dir, *a, **kw)

    monkeypatch.setattr(serve_bench, "summarise_run", summarise)
    runs = fake_env["tmp"] / "runs"
    res = {r.run_id.removeprefix("fake-U1-"): r for r in run_matrix(
        _matrix(fake_env["tmp"]), runs_dir=runs, install=fake_env["install"], stamp="U1", progress=False)}
    assert {k: r.status for k, r in res.items()} == {
        "t-health": "ok", "baseline-c1": "ok", "baseline-t0.8-c2": "ok", "ngram-n2-c1": "failed",
        "ngram-n2-t0.8-c2": "ok", "ngram-n3-c1": "ok", "ngram-n3-t0.8-c2": "ok"}  # n2's next cell ran
    d = runs / "fake-U1-ngram-n2-c1"
    prov = _prov(d)
    assert res["ngram-n2-c1"].error == prov["error"] == "KeyError: 'a bug in summarising'"
    assert "raise KeyError" in prov["traceback"] and prov["commands"]["bench"] and prov["server_end"]
    assert {"server.log", "bench.json", "bench.log", "metrics_before.prom", "outputs.jsonl"} <= {
        f.name for f in d.iterdir()}
    assert not [x for x in runs.iterdir() if x.name.startswith(".")]


def test_a_job_failing_after_recording_some_runs_keeps_them(fake_env, monkeypatch):
    """An error out of a whole group job (here after its first cell was recorded): the cells it recorded
    are kept with their files, the others recorded failed with that error (the staging directory with
    every record in it used to be deleted)."""
    from specsim.runs import executors

    real = executors.serve_and_bench

    def first_then_fail(cmd, plans, **kw):
        if any("baseline" in p.run_id for p in plans):
            real(cmd, plans[:1], **kw)
            raise ValueError("the job broke after its first cell")
        return real(cmd, plans, **kw)

    monkeypatch.setattr(executors, "serve_and_bench", first_then_fail)
    runs = fake_env["tmp"] / "runs"
    res = {r.run_id.removeprefix("fake-U2-"): r for r in run_matrix(
        _matrix(fake_env["tmp"]), runs_dir=runs, install=fake_env["install"], stamp="U2", progress=False)}
    assert res["baseline-c1"].status == "ok" and (runs / "fake-U2-baseline-c1" / "server.log").exists()
    assert _prov(runs / "fake-U2-baseline-c1")["summary"]
    assert res["baseline-t0.8-c2"].status == "failed"
    assert res["baseline-t0.8-c2"].error == _prov(runs / "fake-U2-baseline-t0.8-c2")["error"] == \
        "ValueError: the job broke after its first cell"
    assert res["ngram-n2-c1"].status == "ok"  # judged against the kept baseline; the matrix went on
    assert _prov(runs / "fake-U2-ngram-n2-c1")["checks"]["greedy_identical_to_baseline"]["all_identical"] is True
    assert not [x for x in runs.iterdir() if x.name.startswith(".")]


def test_relative_runs_and_models_dirs_are_recorded_absolute(fake_env, monkeypatch):
    """A second user trial: with a relative --runs-dir / --models-dir the records held the servers' and
    benches' commands with those relative paths (``--result-dir ../runs-B/...``), and the dry run's
    ``vllm bench sweep`` line, which it says to run from the checkout, a models path relative to another
    directory: none of them could be followed later or from elsewhere."""
    from specsim.runs.sweep_files import SIDECAR, load_matrix, resolve_matrix

    monkeypatch.chdir(fake_env["tmp"])
    m = _matrix(fake_env["tmp"])
    got = run_matrix(m, runs_dir=Path("rel-runs"), install=fake_env["install"], stamp="S9", progress=False,
                     only=["baseline-c1"])
    rid = "fake-S9-baseline-c1"
    assert [(r.run_id, r.status) for r in got if r.run_id == rid] == [(rid, "ok")]
    bench = _prov(fake_env["tmp"] / "rel-runs" / rid)["commands"]["bench"]
    assert bench[bench.index("--result-dir") + 1] == str(fake_env["tmp"] / "rel-runs" / rid)
    # --models-dir: a relative one stands absolute in the servers' commands and vLLM's own sweep line
    models = fake_env["tmp"] / "rel" / "models"
    models.mkdir(parents=True)
    real = Path(json.loads((resolve_matrix("smoke") / SIDECAR).read_text())["serve_cmd"].split()[2])
    (models / real.name).symlink_to(project_data_path("runs").parent.parent / real)
    sm = load_matrix("smoke", models_dir="rel/models")
    assert sm.model_path == models / real.name and sm.model_path.is_absolute()
    assert f"'vllm serve {models / real.name} " in sm.vllm_sweep_commands()[0]


def test_resume_reruns_only_what_failed_and_overwrites_nothing(fake_env, monkeypatch):
    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"])
    monkeypatch.setenv("FAKE_BENCH_FAIL", "2")
    first = {r.run_id: r.status for r in run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="S2",
                                                    progress=False)}
    assert first["fake-S2-baseline-t0.8-c2"] == "failed" and first["fake-S2-ngram-n2-c1"] == "ok"
    mtimes = {p.name: (p / "provenance.json").stat().st_mtime_ns for p in runs.iterdir()}
    with pytest.raises(Exception, match="already recorded") as ei:
        run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="S2", progress=False)
    assert "--stamp STAMP --resume" in str(ei.value)  # the resume syntax, not "--resume STAMP"
    assert [e["event"] for e in _events(fake_env["log"])].count("serve") == 3  # refused before any start
    monkeypatch.delenv("FAKE_BENCH_FAIL")
    n_serve = [e["event"] for e in _events(fake_env["log"])].count("serve")
    second = {r.run_id: r.status for r in run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="S2",
                                                     resume=True, progress=False)}
    retried = {k: v for k, v in second.items() if k not in first}
    # the first retry is -retry1 (it was -retry2: nothing was ever named -retry1)
    assert retried == {"fake-S2-baseline-t0.8-c2-retry1": "ok", "fake-S2-ngram-n2-t0.8-c2-retry1": "ok",
                       "fake-S2-ngram-n3-t0.8-c2-retry1": "ok"}
    for name, t in mtimes.items():  # nothing recorded before was touched
        assert (runs / name / "provenance.json").stat().st_mtime_ns == t
    # the servers whose cells were all recorded were not started again
    ev = _events(fake_env["log"])
    assert [e["event"] for e in ev].count("serve") - n_serve == 3
    assert all(v in ("ok", "invalid", "skipped") for k, v in second.items() if not k.endswith("-manifest-2"))


def test_a_token_given_in_the_matrix_or_the_environment_is_recorded_nowhere(fake_env, monkeypatch):
    """A token in serve_cmd, in the sidecar's env or in the driver's environment reaches the server (which
    prints it) but no file of any recorded run; a
    resume of the invocation does not see the matrix as changed for it."""
    from specsim.runs.provenance import REDACTED
    from specsim.runs.runner import matrix_changes
    from specsim.runs.sweep_files import load_matrix

    secrets = ["hf_token_in_serve_cmd_1", "token_in_the_sidecar_env_2", "hf_token_in_the_drivers_env_3"]
    monkeypatch.setenv("HF_TOKEN", secrets[2])
    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"], env={"MY_SERVICE_TOKEN": secrets[1]}, sidecar={
        "serve_cmd": f"vllm serve org/hub-model --dtype float32 --max-num-seqs 4 --hf-token {secrets[0]}"})
    res = run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="S7", progress=False)
    assert len(res) > 3 and all(r.status in ("ok", "invalid", "skipped") for r in res), [(r.run_id, r.error)
                                                                                        for r in res]
    logs = sorted(runs.rglob("server.log"))
    assert logs and all(f"'--hf-token', '{REDACTED}'" in p.read_text() and f"'HF_TOKEN': '{REDACTED}'"
                        in p.read_text() and f"'MY_SERVICE_TOKEN': '{REDACTED}'" in p.read_text() for p in logs)
    files = [f for f in runs.rglob("*") if f.is_file()]
    assert len(files) > 20
    for f in files:
        data = f.read_bytes()
        assert not any(s.encode() in data for s in secrets), f
    prov = _prov(next(p.parent for p in logs))
    server = prov["commands"]["server"]
    assert server[server.index("--hf-token") + 1] == REDACTED
    assert prov["matrix"]["files"]["specsim.json"]["env"]["MY_SERVICE_TOKEN"] == REDACTED
    assert matrix_changes(runs, load_matrix(m), "S7") == []
    # runs recorded before secrets were redacted hold the files as given: not a change either
    for pf in runs.glob("fake-S7-*/provenance.json"):
        raw = json.loads(pf.read_text())
        raw["matrix"]["files"] = {f: json.loads((m / f).read_text()) for f in raw["matrix"]["files"]}
        pf.write_text(json.dumps(raw))
    assert secrets[0] in (runs / "fake-S7-baseline-c1" / "provenance.json").read_text()
    assert matrix_changes(runs, load_matrix(m), "S7") == []
    (m / "bench_params.json").write_text((m / "bench_params.json").read_text().replace('"num_prompts": 2', '"num_prompts": 3'))
    assert matrix_changes(runs, load_matrix(m), "S7") == ["bench_params.json"]  # a real change is still seen


def test_a_matrix_fixed_after_a_failure_and_resumed_is_no_change_for_later_resumes(fake_env):
    """A real-run trial: after a failed cell was fixed in the matrix and re-run by ``--resume``, every later resume of
    the stamp warned that the matrix had changed, "the kept ones the old": the failed attempt, which no resume keeps,
    was compared too.  Only the runs a resume keeps count; an edit since they were recorded is still seen."""
    from specsim.runs.runner import matrix_changes
    from specsim.runs.sweep_files import load_matrix

    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"], env={"FAKE_BENCH_FAIL": "1"})  # a setting of the matrix that fails its c1 cell
    kw = dict(runs_dir=runs, install=fake_env["install"], stamp="F1", progress=False, only=["baseline-c1"])
    assert [r.status for r in run_matrix(m, **kw)] == ["failed"]
    assert matrix_changes(runs, load_matrix(m), "F1") == []  # nothing a resume would keep
    m = _matrix(fake_env["tmp"], env={})  # fixed
    assert [(r.run_id, r.status) for r in run_matrix(m, resume=True, **kw)] == [("fake-F1-baseline-c1-retry1", "ok")]
    assert matrix_changes(runs, load_matrix(m), "F1") == []
    m = _matrix(fake_env["tmp"], env={"EDITED": "1"})
    assert matrix_changes(runs, load_matrix(m), "F1") == ["specsim.json"]


# ---- Ray (local cluster) ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _tree(runs: Path) -> dict[str, list[str]]:
    return {p.name: sorted(str(f.relative_to(p)) for f in p.rglob("*") if f.is_file())
            for p in runs.iterdir() if not p.name.startswith(".")}


def test_ray_records_what_local_records(fake_env, ray_cluster):
    m = _matrix(fake_env["tmp"])
    loc, ray_runs = fake_env["tmp"] / "local", fake_env["tmp"] / "ray"
    a = run_matrix(m, runs_dir=loc, install=fake_env["install"], stamp="S3", progress=False)
    b = run_matrix(m, runs_dir=ray_runs, install=fake_env["install"], stamp="S3", progress=False, executor="ray")
    assert [(r.run_id, r.status) for r in a] == [(r.run_id, r.status) for r in b]
    assert _tree(loc) == _tree(ray_runs)
    for name in _tree(loc):
        if name.endswith("manifest"):
            continue
        pa, pb = _prov(loc / name), _prov(ray_runs / name)
        assert pb["executor"]["kind"] == "ray" and pa["executor"]["kind"] == "local"
        if pa["kind"] == "bench_serve":
            assert (loc / name / "outputs.jsonl").read_text() == (ray_runs / name / "outputs.jsonl").read_text()
            assert pb["executor"]["resources"] == {"num_cpus": 2}
            # a Ray worker has its own OMP_NUM_THREADS (1, or the task's num_cpus): removed (the driver
            # has none), the cores bound explicitly
            assert set(pb["env_removed"]) == {"OMP_NUM_THREADS"} and "OMP_NUM_THREADS" not in pb["env"]
            assert pb["platform"]["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0-1" and "env_removed" not in pa
            assert pa.get("checks") == pb.get("checks") or "greedy" not in json.dumps(pa.get("checks"))
            # the recorded bench command names where its result is now, not the deleted staging directory
            for runs_dir, pr in ((loc, pa), (ray_runs, pb)):
                bench = pr["commands"]["bench"]
                assert bench[bench.index("--result-dir") + 1] == str(runs_dir / name), bench
                assert (runs_dir / name / bench[bench.index("--result-filename") + 1]).exists()
    serves = [e for e in _events(fake_env["log"]) if e["event"] == "serve"]
    assert {e["omp"] for e in serves} == {None}  # locally and under Ray alike
    assert not _no_fake_processes()


def _job_dirs() -> set[Path]:
    """The remote jobs' staging directories in the temporary directory."""
    return set(Path(tempfile.gettempdir()).glob("specsim-job-*"))


def _proc_start(pid: int) -> str | None:
    """Field 22 (start time) of /proc/<pid>/stat, or None (read here independently of specsim)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def _owner_alive(d: Path) -> bool:
    try:
        owner = json.loads((d / ".owner.json").read_text())
        return psutil.Process(owner["pid"]).status() != psutil.STATUS_ZOMBIE
    except (OSError, ValueError, KeyError, psutil.Error):
        return False


def test_stale_staging_directories_are_those_of_dead_processes_on_this_host(tmp_path):
    from specsim.runs.executors import sweep_stale_staging

    host = socket.gethostname()
    ns, tns = os.readlink("/proc/self/ns/pid"), os.readlink("/proc/self/ns/time")
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    dead = subprocess.Popen(["true"])
    dead.wait()
    me = os.getpid()
    here = {"host": host, "pid_ns": ns, "time_ns": tns, "boot_id": boot}
    owners = {"dead": {**here, "pid": dead.pid, "start": "1"},
              "reused-pid": {**here, "pid": me, "start": "0"},  # this pid, another process's start
              "alive": {**here, "pid": me, "start": _proc_start(me)},
              "alive-no-proc": {**here, "pid": me, "start": "alive"},  # recorded where /proc was unreadable
              "dead-no-proc": {**here, "pid": dead.pid, "start": "alive"},
              # another boot, or another machine of the same name sharing the directory: not known dead
              "other-boot": {**here, "pid": dead.pid, "start": "1", "boot_id": "0" * 32},
              # a container sharing /tmp and the host name: its pid 1 is not this namespace's pid 1
              "other-namespace": {**here, "pid": 1, "start": "999", "pid_ns": "pid:[1]"},
              # a time namespace (unshare --time --boottime) shifts the start times it reads
              "other-time-namespace": {**here, "pid": me, "start": str(int(_proc_start(me)) + 10**7),
                                       "time_ns": "time:[1]"},
              "no-namespace-recorded": {"host": host, "pid": dead.pid, "start": "1"},
              "other-host": {**here, "host": host + "-elsewhere", "pid": dead.pid, "start": "1"}}
    for name, owner in owners.items():
        d = tmp_path / f"specsim-job-{name.replace('-', '_')}"
        (d / ".tmp-server-x").mkdir(parents=True)
        (d / ".tmp-server-x" / "server.log").write_text("log")
        (d / ".owner.json").write_text(json.dumps(owner))
    (tmp_path / "specsim-job-no_owner").mkdir()  # being made, or not a job's: left alone
    (tmp_path / "specsim-job-garbled").mkdir()
    (tmp_path / "specsim-job-garbled" / ".owner.json").write_text("{not json")
    (tmp_path / "unrelated").mkdir()
    (tmp_path / "unrelated" / ".owner.json").write_text(json.dumps(owners["dead"]))
    (tmp_path / "specsim-job-link").symlink_to(tmp_path / "unrelated")  # a link to a dead owner's directory
    removed = sweep_stale_staging(tmp_path)
    gone = ["dead", "dead_no_proc", "reused_pid"]
    assert sorted(d.name for d in removed) == [f"specsim-job-{n}" for n in gone]
    assert sorted(d.name for d in tmp_path.iterdir()) == sorted(
        ["unrelated", "specsim-job-link", "specsim-job-no_owner", "specsim-job-garbled"]
        + [f"specsim-job-{n.replace('-', '_')}" for n in owners if n.replace("-", "_") not in gone])
    assert (tmp_path / "unrelated" / ".owner.json").exists()


@pytest.mark.parametrize("namespace", [("--pid", "--fork", "--mount-proc"), ("--time", "--boottime", "100000", "--fork")],
                         ids=["pid", "time"])
def test_a_live_job_in_another_namespace_keeps_its_staging_directory(tmp_path, namespace):
    """A helper's finding: a job in a container sharing /tmp and the host name (its own PID namespace,
    or a time namespace shifting start times) had its live staging directory removed."""
    from specsim.runs.executors import sweep_stale_staging

    if not shutil.which("unshare") or subprocess.run(["unshare", *namespace, "true"], capture_output=True).returncode:
        pytest.skip(f"cannot make a namespace here (unshare {' '.join(namespace)})")
    code = ("import json, sys, tempfile, time; from pathlib import Path; from specsim.runs.executors import _owner; "
            "d = Path(tempfile.mkdtemp(prefix='specsim-job-', dir=sys.argv[1])); "
            "(d / '.owner.json').write_text(json.dumps(_owner())); print(d, flush=True); time.sleep(60)")
    job = subprocess.Popen(["unshare", *namespace, sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                           text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        d = Path(job.stdout.readline().strip())
        assert d.is_dir() and json.loads((d / ".owner.json").read_text())["pid"]
        assert sweep_stale_staging(tmp_path) == [] and d.is_dir()
    finally:
        job.kill()
        job.wait()


def test_ray_lost_task_is_recorded_failed_and_the_matrix_goes_on(fake_env, ray_cluster):
    m = _matrix(fake_env["tmp"], extra_serve={"doomed": {"speculative_config": {
        "method": "ngram", "num_speculative_tokens": 1, "prompt_lookup_max": 4, "prompt_lookup_min": 1},
        "otlp_traces_endpoint": "kill-my-worker"}})
    # the fake server SIGKILLs its Ray worker when its command line carries the marker
    runs = fake_env["tmp"] / "runs"
    before = _job_dirs()
    t0 = time.monotonic()
    res = {r.run_id.removeprefix("fake-S4-"): r for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="S4", progress=False, executor="ray")}
    # the killed worker could not remove its staging directory; the driver did (only live jobs' stay)
    assert not [d for d in _job_dirs() - before if not _owner_alive(d)]
    assert res["ngram-n3-c1"].status == "ok" and res["baseline-c1"].status == "ok"
    assert time.monotonic() - t0 < 300
    lost = {k for k, r in res.items() if k.startswith("doomed") and r.status == "failed"}
    assert lost == {"doomed-c1", "doomed-t0.8-c2"}, {k: r.status for k, r in res.items()}
    assert sum(r.status == "ok" for r in res.values()) == len(res) - 2  # every other run, and the manifest
    p = _prov(runs / "fake-S4-doomed-c1")
    assert p["status"] == "failed" and p["executor"]["kind"] == "ray"
    assert any(w in p["error"] for w in ("Worker", "worker", "died", "crash", "Crashed")), p["error"]
    # the guardian stopped the orphaned fake server
    end = time.monotonic() + 30
    while _no_fake_processes() and time.monotonic() < end:
        time.sleep(0.5)
    assert not _no_fake_processes()
    # the server log of the run in flight (its server was starting when the worker died) is kept with it
    assert "fake vllm serve: non-default args" in (runs / "fake-S4-doomed-c1" / "server.log").read_text()
    assert not (runs / "fake-S4-doomed-t0.8-c2" / "server.log").exists()  # it never ran
    ex = p["executor"]
    assert ex["job_returned"] is False and ex["host"] and ex["pid"] and ex["task_id"] and ex["job_error"], ex
    assert not list(runs.glob(".staging-*"))  # every driver-side staging directory removed
    shutil.rmtree(runs)


def _killed_at_second_cell(tmp: Path) -> Path:
    """A matrix whose jobs die (their Ray worker or submitit job SIGKILLed) at their second cell: two greedy
    cells per server, in one job (no health check: the temperature-0.8 cells would run in a job of their own,
    after their judge); the bench at concurrency 2 kills its worker."""
    m = _matrix(tmp, env={"FAKE_KILL_WORKER_AT_C": "2"})
    (m / "bench_params.json").write_text(json.dumps({
        "c1": {"max_concurrency": 1, "num_prompts": 2, "temperature": 0},
        "c2": {"max_concurrency": 2, "num_prompts": 2, "temperature": 0}}))
    side = json.loads((m / "specsim.json").read_text())
    (m / "specsim.json").write_text(json.dumps({k: v for k, v in side.items() if k != "health_checks"}))
    return m


@pytest.mark.parametrize("sees_runs_dir", [True, False], ids=["worker-sees-runs-dir", "worker-elsewhere"])
def test_ray_lost_task_keeps_the_runs_it_recorded_and_its_servers_log(fake_env, ray_cluster, monkeypatch,
                                                                       sees_runs_dir):
    """A Ray worker killed during its second cell: the first cell it recorded is kept (ok), the cell in flight
    is recorded failed with the server's log.  Its runs used to be lost with the worker's own staging directory
    (every cell of the group recorded failed, without a log); then, on a worker that does not see the driver's
    ``--runs-dir`` (another machine, no shared file system: here the staging path the job names is one the
    worker cannot find), they still were, until the worker shipped them to the driver as it recorded them."""
    from specsim.runs import executors

    if not sees_runs_dir:
        orig = executors._driver_staging

        def elsewhere(runs_dir, job):
            job, staging = orig(runs_dir, job)
            return {**job, "driver_staging": str(fake_env["tmp"] / "not-on-this-machine" / staging.name)}, staging

        monkeypatch.setattr(executors, "_driver_staging", elsewhere)
    m = _killed_at_second_cell(fake_env["tmp"])
    runs = fake_env["tmp"] / "runs"
    res = {r.run_id.removeprefix("fake-S5-"): r for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="S5", progress=False, executor="ray")}
    for g in ("baseline", "ngram-n2", "ngram-n3"):
        assert res[f"{g}-c1"].status == "ok", {k: (r.status, r.error) for k, r in res.items()}
        first = _prov(runs / f"fake-S5-{g}-c1")
        assert first["executor"]["kind"] == "ray" and first["executor"].get("job_returned") is False, first["executor"]
        assert first["executor"]["pid"] and (runs / f"fake-S5-{g}-c1" / "bench.json").exists()
        lost = runs / f"fake-S5-{g}-c2"
        assert res[f"{g}-c2"].status == "failed"
        assert any(w in _prov(lost)["error"] for w in ("Worker", "worker", "died", "crash", "Crashed"))
        assert "fake vllm serve: non-default args" in (lost / "server.log").read_text()
    assert not list(runs.glob(".staging-*"))
    assert not (fake_env["tmp"] / "not-on-this-machine").exists()
    end = time.monotonic() + 30  # the guardian stops the orphaned fake servers
    while _no_fake_processes() and time.monotonic() < end:
        time.sleep(0.5)
    assert not _no_fake_processes()


# ---- the persistent bench client ------------------------------------------------------------------

FAKE_VLLM_PKG = {
    "vllm/__init__.py": "",
    "vllm/utils/__init__.py": "",
    "vllm/benchmarks/__init__.py": "",
    "vllm/utils/argparse_utils.py": textwrap.dedent('''
        import argparse
        class FlexibleArgumentParser(argparse.ArgumentParser):
            def parse_args(self, argv):
                ns, rest = {}, list(argv)
                while rest:
                    k = rest.pop(0)[2:].replace("-", "_")
                    ns[k] = rest.pop(0) if rest and not rest[0].startswith("--") else True
                return argparse.Namespace(**ns)
    '''),
    "vllm/benchmarks/serve.py": textwrap.dedent('''
        import json, os
        def add_cli_args(parser):
            pass
        def main(args):
            with open(os.environ["FAKE_LOG"], "a") as f:
                f.write(json.dumps({"event": "bench", "concurrency": int(args.max_concurrency),
                                    "seed": args.seed, "client_pid": os.getpid()}) + "\\n")
            if os.environ.get("FAKE_BENCH_FAIL") == args.max_concurrency:
                raise SystemExit(2)
            n = int(args.num_prompts)
            texts = [f"out{i}" for i in range(n)]
            print("fake in-process bench", flush=True)
            json.dump({"num_prompts": n, "completed": n, "failed": 0, "generated_texts": texts,
                       "input_lens": [5] * n, "output_lens": [3] * n, "errors": [""] * n},
                      open(os.path.join(args.result_dir, args.result_filename), "w"))
    '''),
}


def test_persistent_bench_client_serves_every_cell_from_one_process(fake_env):
    pkg = fake_env["tmp"] / "pkg"
    for rel, text in FAKE_VLLM_PKG.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    m = _matrix(fake_env["tmp"], env={"PYTHONPATH": str(pkg), "FAKE_BENCH_FAIL": "2"})
    sc = json.loads((m / "specsim.json").read_text())
    sc["bench_client"] = "persistent"
    (m / "specsim.json").write_text(json.dumps(sc))
    runs = fake_env["tmp"] / "runs"
    res = {r.run_id.removeprefix("fake-S5-"): r.status for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="S5", progress=False)}
    # a failing bench (concurrency 2) is recorded failed; the client goes on with the next cells
    assert res == {"t-health": "ok", "baseline-c1": "ok", "baseline-t0.8-c2": "failed", "ngram-n2-c1": "ok",
                   "ngram-n2-t0.8-c2": "failed", "ngram-n3-c1": "ok", "ngram-n3-t0.8-c2": "failed"}
    benches = [e for e in _events(fake_env["log"]) if e["event"] == "bench"]
    assert len(benches) == 6 and len({e["client_pid"] for e in benches}) == 1  # one client for the matrix
    p = _prov(runs / "fake-S5-ngram-n3-c1")
    assert p["bench_client"]["kind"] == "persistent" and p["checks"]["greedy_identical_to_baseline"]["all_identical"]
    assert "fake in-process bench" in (runs / "fake-S5-ngram-n3-c1" / "bench.log").read_text()
    assert "exited with code 2" in _prov(runs / "fake-S5-baseline-t0.8-c2")["error"]
    assert not psutil.pid_exists(benches[0]["client_pid"]) or \
        psutil.Process(benches[0]["client_pid"]).status() == psutil.STATUS_ZOMBIE
    assert not _no_fake_processes()


def test_ray_address_without_a_cluster_names_specsim_s_flag(tmp_path):
    """Ray's own message said to set `--address`, a flag specsim does not have.  Run in a fresh
    interpreter: a Ray test before this one may have left Ray connected in this process."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # the local cluster an earlier Ray test started here: 'auto' would find it
        ray.shutdown()
    code = textwrap.dedent(f"""
        from specsim.errors import RunError
        from specsim.runs.executors import RayExecutor
        try:
            RayExecutor({str(tmp_path)!r}, address="auto").close()
            print("CONNECTED")
        except RunError as e:
            print("RunError:", e)
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([REAL_PY, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    if "CONNECTED" in out:
        pytest.skip("a Ray cluster is running on this host (another process's)")
    assert "RunError: --ray-address 'auto': no running Ray cluster found there" in out, out
    assert "ray start --head" in out and "leave --ray-address out" in out


def test_sigterm_stops_a_ray_matrix_as_it_stops_a_local_one(tmp_path):
    """``ray.init`` replaced the SIGTERM handler the CLI had installed (``timeout``, ``scancel``,
    ``kill``) with its own ``sys.exit(15)`` and Ray's failure handler printed a stack dump: a SIGTERM to
    ``run-matrix --executor ray`` then ended it with exit status 1 (documented: 143), without its
    "interrupted (SIGTERM)" line and, under ``timeout``, without a manifest.  The executor keeps the
    handler it found.  Run in a fresh interpreter: its own local cluster, its own signal handlers."""
    pytest.importorskip("ray")
    code = textwrap.dedent(f"""
        import os, signal, time
        from specsim.runs.executors import RayExecutor
        from specsim.runs.process import StopSignal, stop_signals_as_interrupt
        with stop_signals_as_interrupt(("SIGTERM", "SIGINT")):
            mine = signal.getsignal(signal.SIGTERM)
            ex = RayExecutor({str(tmp_path)!r}, init_kwargs={{"num_cpus": 1}})
            try:
                print("HANDLER KEPT" if signal.getsignal(signal.SIGTERM) is mine else "HANDLER REPLACED")
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10)
                print("NOT STOPPED")
            except StopSignal as e:
                print("STOPPED BY", e.signal)
            finally:
                ex.close()
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    p = subprocess.run([REAL_PY, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert "HANDLER KEPT" in p.stdout and "STOPPED BY SIGTERM" in p.stdout, (p.returncode, p.stdout, p.stderr[-3000:])
    assert p.returncode == 0 and "SIGTERM received" not in p.stderr, (p.returncode, p.stderr[-3000:])


def test_ray_and_slurm_jobs_run_the_driver_s_specsim_not_one_in_the_working_directory(tmp_path):
    """Found by a new-user trial: run-matrix started in another checkout of specsim ran its Ray tasks
    and submitit jobs with that checkout's code (Ray puts the driver's working directory first on its
    workers' sys.path, ``python -m submitit.core._submit`` the job's), not with the specsim the command
    runs.  Run in a fresh interpreter (its own local Ray cluster) started with -P in a directory holding
    a decoy ``specsim`` package."""
    pytest.importorskip("ray")
    pytest.importorskip("submitit")
    decoy = tmp_path / "other-checkout"
    (decoy / "specsim").mkdir(parents=True)
    (decoy / "specsim" / "__init__.py").write_text("DECOY = True\n")
    code = textwrap.dedent(f"""
        import json, os, ray, specsim
        from specsim.runs.executors import RayExecutor, SlurmExecutor

        def probe(job):
            import os, specsim
            from specsim.runs import executors
            executors._enter_driver_cwd(job)
            return {{"specsim": specsim.__file__, "cwd": os.getcwd()}}

        out = {{"driver": specsim.__file__}}
        ex = RayExecutor({str(tmp_path / "runs")!r}, init_kwargs={{"num_cpus": 1}})
        try:
            out["driver_cwd_after_init"] = os.getcwd()
            out["ray"] = ray.get(ray.remote(probe).remote({{"driver_cwd": os.getcwd()}}), timeout=120)
        finally:
            ex.close()
        sl = SlurmExecutor({str(tmp_path / "runs")!r}, cluster="local", folder={str(tmp_path / "submitit")!r})
        out["slurm"] = sl.ex.submit(probe, {{}}).result()
        print("RESULT", json.dumps(out))
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    p = subprocess.run([REAL_PY, "-P", "-c", code], capture_output=True, text=True, env=env, cwd=decoy, timeout=300)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    assert p.returncode == 0 and line, (p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    out = json.loads(line[0][len("RESULT "):])
    assert not out["driver"].startswith(str(decoy))  # the driver itself is not fooled (-P)
    assert out["ray"]["specsim"] == out["driver"] and out["slurm"]["specsim"] == out["driver"], out
    # the driver stays where it was; a Ray task runs where the driver runs, as a local job does (and a
    # submitit job, started from the driver's directory)
    assert out["driver_cwd_after_init"] == str(decoy)
    assert out["ray"]["cwd"] == str(decoy) and out["slurm"]["cwd"] == str(decoy), out


def test_a_stop_signal_during_ray_wait_is_named_by_the_signal(tmp_path):
    """Ray's ``ray.wait`` (where the driver of ``--executor ray`` spends the matrix) raises a plain
    ``KeyboardInterrupt()`` in place of the StopSignal the handler raised: a SIGTERM to the driver was
    reported "interrupted (SIGINT)" with exit status 130, not (SIGTERM) and 143.  The stop is named by
    the block that received it.  No vLLM: a Ray task that sleeps stands for a cell."""
    pytest.importorskip("ray")
    code = textwrap.dedent(f"""
        import os, signal, threading, time
        import ray
        from specsim.runs.executors import RayExecutor
        from specsim.runs.process import stop_signals_as_interrupt
        from specsim.runs.runner import _interrupt_name
        with stop_signals_as_interrupt(("SIGTERM", "SIGINT")):
            ex = RayExecutor({str(tmp_path)!r}, init_kwargs={{"num_cpus": 1}})
            ref = ray.remote(lambda: time.sleep(60)).remote()
            threading.Timer(3, os.kill, (os.getpid(), signal.SIGTERM)).start()
            try:
                ray.wait([ref], num_returns=1)
                print("NOT STOPPED")
            except KeyboardInterrupt as e:
                print("STOPPED BY", _interrupt_name(e))
            finally:
                ray.cancel(ref, force=True)
                ex.close()
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    p = subprocess.run([REAL_PY, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert "STOPPED BY SIGTERM" in p.stdout, (p.returncode, p.stdout, p.stderr[-3000:])


def test_a_one_off_bench_process_s_cpu_is_the_bench_s_not_interference(fake_env):
    """The default bench client (one `vllm bench serve` process per cell) runs under a detached
    guardian, so its CPU is not this process's child time: it is counted as the bench's from the
    guardian's record, not as other processes' (every such run was flagged contended before)."""
    m = _matrix(fake_env["tmp"], env={"FAKE_BENCH_BURN": "0.8"})
    runs = fake_env["tmp"] / "runs"
    run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="S6", progress=False,
               only=["baseline-c1"])
    p = _prov(runs / "fake-S6-baseline-c1")
    acct = p["cpu_accounting"]
    assert p["bench_client"]["kind"] == "process"
    assert acct["bench_cpu_seconds"] >= 0.75  # the 0.8 CPU-s the bench burnt (was ~0.03: not seen)
    if acct.get("other_cpu_seconds") is not None:  # /proc/stat readable: not counted as other work
        assert acct["other_cpu_seconds"] < acct["system_busy_cpu_seconds"] - 0.75 + 1e-3


# ---- Slurm through submitit (its local cluster: jobs as local processes) ---------------------------

def test_slurm_executor_records_what_local_records(fake_env):
    pytest.importorskip("submitit")
    m = _matrix(fake_env["tmp"])
    loc, sl = fake_env["tmp"] / "local", fake_env["tmp"] / "slurm"
    a = run_matrix(m, runs_dir=loc, install=fake_env["install"], stamp="S6", progress=False)
    b = run_matrix(m, runs_dir=sl, install=fake_env["install"], stamp="S6", progress=False, executor="slurm",
                   slurm={"cluster": "local", "folder": fake_env["tmp"] / "submitit"})
    assert [(r.run_id, r.status) for r in a] == [(r.run_id, r.status) for r in b]
    assert _tree(loc) == _tree(sl)
    p = _prov(sl / "fake-S6-ngram-n3-c1")
    assert p["executor"]["kind"] == "slurm" and p["executor"]["resources"]["cpus_per_task"] == os.cpu_count()
    assert p["executor"]["resources"]["timeout_min"] >= 16 and "slurm_exclusive" not in p["executor"]["resources"]
    assert (sl / "fake-S6-ngram-n3-c1" / "outputs.jsonl").read_text() == \
        (loc / "fake-S6-ngram-n3-c1" / "outputs.jsonl").read_text()
    assert not _no_fake_processes()


def test_slurm_lost_job_keeps_the_runs_it_recorded_and_its_servers_log(fake_env):
    """A submitit job (its local cluster) SIGKILLed during its second cell, as the OOM killer or a node
    failure would: the cell it recorded first is kept (ok), the cell in flight is recorded failed with its
    server's log and the loss (``job_returned`` false, submitit's job id), and the matrix goes on."""
    pytest.importorskip("submitit")
    m = _killed_at_second_cell(fake_env["tmp"])
    runs = fake_env["tmp"] / "runs"
    res = {r.run_id.removeprefix("fake-S12-"): r for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="S12", progress=False, executor="slurm",
        slurm={"cluster": "local", "folder": fake_env["tmp"] / "submitit"})}
    for g in ("baseline", "ngram-n2", "ngram-n3"):  # each group's job is lost at its second cell
        assert res[f"{g}-c1"].status == "ok", {k: (r.status, r.error) for k, r in res.items()}
        first = _prov(runs / f"fake-S12-{g}-c1")
        ex = first["executor"]
        assert ex["kind"] == "slurm" and ex["job_returned"] is False and ex["job_id"] and ex["pid"], ex
        # the keys a returned job's records carry (a real-run trial: a script reading them broke on the lost ones)
        assert ex["submitit_job_id"] == ex["job_id"] and ex["slurm_job_id"] is None  # the local cluster: no Slurm id
        assert set(ex["resources"]) == {"timeout_min", "cpus_per_task"}, ex
        assert (runs / f"fake-S12-{g}-c1" / "bench.json").exists()
        lost = runs / f"fake-S12-{g}-c2"
        assert res[f"{g}-c2"].status == "failed" and _prov(lost)["executor"]["job_error"], _prov(lost)["executor"]
        assert "fake vllm serve: non-default args" in (lost / "server.log").read_text()
    assert not list(runs.glob(".staging-*"))
    end = time.monotonic() + 30  # the guardian stops the orphaned fake servers
    while _no_fake_processes() and time.monotonic() < end:
        time.sleep(0.5)
    assert not _no_fake_processes()


def test_slurm_parameters_replace_the_derived_resources(fake_env, capsys):
    """``timeout_min`` / ``cpus_per_task`` given as Slurm parameters crashed every submit ("multiple
    values for keyword argument"); now they replace what specsim derives, the record says so, and
    cpus_per_task sets the cores the server binds its threads to.  A ``timeout_min`` below what the job's
    cells may take is warned of (a new-user trial: Slurm would end the job with a cell still in its timeout)."""
    pytest.importorskip("submitit")
    from specsim.runs.executors import slurm_job_resources
    from specsim.runs.sweep_files import load_matrix

    m = _matrix(fake_env["tmp"])
    g = next(g for g in load_matrix(m).groups if any(c.run_label == "baseline-c1" for c in g.cells))
    needs = slurm_job_resources([c.timeout_s for c in g.cells if c.run_label == "baseline-c1"], g.gpus,
                                platform="cpu", cpus=1, cluster="local",
                                start_timeout_s=load_matrix(m).server_start_timeout_s)["timeout_min"]
    assert needs > 7
    res = run_matrix(m, runs_dir=fake_env["tmp"] / "slurm", install=fake_env["install"], stamp="S11",
                     progress=False, executor="slurm", only=["baseline-c1"],
                     slurm={"cluster": "local", "folder": fake_env["tmp"] / "submitit",
                            "slurm_parameters": {"timeout_min": 7, "cpus_per_task": 1}})
    assert [r.status for r in res] == ["ok"]
    p = _prov(fake_env["tmp"] / "slurm" / "fake-S11-baseline-c1")
    assert p["executor"]["resources"] == {"timeout_min": 7, "cpus_per_task": 1}
    jid = p["executor"]["submitit_job_id"]  # links the record to submitit's files of its job
    assert jid and list((fake_env["tmp"] / "submitit").glob(f"{jid}_*")), jid
    assert p["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0"  # one core: vLLM's CPU worker binds its threads to it
    err = capsys.readouterr().err
    assert (f"specsim: WARNING: --slurm-param timeout_min=7 is below what 1 job(s) may take (their cells' "
            f"timeouts + the server's start timeout + 5 min): server {g.name} ({needs} min); Slurm may end") in err, err


def test_slurm_s_time_limit_signal_stops_a_job_as_scancel_does(fake_env, monkeypatch):
    """A real-run trial: submitit's signal before Slurm's time limit (SIGUSR2, ``signal_delay_s`` before it; the local
    cluster sends it too) raised submitit's UncompletedJobError through the cell whose server was starting: its
    record held no server.log, no server_end and only "FailedJobError: Job (task=0) failed during processing".
    Now it stops the job as scancel's SIGTERM does: the cell in flight recorded "interrupted (SIGUSR2) while this
    run's server was starting", with its server's log and stop, the cells after it naming the time limit."""
    pytest.importorskip("submitit")
    monkeypatch.setenv("FAKE_SERVE_DELAY", "40")  # still starting when the signal comes, ~8 s in
    m = _matrix(fake_env["tmp"])
    runs = fake_env["tmp"] / "runs"
    res = {r.run_id.removeprefix("fake-U1-"): r for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="U1", progress=False, executor="slurm",
        only=["baseline"], slurm={"cluster": "local", "folder": fake_env["tmp"] / "submitit",
                                  "slurm_parameters": {"timeout_min": 1, "signal_delay_s": 52}})}
    assert sorted(res) == ["baseline-c1", "baseline-t0.8-c2"] and all(r.status == "failed" for r in res.values())
    first = _prov(runs / "fake-U1-baseline-c1")
    assert first["error"] == ("interrupted (SIGUSR2) while this run's server was starting or before its bench "
                              "began"), first["error"]
    assert "fake vllm serve" in (runs / "fake-U1-baseline-c1" / "server.log").read_text()
    assert first["server_end"]["stop_signals_sent"][0] == "SIGINT", first["server_end"]
    assert first["executor"]["kind"] == "slurm" and first["executor"]["submitit_job_id"], first["executor"]
    assert _prov(runs / "fake-U1-baseline-t0.8-c2")["error"] == (
        "interrupted (SIGUSR2: submitit's signal before Slurm's time limit, or a preemption) before this run started")
    end = time.monotonic() + 30
    while _no_fake_processes() and time.monotonic() < end:
        time.sleep(0.5)
    assert not _no_fake_processes()


def test_slurm_local_cluster_runs_one_job_at_a_time(fake_env, monkeypatch):
    """submitit's local cluster starts every submitted job at once (no queue): the three serve groups'
    servers started together on the same cores.  Now each starts only after the previous job ended:
    in time order the servers' start / listen events alternate and every server has benched before
    the next one starts."""
    pytest.importorskip("submitit")
    monkeypatch.setenv("FAKE_SERVE_DELAY", "1.5")  # a start long enough for two to overlap if they could
    m = _matrix(fake_env["tmp"])
    res = run_matrix(m, runs_dir=fake_env["tmp"] / "slurm", install=fake_env["install"], stamp="S9", progress=False,
                     executor="slurm", slurm={"cluster": "local", "folder": fake_env["tmp"] / "submitit"})
    assert {r.status for r in res} == {"ok"}
    ev = sorted(_events(fake_env["log"]), key=lambda e: e["t"])
    starts = [e["event"] for e in ev if e["event"] in ("serve", "listen")]
    assert starts == ["serve", "listen"] * 3, starts
    between = [e["event"] for e in ev]
    for k in range(2):  # a bench after each server listened and before the next one started
        i_listen = [i for i, e in enumerate(between) if e == "listen"][k]
        i_next = [i for i, e in enumerate(between) if e == "serve"][k + 1]
        assert "bench" in between[i_listen:i_next]
    assert not _no_fake_processes()


def test_slurm_local_cluster_a_queued_job_that_fails_to_submit_is_recorded_and_the_matrix_goes_on(
        fake_env, monkeypatch):
    """The next queued job is submitted when one finishes; if that submission raises, the finished
    job's runs are still recorded and the failed one's cells are recorded failed with the error."""
    pytest.importorskip("submitit")
    from specsim.runs import executors

    orig, calls = executors.SlurmExecutor._start, []

    def start(self, job, tag):
        calls.append(tag)
        if len(calls) == 4:  # health check, baseline, one n-gram job; the queued one's submission fails
            raise RuntimeError("sbatch: error: Batch job submission failed")
        return orig(self, job, tag)

    monkeypatch.setattr(executors.SlurmExecutor, "_start", start)
    m = _matrix(fake_env["tmp"])
    res = {r.run_id.removeprefix("fake-S10-"): r for r in run_matrix(
        m, runs_dir=fake_env["tmp"] / "slurm", install=fake_env["install"], stamp="S10", progress=False,
        executor="slurm", slurm={"cluster": "local", "folder": fake_env["tmp"] / "submitit"})}
    assert len(calls) == 4
    failed = {k for k, r in res.items() if r.status == "failed"}
    assert len(failed) == 2 and all("Batch job submission failed" in res[k].error for k in failed), res
    assert {k.rsplit("-", 1)[0].removesuffix("-t0.8") for k in failed} in ({"ngram-n2"}, {"ngram-n3"})
    assert sum(r.status == "ok" for r in res.values()) == len(res) - 2
    assert not _no_fake_processes()


def test_slurm_local_cluster_refuses_submitits_setup_parameter(tmp_path):
    pytest.importorskip("submitit")
    from specsim.runs.executors import SlurmExecutor

    with pytest.raises(SpecsimValueError, match="slurm_parameters.setup: is not supported with cluster 'local'"):
        SlurmExecutor(tmp_path, cluster="local", slurm_parameters={"setup": ["module load cuda"]})


@pytest.mark.parametrize("to", ["driver", "group"])
def test_ctrl_c_under_the_slurm_local_cluster_stops_cleanly_and_records_the_queued_jobs(fake_env, to):
    """Ctrl-C under submitit's local cluster, to the driver alone or to its whole process group (a
    terminal's Ctrl-C): submitit's controller used to get SIGINT too and SIGKILL the job 1 s later,
    printing a traceback.  Now the running cell is recorded failed with its server stopped by SIGINT,
    and the jobs still queued are recorded failed, never submitted."""
    pytest.importorskip("submitit")
    tmp = fake_env["tmp"]
    # the baseline's job runs first and alone (its outputs judge the others); then both n-gram jobs are
    # submitted together: the first runs, the second waits.  The first n-gram bench (the 3rd) is slow
    proc = _cli(fake_env, tmp, "T9", args=("--executor", "slurm", "--slurm-param", "cluster=local"),
                new_session=True, FAKE_BENCH_SLEEP_NTH="3")
    _wait_for(lambda: sum(x["event"] == "bench" for x in _events(fake_env["log"])) == 3)
    time.sleep(0.5)
    serves = [x for x in _events(fake_env["log"]) if x["event"] == "serve"]
    assert len(serves) == 2  # the baseline's, then one n-gram server: the other waits in the queue
    running = f"ngram-n{json.loads(serves[1]['spec'])['num_speculative_tokens']}"
    queued = {"ngram-n2": "ngram-n3", "ngram-n3": "ngram-n2"}[running]
    if to == "driver":
        proc.send_signal(signal.SIGINT)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    err, recs = _stopped_cleanly(tmp, proc, 130, "SIGINT")
    assert sum(x["event"] == "serve" for x in _events(fake_env["log"])) == 2  # nothing submitted afterwards
    assert recs["fake-T9-baseline-c1"]["status"] == "ok"
    cell = recs[f"fake-T9-{running}-c1"]
    assert cell["status"] == "failed" and cell["error"].startswith("interrupted"), cell["error"]
    assert cell["executor"]["kind"] == "slurm"
    assert cell["server_end"]["stop_signals_sent"] == ["SIGINT"] and cell["server_end"]["returncode"] is not None
    assert recs[f"fake-T9-{running}-t0.8-c2"]["error"].startswith("interrupted")  # not started
    for rid in (f"fake-T9-{queued}-c1", f"fake-T9-{queued}-t0.8-c2"):
        assert recs[rid]["status"] == "failed"
        assert "interrupted before this job was submitted" in recs[rid]["error"], recs[rid]["error"]


# ---- resume behind a crashed health check; the progress bar; stops (Ctrl-C, SIGTERM) ---------------

def test_resume_reruns_the_cells_skipped_because_their_health_check_crashed(fake_env, monkeypatch):
    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"])
    monkeypatch.setenv("FAKE_HEALTH", "crash")
    first = {r.run_id.removeprefix("fake-S7-"): r.status for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="S7", progress=False)}
    assert first["t-health"] == "failed" and first["ngram-n3-t0.8-c2"] == "skipped"
    p = _prov(runs / "fake-S7-ngram-n3-t0.8-c2")
    assert "was not run or failed to run" in p["skip_reason"] and p["skip_cause"] == "health_check_missing"
    monkeypatch.setenv("FAKE_HEALTH", "pass")
    second = {r.run_id.removeprefix("fake-S7-"): r.status for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="S7", resume=True, progress=False)}
    # the check is retried, passes, and the cells it guards now run (they were kept as skipped before)
    assert second["t-health-retry1"] == "ok"
    assert second["ngram-n2-t0.8-c2-retry1"] == "ok" and second["ngram-n3-t0.8-c2-retry1"] == "ok"
    assert second["ngram-n3-c1"] == "ok" and "ngram-n3-c1-retry1" not in second  # kept
    # a skip behind a failed verdict stays kept
    monkeypatch.setenv("FAKE_HEALTH", "fail")
    run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="S8", progress=False)
    third = {r.run_id.removeprefix("fake-S8-"): r.status for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="S8", resume=True, progress=False)}
    assert third["ngram-n3-t0.8-c2"] == "skipped" and not any("retry" in k for k in third)
    assert _prov(runs / "fake-S8-ngram-n3-t0.8-c2")["skipped_by"] == ["fake-S8-t-health"]  # the verdict it names
    # ... until that verdict is redone: the check's record deleted, it runs again and passes, and the
    # cells it guards run behind it (they used to stay kept as skipped)
    import shutil

    shutil.rmtree(runs / "fake-S8-t-health")
    monkeypatch.setenv("FAKE_HEALTH", "pass")
    fourth = {r.run_id.removeprefix("fake-S8-"): r.status for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="S8", resume=True, progress=False)}
    # its id was handed out (the stamp's manifests list it): the check runs as its next attempt
    assert fourth["t-health-retry1"] == "ok" and "t-health" not in fourth
    assert fourth["ngram-n2-t0.8-c2-retry1"] == "ok" and fourth["ngram-n3-t0.8-c2-retry1"] == "ok"
    assert _prov(runs / "fake-S8-ngram-n3-t0.8-c2-retry1")["status"] == "ok"
    assert _prov(runs / "fake-S8-ngram-n3-t0.8-c2")["status"] == "skipped"  # the old skip is still recorded
    assert fourth["ngram-n3-c1"] == "ok" and "ngram-n3-c1-retry1" not in fourth  # unguarded: kept


@pytest.fixture
def bars(monkeypatch):
    """Every tqdm bar the runner makes, with the largest n it reached (for overshoot)."""
    tqdm = pytest.importorskip("tqdm")
    made = []

    class Recording(tqdm.tqdm):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.max_n = 0.0
            made.append(self)

        def update(self, n=1):
            r = super().update(n)
            self.max_n = max(self.max_n, self.n)
            return r

        def set_postfix_str(self, s="", refresh=True):
            self.postfixes = [*getattr(self, "postfixes", []), s]
            return super().set_postfix_str(s, refresh)

    monkeypatch.setattr(tqdm, "tqdm", Recording)
    return made


def test_progress_bar_ends_at_exactly_100_percent_also_on_resume(fake_env, monkeypatch, bars, recwarn):
    from specsim.runs import runner
    from specsim.runs.sweep_files import Estimate

    def fractional(m, runs_dir=None, executor="local"):  # estimates that do not add up to whole seconds
        return Estimate({c.run_label: (10.3, "test") for c in m.cells()}, 20.3, "test",
                        {h.name: 5.2 for h in m.health_checks}, {p.name: 1.1 for p in m.probes}, 0)

    monkeypatch.setattr(runner, "estimate_seconds", fractional)
    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"])
    monkeypatch.setenv("FAKE_BENCH_FAIL", "2")
    run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="S9", progress=True)
    monkeypatch.delenv("FAKE_BENCH_FAIL")
    run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="S9", resume=True, progress=True)
    assert len(bars) == 2
    fresh, resumed = bars
    # fresh: 6 cells x 10.3 + 3 servers x 20.3 + a check 5.2 = 127.9 est-s (the total was rounded to 128: 100.1 %)
    assert fresh.total == pytest.approx(127.9) and fresh.n == fresh.total and fresh.max_n <= fresh.total
    # resumed: 3 retried cells on 3 servers; the kept runs do not count (the bar ended at 14 % on smoke)
    assert resumed.total == pytest.approx(3 * 10.3 + 3 * 20.3) and resumed.n == resumed.total
    assert resumed.max_n <= resumed.total
    assert not [w for w in recwarn if "clamping frac" in str(w.message)]


def test_the_progress_bar_estimates_from_the_runs_the_dry_run_estimates_from(fake_env, bars):
    """With --runs-dir, the dry run estimated from that directory's recorded runs while the run's progress
    bar estimated from the checkout's data/runs: two different totals for the same invocation."""
    from specsim.runs.runner import dry_run

    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"])
    run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="E1", progress=False)  # runs to estimate from
    text, data = dry_run(m, stamp="E2", runs_dir=runs, install=fake_env["install"])
    run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="E2", progress=True)
    assert len(bars) == 1
    assert bars[0].total == pytest.approx(data["estimate_seconds"])
    assert data["estimate_from"] == {"runs_dir": str(runs), "recorded_runs": 7, "note": None}  # 6 cells, 1 check
    assert f"from 7 recorded runs in {runs}" in text
    # they are not the checkout's data/runs estimate (else this test could not tell the two apart)
    _, checkout = dry_run(m, install=fake_env["install"])
    assert checkout["estimate_seconds"] != pytest.approx(data["estimate_seconds"], rel=0.05)
    # a new runs directory (empty or not made yet) has nothing to estimate from: the checkout's runs, said so
    # (it estimated every cell at the 30 s default: 29.5 min for the 13-min fast loop)
    (fake_env["tmp"] / "empty").mkdir()
    for new in (fake_env["tmp"] / "empty", fake_env["tmp"] / "not-yet"):
        text, fresh = dry_run(m, runs_dir=new, install=fake_env["install"])
        assert fresh["estimate_from"]["runs_dir"] == str(project_data_path("runs"))
        assert fresh["estimate_from"]["note"].startswith(f"none in {new}")
        assert fresh["estimate_seconds"] == pytest.approx(checkout["estimate_seconds"])
        assert f"in {project_data_path('runs')} (none in {new}" in text


def test_the_progress_bar_shows_a_health_checks_verdict_not_only_its_status(fake_env, monkeypatch, bars):
    """A new-user trial: the bar read 'selfdraft-t0.8-health: ok' for a check whose verdict failed."""
    m = _matrix(fake_env["tmp"])
    monkeypatch.setenv("FAKE_HEALTH", "fail")
    run_matrix(m, runs_dir=fake_env["tmp"] / "runs", install=fake_env["install"], stamp="V1", progress=True)
    (bar,) = bars
    assert any(p.endswith("t-health: ok, verdict FAILED") for p in bar.postfixes), bar.postfixes
    assert not any("verdict" in p for p in bar.postfixes if "t-health" not in p)  # cells: status only


def test_the_progress_bar_shows_a_greedy_difference_and_keeps_it_in_view(fake_env, monkeypatch, bars):
    """A run whose outputs differ from the baseline's under greedy decoding (a correctness failure) is
    recorded ok, and the bar said only 'ngram-n3-c1: ok', then moved on."""
    m = _matrix(fake_env["tmp"], env={"FAKE_GREEDY_DIFF_SEED": "7"})  # the ngram-n3 cells run at seed 7
    results = run_matrix(m, runs_dir=fake_env["tmp"] / "runs", install=fake_env["install"], stamp="G1",
                         progress=True)
    (bar,) = bars
    assert [r for r in results if r.run_id.endswith("ngram-n3-c1")][0].status == "ok"
    at = [i for i, p in enumerate(bar.postfixes) if "ngram-n3-c1: ok" in p]
    assert len(at) == 1
    assert bar.postfixes[at[0]].endswith("ngram-n3-c1: ok, greedy outputs DIFFER (0/2 identical to the baseline)"
                                         "; greedy outputs differ in 1 run(s) so far"), bar.postfixes[at[0]]
    later = bar.postfixes[at[0] + 1:]
    assert later and all(p.endswith("; greedy outputs differ in 1 run(s) so far") for p in later), later
    assert not any("greedy" in p for p in bar.postfixes[:at[0]])  # nothing before the difference


def test_a_resume_with_every_run_recorded_starts_no_cluster(fake_env, monkeypatch, bars):
    """It started a local Ray cluster (~5 s) to run nothing; and said nothing of it."""
    from specsim.runs import executors
    from specsim.runs.runner import dry_run

    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"])
    first = run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="R1", progress=False)
    assert not any(r.kept for r in first)

    def no_cluster(*a, **k):
        raise AssertionError("a Ray cluster was started with nothing to run")

    monkeypatch.setattr(executors.RayExecutor, "__init__", no_cluster)
    text, data = dry_run(m, stamp="R1", resume=True, runs_dir=runs, executor="ray", install=fake_env["install"])
    assert data["nothing_to_run"] is True and data["estimate_seconds"] == 0
    assert "nothing to run: every selected run is recorded; the run would start nothing (no server, no ray" in text
    n_serve = [e["event"] for e in _events(fake_env["log"])].count("serve")
    again = run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="R1", resume=True, progress=True,
                       executor="ray")
    assert {r.run_id: r.status for r in again} == {r.run_id: r.status for r in first}  # all kept
    # with what they recorded (a kept run's summary was {})
    assert {r.run_id: r.summary for r in again} == {r.run_id: r.summary for r in first}
    assert any(r.summary for r in first)
    assert all(r.kept for r in again) and not bars  # no progress bar stuck at 0/0 through the kept runs
    assert [e["event"] for e in _events(fake_env["log"])].count("serve") == n_serve
    man = _prov(runs / "fake-R1-manifest-2")  # the invocation is recorded, as asked (executor ray)
    assert man["executor"]["kind"] == "ray" and man["matrix_finished"] is True and man["nothing_to_run"] is True
    rows = (runs / "fake-R1-manifest-2" / "runs.csv").read_text().splitlines()
    assert rows[0] == "run_id,status,error,kept" and all(r.endswith(",true") for r in rows[1:])
    assert _prov(runs / "fake-R1-manifest")["nothing_to_run"] is False
    # what each invocation selected (a new-user trial: a run of 3 of 44 cells read matrix_finished true
    # with nothing saying it was a selection, or a resume)
    n = len(first)  # every run of the matrix (the manifest is not a run)
    assert _prov(runs / "fake-R1-manifest")["selection"] == {"only": None, "resume": False, "runs_in_matrix": n,
                                                            "runs_selected": n, "runs_to_run": n}
    assert man["selection"] == {"only": None, "resume": True, "runs_in_matrix": n, "runs_selected": n,
                                "runs_to_run": 0}
    run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="R2", only=["ngram-n3-c1"], progress=False)
    sel = _prov(runs / "fake-R2-manifest")["selection"]
    assert sel == {"only": ["ngram-n3-c1"], "resume": False, "runs_in_matrix": n, "runs_selected": 1, "runs_to_run": 1}


def _cli(fake_env, tmp: Path, stamp: str, matrix: Path | None = None, args: tuple = (), new_session: bool = False,
         **env) -> subprocess.Popen:
    """``specsim run-matrix`` on the fake matrix in a child process (its own TMPDIR, to see leaks).
    ``args``: more options; ``new_session``: in a process group of its own (to signal it as a terminal's
    Ctrl-C does, ``os.killpg``)."""
    (tmp / "tmpdir").mkdir(exist_ok=True)
    e = {**os.environ, "SPECSIM_VLLM_VENV": str(fake_env["install"].venv), "TMPDIR": str(tmp / "tmpdir"),
         "SPECSIM_GUARD_GRACE_S": "3", "FAKE_LOG": str(fake_env["log"]), **env}
    return subprocess.Popen([REAL_PY, "-m", "specsim", "run-matrix", "--matrix", str(matrix or _matrix(tmp)), "--runs-dir",
                             str(tmp / "runs"), *args, "--stamp", stamp], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=new_session)


def test_a_resume_of_a_stamp_with_nothing_recorded_says_it_starts_a_new_invocation(fake_env):
    """A mistyped --stamp with --resume silently started a whole new invocation."""
    from specsim.runs.runner import dry_run

    tmp = fake_env["tmp"]
    m = _matrix(tmp)
    text, _ = dry_run(m, stamp="W1", resume=True, runs_dir=tmp / "runs", install=fake_env["install"])
    assert "  nothing of fake is recorded under this stamp: --resume would start it as a new invocation" in text
    proc = _cli(fake_env, tmp, "W1", matrix=m, args=("--resume",))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"specsim: nothing of fake is recorded under --stamp W1 in {tmp / 'runs'}: --resume starts it as a new " \
           "invocation" in err
    assert "7 runs:" in out and "kept" not in out  # it ran them all
    text, data = dry_run(m, stamp="W1", resume=True, runs_dir=tmp / "runs", install=fake_env["install"])
    assert "nothing of fake is recorded" not in text and "nothing to run" in text and "(no server)" in text
    assert "matrix changed" not in text and data["matrix_changed_since_stamp"] == []
    # a resume with the matrix edited since (a new-user trial: accepted without a word)
    bench = json.loads((m / "bench_params.json").read_text())
    bench["c1"]["num_prompts"] = 3
    (m / "bench_params.json").write_text(json.dumps(bench))
    text, data = dry_run(m, stamp="W1", resume=True, runs_dir=tmp / "runs", install=fake_env["install"])
    assert "  WARNING: the matrix changed since this stamp's runs were recorded (bench_params.json differ)" in text
    assert data["matrix_changed_since_stamp"] == ["bench_params.json"]  # --dry-run --json says it too
    proc = _cli(fake_env, tmp, "W1", matrix=m, args=("--resume",))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "specsim: WARNING: fake changed since the runs of --stamp W1 were recorded (bench_params.json differ)" in err


def test_runs_of_servers_refused_alike_share_one_reason_line_whatever_their_start_took():
    """A real-run trial: the reason line was the error's first line, which holds the start's "(after X s)", so four
    servers vLLM refused for the same reason gave three lines (10.6, 11.1, 12.4 s).  They share one now, with the
    range of the start times; the log path and the RunError: prefix are left out; other errors keep their line."""
    from types import SimpleNamespace as Run

    from specsim.cli import _failure_reasons

    refused = ("RunError: server exited with code 1 before /health answered (after {} s): pydantic ValidationError: "
               "max_num_batched_tokens (16) must be greater than or equal to max_num_seqs (32); log /r/{}/server.log "
               "(its last lines):\n...")
    runs = [Run(run_id=f"s{i}", error=refused.format(t, i)) for i, t in enumerate(("10.6", "12.4", "10.6", "11.1"))]
    runs.insert(1, Run(run_id="b", error="RunError: vllm bench serve exited with code 2: Error: x; log /r/b/bench.log"))
    got = _failure_reasons(runs)
    assert got == [
        ("server exited with code 1 before /health answered (after 10.6-12.4 s): pydantic ValidationError: "
         "max_num_batched_tokens (16) must be greater than or equal to max_num_seqs (32)", ["s0", "s1", "s2", "s3"]),
        ("vllm bench serve exited with code 2: Error: x", ["b"])]
    one = _failure_reasons(runs[:1])
    assert one[0][0].startswith("server exited with code 1 before /health answered (after 10.6 s): pydantic")
    assert _failure_reasons([Run(run_id="n", error=None)]) == [("no error recorded", ["n"])]


def test_run_matrix_exits_1_when_a_run_failed_and_names_the_resume(fake_env):
    """The matrix goes on past a failed cell, but the command used to exit 0: a script or CI job took a
    matrix with failed cells for a clean one."""
    tmp = fake_env["tmp"]
    m = _matrix(tmp)
    proc = _cli(fake_env, tmp, "E1", matrix=m, FAKE_BENCH_FAIL="2")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, (out, err)
    assert "7 runs: 3 failed, 4 ok" in out  # the whole matrix ran
    failed = ", ".join(f"fake-E1-{s}-t0.8-c2" for s in ("baseline", "ngram-n2", "ngram-n3"))
    assert f"specsim: 3 of 7 runs failed ({failed}; the error is in each run's provenance.json and runs.csv); " \
           "re-run them with --stamp E1 --resume" in err
    # and why, once for the runs that failed alike: the error's first line, without the log it names
    reasons = err.split("re-run them with --stamp E1 --resume\n", 1)[1].splitlines()
    assert reasons[0].startswith(f"  {failed}: vllm bench serve exited with code 2"), reasons
    assert reasons[0].endswith("Error: connection refused") and "; log " not in reasons[0], reasons
    # the manifest's runs.csv holds each run's whole error, as its provenance.json does (it kept the first
    # line, cut at 300 characters, with its double quotes turned into single ones)
    import pandas as pd

    table = pd.read_csv(tmp / "runs" / "fake-E1-manifest" / "runs.csv", keep_default_na=False)
    assert list(table.columns) == ["run_id", "status", "error", "kept"] and len(table) == 7
    for row in table.itertuples():
        assert row.error == (_prov(tmp / "runs" / row.run_id).get("error") or ""), row.run_id
    errs = table.loc[table.status == "failed", "error"]
    assert len(errs) == 3 and all("\n" in e and "Error: connection refused" in e for e in errs), list(errs)
    proc = _cli(fake_env, tmp, "E1", matrix=m, args=("--resume",))  # what the line says to do
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (out, err)
    assert "runs failed" not in err and "7 runs: 7 ok; 4 kept from earlier (--resume), 3 run now" in out
    # where the runs are and how to judge them (a new-user trial: a run that went well never named its stamp)
    runs = tmp / "runs"
    assert out.splitlines()[-1] == f"recorded under {runs} as fake-E1-*: `--stamp E1 --resume` re-runs what failed"


def _wait_for(pred, timeout_s=60.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    pytest.fail("timed out waiting")


def _stopped_cleanly(tmp: Path, proc, rc: int, sig: str) -> tuple[str, dict[str, dict]]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == rc, (out, err)
    assert "Traceback" not in err, err
    line = [x for x in err.splitlines() if "interrupted" in x and "again: still stopping" not in x]
    assert line == [f"specsim: interrupted ({sig}): {line[0].split(': ', 2)[2].split(' runs')[0]} runs recorded, the "
                    f"interrupted cell recorded as failed; resume with --stamp {proc.args[-1]} --resume"], err
    runs = tmp / "runs"
    # no .staging-*, .tmp-* (.submitit: submitit's own job logs, --executor slurm's default folder)
    assert not [p.name for p in runs.iterdir() if p.name.startswith(".") and p.name != ".submitit"]
    assert not list((tmp / "tmpdir").glob("specsim-guard-*"))  # no guardian status file left
    assert not _no_fake_processes()
    recs = {p.name: _prov(p) for p in runs.iterdir() if (p / "provenance.json").exists()}
    man = [v for k, v in recs.items() if k.endswith("-manifest")]
    assert len(man) == 1 and man[0]["matrix_finished"] is False  # its status "ok" said nothing of the stop
    return err, recs


def test_sigterm_stops_the_matrix_like_ctrl_c(fake_env):
    """SIGTERM (timeout, scancel) used to kill the driver: no record of the running cell, no manifest,
    a .staging-* directory left; now the cell is recorded failed with its server's stop."""
    tmp = fake_env["tmp"]
    proc = _cli(fake_env, tmp, "T1", FAKE_BENCH_SLEEP="30")
    _wait_for(lambda: any(e["event"] == "bench" for e in _events(fake_env["log"])))
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    err, recs = _stopped_cleanly(tmp, proc, 143, "SIGTERM")
    # the health check, the interrupted cell, its server's other cell (not started)
    assert "specsim: interrupted (SIGTERM): 3 runs recorded" in err
    cell = recs["fake-T1-baseline-c1"]
    assert cell["status"] == "failed" and cell["error"] == "interrupted (SIGTERM)"
    assert cell["server_end"]["stop_signals_sent"] == ["SIGINT"] and cell["server_end"]["stop_seconds"] is not None
    assert "fake-T1-baseline-t0.8-c2" in recs and recs["fake-T1-baseline-t0.8-c2"]["status"] == "failed"
    assert recs["fake-T1-baseline-t0.8-c2"]["error"] == "interrupted (SIGTERM) before this run started"
    assert "fake-T1-ngram-n2-c1" not in recs  # not reached: a resume runs it


def test_ctrl_c_while_the_server_starts_records_the_cell_with_its_server_end(fake_env):
    tmp = fake_env["tmp"]
    proc = _cli(fake_env, tmp, "T2", FAKE_SERVE_DELAY="30")
    _wait_for(lambda: any(e["event"] == "serve" for e in _events(fake_env["log"])))
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    err, recs = _stopped_cleanly(tmp, proc, 130, "SIGINT")
    cell = recs["fake-T2-baseline-c1"]
    # it read "RunError: RunError: the job ended without recording this run", with server_end None
    assert cell["status"] == "failed" and cell["error"] == \
        "interrupted (SIGINT) while this run's server was starting or before its bench began"
    assert cell["server_end"]["stop_signals_sent"] == ["SIGINT"] and cell["server_end"]["stopped_at"].endswith("Z")
    assert recs["fake-T2-baseline-t0.8-c2"]["error"] == "interrupted (SIGINT) before this run started"
    # the server log of the interrupted start is kept with its record
    assert "fake vllm serve: SIGINT while starting" in (tmp / "runs" / "fake-T2-baseline-c1" / "server.log").read_text()


def test_repeated_ctrl_c_while_the_server_starts_keeps_how_it_stopped_and_its_log(fake_env):
    """Several quick Ctrl-Cs during a server start (nu1 review): server_end had no returncode (the stop
    was cut short) and the interrupted start's server.log was deleted."""
    tmp = fake_env["tmp"]
    proc = _cli(fake_env, tmp, "T3", FAKE_SERVE_DELAY="30", FAKE_STOP_DELAY="2")
    _wait_for(lambda: any(e["event"] == "serve" for e in _events(fake_env["log"])))
    time.sleep(0.5)
    for _ in range(4):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
    err, recs = _stopped_cleanly(tmp, proc, 130, "SIGINT")
    cell = recs["fake-T3-baseline-c1"]
    assert cell["error"] == "interrupted (SIGINT) while this run's server was starting or before its bench began"
    end = cell["server_end"]
    assert end["stop_signals_sent"] == ["SIGINT"] and end["returncode"] == 0 and end["stop_seconds"] >= 1.5, end
    assert "SIGINT while starting" in (tmp / "runs" / "fake-T3-baseline-c1" / "server.log").read_text()


def test_errors_name_the_recorded_paths_not_the_deleted_staging_ones(fake_env, monkeypatch):
    """Runs are staged, then renamed into the runs directory: a recorded error (and the result's)
    named ``<runs>/.staging-*/...`` paths that no longer exist."""
    tmp = fake_env["tmp"]
    monkeypatch.setenv("FAKE_BENCH_FAIL", "1")
    res = {r.run_id: r for r in run_matrix(_matrix(tmp), runs_dir=tmp / "runs", install=fake_env["install"],
                                           stamp="P1", progress=False, only=["baseline"])}
    r = res["fake-P1-baseline-c1"]
    assert r.status == "failed" and f"{tmp / 'runs' / 'fake-P1-baseline-c1'}/bench.log" in r.error, r.error
    assert ".staging-" not in r.error and ".tmp-" not in r.error
    assert _prov(tmp / "runs" / "fake-P1-baseline-c1")["error"] == r.error
    monkeypatch.delenv("FAKE_BENCH_FAIL")
    monkeypatch.setenv("FAKE_SERVE_EXIT", "1")
    res = run_matrix(_matrix(tmp), runs_dir=tmp / "runs", install=fake_env["install"], stamp="P2", progress=False,
                     only=["baseline"])
    r = next(r for r in res if r.run_id == "fake-P2-baseline-c1")
    assert r.status == "failed" and f"log {tmp / 'runs' / 'fake-P2-baseline-c1'}/server.log" in r.error, r.error
    assert ".staging-" not in r.error and (tmp / "runs" / "fake-P2-baseline-c1" / "server.log").exists()
    assert _prov(tmp / "runs" / "fake-P2-baseline-c1")["error"] == r.error


# ---- concurrent_server_starts: servers start together, benches never overlap a start ---------------

_FOUR = {"ngram-n5": {"speculative_config": {"method": "ngram", "num_speculative_tokens": 5}}}


def _spec_n(e: dict) -> int | None:
    return json.loads(e["spec"])["num_speculative_tokens"] if e.get("spec") else None


def test_concurrent_server_starts_overlap_the_starts_and_never_a_bench(fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_SERVE_DELAY", "1.0")
    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"], extra_serve=_FOUR, sidecar={"concurrent_server_starts": 2})
    res = {r.run_id.removeprefix("fake-C1-"): r.status for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="C1", progress=False)}
    assert set(res.values()) == {"ok"} and len(res) == 9
    ev = _events(fake_env["log"])
    serve = {_spec_n(e): e["t"] for e in ev if e["event"] == "serve"}
    listen = {_spec_n(e): e["t"] for e in ev if e["event"] == "listen"}
    # the baseline with N = 2 (whose job is made once the baseline's outputs exist), then N = 3 with N = 5
    assert serve[2] < listen[None] and serve[None] < listen[2]  # each pair's starts overlapped
    assert serve[5] < listen[3] and serve[3] < listen[5]
    assert serve[3] > max(listen[None], listen[2])
    for b in (e["t"] for e in ev if e["event"] == "bench"):  # no bench while any server was starting
        assert not any(serve[n] < b < listen[n] for n in serve), (b, serve, listen)
    provs = {k: _prov(runs / f"fake-C1-{k}") for k in ("baseline-c1", "ngram-n2-c1", "ngram-n3-t0.8-c2", "ngram-n5-c1")}
    st = {k: dict(p["server_start"]) for k, p in provs.items()}
    for a, b in (("baseline-c1", "ngram-n2-c1"), ("ngram-n3-t0.8-c2", "ngram-n5-c1")):  # launch to both healthy
        whole = st[a].pop("batch_seconds")
        assert whole == st[b].pop("batch_seconds")
        assert max(provs[a]["server_startup_seconds"], provs[b]["server_startup_seconds"]) <= whole < 2 * 1.0 + 2
    assert st == {"baseline-c1": {"started_together": 2, "with": ["ngram-n2"]},
                  "ngram-n2-c1": {"started_together": 2, "with": ["baseline"]},
                  "ngram-n3-t0.8-c2": {"started_together": 2, "with": ["ngram-n5"]},
                  "ngram-n5-c1": {"started_together": 2, "with": ["ngram-n3"]}}
    assert _prov(runs / "fake-C1-ngram-n3-c1")["checks"]["greedy_identical_to_baseline"]["all_identical"]
    assert not [x for x in runs.iterdir() if x.name.startswith(".")]  # no staging or server log left
    assert not _no_fake_processes()


def test_a_server_started_ahead_has_its_environment_made_once(fake_env, monkeypatch):
    """The environment a server started ahead runs with is the one its job's runs record: made once
    per group job (by the executor, before the start), not again when the job runs."""
    from specsim.runs import executors

    made: list[str | None] = []
    envs: dict = {}
    real = executors._job_env

    def counting(job):
        made.append(job.get("group"))
        envs[job.get("group")] = out = real(job)
        return out

    monkeypatch.setattr(executors, "_job_env", counting)
    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"], extra_serve=_FOUR, sidecar={"concurrent_server_starts": 2})
    res = run_matrix(m, runs_dir=runs, install=fake_env["install"], stamp="E1", progress=False)
    assert {r.status for r in res} == {"ok"}
    groups = [g for g in made if g is not None]
    assert sorted(groups) == ["baseline", "ngram-n2", "ngram-n3", "ngram-n5"]  # once each
    assert made.count(None) == 1  # the offline health check's job
    for g in ("baseline", "ngram-n5"):  # what the runs record is what their server was made with
        assert _prov(runs / f"fake-E1-{g}-c1")["env"] == envs[g][1]


def test_the_baseline_starts_with_the_next_server_that_has_a_cell_to_run(fake_env, monkeypatch):
    """A failed health check that guards every cell of the group after the baseline: the baseline's
    server starts with the one after it (it started a server whose cells were all skipped, then
    stopped it unused)."""
    monkeypatch.setenv("FAKE_HEALTH", "fail")
    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"], extra_serve=_FOUR, sidecar={
        "concurrent_server_starts": 2,
        "health_checks": {"t-health": {"speculative_config": {"method": "ngram", "num_speculative_tokens": 2},
                                       "temperature": 0.8, "guards": ["ngram-n2/*"]}}})
    res = {r.run_id.removeprefix("fake-C5-"): r.status for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="C5", progress=False)}
    assert res["ngram-n2-c1"] == res["ngram-n2-t0.8-c2"] == "skipped"
    assert not [e for e in _events(fake_env["log"]) if e["event"] == "serve" and _spec_n(e) == 2]
    assert {k: v for k, v in _prov(runs / "fake-C5-baseline-c1")["server_start"].items() if k != "batch_seconds"} == \
        {"started_together": 2, "with": ["ngram-n3"]}
    assert all(res[k] == "ok" for k in ("baseline-c1", "ngram-n3-c1", "ngram-n5-c1"))
    assert not _no_fake_processes()


def test_a_server_that_dies_while_it_waits_for_its_turn_fails_its_cells(fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_DIE_N", "5")
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0.5")  # N = 3 benches while N = 5, started with it, dies
    runs = fake_env["tmp"] / "runs"
    m = _matrix(fake_env["tmp"], extra_serve=_FOUR, sidecar={"concurrent_server_starts": 2})
    res = {r.run_id.removeprefix("fake-C4-"): r for r in run_matrix(
        m, runs_dir=runs, install=fake_env["install"], stamp="C4", progress=False)}
    assert {k: r.status for k, r in res.items() if k.startswith("ngram-n5")} == {"ngram-n5-c1": "failed",
                                                                             "ngram-n5-t0.8-c2": "failed"}
    err = _prov(runs / "fake-C4-ngram-n5-c1")["error"]
    assert "server exited (code 3) while it waited for its turn after starting with ngram-n3" in err
    assert all(r.status == "ok" for k, r in res.items() if not k.startswith("ngram-n5"))
    assert not [x for x in runs.iterdir() if x.name.startswith(".")] and not _no_fake_processes()


def test_concurrent_server_starts_is_checked_before_anything_starts(fake_env):
    for bad, allowed in ((0, ">= 1"), (5, "from 1 to 4"), (True, "integer"), ("2", "integer")):
        m = _matrix(fake_env["tmp"], sidecar={"concurrent_server_starts": bad})
        with pytest.raises(SpecsimValueError, match=allowed) as e:
            run_matrix(m, runs_dir=fake_env["tmp"] / "runs", install=fake_env["install"], stamp="C0", progress=False)
        assert e.value.field == "concurrent_server_starts"
    assert not _events(fake_env["log"])


def test_ctrl_c_while_servers_start_together_stops_both(fake_env):
    tmp = fake_env["tmp"]
    m = _matrix(tmp, extra_serve=_FOUR, sidecar={"concurrent_server_starts": 2})
    proc = _cli(fake_env, tmp, "C2", matrix=m, FAKE_SLOW_N="5")  # N = 5 takes 30 s to listen
    _wait_for(lambda: any(e["event"] == "listen" and _spec_n(e) == 3 for e in _events(fake_env["log"]))
              and any(e["event"] == "serve" and _spec_n(e) == 5 for e in _events(fake_env["log"])))
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    err, recs = _stopped_cleanly(tmp, proc, 130, "SIGINT")
    cell = recs["fake-C2-ngram-n3-c1"]
    assert cell["error"] == "interrupted (SIGINT) while this run's server was starting or before its bench began"
    assert cell["server_end"]["stop_signals_sent"] == ["SIGINT"] and cell["server_end"]["stop_signal"] is None
    assert "fake vllm serve" in (tmp / "runs" / "fake-C2-ngram-n3-c1" / "server.log").read_text()  # kept
    assert not any(k.startswith("fake-C2-ngram-n5") for k in recs)  # not reached: a resume runs it
    assert recs["fake-C2-ngram-n2-c1"]["status"] == "ok"
    n3_serve = next(x["t"] for x in _events(fake_env["log"]) if x["event"] == "serve" and _spec_n(x) == 3)
    assert not any(e["event"] == "bench" and e["t"] > n3_serve for e in _events(fake_env["log"]))


def test_ctrl_c_during_a_bench_stops_the_server_started_ahead(fake_env):
    tmp = fake_env["tmp"]
    m = _matrix(tmp, extra_serve=_FOUR, sidecar={"concurrent_server_starts": 2})
    proc = _cli(fake_env, tmp, "C3", matrix=m, FAKE_BENCH_SLEEP_NTH="5")  # the 5th bench: ngram-n3 c1
    _wait_for(lambda: sum(e["event"] == "bench" for e in _events(fake_env["log"])) >= 5)
    ready = [e["pid"] for e in _events(fake_env["log"]) if e["event"] == "listen" and _spec_n(e) == 5]
    assert ready and psutil.pid_exists(ready[0])  # N = 5 started with N = 3, waiting for its turn
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    err, recs = _stopped_cleanly(tmp, proc, 130, "SIGINT")  # no process, no server log directory left
    assert recs["fake-C3-ngram-n3-c1"]["error"] == "interrupted (SIGINT)"
    assert not any(k.startswith("fake-C3-ngram-n5") for k in recs)
    assert recs["fake-C3-ngram-n3-c1"]["server_end"]["stop_signals_sent"] == ["SIGINT"]
    assert {k: v for k, v in recs["fake-C3-ngram-n3-c1"]["server_start"].items() if k != "batch_seconds"} == \
        {"started_together": 2, "with": ["ngram-n5"]}
    assert not psutil.pid_exists(ready[0]) or psutil.Process(ready[0]).status() == psutil.STATUS_ZOMBIE


def test_an_orphaned_guardian_removes_its_status_file(tmp_path):
    """The guardian's status file used to stay in /tmp whenever its starter died first."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "copy").mkdir()
    code = ("from specsim.runs.process import _Guarded; import subprocess, sys, time\n"
            "g = _Guarded(['sleep', '60'], stdout=subprocess.DEVNULL, env=None, cwd=None)\n"
            "print(g.status_path, flush=True); time.sleep(60)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "SPECSIM_GUARD_GRACE_S": "3",
           "SPECSIM_GUARD_STATUS_COPY": str(tmp_path / "copy")}
    starter = subprocess.Popen([REAL_PY, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    status = Path(starter.stdout.readline().strip())
    assert status.parent == tmp_path / "tmp"
    starter.kill()  # the starter dies: the guardian stops the child itself
    starter.wait()
    _wait_for(lambda: list((tmp_path / "copy").glob("guard-*.json")), 30)
    st = json.loads(next((tmp_path / "copy").glob("guard-*.json")).read_text())
    assert st["orphaned"] is True
    _wait_for(lambda: not list((tmp_path / "tmp").glob("specsim-guard-*")), 10)



def test_an_orphaned_guardian_removes_the_rendezvous_files_its_log_names(tmp_path):
    """The last notes: a vLLM rendezvous file (``<tmp>/vllm_dist_<hex>``, named in the server's log) stayed where
    the process that stopped its server was killed (``ray.cancel(force=True)``, the OOM killer): the starter
    removes it once the group has ended, and the guardian, which stopped the group, did not.  Now the guardian
    does, once the rest of the group has ended too, and only the files that log named when the starter died
    (a review: a later writer's line could name another engine's live file)."""
    rdzv = tmp_path / "rdzv"
    rdzv.mkdir()
    mine, other = rdzv / ("vllm_dist_" + "c" * 32), rdzv / ("vllm_dist_" + "d" * 32)
    other.write_text("another engine's")
    server = ("import signal, subprocess, sys, time\n"
              f"open({str(mine)!r}, 'w').write('filestore')\n"
              # a line the log gets after the starter died: not read (here the server's own, on its SIGINT)
              f"signal.signal(signal.SIGINT, lambda *a: (print('distributed_init_method=file://{other} x', "
              "flush=True), sys.exit(0)))\n"
              f"print('world_size=1 rank=0 distributed_init_method=file://{mine} backend=gloo', flush=True)\n"
              # an engine-core-like child of the same group that outlives the server (it ignores SIGINT) and,
              # stopped by SIGTERM a second later, notes whether the file was still there when it ended
              "subprocess.Popen([sys.executable, '-c', 'import os, signal, sys, time; "
              "signal.signal(signal.SIGINT, signal.SIG_IGN); "
              "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1), open(sys.argv[2], \"w\").write("
              "str(os.path.exists(sys.argv[1]))), os._exit(0))); print(\"member ready\", flush=True); "
              "time.sleep(60)', "
              f"{str(mine)!r}, {str(tmp_path / 'seen')!r}])\n"
              "time.sleep(60)\n")
    code = ("from specsim.runs.process import _Guarded; import subprocess, sys, time\n"
            f"log = open({str(tmp_path / 'server.log')!r}, 'wb')\n"
            f"g = _Guarded([sys.executable, '-c', {server!r}], stdout=log, env=None, cwd=None)\n"
            "print(g.pid, flush=True); time.sleep(60)\n")
    (tmp_path / "copy").mkdir()
    env = {**os.environ, "SPECSIM_GUARD_GRACE_S": "3", "SPECSIM_GUARD_STATUS_COPY": str(tmp_path / "copy")}
    starter = subprocess.Popen([REAL_PY, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    pgid = int(starter.stdout.readline())
    _wait_for(lambda: "member ready" in (tmp_path / "server.log").read_text(), 30)  # its handlers are set
    # as a Ray driver removes a killed worker's staging directory, the server's log with it: the guardian reads
    # the log it writes to all the same
    (tmp_path / "server.log").unlink()
    starter.kill()  # the starter dies (SIGKILL): the guardian stops the server, then removes its file
    starter.wait()
    _wait_for(lambda: list((tmp_path / "copy").glob("guard-*.json")), 30)
    st = json.loads(next((tmp_path / "copy").glob("guard-*.json")).read_text())
    assert st["orphaned"] is True and st["removed_files"] == [str(mine)], st
    assert not mine.exists() and other.read_text() == "another engine's"
    from specsim.runs._guard import _group_members

    assert _group_members(pgid) == []
    assert (tmp_path / "seen").read_text() == "True"  # the file was removed after the group had ended
    # a starter that lives removes them itself (the guardian is not orphaned): none listed by the guardian
    from specsim.runs.process import _Guarded

    mine.write_text("filestore")
    with open(tmp_path / "server2.log", "wb") as log:
        g = _Guarded([REAL_PY, "-c", f"print('distributed_init_method=file://{mine} ', flush=True)"], stdout=log,
                     env=None, cwd=None)
        g.wait(30)
        g.close()
    assert g.removed_files == [str(mine)] and not mine.exists()
    g.status_path.unlink(missing_ok=True)


def test_an_orphaned_guardian_whose_output_is_a_pipe_stops_the_group_and_reads_nothing(tmp_path):
    """A review of the change above: with its output a pipe (``stdout=sys.stdout`` of a starter piped to a
    reader) the orphaned guardian read that pipe for rendezvous files, which never ends (it holds a write end
    itself): it hung, left a member that ignores SIGINT running, wrote no status and took the reader's lines."""
    member = ("import signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
              "for i in range(120):\n    print('line', i, flush=True); time.sleep(0.25)\n")
    server = ("import subprocess, sys, time\n"
              f"subprocess.Popen([sys.executable, '-c', {member!r}])\n"
              "time.sleep(60)\n")
    code = ("from specsim.runs.process import _Guarded; import sys, time\n"
            f"g = _Guarded([sys.executable, '-c', {server!r}], stdout=sys.stdout, env=None, cwd=None)\n"
            "print('pgid', g.pid, flush=True); time.sleep(60)\n")
    (tmp_path / "copy").mkdir()
    env = {**os.environ, "SPECSIM_GUARD_GRACE_S": "2", "SPECSIM_GUARD_STATUS_COPY": str(tmp_path / "copy")}
    starter = subprocess.Popen([REAL_PY, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(starter.stdout), daemon=True)
    reader.start()
    _wait_for(lambda: sum(x.startswith("line") for x in lines) >= 4, 30)
    pgid = int(next(x for x in lines if x.startswith("pgid")).split()[1])
    starter.kill()
    starter.wait()
    seen = sum(x.startswith("line") for x in lines)
    _wait_for(lambda: list((tmp_path / "copy").glob("guard-*.json")), 20)  # it ended, and said how
    st = json.loads(next((tmp_path / "copy").glob("guard-*.json")).read_text())
    assert st["orphaned"] is True and st["removed_files"] == [], st
    from specsim.runs._guard import _group_members

    _wait_for(lambda: _group_members(pgid) == [], 10)  # the member that ignores SIGINT was stopped (SIGTERM)
    reader.join(10)
    assert not reader.is_alive()  # every writer of the pipe has ended: the guardian and the whole group
    assert seen >= 4


def test_a_guarded_child_s_ipc_sockets_go_with_it(tmp_path):
    """vLLM 0.32 binds its ZMQ IPC sockets in VLLM_RPC_BASE_PATH (default: the temporary directory) and leaves
    them there: about seven files in /tmp per server start.  Each guarded child gets a directory of its own for
    them, removed when it has ended: by the guardian, or by the starter where SIGKILL took the guardian too (a
    review: left behind then, and when the command could not be started).  One the environment sets is left to
    the user, and none is made where vLLM's socket paths would be too long for a Unix socket."""
    from specsim.runs.process import _Guarded, _kill_group

    tmp = Path(tempfile.mkdtemp(prefix="ipc-"))  # short: tmp_path is too long for vLLM's socket paths
    code = ("import os, signal, socket, sys, time, uuid; d = os.environ.get('VLLM_RPC_BASE_PATH');"
            "print(d, os.environ.get('SPECSIM_GUARD_RPC_DIR'), flush=True);"
            "s = socket.socket(socket.AF_UNIX); s.bind(os.path.join(d or sys.argv[1], str(uuid.uuid4())));"
            "signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(float(sys.argv[2]))")
    status_files = []  # the guardians' status files: Server reads and removes them, _Guarded alone does not

    def guarded(env_tmp, sleep_s=0.0, given=None, cmd=None):
        env = {**os.environ, "TMPDIR": str(env_tmp)}
        env.pop("VLLM_RPC_BASE_PATH", None)
        if given is not None:
            env["VLLM_RPC_BASE_PATH"] = str(given)
        out = tmp_path / "out.txt"
        f = open(out, "wb")
        g = _Guarded(cmd or [REAL_PY, "-c", code, str(env_tmp), str(sleep_s)], stdout=f, env=env, cwd=None)
        status_files.append(g.status_path)
        return g, f, out

    try:
        g, f, out = guarded(tmp)  # ends by itself: the guardian removes the directory
        assert g.wait(30) == 0
        f.close()
        rpc, marker = out.read_text().split()
        assert Path(rpc).parent == tmp and Path(rpc).name.startswith("specsim-rpc-") and marker == "None"
        assert not list(tmp.iterdir())  # the directory and its socket are gone
        g, f, out = guarded(tmp, sleep_s=60)  # ignores SIGINT: the group is SIGKILLed, the guardian with it
        _wait_for(lambda: out.read_text().strip(), 30)
        assert len(list(tmp.iterdir())) == 1
        _kill_group(g, 1.0)
        f.close()
        assert g.returncode == -signal.SIGKILL and not list(tmp.iterdir())
        g, f, out = guarded(tmp, cmd=["/nonexistent/vllm"])  # cannot be started
        g.wait(30)
        f.close()
        assert not list(tmp.iterdir())
        mine = tmp_path / "mine"
        mine.mkdir()
        g, f, out = guarded(tmp, given=mine)  # the user's own: kept as it is
        assert g.wait(30) == 0
        f.close()
        assert out.read_text().split() == [str(mine), "None"] and len(list(mine.iterdir())) == 1
        long_tmp = tmp_path / "long"  # 103 - 37 - 21 = 45 characters at most give a directory
        assert len(str(long_tmp)) > 45
        long_tmp.mkdir()
        g, f, out = guarded(long_tmp)  # vLLM's socket paths would not fit: its default stays
        assert g.wait(30) == 0
        f.close()
        assert out.read_text().split() == ["None", "None"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for p in status_files:
            p.unlink(missing_ok=True)


def test_an_unreachable_ray_address_is_refused_in_seconds_naming_the_flag():
    """A new-user trial: ``--executor ray --ray-address 127.0.0.1:1`` printed Ray's "Failed to connect
    to GCS" for more than 3 minutes and recorded nothing.  One TCP connection attempt refuses it."""
    import socket as _socket

    from specsim.errors import RunError
    from specsim.runs.executors import RayExecutor, check_ray_address

    with _socket.socket() as s:  # a port nothing listens on: bind, read it, close
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for addr in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(RunError) as ei:
            check_ray_address(addr, timeout_s=2.0)
        assert f"--ray-address {addr!r}" in str(ei.value) and "nothing accepts connections" in str(ei.value)
    with pytest.raises(RunError, match="give host:port"):
        check_ray_address("headnode")
    with pytest.raises(RunError, match="give host:port"):  # str.isdigit() took these digits; int() then read 6379
        check_ray_address("127.0.0.1:\u0666\u0663\u0667\u0669")
    check_ray_address(None)
    check_ray_address("auto")
    with _socket.socket() as srv:  # a listening port passes
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        check_ray_address(f"127.0.0.1:{srv.getsockname()[1]}", timeout_s=2.0)
    pytest.importorskip("ray")
    with pytest.raises(RunError, match="nothing accepts connections"):
        RayExecutor(Path("/nonexistent-runs"), address=f"127.0.0.1:{port}")


def test_server_start_timeout_comes_from_the_sidecar(fake_env, monkeypatch):
    """A new-user trial: the server start timeout was fixed at 600 s (executors.py) with no setting,
    so a large model that compiles and captures CUDA graphs for longer could not be run.  The
    sidecar's ``server_start_timeout_s`` now reaches every server (default 600 s), and a
    non-positive value is refused before anything starts."""
    from specsim.errors import RunError, SpecsimValueError
    from specsim.runs import executors
    from specsim.runs.sweep_files import load_matrix

    seen = []

    def capture(server_cmd, plans, **kw):
        seen.append(kw["health_timeout_s"])
        raise RunError("captured (no server started)")

    monkeypatch.setattr(executors, "serve_and_bench", capture)
    d = _matrix(fake_env["tmp"], sidecar={"server_start_timeout_s": 1234})
    assert load_matrix(d, check_paths=False).server_start_timeout_s == 1234
    run_matrix(d, runs_dir=fake_env["tmp"] / "runs", install=fake_env["install"], stamp="S", progress=False,
               only=["baseline", "ngram-n2"])
    assert seen and set(seen) == {1234}
    (fake_env["tmp"] / "plain").mkdir()
    assert load_matrix(_matrix(fake_env["tmp"] / "plain"), check_paths=False).server_start_timeout_s == 600.0
    with pytest.raises(SpecsimValueError) as ei:
        load_matrix(_matrix(fake_env["tmp"], sidecar={"server_start_timeout_s": 0}), check_paths=False)
    assert ei.value.field == "server_start_timeout_s"


def test_the_dry_run_refuses_an_unreachable_ray_address_as_the_run_does(capsys):
    """The run-matrix trial: `--dry-run --executor ray --ray-address 127.0.0.1:1` gave rc 0 and never
    mentioned the address, which the run then waited on."""
    import socket as _socket

    from specsim.cli import main

    pytest.importorskip("ray")
    with _socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = main(["run-matrix", "--matrix", "smoke", "--dry-run", "--executor", "ray", "--ray-address",
               f"127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert rc == 2 and "nothing accepts connections" in err and f"--ray-address '127.0.0.1:{port}'" in err


def test_the_collector_keeps_a_growing_log_and_a_repeated_shipment_changes_nothing():
    """The driver-side collector (its methods, without Ray): a log shipped as appends is the file, a shipment
    repeated after a time-out changes nothing, and what the driver reads stays until it drops it."""
    from specsim.runs.executors import _RunCollector

    c = _RunCollector()
    c.put("k", {"r1/bench.json": b"{}"}, {"log": (0, b"abc")})
    c.put("k", {}, {"log": (3, b"def")})
    c.put("k", {}, {"log": (3, b"def")})  # the same shipment again
    c.put("k", {}, {"log": (6, b"g")})
    assert c.get("k") == {"r1/bench.json": b"{}", "log": b"abcdefg"} == c.get("k")
    assert all(type(v) is bytes for v in c.get("k").values())
    c.drop("k")
    assert c.get("k") == {}


def test_a_shipper_whose_collector_is_gone_stops_shipping(tmp_path, monkeypatch):
    """A review: once the driver's collector actor had died, every shipment (each recorded run, and every 2 s)
    re-read and tried to re-send every run and the whole server log, until the job ended."""
    ray = pytest.importorskip("ray")
    from specsim.runs import executors

    calls = []

    class Gone:
        class put:
            @staticmethod
            def remote(key, files, appends):
                calls.append(sorted(files) + sorted(appends))
                raise ray.exceptions.RayActorError()

    monkeypatch.setattr(executors, "SHIP_EVERY_S", 0.05)
    (tmp_path / ".owner.json").write_text("{}")
    (tmp_path / ".tmp-server-x").mkdir()
    (tmp_path / ".tmp-server-x" / "server.log").write_text("INFO started\n")
    shipper = executors._Shipper(tmp_path, Gone, "k")  # ships .owner.json (and the log) at once: refused
    assert calls == [[".owner.json", ".tmp-server-x/server.log"]]
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "provenance.json").write_text('{"status": "ok"}')
    shipper.update()  # a run recorded
    time.sleep(0.5)  # ten of the thread's ticks
    shipper.stop(final=True)
    assert len(calls) == 1, calls


def test_a_lost_task_whose_files_cannot_be_written_is_reported_once_and_close_still_closes(tmp_path):
    """A review: with a finished task left pending until handled, an error while handling it (here: a file of
    the job that cannot be written, as on a full disk) was raised again by every ``wait()`` and by ``close()``,
    before the collector, Ray and the staging directories were seen to.  Now the error is recorded with the
    cells (``shipped_runs_error``), the task is handled once, and close() goes through."""
    from specsim.runs.executors import RayExecutor

    class Ref:
        def task_id(self):
            raise AttributeError

    closed = []

    class FakeRay:
        def wait(self, refs, num_returns=1, timeout=None):
            return refs[:1], refs[1:]

        def get(self, x, timeout=None):
            if isinstance(x, Ref):
                raise RuntimeError("worker died")
            return x

        def kill(self, actor):
            closed.append("collector")

        def shutdown(self):
            closed.append("ray")

    class Call:
        def __init__(self, f):
            self.remote = f

    class Collector:
        get = Call(lambda key: {"r1/provenance.json": b'{"status": "ok"}', "f/x": b"x"})
        drop = Call(lambda key: closed.append(f"drop {key}"))

    staging = tmp_path / ".staging-x"
    staging.mkdir()
    (staging / "f").write_text("")  # a file where the job's directory f/ must go: writing f/x fails
    ex = object.__new__(RayExecutor)
    ex.ray, ex.runs_dir, ex._started, ex._collector = FakeRay(), tmp_path, True, Collector()
    ref = Ref()
    ex._pending, ex._staging = {ref: "tag"}, {ref: staging}
    [(tag, got)] = ex.wait(1)
    assert tag == "tag" and not ex._pending and not ex._staging
    assert "could not be written" in got["executor"]["shipped_runs_error"], got["executor"]
    assert [r.run_id for r in got["results"]] == ["r1"]  # what could be written is kept
    assert ex.wait(1) == []
    ex.close()
    assert closed == ["drop .staging-x", "collector", "ray"]


def test_closing_an_executor_removes_the_staging_of_jobs_that_end_too_late(tmp_path):
    """A review: a job lost while ``close()`` waited for it left its driver-side ``.staging-*`` directory (and
    the runs in it) in --runs-dir for good: close() dropped what ``wait`` returned, and only the runner's import
    removes one."""
    from specsim.runs.executors import RayExecutor, _driver_staging, _lost_job

    job, staging = _driver_staging(tmp_path, {"kind": "group"})
    (staging / "m-S-c1").mkdir()  # a run the job recorded before it was lost
    _, left = _driver_staging(tmp_path, {"kind": "group"})  # a job that never returns at all

    class FakeRay:
        def cancel(self, ref, force=False):
            pass

        def shutdown(self):
            pass

    ex = object.__new__(RayExecutor)  # the executor's own close(), without a Ray cluster
    ex.ray, ex._started, ex._collector = FakeRay(), False, None
    ex._pending, ex._staging = {"lost": "tag", "never": "tag2"}, {"never": left}

    def wait(timeout_s=None):
        if "lost" not in ex._pending:  # the other one is given up on (close waits 60 s at most)
            ex._pending.pop("never", None)
            return []
        ex._pending.pop("lost")
        return [("tag", _lost_job(staging, RuntimeError("worker died"), "ray"))]

    ex.wait = wait
    ex.close()
    assert not staging.exists() and not left.exists() and not list(tmp_path.glob(".staging-*"))
