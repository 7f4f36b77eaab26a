"""Shipped latency calibrations: the default latency model and spec overhead per hardware.

``data/calibration/<hardware>.json`` holds the efficiencies (``specsim.latency.Efficiency``
fields), the per-step speculative overhead (``specsim.predict.SpecOverhead`` fields) and the
per-draft-pass overhead fitted for one (hardware, serving stack), with what they were fitted on.
Where no calibration file exists, predictions use datasheet priors and say so
(``Prediction.latency_calibrated`` is False).

File format (JSON)::

    {"hardware": "MI300X", "stack": "vLLM 0.23.1rc1 ROCm 7.2",
     "efficiency": {"bandwidth": .., "compute": .., "fixed_s": .., "per_layer_s": .., "allreduce_latency_s": ..},
     "spec_overhead": {"fixed_s": .., "per_token_s": ..},
     "draft_pass_overhead_s": ..,
     "fitted_on": "...", "held_out": "...", "source": "..."}
"""
from __future__ import annotations

import copy
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from .catalog import data_path
from .errors import DataError

__all__ = ["load_calibration", "default_latency", "default_overhead", "default_draft_pass_overhead",
           "calibration_rmse_rel", "write_calibration"]


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


@lru_cache(maxsize=None)
def _calibration_files() -> dict[str, Path]:
    d = data_path("calibration")
    if not d.is_dir():
        return {}
    out = {}
    for p in sorted(d.glob("*.json")):
        try:
            hw = json.loads(p.read_text())["hardware"]
        except (KeyError, json.JSONDecodeError) as e:
            raise DataError(f"{p}: not a calibration file ({e})") from e
        out[_key(hw)] = p
    return out


def load_calibration(hardware_name: str) -> dict[str, Any] | None:
    """The shipped calibration of ``hardware_name`` as a dict, or None if there is none.

    Raises
    ------
    DataError
        If a calibration file is malformed.
    """
    p = _calibration_files().get(_key(hardware_name))
    if p is None:
        return None
    # parsed once per file version (every predict() asks several times); callers may modify their copy
    return copy.deepcopy(_read_calibration(str(p), p.stat().st_mtime_ns))


@lru_cache(maxsize=None)
def _read_calibration(path: str, mtime_ns: int) -> dict[str, Any]:
    """Parse one calibration file (``mtime_ns`` keys the cache to the file's version)."""
    p = Path(path)
    d = json.loads(p.read_text())
    for k in ("efficiency", "spec_overhead"):
        if k not in d:
            raise DataError(f"{p}: missing key {k!r}")
    d["_path"] = str(p)
    return d


def _target_values(cal: dict, target_name: str | None, is_moe: bool | None = None) -> dict:
    """Per-target values of ``target_name``; else the medians of its kind (``per_kind``); else {}."""
    return _target_values_and_source(cal, target_name, is_moe)[0]


def _target_values_and_source(cal: dict, target_name: str | None, is_moe: bool | None = None) -> tuple[dict, str]:
    """As :func:`_target_values`, with a phrase saying where the values come from."""
    pt = cal.get("per_target") or {}
    if target_name:
        key = _key(str(target_name).split("/")[-1])
        for name, vals in pt.items():
            if _key(name) == key:
                return dict(vals), f"fitted values of {name}"
    if is_moe is not None:
        kind = "moe" if is_moe else "dense"
        vals = (cal.get("per_kind") or {}).get(kind) or {}
        if vals:
            return dict(vals), f"medians of the fitted {'mixture-of-experts' if is_moe else 'dense'} targets"
    return {}, "medians of all fitted targets"


