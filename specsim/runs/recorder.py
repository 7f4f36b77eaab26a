"""Atomic, never-overwriting recording of one run (layer 4, runs): written into a temporary directory,
renamed into ``<runs_dir>/<run-id>`` when it ends; an existing run id raises ``RunError``.

Details: ``docs/modules/specsim.runs.recorder.md``.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specsim.errors import RunError, SpecsimValueError
from specsim.runs.provenance import redact_run, utc_now

_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


@dataclass
class RunResult:
    """Outcome of one recorded run: ``status`` is "ok", "invalid", "failed" or "skipped" (not run:
    a judge it depends on failed; ``error`` holds the reason); ``kept``: recorded by an earlier
    invocation and kept by a ``--resume`` (not run now)."""

    run_id: str
    path: Path
    status: str
    error: str | None = None
    summary: dict = field(default_factory=dict)
    kept: bool = False


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
    "invalid" after :meth:`mark_invalid`, "skipped" after :meth:`mark_skipped`, or "failed" with ``error`` when an exception -- including
    KeyboardInterrupt -- left the block, or after :meth:`mark_failed`), load averages before/after, start/end time, and renames
    the directory to ``runs_dir/run_id``.  Before that, a secret the provenance or the environment holds
    (:func:`specsim.runs.provenance.redact_run`: an ``--hf-token`` value, an ``HF_TOKEN``) is replaced by
    ``<redacted>`` in the provenance and in every file of the run.  Exceptions propagate.

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
        self._skipped: str | None = None
        self._failed: str | None = None
        self._t0 = 0.0

    def mark_invalid(self, reason: str) -> None:
        """Record the run as invalid (measured, but not a valid measurement of the method)."""
        self._invalid = reason

    def mark_skipped(self, reason: str) -> None:
        """Record the run as skipped: not run, because a judge it depends on failed (``skip_reason``)."""
        self._skipped = reason

    def mark_failed(self, reason: str) -> None:
        """Record the run as failed with ``reason`` as its error, without raising (a cell whose job
        was lost or interrupted before it recorded anything)."""
        self._failed = reason

    def __enter__(self) -> "RunRecorder":
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        if self.final_path.exists():
            raise RunError(f"run {self.run_id!r} is already recorded at {self.final_path}; "
                           f"recorded runs are never overwritten: choose another run id")
        self.path = Path(tempfile.mkdtemp(prefix=f".tmp-{self.run_id}-", dir=self.runs_dir))
        os.chmod(self.path, 0o755)  # mkdtemp makes it 0700; recorded runs are world-readable data
        self._t0 = time.monotonic()
        self.provenance.setdefault("run_id", self.run_id)
        self.provenance["started"] = utc_now()
        self.provenance["loadavg_before"] = list(os.getloadavg())
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        from specsim.runs.process import deferred_interrupts

        with deferred_interrupts():  # a second Ctrl-C does not leave a half-written .tmp-* behind
            return self._exit(exc_type, exc, tb)

    def _exit(self, exc_type, exc, tb) -> bool:
        assert self.path is not None
        prov = self.provenance
        if exc_type is None and self._failed:
            self.status, self.error = "failed", self._failed
        elif exc_type is None:
            self.status = "skipped" if self._skipped else ("invalid" if self._invalid else "ok")
        else:
            self.status = "failed"
            if issubclass(exc_type, KeyboardInterrupt):  # Ctrl-C, or a stop signal delivered as one
                self.error = f"interrupted ({getattr(exc, 'signal', None) or 'KeyboardInterrupt'})"
            else:
                self.error = f"{exc_type.__name__}: {exc}"
            prov["traceback"] = "".join(traceback.format_exception(exc_type, exc, tb))[-8000:]
        prov["status"] = self.status
        if self._invalid:
            prov["invalid_reason"] = self._invalid
        if self._skipped and self.status == "skipped":
            prov["skip_reason"] = self._skipped
            self.error = self._skipped
        if self.error and not self.final_path.exists():
            # a message naming a file of this run names it where it will be (the temp directory is renamed)
            self.error = self.error.replace(str(self.path), str(self.final_path))
        if self.error:
            prov["error"] = self.error
        prov["ended"] = utc_now()
        prov["duration_seconds"] = round(time.monotonic() - self._t0, 3)
        prov["loadavg_after"] = list(os.getloadavg())
        # a token given in a command, a record or an environment is recorded as <redacted>, here and in the
        # run's files
        prov = self.provenance = redact_run(self.path, prov)
        if self.error:
            self.error = prov.get("error", self.error)
        write_json(self.path / "provenance.json", prov)
        if self.final_path.exists():
            raise RunError(f"run {self.run_id!r} appeared at {self.final_path} while running; "
                           f"this run is left in {self.path}")
        os.rename(self.path, self.final_path)
        self.path = self.final_path
        return False
