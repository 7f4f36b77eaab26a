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

import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from .catalog import data_path
from .errors import DataError

__all__ = ["load_calibration", "default_latency", "default_overhead", "write_calibration"]


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
    d = json.loads(p.read_text())
    for k in ("efficiency", "spec_overhead"):
        if k not in d:
            raise DataError(f"{p}: missing key {k!r}")
    d["_path"] = str(p)
    return d


def default_latency(hardware):
    """Default latency model of ``hardware``: the shipped calibrated roofline, else datasheet priors.

    Parameters
    ----------
    hardware : Hardware

    Returns
    -------
    specsim.latency.Roofline
        ``calibrated`` is True only when a calibration file exists for this hardware.
    """
    from .latency import Efficiency, Roofline

    cal = load_calibration(hardware.name)
    if cal is None:
        return Roofline(hardware, Efficiency(), calibrated=False, source="datasheet priors (no calibration shipped)")
    eff = Efficiency(**cal["efficiency"])
    rl = Roofline(hardware, eff, calibrated=True, smooth_p=cal.get("smooth_p"),
                  source=f"{cal.get('fitted_on', '')} [{Path(cal['_path']).name}]")
    return rl


def default_overhead(latency):
    """Per-step speculative overhead to pair with ``latency`` (zero when uncalibrated).

    Returns
    -------
    specsim.predict.SpecOverhead
    """
    from .predict import SpecOverhead

    ov = getattr(latency, "spec_overhead", None)
    if isinstance(ov, SpecOverhead):
        return ov
    hw = getattr(latency, "hardware", None)
    if hw is None or not getattr(latency, "calibrated", False):
        return SpecOverhead()
    cal = load_calibration(hw.name)
    return SpecOverhead(**cal["spec_overhead"]) if cal else SpecOverhead()


def default_draft_pass_overhead(latency) -> float | None:
    """Calibrated seconds per draft forward pass for ``latency``'s hardware, or None."""
    hw = getattr(latency, "hardware", None)
    if hw is None or not getattr(latency, "calibrated", False):
        return None
    cal = load_calibration(hw.name)
    return None if cal is None else cal.get("draft_pass_overhead_s")


def write_calibration(path: Path, record: dict[str, Any]) -> Path:
    """Write a calibration record atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    _calibration_files.cache_clear()
    return path
