"""Accelerator records from the datasheets (layer 2, model): HBM bytes, bandwidth bytes/s, peak FLOP/s
per dtype, link bandwidth, from ``specsim/data/hardware.csv``.

Details, derivations and sources: ``docs/modules/specsim.hardware.md``.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from specsim.catalog import data_path
from specsim.errors import DataError, SpecsimValueError

#: Precision strings accepted everywhere in specsim (docs/architecture.md).
PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "mxfp4", "int4", "fp32")

_PEAK_COLUMNS = {
    "bf16": "peak_bf16_flops_per_s",
    "fp16": "peak_fp16_flops_per_s",
    "fp8": "peak_fp8_flops_per_s",
    "fp4": "peak_fp4_flops_per_s",
    "fp32": "peak_fp32_flops_per_s",
}
_REQUIRED_COLUMNS = (
    "name", "kind", "vendor", "architecture", "aliases", "hbm_bytes", "mem_bandwidth_bytes_per_s",
    *_PEAK_COLUMNS.values(), "link_bandwidth_bytes_per_s", "source",
)


@dataclass(frozen=True)
class Hardware:
    """One accelerator (or CPU host) as the latency model sees it.

    Attributes
    ----------
    name : str
        Canonical name (``"MI300X"``, ``"H100 SXM"``, ``"cpu-2core-avx2"``...).
    vendor : str
        ``"AMD"``, ``"NVIDIA"``...
    hbm_bytes : int
        Device memory capacity in bytes (HBM for GPUs, system DRAM for CPU rows).
    mem_bandwidth_bytes_per_s : float
        Peak memory bandwidth, bytes/s (datasheet for GPUs, measured for the CPU host).
    peak_flops_per_s : dict[str, float]
        Dense peak FLOP/s per dtype; keys among ``bf16, fp16, fp8, fp4, fp32`` where they exist.
    link_bandwidth_bytes_per_s : float or None
        Per-GPU unidirectional all-to-all link bandwidth (xGMI / NVLink), bytes/s; ``None``
        where not applicable (single CPU host).
    source : str
        Provenance of the row.
    kind : str
        ``"gpu"`` or ``"cpu"``.
    architecture : str
        Chip architecture in words.
    aliases : tuple[str, ...]
        Other names :func:`load_hardware` accepts.

    Raises
    ------
    SpecsimValueError
        On construction: an empty ``name``, a ``kind`` other than ``"gpu"`` / ``"cpu"``, a capacity,
        bandwidth or peak FLOP/s that is not a finite number > 0, a ``peak_flops_per_s`` key outside
        ``bf16, fp16, fp8, fp4, fp32``, or no peak at all (a GPU given by its specs gets the same checks
        as a datasheet row).
    """

    name: str
    vendor: str
    hbm_bytes: int
    mem_bandwidth_bytes_per_s: float
    peak_flops_per_s: dict = field(hash=False)
    link_bandwidth_bytes_per_s: float | None
    source: str
    kind: str = "gpu"
    architecture: str = ""
    aliases: tuple = ()

    def __post_init__(self):
        def positive(field_name, v):
            try:
                ok = not isinstance(v, bool) and isinstance(v, (int, float, np.number)) and math.isfinite(v) and v > 0
            except OverflowError:  # an int beyond float range
                ok = False
            if not ok:
                raise SpecsimValueError(field_name, "must be a finite number > 0", v)

        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecsimValueError("name", "must be a non-empty string", self.name)
        if self.kind not in ("gpu", "cpu"):
            raise SpecsimValueError("kind", "must be 'gpu' or 'cpu'", self.kind, ("gpu", "cpu"))
        positive("hbm_bytes", self.hbm_bytes)
        positive("mem_bandwidth_bytes_per_s", self.mem_bandwidth_bytes_per_s)
        if self.link_bandwidth_bytes_per_s is not None:
            positive("link_bandwidth_bytes_per_s", self.link_bandwidth_bytes_per_s)
        if not isinstance(self.peak_flops_per_s, dict) or not self.peak_flops_per_s:
            raise SpecsimValueError("peak_flops_per_s", "must be a non-empty {dtype: FLOP/s} dict",
                                    self.peak_flops_per_s, tuple(_PEAK_COLUMNS))
        for k, v in self.peak_flops_per_s.items():
            if k not in _PEAK_COLUMNS:
                raise SpecsimValueError("peak_flops_per_s", "has a key that is not a peak dtype", k, tuple(_PEAK_COLUMNS))
            positive(f"peak_flops_per_s[{k!r}]", v)

    def _resolve(self, precision: str) -> str | None:
        peaks = self.peak_flops_per_s
        if precision in ("bf16", "fp16", "int4"):
            candidates = ["bf16"]
        elif precision == "fp8":  # without FP8 units: weight-only FP8 (vLLM's FP8 Marlin), bf16 math
            candidates = ["fp8"] if self.kind == "cpu" else ["fp8", "bf16"]
        elif precision == "mxfp4":
            # without FP4 units vLLM serves MXFP4 as W4A16 by default (bf16 activations):
            # MarlinMxFp4LinearKernel, the Marlin / OAI-Triton MoE backends on Hopper and Ampere, AITER's
            # Triton a16w4 MoE on gfx942 (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py); its W4A8
            # AITER_MXFP4_FP8 backend serves checkpoints that declare static FP8 input scales, not modelled
            candidates = ["fp4", "bf16"]
        else:  # fp32
            candidates = ["fp32"] if (self.kind == "cpu" or "fp32" in peaks) else ["bf16"]
        return next((c for c in candidates if c in peaks), None)

    def peak_dtype(self, precision: str) -> str:
        """The peak-FLOP/s key used for ``precision`` (mapping in the module docstring).

        Raises
        ------
        SpecsimValueError
            Unknown precision, or no peak for it on this hardware.
        """
        if precision not in PRECISIONS:
            raise SpecsimValueError("precision", "must be a known precision string", precision, PRECISIONS)
        key = self._resolve(precision)
        if key is None:
            raise SpecsimValueError(
                "precision",
                f"hardware {self.name!r} has no peak FLOP/s for this precision",
                precision,
                [p for p in PRECISIONS if self._resolve(p) is not None],
            )
        return key

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s used for a compute precision.

        Parameters
        ----------
        precision : str
            One of :data:`PRECISIONS`.

        Returns
        -------
        float
            FLOP/s.  ``fp32`` on a GPU without an fp32 entry is the bf16 peak / 2 (matrix fp32 at
            half the bf16 rate, an approximation stated in docs/architecture.md).

        Raises
        ------
        SpecsimValueError
            Unknown precision, or one this hardware has no peak for (e.g. ``bf16`` or ``fp8`` on
            the CPU host).  ``fp8`` on a GPU without FP8 units (A100) uses the bf16 peak: vLLM runs
            FP8 checkpoints there weight-only with its FP8 Marlin kernel
            (``vllm/model_executor/kernels/linear/scaled_mm/marlin.py``, "for GPUs that lack FP8
            hardware support").
        """
        key = self.peak_dtype(precision)
        value = float(self.peak_flops_per_s[key])
        if precision == "fp32" and key == "bf16":
            value /= 2.0
        return value

    @property
    def ridge_point_flops_per_byte(self) -> dict[str, float]:
        """Roofline ridge point (peak FLOP/s / memory bandwidth) per available peak dtype, FLOP/byte."""
        return {k: v / self.mem_bandwidth_bytes_per_s for k, v in self.peak_flops_per_s.items()}


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", str(name).strip().lower())


