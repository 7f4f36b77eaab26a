"""The shipped latency calibrations per hardware (layer 2, model): ``default_latency`` returns the
roofline carrying a frozen :class:`CalibrationRecord` (overheads, step-time error, scope).

Details, derivations and sources: ``docs/modules/specsim.calibration.md``.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from specsim._io import atomic_write_json
from specsim.catalog import data_path
from specsim.engine import STACK_TERMS
from specsim.errors import DataError, SpecsimValueError
from specsim.latency import Efficiency, Roofline

__all__ = ["CalibrationRecord", "load_calibration", "default_latency", "write_calibration", "stack_mismatch", "PLATFORMS",
           "SCHEMA_VERSION", "TERMS"]


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
    for k in ("hardware", "terms"):
        if k not in d:
            raise DataError(f"{p}: missing key {k!r}")
    d["_path"] = str(p)
    return d


#: version of the calibration file layout this module reads (``"schema_version"`` in every file)
SCHEMA_VERSION = 2

#: the documented physical terms a calibration file may contain under ``"terms"`` -- exactly
#: ``specsim.engine.STACK_TERMS``; each multiplies a physical count of the step (docs/model.md)
TERMS = STACK_TERMS


@dataclass(frozen=True)
class CalibrationRecord:
    """What a shipped calibration says about one (hardware, serving stack), carried by the latency
    model (``Roofline.calibration``) so that the overheads and the interval width read it from
    there instead of re-reading files.  It has NO per-target values (DESIGN section 10).

    Attributes
    ----------
    file : str
        Path of the calibration JSON it came from.
    hardware : str
    schema_version : int
    stack : dict
        The software stack it was fitted on (``vllm``, ``platform``, ``host_cpu``, ``source``).
    scope : str
        Sentence stating whose values are used, carried into every prediction's assumptions.
    terms : dict
        The :data:`TERMS` values.
    term_sources : dict
        For every term: fitted (on what), a stated prior, or transferred (from where, how).
    spec_overhead_fixed_s, spec_overhead_per_token_s, host_step_s, host_per_seq_s, spec_per_seq_layer_s : float
        The ``specsim.engine.SpecOverhead`` fields, seconds.
    draft_pass_overhead_s : None
        Always None: draft passes pay the stack's ``fixed_s + per_layer_s x draft layers``.
    rmse_rel : float or None
        RMS log error of the throughput ratio of targets the fit did NOT see (leave-one-target-out),
        the width of prediction intervals.
    transferred_from : str or None
        Hardware whose fit was transferred (None: fitted on this hardware).
    """

    file: str
    hardware: str
    schema_version: int
    stack: dict
    scope: str
    terms: dict
    term_sources: dict
    spec_overhead_fixed_s: float
    spec_overhead_per_token_s: float
    host_step_s: float
    host_per_seq_s: float
    spec_per_seq_layer_s: float
    rmse_rel: float | None
    transferred_from: str | None = None
    draft_pass_overhead_s: float | None = None


_NO_CALIBRATION_SCOPE = (
    "no calibration shipped for {hw}: datasheet priors for the latency (Efficiency defaults; "
    "every forward, draft passes included, pays its fixed_s) and NO per-step speculative or host overhead, so "
    "speedups are upper-end estimates; pass latency= / overhead= measured on your stack")


def _check_calibration(cal: dict) -> None:
    path = cal.get("_path", "calibration")
    if cal.get("schema_version") != SCHEMA_VERSION:
        raise DataError(f"{path}: schema_version {cal.get('schema_version')!r}, this specsim reads "
                        f"{SCHEMA_VERSION} (regenerate it with `specsim reproduce`)")
    terms = cal.get("terms")
    if not isinstance(terms, dict) or set(terms) != set(TERMS):
        raise DataError(f"{path}: 'terms' must hold exactly the documented physical terms {list(TERMS)}; "
                        f"got {sorted(terms) if isinstance(terms, dict) else terms!r}")


def _concurrency_text(value) -> str:
    """How a calibration's ``concurrency_inferred`` reads in its scope: a number inferred from the
    published rows, the file's own words (B200: concurrencies published per row), or nothing where
    the file records none (a transferred calibration: ``None``, which was printed as such)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f" at an inferred concurrency {value:g}"
    if isinstance(value, str) and value.strip():
        return f" at concurrencies {value.split(':', 1)[-1].strip()}"
    return ""