def default_latency(hardware, target_name: str | None = None, *, is_moe: bool | None = None):
    """Default latency model of ``hardware``: the shipped calibration, else datasheet priors.

    Parameters
    ----------
    hardware : Hardware
    target_name : str, optional
        Target model; where the calibration has per-target values for it (``per_target``), they
        replace the hardware-wide defaults (which are medians over the fitted targets).
    is_moe : bool, optional
        Kind of a target WITHOUT per-target values: the medians over the fitted targets of the
        same kind (``per_kind``: fused-MoE kernels reach a smaller fraction of peak FLOP/s than
        dense GEMMs) replace the all-target medians.

    Returns
    -------
    specsim.latency.Roofline
        ``calibrated`` is True only when the file was fitted on this hardware (a file with
        ``"calibrated": false`` carries parameters transferred from another accelerator, and says
        so in ``describe()``).  The instance has ``calibration_file``, ``calibration_target`` and ``calibration_is_moe``
        attributes used by :func:`default_overhead` and :func:`default_draft_pass_overhead`.
    """
    from .latency import Efficiency, Roofline

    cal = load_calibration(hardware.name)
    if cal is None:
        rl = Roofline(hardware, Efficiency(), calibrated=False, source="datasheet priors (no calibration shipped)")
        rl.calibration_file = None
        rl.calibration_target = None
        rl.calibration_is_moe = None
        rl.calibration_scope = (
            f"no calibration shipped for {hardware.name}: datasheet priors for the latency (Efficiency defaults; "
            "every forward, draft passes included, pays its fixed_s) and NO per-step speculative overhead, so "
            "speedups are upper-end estimates; pass latency= / overhead= measured on your stack")
        return rl
    eff = dict(cal["efficiency"])
    tv, tv_source = _target_values_and_source(cal, target_name, is_moe)
    for k in ("fixed_s", "compute"):
        if k in tv:
            eff[k] = tv[k]
    note = f"{cal.get('fitted_on', '')} [{Path(cal['_path']).name}]; for {target_name or 'this target'}: {tv_source}"
    if cal.get("transferred_from"):
        note += f"; parameters TRANSFERRED from {cal['transferred_from']} (not fitted on this hardware)"
    rl = Roofline(hardware, Efficiency(**eff), calibrated=bool(cal.get("calibrated", True)),
                  smooth_p=cal.get("smooth_p"), source=note)
    rl.calibration_file = cal["_path"]
    rl.calibration_target = target_name
    rl.calibration_is_moe = is_moe
    rl.calibration_fitted_target = tv_source.startswith("fitted values")
    rl.calibration_scope = (
        f"latency and speculative overheads from {Path(cal['_path']).name} ({tv_source}"
        + (f", transferred from {cal['transferred_from']}" if cal.get("transferred_from") else "")
        + f"), fitted on {cal.get('stack', 'one serving stack')} at an assumed concurrency "
        f"{cal.get('concurrency_assumed', '?')}: absolute times at other concurrencies, on other stacks or "
        "for unfitted targets are extrapolations; pass latency= / overhead= measured on your stack")
    return rl


def default_overhead(latency):
    """Per-step speculative overhead to pair with ``latency`` (zero unless it came from a shipped
    calibration via :func:`default_latency`).

    Returns
    -------
    specsim.predict.SpecOverhead
    """
    from .predict import SpecOverhead

    ov = getattr(latency, "spec_overhead", None)
    if isinstance(ov, SpecOverhead):
        return ov
    hw = getattr(latency, "hardware", None)
    if hw is None or not getattr(latency, "calibration_file", None):
        return SpecOverhead()
    cal = load_calibration(hw.name)
    if not cal:
        return SpecOverhead()
    d = dict(cal["spec_overhead"])
    tv = _target_values(cal, getattr(latency, "calibration_target", None), getattr(latency, "calibration_is_moe", None))
    for k_cal, k in (("spec_fixed_s", "fixed_s"), ("spec_per_token_s", "per_token_s")):
        if k_cal in tv:
            d[k] = tv[k_cal]
    return SpecOverhead(**d)


def default_draft_pass_overhead(latency) -> float | None:
    """Calibrated seconds per draft forward pass for ``latency``'s hardware, or None."""
    hw = getattr(latency, "hardware", None)
    if hw is None or not getattr(latency, "calibration_file", None):
        return None
    cal = load_calibration(hw.name)
    if cal is None:
        return None
    tv = _target_values(cal, getattr(latency, "calibration_target", None), getattr(latency, "calibration_is_moe", None))
    return tv.get("draft_pass_overhead_s", cal.get("draft_pass_overhead_s"))


def calibration_rmse_rel(latency) -> float | None:
    """Relative RMS error of the calibration behind ``latency`` (None if uncalibrated).

    For a target the calibration fitted: the fit's RMS log error (``rmse_rel``).  For any other
    target (kind or all-target medians): the RMS log error of the leave-one-target-out predictions
    (``rmse_rel_unfitted_target``), which is what using another target's parameters costs.
    """
    hw = getattr(latency, "hardware", None)
    if hw is None or not getattr(latency, "calibration_file", None):
        return None
    cal = load_calibration(hw.name)
    if cal is None:
        return None
    if not getattr(latency, "calibration_fitted_target", True) and cal.get("rmse_rel_unfitted_target") is not None:
        return cal["rmse_rel_unfitted_target"]
    return cal.get("rmse_rel")


def write_calibration(path: Path, record: dict[str, Any]) -> Path:
    """Write a calibration record atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=2, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, 0o644)  # mkstemp creates 0600
    os.replace(tmp, path)
    _calibration_files.cache_clear()
    _read_calibration.cache_clear()
    return path