@lru_cache(maxsize=4)
def _table(path: str) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype={"name": str, "aliases": str}, keep_default_na=True)
    except (OSError, pd.errors.ParserError) as exc:  # pragma: no cover - depends on the file system
        raise DataError(f"cannot read hardware table {path}: {exc}") from exc
    missing = [c for c in _REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing columns {missing}")
    if df["source"].isna().any() or (df["source"].astype(str).str.strip() == "").any():
        raise DataError(f"{path}: every row needs a source")
    if df["name"].duplicated().any():
        raise DataError(f"{path}: duplicate names {df.loc[df['name'].duplicated(), 'name'].tolist()}")
    return df


def list_hardware() -> pd.DataFrame:
    """All hardware rows of ``specsim/data/hardware.csv`` as a DataFrame (one row per accelerator).

    Columns include ``name, kind, vendor, architecture, aliases, hbm_bytes,
    mem_bandwidth_bytes_per_s, peak_{bf16,fp16,fp8,fp4,fp32}_flops_per_s,
    link_bandwidth_bytes_per_s, source`` (units in the names; empty = not available).
    """
    return _table(str(data_path("hardware.csv"))).copy()


def _row_to_hardware(row: pd.Series) -> Hardware:
    peaks = {}
    for key, col in _PEAK_COLUMNS.items():
        v = row[col]
        if pd.notna(v) and float(v) > 0:
            peaks[key] = float(v)
    link = row["link_bandwidth_bytes_per_s"]
    aliases = tuple(a.strip() for a in str(row["aliases"]).split(";") if a.strip()) if pd.notna(row["aliases"]) else ()
    return Hardware(
        name=str(row["name"]),
        vendor=str(row["vendor"]),
        hbm_bytes=int(row["hbm_bytes"]),
        mem_bandwidth_bytes_per_s=float(row["mem_bandwidth_bytes_per_s"]),
        peak_flops_per_s=peaks,
        link_bandwidth_bytes_per_s=float(link) if pd.notna(link) else None,
        source=str(row["source"]),
        kind=str(row["kind"]),
        architecture=str(row["architecture"]),
        aliases=aliases,
    )


def load_hardware(name: str) -> Hardware:
    """Load one accelerator by name or alias (case-, space-, '-' and '_'-insensitive).

    Parameters
    ----------
    name : str
        e.g. ``"MI300X"``, ``"mi355x"``, ``"H100"``, ``"H100 SXM"``, ``"h200"``, ``"cpu-2core-avx2"``.
        A :class:`Hardware` instance is returned unchanged; a path ending in ``.json`` (or any
        ``os.PathLike``) is read with :func:`hardware_from_file` (a part the catalog does not ship).

    Returns
    -------
    Hardware

    Raises
    ------
    SpecsimValueError
        Unknown name; the message lists the canonical names.  A spec file's errors: see
        :func:`hardware_from_file`.
    """
    if isinstance(name, Hardware):
        return name
    if isinstance(name, os.PathLike) or (isinstance(name, str) and name.strip().lower().endswith(".json")):
        return hardware_from_file(name)
    index, names = _index(str(data_path("hardware.csv")))
    if not isinstance(name, str):  # None, a number: the message said "unknown hardware name" and showed no value
        raise SpecsimValueError("hardware", f"must be an accelerator name, a hardware spec file (.json) or a "
                                f"Hardware, not {type(name).__name__} {name!r}", None, names)
    hw = index.get(_norm(name))
    if hw is None and isinstance(name, str) and name in _FROM_FILES:  # read from a spec file in this process
        return _FROM_FILES[name]
    if hw is None:
        hint = ""
        if isinstance(name, str) and (os.sep in name or os.path.exists(os.path.expanduser(name))):
            hint = ": a hardware spec file must be a JSON file whose name ends in .json"
        raise SpecsimValueError("hardware", "unknown hardware name" + hint, name, names)
    return hw


#: spec files read in this process, by name (the last one read wins)
_FROM_FILES: dict[str, "Hardware"] = {}
#: keys of a hardware spec file (:func:`hardware_from_file`): the columns of specsim/data/hardware.csv
SPEC_FILE_KEYS = tuple(c for c in _REQUIRED_COLUMNS if c != "aliases") + ("compute_units", "clock_hz", "power_w", "notes")
_SPEC_FILE_REQUIRED = ("name", "vendor", "hbm_bytes", "mem_bandwidth_bytes_per_s", "source")


def hardware_from_file(path) -> Hardware:
    """An accelerator the catalog does not ship, from a JSON spec file.

    The file is one JSON object with the columns of ``specsim/data/hardware.csv`` (but ``aliases``,
    the catalog's other names for a part it ships) as keys, units in the names: ``name``,
    ``vendor``, ``hbm_bytes`` (bytes), ``mem_bandwidth_bytes_per_s``, at least one dense
    ``peak_{bf16,fp16,fp8,fp4,fp32}_flops_per_s`` (FLOP/s, no sparsity), ``source`` (the datasheet
    the numbers come from) and optionally ``link_bandwidth_bytes_per_s`` (per-GPU all-reduce link
    bandwidth, bytes/s; needed for TP > 1), ``kind`` (``"gpu"``, default, or ``"cpu"``),
    ``architecture``, ``compute_units``, ``clock_hz``, ``power_w``, ``notes``.  No calibration ships
    for such a part: predictions use datasheet priors and say so.

    Parameters
    ----------
    path : str or os.PathLike
        The JSON file.

    Returns
    -------
    Hardware

    Raises
    ------
    SpecsimValueError
        ``hardware`` when the file cannot be read, is not a JSON object, has unknown keys (the
        message lists :data:`SPEC_FILE_KEYS`), misses a required key or a peak, or names an
        accelerator the catalog ships (compared on letters and digits, as the calibration lookup
        compares names: use the shipped name); the key's name for a bad value (``name`` /
        ``vendor`` / ``source`` not a non-empty string, ``hbm_bytes`` not a whole number in
        (0, 2**63), a bandwidth or peak not a finite number > 0, ``kind`` not gpu / cpu, ...).

    Notes
    -----
    The part is remembered by name for this process (the last file read wins), so a later
    ``load_hardware(name)`` -- e.g. the fallback of a measured latency table -- finds it.
    """
    p = Path(path).expanduser()
    try:
        d = json.loads(p.read_text(encoding="utf-8-sig"))
    except OSError as e:
        raise SpecsimValueError("hardware", f"cannot read the hardware spec file ({e.strerror or e})", str(p)) from e
    except json.JSONDecodeError as e:
        raise SpecsimValueError("hardware", f"{p}: not valid JSON ({e})", str(p)) from e
    if not isinstance(d, dict):
        raise SpecsimValueError("hardware", f"{p}: must hold one JSON object of hardware.csv columns", type(d).__name__)
    unknown = sorted(set(d) - set(SPEC_FILE_KEYS))
    if unknown:
        # hardware.csv's aliases column is the catalog's other names for a shipped part; a spec file's part is
        # named by its file (and its name) only
        why = (": aliases are the catalog's other names for a part it ships; a spec file's part is given by the file "
               "(its name is the part's name): drop the key" if unknown == ["aliases"] else "")
        raise SpecsimValueError("hardware", f"{p}: unknown keys {unknown}{why}", unknown, SPEC_FILE_KEYS)
    missing = [k for k in _SPEC_FILE_REQUIRED if d.get(k) is None]
    if missing:
        raise SpecsimValueError("hardware", f"{p}: missing required keys {missing} (required: "
                                f"{', '.join(_SPEC_FILE_REQUIRED)})", sorted(map(str, d)), SPEC_FILE_KEYS)
    for k in ("name", "vendor", "source", "architecture", "notes"):
        if k in d and not (isinstance(d[k], str) and (d[k].strip() or k in ("architecture", "notes"))):
            raise SpecsimValueError(k, f"{p}: must be a non-empty string", d[k])
    peaks = {k: d[c] for k, c in _PEAK_COLUMNS.items() if d.get(c) is not None}
    if not peaks:
        raise SpecsimValueError("hardware", f"{p}: needs at least one dense peak FLOP/s", None,
                                tuple(_PEAK_COLUMNS.values()))
    hbm = d["hbm_bytes"]
    if isinstance(hbm, float) and hbm.is_integer():
        hbm = int(hbm)
    if not isinstance(hbm, int) or isinstance(hbm, bool) or not 0 < hbm < 2**63:
        raise SpecsimValueError("hbm_bytes", f"{p}: must be a whole number of bytes > 0 (below 2**63)", hbm)
    for k in ("compute_units", "clock_hz", "power_w"):  # kept in the catalog's columns, not used by the model
        v = d.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
            raise SpecsimValueError(k, f"{p}: must be a finite number > 0 (or left out)", v)
    _check_plausible(d, peaks, p)
    name = d["name"].strip()
    index, names = _index(str(data_path("hardware.csv")))
    # shipped names and aliases, compared as the calibration lookup compares them (letters and digits only)
    shipped = {_alnum(n): hw for n, hw in index.items()} | {_alnum(hw.name): hw for hw in index.values()}
    clash = shipped.get(_alnum(name))
    if clash is not None:
        raise SpecsimValueError("hardware", f"{p}: name {name!r} is the shipped accelerator {clash.name!r}; use "
                                f"--hardware {clash.name!r} for it, or give your part a name of its own", name, names)
    hw = Hardware(name=name, vendor=d["vendor"], hbm_bytes=hbm,
                  mem_bandwidth_bytes_per_s=d["mem_bandwidth_bytes_per_s"], peak_flops_per_s=peaks,
                  link_bandwidth_bytes_per_s=d.get("link_bandwidth_bytes_per_s"),
                  source=f"{d['source']} (spec file {p})", kind=d.get("kind", "gpu"),
                  architecture=d.get("architecture") or "")
    _FROM_FILES[name] = hw  # later look-ups by name (e.g. a measured latency table's fallback) find it
    return hw


#: the ranges a spec file's values must lie in, in their own units: 10x or more beyond the shipped parts on
#: each side (specsim/data/hardware.csv: 27 GB/s for the 2-core CPU to 8 TB/s for MI355X / B200; dense
#: peaks 0.3-2.5 PFLOP/s for the GPUs; 24-300 GiB of memory; 300-900 GB/s links), so that a value given in
#: the wrong unit (2.0 for 2 TB/s, 5300 for GB/s, a peak in TFLOP/s) is refused instead of predicting a
#: TPOT of years
PLAUSIBLE_RANGES = {
    "mem_bandwidth_bytes_per_s": (1e9, 3e14),
    "link_bandwidth_bytes_per_s": (1e9, 3e13),
    "peak_flops_per_s": (1e9, 1e17),
    "hbm_bytes": (1e9, 1e13),
}


def _check_plausible(d: dict, peaks: dict, p: Path) -> None:
    """Refuse a spec-file value outside :data:`PLAUSIBLE_RANGES` (a unit slip), naming its key."""
    values = [(k, d.get(k), k) for k in ("mem_bandwidth_bytes_per_s", "link_bandwidth_bytes_per_s", "hbm_bytes")]
    values += [(_PEAK_COLUMNS[k], v, "peak_flops_per_s") for k, v in peaks.items()]
    for key, v, rng in values:
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v <= 0:
            continue  # the type and sign checks (Hardware: "> 0") name it
        try:
            v = float(v)
        except OverflowError:  # an int beyond float's range
            v = math.inf
        lo, hi = PLAUSIBLE_RANGES[rng]
        unit = "bytes" if key == "hbm_bytes" else ("FLOP/s" if rng == "peak_flops_per_s" else "bytes/s")
        if not lo <= v <= hi:
            raise SpecsimValueError(key, f"{p}: {v:g} {unit} is outside [{lo:g}, {hi:g}] {unit}, 10x or more beyond "
                                    "the shipped parts on each side: a value in another unit (TB/s, GB/s, TFLOP/s, "
                                    f"GiB)? give {unit}", v)


def _alnum(name: str) -> str:
    """``name`` as ``specsim.calibration`` keys calibration files (letters and digits, lower case)."""
    return "".join(ch for ch in str(name).lower() if ch.isalnum())



@lru_cache(maxsize=4)
def _index(path: str) -> tuple[dict[str, "Hardware"], list[str]]:
    """Normalised name / alias -> Hardware (built once per data file; Hardware is immutable)."""
    df = list_hardware()
    index: dict[str, Hardware] = {}
    for _, row in df.iterrows():
        hw = _row_to_hardware(row)
        names = [row["name"], *(str(row["aliases"]).split(";") if pd.notna(row["aliases"]) else [])]
        for n in names:
            if str(n).strip():
                index.setdefault(_norm(n), hw)
    return index, df["name"].tolist()


def measure_copy_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 10) -> float:
    """Measure host memory bandwidth with a numpy copy (STREAM-Copy style), bytes/s.

    Copies a float64 array of ``nbytes`` into a preallocated one ``repeats`` times and returns
    ``2 * nbytes / best_time`` (read + write bytes, as STREAM counts Copy; write-allocate traffic
    is not counted).  Used to fill the CPU host row of ``specsim/data/hardware.csv``; takes about a second.

    Parameters
    ----------
    nbytes : int
        Array size in bytes (should exceed the last-level cache many times).
    repeats : int
        Number of timed copies; the fastest is used.

    Returns
    -------
    float
        Bytes/s.

    Raises
    ------
    SpecsimValueError
        ``nbytes`` below 1 MiB or ``repeats`` < 1.
    """
    if nbytes < 2**20:
        raise SpecsimValueError("nbytes", "must be at least 1 MiB", nbytes)
    if repeats < 1:
        raise SpecsimValueError("repeats", "must be >= 1", repeats)
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    np.copyto(b, a)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * a.nbytes / best
