"""Where a matrix's jobs run (layer 4, runs): in this process, or as Ray tasks on a cluster.

A **job** is one serve-config group (one ``vllm serve`` and its bench cells) or one offline judge
(a health check, a verification-cost probe), given as a plain dict.  Both executors run a job into
a *staging* directory with :func:`execute_job` and hand back its recorded runs; the driver then
imports every run into the runs directory with :func:`import_run` -- a fresh ``.tmp-<run-id>-*``
directory renamed into place, never over an existing run -- adding the ``executor`` and
``server_end`` provenance.  So a local run and a Ray run write the same run ids and files, from the
driver, atomically.

Ray (optional extra ``specsim[ray]``; imported only by :class:`RayExecutor`): each job is one task
with the resources its server needs -- ``num_gpus`` = tensor x pipeline x data parallel size on a GPU
platform; on the CPU platform ``num_cpus`` = the cores of the smallest node, so that on a cluster of
equal machines a server has a whole machine and two servers never share cores -- and the OpenMP
settings of :func:`specsim.runs.platforms.platform_settings` for those cores; the worker's own
``OMP_NUM_THREADS=1`` is removed (:func:`specsim.runs.platforms.omp_setting`, recorded as
``env_removed``).  A task that raises, is cancelled or whose worker dies is reported as
failed; the driver records its cells as failed and goes on, keeping the runs the task recorded before
(from a staging directory in the driver's runs directory where the worker sees it, else shipped to the
driver's :class:`_RunCollector` as they are recorded).
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

from specsim.errors import MissingExtraError, RunError, SpecsimValueError
from specsim.runs.offline import run_offline
from specsim.runs.process import stop_signals_as_interrupt
from specsim.runs.provenance import VllmInstall, redact_run, vllm_env
from specsim.runs.recorder import RunResult, _json_default
from specsim.runs.serve_bench import BenchPlan, serve_and_bench

__all__ = ["EXECUTORS", "execute_job", "pack_runs", "import_run", "LocalExecutor", "RayExecutor", "SlurmExecutor",
           "make_executor", "check_slurm_parameters", "slurm_cpus", "slurm_job_resources", "SUBMITIT_CLUSTERS",
           "sweep_stale_staging", "ray_task_resources"]

EXECUTORS = ("local", "ray", "slurm")


# --------------------------------------------------------------------------------------------
# one job, wherever it runs
# --------------------------------------------------------------------------------------------

def _job_env(job: dict) -> tuple[dict[str, str], dict, list[str]]:
    """The environment of a job's vLLM processes (made where they run: :func:`vllm_env` with the
    job's platform defaults and explicit settings), what provenance records of it, and the inherited
    variables it removes."""
    install = VllmInstall(Path(job["venv"]))
    removed = [k for k in job.get("env_unset", ()) if k in os.environ]
    env, used = vllm_env(extra=job.get("env_extra"), install=install, defaults=job.get("env_defaults"),
                         unset=tuple(job.get("env_unset", ())))
    return env, used, removed


def job_server(job: dict, runs_dir: str | os.PathLike, job_env: tuple | None = None):
    """The (not yet started) server of a group job, logging into ``runs_dir``
    (:func:`specsim.runs.serve_bench.new_server`); ``job_env``: the job's :func:`_job_env`, where the
    caller made it already (the same environment then reaches :func:`execute_job`)."""
    from specsim.runs.serve_bench import new_server

    return new_server(job["server_cmd"], runs_dir=runs_dir, env=(job_env or _job_env(job))[0],
                      health_timeout_s=job.get("health_timeout_s", 600.0),
                      stop_timeout_s=job.get("stop_timeout_s", 30.0))


def execute_job(job: dict, staging: str | os.PathLike, *, keep_interrupted: bool = False,
                clients: dict | None = None, server=None, server_error: RunError | None = None,
                started_with: Iterable[str] = (), start_batch_seconds: float | None = None,
                job_env: tuple | None = None, progress: Any = None) -> dict:
    """Run one job (``job["kind"]`` ``"group"`` or ``"offline"``) into ``staging``.

    Returns ``{"results": [RunResult, ...], "server_end": dict | None, "host": name, "pid": pid,
    "interrupted": bool}``.  A KeyboardInterrupt (Ctrl-C; ``ray.cancel(force=False)`` in a Ray task)
    stops the job's processes and records the current run as failed; with ``keep_interrupted`` the
    runs recorded so far are returned (``interrupted`` True, ``interrupt`` the exception,
    ``server_end`` how the server stopped, also when it was interrupted while starting), else it
    propagates.  ``clients``: a
    dict kept by the caller across jobs, holding the persistent bench client (``bench_client:
    persistent``) so that one client process serves every server of the matrix.
    The environment of the vLLM processes is made here, where they run
    (:func:`specsim.runs.provenance.vllm_env` with the job's platform defaults and explicit settings).
    ``server`` (a group job): its server, already started together with the servers of the groups
    named in ``started_with`` (:func:`job_server`, :func:`specsim.runs.process.start_together`;
    ``server_error`` why its start failed); every bench run of a group job records ``server_start``:
    ``{"started_together": 1 + len(started_with), "with": [...]}``, plus ``batch_seconds`` (launch of
    the batch to its last server healthy or failed: ``start_batch_seconds``) for a batch.
    ``job_env``: the job's ``(env, used, removed)`` (:func:`_job_env`) its server was made with, so
    that the server, the bench client and provenance share one environment, made once; made here
    when not given.  ``progress``: a group job's, ``.update(1)`` after each of its runs is recorded
    (:func:`specsim.runs.serve_bench.serve_and_bench`).
    """
    staging = Path(staging)
    staging.mkdir(parents=True, exist_ok=True)
    install = VllmInstall(Path(job["venv"]))
    env, used, removed = job_env or _job_env(job)
    prov = {**job["base_provenance"], "env": used}
    if removed:  # e.g. a Ray worker's OMP_NUM_THREADS=1
        prov["env_removed"] = {k: os.environ[k] for k in removed}
    out: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "server_end": None}
    if job["kind"] == "group":
        plans: list[BenchPlan] = list(job["plans"])
        for p in plans:  # baselines of another host: their outputs travel with the job
            if p.baseline_run is not None and job.get("baseline_outputs", {}).get(Path(p.baseline_run).name):
                d = staging / ".baselines" / Path(p.baseline_run).name
                d.mkdir(parents=True, exist_ok=True)
                (d / "outputs.jsonl").write_text(job["baseline_outputs"][Path(p.baseline_run).name])
                p.baseline_run = d
        stats: dict = {}
        bc = job.get("bench_client", "process")
        if bc == "persistent" and clients is not None:
            from specsim.runs.process import BenchClient

            if clients.get("bench") is None:
                clients["bench"] = BenchClient(env=env)
            clients["bench"].env = env
            bc = clients["bench"]
        from specsim.runs.process import watch_servers
        from specsim.runs.serve_bench import _server_end

        started_with = list(started_with)
        prov["server_start"] = {"started_together": 1 + len(started_with), "with": started_with}
        if start_batch_seconds is not None:
            prov["server_start"]["batch_seconds"] = start_batch_seconds
        with watch_servers() as started:
            try:
                out["results"] = serve_and_bench(job["server_cmd"], plans, runs_dir=staging, env=env,
                                                 base_provenance=prov, warmup=job.get("warmup"),
                                                 health_timeout_s=job.get("health_timeout_s", 600.0),
                                                 stop_timeout_s=job.get("stop_timeout_s", 30.0), server_stats=stats,
                                                 bench_client=bc, server=server, server_error=server_error,
                                                 progress=progress)
            except KeyboardInterrupt as e:
                if not stats and started and started[-1].stop_seconds is not None:
                    stats = _server_end(started[-1])  # interrupted while the server was starting
                if not keep_interrupted:
                    raise
                out["results"] = _recorded_in(staging)
                out["interrupted"] = True
                out["interrupt"] = e
        out["server_end"] = stats or None
    elif job["kind"] == "offline":
        judge = job.get("judge")
        try:
            r = run_offline(job["job"], run_id=job["run_id"], runs_dir=staging, install=install, env=env,
                            provenance={**prov, **job.get("provenance", {})}, timeout_s=job.get("timeout_s", 1800.0),
                            judge=judge)
        except RunError as e:
            if not (staging / job["run_id"]).exists():
                raise
            r = RunResult(job["run_id"], staging / job["run_id"], "failed", str(e))
        except KeyboardInterrupt as e:
            if not keep_interrupted:
                raise
            out["interrupted"] = True
            out["interrupt"] = e
            out["results"] = _recorded_in(staging)
            return out
        out["results"] = [r]
    else:
        raise SpecsimValueError("job.kind", "unknown job kind", job["kind"], ["group", "offline"])
    return out


def _recorded_in(staging: Path) -> list[RunResult]:
    """Runs recorded in a staging directory (after an interrupt or a failed job), with their recorded status."""
    import json

    out = []
    for p in sorted(staging.iterdir()):
        if p.is_dir() and not p.name.startswith(".") and (p / "provenance.json").exists():
            prov = json.loads((p / "provenance.json").read_text())
            out.append(RunResult(p.name, p, prov.get("status", "failed"), prov.get("error")))
    return out


def pack_runs(results: Iterable[RunResult]) -> dict[str, dict[str, bytes]]:
    """``{run_id: {relative path: bytes}}`` of recorded run directories (to ship them to the driver)."""
    packed = {}
    for r in results:
        files = {}
        for f in sorted(Path(r.path).rglob("*")):
            if f.is_file():
                files[str(f.relative_to(r.path))] = f.read_bytes()
        packed[r.run_id] = files
    return packed


#: a path under a job's staging directory (local ``<runs>/.staging-*``, a remote ``specsim-job-*``)
_STAGED = r"[^\s'\"]*/(?:\.staging-|specsim-job-)[A-Za-z0-9_]+/"


def final_paths(text: str, run_id: str, final: Path, *, server_log_kept: bool) -> str:
    """``text`` (a recorded error) with the paths of the staging directory it was recorded in (deleted
    after the import) replaced by the run's final path: its run directory, and the server log of the
    job (``.tmp-server-*/server.log``) by the run's own copy ``<final>/server.log`` when it was kept."""
    import re

    if server_log_kept:
        text = re.sub(_STAGED + r"\.tmp-server-[A-Za-z0-9_]+/server\.log", lambda _m: str(final / "server.log"), text)
    return re.sub(_STAGED + r"(?:\.tmp-)?" + re.escape(run_id) + r"(?:-[A-Za-z0-9_]{8})?(?=$|[/\s:;,)'\"])",
                  lambda _m: str(final), text)


def import_run(run_id: str, files: dict[str, bytes] | Path, runs_dir: str | os.PathLike,
               provenance_update: dict | None = None) -> Path:
    """Write one run into ``runs_dir/run_id`` atomically (temp directory + rename), never over a run.

    ``files``: ``{relative path: bytes}`` or a recorded run directory (moved).  ``provenance_update``
    is merged into its ``provenance.json`` before the rename, and its ``error`` and ``commands`` (the
    bench's ``--result-dir``) name the run's final paths, not the staging ones (:func:`final_paths`); a
    secret is replaced by ``<redacted>`` in it and in the run's files
    (:func:`specsim.runs.provenance.redact_run`).

    Raises
    ------
    RunError
        ``runs_dir/run_id`` exists (recorded runs are never overwritten).
    """
    import json

    runs_dir = Path(runs_dir)
    final = runs_dir / run_id
    if final.exists():
        raise RunError(f"run {run_id!r} is already recorded at {final}; recorded runs are never overwritten")
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{run_id}-", dir=runs_dir))
    os.chmod(tmp, 0o755)
    if isinstance(files, Path):
        for f in files.iterdir():
            shutil.move(str(f), tmp / f.name)
    else:
        for rel, data in files.items():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
    pf = tmp / "provenance.json"
    if pf.exists():
        prov = json.loads(pf.read_text())
        prov.update(provenance_update or {})
        kept_log = (tmp / "server.log").exists()
        if isinstance(prov.get("error"), str):
            prov["error"] = final_paths(prov["error"], run_id, final, server_log_kept=kept_log)
        if isinstance(prov.get("commands"), dict):  # e.g. the bench's --result-dir: where its files are now
            prov["commands"] = {k: ([final_paths(t, run_id, final, server_log_kept=kept_log) if isinstance(t, str)
                                     else t for t in v] if isinstance(v, list) else v)
                                for k, v in prov["commands"].items()}
        prov = redact_run(tmp, prov)  # as RunRecorder does: a secret is recorded nowhere in the run
        pf.write_text(json.dumps(prov, indent=2, default=_json_default) + "\n")
    if final.exists():
        raise RunError(f"run {run_id!r} appeared at {final} meanwhile; this run is left in {tmp}")
    os.rename(tmp, final)
    return final


# --------------------------------------------------------------------------------------------
# executors
# --------------------------------------------------------------------------------------------

class _StartedAhead(NamedTuple):
    """A server the local executor started ahead of its group job."""

    server: Any
    #: why its start failed (None: healthy)
    error: RunError | None
    #: the groups whose servers started with it
    started_with: list[str]
    #: seconds from the launch of the batch to its last server healthy or failed
    batch_seconds: float
    #: the job's ``(env, used, removed)`` (:func:`_job_env`) the server was made with
    job_env: tuple


class LocalExecutor:
    """Runs each job in this process, one at a time (``wait`` returns them in submission order).

    Parameters
    ----------
    runs_dir : Path
        Where staging directories (and the logs of servers started ahead) are made.
    concurrent_server_starts : int
        How many servers start at once (the matrix's ``concurrent_server_starts``; default 1): a group
        job whose server is not running yet starts it together with the servers of the next group jobs
        (up to this many in all; :func:`specsim.runs.process.start_together`), and its benches begin
        only when all of them are healthy, so no start overlaps a benchmark; the servers started ahead
        wait, idle, until their own jobs run.  Each run records ``server_start``.
    """

    kind = "local"

    def __init__(self, runs_dir: Path, concurrent_server_starts: int = 1):
        self.runs_dir = Path(runs_dir)
        self.concurrent_server_starts = int(concurrent_server_starts)
        self._done: list[tuple[Any, dict | BaseException]] = []
        self._clients: dict = {}
        #: group name -> its server started ahead, waiting for its job
        self._ready: dict[str, _StartedAhead] = {}

    def resources(self, job: dict) -> dict:
        return {}

    def cpus(self) -> int:
        return os.cpu_count() or 1

    def _start_ahead(self, job: dict, upcoming: Iterable[dict], starting: list) -> None:
        from specsim.runs.process import start_together

        batch = [job]
        for j in upcoming:
            if len(batch) >= self.concurrent_server_starts or j.get("kind") != "group" or j["group"] in self._ready:
                break
            batch.append(j)
        ports: set[int] = set()
        envs = {}
        for j in batch:  # free_port() is asked before any of them binds: keep the ports apart
            envs[j["group"]] = je = _job_env(j)
            for _ in range(20):
                srv = job_server(j, self.runs_dir, job_env=je)
                if srv.port not in ports:
                    break
                shutil.rmtree(srv.log_path.parent, ignore_errors=True)
            ports.add(srv.port)
            starting.append((j["group"], srv))
        t0 = time.monotonic()
        errors = start_together([srv for _, srv in starting])
        wall = time.monotonic() - t0
        names = [name for name, _ in starting]
        for (name, srv), err in zip(starting, errors):
            self._ready[name] = _StartedAhead(srv, err, [n for n in names if n != name], wall, envs[name])

    def _stop_ready(self, keep: Iterable[str | None] = ()) -> None:
        """Stop the servers started ahead whose groups are not in ``keep`` (their jobs will not come:
        every cell of the group was kept or skipped) and remove their logs."""
        keep = set(keep)
        _stop_servers([self._ready.pop(n).server for n in [n for n in self._ready if n not in keep]])

    def submit(self, job: dict, tag: Any, upcoming: Iterable[dict] = ()) -> None:
        """Run ``job`` now.  ``upcoming``: the group jobs that will be submitted next, in order, whose
        servers may start together with this one's (``{"kind": "group", "group": name,
        "server_cmd": ..., ...}``: the server part of a job is enough); a group job is known by its
        ``group`` name.  A server started ahead for a group that is not this job's and not upcoming is
        stopped first (so none waits beside an offline judge or a group it was not started for)."""
        upcoming = list(upcoming)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.runs_dir))
        queued = False
        starting: list = []
        kw: dict = {}
        try:
            self._stop_ready(keep=[job.get("group"), *(j.get("group") for j in upcoming)])
            if job.get("kind") == "group":
                if job["group"] not in self._ready and self.concurrent_server_starts > 1:
                    self._start_ahead(job, upcoming, starting)
                if job["group"] in self._ready:
                    srv, err, others, wall, je = self._ready.pop(job["group"])
                    kw = {"server": srv, "server_error": err, "started_with": others, "start_batch_seconds": wall,
                          "job_env": je}
                    if err is None and srv.proc is not None and srv.proc.poll() is not None:
                        srv.stop()
                        kw["server_error"] = RunError(
                            f"server exited (code {srv.returncode}) while it waited for its turn after starting "
                            f"with {', '.join(others) or 'no other'}; log {srv.log_path}")
            out = execute_job(job, staging, clients=self._clients, keep_interrupted=True, **kw)
            out["staging"] = staging
            out["executor"] = {"kind": "local", "host": out["host"], "pid": out["pid"]}
            self._done.append((tag, out))
            queued = True
            if out.get("interrupted"):  # recorded (with the server's stop): now stop the matrix
                raise out.get("interrupt") or KeyboardInterrupt()
        except KeyboardInterrupt as e:
            from specsim.runs.process import deferred_interrupts

            with deferred_interrupts():  # stopping and recording are not cut short by a further Ctrl-C
                mine = next((srv for name, srv in starting if name == job.get("group")), None)
                if not queued and mine is not None:  # its log, kept with the record of the interrupted start
                    mine.stop()
                    with contextlib.suppress(OSError):
                        shutil.copyfile(mine.log_path, staging / ".server.log")
                self._drop_unclaimed(starting)
                if not queued:  # interrupted outside the job's own handling (e.g. its server starting)
                    got = _interrupted(staging, e)
                    if mine is not None and mine.stop_seconds is not None:
                        from specsim.runs.serve_bench import _server_end

                        got["server_end"] = _server_end(mine)
                    if (staging / ".server.log").exists():
                        got["server_log"] = staging / ".server.log"
                    self._done.append((tag, got))
            raise
        except Exception as exc:  # noqa: BLE001 - a failed job is recorded, the matrix goes on
            self._drop_unclaimed(starting)
            # the runs it recorded before the error are kept (their files and tracebacks); the driver
            # records the others failed with this error (the staging directory used to be deleted)
            self._done.append((tag, _left_in(staging, error=exc)))
        finally:  # the job failed before its server was taken over (serve_and_bench stops it)
            claimed = kw.get("server")
            if claimed is not None and claimed.stop_seconds is None:
                _stop_servers([claimed])

    def _drop_unclaimed(self, starting: list) -> None:
        """Stop the servers of this submit's batch that are not waiting for their jobs (the job's own,
        and all of them when the start was interrupted) and remove their logs; a stop is idempotent."""
        _stop_servers([srv for name, srv in starting if name not in self._ready])

    def wait(self) -> list[tuple[Any, dict | BaseException]]:
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        """Stop the persistent bench client and any server started ahead whose job never ran (an
        interrupted matrix)."""
        try:
            self._stop_ready()
        finally:
            if self._clients.get("bench") is not None:
                self._clients.pop("bench").close()


