"""The shipped latency calibrations per hardware (layer 2, model): ``default_latency`` returns the
roofline carrying a frozen :class:`CalibrationRecord` (overheads, step-time error, scope).

Details, derivations and sources: ``docs/modules/specsim.calibration.md``.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from specsim._io import atomic_write_json
from specsim.catalog import data_path
from specsim.errors import DataError
from specsim.latency import Efficiency, Roofline

__all__ = ["CalibrationRecord", "load_calibration", "default_latency", "write_calibration"]


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


@dataclass(frozen=True)
class CalibrationRecord:
    """What a shipped calibration says about one (hardware, target), carried by the latency model
    (``Roofline.calibration``) so that the draft cost, the speculative overhead and the interval width
    read it from there instead of re-reading files.

    Attributes
    ----------
    file : str
        Path of the calibration JSON it came from.
    hardware : str
    target : str or None
        Target the values were looked up for.
    is_moe : bool or None
        Kind used for the kind medians of an unfitted target.
    fitted_target : bool
        Whether the calibration was fitted on this target (else medians: a transfer).
    scope : str
        Sentence stating whose values are used, carried into every prediction's assumptions.
    spec_overhead_fixed_s, spec_overhead_per_token_s : float
        Per-step speculative overhead (``specsim.engine.SpecOverhead`` fields), seconds.
    draft_pass_overhead_s : float or None
        Fixed seconds per draft forward pass, where fitted.
    rmse_rel : float or None
        RMS log error of step times that applies to this target: the fit residual for a fitted
        target, the leave-one-target-out error (``rmse_rel_unfitted_target``) otherwise.
    """

    file: str
    hardware: str
    target: str | None
    is_moe: bool | None
    fitted_target: bool
    scope: str
    spec_overhead_fixed_s: float
    spec_overhead_per_token_s: float
    draft_pass_overhead_s: float | None
    rmse_rel: float | None


_NO_CALIBRATION_SCOPE = (
    "no calibration shipped for {hw}: datasheet priors for the latency (Efficiency defaults; "
    "every forward, draft passes included, pays its fixed_s) and NO per-step speculative overhead, so "
    "speedups are upper-end estimates; pass latency= / overhead= measured on your stack")


def default_latency(hardware, target_name: str | None = None, *, is_moe: bool | None = None) -> Roofline:
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
        so in ``describe()``).  ``calibration`` is the :class:`CalibrationRecord` (None with
        datasheet priors; ``scope`` then says so).
    """
    cal = load_calibration(hardware.name)
    if cal is None:
        return Roofline(hardware, Efficiency(), calibrated=False, source="datasheet priors (no calibration shipped)",
                        scope=_NO_CALIBRATION_SCOPE.format(hw=hardware.name))
    eff = dict(cal["efficiency"])
    tv, tv_source = _target_values_and_source(cal, target_name, is_moe)
    for k in ("fixed_s", "compute"):
        if k in tv:
            eff[k] = tv[k]
    note = f"{cal.get('fitted_on', '')} [{Path(cal['_path']).name}]; for {target_name or 'this target'}: {tv_source}"
    if cal.get("transferred_from"):
        note += f"; parameters TRANSFERRED from {cal['transferred_from']} (not fitted on this hardware)"
    fitted_target = tv_source.startswith("fitted values")
    spec = dict(cal["spec_overhead"])
    for k_cal, k in (("spec_fixed_s", "fixed_s"), ("spec_per_token_s", "per_token_s")):
        if k_cal in tv:
            spec[k] = tv[k_cal]
    rmse = cal.get("rmse_rel")
    if not fitted_target and cal.get("rmse_rel_unfitted_target") is not None:
        rmse = cal["rmse_rel_unfitted_target"]
    scope = (
        f"latency and speculative overheads from {Path(cal['_path']).name} ({tv_source}"
        + (f", transferred from {cal['transferred_from']}" if cal.get("transferred_from") else "")
        + f"), fitted on {cal.get('stack', 'one serving stack')} at an assumed concurrency "
        f"{cal.get('concurrency_assumed', '?')}: absolute times at other concurrencies, on other stacks or "
        "for unfitted targets are extrapolations; pass latency= / overhead= measured on your stack")
    record = CalibrationRecord(
        file=cal["_path"], hardware=hardware.name, target=target_name, is_moe=is_moe, fitted_target=fitted_target,
        scope=scope, spec_overhead_fixed_s=float(spec.get("fixed_s", 0.0)),
        spec_overhead_per_token_s=float(spec.get("per_token_s", 0.0)),
        draft_pass_overhead_s=tv.get("draft_pass_overhead_s", cal.get("draft_pass_overhead_s")),
        rmse_rel=None if rmse is None else float(rmse))
    return Roofline(hardware, Efficiency(**eff), calibrated=bool(cal.get("calibrated", True)),
                    smooth_p=cal.get("smooth_p"), source=note, calibration=record, scope=scope)


def write_calibration(path: Path, record: dict[str, Any]) -> Path:
    """Write a calibration record atomically (temp file + rename)."""
    atomic_write_json(path, record, indent=2, sort_keys=True)
    _calibration_files.cache_clear()
    _read_calibration.cache_clear()
    return path
