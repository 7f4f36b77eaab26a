"""Guardian of one child process group (layer 4, runs): run as a script,
``python _guard.py [--detach] STATUS -- CMD...``.

Started by :mod:`specsim.runs.process` as the leader of a new session, it starts ``CMD`` in its own
process group and waits for it.  Its standard input is a pipe whose only writer is the process that
started it: when that process dies -- even by SIGKILL, e.g. a Ray worker ended by
``ray.cancel(force=True)``, or a killed Jupyter kernel -- the pipe reaches end-of-file and the
guardian stops the group itself (SIGINT, then SIGTERM, then SIGKILL, ``SPECSIM_GUARD_GRACE_S``
seconds apart, default 30), so no server outlives the run that started it.  Stop signals sent to the
group by the starter are noted and the guardian keeps waiting for the child.

``STATUS`` (JSON) receives how the child ended: ``returncode`` (negative: the signal that ended it),
``end_signal``, ``signals_received`` (by the guardian, from the starter), ``orphaned`` (the starter
died first), ``signals_sent`` (by the guardian), ``stop_seconds`` (first stop signal to the child's
end) and ``ended`` (UTC); with ``SPECSIM_GUARD_STATUS_COPY=DIR`` a copy goes to ``DIR/guard-<child pid>.json``.
The starter reads and removes ``STATUS``; when the starter died first (``orphaned``) the guardian
removes it itself (nobody else would: it is a temporary file).

``removed_files``: when the starter died first, the guardian also stops the rest of the group (SIGTERM)
and, once all of it has ended (it waits the grace period at most), removes the vLLM rendezvous files that
the child's log named when the starter died (:func:`remove_rendezvous_files`), as the starter would have.
That log is the guardian's standard output where it is a regular file and ``SPECSIM_GUARD_LOG`` (set by
the starter) names it; the paths removed are in ``removed_files``.

``SPECSIM_GUARD_RPC_DIR`` (set by the starter, :class:`specsim.runs.process._Guarded`, with
``VLLM_RPC_BASE_PATH`` naming the same directory) is removed, with what is in it, when the child has ended
or could not be started; the child does not see that variable.  The starter removes it too when it finds
the guardian gone (a group stopped by SIGKILL takes the guardian with it).
Standard library only: it runs under any interpreter.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
            fields = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may contain spaces/parentheses
        rest = fields[fields.rfind(")") + 2:].split()
        if len(rest) >= 3 and int(rest[2]) == pgid and rest[0] != "Z":
            out.append(int(d.name))
    return out


#: the FileStore rendezvous file a vLLM engine names in its log (``distributed_init_method=file://...``): vLLM 0.32
#: makes it ``<tempdir>/vllm_dist_<uuid4 hex>`` (vllm/utils/network_utils.py ``get_file_store_init_method``, used
#: by the uniproc and multiprocessing executors) and leaves it behind when its processes end
_RENDEZVOUS_FILE = re.compile(r"distributed_init_method=file://(/\S*/vllm_dist_[0-9a-f]{32})(?![0-9A-Za-z_])")


def remove_rendezvous_files(log_path: str | os.PathLike) -> list[str]:
    """Remove the FileStore rendezvous files (2.4 KB each) that the vLLM process logging to ``log_path`` named,
    once its processes have ended: only files called ``vllm_dist_<32 hex digits>`` named in that log, so
    another engine's (a server started beside it) is never touched.

    Returns
    -------
    list of str
        The paths removed (none when the log names none, is no regular file or they are gone).  Raises nothing.
    """
    return _remove(_named_in(log_path))


def _named_in(path: str | os.PathLike, limit: int | None = None) -> list[str]:
    """The rendezvous files (:data:`_RENDEZVOUS_FILE`) the regular file ``path`` names in its first ``limit``
    bytes (all: None), each once; none where it is no regular file (a pipe or a terminal would block the read)
    or cannot be read."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return []
        with open(path, "rb") as f:
            text = f.read(-1 if limit is None else limit).decode(errors="replace")
    except OSError:
        return []
    return list(dict.fromkeys(_RENDEZVOUS_FILE.findall(text)))


def _own_log(log_path: str | None) -> tuple[str, int] | None:
    """Where the child's log -- this process's standard output, which the child writes too -- can be read, and
    its size now: ``/proc/self/fd/1`` (Linux; readable after its name is gone, as when a killed Ray worker's
    staging directory was removed), else ``log_path`` where it is that same file.  None where the starter named
    no log or standard output is no regular file."""
    if log_path is None:
        return None
    try:
        out = os.fstat(1)
    except OSError:
        return None
    if not stat.S_ISREG(out.st_mode):
        return None
    for src in ("/proc/self/fd/1", log_path):
        try:
            st = os.stat(src)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino):
            return src, out.st_size
    return None


def _remove(paths: list[str]) -> list[str]:
    removed = []
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)
            removed.append(path)
    return removed