def _stop_servers(servers) -> None:
    """:func:`specsim.runs.process.stop_all`, then remove each server's log directory (also when a stop
    was interrupted)."""
    from specsim.runs.process import stop_all

    try:
        stop_all(servers)
    finally:
        for srv in servers:
            shutil.rmtree(srv.log_path.parent, ignore_errors=True)


def _left_in(staging: Path, **extra) -> dict:
    """What a job that ended early in this process leaves: its recorded runs in the staging directory,
    as the driver imports a finished job's (``extra``: ``interrupted`` / ``interrupt`` or ``error``)."""
    return {"results": _recorded_in(staging), "staging": staging, "server_end": None,
            "executor": {"kind": "local"}, **extra}


def _interrupted(staging: Path, exc: BaseException | None = None) -> dict:
    """What a job interrupted in this process leaves (:func:`_left_in`)."""
    return _left_in(staging, interrupted=True, interrupt=exc)


#: the file naming a remote job's staging directory made by the driver (:func:`_driver_staging`)
_KEY_FILE = ".driver-key"


def _driver_staging(runs_dir: Path, job: dict) -> tuple[dict, Path]:
    """(``job`` naming a new staging directory in the driver's ``runs_dir`` and a key written into it, that
    directory).  A Ray task or Slurm job that sees the directory holding the key (on the driver's host, or
    ``runs_dir`` on a file system the cluster shares) records its runs there instead of its own temporary
    directory (:func:`_shared_staging`), so that when it is lost (its worker killed: ``ray.cancel(force=True)``,
    the OOM killer, a node gone) the driver still finds the runs it recorded and its server's log
    (:func:`_lost_job`)."""
    import uuid

    # absolute: a worker started in another directory (a --ray-address cluster) finds it all the same
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=Path(runs_dir).resolve()))
    key = uuid.uuid4().hex
    (staging / _KEY_FILE).write_text(key)
    return {**job, "driver_staging": str(staging), "driver_staging_key": key}, staging


