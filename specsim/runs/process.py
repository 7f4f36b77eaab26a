"""Process handling for real vLLM runs (layer 4, runs): start a server in its own process group,
poll ``/health``, ALWAYS stop the whole group (SIGINT, then SIGKILL after a grace period), run a
finite command the same way, and account the CPU time a group used.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from specsim.errors import RunError
from specsim.runs._guard import _group_members, remove_rendezvous_files

# --------------------------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------------------------

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (bind to port 0 and release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]




#: signals a child gets back at their default disposition, unblocked (see :func:`_reset_child_signals`)
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _reset_child_signals() -> None:
    """``preexec_fn`` of every child: unblock all signals and restore the default handlers of the stop
    signals.  A blocked mask and an ignored disposition survive ``exec`` (POSIX ``execve``): children of
    a Ray worker or a Jupyter kernel, which block / ignore SIGINT, would otherwise ignore the SIGINT of
    :func:`_kill_group` and end only by SIGKILL after the grace period."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for s in _STOP_SIGNALS:
        signal.signal(s, signal.SIG_DFL)


def _log_file(stdout) -> str | None:
    """The absolute path of ``stdout`` where it is a regular file opened by name (a server's log), else None (a
    pipe, a terminal, ``/dev/null``, ``subprocess.DEVNULL``): only such a file is read for the rendezvous files
    it names (a read of a pipe or a terminal would block, or take what another reader waits for)."""
    name = getattr(stdout, "name", None)
    try:
        regular = isinstance(name, str) and stat.S_ISREG(os.fstat(stdout.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return None
    return os.path.abspath(name) if regular else None


#: the guardian script every child is started under (:mod:`specsim.runs._guard`)
GUARD = Path(__file__).resolve().parent / "_guard.py"


class _Guarded:
    """A ``Popen``-like handle of a detached guardian (:mod:`specsim.runs._guard` ``--detach``).

    The guardian is not a child of this process (its parent is init): ``pid`` is its process group
    id (the launcher's pid), ``guardian_pid`` its own.  ``poll`` / ``wait`` watch the guardian;
    ``returncode`` is the guarded command's, from the guardian's status file, or -9 when the group
    was killed before the guardian could write it."""

    def __init__(self, cmd: Sequence[str], *, stdout, env: dict[str, str] | None, cwd):
        fd, status = tempfile.mkstemp(prefix="specsim-guard-", suffix=".json")
        os.close(fd)
        os.unlink(status)
        self.status_path = Path(status)
        self.rpc_dir = None
        r, self._w = os.pipe()  # the guardian's stdin: end-of-file when this process dies
        try:
            self.rpc_dir, env = _rpc_dir(env)
            log_path = _log_file(stdout)  # the file its output goes to (vLLM's log)
            if log_path is not None:  # the guardian removes the rendezvous files it names, if this process dies
                env = {**(os.environ if env is None else env), "SPECSIM_GUARD_LOG": log_path}
            launcher = subprocess.Popen([sys.executable, str(GUARD), "--detach", status, "--", *[str(c) for c in cmd]],
                                        stdin=r, stdout=stdout, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                        start_new_session=True, preexec_fn=_reset_child_signals)
        except BaseException:
            os.close(self._w)
            self._remove_rpc_dir()
            raise
        finally:
            os.close(r)
        self.pid = launcher.pid  # the session and process group the guardian and its child live in
        launcher.wait()
        pidfile = Path(status + ".pid")
        try:
            self.guardian_pid = int(pidfile.read_text())
            pidfile.unlink()
        except (OSError, ValueError) as exc:
            os.close(self._w)
            self._remove_rpc_dir()
            raise OSError(f"the guardian did not start (launcher exit {launcher.returncode})") from exc
        self.returncode: int | None = None
        self.signals_sent: list[str] = []
        self._log_path = log_path
        #: vLLM's rendezvous files its log named, removed at :meth:`close` (:func:`remove_rendezvous_files`)
        self.removed_files: list[str] = []

    def _remove_rpc_dir(self) -> None:
        """Remove the child's IPC socket directory (:func:`_rpc_dir`), once the guardian is gone: it removes
        it itself when the child ends, but not when SIGKILL took the group, itself included."""
        if self.rpc_dir is not None:
            shutil.rmtree(self.rpc_dir, ignore_errors=True)
            self.rpc_dir = None

    def _status(self) -> dict | None:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if _alive(self.guardian_pid):
            return None
        st = self._status()
        self.returncode = st["returncode"] if st is not None else -signal.SIGKILL
        self._remove_rpc_dir()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired("guardian", timeout)
            time.sleep(0.05)
        return self.returncode

    def close(self) -> None:
        """Close the parent-death pipe (idempotent); where every process of the group has ended, remove the
        rendezvous files its log names (:func:`remove_rendezvous_files`: nothing uses them any more)."""
        if self._w is not None:
            with contextlib.suppress(OSError):
                os.close(self._w)
            self._w = None
        if isinstance(self._log_path, str) and not _group_members(self.pid):
            self.removed_files += remove_rendezvous_files(self._log_path)


#: the longest path of a Unix socket on every platform vLLM binds them on (``sun_path``: 108 bytes on Linux,
#: 104 on macOS and the BSDs, each with its terminating NUL)
_MAX_SOCKET_PATH = 103
#: what vLLM 0.32 adds to ``VLLM_RPC_BASE_PATH`` for a socket: ``/`` and a uuid4 (``get_open_zmq_ipc_path``,
#: vllm/utils/network_utils.py)
_RPC_SOCKET_NAME_CHARS = 1 + 36


def _rpc_dir(env: dict[str, str] | None) -> tuple[str | None, dict[str, str] | None]:
    """A directory of its own for a guarded child's vLLM IPC sockets, and the child's environment naming it.

    vLLM 0.32 binds its ZMQ IPC sockets in ``VLLM_RPC_BASE_PATH`` (default: the temporary directory itself;
    vllm/envs.py, vllm/utils/network_utils.py ``get_open_zmq_ipc_path``) and leaves them there, about seven
    per server start.  Unless ``env`` (default ``os.environ``) sets ``VLLM_RPC_BASE_PATH``, the child gets
    a new directory in its temporary directory (``TMPDIR``) for them (``VLLM_RPC_BASE_PATH``, and
    ``SPECSIM_GUARD_RPC_DIR`` for the guardian, which removes it when the child has ended); none where its
    sockets' paths would be longer than :data:`_MAX_SOCKET_PATH` (vLLM's own default is then kept).  ``TMPDIR``
    itself is left as it is: vLLM keeps the locks of concurrent hub downloads there
    (vllm/model_executor/model_loader/weight_utils.py), which servers started together share.

    Returns
    -------
    (str or None, dict or None)
        The directory (None: none made) and the environment to start the guardian with (``env`` when none).
    """
    base = os.environ if env is None else env
    if "VLLM_RPC_BASE_PATH" in base:
        return None, env
    try:  # in the child's temporary directory
        d = tempfile.mkdtemp(prefix="specsim-rpc-", dir=base.get("TMPDIR") or None)
    except OSError:
        d = tempfile.mkdtemp(prefix="specsim-rpc-")
    if len(d.encode()) + _RPC_SOCKET_NAME_CHARS > _MAX_SOCKET_PATH:
        os.rmdir(d)
        return None, env
    return d, {**base, "VLLM_RPC_BASE_PATH": d, "SPECSIM_GUARD_RPC_DIR": d}


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return fields[fields.rfind(")") + 2] != "Z"


def _guarded_popen(cmd: Sequence[str], *, stdout, env: dict[str, str] | None, cwd) -> tuple["_Guarded", Path]:
    """Start ``cmd`` under a detached guardian (:mod:`specsim.runs._guard`) in a new session.

    The guardian's stdin is a pipe held only by this process: if this process dies (even by SIGKILL:
    a force-cancelled Ray task, a killed kernel) the guardian stops the group itself; detached, it
    also survives a Ray worker killing its direct children.  Returns the handle (its ``pid`` is the
    process group id) and the path of the guardian's exit-status JSON."""
    g = _Guarded(cmd, stdout=stdout, env=env, cwd=cwd)
    return g, g.status_path


def _guard_status(path: Path | None) -> dict | None:
    """The guardian's record of how its child ended (None if it was killed before writing it)."""
    if path is None:
        return None
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    with contextlib.suppress(OSError):
        path.unlink()
    return d


def _close_pipe(proc) -> None:
    close = getattr(proc, "close", None)
    if close is not None:
        close()


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
    getattr(proc, "signals_sent", []).append("SIGKILL")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc.returncode


def _tail(path: Path, n_chars: int = 3000) -> str:
    """The last lines of a log, at most ``n_chars`` characters of it from the start of a line (a line
    longer than that: its end); "" where it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n_chars))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    if size > n_chars and "\n" in text[:-1]:  # the first line is cut: from the next
        text = text[text.index("\n") + 1:]
    return text


#: a Python exception's line in a log (``ValueError: ...``, ``pkg.mod.ValidationError: ...``), also behind
#: vLLM's process prefix (``(EngineCore pid=123) ``)
_EXCEPTION_LINE = re.compile(r"(?:\(\w+ pid=\d+\) )?((?:\w+\.)*\w*(?:Error|Exception|Exit|Interrupt)(?:: .*)?)")


def _causes(log_tail: str, n_chars: int = 600) -> str:
    """The exception lines of a log's tail (``_EXCEPTION_LINE``), in order, each with the indented lines
    that continue it (pydantic's validation errors give their reason there), joined by " | "; at most ``n_chars``
    characters (the last ones), "" where there is none.  What a refused start says first: vLLM ends its
    log with the traceback, the reason in the last line or two."""
    lines = log_tail.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        mt = _EXCEPTION_LINE.fullmatch(line.rstrip())
        if not mt:
            continue
        more = []
        for x in lines[i + 1:i + 3]:  # the indented lines right after it
            if not x.startswith(" "):
                break
            if not x.strip().startswith(("File ", "For further information")):
                more.append(x.strip())
        cause = " ".join([mt.group(1), *more])
        if cause not in out:
            out.append(cause)
    text = " | ".join(out)
    return text if len(text) <= n_chars else "..." + text[-n_chars:]


def _log_excerpt(log_path: str | os.PathLike) -> str:
    """``": <causes>; log <path> (its last lines):\n<tail>"`` (:func:`_causes`, :func:`_tail`), or
    ``"; log <path>:\n<tail>"`` where the tail holds no exception."""
    tail = _tail(Path(log_path))
    cause = _causes(tail)
    return f": {cause}; log {log_path} (its last lines):\n{tail}" if cause else f"; log {log_path}:\n{tail}"




_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _system_cpu_seconds(stat_path: str = "/proc/stat") -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine since boot (``/proc/stat``; None elsewhere).

    ``busy`` is every state but idle and iowait, steal included (user nice system irq softirq steal);
    ``steal`` is the time the hypervisor ran something else while this VM wanted the CPU (field 8 of
    the ``cpu`` line, ``man 5 proc``): contention from outside the machine, invisible to ``/proc/<pid>``.
    """
    try:
        f = Path(stat_path).read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    v = [int(x) for x in f]
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    steal = v[7] if len(v) > 7 else 0
    return (sum(v[:8]) - idle) / _CLK_TCK, steal / _CLK_TCK


def _group_cpu_seconds(pgid: int) -> float:
    """user+system CPU seconds of the live members of process group ``pgid`` (``/proc``)."""
    tot = 0
    for pid in _group_members(pgid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text()
            rest = fields[fields.rfind(")") + 2:].split()
            tot += int(rest[11]) + int(rest[12])  # utime, stime (fields 14, 15)
    return tot / _CLK_TCK


class CpuAccount:
    """CPU time used by other processes while a run was measured (interference on a shared host).

    ``other = system busy - server group - waited-for children (the bench) - this process``, all
    in CPU seconds over the same wall interval; ``other_fraction`` divides by wall x logical CPUs.
    System busy counts the hypervisor's steal time, so ``other`` holds it too (as in every run
    recorded before the split); ``steal_cpu_seconds`` / ``steal_fraction`` give that part on its own
    (CPU the VM wanted but the host gave to another guest), so ``other_fraction - steal_fraction`` is
    what other processes inside this machine used.
    """

    def __init__(self, server_pgid: int | None, client_pgid: int | None = None):
        self.pgid = server_pgid
        #: process group of a persistent bench client (its CPU counts as the bench's, not as other's)
        self.client = client_pgid

    def __enter__(self) -> "CpuAccount":
        import resource

        self._t = time.monotonic()
        self._sys = _system_cpu_seconds()
        self._srv = _group_cpu_seconds(self.pgid) if self.pgid else 0.0
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._ch = ru.ru_utime + ru.ru_stime
        self._cl = _group_cpu_seconds(self.client) if self.client else 0.0
        t = os.times()
        self._self = t.user + t.system
        return self

    def __exit__(self, *exc) -> bool:
        import resource

        wall = time.monotonic() - self._t
        sys_b = _system_cpu_seconds()
        srv = (_group_cpu_seconds(self.pgid) if self.pgid else 0.0) - self._srv
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        ch = ru.ru_utime + ru.ru_stime - self._ch
        if self.client:
            ch += _group_cpu_seconds(self.client) - self._cl
        t = os.times()
        me = t.user + t.system - self._self
        self.result = {"wall_seconds": round(wall, 3), "server_cpu_seconds": round(srv, 3),
                       "bench_cpu_seconds": round(ch, 3), "runner_cpu_seconds": round(me, 3)}
        if sys_b is not None and self._sys is not None:
            busy = sys_b[0] - self._sys[0]
            steal = max(0.0, sys_b[1] - self._sys[1])
            other = max(0.0, busy - srv - ch - me)
            cap = wall * (os.cpu_count() or 1)
            self.result.update(system_busy_cpu_seconds=round(busy, 3), other_cpu_seconds=round(other, 3),
                               other_fraction=round(other / cap, 4) if wall > 0 else None,
                               steal_cpu_seconds=round(steal, 3),
                               steal_fraction=round(steal / cap, 4) if wall > 0 else None)
        return False

    def attribute(self, cpu_seconds: float | None) -> None:
        """Count ``cpu_seconds`` (the measured job's own CPU, e.g. an offline worker under a detached
        guardian, invisible to ``RUSAGE_CHILDREN`` here) as the job's, not as other processes'."""
        r = getattr(self, "result", None)
        if not r or not cpu_seconds:
            return
        r["bench_cpu_seconds"] = round(r["bench_cpu_seconds"] + cpu_seconds, 3)
        if r.get("other_cpu_seconds") is not None:
            other = max(0.0, r["other_cpu_seconds"] - cpu_seconds)
            r["other_cpu_seconds"] = round(other, 3)
            wall = r["wall_seconds"]
            r["other_fraction"] = round(other / (wall * (os.cpu_count() or 1)), 4) if wall > 0 else None


class deferred_interrupts:
    """While the block runs (in the main thread), SIGINT and SIGTERM -- each where a Python handler is
    installed for it (Python's own Ctrl-C handler, :func:`stop_signals_as_interrupt`,
    a Ray worker's SIGTERM handler) -- are noted instead of handled, so that stopping a process tree and
    recording how it ended is not cut short by a second Ctrl-C.

    On exit the handlers are restored and the first noted signal is handed to its handler (a
    KeyboardInterrupt, usually) -- unless a KeyboardInterrupt already leaves the block or was already
    propagating when the block was entered (a ``finally:`` / ``except KeyboardInterrupt:`` clean-up: the
    stop it asked for is under way, and a second one must not replace the exception on its way out,
    e.g. :class:`~specsim.runs.runner.MatrixInterrupted`), or ``redeliver`` is False.  The handlers are
    swapped with both signals blocked (``signal.pthread_sigmask``), SIGINT's last on the way out, so a
    signal during the swap cannot leave a handler of this object installed.

    Parameters
    ----------
    redeliver : bool
        Hand a noted signal to its handler on exit (default); False: only note it (``.got``), for a
        clean-up after which nothing is left to stop.

    Attributes
    ----------
    got : list of str
        The names of the signals noted (``"SIGINT"``, ``"SIGTERM"``).

    Outside the main thread, or nested in another (the outer one notes): nothing is installed.
    """

    _active = threading.local()
    _SIGNALS = (signal.SIGTERM, signal.SIGINT)  # restored in this order: SIGINT's last

    def __init__(self, redeliver: bool = True):
        self.got: list[str] = []
        self._saved: dict = {}
        self._redeliver = redeliver
        self._interrupting = False

    def _note(self, signum, _frame) -> None:
        self.got.append(signal.Signals(signum).name)

    @classmethod
    def _block(cls):
        try:
            return signal.pthread_sigmask(signal.SIG_BLOCK, set(cls._SIGNALS))
        except (AttributeError, OSError, ValueError):  # pragma: no cover - no pthread_sigmask (Windows)
            return None

    @staticmethod
    def _unblock(old) -> None:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def __enter__(self) -> "deferred_interrupts":
        self._interrupting = isinstance(sys.exc_info()[1], KeyboardInterrupt)
        if threading.current_thread() is not threading.main_thread() or getattr(self._active, "on", False):
            return self
        old = self._block()
        try:
            for sig in self._SIGNALS:
                if callable(signal.getsignal(sig)):
                    with contextlib.suppress(ValueError, OSError):
                        self._saved[sig] = signal.signal(sig, self._note)
            self._active.on = bool(self._saved)
        finally:
            self._unblock(old)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self._saved:
            return False
        old = self._block()
        try:
            for sig in self._SIGNALS:
                if sig == signal.SIGINT:
                    self._active.on = False
                if sig in self._saved:
                    with contextlib.suppress(ValueError, OSError):
                        signal.signal(sig, self._saved[sig])
        finally:
            self._active.on = False
            self._unblock(old)
        leaving = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        if self.got and self._redeliver and not leaving and not self._interrupting:
            sig = getattr(signal, self.got[0])
            self._saved[sig](sig, None)  # raises (KeyboardInterrupt) where the handler does
        return False


_watch = threading.local()


@contextlib.contextmanager
def watch_servers():
    """Collect every :class:`Server` started in this thread while the block runs (a list, in start
    order): how a server ended is then known also when the code that started it was interrupted
    before it could report it (a KeyboardInterrupt while the server was starting)."""
    prev = getattr(_watch, "servers", None)
    _watch.servers = started = []
    try:
        yield started
    finally:
        _watch.servers = prev


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
        self.proc: "_Guarded | None" = None
        self.startup_seconds: float | None = None
        #: seconds from launch to the failure that ended the start (the process exited, or
        #: ``health_timeout_s`` passed); None unless :meth:`check_ready` raised
        self.start_failed_after_seconds: float | None = None
        self.returncode: int | None = None
        #: seconds the last stop took (SIGINT to the group's end); None before a stop
        self.stop_seconds: float | None = None
        #: how the server process itself ended, from its guardian (:mod:`specsim.runs._guard`); None
        #: when the group had to be killed (SIGKILL) before the guardian could write it
        self.exit_status: dict | None = None
        #: signals this object sent to the group when stopping it, in order
        self.signals_sent: list[str] = []
        self._status: Path | None = None
        self._log = None
        self._t0 = 0.0

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

    def launch(self) -> "Server":
        """Start the process group and return at once (:meth:`check_ready` then polls ``/health``).

        Raises
        ------
        RunError
            Already started, or the command cannot be executed.
        """
        if self.proc is not None:
            raise RunError("server already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)
        self._t0 = time.monotonic()
        watching = getattr(_watch, "servers", None)
        if watching is not None:
            watching.append(self)
        try:
            self.proc, self._status = _guarded_popen(self.cmd, stdout=self._log, env=self.env, cwd=self.cwd)
            self.proc.signals_sent = self.signals_sent  # _kill_group notes its SIGKILL here
        except OSError as e:
            self._log.close()
            raise RunError(f"cannot start server {self.cmd[0]!r}: {e}") from e
        return self

    def check_ready(self) -> bool:
        """One poll of a launched server: True once ``GET /health`` answers 200 (``startup_seconds``
        is then set), False while it is starting.

        Raises
        ------
        RunError
            The process exited before ``/health`` answered, or ``health_timeout_s`` passed since
            :meth:`launch` (the message names the log and quotes its tail).  The group is not stopped
            here: :meth:`start` and :func:`start_together` stop it.
        """
        if self.startup_seconds is not None:
            return True
        if self.proc is None:
            raise RunError("server not launched")
        if self.proc.poll() is not None:
            st = _guard_status(self._status) or {}
            self.start_failed_after_seconds = time.monotonic() - self._t0
            raise RunError(
                f"server exited with code {st.get('returncode', self.proc.returncode)} before /health answered "
                f"(after {self.start_failed_after_seconds:.1f} s){_log_excerpt(self.log_path)}")
        if self._healthy():
            self.startup_seconds = time.monotonic() - self._t0
            return True
        if time.monotonic() - self._t0 > self.health_timeout_s:
            self.start_failed_after_seconds = time.monotonic() - self._t0
            raise RunError(
                f"server not healthy within {self.health_timeout_s:g} s at {self.url}/health"
                f"{_log_excerpt(self.log_path)}")
        return False

    def start(self) -> "Server":
        """:meth:`launch`, then poll until healthy (``startup_seconds``: launch to the first 200)."""
        self.launch()
        try:
            while not self.check_ready():
                time.sleep(self.poll_interval_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> int | None:
        """Stop the process group (idempotent); returns the exit code of the server process."""
        if self.proc is None:
            return None
        with deferred_interrupts():  # a second Ctrl-C must not cut the stop (and its record) short
            return self._stop()

    def _stop(self) -> int | None:
        t0 = time.monotonic()
        try:
            if self.proc.poll() is None:
                self.signals_sent.append("SIGINT")
            rc = _kill_group(self.proc, self.stop_timeout_s)
            st = _guard_status(self._status)
            if st is not None:
                self.exit_status = st
                self.returncode = st["returncode"]
            elif self.exit_status is None:
                self.returncode = rc
        finally:
            if self.stop_seconds is None:
                self.stop_seconds = time.monotonic() - t0
            _close_pipe(self.proc)
            if self._log is not None and not self._log.closed:
                self._log.close()
        return self.returncode

    @property
    def removed_files(self) -> list[str]:
        """vLLM's rendezvous files its log named, removed once its group had ended (:meth:`_Guarded.close`)."""
        return list(getattr(self.proc, "removed_files", []))

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False


def start_together(servers: Sequence[Server]) -> list[RunError | None]:
    """Start several servers at once and return when every one is healthy or has failed.

    Their start-ups overlap (on a CPU host most of a vLLM start is single-threaded imports, so two
    starts on two cores take less wall time than one after the other), and nothing else runs until
    all are done, so no start overlaps a benchmark.

    Parameters
    ----------
    servers : sequence of Server
        Not yet started.

    Returns
    -------
    list
        Per server, in order: None (healthy; ``startup_seconds`` is launch to healthy, under the
        others' starts) or the RunError that ended its start (that server's group is stopped).

    Raises
    ------
    KeyboardInterrupt
        After stopping every server of ``servers`` (also the healthy ones).
    """
    errors: list[RunError | None] = [None] * len(servers)
    try:
        for i, srv in enumerate(servers):
            try:
                srv.launch()
            except RunError as e:
                errors[i] = e
        waiting = [i for i in range(len(servers)) if errors[i] is None]
        while waiting:
            for i in list(waiting):
                try:
                    if servers[i].check_ready():
                        waiting.remove(i)
                except RunError as e:
                    errors[i] = e
                    waiting.remove(i)
                    servers[i].stop()
            if waiting:
                time.sleep(min(servers[i].poll_interval_s for i in waiting))
    except BaseException:
        stop_all(servers)
        raise
    return errors


def stop_all(servers: Sequence[Server]) -> None:
    """:meth:`Server.stop` each server, every one even if a stop is interrupted (a second Ctrl-C);
    the first exception is raised after all were tried."""
    first: BaseException | None = None
    for srv in servers:
        try:
            srv.stop()
        except BaseException as e:  # noqa: BLE001 - re-raised below, after the others are stopped
            first = first or e
    if first is not None:
        raise first


def command_name(cmd: Sequence[str]) -> str:
    """The name an error gives a command: its program's file name and the subcommands that follow it,
    up to the first option (``vllm bench serve`` for ``[.../bin/vllm, "bench", "serve", "--seed", ...]``;
    ``vllm`` alone said neither which vllm command nor that it was not the server).

    Parameters
    ----------
    cmd : sequence of str
        The command line.

    Returns
    -------
    str
        The program and at most two subcommands.
    """
    words = [Path(str(cmd[0])).name]
    for w in map(str, cmd[1:3]):
        if w.startswith("-") or "/" in w or "=" in w:
            break
        words.append(w)
    return " ".join(words)


def run_command(cmd: Sequence[str], *, log_path: str | os.PathLike, env: dict[str, str] | None = None,
                cwd: str | os.PathLike | None = None, timeout_s: float | None = None,
                stop_timeout_s: float = 15.0, usage: dict | None = None) -> float:
    """Run a finite command in its own process group, output to ``log_path``.

    ``usage``, when given, receives ``cpu_seconds``: the CPU time of the command and the descendants
    it waited for (the guardian's ``RUSAGE_CHILDREN``; None when the guardian recorded none).  The
    command runs under a detached guardian, so this CPU is not this process's child time.

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
        if not Path(str(cmd[0])).exists() and not shutil.which(str(cmd[0])):
            raise RunError(f"cannot start {cmd[0]!r}: no such file or command")
        try:
            proc, status = _guarded_popen(cmd, stdout=log, env=env, cwd=cwd)
        except OSError as e:
            raise RunError(f"cannot start {cmd[0]!r}: {e}") from e
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc, stop_timeout_s)
            _close_pipe(proc)
            _guard_status(status)
            raise RunError(f"{command_name(cmd)} timed out after {timeout_s:g} s; log {log_path}:\n"
                           f"{_tail(log_path)}") from None
        except BaseException:
            with deferred_interrupts():  # a second Ctrl-C does not leave the group running
                _kill_group(proc, stop_timeout_s)
                _close_pipe(proc)
                _guard_status(status)
            raise
        # the leader is done; make sure nothing it started lingers in the group
        if _group_members(proc.pid):
            _kill_group(proc, stop_timeout_s)
        _close_pipe(proc)
        st = _guard_status(status)
        rc = st["returncode"] if st is not None else proc.returncode
        if usage is not None:
            usage["cpu_seconds"] = st.get("child_cpu_seconds") if st is not None else None
    if rc != 0:
        raise RunError(f"{command_name(cmd)} exited with code {rc}{_log_excerpt(log_path)}")
    return time.monotonic() - t0


BENCH_WORKER = Path(__file__).resolve().parent / "_bench_worker.py"


class BenchClient:
    """One persistent ``vllm bench serve`` process (:mod:`specsim.runs._bench_worker`) for many benches.

    ``run(cmd, ...)`` takes the same command as :func:`run_command` (``<venv>/bin/vllm bench serve
    ARGS``) and runs ``ARGS`` through vLLM's own benchmark ``main`` in the worker, started on first
    use by the interpreter beside ``vllm`` under a guardian.  A timeout or a dead worker stops its
    group (the next run starts a new one).  ``pgid`` is the worker's process group (for CPU
    accounting); :meth:`close` ends it.
    """

    def __init__(self, *, env: dict[str, str] | None = None, start_timeout_s: float = 300.0,
                 stop_timeout_s: float = 15.0):
        self.env = env
        self.start_timeout_s = float(start_timeout_s)
        self.stop_timeout_s = float(stop_timeout_s)
        self.proc: _Guarded | None = None
        self.dir: Path | None = None
        self.n = 0
        self.python: Path | None = None
        #: seconds the worker took to start (import vLLM), per start
        self.start_seconds: list[float] = []

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def _start(self, python: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="specsim-bench-"))
        self.n = 0
        t0 = time.monotonic()
        with open(self.dir / "worker.log", "ab", buffering=0) as log:
            self.proc = _Guarded([str(python), str(BENCH_WORKER), str(self.dir)], stdout=log, env=self.env, cwd=None)
        while not (self.dir / "ready").exists():
            if self.proc.poll() is not None:
                raise RunError(f"bench worker exited with code {self.proc.returncode} while starting; log "
                               f"{self.dir / 'worker.log'}:\n{_tail(self.dir / 'worker.log')}")
            if time.monotonic() - t0 > self.start_timeout_s:
                self.close()
                raise RunError(f"bench worker not ready within {self.start_timeout_s:g} s")
            time.sleep(0.05)
        self.start_seconds.append(time.monotonic() - t0)

    def ensure(self, cmd: Sequence[str]) -> float | None:
        """Start the worker for ``cmd``'s vLLM environment unless it runs; returns the seconds a start
        took (None when it was running)."""
        cmd = [str(c) for c in cmd]
        if cmd[1:3] != ["bench", "serve"]:
            raise RunError(f"the bench worker runs `vllm bench serve` only, not {cmd[:3]}")
        python = Path(cmd[0]).parent / "python"
        if self.proc is not None and self.proc.poll() is None and python == self.python:
            return None
        self.close()
        self.python = python
        self._start(python)
        return self.start_seconds[-1]

    def run(self, cmd: Sequence[str], *, log_path: str | os.PathLike, timeout_s: float | None = None) -> float:
        """Run one ``vllm bench serve`` command in the worker; returns its wall time in seconds.

        Raises RunError on a non-zero exit, a timeout (the worker is stopped) or a dead worker."""
        cmd = [str(c) for c in cmd]
        self.ensure(cmd)
        assert self.dir is not None and self.proc is not None
        n, self.n = self.n, self.n + 1
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f"req-{n}.tmp"
        tmp.write_text(json.dumps({"argv": cmd[3:], "log": str(log_path)}))
        os.replace(tmp, self.dir / f"req-{n}.json")
        rep_path = self.dir / f"rep-{n}.json"
        t0 = time.monotonic()
        try:
            while not rep_path.exists():
                if self.proc.poll() is not None:
                    raise RunError(f"bench worker died (code {self.proc.returncode}); log {log_path}:\n{_tail(Path(log_path))}")
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    self.close()
                    raise RunError(f"vllm bench serve timed out after {timeout_s:g} s; log {log_path}:\n"
                                   f"{_tail(Path(log_path))}")
                time.sleep(0.05)
        except BaseException:
            if not rep_path.exists():
                self.close()
            raise
        rep = json.loads(rep_path.read_text())
        if rep["rc"] != 0:
            raise RunError(f"vllm bench serve exited with code {rep['rc']}"
                           f"{': ' + rep['error'] if rep.get('error') else ''}; log {log_path}:\n{_tail(Path(log_path))}")
        return float(rep["seconds"])

    def close(self) -> None:
        """Stop the worker (asks it to stop, then the group's SIGINT / SIGKILL); idempotent; not cut
        short by a second Ctrl-C (:class:`deferred_interrupts`)."""
        with deferred_interrupts():
            self._close()

    def _close(self) -> None:
        if self.proc is not None:
            if self.dir is not None:
                with contextlib.suppress(OSError):
                    (self.dir / "stop").write_text("")
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=5)
            _kill_group(self.proc, self.stop_timeout_s)
            self.proc.close()
            _guard_status(self.proc.status_path)
            self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> "BenchClient":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


# stops: Ctrl-C, SIGTERM (used by the matrix runner, the CLI and the Slurm job)

class StopSignal(KeyboardInterrupt):
    """A stop signal (SIGTERM: ``timeout``, ``scancel``, ``kill``; SIGINT where the CLI routes Ctrl-C
    through :func:`stop_signals_as_interrupt` too) delivered as a KeyboardInterrupt in the main thread,
    so that it stops a matrix the way Ctrl-C does and the record names it.  ``signal``: its name."""

    def __init__(self, signame: str):
        super().__init__(signame)
        self.signal = signame


#: the signals received by each active :func:`stop_signals_as_interrupt` block, innermost last
_ACTIVE_STOPS: list[list[str]] = []


def stop_signal_received() -> str | None:
    """The name of the stop signal (``"SIGINT"``, ``"SIGTERM"``) the innermost active
    :func:`stop_signals_as_interrupt` block received, or None (none received, or no block active).

    A :class:`StopSignal` raised while a C extension waits may reach the caller as another
    KeyboardInterrupt: Ray's ``ray.wait`` / ``ray.get`` raise a plain ``KeyboardInterrupt()`` in its
    place, so the exception alone no longer names the signal; this does.

    Returns
    -------
    str or None
        The signal's name, or None.
    """
    return _ACTIVE_STOPS[-1][0] if _ACTIVE_STOPS and _ACTIVE_STOPS[-1] else None


@contextlib.contextmanager
def stop_signals_as_interrupt(signals: Sequence[str] = ("SIGTERM",)):
    """While the block runs (in the main thread), the first of ``signals`` raises
    :class:`StopSignal` there -- a KeyboardInterrupt -- so that a matrix stopped by ``timeout`` or
    ``scancel`` records its running cell as failed, stops its servers, writes its manifest and
    removes its staging directory, as on Ctrl-C.  Later ones are ignored while that cleanup runs
    (SIGKILL still ends the process).  With ``"SIGINT"`` among ``signals`` (the CLI), Ctrl-C is one of
    them: the interrupted cell is recorded ``"interrupted (SIGINT)"`` and a second Ctrl-C does not cut
    the stop of its server and its records short.  Outside the main thread: nothing is installed.
    :func:`stop_signal_received` names the signal received, also where a C extension replaced the
    :class:`StopSignal` by a plain KeyboardInterrupt (Ray's ``ray.wait``), while the block runs; after it
    (an ``except`` around the ``with``), the list the block yields does: the names received, first first."""
    import signal as _signal
    import threading

    got: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def handler(signum, _frame):
        name = _signal.Signals(signum).name
        if got:
            print(f"specsim: {name} again: still stopping (recording the interrupted cell, stopping its "
                  "server); SIGKILL ends at once", file=sys.stderr)
            return
        got.append(name)
        raise StopSignal(name)

    saved = {}
    for name in signals:
        sig = getattr(_signal, name)
        saved[sig] = _signal.signal(sig, handler)
    _ACTIVE_STOPS.append(got)
    try:
        yield got
    finally:
        del _ACTIVE_STOPS[max(i for i, g in enumerate(_ACTIVE_STOPS) if g is got)]
        for sig, h in saved.items():
            _signal.signal(sig, h)
