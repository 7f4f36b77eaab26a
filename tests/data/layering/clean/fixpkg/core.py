"""Layer 1: imports layer 0 absolutely, relatively and under TYPE_CHECKING."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import fixpkg.errors
from .errors import FixError

if TYPE_CHECKING:
    from fixpkg.errors import dumps


def load(name):
    if not name:
        raise FixError("empty")
    return importlib.import_module("json"), fixpkg.errors
