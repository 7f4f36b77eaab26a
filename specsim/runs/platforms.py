"""Which vLLM platform a run is on and the settings that go with it (layer 4, runs).

* **cpu** -- the feasibility notes' settings (:data:`specsim.runs.provenance.VLLM_ENV_DEFAULTS`: CPU
  platform, 4 GiB KV cache, offline hub, no usage statistics), OpenMP bound to every core of the
  machine (``VLLM_CPU_OMP_THREADS_BIND=0-<n-1>``).  ``OMP_NUM_THREADS`` is the driver's: set where the
  driver has it, else *removed* from the vLLM processes' environment (:func:`omp_setting`) -- a Ray
  worker has ``OMP_NUM_THREADS=1``, and vLLM 0.32 respects an external value (its CPU worker would
  compute on one thread), while without one it picks per process itself
  (``vllm/utils/torch_utils.py`` ``set_torch_threads_for_runtime``: the engine-core process drops to
  one thread, the model worker keeps the bound cores).  Setting it to the core count instead is not
  neutral either: the engine core then keeps 2 spinning threads.
* **rocm** -- what the seed's published runs used (vllm-amd-specdec-post tuning advice, as in
  :data:`specsim.runs.runbook.ROCM_SERVER_ARGS`): ``--attention-backend TRITON_ATTN`` unless the matrix
  names a backend; per-target AITER switches (``VLLM_ROCM_USE_AITER_FP4_ASM_GEMM=1`` for the MXFP4
  Kimi target) come with the target's matrix (``env``), not with the platform.
* **cuda** -- vLLM's own defaults: nothing is set but the no-usage-statistics switches.

:func:`detect_platform` decides; the decision and the settings are recorded in every run's
provenance (``platform``).
"""
from __future__ import annotations

import os
import shutil
from typing import Callable, Mapping

from specsim.errors import SpecsimValueError
from specsim.runs.provenance import VLLM_ENV_DEFAULTS, VllmInstall

__all__ = ["PLATFORMS", "ROCM_ATTENTION_BACKEND", "detect_platform", "platform_settings", "vllm_build",
           "omp_setting"]

PLATFORMS = ("cpu", "cuda", "rocm")
#: attention backend of the seed's ROCm runs (vllm-amd-specdec-post tuning advice)
ROCM_ATTENTION_BACKEND = "TRITON_ATTN"
_NO_TRACKING = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def detect_platform(requested: str = "auto", *, build: str | None = None, build_reason: str | None = None,
                    environ: Mapping[str, str] | None = None,
                    exists: Callable[[str], bool] = os.path.exists,
                    which: Callable[[str], str | None] = shutil.which) -> tuple[str, str]:
    """``(platform, reason)``: ``"cpu"``, ``"cuda"`` or ``"rocm"``.

    In order: an explicit ``requested`` platform (refused where the build cannot run it: ``cuda`` /
    ``rocm`` on a CPU build, ``cpu`` on a GPU build); ``VLLM_TARGET_DEVICE`` in ``environ`` (vLLM treats
    ``cpu`` as authoritative; ``cuda`` / ``rocm`` there are refused on a CPU build, as ``requested``
    is); a CPU build of vLLM (``build == "cpu"``, from
    :func:`specsim.runs.runbook.vllm_build`: vLLM then runs on the CPU on any host); a ROCm device
    (``/dev/kfd`` or ``rocm-smi``); an NVIDIA one (``nvidia-smi``); else the CPU.

    ``build_reason``: the build's description (:func:`vllm_build`), quoted in the refusal.

    Raises
    ------
    SpecsimValueError
        ``requested`` or ``VLLM_TARGET_DEVICE`` is not a known platform, or is one the installed vLLM
        build cannot run.
    """
    env = os.environ if environ is None else environ
    if requested not in ("auto", *PLATFORMS):
        raise SpecsimValueError("platform", "unknown platform", requested, ("auto", *PLATFORMS))

    def runnable(field: str, platform: str, allowed_extra: tuple[str, ...]) -> None:
        """Refuse ``platform`` where the installed build cannot run it (``field`` names who asked)."""
        runs = {"cpu": ("cpu",), "gpu": ("cuda", "rocm")}.get(build or "")
        if runs is not None and platform not in runs:
            what = build_reason or f"a {build.upper()} build of vLLM"
            raise SpecsimValueError(
                field, f"the installed vLLM cannot run on platform {platform!r}: {what}; a "
                f"{'CPU build runs on the CPU only' if build == 'cpu' else 'GPU build does not run vLLM on the CPU platform'}"
                f"; {platform} needs a {'GPU' if build == 'cpu' else 'CPU'} build of vLLM",
                platform, (*allowed_extra, *runs))

    if requested != "auto":
        runnable("platform", requested, ("auto",))
        return requested, f"asked for platform {requested!r}"
    forced = env.get("VLLM_TARGET_DEVICE", "").strip().lower()
    if forced:
        if forced not in PLATFORMS:
            raise SpecsimValueError("VLLM_TARGET_DEVICE", "not a platform specsim runs on", forced, PLATFORMS)
        # vLLM selects the CPU platform explicitly on VLLM_TARGET_DEVICE=cpu and otherwise detects it
        # (vllm/platforms/__init__.py, cpu_platform_plugin / resolve_current_platform_cls_qualname), so
        # cuda / rocm do not make a CPU build run on a GPU: refused as --platform is (vLLM ran on the CPU
        # while the record said cuda and the CPU settings were left out)
        if forced != "cpu":
            runnable("VLLM_TARGET_DEVICE", forced, ())
        return forced, f"VLLM_TARGET_DEVICE={forced} in the environment"
    if build == "cpu":
        return "cpu", "the vLLM environment is a CPU build (vllm-cpu)"
    if exists("/dev/kfd") or which("rocm-smi"):
        return "rocm", "ROCm device (/dev/kfd or rocm-smi) and a GPU build of vLLM"
    if which("nvidia-smi"):
        return "cuda", "NVIDIA device (nvidia-smi) and a GPU build of vLLM"
    return "cpu", "no GPU found"


