"""Offline ``vllm.LLM`` jobs run in the vLLM environment's interpreter (layer 4, runs): the worker
script ``_offline_worker.py`` writes its result JSON, recorded as a run.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from specsim.runs.process import CpuAccount, run_command
from specsim.runs.provenance import VllmInstall, vllm_env
from specsim.runs.recorder import RunRecorder, RunResult, write_json

# --------------------------------------------------------------------------------------------
# offline runs
# --------------------------------------------------------------------------------------------

WORKER = Path(__file__).resolve().parent / "_offline_worker.py"


def run_offline(job: dict, *, run_id: str, runs_dir: str | os.PathLike, install: VllmInstall | None = None,
                env: dict[str, str] | None = None, provenance: dict | None = None, timeout_s: float = 1800.0,
                judge=None) -> RunResult:
    """Run :mod:`specsim.runs._offline_worker` in the vLLM environment and record it.

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
        usage: dict = {}
        with CpuAccount(None) as acct:
            rec.provenance["worker_seconds"] = run_command(cmd, log_path=rec.path / "worker.log", env=env,
                                                           cwd=rec.path, timeout_s=timeout_s, usage=usage)
        acct.attribute(usage.get("cpu_seconds"))  # the worker's own CPU is the job's, not interference
        rec.provenance["cpu_accounting"] = acct.result
        result = json.loads((rec.path / "result.json").read_text())
        if judge is not None:
            judge(result, rec)
    return RunResult(run_id, rec.final_path, rec.status or "ok", rec.error, rec.provenance.get("summary", {}))
