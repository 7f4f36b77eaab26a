"""Exception types raised by specsim (layer 0, foundations).

Every error caused by bad input names the offending field and the rule it broke, so that a
user sees *what* to fix rather than a silently wrong number.
"""
from __future__ import annotations

from typing import Any, Iterable


class SpecsimError(Exception):
    """Base class of every exception specsim raises on purpose."""


class SpecsimValueError(SpecsimError, ValueError):
    """An input value broke a rule.

    Parameters
    ----------
    field : str
        Name of the offending field, as the caller spelled it (e.g. ``"rates[2]"``,
        ``"num_speculative_tokens"``).
    rule : str
        The rule that was broken, in words (e.g. ``"must lie in [0, 1]"``).
    value : Any, optional
        The offending value, shown in the message.
    allowed : Iterable, optional
        The allowed values, when they form a short list.
    """

    def __init__(self, field: str, rule: str, value: Any = None, allowed: Iterable[Any] | None = None):
        self.field = field
        self.rule = rule
        self.value = value
        self.allowed = list(allowed) if allowed is not None else None
        msg = f"{field}: {rule}"
        if value is not None:
            msg += f" (got {_plain(value)!r})"
        if self.allowed is not None:
            hint = _close_match(value, self.allowed)
            if hint is not None:
                msg += f"; did you mean {hint!r}?"
            msg += f"; allowed: {', '.join(map(str, self.allowed))}"
        super().__init__(msg)


def _close_match(value: Any, allowed: list) -> str | None:
    """The allowed string a mistyped string value surely meant, or None: the same letters in another
    case (``EAGLE3`` -> ``eagle3``), the same letters with two neighbours swapped (``eagel3``), or
    the one allowed name that extends the value by a word or a letter (``H100`` -> ``H100 SXM``,
    ``MI300`` -> ``MI300X``).  A value one letter or digit away from an allowed name is NOT matched:
    such pairs are often distinct products, formats or methods (``MI250X`` / ``MI350X``, ``mxfp8`` /
    ``mxfp4``, vLLM's ``eagle`` / ``eagle3``)."""
    if not isinstance(value, str) or not value:
        return None
    names = [a for a in allowed if isinstance(a, str)]
    if value in names:
        return None
    v = value.casefold()
    for rule in (lambda a: a == v, lambda a: _one_swap(a, v),
                 lambda a: len(v) >= 3 and a.startswith(v) and (a[len(v)] == " " or (len(a) == len(v) + 1
                                                                                    and a[-1].isalpha()))):
        hits = [a for a in names if rule(a.casefold())]
        if len(hits) == 1:
            return hits[0]
    return None


def _one_swap(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with two neighbouring characters swapped."""
    if len(a) != len(b):
        return False
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers, also inside lists, tuples and arrays, so messages read ``1.2`` and
    ``[2, 3]`` rather than ``np.float64(1.2)`` and ``[np.int64(2), np.int64(3)]``."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and getattr(value, "shape", None) is not None:  # numpy scalar or array
        try:
            return tolist()
        except (TypeError, ValueError):
            return value
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value
    return value


class DataError(SpecsimError):
    """A data file or a parsed vLLM output is malformed or inconsistent."""


class NotCollectedError(SpecsimError):
    """A metric that was asked for was not collected (for example, no spec-decode counters in a
    Prometheus scrape).  Never reported as zero."""


class RunError(SpecsimError):
    """A real vLLM run failed (server did not start, benchmark failed, interrupted)."""


class MissingExtraError(SpecsimError, ImportError):
    """An optional dependency is not installed: the message names the extra that installs it
    (``pip install 'specsim[EXTRA]'``).  Also an ``ImportError``."""

    def __init__(self, what: str, package: str, extra: str):
        self.package, self.extra = package, extra
        super().__init__(f"{what} needs the optional package {package}: pip install 'specsim[{extra}]'")


class FitNotConvergedWarning(UserWarning):
    """A fit stopped on its evaluation budget before meeting its tolerances: its result depends on
    the solver's path (and so on rounding), not on the data alone
    (``specsim.studies.reproduce.fit_stack``)."""