def omp_setting(environ: Mapping[str, str] | None = None) -> tuple[dict[str, str], tuple[str, ...]]:
    """``(set, unset)`` for ``OMP_NUM_THREADS`` in the vLLM processes: the driver's value where the
    driver (``environ``, default ``os.environ``) has one, else removed (a Ray / Slurm worker's own
    value must not reach vLLM, so a run behaves as from a plain shell)."""
    env = os.environ if environ is None else environ
    v = env.get("OMP_NUM_THREADS")
    return ({"OMP_NUM_THREADS": v}, ()) if v else ({}, ("OMP_NUM_THREADS",))


def platform_settings(platform: str, *, cpus: int | None = None,
                      server_options: Mapping[str, object] | None = None) -> dict:
    """Settings of a platform: ``{"platform", "env", "server_args", "source"}``.

    Parameters
    ----------
    platform : {"cpu", "cuda", "rocm"}
    cpus : int, optional
        Cores the server may use (CPU platform; default ``os.cpu_count()``).
    server_options : mapping, optional
        Options the matrix already gives ``vllm serve`` (``attention-backend`` there wins on ROCm).

    Raises
    ------
    SpecsimValueError
        Unknown platform, or ``cpus`` < 1.
    """
    if platform not in PLATFORMS:
        raise SpecsimValueError("platform", "unknown platform", platform, PLATFORMS)
    opts = dict(server_options or {})
    if platform == "cpu":
        n = int(cpus if cpus is not None else (os.cpu_count() or 1))
        if n < 1:
            raise SpecsimValueError("cpus", "must be >= 1", n)
        env = {**VLLM_ENV_DEFAULTS, "VLLM_CPU_OMP_THREADS_BIND": f"0-{n - 1}" if n > 1 else "0"}
        return {"platform": "cpu", "env": env, "server_args": [], "cpus": n,
                "source": "specsim.runs.provenance.VLLM_ENV_DEFAULTS (CPU platform, 4 GiB KV cache, offline "
                          "hub, no usage statistics) and OpenMP bound to every core (vLLM's default 'auto' "
                          "left one core to the frontend: -35 % on this project's CPU host)"}
    if platform == "rocm":
        args = [] if "attention-backend" in opts else ["--attention-backend", ROCM_ATTENTION_BACKEND]
        return {"platform": "rocm", "env": dict(_NO_TRACKING), "server_args": args,
                "source": "seed runs (vllm-amd-specdec-post tuning advice): TRITON_ATTN attention backend; "
                          "AITER switches per target in the matrix env"}
    return {"platform": "cuda", "env": dict(_NO_TRACKING), "server_args": [], "source": "vLLM's defaults"}


def vllm_build(install: VllmInstall | None = None) -> tuple[str | None, str]:
    """Which vLLM build an environment holds: ``("cpu" | "gpu" | None, reason)``.

    Reads the installed distributions of the environment's interpreter (no vLLM or torch import):
    the ``vllm-cpu`` distribution, a ``+cpu`` local version of ``vllm`` (the name-only dist-info
    ``scripts/setup_vllm_cpu.sh`` adds beside vllm-cpu) or of ``torch`` mark a CPU build -- vLLM
    itself selects its CPU platform from a version containing "cpu"
    (``vllm/platforms/__init__.py`` ``cpu_platform_plugin``).  ``None``: no environment or no vLLM in it.
    """
    install = install or VllmInstall.default()
    if not install.exists():
        return None, f"no vLLM environment at {install.venv}"
    v = install.versions()
    if "vllm-cpu" in v or "cpu" in v.get("vllm", "") or "cpu" in v.get("torch", ""):
        shown = ", ".join(f"{k} {x}" for k, x in v.items() if k in ("vllm-cpu", "vllm", "torch"))
        return "cpu", f"the vLLM environment {install.venv} is a CPU build ({shown})"
    if "vllm" not in v:
        return None, f"no vllm distribution in {install.venv}"
    return "gpu", f"vllm {v['vllm']} (torch {v.get('torch', '?')}) in {install.venv}"