def _shared_staging(job: dict) -> Path | None:
    """The driver's staging directory a job names (:func:`_driver_staging`) when this process sees it with
    the job's key in it, else None (another machine, no shared file system)."""
    where, key = job.get("driver_staging"), job.get("driver_staging_key")
    if not where or not key:
        return None
    try:
        return Path(where) if (Path(where) / _KEY_FILE).read_text() == key else None
    except OSError:
        return None


def _lost_job(staging: Path | None, exc: BaseException, kind: str, job_id: dict | None = None) -> dict | BaseException:
    """What a remote job that did not return its runs (it raised, was cancelled, or its process died) left in
    its driver-side staging directory (:func:`_driver_staging`): the runs it recorded, imported as a failed
    local job's are (:func:`_left_in`, ``error`` the exception, ``lost`` True), the log of its server, which
    the driver keeps with the run that was in flight (``server_log``: the last ``.tmp-server-*/server.log``;
    a server stopped normally removes its own), and ``executor``: ``kind``, ``job_id`` (Ray's ``task_id``,
    submitit's ``job_id``), the host and pid of the job's process from its ``.owner.json`` (None where it
    never started), ``job_returned`` False and ``job_error`` (the exception's type).  ``exc`` itself where
    the directory is gone."""
    import json

    if staging is None or not staging.is_dir():
        return exc
    got = _left_in(staging, error=exc, lost=True)
    owner: dict = {}
    with contextlib.suppress(OSError, ValueError):
        owner = json.loads((staging / _OWNER_FILE).read_text())
    got["executor"] = {"kind": kind, **(job_id or {}), "host": owner.get("host"), "pid": owner.get("pid"),
                       "job_returned": False, "job_error": type(exc).__name__}
    logs = sorted(staging.glob(".tmp-server-*/server.log"), key=lambda f: f.stat().st_mtime)
    if logs:
        got["server_log"] = logs[-1]
    return got


def _drop(outcomes: Iterable[tuple[Any, dict | BaseException]]) -> None:
    """Remove the driver-side staging directories of jobs whose outcome comes too late to be imported (an
    executor's ``close``): a lost job's (:func:`_lost_job`) holds the runs it recorded."""
    for _, out in outcomes:
        if isinstance(out, dict) and out.get("staging") is not None:
            shutil.rmtree(out["staging"], ignore_errors=True)


def _drop_staging(staging: dict) -> None:
    """Remove the driver-side staging directories left in ``staging`` (job -> directory: an executor's, of
    jobs that never returned: cancelled, still running) and empty it."""
    for d in staging.values():
        shutil.rmtree(d, ignore_errors=True)
    staging.clear()


def _task_id(ref: Any) -> dict:
    """``{"task_id": ...}`` of a Ray object ref (``ObjectRef.task_id``), or {} where it has none."""
    try:
        return {"task_id": ref.task_id().hex()}
    except Exception:  # noqa: BLE001 - an id for the record only
        return {}


def _ray_module():
    try:
        import ray
    except ModuleNotFoundError as exc:
        raise MissingExtraError("--executor ray", "ray", "ray") from exc
    return ray


#: the file in a remote job's staging directory naming the process that made it (:func:`sweep_stale_staging`)
_OWNER_FILE = ".owner.json"


