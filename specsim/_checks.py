"""Validators of user input shared by every layer (layer 0, foundations): each raises
:class:`~specsim.errors.SpecsimValueError` naming the field and the rule."""
from __future__ import annotations

import numpy as np

from specsim.errors import SpecsimValueError


def int_field(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise SpecsimValueError(name, f"must be an integer >= {minimum}", value)
    return int(value)


def int_array(name: str, value, minimum: int = 1) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise SpecsimValueError(name, "must be integers", value)
    if np.any(arr < minimum):
        raise SpecsimValueError(name, f"must be >= {minimum}", value)
    return arr.astype(np.int64)
