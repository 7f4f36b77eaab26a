"""Where specsim's data files live.

The data shipped with the project is in ``<repo>/data`` (next to the ``specsim`` package in a
source checkout).  Set the ``SPECSIM_DATA`` environment variable to use another directory.
Nothing here reads outside the project at run time.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from .errors import DataError


def data_dir() -> Path:
    """Return the data directory (``$SPECSIM_DATA`` or ``<repo>/data``).

    Raises
    ------
    DataError
        If the directory does not exist.
    """
    return _resolve(os.environ.get("SPECSIM_DATA"))


@lru_cache(maxsize=8)
def _resolve(env: str | None) -> Path:
    path = Path(env) if env else Path(__file__).resolve().parent.parent / "data"
    if not path.is_dir():
        raise DataError(f"specsim data directory not found: {path} (set SPECSIM_DATA)")
    return path


def data_path(*parts: str) -> Path:
    """Path of a file under the data directory, e.g. ``data_path("hardware.csv")``."""
    return data_dir().joinpath(*parts)


def repo_dir() -> Path:
    """The project root of a source checkout (parent of the ``specsim`` package)."""
    return Path(__file__).resolve().parent.parent
