"""Validators of user input shared by every layer (layer 0, foundations): each raises
:class:`~specsim.errors.SpecsimValueError` naming the field and the rule."""
from __future__ import annotations

import numpy as np

from specsim.errors import SpecsimValueError

#: the largest integer a field or grid axis may take: numpy's int64 (beyond it arrays wrap around or
#: become object arrays)
INT64_MAX = int(np.iinfo(np.int64).max)


def _int64_rule(minimum: int, plural: bool = False) -> str:
    return (f"must be {'integers' if plural else 'an integer'} in [{minimum}, 2**63 - 1] (larger values overflow "
            "numpy's int64)")


def int_field(name: str, value, minimum: int = 1) -> int:
    """``value`` as an int, refused unless it is an integer in [``minimum``, 2**63 - 1] (bool refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise SpecsimValueError(name, f"must be an integer >= {minimum}", value)
    if int(value) > INT64_MAX:
        raise SpecsimValueError(name, _int64_rule(minimum), int(value), [f"{minimum}..{INT64_MAX}"])
    return int(value)


def int_array(name: str, value, minimum: int = 1) -> np.ndarray:
    """``value`` (scalar or sequence) as an int64 array of integers in [``minimum``, 2**63 - 1]
    (integral floats accepted)."""
    for v in np.ravel(np.asarray(value, dtype=object)):
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and int(v) > INT64_MAX:
            raise SpecsimValueError(name, _int64_rule(minimum, plural=True), int(v), [f"{minimum}..{INT64_MAX}"])
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise SpecsimValueError(name, "must be integers", value)
    if np.any(arr < minimum):
        raise SpecsimValueError(name, f"must be >= {minimum}", value)
    return arr.astype(np.int64)


def int_values(name: str, value, minimum: int = 1) -> np.ndarray:
    """``value`` (a scalar, sequence or array) as an int64 array, each element under :func:`int_field`'s
    rules: a Python or numpy integer in [``minimum``, 2**63 - 1]; a bool, a float (an integral one such as
    ``2.0`` included) or anything else is refused, as :func:`int_field` refuses it for one value (unlike
    :func:`int_array`, which accepts integral floats).  An integer numpy array is checked without a
    Python loop.

    Parameters
    ----------
    name : str
        The field named in errors (e.g. ``"concurrency"``).
    value : int, sequence or ndarray
        The values (a scalar is one value).
    minimum : int, default 1
        The smallest value allowed.

    Returns
    -------
    ndarray of int64, shape (k,)
        The values, flattened, in order.

    Raises
    ------
    SpecsimValueError
        ``name``: the first element that is not such an integer (its position and value in the rule,
        the whole ``value`` shown).
    """
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        flat = value.reshape(-1)
        if flat.size and value.dtype.kind == "u" and int(flat.max()) > INT64_MAX:
            raise SpecsimValueError(name, _int64_rule(minimum, plural=True), int(flat.max()),
                                    [f"{minimum}..{INT64_MAX}"])
        arr = flat.astype(np.int64)
    else:
        items = np.ravel(np.asarray(value, dtype=object)).tolist() if not np.isscalar(value) else [value]
        for i, v in enumerate(items):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                shown = v.item() if isinstance(v, np.generic) else v
                raise SpecsimValueError(name, f"must be integers >= {minimum} (a bool, or a float even when "
                                        f"integral such as 2.0, is refused): element {i} is {shown!r}", value)
            if int(v) > INT64_MAX:
                raise SpecsimValueError(name, _int64_rule(minimum, plural=True), int(v), [f"{minimum}..{INT64_MAX}"])
        arr = np.asarray([int(v) for v in items], dtype=np.int64)
    low = np.flatnonzero(arr < minimum)
    if low.size:
        raise SpecsimValueError(name, f"must be integers >= {minimum}: element {int(low[0])} is {int(arr[low[0]])}",
                                value)
    return arr


#: why a grid axis refuses a repeated value (:func:`distinct_values`, and :func:`specsim.predict.sweep` for
#: categorical values that resolve to the same one)
REPEAT_RULE = ("every value of a grid axis gives its own rows, so a repeat would give duplicate rows; give each value "
               "once")


def distinct_values(name: str, values) -> None:
    """Refuse a grid axis (``values``: a sequence or array of integers) that lists a value more than
    once.

    Parameters
    ----------
    name : str
        The axis named in errors (e.g. ``"concurrency"``).
    values : sequence or ndarray of int
        The axis's values.

    Raises
    ------
    SpecsimValueError
        ``name``: the repeated value(s), each with how often it is listed (the value, or the list of
        them when several repeat, is the error's ``value``).
    """
    vals, counts = np.unique(np.asarray(values).reshape(-1), return_counts=True)
    rep = [(int(v), int(k)) for v, k in zip(vals.tolist(), counts.tolist()) if k > 1]
    if rep:
        said = ", ".join(f"{v} {'twice' if k == 2 else f'{k} times'}" for v, k in rep)
        raise SpecsimValueError(name, f"lists {said}: {REPEAT_RULE}", rep[0][0] if len(rep) == 1 else [v for v, _ in rep])