def main(argv: list[str]) -> int:
    status_path, sep, cmd = argv[0], argv[1], argv[2:]
    if sep != "--" or not cmd:
        print("usage: _guard.py STATUS -- CMD...", file=sys.stderr)
        return 2
    grace = float(os.environ.get("SPECSIM_GUARD_GRACE_S", "30"))
    received: list[str] = []
    first_stop: list[float] = []
    sent: list[str] = []
    orphaned = threading.Event()
    own_log: list[tuple[str, int] | None] = []  # where the child's log is read, and how much (when orphaned)

    def on_signal(signum, _frame):
        received.append(signal.Signals(signum).name)
        if not first_stop:
            first_stop.append(time.monotonic())

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    rpc_dir = os.environ.pop("SPECSIM_GUARD_RPC_DIR", None)  # the child's IPC sockets: removed with it
    log_path = os.environ.pop("SPECSIM_GUARD_LOG", None)  # the child's log: the rendezvous files it names
    try:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                 preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL)
                                                     for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)])
    except BaseException:
        if rpc_dir is not None:
            shutil.rmtree(rpc_dir, ignore_errors=True)
        raise

    def watch_parent():
        try:
            while sys.stdin.buffer.read(1 << 16):
                pass
        except (OSError, ValueError):
            pass
        if child.poll() is not None:
            return
        # the log's part written until now: what the child's engine named (not what a later writer appends)
        own_log.append(_own_log(log_path))
        orphaned.set()
        if not first_stop:
            first_stop.append(time.monotonic())
        pgid = os.getpgid(0)
        for sig in (signal.SIGINT, signal.SIGTERM):
            sent.append(sig.name)
            try:
                os.killpg(pgid, sig)  # the guardian's own handler just notes it
            except ProcessLookupError:
                return
            end = time.monotonic() + grace
            while time.monotonic() < end:
                if child.poll() is not None:
                    return
                time.sleep(0.1)
        sent.append("SIGKILL")
        child.kill()

    threading.Thread(target=watch_parent, daemon=True).start()
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
    if rpc_dir is not None:  # the child has ended; what is left of its group is being stopped
        shutil.rmtree(rpc_dir, ignore_errors=True)
    end_signal = None
    if rc < 0:
        try:
            end_signal = signal.Signals(-rc).name
        except ValueError:
            end_signal = str(-rc)
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child and the descendants it waited for
    stop_seconds = round(time.monotonic() - first_stop[0], 3) if first_stop else None
    removed: list[str] = []
    if orphaned.is_set():
        # nobody waits for the rest of the group: end what the child left behind and, once it has ended (at most
        # the grace period later; not while any of it runs), the rendezvous files the log named when the starter
        # died, which the starter would have removed
        pgid = os.getpgid(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        end = time.monotonic() + grace
        while (left := set(_group_members(pgid)) - {os.getpid()}) and time.monotonic() < end:
            time.sleep(0.1)
        if not left and own_log and own_log[0] is not None:
            removed = _remove(_named_in(*own_log[0]))
    status = {"cmd": cmd[:3], "child_pid": child.pid, "returncode": rc, "end_signal": end_signal,
              "child_cpu_seconds": round(ru.ru_utime + ru.ru_stime, 3), "signals_received": received,
              "orphaned": orphaned.is_set(), "signals_sent": sent, "stop_seconds": stop_seconds, "ended": _now(),
              "removed_files": removed}
    tmp = status_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(status, f)
    os.replace(tmp, status_path)
    copy_dir = os.environ.get("SPECSIM_GUARD_STATUS_COPY")
    if copy_dir:  # diagnostics / tests: keep a copy the starter does not consume (written atomically)
        copy = os.path.join(copy_dir, f"guard-{child.pid}.json")
        with open(copy + ".tmp", "w") as f:
            json.dump(status, f)
        os.replace(copy + ".tmp", copy)
    if orphaned.is_set():
        # the starter is gone: nobody will read (and remove) the status file; the copy above is kept
        try:
            os.unlink(status_path)
        except OSError:
            pass
    return 128 - rc if rc < 0 else rc


def detach(argv: list[str]) -> int:
    """``--detach STATUS -- CMD``: fork; the child is the guardian, the parent writes its pid to
    ``STATUS.pid`` and exits.  The guardian's parent is then init (or a subreaper), not the process
    that started it: a Ray worker kills its direct children when it is force-cancelled
    (``kill_child_processes_on_worker_exit``), which would take the guardian with it."""
    pid = os.fork()
    if pid == 0:
        return main(argv)
    tmp = argv[0] + ".pid.tmp"
    with open(tmp, "w") as f:
        f.write(str(pid))
    os.replace(tmp, argv[0] + ".pid")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    code = detach(args[1:]) if args[:1] == ["--detach"] else main(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # not sys.exit: the parent-watching thread may still be reading stdin