def default_latency(hardware, target_name: str | None = None, *, is_moe: bool | None = None) -> Roofline:
    """Default latency model of ``hardware``: the shipped calibration, else datasheet priors.

    Parameters
    ----------
    hardware : Hardware
    target_name, is_moe : optional
        Accepted for the record only: a calibration has no per-target values (the same terms for
        every target on this stack).

    Returns
    -------
    specsim.latency.Roofline
        ``calibrated`` is True only when the file was fitted on this hardware (a file with
        ``"calibrated": false`` carries terms transferred from another accelerator, and says so in
        ``describe()``).  ``calibration`` is the :class:`CalibrationRecord` (None with datasheet
        priors; ``scope`` then says so).

    Raises
    ------
    DataError
        A calibration file of another schema version or with other keys than :data:`TERMS`.
    """
    cal = load_calibration(hardware.name)
    if cal is None:
        return Roofline(hardware, Efficiency(), calibrated=False, source="datasheet priors (no calibration shipped)",
                        scope=_NO_CALIBRATION_SCOPE.format(hw=hardware.name))
    _check_calibration(cal)
    t = cal["terms"]
    eff = Efficiency(**{k: float(t[k]) for k in ("bandwidth", "compute", "fixed_s", "per_layer_s",
                                                  "allreduce_latency_s", "moe_pad_tokens", "dequant_s_per_weight")})
    name = Path(cal["_path"]).name
    stack = dict(cal.get("stack") or {})
    what = stack.get("vllm", "?") + (f", {stack['platform']}" if stack.get("platform") else "")
    note = f"{cal.get('fitted_on', '')} [{name}]; one set of stack terms for every target (no per-target values)"
    if cal.get("transferred_from"):
        note += f"; TRANSFERRED from {cal['transferred_from']} (not fitted on this hardware)"
    scope = (
        f"latency, host and speculative overheads from {name}"
        + (f", transferred from {cal['transferred_from']} ({cal.get('transfer_rule', 'see the file')})"
           if cal.get("transferred_from") else "")
        + f": stack terms fitted on {what}{_concurrency_text(cal.get('concurrency_inferred'))}, "
        "the same for every target; absolute times on other stacks are extrapolations; pass baseline= "
        "(a measured baseline) or latency= / overhead= measured on your stack")
    record = CalibrationRecord(
        file=cal["_path"], hardware=hardware.name, schema_version=int(cal["schema_version"]), stack=stack,
        scope=scope, terms={k: float(v) for k, v in t.items()}, term_sources=dict(cal.get("term_sources") or {}),
        spec_overhead_fixed_s=float(t["spec_fixed_s"]), spec_overhead_per_token_s=float(t["spec_per_token_s"]),
        host_step_s=float(t["host_step_s"]), host_per_seq_s=float(t["host_per_seq_s"]),
        spec_per_seq_layer_s=float(t["spec_per_seq_layer_s"]),
        rmse_rel=None if cal.get("rmse_rel") is None else float(cal["rmse_rel"]),
        transferred_from=cal.get("transferred_from"))
    return Roofline(hardware, eff, calibrated=bool(cal.get("calibrated", True)),
                    smooth_p=cal.get("smooth_p"), source=note, calibration=record, scope=scope)


#: vLLM platforms a declared stack may name (``vllm.platforms``; the first word of ``platform=``)
PLATFORMS = ("cuda", "rocm", "cpu", "xpu", "tpu")

_VLLM_RELEASE = "must be a vLLM version MAJOR.MINOR[.PATCH...] (e.g. 0.32.0)"
_PLATFORM_RELEASE = ("must be a vLLM platform, optionally followed by its version MAJOR.MINOR[.PATCH...] "
                     "(e.g. 'ROCm 7.2', 'CUDA 12.8', 'cuda')")


def _release(version: str, field: str, rule: str = _VLLM_RELEASE) -> tuple[int, int]:
    """``(major, minor)`` of a version string (``v0.23.1rc1.dev1120+g...`` -> ``(0, 23)``); ``rule``
    is the message of the refusal."""
    m = re.match(r"^\s*v?(\d+)\.(\d+)", str(version))
    if not m:
        raise SpecsimValueError(field, rule, version)
    return int(m.group(1)), int(m.group(2))