def _process_start(pid: int) -> str | None:
    """An identity of live process ``pid`` that a later process with the same pid does not share:
    its start time in clock ticks after boot (field 22 of ``/proc/<pid>/stat``, proc(5)); None when
    there is no such process or it has ended (a zombie, or exiting).  Without ``/proc``: ``"alive"`` when a
    signal 0 reaches it (pid reuse then goes unseen)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        rest = text[text.rfind(")") + 2:].split()  # fields 3, 4, ...; comm (field 2) may hold spaces
        # ended: a zombie, or exiting (PF_EXITING 0x4 in field 9, include/linux/sched.h: a SIGKILLed
        # multi-threaded Ray worker tears down for a while after the raylet has reported it dead)
        return None if rest[0] in ("Z", "X") or int(rest[6]) & 0x4 else rest[19]
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None  # /proc works: the process is gone
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return "alive"


def _owner() -> dict:
    """What a staging directory's ``.owner.json`` records of this process: host, pid, start
    (:func:`_process_start`), and the boot and the PID and time namespaces it lives in
    (``/proc/sys/kernel/random/boot_id``, ``/proc/self/ns/pid``, ``/proc/self/ns/time``; None without
    them): a pid and its start time name the same process only in the same boot and namespaces -- a
    container sharing ``/tmp`` and the host name has pids of its own, and a time namespace shifts the
    start times it reads (``unshare --time --boottime``)."""
    def ns(kind: str) -> str | None:
        try:
            return os.readlink(f"/proc/self/ns/{kind}")
        except OSError:
            return None

    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = None
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _process_start(os.getpid()),
            "boot_id": boot, "pid_ns": ns("pid"), "time_ns": ns("time")}


#: what must be equal for a recorded pid and start time to be compared here (:func:`_owner_gone`)
_SAME_PLACE = ("host", "boot_id", "pid_ns", "time_ns")


def _owner_gone(owner: dict, me: dict) -> bool:
    """Whether the process ``owner`` (an ``.owner.json``) has certainly ended, seen from ``me``
    (:func:`_owner`): same host, boot, PID and time namespaces, and no process with its pid and start
    time.  Anything else (another host -- or a machine of the same name sharing the directory --,
    another boot or namespace, fields missing) counts as alive: a directory left alone is a few
    kilobytes, one removed under a live job loses its runs."""
    if any(k not in owner or owner[k] != me[k] for k in _SAME_PLACE):
        return False
    now = _process_start(int(owner["pid"]))
    if owner.get("start") == "alive" or now == "alive":  # recorded or read without /proc: the pid only
        return now is None
    return now != owner.get("start")


def sweep_stale_staging(tmp_dir: str | os.PathLike | None = None) -> list[Path]:
    """Remove the staging directories (``specsim-job-*`` in ``tmp_dir``, default the temporary
    directory) of remote jobs whose process has died on this host -- a Ray worker killed by
    ``ray.cancel(force=True)`` or a lost worker, a Slurm job killed by SIGKILL -- which could not remove
    their own.  A directory counts as stale only when it is this user's (not a link) and its
    ``.owner.json`` names a process that has certainly ended (:func:`_owner_gone`: this host, boot,
    PID and time namespaces, and no process with its pid and start time); one without that file
    (being made, or not made by :func:`_packed_job`), of another host, boot or namespace (a container
    sharing ``/tmp``) is left alone.  Called where jobs run (before each job) and by the
    Ray and Slurm executors' ``close`` on the driver.

    Parameters
    ----------
    tmp_dir : path, optional
        Where to look (default :func:`tempfile.gettempdir`, where :func:`_packed_job` makes them).

    Returns
    -------
    list of Path
        The directories removed.  Raises nothing (unreadable entries are skipped).
    """
    import json

    out = []
    me = _owner()
    for d in Path(tmp_dir if tmp_dir is not None else tempfile.gettempdir()).glob("specsim-job-*"):
        try:
            st = d.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():  # a link, a file, another user's
                continue
            if not _owner_gone(json.loads((d / _OWNER_FILE).read_text()), me):
                continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            out.append(d)
    return out


def _packed_job(job: dict, where: dict | None = None) -> dict:
    """Run the job in a private staging directory and return its runs as bytes (for a remote driver).
    The directory names its owner (``.owner.json``): when this process is killed before its
    ``finally``, a later job or the driver removes it (:func:`sweep_stale_staging`).  Where this process
    sees the driver's staging directory the job names (:func:`_shared_staging`), the job records there
    instead, and leaves it to the driver when it raises or is killed (:func:`_lost_job`)."""
    import json

    with contextlib.suppress(Exception):  # a cleanup of others' leftovers never fails this job
        sweep_stale_staging()
    shared = _shared_staging(job)  # the driver's, where this process sees it: kept for it if this job fails
    staging = shared or Path(tempfile.mkdtemp(prefix="specsim-job-"))
    returned = False
    shipper = None
    try:
        (staging / _OWNER_FILE).write_text(json.dumps(_owner()))
        if shared is None and job.get("collector") is not None:  # elsewhere: what it records goes to the driver
            shipper = _Shipper(staging, job["collector"], job["collector_key"])
        out = execute_job(job, staging, keep_interrupted=True, progress=shipper)
        if shipper is not None:
            shipper.stop()  # before the return: the runs go back with it, and nothing is shipped after
        packed = pack_runs(out["results"])
        res = [{"run_id": r.run_id, "status": r.status, "error": r.error, "summary": r.summary} for r in out["results"]]
        returned = True
        return {"runs": packed, "results": res, "server_end": out["server_end"],
                "interrupted": out.get("interrupted", False),
                "interrupt_signal": getattr(out.get("interrupt"), "signal", None),
                "executor": {"host": out["host"], "pid": out["pid"], **(where or {})}}
    finally:
        try:
            if shipper is not None:
                shipper.stop(final=not returned)  # a job that raises ships what it recorded before it goes
        finally:  # also when a second interrupt lands in that stop
            if shared is None or returned:
                shutil.rmtree(staging, ignore_errors=True)


#: seconds between a remote job's shipments to the driver of its running server's log (:class:`_Shipper`)
SHIP_EVERY_S = 2.0
#: seconds a shipment may take (a collector that does not answer: the job goes on, the shipment is repeated)
SHIP_TIMEOUT_S = 30.0


class _RunCollector:
    """The Ray actor (on the driver's node: :meth:`RayExecutor._collector_actor`) that holds what the remote
    jobs not seeing the driver's ``--runs-dir`` have recorded so far (:class:`_Shipper`): ``{job key:
    {relative path: bytes}}`` of their staging directories.  The driver reads a lost job's files
    (:meth:`RayExecutor.wait`), then drops them, as it drops a returned one's.  A job holds its runs (each with
    its copy of the server's log so far) and its server's log until it ends: a few MB for a CPU server."""

    def __init__(self):
        self._files: dict[str, dict[str, bytes | bytearray]] = {}

    def put(self, key: str, files: dict[str, bytes], appends: dict[str, tuple[int, bytes]] | None = None) -> None:
        """Keep ``files`` ({relative path: bytes}) of job ``key``, and ``appends`` ({relative path: (offset,
        bytes)}: a growing file's bytes from that offset on; a repeated shipment changes nothing)."""
        mine = self._files.setdefault(key, {})
        mine.update(files)
        for rel, (offset, data) in (appends or {}).items():
            buf = mine.setdefault(rel, bytearray())
            del buf[offset:]
            buf += data

    def get(self, key: str) -> dict[str, bytes]:
        """Job ``key``'s files, kept until :meth:`drop` (a driver interrupted while it writes them reads them
        again when it closes)."""
        return {rel: bytes(data) for rel, data in self._files.get(key, {}).items()}

    def drop(self, key: str) -> None:
        self._files.pop(key, None)


class _Shipper:
    """Ships what a remote job records in its own staging directory to the driver's
    :class:`_RunCollector` while the job runs: its ``.owner.json`` at once, each run the bench loop records as
    soon as it is recorded (its directory renamed into place: complete; :meth:`update`, the job's
    ``progress``), and every :data:`SHIP_EVERY_S` seconds (a thread) what else is new: what its running server
    has added to its log, a run recorded on an interrupt.  A job whose worker is lost --
    ``ray.cancel(force=True)``, the OOM killer, a node gone -- on a machine that does not see the driver's
    ``--runs-dir`` so leaves the driver the runs it recorded and the log of the cell in flight up to the last
    shipment, as a worker seeing it leaves them in the driver's staging directory (:func:`_shared_staging`).
    A shipment waits at most :data:`SHIP_TIMEOUT_S`; once the collector is gone (``RayActorError``) nothing
    more is shipped."""

    def __init__(self, staging: Path, collector: Any, key: str):
        import threading

        self.staging, self.collector, self.key = staging, collector, key
        self._sent: set[str] = set()
        self._log_sizes: dict[str, int] = {}
        self._gone = False  # the collector died: shipping again would only re-read and re-send everything
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # one shipment at a time: the thread's, or update's
        self.update()  # .owner.json: who ran the job, also when it is lost before its first run
        self._thread = threading.Thread(target=self._loop, name="specsim-shipper", daemon=True)
        self._thread.start()

    def _new_files(self) -> tuple[dict[str, bytes], dict[str, tuple[int, bytes]], set[str], dict[str, int]]:
        """(files not yet shipped, the server logs' new bytes (offset, bytes), the runs and files shipped
        with them, the logs' sizes then)."""
        files: dict[str, bytes] = {}
        appends: dict[str, tuple[int, bytes]] = {}
        done: set[str] = set()
        sizes: dict[str, int] = {}
        if _OWNER_FILE not in self._sent and (self.staging / _OWNER_FILE).exists():
            files[_OWNER_FILE] = (self.staging / _OWNER_FILE).read_bytes()
            done.add(_OWNER_FILE)
        for r in _recorded_in(self.staging):
            if r.run_id not in self._sent:
                files.update({f"{r.run_id}/{rel}": data for rel, data in pack_runs([r])[r.run_id].items()})
                done.add(r.run_id)
        for log in self.staging.glob(".tmp-server-*/server.log"):
            rel = str(log.relative_to(self.staging))
            with contextlib.suppress(OSError):  # a server that stops removes its log directory
                offset = self._log_sizes.get(rel, 0)
                with open(log, "rb") as f:
                    f.seek(offset)
                    data = f.read()
                if data:
                    appends[rel] = (offset, data)
                    sizes[rel] = offset + len(data)
        return files, appends, done, sizes

    def _ship(self) -> None:
        import ray

        if self._gone or not self._lock.acquire(timeout=SHIP_TIMEOUT_S):
            return
        try:
            files, appends, done, sizes = self._new_files()
            if files or appends:
                try:
                    ray.get(self.collector.put.remote(self.key, files, appends), timeout=SHIP_TIMEOUT_S)
                except ray.exceptions.RayActorError:
                    self._gone = True
                    raise
            self._sent |= done  # only once the collector has them: a failed shipment is repeated
            self._log_sizes.update(sizes)
        finally:
            self._lock.release()

    def update(self, n: int = 1) -> None:
        """A run was recorded (``serve_and_bench``'s ``progress``): ship it now."""
        with contextlib.suppress(Exception):  # else the thread's next shipment
            self._ship()

    def _loop(self) -> None:
        while not self._stopping.wait(SHIP_EVERY_S) and not self._gone:
            with contextlib.suppress(Exception):  # a shipment that fails is repeated at the next one
                self._ship()

    def stop(self, final: bool = False) -> None:
        """End the thread; ``final``: then ship what is new (the job raised: the driver takes it)."""
        self._stopping.set()
        self._thread.join(timeout=2 * SHIP_TIMEOUT_S)
        if final:
            self.update()


def _enter_driver_cwd(job: dict) -> None:
    """Move to the job's ``driver_cwd`` where this process has that directory (else stay)."""
    with contextlib.suppress(OSError, TypeError):
        os.chdir(job.get("driver_cwd") or os.getcwd())


def _ray_job(job: dict) -> dict:
    """The Ray task: :func:`_packed_job` with the task's node, id and resources, run in the driver's
    working directory (``driver_cwd``) where this worker has it, as a local job runs (:func:`_in_import_root`
    started the workers elsewhere)."""
    import ray

    _enter_driver_cwd(job)
    ctx = ray.get_runtime_context()
    return _packed_job(job, {"kind": "ray", "node_id": ctx.get_node_id(), "task_id": ctx.get_task_id(),
                             "resources": job.get("ray_resources")})


def _slurm_job(job: dict) -> dict:
    """The submitit job: :func:`_packed_job` with the Slurm job id (when there is one).

    SIGINT and SIGTERM stop it as Ctrl-C stops a local matrix (the running cell recorded failed,
    its server stopped with SIGINT): ``scancel`` sends SIGTERM, which submitit's job wrapper would
    otherwise ignore until Slurm's SIGKILL; on the local cluster :meth:`SlurmExecutor.cancel_all`
    sends SIGTERM through submitit's controller, and SIGINT (blocked in that controller and so, by
    inheritance, in this job: ``SlurmExecutor._controller_blocks_sigint``) is unblocked and handled
    here.  submitit's preemption signal (``SUBMITIT_PREEMPT_SIGNAL``, default SIGUSR2: sent
    ``signal_delay_s`` before Slurm's time limit, and on a preemption) stops it the same way: submitit's own
    handler would raise its UncompletedJobError through the running cell (recorded without its server's log or
    stop) or requeue the job over its recorded runs."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    try:  # submitit's own job id (on the local cluster the controller's pid): its .submitit/<id>_* files
        import submitit

        submitit_id = str(submitit.JobEnvironment().job_id)
    except Exception:  # noqa: BLE001 - not under submitit (called directly): no id to link to
        submitit_id = None
    with stop_signals_as_interrupt(("SIGINT", "SIGTERM", submitit_preempt_signal())):
        return _packed_job(job, {"kind": "slurm", "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                                 "submitit_job_id": submitit_id, "resources": job.get("slurm_resources")})


def submitit_preempt_signal() -> str:
    """The signal submitit sends a job ``signal_delay_s`` before Slurm's time limit and on a preemption:
    ``SIG`` + ``$SUBMITIT_PREEMPT_SIGNAL``, default ``SIGUSR2`` (submitit/core/job_environment.py); SIGUSR2 for a
    name the signal module lacks (submitit itself refuses that one)."""
    name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2").strip().upper().removeprefix("SIG")
    return name if isinstance(getattr(signal, name, None), signal.Signals) else "SIGUSR2"


#: seconds to wait for a TCP connection to a ``--ray-address`` before refusing it
RAY_CONNECT_TIMEOUT_S = 5.0


def check_ray_address(address: str | None, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse a ``host:port`` / ``ray://host:port`` Ray address nothing accepts TCP connections on.

    ``ray.init(address=...)`` retries an unreachable GCS address for minutes, printing Ray's own
    "Failed to connect to GCS" lines and never raising (a new-user trial waited 200 s); one TCP
    connection attempt tells the same in seconds.  ``None`` (a local cluster) and ``"auto"`` (Ray
    finds a cluster started on this machine, or raises at once) are not checked.

    Parameters
    ----------
    address : str or None
        ``--ray-address``.
    timeout_s : float
        Seconds for the connection attempt.

    Raises
    ------
    RunError
        The address has no port, or the connection is refused or times out (names
        ``--ray-address``).
    """
    if address is None or address == "auto":
        return
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not re.fullmatch("[0-9]+", port) or not host:  # ASCII digits (str.isdigit() takes others)
        raise RunError(f"--ray-address {address!r}: give host:port of the Ray head (e.g. 10.0.0.5:6379, or "
                       "ray://10.0.0.5:10001 for Ray Client), 'auto' for a cluster started on this machine, or "
                       "leave it out to start a local one")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise RunError(f"--ray-address {address!r}: nothing accepts connections at {host}:{port} ({exc}; waited up "
                       f"to {timeout_s:g} s). Start a cluster there (`ray start --head --port {port}`) or give its "
                       "address, or leave --ray-address out to start a local one") from exc


@contextlib.contextmanager
def _keep_sigterm_handler():
    """Restore, after the block, the SIGTERM handler in place before it (main thread only).

    ``ray.init`` installs its own SIGTERM handler in the driver (``sys.exit(15)``) and Ray's core worker
    a failure-signal handler that prints a stack dump: the CLI's handler
    (:func:`specsim.runs.process.stop_signals_as_interrupt`), which stops a matrix on ``timeout`` /
    ``scancel`` / ``kill`` as on Ctrl-C (running cell recorded, manifest written, exit 143), was lost.
    ``signal.signal`` re-installs the handler at the C level too, so Ray's failure handler no longer
    sees SIGTERM; the other signals Ray handles are left as Ray set them.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if before is not None:  # None: a handler not installed from Python, which cannot be restored
            signal.signal(signal.SIGTERM, before)


def _specsim_import_root() -> Path:
    """The directory this ``specsim`` package is imported from (the package's parent: a checkout for an
    editable install, else ``site-packages``).

    Returns
    -------
    Path
        Raises nothing.
    """
    import specsim

    return Path(specsim.__file__).resolve().parent.parent


@contextlib.contextmanager
def _in_import_root():
    """Run the block (``ray.init``) in :func:`_specsim_import_root`, then return to the working directory.

    ``ray.init`` puts the driver's working directory first on every worker's ``sys.path``
    (``ray/_private/worker.py``, ``py_driver_sys_path``; the workers of a local cluster start there too),
    so a driver started in another checkout of specsim ran its Ray tasks with that checkout's code, not
    its own.  From here the workers import the driver's specsim; :func:`_ray_job` then moves to the
    driver's working directory, where a local server runs (paths a command gives relative to it).  Where
    the directory cannot be entered, the block runs where it is."""
    here = os.getcwd()
    try:
        os.chdir(_specsim_import_root())
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.chdir(here)


class RayExecutor:
    """Runs each job as a Ray task (``ray.init(address)``; a local cluster when ``address`` is None).

    ``ray.init`` is called from :func:`_specsim_import_root`, so that the workers import this specsim
    (:func:`_in_import_root`); each task runs in the driver's working directory where its host has it.
    Where Ray is initialized already, it is used as it is.

    Parameters
    ----------
    address : str, optional
        ``--ray-address`` (``"auto"``, ``"ray://host:10001"``, ...); None starts a local cluster.
    platform : str
        The runs' platform (``"cpu"``, ``"cuda"``, ``"rocm"``): decides GPUs vs whole-machine CPUs.
    init_kwargs : dict, optional
        Further ``ray.init`` arguments (e.g. ``num_cpus`` of a local cluster in tests).

    Raises
    ------
    MissingExtraError
        No ``ray`` package (``pip install 'specsim[ray]'``).
    RunError
        ``address`` names no running Ray cluster: nothing accepts connections there
        (:func:`check_ray_address`, before Ray's own minutes of retries) or Ray's ConnectionError,
        reworded with specsim's ``--ray-address``.
    """

    kind = "ray"

    def __init__(self, runs_dir: Path, *, address: str | None = None, platform: str = "cpu",
                 init_kwargs: dict | None = None):
        self.ray = _ray_module()
        self.runs_dir = Path(runs_dir)
        self.platform = platform
        self._started = False
        if not self.ray.is_initialized():
            check_ray_address(address)
            try:
                with _keep_sigterm_handler(), _in_import_root():  # the workers import the driver's specsim
                    self.ray.init(address=address, include_dashboard=False, log_to_driver=False,
                                  **(init_kwargs or {}))
            except ConnectionError as exc:  # Ray's own text names its flags (--address), not specsim's
                raise RunError(f"--ray-address {address!r}: no running Ray cluster found there ({exc}). Start one "
                               "(`ray start --head`) and give its address, or leave --ray-address out to start a "
                               "local one") from exc
            self._started = True
        self._task = self.ray.remote(max_retries=0)(_ray_job)
        self._pending: dict = {}
        self._staging: dict = {}  # task -> its driver-side staging directory (_driver_staging)
        self._collector = None  # the _RunCollector actor, made with the first task

    def _collector_actor(self) -> Any:
        """The :class:`_RunCollector` of this executor's jobs, started on the driver's node (so that a node
        lost with a job does not take it along; under Ray Client the head node, the node Ray names for the
        client's driver) with no CPU of its own."""
        if self._collector is None:
            opts: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0}
            with contextlib.suppress(Exception):  # where Ray names no node for the driver, it places the actor
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                    self.ray.get_runtime_context().get_node_id(), soft=False)
            self._collector = self.ray.remote(_RunCollector).options(**opts).remote()
        return self._collector

    def cpus(self) -> int:
        """Cores of the smallest alive node (what one CPU server task asks for)."""
        cpus = [n["Resources"].get("CPU", 0) for n in self.ray.nodes() if n.get("Alive")]
        cpus = [c for c in cpus if c > 0]
        if not cpus:
            raise RunError("the Ray cluster has no node with CPUs")
        return int(min(cpus))

    def resources(self, job: dict) -> dict:
        return ray_task_resources(int(job.get("gpus", 1)), platform=self.platform, cpus=self.cpus)

    def submit(self, job: dict, tag: Any) -> Any:
        res = job.get("ray_resources") or self.resources(job)
        job, staging = _driver_staging(self.runs_dir, job)
        job = {**job, "collector": self._collector_actor(), "collector_key": staging.name,
               "driver_cwd": os.getcwd()}
        ref = self._task.options(**res).remote(job)
        self._pending[ref] = tag
        self._staging[ref] = staging
        return ref

    def wait(self, timeout_s: float | None = None) -> list[tuple[Any, dict | BaseException]]:
        """Block until at least one task is finished; return ``[(tag, result or exception)]``."""
        if not self._pending:
            return []
        ready, _ = self.ray.wait(list(self._pending), num_returns=1, timeout=timeout_s)
        out = []
        for ref in ready:
            # left pending until handled: a Ctrl-C meanwhile leaves the task to close(), which handles it again
            tag, staging = self._pending[ref], self._staging.get(ref)
            try:
                got = self._outcome(ref, staging)
            except Exception as exc:  # noqa: BLE001 - handling it failed: its cells recorded failed with that, once
                got = RunError(f"handling the finished Ray task failed ({type(exc).__name__}: {exc})"
                               + (f"; what it left is kept in {staging}" if staging is not None else ""))
            if staging is not None:
                self._collector_drop(staging)
            del self._pending[ref]
            self._staging.pop(ref, None)
            out.append((tag, got))
        return out

    def _outcome(self, ref: Any, staging: Path | None) -> dict | BaseException:
        """A finished task's result; a lost one's what it left (:meth:`_collected`, :func:`_lost_job`)."""
        try:
            got = self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - RayTaskError, WorkerCrashedError, TaskCancelledError
            why = self._collected(staging)
            lost = _lost_job(staging, exc, self.kind, _task_id(ref))
            if why is not None and isinstance(lost, dict):
                lost["executor"]["shipped_runs_error"] = why
            return lost
        if staging is not None:  # returned: its runs came back as bytes (the task removed the directory where
            shutil.rmtree(staging, ignore_errors=True)  # it saw it)
        return got

    def _collected(self, staging: Path | None) -> str | None:
        """Write into a lost job's driver-side staging directory what it shipped to the collector from a
        worker that did not see that directory (:class:`_Shipper`; nothing where it saw it): its recorded
        runs, ``.owner.json`` and its server's log, for :func:`_lost_job`; each file written whole (a temporary
        file renamed), so that a Ctrl-C meanwhile leaves none half-written for the second pass (``close``).
        Returns why they could not be read or written (the collector gone or not answering, a full disk: the
        cells it did not write are then recorded failed), else None."""
        if staging is None or self._collector is None or not staging.is_dir():
            return None
        try:
            files = self.ray.get(self._collector.get.remote(staging.name), timeout=2 * SHIP_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - recorded with the job's executor
            return f"the runs it shipped could not be read from the driver's collector: {type(exc).__name__}: {exc}"
        root = staging.resolve()
        try:
            for rel, data in files.items():
                dst = (staging / rel).resolve()
                if root not in dst.parents or dst.exists():  # only below it, never over what the job wrote there
                    continue
                dst.parent.mkdir(parents=True, exist_ok=True)
                part = dst.with_name(f".part-{dst.name}")
                part.write_bytes(data)
                os.replace(part, dst)
        except OSError as exc:
            return f"the runs it shipped could not be written into {staging}: {exc}"
        return None

    def _collector_drop(self, staging: Path) -> None:
        if self._collector is not None:
            with contextlib.suppress(Exception):
                self._collector.drop.remote(staging.name)

    def pending(self) -> list:
        return list(self._pending)

    def cancel_all(self, force: bool = True) -> None:
        for ref in list(self._pending):
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=force)

    def close(self) -> None:
        if self._pending:
            self.cancel_all(force=False)
            t0 = time.monotonic()
            while self._pending and time.monotonic() - t0 < 60:
                _drop(self.wait(timeout_s=5))
        if self._collector is not None:
            with contextlib.suppress(Exception):
                self.ray.kill(self._collector)
            self._collector = None
        if self._started:
            self.ray.shutdown()
        _drop_staging(self._staging)  # of tasks that never returned (cancelled, still running)
        sweep_stale_staging()  # of this host's workers killed before they could remove theirs


#: submitit's clusters (``submitit.AutoExecutor``'s ``cluster``)
SUBMITIT_CLUSTERS = ("slurm", "local", "debug")


def check_slurm_parameters(cluster: str | None, slurm_parameters: dict | None = None) -> str:
    """Check ``--executor slurm``'s settings as submitit would take them, before any job is submitted
    (and in a dry run), leaving nothing behind.

    Parameters
    ----------
    cluster : {"slurm", "local", "debug"} or None
        submitit's cluster; None: Slurm, refused where there is none (submitit would silently run
        the jobs on this host instead).
    slurm_parameters : dict, optional
        Arguments of submitit's ``update_parameters`` (``slurm_partition``, ``timeout_min``, ...),
        validated by submitit itself on a scratch executor.

    Returns
    -------
    str
        The cluster that would be used.

    Raises
    ------
    MissingExtraError
        No submitit (``pip install 'specsim[slurm]'``).
    SpecsimValueError
        An unknown cluster; a parameter submitit does not know or takes another type for; ``setup`` /
        ``local_setup`` on the local cluster (submitit runs the controller under a shell whose pid is
        the job id, so a stop sent there would end the shell and leave the job running).
    RunError
        ``cluster`` None on a host without Slurm.
    """
    try:
        import submitit
    except ModuleNotFoundError as exc:
        raise MissingExtraError("--executor slurm", "submitit", "slurm") from exc
    params = dict(slurm_parameters or {})
    if cluster is not None and cluster not in SUBMITIT_CLUSTERS:
        raise SpecsimValueError("--slurm-param cluster", "is not one of submitit's clusters", cluster,
                                list(SUBMITIT_CLUSTERS))
    if cluster is None and submitit.AutoExecutor.which() != "slurm":
        # submitit's AutoExecutor would fall back to running the jobs here, as local processes
        raise RunError("--executor slurm: no Slurm found (srun / sbatch not on PATH; submitit looks for srun), "
                       "and submitit would silently run the jobs on this host instead. Run on a Slurm login "
                       "node, use --executor local, or to run the jobs through submitit's local cluster on "
                       "purpose pass --slurm-param cluster=local (Python: slurm={'cluster': 'local'}; "
                       "cluster is one of slurm, local, debug)")
    cl = cluster or "slurm"
    if cl == "local" and {"setup", "local_setup"} & set(params):
        key = "setup" if "setup" in params else "local_setup"
        raise SpecsimValueError(f"slurm_parameters.{key}", "is not supported with cluster 'local' (a stop "
                                "could not reach the job); run the setup commands before specsim")
    import warnings

    with tempfile.TemporaryDirectory(prefix="specsim-submitit-check-") as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # submitit's deprecation notes; the real submit shows them
        try:
            submitit.AutoExecutor(folder=d, cluster=cl).update_parameters(**params)
        except (NameError, TypeError, ValueError, AssertionError) as exc:  # submitit asserts types
            why = "; ".join(x.strip() for x in str(exc).splitlines() if x.strip()) or type(exc).__name__
            raise SpecsimValueError("--slurm-param", f"submitit refuses it: {why}", params) from exc
    return cl


def ray_task_resources(gpus: int, *, platform: str, cpus: Callable[[], int] | None = None) -> dict:
    """What one :class:`RayExecutor` task asks Ray for (its ``.options``), for one job.

    Parameters
    ----------
    gpus : int
        GPUs its server needs (tensor x pipeline x data parallel size; 1 for a judge).
    platform : str
        ``"cuda"`` / ``"rocm"``: ``num_gpus`` = ``gpus`` and one CPU; any other (the CPU platform):
        ``num_cpus`` = the cores of the smallest alive node, so that two servers never share cores.
    cpus : callable, optional
        Returns those cores (:meth:`RayExecutor.cpus`, which asks the cluster); called on the CPU
        platform only.  None (a dry run, which reaches no cluster): ``num_cpus`` None there.

    Returns
    -------
    dict
        ``num_gpus`` and ``num_cpus``, or ``num_cpus`` alone.  Raises what ``cpus`` raises.
    """
    if platform in ("cuda", "rocm"):
        return {"num_gpus": int(gpus), "num_cpus": 1}
    return {"num_cpus": None if cpus is None else int(cpus())}


def slurm_cpus(slurm_parameters: dict | None = None) -> int:
    """Cores per Slurm job on the CPU platform: ``cpus_per_task`` where ``--slurm-param`` gives it, else
    this host's (``os.cpu_count``).  Raises nothing beyond ``int()`` of the value given."""
    return int((slurm_parameters or {}).get("cpus_per_task") or os.cpu_count() or 1)


def slurm_job_resources(timeouts_s: Iterable[float | None], gpus: int, *, platform: str, cpus: int, cluster: str,
                        slurm_parameters: dict | None = None, start_timeout_s: float = 600.0) -> dict:
    """What :class:`SlurmExecutor` asks Slurm for, for one job (a server's cells, or an offline judge).

    Parameters
    ----------
    timeouts_s : iterable of float or None
        Seconds: its cells' timeouts (a judge: its ``timeout_s`` alone), summed, 1800 for one not given;
        its server's ``start_timeout_s`` and 5 minutes (stop, bookkeeping) are added.
    gpus : int
        GPUs its server needs (tensor x pipeline x data parallel size; 1 for a judge).
    platform : str
        ``"cpu"``, ``"cuda"`` or ``"rocm"``.
    cpus : int
        Cores per job on the CPU platform (``cpus_per_task``).
    cluster : str
        submitit's cluster (``"slurm"``, ``"local"``, ``"debug"``).
    slurm_parameters : dict, optional
        ``--slurm-param`` values: where they set a parameter derived here, theirs is used.
    start_timeout_s : float
        Seconds its server may take to answer ``/health`` (the sidecar's ``server_start_timeout_s``;
        600 for a judge, whose engine starts within its ``timeout_s``).

    Returns
    -------
    dict
        ``timeout_min`` and ``gpus_per_node`` (GPU platforms) or ``cpus_per_task`` (and
        ``slurm_exclusive`` on Slurm itself, a whole node per server).  Raises nothing.
    """
    t = sum(x or 1800.0 for x in timeouts_s)
    res: dict[str, Any] = {"timeout_min": int(math.ceil((t + start_timeout_s + 300) / 60))}
    if platform in ("cuda", "rocm"):
        res["gpus_per_node"] = int(gpus)
    else:
        res["cpus_per_task"] = int(cpus)
        if cluster == "slurm":
            res["slurm_exclusive"] = True
    # what the user set (--slurm-param timeout_min=..., ...) wins over what is derived here
    res.update({k: v for k, v in (slurm_parameters or {}).items() if k in res})
    return res


class SlurmExecutor:
    """Runs each job as a Slurm job through submitit (optional extra ``specsim[slurm]``).

    Each job asks for ``gpus_per_node`` = its GPUs on a GPU platform, or a whole node
    (``slurm_exclusive``) on the CPU platform with ``cpus_per_task`` = ``cpus`` (default: this host's
    cores), and ``timeout_min`` from its cells' timeouts and its server's start timeout
    (:func:`slurm_job_resources`).  ``cluster="local"`` runs the jobs as local
    processes (submitit's LocalExecutor: what the tests use); ``None`` picks Slurm, and is refused
    (RunError) where there is none (submitit would fall back to local processes).
    ``slurm_parameters`` are passed to ``update_parameters`` (``slurm_partition``, ...); where they set
    ``timeout_min``, ``cpus_per_task``, ``gpus_per_node`` or ``slurm_exclusive`` they replace the
    values derived above (``cpus_per_task`` also sets the cores each server binds its threads to,
    ``VLLM_CPU_OMP_THREADS_BIND``).  Both are checked before anything is submitted (:func:`check_slurm_parameters`).

    On the local cluster the jobs share this host, and submitit's LocalExecutor starts every job it
    is given at once (it has no queue), so two servers would share the cores (or GPUs) that
    ``cpus_per_task`` / ``gpus_per_node`` promise each: there this executor holds the jobs in a
    queue of its own and submits the next only when the one in flight has finished (a job still in
    that queue when the matrix is interrupted is recorded failed, never submitted).  A Slurm
    cluster's scheduler does this itself (``slurm_exclusive`` on CPU).  There submitit's
    controllers are started with SIGINT blocked, so that a terminal's Ctrl-C reaches the jobs and
    not the controllers (which would SIGKILL their job 1 s later), and submitit's ``setup``
    parameter is refused (SpecsimValueError: a stop could not reach the job through the shell).
    """

    kind = "slurm"

    def __init__(self, runs_dir: Path, *, platform: str = "cpu", cluster: str | None = None,
                 folder: str | os.PathLike | None = None, cpus: int | None = None,
                 slurm_parameters: dict | None = None):
        try:
            import submitit
        except ModuleNotFoundError as exc:
            raise MissingExtraError("--executor slurm", "submitit", "slurm") from exc
        self.submitit = submitit
        self.runs_dir = Path(runs_dir)
        self.platform = platform
        self.folder = Path(folder) if folder else self.runs_dir / ".submitit"
        self.extra = dict(slurm_parameters or {})
        check_slurm_parameters(cluster, self.extra)  # before submitit makes its folder
        # the job's Python with -P: `python -m submitit.core._submit` would put the job's working directory (the
        # driver's) first on sys.path, and a driver started in another checkout of specsim would run its jobs
        # with that checkout's code
        python = f"{shlex.quote(sys.executable)} -P"
        self.ex = submitit.AutoExecutor(folder=str(self.folder), cluster=cluster, local_python=python,
                                        slurm_python=python)
        self.cluster = self.ex.cluster
        # the cores a job gets: what cpus_per_task asks for where given, else this host's
        self._cpus = int(cpus or slurm_cpus(self.extra))
        self._pending: dict = {}
        self._staging: dict = {}  # job -> its driver-side staging directory (_driver_staging)
        self._resources: dict = {}  # job -> what it asked Slurm for (the records of a job that did not return)
        # the local cluster runs every submitted job at once on this host: one job at a time there
        self._one_at_a_time = self.cluster == "local"
        self._queue: list[tuple[dict, Any]] = []  # (job, tag) not yet submitted
        self._cancelled: list[tuple[Any, BaseException]] = []  # queued jobs dropped by cancel_all

    def cpus(self) -> int:
        return self._cpus

    def resources(self, job: dict) -> dict:
        timeouts = [p.timeout_s for p in job.get("plans", [])] or [job.get("timeout_s")]
        return slurm_job_resources(timeouts, int(job.get("gpus", 1)), platform=self.platform, cpus=self._cpus,
                                   cluster=self.cluster, slurm_parameters=self.extra,
                                   start_timeout_s=float(job.get("health_timeout_s") or 600.0))

    def submit(self, job: dict, tag: Any) -> Any:
        """Submit ``job`` (its cells: ``tag``); on the local cluster, queue it while another is in
        flight.  Returns the submitit job, or None where it was queued."""
        job = {**job, "slurm_resources": job.get("slurm_resources") or self.resources(job)}
        if self._one_at_a_time and self._pending:
            self._queue.append((job, tag))
            return None
        return self._start(job, tag)

    def _start(self, job: dict, tag: Any) -> Any:
        self.ex.update_parameters(**{**job["slurm_resources"], **self.extra})
        job, staging = _driver_staging(self.runs_dir, job)
        try:
            with self._controller_blocks_sigint():
                j = self.ex.submit(_slurm_job, job)
                self._pending[j] = tag  # tracked before a Ctrl-C held back meanwhile is delivered
                self._staging[j] = staging
                self._resources[j] = job["slurm_resources"]
        except BaseException:
            if not any(v is staging for v in self._staging.values()):
                shutil.rmtree(staging, ignore_errors=True)
            raise
        return j

    @contextlib.contextmanager
    def _controller_blocks_sigint(self):
        """On the local cluster, submitit starts a controller process per job in the driver's process
        group; on Ctrl-C in a terminal it would get SIGINT too and SIGKILL the job 1 s later
        (``submitit/local/local.py``, ``Controller.run`` / ``kill_tasks``), before the job has stopped
        its server and returned its records.  Started with SIGINT blocked (the signal mask is
        inherited), it never sees one; the job unblocks it and handles it itself (:func:`_slurm_job`).
        In the driver a Ctrl-C during the submit is held back, not lost: delivered on the way out."""
        if self.cluster != "local":
            yield
            return
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def pending(self) -> list:
        """Tags of the jobs not yet returned by :meth:`wait` (in flight, queued or cancelled)."""
        return [*self._pending.values(), *(t for _, t in self._queue), *(t for t, _ in self._cancelled)]

    def wait(self, timeout_s: float | None = None) -> list[tuple[Any, dict | BaseException]]:
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while self._pending or self._cancelled:
            if self._cancelled:
                out, self._cancelled = self._cancelled, []
                return out
            done = [j for j in self._pending if j.done()]
            if done:
                out = []
                for j in done:
                    tag, staging = self._pending.pop(j), self._staging.pop(j, None)
                    res = self._resources.pop(j, None)
                    try:
                        out.append((tag, j.result()))
                    except Exception as exc:  # noqa: BLE001 - a failed / lost job is recorded as failed
                        # the keys a returned job's records carry (_slurm_job), job_id as before
                        ids = {"job_id": str(j.job_id), "submitit_job_id": str(j.job_id),
                               "slurm_job_id": str(j.job_id) if self.cluster == "slurm" else None, "resources": res}
                        out.append((tag, _lost_job(staging, exc, self.kind, ids)))
                    else:  # its runs came back as bytes (the job removed the directory where it saw it)
                        if staging is not None:
                            shutil.rmtree(staging, ignore_errors=True)
                while self._queue and not self._pending:  # the next queued job, before these are read
                    job, tag = self._queue.pop(0)
                    try:
                        self._start(job, tag)
                    except Exception as exc:  # noqa: BLE001 - recorded as failed; the finished ones still return
                        out.append((tag, exc))
                return out
            if end is not None and time.monotonic() > end:
                return []
            time.sleep(1.0)
        return []

    def cancel_all(self, force: bool = True) -> None:
        for job, tag in self._queue:
            self._cancelled.append((tag, RunError(
                "--executor slurm: interrupted before this job was submitted (the local cluster runs one "
                "job at a time; it was waiting for the one in flight)")))
        self._queue = []
        for j in list(self._pending):
            with contextlib.suppress(Exception):
                if self.cluster == "local":  # SIGTERM to the controller (its job id): it forwards it to
                    os.kill(int(j.job_id), signal.SIGTERM)  # the job, whose records come back
                else:  # scancel: SIGTERM to the job (j.cancel() on the local cluster: SIGINT, then SIGKILL)
                    j.cancel()

    def close(self) -> None:
        if self._pending or self._queue or self._cancelled:
            self.cancel_all()
            end = time.monotonic() + 60
            while (self._pending or self._cancelled) and time.monotonic() < end:
                _drop(self.wait(timeout_s=5))
        _drop_staging(self._staging)  # of jobs that never returned
        sweep_stale_staging()  # of jobs on this host killed before they could remove theirs


def make_executor(kind: str, runs_dir: Path, *, ray_address: str | None = None, platform: str = "cpu",
                  ray_init: dict | None = None, slurm: dict | None = None, concurrent_server_starts: int = 1):
    """``"local"``, ``"ray"`` or ``"slurm"`` (SpecsimValueError otherwise; MissingExtraError without
    ray / submitit).  ``slurm``: keyword arguments of :class:`SlurmExecutor`.
    ``concurrent_server_starts``: :class:`LocalExecutor`'s; a Ray task or Slurm job holds one server
    on its own machine, so there it does not apply."""
    if kind == "local":
        if ray_address:
            raise SpecsimValueError("ray_address", "only with executor 'ray'", ray_address)
        return LocalExecutor(runs_dir, concurrent_server_starts=concurrent_server_starts)
    if kind == "ray":
        return RayExecutor(runs_dir, address=ray_address, platform=platform, init_kwargs=ray_init)
    if kind == "slurm":
        if ray_address:
            raise SpecsimValueError("ray_address", "only with executor 'ray'", ray_address)
        return SlurmExecutor(runs_dir, platform=platform, **(slurm or {}))
    raise SpecsimValueError("executor", "unknown executor", kind, EXECUTORS)

