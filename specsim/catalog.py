"""Where specsim's files live (layer 0, foundations): package data ``specsim/data/`` through
:mod:`importlib.resources` (``$SPECSIM_DATA`` overrides) and a source checkout's project ``data/``.

Details: ``docs/modules/specsim.catalog.md``.
"""
from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path

from specsim.errors import DataError

__all__ = ["data_dir", "data_path", "project_dir", "project_data_path", "is_source_checkout"]


def data_dir() -> Path:
    """The package data directory: ``$SPECSIM_DATA`` or ``specsim/data`` of the installed package.

    Raises
    ------
    DataError
        If the directory does not exist.
    """
    return _resolve(os.environ.get("SPECSIM_DATA"))


@lru_cache(maxsize=8)
def _resolve(env: str | None) -> Path:
    # a file-system install (wheel or editable): the Traversable is a real directory
    path = Path(env) if env else Path(str(resources.files("specsim").joinpath("data")))
    if not path.is_dir():
        raise DataError(f"specsim package data not found: {path} (reinstall specsim, or set SPECSIM_DATA)")
    return path


def data_path(*parts: str) -> Path:
    """Path of a package-data file, e.g. ``data_path("hardware.csv")``, ``data_path("models", "Qwen3-8B.json")``."""
    return data_dir().joinpath(*parts)


@lru_cache(maxsize=1)
def _checkout() -> Path | None:
    root = Path(__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and (root / "data").is_dir() and 'name = "specsim"' in pyproject.read_text():
        return root
    return None


def is_source_checkout() -> bool:
    """True when this ``specsim`` is imported from a source checkout (``pyproject.toml`` and ``data/`` beside it)."""
    return _checkout() is not None


def project_dir() -> Path:
    """Root of the source checkout this ``specsim`` is imported from.

    Raises
    ------
    DataError
        In an installed copy (no checkout): give the directory explicitly (``runs_dir=``, ``--out``).
    """
    root = _checkout()
    if root is None:
        raise DataError("not a source checkout of specsim: recorded runs and study outputs live in a checkout's "
                        "data/; pass the directory explicitly (runs_dir= / out_dir= in Python; --runs-dir, or --out for "
                        "reproduce, on the command line)")
    return root


def project_data_path(*parts: str) -> Path:
    """Path under the checkout's ``data/`` (recorded runs, prompts, reproduction, validation); see :func:`project_dir`."""
    return project_dir().joinpath("data", *parts)