def _platform(text: str, field: str, strict: bool = True) -> tuple[str, tuple[int, int] | None]:
    """``(name, (major, minor) or None)`` of a platform string: its first word lower-cased and, when
    the second word is a version (starts with a digit, or ``v`` and a digit), that version's release:
    ``"ROCm 7.2"`` -> ``("rocm", (7, 2))``, ``"CUDA"`` -> ``("cuda", None)``.  With ``strict``
    (a declared platform) a first word outside :data:`PLATFORMS` or a version that is not
    ``MAJOR.MINOR[...]`` is refused; otherwise (a calibration's record) the version is None then."""
    words = str(text).strip().split()
    name = words[0].lower() if words else ""
    if strict and name not in PLATFORMS:
        raise SpecsimValueError(field, "must name a vLLM platform (first word)", text, PLATFORMS)
    rel = None
    if len(words) > 1 and re.match(r"^v?\d", words[1], flags=re.IGNORECASE):
        try:
            rel = _release(words[1].lower(), field, _PLATFORM_RELEASE)
        except SpecsimValueError:
            if strict:
                raise SpecsimValueError(field, _PLATFORM_RELEASE, text) from None
    return name, rel


def stack_mismatch(record: CalibrationRecord | None, *, vllm_version: str | None = None,
                   platform: str | None = None) -> str | None:
    """A warning when the user's declared vLLM version / platform differs from the calibration's
    stack (None when they match, nothing was declared, or there is no calibration).

    The vLLM version is compared on the release (``major.minor``, compared as numbers):
    ``0.23.1rc1.dev1120`` and ``0.23.0`` match, ``0.32.0`` does not.  The platform is compared on
    its name (the first word, case-insensitive: ``"ROCm 7.2"`` is ``rocm``) and, when both the
    declared platform and the calibration's carry a version after the name, on that version's
    release the same way: ``"ROCm 7.2.1"`` matches a calibration on ``ROCm 7.2``, ``"ROCm 6.4"``
    does not; ``"CUDA 12.8"`` matches a calibration recorded as plain ``CUDA``.

    Raises
    ------
    SpecsimValueError
        ``vllm_version`` is not a version (``MAJOR.MINOR[...]``, e.g. ``0.32.0``); ``platform``'s
        first word is not a vLLM platform (:data:`PLATFORMS`), or its second word starts like a
        version (a digit) but is not ``MAJOR.MINOR[...]`` (e.g. ``"ROCm 7"``).
    """
    rel_v = _release(vllm_version, "vllm_version") if vllm_version else None
    decl_p = _platform(platform, "platform") if platform else None
    if record is None:
        return None
    out = []
    cal_v = str(record.stack.get("vllm", ""))
    if rel_v is not None:
        try:
            cal_rel = _release(cal_v, "calibration stack vllm")
        except SpecsimValueError:
            cal_rel = None
        if rel_v != cal_rel:
            out.append(f"vLLM {vllm_version} (calibration: {cal_v})")
    if decl_p is not None:
        cal_p = str(record.stack.get("platform", "")).strip()
        cal_name, cal_rel_p = _platform(cal_p, "calibration stack platform", strict=False)
        name, rel_p = decl_p
        if name != cal_name:
            out.append(f"platform {platform} (calibration: {cal_p or 'not recorded'}; another platform: "
                       f"{name} vs {cal_name or 'not recorded'})")
        elif rel_p is not None and cal_rel_p is not None and rel_p != cal_rel_p:
            out.append(f"platform {platform} (calibration: {cal_p}; same platform {name}, another release: "
                       f"{rel_p[0]}.{rel_p[1]} vs {cal_rel_p[0]}.{cal_rel_p[1]})")
    if not out:
        return None
    return (f"the {record.hardware} calibration was fitted on another software stack than declared: "
            + "; ".join(out) + ": its host / overhead terms may not apply; anchor on a measured baseline (baseline=)")


def write_calibration(path: Path, record: dict[str, Any]) -> Path:
    """Write a calibration record atomically (temp file + rename)."""
    atomic_write_json(path, record, indent=2, sort_keys=True)
    _calibration_files.cache_clear()
    _read_calibration.cache_clear()
    return path
